"""The replica options of one scenario model on one pool, each with its capacity under the model's SLO: dedicated
options (one tp group inside a node), pipeline-parallel options (whole nodes as pipeline stages, when the weights
do not fit one node) and the shared-GPU option (tp 1 with a bounded KV budget, co-resident with other models).

A capacity comes from the model's measured profile for the (GPU, tp) when it has one, else from the calibrated
roofline (:func:`option_capacity`). Options left out are explained in the model's notes (``why``), so an infeasible
problem can be explained. Prefill and decode options are :mod:`fleetplan.scenario.disagg`'s.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from fleetplan.costmodels.calibration import Calibration
from fleetplan.costmodels.capacity import ReplicaCapacity, replica_capacity
from fleetplan.costmodels.demand import TokenMix
from fleetplan.costmodels.engine import DEFAULT_ENGINE, EngineConfig
from fleetplan.costmodels.hardware import GPU, Model
from fleetplan.costmodels.kvtiers import HostTier
from fleetplan.costmodels.network import Link
from fleetplan.costmodels.profile_capacity import MeasuredProfile, measured_replica_capacity
from fleetplan.costmodels.queueing import poisson_occupancy_quantile
from fleetplan.costmodels.slo import SLO
from fleetplan.datasets.calibration import CALIBRATION_FILE, calibration_for_engine
from fleetplan.datasets.kv_tiers import block_stack_distances, replica_host_tier, trace_hit_rate
from fleetplan.errors import InputError
from fleetplan.placement.problem import DeratingKey, Pool, ReplicaOption, ShareOption

#: A request class as the scenario gives it: (name, share of the model's requests, token mix, longest prompt and
#: longest output in tokens, inf when unbounded).
RequestClass = tuple[str, float, TokenMix, float, float]


@dataclass(frozen=True)
class SizingContext:
    """What every option of a scenario is sized with.

    Attributes:
        opts: the scenario's options with defaults filled in (``Scenario.options``; memory_utilization, min_batch,
            load_bandwidth_bytes_per_s, usd_per_migration, shared_kv_fraction, max_models_per_shared_gpu,
            bytes_per_token and disaggregation are read here).
        link: the link between the nodes of a pipeline-parallel replica (``options.inter_node_link``).
        calib_file: the roofline calibration CSV (``options.calibration`` resolved), None for the shipped one.
        derating: capacity factors in (0, 1] per option (:data:`~fleetplan.placement.problem.DeratingKey`).
        step_scale: {option key: s in (0, 1]}: size the option as if its step times were 1 / s times longer (the
            pessimistic end of a capacity error e is s = 1 − e, ``plan --robust``): its latency targets × s before
            the capacity model, then its capacity × s through ``derating`` (which the caller sets to include s).
            A queue whose every service time is 1 / s times longer is the same queue on a clock 1 / s times slower
            fed at rate × 1 / s, so its latencies at rate λ are 1 / s × the nominal latencies at λ / s: it meets
            target T at λ exactly when the nominal one meets T × s at λ / s. Unlike a capacity × s alone, this
            also catches a latency floor (one step slower than the target allows at any rate).
    """

    opts: dict
    link: Link
    calib_file: str | None
    derating: dict[DeratingKey, float]
    step_scale: dict[DeratingKey, float] = dataclasses.field(default_factory=dict)

    @property
    def memory_utilization(self) -> float:
        """Share of GPU memory a replica may use."""
        return self.opts["memory_utilization"]


@dataclass(frozen=True)
class ModelInputs:
    """One scenario model as its options are sized: its entry, architecture, load and targets.

    Attributes:
        index, where: position in ``models`` and the entry's place in the file ('FILE: models[i]') for errors.
        name: the scenario's name of the model (may be an alias); ``model.name`` is the catalog name.
        model: the architecture (:func:`fleetplan.scenario.read.scenario_model`).
        weight_dtype, kv_dtype: its data types (the entry's, else the options').
        slo: its latency targets. mix: its token mix. tps: the tensor-parallel degrees to consider.
        classes: its request classes (:data:`RequestClass`), empty without.
        profiles: its measured profiles {(catalog GPU name, tp): MeasuredProfile}.
        origin_site: where its traffic comes from (a site of the scenario), or None.
        peak_factor, peak_factor_source: capacity is sized for peak factor × each window's rate (1.0, '' without
            an ``arrivals`` key).
        engine: its serving engine (options.engine, then its own engine keys; without either the default engine,
            vLLM V1: ``costmodels.engine.DEFAULT_ENGINE``), unresolved: each option fills vLLM's defaults for its
            GPU.
        hit_trace: (trace, requests) when its prefix hit rate is measured per option from a trace's block hashes
            (``engine: {prefix_hit_rate: {from_trace: ...}}``, :func:`option_engine`), else None.
    """

    index: int
    where: str
    name: str
    model: Model
    weight_dtype: str
    kv_dtype: str
    slo: SLO
    mix: TokenMix
    tps: list[int]
    classes: list[RequestClass]
    profiles: dict[tuple[str, int], MeasuredProfile]
    origin_site: str | None
    peak_factor: float
    peak_factor_source: str
    engine: EngineConfig = DEFAULT_ENGINE
    hit_trace: tuple[str, int] | None = None

    @property
    def weight_bytes(self) -> float:
        """Bytes of the weights at the model's weight dtype."""
        return self.model.weight_bytes(self.weight_dtype)

    @property
    def class_mixes(self) -> dict[str, tuple[float, TokenMix]]:
        """{class name: (share, token mix)} in the classes' order."""
        return {c[0]: (c[1], c[2]) for c in self.classes}


def option_capacity(prof: MeasuredProfile | None, model: Model, gpu: GPU, mix: TokenMix, slo: SLO, *,
                    weight_dtype: str, kv_dtype: str, memory_utilization: float, tp: int, calib: Calibration,
                    pp: int = 1, link: Link | None = None, residents: int = 1,
                    kv_budget_bytes: float | None = None, engine: EngineConfig = DEFAULT_ENGINE,
                    host_tier: HostTier | None = None) -> ReplicaCapacity:
    """Capacity of one option from its measured profile when it has one
    (:func:`~fleetplan.costmodels.profile_capacity.measured_replica_capacity`), else from the calibrated roofline
    (:func:`~fleetplan.costmodels.capacity.replica_capacity`); ``host_tier``: the replica's host KV tier (a
    rate-only profile measured a replica without one: its capacity is not credited, and its source says so)."""
    if prof is not None:
        return measured_replica_capacity(prof, mix, slo, model=model, gpu=gpu, tp=tp,
                                         memory_utilization=memory_utilization, weight_dtype=weight_dtype,
                                         kv_dtype=kv_dtype, residents=residents, kv_budget_bytes=kv_budget_bytes,
                                         engine=engine, host_tier=host_tier)
    return replica_capacity(model, gpu, mix, slo, tp=tp, pp=pp, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                            memory_utilization=memory_utilization, link=link, calib=calib, residents=residents,
                            kv_budget_bytes=kv_budget_bytes, engine=engine, host_tier=host_tier)


def resolve_host_tier(opts: dict, base: Path | None, where: str) -> dict:
    """``opts`` with ``host_tier.block_trace`` resolved against the scenario's folder ``base`` when it names a file
    there, its block reads read once (so a bad trace is reported here, naming the option: InputError)."""
    spec = opts.get("host_tier")
    if not spec:
        return opts
    trace = spec["block_trace"]
    if base is not None and not Path(trace).is_absolute() and (base / trace).is_file():
        trace = str(base / trace)
    try:
        block_stack_distances(trace, spec["requests"])
    except InputError as exc:
        raise InputError(str(exc), source=where, field="options.host_tier.block_trace", value=trace) from None
    return {**opts, "host_tier": {**spec, "block_trace": trace}}


def option_host_tier(ctx: SizingContext, mi: ModelInputs, gpu: GPU, tp: int, pp: int) -> HostTier | None:
    """The host KV tier of a dedicated option (``options.host_tier``; :func:`fleetplan.datasets.kv_tiers.
    replica_host_tier` on its tp GPUs), or None without the option or for a pipeline-parallel option (whose stages
    span nodes: not modelled)."""
    spec = ctx.opts.get("host_tier")
    if not spec or pp > 1:
        return None
    return replica_host_tier(mi.model, gpu, tp, kv_dtype=mi.kv_dtype, **spec)


def option_engine(ctx: SizingContext, mi: ModelInputs, gpu: GPU, tp: int, pp: int,
                  kv_budget_bytes: float | None = None) -> tuple[EngineConfig, str]:
    """(engine, note) of an option of ``mi`` on ``tp`` × ``pp`` GPUs of ``gpu``: the model's engine, with, when its
    hit rate comes from a trace (:attr:`ModelInputs.hit_trace`), the share of the trace's prefix-block reads an LRU
    cache of the option's KV budget holds (``kv_budget_bytes``, else memory_utilization × its GPUs' memory − the
    weights; :func:`fleetplan.datasets.kv_tiers.trace_hit_rate`, the host tier's method) and a note for its
    capacity source ('' otherwise). The budget is an upper bound on the cache: the running batch holds part of it."""
    if mi.hit_trace is None:
        return mi.engine, ""
    trace, requests = mi.hit_trace
    budget = (ctx.memory_utilization * tp * pp * gpu.memory_bytes - mi.weight_bytes
              if kv_budget_bytes is None else kv_budget_bytes)
    h = trace_hit_rate(mi.model, trace, requests, max(0.0, budget), kv_dtype=mi.kv_dtype)
    note = (f"prefix hit rate {h:.1%} from trace {Path(trace).name} (LRU of its first {requests} requests' block "
            f"hashes over the option's {max(0.0, budget) / 1e9:.1f} GB KV budget)")
    return dataclasses.replace(mi.engine, prefix_hit_rate=h), note


def roofline_source(ctx: SizingContext, calib: Calibration) -> str:
    """The capacity source of an option sized by the calibrated roofline: the calibration row and its file."""
    return f"roofline ({calib.gpu} row of {ctx.opts.get('calibration') or 'the shipped calibration roofline.csv'})"


def engine_calibration(ctx: SizingContext, gpu: GPU, engine: EngineConfig) -> tuple[Calibration, str]:
    """(roofline row, capacity source) of an option of ``gpu`` run by ``engine``: the row fitted for the engine's
    version (:func:`fleetplan.datasets.calibration.calibration_for_engine`), the source naming the row, its file
    and, for a version the calibration data does not hold, that its constants are extrapolated (and a sparse
    decode's quality caveat, :attr:`EngineConfig.kv_read_fraction`). The shipped
    default engine (vLLM 0.11) gets the shipped roofline.csv row and :func:`roofline_source`'s text."""
    calib, where, note = calibration_for_engine(gpu, ctx.calib_file, engine.framework)
    if engine.kv_read_fraction < 1.0:
        note = (f"{note}; " if note else "") + (
            f"sparse decode reading {engine.kv_read_fraction:.0%} of the KV: traffic only, its quality change "
            "is not modelled")
    if where == (ctx.calib_file or f"the shipped calibration {CALIBRATION_FILE}") and not note:
        return calib, roofline_source(ctx, calib)
    what = f"{calib.gpu} row" + (f" for {calib.framework}" if calib.framework else "")
    return calib, f"roofline ({what} of {ctx.opts.get('calibration') or where}" + (f"; {note})" if note else ")")


def scaled_slo(slo: SLO, s: float) -> SLO:
    """``slo`` with every latency target × ``s`` (percentiles and attainment unchanged): the targets an option
    sized at step times 1 / s longer must meet at nominal step times (:attr:`SizingContext.step_scale`)."""
    if s == 1.0:
        return slo
    return dataclasses.replace(slo, ttft_s=slo.ttft_s * s, tpot_s=slo.tpot_s * s,
                               e2e_s=slo.e2e_s * s if slo.e2e_s is not None else None)


def _capacity(ctx: SizingContext, mi: ModelInputs, prof: MeasuredProfile | None, gpu: GPU, mix: TokenMix, *,
              pool: Pool, tp: int, pp: int, calib: Calibration) -> ReplicaCapacity:
    """:func:`option_capacity` of a dedicated or pipeline option of ``mi`` on ``pool`` for the token mix ``mix``
    (its targets scaled by ``ctx.step_scale``)."""
    slo = scaled_slo(mi.slo, ctx.step_scale.get((mi.model.name, pool.id, tp, pp), 1.0))
    return option_capacity(prof, mi.model, gpu, mix, slo, weight_dtype=mi.weight_dtype, kv_dtype=mi.kv_dtype,
                           memory_utilization=ctx.memory_utilization, tp=tp, pp=pp, calib=calib,
                           link=ctx.link if pp > 1 else None, engine=option_engine(ctx, mi, gpu, tp, pp)[0],
                           host_tier=option_host_tier(ctx, mi, gpu, tp, pp))


def profile_notes(mi: ModelInputs, gpus: dict[str, GPU]) -> list[str]:
    """Notes on the model's measured profiles: those no option uses (no pool has the GPU, or the tp is not in the
    model's list), and each profile's own notes."""
    why = []
    for (g, t), given in mi.profiles.items():
        if g not in gpus or t not in mi.tps:
            why.append(f"profile {given.source} ({g} tp {t}) is not used: "
                       + (f"no pool has {g}" if g not in gpus else f"tp {t} is not in the model's tp list"))
        why += [f"profile {given.source}: {n}" for n in given.notes]
    return why


def tp_candidates(mi: ModelInputs, pool: Pool, why: list[str]) -> list[tuple[int, int]]:
    """(tp, pp 1) of every tp in the model's list that divides the pool's node size; the others are explained in
    ``why`` (a tp group runs inside one node)."""
    candidates = [(tp, 1) for tp in mi.tps if tp <= pool.gpus_per_node and pool.gpus_per_node % tp == 0]
    why += [f"{pool.id}: tp {tp} does not fit its {pool.gpus_per_node}-GPU nodes (a tp group runs inside one "
            "node; list a tp that divides the node, or pipeline stages follow when the weights need more)"
            for tp in mi.tps if (tp, 1) not in candidates]
    return candidates


def pipeline_candidates(ctx: SizingContext, mi: ModelInputs, pool: Pool, gpu: GPU) -> list[tuple[int, int]]:
    """(tp = node size, pp) for the two smallest stage counts (at least 2) whose nodes hold the weights, when one
    node's usable memory (memory_utilization × its GPUs' memory) does not; empty otherwise."""
    mu_mem = ctx.memory_utilization
    if mi.weight_bytes > mu_mem * pool.gpus_per_node * gpu.memory_bytes:
        node_bytes = mu_mem * pool.gpus_per_node * gpu.memory_bytes
        need = math.ceil(mi.weight_bytes / node_bytes)
        return [(pool.gpus_per_node, pp) for pp in range(max(2, need), max(2, need) + 2)]
    return []


def _class_capacity(ctx: SizingContext, mi: ModelInputs, pool: Pool, gpu: GPU, prof: MeasuredProfile | None, *,
                    tp: int, pp: int, calib: Calibration, label: str,
                    why: list[str]) -> tuple[ReplicaCapacity | None, tuple[tuple[str, float], ...]]:
    """(capacity of the served classes' mix, each served class's derated capacity req/s) of an option of a model
    with request classes; a class that misses the SLO (or the KV floor) is not served there (explained in ``why``);
    (None, ()) when no class is."""
    served = []
    for cname, (share, cmix) in mi.class_mixes.items():
        ccap = _capacity(ctx, mi, prof, gpu, cmix, pool=pool, tp=tp, pp=pp, calib=calib)
        if ccap.req_per_s <= 0 or ccap.max_batch < ctx.opts["min_batch"]:
            why.append(f"{label} class {cname}: "
                       + (ccap.reason or ccap.limiting if ccap.req_per_s <= 0 else
                          f"KV cache holds {ccap.max_batch:.1f} sequences < min_batch"))
            continue
        served.append((cname, share, ccap))
    if not served:
        return None, ()
    factor = ctx.derating.get((mi.model.name, pool.id, tp, pp), 1.0) * (1 - pool.interruption_rate)
    class_caps = tuple((c, cc.req_per_s * factor) for c, _sh, cc in served)
    mixed = sum(sh for _c, sh, _cc in served) / sum(sh / cc.req_per_s for _c, sh, cc in served)
    cap = dataclasses.replace(
        served[0][2], req_per_s=mixed, max_batch=min(cc.max_batch for *_x, cc in served),
        ttft_p95_s=max(cc.ttft_p95_s for *_x, cc in served),
        tpot_p95_s=max(cc.tpot_p95_s for *_x, cc in served))
    return cap, class_caps


def replica_option(ctx: SizingContext, mi: ModelInputs, pool: Pool, gpu: GPU, *, tp: int, pp: int,
                   calib: Calibration, roofline_source: str, why: list[str]) -> ReplicaOption | None:
    """The dedicated (pp 1) or pipeline-parallel option of ``mi`` on ``pool`` at (tp, pp): its capacity under the
    SLO (of the served classes' mix for a model with request classes; a measured profile only at pp 1), derated by
    ``ctx.derating`` and the pool's interruption rate; its start cost = loading the weights at
    load_bandwidth_bytes_per_s on its GPUs at the pool's busy price, plus usd_per_migration. None, explained in
    ``why``, when it has no capacity or its KV cache holds fewer than min_batch sequences."""
    opts = ctx.opts
    prof = mi.profiles.get((gpu.name, tp)) if pp == 1 else None
    label = f"{pool.id} tp {tp}{f' pp {pp}' if pp > 1 else ''}"
    class_caps: tuple[tuple[str, float], ...] = ()
    if mi.classes:
        # Each class's own capacity on this option; the option's reported capacity is that of the served classes'
        # mix.
        cap_or_none, class_caps = _class_capacity(ctx, mi, pool, gpu, prof, tp=tp, pp=pp, calib=calib, label=label,
                                                  why=why)
        if cap_or_none is None:
            return None
        cap = cap_or_none
    else:
        cap = _capacity(ctx, mi, prof, gpu, mi.mix, pool=pool, tp=tp, pp=pp, calib=calib)
    if cap.req_per_s <= 0:
        why.append(f"{label}: {cap.reason or cap.limiting}")
        return None
    if cap.max_batch < opts["min_batch"]:
        why.append(f"{label}: the KV cache left after the "
                   f"weights holds {cap.max_batch:.1f} sequences, fewer than min_batch "
                   f"{opts['min_batch']:g}")
        return None
    load_s = mi.weight_bytes / (tp * pp) / opts["load_bandwidth_bytes_per_s"]
    start = load_s / 3600 * tp * pp * pool.usd_per_busy_gpu_hour + opts["usd_per_migration"]
    return ReplicaOption(mi.model.name, pool.id, tp, pp,
                         cap.req_per_s * ctx.derating.get((mi.model.name, pool.id, tp, pp), 1.0)
                         * (1 - pool.interruption_rate),
                         cap.memory_bytes_per_gpu,
                         start_cost_usd=start, ttft_p95_s=cap.ttft_p95_s,
                         tpot_p95_s=cap.tpot_p95_s, max_batch=cap.max_batch,
                         kv_budget_bytes=cap.kv_bytes_available,
                         capacity_source=(cap.source if prof is not None else roofline_source)
                         + ("; host KV tier" if option_host_tier(ctx, mi, gpu, tp, pp) is not None else "")
                         + (f"; {hit}" if (hit := option_engine(ctx, mi, gpu, tp, pp)[1]) else ""),
                         class_capacity_req_per_s=class_caps, engine=cap.engine)


def replica_options(ctx: SizingContext, mi: ModelInputs, pool: Pool, gpu: GPU, candidates: list[tuple[int, int]],
                    *, calib: Calibration, roofline_source: str, why: list[str]) -> list[ReplicaOption]:
    """:func:`replica_option` of every (tp, pp) of ``candidates`` that has one, in that order."""
    out = []
    for tp, pp in candidates:
        o = replica_option(ctx, mi, pool, gpu, tp=tp, pp=pp, calib=calib, roofline_source=roofline_source, why=why)
        if o is not None:
            out.append(o)
    return out


def shared_options(ctx: SizingContext, mi: ModelInputs, pool: Pool, gpu: GPU, *, calib: Calibration,
                   roofline_source: str, why: list[str]) -> list[ShareOption]:
    """The shared-GPU option of ``mi`` on ``pool`` (a list of one, or empty): tp 1, a KV budget of at most
    shared_kv_fraction of the GPU's usable memory, when the model lists tp 1 and its weights leave room.

    Co-resident models' decode steps interleave: with K = max_models_per_shared_gpu residents a model's token may
    wait for the other K - 1 steps, so its shared capacity is sized for TPOT target / K; and their prefills stall
    its decode steps and queue ahead of its prefills (capacity point 9: residents = K). The KV budget holds the p95
    running batch at mean length plus one p95-length request (capacity point 8), with 10% to spare. A model with
    request classes has no shared option (yet); a measured profile's miss is explained in ``why``. Nor has a model
    with speculative decoding (its draft's weights and KV are sized on dedicated replicas only; ``why`` says so).
    """
    if mi.classes:
        return []
    if mi.engine.speculative is not None:
        why.append(f"{pool.id} shared: speculative decoding is planned on dedicated replicas only")
        return []
    opts, model, mix, mu_mem = ctx.opts, mi.model, mi.mix, ctx.memory_utilization
    weights = mi.weight_bytes
    share_budget = opts["shared_kv_fraction"] * mu_mem * gpu.memory_bytes - weights
    if 1 not in mi.tps or share_budget <= 0:
        return []
    k = opts["max_models_per_shared_gpu"]
    slo = scaled_slo(mi.slo, ctx.step_scale.get((model.name, pool.id, "shared", 1), 1.0))
    shared_slo = dataclasses.replace(slo, tpot_s=max(0.001, slo.tpot_s / k))
    sprof = mi.profiles.get((gpu.name, 1))
    full = option_capacity(sprof, model, gpu, mix, shared_slo, weight_dtype=mi.weight_dtype, kv_dtype=mi.kv_dtype,
                           memory_utilization=mu_mem, tp=1, calib=calib, residents=k,
                           engine=option_engine(ctx, mi, gpu, 1, 1, share_budget)[0])
    kvpt = model.kv_bytes_per_token(mi.kv_dtype)
    kv_seq = model.kv_tokens_cached(mix.input_tokens_mean + mix.output_tokens_mean) * kvpt
    kv_seq95 = model.kv_tokens_cached(mix.input_tokens_p95 + mix.output_tokens_p95) * kvpt
    b = full.batch_at_capacity
    needed = (1.1 * (poisson_occupancy_quantile(b) * kv_seq + kv_seq95)
              if full.req_per_s > 0 and math.isfinite(b) else share_budget)
    budget = min(share_budget, needed)
    shared_engine, hit_note = option_engine(ctx, mi, gpu, 1, 1, budget)
    cap = option_capacity(sprof, model, gpu, mix, shared_slo, weight_dtype=mi.weight_dtype, kv_dtype=mi.kv_dtype,
                          memory_utilization=mu_mem, tp=1, calib=calib, residents=k, kv_budget_bytes=budget,
                          engine=shared_engine)
    if cap.req_per_s > 0:
        return [ShareOption(model.name, pool.id,
                            cap.req_per_s * ctx.derating.get((model.name, pool.id, "shared", 1), 1.0)
                            * (1 - pool.interruption_rate),
                            weights + budget,
                            ttft_p95_s=cap.ttft_p95_s, tpot_p95_s=cap.tpot_p95_s,
                            max_batch=cap.max_batch, kv_budget_bytes=budget,
                            capacity_source=(cap.source if sprof is not None else roofline_source)
                            + (f"; {hit_note}" if hit_note else ""),
                            engine=cap.engine)]
    if sprof is not None:
        why.append(f"{pool.id} shared: {cap.reason or cap.limiting}")
    return []
