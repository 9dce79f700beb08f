"""``fleetplan sweep [SCENARIO] --vary KEY=...``: plan a grid of planning scenarios (demand growth, GPU prices, SLO
targets, window length), each cell within its own time limit, on local processes or Ray; a table, a CSV and a
plot. Thin layer over :mod:`fleetplan.scenario.sweep` (the scenario changes) and :mod:`fleetplan.solvers.sweep`
(the cells)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from fleetplan.cli.executor import executor_options, progress_bar
from fleetplan.cli.ledger import _clean, _csv, parse_grid
from fleetplan.errors import FleetplanError
from fleetplan.fileio import check_destinations, output_files
from fleetplan.scenario.read import load_scenario
from fleetplan.scenario.sweep import cell_label, sweep_variables
from fleetplan.solvers.common import gap_text
from fleetplan.solvers.executor import default_workers, make_executor
from fleetplan.solvers.solve import BACKENDS, MIN_TIME_LIMIT_S
from fleetplan.solvers.sweep import SweepSettings, run_sweep

#: Largest sweep run without --max-cells: every cell is a solve of up to --time-limit seconds.
MAX_SWEEP_CELLS = 1000


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        return f"{v:,.2f}" if abs(v) >= 1 else f"{v:.4g}"
    return str(v)


def _table(rows: list[dict], names: list[str], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    cols = [*names, "status", "cost_usd_per_day", "gpu_hours_per_day", "lower_bound_usd_per_day", "gap", "valid",
            "solve_s"]
    heads = {"cost_usd_per_day": "USD/day", "gpu_hours_per_day": "GPU-h/day", "lower_bound_usd_per_day":
             "bound USD/day", "solve_s": "solve s"}
    for c in cols:
        t.add_column(heads.get(c, c), justify="left" if c == "status" else "right")
    for r in rows:
        cells = []
        for c in cols:
            v = r[c]
            cells.append(gap_text(v) if c == "gap" and v is not None else
                         f"{v:.1f}" if c == "solve_s" and v is not None else
                         f"{v:g}" if c in names else _fmt(v))
        t.add_row(*cells)
    Console(width=None if sys.stdout.isatty() else 200).print(t)
    for r in rows:
        if r["status"] not in ("optimal",) and r.get("message"):
            click.echo(f"{cell_label({n: r[n] for n in names})}: {r['status']}: {r['message']}")


def _plot(rows: list[dict], names: list[str], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x, others = names[0], names[1:]
    fig, (ax_c, ax_h) = plt.subplots(1, 2, figsize=(11, 4.2))
    series: dict[tuple, list[dict]] = {}
    for r in rows:
        series.setdefault(tuple(r[n] for n in others), []).append(r)
    missing = 0
    for key, pts in series.items():
        pts.sort(key=lambda r: r[x])
        label = ", ".join(f"{n}={v:g}" for n, v in zip(others, key, strict=True)) or "plan"
        ok = [r for r in pts if r["cost_usd_per_day"] is not None]
        missing += len(pts) - len(ok)
        line = ax_c.plot([r[x] for r in ok], [r["cost_usd_per_day"] for r in ok], marker="o", label=label)[0]
        ax_h.plot([r[x] for r in ok], [r["gpu_hours_per_day"] for r in ok], marker="o", color=line.get_color(),
                  label=label)
        # Cells whose plan is not proven optimal: hollow markers (their status says why).
        unproven = [r for r in ok if r["status"] != "optimal"]
        for ax, col in ((ax_c, "cost_usd_per_day"), (ax_h, "gpu_hours_per_day")):
            ax.plot([r[x] for r in unproven], [r[col] for r in unproven], ls="none", marker="o", ms=10,
                    mfc="none", mec="black")
            bounds = [r for r in ok if r["lower_bound_usd_per_day"] is not None]
            if col == "cost_usd_per_day" and any(r["status"] != "optimal" for r in bounds):
                ax.plot([r[x] for r in bounds], [r["lower_bound_usd_per_day"] for r in bounds], ls=":",
                        color=line.get_color(), lw=1)
    ax_c.set_ylabel("cost, USD/day")
    ax_h.set_ylabel("GPU-hours/day")
    for ax in (ax_c, ax_h):
        ax.set_xlabel(x)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    if len(series) > 1:
        ax_c.legend(fontsize=8)
    note = f"; {missing} cell(s) without a plan not shown" if missing else ""
    note += "; dotted: proven lower bound" if any(r["status"] == "feasible" for r in rows) else ""
    note += "; hollow rings: not proven optimal" if any(r["status"] not in ("optimal", "input error")
                                                         for r in rows if r["cost_usd_per_day"] is not None) else ""
    fig.suptitle(f"{title}{note}", fontsize=10)
    fig.tight_layout()
    try:
        fig.savefig(path, format="png", dpi=110)
    finally:
        plt.close(fig)


@click.command("sweep")
@click.argument("scenario", required=False)
@click.option("--vary", "vary", multiple=True, required=True,
              help="KEY=START:STOP:COUNT or KEY=V1,V2,... (repeat for a grid); keys: demand_factor, "
                   "gpu_price_factor, gpu_price_factor.<GPU>, ttft_factor, tpot_factor, ttft_s, tpot_s, "
                   "window_length_s.")
@click.option("--backend", type=click.Choice(BACKENDS), default="highs", show_default=True)
@click.option("--time-limit", "time_limit_s", type=float, default=30.0, show_default=True,
              help=f"Time limit of each cell's solve, seconds ({MIN_TIME_LIMIT_S:g} to 86400).")
@click.option("--threads", type=click.IntRange(1, 256), default=1, show_default=True,
              help="Solver threads per cell (1 gives the same answers on every run and executor).")
@click.option("--gap", type=float, default=0.005, show_default=True, help="Relative optimality gap per cell.")
@click.option("--workers", type=click.IntRange(1, 64), default=default_workers(), show_default=True,
              help="Cells solved at once: processes (or CPUs of a local Ray instance).")
@executor_options
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Also write the table as CSV.")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="PNG of cost and GPU-hours per day over the first --vary variable (one line per combination "
                   "of the others).")
@click.option("--max-cells", type=click.IntRange(1, 1_000_000), default=MAX_SWEEP_CELLS, show_default=True,
              help="Largest grid run (cells = product of the --vary value counts).")
def sweep(scenario: str | None, vary: tuple[str, ...], backend: str, time_limit_s: float, threads: int, gap: float,
          workers: int, executor: str, ray_address: str | None, fmt: str, out: str | None, plot: str | None,
          max_cells: int) -> None:
    """Plan SCENARIO (a YAML file or a shipped scenario's name; the shipped default when omitted) for every cell
    of the --vary grid: cost, GPU-hours, status and gap per cell. Every cell's plan is re-checked by the
    independent validator."""
    outputs = {"--out": out, "--plot": plot}
    check_destinations(outputs)  # before the sweep
    sc = load_scenario(scenario)
    variables = parse_grid(vary, max_cells, names=sweep_variables(sc))
    settings = SweepSettings(backend=backend, time_limit_s=time_limit_s, threads=threads, gap=gap)
    n = 1
    for vals in variables.values():
        n *= len(vals)
    with make_executor(executor, workers=workers, address=ray_address) as ex, \
            progress_bar(f"cells ({ex.describe()})", n, quiet=fmt != "table") as done:
        rows = run_sweep(sc, variables, ex, settings, progress=done)
    names = list(variables)
    title = f"{sc.name}: sweep of {', '.join(names)} ({len(rows)} cells, {backend}, ≤ {time_limit_s:g} s each)"
    with output_files(outputs) as tmp:  # both or neither
        if out:
            tmp["--out"].write_text(_csv(rows))
        if plot:
            _plot(rows, names, tmp["--plot"], title)
    if fmt == "json":
        click.echo(json.dumps([_clean(r) for r in rows], indent=2))
    elif fmt == "csv":
        click.echo(_csv(rows), nl=False)
    else:
        _table(rows, names, title)
    bad = [r for r in rows if r["valid"] is False]
    if bad:
        raise FleetplanError(f"{len(bad)} cell(s) gave a plan that fails the independent check (please report "
                             "this): " + "; ".join(cell_label({k: r[k] for k in names}) for r in bad[:5]))
