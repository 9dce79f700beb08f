"""A read scenario into a placement :class:`~fleetplan.placement.problem.Problem`.

:func:`build_problem` does it in this order, one function per step:

1. the scenario-wide inputs (:func:`_sizing_inputs`): prices as of ``price_date``, the roofline calibration, the
   inter-node link, the allowed GPU types, the measured profiles;
2. the pools (:func:`fleetplan.scenario.pools.scenario_pools`): one priced pool per inventory row;
3. the disaggregation settings (:func:`_disaggregation`): which models and which prefill-only sites;
4. per model (:func:`_model_part`): its inputs (:func:`_model_inputs`: architecture, arrivals peak factor, dtypes,
   SLO, origin, request classes), its :class:`~fleetplan.placement.problem.ModelSpec` (:func:`_model_spec`), then on
   every pool its dedicated options, pipeline-parallel options and shared-GPU option
   (:mod:`fleetplan.scenario.options`), then its prefill/decode options and KV routes
   (:mod:`fleetplan.scenario.disagg`), and last its capacities divided by its peak factor;
5. the Problem (:func:`_problem`): the parts with the egress table and the notes.

A new kind of option is one more step of :func:`_pool_options` (or of :func:`_model_part` when it spans pools); a
property of every option (e.g. the serving engine it assumes) belongs to :func:`fleetplan.scenario.options.
option_capacity` and the records it fills.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fleetplan.costmodels.arrivals import MIN_INTERVALS_PER_WINDOW
from fleetplan.costmodels.calibration import Calibration
from fleetplan.costmodels.engine import DEFAULT_ENGINE
from fleetplan.costmodels.hardware import GPU
from fleetplan.costmodels.network import Site
from fleetplan.costmodels.prices import GpuPrice, check_price_date
from fleetplan.costmodels.profile_capacity import MeasuredProfile
from fleetplan.datasets.catalog.names import get_gpu
from fleetplan.datasets.catalog.prices import load_gpu_prices
from fleetplan.datasets.kv_tiers import block_stack_distances
from fleetplan.datasets.network import inter_node_link
from fleetplan.datasets.traces import trace_peak_factor
from fleetplan.errors import InputError, UnknownNameError
from fleetplan.placement.problem import (
    DeratingKey,
    KvRoute,
    ModelSpec,
    Pool,
    Problem,
    ReplicaOption,
    ShareOption,
)
from fleetplan.scenario.classes import model_classes
from fleetplan.scenario.disagg import Disaggregation, prefill_decode_options
from fleetplan.scenario.options import (
    ModelInputs,
    SizingContext,
    engine_calibration,
    pipeline_candidates,
    profile_notes,
    replica_options,
    resolve_host_tier,
    shared_options,
    tp_candidates,
)
from fleetplan.scenario.pools import check_price_snapshots, egress_table, scenario_pools
from fleetplan.scenario.profiles import scenario_profiles
from fleetplan.scenario.read import (
    Scenario,
    at_field,
    field_error,
    scenario_catalog_file,
    scenario_engine,
    scenario_model,
    scenario_spec,
    within_entry,
)
from fleetplan.scenario.schemas import ArrivalsSpec, EngineSchema, PrefixHitFromTrace, ScenarioFile, ScenarioModel


def _peak_factor(spec: ArrivalsSpec | None, window_s: float, base: Path | None, source: str,
                 path: str) -> tuple[float, str]:
    """(peak factor, its source) of an ``arrivals`` key (:class:`~fleetplan.scenario.schemas.ArrivalsSpec`) at
    field path ``path`` (e.g. 'options.arrivals') of the file ``source``: (1.0, '') without one; a trace file path
    is relative to the scenario's folder. Raises InputError naming ``source`` and one field path: interval_s when
    fewer than MIN_INTERVALS_PER_WINDOW intervals fit a window, else the key (interval_s, quantile or from_trace)
    an error of :func:`~fleetplan.datasets.traces.trace_peak_factor` is about."""
    if spec is None:
        return 1.0, ""
    if spec.peak_factor is not None:
        return float(spec.peak_factor), f"peak_factor given in {source}: {path}"
    if spec.interval_s * MIN_INTERVALS_PER_WINDOW > window_s:
        raise InputError(f"{spec.interval_s:g} s leaves fewer than {MIN_INTERVALS_PER_WINDOW} intervals in a "
                         f"{window_s:g} s window, too few for a quantile; give at most "
                         f"{window_s / MIN_INTERVALS_PER_WINDOW:g} s (e.g. 60)", source=source,
                         field=f"{path}.interval_s", value=spec.interval_s)
    name = spec.from_trace or ""
    if base is not None and (base / name).is_file():
        name = str(base / name)
    try:
        return trace_peak_factor(name, interval_s=spec.interval_s, quantile=spec.quantile, window_s=window_s)
    except InputError as exc:
        key = exc.field if exc.field in ("interval_s", "quantile") else "from_trace"
        raise InputError(exc.message, source=source, field=f"{path}.{key}", value=exc.value) from None


def _peaked(o: ReplicaOption, peak: float) -> ReplicaOption:
    """``o`` with its capacity (and class capacities) divided by the peak factor, its source saying so."""
    return dataclasses.replace(o, capacity_req_per_s=o.capacity_req_per_s / peak,
                               class_capacity_req_per_s=tuple((c, v / peak) for c, v in o.class_capacity_req_per_s),
                               capacity_source=f"{o.capacity_source} ÷ peak factor {peak:.3g}")


def _peaked_share(s: ShareOption, peak: float) -> ShareOption:
    """``s`` with its capacity divided by the peak factor, its source saying so."""
    return dataclasses.replace(s, capacity_req_per_s=s.capacity_req_per_s / peak,
                               capacity_source=f"{s.capacity_source} ÷ peak factor {peak:.3g}")


@dataclass(frozen=True)
class _Inputs:
    """The scenario-wide inputs of the build (step 1): the checked file, where relative paths start, the sizing
    context of every option, the price rows, the allowed GPU types (None: all) and the measured profiles."""

    spec: ScenarioFile
    base: Path | None
    sizing: SizingContext
    prices: list[GpuPrice]
    allowed_gpus: set[str] | None
    measured: dict[str, dict[tuple[str, int], MeasuredProfile]]


@dataclass
class _ModelPart:
    """What one model adds to the Problem: its spec, options of each kind, KV routes and notes on what was left
    out."""

    spec: ModelSpec
    options: list[ReplicaOption]
    shares: list[ShareOption]
    pd_options: list[ReplicaOption]
    kv_routes: list[KvRoute]
    notes: tuple[str, ...]


def _checked_derating(derating: dict[DeratingKey, float] | None) -> dict[DeratingKey, float]:
    """A copy of ``derating``; InputError for a factor outside (0, 1]."""
    derating = dict(derating or {})
    for key, f in derating.items():
        if not 0.0 < f <= 1.0:
            raise InputError(f"derating factor {f!r} of {key} must be in (0, 1]", field="derating", value=f)
    return derating


def _sizing_inputs(scenario: Scenario, derating: dict[DeratingKey, float],
                   step_scale: dict[DeratingKey, float]) -> _Inputs:
    """Step 1: the measured profiles, the price rows (``price_date`` checked against them: a real date, not before
    every dated snapshot, else find_price would blame an inventory row's price), the calibration file (relative to
    the scenario's folder), the inter-node link and the allowed GPU types. Raises InputError naming the option."""
    opts, where = scenario.options, scenario.source
    spec = scenario_spec(scenario)
    base = Path(scenario.base_dir) if scenario.base_dir else None
    measured = scenario_profiles(scenario)
    prices = load_gpu_prices(scenario_catalog_file(scenario, "prices"))
    try:
        check_price_date(opts.get("price_date"), prices=prices)
    except InputError as exc:
        raise field_error(str(exc).removeprefix("field 'price_date': "), f"{where}: options", "price_date",
                          opts.get("price_date")) from None
    calib_file = opts.get("calibration")
    if calib_file is not None and base is not None and not Path(calib_file).is_absolute():
        calib_file = str(base / calib_file)
    opts = resolve_host_tier(opts, base, where)
    link = inter_node_link(opts.get("inter_node_link"))
    allowed = opts.get("allowed_gpus")
    with at_field(f"{where}: options", "allowed_gpus"):
        allowed_names = ({get_gpu(g, scenario_catalog_file(scenario, "gpus")).name for g in allowed} if allowed
                         else None)
    return _Inputs(spec, base, SizingContext(opts, link, calib_file, derating, step_scale), prices, allowed_names,
                   measured)


def _disaggregation(scenario: Scenario, spec: ScenarioFile, pools: list[Pool]) -> Disaggregation:
    """Step 3: ``options.disaggregation`` checked against the pools and models: its prefill-only sites are sites
    of the pools, not all of them, and its models are the scenario's. Raises InputError / UnknownNameError."""
    where = scenario.source
    dis = scenario.options["disaggregation"]
    dis_models = set(dis["models"]) if dis["models"] is not None else None
    prefill_only = {Site.parse(x).name for x in dis["prefill_only_sites"]} if dis["enabled"] else set()
    if not prefill_only <= {p.site for p in pools}:
        known = sorted({p.site for p in pools})
        raise UnknownNameError("site", sorted(prefill_only - set(known))[0], known, source=where,
                               field="options.disaggregation.prefill_only_sites")
    if prefill_only and prefill_only == {p.site for p in pools}:
        raise field_error(f"every site ({', '.join(sorted(prefill_only))}) is prefill-only, so no model can be "
                          f"decoded or "
                          "served anywhere; leave at least one site out of prefill_only_sites", where,
                          "options.disaggregation.prefill_only_sites")
    if dis["enabled"] and dis_models is not None and not dis_models <= {m.name for m in spec.models}:
        raise UnknownNameError("scenario model", sorted(dis_models - {m.name for m in spec.models})[0],
                               [m.name for m in spec.models], source=where, field="options.disaggregation.models")
    return Disaggregation(bool(dis["enabled"]), dis_models, prefill_only)


def _model_inputs(scenario: Scenario, inputs: _Inputs, i: int, m: ScenarioModel,
                  site_names: list[str]) -> ModelInputs:
    """Step 4a: model ``i`` of the scenario as its options are sized: its architecture, the peak factor of its
    ``arrivals`` (else the options'), its dtypes, SLO and tp list, its origin site (one of ``site_names``) and its
    request classes (:func:`fleetplan.scenario.classes.model_classes`). Raises InputError / UnknownNameError
    naming the entry."""
    opts, where = scenario.options, scenario.source
    mw = f"{where}: models[{i}]"
    model = scenario_model(m, mw, inputs.base, scenario_catalog_file(scenario, "models"))
    peak, peak_src = _peak_factor(m.arrivals or inputs.spec.options.arrivals, opts["window_length_s"], inputs.base,
                                  where, f"models[{i}].arrivals" if m.arrivals else "options.arrivals")
    origin = m.origin_site
    if origin is not None:
        with within_entry(mw, "origin_site"):
            origin = Site.parse(origin).name
        if origin not in site_names:
            raise UnknownNameError("site", origin, site_names, source=mw, field="origin_site")
    o_engine = inputs.spec.options.engine
    # Without any engine key a model is planned for the default engine (vLLM V1, chunked prefill: DEFAULT_ENGINE);
    # a model's own keys lie over options.engine, and an unset mode is vLLM V1 either way.
    with within_entry(mw, "engine"):
        engine = o_engine.to_engine() if o_engine is not None else DEFAULT_ENGINE
        engine = m.engine.to_engine(engine) if m.engine is not None else engine
    engine = scenario_engine(engine, mw, "engine" if m.engine is not None else "options.engine",
                             scenario_catalog_file(scenario, "models"))
    hit_trace = _hit_trace(o_engine, m.engine, inputs.base, where, mw)
    return ModelInputs(index=i, where=mw, name=m.name, model=model, weight_dtype=m.weight_dtype or opts["weight_dtype"],
                       kv_dtype=m.kv_dtype or opts["kv_dtype"], slo=m.slo.to_slo(), mix=scenario.token_mixes[m.name],
                       tps=m.tp_degrees, classes=model_classes(m, mw), profiles=inputs.measured.get(model.name, {}),
                       origin_site=origin, peak_factor=peak, peak_factor_source=peak_src, engine=engine,
                       hit_trace=hit_trace)


def _hit_trace(options_engine: EngineSchema | None, model_engine: EngineSchema | None, base: Path | None,
               where: str, model_where: str) -> tuple[str, int] | None:
    """(trace, requests) when a model's prefix hit rate is measured from a trace's block hashes
    (``prefix_hit_rate: {from_trace: ...}`` in its own engine keys, else in options.engine; a number given in the
    model's keys overrides the options' trace), the trace resolved against the scenario's folder ``base`` when it
    names a file there and read once (a bad trace is an InputError naming the key); None otherwise."""
    spec: PrefixHitFromTrace | None = None
    src = key = ""
    for e, e_src, e_key in ((options_engine, where, "options.engine"), (model_engine, model_where, "engine")):
        if e is not None and "prefix_hit_rate" in e.model_fields_set:
            spec = e.prefix_hit_rate if isinstance(e.prefix_hit_rate, PrefixHitFromTrace) else None
            src, key = e_src, e_key
    if spec is None:
        return None
    trace = spec.from_trace
    if base is not None and not Path(trace).is_absolute() and (base / trace).is_file():
        trace = str(base / trace)
    try:
        block_stack_distances(trace, spec.requests)
    except InputError as exc:
        raise InputError(str(exc), source=src, field=f"{key}.prefix_hit_rate.from_trace",
                         value=spec.from_trace) from None
    return trace, spec.requests


def _model_spec(scenario: Scenario, m: ScenarioModel, mi: ModelInputs) -> ModelSpec:
    """Step 4b: the model's :class:`ModelSpec`: its demand per window (peak or mean rate per ``demand_rate``), its
    SLO, replica bounds, origin, request bytes (input + output tokens × bytes_per_token, both ways), priority,
    classes, peak factor and spread (its own ``spread`` keys over ``options.spread``'s; none by default). Raises
    InputError naming the entry."""
    opts = scenario.options
    demand = scenario.demands[m.name]
    rates = tuple(w.rate_peak_req_per_s if opts["demand_rate"] == "peak" else w.rate_mean_req_per_s
                  for w in demand.windows)
    mix = mi.mix
    request_bytes = 2 * (mix.input_tokens_mean + mix.output_tokens_mean) * opts["bytes_per_token"]
    spread = {k: v for k, v in (opts.get("spread") or {}).items() if v is not None}
    spread.update({k: v for k, v in (m.spread.model_dump() if m.spread is not None else {}).items() if v is not None})
    with within_entry(mi.where):
        return ModelSpec(mi.model.name, rates, mi.slo.ttft_s, mi.slo.tpot_s, min_replicas=m.min_replicas,
                         max_replicas=m.max_replicas, origin_site=mi.origin_site, request_bytes=request_bytes,
                         demand_source=demand.source, priority=m.priority,
                         class_shares=tuple((c, sh) for c, (sh, _mx) in mi.class_mixes.items()),
                         class_max_tokens=tuple((c[3], c[4]) for c in mi.classes),
                         peak_factor=mi.peak_factor, peak_factor_source=mi.peak_factor_source,
                         max_share_per_site=spread.get("max_share_per_site"),
                         max_share_per_pool=spread.get("max_share_per_pool"))


def _pool_options(sizing: SizingContext, mi: ModelInputs, pool: Pool, gpu: GPU, calib: Calibration, src: str,
                  why: list[str]) -> tuple[list[ReplicaOption], list[ShareOption]]:
    """Step 4c, on one pool (its GPU's roofline calibration ``calib`` for the model's engine version, described by
    ``src``): the model's dedicated options (each tp of its list that fits a node), its pipeline-parallel options
    (whole nodes as stages, when one node cannot hold the weights) and its shared-GPU option; what is left out is
    explained in ``why``."""
    dedicated = replica_options(sizing, mi, pool, gpu, tp_candidates(mi, pool, why), calib=calib,
                                roofline_source=src, why=why)
    pipeline = replica_options(sizing, mi, pool, gpu, pipeline_candidates(sizing, mi, pool, gpu), calib=calib,
                               roofline_source=src, why=why)
    shared = shared_options(sizing, mi, pool, gpu, calib=calib, roofline_source=src, why=why)
    return dedicated + pipeline, shared


def _model_part(scenario: Scenario, inputs: _Inputs, mi: ModelInputs, spec: ModelSpec, pools: list[Pool],
                gpus: dict[str, GPU], dis: Disaggregation, progress: Callable[[str], None] | None) -> _ModelPart:
    """Steps 4c-4e for one model: its options on every pool that serves (not prefill-only), its prefill/decode
    options and KV routes when it is disaggregated, then every capacity divided by its peak factor."""
    why = profile_notes(mi, gpus)
    options: list[ReplicaOption] = []
    shares: list[ShareOption] = []
    for pool in pools:
        if pool.site in dis.prefill_only:
            continue
        gpu = gpus[pool.gpu]
        calib, src = engine_calibration(inputs.sizing, gpu, mi.engine)
        if progress:
            progress(f"capacity of {mi.model.name} on {pool.id}")
        dedicated, shared = _pool_options(inputs.sizing, mi, pool, gpu, calib, src, why)
        options += dedicated
        shares += shared
    pd_options: list[ReplicaOption] = []
    routes: list[KvRoute] = []
    if dis.serves(mi.name):
        if mi.classes:
            raise field_error(f"disaggregation and request classes together are not supported yet: model {mi.name} "
                              f"(models[{mi.index}]) has classes; leave it out of options.disaggregation.models or "
                              "drop its classes", scenario.source, "options.disaggregation")
        pd_options, routes = prefill_decode_options(inputs.sizing, mi, pools, gpus, dis, why=why)
    peak = mi.peak_factor
    if peak != 1.0:  # capacity sized for peak × the window's rate: every option of the model holds 1/peak
        options = [_peaked(o, peak) for o in options]
        shares = [_peaked_share(s, peak) for s in shares]
        pd_options = [_peaked(o, peak) for o in pd_options]
    return _ModelPart(spec, options, shares, pd_options, routes, tuple(why))


def _problem(scenario: Scenario, pools: list[Pool], parts: list[_ModelPart]) -> Problem:
    """Step 5: the Problem of the parts, with the egress table between the pools' sites and the notes (each
    model's demand source, synthetic demand, peak factors)."""
    opts = scenario.options
    models = [p.spec for p in parts]
    n_windows = len(next(iter(scenario.demands.values())).windows)
    synthetic = [name for name, d in scenario.demands.items() if d.synthetic]
    pnotes = tuple(f"{m.name}: {m.demand_source}" for m in models) + tuple(
        f"{name}: SYNTHETIC demand" for name in synthetic) + tuple(
        f"{m.name}: arrivals: capacity sized for {m.peak_factor:.3f} × each window's rate ({m.peak_factor_source}); "
        "billed demand and egress at the window's rate" for m in models if m.peak_factor != 1.0)
    with within_entry(scenario.source):  # the spread check (Problem._check_spread) names the model and the fix
        return Problem(window_length_s=opts["window_length_s"], n_windows=n_windows, pools=tuple(pools),
                       models=tuple(models), options=tuple(o for p in parts for o in p.options),
                       share_options=tuple(s for p in parts for s in p.shares), margin=opts["margin"],
                       shared_memory_utilization=opts["memory_utilization"],
                       max_shared_gpus_per_pool=opts["max_shared_gpus_per_pool"],
                       max_models_per_shared_gpu=opts["max_models_per_shared_gpu"],
                       egress_usd_per_gb=egress_table(sorted({p.site for p in pools})),
                       option_notes={p.spec.name: p.notes for p in parts}, name=scenario.name, notes=pnotes,
                       pd_options=tuple(o for p in parts for o in p.pd_options),
                       kv_routes=tuple(r for p in parts for r in p.kv_routes))


def build_problem(scenario: Scenario, *, progress: Callable[[str], None] | None = None,
                  derating: dict[DeratingKey, float] | None = None, new_plan: bool = True,
                  step_scale: dict[DeratingKey, float] | None = None) -> Problem:
    """Evaluate the cost models for every (model, pool, tp, pp) of ``scenario`` and return the numeric Problem
    (the steps in order: module docstring).

    For each model and pool: dedicated options for every tp in the model's list that divides the node size and
    whose capacity under the SLO is positive; pipeline-parallel options (tp = node size, pp = 2..4 nodes) when the
    model does not fit in one node; a shared-GPU option (tp 1) with a KV budget of at most
    ``shared_kv_fraction`` of the GPU, when the weights fit there. Options left out are recorded with the cost
    model's reason (``Problem.option_notes``), so an infeasible problem can be explained.

    ``derating`` multiplies the capacity of the options it names (:data:`DeratingKey`; factors in (0, 1]) after the
    cost model: the replay-verified planner (:mod:`fleetplan.simulator.verify`) tightens options whose replay missed
    a target. Raises InputError for a factor outside (0, 1], InputError / UnknownNameError naming the file and
    field for bad input.

    ``step_scale`` sizes the options it names as if their step times were 1 / s longer (their latency targets ×
    s before the cost model; :attr:`~fleetplan.scenario.options.SizingContext.step_scale`); the capacity × s
    comes from ``derating``, which must then include s (``plan --robust`` passes the same factors as both).
    Factors in (0, 1], else InputError.

    ``new_plan`` (default) applies the price snapshot policy (:func:`~fleetplan.scenario.pools.check_price_snapshots`:
    one snapshot date unless ``options.price_snapshots: mixed``); a stored plan file's problem is rebuilt with
    False, since the file records each pool's price and snapshot date and those are re-checked against it.
    """
    inputs = _sizing_inputs(scenario, _checked_derating(derating), _checked_derating(step_scale))
    pools, gpus = scenario_pools(scenario.source, inputs.spec, scenario.options, inputs.prices,
                                 allowed_gpus=inputs.allowed_gpus, gpus_file=scenario_catalog_file(scenario, "gpus"))
    if new_plan:
        check_price_snapshots(pools, scenario.options, scenario.source)
    site_names = sorted({p.site for p in pools})
    dis = _disaggregation(scenario, inputs.spec, pools)
    parts: list[_ModelPart] = []
    model_rows: dict[str, int] = {}
    for i, m in enumerate(inputs.spec.models):
        mi = _model_inputs(scenario, inputs, i, m, site_names)
        if mi.model.name in model_rows:
            raise field_error(f"models[{model_rows[mi.model.name]}] and models[{i}] are both the model "
                              f"{mi.model.name!r}; give each model once", mi.where, "name", m.name)
        model_rows[mi.model.name] = i
        parts.append(_model_part(scenario, inputs, mi, _model_spec(scenario, m, mi), pools, gpus, dis, progress))
    return _problem(scenario, pools, parts)


@dataclass(frozen=True)
class ModelSizing:
    """What every option of one scenario model is sized with (:func:`model_sizing`): the model's inputs, the
    scenario's pools and their GPU records, and the sizing context."""

    model: ModelInputs
    pools: list[Pool]
    gpus: dict[str, GPU]
    context: SizingContext


def model_sizing(scenario: Scenario, name: str) -> ModelSizing:
    """The inputs :func:`build_problem` sizes model ``name``'s options with (a what-if re-sizes them with another
    engine, e.g. ``fleetplan ledger speculation``). Raises UnknownNameError naming the scenario's models for a
    name it lacks, InputError / UnknownNameError as :func:`build_problem` for bad input."""
    inputs = _sizing_inputs(scenario, {}, {})
    pools, gpus = scenario_pools(scenario.source, inputs.spec, scenario.options, inputs.prices,
                                 allowed_gpus=inputs.allowed_gpus, gpus_file=scenario_catalog_file(scenario, "gpus"))
    site_names = sorted({p.site for p in pools})
    names = []
    for i, m in enumerate(inputs.spec.models):
        mi = _model_inputs(scenario, inputs, i, m, site_names)
        if name in (m.name, mi.model.name):
            return ModelSizing(mi, pools, gpus, inputs.sizing)
        names.append(m.name)
    raise UnknownNameError("model", name, names, source=scenario.source, field="models")
