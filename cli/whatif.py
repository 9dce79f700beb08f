"""``fleetplan whatif [SCENARIO] --vary NAME=...``: a grid of prefill/decode split designs, evaluated in parallel;
:func:`run_whatif` is also the body of ``fleetplan ledger whatif``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import click

from fleetplan.cli.grid import MAX_GRID_CELLS, parse_grid
from fleetplan.cli.options import (
    fanout_options,
    format_option,
    max_cells_option,
    out_option,
    plot_option,
    refuse_unused,
    refuse_unused_fanout,
    refuse_varied_options,
    split_design_options,
    split_options,
    vary_option,
)
from fleetplan.cli.output import CSV_OUT, claim_outputs, json_safe, map_with_progress, rows_csv, stdout_console, table
from fleetplan.costmodels.split import SWEEP_VARIABLES, SplitSpec, apply_variables, grid, scenario_row
from fleetplan.datasets.shipped import shipped_scenario_text
from fleetplan.errors import InputError
from fleetplan.fileio import output_files, parse_yaml, read_yaml
from fleetplan.scenario.split import SplitOptions, make_spec
from fleetplan.solvers.executor import Executor, make_executor

DEFAULT = "split_default.yaml"
#: What --plot of both what-if commands draws.
PLOT_HELP = "the split's savings over the first --vary variable (one line per combination of the others)"


def run_cells(spec: SplitSpec, variables: Mapping[str, Sequence[float]], ex: Executor, quiet: bool) -> list[dict]:
    """The what-if rows of every cell of the grid, run by the executor ``ex``, in grid order."""
    cells = grid(dict(variables))
    for c in cells:  # fail fast on bad values, before starting processes
        apply_variables(spec, c)
    return map_with_progress(ex, scenario_row, cells, label="scenarios", quiet=quiet, common=spec, with_common=True)


def run_whatif(options: SplitOptions, vary: tuple[str, ...], workers: int, fmt: str, out: str | None,
               plot: str | None, max_cells: int = MAX_GRID_CELLS, *, executor: str = "process",
               ray_address: str | None = None) -> None:
    """Sweep the design ``options`` over the ``--vary`` grid and print/write the table (both whatif commands), the
    cells run by the ``executor`` ('process' with ``workers`` processes, or 'ray' at ``ray_address``)."""
    refuse_unused_fanout(executor, ray_address)
    variables = parse_grid(vary, max_cells)
    refuse_varied_options(list(variables))
    refuse_unused({"usd_per_kwh": "--usd-per-kwh"}, applies=options.energy_billed,
                  why="without --energy-billed: the what-if rows have no energy column and their totals leave energy "
                      "out (cloud prices include power)", fix="add --energy-billed (own hardware), or drop it")
    outputs = {"--out": out, "--plot": plot}
    claim_outputs(outputs, suffixes=CSV_OUT)  # checked and locked before the sweep
    spec = make_spec(options)
    with make_executor(executor, workers=workers, address=ray_address) as ex:
        rows = run_cells(spec, variables, ex, quiet=fmt != "table")
    with output_files(outputs, suffixes=CSV_OUT) as tmp:  # both or neither
        if out:
            tmp["--out"].write_text(rows_csv(rows))
        if plot:
            _plot(rows, list(variables), tmp["--plot"])
    if fmt == "json":
        click.echo(json.dumps([json_safe(r) for r in rows], indent=2))
    elif fmt == "csv":
        click.echo(rows_csv(rows), nl=False)
    else:
        _print_rows(rows)


#: A verdict longer than this is printed under the table (an infeasible cell's explanation filled a column 40
#: lines high); the cell keeps its first words.
VERDICT_CELL_CHARS = 24


def _cell(v: object) -> str:
    """A table cell: whole numbers with thousands separators, others to the cent from 1 up and to 4 significant
    digits below (a fresh user read 5.663e+04 USD/day and prompt_tokens 3.277e+04), '-' for none."""
    if isinstance(v, float):
        if v.is_integer() and abs(v) < 1e15:
            return f"{v:,.0f}"
        return f"{v:,.2f}" if abs(v) >= 1 else f"{v:.4g}"
    return "-" if v is None else str(v)


def _short_verdict(v: object) -> str:
    text = str(v)
    return text if len(text) <= VERDICT_CELL_CHARS else text.split(":")[0][:VERDICT_CELL_CHARS] + " (below)"


def _print_rows(rows: list[dict]) -> None:
    """The what-if rows as a table (headers with spaces for underscores, so they wrap instead of being cut), then
    each row's sizing and any long verdict on lines of their own."""
    cols = [c for c in rows[0] if c != "sizing"]  # long text: printed under the table, one line per row
    t = table("What-if scenarios (USD per day)", ["row", *(c.replace("_", " ") for c in cols)], fold=False)
    for i, r in enumerate(rows, start=1):
        t.add_row(str(i), *(_short_verdict(r[c]) if c == "verdict" else _cell(r[c]) for c in cols))
    con = stdout_console(200)
    con.print(t)
    for i, r in enumerate(rows, start=1):
        if len(str(r.get("verdict", ""))) > VERDICT_CELL_CHARS:
            con.print(f"row {i} verdict: {r['verdict']}")
        if r.get("sizing"):
            con.print(f"row {i} sizing: {r['sizing']}")


def _plot(rows: list[dict], names: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    x = names[0]
    others = names[1:]
    fig, ax = plt.subplots(figsize=(7, 4))
    series: dict[tuple, list[tuple[float, float]]] = {}
    left_out = []
    for r in rows:  # cells without savings (the split misses the SLO, or no design meets it) are not plotted
        if r["savings_usd_per_day"] is not None:
            series.setdefault(tuple(r[n] for n in others), []).append((r[x], r["savings_usd_per_day"]))
        else:
            left_out.append(", ".join(f"{n}={r[n]:g}" for n in names))
    for key, pts in series.items():
        pts.sort()
        label = ", ".join(f"{n}={v:g}" for n, v in zip(others, key, strict=True)) or "split"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xlabel(x)
    ax.set_ylabel("split saves USD/day (negative: costs more)")
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    if series:
        ax.legend(fontsize=8)
    if left_out:  # say what the plot leaves out rather than drop it silently
        shown = "; ".join(left_out[:4]) + (f"; and {len(left_out) - 4} more" if len(left_out) > 4 else "")
        fig.text(0.5, 0.01, f"not plotted, {len(left_out)} of {len(rows)} cells where the split misses the SLO or no "
                 f"design meets it (the table says which): {shown}", ha="center", fontsize=7, color="dimgrey",
                 wrap=True)
        fig.tight_layout(rect=(0, 0.08, 1, 1))
    else:
        fig.tight_layout()

    try:
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)


def _read(scenario: str | None) -> tuple[dict, str]:
    if scenario is None:
        text = shipped_scenario_text(DEFAULT)
        return parse_yaml(text, source=DEFAULT), DEFAULT
    p = Path(scenario)
    if not p.exists():
        raise InputError(f"no such scenario file {p}; give a YAML file of split options (see the shipped "
                         f"{DEFAULT}) or none for the shipped one", source=str(p))
    data = read_yaml(p, what="YAML file of split options")
    if not isinstance(data, dict):
        raise InputError("a split scenario is a mapping of option names to values", source=str(p))
    # A file named in the YAML (models_file, prices_file, egress_file) is relative to the YAML's folder, as in a
    # planner scenario, not to the current directory; paths given on the command line stay relative to it.
    for key, value in data.items():
        if key.endswith("_file") and isinstance(value, str) and value and not Path(value).is_absolute():
            data[key] = str(p.parent / value)
    return data, str(p)


@click.command("whatif")
@click.argument("scenario", required=False)
@split_design_options(required=False)
@vary_option(SWEEP_VARIABLES)
@fanout_options("the cells", workers=2)
@format_option()
@out_option("the table as CSV")
@plot_option(PLOT_HELP)
@max_cells_option(MAX_GRID_CELLS)
@click.pass_context
def whatif(ctx: click.Context, scenario: str | None, **kw) -> None:
    """Sweep a prefill/decode split design: SCENARIO is a YAML file of `fleetplan ledger split` options (the shipped
    split_default.yaml when omitted); options given on the command line override it. Prints the verdict per cell,
    and writes a table (--out) and a plot (--plot)."""
    data, where = _read(scenario)
    # The file's values, then the options given on the command line (click's defaults are SplitOptions' own).
    given = {}
    for key, value in kw.items():
        src = ctx.get_parameter_source(key)
        if src is not None and src.name not in ("DEFAULT", "DEFAULT_MAP"):
            given[key] = value
    options = split_options(given, base=data, source=where)
    run_whatif(options, kw["vary"], kw["workers"], kw["fmt"], kw["out"], kw["plot"], kw["max_cells"],
               executor=kw["executor"], ray_address=kw["ray_address"])
