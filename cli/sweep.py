"""``fleetplan sweep [SCENARIO] --vary KEY=...``: plan a grid of planning scenarios (demand growth, GPU prices, SLO
targets, window length), each cell within its own time limit, on local processes or Ray; a table, a CSV and a
plot. Thin layer over :mod:`fleetplan.scenario.sweep` (the scenario changes) and :mod:`fleetplan.solvers.sweep`
(the cells)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import click

from fleetplan.cli.grid import MAX_SWEEP_CELLS, parse_grid
from fleetplan.cli.options import (
    backend_option,
    checked_solve_options,
    fanout_options,
    format_option,
    gap_option,
    max_cells_option,
    out_option,
    plot_option,
    refuse_unused_fanout,
    threads_option,
    time_limit_option,
    vary_option,
)
from fleetplan.cli.output import CSV_OUT, claim_outputs, json_safe, progress_bar, rows_csv, stdout_console, table
from fleetplan.errors import FleetplanError
from fleetplan.fileio import output_files
from fleetplan.scenario.read import load_scenario
from fleetplan.scenario.sweep import SCENARIO_SWEEP_VARIABLES, cell_label, sweep_variables
from fleetplan.solvers.common import gap_text
from fleetplan.solvers.executor import default_workers, make_executor
from fleetplan.solvers.sweep import SweepSettings, run_sweep


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        return f"{v:,.2f}" if abs(v) >= 1 else f"{v:.4g}"
    return str(v)


#: Row keys of a sweep's table after the variables, and their column headings where they differ.
_COLUMNS = ("status", "cost_usd_per_day", "gpu_hours_per_day", "lower_bound_usd_per_day", "gap", "valid", "solve_s")
_HEADS = {"cost_usd_per_day": "USD/day", "gpu_hours_per_day": "GPU-h/day", "lower_bound_usd_per_day":
          "bound USD/day", "solve_s": "solve s"}


def _cell(column: str, v: Any, names: list[str]) -> str:
    if column == "gap" and v is not None:
        return gap_text(v)
    if column == "solve_s" and v is not None:
        return f"{v:.1f}"
    return f"{v:g}" if column in names else _fmt(v)


def _table(rows: list[dict], names: list[str], title: str) -> None:
    cols = [*names, *_COLUMNS]
    t = table(title, [_HEADS.get(c, c) for c in cols], right=lambda c: c != "status", fold=False,
              title_justify="left")
    for r in rows:
        t.add_row(*(_cell(c, r[c], names) for c in cols))
    stdout_console(200).print(t)
    for r in rows:
        if r["status"] not in ("optimal",) and r.get("message"):
            click.echo(f"{cell_label({n: r[n] for n in names})}: {r['status']}: {r['message']}")


def _series(rows: list[dict], x: str, others: list[str]) -> dict[tuple, list[dict]]:
    """The rows grouped by the values of the ``others`` variables, each group sorted by ``x``."""
    series: dict[tuple, list[dict]] = {}
    for r in rows:
        series.setdefault(tuple(r[n] for n in others), []).append(r)
    for pts in series.values():
        pts.sort(key=lambda r: r[x])
    return series


def _plot_series(ax_c, ax_h, x: str, label: str, ok: list[dict]) -> None:
    """One combination's cells with a plan: cost and GPU-hours over ``x``; hollow rings on the cells not proven
    optimal, and the proven lower bound dotted when one of them is not."""
    line = ax_c.plot([r[x] for r in ok], [r["cost_usd_per_day"] for r in ok], marker="o", label=label)[0]
    ax_h.plot([r[x] for r in ok], [r["gpu_hours_per_day"] for r in ok], marker="o", color=line.get_color(),
              label=label)
    # Cells whose plan is not proven optimal: hollow markers (their status says why).
    unproven = [r for r in ok if r["status"] != "optimal"]
    bounds = [r for r in ok if r["lower_bound_usd_per_day"] is not None]
    for ax, col in ((ax_c, "cost_usd_per_day"), (ax_h, "gpu_hours_per_day")):
        ax.plot([r[x] for r in unproven], [r[col] for r in unproven], ls="none", marker="o", ms=10,
                mfc="none", mec="black")
    if any(r["status"] != "optimal" for r in bounds):
        ax_c.plot([r[x] for r in bounds], [r["lower_bound_usd_per_day"] for r in bounds], ls=":",
                  color=line.get_color(), lw=1)


def _plot_note(rows: list[dict], missing: int) -> str:
    """What the plot's title adds: cells without a plan, and what the dotted line and the rings mean."""
    note = f"; {missing} cell(s) without a plan not shown" if missing else ""
    note += "; dotted: proven lower bound" if any(r["status"] == "feasible" for r in rows) else ""
    note += "; hollow rings: not proven optimal" if any(r["status"] not in ("optimal", "input error")
                                                         for r in rows if r["cost_usd_per_day"] is not None) else ""
    return note


def _plot(rows: list[dict], names: list[str], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x, others = names[0], names[1:]
    fig, (ax_c, ax_h) = plt.subplots(1, 2, figsize=(11, 4.2))
    series = _series(rows, x, others)
    missing = 0
    for key, pts in series.items():
        label = ", ".join(f"{n}={v:g}" for n, v in zip(others, key, strict=True)) or "plan"
        ok = [r for r in pts if r["cost_usd_per_day"] is not None]
        missing += len(pts) - len(ok)
        _plot_series(ax_c, ax_h, x, label, ok)
    ax_c.set_ylabel("cost, USD/day")
    ax_h.set_ylabel("GPU-hours/day")
    for ax in (ax_c, ax_h):
        ax.set_xlabel(x)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    if len(series) > 1:
        ax_c.legend(fontsize=8)
    fig.suptitle(f"{title}{_plot_note(rows, missing)}", fontsize=10)
    fig.tight_layout()
    try:
        fig.savefig(path, format="png", dpi=110)
    finally:
        plt.close(fig)


@click.command("sweep")
@click.argument("scenario", required=False)
@vary_option(SCENARIO_SWEEP_VARIABLES)
@backend_option()
@time_limit_option(30.0, "each cell's solve")
@threads_option(1, " per cell")
@gap_option("each cell's solve")
@fanout_options("the cells", workers=default_workers())
@format_option()
@out_option("the table as CSV")
@plot_option("cost and GPU-hours per day over the first --vary variable (one line per combination of the others)")
@max_cells_option(MAX_SWEEP_CELLS)
def sweep(scenario: str | None, vary: tuple[str, ...], backend: str, time_limit_s: float, threads: int, gap: float,
          workers: int, executor: str, ray_address: str | None, fmt: str, out: str | None, plot: str | None,
          max_cells: int) -> None:
    """Plan SCENARIO (a YAML file or a shipped scenario's name; the shipped default when omitted) for every cell
    of the --vary grid: cost, GPU-hours, status and gap per cell. Every cell's plan is re-checked by the
    independent validator."""
    time_limit_s, gap = checked_solve_options(time_limit_s, gap)  # naming the options, before any work
    refuse_unused_fanout(executor, ray_address)
    outputs = {"--out": out, "--plot": plot}
    claim_outputs(outputs, suffixes=CSV_OUT)  # checked and locked before the sweep
    sc = load_scenario(scenario)
    variables = parse_grid(vary, max_cells, names=sweep_variables(sc))
    settings = SweepSettings(backend=backend, time_limit_s=time_limit_s, threads=threads, gap=gap)
    n = math.prod(len(vals) for vals in variables.values())
    with make_executor(executor, workers=workers, address=ray_address) as ex, \
            progress_bar(f"cells ({ex.describe()})", n, quiet=fmt != "table") as done:
        rows = run_sweep(sc, variables, ex, settings, progress=done)
    names = list(variables)
    title = f"{sc.name}: sweep of {', '.join(names)} ({len(rows)} cells, {backend}, ≤ {time_limit_s:g} s each)"
    with output_files(outputs, suffixes=CSV_OUT) as tmp:  # both or neither
        if out:
            tmp["--out"].write_text(rows_csv(rows))
        if plot:
            _plot(rows, names, tmp["--plot"], title)
    bad = [r for r in rows if r["valid"] is False]
    failed = FleetplanError(f"{len(bad)} cell(s) gave a plan that fails the independent check (please report this): "
                            + "; ".join(cell_label({k: r[k] for k in names}) for r in bad[:5])) if bad else None
    if fmt == "json":
        if failed:  # stdout holds one JSON document: the error object alone, not the rows and then the error
            raise failed
        click.echo(json.dumps([json_safe(r) for r in rows], indent=2))
    elif fmt == "csv":
        click.echo(rows_csv(rows), nl=False)
    else:
        _table(rows, names, title)
    if failed:
        raise failed
