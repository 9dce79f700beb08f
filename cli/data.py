"""``fleetplan data``: list the shipped catalogs (GPUs, models, prices, egress, traces) with any user rows.

Thin layer: each subcommand calls a loader of :mod:`fleetplan.datasets.catalog` (or ``datasets.traces``), turns
the records into rows whose keys carry their units, and renders them as a rich table (default), JSON or CSV.
Bad input raises a fleetplan error, which the ``fleetplan`` group prints as one line with exit code 2.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import click

from fleetplan.cli.options import format_option, price_date_option
from fleetplan.cli.output import json_safe, rows_csv, stdout_console, table
from fleetplan.costmodels.prices import (
    PRICING_MODELS,
    SNAPSHOT_DISAGREEMENT_FACTOR,
    GpuPrice,
    PriceProblem,
    check_price_date,
    price_problems,
    usable_prices,
)
from fleetplan.datasets.catalog.egress import load_egress
from fleetplan.datasets.catalog.gpus import GPU_FILE_COLUMNS, gpu_file_row, load_gpu_specs
from fleetplan.datasets.catalog.models import MODEL_FILE_COLUMNS, load_models, model_file_row, model_from_hf_config
from fleetplan.datasets.catalog.names import resolve_name
from fleetplan.datasets.catalog.prices import PRICE_FILE_COLUMNS, load_gpu_prices, price_file_row
from fleetplan.datasets.traces import list_traces
from fleetplan.errors import InputError, UnknownNameError

GB = 1e9


def _extra_option(what: str) -> Callable:
    def deco(f: Callable) -> Callable:
        return click.option("--extra", type=click.Path(dir_okay=False), default=None,
                            help=f"Your own CSV or YAML file of {what} (same columns as the shipped file); its rows "
                                 "override shipped rows of the same name.")(f)
    return deco


def _cell(v: Any, number_format: str | None) -> str:
    if v is None:
        return ""
    if number_format is not None and isinstance(v, int | float):
        return format(v, number_format)
    return str(v)


def _render(rows: Sequence[dict[str, Any]], fmt: str, *, title: str, table_columns: Sequence[str] | None = None,
            numbers: dict[str, str] | None = None, file_rows: Sequence[dict[str, Any]] | None = None,
            file_columns: Sequence[str] = ()) -> None:
    """Print ``rows`` as a rich table (``table_columns``, default all; ``numbers``: {column: format spec}, right
    justified), JSON (a list of objects) or CSV (header + rows) on stdout. With ``file_rows`` (rows in the catalog
    file's columns ``file_columns``), CSV prints those instead, so the output can be edited and read back with
    --extra. NaN and infinities are printed as empty (null in JSON)."""
    rows = [json_safe(r) for r in rows]
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    if fmt == "csv":
        if file_rows is not None:
            rows, table_columns = [json_safe(r) for r in file_rows], file_columns
        click.echo(rows_csv(rows, list(table_columns or [])), nl=False)
        return
    numbers = numbers or {}
    cols = list(table_columns or (rows[0] if rows else []))
    t = table(title, cols, right=lambda c: c in numbers, show_lines=False)
    for r in rows:
        t.add_row(*(_cell(r.get(c), numbers.get(c)) for c in cols))
    stdout_console(200).print(t)


@click.group("data")
def data() -> None:
    """List the shipped data catalogs (and your own rows added with --extra)."""


@data.command("gpus")
@format_option()
@_extra_option("GPUs")
def gpus(fmt: str, extra: str | None) -> None:
    """GPU specs (memory, HBM bandwidth, dense BF16/FP8 TFLOPS, links, TDP); 'eligible' says whether the
    analytic latency model can use the GPU (rows missing a number it needs are listed, never filled in)."""

    rows = []
    specs = load_gpu_specs(extra)
    for name, s in specs.items():
        g = s.gpu
        rows.append({
            "name": name, "vendor": s.vendor, "form_factor": s.form_factor,
            "memory_gb": None if s.memory_bytes is None else s.memory_bytes / GB,
            "hbm_gb_per_s": g and g.hbm_bandwidth_bytes_per_s / GB,
            "bf16_tflops": g and g.bf16_flops_per_s / 1e12,
            "fp8_tflops": g and g.fp8_flops_per_s and g.fp8_flops_per_s / 1e12,
            "interconnect_gb_per_s": g and g.interconnect_bytes_per_s and g.interconnect_bytes_per_s / GB,
            "pcie_gb_per_s": g and g.pcie_bytes_per_s and g.pcie_bytes_per_s / GB,
            "tdp_w": g and g.tdp_w,
            "eligible": s.eligible,
            "missing": ", ".join(s.missing),
            "source": s.source,
        })
    _render(rows, fmt, title="GPUs (GB = 1e9 bytes; dense TFLOPS; links bidirectional)",
            table_columns=[c for c in (rows[0] if rows else {}) if c not in ("source", "form_factor")],
            numbers={"memory_gb": "g", "hbm_gb_per_s": "g", "bf16_tflops": "g", "fp8_tflops": "g",
                     "interconnect_gb_per_s": "g", "pcie_gb_per_s": "g", "tdp_w": "g"},
            file_rows=[gpu_file_row(s) for s in specs.values()], file_columns=GPU_FILE_COLUMNS)


@data.command("models")
@format_option()
@_extra_option("models")
@click.option("--from-config", "from_config", type=click.Path(dir_okay=False), default=None,
              help="Show only the architecture of this Hugging Face config.json (parameters computed from it).")
def models(fmt: str, extra: str | None, from_config: str | None) -> None:
    """Model architectures with their weight bytes (bf16, fp8, int4) and KV-cache bytes per token, as
    fleetplan.costmodels computes them (Model.weight_bytes, Model.kv_bytes_per_token)."""

    rows = []
    found = ({(m := model_from_hf_config(from_config)).name: m} if from_config is not None
             else load_models(extra))
    for name, m in found.items():
        rows.append({
            "name": name, "arch": m.arch_type, "attention": m.attention_type, "layers": m.num_layers,
            "kv_heads": m.num_kv_heads, "head_dim": m.head_dim, "params_total": int(m.params_total),
            "params_active": int(m.params_active),
            "weight_bytes_bf16": int(m.weight_bytes("bf16")), "weight_bytes_fp8": int(m.weight_bytes("fp8")),
            "weight_bytes_int4": int(m.weight_bytes("int4")),
            "kv_bytes_per_token_bf16": int(m.kv_bytes_per_token("bf16")),
            "kv_bytes_per_token_fp8": int(m.kv_bytes_per_token("fp8")),
            "sliding_window_tokens": m.sliding_window_tokens, "max_context_tokens": m.max_context_tokens,
        })
    ints = {c: ",d" for c in ("params_total", "params_active", "weight_bytes_bf16", "weight_bytes_fp8",
                              "weight_bytes_int4", "kv_bytes_per_token_bf16", "kv_bytes_per_token_fp8")}
    _render(rows, fmt, title="Models (bytes; KV = 2 x layers x KV heads x head dim x bytes, MLA: latent)",
            table_columns=[c for c in (rows[0] if rows else {}) if c not in ("max_context_tokens",)],
            numbers=ints | {"layers": "d", "kv_heads": "d", "head_dim": "d", "sliding_window_tokens": "d"},
            file_rows=[model_file_row(m) for m in found.values()], file_columns=MODEL_FILE_COLUMNS)


def _filter_prices(rows: list[GpuPrice], *, gpu: str | None, cloud: str | None, region: str | None,
                   pricing_model: str | None) -> list[GpuPrice]:
    """The price rows that match every filter given (GPU by name or alias, cloud, region, pricing model); raises
    InputError for an unknown pricing model, GPU or cloud."""
    if pricing_model is not None and pricing_model.lower() not in PRICING_MODELS:
        raise InputError(f"unknown pricing model {pricing_model!r}; use one of {', '.join(PRICING_MODELS)}",
                         field="--pricing-model", value=pricing_model)
    out = rows
    if gpu is not None:
        gpu = resolve_name("gpu", gpu, set(load_gpu_specs()) | {p.gpu for p in rows})
        out = [p for p in out if p.gpu == gpu]
    if cloud is not None:
        clouds = {p.cloud for p in rows}
        if cloud.lower() not in clouds:
            raise UnknownNameError("cloud", cloud, clouds, field="--cloud")
        out = [p for p in out if p.cloud == cloud.lower()]
    if region is not None:
        out = [p for p in out if p.region == region]
    if pricing_model is not None:
        out = [p for p in out if p.pricing_model == pricing_model.lower()]
    return out


def _used(p: GpuPrice, usable: set[int], problems: dict[int, PriceProblem], price_date: str | None) -> str:
    """Whether the planner may choose the price row ``p`` ('yes'), or why not."""
    if id(p) in usable:
        return "yes (your row)" if p.user else "yes"
    if id(p) in problems:
        return f"no: {problems[id(p)].kind}"
    return "no: after --price-date" if price_date and p.as_of and p.as_of > price_date else "no: older snapshot"


def _price_row(p: GpuPrice, used: str, problem: PriceProblem | None) -> dict[str, Any]:
    """A price row as printed (USD rounded to 6 decimals), with its problem's message under --check."""
    return {"cloud": p.cloud, "region": p.region, "zone": p.zone, "gpu": p.gpu, "instance": p.instance,
            "gpus_per_node": p.gpus_per_node, "node_usd_per_hour": round(p.node_usd_per_hour, 6),
            "usd_per_gpu_hour": round(p.usd_per_gpu_hour or 0.0, 6), "pricing_model": p.pricing_model,
            "as_of": p.as_of or "undated", "used": used, "snapshot": p.snapshot, "source": p.source} | (
        {"problem": problem.message} if problem is not None else {})


#: The table columns of `data prices --check`.
_CHECK_COLUMNS = ["cloud", "zone", "instance", "pricing_model", "usd_per_gpu_hour", "as_of", "used", "problem"]


@data.command("prices")
@format_option()
@_extra_option("GPU prices")
@click.option("--gpu", default=None, help="Only this GPU (name or alias, e.g. H100, A100-80GB).")
@click.option("--cloud", default=None, help="Only this cloud (aws, gcp, azure).")
@click.option("--region", default=None, help="Only this region (e.g. us-east-1).")
@click.option("--pricing-model", default=None, help="Only this pricing model (on-demand, spot, capacity-block, ...).")
@price_date_option
@click.option("--check", is_flag=True, help="List only the rows that are never chosen, and why: spot above on-demand, "
              "a GPU count that contradicts the instance type, snapshots that disagree by more than "
              f"{SNAPSHOT_DISAGREEMENT_FACTOR:g}x, stale rows of a superseded snapshot, rules of price_rules.csv.")
def prices(fmt: str, extra: str | None, gpu: str | None, cloud: str | None, region: str | None,
           pricing_model: str | None, price_date: str | None, check: bool) -> None:
    """GPU prices per node and per GPU-hour (USD), one row per site, instance and pricing model, with the date the
    price held (as_of; blank = undated) and whether the planner may choose it ('used': yes, or why not). GCP node
    prices are host VM + GPUs. Your own rows (--extra) always win over the catalogs."""

    price_date = check_price_date(price_date, field="--price-date")
    all_rows = load_gpu_prices(extra)
    rows_in = _filter_prices(all_rows, gpu=gpu, cloud=cloud, region=region, pricing_model=pricing_model)
    problems = {id(q.row): q for q in price_problems(all_rows, price_date=price_date)}
    usable = {id(p) for p in usable_prices(all_rows, price_date=price_date)}
    if check:
        rows_in = [p for p in rows_in if id(p) in problems]
        if not rows_in:
            filtered = gpu or cloud or region or pricing_model
            click.echo("No inconsistent price rows" + (" among these filters." if filtered else "."))
            return
    if not rows_in:
        raise InputError("no price matches these filters; drop a filter to see what is available",
                         field="--region" if region else None)
    rows = [_price_row(p, _used(p, usable, problems, price_date), problems[id(p)] if check else None)
            for p in rows_in]
    shown = _CHECK_COLUMNS if check and fmt == "table" else [c for c in rows[0] if c not in ("source", "snapshot")]
    _render(rows, fmt, title="GPU price rows never chosen, and why" if check else "GPU prices (USD)",
            table_columns=shown, numbers={"gpus_per_node": "d", "node_usd_per_hour": ".4f", "usd_per_gpu_hour": ".4f"},
            file_rows=None if check else [price_file_row(p) for p in rows_in], file_columns=PRICE_FILE_COLUMNS)
    if check and fmt == "table":
        click.echo(f"{len(rows)} row(s) flagged; none of them is ever chosen (see PROVENANCE.md in "
                   "datasets/data/pricing for how each case was resolved).")


@data.command("egress")
@format_option()
@_extra_option("egress prices")
@click.option("--bound", type=click.Choice(["high", "low"]), default="high", show_default=True,
              help="Which end of a price quoted as a range to use (high is conservative).")
def egress(fmt: str, extra: str | None, bound: str) -> None:
    """Egress prices in USD per GB (1e9 bytes; GiB quotes converted) by cloud, route class and scope, one row per
    monthly volume band; per_direction_usd_per_gb is the one-side rate where both sides pay (AWS cross-AZ)."""

    rows = []
    for t in load_egress(extra, bound=bound):
        for tier in t.tiers:
            rows.append({"cloud": t.cloud, "route_class": t.route_class, "scope": t.scope,
                         "from_gb": round(tier.from_gb, 6),
                         "to_gb": None if tier.to_gb is None else round(tier.to_gb, 6),
                         "usd_per_gb": round(tier.usd_per_gb, 6),
                         "per_direction_usd_per_gb": t.usd_per_gb_per_direction,
                         "range_bound": t.range_bound, "historical": t.historical, "source": t.source})
    _render(rows, fmt, title=f"Egress (USD per GB moved; ranges: {bound} end)",
            table_columns=[c for c in (rows[0] if rows else {}) if c != "source"],
            numbers={"from_gb": "g", "to_gb": "g", "usd_per_gb": "g", "per_direction_usd_per_gb": "g"})


@data.command("traces")
@format_option()
def traces(fmt: str) -> None:
    """The shipped request traces: name, file, request count, time span, license and source."""
    rows = [{k: r.get(k) for k in ("name", "file", "requests", "span_s", "license", "source")} | {
        k: v for k, v in r.items() if k not in ("name", "file", "requests", "span_s", "license", "source")}
        for r in list_traces()]
    _render(rows, fmt, title="Shipped traces", table_columns=["name", "file", "requests", "span_s", "license"],
            numbers={"requests": ",d", "span_s": ".1f"})
