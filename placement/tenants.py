"""Multi-tenant allocation of a shared GPU pool: records, objectives and an independent checker.

Notation (used by the solvers in ``fleetplan.solvers.tenants_milp`` / ``tenants_cpsat`` and by this module):

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
from pathlib import Path

from fleetplan.costmodels.capacity import replica_capacity
from fleetplan.costmodels.interference import InterferenceTable
from fleetplan.datasets import catalog
from fleetplan.datasets.calibration import load_calibration
from fleetplan.datasets.catalog import get_gpu, get_model, load_gpu_specs, load_models, resolve_name
from fleetplan.datasets.sharing import load_interference
from fleetplan.datasets.shipped import shipped_scenario_text
from fleetplan.errors import FleetplanError, InfeasibleError, InputError, UnknownNameError, check_range
from fleetplan.fileio import parse_yaml, read_text_file, validate_input
from fleetplan.placement.scenario import token_mix_from_spec
from fleetplan.placement.schemas import (
    DEFAULT_TP_DEGREES,
    ENTRY_LABELS,
    SLOSpec,
    TenantEntry,
    TenantModels,
    TenantsFile,
    TokenMixSpec,
)
from fleetplan.placement.status import Status

#: The three objectives, with their optimisation sense (+1 maximize, -1 minimize).
OBJECTIVE_SENSE: dict[str, int] = {"utilization": 1, "isolation": -1, "sla": -1}


class AllocationError(FleetplanError):
    """An allocation breaks a rule of its problem (capacity, burst, guarantee, GPU type, margin)."""


# ----------------------------------------------------------------------------------------------------- records


def _gpu_names() -> set[str]:
    """Known GPU type names (the shipped catalog)."""
    return set(catalog.load_gpus())


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
        gpus: fractional GPUs per window, rate / replica_req_per_s × tp.
    """

    model: str
    gpu: str
    tp: int
    replica_req_per_s: float
    rates_req_per_s: tuple[float, ...]
    gpus: tuple[float, ...]


#: Tensor-parallel degrees tried when a model entry gives no ``tp`` list.
DEFAULT_TPS = DEFAULT_TP_DEGREES


def demand_from_models(tenant: str, models: object, gpu: str, node_gpus: int, *, slo: object = None,
                       token_mix: object = None, source: str = "scenario", row: int | None = None
                       ) -> tuple[tuple[int, ...], tuple[ModelDemand, ...]]:
    """GPUs a tenant needs per window, derived from its models' request rates through the cost models.

    Args:
        tenant: tenant name (for messages).
        models: list of mappings with keys ``name`` (catalog model, aliases accepted), ``rates_req_per_s`` (one
            rate ≥ 0 per window, req/s), optional ``token_mix`` ({trace: azure-conv} or the four token statistics,
            as in the planner's scenarios), ``slo`` ({ttft_p95_s, tpot_p95_s}, seconds) and ``tp`` (degrees to
            try, default 1, 2, 4, 8).
        gpu: the tenant's GPU type (catalog name); node_gpus: GPUs per node of that type (tp must divide it).
        slo, token_mix: tenant-level defaults for models that do not give their own.
        source, row: where the entry came from (for messages).

    Method: for each model and each tp option, one replica's capacity cap(tp) under the SLO comes from
    ``fleetplan.costmodels.capacity.replica_capacity(model, gpu, mix, SLO(...), tp=tp)`` (bf16 weights and KV, 90%
    of GPU memory usable: that function's defaults). The option with the most req/s per GPU, cap(tp) / tp, is
    kept (ties: the smaller tp). The model then needs rate / cap × tp GPUs in a window (fractional: replicas are
    not rounded per model, since the allocation hands out GPUs, not replicas); the tenant's demand is the sum over
    its models, rounded UP to whole GPUs per window (GPUs are allocated whole, and rounding down would leave part
    of the traffic without capacity).

    Returns (demand in whole GPUs per window, one :class:`ModelDemand` per model).

    ``models``, ``slo`` and ``token_mix`` are checked by the models of ``fleetplan.placement.schemas``
    (:data:`~fleetplan.placement.schemas.TenantModels`, ``SLOSpec``, ``TokenMixSpec``; checked instances pass as they
    are). Raises InputError naming the tenant, the model and the field, with the fix, for: no models, an unknown key
    ("did you mean"), an unknown model (UnknownNameError with "did you mean"), a negative or missing rate, rate lists
    of different lengths, an SLO in milliseconds or out of range, a missing or bad token mix, and a model that fits
    no tp on the GPU type (the cost model's reason for each tp is given).
    """

    def err(msg: str, fld: str, value: object = None) -> InputError:
        return InputError(f"tenant {tenant}: {msg}", source=source, row=row, field=fld, value=value)

    where = f"{source}{f', row {row}' if row is not None else ''}"
    context = f"tenant {tenant}"
    specs = validate_input(TenantModels, models, source=where, prefix="models", context=context, labels=ENTRY_LABELS)
    slo_default = validate_input(SLOSpec | None, slo, source=where, prefix="slo", context=context,
                                 labels=ENTRY_LABELS)
    mix_default = validate_input(TokenMixSpec | None, token_mix, source=where, prefix="token_mix", context=context,
                                 labels=ENTRY_LABELS)
    gpu_rec = get_gpu(gpu)
    out: list[ModelDemand] = []
    for j, m in enumerate(specs):
        f = f"models[{j}]"
        try:
            model = get_model(m.name)
        except UnknownNameError as exc:
            raise UnknownNameError("model", m.name, _known_models() + list(exc.suggestions),
                                   source=f"{where}, tenant {tenant}", field=f"{f}.name") from exc
        who = f"model {model.name}"
        rates = m.rates_req_per_s
        if out and len(rates) != len(out[0].rates_req_per_s):
            raise err(f"{who} gives {len(rates)} rates but {out[0].model} gives {len(out[0].rates_req_per_s)}; "
                      "give one rate per window for every model", f"{f}.rates_req_per_s")
        spec = m.slo if m.slo is not None else slo_default
        if spec is None:
            raise err(f"{who} needs slo: {{ttft_p95_s, tpot_p95_s}} in seconds (on the model or the tenant)",
                      f"{f}.slo")
        target = spec.to_slo()
        try:
            mix = token_mix_from_spec(m.token_mix if m.token_mix is not None else mix_default,
                                      f"{where}: tenant {tenant}, {who}")
        except UnknownNameError as exc:  # an unknown trace name: say whose token mix it is
            raise err(f"{who}: token_mix: {exc}", f"{f}.token_mix", exc.name) from None
        tps = m.tp_degrees
        why: list[str] = [f"tp {t}: larger than or not dividing the {node_gpus}-GPU node"
                          for t in tps if t > node_gpus or node_gpus % t]
        best: tuple[float, int, float] | None = None  # (req/s per GPU, tp, req/s per replica)
        for t in sorted(t for t in set(tps) if t <= node_gpus and node_gpus % t == 0):
            cap = replica_capacity(model, gpu_rec, mix, target, tp=t, calib=load_calibration(gpu_rec))
            if cap.req_per_s <= 0:
                why.append(f"tp {t}: {cap.reason or cap.limiting}")
            elif best is None or cap.req_per_s / t > best[0] + 1e-12:
                best = (cap.req_per_s / t, t, cap.req_per_s)
        if best is None:
            raise err(f"{who} fits no tensor-parallel degree on {gpu} nodes of {node_gpus} GPUs under its SLO "
                      f"({target.label()}): " + "; ".join(why)
                      + ". Give the tenant a GPU type with more memory or larger nodes, a larger tp, a smaller "
                      "model or a looser SLO", f"{f}.name", model.name)
        _, tp, cap_rps = best
        rs = tuple(float(r) for r in rates)
        out.append(ModelDemand(model.name, gpu, tp, cap_rps, rs, tuple(r / cap_rps * tp for r in rs)))
    total = [sum(md.gpus[w] for md in out) for w in range(len(out[0].gpus))]
    # Rounded up to whole GPUs per window (1e-9 absorbs float noise such as 3.0000000000000004).
    return tuple(math.ceil(g - 1e-9) for g in total), tuple(out)


def _known_models() -> list[str]:

    return list(load_models())


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


def _canonical_gpu(name: str, source: str) -> str:
    """The catalog's name for GPU ``name`` (aliases such as 'H100' or 'A100-80GB' resolved); UnknownNameError
    with "did you mean" otherwise."""
    try:
        return resolve_name("gpu", str(name), load_gpu_specs())
    except UnknownNameError as exc:
        raise UnknownNameError("GPU type", str(name), exc_known(exc), source=source, field="gpu") from None


def exc_known(exc: UnknownNameError) -> list[str]:
    """The names an UnknownNameError was raised against (its suggestions, else the catalog's names)."""
    return list(exc.suggestions) or sorted(_gpu_names())


def problem_from_dict(data: Mapping, *, source: str = "scenario") -> TenantProblem:
    """Build a :class:`TenantProblem` from a scenario mapping (the YAML layout of
    ``datasets/scenarios/tenants_default.yaml``): keys ``name``, ``window_s``, ``interference`` (optional CSV path),
    ``pool`` (list of {name, gpu, gpus_per_node, count, site}) and ``tenants`` (list of {name, quota_gpus,
    burst_gpus, weight, sla_target, interference_class, gpu_types, demand_gpus}).

    Instead of ``demand_gpus`` a tenant may give ``models`` (list of {name, rates_req_per_s, token_mix, slo, tp}),
    with optional tenant-level ``slo`` and ``token_mix`` used by models that give none: its demand is then derived
    through the cost models by :func:`demand_from_models` on its GPU type (``gpu_types`` must name exactly one
    type, or the pool has only one) and rounded up to whole GPUs per window.

    The mapping is checked by :class:`~fleetplan.placement.schemas.TenantsFile` (keys, types, ranges; its JSON
    Schema: ``fleetplan schema tenants``); GPU and model names are then resolved through the catalogs.
    Raises InputError / UnknownNameError naming the entry and field.
    """
    if not isinstance(data, Mapping):
        raise InputError("the scenario must be a mapping with 'pool' and 'tenants'", source=source)
    spec = validate_input(TenantsFile, dict(data), source=source, labels=ENTRY_LABELS)
    nodes: list[Node] = []
    for p in spec.pool:
        gpu = _canonical_gpu(p.gpu, source)
        for k in range(p.count):
            nm = f"{p.name}-{k}" if p.count > 1 else p.name
            nodes.append(Node(nm, gpu, p.gpus_per_node, p.site))
    tenants: list[Tenant] = []
    for i, t in enumerate(spec.tenants, start=1):
        types = tuple(_canonical_gpu(g, source) for g in t.gpu_types)
        derived: tuple[ModelDemand, ...] = ()
        if t.models is not None:
            d, derived = _derived_demand(t, types, nodes, source, i)
        else:
            d = tuple(t.demand_gpus or ())
        try:
            tenants.append(Tenant(
                name=t.name, quota_gpus=t.quota_gpus,
                burst_gpus=t.burst_gpus if t.burst_gpus is not None else t.quota_gpus, weight=t.weight,
                demand_gpus=tuple(d), sla_target=t.sla_target, interference_class=t.interference_class,
                gpu_types=types, models=derived))
        except InputError as exc:
            msg = str(exc).removeprefix(f"field '{exc.field}': ") if exc.field else str(exc)
            raise InputError(f"tenant {t.name}: {msg}", source=source,
                             field=f"tenants[{i - 1}]" + (f".{exc.field}" if exc.field else ""),
                             value=exc.value) from None
    interference = load_interference(spec.interference)
    return TenantProblem(tuple(nodes), tuple(tenants), interference, window_s=spec.window_s, name=spec.name)


def _derived_demand(t: TenantEntry, types: tuple[str, ...], nodes: list[Node], source: str, row: int
                    ) -> tuple[tuple[int, ...], tuple[ModelDemand, ...]]:
    """Demand of a scenario tenant that gives ``models``: its one GPU type, that type's node size, then
    :func:`demand_from_models`."""
    name = t.name
    pool_types = sorted({n.gpu for n in nodes})
    if len(types) == 1:
        gpu = types[0]
    elif not types and len(pool_types) == 1:
        gpu = pool_types[0]
    else:
        raise InputError(f"tenant {name} derives its demand from models, so it needs gpu_types with exactly one GPU "
                         f"type of the pool (the GPUs needed depend on the type), e.g. gpu_types: [{pool_types[0]}]",
                         source=source, row=row, field="gpu_types", value=list(types))
    if gpu not in pool_types:
        raise UnknownNameError("GPU type in the pool", gpu, pool_types,
                               source=f"{source}, row {row}, tenant {name}", field="gpu_types")
    node_gpus = min(n.gpus for n in nodes if n.gpu == gpu)
    return demand_from_models(name, t.models, gpu, node_gpus, slo=t.slo, token_mix=t.token_mix, source=source,
                              row=row)


def load_tenants(path: str | Path | None = None) -> tuple[TenantProblem, dict]:
    """Read a scenario YAML (the shipped ``tenants_default.yaml`` if no path).

    Returns (problem, options) where options holds the optional keys 'weights', 'order', 'tolerance'.
    Raises InputError for a missing, binary or malformed file (a key given twice in one mapping included).
    """
    if path is None:
        text, src = shipped_scenario_text("tenants_default.yaml"), "tenants_default.yaml"
    else:
        p = Path(path)
        if not p.exists():
            raise InputError(f"scenario file {p} does not exist", source=str(p))
        text, src = read_text_file(p, what="tenants YAML file"), str(p)
    data = parse_yaml(text, source=src)
    problem = problem_from_dict(data, source=src)
    opts = {k: data[k] for k in ("weights", "order", "tolerance") if k in data}
    return problem, opts


# ------------------------------------------------------------------------------------------------ allocations


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


def validate_allocation(problem: TenantProblem, allocation: Allocation, *, check_guarantees: bool = True
                        ) -> Objectives:
    """Re-check ``allocation`` against ``problem`` with no solver; return its :class:`Objectives`.

    Rules: known tenant, node and window; whole GPUs > 0; per node and window Σ GPUs ≤ G_n; the tenant runs on
    the node's GPU type; per tenant and window Σ GPUs ≤ min(burst, ceil(demand)); if ``allocation.margin``, every
    shared node stays within G_n (1 − s); if ``check_guarantees``, each tenant's delivered GPUs (allocated GPUs
    when ``allocation.margin`` is False) reach its guarantee min(quota, demand) in every window.

    Raises AllocationError listing up to 10 violations.
    """
    tenants = {t.name: t for t in problem.tenants}
    nodes = {n.name: n for n in problem.nodes}
    W = problem.n_windows
    bad: list[str] = []
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
    obj = evaluate_allocation(problem, allocation)
    if check_guarantees and not bad:
        # With a margin the guarantee must be delivered; without one (no headroom promised) it must be allocated.
        got = _delivered(problem, allocation) if allocation.margin else {k: float(v) for k, v in per_tenant.items()}
        for tenant in problem.tenants:
            for w in range(W):
                short = tenant.guaranteed(w) - got.get((tenant.name, w), 0.0)
                if short > 1e-6:
                    bad.append(f"{tenant.name} window {w}: guarantee {tenant.guaranteed(w):g} GPUs, delivered "
                               f"{got.get((tenant.name, w), 0.0):.2f}")
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
