"""A tenants file (``fleetplan allocate``; the shipped ``datasets/scenarios/tenants_default.yaml``) into a
:class:`~fleetplan.placement.tenants.TenantProblem`: nodes of the pool, tenants with quota, burst, weight, SLA
target and interference class, and each tenant's demand per window, given in GPUs or derived from its models'
request rates through the cost models (:func:`demand_from_models`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fleetplan.costmodels.capacity import replica_capacity
from fleetplan.costmodels.demand import TokenMix
from fleetplan.costmodels.engine import EngineConfig, engine_or_default
from fleetplan.costmodels.hardware import GPU
from fleetplan.costmodels.slo import SLO
from fleetplan.datasets.calibration import load_calibration
from fleetplan.datasets.catalog.gpus import load_gpu_specs
from fleetplan.datasets.catalog.models import load_models
from fleetplan.datasets.catalog.names import get_gpu, get_model, resolve_name
from fleetplan.datasets.sharing import load_interference
from fleetplan.errors import InputError, UnknownNameError
from fleetplan.fileio import validate_input
from fleetplan.placement.tenants import ModelDemand, Node, Tenant, TenantProblem, known_gpu_names
from fleetplan.scenario.read import read_yaml_input, token_mix_from_spec
from fleetplan.scenario.schemas import (
    DEFAULT_TP_DEGREES,
    ENTRY_LABELS,
    SLOSpec,
    TenantEntry,
    TenantModels,
    TenantReplay,
    TenantsFile,
    TokenMixSpec,
)

#: Tensor-parallel degrees tried when a model entry gives no ``tp`` list.
DEFAULT_TPS = DEFAULT_TP_DEGREES


def tenant_engine(gpu: GPU) -> EngineConfig:
    """The serving engine a tenant model's replica is sized for on ``gpu`` and replayed with (a tenants file names
    no engine): the default engine (:data:`~fleetplan.costmodels.engine.DEFAULT_ENGINE`, vLLM V1) with vLLM's own
    defaults for the GPU (:func:`~fleetplan.costmodels.engine.engine_or_default`), what ``vllm serve`` runs."""
    return engine_or_default(None, gpu.memory_bytes / 2**30, gpu.name)


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
    of GPU memory usable: that function's defaults) on the engine of :func:`tenant_engine` (vLLM V1 with vLLM's
    defaults for the GPU). The option with the most req/s per GPU, cap(tp) / tp, is
    kept (ties: the smaller tp). The model then needs :func:`model_gpus` in a window: rate / cap GPUs at tp 1
    (fractional: a tp-1 replica may run on a GPU slice), ceil(rate / cap) × tp at tp ≥ 2 (a tp-2 replica needs
    its 2 GPUs at any rate); the tenant's demand is the sum over its models, rounded UP to whole GPUs per window
    (GPUs are allocated whole, and rounding down would leave part of the traffic without capacity).

    Returns (demand in whole GPUs per window, one :class:`ModelDemand` per model).

    ``models``, ``slo`` and ``token_mix`` are checked by the models of ``fleetplan.scenario.schemas``
    (:data:`~fleetplan.scenario.schemas.TenantModels`, ``SLOSpec``, ``TokenMixSpec``; checked instances pass as they
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
            cap = replica_capacity(model, gpu_rec, mix, target, tp=t, calib=load_calibration(gpu_rec),
                                   engine=tenant_engine(gpu_rec))
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
        out.append(ModelDemand(model.name, gpu, tp, cap_rps, rs, tuple(model_gpus(r, cap_rps, tp) for r in rs)))
    total = [sum(md.gpus[w] for md in out) for w in range(len(out[0].gpus))]
    # Rounded up to whole GPUs per window (1e-9 absorbs float noise such as 3.0000000000000004).
    return tuple(math.ceil(g - 1e-9) for g in total), tuple(out)


def model_gpus(rate_req_per_s: float, replica_req_per_s: float, tp: int) -> float:
    """GPUs a model needs for ``rate_req_per_s``: rate / replica req/s × tp at tp 1, where a replica can run on a
    slice of a GPU (MIG, MPS) or a share of one; whole replicas, ceil(rate / replica req/s) × tp, at tp ≥ 2, whose
    replica needs its tp GPUs however low the rate (a fraction of a tp-2 replica summed with another model's
    fraction rounded to 1 GPU, on which no tp-2 replica fits: its requests went unserved in the replay)."""
    need = rate_req_per_s / replica_req_per_s
    return need * tp if tp == 1 else math.ceil(need - 1e-9) * tp


def _whole_replicas(demand_gpus: tuple, tp: int, model: str) -> tuple[tuple, str]:
    """(demand_gpus rounded up to whole replicas of ``tp`` GPUs, a note saying which windows changed, '' when none)
    for a tenant that gives its demand in GPUs and replays ``model`` at tp ≥ 2: its replica needs its tp GPUs at any
    rate, as :func:`model_gpus` counts a tenant's models. A fresh user's tp-4 tenant asking 3 GPUs was allocated 3
    and shown 100% SLA attainment, and its replay dropped every request (no tp-4 replica fits on 3 GPUs)."""
    out = tuple(math.ceil(float(g) / tp - 1e-9) * tp for g in demand_gpus)
    changed = [f"window {w}: {g:g} -> {n}" for w, (g, n) in enumerate(zip(demand_gpus, out, strict=True))
               if abs(float(g) - n) > 1e-9]
    if not changed:
        return out, ""
    shown = ", ".join(changed[:6]) + (f" (and {len(changed) - 6} more windows)" if len(changed) > 6 else "")
    return out, f"demand_gpus rounded up to whole tp-{tp} replicas of {model}: {shown}"


def _known_models() -> list[str]:

    return list(load_models())


def _canonical_gpu(name: str, source: str) -> str:
    """The catalog's name for GPU ``name`` (aliases such as 'H100' or 'A100-80GB' resolved); UnknownNameError
    with "did you mean" otherwise."""
    try:
        return resolve_name("gpu", str(name), load_gpu_specs())
    except UnknownNameError as exc:
        raise UnknownNameError("GPU type", str(name), exc_known(exc), source=source, field="gpu") from None


def exc_known(exc: UnknownNameError) -> list[str]:
    """The names an UnknownNameError was raised against (its suggestions, else the catalog's names)."""
    return list(exc.suggestions) or sorted(known_gpu_names())


def problem_from_dict(data: Mapping, *, source: str = "scenario") -> TenantProblem:
    """Build a :class:`TenantProblem` from a scenario mapping (the YAML layout of
    ``datasets/scenarios/tenants_default.yaml``): keys ``name``, ``window_s``, ``interference`` (optional CSV path),
    ``pool`` (list of {name, gpu, gpus_per_node, count, site}) and ``tenants`` (list of {name, quota_gpus,
    burst_gpus, weight, sla_target, interference_class, gpu_types, demand_gpus}).

    Instead of ``demand_gpus`` a tenant may give ``models`` (list of {name, rates_req_per_s, token_mix, slo, tp}),
    with optional tenant-level ``slo`` and ``token_mix`` used by models that give none: its demand is then derived
    through the cost models by :func:`demand_from_models` on its GPU type (``gpu_types`` must name exactly one
    type, or the pool has only one) and rounded up to whole GPUs per window.

    The mapping is checked by :class:`~fleetplan.scenario.schemas.TenantsFile` (keys, types, ranges; its JSON
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
        note = ""
        if t.models is not None:
            d, derived = _derived_demand(t, types, nodes, source, i)
        else:
            d = tuple(t.demand_gpus or ())
            if t.replay is not None and t.replay.tp >= 2:
                d, note = _whole_replicas(d, t.replay.tp, t.replay.name)
        try:
            tenants.append(Tenant(
                name=t.name, quota_gpus=t.quota_gpus,
                burst_gpus=t.burst_gpus if t.burst_gpus is not None else t.quota_gpus, weight=t.weight,
                demand_gpus=tuple(d), sla_target=t.sla_target, interference_class=t.interference_class,
                gpu_types=types, models=derived, replica_tp=t.replay.tp if t.replay is not None else 1,
                demand_note=note))
        except InputError as exc:
            msg = exc.message.removeprefix(f"tenant {t.name}: ")  # the Tenant's own source already names it
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


def _read_tenants_file(path: str | Path | None) -> tuple[Mapping, str]:
    """The parsed mapping of a tenants YAML (the shipped ``tenants_default.yaml`` if no path) and its source name."""
    return read_yaml_input(path, "tenants_default.yaml", "tenants YAML file")


def load_tenants(path: str | Path | None = None) -> tuple[TenantProblem, dict]:
    """Read a scenario YAML (the shipped ``tenants_default.yaml`` if no path).

    Returns (problem, options) where options holds the optional keys 'weights', 'order', 'tolerance'.
    Raises InputError for a missing, binary or malformed file (a key given twice in one mapping included).
    """
    data, src = _read_tenants_file(path)
    problem = problem_from_dict(data, source=src)
    opts = {k: data[k] for k in ("weights", "order", "tolerance") if k in data}
    return problem, opts


@dataclass(frozen=True)
class TenantWorkload:
    """One model a tenant serves, as ``fleetplan allocate --verify`` replays it.

    Attributes:
        tenant: tenant name; model: catalog model name; gpu: the GPU type its capacity was computed on; tp: GPUs per
            replica.
        mix: token mix of its requests; slo: its latency targets (seconds).
        replica_req_per_s: req/s one replica sustains under the SLO on ``gpu``
            (``fleetplan.costmodels.capacity.replica_capacity``).
        rates_req_per_s: request rate per window, req/s: the tenant's own rates (``models``), or, for a tenant that
            gives ``demand_gpus`` and ``replay``, demand_gpus[w] / tp × replica_req_per_s (the rate its demand serves
            at the model's capacity per GPU, on the slowest GPU type the tenant runs on, so any of its types
            carries it).
    """

    tenant: str
    model: str
    gpu: str
    tp: int
    mix: TokenMix
    slo: SLO
    replica_req_per_s: float
    rates_req_per_s: tuple[float, ...]


def _replay_workload(problem: TenantProblem, t: TenantEntry, spec: TenantReplay, source: str) -> TenantWorkload:
    """The :class:`TenantWorkload` of a tenant that gives demand_gpus and ``replay`` (its first GPU type, or the
    pool's first when it names none)."""
    tenant = problem.tenant(t.name)
    where = f"{source}: tenant {t.name}, replay"
    slo_spec = spec.slo if spec.slo is not None else t.slo
    if slo_spec is None:
        raise InputError(f"tenant {t.name}: replay needs slo: {{ttft_p95_s, tpot_p95_s}} in seconds (on replay or "
                         "the tenant)", source=source, field="replay.slo")
    mix = token_mix_from_spec(spec.token_mix if spec.token_mix is not None else t.token_mix, where)
    model = get_model(spec.name)
    slo = slo_spec.to_slo()
    # Demand in GPUs of any type it runs on: the rate is what the slowest of them serves (met on every type).
    caps = []
    for gpu in sorted({n.gpu for n in problem.nodes if tenant.runs_on(n.gpu)}):
        gpu_rec = get_gpu(gpu)
        caps.append((replica_capacity(model, gpu_rec, mix, slo, tp=spec.tp, calib=load_calibration(gpu_rec),
                                      engine=tenant_engine(gpu_rec)), gpu))
    cap, gpu = min(caps, key=lambda c: c[0].req_per_s)
    if cap.req_per_s <= 0:
        raise InputError(f"tenant {t.name}: replay model {model.name} tp {spec.tp} serves nothing on {gpu} under its "
                         f"SLO ({cap.reason or cap.limiting}); give a larger tp, a smaller model or a looser SLO",
                         source=source, field="replay.name", value=spec.name)
    # The file's demand sets the load (3 GPUs of a tp-4 model: 0.75 of a replica's req/s); the problem's, rounded up
    # to whole replicas (_whole_replicas), is what it is allocated.
    rates = tuple(float(d) / spec.tp * cap.req_per_s for d in (t.demand_gpus or tenant.demand_gpus))
    return TenantWorkload(t.name, model.name, gpu, spec.tp, mix, slo, cap.req_per_s, rates)


def tenant_workloads(data: Mapping, problem: TenantProblem, *, source: str = "scenario"
                     ) -> dict[str, tuple[TenantWorkload, ...]]:
    """{tenant: the models it serves} of a tenants scenario mapping (the one :func:`problem_from_dict` read into
    ``problem``): a tenant with ``models`` serves them at its rates, a tenant with ``replay`` serves that model at
    the rate its demand_gpus carry; a tenant with neither (e.g. training) is absent: it holds GPUs but sends no
    requests. Raises InputError as :func:`problem_from_dict` does, and for a replay model that fits no GPU."""
    spec = validate_input(TenantsFile, dict(data), source=source, labels=ENTRY_LABELS)
    out: dict[str, tuple[TenantWorkload, ...]] = {}
    for t in spec.tenants:
        tenant = problem.tenant(t.name)
        if t.replay is not None:
            out[t.name] = (_replay_workload(problem, t, t.replay, source),)
        elif t.models is not None:
            slo_default = t.slo
            mix_default = t.token_mix
            items = []
            for md, m in zip(tenant.models, t.models, strict=True):
                slo_spec = m.slo if m.slo is not None else slo_default
                if slo_spec is None:  # demand_from_models already required one
                    raise InputError(f"tenant {t.name}: model {md.model} needs an slo", source=source, field="slo")
                mix = token_mix_from_spec(m.token_mix if m.token_mix is not None else mix_default,
                                          f"{source}: tenant {t.name}, model {md.model}")
                items.append(TenantWorkload(t.name, md.model, md.gpu, md.tp, mix, slo_spec.to_slo(),
                                            md.replica_req_per_s, md.rates_req_per_s))
            out[t.name] = tuple(items)
    return out


def load_tenants_with_workloads(path: str | Path | None = None
                                ) -> tuple[TenantProblem, dict, dict[str, tuple[TenantWorkload, ...]]]:
    """:func:`load_tenants` plus :func:`tenant_workloads` of the same file (for ``allocate --verify``)."""
    data, src = _read_tenants_file(path)
    problem = problem_from_dict(data, source=src)
    opts = {k: data[k] for k in ("weights", "order", "tolerance") if k in data}
    return problem, opts, tenant_workloads(data, problem, source=src)
