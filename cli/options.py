"""The click options that several ``fleetplan`` commands take, each declared once here: one name, one type, one
help text (a command fills in only what differs: its default, and what the option applies to, e.g. "each cell's
solve").

Solver options (``plan``, ``sweep``, ``allocate``): ``--backend``, ``--time-limit``, ``--gap``, ``--threads``;
``--effort`` (``plan``), the deterministic work budget. The time limit and the gap are plain numbers on the command
line and are checked before any work by :func:`checked_solve_options` (:func:`checked_time_limit` for a command
without a gap; the effort by :func:`checked_effort`), so a NaN or out-of-range value gets the same one-line error,
naming the option as typed, from every command.

Fan-out options (``plan --decompose``, ``sweep``, ``allocate --mode pareto``, ``whatif``, ``ledger whatif``):
``--workers``, ``--executor``, ``--ray-address`` (:func:`fanout_options`).

Outputs: ``--format``, ``--out``, ``--plot``, ``--xlsx``. Grids: ``--vary``, ``--max-cells``. The split design
(``ledger split``, ``ledger whatif``, ``whatif``): :func:`split_design_options` and :func:`split_options`.
Catalog prices: ``--price-date``. Deployment: ``--deploy``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import click
from click.core import ParameterSource

from fleetplan.cli.grid import MAX_CELLS_LIMIT, MAX_VARY_COUNT
from fleetplan.errors import InputError
from fleetplan.scenario.split import SplitOptions
from fleetplan.solvers.executor import EXECUTORS
from fleetplan.solvers.solve import (
    BACKENDS,
    DEFAULT_EFFORT,
    EXACT_CPSAT_UNITS,
    EXACT_NODES,
    MAX_EFFORT,
    MIN_EFFORT,
    MIN_TIME_LIMIT_S,
    WINDOW_NODES,
    check_effort,
    check_solve_options,
)

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]

#: Longest --time-limit, seconds (a day), as :func:`~fleetplan.solvers.solve.check_solve_options` accepts.
MAX_TIME_LIMIT_S = 86400
#: The output formats of a command that prints rows.
FORMATS = ("table", "json", "csv")
#: What each solver backend is, for the help of --backend.
_BACKEND_TEXT = {"highs": "MILP with HiGHS (PuLP)", "cbc": "MILP with CBC (PuLP)", "cpsat": "CP-SAT (OR-Tools)"}


def given(keyword: str) -> bool:
    """True when the running command's option ``keyword`` (its Python name) was given on the command line or by an
    environment variable, False when it has its default (so an explicit ``--executor process`` counts as given)."""
    source = click.get_current_context().get_parameter_source(keyword)
    return source in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


def refuse_unused(options: Mapping[str, str], *, applies: bool, why: str, fix: str) -> None:
    """Raise InputError naming the first of ``options`` ({keyword: '--flag'}) that was given (:func:`given`) when
    it does not apply (``applies`` False), instead of ignoring it silently: '--executor without --decompose:
    <why>; <fix>'."""
    if applies:
        return
    for keyword, flag in options.items():
        if given(keyword):
            value = click.get_current_context().params.get(keyword)
            raise InputError(f"{flag} {why}; {fix}", field=flag, value=value)


def _apply(f: Callable[..., Any], options: Sequence[Decorator]) -> Callable[..., Any]:
    """``f`` with ``options`` applied so that they appear in ``--help`` in the order given."""
    for o in reversed(options):
        f = o(f)
    return f


def _either(names: Sequence[str]) -> str:
    """'a', 'a or b', 'a, b or c'."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


# ---- solver ------------------------------------------------------------------------------------------------------

def backend_option(backends: Sequence[str] = BACKENDS, default: str = "highs") -> Decorator:
    """``--backend`` (keyword ``backend``): one of ``backends`` (default: every backend of ``fleetplan.solvers.solve``;
    ``allocate`` passes those of the tenant allocator)."""
    text = _either([_BACKEND_TEXT.get(b, b) for b in backends])
    return click.option("--backend", type=click.Choice(list(backends)), default=default, show_default=True,
                        help=f"Solver: {text}.")


def time_limit_option(default_s: float, scope: str = "the whole solve") -> Decorator:
    """``--time-limit`` (keyword ``time_limit_s``), seconds of ``scope``; check it with
    :func:`checked_solve_options` (or :func:`checked_time_limit`) before the work."""
    return click.option("--time-limit", "time_limit_s", type=float, default=default_s, show_default=True,
                        help=f"Time limit of {scope}, seconds ({MIN_TIME_LIMIT_S:g} to {MAX_TIME_LIMIT_S}).")


def checked_solve_options(time_limit_s: float, gap: float) -> tuple[float, float]:
    """``--time-limit`` and ``--gap`` checked by :func:`~fleetplan.solvers.solve.check_solve_options` (a finite
    number of seconds from MIN_TIME_LIMIT_S to 86400; a gap in [0, 1)); raises InputError naming the option as the
    user typed it, its value and the range to give."""
    return check_solve_options(time_limit_s, gap, names=("--time-limit", "--gap"))


def checked_time_limit(time_limit_s: float) -> float:
    """``--time-limit`` of a command without ``--gap``, checked as :func:`checked_solve_options` checks it."""
    return checked_solve_options(time_limit_s, 0.0)[0]


def checked_effort(effort: float) -> float:
    """``--effort`` checked by :func:`~fleetplan.solvers.solve.check_effort`; raises InputError naming the
    option."""
    return check_effort(effort, name="--effort")


def gap_option(scope: str = "the solver", default: float = 0.005) -> Decorator:
    """``--gap`` (keyword ``gap``): the relative optimality gap at which ``scope`` may stop, ``default`` when not
    given; checked by :func:`checked_solve_options`."""
    return click.option("--gap", type=float, default=default, show_default=True,
                        help=f"Relative optimality gap at which {scope} may stop (0 to below 1).")


def effort_option(scope: str = "the solve") -> Decorator:
    """``--effort`` (keyword ``effort``): the deterministic work budget of ``scope``
    (:class:`fleetplan.solvers.solve.Effort`: each stage's budget × the effort), default DEFAULT_EFFORT; check it
    with :func:`checked_effort` before the work."""
    return click.option(
        "--effort", type=float, default=DEFAULT_EFFORT, show_default=True,
        help=f"Work budget of {scope}, counted in solver work, not seconds, so the same input gives the same plan on "
             f"an idle or a busy machine: 1 = {EXACT_NODES['highs']:,} branch-and-bound nodes for the exact model "
             f"with HiGHS ({EXACT_NODES['cbc']:,} with CBC, {EXACT_CPSAT_UNITS:g} units of deterministic time with "
             f"CP-SAT) and {WINDOW_NODES} per one-window model; 2 "
             f"doubles each ({MIN_EFFORT:g} to {MAX_EFFORT:g}). --time-limit is then only a safety stop: a plan it "
             "cuts says so.")


def threads_option(default: int | None, scope: str = "") -> Decorator:
    """``--threads`` (keyword ``threads``): solver threads (``scope``, e.g. ' per cell'), 1 to 256; None = all
    cores."""
    return click.option("--threads", type=click.IntRange(1, 256), default=default, show_default=default is not None,
                        help=f"Solver threads{scope}" + (" (default: all)." if default is None else "."))


# ---- fan-out ------------------------------------------------------------------------------------------------------

def fanout_options(what: str, workers: int | None, workers_default_text: str = "") -> Decorator:
    """``--workers`` (keyword ``workers``; ``workers`` is its default, None shown as ``workers_default_text``),
    ``--executor process|ray`` and ``--ray-address`` (keywords ``executor``, ``ray_address``): where ``what`` runs
    (e.g. "the cells")."""
    default_text = f" (default: {workers_default_text})" if workers is None else ""
    return lambda f: _apply(f, [
        click.option("--workers", type=click.IntRange(1, 64), default=workers, show_default=workers is not None,
                     help=f"Processes (or CPUs of a local Ray instance) that run {what} at once{default_text}."),
        click.option("--executor", type=click.Choice(EXECUTORS), default="process", show_default=True,
                     help=f"Where {what} run: local processes (--workers), or Ray (pip install 'fleetplan[ray]'). "
                          "Results are the same on both."),
        click.option("--ray-address", default=None, metavar="auto|ray://HOST:PORT",
                     help="With --executor ray: the cluster to use ('auto': the running one); default: start a local "
                          "Ray instance with --workers CPUs."),
    ])


def refuse_unused_fanout(executor: str, ray_address: str | None) -> None:
    """Refuse (InputError naming the option, :func:`refuse_unused`) the :func:`fanout_options` the executor would
    ignore: ``--ray-address`` without ``--executor ray``, and ``--workers`` beside ``--ray-address`` (a Ray
    cluster runs the tasks on its own CPUs; --workers sizes a process pool or a local Ray instance only)."""
    refuse_unused({"ray_address": "--ray-address"}, applies=executor == "ray",
                  why=f"without --executor ray: --executor {executor} runs on local processes",
                  fix="add --executor ray, or drop --ray-address")
    refuse_unused({"workers": "--workers"}, applies=not ray_address,
                  why="with --ray-address: the Ray cluster's own CPUs run the tasks (--workers sizes a process pool "
                      "or a local Ray instance)", fix="drop --workers, or drop --ray-address for a local Ray instance")


# ---- outputs ------------------------------------------------------------------------------------------------------

def format_option(formats: Sequence[str] = FORMATS, detail: str = "") -> Decorator:
    """``-o``/``--output``/``--format`` (keyword ``fmt``): one of ``formats``, default table; ``detail`` says more
    about them. ``-o`` as in ``fleetplan plan -o json`` (README): a fresh user's ``fleetplan diff A B -o json`` was
    "No such option"."""
    return click.option("-o", "--output", "--format", "fmt", type=click.Choice(list(formats)), default="table",
                        show_default=True, help="Output format" + (f": {detail}" if detail else "."))


#: ``-o``/``--output`` of ``fleetplan plan``: a short table, the wide one, or the plan as JSON, YAML or CSV rows.
OUTPUTS = ("table", "wide", "json", "yaml", "csv")


def output_options() -> Decorator:
    """``-o``/``--output`` (keyword ``output``): table (short, the default), wide (every column and line: capacity
    sources, price sources, the options not used, each model's margins and arrivals), json, yaml or csv; and the
    older ``--format table|json|csv`` (keyword ``fmt``) and ``--wide`` (keyword ``wide``), kept as aliases.
    :func:`resolve_output` turns the three into one."""
    return lambda f: _apply(f, [
        click.option("-o", "--output", "output", type=click.Choice(list(OUTPUTS)), default=None,
                     help="What to print: table (short, the default), wide (also capacity and price sources, the "
                          "options not used, each model's margins and arrival figures), json, yaml or csv."),
        click.option("--format", "fmt", type=click.Choice(list(FORMATS)), default=None,
                     help="Same as -o table|json|csv (kept for scripts)."),
        click.option("--wide", is_flag=True, help="Same as -o wide (kept for scripts)."),
    ])


def resolve_output(output: str | None, fmt: str | None, wide: bool) -> str:
    """The one output of ``-o``, ``--format`` and ``--wide`` (see :func:`output_options`): 'table' when none is
    given. Raises InputError naming the options when two of them say different things."""
    if wide and fmt == "table":
        fmt = "wide"  # the older pair `--format table --wide` meant the wide table
    said = {k: v for k, v in (("-o", output), ("--format", fmt), ("--wide", "wide" if wide else None)) if v}
    if len(set(said.values())) > 1:
        given = ", ".join(k if k == "--wide" else f"{k} {v}" for k, v in said.items())
        raise InputError(f"{given} ask for different outputs; give one of them (-o {'|'.join(OUTPUTS)})",
                         field=next(iter(said)), value=next(iter(said.values())))
    return next(iter(said.values()), "table")


def out_option(what: str) -> Decorator:
    """``--out`` (keyword ``out``): a file to write ``what`` to, besides what the command prints."""
    return click.option("--out", type=click.Path(dir_okay=False), default=None, help=f"Also write {what}.")


def plot_option(what: str) -> Decorator:
    """``--plot`` (keyword ``plot``): a PNG file of ``what``."""
    return click.option("--plot", type=click.Path(dir_okay=False), default=None, help=f"Write a PNG of {what}.")


def xlsx_option(what: str) -> Decorator:
    """``--xlsx`` (keyword ``xlsx``): a what-if workbook of ``what`` (inputs, and live formulas over them)."""
    return click.option("--xlsx", type=click.Path(dir_okay=False), default=None,
                        help=f"Also write a what-if workbook of {what} (inputs, and live formulas over them).")


# ---- grids --------------------------------------------------------------------------------------------------------

def vary_option(variables: Mapping[str, str]) -> Decorator:
    """``--vary`` (keyword ``vary``, repeatable, required): one variable of the grid, among ``variables``
    ({name: what it sets}); parsed by :func:`fleetplan.cli.grid.parse_grid`."""
    names = "; ".join(f"{k}: {v}" for k, v in variables.items())
    return click.option("--vary", "vary", multiple=True, required=True,
                        help=f"NAME=START:STOP:COUNT (COUNT values from START to STOP, COUNT 1..{MAX_VARY_COUNT}) or "
                             f"NAME=V1,V2,... (repeat for a grid); NAME is one of: {names}.")


def max_cells_option(default: int) -> Decorator:
    """``--max-cells`` (keyword ``max_cells``): the largest grid run, ``default`` without it."""
    return click.option("--max-cells", type=click.IntRange(1, MAX_CELLS_LIMIT), default=default, show_default=True,
                        help="Largest grid run (cells = product of the --vary value counts).")


# ---- catalogs ------------------------------------------------------------------------------------------------------

def price_date_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--price-date`` (keyword ``price_date``): catalog prices as of a date."""
    return click.option("--price-date", default=None,
                        help="Catalog prices as of this date (YYYY-MM-DD): the newest snapshot dated on or before it "
                             "(default: the newest).")(f)


# ---- deployment ---------------------------------------------------------------------------------------------------

def deploy_option(use: str = "") -> Decorator:
    """``--deploy`` (keyword ``deploy_file``): the deployment file (:class:`fleetplan.export.deployment.DeployFile`);
    ``use`` says which of its parts the command uses."""
    return click.option("--deploy", "deploy_file", default=None, type=click.Path(dir_okay=False),
                        help="Deployment file (YAML): site -> kubectl context and namespace, image, checkpoints, GPU "
                             f"node labels (docs/export.md: 'From plan to production'){use}.")


# ---- the split design -----------------------------------------------------------------------------------------------

def _split_default(name: str) -> Any:
    """The default of a SplitOptions field (one home for the defaults of the split options)."""
    return SplitOptions.model_fields[name].default


def split_design_options(required: bool = True) -> Decorator:
    """The options of a prefill/decode split design (``ledger split``, ``ledger whatif``; ``whatif`` with
    ``required=False``, where a scenario file may give them), keywords the :class:`SplitOptions` fields; turn them
    into SplitOptions with :func:`split_options`."""
    d = _split_default
    return lambda f: _apply(f, [
        click.option("--model", required=required, help="Model name or alias, e.g. llama-3.1-70b."),
        click.option("--prefill-site", required=required, help="Site of the prefill pool, 'cloud:region[:zone]'."),
        click.option("--decode-site", required=required, help="Site of the decode pool (near the users)."),
        click.option("--trace", default=d("trace"), show_default=True, help="Trace giving the token mix and rate."),
        click.option("--gpu", default=d("gpu"), show_default=True, help="GPU type of both pools."),
        click.option("--prefill-gpu", default=None, help="GPU type of the prefill pool (default --gpu)."),
        click.option("--decode-gpu", default=None, help="GPU type of the decode pool (default --gpu)."),
        click.option("--rate-req-per-s", type=float, default=None, help="Request rate (default: the trace's)."),
        click.option("--ttft-slo-s", type=float, default=d("ttft_slo_s"), show_default=True,
                     help="p95 TTFT target, seconds."),
        click.option("--tpot-slo-s", type=float, default=d("tpot_slo_s"), show_default=True,
                     help="p95 TPOT target, seconds."),
        click.option("--pricing-model", default=d("pricing_model"), show_default=True, help="on-demand, spot, ..."),
        click.option("--prefill-usd-per-gpu-hour", type=float, default=None,
                     help="Your price per GPU-hour at the prefill site (instead of the catalog's)."),
        click.option("--decode-usd-per-gpu-hour", type=float, default=None,
                     help="Your price per GPU-hour at the decode site (instead of the catalog's)."),
        click.option("--prices", "prices_file", type=click.Path(dir_okay=False), default=None,
                     help="Your own GPU price rows (CSV/YAML, the shipped price file's columns)."),
        price_date_option,
        click.option("--models", "models_file", type=click.Path(dir_okay=False), default=None,
                     help="Your own model architectures (CSV/YAML with the shipped models file's columns, or a "
                          "Hugging Face config.json)."),
        click.option("--egress", "egress_file", type=click.Path(dir_okay=False), default=None,
                     help="Your own egress rows (CSV/YAML, the shipped egress file's columns)."),
        click.option("--egress-usd-per-gb", type=float, default=None,
                     help="Flat cross-site egress price, USD/GB (instead of the route's table)."),
        click.option("--margin", type=float, default=d("margin"), show_default=True,
                     help="Capacity headroom (0..0.9)."),
        click.option("--usd-per-kwh", type=float, default=None, help="Electricity price (default: shipped)."),
        click.option("--energy-billed/--energy-included", default=d("energy_billed"), show_default=True,
                     help="Add energy to the total (own hardware) or not (cloud prices include power)."),
    ])


def split_options(kw: Mapping[str, Any], *, base: Mapping[str, Any] | None = None,
                  source: str | None = None) -> SplitOptions:
    """The :class:`~fleetplan.scenario.split.SplitOptions` of the split options in ``kw`` (click's keyword
    arguments; None = not given), over ``base`` (a split file's mapping, read from ``source``). Raises InputError."""
    given = {k: v for k, v in kw.items() if k in SplitOptions.model_fields and v is not None}
    try:
        options = SplitOptions.from_mapping({**(base or {}), **given}, source=source)
    except InputError as exc:
        # A bad value from the command line is blamed on its option, not on the file it overrides (`whatif
        # --margin 0.95` was "split_default.yaml, field 'margin'").
        key = (exc.field or "").split(".")[0].split("[")[0]
        if key in given:
            raise InputError(exc.message, field="--" + key.replace("_", "-"), value=exc.value) from None
        raise
    # Options the design would not use (their values, from the command line or the file, take over).
    refuse_unused({"gpu": "--gpu"}, applies=not (options.prefill_gpu and options.decode_gpu),
                  why="with both --prefill-gpu and --decode-gpu (or prefill_gpu and decode_gpu in the file): each pool "
                      "has its own GPU type", fix="drop --gpu, or one of the two")
    refuse_unused({"prices_file": "--prices", "price_date": "--price-date"},
                  applies=options.prefill_usd_per_gpu_hour is None or options.decode_usd_per_gpu_hour is None,
                  why="with both --prefill-usd-per-gpu-hour and --decode-usd-per-gpu-hour: both pools have your "
                      "prices, none from a price file", fix="drop it, or one of the two prices")
    return options


def refuse_varied_options(names: Sequence[str]) -> None:
    """Refuse a split option given on the command line that a ``--vary`` variable of ``names`` sets in every cell
    (``--rate-req-per-s 3 --vary rate_req_per_s=1,2``: the 3 would be ignored), naming the option."""
    for name in names:
        if name in SplitOptions.model_fields:
            flag = "--" + name.replace("_", "-")
            refuse_unused({name: flag}, applies=False, why=f"with --vary {name}: every cell sets it",
                          fix=f"drop {flag}, or that --vary")
