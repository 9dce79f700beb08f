"""A scenario's inventory rows as priced pools: the price of each row (catalog, given, owned power, committed, spot),
the on-demand reference of committed rows, unique pool ids, and the egress table of a route.
"""

from __future__ import annotations

import dataclasses
import math

from fleetplan.costmodels.energy import owned_marginal_usd_per_gpu_hour
from fleetplan.costmodels.hardware import GPU
from fleetplan.costmodels.network import Site, route_class
from fleetplan.costmodels.prices import (
    COMMITTED_PRICING_MODELS,
    OWNED_PRICING_MODEL,
    SPOT_PRICING_MODEL,
    GpuPrice,
    implausible_price,
    price_label,
    select_egress_table,
    snapshot_date,
)
from fleetplan.datasets.calibration import idle_fraction
from fleetplan.datasets.catalog.egress import load_egress
from fleetplan.datasets.catalog.names import get_gpu
from fleetplan.datasets.catalog.prices import find_price
from fleetplan.datasets.ledger import load_assumptions
from fleetplan.errors import FleetplanError, InputError, UnknownNameError
from fleetplan.placement.problem import (
    COMMITTED_FALLBACK_WHY,
    Pool,
)
from fleetplan.scenario.read import at_field, check_region, field_error, within_entry
from fleetplan.scenario.schemas import InventoryRow, ScenarioFile, SiteSpec


def _price(gpu: str, site_name: str, pricing_model: str, where: str, prices, *, gpus_per_node: int,
           price_date: str | None) -> tuple[float, str, str]:
    """(USD per GPU-hour, where it comes from, its snapshot date: :func:`~fleetplan.costmodels.prices.snapshot_date`)
    for an inventory row without a price: the user's price rows win, else the newest consistent catalog snapshot
    (see :func:`fleetplan.costmodels.prices.find_price`)."""
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
    return p.usd_per_gpu_hour, label, snapshot_date(p)


def _price_warning(price: float, gpu: str, site_name: str, pricing_model: str, prices, *, gpus_per_node: int,
                   price_date: str | None) -> str:
    """:func:`~fleetplan.costmodels.prices.implausible_price` of a price given in the scenario against the one the
    price rows give for the same GPU, site and pricing model ('' when they give none)."""
    site = Site.parse(site_name)
    try:
        ref = find_price(gpu, site.cloud, site.region, pricing_model, prices, zone=site.zone or None,
                         gpus_per_node=gpus_per_node, price_date=price_date)
    except FleetplanError:  # no price to compare with (a private site, a GPU the catalogs do not sell there)
        return ""
    return implausible_price(price, ref)


def build_pool(row: InventoryRow, where: str, site: str, gpu: GPU, pricing_model: str, prices, opts: dict) -> Pool:
    """The :class:`Pool` of one inventory row, priced by its pricing model (see :class:`Pool`): per used GPU-hour
    (the row's price or the catalogs'), committed (that price per committed GPU-hour, nothing per use), owned (the
    row's price, else the marginal power cost of a busy GPU: :func:`owned_marginal_usd_per_gpu_hour` with the
    GPU's TDP, its idle fraction and the ledger's electricity price and PUE, datasets/data/ledger), spot (its
    ``interruption_rate`` is required: no public per-instance rate is shipped, see pricing/PROVENANCE.md)."""
    gpn = row.gpus_per_node
    price = row.usd_per_gpu_hour
    as_of = ""  # not a catalog snapshot's price unless looked up there
    warning = ""
    if price is not None:
        src = f"usd_per_gpu_hour given in {where}"
        if pricing_model != OWNED_PRICING_MODEL:  # an owned GPU's price is its marginal cost: no catalog twin
            warning = _price_warning(price, gpu.name, site, pricing_model, prices, gpus_per_node=gpn,
                                     price_date=opts.get("price_date"))
    elif pricing_model == OWNED_PRICING_MODEL:
        a = load_assumptions()
        if not gpu.tdp_w:
            raise field_error(f"owned {gpu.name} GPUs: the GPU catalog has no TDP for the power cost; give "
                       "usd_per_gpu_hour (the marginal cost of a busy GPU-hour)", where, "usd_per_gpu_hour")
        kwh, pue = a["electricity_usd_per_kwh"], a["pue"]
        price = owned_marginal_usd_per_gpu_hour(gpu.tdp_w, idle_fraction(gpu.name), kwh.value, pue.value)
        src = (f"owned: power above idle at {gpu.tdp_w:g} W TDP × PUE {pue.value:g} × {kwh.value:g} USD/kWh "
               f"(datasets/data/ledger/assumptions.csv: {kwh.source.split(' ')[0]})")
    else:
        price, src, as_of = _price(gpu.name, site, pricing_model, where, prices, gpus_per_node=gpn,
                                   price_date=opts.get("price_date"))
    spot = pricing_model == SPOT_PRICING_MODEL
    if spot and row.interruption_rate is None:
        raise field_error("a spot row needs interruption_rate: the expected share of its GPU-hours lost to preemption "
                   "(e.g. 0.05; 0 plans without derating)", where, "interruption_rate")
    if not spot and (row.interruption_rate is not None or row.fallback is not None):
        raise field_error(f"interruption_rate and fallback are for spot rows; this row is {pricing_model}", where,
                   "interruption_rate" if row.interruption_rate is not None else "fallback")
    committed = pricing_model in COMMITTED_PRICING_MODELS
    if row.on_demand_usd_per_gpu_hour is not None and not committed:
        raise field_error(f"on_demand_usd_per_gpu_hour is for committed rows; this row is {pricing_model}", where,
                   "on_demand_usd_per_gpu_hour")
    try:
        return Pool(site, gpu.name, nodes=row.nodes, gpus_per_node=gpn, usd_per_gpu_hour=0.0 if committed else price,
                    memory_bytes_per_gpu=gpu.memory_bytes, pricing_model=pricing_model, price_source=src,
                    name=row.name or "", committed_usd_per_gpu_hour=price if committed else 0.0,
                    on_demand_usd_per_gpu_hour=row.on_demand_usd_per_gpu_hour,
                    on_demand_price_source=(f"on_demand_usd_per_gpu_hour given in {where}"
                                            if row.on_demand_usd_per_gpu_hour is not None else ""),
                    interruption_rate=row.interruption_rate or 0.0, fallback_pool=row.fallback, price_as_of=as_of,
                    price_warning=warning)
    except InputError as exc:
        raise InputError(str(exc), source=where, field=exc.field, value=exc.value) from None


def with_on_demand_reference(pools: list[Pool], prices, price_date: str | None, rows_where: list[str]) -> list[Pool]:
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
            raise field_error(f"on_demand_usd_per_gpu_hour {given:g} differs from the {twin.usd_per_gpu_hour:g} "
                              f"USD/GPU-h "
                       f"of the on-demand pool {twin.id!r} of this site and GPU type, which carries (and prices) the "
                       "overflow beyond the commitment; drop the key (that pool's rate is the break-even's "
                       "reference) or change that row's usd_per_gpu_hour", rw, "on_demand_usd_per_gpu_hour", given)
        if p.committed and p.on_demand_usd_per_gpu_hour is None:
            if twin is not None:
                p = dataclasses.replace(p, on_demand_usd_per_gpu_hour=twin.usd_per_gpu_hour,
                                        on_demand_price_source=f"pool {twin.id}: {twin.price_source}")
            else:
                try:
                    rate, src, _ = _price(p.gpu, p.site, "on-demand", p.id, prices, gpus_per_node=p.gpus_per_node,
                                          price_date=price_date)
                    p = dataclasses.replace(p, on_demand_usd_per_gpu_hour=rate, on_demand_price_source=src)
                except InputError:
                    pass  # no on-demand price known: the break-even is reported as unknown
        out.append(p)
    return out


def check_pool_names(pools: list[Pool], rows_where: list[str]) -> None:
    """Pool ids are unique (an InputError names the second row of an id) and a spot row's ``fallback`` names
    another row of the same site and GPU type that is on-demand or owned (not spot, not committed:
    :data:`~fleetplan.placement.problem.COMMITTED_FALLBACK_WHY`); otherwise InputError naming the row
    (``rows_where[k]`` is where ``pools[k]`` comes from) and the rows that would do."""
    by_id = {p.id: p for p in pools}
    seen: set[str] = set()
    for p, rw in zip(pools, rows_where, strict=True):
        if p.id in seen:
            raise field_error(f"an earlier inventory row already makes the pool {p.id!r}; give each row of one site "
                              f"and GPU "
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
            raise field_error(f"a spot row cannot be its own fallback pool: its interrupted replicas restart on "
                              f"another "
                       f"row's GPUs; name an on-demand or owned row of the same site and GPU type{here}", rw,
                       "fallback", p.fallback_pool)
        if f is None and not usable:
            raise field_error(f"unknown fallback pool {p.fallback_pool!r}, and this site has no on-demand or owned "
                              f"row of {p.gpu} to fall back to: add one and name it here", rw, "fallback",
                              p.fallback_pool)
        if f is None:
            raise UnknownNameError("fallback pool", p.fallback_pool, usable, source=rw, field="fallback")
        if f.site != p.site or f.gpu != p.gpu or f.pricing_model == SPOT_PRICING_MODEL:
            why = "a spot row" if f.pricing_model == SPOT_PRICING_MODEL else f"{f.gpu} at {f.site}"
            raise field_error(f"fallback {f.id!r} is {why}; name an on-demand or owned row of the same site and GPU "
                              f"type"
                       f"{here}", rw, "fallback", f.id)
        if f.committed:
            raise field_error(f"fallback {f.id!r} is a committed row: "
                              f"{COMMITTED_FALLBACK_WHY}{here}", rw, "fallback", f.id)


def _site_pools(s: SiteSpec, sw: str, site: str, opts: dict, prices: list[GpuPrice], *, allowed_gpus: set[str] | None,
                gpus_file: str | None, gpus: dict[str, GPU]) -> list[tuple[Pool, str]]:
    """(pool, the inventory row's place in the file) of every row of site ``s`` (at ``sw``, canonical name
    ``site``) whose GPU type is allowed; the rows' GPUs are added to ``gpus`` by catalog name."""
    if any(row.usd_per_gpu_hour is None for row in s.inventory):  # a catalog price is looked up
        check_region(Site.parse(s.name), prices, sw)
    out = []
    for j, row in enumerate(s.inventory):
        rw = f"{sw}.inventory[{j}]"
        with at_field(rw, "gpu"):
            gpu = get_gpu(row.gpu, gpus_file)
        if allowed_gpus is not None and gpu.name not in allowed_gpus:
            continue
        gpus[gpu.name] = gpu
        pm = row.pricing_model or s.pricing_model or opts["pricing_model"]
        out.append((build_pool(row, rw, site, gpu, pm, prices, opts), rw))
    return out


def scenario_pools(where: str, spec: ScenarioFile, opts: dict, prices: list[GpuPrice], *,
                   allowed_gpus: set[str] | None, gpus_file: str | None) -> tuple[list[Pool], dict[str, GPU]]:
    """The pools of a scenario (the file ``where``, checked as ``spec``, with options ``opts``): one per inventory
    row whose GPU type is in ``allowed_gpus`` (catalog names; None: all), in file order, priced from ``prices``
    (:func:`build_pool`; committed rows with their on-demand reference, :func:`with_on_demand_reference`), their
    ids checked (:func:`check_pool_names`); and {catalog GPU name: GPU} of their GPUs (``gpus_file``: the
    scenario's own GPU rows). Raises InputError / UnknownNameError naming the site or row: a site listed twice, a
    misspelt region, no pool left."""
    pools: list[Pool] = []
    rows_where: list[str] = []
    gpus: dict[str, GPU] = {}
    site_rows: dict[str, int] = {}
    for i, s in enumerate(spec.sites):
        sw = f"{where}: sites[{i}]"
        with within_entry(sw, "name"):
            site = Site.parse(s.name).name
        if site in site_rows:
            raise field_error(f"site {site!r} is listed twice (sites[{site_rows[site]}] and sites[{i}]); list each "
                              "site once, with all its inventory rows under it", sw, "name", s.name)
        site_rows[site] = i
        for pool, rw in _site_pools(s, sw, site, opts, prices, allowed_gpus=allowed_gpus, gpus_file=gpus_file,
                                    gpus=gpus):
            pools.append(pool)
            rows_where.append(rw)
    if not pools:
        raise field_error("no GPU pool left (check allowed_gpus and the inventories)", where, "sites")
    pools = with_on_demand_reference(pools, prices, opts.get("price_date"), rows_where)
    check_pool_names(pools, rows_where)
    return pools, gpus


#: ``options.price_snapshots``: 'one' (every catalog-priced pool of a plan from snapshots of one date) or 'mixed'.
PRICE_SNAPSHOT_POLICIES = ("one", "mixed")


def snapshot_dates(pools: list[Pool]) -> dict[str, list[str]]:
    """{snapshot date ('YYYY-MM-DD' or 'undated'): ids of the pools priced from catalog snapshots of that date},
    newest date first, undated last; pools whose price is not a catalog's (:attr:`Pool.price_as_of` '') are left
    out."""
    out: dict[str, list[str]] = {}
    for p in pools:
        if p.price_as_of:
            out.setdefault(p.price_as_of, []).append(p.id)
    order = sorted((d for d in out if d != "undated"), reverse=True) + (["undated"] if "undated" in out else [])
    return {d: out[d] for d in order}


def check_price_snapshots(pools: list[Pool], opts: dict, where: str) -> None:
    """The price snapshot policy: unless ``options.price_snapshots`` is 'mixed', every pool priced from the
    catalogs must use snapshots of one date (an undated snapshot counts as one date, 'undated'). Prices given in
    the scenario, your own price rows and owned GPUs' power costs are not snapshots and always pass. Raises
    InputError (field options.price_snapshots) naming each date with its pools and the three fixes."""
    dates = snapshot_dates(pools)
    if len(dates) <= 1 or opts.get("price_snapshots", "one") == "mixed":
        return
    listed = "; ".join(f"{d}: {', '.join(ids)}" for d, ids in dates.items())
    raise field_error(f"the pools' catalog prices come from snapshots of {len(dates)} dates ({listed}), and a "
                      "plan uses one snapshot date unless told otherwise; set options.price_snapshots: mixed to "
                      "plan with these prices (the plan lists each pool's date), or options.price_date: "
                      "YYYY-MM-DD to take every price as of one date (`fleetplan data prices` lists the dates), "
                      "or give usd_per_gpu_hour for the rows whose price you know", where, "options.price_snapshots",
                      opts.get("price_snapshots", "one"))


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
