"""The cost ledger: what a deployment costs per day and per month, line by line, with the source of every price.

A :class:`Ledger` holds :class:`LineItem` rows (quantity × unit price = amount, with the price's source) of one
deployment option:

* ``gpu``: GPU-hours per (site, GPU type, pricing model) × USD per GPU-hour (prices from the catalog,
  :func:`fleetplan.costmodels.prices.find_price`, or given by the user);
* ``egress``: GB moved per route class and monthly volume tier × USD per GB. Traffic sharing one egress table
  (cloud, route class, scope) is added up per month, as the clouds bill it, and priced band by band
  (:func:`fleetplan.costmodels.prices.egress_cost_usd`): one line per band with volume in it;
* ``energy``: kWh of the GPUs (board power linear in utilization, :mod:`fleetplan.costmodels.energy`, × PUE) ×
  USD per kWh. Cloud GPU prices already include power, so energy lines are shown but left out of the total unless
  ``energy_billed`` (own hardware);
* ``start``: replica starts (plans only).

Conventions: a day is 24 h; a month is 365/12 days (730 h, the clouds' billing month); tiered egress is priced on the
monthly volume (daily volume × 365/12) and the monthly cost is divided back by 365/12 for the daily line. Per-token
figures attribute each line's amount to input (prefill) or output (decode) tokens by its ``input_share``.

Plans: :func:`plan_ledger` turns a :class:`fleetplan.placement.plan.Plan` into a ledger whose GPU, start and egress
totals equal :func:`fleetplan.placement.plan.evaluate` (scaled to one day).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fleetplan.costmodels.energy import power_w
from fleetplan.costmodels.prices import EgressTable, GpuPrice, egress_cost_usd
from fleetplan.errors import InputError, check_range

HOURS_PER_DAY = 24.0
SECONDS_PER_DAY = 86400.0
#: Days per month: 365 / 12 (a 730-hour month, as the clouds bill).
DAYS_PER_MONTH = 365.0 / 12.0

CATEGORIES = ("gpu", "egress", "energy", "start")


@dataclass(frozen=True)
class Assumption:
    """One number the ledger needs beyond prices: ``name``, ``value`` (in ``unit``), ``source`` (a URL).

    The shipped ones (text_bytes_per_token, electricity_usd_per_kwh, pue) are read from
    datasets/data/ledger/assumptions.csv by :func:`fleetplan.datasets.ledger.load_assumptions`.
    """

    name: str
    value: float
    unit: str
    source: str
    estimate: bool = True


@dataclass(frozen=True)
class LineItem:
    """One line of a ledger: ``quantity_per_day`` ``unit`` × ``unit_price_usd`` = ``amount_usd_per_day``.

    Attributes:
        option: the deployment option the line belongs to ('colocated', 'disaggregated', 'split', 'plan' ...).
        category: one of :data:`CATEGORIES`.
        label: human description.
        quantity_per_day: GPU-hours, GB, kWh or starts per day.
        unit: 'GPU-hour', 'GB', 'kWh', 'start'.
        unit_price_usd: USD per unit.
        source: where the unit price comes from.
        site, gpu, pricing_model, route_class, tier: what the line is about ('' when not relevant).
        input_share: share (0..1) of the amount attributed to input (prefill) tokens; the rest to output tokens.
        in_total: False for lines shown for information only (energy already included in a cloud GPU price).
        pool: the plan's pool id the line is about ('' when not relevant; several pools may share a site and GPU).
    """

    option: str
    category: str
    label: str
    quantity_per_day: float
    unit: str
    unit_price_usd: float
    source: str
    site: str = ""
    gpu: str = ""
    pricing_model: str = ""
    route_class: str = ""
    tier: str = ""
    input_share: float = 0.0
    in_total: bool = True
    pool: str = ""

    def __post_init__(self) -> None:
        if self.category not in CATEGORIES:
            raise InputError(f"line item category {self.category!r} is not one of {', '.join(CATEGORIES)}",
                             field="category", value=self.category)
        for f in ("quantity_per_day", "unit_price_usd"):
            check_range(getattr(self, f), field=f, low=0.0, high=1e15)
        check_range(self.input_share, field="input_share", low=0.0, high=1.0)

    @property
    def amount_usd_per_day(self) -> float:
        return self.quantity_per_day * self.unit_price_usd

    @property
    def amount_usd_per_month(self) -> float:
        return self.amount_usd_per_day * DAYS_PER_MONTH

    def row(self) -> dict:
        """The line as a flat dict (CSV/JSON), keys with units."""
        return {"option": self.option, "category": self.category, "label": self.label, "site": self.site,
                "gpu": self.gpu, "pricing_model": self.pricing_model, "route_class": self.route_class,
                "tier": self.tier, "quantity_per_day": self.quantity_per_day, "unit": self.unit,
                "unit_price_usd": self.unit_price_usd, "amount_usd_per_day": self.amount_usd_per_day,
                "amount_usd_per_month": self.amount_usd_per_month, "in_total": self.in_total,
                "input_share": self.input_share, "source": self.source}


@dataclass(frozen=True)
class Ledger:
    """The line items of one option and the traffic they serve.

    Attributes:
        option: option name.
        items: line items.
        requests_per_day, input_tokens_per_day, output_tokens_per_day: what the option serves (0 when unknown).
    """

    option: str
    items: tuple[LineItem, ...]
    requests_per_day: float = 0.0
    input_tokens_per_day: float = 0.0
    output_tokens_per_day: float = 0.0

    def _sum(self, category: str | None = None, *, billed_only: bool = True) -> float:
        return sum(i.amount_usd_per_day for i in self.items
                   if (category is None or i.category == category) and (i.in_total or not billed_only))

    @property
    def total_usd_per_day(self) -> float:
        """Sum of the lines counted in the total, USD per day."""
        return self._sum()

    @property
    def total_usd_per_month(self) -> float:
        return self.total_usd_per_day * DAYS_PER_MONTH

    @property
    def gpu_usd_per_day(self) -> float:
        return self._sum("gpu")

    @property
    def egress_usd_per_day(self) -> float:
        return self._sum("egress")

    @property
    def start_usd_per_day(self) -> float:
        return self._sum("start")

    @property
    def energy_usd_per_day(self) -> float:
        """Energy cost whether billed or not, USD per day."""
        return self._sum("energy", billed_only=False)

    @property
    def energy_kwh_per_day(self) -> float:
        return sum(i.quantity_per_day for i in self.items if i.category == "energy")

    @property
    def gpu_hours_per_day(self) -> float:
        return sum(i.quantity_per_day for i in self.items if i.category == "gpu")

    @property
    def input_usd_per_day(self) -> float:
        """Billed amount attributed to input tokens, USD per day."""
        return sum(i.amount_usd_per_day * i.input_share for i in self.items if i.in_total)

    @property
    def usd_per_request(self) -> float | None:
        return self.total_usd_per_day / self.requests_per_day if self.requests_per_day > 0 else None

    @property
    def usd_per_1m_input_tokens(self) -> float | None:
        """Input-attributed USD per million input tokens."""
        t = self.input_tokens_per_day
        return self.input_usd_per_day / t * 1e6 if t > 0 else None

    @property
    def usd_per_1m_output_tokens(self) -> float | None:
        """Output-attributed USD per million output tokens."""
        t = self.output_tokens_per_day
        return (self.total_usd_per_day - self.input_usd_per_day) / t * 1e6 if t > 0 else None

    def summary(self) -> dict:
        """Totals as a flat dict, keys with units."""
        return {"option": self.option, "total_usd_per_day": self.total_usd_per_day,
                "total_usd_per_month": self.total_usd_per_month, "gpu_usd_per_day": self.gpu_usd_per_day,
                "egress_usd_per_day": self.egress_usd_per_day, "start_usd_per_day": self.start_usd_per_day,
                "energy_usd_per_day": self.energy_usd_per_day, "energy_kwh_per_day": self.energy_kwh_per_day,
                "gpu_hours_per_day": self.gpu_hours_per_day, "usd_per_request": self.usd_per_request,
                "usd_per_1m_input_tokens": self.usd_per_1m_input_tokens,
                "usd_per_1m_output_tokens": self.usd_per_1m_output_tokens}


# ---- building blocks ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GpuPool:
    """GPUs of one role at one site, as a ledger sees them.

    Attributes:
        role: 'colocated', 'prefill' or 'decode' (or a plan's pool id).
        site: site name.
        gpu: catalog GPU name.
        tp: GPUs per replica.
        replicas: replicas (whole number).
        price: the price row (its usd_per_gpu_hour, pricing_model and source are used).
        tdp_w: board power per GPU, W (None: no energy line).
        utilization: busy share of the pool (0..1), for the energy estimate.
        input_share: share of the pool's cost attributed to input tokens (prefill 1, decode 0, colocated the
            prefill share of busy time).
        capacity_req_per_s: what one replica sustains under the SLO, req/s (for reports).
        idle_fraction: idle board power / TDP (0..1; fleetplan.datasets.calibration.idle_fraction gives the
            shipped figure of a GPU type); required when ``tdp_w`` is given (the pool gets an energy line).
    """

    role: str
    site: str
    gpu: str
    tp: int
    replicas: int
    price: GpuPrice
    tdp_w: float | None = None
    utilization: float = 0.0
    input_share: float = 0.0
    capacity_req_per_s: float = 0.0
    idle_fraction: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.replicas, int) or self.replicas < 0:
            raise InputError(f"pool {self.role}@{self.site}: replicas must be a whole number >= 0",
                             field="replicas", value=self.replicas)
        check_range(self.utilization, field="utilization", low=0.0, high=1.0)
        check_range(self.input_share, field="input_share", low=0.0, high=1.0)
        if self.tdp_w and self.idle_fraction is None:
            raise InputError(f"pool {self.role}@{self.site}: a TDP is given but no idle_fraction; give the idle "
                             f"board power share of TDP of {self.gpu} (0..1)", field="idle_fraction")
        if self.idle_fraction is not None:
            check_range(self.idle_fraction, field="idle_fraction", low=0.0, high=1.0)

    @property
    def gpus(self) -> int:
        return self.tp * self.replicas

    @property
    def idle(self) -> float:
        """Idle board power / TDP (0 when the pool has no TDP, hence no energy line)."""
        return 0.0 if self.idle_fraction is None else self.idle_fraction


@dataclass(frozen=True)
class Flow:
    """Bytes that cross a network boundary every day.

    Attributes:
        kind: 'kv' (KV cache), 'prompt' (request text), 'response' (response text).
        src, dst: site names ('users' for the internet side).
        route_class: egress route class.
        gb_per_day: GB (1e9 bytes) per day.
        table: the egress price table charged (the sender's cloud).
        input_share: 1 for prefill-side traffic (KV, prompts), 0 for responses.
    """

    kind: str
    src: str
    dst: str
    route_class: str
    gb_per_day: float
    table: EgressTable
    input_share: float = 0.0


def table_key(t: EgressTable) -> tuple[str, str, str]:
    """(cloud, route class, scope): traffic in one table is added up per month."""
    return (t.cloud, t.route_class, t.scope)


def band_label(lo: float, hi: float | None) -> str:
    """Label of a monthly egress volume band [lo, hi) in GB, e.g. '100-10240 GB/month' ('+' when open-ended)."""
    return f"{lo:g}-{hi:g} GB/month" if hi is not None else f"{lo:g}+ GB/month"


def gpu_items(option: str, pools: Iterable[GpuPool]) -> list[LineItem]:
    """One GPU-hours line per pool: GPUs × 24 h per day × the price's USD per GPU-hour."""
    out = []
    for p in pools:
        out.append(LineItem(option, "gpu", f"{p.role} GPUs: {p.replicas} × {p.tp} {p.gpu}", p.gpus * HOURS_PER_DAY,
                            "GPU-hour", float(p.price.usd_per_gpu_hour), p.price.source or "catalog", site=p.site,
                            gpu=p.gpu, pricing_model=p.price.pricing_model, input_share=p.input_share))
    return out


def egress_items(option: str, flows: Sequence[Flow]) -> list[LineItem]:
    """Egress lines: flows grouped per table, priced band by band on the monthly volume (module docstring).

    Raises InputError (from :func:`egress_cost_usd`) when a monthly volume is above the last priced band.
    """
    groups: dict[tuple[str, str, str], list[Flow]] = {}
    for f in flows:
        groups.setdefault(table_key(f.table), []).append(f)
    out = []
    for key, fl in groups.items():
        table = fl[0].table
        daily = sum(f.gb_per_day for f in fl)
        monthly = daily * DAYS_PER_MONTH
        egress_cost_usd(monthly, table)  # raises with a clear message when the volume is beyond the priced bands
        share = sum(f.gb_per_day * f.input_share for f in fl) / daily if daily > 0 else 0.0
        kinds = "+".join(sorted({f.kind for f in fl}))
        # Where the traffic goes, then which table prices it: a table's scope may name another region (the data's
        # only internet table of a cloud stands for all its regions), so the scope alone would misplace the flow.
        route = "; ".join(sorted({f"{f.src} to {'internet' if f.dst == 'users' else f.dst}" for f in fl}))
        for t in table.tiers:
            hi = monthly if t.to_gb is None else min(monthly, t.to_gb)
            band = hi - t.from_gb
            if band <= 0 and not (t.from_gb == 0 and monthly == 0):
                continue
            out.append(LineItem(option, "egress", f"{kinds} egress {route}, priced by the {key[0]} {key[1]} "
                                f"table '{key[2]}'",
                                max(band, 0.0) / DAYS_PER_MONTH, "GB", t.usd_per_gb, table.source or "egress table",
                                site=fl[0].src, route_class=key[1], tier=band_label(t.from_gb, t.to_gb),
                                input_share=share))
    return out


def energy_items(option: str, pools: Iterable[GpuPool], *, usd_per_kwh: float, pue: float, billed: bool,
                 source: str) -> list[LineItem]:
    """kWh per pool: GPUs × (idle + (TDP − idle) × utilization) × 24 h / 1000 × PUE; × USD per kWh.

    An estimate (see :mod:`fleetplan.costmodels.energy`). Pools without a TDP get no line.
    """
    out = []
    for p in pools:
        if not p.tdp_w:
            continue
        kwh = p.gpus * power_w(p.tdp_w, p.utilization, p.idle) * HOURS_PER_DAY / 1000.0 * pue
        out.append(LineItem(option, "energy", f"{p.role} GPU energy ({p.gpus} × {p.tdp_w:g} W TDP at "
                            f"{p.utilization:.0%}, PUE {pue:g})", kwh, "kWh", usd_per_kwh, source, site=p.site,
                            gpu=p.gpu, input_share=p.input_share, in_total=billed))
    return out


def build_ledger(option: str, pools: Sequence[GpuPool], flows: Sequence[Flow] = (), *, usd_per_kwh: float,
                 pue: float, energy_price_source: str = "user", requests_per_day: float = 0.0,
                 input_tokens_per_day: float = 0.0, output_tokens_per_day: float = 0.0, energy_billed: bool = False,
                 extra_items: Sequence[LineItem] = ()) -> Ledger:
    """A :class:`Ledger` from GPU pools, traffic flows and any extra lines.

    ``usd_per_kwh`` (USD/kWh, 0..10) and ``pue`` (1..5) price the energy lines; ``energy_price_source`` is shown as
    their source (the shipped figures: :func:`fleetplan.datasets.ledger.load_assumptions`). Raises InputError for
    bad values.
    """
    kwh_price = check_range(usd_per_kwh, field="usd_per_kwh", low=0, high=10, unit="USD/kWh")
    pue_v = check_range(pue, field="pue", low=1, high=5)
    items = gpu_items(option, pools) + egress_items(option, flows) + list(extra_items) + energy_items(
        option, pools, usd_per_kwh=kwh_price, pue=pue_v, billed=energy_billed, source=energy_price_source)
    return Ledger(option, tuple(items), requests_per_day, input_tokens_per_day, output_tokens_per_day)


# ---- plans ----------------------------------------------------------------------------------------------------

__all__ = [
    "CATEGORIES", "DAYS_PER_MONTH", "HOURS_PER_DAY", "SECONDS_PER_DAY", "Assumption", "Flow", "GpuPool", "Ledger",
    "LineItem", "band_label", "build_ledger", "egress_items", "energy_items", "gpu_items",
    "table_key",
]
