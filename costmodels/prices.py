"""GPU prices per node and per GPU-hour, and network egress prices with monthly volume tiers.

Records are built by :mod:`fleetplan.datasets.catalog` (``load_gpu_prices``, ``load_egress``) from the shipped
files under datasets/data/pricing (sources and dates in PROVENANCE.md there); user rows can be added.

Units: USD, USD per hour, USD per GB with GB = 1e9 bytes (the clouds' unit; GiB-quoted prices are divided by
1.073741824 when loaded, GiB volume bounds multiplied by it).

Route classes (:data:`ROUTE_CLASSES`): 'same_zone', 'cross_zone', 'inter_region', 'internet' (the shipped CSV's
intra_zone, inter_zone, inter_region, internet_egress).
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fleetplan.errors import InputError, UnknownNameError, check_range

#: Route classes, in order of distance.
ROUTE_CLASSES: tuple[str, ...] = ("same_zone", "cross_zone", "inter_region", "internet")

#: The shipped egress CSV's category names -> route classes.
CATEGORY_TO_ROUTE_CLASS: dict[str, str] = {
    "intra_zone": "same_zone", "inter_zone": "cross_zone", "inter_region": "inter_region",
    "internet_egress": "internet",
}

#: Bytes in one GiB over bytes in one GB: a price per GiB / this = a price per GB.
GIB_PER_GB = 1.073741824

_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")

PRICING_MODELS: tuple[str, ...] = ("on-demand", "spot", "capacity-block", "on-demand-equivalent", "reserved",
                                   "negotiated", "committed-1y", "committed-3y", "owned")

#: Pricing models paid for every hour of the horizon for each GPU committed, used or not (a 1- or 3-year
#: commitment, a reservation, a negotiated rate): the planner chooses how many GPUs to commit.
COMMITTED_PRICING_MODELS: tuple[str, ...] = ("committed-1y", "committed-3y", "reserved", "negotiated")
#: Pricing model of GPUs one already owns: a fixed count, and a marginal cost per used GPU-hour (the power).
OWNED_PRICING_MODEL = "owned"
#: Pricing model of preemptible capacity: cheaper, with an interruption rate that derates its usable capacity.
SPOT_PRICING_MODEL = "spot"


def break_even_utilization(committed_usd_per_gpu_hour: float, on_demand_usd_per_gpu_hour: float) -> float:
    """Share of the horizon's hours a committed GPU must be busy for the commitment to cost less than buying the
    same busy hours on demand: committed rate / on-demand rate (a committed GPU costs its rate every hour; the
    same GPU on demand costs the on-demand rate only while busy). Above 1 a commitment never pays.

    Example: GCP H100 us-central1 (Cyclenerd pricing.yml, 2026-07-30): 1-year 7.673 / on-demand 11.061 = 0.694.
    Raises InputError for a negative committed rate or an on-demand rate that is not positive.
    """
    c = check_range(committed_usd_per_gpu_hour, field="committed_usd_per_gpu_hour", low=0, unit="USD/GPU-h")
    d = check_range(on_demand_usd_per_gpu_hour, field="on_demand_usd_per_gpu_hour", low=0, unit="USD/GPU-h")
    if d <= 0:
        raise InputError("the on-demand rate must be positive for a break-even utilization",
                         field="on_demand_usd_per_gpu_hour", value=d)
    return c / d


@dataclass(frozen=True, init=False)
class GpuPrice:
    """The price of one node shape (instance) at one site, under one pricing model.

    Attributes:
        cloud: 'aws', 'gcp', 'azure' or a user's name (lower-case).
        region: e.g. 'us-east-1'; '' when the source does not say.
        zone: availability zone ('use1-az1', 'us-central1-a') or '' for a region-level price.
        gpu: catalog GPU name (``fleetplan.datasets.catalog.load_gpus`` key), e.g. 'H100-SXM-80GB'.
        instance: instance type, e.g. 'p5.48xlarge'.
        gpus_per_node: GPUs in the instance (>= 1).
        node_usd_per_hour: the instance's price per hour, USD (for GCP: host VM + its GPUs).
        usd_per_gpu_hour: node_usd_per_hour / gpus_per_node; computed when not given, checked when given
            (within 0.5 %, the rounding of the shipped files).
        pricing_model: one of :data:`PRICING_MODELS` ('on-demand', 'spot', ...).
        source: where the price comes from (file and upstream source).
        as_of: the date the price was true (YYYY-MM-DD), '' when the source gives none (an undated snapshot is
            older than every dated one).
        snapshot: the snapshot the row belongs to (one source file or collection at one date); rows of one
            snapshot are consistent with each other. Defaults to ``source``.
        user: True for a user's own row (``files: prices``, ``--prices``): user rows win over the catalogs.
        flags: reasons the row must not be chosen (set by the loader: a GPU count that contradicts the instance
            type, a rule of datasets/data/pricing/price_rules.csv); listed by ``fleetplan data prices --check``.
    """

    cloud: str
    region: str
    zone: str
    gpu: str
    instance: str
    gpus_per_node: int
    node_usd_per_hour: float
    usd_per_gpu_hour: float  # always set: computed by __init__ when not given
    pricing_model: str = "on-demand"
    source: str = ""
    as_of: str = ""
    snapshot: str = ""
    user: bool = False
    flags: tuple[str, ...] = ()

    def __init__(self, cloud: str, region: str, zone: str, gpu: str, instance: str, gpus_per_node: int,
                 node_usd_per_hour: float, usd_per_gpu_hour: float | None = None, pricing_model: str = "on-demand",
                 source: str = "", *, as_of: str = "", snapshot: str = "", user: bool = False,
                 flags: tuple[str, ...] = ()) -> None:
        # Written out (not generated) so that usd_per_gpu_hour is optional here but always a float on the record.
        for name, value in (("cloud", cloud), ("region", region), ("zone", zone), ("gpu", gpu),
                            ("instance", instance), ("gpus_per_node", gpus_per_node),
                            ("node_usd_per_hour", node_usd_per_hour), ("pricing_model", pricing_model),
                            ("source", source), ("as_of", as_of), ("snapshot", snapshot or source),
                            ("user", user), ("flags", tuple(flags))):
            object.__setattr__(self, name, value)
        if self.as_of and not _ISO_DATE.fullmatch(self.as_of):
            raise InputError(f"price {cloud}/{region}/{instance}: as_of {as_of!r} is not a date; give YYYY-MM-DD",
                             field="as_of", value=as_of)
        owner = f"price {self.cloud}/{self.region}/{self.instance}"
        if not isinstance(self.gpus_per_node, int) or isinstance(self.gpus_per_node, bool) or not (
                1 <= self.gpus_per_node <= 64):
            raise InputError(f"{owner}: gpus_per_node must be a whole number 1..64, got {self.gpus_per_node!r}",
                             field="gpus_per_node", value=self.gpus_per_node)
        check_range(self.node_usd_per_hour, field="node_usd_per_hour", source=owner, low=0)
        if self.node_usd_per_hour > 1000:
            raise InputError(f"{owner}: {self.node_usd_per_hour:g} USD/hour per node is absurd (> 1000); give "
                             "USD per hour, not per month", field="node_usd_per_hour", value=self.node_usd_per_hour)
        if self.pricing_model not in PRICING_MODELS:
            raise InputError(f"{owner}: pricing model {self.pricing_model!r} is not one of "
                             f"{', '.join(PRICING_MODELS)}", field="pricing_model", value=self.pricing_model)
        per_gpu = self.node_usd_per_hour / self.gpus_per_node
        if usd_per_gpu_hour is None:
            usd_per_gpu_hour = per_gpu
        else:
            check_range(usd_per_gpu_hour, field="usd_per_gpu_hour", source=owner, low=0)
            if not math.isclose(usd_per_gpu_hour, per_gpu, rel_tol=5e-3, abs_tol=1e-4):
                raise InputError(f"{owner}: usd_per_gpu_hour {usd_per_gpu_hour:g} differs from node price / "
                                 f"GPUs = {per_gpu:g}; fix one of them", field="usd_per_gpu_hour",
                                 value=usd_per_gpu_hour)
        object.__setattr__(self, "usd_per_gpu_hour", usd_per_gpu_hour)


@dataclass(frozen=True)
class EgressTier:
    """One monthly volume band of an egress price: the rate applies to the GB inside [from_gb, to_gb).

    Attributes:
        from_gb: band start, GB per month (1e9 bytes).
        to_gb: band end, GB per month, or None for an open top band.
        usd_per_gb: price per GB moved inside this band.
    """

    from_gb: float
    to_gb: float | None
    usd_per_gb: float

    def __post_init__(self) -> None:
        check_range(self.from_gb, field="from_gb", source="egress tier", low=0)
        check_range(self.usd_per_gb, field="usd_per_gb", source="egress tier", low=0)
        if self.usd_per_gb > 5:
            raise InputError(f"egress tier: {self.usd_per_gb:g} USD/GB is absurd (> 5); give USD per GB",
                             field="usd_per_gb", value=self.usd_per_gb)
        if self.to_gb is not None:
            check_range(self.to_gb, field="to_gb", source="egress tier", low=0)
            if self.to_gb <= self.from_gb:
                raise InputError(f"egress tier: band end {self.to_gb:g} GB is not above its start {self.from_gb:g}",
                                 field="to_gb", value=self.to_gb)


@dataclass(frozen=True)
class EgressTable:
    """The egress price of one route class of one cloud for one scope (e.g. 'us-east-1 to internet').

    Attributes:
        cloud: 'aws', 'gcp', 'azure' (lower-case).
        route_class: one of :data:`ROUTE_CLASSES`.
        scope: what traffic the table covers, as the source says.
        tiers: contiguous bands from 0 GB/month, sorted; the last may be open (to_gb None). A flat price is one
            band [0, None).
        usd_per_gb_per_direction: for routes charged on both the sending and the receiving side (AWS cross-AZ
            "$0.01/GB in each direction"), the one-side rate; the tiers then hold the per-GB-moved rate
            (2 × 0.01 = 0.02). None when only the sender pays.
        historical: True for rows the source marks as old (kept for comparison, never a default).
        range_bound: 'high' or 'low' — which end of a quoted range the rates use ('single' when no range).
        source: the upstream source(s).
    """

    cloud: str
    route_class: str
    scope: str
    tiers: tuple[EgressTier, ...]
    usd_per_gb_per_direction: float | None = None
    historical: bool = False
    range_bound: str = "single"
    source: str = ""

    def __post_init__(self) -> None:
        if self.route_class not in ROUTE_CLASSES:
            raise InputError(f"egress: route class {self.route_class!r} is not one of {', '.join(ROUTE_CLASSES)}",
                             field="route_class", value=self.route_class)
        check_tiers(self.tiers, owner=f"egress {self.cloud}/{self.route_class}/{self.scope}")

    @property
    def is_flat(self) -> bool:
        """True when one rate applies to every GB (a single open band from 0, or equal rates in all bands)."""
        return self.tiers[-1].to_gb is None and len({t.usd_per_gb for t in self.tiers}) == 1

    @property
    def covered_gb(self) -> float:
        """Largest monthly volume the table prices, GB (inf for an open top band)."""
        top = self.tiers[-1].to_gb
        return math.inf if top is None else top


def check_tiers(tiers: Sequence[EgressTier], *, owner: str = "egress tiers") -> None:
    """Check that ``tiers`` start at 0 GB and are contiguous and sorted, with only the last band open.

    Raises:
        InputError: empty, a gap or overlap between bands, or an open band before the last.
    """
    if not tiers:
        raise InputError(f"{owner}: no price bands", field="tiers")
    if tiers[0].from_gb != 0:
        raise InputError(f"{owner}: the first band starts at {tiers[0].from_gb:g} GB, not 0; add the band from 0",
                         field="tier_from_gb", value=tiers[0].from_gb)
    for a, b in zip(tiers, tiers[1:], strict=False):
        if a.to_gb is None:
            raise InputError(f"{owner}: an open band (no end) is followed by another band", field="tier_to_gb")
        if not math.isclose(a.to_gb, b.from_gb, rel_tol=1e-12, abs_tol=1e-9):
            raise InputError(f"{owner}: band ending at {a.to_gb:g} GB is followed by one starting at "
                             f"{b.from_gb:g} GB; bands must be contiguous", field="tier_from_gb", value=b.from_gb)


def egress_cost_usd(volume_gb: float, tiers: Sequence[EgressTier] | EgressTable) -> float:
    """Cost in USD of moving ``volume_gb`` GB in one month through a tiered price, band by band.

    Each band's rate applies only to the GB that fall inside the band (like income-tax brackets), so the cost is
    continuous and never falls as the volume grows. Example (AWS us-east-1 to internet: 100 GB free, 0.09 to
    10,240 GB, 0.085 to 51,200 GB, ...): 10,240 GB cost (10,240 - 100) × 0.09 = 912.60 USD.

    Args:
        volume_gb: GB per month (1e9 bytes), >= 0.
        tiers: the bands (see :func:`check_tiers`) or an :class:`EgressTable`.

    Raises:
        InputError: a negative/NaN volume, or a volume above the last band of a table whose top rate is not in
            the data (no rate is invented).
    """
    if isinstance(tiers, EgressTable):
        tiers = tiers.tiers
    if not isinstance(volume_gb, int | float) or math.isnan(volume_gb) or math.isinf(volume_gb) or volume_gb < 0:
        raise InputError(f"egress volume must be a finite number of GB >= 0, got {volume_gb!r}", field="volume_gb",
                         value=volume_gb)
    check_tiers(tiers)
    top = tiers[-1].to_gb
    if top is not None and volume_gb > top * (1 + 1e-12):
        raise InputError(f"{volume_gb:g} GB/month is above {top:g} GB, the last band with a price in the data; "
                         "add the higher band in your own egress file (--extra) or split the volume",
                         field="volume_gb", value=volume_gb)
    cost = 0.0
    for t in tiers:
        hi = volume_gb if t.to_gb is None else min(volume_gb, t.to_gb)
        if hi <= t.from_gb:
            break
        cost += (hi - t.from_gb) * t.usd_per_gb
    return cost


def select_egress_table(cloud: str, route_class: str, tables: Iterable[EgressTable], *,
                        scope: str | None = None) -> EgressTable:
    """The egress table for (cloud, route class); ``scope`` picks one by a case-insensitive substring.

    Without ``scope`` the default is the first non-historical table the file lists for that pair (the shipped
    file lists the US / North America / same-continent scope first). ``tables``: the egress tables to search (the
    shipped ones: ``fleetplan.datasets.catalog.load_egress()``).

    Raises:
        UnknownNameError: unknown cloud or route class (lists the known ones).
        InputError: no table for the pair or no scope matching.
    """
    tables = list(tables)
    if route_class not in ROUTE_CLASSES:
        route_class = CATEGORY_TO_ROUTE_CLASS.get(route_class, route_class)
    if route_class not in ROUTE_CLASSES:
        raise UnknownNameError("route class", route_class, ROUTE_CLASSES)
    clouds = {t.cloud for t in tables}
    if cloud.lower() not in clouds:
        raise UnknownNameError("cloud", cloud, clouds)
    cands = [t for t in tables if t.cloud == cloud.lower() and t.route_class == route_class]
    if scope is not None:
        cands = [t for t in cands if scope.lower() in t.scope.lower()]
    else:
        cands = [t for t in cands if not t.historical]
    if not cands:
        known = sorted({t.scope for t in tables if t.cloud == cloud.lower() and t.route_class == route_class})
        raise InputError(f"no {route_class} egress price for {cloud}" + (f" with scope {scope!r}" if scope else "")
                         + (f"; scopes in the data: {'; '.join(known)}" if known else
                            "; add one in your own egress file (--extra)"), field="scope", value=scope)
    return cands[0]


def egress_rate_usd_per_gb(cloud: str, route_class: str, tables: Iterable[EgressTable], *,
                           scope: str | None = None, per_direction: bool = False) -> float:
    """Flat egress price, USD per GB moved, for a route class without volume tiers.

    Args:
        cloud, route_class, tables, scope: see :func:`select_egress_table`.
        per_direction: return the one-side rate of routes charged on both sides (AWS cross-AZ 0.01 instead of
            the 0.02 per GB moved); for other routes the same as the per-GB-moved rate.

    Raises:
        InputError: the class is tiered (use :func:`egress_cost_usd` with the table's tiers) or unknown.
    """
    table = select_egress_table(cloud, route_class, tables, scope=scope)
    if not table.is_flat:
        raise InputError(f"{cloud} {route_class} egress ({table.scope}) has monthly volume tiers; use "
                         "egress_cost_usd(volume_gb, table) instead of a flat rate", field="route_class",
                         value=route_class)
    if per_direction and table.usd_per_gb_per_direction is not None:
        return table.usd_per_gb_per_direction
    return table.tiers[0].usd_per_gb


#: Two snapshots of one (cloud, instance, region, pricing model) whose per-GPU prices differ by more than this factor
#: disagree: the newer one is used, the older is reported by ``fleetplan data prices --check``, and the older
#: snapshot's rows of that instance in other regions are stale (superseded). A policy threshold, not a fact about
#: the world: 1.5 is above the spread of one snapshot's regional list prices for one instance (SkyPilot AWS v7
#: p5.48xlarge: 98.32 to 127.816 USD/h, a factor of 1.30) and below a price cut such as AWS's June-2025 P5 cut
#: (98.32 -> 55.04, a factor of 1.79).
SNAPSHOT_DISAGREEMENT_FACTOR = 1.5

#: Kinds of :class:`PriceProblem`.
PRICE_PROBLEM_KINDS: tuple[str, ...] = ("flagged", "spot-above-on-demand", "snapshots-disagree", "superseded")


@dataclass(frozen=True)
class PriceProblem:
    """A catalog price row that is never chosen, and why.

    Attributes:
        kind: one of :data:`PRICE_PROBLEM_KINDS`: 'flagged' (the loader's flags: a GPU count that contradicts the
            instance type, a rule of price_rules.csv), 'spot-above-on-demand' (a spot price above the on-demand
            price of the same instance, site and snapshot), 'snapshots-disagree' (an older snapshot of the same
            cloud, instance, region and pricing model differs from the newest by more than the factor),
            'superseded' (an older snapshot whose price of this instance changed by more than the factor in a
            region where a newer snapshot exists, so its rows in the other regions are stale).
        row: the row left out.
        message: one line naming the numbers, the dates and the sources.
    """

    kind: str
    row: GpuPrice
    message: str


def _key(p: GpuPrice) -> tuple[str, str, str, str]:
    return (p.cloud, p.instance.lower(), p.region, p.pricing_model)


def _date(p: GpuPrice) -> str:
    return p.as_of or "0000-00-00"  # undated: older than every dated snapshot


def _dated(p: GpuPrice) -> str:
    return f"as of {p.as_of}" if p.as_of else "undated"


def snapshot_date(p: GpuPrice) -> str:
    """The date of the catalog snapshot row ``p`` belongs to (YYYY-MM-DD), 'undated' when its source gives none,
    '' for a user's own row (not a catalog snapshot)."""
    return "" if p.user else (p.as_of or "undated")


def price_label(p: GpuPrice) -> str:
    """One line saying which price a pool uses and where it comes from, e.g. 'catalog: aws p5.48xlarge us-east-1
    on-demand, 8 GPUs/node, 6.88 USD/GPU-h, as of 2026-11-09 (source ...)'."""
    where = p.region + (f"/{p.zone}" if p.zone else "")
    return (f"{'your price row' if p.user else 'catalog'}: {p.cloud} {p.instance} {where or '(region not stated)'} "
            f"{p.pricing_model}, {p.gpus_per_node} GPUs/node, {p.usd_per_gpu_hour:.4g} USD/GPU-h, {_dated(p)} "
            f"({p.source})")


def _in_date(p: GpuPrice, price_date: str | None) -> bool:
    return price_date is None or not p.as_of or p.as_of <= price_date


def check_price_date(price_date: str | None, *, field: str = "price_date",
                     prices: Iterable[GpuPrice] | None = None) -> str | None:
    """``price_date`` checked as a calendar date YYYY-MM-DD (None passes); with ``prices``, also on or after the
    earliest dated catalog snapshot among them (before it only undated rows would be left: a price nobody dated
    standing for a day before every known price). Raises InputError (field, value, format or the earliest date)."""
    if price_date is None:
        return None
    if not isinstance(price_date, str) or not _ISO_DATE.fullmatch(price_date):
        raise InputError(f"price date {price_date!r} is not a date; give YYYY-MM-DD, e.g. 2025-05-31", field=field,
                         value=price_date)
    try:
        datetime.date.fromisoformat(price_date)
    except ValueError:
        raise InputError(f"price date {price_date!r} is not a date (month 01-12, a day that month has); give "
                         "YYYY-MM-DD, e.g. 2025-05-31", field=field, value=price_date) from None
    today = datetime.date.today().isoformat()
    if price_date > today:
        raise InputError(f"price date {price_date} is in the future (today is {today}); no snapshot holds prices of a "
                         "day to come: give today or an earlier date, or none for the newest snapshot", field=field,
                         value=price_date)
    if prices is not None:
        earliest = min((p.as_of for p in prices if not p.user and p.as_of), default=None)
        if earliest is not None and price_date < earliest:
            raise InputError(f"no dated price snapshot on or before {price_date}; the earliest is {earliest}: give "
                             "a date on or after it, or none for the newest snapshot", field=field, value=price_date)
    return price_date


def price_problems(prices: Iterable[GpuPrice], *, price_date: str | None = None,
                   factor: float = SNAPSHOT_DISAGREEMENT_FACTOR) -> list[PriceProblem]:
    """Every catalog row that :func:`usable_prices` leaves out for a reason other than age alone (see
    :class:`PriceProblem`), in a stable order. User rows are never checked against the catalogs: they win.

    Args:
        prices: the rows (``fleetplan.datasets.catalog.load_gpu_prices``).
        price_date: YYYY-MM-DD; rows dated after it are ignored (undated rows are kept, as the oldest).
        factor: see :data:`SNAPSHOT_DISAGREEMENT_FACTOR`.
    """
    rows = [p for p in prices if not p.user and _in_date(p, price_date)]
    out: list[PriceProblem] = []
    for p in rows:
        for f in p.flags:
            out.append(PriceProblem("flagged", p, f))
    # Spot above on-demand: same snapshot, cloud, instance and site.
    on_demand: dict[tuple[str, str, str, str, str], GpuPrice] = {}
    for p in rows:
        if p.pricing_model == "on-demand":
            on_demand[(p.snapshot, p.cloud, p.instance.lower(), p.region, p.zone)] = p
    for p in rows:
        od = on_demand.get((p.snapshot, p.cloud, p.instance.lower(), p.region, p.zone))
        if p.pricing_model == "spot" and od is not None and p.usd_per_gpu_hour > od.usd_per_gpu_hour * (1 + 1e-9):
            out.append(PriceProblem("spot-above-on-demand", p,
                                    f"spot {p.usd_per_gpu_hour:.4g} USD/GPU-h is above on-demand "
                                    f"{od.usd_per_gpu_hour:.4g} for {p.cloud} {p.instance} at "
                                    f"{p.zone or p.region} in one snapshot ({p.snapshot})"))
    # Snapshots of one key: the newest wins; older ones that disagree by more than the factor are reported, and
    # the older snapshot's rows of that instance in regions the newer one does not cover are stale.
    bad = {id(q.row) for q in out}
    groups: dict[tuple[str, str, str, str], list[GpuPrice]] = {}
    for p in rows:
        if id(p) not in bad:
            groups.setdefault(_key(p), []).append(p)
    moved: dict[tuple[str, str, str, str], tuple[GpuPrice, GpuPrice]] = {}  # (cloud, inst, pm, old snap) -> rows
    for key, grp in sorted(groups.items()):
        newest = max(grp, key=_date)
        for p in grp:
            if p.snapshot == newest.snapshot or _date(p) == _date(newest):
                continue
            lo, hi = sorted((p.usd_per_gpu_hour, newest.usd_per_gpu_hour))
            if hi > lo * factor:
                out.append(PriceProblem("snapshots-disagree", p,
                                        f"{p.cloud} {p.instance} {p.region} {p.pricing_model}: {p.usd_per_gpu_hour:.4g}"
                                        f" USD/GPU-h ({p.snapshot}, {_dated(p)}) vs {newest.usd_per_gpu_hour:.4g} "
                                        f"({newest.snapshot}, {_dated(newest)}), a factor of {hi / lo:.2f} > "
                                        f"{factor:g}; the newer is used"))
                moved.setdefault((key[0], key[1], key[3], p.snapshot), (p, newest))
    covered = {(p.cloud, p.instance.lower(), p.pricing_model, p.region, p.snapshot) for p in rows}
    for p in rows:
        hit = moved.get((p.cloud, p.instance.lower(), p.pricing_model, p.snapshot))
        if hit is None or id(p) in bad:
            continue
        old, new = hit
        if (p.cloud, p.instance.lower(), p.pricing_model, p.region, new.snapshot) in covered:
            continue
        out.append(PriceProblem("superseded", p,
                                f"{p.cloud} {p.instance} {p.region} {p.pricing_model} {p.usd_per_gpu_hour:.4g} "
                                f"USD/GPU-h is from {p.snapshot} ({_dated(p)}), whose price of this instance in "
                                f"{old.region} ({old.usd_per_gpu_hour:.4g}) changed to {new.usd_per_gpu_hour:.4g} "
                                f"by {_dated(new)} ({new.snapshot}); no newer price for {p.region} in the data"))
    return out


def usable_prices(prices: Iterable[GpuPrice], *, price_date: str | None = None,
                  factor: float = SNAPSHOT_DISAGREEMENT_FACTOR) -> list[GpuPrice]:
    """The rows a price may be chosen from: every user row, and of the catalog rows, those of the newest snapshot
    (dated on or before ``price_date`` when given) of each (cloud, instance, region, pricing model), without the
    rows :func:`price_problems` reports."""
    rows = list(prices)
    dropped = {id(q.row) for q in price_problems(rows, price_date=price_date, factor=factor)}
    cat = [p for p in rows if not p.user and _in_date(p, price_date) and id(p) not in dropped]
    newest: dict[tuple[str, str, str, str], str] = {}
    for p in cat:
        k = _key(p)
        newest[k] = max(newest.get(k, ""), _date(p))
    return [p for p in rows if p.user] + [p for p in cat if _date(p) == newest[_key(p)]]


def find_price(gpu_name: str, cloud: str, region: str | None, pricing_model: str, prices: Iterable[GpuPrice], *,
               zone: str | None = None, gpus_per_node: int | None = None,
               price_date: str | None = None) -> GpuPrice:
    """The price per GPU-hour for ``gpu_name`` at (cloud, region[, zone]) under ``pricing_model``.

    Order: (1) the user's rows (``GpuPrice.user``) for this GPU at this site win over every catalog row; when they
    give the GPU there only under other pricing models, that is an error (never a silent fall-back to the
    catalog). (2) Otherwise the catalog rows :func:`usable_prices` keeps (the newest snapshot per cloud,
    instance, region and pricing model; no flagged, spot-above-on-demand or stale row). Among the candidates the
    instances with ``gpus_per_node`` GPUs come first (a pool of 8-GPU nodes is priced as an 8-GPU instance, not a
    1-GPU VM; other sizes only when the site prices none of that size), then the cheapest per GPU-hour.
    A zone query also matches region-level rows (zone '').

    Args:
        gpu_name: a catalog GPU name as the price rows spell it (``fleetplan.datasets.catalog.find_price`` resolves
            aliases such as 'H100' first and loads the shipped rows).
        cloud: 'aws', 'gcp', 'azure' (case-insensitive).
        region: a region ('us-east-1'), or None for any region.
        pricing_model: one of :data:`PRICING_MODELS`.
        prices: the rows to search.
        zone: restrict to one zone (and region-level rows).
        gpus_per_node: the node size to prefer.
        price_date: YYYY-MM-DD: use the snapshots dated on or before it (default: the newest).

    Raises:
        UnknownNameError: a cloud no row has.
        InputError: an unknown pricing model (field 'pricing_model', lists the known ones); no row matches (the
            message lists the regions / pricing models that do have a price, and the rows left out and why).
    """
    rows = list(prices)
    price_date = check_price_date(price_date, prices=rows)
    if pricing_model not in PRICING_MODELS:
        raise InputError(f"unknown pricing model {pricing_model!r}; use one of {', '.join(PRICING_MODELS)}",
                         field="pricing_model", value=pricing_model)
    clouds = {p.cloud for p in rows}
    if cloud.lower() not in clouds:
        raise UnknownNameError("cloud", cloud, clouds)
    q = _PriceQuery(gpu_name, cloud.lower(), region, zone, pricing_model)
    mine = [p for p in rows if p.user and q.here(p)]
    match = _user_match(q, mine) if mine else _catalog_match(q, rows, price_date)
    if gpus_per_node is not None:
        exact = [p for p in match if p.gpus_per_node == gpus_per_node]
        match = exact or match
    return min(match, key=lambda p: (round(p.usd_per_gpu_hour, 9), -p.gpus_per_node, p.region, p.zone, p.instance))


@dataclass(frozen=True)
class _PriceQuery:
    """What :func:`find_price` looks for: a GPU at (cloud, region or None for any, zone or None) under a pricing
    model."""

    gpu: str
    cloud: str
    region: str | None
    zone: str | None
    pricing_model: str

    def here(self, p: GpuPrice) -> bool:
        """Whether row ``p`` prices the GPU at the site (a zone query also matches region-level rows)."""
        return (p.gpu == self.gpu and p.cloud == self.cloud and (self.region is None or p.region == self.region)
                and (self.zone is None or p.zone in (self.zone, "")))

    @property
    def site(self) -> str:
        """The site as messages name it, e.g. 'aws:us-east-1', 'gcp:any region'."""
        return f"{self.cloud}:{self.region or 'any region'}{':' + self.zone if self.zone else ''}"


def _user_match(q: _PriceQuery, mine: list[GpuPrice]) -> list[GpuPrice]:
    """The user's rows ``mine`` (for the GPU at the site) under the query's pricing model; InputError when they
    give it only under others (never a silent fall-back to the catalog)."""
    match = [p for p in mine if p.pricing_model == q.pricing_model]
    if not match:
        have = sorted({p.pricing_model for p in mine})
        raise InputError(f"your price rows give {q.gpu} at {q.site} as {', '.join(have)} only, but this pool "
                         f"is priced {q.pricing_model}; set pricing_model: {have[0]} (options, site or inventory "
                         f"row) to use your price, or add a row with pricing_model {q.pricing_model}",
                         field="pricing_model", value=q.pricing_model)
    return match


def _catalog_match(q: _PriceQuery, rows: list[GpuPrice], price_date: str | None) -> list[GpuPrice]:
    """The catalog rows :func:`usable_prices` keeps that answer the query; InputError when the cloud prices the GPU
    nowhere (naming the clouds that do) or not here (:func:`_no_catalog_price`)."""
    for_gpu = [p for p in rows if p.gpu == q.gpu and p.cloud == q.cloud]
    if not for_gpu:
        have_c = sorted({p.cloud for p in rows if p.gpu == q.gpu})
        raise InputError(f"no price for {q.gpu} on {q.cloud}" + (f"; priced on: {', '.join(have_c)}" if have_c
                         else "; add one in your own price file"), field="gpu", value=q.gpu)
    usable = usable_prices(rows, price_date=price_date)
    match = [p for p in usable if q.here(p) and p.pricing_model == q.pricing_model]
    if not match:
        raise _no_catalog_price(q, rows, usable, price_date)
    return match


def _no_catalog_price(q: _PriceQuery, rows: list[GpuPrice], usable: list[GpuPrice],
                      price_date: str | None) -> InputError:
    """The error of a query no usable catalog row answers: the regions and pricing models that do have a price,
    and the first row left out (:func:`price_problems`) that would have; field 'pricing_model' when the region has
    prices under others, else 'region'."""
    by_region: dict[str, set[str]] = {}
    for p in usable:
        if p.gpu == q.gpu and p.cloud == q.cloud:
            by_region.setdefault(p.region or "(region not stated)", set()).add(p.pricing_model)
    shown = "; ".join(f"{r} ({', '.join(sorted(m))})" for r, m in sorted(by_region.items()))
    left = [x for x in price_problems(rows, price_date=price_date)
            if q.here(x.row) and x.row.pricing_model == q.pricing_model]
    why = f"; left out: {left[0].message}" + (f" (and {len(left) - 1} more)" if len(left) > 1 else "") \
        if left else ""
    return InputError(f"no {q.pricing_model} price for {q.gpu} at {q.site}"
                      + (f" as of {price_date}" if price_date else "") + f"{why}; available: "
                      f"{shown or 'none'}", field="pricing_model" if by_region.get(q.region or "") else "region",
                      value=q.region)


__all__ = [
    "CATEGORY_TO_ROUTE_CLASS", "COMMITTED_PRICING_MODELS", "GIB_PER_GB", "OWNED_PRICING_MODEL", "SPOT_PRICING_MODEL",
    "break_even_utilization", "PRICE_PROBLEM_KINDS", "PRICING_MODELS", "ROUTE_CLASSES",
    "SNAPSHOT_DISAGREEMENT_FACTOR", "EgressTable", "EgressTier", "GpuPrice", "PriceProblem", "check_price_date",
    "snapshot_date",
    "check_tiers", "egress_cost_usd", "egress_rate_usd_per_gb", "find_price", "price_label", "price_problems",
    "select_egress_table", "usable_prices",
]


#: How far (as a factor, either way) a price given in a scenario may lie from the catalog's price of the same GPU,
#: site and pricing model before the plan warns: a monthly price (about 730 × the hourly one) or a node's price
#: (8 × a GPU's on 8-GPU nodes is within it, so that one passes) typed as USD per GPU-hour. A plausibility bound
#: of this project, not a number about the world.
IMPLAUSIBLE_PRICE_FACTOR = 10.0


def implausible_price(given_usd_per_gpu_hour: float, reference: GpuPrice) -> str:
    """Why a price per GPU-hour given by the user looks like a mistake next to ``reference`` (the catalog's price
    of the same GPU, site and pricing model), or '' when it lies within :data:`IMPLAUSIBLE_PRICE_FACTOR` of it
    either way (a zero price, or a zero reference, is not judged)."""
    ref = reference.usd_per_gpu_hour
    if given_usd_per_gpu_hour <= 0 or ref <= 0:
        return ""
    ratio = given_usd_per_gpu_hour / ref
    if 1 / IMPLAUSIBLE_PRICE_FACTOR <= ratio <= IMPLAUSIBLE_PRICE_FACTOR:
        return ""
    hint = "a monthly or node price?" if ratio > 1 else "a price per second or per minute?"
    whose = "your price row" if reference.user else "the catalog"
    return (f"{given_usd_per_gpu_hour:g} USD/GPU-h is {ratio:.3g} × the {ref:.4g} of {whose} ({reference.cloud} "
            f"{reference.instance} {reference.region} {reference.pricing_model}, {_dated(reference)}): {hint} "
            "usd_per_gpu_hour is USD per GPU per hour; planned as given")
