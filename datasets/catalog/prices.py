"""The GPU price catalog (``datasets/data/pricing/``: on-demand and spot per cloud, region and zone, by snapshot
date, and user rows): :class:`~fleetplan.costmodels.prices.GpuPrice` records, the rows skipped and why, and the
lookup of one price.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from fleetplan.costmodels.prices import (
    GpuPrice,
)
from fleetplan.costmodels.prices import find_price as _find_price
from fleetplan.datasets.catalog.gpus import load_gpu_specs
from fleetplan.datasets.catalog.names import resolve_name
from fleetplan.datasets.catalog.rows import (
    Rows,
    cell_number,
    int_cell,
    read_user_rows,
    require_columns,
    shipped_rows,
)
from fleetplan.errors import InputError, UnknownNameError

#: Columns :func:`price_file_row` writes: the gpu_prices.csv columns the reader uses, plus zone.
PRICE_FILE_COLUMNS = ("provider", "instance", "region", "zone", "gpu", "gpu_count", "usd_per_hour",
                      "usd_per_gpu_hour", "pricing_model", "as_of", "source")


def price_file_row(p: GpuPrice) -> dict[str, Any]:
    """One price as a gpu_prices.csv row (:data:`PRICE_FILE_COLUMNS`): read back by :func:`load_gpu_prices`
    (``extra``), it gives the same price, as the user's row (``user`` True, its snapshot named after the file)."""
    return {
        "provider": p.cloud, "instance": p.instance, "region": p.region, "zone": p.zone, "gpu": p.gpu,
        "gpu_count": p.gpus_per_node, "usd_per_hour": p.node_usd_per_hour, "usd_per_gpu_hour": p.usd_per_gpu_hour,
        "pricing_model": p.pricing_model, "as_of": p.as_of, "source": p.source,
    }


PRICE_COLUMNS = ("provider", "instance", "region", "gpu", "gpu_count", "usd_per_hour", "pricing_model")


_SKY = ("pricing", "skypilot_catalog")


@dataclass(frozen=True)
class SkippedPriceRow:
    """A shipped price row left out of :func:`load_gpu_prices`, and why (its GPU is not in the catalog, ...)."""

    source: str
    row: int
    instance: str
    price_gpu: str
    reason: str


@lru_cache(maxsize=1)
def _gpu_name_map() -> tuple[tuple[str, str, str, float | None, str, str], ...]:
    rows = shipped_rows("pricing", "gpu_name_map.csv")
    return tuple((r["source"], r["instance_prefix"], r["price_gpu"],
                  float(r["gpu_memory_gb"]) if r["gpu_memory_gb"] else None, r["gpu"], r["note"])
                 for _, r in rows.rows)


def price_gpu_to_catalog(source: str, instance: str, price_gpu: str, memory_gb: float | None = None
                         ) -> tuple[str | None, str]:
    """Map a price file's GPU name to a catalog GPU name: (name or None, reason).

    First the rules of datasets/data/pricing/gpu_name_map.csv (by source 'gpu_prices'/'aws'/'gcp'/'azure',
    instance prefix, price-file name and memory; a blank ``gpu`` there means 'not in the catalog'), then the alias
    table and case-insensitive names (:func:`resolve_name`). None when the GPU is not in the catalog.
    """
    for src, prefix, pname, mem, gpu, note in _gpu_name_map():
        if src != source or pname.lower() != price_gpu.lower() or not instance.startswith(prefix):
            continue
        if mem is not None and (memory_gb is None or abs(mem - memory_gb) > 0.5):
            continue
        return (gpu or None), note or ("mapped" if gpu else "not in the GPU catalog")
    if not price_gpu:
        return None, "no GPU name in the row"
    try:
        return resolve_name("gpu", price_gpu, load_gpu_specs()), "alias"
    except UnknownNameError:
        return None, "not in the GPU catalog"


def _pricing_model(text: str, rows: Rows, i: int) -> str:
    t = text.strip().lower()
    if "capacity block" in t or t.startswith("capacity-block"):
        return "capacity-block"
    for m in ("on-demand-equivalent", "on-demand", "spot", "reserved", "negotiated", "committed-1y", "committed-3y",
              "owned"):
        if t.startswith(m):
            return m
    raise InputError(f"pricing model {text!r} not understood; start it with on-demand, spot, reserved, "
                     "negotiated, committed-1y, committed-3y, owned or capacity-block", source=rows.source, row=i,
                     field="pricing_model", value=text)


def _regions(text: str) -> list[str]:
    """'us-east-1 / us-east-2' -> both; '(not stated in excerpt)' -> ['']."""
    if not text or text.startswith("("):
        return [""]
    return [r.strip() for r in text.split("/") if r.strip()]


def _short(source: str) -> str:
    """A source URL shortened to its site and first path part ('raw.githubusercontent.com/datareceipts')."""
    m = re.match(r"(?:https?://)?([^/\s]+)(/[^/\s]+)?", source)
    return (m.group(1) + (m.group(2) or "")) if m else source[:40]


@lru_cache(maxsize=1)
def _instance_gpu_counts() -> dict[tuple[str, str], int]:
    """(cloud, instance lower-case) -> GPUs, from pricing/instance_shapes.csv and pricing/gcp_host_shapes.csv."""
    out = {(r["cloud"].lower(), r["instance"].lower()): int(r["gpu_count"])
           for _, r in shipped_rows("pricing", "instance_shapes.csv").rows}
    for _, r in shipped_rows("pricing", "gcp_host_shapes.csv").rows:
        out[("gcp", r["instance"].lower())] = int(r["accelerator_count"])
    return out


def _shape_flags(cloud: str, instance: str, count: int) -> tuple[str, ...]:
    """A flag when a row's GPU count contradicts the instance type's (instance_shapes.csv), else ()."""
    known = _instance_gpu_counts().get((cloud.lower(), instance.lower()))
    if known is not None and known != count:
        return (f"{cloud} {instance} has {known} GPUs (pricing/instance_shapes.csv), but the row says {count}; "
                "its per-GPU price cannot be trusted",)
    return ()


@lru_cache(maxsize=1)
def _price_rules() -> dict[tuple[str, str, str, str], str]:
    """(cloud, source file, instance lower-case, pricing model) -> why those rows are never chosen
    (pricing/price_rules.csv)."""
    return {(r["cloud"].lower(), r["file"], r["instance"].lower(), r["pricing_model"]): r["reason"]
            for _, r in shipped_rows("pricing", "price_rules.csv").rows}


def _sky_flags(cloud: str, file: str, instance: str, count: int, model: str) -> tuple[str, ...]:
    rule = _price_rules().get((cloud, file, instance.lower(), model))
    return _shape_flags(cloud, instance, count) + ((f"price_rules.csv: {rule}",) if rule else ())


@lru_cache(maxsize=1)
def _sky_snapshots() -> dict[str, tuple[str, str]]:
    """SkyPilot extract file -> (as_of or '', snapshot label), from pricing/skypilot_catalog/snapshots.csv."""
    return {r["file"]: (r["as_of"], f"SkyPilot {r['cloud']} catalog @ {r['commit'][:12]}")
            for _, r in shipped_rows(*_SKY, "snapshots.csv").rows}


def _prices_from_table(rows: Rows, *, user: bool, skipped: list[SkippedPriceRow]) -> list[GpuPrice]:
    """Rows with the gpu_prices.csv header (plus optional zone column)."""
    require_columns(rows, PRICE_COLUMNS, "GPU prices")
    out = []
    for i, row in rows.rows:
        cloud = row["provider"].lower()
        if not cloud:
            raise InputError("the cloud/provider name is missing", source=rows.source, row=i, field="provider")
        mem = cell_number(row, "gpu_memory_gb", rows, i, required=False, low=1, high=2000, unit="GB")
        count = int_cell(row, "gpu_count", rows, i, required=True, low=1, high=64,
                          fix="give the number of GPUs in the instance")
        node = cell_number(row, "usd_per_hour", rows, i, required=True, low=0, high=1000, unit="USD/h",
                            fix="give the instance price in USD per hour")
        per_gpu = cell_number(row, "usd_per_gpu_hour", rows, i, required=False, low=0, high=1000, unit="USD/h")
        model = _pricing_model(row["pricing_model"], rows, i)
        if user:
            gpu = resolve_name("gpu", row["gpu"], load_gpu_specs()) if row["gpu"] else None
            if gpu is None:
                raise InputError("the GPU name is missing", source=rows.source, row=i, field="gpu")
        else:
            gpu, reason = price_gpu_to_catalog("gpu_prices", row["instance"], row["gpu"], mem)
            if gpu is None:
                skipped.append(SkippedPriceRow(rows.source, i, row["instance"], row["gpu"], reason))
                continue
        as_of = row.get("as_of", "")
        source = row.get("source", "") or rows.source
        flags = () if user else _shape_flags(cloud, row["instance"], count)
        for region in _regions(row["region"]):
            try:
                out.append(GpuPrice(cloud=cloud, region=region, zone=row.get("zone", ""), gpu=gpu,
                                    instance=row["instance"], gpus_per_node=count, node_usd_per_hour=node,
                                    usd_per_gpu_hour=per_gpu, pricing_model=model, source=source, as_of=as_of,
                                    snapshot=f"{'your file ' + rows.source if user else _short(source)} @ "
                                             f"{as_of or 'undated'}",
                                    user=user, flags=flags))
            except InputError as exc:
                raise InputError(str(exc), source=rows.source, row=i, field=exc.field, value=exc.value) from None
    return out


def _sky_price(row: dict[str, str], name: str, rows: Rows, i: int) -> float | None:
    return cell_number(row, name, rows, i, required=False, low=0, high=1000, unit="USD/h")


def _aws_azure_prices(file: str, cloud: str, skipped: list[SkippedPriceRow]) -> list[GpuPrice]:
    """SkyPilot AWS v7 (per zone) and Azure v6 (per region) rows: Price = on-demand, SpotPrice = spot, $/h."""
    rows = shipped_rows(*_SKY, file)
    src = f"SkyPilot catalog extract {file} (datasets/data/pricing/skypilot_catalog/README.md)"
    out = []
    for i, row in rows.rows:
        gpu, reason = price_gpu_to_catalog(cloud, row["InstanceType"], row["AcceleratorName"])
        if gpu is None:
            skipped.append(SkippedPriceRow(rows.source, i, row["InstanceType"], row["AcceleratorName"], reason))
            continue
        count = int_cell(row, "AcceleratorCount", rows, i, required=True, low=1, high=64, fix="")
        assert count is not None
        as_of, snap = _sky_snapshots()[file]
        for col, model in (("Price", "on-demand"), ("SpotPrice", "spot")):
            price = _sky_price(row, col, rows, i)
            if price is None:  # blank = not offered under that model there
                continue
            out.append(GpuPrice(cloud=cloud, region=row["Region"], zone=row.get("AvailabilityZone", ""), gpu=gpu,
                                instance=row["InstanceType"], gpus_per_node=count, node_usd_per_hour=price,
                                pricing_model=model, source=src, as_of=as_of, snapshot=snap,
                                flags=_sky_flags(cloud, file, row["InstanceType"], count, model)))
    return out


def _gcp_prices(skipped: list[SkippedPriceRow]) -> list[GpuPrice]:
    """GCP node prices = host VM row + GPU row of the same zone, accelerator and count (SkyPilot adds the two).

    The host shapes (a2-highgpu-Ng: N x A100 40 GB, a2-megagpu-16g: 16 x A100 40 GB, a2-ultragpu-Ng:
    N x A100 80 GB, a3-highgpu-Ng: N x H100 80 GB) come from datasets/data/pricing/gcp_host_shapes.csv (Google's
    accelerator-optimized machine docs). GPU rows with no host row in the extract (H100 x4/x8, H100-MEGA, H200,
    B200, L4) and host rows with no GPU row give no node price: a GPU-only price would understate the cost.
    """
    shapes = {r["instance"]: (r["accelerator"], int(r["accelerator_count"]))
              for _, r in shipped_rows("pricing", "gcp_host_shapes.csv").rows}
    host_file = "gcp_v7_gpu_host_vm_rows_extract.csv"
    hosts = shipped_rows(*_SKY, host_file)
    as_of, snap = _sky_snapshots()[host_file]
    gpus = shipped_rows(*_SKY, "gcp_v7_accelerator_rows_extract.csv")
    gpu_rows: dict[tuple[str, str, str, int], tuple[int, dict[str, str]]] = {}
    for i, row in gpus.rows:
        count = int_cell(row, "AcceleratorCount", gpus, i, required=True, low=1, high=64, fix="")
        gpu_rows[(row["Region"], row["AvailabilityZone"], row["AcceleratorName"], count or 0)] = (i, row)
    used = set()
    src = ("SkyPilot catalog extracts gcp_v7_gpu_host_vm_rows_extract.csv + gcp_v7_accelerator_rows_extract.csv "
           "(host VM + GPUs)")
    out = []
    for i, host in hosts.rows:
        inst = host["InstanceType"]
        if inst not in shapes:
            skipped.append(SkippedPriceRow(hosts.source, i, inst, "", "host shape not in gcp_host_shapes.csv"))
            continue
        accel, count = shapes[inst]
        key = (host["Region"], host["AvailabilityZone"], accel, count)
        if key not in gpu_rows:
            skipped.append(SkippedPriceRow(hosts.source, i, inst, accel, "no GPU price row for this zone"))
            continue
        used.add(key)
        j, grow = gpu_rows[key]
        gpu, reason = price_gpu_to_catalog("gcp", inst, accel)
        if gpu is None:
            skipped.append(SkippedPriceRow(hosts.source, i, inst, accel, reason))
            continue
        for col, model in (("Price", "on-demand"), ("SpotPrice", "spot")):
            h = _sky_price(host, col, hosts, i)
            g = _sky_price(grow, col, gpus, j)
            if h is None or g is None:
                continue
            out.append(GpuPrice(cloud="gcp", region=host["Region"], zone=host["AvailabilityZone"], gpu=gpu,
                                instance=inst, gpus_per_node=count, node_usd_per_hour=h + g, pricing_model=model,
                                source=src, as_of=as_of, snapshot=snap,
                                flags=_sky_flags("gcp", host_file, inst, count, model)))
    for key, (j, _) in gpu_rows.items():
        if key not in used:
            skipped.append(SkippedPriceRow(gpus.source, j, "", f"{key[2]} x{key[3]}",
                                           "GPU-only row with no host VM row in the extract"))
    return out


@lru_cache(maxsize=1)
def _shipped_prices() -> tuple[tuple[GpuPrice, ...], tuple[SkippedPriceRow, ...]]:
    skipped: list[SkippedPriceRow] = []
    prices = _prices_from_table(shipped_rows("pricing", "gpu_prices.csv"), user=False, skipped=skipped)
    prices += _aws_azure_prices("aws_v7_accelerator_rows_extract.csv", "aws", skipped)
    prices += _aws_azure_prices("azure_v6_gpu_rows_extract.csv", "azure", skipped)
    prices += _gcp_prices(skipped)
    return tuple(prices), tuple(skipped)


def _price_key(p: GpuPrice) -> tuple[str, str, str, str, str]:
    return (p.cloud, p.region, p.zone, p.instance.lower(), p.pricing_model)


def load_gpu_prices(extra: str | Path | None = None) -> list[GpuPrice]:
    """Every GPU price the shipped files give, as :class:`GpuPrice` rows (one per site, instance, pricing model).

    Sources: pricing/gpu_prices.csv (hand-collected, cited per row; 'us-east-1 / us-east-2' gives one row per
    region; 'EC2 Capacity Block' rows get pricing_model 'capacity-block'); the SkyPilot catalog extracts: AWS v7
    per zone (Price -> 'on-demand', SpotPrice -> 'spot'; blank = not offered), Azure v6 per region (zone ''),
    GCP v7 host VM + GPU rows summed (see ``_gcp_prices``). Price-file GPU names are mapped to catalog names by
    :func:`price_gpu_to_catalog`; rows whose GPU is not in the catalog are left out (see
    :func:`skipped_price_rows`).

    Args:
        extra: a user CSV/YAML file with the gpu_prices.csv header (required: provider, instance, region, gpu,
            gpu_count, usd_per_hour, pricing_model; optional zone, usd_per_gpu_hour, gpu_memory_gb, source).
            Its GPU names must resolve (else "did you mean"); a user row replaces shipped rows with the same
            cloud, region, zone, instance and pricing model.

    Raises:
        InputError / UnknownNameError: a bad user row, naming file, row and field.
    """
    shipped, _ = _shipped_prices()
    if extra is None:
        return list(shipped)
    user = _prices_from_table(read_user_rows(extra), user=True, skipped=[])
    keys = {_price_key(p) for p in user}
    return [p for p in shipped if _price_key(p) not in keys] + user


def skipped_price_rows() -> list[SkippedPriceRow]:
    """Shipped price rows :func:`load_gpu_prices` leaves out, each with its reason."""
    return list(_shipped_prices()[1])


def find_price(gpu: str, cloud: str, region: str | None = None, pricing_model: str = "on-demand",
               prices: Iterable[GpuPrice] | None = None, *, zone: str | None = None,
               gpus_per_node: int | None = None, price_date: str | None = None) -> GpuPrice:
    """The price per GPU-hour for ``gpu`` at (cloud, region[, zone]) under ``pricing_model``: the user's rows
    first, else the newest consistent catalog snapshot, nodes of ``gpus_per_node`` GPUs first, then the cheapest.

    ``gpu`` is a GPU name or alias ('H100', 'A100-80GB'), resolved through the catalog; ``prices`` defaults to the
    shipped rows (:func:`load_gpu_prices`). The search: :func:`fleetplan.costmodels.prices.find_price`.

    Raises:
        UnknownNameError: unknown GPU or cloud.
        InputError: no row matches; the message lists the regions / pricing models that do have a price.
    """
    rows = list(load_gpu_prices() if prices is None else prices)
    gpu_name = resolve_name("gpu", gpu, set(load_gpu_specs()) | {p.gpu for p in rows})
    return _find_price(gpu_name, cloud, region, pricing_model, rows, zone=zone, gpus_per_node=gpus_per_node,
                       price_date=price_date)
