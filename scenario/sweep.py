"""Scenario sweeps: a planning scenario changed by ``{variable: value}`` (``fleetplan sweep --vary``).

Each variable rewrites the scenario's mapping (the YAML as read), so a cell's scenario is an ordinary, complete
scenario: it is checked by the same schema, its demand is read by the same readers, and a plan made from it embeds
a mapping that reproduces it.

Variables (:func:`sweep_variables` lists them for a scenario):
    - ``demand_factor``: multiplies every model's demand (servegen ``mean_rate_req_per_s``, trace ``rate_scale``,
      day_curve ``scale``, every value of ``rates``); 1.5 = 50% growth.
    - ``gpu_price_factor``: multiplies every inventory row's price; ``gpu_price_factor.<GPU>`` those of one GPU type
      (catalog name, e.g. ``gpu_price_factor.H100-SXM-80GB``). A row without ``usd_per_gpu_hour`` gets its catalog
      price (the one the base scenario's Problem chose, passed in ``base_prices``) times the factor. Both apply
      when given together.
    - ``ttft_factor``, ``tpot_factor``: multiply every model's TTFT / TPOT target (whatever its percentile).
    - ``ttft_s``, ``tpot_s``: set every model's TTFT / TPOT target, seconds (at its own percentile).
    - ``window_length_s``: the planning window, seconds (demand is read again at this length; 60..86400).
"""

from __future__ import annotations

import copy
import re

from fleetplan.costmodels.network import Site
from fleetplan.datasets.catalog.names import get_gpu
from fleetplan.errors import InputError, UnknownNameError, check_range
from fleetplan.placement.problem import Problem
from fleetplan.scenario.read import Scenario, scenario_catalog_file, scenario_from_raw

#: The variables of every scenario, with what they change (per-GPU price factors are added by sweep_variables).
SCENARIO_SWEEP_VARIABLES = {
    "demand_factor": "factor on every model's demand (1.5 = +50%)",
    "gpu_price_factor": "factor on every GPU price (gpu_price_factor.<GPU> for one GPU type)",
    "ttft_factor": "factor on every model's TTFT target",
    "tpot_factor": "factor on every model's TPOT target",
    "ttft_s": "every model's TTFT target, seconds",
    "tpot_s": "every model's TPOT target, seconds",
    "window_length_s": "planning window length, seconds",
}
#: Prefix of a per-GPU price factor.
GPU_PRICE_PREFIX = "gpu_price_factor."
#: Largest factor accepted (a factor is a what-if, not a unit conversion).
MAX_FACTOR = 1000.0

#: Key of a pool's price: (site, catalog GPU name, GPUs per node, pricing model).
PriceKey = tuple[str, str, int, str]


def _files(scenario: Scenario) -> str | None:
    """The scenario's own GPU catalog rows (``files.gpus``), resolved as the planner resolves them."""
    return scenario_catalog_file(scenario, "gpus")


def scenario_gpus(scenario: Scenario) -> list[str]:
    """Catalog names of the GPU types in the scenario's inventories, in file order."""
    spec = scenario.spec
    if spec is None:
        return []
    out: list[str] = []
    for s in spec.sites:
        for row in s.inventory:
            name = get_gpu(row.gpu, _files(scenario)).name
            if name not in out:
                out.append(name)
    return out


def sweep_variables(scenario: Scenario) -> dict[str, str]:
    """{variable: what it changes} for ``scenario``: :data:`SCENARIO_SWEEP_VARIABLES` and one
    ``gpu_price_factor.<GPU>`` per GPU type of its inventories."""
    out = dict(SCENARIO_SWEEP_VARIABLES)
    for g in scenario_gpus(scenario):
        out[GPU_PRICE_PREFIX + g] = f"factor on the price of {g}"
    return out


def base_prices(problem: Problem) -> dict[PriceKey, float]:
    """{(site, GPU, GPUs per node, pricing model): USD per GPU-hour} of ``problem``'s pools (built from the base
    scenario), the prices a price factor multiplies: the price an inventory row states (a committed pool's committed
    rate, :attr:`~fleetplan.placement.problem.Pool.usd_per_busy_gpu_hour`)."""
    return {(p.site, p.gpu, p.gpus_per_node, p.pricing_model): p.usd_per_busy_gpu_hour for p in problem.pools}


def _factor(name: str, v: float) -> float:
    return check_range(v, field=name, low=1e-6, high=MAX_FACTOR, fix="give a positive factor such as 1.2")


def _scale_demand(demand: dict, f: float) -> None:
    if "servegen" in demand:
        demand["servegen"]["mean_rate_req_per_s"] = demand["servegen"]["mean_rate_req_per_s"] * f
    elif "trace" in demand:
        demand["trace"]["rate_scale"] = demand["trace"].get("rate_scale", 1.0) * f
    elif "day_curve" in demand:
        demand["day_curve"]["scale"] = demand["day_curve"].get("scale", 1.0) * f
    elif "rates" in demand:
        demand["rates"] = [r * f for r in demand["rates"]]


_SLO_KEY = {"ttft": re.compile(r"^ttft_p\d+_s$"), "tpot": re.compile(r"^tpot_p\d+_s$")}


def _set_slo(slo: dict, metric: str, *, factor: float | None = None, value: float | None = None) -> None:
    for k in [k for k in slo if _SLO_KEY[metric].match(k)]:
        slo[k] = value if value is not None else slo[k] * (factor if factor is not None else 1.0)


def apply_sweep(scenario: Scenario, cell: dict[str, float], prices: dict[PriceKey, float] | None = None
                ) -> Scenario:
    """``scenario`` with the variables of ``cell`` applied (module docstring), read again from its new mapping.

    Args:
        scenario: the base scenario (its ``raw`` mapping is copied, never changed).
        cell: {variable: value}; variables from :func:`sweep_variables`.
        prices: :func:`base_prices` of the base scenario's Problem; needed for a price factor on rows that take
            their price from the catalogs.

    Raises UnknownNameError for an unknown variable, InputError for a value out of range (naming the variable;
    the scenario schema checks targets and window lengths) or a price factor without ``prices``.
    """
    raw = copy.deepcopy(scenario.raw)
    window = scenario.options["window_length_s"]
    known = sweep_variables(scenario)
    price_f: dict[str | None, float] = {}
    for name, v in cell.items():
        if name not in known:
            raise UnknownNameError("sweep variable", name, known, field="--vary")
        if name == "demand_factor":
            f = _factor(name, v)
            for m in raw.get("models", []):
                _scale_demand(m["demand"], f)
        elif name == "gpu_price_factor":
            price_f[None] = _factor(name, v)
        elif name.startswith(GPU_PRICE_PREFIX):
            price_f[name[len(GPU_PRICE_PREFIX):]] = _factor(name, v)
        elif name in ("ttft_factor", "tpot_factor"):
            f = _factor(name, v)
            for m in raw.get("models", []):
                _set_slo(m["slo"], name[:4], factor=f)
        elif name in ("ttft_s", "tpot_s"):
            for m in raw.get("models", []):
                _set_slo(m["slo"], name[:4], value=float(v))
        elif name == "window_length_s":
            window = v
    if price_f:
        _scale_prices(scenario, raw, price_f, prices)
    return scenario_from_raw(raw, source=f"{scenario.source} [{cell_label(cell)}]", base=scenario.base_dir,
                             window_length_s=window,
                             window_source="--vary window_length_s" if "window_length_s" in cell else "--window")


def _scale_prices(scenario: Scenario, raw: dict, factors: dict[str | None, float],
                  prices: dict[PriceKey, float] | None) -> None:
    spec = scenario.spec
    if spec is None:
        return
    opts = scenario.options
    for i, s in enumerate(spec.sites):
        for j, row in enumerate(s.inventory):
            gpu = get_gpu(row.gpu, _files(scenario)).name
            f = factors.get(None, 1.0) * factors.get(gpu, 1.0)
            if f == 1.0:
                continue
            price = row.usd_per_gpu_hour
            if price is None:
                pm = row.pricing_model or s.pricing_model or opts["pricing_model"]
                key = (Site.parse(s.name).name, gpu, row.gpus_per_node, pm)
                if prices is None:
                    raise InputError("a price factor on catalog prices needs the base scenario's prices "
                                     "(base_prices of its Problem)", field="gpu_price_factor")
                if key not in prices:
                    continue  # a row left out by allowed_gpus: no pool, its price matters nowhere
                price = prices[key]
            raw["sites"][i]["inventory"][j]["usd_per_gpu_hour"] = price * f


def cell_label(cell: dict[str, float]) -> str:
    """'name=value, ...' of a sweep cell."""
    return ", ".join(f"{k}={v:g}" for k, v in cell.items())


__all__ = ["GPU_PRICE_PREFIX", "SCENARIO_SWEEP_VARIABLES", "apply_sweep", "base_prices", "cell_label",
           "scenario_gpus", "sweep_variables"]
