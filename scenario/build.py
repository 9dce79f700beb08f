"""A read scenario into a placement :class:`~fleetplan.placement.problem.Problem`: pools, dedicated options with their
capacity under each model's SLO, shared-GPU options, request classes and prefill/decode options.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path

from fleetplan.costmodels.arrivals import MIN_INTERVALS_PER_WINDOW
from fleetplan.costmodels.calibration import Calibration
from fleetplan.costmodels.capacity import ReplicaCapacity, replica_capacity
from fleetplan.costmodels.demand import TokenMix
from fleetplan.costmodels.hardware import GPU, Model
from fleetplan.costmodels.network import Link, Site
from fleetplan.costmodels.prices import (
    check_price_date,
)
from fleetplan.costmodels.profile_capacity import MeasuredProfile, measured_replica_capacity
from fleetplan.costmodels.queueing import poisson_occupancy_quantile
from fleetplan.costmodels.slo import SLO
from fleetplan.datasets.calibration import load_calibration
from fleetplan.datasets.catalog.names import get_gpu
from fleetplan.datasets.catalog.prices import load_gpu_prices
from fleetplan.datasets.network import inter_node_link
from fleetplan.datasets.traces import (
    trace_peak_factor,
)
from fleetplan.errors import InputError, UnknownNameError
from fleetplan.fileio import validate_input
from fleetplan.placement.problem import (
    DeratingKey,
    KvRoute,
    ModelSpec,
    Pool,
    Problem,
    ReplicaOption,
    ShareOption,
)
from fleetplan.scenario.classes import trace_classes
from fleetplan.scenario.disagg import prefill_decode_options
from fleetplan.scenario.pools import build_pool, check_pool_names, egress_table, with_on_demand_reference
from fleetplan.scenario.profiles import scenario_profiles
from fleetplan.scenario.read import (
    Scenario,
    at_field,
    check_region,
    field_error,
    scenario_catalog_file,
    scenario_model,
    token_mix_from_spec,
    within_entry,
)
from fleetplan.scenario.schemas import ENTRY_LABELS, ArrivalsSpec, ClassEdgesSpec, ScenarioFile


def _option_capacity(prof: MeasuredProfile | None, model: Model, gpu: GPU, mix: TokenMix, slo: SLO, *,
                     weight_dtype: str, kv_dtype: str, memory_utilization: float, tp: int, calib: Calibration,
                     pp: int = 1, link: Link | None = None, residents: int = 1,
                     kv_budget_bytes: float | None = None) -> ReplicaCapacity:
    """Capacity of one option from its measured profile when it has one, else from the calibrated roofline."""
    if prof is not None:
        return measured_replica_capacity(prof, mix, slo, model=model, gpu=gpu, tp=tp,
                                         memory_utilization=memory_utilization, weight_dtype=weight_dtype,
                                         kv_dtype=kv_dtype, residents=residents, kv_budget_bytes=kv_budget_bytes)
    return replica_capacity(model, gpu, mix, slo, tp=tp, pp=pp, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                            memory_utilization=memory_utilization, link=link, calib=calib, residents=residents,
                            kv_budget_bytes=kv_budget_bytes)


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


def build_problem(scenario: Scenario, *, progress: Callable[[str], None] | None = None,
                  derating: dict[DeratingKey, float] | None = None) -> Problem:
    """Evaluate the cost models for every (model, pool, tp, pp) of ``scenario`` and return the numeric Problem.

    For each model and pool: dedicated options for every tp in the model's list that divides the node size and
    whose capacity under the SLO is positive; pipeline-parallel options (tp = node size, pp = 2..4 nodes) when the
    model does not fit in one node; a shared-GPU option (tp 1) with a KV budget of at most
    ``shared_kv_fraction`` of the GPU, when the weights fit there. Options left out are recorded with the cost
    model's reason (``Problem.option_notes``), so an infeasible problem can be explained.

    ``derating`` multiplies the capacity of the options it names (:data:`DeratingKey`; factors in (0, 1]) after the
    cost model: the replay-verified planner (:mod:`fleetplan.simulator.verify`) tightens options whose replay missed
    a target. Raises InputError for a factor outside (0, 1].
    """
    derating = dict(derating or {})
    for key, f in derating.items():
        if not 0.0 < f <= 1.0:
            raise InputError(f"derating factor {f!r} of {key} must be in (0, 1]", field="derating", value=f)

    opts = scenario.options
    where = scenario.source
    spec = scenario.spec or validate_input(ScenarioFile, scenario.raw, source=where, labels=ENTRY_LABELS)
    base = Path(scenario.base_dir) if scenario.base_dir else None

    def _file(key: str) -> str | None:
        return scenario_catalog_file(scenario, key)

    measured = scenario_profiles(scenario)
    prices = load_gpu_prices(_file("prices"))
    try:  # a real date, not before every dated snapshot (else find_price would blame an inventory row's price)
        check_price_date(opts.get("price_date"), prices=prices)
    except InputError as exc:
        raise field_error(str(exc).removeprefix("field 'price_date': "), f"{where}: options", "price_date",
                   opts.get("price_date")) from None
    calib_file = opts.get("calibration")
    if calib_file is not None and base is not None and not Path(calib_file).is_absolute():
        calib_file = str(base / calib_file)
    link = inter_node_link(opts.get("inter_node_link"))
    allowed = opts.get("allowed_gpus")
    with at_field(f"{where}: options", "allowed_gpus"):
        allowed_names = {get_gpu(g, _file("gpus")).name for g in allowed} if allowed else None
    pools: list[Pool] = []
    rows_where: list[str] = []
    gpus = {}
    site_rows: dict[str, int] = {}
    for i, s in enumerate(spec.sites):
        sw = f"{where}: sites[{i}]"
        with within_entry(sw, "name"):
            parsed = Site.parse(s.name)
        site = parsed.name
        if site in site_rows:
            raise field_error(f"site {site!r} is listed twice (sites[{site_rows[site]}] and sites[{i}]); list each "
                              f"site "
                       "once, with all its inventory rows under it", sw, "name", s.name)
        site_rows[site] = i
        if any(row.usd_per_gpu_hour is None for row in s.inventory):  # a catalog price is looked up
            check_region(parsed, prices, sw)
        for j, row in enumerate(s.inventory):
            rw = f"{sw}.inventory[{j}]"
            with at_field(rw, "gpu"):
                gpu = get_gpu(row.gpu, _file("gpus"))
            if allowed_names is not None and gpu.name not in allowed_names:
                continue
            gpus[gpu.name] = gpu
            pm = row.pricing_model or s.pricing_model or opts["pricing_model"]
            pools.append(build_pool(row, rw, site, gpu, pm, prices, opts))
            rows_where.append(rw)
    if not pools:
        raise field_error("no GPU pool left (check allowed_gpus and the inventories)", where, "sites")
    pools = with_on_demand_reference(pools, prices, opts.get("price_date"), rows_where)
    check_pool_names(pools, rows_where)
    site_names = sorted({p.site for p in pools})

    mu_mem = opts["memory_utilization"]
    models: list[ModelSpec] = []
    options: list[ReplicaOption] = []
    shares: list[ShareOption] = []
    notes: dict[str, tuple[str, ...]] = {}
    pd_options: list[ReplicaOption] = []
    kv_routes: list[KvRoute] = []
    dis = opts["disaggregation"]
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
    model_rows: dict[str, int] = {}
    for i, m in enumerate(spec.models):
        mw = f"{where}: models[{i}]"
        model = scenario_model(m, mw, base, _file("models"))
        first = (len(options), len(shares), len(pd_options))
        peak, peak_src = _peak_factor(m.arrivals or spec.options.arrivals, opts["window_length_s"], base, where,
                                      f"models[{i}].arrivals" if m.arrivals else "options.arrivals")
        wd = m.weight_dtype or opts["weight_dtype"]
        kvd = m.kv_dtype or opts["kv_dtype"]
        slo = m.slo.to_slo()
        tps = m.tp_degrees
        origin = m.origin_site
        if origin is not None:
            with within_entry(mw, "origin_site"):
                origin = Site.parse(origin).name
            if origin not in site_names:
                raise UnknownNameError("site", origin, site_names, source=mw, field="origin_site")
        demand = scenario.demands[m.name]
        rates = tuple(w.rate_peak_req_per_s if opts["demand_rate"] == "peak" else w.rate_mean_req_per_s
                      for w in demand.windows)
        mix = scenario.token_mixes[m.name]
        request_bytes = 2 * (mix.input_tokens_mean + mix.output_tokens_mean) * opts["bytes_per_token"]
        min_r, max_r = m.min_replicas, m.max_replicas
        class_list = trace_classes(m, mw) if m.classes == "auto" or isinstance(m.classes, ClassEdgesSpec) else [
            (c.name, c.share, token_mix_from_spec(c.token_mix, f"{mw}.classes[{k}]"),
             c.input_tokens_max or math.inf, c.output_tokens_max or math.inf)
            for k, c in enumerate(m.classes or [])]
        class_mixes = {c[0]: (c[1], c[2]) for c in class_list}
        if model.name in model_rows:
            raise field_error(f"models[{model_rows[model.name]}] and models[{i}] are both the model {model.name!r}; "
                              f"give "
                       "each model once", mw, "name", m.name)
        model_rows[model.name] = i
        with within_entry(mw):
            models.append(ModelSpec(model.name, rates, slo.ttft_s, slo.tpot_s, min_replicas=min_r,
                                    max_replicas=max_r, origin_site=origin, request_bytes=request_bytes,
                                    demand_source=demand.source, priority=m.priority,
                                    class_shares=tuple((c, sh) for c, (sh, _mx) in class_mixes.items()),
                                    class_max_tokens=tuple((c[3], c[4]) for c in class_list),
                                    peak_factor=peak, peak_factor_source=peak_src))
        why = []
        weights = model.weight_bytes(wd)
        mprof = measured.get(model.name, {})
        for (g, t), given in mprof.items():
            if g not in gpus or t not in tps:
                why.append(f"profile {given.source} ({g} tp {t}) is not used: "
                           + (f"no pool has {g}" if g not in gpus else f"tp {t} is not in the model's tp list"))
            why += [f"profile {given.source}: {n}" for n in given.notes]
        for pool in pools:
            if pool.site in prefill_only:
                continue
            gpu = gpus[pool.gpu]
            calib = load_calibration(gpu, calib_file)
            roofline_src = (f"roofline ({calib.gpu} row of "
                            f"{opts.get('calibration') or 'the shipped calibration roofline.csv'})")
            if progress:
                progress(f"capacity of {model.name} on {pool.id}")
            candidates = [(tp, 1) for tp in tps if tp <= pool.gpus_per_node and pool.gpus_per_node % tp == 0]
            why += [f"{pool.id}: tp {tp} does not fit its {pool.gpus_per_node}-GPU nodes (a tp group runs inside one "
                    "node; list a tp that divides the node, or pipeline stages follow when the weights need more)"
                    for tp in tps if (tp, 1) not in candidates]
            if weights > mu_mem * pool.gpus_per_node * gpu.memory_bytes:
                node_bytes = mu_mem * pool.gpus_per_node * gpu.memory_bytes
                need = math.ceil(weights / node_bytes)
                candidates += [(pool.gpus_per_node, pp) for pp in range(max(2, need), max(2, need) + 2)]
            for tp, pp in candidates:
                prof = mprof.get((gpu.name, tp)) if pp == 1 else None
                label = f"{pool.id} tp {tp}{f' pp {pp}' if pp > 1 else ''}"
                class_caps: tuple[tuple[str, float], ...] = ()
                if class_mixes:
                    # Each class's own capacity on this option; a class that misses the SLO (or the KV floor) has
                    # none here. The option's reported capacity is that of the served classes' mix.
                    served = []
                    for cname, (share, cmix) in class_mixes.items():
                        ccap = _option_capacity(prof, model, gpu, cmix, slo, weight_dtype=wd, kv_dtype=kvd,
                                                memory_utilization=mu_mem, tp=tp, pp=pp, calib=calib,
                                                link=link if pp > 1 else None)
                        if ccap.req_per_s <= 0 or ccap.max_batch < opts["min_batch"]:
                            why.append(f"{label} class {cname}: "
                                       + (ccap.reason or ccap.limiting if ccap.req_per_s <= 0 else
                                          f"KV cache holds {ccap.max_batch:.1f} sequences < min_batch"))
                            continue
                        served.append((cname, share, ccap))
                    if not served:
                        continue
                    factor = derating.get((model.name, pool.id, tp, pp), 1.0) * (1 - pool.interruption_rate)
                    class_caps = tuple((c, cc.req_per_s * factor) for c, _sh, cc in served)
                    mixed = sum(sh for _c, sh, _cc in served) / sum(sh / cc.req_per_s for _c, sh, cc in served)
                    cap = dataclasses.replace(
                        served[0][2], req_per_s=mixed, max_batch=min(cc.max_batch for *_x, cc in served),
                        ttft_p95_s=max(cc.ttft_p95_s for *_x, cc in served),
                        tpot_p95_s=max(cc.tpot_p95_s for *_x, cc in served))
                else:
                    cap = _option_capacity(prof, model, gpu, mix, slo, weight_dtype=wd, kv_dtype=kvd,
                                           memory_utilization=mu_mem, tp=tp, pp=pp, calib=calib,
                                           link=link if pp > 1 else None)
                if cap.req_per_s <= 0:
                    why.append(f"{label}: {cap.reason or cap.limiting}")
                    continue
                if cap.max_batch < opts["min_batch"]:
                    why.append(f"{label}: the KV cache left after the "
                               f"weights holds {cap.max_batch:.1f} sequences, fewer than min_batch "
                               f"{opts['min_batch']:g}")
                    continue
                load_s = weights / (tp * pp) / opts["load_bandwidth_bytes_per_s"]
                start = load_s / 3600 * tp * pp * pool.usd_per_busy_gpu_hour + opts["usd_per_migration"]
                options.append(ReplicaOption(model.name, pool.id, tp, pp,
                                             cap.req_per_s * derating.get((model.name, pool.id, tp, pp), 1.0)
                                             * (1 - pool.interruption_rate),
                                             cap.memory_bytes_per_gpu,
                                             start_cost_usd=start, ttft_p95_s=cap.ttft_p95_s,
                                             tpot_p95_s=cap.tpot_p95_s, max_batch=cap.max_batch,
                                             kv_budget_bytes=cap.kv_bytes_available,
                                             capacity_source=cap.source if prof is not None else roofline_src,
                                             class_capacity_req_per_s=class_caps))
            if class_mixes:
                continue  # a model with request classes uses no shared GPU (yet)
            # Shared GPU: tp 1, KV budget at most shared_kv_fraction of the GPU.
            share_budget = opts["shared_kv_fraction"] * mu_mem * gpu.memory_bytes - weights
            if 1 in tps and share_budget > 0:
                # Co-resident models' decode steps interleave: with K residents a model's token may wait for the
                # other K - 1 steps, so its shared capacity is sized for TPOT target / K; and their prefills stall
                # its decode steps and queue ahead of its prefills (capacity point 9: residents = K).
                k = opts["max_models_per_shared_gpu"]
                shared_slo = dataclasses.replace(slo, tpot_s=max(0.001, slo.tpot_s / k))
                sprof = mprof.get((gpu.name, 1))
                full = _option_capacity(sprof, model, gpu, mix, shared_slo, weight_dtype=wd, kv_dtype=kvd,
                                        memory_utilization=mu_mem, tp=1, calib=calib, residents=k)
                kvpt = model.kv_bytes_per_token(kvd)
                kv_seq = model.kv_tokens_cached(mix.input_tokens_mean + mix.output_tokens_mean) * kvpt
                kv_seq95 = model.kv_tokens_cached(mix.input_tokens_p95 + mix.output_tokens_p95) * kvpt
                # Room for the p95 running batch at mean length plus one p95-length request (capacity point 8),
                # with 10% to spare; never more than the shared_kv_fraction budget.
                b = full.batch_at_capacity
                needed = (1.1 * (poisson_occupancy_quantile(b) * kv_seq + kv_seq95)
                          if full.req_per_s > 0 and math.isfinite(b) else share_budget)
                budget = min(share_budget, needed)
                cap = _option_capacity(sprof, model, gpu, mix, shared_slo, weight_dtype=wd, kv_dtype=kvd,
                                       memory_utilization=mu_mem, tp=1, calib=calib, residents=k,
                                       kv_budget_bytes=budget)
                if cap.req_per_s > 0:
                    shares.append(ShareOption(model.name, pool.id,
                                              cap.req_per_s * derating.get((model.name, pool.id, "shared", 1), 1.0)
                                              * (1 - pool.interruption_rate),
                                              weights + budget,
                                              ttft_p95_s=cap.ttft_p95_s, tpot_p95_s=cap.tpot_p95_s,
                                              max_batch=cap.max_batch, kv_budget_bytes=budget,
                                              capacity_source=cap.source if sprof is not None else roofline_src))
                elif sprof is not None:
                    why.append(f"{pool.id} shared: {cap.reason or cap.limiting}")
        if dis["enabled"] and (dis_models is None or m.name in dis_models):
            if class_mixes:
                raise field_error(f"disaggregation and request classes together are not supported yet: model {m.name} "
                           f"(models[{i}]) has classes; leave it out of options.disaggregation.models or drop its "
                           "classes", where, "options.disaggregation")
            pdo, routes = prefill_decode_options(model, mix, slo, pools, gpus, tps, opts, calib_file=calib_file,
                                                 weight_dtype=wd,
                                      kv_dtype=kvd, link=link, why=why, prefill_only=prefill_only,
                                      derating=derating)
            pd_options += pdo
            kv_routes += routes
        if peak != 1.0:  # capacity sized for peak × the window's rate: every option of the model holds 1/peak
            options[first[0]:] = [_peaked(o, peak) for o in options[first[0]:]]
            shares[first[1]:] = [dataclasses.replace(s, capacity_req_per_s=s.capacity_req_per_s / peak,
                                                     capacity_source=f"{s.capacity_source} ÷ peak factor {peak:.3g}")
                                 for s in shares[first[1]:]]
            pd_options[first[2]:] = [_peaked(o, peak) for o in pd_options[first[2]:]]
        notes[model.name] = tuple(why)
    n_windows = len(next(iter(scenario.demands.values())).windows)
    synthetic = [name for name, d in scenario.demands.items() if d.synthetic]
    pnotes = tuple(f"{m.name}: {m.demand_source}" for m in models) + tuple(
        f"{name}: SYNTHETIC demand" for name in synthetic) + tuple(
        f"{m.name}: arrivals: capacity sized for {m.peak_factor:.3f} × each window's rate ({m.peak_factor_source}); "
        "billed demand and egress at the window's rate" for m in models if m.peak_factor != 1.0)
    return Problem(window_length_s=opts["window_length_s"], n_windows=n_windows, pools=tuple(pools),
                   models=tuple(models), options=tuple(options), share_options=tuple(shares), margin=opts["margin"],
                   shared_memory_utilization=mu_mem, max_shared_gpus_per_pool=opts["max_shared_gpus_per_pool"],
                   max_models_per_shared_gpu=opts["max_models_per_shared_gpu"],
                   egress_usd_per_gb=egress_table(site_names), option_notes=notes, name=scenario.name, notes=pnotes,
                   pd_options=tuple(pd_options), kv_routes=tuple(kv_routes))
