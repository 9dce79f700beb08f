"""Scenario files (YAML) into placement Problems, through the catalogs and the cost models.

A scenario names sites with GPU inventory, models with tensor-parallel options, replica floor and ceiling, SLOs and
demand per window, and planning options. See ``datasets/scenarios/default.yaml`` for a complete, commented example.
The file is checked by the pydantic model :class:`fleetplan.placement.schemas.ScenarioFile` (its JSON Schema:
``fleetplan schema scenario``). All keys (unknown keys are errors that suggest the closest known key; a key given
twice in one mapping is an error)::

    name: str
    description: str
    options:
      window_length_s: 3600          # 60..86400; every model's demand is read at this window length
      margin: 0.1                    # capacity is used up to 1 - margin
      demand_rate: peak | mean       # plan each window for its peak sub-interval rate (default) or its mean
      weight_dtype: bf16 | fp8 | int4
      kv_dtype: bf16 | fp8
      memory_utilization: 0.9        # share of GPU memory a replica may use (the rest is runtime reserve)
      calibration: my_calib.csv      # roofline constants from `fleetplan calibrate` (default: shipped, vLLM 0.11)
      shared_kv_fraction: 0.5        # a model on a shared GPU gets at most this share of its memory
      max_shared_gpus_per_pool: 8
      max_models_per_shared_gpu: 2   # residents per shared GPU; a shared model is sized for TPOT target / this
      min_batch: 8                   # a replica whose KV cache holds fewer sequences (mean length) is left out
      load_bandwidth_bytes_per_s: 1.0e9   # weight loading speed, for the cost of starting a replica
      usd_per_migration: 0.0         # flat cost added to every replica start
      bytes_per_token: 4             # network bytes per token of request/response text
      allowed_gpus: [H100, ...]      # optional filter
      pricing_model: on-demand       # default for every pool
      price_date: 2025-05-31         # catalog prices as of this date (default: the newest snapshot)
      inter_node_link: null          # links.csv name for pipeline stages across nodes (default link when null)
      disaggregation:                # prefill/decode pools (issue 17); off by default
        enabled: false
        models: null                 # only these models (all when null)
        cross_site: true             # prefill at one site, decode at another (KV over the WAN, egress billed)
        prefill_only_sites: []       # sites whose pools only prefill (users are not served from there)
        kv_egress_usd_per_gb: null   # flat price instead of the routes' egress tables (what-ifs)
    files: {gpus: path, models: path, prices: path}   # optional user catalog rows (same schema as shipped)
    sites:
      - name: aws:us-east-1
        pricing_model: on-demand     # optional, overrides options.pricing_model
        inventory:
          - {gpu: H100, nodes: 2, gpus_per_node: 8, usd_per_gpu_hour: null}   # price from the catalogs if null
            # gpus_per_node: 1, 2, 4, 8 or 16; pricing_model: optional, overrides the site's
          - {name: spot, gpu: H100, nodes: 1, pricing_model: spot, interruption_rate: 0.1, fallback: on-demand}
            # name: the pool's id when a site has several rows of one GPU type (default 'site/gpu');
            # pricing_model committed-1y/committed-3y/reserved/negotiated: a commitment the planner sizes
            # (usd_per_gpu_hour: per committed GPU-hour; on_demand_usd_per_gpu_hour: for the break-even);
            # owned: a busy hour costs its power; spot: interruption_rate required, fallback optional
    models:
      - name: Llama-3.1-8B
        tp: [1, 2]                   # tensor-parallel degrees to consider (1, 2, 4, 8, 16; default 1, 2, 4, 8)
        min_replicas: 1
        max_replicas: null
        priority: 0                  # optional: higher is served first when demand exceeds the inventory
        slo: {ttft_p95_s: 2.0, tpot_p95_s: 0.1}
        config: my-model/config.json # optional: the architecture from a Hugging Face config.json, or
        base_model: Llama-3.1-8B     # optional: a fine-tune sharing a catalog model's architecture
        params: 8.03e9               # optional: checked against the architecture (10%)
        weight_dtype: fp8            # optional per-model dtypes (default: options.weight_dtype / kv_dtype)
        kv_dtype: fp8
        origin_site: aws:us-east-1   # where its traffic comes from (egress when served elsewhere)
        token_mix: {trace: azure-conv}    # or {input_tokens_mean, input_tokens_p95, output_tokens_mean, ...}
        classes:                     # optional request-size classes (Mélange's buckets); shares sum to 1
          - {name: short, share: 0.7, input_tokens_max: 1000, token_mix: {input_tokens_mean: 200, ...}}
                                     # or {prompt_edges: [1000]}, {prompt_quantiles: [0.5, 0.8]} or auto: cut
                                     # from the token_mix trace, each class with its share and token mix
        profiles:                    # optional: measured performance replacing the roofline for a (GPU, tp)
          - {gpu: H100, tp: 1, file: bench/*.json, format: vllm-bench}   # format detected when absent:
            # vllm-bench, guidellm, aibrix (throughput table), step-csv, splitwise
        demand:                      # exactly one of:
          servegen: {series: m-small, mean_rate_req_per_s: 1.5, day: mean, gaps: interpolate}
          trace: {name: azure-conv, rate_scale: 1.0}
          day_curve: {file: curve.csv, scale: 1.0}
          rates: [1.0, 2.0, ...]     # req/s per window

Relative file paths are relative to the scenario file. Every error names the file, the key and the fix.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fleetplan.costmodels.arrivals import MIN_INTERVALS_PER_WINDOW
from fleetplan.costmodels.calibration import Calibration
from fleetplan.costmodels.capacity import (
    PROFILE_FORMATS,
    SLO,
    MeasuredProfile,
    ReplicaCapacity,
    measured_replica_capacity,
    replica_capacity,
)
from fleetplan.costmodels.demand import MAX_RATE_REQ_PER_S, Demand, TokenMix
from fleetplan.costmodels.energy import owned_marginal_usd_per_gpu_hour
from fleetplan.costmodels.hardware import GPU, Model, check_params
from fleetplan.costmodels.latency import TP_DEGREES, decode_step_time_s
from fleetplan.costmodels.network import Link, Site, route_class
from fleetplan.costmodels.prices import (
    COMMITTED_PRICING_MODELS,
    OWNED_PRICING_MODEL,
    SPOT_PRICING_MODEL,
    check_price_date,
    price_label,
    select_egress_table,
)
from fleetplan.costmodels.queueing import poisson_occupancy_quantile
from fleetplan.costmodels.split import (
    decode_replica_capacity,
    flat_table,
    kv_transfer_s,
    prefill_replica_capacity,
)
from fleetplan.datasets.calibration import idle_fraction, load_calibration
from fleetplan.datasets.catalog import (
    find_price,
    get_gpu,
    get_model,
    load_egress,
    load_gpu_prices,
    model_from_hf_config,
)
from fleetplan.datasets.ledger import load_assumptions
from fleetplan.datasets.network import inter_node_link, load_network_graph
from fleetplan.datasets.profiles import load_profile, profile_files
from fleetplan.datasets.servegen import servegen_demand
from fleetplan.datasets.shipped import shipped_scenario_text, shipped_scenarios
from fleetplan.datasets.traces import (
    day_curve_demand,
    load_trace,
    read_day_curve_csv,
    token_mix_from_trace,
    trace_peak_factor,
    trace_to_demand,
)
from fleetplan.errors import FleetplanError, InputError, UnknownNameError
from fleetplan.fileio import parse_yaml, read_text_file, validate_input
from fleetplan.placement.problem import (
    COMMITTED_FALLBACK_WHY,
    KvRoute,
    ModelSpec,
    Pool,
    Problem,
    ReplicaOption,
    ShareOption,
)
from fleetplan.placement.schemas import (
    ENTRY_LABELS,
    ArrivalsSpec,
    ClassEdgesSpec,
    DemandSpec,
    InventoryRow,
    ScenarioFile,
    ScenarioModel,
    ScenarioOptions,
    TokenMixSpec,
)

DEFAULT_SCENARIO = "default.yaml"

@dataclass(frozen=True)
class Scenario:
    """A parsed scenario: its raw mapping (kept for reports and plan files), where it came from, and the pieces the
    planner and the simulator need.

    Attributes:
        name, description: labels.
        base_dir: folder of the scenario file (relative paths resolve against it), None for shipped scenarios.
        source: where it came from (file path or 'shipped scenario default.yaml').
        raw: the YAML mapping as read (embedded into plan files so a plan can be replayed without the file).
        options: options with defaults filled in (``ScenarioOptions`` as a dict).
        demands: {model: Demand} at the scenario's window length.
        token_mixes: {model: TokenMix} used for capacity.
        spec: the checked file (:class:`~fleetplan.placement.schemas.ScenarioFile`); sites and models in file order.
    """

    name: str
    description: str
    base_dir: str | None
    source: str
    raw: dict
    options: dict
    demands: dict[str, Demand] = field(default_factory=dict)
    token_mixes: dict[str, TokenMix] = field(default_factory=dict)
    spec: ScenarioFile | None = field(default=None, compare=False, repr=False)


def scenario_embed(scenario: Scenario) -> dict:
    """What a plan file stores of its scenario: name, source, base folder and the raw mapping."""
    return {"name": scenario.name, "source": scenario.source, "base": scenario.base_dir, "raw": scenario.raw,
            "window_length_s": scenario.options["window_length_s"]}


def _err(msg: str, where: str, key: str | None = None, value: object = None) -> InputError:
    return InputError(msg, source=where, field=key, value=value)


@contextlib.contextmanager
def _at(where: str, key: str) -> Iterator[None]:
    """Give an UnknownNameError raised inside (a GPU, model or trace name the catalogs lack) the file and field path
    ``where`` / ``key`` it came from, keeping its "did you mean"."""
    try:
        yield
    except UnknownNameError as exc:
        if exc.source:
            raise
        raise InputError(str(exc), source=where, field=key, value=exc.name) from None


@contextlib.contextmanager
def _within(where: str, key: str | None = None) -> Iterator[None]:
    """Give an InputError raised inside without a file (a cost-model record's own check) the file and entry
    ``where`` it came from and the field path ``key`` (default: the error's own field)."""
    try:
        yield
    except InputError as exc:
        if exc.source:
            raise
        raise InputError(exc.message, source=where, field=key or exc.field, value=exc.value) from None


def _check_region(site: Site, prices: list, where: str) -> None:
    """Raise UnknownNameError (naming ``where``) when ``site``'s cloud has price rows but none in its region (a
    misspelt region, 'us-est-1', would otherwise surface as a missing price)."""
    regions = {p.region for p in prices if p.cloud == site.cloud and p.region}
    if regions and site.region not in regions:
        raise UnknownNameError(f"{site.cloud} region", site.region, regions, source=where, field="name")


def read_scenario(path: str | Path | None = None) -> tuple[dict, str, Path | None]:
    """Read a scenario YAML: a path, the name of a shipped scenario, or None for the shipped default.

    Returns (raw mapping, display name, base directory for relative paths or None for shipped files).
    Raises InputError for a missing or malformed file, UnknownNameError for an unknown shipped name.
    """
    if path is None or (not Path(str(path)).exists() and str(path) in shipped_scenarios()
                        + [s.rsplit(".", 1)[0] for s in shipped_scenarios()]):
        name = DEFAULT_SCENARIO if path is None else str(path)
        if not name.endswith((".yaml", ".yml")):
            name += ".yaml"
        text = shipped_scenario_text(name)
        display, base = f"shipped scenario {name}", None
    else:
        p = Path(path)
        if not p.exists():
            names = [s.rsplit(".", 1)[0] for s in shipped_scenarios()]
            if p.suffix in (".yaml", ".yml") or len(p.parts) > 1:
                raise InputError(f"no such scenario file {p}; give a YAML file, or a shipped scenario's name "
                                 f"({', '.join(names)})", source=str(p))
            raise UnknownNameError("scenario", str(path), shipped_scenarios() + names)
        text = read_text_file(p, what="scenario YAML file")
        display, base = str(p), p.resolve().parent
    raw = parse_yaml(text, source=display)
    if not isinstance(raw, dict):
        raise InputError("a scenario must be a YAML mapping with 'sites' and 'models'", source=display)
    return raw, display, base


def token_mix_from_spec(spec: TokenMixSpec | None, where: str) -> TokenMix:
    """The :class:`TokenMix` a checked ``token_mix`` entry names: a shipped trace's token lengths or the four given
    statistics. Raises InputError (naming ``where``) when it is absent or inconsistent, UnknownNameError for an
    unknown trace."""
    if spec is None:
        raise _err("missing 'token_mix': give {trace: azure-conv} or the four token statistics", where, "token_mix")
    if spec.trace is not None:
        with _at(where, "token_mix.trace"):
            return token_mix_from_trace(load_trace(spec.trace))
    stats = (spec.input_tokens_mean, spec.input_tokens_p95, spec.output_tokens_mean, spec.output_tokens_p95)
    in_mean, in_p95, out_mean, out_p95 = stats
    if in_mean is None or in_p95 is None or out_mean is None or out_p95 is None:  # TokenMixSpec checks this too
        raise _err("token_mix needs {trace: ...} or all four token statistics", where, "token_mix")
    try:
        return TokenMix(in_mean, in_p95, out_mean, out_p95)
    except InputError as exc:
        raise InputError(str(exc), source=where, field="token_mix") from None


def _demand(spec: DemandSpec, where: str, base: Path | None, length: float, mix: TokenMix) -> Demand:

    if spec.servegen is not None:
        sg = spec.servegen
        with _at(where, "demand.servegen.series"):
            return servegen_demand(sg.series, sg.mean_rate_req_per_s, mix, window_length_s=length, day=sg.day,
                                   gaps=sg.gaps)
    if spec.trace is not None:
        if spec.trace.file:
            file = spec.trace.file
            ref = str(base / file) if base is not None and not Path(file).is_absolute() else file
        elif spec.trace.name is not None:
            ref = spec.trace.name
        else:  # TraceDemand checks that one is given
            raise _err("demand.trace needs 'name' (a shipped trace) or 'file'", where, "demand.trace")
        with _at(where, "demand.trace.name"):
            trace = load_trace(ref)
        if spec.trace.rate_scale != 1.0:
            trace = trace.time_scaled(spec.trace.rate_scale)
        (demand,) = trace_to_demand(trace, length, by=()).values()
        return demand
    if spec.day_curve is not None:
        p = Path(spec.day_curve.file)
        if base is not None and not p.is_absolute():
            p = base / p
        if p.is_dir():
            raise _err(f"{p} is a folder, not a file; give the path of a day-curve CSV", where,
                       "demand.day_curve.file", str(p))
        curve = read_day_curve_csv(p)
        scale = spec.day_curve.scale
        if abs(curve.window_length_s - length) > 1e-6:
            raise _err(f"day curve {p} has {curve.window_length_s:g}-s windows but options.window_length_s is "
                       f"{length:g}", where, "demand.day_curve")
        return day_curve_demand(curve.rates_req_per_s * scale, length, mix, f"day curve {p} × {scale:g}")
    if spec.rates is not None:
        for k, r in enumerate(spec.rates):
            if not 0 <= float(r) <= MAX_RATE_REQ_PER_S:
                raise _err(f"{float(r):g} req/s is outside 0..{MAX_RATE_REQ_PER_S:g}; give the window's mean "
                           "request rate in req/s", where, f"demand.rates[{k}]", r)
        return day_curve_demand([float(r) for r in spec.rates], length, mix, "rates given in the scenario")
    # DemandSpec checks that exactly one kind is given.
    raise _err("give one of servegen, trace, day_curve, rates under 'demand'", where, "demand")


def load_scenario(path: str | Path | None = None, *, window_length_s: float | None = None) -> Scenario:
    """Read and check a scenario and read its demand; no cost model is evaluated yet (see :func:`build_problem`).

    ``window_length_s`` overrides options.window_length_s. Raises InputError / UnknownNameError on bad input.
    """
    raw, where, base = read_scenario(path)
    return scenario_from_raw(raw, source=where, base=str(base) if base is not None else None,
                             window_length_s=window_length_s)


def _dates_as_text(raw: dict) -> dict:
    """``raw`` with an unquoted ``options.price_date`` (YAML reads 2025-05-31 as a date) as 'YYYY-MM-DD' text, so the
    mapping stays JSON (it is embedded in plan files)."""
    opts = raw.get("options")
    if isinstance(opts, dict) and isinstance(opts.get("price_date"), datetime.date):
        return {**raw, "options": {**opts, "price_date": opts["price_date"].isoformat()}}
    return raw


def scenario_from_raw(raw: dict, *, source: str = "scenario", base: str | None = None,
                      window_length_s: float | None = None, window_source: str = "--window") -> Scenario:
    """A :class:`Scenario` from an already-read mapping (e.g. the one embedded in a plan file); relative paths
    are resolved against ``base``; ``window_length_s`` overrides the options' (an error about it names
    ``window_source``, the option it came from)."""
    where = source
    base_dir = Path(base) if base else None
    if not isinstance(raw, dict):
        raise InputError("a scenario must be a mapping with 'sites' and 'models'", source=where)
    raw = _dates_as_text(raw)
    spec = validate_input(ScenarioFile, raw, source=where, labels=ENTRY_LABELS)
    if window_length_s is not None:
        checked = validate_input(ScenarioOptions, {"window_length_s": window_length_s}, source=window_source)
        spec = spec.model_copy(update={"options": spec.options.model_copy(
            update={"window_length_s": checked.window_length_s})})
    opts = spec.options.model_dump()
    demands, mixes = {}, {}
    for i, m in enumerate(spec.models):
        mw = f"{where}: models[{i}]"
        mixes[m.name] = token_mix_from_spec(m.token_mix, mw)
        demands[m.name] = _demand(m.demand, mw, base_dir, opts["window_length_s"], mixes[m.name])
    counts = {name: len(d.windows) for name, d in demands.items()}
    if len(set(counts.values())) != 1:
        raise _err("models' demand cover different numbers of windows: "
                   + ", ".join(f"{k} {v}" for k, v in counts.items())
                   + "; give every model a day curve (servegen, day_curve or rates) of the same length", where,
                   "demand")
    return Scenario(name=spec.name if spec.name is not None else where, description=spec.description or "",
                    base_dir=str(base_dir) if base_dir is not None else None, source=where, raw=raw, options=opts,
                    demands=demands, token_mixes=mixes, spec=spec)


def scenario_slos(scenario: Scenario, problem: Problem) -> dict[str, SLO]:
    """Each model's :class:`~fleetplan.costmodels.capacity.SLO` as the scenario gives it, keyed by the catalog name
    that ``problem`` (built from ``scenario``) uses; models are matched by position."""
    spec = scenario.spec or validate_input(ScenarioFile, scenario.raw, source=scenario.source, labels=ENTRY_LABELS)
    return {pm.name: m.slo.to_slo() for pm, m in zip(problem.models, spec.models, strict=True)}


def _price(gpu: str, site_name: str, pricing_model: str, where: str, prices, *, gpus_per_node: int,
           price_date: str | None) -> tuple[float, str]:
    """(USD per GPU-hour, where it comes from) for an inventory row without a price: the user's price rows win,
    else the newest consistent catalog snapshot (see :func:`fleetplan.costmodels.prices.find_price`)."""
    site = Site.parse(site_name)
    try:
        p = find_price(gpu, site.cloud, site.region, pricing_model, prices, zone=site.zone or None,
                       gpus_per_node=gpus_per_node, price_date=price_date)
    except FleetplanError as exc:
        field = getattr(exc, "field", None)
        msg = str(exc).removeprefix(f"field '{field}': ") if field else str(exc)
        raise InputError(f"{msg}; or give usd_per_gpu_hour for this inventory row", source=where,
                         field="pricing_model" if field == "pricing_model" else "usd_per_gpu_hour") from None
    label = price_label(p)
    if p.gpus_per_node != gpus_per_node:
        label += f"; NOTE: no {gpus_per_node}-GPU instance is priced here, so a {p.gpus_per_node}-GPU one is used"
    return p.usd_per_gpu_hour, label


def _pool(row: InventoryRow, where: str, site: str, gpu: GPU, pricing_model: str, prices, opts: dict) -> Pool:
    """The :class:`Pool` of one inventory row, priced by its pricing model (see :class:`Pool`): per used GPU-hour
    (the row's price or the catalogs'), committed (that price per committed GPU-hour, nothing per use), owned (the
    row's price, else the marginal power cost of a busy GPU: :func:`owned_marginal_usd_per_gpu_hour` with the
    GPU's TDP, its idle fraction and the ledger's electricity price and PUE, datasets/data/ledger), spot (its
    ``interruption_rate`` is required: no public per-instance rate is shipped, see pricing/PROVENANCE.md)."""
    gpn = row.gpus_per_node
    price = row.usd_per_gpu_hour
    if price is not None:
        src = f"usd_per_gpu_hour given in {where}"
    elif pricing_model == OWNED_PRICING_MODEL:
        a = load_assumptions()
        if not gpu.tdp_w:
            raise _err(f"owned {gpu.name} GPUs: the GPU catalog has no TDP for the power cost; give "
                       "usd_per_gpu_hour (the marginal cost of a busy GPU-hour)", where, "usd_per_gpu_hour")
        kwh, pue = a["electricity_usd_per_kwh"], a["pue"]
        price = owned_marginal_usd_per_gpu_hour(gpu.tdp_w, idle_fraction(gpu.name), kwh.value, pue.value)
        src = (f"owned: power above idle at {gpu.tdp_w:g} W TDP × PUE {pue.value:g} × {kwh.value:g} USD/kWh "
               f"(datasets/data/ledger/assumptions.csv: {kwh.source.split(' ')[0]})")
    else:
        price, src = _price(gpu.name, site, pricing_model, where, prices, gpus_per_node=gpn,
                            price_date=opts.get("price_date"))
    spot = pricing_model == SPOT_PRICING_MODEL
    if spot and row.interruption_rate is None:
        raise _err("a spot row needs interruption_rate: the expected share of its GPU-hours lost to preemption "
                   "(e.g. 0.05; 0 plans without derating)", where, "interruption_rate")
    if not spot and (row.interruption_rate is not None or row.fallback is not None):
        raise _err(f"interruption_rate and fallback are for spot rows; this row is {pricing_model}", where,
                   "interruption_rate" if row.interruption_rate is not None else "fallback")
    committed = pricing_model in COMMITTED_PRICING_MODELS
    if row.on_demand_usd_per_gpu_hour is not None and not committed:
        raise _err(f"on_demand_usd_per_gpu_hour is for committed rows; this row is {pricing_model}", where,
                   "on_demand_usd_per_gpu_hour")
    try:
        return Pool(site, gpu.name, nodes=row.nodes, gpus_per_node=gpn, usd_per_gpu_hour=0.0 if committed else price,
                    memory_bytes_per_gpu=gpu.memory_bytes, pricing_model=pricing_model, price_source=src,
                    name=row.name or "", committed_usd_per_gpu_hour=price if committed else 0.0,
                    on_demand_usd_per_gpu_hour=row.on_demand_usd_per_gpu_hour,
                    on_demand_price_source=(f"on_demand_usd_per_gpu_hour given in {where}"
                                            if row.on_demand_usd_per_gpu_hour is not None else ""),
                    interruption_rate=row.interruption_rate or 0.0, fallback_pool=row.fallback)
    except InputError as exc:
        raise InputError(str(exc), source=where, field=exc.field, value=exc.value) from None


def _with_on_demand_reference(pools: list[Pool], prices, price_date: str | None, rows_where: list[str]) -> list[Pool]:
    """``pools`` with the on-demand rate of every committed pool that has none (for its break-even utilization):
    an on-demand pool of the same site and GPU type in the scenario, else the catalogs' on-demand price there,
    else none (the plan then says the break-even is unknown).

    A committed row's own ``on_demand_usd_per_gpu_hour`` changes only the reported break-even, never the cost
    (overflow beyond the commitment runs on, and is priced at, the site's on-demand pool). So when such a pool
    exists, a rate differing from the pool's by more than half a cent is refused (InputError naming the row
    ``rows_where[k]``): it would contradict the pool that actually carries the overflow."""
    out = []
    for p, rw in zip(pools, rows_where, strict=True):
        twin = next((q for q in pools if q.site == p.site and q.gpu == p.gpu
                     and q.pricing_model == "on-demand"), None) if p.committed else None
        given = p.on_demand_usd_per_gpu_hour
        if twin is not None and given is not None and not math.isclose(given, twin.usd_per_gpu_hour,
                                                                        rel_tol=1e-9, abs_tol=0.005):
            raise _err(f"on_demand_usd_per_gpu_hour {given:g} differs from the {twin.usd_per_gpu_hour:g} USD/GPU-h "
                       f"of the on-demand pool {twin.id!r} of this site and GPU type, which carries (and prices) the "
                       "overflow beyond the commitment; drop the key (that pool's rate is the break-even's "
                       "reference) or change that row's usd_per_gpu_hour", rw, "on_demand_usd_per_gpu_hour", given)
        if p.committed and p.on_demand_usd_per_gpu_hour is None:
            if twin is not None:
                p = dataclasses.replace(p, on_demand_usd_per_gpu_hour=twin.usd_per_gpu_hour,
                                        on_demand_price_source=f"pool {twin.id}: {twin.price_source}")
            else:
                try:
                    rate, src = _price(p.gpu, p.site, "on-demand", p.id, prices, gpus_per_node=p.gpus_per_node,
                                       price_date=price_date)
                    p = dataclasses.replace(p, on_demand_usd_per_gpu_hour=rate, on_demand_price_source=src)
                except InputError:
                    pass  # no on-demand price known: the break-even is reported as unknown
        out.append(p)
    return out


def _check_pool_names(pools: list[Pool], rows_where: list[str]) -> None:
    """Pool ids are unique (an InputError names the second row of an id) and a spot row's ``fallback`` names
    another row of the same site and GPU type that is on-demand or owned (not spot, not committed:
    :data:`~fleetplan.placement.problem.COMMITTED_FALLBACK_WHY`); otherwise InputError naming the row
    (``rows_where[k]`` is where ``pools[k]`` comes from) and the rows that would do."""
    by_id = {p.id: p for p in pools}
    seen: set[str] = set()
    for p, rw in zip(pools, rows_where, strict=True):
        if p.id in seen:
            raise _err(f"an earlier inventory row already makes the pool {p.id!r}; give each row of one site and GPU "
                       "type its own name (e.g. owned, committed, on-demand, spot)", rw, "name", p.id)
        seen.add(p.id)
    for p, rw in zip(pools, rows_where, strict=True):
        if p.fallback_pool is None:
            continue
        usable = [q.id for q in pools if q.site == p.site and q.gpu == p.gpu and q is not p and not q.committed
                  and q.pricing_model != SPOT_PRICING_MODEL]
        here = f" (here: {', '.join(usable)})" if usable else " (this site has none of this GPU type: add one)"
        f = by_id.get(p.fallback_pool)
        if f is p:
            raise _err(f"a spot row cannot be its own fallback pool: its interrupted replicas restart on another "
                       f"row's GPUs; name an on-demand or owned row of the same site and GPU type{here}", rw,
                       "fallback", p.fallback_pool)
        if f is None:
            raise UnknownNameError("fallback pool", p.fallback_pool, usable, source=rw, field="fallback")
        if f.site != p.site or f.gpu != p.gpu or f.pricing_model == SPOT_PRICING_MODEL:
            why = "a spot row" if f.pricing_model == SPOT_PRICING_MODEL else f"{f.gpu} at {f.site}"
            raise _err(f"fallback {f.id!r} is {why}; name an on-demand or owned row of the same site and GPU type"
                       f"{here}", rw, "fallback", f.id)
        if f.committed:
            raise _err(f"fallback {f.id!r} is a committed row: {COMMITTED_FALLBACK_WHY}{here}", rw, "fallback", f.id)


def egress_table(sites: list[str]) -> dict[tuple[str, str], float]:
    """$/GB between every ordered pair of sites, from the shipped egress tables: the sender's cloud and the
    route class (same zone, cross zone, inter region; different clouds = internet). A tiered class (internet)
    is charged at its first paid band's rate, i.e. the planner assumes the site's monthly volume is past any
    free allowance (a conservative marginal rate)."""

    out = {}
    egress = load_egress()
    for a in sites:
        for b in sites:
            if a == b:
                continue
            cls = route_class(a, b)
            table = select_egress_table(Site.parse(a).cloud, cls, egress)
            paid = [t.usd_per_gb for t in table.tiers if t.usd_per_gb > 0]
            out[(a, b)] = paid[0] if paid else 0.0
    return out


def scenario_model(m: ScenarioModel, where: str, base: Path | None, models_file: str | None) -> Model:
    """The :class:`Model` a scenario's model entry names: its ``config`` (a Hugging Face config.json, relative to
    the scenario folder ``base``), its ``base_model``'s architecture under the entry's name (a fine-tune), or the
    catalog / ``files.models`` row of its name; then its stated ``params`` is checked against the architecture's
    (more than 10% off is an error showing both numbers).

    Raises:
        InputError / UnknownNameError: naming ``where`` and the key.
    """
    if m.config is not None:
        p = Path(m.config)
        p = base / p if base is not None and not p.is_absolute() else p
        try:
            model = model_from_hf_config(p, name=m.name)
        except InputError as exc:
            raise InputError(str(exc), source=where, field="config") from None
    elif m.base_model is not None:
        with _at(where, "base_model"):
            model = dataclasses.replace(get_model(m.base_model, models_file), name=m.name,
                                        source=f"architecture of {m.base_model} (base_model)")
    else:
        with _at(where, "name"):
            model = get_model(m.name, models_file)
    if m.params is not None:
        check_params(m.params, model.params_total, owner=f"{where}: model {m.name}")
    return model


def scenario_models(scenario: Scenario) -> dict[str, tuple[Model, str, str]]:
    """Each model of ``scenario`` as the planner sees it: {catalog name: (Model, weight dtype, KV dtype)}, with the
    entry's config.json / base_model / files.models and its per-model dtypes (default: the options'). For the
    simulator and other users of a plan's models, so they use the same architecture and dtypes as the plan."""
    spec = scenario.spec or validate_input(ScenarioFile, scenario.raw, source=scenario.source, labels=ENTRY_LABELS)
    base = Path(scenario.base_dir) if scenario.base_dir else None
    models_file = scenario_catalog_file(scenario, "models")
    out = {}
    for i, m in enumerate(spec.models):
        model = scenario_model(m, f"{scenario.source}: models[{i}]", base, models_file)
        out[model.name] = (model, m.weight_dtype or scenario.options["weight_dtype"],
                           m.kv_dtype or scenario.options["kv_dtype"])
    return out


def scenario_catalog_file(scenario: Scenario, key: str) -> str | None:
    """The user catalog file the scenario names under ``files.<key>`` ('gpus', 'models' or 'prices'), resolved
    against the scenario's folder, or None when it names none."""
    spec = scenario.spec or validate_input(ScenarioFile, scenario.raw, source=scenario.source, labels=ENTRY_LABELS)
    name = getattr(spec.files, key) if spec.files is not None else None
    if name is None:
        return None
    p = Path(name)
    base = Path(scenario.base_dir) if scenario.base_dir else None
    return str(base / p) if base is not None and not p.is_absolute() else str(p)


def scenario_profiles(scenario: Scenario) -> dict[str, dict[tuple[str, int], MeasuredProfile]]:
    """The measured profiles the scenario's models name (``models[].profiles``), read once:
    {catalog model name: {(catalog GPU name, tp): MeasuredProfile}}. The planner (:func:`build_problem`) and the
    simulator (:mod:`fleetplan.simulator.replay`) both take their capacity source from here.

    Raises InputError naming the entry for an unreadable file or two profiles of one (GPU, tp), UnknownNameError
    for an unknown GPU.
    """
    spec = scenario.spec or validate_input(ScenarioFile, scenario.raw, source=scenario.source, labels=ENTRY_LABELS)
    base = Path(scenario.base_dir) if scenario.base_dir else None
    out: dict[str, dict[tuple[str, int], MeasuredProfile]] = {}
    for i, m in enumerate(spec.models):
        if not m.profiles:
            continue
        model = scenario_model(m, f"{scenario.source}: models[{i}]", base, scenario_catalog_file(scenario, "models"))
        got = out.setdefault(model.name, {})
        for j, ps in enumerate(m.profiles):
            where = f"{scenario.source}: models[{i}].profiles[{j}]"
            try:
                gpu = get_gpu(ps.gpu, scenario_catalog_file(scenario, "gpus"))
                files = [f for pattern in ps.files for f in profile_files(pattern, base)]
                prof = load_profile(files, ps.format, tp=ps.tp, model=model.name, gpu=gpu.name,
                                    source=", ".join(ps.files))
            except FleetplanError as exc:
                raise InputError(str(exc), source=where, field="profiles") from None
            if (gpu.name, ps.tp) in got:
                raise InputError(f"two profiles of {model.name} on {gpu.name} tp {ps.tp}; give one (several "
                                 "vllm bench serve runs go in one entry's file list)", source=where, field="gpu",
                                 value=ps.gpu)
            got[(gpu.name, ps.tp)] = prof
    return out


def parse_profile_option(text: str) -> tuple[str, str, int, str | None, str]:
    """Parse ``fleetplan plan --profile MODEL@GPU[:tpN][:FORMAT]=FILE`` into (model, gpu, tp, format or None, file
    pattern). Raises InputError with the expected form."""
    form = ("give MODEL@GPU[:tpN][:FORMAT]=FILE, e.g. Llama-3.1-8B@H100:tp1=bench/*.json or "
            "Llama-3.1-8B@A100:tp2:guidellm=report.json")
    head, eq, file = text.partition("=")
    model, at, rest = head.partition("@")
    if not (eq and at and model.strip() and rest.strip() and file.strip()):
        raise InputError(f"--profile {text!r}: {form}", field="--profile", value=text)
    gpu, *mods = rest.split(":")
    tp, fmt = 1, None
    for mod in mods:
        if mod.startswith("tp") and mod[2:].isdigit():
            tp = int(mod[2:])
            if tp not in TP_DEGREES:
                raise InputError(f"--profile {text!r}: tp{tp} is not a tensor-parallel degree; give tp "
                                 f"{', '.join(map(str, TP_DEGREES))}", field="--profile", value=text)
        elif mod in PROFILE_FORMATS:
            fmt = mod
        else:
            raise InputError(f"--profile {text!r}: {mod!r} is neither tpN nor a format ({', '.join(PROFILE_FORMATS)}); "
                             f"{form}", field="--profile", value=text)
    return model.strip(), gpu.strip(), tp, fmt, file.strip()


def with_profiles(scenario: Scenario, options: list[str]) -> Scenario:
    """``scenario`` with the ``--profile`` options added to its models' ``profiles`` keys (file paths made
    absolute: they are relative to the working directory, not to the scenario). The raw mapping changes too, so a
    plan file embeds the profiles and its replay uses the same source. Raises InputError for a malformed option,
    UnknownNameError for a model the scenario does not have."""
    if not options:
        return scenario
    raw = copy.deepcopy(scenario.raw)
    spec = scenario.spec or validate_input(ScenarioFile, raw, source=scenario.source, labels=ENTRY_LABELS)
    models_file = scenario_catalog_file(scenario, "models")
    names = list(scenario_models(scenario))
    for text in options:
        model, gpu, tp, fmt, file = parse_profile_option(text)
        want = model if model in names else get_model(model, models_file).name
        if want not in names:
            raise UnknownNameError("scenario model", model, [m.name for m in spec.models], field="--profile")
        entry: dict = {"gpu": gpu, "tp": tp, "file": str(Path(file).absolute())}
        if fmt:
            entry["format"] = fmt
        raw["models"][names.index(want)].setdefault("profiles", []).append(entry)
    return scenario_from_raw(raw, source=scenario.source, base=scenario.base_dir,
                             window_length_s=scenario.options["window_length_s"])


#: Prompt-length quantiles of the class edges of ``classes: auto`` (bench_classes: 8B at 10x, -16.6% cost).
AUTO_CLASS_QUANTILES = (0.5, 0.8)


def trace_classes(m: ScenarioModel, where: str) -> list[tuple[str, float, TokenMix, float, float]]:
    """Request classes of ``m`` cut from its token-mix trace at prompt-length edges (``classes: {prompt_edges}``,
    ``{prompt_quantiles}`` or ``auto``): [(name, share, token mix, input_tokens_max, output_tokens_max)], empty
    classes left out. Raises InputError when a class would hold fewer than 20 requests (no p95 to speak of)."""
    if m.token_mix.trace is None:  # ScenarioModel checks this too
        raise _err("classes cut at prompt edges need token_mix: {trace: ...}", where, "classes")
    spec = m.classes
    if isinstance(spec, ClassEdgesSpec):
        given = [v for v in (spec.prompt_edges, spec.prompt_quantiles) if v is not None]
        if len(given) != 1 or not given[0]:
            raise _err("classes: give one of prompt_edges or prompt_quantiles (a non-empty list)", where, "classes")
        if any(b <= a for a, b in zip(given[0], given[0][1:], strict=False)):
            raise _err(f"classes: edges {given[0]} must be ascending", where, "classes", given[0])
    tr = load_trace(m.token_mix.trace)
    inp, out = tr.input_tokens, tr.output_tokens
    if isinstance(spec, ClassEdgesSpec) and spec.prompt_edges is not None:
        edges = [float(e) for e in spec.prompt_edges]
    else:
        qs = spec.prompt_quantiles if isinstance(spec, ClassEdgesSpec) and spec.prompt_quantiles else (
            AUTO_CLASS_QUANTILES)
        edges = sorted({float(np.quantile(inp, q)) for q in qs})
    bounds = [0.0, *edges, math.inf]
    out_classes = []
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        sel = (inp > lo) & (inp <= hi)
        if not sel.any():
            continue
        if sel.sum() < 20:
            raise _err(f"the class of prompts in ({lo:g}, {hi:g}] tokens holds {int(sel.sum())} requests of trace "
                       f"{tr.name}; move the edges", where, "classes")
        mix = TokenMix(float(inp[sel].mean()), float(np.percentile(inp[sel], 95)), float(out[sel].mean()),
                       float(np.percentile(out[sel], 95)), lengths=(inp[sel], out[sel]))
        out_classes.append((f"prompt<={hi:g}", float(sel.mean()), mix, hi, math.inf))
    total = sum(c[1] for c in out_classes)
    return [(n, sh / total, mx, a, b) for n, sh, mx, a, b in out_classes]


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
    """(peak factor, its source) of an ``arrivals`` key (:class:`~fleetplan.placement.schemas.ArrivalsSpec`) at
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


#: Key of a derated option: (model, pool id, tp, pp) for a dedicated replica, (model, pool id, 'shared', 1) for a
#: shared-GPU residence, (model, pool id, 'prefill' | 'decode', tp) for a prefill or decode option.
DeratingKey = tuple[str, str, int | str, int]


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
        raise _err(str(exc).removeprefix("field 'price_date': "), f"{where}: options", "price_date",
                   opts.get("price_date")) from None
    calib_file = opts.get("calibration")
    if calib_file is not None and base is not None and not Path(calib_file).is_absolute():
        calib_file = str(base / calib_file)
    link = inter_node_link(opts.get("inter_node_link"))
    allowed = opts.get("allowed_gpus")
    with _at(f"{where}: options", "allowed_gpus"):
        allowed_names = {get_gpu(g, _file("gpus")).name for g in allowed} if allowed else None
    pools: list[Pool] = []
    rows_where: list[str] = []
    gpus = {}
    site_rows: dict[str, int] = {}
    for i, s in enumerate(spec.sites):
        sw = f"{where}: sites[{i}]"
        with _within(sw, "name"):
            parsed = Site.parse(s.name)
        site = parsed.name
        if site in site_rows:
            raise _err(f"site {site!r} is listed twice (sites[{site_rows[site]}] and sites[{i}]); list each site "
                       "once, with all its inventory rows under it", sw, "name", s.name)
        site_rows[site] = i
        if any(row.usd_per_gpu_hour is None for row in s.inventory):  # a catalog price is looked up
            _check_region(parsed, prices, sw)
        for j, row in enumerate(s.inventory):
            rw = f"{sw}.inventory[{j}]"
            with _at(rw, "gpu"):
                gpu = get_gpu(row.gpu, _file("gpus"))
            if allowed_names is not None and gpu.name not in allowed_names:
                continue
            gpus[gpu.name] = gpu
            pm = row.pricing_model or s.pricing_model or opts["pricing_model"]
            pools.append(_pool(row, rw, site, gpu, pm, prices, opts))
            rows_where.append(rw)
    if not pools:
        raise _err("no GPU pool left (check allowed_gpus and the inventories)", where, "sites")
    pools = _with_on_demand_reference(pools, prices, opts.get("price_date"), rows_where)
    _check_pool_names(pools, rows_where)
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
        raise _err(f"every site ({', '.join(sorted(prefill_only))}) is prefill-only, so no model can be decoded or "
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
            with _within(mw, "origin_site"):
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
            raise _err(f"models[{model_rows[model.name]}] and models[{i}] are both the model {model.name!r}; give "
                       "each model once", mw, "name", m.name)
        model_rows[model.name] = i
        with _within(mw):
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
                raise _err(f"disaggregation and request classes together are not supported yet: model {m.name} "
                           f"(models[{i}]) has classes; leave it out of options.disaggregation.models or drop its "
                           "classes", where, "options.disaggregation")
            pdo, routes = _pd_options(model, mix, slo, pools, gpus, tps, opts, calib_file=calib_file, weight_dtype=wd,
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


def _pd_options(model: Model, mix: TokenMix, slo: SLO, pools: list[Pool], gpus: dict[str, GPU], tps: list[int],
                opts: dict, *, calib_file: str | None, weight_dtype: str, kv_dtype: str, link: Link,
                why: list[str], prefill_only: set[str],
                derating: dict[DeratingKey, float] | None = None) -> tuple[list[ReplicaOption], list[KvRoute]]:
    """Prefill and decode options of ``model`` on ``pools`` and the KV routes between their sites (issue 17).

    Decode options: every pool and tp (pp 1) with a positive decode capacity
    (:func:`fleetplan.costmodels.split.decode_replica_capacity`: memory bandwidth and KV memory under the TPOT
    target) and a KV cache of at least ``min_batch`` sequences (not at ``prefill_only`` sites). Prefill options:
    every pool, tp and decode site (the prefill pool's own site, or any site with a decode option when
    ``cross_site``), with the prefill capacity
    (:func:`fleetplan.costmodels.split.prefill_replica_capacity`) under the TTFT target minus the p95 prompt's KV
    transfer to that site (:func:`fleetplan.costmodels.split.kv_transfer_s`: the scenario's inter-node link inside
    a site, the shipped WAN link between sites; one stream per tensor-parallel rank), as the ledger's split
    comparison sizes them. Routes carry the mean prompt's KV bytes, its text bytes (bytes_per_token) and the
    egress tables (the sender's cloud and route class; a flat ``kv_egress_usd_per_gb`` when given).
    Options left out are explained in ``why``. ``derating``: capacity factors per (model, pool, role, tp), as
    :func:`build_problem` takes them.
    """
    derating = derating or {}
    dis = opts["disaggregation"]
    mu_mem = opts["memory_utilization"]
    kv_mean = model.kv_tokens_cached(mix.input_tokens_mean) * model.kv_bytes_per_token(kv_dtype)
    kv_p95 = model.kv_tokens_cached(mix.input_tokens_p95) * model.kv_bytes_per_token(kv_dtype)
    weights = model.weight_bytes(weight_dtype)
    graph = load_network_graph()
    egress = load_egress()

    def start_usd(pool: Pool, tp: int) -> float:
        return weights / tp / opts["load_bandwidth_bytes_per_s"] / 3600 * tp * pool.usd_per_busy_gpu_hour + opts[
            "usd_per_migration"]

    decode: list[ReplicaOption] = []
    for pool in pools:
        if pool.site in prefill_only:
            continue
        gpu = gpus[pool.gpu]
        calib = load_calibration(gpu, calib_file)
        for tp in tps:
            if tp > pool.gpus_per_node or pool.gpus_per_node % tp:
                continue
            cap, batch, lim = decode_replica_capacity(model, gpu, mix, slo, tp=tp, calib=calib,
                                                      weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                                                      memory_utilization=mu_mem)
            if cap <= 0 or batch < opts["min_batch"]:
                why.append(f"{pool.id} tp {tp} decode: " + (f"no capacity ({lim})" if cap <= 0 else
                                                            f"KV cache holds {batch:.1f} sequences < min_batch"))
                continue
            tpot = decode_step_time_s(model, gpu, batch, mix.input_tokens_p95 + mix.output_tokens_p95 / 2, tp=tp,
                                      weight_dtype=weight_dtype, kv_dtype=kv_dtype, calib=calib)
            cap *= derating.get((model.name, pool.id, "decode", tp), 1.0) * (1 - pool.interruption_rate)  # spot derated
            decode.append(ReplicaOption(model.name, pool.id, tp, 1, cap, mu_mem * gpu.memory_bytes,
                                        start_cost_usd=start_usd(pool, tp), tpot_p95_s=tpot, max_batch=batch,
                                        kv_budget_bytes=mu_mem * tp * gpu.memory_bytes - weights,
                                        capacity_source=f"decode-only roofline ({calib.gpu} row), limited by {lim}",
                                        role="decode"))
    site_of = {p.id: p.site for p in pools}
    decode_sites = sorted({site_of[o.pool] for o in decode})
    prefill: list[ReplicaOption] = []
    routes: dict[tuple[str, str], KvRoute] = {}
    for pool in pools:
        gpu = gpus[pool.gpu]
        calib = load_calibration(gpu, calib_file)
        for ds in decode_sites:
            if ds != pool.site and not dis["cross_site"]:
                continue
            wan = graph.link(pool.site, ds) if ds != pool.site else link
            for tp in tps:
                if tp > pool.gpus_per_node or pool.gpus_per_node % tp:
                    continue
                added = kv_transfer_s(kv_p95, wan, tp)
                cap, ttft = prefill_replica_capacity(model, gpu, mix, slo.ttft_s - added, tp=tp, calib=calib,
                                                     weight_dtype=weight_dtype)
                if cap <= 0:
                    why.append(f"{pool.id} tp {tp} prefill for decode at {ds}: misses TTFT {slo.ttft_s:g} s "
                               f"(KV transfer {added:.3f} s)")
                    continue
                cap *= derating.get((model.name, pool.id, "prefill", tp), 1.0) * (1 - pool.interruption_rate)
                prefill.append(ReplicaOption(model.name, pool.id, tp, 1, cap, mu_mem * gpu.memory_bytes,
                                             start_cost_usd=start_usd(pool, tp), ttft_p95_s=ttft + added,
                                             capacity_source=f"prefill-only roofline ({calib.gpu} row), KV over "
                                                             f"{wan.name}", role="prefill", decode_site=ds,
                                             kv_transfer_s=added))
                if (pool.site, ds) not in routes:
                    cross = pool.site != ds
                    rc = route_class(pool.site, ds) if cross else ""
                    kv_t = pr_t = None
                    if cross:
                        kv_t = select_egress_table(Site.parse(pool.site).cloud, rc, egress)
                        pr_t = select_egress_table(Site.parse(ds).cloud, route_class(ds, pool.site), egress)
                        if dis["kv_egress_usd_per_gb"] is not None:
                            kv_t = flat_table(kv_t, dis["kv_egress_usd_per_gb"])
                            pr_t = flat_table(pr_t, dis["kv_egress_usd_per_gb"])
                    routes[(pool.site, ds)] = KvRoute(model.name, pool.site, ds, rc, kv_mean,
                                                      mix.input_tokens_mean * opts["bytes_per_token"], kv_t, pr_t,
                                                      link=wan.name)
    return prefill + decode, list(routes.values())
