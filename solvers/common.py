"""Index sets shared by the MILP and CP-SAT builders, taken from the Problem's own keys."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from fleetplan.placement.plan import Plan, Status, commitments, evaluate, site_capacity, starts_per_window
from fleetplan.placement.problem import Problem, ReplicaOption, ShareOption


@dataclass(frozen=True)
class Index:
    """Index sets of the placement model.

    Attributes:
        W: window indices.
        options: dedicated replica options.
        bins: candidate shared GPUs as (pool id, b) pairs, b = 0..B_p-1.
        share: {(model, pool)} -> ShareOption.
        residents: {(pool, b)}: models that may reside on that candidate GPU.
        sites_of: {model: sites where it has any capacity option}; q[m, s, w] exists only when len > 1.
        ub: {option key: upper bound on replicas per window}.
        bin_ub: {bin: upper bound of its y and a variables} (1, or B_p for an aggregate bin).
    """

    W: range
    options: tuple[ReplicaOption, ...]
    bins: tuple[tuple[str, int], ...]
    share: dict[tuple[str, str], ShareOption]
    residents: dict[tuple[str, int], tuple[str, ...]]
    sites_of: dict[str, tuple[str, ...]]
    ub: dict[tuple[str, str, int, int], int]
    bin_ub: dict[tuple[str, int], int]


def shared_candidates(problem: Problem) -> dict[str, list[ShareOption]]:
    """{pool id: every share option of the pool} (``Problem.share_options`` grouped by pool, in their order): the
    candidate residents of the pool's candidate shared GPUs in the exact models (MILP, CP-SAT, their relaxations
    and the per-window bound). No model is barred: any model with a share option may put part of its load on a
    shared GPU (a remainder beside its dedicated replicas, or its off-peak windows), as
    :func:`fleetplan.placement.validate.validate` allows, so an OPTIMAL status is optimal for the problem as
    stated. (The greedy baseline packs whole models and keeps its own peak rule,
    :func:`fleetplan.solvers.baselines.whole_model_share_options`.)"""
    out: dict[str, list[ShareOption]] = {}
    for s in problem.share_options:
        out.setdefault(s.pool, []).append(s)
    return out


def shared_bins_per_pool(problem: Problem, pool: str, n_candidates: int) -> int:
    """Candidate shared GPUs of a pool: at most max_shared_gpus_per_pool, the pool's GPUs and its candidates."""
    return min(problem.max_shared_gpus_per_pool, problem.pool_by_id[pool].gpus, n_candidates)


def gpus_in_use(problem: Problem, plan: Plan, models: set[str] | None = None) -> dict[str, list[int]]:
    """{pool id: GPUs of ``plan`` in use in each window} (W entries each), by ``models`` (their dedicated replicas
    and the shared GPUs any of them resides on; None: all of the plan). The pools' own reserved GPUs are not
    counted (add ``Pool.reserved_gpus`` for the room left)."""
    W = problem.n_windows
    opts = problem.option_by_key
    use = {p.id: [0] * W for p in problem.pools}
    for key, counts in plan.replicas.items():
        if models is None or key[0] in models:
            g = opts[key].gpus
            use[key[1]] = [u + c * g for u, c in zip(use[key[1]], counts, strict=True)]
    for s in plan.shared:
        if models is None or models & set(s.models):
            use[s.pool] = [u + 1 for u in use[s.pool]]
    return use


def build_index(problem: Problem, *, aggregate: bool = False) -> Index:
    """Index sets of ``problem``. With ``aggregate=True`` each pool's identical candidate shared GPUs collapse
    into one aggregate bin whose variables range over 0..B_p (``bin_ub``): the same LP relaxation without the
    symmetric copies, which simplex solves far faster (used for the LP lower bound)."""
    pools = problem.pool_by_id
    cands = shared_candidates(problem)
    bins = []
    residents = {}
    share = {}
    bin_ub = {}
    for pid, lst in cands.items():
        n_bins = shared_bins_per_pool(problem, pid, len(lst))
        for b in range(1 if aggregate else n_bins):
            bins.append((pid, b))
            residents[(pid, b)] = tuple(s.model for s in lst)
            bin_ub[(pid, b)] = n_bins if aggregate else 1
        for s in lst:
            share[(s.model, pid)] = s
    sites_of: dict[str, set[str]] = {m.name: set() for m in problem.models}
    for o in problem.options:
        sites_of[o.model].add(pools[o.pool].site)
    for (m, pid) in share:
        sites_of[m].add(pools[pid].site)
    for o in problem.pd_options:  # disaggregated demand is served at the decode site
        if o.role == "decode":
            sites_of[o.model].add(pools[o.pool].site)
    ub = {}
    models = problem.model_by_name
    for o in problem.options:
        u = pools[o.pool].gpus // o.gpus
        mx = models[o.model].max_replicas
        if mx is not None:
            u = min(u, mx)
        ub[o.key] = u
    return Index(W=range(problem.n_windows), options=tuple(o for o in problem.options if ub[o.key] > 0),
                 bins=tuple(bins), share=share, residents=residents,
                 sites_of={m: tuple(sorted(s)) for m, s in sites_of.items()}, ub=ub, bin_ub=bin_ub)


def by_model_and_site(problem: Problem, idx: Index) -> tuple[dict, dict]:
    """({(model, site): its dedicated options}, {(model, site): candidate shared GPUs (pool, b) it may use})."""
    pools = problem.pool_by_id
    opts_of: dict[tuple[str, str], list] = {}
    for o in idx.options:
        opts_of.setdefault((o.model, pools[o.pool].site), []).append(o)
    bins_of: dict[tuple[str, str], list] = {}
    for (p, b), residents in idx.residents.items():
        for m in residents:
            bins_of.setdefault((m, pools[p].site), []).append((p, b))
    return opts_of, bins_of


@dataclass(frozen=True)
class SpreadRow:
    """The terms of constraint (18) for one model and level (:mod:`fleetplan.solvers.milp`): ``places`` {site or
    pool id: [(req/s one unit of the variable gives, 'n' | 'a', key)]}, 'n' a dedicated option's replicas in the
    window (key the option key; (1-μ)·cap_o req/s each), 'a' the model's residency on a candidate shared GPU (key
    (model, pool, b); (1-μ)·cs[m,p], its capacity there alone). The row in window w: Σ_{terms at a place} <=
    share × Σ_{all terms}."""

    model: str
    level: str
    share: float
    places: dict[str, list[tuple[float, str, tuple]]]


def spread_rows(problem: Problem, idx: Index) -> list[SpreadRow]:
    """(18)'s rows, one per model with a spread bound below 1 and level ('site', 'pool'), over ``idx``."""
    pools = problem.pool_by_id
    mu = 1 - problem.margin
    out = []
    for m in problem.models:
        for level, share in m.spread_bounds.items():
            places: dict[str, list[tuple[float, str, tuple]]] = {}
            for o in idx.options:
                if o.model == m.name:
                    place = pools[o.pool].site if level == "site" else o.pool
                    places.setdefault(place, []).append((mu * o.capacity_req_per_s, "n", o.key))
            for (p, b), residents in idx.residents.items():
                if m.name in residents:
                    place = pools[p].site if level == "site" else p
                    places.setdefault(place, []).append((mu * idx.share[(m.name, p)].capacity_req_per_s, "a",
                                                         (m.name, p, b)))
            out.append(SpreadRow(m.name, level, share, places))
    return out


def warm_values(problem: Problem, idx: Index, plan: Plan) -> dict[str, dict]:
    """Variable values of ``plan`` in the index space: n, st, y, a, f, q (for warm starts and hints).

    Shared GPUs of the plan are mapped onto the candidate bins of their pool in order; a plan whose shared GPUs
    do not fit the candidates (more GPUs, or a resident not among the candidates) returns {}.
    """
    W = idx.W
    n = {}
    for o in idx.options:
        counts = plan.replicas.get(o.key, (0,) * len(W))
        n[o.key] = list(counts)
    for key in plan.replicas:
        if key not in n and any(plan.replicas[key]):
            return {}
    st = {k: starts_per_window(c) for k, c in n.items()}
    y = {b: 0 for b in idx.bins}
    a = {}
    f = {}
    used: dict[str, int] = {}
    for g in plan.shared:
        b = used.get(g.pool, 0)
        if (g.pool, b) not in y:
            return {}
        used[g.pool] = b + 1
        y[(g.pool, b)] = 1
        for m in g.models:
            if m not in idx.residents[(g.pool, b)]:
                return {}
            a[(m, g.pool, b)] = 1
            f[(m, g.pool, b)] = list(g.served_req_per_s.get(m, (0.0,) * len(W)))
    # q: the origin-first routing of evaluate()
    caps = site_capacity(problem, plan)
    q = {}
    models = problem.model_by_name
    for m, sites in idx.sites_of.items():
        if len(sites) <= 1:
            continue
        spec = models[m]
        for w in W:
            left = spec.demand_req_per_s[w]
            order = [s for _, _, s in sorted((s != spec.origin_site, problem.egress_rate(spec.origin_site, s), s)
                                             for s in sites)]
            for s in order:
                take = min(left, caps[m][w].get(s, 0.0))
                q[(m, s, w)] = max(0.0, take)
                left -= max(0.0, take)
    return {"n": n, "st": st, "y": y, "a": a, "f": f, "q": q}


#: Nodes the covering search of :func:`cover_cost_floor` may visit before it settles for the LP value.
COVER_MAX_NODES = 20_000


def cover_cost_floor(options: list[tuple[float, float, int]], demand: float, floor: int) -> float:
    """Least cost of whole replicas covering ``demand`` with at least ``floor`` replicas, ignoring inventory:
    min Σ c·n s.t. Σ cap·n >= demand, Σ n >= floor, 0 <= n <= ub, n integer, for ``options`` [(c USD per
    replica, cap usable req/s per replica, ub)]. Exact by depth-first search over the options in order of cost
    per req/s, pruned by the LP value of the rest (:func:`cheapest_cover`); after COVER_MAX_NODES nodes it returns
    the LP value of the whole problem (still a lower bound). Demand within 1e-6 relative counts as covered (a
    looser covering, so the result stays a lower bound under the solvers' feasibility tolerance). math.inf if
    nothing covers.

    Used as a valid inequality (cost of a model's dedicated replicas in a window >= this) for models that
    cannot use a shared GPU: a relaxation's LP then loses none of the whole-replica rounding of those models.
    """
    best, _counts, lp, complete = _cover_search(options, demand, floor, None, 1e-6)
    return best if complete else lp


def cheapest_cover(options: list[tuple[float, float, int]], demand: float, floor: int,
                   ceiling: int | None = None) -> tuple[float, list[int]] | None:
    """The cheapest whole-replica covering found (a plan, not a bound): (cost USD, replicas per option in the
    order of ``options``) with Σ cap·n >= demand (within 1e-9 relative), floor <= Σ n <= ``ceiling`` (None: no
    ceiling), n <= ub; the same search as :func:`cover_cost_floor` (exact unless it visits COVER_MAX_NODES nodes,
    then the best covering found so far). None when no covering exists or none was found."""
    best, counts, _lp, _complete = _cover_search(options, demand, floor, ceiling, 1e-9)
    return None if counts is None else (best, counts)


def _cover_search(options: list[tuple[float, float, int]], demand: float, floor: int, ceiling: int | None,
                  rel_tol: float) -> tuple[float, list[int] | None, float, bool]:
    """Depth-first search of :func:`cheapest_cover`: (best cost or math.inf, its replicas per option in the order
    of ``options`` or None, the LP value of the whole problem, True if the search was complete)."""
    live = [i for i, o in enumerate(options) if o[1] > 0 and o[2] > 0]
    if live:
        # An option j is dropped when another i costs no more with no less capacity and room for every replica
        # of a minimal covering (one without a replica to spare: at most max(floor, ceil(demand / least
        # capacity) + 1) replicas; some optimal covering is minimal, costs being >= 0): swapping j's replicas
        # for i's then keeps it a covering at no more cost, so the optimum stays (exactness kept).
        most = max(floor, math.ceil(demand / min(options[i][1] for i in live)) + 1)
        live = [j for j in live
                if not any(i != j and options[i][0] <= options[j][0] and options[i][1] >= options[j][1]
                           and options[i][2] >= most and (options[i][:2] != options[j][:2] or i < j)
                           for i in live)]
    order = sorted(live, key=lambda i: (options[i][0] / options[i][1], options[i][0], i))
    opts = [options[i] for i in order]
    if not opts:
        ok = demand <= 0 and floor <= 0
        return (0.0 if ok else math.inf), ([0] * len(options) if ok else None), 0.0, True
    tol = rel_tol * max(1.0, demand)
    n_opt = len(opts)
    top = math.inf if ceiling is None else ceiling
    unit_rest = [min(c / cap for c, cap, _ in opts[i:]) for i in range(n_opt)]
    c_rest = [min(c for c, _, _ in opts[i:]) for i in range(n_opt)]
    lp = max(demand * unit_rest[0], floor * c_rest[0])
    best = math.inf
    best_k: list[int] | None = None
    ks = [0] * n_opt
    nodes = 0

    def search(i: int, need: float, count: int, cost: float) -> None:
        nonlocal best, best_k, nodes
        nodes += 1
        if need <= tol and count >= floor:
            if cost < best:
                best, best_k = cost, list(ks)
            return
        if i == n_opt or nodes > COVER_MAX_NODES:
            return
        # the rest costs at least its LP value, and at least one more replica while demand or floor is left
        lb = cost + max(max(0.0, need) * unit_rest[i], max(1 if need > tol else 0, floor - count) * c_rest[i])
        if lb >= best - 1e-12:
            return
        c, cap, ub = opts[i]
        k_max = min(ub, max(math.ceil(max(0.0, need - tol) / cap), floor - count, 0), top - count)
        for k in range(int(k_max), -1, -1):
            ks[i] = k
            search(i + 1, need - k * cap, count + k, cost + k * c)
        ks[i] = 0

    search(0, demand, 0, 0.0)
    counts = None
    if best_k is not None:
        counts = [0] * len(options)
        for j, i in enumerate(order):
            counts[i] = best_k[j]
    return best, counts, lp, nodes <= COVER_MAX_NODES


#: Float tolerance (USD, relative to the objective) below which a bound above the objective is rounding noise.
BOUND_REL_TOL = 1e-7
#: Bounds at or below this many USD prove nothing about a plan that costs more (every cost is >= 0):
#: :func:`finish_plan` reports "no bound yet" instead of a "proven" 100% gap.
TRIVIAL_BOUND_USD = 1e-9
#: A solve that used this share of its time limit or more is reported as stopped by the limit.
TIME_LIMIT_SHARE = 0.97
#: The words a plan's message starts its safety-stop note with (:meth:`SafetyStop.note`): a plan whose message holds
#: them was cut by the wall clock and may differ on another machine (the benchmarks and docs/figures.py look for it).
SAFETY_STOP_NOTE = "the wall-clock safety stop"
#: Seconds before its deadline at which the safety stop counts as reached (a stage is not started with less left,
#: and one that ends within it may have been cut).
SAFETY_SLACK_S = 0.1


@dataclass
class SafetyStop:
    """The wall-clock safety stop of a solve whose stages are bounded by deterministic effort budgets
    (:func:`fleetplan.solvers.solve.solve`): ``deadline`` (a time.perf_counter() value) ends the user's
    ``time_limit_s``; ``cuts`` lists, in order, what it cut (a stage not started, a search stopped before its
    budget). With no cut the plan does not depend on the machine's speed; with one it may, and :meth:`note` says
    so in the plan's message (only its bound and gap, when every cut was of a bound: ``plan_cut`` is False)."""

    deadline: float
    time_limit_s: float
    cuts: list[str] = field(default_factory=list)
    plan_cut: bool = False

    def left_s(self) -> float:
        """Seconds left before the deadline (negative once past it)."""
        return self.deadline - time.perf_counter()

    def passed(self) -> bool:
        """True once less than SAFETY_SLACK_S is left."""
        return self.left_s() <= SAFETY_SLACK_S

    def cut(self, what: str, *, bound_only: bool = False) -> None:
        """Record that the safety stop cut ``what`` (e.g. "the LP bound"); ``bound_only``: a stage that gives only
        a bound (the plan's replicas do not depend on it)."""
        self.cuts.append(what)
        self.plan_cut = self.plan_cut or not bound_only

    def note(self) -> str | None:
        """The sentence for the plan's message, or None when nothing was cut."""
        if not self.cuts:
            return None
        what = ("this plan may differ on another machine" if self.plan_cut else
                "the plan does not depend on it, but its bound and gap may differ on another machine")
        return f"{SAFETY_STOP_NOTE} at {self.time_limit_s:.3g} s cut " + "; ".join(self.cuts) + ": " + what


def relative_gap(objective_usd: float, bound_usd: float | None) -> float | None:
    """(objective - bound) / objective, or None without a bound; 0 for a zero-cost plan with a zero bound.
    Never clamped: a negative value means the bound is wrong (see :func:`finish_plan`)."""
    if bound_usd is None:
        return None
    if objective_usd == 0:
        return 0.0 if abs(bound_usd) <= 1e-9 else -math.inf
    return (objective_usd - bound_usd) / abs(objective_usd)


def gap_text(gap: float) -> str:
    """A relative gap as a percentage with two decimals for reports: a gap within :data:`BOUND_REL_TOL` below 0
    (float noise between a plan's cost and an equal bound) reads "0.00%", never "-0.00%"; a gap further below 0
    (a bound above the plan: a defect, see :func:`finish_plan`) keeps its sign, with digits enough to show it."""
    if -BOUND_REL_TOL <= gap < 0:
        gap = 0.0
    text = f"{gap:.2%}"
    return f"{gap * 100:.2g}%" if text in ("-0.00%", "0.00%") and gap < 0 else text


def finish_plan(problem: Problem, *, backend: str, gap: float, bounds: dict[str, float | None],
                incumbent: Plan | None = None, start: Plan | None = None, time_limit_reached: bool = False,
                time_limit_s: float | None = None, solve_time_s: float = 0.0, notes: tuple[str, ...] = (),
                backend_ran: bool = True) -> Plan:
    """The one place where a status, bound, gap and message are decided, for every backend and the decomposition.

    ``incumbent``: the backend's plan (replicas and shared GPUs; None if it found none). ``start``: the warm
    start (a valid plan) or None. The returned plan is the cheaper of the two (costs from :func:`evaluate`); the
    bound is the largest of ``bounds`` ({source: lower bound USD or None}; every entry must be a proven lower
    bound on this problem's optimum). Status: OPTIMAL only when (objective - bound) <= gap × objective; FEASIBLE
    with the true gap when a bound exists; HEURISTIC without one; NO_SOLUTION without any plan. Nothing is
    clamped: a bound of $0 (TRIVIAL_BOUND_USD) on a plan that costs more is no bound ("no bound yet", HEURISTIC);
    a bound above the objective (beyond BOUND_REL_TOL) is reported in the message as a defect and the
    status is FEASIBLE (tests assert bound <= objective, so such a defect fails them). ``backend_ran=False``: no
    exact model was solved (the start is the answer by design, not for lack of a backend plan). A plan that leaves
    demand unserved (``unserved_req_per_s``, best effort) keeps it, and its message starts with
    :func:`best_effort_summary`. The returned plan states the commitment of every committed pool (its own, else
    its peak use: :func:`fleetplan.placement.plan.commitments`).
    """
    cands = []
    if incumbent is not None:
        cands.append(("backend", incumbent, evaluate(problem, incumbent).total_usd))
    if start is not None:
        cands.append(("start", start, evaluate(problem, start).total_usd))
    named = {k: v for k, v in bounds.items() if v is not None and math.isfinite(v)}
    bound_src, bound = (max(named.items(), key=lambda kv: kv[1]) if named else (None, None))
    parts: list[str] = list(notes)
    if bound is not None and bound <= TRIVIAL_BOUND_USD and cands and min(c[2] for c in cands) > TRIVIAL_BOUND_USD:
        # every cost is >= 0, so a bound of $0 proves nothing about a plan that costs more: "no bound yet", not a
        # "proven" 100% gap (a $0 bound of a $0 plan is kept: it proves that plan optimal)
        bound_src, bound = None, None
    if not cands:
        if time_limit_reached:
            parts.append(f"time limit {time_limit_s:.3g} s reached before any feasible plan was found")
        else:
            parts.append("the backend stopped without a feasible plan")
        return Plan(status=Status.NO_SOLUTION, backend=backend, bound_usd=bound, solve_time_s=solve_time_s,
                    message="; ".join(parts))
    which, plan, objective = min(cands, key=lambda c: (c[2], c[0] != "backend"))
    if plan.best_effort:
        parts.insert(0, best_effort_summary(problem, plan.unserved_req_per_s))
    if start is not None and incumbent is not None and which == "start" and objective < cands[0][2] - 1e-9:
        parts.append(f"the backend's plan (${cands[0][2]:,.2f}) was worse than the warm start "
                     f"({start.backend}, ${objective:,.2f}); the warm start is returned")
    elif start is not None and incumbent is None and backend_ran:
        parts.append(f"the backend found no plan; the warm start ({start.backend}) is returned")
    g = relative_gap(objective, bound)
    if bound is not None and bound > objective + BOUND_REL_TOL * max(1.0, abs(objective)):
        status = Status.FEASIBLE
        parts.append(f"DEFECT: the {bound_src} bound ${bound:,.2f} exceeds the plan's cost ${objective:,.2f}; "
                     "please report this")
    elif bound is not None and g is not None and g <= gap + 1e-9:
        status = Status.OPTIMAL
        parts.append(f"proven optimal within the {gap:.2%} gap (gap {gap_text(g)}, {bound_src} bound)")
    elif bound is not None:
        status = Status.FEASIBLE
        why = f"time limit {time_limit_s:.3g} s reached" if time_limit_reached else "stopped"
        parts.append(f"{why}; gap {g:.2%} to the {bound_src} bound (requested {gap:.2%})")
    else:
        status = Status.HEURISTIC
        why = f"time limit {time_limit_s:.3g} s reached; " if time_limit_reached else ""
        parts.append(f"{why}no bound yet")
    return Plan(replicas=plan.replicas, shared=plan.shared, status=status, backend=backend,
                objective_usd=objective, bound_usd=bound, gap=g, requested_gap=gap, solve_time_s=solve_time_s,
                message="; ".join(parts), unserved_req_per_s=plan.unserved_req_per_s,
                class_unserved_req_per_s=plan.class_unserved_req_per_s,
                pd_replicas=plan.pd_replicas, kv_flows_req_per_s=plan.kv_flows_req_per_s,
                commitments=commitments(problem, plan))


def best_effort_summary(problem: Problem, unserved_req_per_s: dict[str, tuple[float, ...]]) -> str:
    """One sentence for a best-effort plan: that it is best effort, and per model its priority, its most
    unserved req/s in a window and in how many windows some demand is unserved."""
    prio = {m.name: m.priority for m in problem.models}
    each = [f"{m} (priority {prio[m]}) up to {max(row):.2f} req/s in {sum(1 for x in row if x > 0)} of "
            f"{len(row)} windows" for m, row in sorted(unserved_req_per_s.items(), key=lambda kv: (-prio[kv[0]],
                                                                                                kv[0]))
            if max(row, default=0) > 0]
    return "BEST EFFORT: demand exceeds the inventory; unserved " + ", ".join(each)
