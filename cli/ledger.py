"""``fleetplan ledger``: cost ledgers, the prefill-here/decode-there comparison, what-if workbooks and sweeps.

Thin layer over :mod:`fleetplan.scenario.split` (options -> spec), :mod:`fleetplan.costmodels.split` (the
comparison), :mod:`fleetplan.costmodels.ledger` and :mod:`fleetplan.outputs.workbook`. Bad input raises a
fleetplan error (one line, exit code 2); files are written to a temporary file and renamed.
"""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from collections.abc import Callable, Collection
from pathlib import Path

import click

from fleetplan.cli.executor import executor_options, map_with_progress
from fleetplan.costmodels.split import SWEEP_VARIABLES, apply_variables, compare, grid, scenario_row
from fleetplan.errors import InputError, UnknownNameError
from fleetplan.fileio import check_destinations, output_files
from fleetplan.outputs.workbook import build_split_workbook
from fleetplan.scenario.split import SplitOptions, make_spec
from fleetplan.solvers.executor import Executor, default_workers, make_executor


def _clean(v):
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    return v


def _csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    if rows:
        w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: "" if v is None else v for k, v in _clean(r).items()})
    return buf.getvalue()


def _default(name: str):
    """The default of a SplitOptions field (one home for the defaults of the split options)."""
    return SplitOptions.model_fields[name].default


def _split_options(f: Callable) -> Callable:
    opts = [
        click.option("--model", required=True, help="Model name or alias, e.g. llama-3.1-70b."),
        click.option("--prefill-site", required=True, help="Site of the prefill pool, 'cloud:region[:zone]'."),
        click.option("--decode-site", required=True, help="Site of the decode pool (near the users)."),
        click.option("--trace", default=_default("trace"), show_default=True,
                     help="Trace giving the token mix and rate."),
        click.option("--gpu", default=_default("gpu"), show_default=True, help="GPU type of both pools."),
        click.option("--prefill-gpu", default=None, help="GPU type of the prefill pool (default --gpu)."),
        click.option("--decode-gpu", default=None, help="GPU type of the decode pool (default --gpu)."),
        click.option("--rate-req-per-s", type=float, default=None, help="Request rate (default: the trace's)."),
        click.option("--ttft-slo-s", type=float, default=_default("ttft_slo_s"), show_default=True,
                     help="p95 TTFT target, seconds."),
        click.option("--tpot-slo-s", type=float, default=_default("tpot_slo_s"), show_default=True,
                     help="p95 TPOT target, seconds."),
        click.option("--pricing-model", default=_default("pricing_model"), show_default=True,
                     help="on-demand, spot, ..."),
        click.option("--prefill-usd-per-gpu-hour", type=float, default=None,
                     help="Your price per GPU-hour at the prefill site (instead of the catalog's)."),
        click.option("--decode-usd-per-gpu-hour", type=float, default=None,
                     help="Your price per GPU-hour at the decode site (instead of the catalog's)."),
        click.option("--prices", "prices_file", type=click.Path(dir_okay=False), default=None,
                     help="Your own GPU price rows (CSV/YAML, the shipped price file's columns)."),
        click.option("--price-date", default=None,
                     help="Catalog prices as of this date, YYYY-MM-DD (default: the newest snapshot)."),
        click.option("--models", "models_file", type=click.Path(dir_okay=False), default=None,
                     help="Your own model architectures (CSV/YAML with the shipped models file's columns, or a "
                          "Hugging Face config.json)."),
        click.option("--egress", "egress_file", type=click.Path(dir_okay=False), default=None,
                     help="Your own egress rows (CSV/YAML, the shipped egress file's columns)."),
        click.option("--egress-usd-per-gb", type=float, default=None,
                     help="Flat cross-site egress price, USD/GB (instead of the route's table)."),
        click.option("--margin", type=float, default=_default("margin"), show_default=True,
                     help="Capacity headroom (0..0.9)."),
        click.option("--usd-per-kwh", type=float, default=None, help="Electricity price (default: shipped)."),
        click.option("--energy-billed/--energy-included", default=_default("energy_billed"), show_default=True,
                     help="Add energy to the total (own hardware) or not (cloud prices include power)."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def split_options(kw: dict, *, base: dict | None = None, source: str | None = None) -> SplitOptions:
    """The :class:`~fleetplan.scenario.split.SplitOptions` of the split options in ``kw`` (click's keyword
    arguments; None = not given), over ``base`` (a split file's mapping, read from ``source``). Raises InputError."""
    given = {k: v for k, v in kw.items() if k in SplitOptions.model_fields and v is not None}
    return SplitOptions.from_mapping({**(base or {}), **given}, source=source)


#: Most values one ``--vary NAME=START:STOP:COUNT`` range gives.
MAX_VARY_COUNT = 1000
#: Help of ``--vary`` (both what-if commands): the forms and what each variable sets.
VARY_HELP = ("NAME=START:STOP:COUNT (COUNT values from START to STOP, COUNT 1.." + str(MAX_VARY_COUNT) + ") or "
             "NAME=V1,V2,... (repeat for a grid); NAME is one of: "
             + "; ".join(f"{k}: {v}" for k, v in SWEEP_VARIABLES.items()) + ".")


def parse_vary(text: str, names: Collection[str] = tuple(SWEEP_VARIABLES)) -> tuple[str, list[float]]:
    """'name=a:b:n' (n values from a to b) or 'name=v1,v2,...', the name one of ``names`` (default: the what-if
    variables). Raises InputError otherwise."""
    import numpy as np


    if "=" not in text:
        raise InputError(f"--vary {text!r}: write NAME=START:STOP:COUNT or NAME=V1,V2,...", field="vary", value=text)
    name, spec = (x.strip() for x in text.split("=", 1))
    if name not in names:
        raise UnknownNameError("sweep variable", name, names, field="vary")
    if ":" in spec and spec.count(":") != 2:
        raise InputError(f"--vary {text!r}: a range is START:STOP:COUNT (three numbers, e.g. {name}=1:2:5 for 5 "
                         f"values from 1 to 2); for a list of values write {name}={spec.replace(':', ',')}",
                         field="vary", value=text)
    items = spec.split(",")
    if ":" not in spec and any(not x.strip() for x in items):
        raise InputError(f"--vary {text!r}: value {[x.strip() for x in items].index('') + 1} of the list is empty; "
                         f"write the values with one comma between them, e.g. "
                         f"{name}={','.join(x.strip() for x in items if x.strip()) or '1,2'}", field="vary",
                         value=text)
    if ":" in spec:
        a, b, n = (x.strip() for x in spec.split(":"))
        try:
            count = int(n)
        except ValueError:
            count = 0
        if not 1 <= count <= MAX_VARY_COUNT:
            raise InputError(f"--vary {text!r}: the COUNT {n!r} (how many values from START to STOP) must be a whole "
                             f"number from 1 to {MAX_VARY_COUNT}, e.g. {name}={a}:{b}:5", field="vary",
                             value=text)
        try:
            start, stop = float(a), float(b)
        except ValueError:
            raise InputError(f"--vary {text!r}: START and STOP must be numbers, e.g. {name}=1:2:{count}",
                             field="vary", value=text) from None
        if not (math.isfinite(start) and math.isfinite(stop)):  # before linspace, which warns on inf/nan
            raise InputError(f"--vary {text!r}: START and STOP must be finite numbers", field="vary", value=text)
        vals = [round(float(x), 12) for x in np.linspace(start, stop, count)]
    else:
        try:
            vals = [float(x) for x in items]
        except ValueError:
            raise InputError(f"--vary {text!r}: values must be numbers (NAME=V1,V2,... or NAME=START:STOP:COUNT)",
                             field="vary", value=text) from None
    if not all(math.isfinite(v) for v in vals):
        raise InputError(f"--vary {text!r}: values must be finite numbers", field="vary", value=text)
    if not vals:
        raise InputError(f"--vary {text!r}: no values", field="vary", value=text)
    return name, vals


#: Largest what-if grid run without --max-cells (a 1000 × 1000 grid is a million scenarios: hours of work).
MAX_GRID_CELLS = 10_000


def parse_grid(vary: tuple[str, ...], max_cells: int = MAX_GRID_CELLS,
               names: Collection[str] = tuple(SWEEP_VARIABLES)) -> dict[str, list[float]]:
    """{variable: values} of the ``--vary`` options (variables among ``names``), in order. Raises InputError when a
    variable is given twice (the last would silently win) or the grid has more than ``max_cells`` cells (raise
    --max-cells to run it)."""
    variables: dict[str, list[float]] = {}
    for text in vary:
        name, vals = parse_vary(text, names)
        if name in variables:
            raise InputError(f"--vary {name} is given twice; give all its values in one --vary (e.g. {name}=1,2,3)",
                             field="vary", value=text)
        variables[name] = vals
    cells = math.prod(len(v) for v in variables.values())
    if cells > max_cells:
        sizes = " × ".join(str(len(v)) for v in variables.values())
        raise InputError(f"the grid has {cells:,} cells ({sizes}); at most {max_cells:,} run without asking: use "
                         f"fewer values or raise --max-cells", field="vary", value=cells)
    return variables


def _run_sweep(spec, variables: dict, ex: Executor, quiet: bool) -> list[dict]:
    """The what-if rows of every cell of the grid, run by the executor ``ex``, in grid order."""
    cells = grid(variables)
    for c in cells:  # fail fast on bad values, before starting processes
        apply_variables(spec, c)
    return map_with_progress(ex, scenario_row, cells, label="scenarios", quiet=quiet, common=spec, with_common=True)


def _print_split(result, fmt: str) -> None:
    if fmt == "json":
        d = result.to_dict()
        be = d["break_even_egress_usd_per_gb"]
        if be is not None and be < 0:  # as the table's "none": no egress price makes the split pay
            d["break_even_egress_usd_per_gb"] = None
            d["break_even_egress_note"] = "none: the split costs more even with free egress"
        click.echo(json.dumps(_clean_deep(d), indent=2))
        return
    rows = [i.row() for o in result.options.values() for i in o.ledger.items]
    if fmt == "csv":
        click.echo(_csv(rows), nl=False)
        return
    from rich.console import Console
    from rich.table import Table

    con = Console(width=None if sys.stdout.isatty() else 160)
    t = Table(title=f"{result.spec.model.name}: line items per day")
    for c in ("option", "category", "label", "tier", "quantity", "unit", "unit price USD", "USD/day", "in total"):
        t.add_column(c, justify="right" if c in ("quantity", "unit price USD", "USD/day") else "left")
    for r in rows:
        t.add_row(r["option"], r["category"], r["label"], r["tier"], f"{r['quantity_per_day']:,.2f}", r["unit"],
                  f"{r['unit_price_usd']:.4f}", f"{r['amount_usd_per_day']:,.2f}", "yes" if r["in_total"] else "no")
    con.print(t)
    s = Table(title="Options side by side")
    cols = ("option", "sites", "GPUs", "USD/day", "USD/month", "GPU USD/day", "egress USD/day", "USD/request",
            "USD/1M in", "USD/1M out", "TTFT added s", "TTFT p95 s", "SLO")
    for c in cols:
        s.add_column(c)
    for name, o in result.options.items():
        led = o.ledger
        s.add_row(name, ", ".join(f"{p.role}@{p.site}" for p in o.pools),
                  " + ".join(f"{p.replicas}×{p.tp}" for p in o.pools), f"{led.total_usd_per_day:,.2f}",
                  f"{led.total_usd_per_month:,.0f}", f"{led.gpu_usd_per_day:,.2f}", f"{led.egress_usd_per_day:,.2f}",
                  f"{led.usd_per_request:.5f}", f"{led.usd_per_1m_input_tokens:.3f}",
                  f"{led.usd_per_1m_output_tokens:.3f}", f"{o.ttft_added_s:.3f}", f"{o.ttft_p95_s:.3f}",
                  "ok" if o.slo_ok else "FAILS")
    con.print(s)
    be = result.break_even_egress_usd_per_gb
    if be is None:
        be_text = f"n/a ({result.break_even_egress_note})" if result.break_even_egress_note else "n/a"
    elif be < 0:
        be_text = "none (the split costs more even with free egress)"
    else:
        be_text = f"{be:.5f} USD/GB"
    con.print(f"Break-even cross-site egress: {be_text}; "
              f"prompt length: {result.break_even_note}")
    for o in result.options.values():
        if o.note:
            con.print(f"{o.name}: {o.note}")
        elif o.sizing:
            con.print(f"Sizing: {o.sizing}")
    con.print(f"Verdict: {result.verdict}")


def _clean_deep(obj):
    if isinstance(obj, dict):
        return {k: _clean_deep(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean_deep(v) for v in obj]
    return _clean(obj)


@click.group("ledger")
def ledger() -> None:
    """Cost ledgers: line items per day and month (GPU-hours, egress by route class and tier, energy)."""


@ledger.command("split")
@_split_options
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True,
              help="table: line items and options side by side; json: one object (break_even_egress_usd_per_gb is "
                   "null when no egress price makes the split pay, with break_even_egress_note saying so); csv: "
                   "line items.")
@click.option("--xlsx", type=click.Path(dir_okay=False), default=None, help="Also write a what-if workbook.")
@click.option("--csv-out", type=click.Path(dir_okay=False), default=None, help="Also write the line items as CSV.")
@click.option("--no-prompt-break-even", is_flag=True, help="Skip the (slower) prompt-length break-even search.")
def split_cmd(fmt: str, xlsx: str | None, csv_out: str | None, no_prompt_break_even: bool, **kw) -> None:
    """Compare colocated, disaggregated in one site, and prefill-here/decode-there on the same demand."""

    outputs = {"--xlsx": xlsx, "--csv-out": csv_out}
    check_destinations(outputs)  # before the work
    spec = make_spec(split_options(kw))
    result = compare(spec, prompt_break_even=not no_prompt_break_even)
    with output_files(outputs) as tmp:  # all of them or none
        if xlsx:
            base = spec.kv_table.tiers[0].usd_per_gb
            egress = sorted({round(x, 4) for x in (0.0, base / 2, base, base * 2, base * 4)})
            prompts = [spec.mix.input_tokens_mean * f for f in (0.25, 1.0, 4.0)]
            rows = [scenario_row(spec, {"egress_usd_per_gb": e, "prompt_tokens": p}) for e in egress for p in prompts]
            build_split_workbook(result, rows).save(tmp["--xlsx"])
        if csv_out:
            tmp["--csv-out"].write_text(_csv([i.row() for o in result.options.values() for i in o.ledger.items]))
    _print_split(result, fmt)


def _max_cells_option(f: Callable) -> Callable:
    return click.option("--max-cells", type=click.IntRange(1, 10_000_000), default=MAX_GRID_CELLS,
                        show_default=True, help="Largest grid run (cells = product of the --vary value counts).")(f)


@ledger.command("whatif")
@_split_options
@click.option("--vary", "vary", multiple=True, required=True,
              help=VARY_HELP)
@click.option("--workers", type=click.IntRange(1, 64), default=default_workers(),
              show_default=True, help="Parallel processes (or CPUs of a local Ray instance).")
@executor_options
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Also write the table as CSV.")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="Write a PNG plot of the split's savings over the first variable.")
@_max_cells_option
def whatif_cmd(vary: tuple[str, ...], workers: int, executor: str, ray_address: str | None, fmt: str, out: str | None,
               plot: str | None, max_cells: int, **kw) -> None:
    """Evaluate a grid of scenarios (in parallel processes, or on Ray) and print the verdict per cell."""
    run_whatif(split_options(kw), vary, workers, fmt, out, plot, max_cells, executor=executor,
               ray_address=ray_address)


def run_whatif(options: SplitOptions, vary: tuple[str, ...], workers: int, fmt: str, out: str | None,
               plot: str | None, max_cells: int = MAX_GRID_CELLS, *, executor: str = "process",
               ray_address: str | None = None) -> None:
    """Sweep the design ``options`` over the ``--vary`` grid and print/write the table (both whatif commands), the
    cells run by the ``executor`` ('process' with ``workers`` processes, or 'ray' at ``ray_address``)."""
    outputs = {"--out": out, "--plot": plot}
    check_destinations(outputs)  # before the sweep
    variables = parse_grid(vary, max_cells)
    spec = make_spec(options)
    with make_executor(executor, workers=workers, address=ray_address) as ex:
        rows = _run_sweep(spec, variables, ex, quiet=fmt != "table")
    with output_files(outputs) as tmp:  # both or neither
        if out:
            tmp["--out"].write_text(_csv(rows))
        if plot:
            _plot(rows, list(variables), tmp["--plot"])
    if fmt == "json":
        click.echo(json.dumps([_clean(r) for r in rows], indent=2))
    elif fmt == "csv":
        click.echo(_csv(rows), nl=False)
    else:
        from rich.console import Console
        from rich.table import Table

        t = Table(title="What-if scenarios (USD per day)")
        cols = [c for c in rows[0] if c != "sizing"]  # long text: printed under the table, one line per row
        t.add_column("row")
        for c in cols:
            t.add_column(c)
        for i, r in enumerate(rows, start=1):
            t.add_row(str(i), *(f"{r[c]:,.4g}" if isinstance(r[c], float) else "-" if r[c] is None else str(r[c])
                                for c in cols))
        con = Console(width=None if sys.stdout.isatty() else 200)
        con.print(t)
        for i, r in enumerate(rows, start=1):
            if r.get("sizing"):
                con.print(f"row {i} sizing: {r['sizing']}")


def _plot(rows: list[dict], names: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = names[0]
    others = names[1:]
    fig, ax = plt.subplots(figsize=(7, 4))
    series: dict[tuple, list[tuple[float, float]]] = {}
    for r in rows:  # cells without savings (the split misses the SLO, or no design meets it) are not plotted
        if r["savings_usd_per_day"] is not None:
            series.setdefault(tuple(r[n] for n in others), []).append((r[x], r["savings_usd_per_day"]))
    for key, pts in series.items():
        pts.sort()
        label = ", ".join(f"{n}={v:g}" for n, v in zip(others, key, strict=True)) or "split"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xlabel(x)
    ax.set_ylabel("split saves USD/day (negative: costs more)")
    ax.legend(fontsize=8)
    fig.tight_layout()

    try:
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)
