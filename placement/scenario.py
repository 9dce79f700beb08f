"""Scenario files (YAML) into placement Problems, through the catalogs and the cost models.

A scenario names sites with GPU inventory, models with tensor-parallel options, replica floor and ceiling, SLOs and
demand per window, and planning options. See ``datasets/scenarios/default.yaml`` for a complete, commented example.
Schema (all keys; unknown keys are errors that suggest the closest known key)::

    name: str
    description: str
    options:
      window_length_s: 3600          # 60..86400; every model's demand is read at this window length
      margin: 0.1                    # capacity is used up to 1 - margin
      demand_rate: peak | mean       # plan each window for its peak sub-interval rate (default) or its mean
      weight_dtype: bf16 | fp8 | int4
      kv_dtype: bf16 | fp8
      memory_utilization: 0.9        # share of GPU memory a replica may use (the rest is runtime reserve)
      shared_kv_fraction: 0.5        # a model on a shared GPU gets at most this share of its memory
      max_shared_gpus_per_pool: 8
      max_models_per_shared_gpu: 2   # residents per shared GPU; a shared model is sized for TPOT target / this
      min_batch: 8                   # a replica whose KV cache holds fewer sequences (mean length) is left out
      load_bandwidth_bytes_per_s: 1.0e9   # weight loading speed, for the cost of starting a replica
      usd_per_migration: 0.0         # flat cost added to every replica start
      bytes_per_token: 4             # network bytes per token of request/response text
      allowed_gpus: [H100, ...]      # optional filter
      pricing_model: on-demand       # default for every pool
      inter_node_link: null          # links.csv name for pipeline stages across nodes (default link when null)
    files: {gpus: path, models: path, prices: path}   # optional user catalog rows (same schema as shipped)
    sites:
      - name: aws:us-east-1
        pricing_model: on-demand     # optional, overrides options.pricing_model
        inventory:
          - {gpu: H100, nodes: 2, gpus_per_node: 8, usd_per_gpu_hour: null}   # price from the catalogs if null
    models:
      - name: Llama-3.1-8B
        tp: [1, 2]                   # tensor-parallel degrees to consider
        min_replicas: 1
        max_replicas: null
        slo: {ttft_p95_s: 2.0, tpot_p95_s: 0.1}
        origin_site: aws:us-east-1   # where its traffic comes from (egress when served elsewhere)
        token_mix: {trace: azure-conv}    # or {input_tokens_mean, input_tokens_p95, output_tokens_mean, ...}
        demand:                      # exactly one of:
          servegen: {series: m-small, mean_rate_req_per_s: 1.5, day: mean, gaps: interpolate}
          trace: {name: azure-conv, rate_scale: 1.0}
          day_curve: {file: curve.csv, scale: 1.0}
          rates: [1.0, 2.0, ...]     # req/s per window

Relative file paths are relative to the scenario file. Every error names the file, the key and the fix.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from fleetplan.costmodels.capacity import SLO, replica_capacity
from fleetplan.costmodels.demand import Demand, TokenMix
from fleetplan.costmodels.network import Site, route_class
from fleetplan.costmodels.prices import select_egress_table
from fleetplan.costmodels.queueing import poisson_occupancy_quantile
from fleetplan.datasets.calibration import load_calibration
from fleetplan.datasets.catalog import find_price, get_gpu, get_model, load_egress, load_gpu_prices
from fleetplan.datasets.network import inter_node_link
from fleetplan.datasets.servegen import servegen_demand
from fleetplan.datasets.traces import (
    day_curve_demand,
    load_trace,
    read_day_curve_csv,
    token_mix_from_trace,
    trace_to_demand,
)
from fleetplan.errors import FleetplanError, InputError, UnknownNameError
from fleetplan.placement.problem import ModelSpec, Pool, Problem, ReplicaOption, ShareOption

DEFAULT_SCENARIO = "default.yaml"

_OPTION_DEFAULTS: dict[str, Any] = {
    "window_length_s": 3600.0, "margin": 0.1, "demand_rate": "peak", "weight_dtype": "bf16", "kv_dtype": "bf16",
    "memory_utilization": 0.9, "shared_kv_fraction": 0.5, "max_shared_gpus_per_pool": 8,
    "max_models_per_shared_gpu": 2, "min_batch": 8,
    "load_bandwidth_bytes_per_s": 1.0e9, "usd_per_migration": 0.0, "bytes_per_token": 4.0, "allowed_gpus": None,
    "pricing_model": "on-demand", "inter_node_link": None,
}
_TOP_KEYS = {"name", "description", "options", "files", "sites", "models", "notes"}
_SITE_KEYS = {"name", "pricing_model", "inventory"}
_INV_KEYS = {"gpu", "nodes", "gpus_per_node", "usd_per_gpu_hour", "pricing_model", "region_price_from"}
_MODEL_KEYS = {"name", "tp", "min_replicas", "max_replicas", "slo", "origin_site", "token_mix", "demand", "source"}
_DEMAND_KINDS = {"servegen", "trace", "day_curve", "rates"}


@dataclass(frozen=True)
class Scenario:
    """A parsed scenario: its raw mapping (kept for reports and plan files), where it came from, and the pieces the
    planner and the simulator need.

    Attributes:
        name, description: labels.
        base_dir: folder of the scenario file (relative paths resolve against it), None for shipped scenarios.
        source: where it came from (file path or 'shipped scenario default.yaml').
        raw: the YAML mapping as read (embedded into plan files so a plan can be replayed without the file).
        options: options with defaults filled in.
        demands: {model: Demand} at the scenario's window length.
        token_mixes: {model: TokenMix} used for capacity.
    """

    name: str
    description: str
    base_dir: str | None
    source: str
    raw: dict
    options: dict
    demands: dict[str, Demand] = field(default_factory=dict)
    token_mixes: dict[str, TokenMix] = field(default_factory=dict)


def scenario_embed(scenario: Scenario) -> dict:
    """What a plan file stores of its scenario: name, source, base folder and the raw mapping."""
    return {"name": scenario.name, "source": scenario.source, "base": scenario.base_dir, "raw": scenario.raw,
            "window_length_s": scenario.options["window_length_s"]}


def _err(msg: str, where: str, key: str | None = None, value: Any = None) -> InputError:
    return InputError(msg, source=where, field=key, value=value)


def _check_keys(d: Any, allowed: set[str], where: str, what: str) -> dict:
    if not isinstance(d, dict):
        raise _err(f"{what} must be a mapping (key: value), got {type(d).__name__}", where, what)
    for k in d:
        if k not in allowed:
            close = difflib.get_close_matches(str(k), sorted(allowed), n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(sorted(allowed))}"
            raise _err(f"unknown key '{k}' in {what}; {hint}", where, str(k))
    return d


def _number(d: dict, key: str, where: str, *, low: float, high: float, unit: str = "", default: Any = None,
            integer: bool = False, fix: str = "") -> Any:
    v = d.get(key, default)
    if v is None:
        return None
    if isinstance(v, str):  # YAML 1.1 reads 1.0e9 (no sign in the exponent) as a string
        try:
            v = float(v)
        except ValueError:
            raise _err(f"'{key}' must be a number{' (' + unit + ')' if unit else ''}, got {v!r}", where, key,
                       v) from None
    if isinstance(v, bool) or not isinstance(v, int | float) or (isinstance(v, float) and not math.isfinite(v)):
        raise _err(f"'{key}' must be a number{' (' + unit + ')' if unit else ''}, got {v!r}", where, key, v)
    if integer and int(v) != v:
        raise _err(f"'{key}' must be a whole number, got {v!r}", where, key, v)
    if not (low <= v <= high):
        raise _err(f"'{key}' = {v:g}{' ' + unit if unit else ''} is outside {low:g}..{high:g}"
                   f"{'; ' + fix if fix else ''}", where, key, v)
    return int(v) if integer else float(v)


def shipped_scenarios() -> list[str]:
    """File names of the scenarios shipped in fleetplan.datasets/scenarios."""
    root = resources.files("fleetplan.datasets") / "scenarios"
    return sorted(p.name for p in root.iterdir() if p.name.endswith((".yaml", ".yml")))


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
        text = (resources.files("fleetplan.datasets") / "scenarios" / name).read_text()
        display, base = f"shipped scenario {name}", None
    else:
        p = Path(path)
        if not p.exists():
            names = [s.rsplit(".", 1)[0] for s in shipped_scenarios()]
            if p.suffix in (".yaml", ".yml") or len(p.parts) > 1:
                raise InputError(f"no such scenario file {p}; give a YAML file, or a shipped scenario's name "
                                 f"({', '.join(names)})", source=str(p))
            raise UnknownNameError("scenario", str(path), shipped_scenarios() + names)
        if p.is_dir():
            raise InputError(f"{p} is a folder; give a scenario YAML file", source=str(p))
        text = p.read_text()
        display, base = str(p), p.resolve().parent
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        row = mark.line + 1 if mark is not None else None
        raise InputError(f"not valid YAML: {getattr(exc, 'problem', exc)}", source=display, row=row) from None
    if not isinstance(raw, dict):
        raise InputError("a scenario must be a YAML mapping with 'sites' and 'models'", source=display)
    return raw, display, base


def _options(raw: dict, where: str) -> dict:
    opts = dict(_OPTION_DEFAULTS)
    given = _check_keys(raw.get("options") or {}, set(_OPTION_DEFAULTS), where, "options")
    opts.update(given)
    w = f"{where}: options"
    opts["window_length_s"] = _number(opts, "window_length_s", w, low=60, high=86400, unit="s",
                                      fix="give seconds, e.g. 3600 for 1-hour windows")
    opts["margin"] = _number(opts, "margin", w, low=0, high=0.9, fix="e.g. 0.1 keeps 10% headroom")
    opts["memory_utilization"] = _number(opts, "memory_utilization", w, low=0.3, high=1.0)
    opts["shared_kv_fraction"] = _number(opts, "shared_kv_fraction", w, low=0.1, high=1.0)
    opts["max_shared_gpus_per_pool"] = _number(opts, "max_shared_gpus_per_pool", w, low=0, high=1000, integer=True)
    opts["max_models_per_shared_gpu"] = _number(opts, "max_models_per_shared_gpu", w, low=1, high=16, integer=True)
    opts["min_batch"] = _number(opts, "min_batch", w, low=1, high=4096)
    opts["load_bandwidth_bytes_per_s"] = _number(opts, "load_bandwidth_bytes_per_s", w, low=1e6, high=1e12,
                                                 unit="bytes/s", fix="give bytes per second, e.g. 1.0e9")
    opts["usd_per_migration"] = _number(opts, "usd_per_migration", w, low=0, high=1e4, unit="USD")
    opts["bytes_per_token"] = _number(opts, "bytes_per_token", w, low=0, high=1e3, unit="bytes")
    if opts["demand_rate"] not in ("peak", "mean"):
        raise _err("'demand_rate' must be 'peak' or 'mean'", w, "demand_rate", opts["demand_rate"])
    return opts


def _token_mix(spec: Any, where: str) -> TokenMix:

    if spec is None:
        raise _err("missing 'token_mix': give {trace: azure-conv} or the four token statistics", where, "token_mix")
    if isinstance(spec, dict) and "trace" in spec:
        _check_keys(spec, {"trace"}, where, "token_mix")
        return token_mix_from_trace(load_trace(spec["trace"]))
    keys = {"input_tokens_mean", "input_tokens_p95", "output_tokens_mean", "output_tokens_p95"}
    _check_keys(spec, keys, where, "token_mix")
    missing = keys - set(spec)
    if missing:
        raise _err(f"token_mix is missing {', '.join(sorted(missing))}", where, "token_mix")
    try:
        return TokenMix(**{k: float(spec[k]) for k in keys})
    except (TypeError, ValueError):
        raise _err("token_mix values must be numbers of tokens", where, "token_mix", spec) from None


def _demand(spec: Any, where: str, base: Path | None, length: float, mix: TokenMix) -> Demand:

    _check_keys(spec, _DEMAND_KINDS, where, "demand")
    kinds = [k for k in spec if k in _DEMAND_KINDS]
    if len(kinds) != 1:
        raise _err(f"give exactly one of {', '.join(sorted(_DEMAND_KINDS))} under 'demand'", where, "demand")
    kind = kinds[0]
    body = spec[kind]
    if kind == "servegen":
        _check_keys(body, {"series", "mean_rate_req_per_s", "day", "gaps"}, where, "demand.servegen")
        if "series" not in body or "mean_rate_req_per_s" not in body:
            raise _err("demand.servegen needs 'series' and 'mean_rate_req_per_s'", where, "demand.servegen")
        return servegen_demand(body["series"], body["mean_rate_req_per_s"], mix, window_length_s=length,
                               day=body.get("day", "mean"), gaps=body.get("gaps", "interpolate"))
    if kind == "trace":
        _check_keys(body, {"name", "file", "rate_scale"}, where, "demand.trace")
        ref = body.get("file") or body.get("name")
        if ref is None:
            raise _err("demand.trace needs 'name' (a shipped trace) or 'file'", where, "demand.trace")
        if body.get("file") and base is not None and not Path(ref).is_absolute():
            ref = str(base / ref)
        trace = load_trace(ref)
        scale = _number(body, "rate_scale", where, low=1e-6, high=1e6, default=1.0)
        if scale != 1.0:
            trace = trace.time_scaled(scale)
        (demand,) = trace_to_demand(trace, length, by=()).values()
        return demand
    if kind == "day_curve":
        _check_keys(body, {"file", "scale"}, where, "demand.day_curve")
        if "file" not in body:
            raise _err("demand.day_curve needs 'file'", where, "demand.day_curve")
        p = Path(body["file"])
        if base is not None and not p.is_absolute():
            p = base / p
        curve = read_day_curve_csv(p)
        scale = _number(body, "scale", where, low=0, high=1e6, default=1.0)
        if abs(curve.window_length_s - length) > 1e-6:
            raise _err(f"day curve {p} has {curve.window_length_s:g}-s windows but options.window_length_s is "
                       f"{length:g}", where, "demand.day_curve")
        return day_curve_demand(curve.rates_req_per_s * scale, length, mix, f"day curve {p} × {scale:g}")
    rates = body
    if not isinstance(rates, list) or not rates:
        raise _err("demand.rates must be a list of req/s, one per window", where, "demand.rates")
    for i, r in enumerate(rates):
        if isinstance(r, bool) or not isinstance(r, int | float) or not math.isfinite(r) or r < 0:
            raise _err(f"demand.rates[{i}] = {r!r} must be a number >= 0 (req/s)", where, "demand.rates", r)
    return day_curve_demand([float(r) for r in rates], length, mix, "rates given in the scenario")


def load_scenario(path: str | Path | None = None, *, window_length_s: float | None = None) -> Scenario:
    """Read and check a scenario and read its demand; no cost model is evaluated yet (see :func:`build_problem`).

    ``window_length_s`` overrides options.window_length_s. Raises InputError / UnknownNameError on bad input.
    """
    raw, where, base = read_scenario(path)
    return scenario_from_raw(raw, source=where, base=str(base) if base is not None else None,
                             window_length_s=window_length_s)


def scenario_from_raw(raw: dict, *, source: str = "scenario", base: str | None = None,
                      window_length_s: float | None = None) -> Scenario:
    """A :class:`Scenario` from an already-read mapping (e.g. the one embedded in a plan file); relative paths
    are resolved against ``base``."""
    where = source
    base = Path(base) if base else None
    if not isinstance(raw, dict):
        raise InputError("a scenario must be a mapping with 'sites' and 'models'", source=where)
    _check_keys(raw, _TOP_KEYS, where, "the scenario")
    opts = _options(raw, where)
    if window_length_s is not None:
        opts["window_length_s"] = _number({"window_length_s": window_length_s}, "window_length_s", "--window",
                                          low=60, high=86400, unit="s")
    models = raw.get("models")
    if not isinstance(models, list) or not models:
        raise _err("'models' must be a non-empty list", where, "models")
    if not isinstance(raw.get("sites"), list) or not raw["sites"]:
        raise _err("'sites' must be a non-empty list", where, "sites")
    demands, mixes = {}, {}
    for i, m in enumerate(models):
        mw = f"{where}: models[{i}]"
        _check_keys(m, _MODEL_KEYS, mw, f"models[{i}]")
        if "name" not in m:
            raise _err("every model needs a 'name'", mw, "name")
        if "demand" not in m:
            raise _err(f"model {m['name']} has no 'demand'", mw, "demand")
        mixes[m["name"]] = _token_mix(m.get("token_mix"), mw)
        demands[m["name"]] = _demand(m["demand"], mw, base, opts["window_length_s"], mixes[m["name"]])
    counts = {name: len(d.windows) for name, d in demands.items()}
    if len(set(counts.values())) != 1:
        raise _err("models' demand cover different numbers of windows: "
                   + ", ".join(f"{k} {v}" for k, v in counts.items())
                   + "; give every model a day curve (servegen, day_curve or rates) of the same length", where,
                   "demand")
    return Scenario(name=str(raw.get("name", where)), description=str(raw.get("description", "")),
                    base_dir=str(base) if base is not None else None, source=where, raw=raw, options=opts,
                    demands=demands, token_mixes=mixes)


def _price(gpu: str, site_name: str, pricing_model: str, where: str, prices) -> tuple[float, str]:

    site = Site.parse(site_name)
    try:
        p = find_price(gpu, site.cloud, site.region, pricing_model, prices, zone=site.zone or None)
    except FleetplanError as exc:
        raise InputError(f"{exc}; or give usd_per_gpu_hour for this inventory row", source=where,
                         field="usd_per_gpu_hour") from None
    return p.usd_per_gpu_hour, f"{p.cloud} {p.instance} {p.region} {p.pricing_model}: {p.source}"


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


def build_problem(scenario: Scenario, *, progress=None) -> Problem:
    """Evaluate the cost models for every (model, pool, tp, pp) of ``scenario`` and return the numeric Problem.

    For each model and pool: dedicated options for every tp in the model's list that divides the node size and
    whose capacity under the SLO is positive; pipeline-parallel options (tp = node size, pp = 2..4 nodes) when the
    model does not fit in one node; a shared-GPU option (tp 1) with a KV budget of at most
    ``shared_kv_fraction`` of the GPU, when the weights fit there. Options left out are recorded with the cost
    model's reason (``Problem.option_notes``), so an infeasible problem can be explained.
    """

    raw, opts = scenario.raw, scenario.options
    where = scenario.source
    files = _check_keys(raw.get("files") or {}, {"gpus", "models", "prices"}, where, "files")
    base = Path(scenario.base_dir) if scenario.base_dir else None

    def _file(key: str) -> str | None:
        if key not in files:
            return None
        p = Path(files[key])
        return str(base / p) if base is not None and not p.is_absolute() else str(p)

    prices = load_gpu_prices(_file("prices"))
    link = inter_node_link(opts.get("inter_node_link"))
    allowed = opts.get("allowed_gpus")
    allowed_names = {get_gpu(g, _file("gpus")).name for g in allowed} if allowed else None
    pools: list[Pool] = []
    gpus = {}
    for i, s in enumerate(raw["sites"]):
        sw = f"{where}: sites[{i}]"
        _check_keys(s, _SITE_KEYS, sw, f"sites[{i}]")
        if "name" not in s:
            raise _err("every site needs a 'name' such as aws:us-east-1", sw, "name")
        site = Site.parse(s["name"]).name
        inv = s.get("inventory")
        if not isinstance(inv, list) or not inv:
            raise _err(f"site {site} needs an 'inventory' list", sw, "inventory")
        for j, row in enumerate(inv):
            rw = f"{sw}.inventory[{j}]"
            _check_keys(row, _INV_KEYS, rw, "inventory row")
            if "gpu" not in row:
                raise _err("inventory row needs 'gpu'", rw, "gpu")
            gpu = get_gpu(str(row["gpu"]), _file("gpus"))
            if allowed_names is not None and gpu.name not in allowed_names:
                continue
            nodes = _number(row, "nodes", rw, low=0, high=100000, integer=True)
            gpn = _number(row, "gpus_per_node", rw, low=1, high=16, integer=True, default=8)
            if nodes is None:
                raise _err("inventory row needs 'nodes'", rw, "nodes")
            pm = row.get("pricing_model") or s.get("pricing_model") or opts["pricing_model"]
            price = _number(row, "usd_per_gpu_hour", rw, low=0, high=1000, unit="USD/GPU-hour")
            if price is None:
                price, src = _price(gpu.name, site, pm, rw, prices)
            else:
                src = f"given in {rw}"
            gpus[gpu.name] = gpu
            pools.append(Pool(site, gpu.name, nodes=nodes, gpus_per_node=gpn, usd_per_gpu_hour=price,
                              memory_bytes_per_gpu=gpu.memory_bytes, pricing_model=pm, price_source=src))
    if not pools:
        raise _err("no GPU pool left (check allowed_gpus and the inventories)", where, "sites")
    site_names = sorted({p.site for p in pools})

    mu_mem = opts["memory_utilization"]
    models, options, shares, notes = [], [], [], {}
    for i, m in enumerate(raw["models"]):
        mw = f"{where}: models[{i}]"
        model = get_model(str(m["name"]), _file("models"))
        slo_spec = _check_keys(m.get("slo") or {}, {"ttft_p95_s", "tpot_p95_s"}, mw, "slo")
        if "ttft_p95_s" not in slo_spec or "tpot_p95_s" not in slo_spec:
            raise _err(f"model {m['name']} needs slo: {{ttft_p95_s, tpot_p95_s}} in seconds", mw, "slo")
        try:
            slo = SLO(slo_spec["ttft_p95_s"], slo_spec["tpot_p95_s"])
        except InputError as exc:
            raise InputError(str(exc), source=mw) from None
        tps = m.get("tp", [1, 2, 4, 8])
        if isinstance(tps, int):
            tps = [tps]
        if not isinstance(tps, list) or not all(isinstance(t, int) and t in (1, 2, 4, 8, 16) for t in tps):
            raise _err(f"tp must be a list of 1, 2, 4, 8 or 16, got {tps!r}", mw, "tp", tps)
        origin = m.get("origin_site")
        if origin is not None:
            origin = Site.parse(origin).name
            if origin not in site_names:
                raise UnknownNameError("site", origin, site_names, source=mw, field="origin_site")
        demand = scenario.demands[m["name"]]
        rates = tuple(w.rate_peak_req_per_s if opts["demand_rate"] == "peak" else w.rate_mean_req_per_s
                      for w in demand.windows)
        mix = scenario.token_mixes[m["name"]]
        request_bytes = 2 * (mix.input_tokens_mean + mix.output_tokens_mean) * opts["bytes_per_token"]
        min_r = _number(m, "min_replicas", mw, low=0, high=10000, integer=True, default=0)
        max_r = _number(m, "max_replicas", mw, low=1, high=100000, integer=True, default=None)
        models.append(ModelSpec(model.name, rates, slo.ttft_p95_s, slo.tpot_p95_s, min_replicas=min_r,
                                max_replicas=max_r, origin_site=origin, request_bytes=request_bytes,
                                demand_source=demand.source))
        why = []
        weights = model.weight_bytes(opts["weight_dtype"])
        for pool in pools:
            gpu = gpus[pool.gpu]
            calib = load_calibration(gpu)
            if progress:
                progress(f"capacity of {model.name} on {pool.id}")
            candidates = [(tp, 1) for tp in tps if tp <= pool.gpus_per_node and pool.gpus_per_node % tp == 0]
            if weights > mu_mem * pool.gpus_per_node * gpu.memory_bytes:
                node_bytes = mu_mem * pool.gpus_per_node * gpu.memory_bytes
                need = math.ceil(weights / node_bytes)
                candidates += [(pool.gpus_per_node, pp) for pp in range(max(2, need), max(2, need) + 2)]
            for tp, pp in candidates:
                cap = replica_capacity(model, gpu, mix, slo, tp=tp, pp=pp, weight_dtype=opts["weight_dtype"],
                                       kv_dtype=opts["kv_dtype"], memory_utilization=mu_mem,
                                       link=link if pp > 1 else None, calib=calib)
                if cap.req_per_s <= 0:
                    why.append(f"{pool.id} tp {tp}{f' pp {pp}' if pp > 1 else ''}: {cap.reason or cap.limiting}")
                    continue
                if cap.max_batch < opts["min_batch"]:
                    why.append(f"{pool.id} tp {tp}{f' pp {pp}' if pp > 1 else ''}: the KV cache left after the "
                               f"weights holds {cap.max_batch:.1f} sequences, fewer than min_batch "
                               f"{opts['min_batch']:g}")
                    continue
                load_s = weights / (tp * pp) / opts["load_bandwidth_bytes_per_s"]
                start = load_s / 3600 * tp * pp * pool.usd_per_gpu_hour + opts["usd_per_migration"]
                options.append(ReplicaOption(model.name, pool.id, tp, pp, cap.req_per_s, cap.memory_bytes_per_gpu,
                                             start_cost_usd=start, ttft_p95_s=cap.ttft_p95_s,
                                             tpot_p95_s=cap.tpot_p95_s))
            # Shared GPU: tp 1, KV budget at most shared_kv_fraction of the GPU.
            share_budget = opts["shared_kv_fraction"] * mu_mem * gpu.memory_bytes - weights
            if 1 in tps and share_budget > 0:
                # Co-resident models' decode steps interleave: with K residents a model's token may wait for the
                # other K - 1 steps, so its shared capacity is sized for TPOT target / K.
                k = opts["max_models_per_shared_gpu"]
                shared_slo = SLO(slo.ttft_p95_s, max(0.001, slo.tpot_p95_s / k))
                full = replica_capacity(model, gpu, mix, shared_slo, tp=1, weight_dtype=opts["weight_dtype"],
                                        kv_dtype=opts["kv_dtype"], memory_utilization=mu_mem, calib=calib)
                kvpt = model.kv_bytes_per_token(opts["kv_dtype"])
                kv_seq = model.kv_tokens_cached(mix.input_tokens_mean + mix.output_tokens_mean) * kvpt
                kv_seq95 = model.kv_tokens_cached(mix.input_tokens_p95 + mix.output_tokens_p95) * kvpt
                # Room for the p95 running batch at mean length plus one p95-length request (capacity point 8),
                # with 10% to spare; never more than the shared_kv_fraction budget.
                b = full.batch_at_capacity
                needed = (1.1 * (poisson_occupancy_quantile(b) * kv_seq + kv_seq95) if full.req_per_s > 0
                          else share_budget)
                budget = min(share_budget, needed)
                cap = replica_capacity(model, gpu, mix, shared_slo, tp=1, weight_dtype=opts["weight_dtype"],
                                       kv_dtype=opts["kv_dtype"], memory_utilization=mu_mem, kv_budget_bytes=budget,
                                       calib=calib)
                if cap.req_per_s > 0:
                    shares.append(ShareOption(model.name, pool.id, cap.req_per_s, weights + budget,
                                              ttft_p95_s=cap.ttft_p95_s, tpot_p95_s=cap.tpot_p95_s))
        notes[model.name] = tuple(why)
    n_windows = len(next(iter(scenario.demands.values())).windows)
    synthetic = [name for name, d in scenario.demands.items() if d.synthetic]
    pnotes = tuple(f"{m.name}: {m.demand_source}" for m in models) + tuple(
        f"{name}: SYNTHETIC demand" for name in synthetic)
    return Problem(window_length_s=opts["window_length_s"], n_windows=n_windows, pools=tuple(pools),
                   models=tuple(models), options=tuple(options), share_options=tuple(shares), margin=opts["margin"],
                   shared_memory_utilization=mu_mem, max_shared_gpus_per_pool=opts["max_shared_gpus_per_pool"],
                   max_models_per_shared_gpu=opts["max_models_per_shared_gpu"],
                   egress_usd_per_gb=egress_table(site_names), option_notes=notes, name=scenario.name, notes=pnotes)
