"""Reading a scenario file (YAML): the checked file, its demands and token mixes, and its models from the catalogs.

Building the Problem from it is :func:`fleetplan.scenario.build.build_problem`.

A scenario names sites with GPU inventory, models with tensor-parallel options, replica floor and ceiling, SLOs and
demand per window, and planning options. See ``datasets/scenarios/default.yaml`` for a complete, commented example.
The file is checked by the pydantic model :class:`fleetplan.scenario.schemas.ScenarioFile` (its JSON Schema:
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
import dataclasses
import datetime
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetplan.costmodels.demand import MAX_RATE_REQ_PER_S, Demand, TokenMix
from fleetplan.costmodels.engine import EngineConfig
from fleetplan.costmodels.hardware import Model, check_params
from fleetplan.costmodels.network import Site
from fleetplan.costmodels.slo import SLO
from fleetplan.datasets.catalog.models import model_from_hf_config
from fleetplan.datasets.catalog.names import get_model
from fleetplan.datasets.servegen import servegen_demand
from fleetplan.datasets.shipped import shipped_scenario_text, shipped_scenarios
from fleetplan.datasets.traces import (
    day_curve_demand,
    load_trace,
    read_day_curve_csv,
    token_mix_from_trace,
    trace_to_demand,
)
from fleetplan.errors import InputError, UnknownNameError
from fleetplan.fileio import parse_yaml, read_text_file, validate_input
from fleetplan.placement.problem import (
    Problem,
)
from fleetplan.scenario.schemas import (
    ENTRY_LABELS,
    DemandSpec,
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
        spec: the checked file (:class:`~fleetplan.scenario.schemas.ScenarioFile`); sites and models in file order.
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


def scenario_spec(scenario: Scenario) -> ScenarioFile:
    """The checked file of ``scenario`` (:attr:`Scenario.spec`; a Scenario made without one has its raw mapping
    checked now). Raises InputError naming the field, as reading the file would."""
    if scenario.spec is not None:
        return scenario.spec
    return validate_input(ScenarioFile, scenario.raw, source=scenario.source, labels=ENTRY_LABELS)


def scenario_embed(scenario: Scenario) -> dict:
    """What a plan file stores of its scenario: name, source, base folder and the raw mapping."""
    return {"name": scenario.name, "source": scenario.source, "base": scenario.base_dir, "raw": scenario.raw,
            "window_length_s": scenario.options["window_length_s"]}


def field_error(msg: str, where: str, key: str | None = None, value: object = None) -> InputError:
    return InputError(msg, source=where, field=key, value=value)


@contextlib.contextmanager
def at_field(where: str, key: str) -> Iterator[None]:
    """Give an UnknownNameError raised inside (a GPU, model or trace name the catalogs lack) the file and field path
    ``where`` / ``key`` it came from, keeping its "did you mean"."""
    try:
        yield
    except UnknownNameError as exc:
        if exc.source:
            raise
        raise InputError(str(exc), source=where, field=key, value=exc.name) from None


@contextlib.contextmanager
def within_entry(where: str, key: str | None = None) -> Iterator[None]:
    """Give an InputError raised inside without a file (a cost-model record's own check) the file and entry
    ``where`` it came from and the field path ``key`` (default: the error's own field)."""
    try:
        yield
    except InputError as exc:
        if exc.source:
            raise
        raise InputError(exc.message, source=where, field=key or exc.field, value=exc.value) from None


def check_region(site: Site, prices: list, where: str) -> None:
    """Raise UnknownNameError (naming ``where``) when ``site``'s cloud has price rows but none in its region (a
    misspelt region, 'us-est-1', would otherwise surface as a missing price), or when ``site`` names a zone and its
    region has price rows per zone (the SkyPilot AWS and GCP extracts) but none in that zone (``use1-az99`` was
    planned, priced from the region's rows). A zone of a region priced only per region (Azure) cannot be checked
    and passes."""
    regions = {p.region for p in prices if p.cloud == site.cloud and p.region}
    if regions and site.region not in regions:
        raise UnknownNameError(f"{site.cloud} region", site.region, regions, source=where, field="name")
    zones = {p.zone for p in prices if p.cloud == site.cloud and p.region == site.region and p.zone}
    if site.zone and zones and site.zone not in zones:
        raise UnknownNameError(f"{site.cloud} {site.region} zone", site.zone, zones, source=where, field="name")


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


def read_yaml_input(path: str | Path | None, shipped: str, what: str) -> tuple[Any, str]:
    """The parsed YAML of an input file and its source name: the shipped scenario file ``shipped`` when ``path`` is
    None. ``what`` names the file kind in messages (e.g. 'tenants YAML file'). Raises InputError for a missing,
    unreadable or malformed file, naming it."""
    if path is None:
        return parse_yaml(shipped_scenario_text(shipped), source=shipped), shipped
    p = Path(path)
    if not p.exists():
        raise InputError(f"scenario file {p} does not exist", source=str(p))
    return parse_yaml(read_text_file(p, what=what), source=str(p)), str(p)


def token_mix_from_spec(spec: TokenMixSpec | None, where: str) -> TokenMix:
    """The :class:`TokenMix` a checked ``token_mix`` entry names: a shipped trace's token lengths or the four given
    statistics. Raises InputError (naming ``where``) when it is absent or inconsistent, UnknownNameError for an
    unknown trace."""
    if spec is None:
        raise field_error("missing 'token_mix': give {trace: azure-conv} or the four token "
                          "statistics", where, "token_mix")
    if spec.trace is not None:
        with at_field(where, "token_mix.trace"):
            return token_mix_from_trace(load_trace(spec.trace))
    stats = (spec.input_tokens_mean, spec.input_tokens_p95, spec.output_tokens_mean, spec.output_tokens_p95)
    in_mean, in_p95, out_mean, out_p95 = stats
    if in_mean is None or in_p95 is None or out_mean is None or out_p95 is None:  # TokenMixSpec checks this too
        raise field_error("token_mix needs {trace: ...} or all four token statistics", where, "token_mix")
    try:
        return TokenMix(in_mean, in_p95, out_mean, out_p95)
    except InputError as exc:
        raise InputError(str(exc), source=where, field="token_mix") from None


def _demand(spec: DemandSpec, where: str, base: Path | None, length: float, mix: TokenMix) -> Demand:

    if spec.servegen is not None:
        sg = spec.servegen
        with at_field(where, "demand.servegen.series"):
            return servegen_demand(sg.series, sg.mean_rate_req_per_s, mix, window_length_s=length, day=sg.day,
                                   gaps=sg.gaps)
    if spec.trace is not None:
        if spec.trace.file:
            file = spec.trace.file
            ref = str(base / file) if base is not None and not Path(file).is_absolute() else file
        elif spec.trace.name is not None:
            ref = spec.trace.name
        else:  # TraceDemand checks that one is given
            raise field_error("demand.trace needs 'name' (a shipped trace) or 'file'", where, "demand.trace")
        with at_field(where, "demand.trace.name"):
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
            raise field_error(f"{p} is a folder, not a file; give the path of a day-curve CSV", where,
                       "demand.day_curve.file", str(p))
        curve = read_day_curve_csv(p)
        scale = spec.day_curve.scale
        if abs(curve.window_length_s - length) > 1e-6:
            raise field_error(f"day curve {p} has {curve.window_length_s:g}-s windows but options.window_length_s is "
                       f"{length:g}", where, "demand.day_curve")
        return day_curve_demand(curve.rates_req_per_s * scale, length, mix, f"day curve {p} × {scale:g}")
    if spec.rates is not None:
        for k, r in enumerate(spec.rates):
            if not 0 <= float(r) <= MAX_RATE_REQ_PER_S:
                raise field_error(f"{float(r):g} req/s is outside 0..{MAX_RATE_REQ_PER_S:g}; give the window's mean "
                           "request rate in req/s", where, f"demand.rates[{k}]", r)
        return day_curve_demand([float(r) for r in spec.rates], length, mix, "rates given in the scenario")
    # DemandSpec checks that exactly one kind is given.
    raise field_error("give one of servegen, trace, day_curve, rates under 'demand'", where, "demand")


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
    # Another command's file (the shipped names are listed together): said as such, instead of its keys one by one
    # ("unknown key 'window_s' in the top level ... (and 7 more problems)").
    for keys, kind, command in ((("pool", "tenants"), "a tenants file", "fleetplan allocate"),
                                (("training", "inference"), "a troughs file", "fleetplan troughs"),
                                (("prefill_site", "decode_site"), "a split design", "fleetplan ledger split or "
                                 "fleetplan whatif")):
        if "sites" not in raw and all(k in raw for k in keys):
            raise InputError(f"this is {kind} (keys {', '.join(keys)}), not a planner scenario (keys sites, models): "
                             f"give it to {command}", source=where)
    raw = _dates_as_text(raw)
    spec = validate_input(ScenarioFile, raw, source=where, labels=ENTRY_LABELS)
    if window_length_s is not None:
        checked = validate_input(ScenarioOptions, {"window_length_s": window_length_s}, source=window_source)
        own_s = spec.options.window_length_s
        listed = [m.name for m in spec.models if m.demand.rates is not None]
        if listed and abs(checked.window_length_s - own_s) > 1e-6:  # rates are per the file's window
            raise InputError(f"{window_source} {checked.window_length_s:g} s does not fit the rates: list of "
                             f"{', '.join(listed)}, given per {own_s:g}-s window (options.window_length_s); drop "
                             f"{window_source}, or give the rates per {checked.window_length_s:g}-s window and set "
                             "options.window_length_s to it", source=where, field=window_source,
                             value=checked.window_length_s)
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
        raise field_error("models' demand cover different numbers of windows: "
                   + ", ".join(f"{k} {v}" for k, v in counts.items())
                   + "; give every model a day curve (servegen, day_curve or rates) of the same length", where,
                   "demand")
    return Scenario(name=spec.name if spec.name is not None else where, description=spec.description or "",
                    base_dir=str(base_dir) if base_dir is not None else None, source=where, raw=raw, options=opts,
                    demands=demands, token_mixes=mixes, spec=spec)


def scenario_slos(scenario: Scenario, problem: Problem) -> dict[str, SLO]:
    """Each model's :class:`~fleetplan.costmodels.slo.SLO` as the scenario gives it, keyed by the catalog name
    that ``problem`` (built from ``scenario``) uses; models are matched by position."""
    spec = scenario_spec(scenario)
    return {pm.name: m.slo.to_slo() for pm, m in zip(problem.models, spec.models, strict=True)}


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
        with at_field(where, "base_model"):
            model = dataclasses.replace(get_model(m.base_model, models_file), name=m.name,
                                        source=f"architecture of {m.base_model} (base_model)")
    else:
        with at_field(where, "name"):
            model = get_model(m.name, models_file)
    if m.params is not None:
        check_params(m.params, model.params_total, owner=f"{where}: model {m.name}")
    return model


def scenario_engine(engine: EngineConfig, where: str, key: str, models_file: str | None) -> EngineConfig:
    """``engine`` with its speculative draft model's architecture resolved (:attr:`Speculation.draft`, from the
    catalog or the scenario's ``files.models``), unchanged without a draft. Raises InputError naming ``where`` and
    ``key`` (e.g. 'models[0].engine') for an unknown draft model."""
    spec = engine.speculative
    if spec is None or spec.draft_model is None or spec.draft is not None:
        return engine
    with at_field(where, f"{key}.speculative.draft_model"):
        draft = get_model(spec.draft_model, models_file)
    return dataclasses.replace(engine, speculative=dataclasses.replace(spec, draft=draft))


def scenario_models(scenario: Scenario) -> dict[str, tuple[Model, str, str]]:
    """Each model of ``scenario`` as the planner sees it: {catalog name: (Model, weight dtype, KV dtype)}, with the
    entry's config.json / base_model / files.models and its per-model dtypes (default: the options'). For the
    simulator and other users of a plan's models, so they use the same architecture and dtypes as the plan."""
    spec = scenario_spec(scenario)
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
    spec = scenario_spec(scenario)
    name = getattr(spec.files, key) if spec.files is not None else None
    if name is None:
        return None
    p = Path(name)
    base = Path(scenario.base_dir) if scenario.base_dir else None
    return str(base / p) if base is not None and not p.is_absolute() else str(p)
