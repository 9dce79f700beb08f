"""``fleetplan whatif [SCENARIO] --vary NAME=...``: a grid of prefill/decode split designs, evaluated in parallel."""

from __future__ import annotations

from pathlib import Path

import click

from fleetplan.cli.executor import executor_options
from fleetplan.cli.ledger import VARY_HELP, _max_cells_option, _split_options, run_whatif, split_options
from fleetplan.datasets.shipped import shipped_scenario_text
from fleetplan.errors import InputError
from fleetplan.fileio import parse_yaml, read_yaml

DEFAULT = "split_default.yaml"


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


def _with_optional(f):
    """The split options of `fleetplan ledger split`, none required here: the scenario file may give them."""
    f = _split_options(f)
    for p in f.__click_params__:
        p.required = False
    return f


@click.command("whatif")
@click.argument("scenario", required=False)
@_with_optional
@click.option("--vary", "vary", multiple=True, required=True,
              help=VARY_HELP)
@click.option("--workers", type=click.IntRange(1, 64), default=2, show_default=True,
              help="Parallel processes (or CPUs of a local Ray instance).")
@executor_options
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Also write the table as CSV.")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="Write a PNG plot of the split's savings over the first variable.")
@_max_cells_option
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
