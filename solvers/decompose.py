"""Fix-and-optimize by windows, for problems too large for the monolithic model.

Keep the shared GPUs of a base plan (the greedy one: which models share which GPU all day, and what each serves),
then choose the dedicated replicas of each window with an exact one-window model (MILP or CP-SAT) over the residual
demand, the residual replica floor and ceiling, and the inventory the shared GPUs leave. Windows are independent
once the shared GPUs are fixed, except for start costs: each one-window MILP also pays the starts its replicas cause
against the working plan's windows before and after it (held fixed), and its answer replaces the working window only
when that local cost (window cost plus those starts) is lower. Every replacement lowers the whole plan's cost, so the
combined plan costs at most the base plan (the CP-SAT window models ignore starts; the comparison still counts
them); the result is re-checked by ``validate`` like any other plan.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

from fleetplan.placement.plan import Plan, SharedGPU, Status, evaluate, starts_per_window
from fleetplan.placement.problem import OptionKey, Problem, spread_where_possible
from fleetplan.placement.validate import validate
from fleetplan.solvers.common import SafetyStop, cheapest_cover, gpus_in_use
from fleetplan.solvers.cpsat import solve_cpsat
from fleetplan.solvers.executor import Executor
from fleetplan.solvers.milp import BoundResult, solve_aggregate_bound, solve_milp

#: Sweeps over the windows at most: a later sweep re-solves each window against its neighbours' new replicas
#: (the starts between windows change), until a sweep changes nothing or the time is up. One: at 200 models a
#: second sweep gained nothing measurable and took the time the per-window bound needs (gap 3.8% -> 9%).
SWEEPS = 1
#: Relative gap of a window model that repairs a base window which does not fit (a valid plan comes first).
REPAIR_GAP = 0.05
#: Passes of the fill step of :func:`cover_window` at most (each moves models to cheaper options with room).
COVER_FILL_PASSES = 3


def cover_applies(problem: Problem) -> bool:
    """True when :func:`cover_window` models ``problem`` exactly: one capacity per option (no request classes),
    no prefill/decode pools, no commitments and no spot fallback (their pools couple beyond GPU counts)."""
    return not (problem.has_classes or problem.has_disaggregation
                or any(p.committed or p.fallback_pool is not None for p in problem.pools))


class _Cover:
    """The working state of :func:`cover_window` on the one-window problem ``sub``: the GPUs per pool, each GPU's
    price for the window, the options of each model with capacity, the replicas each model has chosen
    ({model: {option key: replicas}}) and the GPUs in use per pool."""

    def __init__(self, sub: Problem, prefer: dict) -> None:
        h = sub.window_hours
        self.sub = sub
        self.mu = 1 - sub.margin
        self.free0 = {p.id: p.gpus for p in sub.pools}
        self.price = {p.id: p.usd_per_gpu_hour * h for p in sub.pools}
        self.prefer = prefer
        self.opt = sub.option_by_key
        self.opts_of = {m.name: [o for o in sub.options_by_model[m.name] if o.capacity_req_per_s > 0]
                        for m in sub.models}
        self.chosen: dict[str, dict] = {}
        self.use: dict[str, int] = dict.fromkeys(self.free0, 0)

    def gpus_in(self, counts: dict) -> dict[str, int]:
        """GPUs per pool of ``counts`` ({option key: replicas})."""
        out = dict.fromkeys(self.free0, 0)
        for key, k in counts.items():
            out[key[1]] += k * self.opt[key].gpus
        return out

    def cost(self, counts: dict) -> float:
        """USD of ``counts`` for the window."""
        return sum(k * self.opt[key].gpus * self.price[key[1]] for key, k in counts.items())

    def choose(self, m, room: dict, forbid: str | None = None) -> dict | None:
        """m's cheapest covering within ``room`` (GPUs per pool) without pool ``forbid``."""
        opts = self.opts_of[m.name]
        only: dict[str, object] = {}  # pool -> the one option kept there (after a covering over the pool's room)
        for _attempt in range(2):
            spec = []
            for o in opts:
                ub = room[o.pool] // o.gpus if o.pool != forbid and only.get(o.pool, o.key) == o.key else 0
                tie = 1e-9 * self.price[o.pool] * (0 if self.prefer.get(o.key) else 1)  # ties go to running replicas
                spec.append((o.gpus * self.price[o.pool] + tie, self.mu * o.capacity_req_per_s, ub))
            got = cheapest_cover(spec, m.demand_req_per_s[0], m.min_replicas, m.max_replicas)
            if got is None:
                return None
            counts = {o.key: k for o, k in zip(opts, got[1], strict=True) if k}
            over = [q for q, g in self.gpus_in(counts).items() if g > 0 and g > room[q]]
            if not over:
                return counts
            # options of one pool fit one by one but not together: keep the pool's largest share and retry
            for q in over:
                only[q] = max((key for key in counts if key[1] == q),
                              key=lambda k: (counts[k] * self.opt[k].gpus, k))
        return None

    def room_for(self, m) -> dict:
        """GPUs per pool m may use: the free GPUs plus its own."""
        mine = self.gpus_in(self.chosen[m.name])
        return {q: self.free0[q] - self.use[q] + mine[q] for q in self.free0}

    def move(self, m, new: dict) -> None:
        """m takes the replicas ``new`` instead of its chosen ones."""
        for q, g in self.gpus_in(new).items():
            self.use[q] += g
        for q, g in self.gpus_in(self.chosen[m.name]).items():
            self.use[q] -= g
        self.chosen[m.name] = new

    def alone(self) -> bool:
        """Step 1 of :func:`cover_window`: each model's cheapest covering, the pools' GPUs ignored; False when a
        model has none."""
        for m in self.sub.models:
            got = self.choose(m, self.free0)
            if got is None:
                return False
            self.chosen[m.name] = got
        for counts in self.chosen.values():
            for q, g in self.gpus_in(counts).items():
                self.use[q] += g
        return True

    def shed(self, p: str) -> bool:
        """Step 2 for pool ``p``: models leave it, the smallest cost increase first, until it fits; False when it
        cannot be made to fit."""
        regret = []
        for m in self.sub.models:
            if any(key[1] == p for key in self.chosen[m.name]):
                alt = self.choose(m, self.free0, forbid=p)
                if alt is not None:
                    regret.append((self.cost(alt) - self.cost(self.chosen[m.name]), m.name, m))
        for _r, _n, m in sorted(regret, key=lambda r: r[:2]):
            if self.use[p] <= self.free0[p]:
                break
            alt = self.choose(m, self.room_for(m), forbid=p)
            if alt is not None:
                self.move(m, alt)
        return self.use[p] <= self.free0[p]

    def fill(self) -> int:
        """One pass of step 3: models move, the largest saving first, to their cheapest covering within the GPUs
        left free; returns how many moved."""
        gains = []
        for m in self.sub.models:
            alt = self.choose(m, self.room_for(m))
            if alt is not None and self.cost(alt) < self.cost(self.chosen[m.name]) - 1e-9:
                gains.append((self.cost(self.chosen[m.name]) - self.cost(alt), m.name, m))
        moved = 0
        for _g, _n, m in sorted(gains, key=lambda r: (-r[0], r[1])):
            alt = self.choose(m, self.room_for(m))
            if alt is not None and self.cost(alt) < self.cost(self.chosen[m.name]) - 1e-9:
                self.move(m, alt)
                moved += 1
        return moved


def cover_window(sub: Problem, prefer: dict | None = None) -> Plan | None:
    """A plan of the one-window problem ``sub`` (dedicated replicas only: ``sub`` has no share options, as
    :func:`_window_problem` builds it), in well under a second at 500 models where a one-window MILP finds none
    better than the greedy window in a minute. Three steps:

    1. each model alone takes its cheapest whole-replica covering of its demand within its replica floor and
       ceiling (:func:`fleetplan.solvers.common.cheapest_cover`, exact; the pools' GPUs ignored);
    2. each pool holding more GPUs than it has sheds models, the smallest cost increase first (a model's
       cheapest covering without that pool), each covered again within the GPUs the other models leave;
    3. fill: models move, the largest saving first, to their cheapest covering within the GPUs left free
       (COVER_FILL_PASSES passes at most, until none saves).

    ``prefer`` ({option key: replicas}, e.g. the window before) breaks cost ties towards replicas already
    running (fewer starts). Egress and start costs are not priced here (the caller compares the exact cost of
    the window with its starts). Returns None when ``sub`` is outside :func:`cover_applies` or no covering fits
    the pools."""
    if not cover_applies(sub) or sub.n_windows != 1 or sub.share_options:
        return None
    c = _Cover(sub, prefer or {})
    if not c.alone():
        return None
    for p in sorted(c.free0, key=lambda p: (-(c.use[p] - c.free0[p]), p)):
        if c.use[p] > c.free0[p] and not c.shed(p):
            return None
    for _ in range(COVER_FILL_PASSES):
        if not c.fill():
            break
    if any(c.use[p] > c.free0[p] for p in c.free0):
        return None
    return Plan(replicas={key: (k,) for counts in c.chosen.values() for key, k in counts.items()},
                status=Status.HEURISTIC, backend="cover")


@dataclass
class _Bin:
    """A shared GPU being edited by :func:`dissolve_shared`: its residents, their served req/s per window, its
    compute share per window and its resident memory (bytes)."""

    pool: str
    models: list[str]
    served: dict[str, tuple[float, ...]]
    load: list[float]
    mem: float


class _Dissolve:
    """What :func:`dissolve_shared` reads of the problem: windows, window hours, 1 - margin, the pools, the share
    options by (model, pool), the models, each pool's memory limit for residents and the residents' limit."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.W, self.h, self.mu = problem.n_windows, problem.window_hours, 1 - problem.margin
        self.pools = problem.pool_by_id
        self.share_of = {(s.model, s.pool): s for s in problem.share_options}
        self.models = problem.model_by_name
        self.limit = {p.id: p.memory_bytes_per_gpu * problem.shared_memory_utilization for p in problem.pools}
        self.k_max = problem.max_models_per_shared_gpu

    def load(self, g: SharedGPU) -> list[float]:
        """Compute share of shared GPU ``g`` per window."""
        return [sum(v[w] / self.share_of[(m, g.pool)].capacity_req_per_s for m, v in g.served_req_per_s.items())
                for w in range(self.W)]

    def without(self, pl: Plan, i: int) -> Plan | None:
        """``pl`` with shared GPU i removed and its residents re-homed (most served first), or None when one cannot
        be."""
        gone = pl.shared[i]
        use = {pid: [u + self.pools[pid].reserved_gpus for u in row]  # the room left: reserved GPUs too
               for pid, row in gpus_in_use(self.problem, pl).items()}
        for w in range(self.W):
            use[gone.pool][w] -= 1
        others = [_Bin(g.pool, list(g.models), dict(g.served_req_per_s), self.load(g),
                       sum(self.share_of[(m, g.pool)].memory_bytes for m in g.models))
                  for j, g in enumerate(pl.shared) if j != i]
        reps = {key: list(c) for key, c in pl.replicas.items()}
        for m in sorted(gone.models, key=lambda m: (-sum(gone.served_req_per_s[m]), m)):
            served = gone.served_req_per_s[m]
            if not self.to_shared(m, served, others) and not self.to_dedicated(m, served, others, reps, use):
                return None
        shared = tuple(SharedGPU(pool=b.pool, models=tuple(b.models), served_req_per_s=b.served) for b in others)
        return Plan(replicas={key: tuple(c) for key, c in reps.items() if any(c)}, shared=shared)

    def to_shared(self, m: str, served: tuple[float, ...], others: list[_Bin]) -> bool:
        """Move m's ``served`` rates to the first other shared GPU with room in every window (memory, residents,
        compute share <= 1 - margin); False when none has."""
        for b in others:
            s = self.share_of.get((m, b.pool))
            if s is None or m in b.models or b.mem + s.memory_bytes > self.limit[b.pool] * (1 - 1e-9):
                continue
            if self.k_max is not None and len(b.models) >= self.k_max:
                continue
            if all(b.load[w] + served[w] / s.capacity_req_per_s <= self.mu * (1 - 1e-9) for w in range(self.W)):
                b.models.append(m)
                b.served[m] = tuple(served)
                b.mem += s.memory_bytes
                b.load = [b.load[w] + served[w] / s.capacity_req_per_s for w in range(self.W)]
                return True
        return False

    def to_dedicated(self, m: str, served: tuple[float, ...], others: list[_Bin], reps: dict, use: dict) -> bool:
        """Serve m's ``served`` rates with dedicated replicas added to ``reps`` (and their GPUs to ``use``): per
        window the cheapest whole-replica covering within the GPUs its pools have free, and m's replica floor;
        False when a window has none."""
        W, pools = self.W, self.pools
        mine = [o for o in self.problem.options_by_model[m] if o.capacity_req_per_s > 0]
        resident = sum(1 for b in others if m in b.models)
        for w in range(W):
            dedicated = sum(reps.get(o.key, [0] * W)[w] for o in self.problem.options_by_model[m])
            floor = max(0, self.models[m].min_replicas - resident - dedicated)
            if served[w] <= 0 and not floor:
                continue
            spec = [(o.gpus * pools[o.pool].usd_per_gpu_hour * self.h, self.mu * o.capacity_req_per_s,
                     max(0, pools[o.pool].gpus - use[o.pool][w]) // o.gpus) for o in mine]
            got = cheapest_cover(spec, served[w], floor)
            if got is None:
                return False
            for o, k in zip(mine, got[1], strict=True):
                if k:
                    reps.setdefault(o.key, [0] * W)[w] += k
                    use[o.pool][w] += k * o.gpus
        return True


def dissolve_shared(problem: Problem, plan: Plan, *, deadline: float | None = None) -> Plan:
    """``plan`` with shared GPUs removed where that lowers its cost: the shared GPUs are all-day decisions of the
    greedy packing that the one-window models of :func:`solve_by_windows` keep fixed. Least-loaded GPU first,
    each resident's served rates move to another shared GPU with room in every window (memory, residents,
    compute share <= 1 - margin), else to dedicated replicas: per window the cheapest whole-replica covering
    (:func:`fleetplan.solvers.common.cheapest_cover`) of the rate within the GPUs its pools have free, and the
    model's replica floor. A removal is kept when the plan stays valid (``validate``) and its whole cost
    (``evaluate``: GPUs, starts and egress) drops; sweeps repeat until none is kept or ``deadline`` (a
    time.perf_counter() value) passes. Returns ``plan`` itself when nothing is removed or outside
    :func:`cover_applies`; the caller re-checks the result."""
    if not plan.shared or not cover_applies(problem):
        return plan
    d = _Dissolve(problem)
    best, best_usd = plan, evaluate(problem, plan).total_usd
    kept = True
    while kept:
        kept = False
        for i in sorted(range(len(best.shared)), key=lambda i: (sum(d.load(best.shared[i])), i)):
            if deadline is not None and time.perf_counter() >= deadline:
                break
            cand = d.without(best, i)
            if cand is None:
                continue
            usd = evaluate(problem, cand).total_usd
            if usd < best_usd - 1e-6 and validate(problem, cand, check_objective=False).ok:
                best, best_usd, kept = cand, usd, True
                break  # indices changed: start the sweep again
    if best is plan:
        return plan
    return replace(best, status=Status.HEURISTIC, backend=plan.backend, objective_usd=best_usd,
                   message=plan.message)


def _window_problem(problem: Problem, base: Plan, w: int) -> Problem:
    """The one-window problem left for the dedicated replicas of window ``w`` once ``base``'s shared GPUs stay."""
    served = {m.name: 0.0 for m in problem.models}
    resident = {m.name: 0 for m in problem.models}
    reserved = {p.id: 0 for p in problem.pools}
    for g in base.shared:
        reserved[g.pool] += 1
        for mname in g.models:
            resident[mname] += 1
        for mname, v in g.served_req_per_s.items():
            served[mname] += v[w]
    models = []
    drop = set()
    for m in problem.models:
        residual = max(0.0, m.demand_req_per_s[w] - served[m.name])
        floor = max(0, m.min_replicas - resident[m.name])
        ceil = None if m.max_replicas is None else m.max_replicas - resident[m.name]
        if ceil is not None and ceil < max(1, floor):
            drop.add(m.name)  # no dedicated replica allowed beyond its shared residency
            ceil = None
        models.append(replace(m, demand_req_per_s=(residual,), min_replicas=floor, max_replicas=ceil))
    pools = tuple(replace(p, reserved_gpus=min(p.nodes * p.gpus_per_node, p.reserved_gpus + reserved[p.id]))
                  for p in problem.pools)  # the pool's own reserved GPUs stay reserved
    options = tuple(o for o in problem.options if o.model not in drop)
    # a spread (18) kept as far as the window's dedicated places allow (the caller validates the combined plan)
    return replace(problem, n_windows=1, pools=pools, models=spread_where_possible(tuple(models), pools, options),
                   options=options, share_options=(), max_shared_gpus_per_pool=0)


def _base_window_plan(base: Plan, w: int) -> Plan:
    return Plan(replicas={k: (c[w],) for k, c in base.replicas.items() if c[w]})


class _ByWindows:
    """The working state of :func:`solve_by_windows`: the one-window problems (``subs``), each window's starting
    plan (``warms``) and whether it fits its window (``fits``), the plans chosen so far (``chosen_of``) and the
    working plan's replicas per window (``counts_of``, {option key: replicas})."""

    def __init__(self, problem: Problem, base: Plan) -> None:
        W = problem.n_windows
        self.problem, self.base, self.W = problem, base, W
        self.subs = [_window_problem(problem, base, w) for w in range(W)]
        self.warms = [_base_window_plan(base, w) for w in range(W)]
        self.fits = [validate(self.subs[w], self.warms[w], check_objective=False).ok for w in range(W)]
        self.chosen_of: dict[int, Plan] = {}
        self.counts_of = {w: {k: v[w] for k, v in base.replicas.items() if v[w]} for w in range(W)}

    def order(self) -> list[int]:
        """The windows to solve, those to repair first."""
        return sorted(range(self.W), key=lambda w: (self.fits[w], w))

    def local_usd(self, sub_plan: Plan, w: int) -> float:
        """Cost of window w's replicas: the window's own cost plus the starts they cause against the working
        plan's neighbour windows (the start rule of starts_per_window on before, this, after)."""
        W = self.W
        mine = {k: c[0] for k, c in sub_plan.replicas.items()}
        before, after = self.counts_of[(w - 1) % W], self.counts_of[(w + 1) % W]
        opts = self.problem.option_by_key
        starts_usd = sum(opts[k].start_cost_usd * sum(starts_per_window([before.get(k, 0), mine.get(k, 0),
                                                                         after.get(k, 0)]))
                         for k in set(mine) | set(before) | set(after)) if W > 1 else 0.0
        return evaluate(self.subs[w], sub_plan).total_usd + starts_usd

    def adopt(self, w: int, plan: Plan) -> None:
        """Window w takes ``plan``'s replicas."""
        self.chosen_of[w] = plan
        self.counts_of[w] = {k: c[0] for k, c in plan.replicas.items() if c[0]}

    def cover_pass(self, deadline: float, progress, stop: SafetyStop | None = None) -> None:
        """Every window, in order, takes :func:`cover_window`'s plan (ties towards the replicas of the window
        before) when it repairs the window or lowers its local cost; the window models then start from it.
        Windows left when ``deadline`` passes keep their plans (recorded in ``stop`` when given)."""
        W = self.W
        for w in range(W):
            if deadline - time.perf_counter() <= 0.1:
                if stop is not None:
                    stop.cut(f"the covering pass before window {w + 1} of {W}")
                break
            if progress:
                progress(f"window {w + 1}/{W}: covering models one by one within the pools")
            r = cover_window(self.subs[w], prefer=self.counts_of[(w - 1) % W])
            if r is None or not validate(self.subs[w], r, check_objective=False).ok:
                continue
            if not self.fits[w] or self.local_usd(r, w) < self.local_usd(self.warms[w], w) - 1e-6:
                self.adopt(w, r)
                self.warms[w] = Plan(replicas=dict(r.replicas))
                self.fits[w] = True

    def sweep(self, sweep: int, order: list[int], deadline: float, progress, solve_window,
              stop: SafetyStop | None = None) -> bool:
        """One sweep over the windows (``order`` in the first, else in turn), each window solved by
        ``solve_window(w, sub, start, per, end, repair)``: in its share of the time left, or, with ``stop`` (the
        windows bounded by effort), until ``deadline``, the safety stop, which records what it cut. A window takes
        the answer when it repairs the window or lowers its local cost. Returns whether a window changed."""
        W = self.W
        changed = False
        for i, w in enumerate(order if sweep == 0 else range(W)):
            left = deadline - time.perf_counter()
            if left <= 0.1:
                if stop is not None:
                    stop.cut(f"the fix-and-optimize pass before its window {i + 1} of {W}")
                break  # out of time: the remaining windows keep the working plan's replicas
            repair = sweep == 0 and not self.fits[w]
            to_repair = sum(1 for v in order[i:] if not self.fits[v]) if repair else 0
            # a plan first: repairs share the time before the rest (by effort: each window its own budget)
            per = left if stop is not None else left / (to_repair if repair else W - i)
            if progress:
                progress(f"window {w + 1}/{W} of the fix-and-optimize pass" + (" (repair)" if repair else "")
                         + (f", sweep {sweep + 1}" if sweep else ""))
            sub = self.subs[w]
            warm = self.warms[w] if sweep == 0 else Plan(replicas={k: (c,) for k, c in self.counts_of[w].items()})
            end = min(deadline, time.perf_counter() + per)
            start = None if repair else warm  # a start must be a valid plan (finish_plan may return it)
            r = solve_window(w, sub, start, per, end, repair)
            cut = stop is not None and (stop.passed() or "safety stop" in r.message)
            if r.has_solution and r.objective_usd is not None and validate(sub, r, check_objective=False).ok:
                if repair or self.local_usd(r, w) < self.local_usd(warm, w) - 1e-6:
                    self.adopt(w, r)  # better, or a repair of a base window that does not fit
                    changed = True
            if cut and stop is not None:
                stop.cut(f"the fix-and-optimize pass in its window {i + 1} of {W}")
                break
        return changed

    def combined(self, backend: str) -> Plan:
        """The whole plan: each window's chosen replicas (the base's where none was chosen) and the base's shared
        GPUs."""
        W = self.W
        counts: dict = {}
        for w in range(W):
            src = self.chosen_of.get(w)
            rows = src.replicas.items() if src is not None else ((k, (v[w],)) for k, v in self.base.replicas.items())
            for key, c in rows:
                counts.setdefault(key, [0] * W)[w] = c[0]
        replicas = {k: tuple(v) for k, v in counts.items() if any(v)}
        return Plan(replicas=replicas, shared=self.base.shared, status=Status.HEURISTIC,
                    backend=f"{backend}-by-window")


def solve_by_windows(problem: Problem, base: Plan, *, backend: str = "highs", time_limit_s: float = 60,
                     threads: int | None = None, gap: float = 1e-3, deadline: float | None = None,
                     progress=None, cover: bool = False, max_nodes: int | None = None,
                     deterministic_time: float | None = None, stop: SafetyStop | None = None,
                     window_floors_usd: tuple[float | None, ...] | None = None) -> Plan:
    """Improve ``base`` window by window (module docstring); returns a HEURISTIC plan (never worse than ``base``
    in GPU and egress cost; start costs are re-evaluated), or ``base`` itself if no window improves. A ``base``
    that does not fit the problem (e.g. the greedy plan over the inventory) is repaired where the window models
    find plans with its shared GPUs: its windows that do not fit are solved first, to REPAIR_GAP, and share the
    time among themselves, so a short time limit goes to the repair; the others get equal shares of the time
    left before ``deadline`` (a time.perf_counter() value; model building included); windows left without time
    keep ``base``'s replicas. With ``cover=True`` (problems within :func:`cover_applies`) a first pass gives
    every window, in order, :func:`cover_window`'s plan (ties towards the replicas of the window before) when it
    repairs the window or lowers its local cost; the one-window models then start from the result. The caller
    checks the result with ``validate``.
    ``stop`` (a :class:`~fleetplan.solvers.common.SafetyStop`): the windows are bounded by effort, not by time:
    each one-window model by ``max_nodes`` branch-and-bound nodes (HiGHS, CBC) or ``deterministic_time`` units
    (CP-SAT), the sweeps and passes by count, so the result does not depend on the machine's speed; ``stop``'s
    deadline (replacing ``deadline``) is only a safety stop, and ``stop`` records what it cut.
    ``window_floors_usd`` (with ``backend='cpsat'``; e.g. :func:`window_bounds`): a proven lower bound on each
    window's optimum of :func:`window_problem`, given to the CP-SAT window models so that each stops once its plan
    is within ``gap`` of it; used only when ``base`` has no shared GPUs (then each one-window model here is a
    restriction of :func:`window_problem`, so the bound holds for it)."""
    t0 = time.perf_counter()
    deadline = stop.deadline if stop is not None else deadline if deadline is not None else t0 + time_limit_s
    W = problem.n_windows
    bw = _ByWindows(problem, base)
    order = bw.order()
    floors = window_floors_usd if window_floors_usd is not None and not base.shared else (None,) * W

    def solve_window(w: int, sub: Problem, start: Plan | None, per: float, end: float, repair: bool) -> Plan:
        """Window w's one-window model (``per`` seconds until ``end``; a repair to REPAIR_GAP at least)."""
        g = max(gap, REPAIR_GAP) if repair else gap
        if backend == "cpsat":
            # the windows' own bounds are not used: the restricted class routing keeps CP-SAT's domains small
            return solve_cpsat(sub, time_limit_s=per, threads=threads or 2, gap=g, warm_start=start, deadline=end,
                               deterministic_time=deterministic_time, restrict_classes=True,
                               objective_floor_usd=floors[w])
        nb = (bw.counts_of[(w - 1) % W], bw.counts_of[(w + 1) % W]) if W > 1 else None
        return solve_milp(sub, backend=backend, time_limit_s=per, threads=threads, gap=g, warm_start=start,
                          deadline=end, neighbours=nb, max_nodes=max_nodes)

    if cover and cover_applies(problem):
        bw.cover_pass(deadline, progress, stop)
        order = bw.order()
    for sweep in range(SWEEPS):
        changed = bw.sweep(sweep, order, deadline, progress, solve_window, stop)
        if not changed or deadline - time.perf_counter() <= 0.1:
            break
    plan = bw.combined(backend)
    if not validate(problem, plan, check_objective=False).ok:
        return base
    cost = evaluate(problem, plan).total_usd
    base_cost = evaluate(problem, base).total_usd
    if cost >= base_cost - 1e-9 and validate(problem, base, check_objective=False).ok:
        return base
    return replace(plan, objective_usd=cost, solve_time_s=time.perf_counter() - t0,
                   message="fix-and-optimize by windows from the greedy plan's shared GPUs")


def window_problem(problem: Problem, w: int) -> Problem:
    """Window ``w`` alone: the same pools, options and share options with one window of demand ``d[m, w]``.

    Any plan of the full problem restricted to window w is a plan of this one (its shared GPUs cost one window
    here, as their share of the all-day cost there; it has no start costs), so the sum over windows of these
    problems' optima (or proven bounds) is a lower bound on the full optimum.
    """
    models = tuple(replace(m, demand_req_per_s=(m.demand_req_per_s[w],)) for m in problem.models)
    return replace(problem, n_windows=1, models=models)


def window_plan(plan: Plan, w: int) -> Plan:
    """``plan`` restricted to window ``w``: its replicas in w and its shared GPUs with their rates served in w, a
    plan of :func:`window_problem` (``problem``, w) (see there). Only the decisions (no prefill/decode pools or KV
    flows, no unserved demand): ``evaluate(window_problem(problem, w), window_plan(plan, w)).total_usd`` is w's
    GPU cost (the shared GPUs for one window) and egress, and these summed over the windows plus the plan's start
    costs give its whole cost, so each window's share can be set against that window's bound."""
    shared = tuple(replace(g, served_req_per_s={m: (v[w],) for m, v in g.served_req_per_s.items()})
                   for g in plan.shared)
    return Plan(replicas={k: (c[w],) for k, c in plan.replicas.items() if c[w]}, shared=shared)


def start_prices(problem: Problem, w: int) -> dict[OptionKey, float]:
    """The start costs charged to window ``w`` of ``problem`` in a per-window bound, USD per replica of each option
    ({option key: price}; options without a price left out): π[o,w] - π[o,w+1], windows cyclic, where
    π[o,v] = min(σ_o, c_o) when the demand of o's model rises into window v (d[m,v] > d[m,v-1]), else 0
    (σ_o the option's start cost, c_o its replica's GPU cost for one window).

    Why a bound may charge them (a Lagrangian relaxation of the starts (8) of :mod:`fleetplan.solvers.milp`): any
    plan has starts st[o,v] >= 0 and >= n[o,v] - n[o,v-1], so for 0 <= π[o,v] <= σ_o its start cost
    Σ σ_o·st[o,v] >= Σ π[o,v]·(n[o,v] - n[o,v-1]) = Σ_v Σ_o n[o,v]·(π[o,v] - π[o,v+1]) (the sum re-indexed over
    the cyclic windows). So the plan costs at least the sum over windows of its window-v cost plus these prices on
    its replicas in v, and a lower bound on each window's problem with the prices added (:func:`window_problem`
    with ``option_usd``) sums to a lower bound on the optimum. With π <= c_o every replica's priced cost
    c_o + π[o,v] - π[o,v+1] stays >= 0, so a window's cost stays >= 0 and a window left without a bound still
    counts 0.
    Why these π: a model's replicas follow its demand, so over a day with one peak the prices charge each replica
    at the peak its start cost and credit the trough's replicas as much, about the starts a plan that follows the
    demand pays. On the benchmark's 200 models the prices raised the sum of the windows' bounds of the models
    without a shared-GPU option from $47,036.90 to $47,158.29 (their plan's starts: $280.20), for the same CPU
    time (2026-12-03)."""
    W = problem.n_windows
    if W < 2:
        return {}
    h = problem.window_hours
    pools, models = problem.pool_by_id, problem.model_by_name

    def pi(o, v: int) -> float:
        d = models[o.model].demand_req_per_s
        return min(o.start_cost_usd, o.gpus * pools[o.pool].usd_per_gpu_hour * h) if d[v] > d[v - 1] else 0.0

    prices = {o.key: pi(o, w) - pi(o, (w + 1) % W) for o in problem.options if o.start_cost_usd > 0}
    return {k: v for k, v in prices.items() if v}


def bound_parts(problem: Problem) -> tuple[Problem, ...]:
    """``problem`` cut into parts whose optima sum to at most its own optimum, for a bound: the models that have no
    shared-GPU option (the large ones: dedicated replicas only) and the models that have one (the small ones, with
    the shared GPUs), each part with every pool's whole inventory. Returns ``(problem,)`` when one part would be
    empty, or when the models are coupled beyond the inventory: committed pools (a commitment's cost covers the
    GPUs of both parts, and each part would pay it) or prefill/decode pools (their KV egress is priced by monthly
    volume bands over all models together, and bands are concave).

    Why the sum of the parts' optima (or of their proven bounds) is at most the optimum: restrict any plan of
    ``problem`` to a part's models. Its dedicated replicas and their starts, site splits and egress are per model,
    and only the sharing part's models reside on shared GPUs, so the restriction meets every per-model, per-option
    and per-shared-GPU constraint of the part, and the plan's cost is the sum of the restrictions' costs. The
    constraints across models are the inventory (6) and a spot pool's fallback (16), rows of GPUs in use with
    non-negative coefficients and a constant right-hand side: the restriction uses no more than the whole plan, so
    it fits them too. Hence each restriction is a plan of its part, and the parts' optima sum to at most the
    plan's cost. The parts lose the inventory the other part takes; in return each part's root node is far easier
    (measured on the benchmark's 200 models, see :func:`window_bounds`)."""
    if problem.has_disaggregation or any(p.committed for p in problem.pools):
        return (problem,)
    sharing = {s.model for s in problem.share_options}
    groups = [{m.name for m in problem.models if m.name not in sharing},
              {m.name for m in problem.models if m.name in sharing}]
    if not all(groups):
        return (problem,)
    return tuple(replace(problem, models=tuple(m for m in problem.models if m.name in g),
                         options=tuple(o for o in problem.options if o.model in g),
                         share_options=tuple(s for s in problem.share_options if s.model in g),
                         option_notes={k: v for k, v in problem.option_notes.items() if k in g})
                 for g in groups)


def parts_bound(problem: Problem, *, deadline: float, threads: int | None = None, gap: float = 1e-4,
                max_nodes: int | None = None, heuristics: bool = True,
                option_usd: dict | None = None) -> BoundResult:
    """The sum of :func:`~fleetplan.solvers.milp.solve_aggregate_bound` over :func:`bound_parts` (``problem``),
    one after the other until ``deadline`` (a time.perf_counter() value), a valid lower bound on ``problem``'s
    optimum, USD (see bound_parts). A part left without a bound counts 0 (its cost is >= 0) and the sum is None only
    when no part has one; infeasible when a part is (then so is ``problem``); closed when every part closed;
    ``time_limit_reached`` when the deadline stopped a part. ``option_usd``: prices added per replica, as in
    :func:`~fleetplan.solvers.milp.build_milp` (each part's prices stay its own: they are per option, so per
    model)."""
    results = []
    for part in bound_parts(problem):
        r = solve_aggregate_bound(part, time_limit_s=max(0.01, deadline - time.perf_counter()), threads=threads,
                                  gap=gap, deadline=deadline, max_nodes=max_nodes, heuristics=heuristics,
                                  option_usd=option_usd)
        if r.infeasible:
            return r
        results.append(r)
    found = [max(0.0, r.bound_usd) for r in results if r.bound_usd is not None]
    return BoundResult(sum(found) if found else None, closed=all(r.closed for r in results),
                       time_limit_reached=any(r.time_limit_reached for r in results))


#: :func:`split_pays` splits unless the split proves more than this share less than the whole window at its probe:
#: a split window's root takes a third of the whole window's time or less, so within a time limit more windows
#: finish (the benchmark's 200 models, with the start prices: probe window 10, $2,336.59 whole in 7.2 CPU s against
#: $2,331.87 split in 1.4 CPU s, -0.20%, while over the 24 windows the split proves $238 more without the prices).
SPLIT_TOLERANCE = 0.005


def split_pays(problem: Problem, *, stop: SafetyStop, max_nodes: int | None = None, heuristics: bool = True,
               starts: bool = False) -> bool:
    """Whether the per-window bound of ``problem`` should split its windows (:func:`window_bounds` ``split``):
    True when :func:`bound_parts` cuts it in two and, at the window with the most demand (summed over the models,
    req/s; the earliest of equals), where the parts compete most for the inventory each is given whole, the sum of
    the parts' bounds is at least the whole window's aggregate bound less SPLIT_TOLERANCE of it (both within
    ``max_nodes`` nodes on one solver thread, with ``heuristics`` and ``starts`` as there). The split proves more
    where the parts hardly compete (the benchmark's 200 models, window 9: $2,337.74 split against $2,320.53 whole,
    in a third of the time) and far less where they share a small pool (bench_audit's "mixed" instances with the
    start prices, summed over the 26 feasible of 30: $162.99 split, $256.48 whole, $255.41 as this probe chooses;
    their optima $264.99), which the probe detects for the cost of one window both ways (200 models: 8.6 CPU s).
    A probe stopped by ``stop``'s
    deadline is recorded there as a cut of the bound (the choice, and so the bound, may then differ on another
    machine; the plan never depends on it)."""
    if len(bound_parts(problem)) < 2:
        return False
    W = problem.n_windows
    w = max(range(W), key=lambda v: (sum(m.demand_req_per_s[v] for m in problem.models), -v))
    got = []
    for split in (False, True):
        r = _one_window_bound(problem, w, max(0.01, stop.deadline - time.perf_counter()), threads=1, gap=1e-4,
                              max_nodes=max_nodes, heuristics=heuristics, split=split, starts=starts)
        if r.time_limit_reached:
            stop.cut("the per-window bound's probe of its split", bound_only=True)
        got.append(-math.inf if r.bound_usd is None else r.bound_usd)
    return got[1] >= got[0] - SPLIT_TOLERANCE * abs(got[0])


#: Share of a fanned-out window's slot of the worker-seconds left that its task may use, model building
#: included (the rest: starting the task, sending the problem, collecting the result).
FANOUT_SOLVE_SHARE = 0.97
#: Least time left, seconds, for the per-window bound to fan out (below it, starting the workers and sending them
#: the problem would use a large share of the time: the windows run in this process).
FANOUT_MIN_S = 20.0


def _window_bound_task(problem: Problem,
                       item: tuple[int, float, int | None, float, int | None, bool, bool, bool]) -> BoundResult:
    """Window ``w``'s aggregate bound within a budget fixed before the fan-out and counted from the task's own
    start, model building included, ``max_nodes`` (None: none), ``heuristics``, ``split`` and ``starts`` (see
    :func:`window_bounds`)."""
    w, budget_s, threads, gap, max_nodes, heuristics, split, starts = item
    return _one_window_bound(problem, w, budget_s, threads=threads, gap=gap, max_nodes=max_nodes,
                             heuristics=heuristics, split=split, starts=starts)


def _one_window_bound(problem: Problem, w: int, budget_s: float, *, threads: int | None, gap: float,
                      max_nodes: int | None, heuristics: bool, split: bool, starts: bool) -> BoundResult:
    """The bound of window ``w`` of ``problem`` alone within ``budget_s`` seconds from now, model building
    included: :func:`parts_bound` with ``split``, else the aggregate MILP of the whole window; with ``starts``
    the window's :func:`start_prices` on its replicas."""
    end = time.perf_counter() + budget_s
    sub = window_problem(problem, w)
    prices = start_prices(problem, w) if starts else None
    if split:
        return parts_bound(sub, deadline=end, threads=threads, gap=gap, max_nodes=max_nodes, heuristics=heuristics,
                           option_usd=prices)
    return solve_aggregate_bound(sub, time_limit_s=budget_s, threads=threads, gap=gap, deadline=end,
                                 max_nodes=max_nodes, heuristics=heuristics, option_usd=prices)


def window_bound(problem: Problem, *, deadline: float, threads: int | None = None, gap: float = 1e-3,
                 progress=None, executor: Executor | None = None, max_nodes: int | None = None,
                 stop: SafetyStop | None = None, heuristics: bool = True, split: bool = False,
                 starts: bool = False) -> float | None:
    """The per-window bound, USD: the sum of :func:`window_bounds` (same arguments), None when no window gave a
    bound or a window is infeasible."""
    each = window_bounds(problem, deadline=deadline, threads=threads, gap=gap, progress=progress,
                         executor=executor, max_nodes=max_nodes, stop=stop, heuristics=heuristics, split=split,
                         starts=starts)
    found = [b for b in each or () if b is not None]
    return sum(found) if found else None


def window_bounds(problem: Problem, *, deadline: float, threads: int | None = None, gap: float = 1e-3,
                  progress=None, executor: Executor | None = None, max_nodes: int | None = None,
                  stop: SafetyStop | None = None, heuristics: bool = True,
                  split: bool = False, starts: bool = False) -> tuple[float | None, ...] | None:
    """Each window's proven bound, USD (None for a window left without one), or None when a window is infeasible
    (then so is the problem). Window w's bound is HiGHS's proven bound on the aggregate MILP of
    :func:`window_problem` (w), so their sum (:func:`window_bound`) is a valid lower bound on the optimum (see
    window_problem; the aggregate model relaxes which model shares which GPU, see ``build_milp(aggregate=True)``).
    Windows run in order, each with an equal share of the time left before ``deadline`` (a time.perf_counter()
    value); a window that does not close gives its own proven bound, and a window left without one (no time, or
    no bound found) gives None (0 in the sum, which keeps it valid).
    With an ``executor`` of several workers and at least FANOUT_MIN_S left, the windows run on it at once, each
    with the same budget fixed before the fan-out (FANOUT_SOLVE_SHARE of its share of the worker-seconds left,
    model building included, counted from the task's start) and one solver thread, so the bound does not depend
    on which executor ran it (up to windows stopped by their limit).
    ``stop`` (a :class:`~fleetplan.solvers.common.SafetyStop`, replacing ``deadline``): each window also bounded
    by ``max_nodes`` branch-and-bound nodes on one solver thread (HiGHS's search depends on its thread count), so
    the windows' bounds are the same fanned out or in this process when no window reaches its share of the time;
    the windows stopped by their share (or left without time) are recorded in ``stop`` as a cut of a bound only
    (their bounds are still valid, but may differ on another machine). The shares stay because a window's root
    node, which no node budget bounds, dominates at fleet scale (200 models: 20.7 CPU seconds for 50 nodes of one
    window), and the plan does not depend on this bound. ``heuristics=False``: HiGHS's primal heuristics off in
    every window (:func:`~fleetplan.solvers.milp.solve_aggregate_bound`), a third of the work per window at 200
    models. ``split=True``: each window's bound is :func:`parts_bound`, the sum of its :func:`bound_parts`' bounds
    (the models without a shared-GPU option, then those with one, each with the whole inventory), still a valid
    bound. On the benchmark's 200 models (``random_instance(200, 24, seed=200, max_gpus=1000)``, each window's root
    node alone, heuristics off, one thread; 2026-12-03) the 24 windows' bounds summed to $50,547.21 in about 28
    CPU s split, against $50,309.09 in 88 CPU s whole: the whole window's root stops short of what HiGHS proves for
    each part alone (window 9: $2,320.53 whole; $2,188.45 in 0.15 CPU s plus $149.29 in 1.2 CPU s split).
    ``starts=True``: each window's replicas also carry its :func:`start_prices`, so the sum (not each window's
    term alone) is a lower bound on the optimum with its start costs."""
    W = problem.n_windows
    each: list[float | None] = [None] * W
    if stop is not None:
        deadline = stop.deadline
        threads = 1
    fan_out = executor is not None and (executor.workers or 1) > 1 and W > 1
    if fan_out and executor is not None and deadline - time.perf_counter() >= FANOUT_MIN_S:
        left = deadline - time.perf_counter()
        per = FANOUT_SOLVE_SHARE * left / math.ceil(W / (executor.workers or 1))  # rounds of tasks per worker
        if progress:
            progress(f"per-window bound: {W} windows on {executor.describe()} ({per:.0f} s each)")
        # one solver thread per task: the workers already use the CPUs
        results = executor.map(_window_bound_task,
                               [(w, per, 1, gap, max_nodes, heuristics, split, starts) for w in range(W)],
                               common=problem, with_common=True)
        if any(r.infeasible for r in results):
            return None
        cut = sum(1 for r in results if r.time_limit_reached)
        if stop is not None and cut:
            stop.cut(f"the per-window bound in {cut} of its {W} windows (each stopped by its share of the time)",
                     bound_only=True)
        # every window's cost is >= 0
        return tuple(None if r.bound_usd is None else max(0.0, r.bound_usd) for r in results)
    cut = 0
    for w in range(W):
        left = deadline - time.perf_counter()
        if left <= 0.1:
            cut += W - w
            break
        if progress:
            progress(f"window {w + 1}/{W} of the per-window bound")
        r = _one_window_bound(problem, w, left / (W - w), threads=threads, gap=gap, max_nodes=max_nodes,
                              heuristics=heuristics, split=split, starts=starts)
        if r.infeasible:
            return None
        cut += r.time_limit_reached
        if r.bound_usd is not None:
            each[w] = max(0.0, r.bound_usd)  # every window's cost is >= 0
    if stop is not None and cut:
        stop.cut(f"the per-window bound in {cut} of its {W} windows (each stopped by its share of the time)",
                 bound_only=True)
    return tuple(each)
