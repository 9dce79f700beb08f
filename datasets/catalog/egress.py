"""The egress price catalog (``datasets/data/pricing/egress.csv``): per cloud, route class and scope, the monthly
volume tiers as :class:`~fleetplan.costmodels.prices.EgressTable` records.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from fleetplan.costmodels.prices import (
    CATEGORY_TO_ROUTE_CLASS,
    GIB_PER_GB,
    ROUTE_CLASSES,
    EgressTable,
    EgressTier,
)
from fleetplan.datasets.catalog.rows import Rows, cell_number, read_user_rows, require_columns, shipped_rows
from fleetplan.errors import InputError

EGRESS_COLUMNS = ("provider", "category", "scope", "tier_from_gb", "tier_to_gb", "usd_per_unit_low",
                  "usd_per_unit_high", "unit")


def _band(row: dict[str, str], rows: Rows, i: int, bound: str) -> tuple[EgressTier, bool, bool]:
    """(the volume band of row ``i`` in GB and USD/GB at its ``bound`` ('high' or 'low') price, whether its unit
    says 'each direction', whether its low and high prices differ). GiB bounds and $/GiB prices are converted to
    GB. Raises InputError naming the row and field."""
    unit = row["unit"].strip()
    u = unit.lower()
    if not u.startswith(("usd/gb", "usd/gib")):
        raise InputError(f"unit {unit!r} must be USD/GB or USD/GiB (optionally 'each direction')",
                         source=rows.source, row=i, field="unit", value=unit)
    gib = u.startswith("usd/gib")
    low = cell_number(row, "usd_per_unit_low", rows, i, required=True, low=0, high=5, unit="USD",
                      fix="give the price per GB (e.g. 0.09)")
    high = cell_number(row, "usd_per_unit_high", rows, i, required=False, low=0, high=5, unit="USD")
    if high is None:
        high = low
    if high < low:
        raise InputError(f"high {high:g} is below low {low:g}; swap them", source=rows.source, row=i,
                         field="usd_per_unit_high", value=high)
    rate = high if bound == "high" else low
    frm = cell_number(row, "tier_from_gb", rows, i, required=False, low=0, high=1e12, unit="GB") or 0.0
    to = cell_number(row, "tier_to_gb", rows, i, required=False, low=0, high=1e12, unit="GB")
    scale = GIB_PER_GB if gib else 1.0  # GiB bounds -> GB; $/GiB -> $/GB
    return EgressTier(frm * scale, None if to is None else to * scale, rate / scale), "each direction" in u, high != low


def _continue_table(tables: list[EgressTable], cloud: str, route: str, scope: str, tiers: tuple[EgressTier, ...],
                    historical: bool, rb: str, source: str, rows: Rows, i0: int, category: str) -> None:
    """Merge a group whose first band starts above 0 into the previous tiered table of its cloud and route class
    in ``tables`` (where the pieces overlap, the later one starts where the earlier one ends). Raises InputError
    naming the group's first row when there is no such table."""
    prev = next((t for t in reversed(tables) if t.cloud == cloud and t.route_class == route
                 and t.tiers[-1].to_gb is not None), None)
    if prev is None:
        raise InputError(f"the first band of {cloud} {category} ({scope}) starts at {tiers[0].from_gb:g} "
                         "GB; add the band from 0", source=rows.source, row=i0, field="tier_from_gb",
                         value=tiers[0].from_gb)
    end = prev.tiers[-1].to_gb
    assert end is not None
    cont = [EgressTier(max(t.from_gb, end), t.to_gb, t.usd_per_gb) for t in tiers
            if t.to_gb is None or t.to_gb > end]
    merged = EgressTable(cloud, route, f"{prev.scope} + {scope}", prev.tiers + tuple(cont),
                         prev.usd_per_gb_per_direction, prev.historical or historical,
                         rb if rb != "single" else prev.range_bound, f"{prev.source} | {source}")
    tables[tables.index(prev)] = merged


def _add_group(tables: list[EgressTable], key: tuple[str, str, str], grp: list[tuple[int, dict[str, str]]],
               rows: Rows, bound: str) -> None:
    """Add the table of one (cloud, category, scope) group of rows to ``tables``, or continue an earlier one
    (:func:`_continue_table`); 'each direction' prices are paid by sender and receiver both. Raises InputError
    naming the row."""
    cloud, category, scope = key
    i0, first = grp[0]
    route = CATEGORY_TO_ROUTE_CLASS.get(category, category if category in ROUTE_CLASSES else "")
    if not route:
        raise InputError(f"category {category!r} is not one of {', '.join(CATEGORY_TO_ROUTE_CLASS)} (or "
                         f"{', '.join(ROUTE_CLASSES)})", source=rows.source, row=i0, field="category",
                         value=category)
    bands = []
    ranged = False
    per_direction = False
    for i, row in grp:
        band, each_direction, band_ranged = _band(row, rows, i, bound)
        per_direction = per_direction or each_direction
        ranged = ranged or band_ranged
        bands.append(band)
    bands.sort(key=lambda t: t.from_gb)
    both_sides = 2 if per_direction else 1  # 'each direction': sender and receiver both pay
    tiers = tuple(EgressTier(t.from_gb, t.to_gb, t.usd_per_gb * both_sides) for t in bands)
    source = first.get("source", "")
    historical = "historical" in first.get("source_type", "").lower() or "old" in scope.lower().split()
    rb = bound if ranged else "single"
    if tiers[0].from_gb > 0:
        _continue_table(tables, cloud, route, scope, tiers, historical, rb, source, rows, i0, category)
        return
    try:
        tables.append(EgressTable(cloud, route, scope, tiers,
                                  usd_per_gb_per_direction=tiers[0].usd_per_gb / 2 if per_direction else None,
                                  historical=historical, range_bound=rb, source=source))
    except InputError as exc:
        raise InputError(str(exc), source=rows.source, row=i0, field=exc.field, value=exc.value) from None


def _egress_from(rows: Rows, bound: str) -> list[EgressTable]:
    """Group rows by (provider, category, scope) into tables, in file order.

    A group whose first band starts above 0 continues the previous tiered group of the same cloud and class
    (GCP internet: 'to North America' 0-1,024 GiB, then 'any source/destination' from 1,024 GB; Azure internet:
    0-100 GB free, then the range above 100 GB); where the pieces overlap the later one starts where the
    earlier one ends.
    """
    require_columns(rows, EGRESS_COLUMNS, "egress prices")
    if bound not in ("high", "low"):
        raise InputError(f"range bound {bound!r} must be 'high' (conservative, the default) or 'low'",
                         field="bound", value=bound)
    groups: dict[tuple[str, str, str], list[tuple[int, dict[str, str]]]] = {}
    for i, row in rows.rows:
        groups.setdefault((row["provider"].lower(), row["category"], row["scope"]), []).append((i, row))
    tables: list[EgressTable] = []
    for key, grp in groups.items():
        _add_group(tables, key, grp, rows, bound)
    return tables


@lru_cache(maxsize=2)
def _shipped_egress(bound: str) -> tuple[EgressTable, ...]:
    return tuple(_egress_from(shipped_rows("pricing", "egress.csv"), bound))


def load_egress(extra: str | Path | None = None, *, bound: str = "high") -> list[EgressTable]:
    """Egress price tables from pricing/egress.csv, one per (cloud, route class, scope), rates in USD per GB.

    Conversions: USD/GiB rates ÷ 1.073741824 and GiB band bounds × 1.073741824 (GCP quotes GiB). Rows quoted as a
    range use the ``high`` end by default (conservative: a plan's cost is not understated); ``bound='low'``
    takes the other end. AWS cross-AZ "USD/GB each direction" (0.01) is charged on both sides: the table's rate
    is per GB moved (0.02) and ``usd_per_gb_per_direction`` keeps 0.01. Rows the source marks historical are
    kept but never chosen by default (see :func:`fleetplan.costmodels.prices.select_egress_table`).

    Args:
        extra: a user CSV/YAML with the egress.csv header; its tables come first (so they are the defaults) and
            replace shipped tables of the same cloud, category and scope.
        bound: 'high' or 'low' end of quoted ranges.

    Raises:
        InputError: a missing column, a bad cell, bands that are not contiguous from 0.
    """
    shipped = list(_shipped_egress(bound))
    if extra is None:
        return shipped
    user = _egress_from(read_user_rows(extra), bound)
    keys = {(t.cloud, t.route_class, t.scope) for t in user}
    return user + [t for t in shipped if (t.cloud, t.route_class, t.scope) not in keys]
