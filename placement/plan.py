"""Plans (answers to a :class:`~fleetplan.placement.problem.Problem`) and their evaluation in plain Python.

A Plan is a new object; the Problem is never mutated. :func:`evaluate` computes a plan's cost and utilization from
its decisions alone (no solver), and is what reports, baselines and ``validate`` use.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fleetplan.costmodels.ledger import DAYS_PER_MONTH, HOURS_PER_DAY, table_key
from fleetplan.costmodels.prices import EgressTable, egress_cost_usd
from fleetplan.placement.problem import OptionKey, PdKey, Problem
from fleetplan.placement.status import Status

RouteKey = tuple[str, str, str]  # (model, prefill site, decode site)


#: Statuses that carry a plan.
SOLUTION_PRESENT = frozenset({Status.OPTIMAL, Status.FEASIBLE, Status.HEURISTIC})

__all__ = ["SOLUTION_PRESENT", "Evaluation", "KvTraffic", "Plan", "SharedGPU", "Status", "commitments", "evaluate",
           "kv_traffic", "pool_gpus_per_window", "route", "site_capacity", "starts", "starts_per_window",
           "tidy_shared", "unserved",
           "UNSERVED_TOL_REQ_PER_S"]


@dataclass(frozen=True)
class SharedGPU:
    """One GPU shared by several models all day (their weights stay resident).

    Attributes:
        pool: pool id.
        models: resident models.
        served_req_per_s: {model: rate served by this GPU in each window} (req/s).
    """

    pool: str
    models: tuple[str, ...]
    served_req_per_s: dict[str, tuple[float, ...]]


@dataclass(frozen=True)
class Plan:
    """Replicas per (model, pool, tp, pp) and window, plus shared GPUs.

    Attributes:
        replicas: {(model, pool, tp, pp): replicas in each window}.
        shared: shared GPUs (on in every window).
        status: see :class:`Status`.
        backend: 'highs', 'cbc', 'cpsat', or a baseline name.
        objective_usd: cost over the horizon (GPU + starts + egress), USD, as the solver reports it.
        bound_usd: a proven lower bound on the optimum (LP relaxation or the solver's dual bound), or None.
        gap: (objective - bound) / objective, or None.
        requested_gap: the relative gap the solve was asked for (OPTIMAL means gap <= it), or None.
        solve_time_s: wall time of the solve, seconds.
        message: explanation (infeasibility, time limit, warm start used ...).
        unserved_req_per_s: best-effort plans only: {model: demand left unserved in each window, req/s} for the
            models with any (served + unserved = demand); empty when the plan serves all demand.
        pd_replicas: {(model, role, pool, tp, decode site): replicas in each window} of prefill and decode options
            (:attr:`Problem.pd_options`); empty for a colocated-only plan.
        kv_flows_req_per_s: {(model, prefill site, decode site): req/s prefilled at the first site and decoded at
            the second in each window}: the disaggregated share of the demand and the route its KV cache takes.
        commitments: {committed pool id: GPUs committed for the whole horizon} (see
            :attr:`~fleetplan.placement.problem.Pool.committed`); a committed pool the plan uses but does not list
            is taken at its peak use in a window (the least commitment that holds the plan, :func:`commitments`).
        class_unserved_req_per_s: best-effort plans of models with request classes: {(model, class): req/s of
            that class left unserved in each window} for the classes with any; a class model's entry in
            ``unserved_req_per_s`` is the sum over its classes.
    """

    replicas: dict[OptionKey, tuple[int, ...]] = field(default_factory=dict)
    shared: tuple[SharedGPU, ...] = ()
    status: Status = Status.HEURISTIC
    backend: str = ""
    objective_usd: float | None = None
    bound_usd: float | None = None
    gap: float | None = None
    requested_gap: float | None = None
    solve_time_s: float = 0.0
    message: str = ""
    unserved_req_per_s: dict[str, tuple[float, ...]] = field(default_factory=dict)
    pd_replicas: dict[PdKey, tuple[int, ...]] = field(default_factory=dict)
    kv_flows_req_per_s: dict[RouteKey, tuple[float, ...]] = field(default_factory=dict)
    commitments: dict[str, int] = field(default_factory=dict)
    class_unserved_req_per_s: dict[tuple[str, str], tuple[float, ...]] = field(default_factory=dict)

    @property
    def has_solution(self) -> bool:
        return self.status in SOLUTION_PRESENT

    @property
    def best_effort(self) -> bool:
        """True when the plan leaves some demand unserved (a best-effort plan)."""
        return any(v > 0 for row in self.unserved_req_per_s.values() for v in row)

    def served_req_per_s(self, problem: Problem) -> dict[str, tuple[float, ...]]:
        """{model: demand the plan serves in each window} = demand - unserved, req/s."""
        out = {}
        for m in problem.models:
            u = self.unserved_req_per_s.get(m.name)
            out[m.name] = tuple(d - u[w] for w, d in enumerate(m.demand_req_per_s)) if u else m.demand_req_per_s
        return out


@dataclass(frozen=True)
class Evaluation:
    """What a plan costs and delivers, computed from its decisions alone.

    Attributes:
        gpu_usd, start_usd, egress_usd, total_usd: cost over the horizon, USD (gpu_usd includes committed_usd).
        committed_usd: the commitments' part of gpu_usd: committed GPUs × rate × horizon hours, USD.
        gpu_hours: GPU-hours over the horizon.
        gpus_per_window: GPUs provisioned in each window.
        utilization_per_window: busy share of provisioned GPU compute in each window (0..1).
        capacity_req_per_s: {model: usable capacity (after the margin) in each window}.
        served_away_req_per_s: {model: rate served away from its origin in each window}.
        kv_egress_usd: the part of ``egress_usd`` billed for KV caches and prompts crossing sites between prefill
            and decode pools, USD over the horizon.
        busy_gpus_by_pool: {pool id: busy GPUs in each window} (the numerator of the utilization, per pool; a pool
            without GPUs in use is absent): the load the pool's replicas carry, in GPUs, not the GPUs deployed.
    """

    gpu_usd: float
    start_usd: float
    egress_usd: float
    gpu_hours: float
    gpus_per_window: tuple[int, ...]
    utilization_per_window: tuple[float, ...]
    capacity_req_per_s: dict[str, tuple[float, ...]]
    served_away_req_per_s: dict[str, tuple[float, ...]]
    kv_egress_usd: float = 0.0
    committed_usd: float = 0.0
    busy_gpus_by_pool: dict[str, tuple[float, ...]] = field(default_factory=dict)

    @property
    def total_usd(self) -> float:
        return self.gpu_usd + self.start_usd + self.egress_usd

    @property
    def mean_utilization(self) -> float:
        """GPU-weighted mean utilization over the horizon."""
        g = sum(self.gpus_per_window)
        pairs = zip(self.utilization_per_window, self.gpus_per_window, strict=True)
        return sum(u * n for u, n in pairs) / g if g else 0.0

    @property
    def peak_utilization(self) -> float:
        return max(self.utilization_per_window, default=0.0)


def tidy_shared(problem: Problem, replicas: dict[OptionKey, tuple[int, ...]],
                shared: tuple[SharedGPU, ...]) -> tuple[SharedGPU, ...]:
    """Shared GPUs whose served rates are trimmed to what each model needs after its dedicated replicas.

    A solver may leave a shared GPU serving more than the remaining demand (it costs nothing); trimming scales a
    model's served rates down proportionally across its shared GPUs, which only lowers compute shares, so a valid
    plan stays valid and reports read naturally.
    """
    opts = problem.option_by_key
    W = problem.n_windows
    ded = {m.name: [0.0] * W for m in problem.models}
    for key, counts in replicas.items():
        o = opts[key]
        for w, n in enumerate(counts):
            ded[o.model][w] += n * o.capacity_req_per_s * (1 - problem.margin)
    total = {m.name: [0.0] * W for m in problem.models}
    for g in shared:
        for mname, v in g.served_req_per_s.items():
            for w, f in enumerate(v):
                total[mname][w] += f
    scale = {}
    for m in problem.models:
        row = []
        for w, d in enumerate(m.demand_req_per_s):
            need = max(0.0, d - ded[m.name][w])
            row.append(need / total[m.name][w] if total[m.name][w] > need and total[m.name][w] > 0 else 1.0)
        scale[m.name] = row
    return tuple(SharedGPU(pool=g.pool, models=g.models,
                           served_req_per_s={m: tuple(f * scale[m][w] for w, f in enumerate(v))
                                             for m, v in g.served_req_per_s.items()}) for g in shared)


#: Unserved req/s below this are solver round-off, not demand left unserved.
UNSERVED_TOL_REQ_PER_S = 1e-6


def unserved(problem: Problem, replicas: dict[OptionKey, tuple[int, ...]],
             shared: tuple[SharedGPU, ...],
             kv_flows_req_per_s: dict[RouteKey, tuple[float, ...]] | None = None) -> dict[str, tuple[float, ...]]:
    """{model: demand minus the plan's usable capacity (its KV flows included) in each window, req/s} for the
    models short in some window (values below UNSERVED_TOL_REQ_PER_S count as served): the unserved demand of a
    best-effort plan."""
    caps = site_capacity(problem, Plan(replicas=replicas, shared=shared, kv_flows_req_per_s=kv_flows_req_per_s or {}))
    out = {}
    for m in problem.models:
        row = tuple(d - sum(caps[m.name][w].values()) for w, d in enumerate(m.demand_req_per_s))
        row = tuple(x if x > UNSERVED_TOL_REQ_PER_S else 0.0 for x in row)
        if any(row):
            out[m.name] = row
    return out


def starts_per_window(counts) -> list[int]:
    """Replica starts in each window of a cyclic horizon: max(0, n[w] - n[w-1]) with n[-1] = n[last]; all zero
    for a one-window horizon (the only home of the start rule: evaluate, the solvers' warm starts and the
    baselines use it)."""
    n = len(counts)
    return [max(0, counts[w] - counts[w - 1]) for w in range(n)] if n > 1 else [0] * n


def starts(counts) -> int:
    """Replica starts over a cyclic horizon: the sum of :func:`starts_per_window`."""
    return sum(starts_per_window(counts))


def pool_gpus_per_window(problem: Problem, plan: Plan) -> dict[str, list[int]]:
    """{pool id: GPUs the plan uses in each window} (dedicated, prefill and decode replicas' tp × pp, plus its shared
    GPUs)."""
    opts = problem.option_by_key
    pd_opts = problem.pd_option_by_key
    out = {p.id: [0] * problem.n_windows for p in problem.pools}
    for o, counts in [(opts[k], c) for k, c in plan.replicas.items()] + [(pd_opts[k], c)
                                                                        for k, c in plan.pd_replicas.items()]:
        for w, n in enumerate(counts):
            out[o.pool][w] += n * o.gpus
    for g in plan.shared:
        out[g.pool] = [x + 1 for x in out[g.pool]]
    return out


def commitments(problem: Problem, plan: Plan) -> dict[str, int]:
    """{committed pool id: GPUs committed} of ``plan``: the plan's own ``commitments`` where it states one, else
    the pool's peak use in a window (the least commitment holding the plan; the optimum for a given use, since a
    commitment costs the same every hour). Only committed pools (:attr:`Pool.committed`) appear."""
    use = pool_gpus_per_window(problem, plan)
    return {p.id: plan.commitments.get(p.id, max(use[p.id], default=0)) for p in problem.pools if p.committed}


def site_capacity(problem: Problem, plan: Plan) -> dict[str, list[dict[str, float]]]:
    """{model: per window {site: usable req/s}}: dedicated capacity × (1 - margin) plus shared GPUs' served rate."""
    pools = problem.pool_by_id
    opts = problem.option_by_key
    out: dict[str, list[dict[str, float]]] = {m.name: [dict() for _ in range(problem.n_windows)]
                                               for m in problem.models}
    for key, counts in plan.replicas.items():
        o = opts[key]
        site = pools[o.pool].site
        for w, n in enumerate(counts):
            if n:
                d = out[o.model][w]
                d[site] = d.get(site, 0.0) + n * o.capacity_req_per_s * (1 - problem.margin)
    for g in plan.shared:
        site = pools[g.pool].site
        for mname, served in g.served_req_per_s.items():
            for w, f in enumerate(served):
                if f > 0:
                    d = out[mname][w]
                    d[site] = d.get(site, 0.0) + f
    for (mname, _ps, ds), flows in plan.kv_flows_req_per_s.items():  # disaggregated: served at the decode site
        for w, f in enumerate(flows):
            if f > 0:
                d = out[mname][w]
                d[ds] = d.get(ds, 0.0) + f
    return out


@dataclass(frozen=True)
class KvTraffic:
    """KV-cache and prompt traffic of a plan's disaggregated routes, and its egress.

    Attributes:
        gb: {(route key, kind): GB over the horizon} with kind 'kv' or 'prompt' (every route, local ones too).
        monthly_gb: {egress table key (cloud, route class, scope): GB per month} of the billed (cross-site) traffic.
        tables: {egress table key: the table}.
        egress_usd: egress over the horizon, USD: each table's monthly volume priced band by band
            (:func:`fleetplan.costmodels.prices.egress_cost_usd`), scaled from a month to the horizon.
        month_factor: month hours / horizon hours (horizon volume × this = monthly volume).
    """

    gb: dict[tuple[RouteKey, str], float]
    monthly_gb: dict[tuple[str, str, str], float]
    tables: dict[tuple[str, str, str], EgressTable]
    egress_usd: float
    month_factor: float = 1.0

    def table_usd(self, key: tuple[str, str, str]) -> float:
        """Egress over the horizon billed by table ``key``, USD."""
        return egress_cost_usd(self.monthly_gb[key], self.tables[key]) / self.month_factor


def kv_traffic(problem: Problem, plan: Plan) -> KvTraffic:
    """The KV and prompt GB of ``plan``'s KV flows and their egress (:class:`KvTraffic`).

    GB per route = Σ_w flow[w] × window seconds × bytes per request / 1e9. A month is DAYS_PER_MONTH days (the
    ledger's convention); the horizon's volume is scaled to a month (× month hours / horizon hours), priced per
    table as the clouds bill (all of a table's traffic in one monthly volume), and scaled back.
    Raises InputError (from egress_cost_usd) when a monthly volume is above the table's last priced band.
    """
    routes = problem.kv_route_by_key
    month_factor = DAYS_PER_MONTH * HOURS_PER_DAY / problem.horizon_hours
    gb: dict[tuple[RouteKey, str], float] = {}
    monthly: dict[tuple[str, str, str], float] = {}
    tables: dict[tuple[str, str, str], EgressTable] = {}
    for rkey, flows in plan.kv_flows_req_per_s.items():
        r = routes[rkey]
        reqs = sum(flows) * problem.window_length_s
        for kind, nbytes, table in (("kv", r.kv_bytes_per_request, r.kv_table),
                                    ("prompt", r.prompt_bytes_per_request, r.prompt_table)):
            gb[(rkey, kind)] = gb.get((rkey, kind), 0.0) + reqs * nbytes / 1e9
            if table is not None:
                tk = table_key(table)
                tables[tk] = table
                monthly[tk] = monthly.get(tk, 0.0) + reqs * nbytes / 1e9 * month_factor
    usd = sum(egress_cost_usd(v, tables[k]) for k, v in monthly.items()) / month_factor
    return KvTraffic(gb=gb, monthly_gb=monthly, tables=tables, egress_usd=usd, month_factor=month_factor)


def route(problem: Problem, plan: Plan) -> dict[str, tuple[float, ...]]:
    """Egress USD per model per window when each window's demand is served at its origin first, then at the other
    sites in order of increasing egress rate (optimal for one origin: every unit away costs that site's rate)."""
    caps = site_capacity(problem, plan)
    served = plan.served_req_per_s(problem)
    out: dict[str, tuple[float, ...]] = {}
    for m in problem.models:
        usd = []
        for w, d in enumerate(served[m.name]):
            left = d
            cost = 0.0
            sites = sorted(caps[m.name][w].items(),
                           key=lambda kv: (kv[0] != m.origin_site, problem.egress_rate(m.origin_site, kv[0])))
            for site, c in sites:
                take = min(left, c)
                if take <= 0:
                    break
                cost += take * problem.egress_usd_per_req_per_s_window(m, site)
                left -= take
            usd.append(cost)
        out[m.name] = tuple(usd)
    return out


@dataclass
class _Tally:
    """Running sums of :func:`evaluate`: USD of GPU-hours and starts, provisioned and busy GPUs per window, busy GPUs
    per pool and window."""

    n_windows: int
    gpu_usd: float = 0.0
    start_usd: float = 0.0
    gpus: list[int] = field(default_factory=list)
    busy: list[float] = field(default_factory=list)
    busy_pool: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.gpus = [0] * self.n_windows
        self.busy = [0.0] * self.n_windows

    def add_busy(self, w: int, share: float, pool_gpus: dict[str, list[float]]) -> None:
        """``share`` of the GPUs ``pool_gpus`` ({pool: GPUs per window}) busy in window ``w``."""
        for pid, g in pool_gpus.items():
            self.busy_pool.setdefault(pid, [0.0] * self.n_windows)[w] += share * g[w]


def _tally_dedicated(problem: Problem, plan: Plan, t: _Tally) -> tuple[dict[str, list[float]], dict[str, list[float]],
                                                                      dict[str, dict[str, list[float]]]]:
    """Add the dedicated replicas' GPU-hours, GPUs and starts to ``t``; return per model (capacity req/s, GPUs,
    {pool: GPUs}) per window."""
    pools, opts, W, hours = problem.pool_by_id, problem.option_by_key, problem.n_windows, problem.window_hours
    ded_cap = {m.name: [0.0] * W for m in problem.models}
    ded_gpus = {m.name: [0.0] * W for m in problem.models}
    ded_pool_gpus: dict[str, dict[str, list[float]]] = {}  # model -> {pool: dedicated GPUs per window}
    for key, counts in plan.replicas.items():
        o = opts[key]
        price = pools[o.pool].usd_per_gpu_hour
        for w, n in enumerate(counts):
            t.gpu_usd += n * o.gpus * price * hours
            t.gpus[w] += n * o.gpus
            ded_cap[o.model][w] += n * o.capacity_req_per_s
            ded_gpus[o.model][w] += n * o.gpus
            ded_pool_gpus.setdefault(o.model, {}).setdefault(o.pool, [0.0] * W)[w] += n * o.gpus
        t.start_usd += starts(counts) * o.start_cost_usd
    return ded_cap, ded_gpus, ded_pool_gpus


def _tally_prefill_decode(problem: Problem, plan: Plan, t: _Tally) -> None:
    """Add the prefill and decode replicas' GPU-hours, GPUs, starts and busy GPUs to ``t``: a group of replicas
    (model, role, site, decode site) is busy in proportion to the KV flows it carries over its capacity."""
    pools, W, hours = problem.pool_by_id, problem.n_windows, problem.window_hours
    pd_opts = problem.pd_option_by_key
    pd_cap: dict[tuple, list[float]] = {}  # (model, role, site, decode site) -> capacity per window, req/s
    pd_gpus: dict[tuple, list[float]] = {}
    pd_pool_gpus: dict[tuple, dict[str, list[float]]] = {}  # group -> {pool: GPUs per window}
    for pkey, counts in plan.pd_replicas.items():
        o = pd_opts[pkey]
        price = pools[o.pool].usd_per_gpu_hour
        group = (o.model, o.role, pools[o.pool].site, o.decode_site)
        for w, n in enumerate(counts):
            t.gpu_usd += n * o.gpus * price * hours
            t.gpus[w] += n * o.gpus
            pd_cap.setdefault(group, [0.0] * W)[w] += n * o.capacity_req_per_s
            pd_gpus.setdefault(group, [0.0] * W)[w] += n * o.gpus
            pd_pool_gpus.setdefault(group, {}).setdefault(o.pool, [0.0] * W)[w] += n * o.gpus
        t.start_usd += starts(counts) * o.start_cost_usd
    for group, gcaps in pd_cap.items():
        mname, role, site, dsite = group
        for w in range(W):
            load = sum(f[w] for (m, ps, ds), f in plan.kv_flows_req_per_s.items()
                       if m == mname and ((role == "prefill" and ps == site and ds == dsite)
                                          or (role == "decode" and ds == site)))
            if gcaps[w] > 0:
                t.busy[w] += min(1.0, load / gcaps[w]) * pd_gpus[group][w]
                t.add_busy(w, min(1.0, load / gcaps[w]), pd_pool_gpus[group])


def _tally_shared(problem: Problem, plan: Plan, t: _Tally) -> dict[str, list[float]]:
    """Add the shared GPUs (on in every window) and their busy shares (served / capacity per resident) to ``t``;
    return per model the rate its shared GPUs serve per window, req/s."""
    pools, shares, W, hours = problem.pool_by_id, problem.share_by_key, problem.n_windows, problem.window_hours
    shared_served = {m.name: [0.0] * W for m in problem.models}
    for g in plan.shared:
        price = pools[g.pool].usd_per_gpu_hour
        t.gpu_usd += price * hours * W
        for w in range(W):
            t.gpus[w] += 1
        for mname, served in g.served_req_per_s.items():
            cap = shares[(mname, g.pool)].capacity_req_per_s
            for w, f in enumerate(served):
                t.busy[w] += f / cap
                t.busy_pool.setdefault(g.pool, [0.0] * W)[w] += f / cap
                shared_served[mname][w] += f
    return shared_served


def _served_away(problem: Problem, served_demand: dict[str, tuple[float, ...]],
                 caps: dict[str, list[dict[str, float]]]) -> dict[str, tuple[float, ...]]:
    """Per model and window the served rate beyond its origin site's capacity (all of it served away), req/s."""
    away = {}
    for m in problem.models:
        rows = []
        for w, d in enumerate(served_demand[m.name]):
            at_origin = caps[m.name][w].get(m.origin_site, 0.0) if m.origin_site else d
            rows.append(max(0.0, d - at_origin))
        away[m.name] = tuple(rows)
    return away


def evaluate(problem: Problem, plan: Plan) -> Evaluation:
    """Cost and utilization of ``plan`` on ``problem`` (plain Python; no solver).

    GPU cost = GPU-hours × the pool's $/GPU-hour (shared GPUs are on in every window), plus for each committed
    pool its commitment (:func:`commitments`) × its committed rate × the horizon's hours; start cost = replica starts
    (cyclic, see :func:`starts`) × the option's start cost; egress = rate served away from the origin × window
    length × request bytes × the route's $/GB. Utilization per window = busy GPUs / provisioned GPUs, where a
    dedicated replica set is busy in proportion to the share of its capacity the model needs after its shared GPUs,
    and a shared GPU in proportion to sum(served / capacity) over its models.
    """
    pools = problem.pool_by_id
    W = problem.n_windows
    t = _Tally(W)
    ded_cap, ded_gpus, ded_pool_gpus = _tally_dedicated(problem, plan, t)
    _tally_prefill_decode(problem, plan, t)
    shared_served = _tally_shared(problem, plan, t)
    served_demand = plan.served_req_per_s(problem)
    for (mname, _ps, _ds), flows in plan.kv_flows_req_per_s.items():
        for w, f in enumerate(flows):
            shared_served[mname][w] += f  # demand served disaggregated does not load the colocated replicas
    for m in problem.models:
        for w, d in enumerate(served_demand[m.name]):
            need = max(0.0, d - shared_served[m.name][w])
            if ded_cap[m.name][w] > 0:
                t.busy[w] += min(1.0, need / ded_cap[m.name][w]) * ded_gpus[m.name][w]
                t.add_busy(w, min(1.0, need / ded_cap[m.name][w]), ded_pool_gpus.get(m.name, {}))
    committed_usd = sum(c * pools[pid].committed_usd_per_gpu_hour * problem.horizon_hours
                        for pid, c in commitments(problem, plan).items())
    t.gpu_usd += committed_usd
    egress = route(problem, plan)
    kv = kv_traffic(problem, plan).egress_usd if plan.kv_flows_req_per_s else 0.0
    egress_usd = sum(sum(v) for v in egress.values()) + kv
    caps = site_capacity(problem, plan)
    cap_total = {m: tuple(sum(d.values()) for d in per_w) for m, per_w in caps.items()}
    util = tuple(t.busy[w] / t.gpus[w] if t.gpus[w] else 0.0 for w in range(W))
    return Evaluation(gpu_usd=t.gpu_usd, start_usd=t.start_usd, egress_usd=egress_usd,
                      gpu_hours=sum(t.gpus) * problem.window_hours, gpus_per_window=tuple(t.gpus),
                      utilization_per_window=util, capacity_req_per_s=cap_total,
                      served_away_req_per_s=_served_away(problem, served_demand, caps), kv_egress_usd=kv,
                      committed_usd=committed_usd,
                      busy_gpus_by_pool={pid: tuple(b) for pid, b in t.busy_pool.items()})
