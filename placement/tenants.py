"""Multi-tenant allocation of a shared GPU pool: records, objectives and an independent checker.

Notation (used by the solvers in ``fleetplan.solvers.tenants.milp`` / ``tenants.cpsat`` and by this module):

- nodes n with ``gpus`` G_n of one GPU type; tenants t; windows w = 0..W-1 (``window_s`` seconds each).
- decision: x[t, w, n] = whole GPUs tenant t holds on node n in window w (an :class:`Allocation`).
- served[t, w] = min(demand[t, w], delivered GPUs), where delivered GPUs count the interference loss (below).
- guaranteed[t, w] = min(quota_gpus[t], demand[t, w]): the part of the demand the tenant's quota guarantees.

Interference. Each tenant has an interference class; an :class:`InterferenceTable` gives, per pair of classes, the
fraction of throughput lost when the two share a node (shipped defaults with sources in
``datasets/data/interference``). On a node shared by two or more tenants in a window, the node's coefficient
s[n, w] is the largest pair coefficient among its tenants (the worst neighbour pair). Its interference-adjusted
capacity is G_n × (1 − s[n, w]); an interference-aware allocation keeps the GPUs it hands out on that node within
that capacity (the reserved headroom G_n × s[n, w] is the margin). An allocation that overfills a shared node (the
baselines do not reserve headroom) delivers only ``adjusted capacity / allocated`` of each allocated GPU.

Objectives (:class:`Objectives`), all summed over windows:

- utilization = Σ served / Σ_n,w G_n (maximize);
- isolation = Σ_{n,w shared} s[n, w], i.e. the shared node-windows weighted by their pair coefficient (minimize);
- sla = Σ weight_t × max(0, sla_target_t × demand[t, w] − served[t, w]) in GPU-windows (minimize); the report also
  gives the unmet guaranteed demand and each tenant's attainment (served / demand) against its SLA target.

Errors: bad records raise :class:`~fleetplan.errors.InputError` naming the field; an allocation that breaks a rule
raises :class:`AllocationError` from :func:`validate_allocation`; a guarantee set the pool cannot meet raises
:class:`~fleetplan.errors.InfeasibleError` from :func:`explain_guarantees` naming the tenants and shortfalls.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from fleetplan.costmodels.interference import InterferenceTable
from fleetplan.datasets.catalog.gpus import load_gpus
from fleetplan.errors import FleetplanError, InfeasibleError, InputError, UnknownNameError, check_range
from fleetplan.placement.status import Status

#: The three objectives, with their optimisation sense (+1 maximize, -1 minimize).
OBJECTIVE_SENSE: dict[str, int] = {"utilization": 1, "isolation": -1, "sla": -1}


class AllocationError(FleetplanError):
    """An allocation breaks a rule of its problem (capacity, burst, guarantee, GPU type, margin)."""


def known_gpu_names() -> set[str]:
    """Known GPU type names (the shipped catalog)."""
    return set(load_gpus())


@dataclass(frozen=True)
class Node:
    """One node of the pool.

    Attributes:
        name: unique node name.
        gpu: GPU type, a catalog name (e.g. 'H100-SXM-80GB').
        gpus: GPUs in the node (1..64).
        site: where it runs (free text, e.g. 'us-east-1'); informational.
    """

    name: str
    gpu: str
    gpus: int
    site: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            raise InputError("node name is empty; give each node a name", field="name", value=self.name)
        if not isinstance(self.gpus, int) or isinstance(self.gpus, bool) or not 1 <= self.gpus <= 64:
            raise InputError(f"node {self.name}: gpus must be an integer 1..64, got {self.gpus!r}", field="gpus",
                             value=self.gpus)


@dataclass(frozen=True)
class ModelDemand:
    """One model's share of a tenant's demand, derived through the cost models (:func:`demand_from_models`).

    Attributes:
        model: catalog model name.
        gpu: GPU type the capacity was computed on.
        tp: tensor-parallel degree used: the option with the most req/s per GPU.
        replica_req_per_s: req/s one replica on ``tp`` GPUs sustains under the SLO
            (``fleetplan.costmodels.capacity.replica_capacity``).
        rates_req_per_s: request rate per window, req/s.
        gpus: GPUs per window: rate / replica_req_per_s at tp 1 (a replica may run on a GPU slice), whole replicas
            × tp at tp ≥ 2 (:func:`fleetplan.scenario.tenants.model_gpus`).
    """

    model: str
    gpu: str
    tp: int
    replica_req_per_s: float
    rates_req_per_s: tuple[float, ...]
    gpus: tuple[float, ...]


@dataclass(frozen=True)
class Tenant:
    """One team sharing the pool.

    Attributes:
        name: unique tenant name.
        quota_gpus: guaranteed GPUs: in each window the tenant gets min(quota_gpus, demand) GPUs.
        burst_gpus: most GPUs the tenant may hold in a window (≥ quota_gpus).
        weight: priority weight (> 0): scales its SLA shortfall and its share of lent idle capacity.
        demand_gpus: GPUs wanted in each window (one value per window, ≥ 0, may be fractional).
        sla_target: share of demand that must be served (0 < sla_target ≤ 1).
        interference_class: a class of the interference table (e.g. 'interactive', 'batch').
        gpu_types: GPU types the tenant can run on; empty means any.
        models: when the demand was derived from models and request rates (:func:`demand_from_models`), how each
            model contributes; empty when demand_gpus was given directly. Informational (not compared).
        replica_tp: GPUs per replica of what a tenant that gives demand_gpus serves (its ``replay`` model's tp;
            1 when it names none): at tp ≥ 2 its demand runs on whole GPUs, never on a MIG or MPS slice
            (``fleetplan.solvers.tenants.slicing.whole_gpus``). A tenant with ``models`` has each model's tp there.
        demand_note: how the demand was changed from what the file gave, for the output ('' when it was not):
            ``fleetplan.scenario.tenants`` rounds a tp ≥ 2 replay tenant's demand_gpus up to whole replicas.
            Informational (not compared).
    """

    name: str
    quota_gpus: int
    burst_gpus: int
    weight: float
    demand_gpus: tuple[float, ...]
    sla_target: float
    interference_class: str
    gpu_types: tuple[str, ...] = ()
    models: tuple[ModelDemand, ...] = field(default=(), compare=False)
    replica_tp: int = 1
    demand_note: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.name:
            raise InputError("tenant name is empty", field="name", value=self.name)
        src = f"tenant {self.name}"
        for f in ("quota_gpus", "burst_gpus"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0 or v > 100_000:
                raise InputError(f"{src}: {f} must be a whole number of GPUs 0..100000, got {v!r}", field=f,
                                 value=v)
        if self.burst_gpus < self.quota_gpus:
            raise InputError(f"{src}: burst_gpus {self.burst_gpus} is below quota_gpus {self.quota_gpus}; the burst "
                             "limit must be at least the guarantee", field="burst_gpus", value=self.burst_gpus)
        check_range(self.weight, field="weight", low=1e-6, high=1e6, source=src, fix="give a positive weight")
        check_range(self.sla_target, field="sla_target", low=1e-6, high=1.0, source=src,
                    fix="give the share of demand to serve, e.g. 0.99")
        if not self.demand_gpus:
            raise InputError(f"{src}: demand_gpus is empty; give one value per window", field="demand_gpus")
        for w, d in enumerate(self.demand_gpus):
            check_range(d, field=f"demand_gpus[{w}]", low=0, high=100_000, unit="GPUs", source=src,
                        fix="give GPUs wanted in that window")
        if not self.interference_class:
            raise InputError(f"{src}: interference_class is empty", field="interference_class")
        if not isinstance(self.replica_tp, int) or isinstance(self.replica_tp, bool) or not 1 <= self.replica_tp <= 64:
            raise InputError(f"{src}: replica_tp must be a whole number of GPUs 1..64, got {self.replica_tp!r}",
                             field="replica_tp", value=self.replica_tp)

    def guaranteed(self, w: int) -> float:
        """GPUs guaranteed in window ``w``: min(quota_gpus, demand_gpus[w])."""
        return min(float(self.quota_gpus), float(self.demand_gpus[w]))

    def wanted(self, w: int) -> int:
        """Most whole GPUs worth allocating in window ``w``: min(burst_gpus, ceil(demand))."""
        return min(self.burst_gpus, math.ceil(self.demand_gpus[w] - 1e-9))

    def runs_on(self, gpu: str) -> bool:
        """True if the tenant may use GPU type ``gpu``."""
        return not self.gpu_types or gpu in self.gpu_types


@dataclass(frozen=True)
class TenantProblem:
    """A pool, its tenants and the interference table.

    Attributes:
        nodes: the pool's nodes (unique names).
        tenants: the tenants (unique names, same number of windows each).
        interference: coefficients for every pair of the tenants' classes.
        window_s: window length in seconds (informational).
        name: scenario name.
    """

    nodes: tuple[Node, ...]
    tenants: tuple[Tenant, ...]
    interference: InterferenceTable
    window_s: float = 3600.0
    name: str = ""
    _coef: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.nodes:
            raise InputError("the pool has no nodes", field="nodes")
        if not self.tenants:
            raise InputError("there are no tenants", field="tenants")
        for kind, items in (("node", self.nodes), ("tenant", self.tenants)):
            seen: set[str] = set()
            for it in items:
                if it.name in seen:
                    raise InputError(f"{kind} name {it.name!r} appears twice; names must be unique", field="name",
                                     value=it.name)
                seen.add(it.name)
        n_w = {len(t.demand_gpus) for t in self.tenants}
        if len(n_w) != 1:
            raise InputError(f"tenants give different numbers of windows {sorted(n_w)}; give every tenant one "
                             "demand value per window", field="demand_gpus")
        check_range(self.window_s, field="window_s", low=1, high=86400, unit="s")
        gpu_types = {n.gpu for n in self.nodes}
        for t in self.tenants:
            for g in t.gpu_types:
                if g not in gpu_types:
                    raise UnknownNameError("GPU type in the pool", g, gpu_types, field=f"{t.name}.gpu_types")
        classes = sorted({t.interference_class for t in self.tenants})
        for i, a in enumerate(classes):
            for b in classes[i:]:
                self._coef[(a, b)] = self._coef[(b, a)] = self.interference.coefficient(a, b)

    @property
    def n_windows(self) -> int:
        return len(self.tenants[0].demand_gpus)

    @property
    def capacity_gpu_windows(self) -> int:
        """Σ_n G_n × windows: the denominator of utilization."""
        return sum(n.gpus for n in self.nodes) * self.n_windows

    def tenant(self, name: str) -> Tenant:
        for t in self.tenants:
            if t.name == name:
                return t
        raise UnknownNameError("tenant", name, [t.name for t in self.tenants])

    def pair_coefficient(self, a: Tenant, b: Tenant) -> float:
        """Interference coefficient of two tenants sharing a node (by their classes)."""
        return self._coef[(a.interference_class, b.interference_class)]

    def class_coefficient(self, a: str, b: str) -> float:
        return self._coef[(a, b)]

    def node_coefficient(self, tenants: Iterable[Tenant]) -> float:
        """s of a node holding ``tenants``: 0 if fewer than two, else the largest pair coefficient."""
        ts = list(tenants)
        best = 0.0
        for i, a in enumerate(ts):
            for b in ts[i + 1:]:
                best = max(best, self.pair_coefficient(a, b))
        return best


@dataclass(frozen=True)
class Allocation:
    """GPUs per (tenant, window, node): the answer of a policy.

    Attributes:
        policy: who produced it ('optimizer', 'static', 'fair-share', ...).
        gpus: {(tenant, window, node): GPUs > 0}.
        margin: True if the policy keeps shared nodes within their interference-adjusted capacity.
        status: solver status (HEURISTIC for rules).
        bound: best bound of the solver's objective (None for rules), gap: relative gap (None if unknown).
        solve_s: wall time of the solve, seconds.
    """

    policy: str
    gpus: Mapping[tuple[str, int, str], int]
    margin: bool = True
    status: Status = Status.HEURISTIC
    bound: float | None = None
    gap: float | None = None
    solve_s: float = 0.0

    def by_node(self, w: int) -> dict[str, dict[str, int]]:
        """{node: {tenant: GPUs}} in window ``w``."""
        out: dict[str, dict[str, int]] = {}
        for (t, ww, n), g in self.gpus.items():
            if ww == w and g:
                out.setdefault(n, {})[t] = g
        return out


@dataclass(frozen=True)
class Objectives:
    """Objective values of one allocation (see the module docstring for definitions).

    Attributes:
        utilization: Σ served / pool capacity (fraction).
        isolation: Σ over shared node-windows of the node coefficient.
        sla: weighted SLA shortfall, GPU-windows.
        shared_node_windows: count of (node, window) held by two or more tenants.
        unmet_guaranteed_gpu_windows: Σ max(0, guaranteed − served).
        interference_adjusted_capacity_gpu_windows: Σ_n,w G_n × (1 − s[n, w]).
        allocated_gpu_windows, served_gpu_windows: totals.
        attainment: {tenant: served / demand (1.0 where demand is 0)}.
        sla_met: {tenant: attainment ≥ sla_target (1e-9 tolerance)}.
    """

    utilization: float
    isolation: float
    sla: float
    shared_node_windows: int
    unmet_guaranteed_gpu_windows: float
    interference_adjusted_capacity_gpu_windows: float
    allocated_gpu_windows: int
    served_gpu_windows: float
    attainment: dict[str, float]
    sla_met: dict[str, bool]

    def value(self, name: str) -> float:
        """The named objective ('utilization', 'isolation', 'sla')."""
        return float(getattr(self, name))

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def evaluate_allocation(problem: TenantProblem, allocation: Allocation) -> Objectives:
    """Objective values of ``allocation``, computed in plain Python.

    On a node whose allocated GPUs exceed its interference-adjusted capacity G (1 − s), every allocated GPU
    delivers the fraction G (1 − s) / allocated (proportional sharing of the degraded node).
    """
    tenants = {t.name: t for t in problem.tenants}
    W = problem.n_windows
    delivered: dict[tuple[str, int], float] = {}
    allocated = 0
    isolation = 0.0
    shared = 0
    adj_cap = 0.0
    for w in range(W):
        by_node = allocation.by_node(w)
        for n in problem.nodes:
            held = by_node.get(n.name, {})
            s = problem.node_coefficient(tenants[t] for t in held)
            cap = n.gpus * (1.0 - s)
            adj_cap += cap
            tot = sum(held.values())
            allocated += tot
            if len(held) >= 2:
                shared += 1
                isolation += s
            factor = 1.0 if tot <= cap + 1e-9 else cap / tot
            for t, g in held.items():
                delivered[(t, w)] = delivered.get((t, w), 0.0) + g * factor
    served_total = 0.0
    sla = 0.0
    unmet_g = 0.0
    attainment: dict[str, float] = {}
    sla_met: dict[str, bool] = {}
    for tenant in problem.tenants:
        dem = sum(tenant.demand_gpus)
        srv_t = 0.0
        for w in range(W):
            srv = min(float(tenant.demand_gpus[w]), delivered.get((tenant.name, w), 0.0))
            srv_t += srv
            sla += tenant.weight * max(0.0, tenant.sla_target * tenant.demand_gpus[w] - srv)
            unmet_g += max(0.0, tenant.guaranteed(w) - srv)
        served_total += srv_t
        attainment[tenant.name] = srv_t / dem if dem > 0 else 1.0
        sla_met[tenant.name] = attainment[tenant.name] >= tenant.sla_target - 1e-9
    return Objectives(
        utilization=served_total / problem.capacity_gpu_windows, isolation=isolation, sla=sla,
        shared_node_windows=shared, unmet_guaranteed_gpu_windows=unmet_g,
        interference_adjusted_capacity_gpu_windows=adj_cap, allocated_gpu_windows=allocated,
        served_gpu_windows=served_total, attainment=attainment, sla_met=sla_met)


def _tally_cells(problem: TenantProblem, allocation: Allocation, bad: list[str]
                 ) -> tuple[dict[tuple[str, int], dict[str, int]], dict[tuple[str, int], int]]:
    """GPUs per (node, window) by tenant and per (tenant, window) of the allocation's well-formed cells; a cell
    with an unknown tenant, node or window or a GPU count that is not a whole number >= 0 is reported in ``bad``
    and left out, as is (reported, kept) a tenant holding GPUs of a type it does not run on."""
    tenants = {t.name: t for t in problem.tenants}
    nodes = {n.name: n for n in problem.nodes}
    W = problem.n_windows
    per_node: dict[tuple[str, int], dict[str, int]] = {}
    per_tenant: dict[tuple[str, int], int] = {}
    for (t, w, n), g in allocation.gpus.items():
        if t not in tenants:
            bad.append(f"unknown tenant {t!r}")
            continue
        if n not in nodes:
            bad.append(f"unknown node {n!r}")
            continue
        if not isinstance(w, int) or not 0 <= w < W:
            bad.append(f"window {w!r} outside 0..{W - 1}")
            continue
        if not isinstance(g, int) or isinstance(g, bool) or g < 0:
            bad.append(f"{t} on {n} in window {w}: {g!r} is not a whole number of GPUs")
            continue
        if g and not tenants[t].runs_on(nodes[n].gpu):
            bad.append(f"{t} holds {g} GPUs on {n} ({nodes[n].gpu}) but runs only on {', '.join(tenants[t].gpu_types)}")
        per_node.setdefault((n, w), {})[t] = per_node.get((n, w), {}).get(t, 0) + g
        per_tenant[(t, w)] = per_tenant.get((t, w), 0) + g
    return per_node, per_tenant


def _check_limits(problem: TenantProblem, allocation: Allocation, per_node: dict[tuple[str, int], dict[str, int]],
                  per_tenant: dict[tuple[str, int], int], bad: list[str]) -> None:
    """Report in ``bad`` every node and window over its GPUs (with a margin: a shared node over its
    interference-adjusted capacity) and every tenant and window over min(burst, ceil(demand))."""
    tenants = {t.name: t for t in problem.tenants}
    nodes = {n.name: n for n in problem.nodes}
    for (n, w), held in per_node.items():
        held = {t: g for t, g in held.items() if g}
        tot = sum(held.values())
        if tot > nodes[n].gpus:
            bad.append(f"node {n} window {w}: {tot} GPUs allocated, node has {nodes[n].gpus}")
        if allocation.margin and len(held) >= 2:
            s = problem.node_coefficient(tenants[t] for t in held)
            cap = nodes[n].gpus * (1 - s)
            if tot > cap + 1e-9:
                bad.append(f"node {n} window {w}: {tot} GPUs on a shared node exceed its interference-adjusted "
                           f"capacity {cap:.2f} (coefficient {s:.3f})")
    for (t, w), g in per_tenant.items():
        lim = tenants[t].wanted(w)
        if g > lim:
            bad.append(f"{t} window {w}: {g} GPUs exceed min(burst, ceil(demand)) = {lim}")


def _check_guarantees(problem: TenantProblem, allocation: Allocation, per_tenant: dict[tuple[str, int], int],
                      bad: list[str]) -> None:
    """Report in ``bad`` every tenant and window short of its guarantee min(quota, demand): with a margin the
    guarantee must be delivered; without one (no headroom promised) it must be allocated."""
    got = _delivered(problem, allocation) if allocation.margin else {k: float(v) for k, v in per_tenant.items()}
    for tenant in problem.tenants:
        for w in range(problem.n_windows):
            short = tenant.guaranteed(w) - got.get((tenant.name, w), 0.0)
            if short > 1e-6:
                bad.append(f"{tenant.name} window {w}: guarantee {tenant.guaranteed(w):g} GPUs, delivered "
                           f"{got.get((tenant.name, w), 0.0):.2f}")


def validate_allocation(problem: TenantProblem, allocation: Allocation, *, check_guarantees: bool = True
                        ) -> Objectives:
    """Re-check ``allocation`` against ``problem`` with no solver; return its :class:`Objectives`.

    Rules: known tenant, node and window; whole GPUs > 0; per node and window Σ GPUs ≤ G_n; the tenant runs on
    the node's GPU type; per tenant and window Σ GPUs ≤ min(burst, ceil(demand)); if ``allocation.margin``, every
    shared node stays within G_n (1 − s); if ``check_guarantees``, each tenant's delivered GPUs (allocated GPUs
    when ``allocation.margin`` is False) reach its guarantee min(quota, demand) in every window.

    Raises AllocationError listing up to 10 violations.
    """
    bad: list[str] = []
    per_node, per_tenant = _tally_cells(problem, allocation, bad)
    _check_limits(problem, allocation, per_node, per_tenant, bad)
    obj = evaluate_allocation(problem, allocation)
    if check_guarantees and not bad:
        _check_guarantees(problem, allocation, per_tenant, bad)
    if bad:
        more = f" (and {len(bad) - 10} more)" if len(bad) > 10 else ""
        raise AllocationError(f"allocation '{allocation.policy}' is invalid: " + "; ".join(bad[:10]) + more)
    return obj


def _delivered(problem: TenantProblem, allocation: Allocation) -> dict[tuple[str, int], float]:
    tenants = {t.name: t for t in problem.tenants}
    gpus = {n.name: n.gpus for n in problem.nodes}
    out: dict[tuple[str, int], float] = {}
    for w in range(problem.n_windows):
        for n, held in allocation.by_node(w).items():
            s = problem.node_coefficient(tenants[t] for t in held)
            cap = gpus[n] * (1 - s)
            tot = sum(held.values())
            f = 1.0 if tot <= cap + 1e-9 else cap / tot
            for t, g in held.items():
                out[(t, w)] = out.get((t, w), 0.0) + g * f
    return out


def quota_warning(problem: TenantProblem) -> str | None:
    """A warning when the tenants' quotas (guaranteed GPUs) add up to more than the pool's GPUs, else None.

    Not an error: a guarantee is min(quota, demand), so oversubscribed quotas hold while the tenants' demands peak
    at different times; but in a window where they all ask for their quota the pool cannot keep every promise
    (:func:`explain_guarantees` then names the window), so the user is told up front.
    """
    pool = sum(n.gpus for n in problem.nodes)
    quotas = {t.name: t.quota_gpus for t in problem.tenants}
    total = sum(quotas.values())
    if total <= pool:
        return None
    peak = max((sum(t.guaranteed(w) for t in problem.tenants) for w in range(problem.n_windows)), default=0.0)
    return (f"the tenants' quotas add up to {total:g} GPUs ({', '.join(f'{k} {v:g}' for k, v in quotas.items())}) "
            f"but the pool has {pool} GPUs: guarantees hold only while demands do not peak together (this "
            f"scenario's largest guaranteed total in a window is {peak:g} GPUs); lower quota_gpus or add nodes")


def explain_guarantees(problem: TenantProblem) -> None:
    """Raise InfeasibleError if the pool cannot hold every tenant's guarantee min(quota, demand) in some window.

    Exact for whole GPUs without interference headroom: a max-flow per window from tenants (guaranteed GPUs,
    rounded up) through the GPU types they run on to the pool's GPUs of each type (networkx). The message names
    the window and, filling guarantees by weight (highest first), whose quota cannot be met and by how many GPUs.
    """
    import networkx as nx

    by_type: dict[str, int] = {}
    for n in problem.nodes:
        by_type[n.gpu] = by_type.get(n.gpu, 0) + n.gpus
    problems: list[str] = []
    for w in range(problem.n_windows):
        need = {t.name: math.ceil(t.guaranteed(w) - 1e-9) for t in problem.tenants}
        total = sum(need.values())
        if total == 0:
            continue
        g: nx.DiGraph[str | tuple[str, str]] = nx.DiGraph()
        for t in problem.tenants:
            if need[t.name]:
                g.add_edge("src", ("t", t.name), capacity=need[t.name])
                for gt in by_type:
                    if t.runs_on(gt):
                        g.add_edge(("t", t.name), ("g", gt))
        for gt, cap in by_type.items():
            g.add_edge(("g", gt), "sink", capacity=cap)
        if "sink" not in g:
            g.add_node("sink")
        flow, fdict = nx.maximum_flow(g, "src", "sink")
        if flow >= total:
            continue
        # Greedy explanation: fill guarantees by weight, highest first, on the GPU types each may use.
        left = dict(by_type)
        short: list[str] = []
        for t in sorted(problem.tenants, key=lambda t: (-t.weight, t.name)):
            want = need[t.name]
            for gt in sorted(left, key=lambda k: -left[k]):
                if t.runs_on(gt):
                    take = min(want, left[gt])
                    left[gt] -= take
                    want -= take
            if want > 0:
                types = ", ".join(t.gpu_types) if t.gpu_types else "any GPU type"
                short.append(f"{t.name} (quota {t.quota_gpus}, guaranteed {need[t.name]} on {types}) is short by "
                             f"{want} GPUs")
        problems.append(f"window {w}: guarantees need {total} GPUs, at most {int(flow)} fit; " + "; ".join(short))
    if problems:
        more = f" (and {len(problems) - 3} more windows)" if len(problems) > 3 else ""
        raise InfeasibleError("the pool cannot honor every guaranteed quota: " + " | ".join(problems[:3]) + more
                              + ". Lower those quotas or add nodes.")


@dataclass
class SolveOutcome:
    """What one backend solve returns: status, GPUs, model objective values (Objectives units), bound and gap of
    the solved (maximized) scalar objective."""

    status: Status
    gpus: dict[tuple[str, int, str], int]
    values: dict[str, float]
    objective: float | None
    bound: float | None
    solve_s: float
