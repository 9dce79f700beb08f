"""The ledger of a placement plan: GPU-hours per pool, replica starts, egress of requests served away from their
origin, and energy, per day (the line items and their arithmetic are :mod:`fleetplan.costmodels.ledger`'s)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from fleetplan.costmodels.energy import power_w
from fleetplan.costmodels.ledger import HOURS_PER_DAY, Ledger, LineItem, table_key
from fleetplan.costmodels.network import route_class
from fleetplan.datasets.calibration import idle_fraction
from fleetplan.datasets.catalog.gpus import load_gpus
from fleetplan.datasets.ledger import load_assumptions
from fleetplan.errors import InputError
from fleetplan.placement.plan import Plan, commitments, evaluate, kv_traffic, site_capacity, starts
from fleetplan.placement.problem import Problem


@dataclass(frozen=True)
class PlanLedger:
    """A plan's ledger and the figures the workbook needs.

    Attributes:
        ledger: line items per day.
        day_factor: days in the plan's horizon (horizon hours / 24); ledger amounts = horizon amounts / day_factor.
        egress_gb: {(origin, site): GB over the horizon served away from the origin}.
        starts: {(model, pool, tp, pp): replica starts over the horizon}.
    """

    ledger: Ledger
    day_factor: float
    egress_gb: dict[tuple[str, str], float] = field(default_factory=dict)
    starts: dict[tuple[str, str, int, int], int] = field(default_factory=dict)


def plan_egress_gb(problem: Problem, plan: Plan) -> dict[tuple[str, str], float]:
    """GB served away from each model's origin per (origin, site), over the horizon, routed as
    :func:`fleetplan.placement.plan.route` does (origin first, then sites by increasing egress rate)."""

    caps = site_capacity(problem, plan)
    out: dict[tuple[str, str], float] = {}
    for m in problem.models:
        for w, d in enumerate(m.demand_req_per_s):
            left = d
            for site, c in sorted(caps[m.name][w].items(), key=lambda kv: (
                    kv[0] != m.origin_site, problem.egress_rate(m.origin_site, kv[0]))):
                take = min(left, c)
                if take <= 0:
                    break
                if m.origin_site is not None and site != m.origin_site:
                    gb = take * problem.window_length_s * m.request_bytes / 1e9
                    out[(m.origin_site, site)] = out.get((m.origin_site, site), 0.0) + gb
                left -= take
    return out


def kv_route_items(problem: Problem, plan: Plan, day_factor: float) -> list[LineItem]:
    """Egress lines of a disaggregated plan, one per KV route and kind ('kv' cache, 'prompt' text): GB per day and
    USD per GB. A route inside a site moves its KV over the inter-node link at no charge (a 0-USD line shows its
    GB). Across sites each egress table's monthly volume is priced band by band (:func:`kv_traffic`); a route's
    line carries the table's mean USD per GB, so its amount is its pro-rata share and the lines add up to the
    table's bill."""
    traffic = kv_traffic(problem, plan)
    routes = problem.kv_route_by_key
    out = []
    for (key, kind), gb in sorted(traffic.gb.items()):
        r = routes[key]
        table = r.kv_table if kind == "kv" else r.prompt_table
        src, dst = (r.prefill_site, r.decode_site) if kind == "kv" else (r.decode_site, r.prefill_site)
        if table is None:
            out.append(LineItem("plan", "egress", f"{kind} {r.model} {src} -> {dst} over {r.link} (no egress)",
                                gb / day_factor, "GB", 0.0, "inside one site", site=src,
                                input_share=1.0))
            continue
        tk = table_key(table)
        month_gb = traffic.monthly_gb[tk]
        mean = traffic.table_usd(tk) / (month_gb / traffic.month_factor) if month_gb > 0 else 0.0
        out.append(LineItem("plan", "egress", f"{kind} {r.model} {src} -> {dst} ({r.route_class}; "
                            f"{tk[0]} table at {month_gb:,.0f} GB/month, banded)", gb / day_factor, "GB", mean,
                            table.source or "egress table", site=src, route_class=r.route_class, input_share=1.0))
    return out


def plan_ledger(problem: Problem, plan: Plan, *, gpus: dict | None = None, energy_billed: bool = False,
                usd_per_kwh: float | None = None, pue: float | None = None) -> PlanLedger:
    """The ledger of a :class:`~fleetplan.placement.plan.Plan`, per day.

    Lines: GPU-hours per pool × the pool's USD per GPU-hour (dedicated replicas and shared GPUs; prefill and decode
    replicas on lines of their own); a committed pool's commitment × 24 committed GPU-hours a day × its committed
    rate; replica starts × start cost; KV-cache and prompt GB per disaggregated route (:func:`kv_route_items`);
    egress GB per (origin, serving site) × the problem's USD per GB (route class from the site names); energy per
    pool at the plan's mean utilization (information only unless ``energy_billed``). Amounts are the horizon's
    divided by horizon hours / 24, so GPU + start + egress equal :func:`fleetplan.placement.plan.evaluate`'s totals
    per day.

    Args:
        problem, plan: the placement problem and its plan.
        gpus: {GPU name: GPU record} for TDPs; default the catalog (pools whose GPU it lacks get no energy line).

    Raises:
        InputError: a plan key that names no option of the problem, or a missing egress rate.
    """

    if gpus is None:
        gpus = load_gpus()
    day_factor = problem.horizon_hours / HOURS_PER_DAY
    ev = evaluate(problem, plan)
    a = load_assumptions()
    energy_price = _EnergyPrice(a["electricity_usd_per_kwh"].value if usd_per_kwh is None else usd_per_kwh,
                                a["electricity_usd_per_kwh"].source if usd_per_kwh is None else "user",
                                a["pue"].value if pue is None else pue, energy_billed)
    items, energy = _gpu_and_energy_items(problem, plan, day_factor, ev.mean_utilization, gpus, energy_price)
    items += _commitment_items(problem, plan)
    items += _pd_start_items(problem, plan, day_factor)
    items += kv_route_items(problem, plan, day_factor)
    st = {key: starts(counts) for key, counts in sorted(plan.replicas.items())}
    items += _start_items(problem, st, day_factor)
    eg = plan_egress_gb(problem, plan)
    items += _served_away_items(problem, eg, day_factor)
    requests = sum(sum(m.demand_req_per_s) * problem.window_length_s for m in problem.models) / day_factor
    led = Ledger("plan", tuple(items + energy), requests_per_day=requests)
    if not math.isclose(led.gpu_usd_per_day * day_factor, ev.gpu_usd, rel_tol=1e-9, abs_tol=1e-6) or not math.isclose(
            led.egress_usd_per_day * day_factor, ev.egress_usd, rel_tol=1e-9, abs_tol=1e-6):
        raise AssertionError("plan ledger GPU or egress total disagrees with evaluate()")  # a bug, never user input
    return PlanLedger(led, day_factor, eg, st)


@dataclass(frozen=True)
class _EnergyPrice:
    """USD per kWh and its source, power usage effectiveness, and whether energy counts in the total."""

    usd_per_kwh: float
    source: str
    pue: float
    billed: bool


def _gpu_hours(problem: Problem, plan: Plan) -> list[tuple[str, str, float]]:
    """(pool, role, GPU-hours over the horizon): whole replicas and shared GPUs (role ''), per pool in pool order,
    then the prefill and decode replicas per (pool, role). Raises InputError for a plan key that names no option."""
    opts = problem.option_by_key
    hours = problem.window_hours
    gpu_hours: dict[str, float] = {}
    for key, counts in plan.replicas.items():
        if key not in opts:
            raise InputError(f"plan key {key} names no option of the problem", field="replicas", value=key)
        o = opts[key]
        gpu_hours[o.pool] = gpu_hours.get(o.pool, 0.0) + sum(counts) * o.gpus * hours
    for g in plan.shared:
        gpu_hours[g.pool] = gpu_hours.get(g.pool, 0.0) + hours * problem.n_windows
    pd_opts = problem.pd_option_by_key
    pd_hours: dict[tuple[str, str], float] = {}  # (pool, role) -> GPU-hours of prefill / decode replicas
    for pkey, counts in plan.pd_replicas.items():
        o = pd_opts[pkey]
        pd_hours[(o.pool, o.role)] = pd_hours.get((o.pool, o.role), 0.0) + sum(counts) * o.gpus * hours
    return [(pid, "", gpu_hours[pid]) for pid in sorted(gpu_hours)] + [
        (pid, role, h) for (pid, role), h in sorted(pd_hours.items())]


def _gpu_and_energy_items(problem: Problem, plan: Plan, day_factor: float, util: float, gpus: dict,
                          price: _EnergyPrice) -> tuple[list[LineItem], list[LineItem]]:
    """(GPU-hour lines, energy lines) per pool and role of :func:`_gpu_hours` (input_share: the prefill's
    GPU-hours serve input tokens only, the decode's output only); energy at utilization ``util`` for pools whose
    GPU has a TDP in ``gpus``."""
    pools = problem.pool_by_id
    items: list[LineItem] = []
    energy: list[LineItem] = []
    for pid, role, h in _gpu_hours(problem, plan):
        p = pools[pid]
        q = h / day_factor
        named = f" [{p.name}]" if p.name else ""
        what = f"{role} " if role else ""
        share = 1.0 if role == "prefill" else 0.0  # LineItem's default for whole replicas too
        items.append(LineItem("plan", "gpu", f"{what}GPU-hours {p.gpu} at {p.site}{named}", q, "GPU-hour",
                              p.usd_per_gpu_hour, p.price_source or "problem pool price", site=p.site, gpu=p.gpu,
                              pricing_model=p.pricing_model, pool=pid, input_share=share))
        spec = gpus.get(p.gpu)
        if spec is not None and spec.tdp_w:
            kwh = q * power_w(spec.tdp_w, util, idle_fraction(p.gpu)) / 1000.0 * price.pue
            energy.append(LineItem("plan", "energy", f"energy {what}{p.gpu} at {p.site} ({spec.tdp_w:g} W TDP at "
                                   f"{util:.0%}, PUE {price.pue:g})", kwh, "kWh", price.usd_per_kwh, price.source,
                                   site=p.site, gpu=p.gpu, in_total=price.billed, pool=pid))
    return items, energy


def _commitment_items(problem: Problem, plan: Plan) -> list[LineItem]:
    """A committed pool's GPUs × 24 committed GPU-hours a day × its committed rate."""
    pools = problem.pool_by_id
    out = []
    for pid, c in sorted(commitments(problem, plan).items()):
        p = pools[pid]
        if c:
            out.append(LineItem("plan", "gpu", f"committed GPUs {p.gpu} at {p.site} [{pid}]: {c} GPUs every hour",
                                c * HOURS_PER_DAY, "committed GPU-hour", p.committed_usd_per_gpu_hour,
                                p.price_source or "problem pool price", site=p.site, gpu=p.gpu,
                                pricing_model=p.pricing_model, pool=pid))
    return out


def _pd_start_items(problem: Problem, plan: Plan, day_factor: float) -> list[LineItem]:
    """Starts per day × start cost of the prefill and decode replicas whose option has a start cost."""
    pools, pd_opts = problem.pool_by_id, problem.pd_option_by_key
    out = []
    for pkey, counts in sorted(plan.pd_replicas.items()):
        n = starts(counts)
        o = pd_opts[pkey]
        if n and o.start_cost_usd > 0:
            out.append(LineItem("plan", "start", f"{o.role} replica starts {o.model} on {o.pool} tp{o.tp}",
                                n / day_factor, "start", o.start_cost_usd, "problem option start cost",
                                site=pools[o.pool].site, gpu=pools[o.pool].gpu))
    return out


def _start_items(problem: Problem, st: dict[tuple[str, str, int, int], int], day_factor: float) -> list[LineItem]:
    """Starts per day × start cost of the dedicated replicas (``st``: starts over the horizon per option) whose
    option has a start cost."""
    pools, opts = problem.pool_by_id, problem.option_by_key
    out = []
    for key, n in st.items():
        o = opts[key]
        if n and o.start_cost_usd > 0:
            out.append(LineItem("plan", "start", f"replica starts {key[0]} on {key[1]} tp{key[2]} pp{key[3]}",
                                n / day_factor, "start", o.start_cost_usd, "problem option start cost",
                                site=pools[o.pool].site, gpu=pools[o.pool].gpu))
    return out


def _served_away_items(problem: Problem, eg: dict[tuple[str, str], float], day_factor: float) -> list[LineItem]:
    """GB per day of requests served away from their origin (``eg``: GB over the horizon per (origin, site)) ×
    the problem's egress rate, with the route class when the site names give one."""
    out = []
    for (origin, site), gb in sorted(eg.items()):
        rate = problem.egress_rate(origin, site)
        try:
            rc = route_class(origin, site)
        except InputError:
            rc = ""
        out.append(LineItem("plan", "egress", f"requests served away: {origin} -> {site}", gb / day_factor, "GB",
                            rate, "problem egress table", site=site, route_class=rc))
    return out
