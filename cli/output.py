"""Output helpers shared by the commands: atomic file writes (never a half-written file), JSON and CSV of result
rows, rich tables and consoles on stdout, a progress spinner and a progress bar on stderr.

rich is imported inside the functions that draw, so commands that print JSON start fast.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal, NoReturn

import click

from fleetplan.fileio import atomic_path, claimed_outputs, write_text_atomic

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from fleetplan.solvers.executor import Executor

__all__ = ["atomic_path", "error_object", "json_safe", "map_with_progress", "progress_bar", "progress_status",
           "rows_csv", "stdout_console", "table", "wants_json", "write_text_atomic"]


#: Exit status of a command stopped by Ctrl-C (SIGINT): 128 + the signal's number, as a shell reports a process the
#: signal killed. click's own handling gave 1 and "Aborted!", and an interrupt before click's handling began gave 130.
EXIT_INTERRUPTED = 128 + 2


def interrupted(*_signal: Any) -> NoReturn:
    """Say on stderr that the command was interrupted and exit with :data:`EXIT_INTERRUPTED`: what every command
    does on Ctrl-C (:class:`fleetplan.cli.main.FleetplanGroup`; ``serve`` after its graceful shutdown). Output files
    are written whole or not at all (:mod:`fleetplan.fileio`), so those not finished are left as they were. Usable
    as a signal handler (``_signal``: its arguments, unused)."""
    click.echo("fleetplan: interrupted (Ctrl-C)", err=True)
    sys.exit(EXIT_INTERRUPTED)


#: The file type of an ``--out`` that writes the command's table as CSV (``sweep``, ``whatif``, ``ledger whatif``),
#: for :func:`claim_outputs` and :func:`fleetplan.fileio.output_files`: JSON or anything else under that name would
#: be a CSV file under a misleading name (``--format`` chooses what is printed, never what ``--out`` writes).
CSV_OUT: dict[str, tuple[str, ...]] = {"--out": (".csv",)}


def claim_outputs(paths: dict[str, Any], *, suffixes: dict[str, tuple[str, ...]] | None = None) -> None:
    """Check each file destination of ``paths`` ({option: path or None}; with ``suffixes`` {option: allowed
    suffixes} besides :data:`fleetplan.fileio.OUTPUT_SUFFIXES`) and hold an exclusive lock on it until the
    running command ends (click closes it with the command's context), so a second run writing the same file is
    refused at once instead of both exiting 0 and the last writer winning (:func:`fleetplan.fileio.claimed_outputs`;
    InputError naming the option). Call it before the command's work."""
    click.get_current_context().with_resource(claimed_outputs(paths, suffixes=suffixes))


def json_safe(obj: Any) -> Any:
    """``obj`` with every NaN or infinite float (inside dicts, lists and tuples too; tuples become lists) replaced
    by None, which JSON has (``json.dumps`` would write NaN/Infinity, which is not JSON)."""
    if isinstance(obj, float) and (math.isnan(obj) or math.isinf(obj)):
        return None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    return obj


def error_object(exc: Exception) -> dict[str, Any]:
    """The JSON object a command asked for JSON output prints on stdout when it stops on a user error:
    ``{"error": {"type", "message", "source", "row", "field", "value", "explanation", "suggestions"}}``.

    ``type`` is the error class ('InputError', 'UnknownNameError', 'InfeasibleError', 'UsageError', ...);
    ``message`` the whole one-line message the command prints on stderr (without 'Error: '); ``source``, ``row``,
    ``field`` and ``value`` are the :class:`~fleetplan.errors.InputError` attributes (None when the error has none;
    a click usage error names its option as ``field``); ``explanation``: the reasons a solve gave no plan (empty
    otherwise); ``suggestions``: close names of an unknown name (empty otherwise). A value JSON cannot hold is
    written as its text."""
    field = getattr(exc, "field", None) or getattr(exc, "option_name", None)  # click's NoSuchOption names it
    param = getattr(exc, "param", None)
    if field is None and isinstance(param, click.Parameter):
        field = (param.opts or [param.name or ""])[-1] if isinstance(param, click.Option) else (param.name or "")
        field = field.upper() if isinstance(param, click.Argument) else field
    message = exc.format_message() if isinstance(exc, click.ClickException) else str(exc)
    value = getattr(exc, "value", None)
    return {"error": json_safe({
        "type": type(exc).__name__, "message": message, "source": getattr(exc, "source", None),
        "row": getattr(exc, "row", None), "field": field,
        "value": value if value is None or isinstance(value, str | int | float | bool) else str(value),
        "explanation": list(getattr(exc, "explanation", None) or []),
        "suggestions": list(getattr(exc, "suggestions", None) or [])})}


#: Commands whose output is JSON whatever their options (their user errors are JSON objects on stdout too).
JSON_COMMANDS = frozenset({"export-history", "schema"})


def wants_json(command: click.Command, args: Sequence[str]) -> bool:
    """True when ``command`` prints JSON to stdout (:data:`JSON_COMMANDS` without ``--out FILE``) or ``args`` (its
    own arguments, as typed) ask for JSON output: a value given to an option of ``command`` whose choices include
    'json' (``-o json``, ``--format=json``, ``-ojson``) is 'json' (any of them: ``-o json --format table`` is an
    error a ``| jq`` pipeline should see as JSON)."""
    if command.name in JSON_COMMANDS:
        # ... unless that JSON goes to a file (--out FILE): then stdout carries nothing a pipeline reads, and the
        # error is said once, on stderr (a fresh user saw export-history's errors twice).
        out = None
        for i, a in enumerate(args):
            name, eq, val = a.partition("=")
            if name == "--out":
                out = val if eq else (args[i + 1] if i + 1 < len(args) else None)
        return out in (None, "-")
    opts = {o for p in command.params if isinstance(p, click.Option) and isinstance(p.type, click.Choice)
            and "json" in p.type.choices for o in p.opts}
    chosen: set[str | None] = set()
    for i, a in enumerate(args):
        if a == "--":
            break
        name, eq, val = a.partition("=")
        if name in opts:
            chosen.add(val if eq else (args[i + 1] if i + 1 < len(args) else None))
        elif a[:2] in opts and len(a) > 2 and not a.startswith("--"):  # -ojson
            chosen.add(a[2:])
    return "json" in chosen


def rows_csv(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """CSV text (header line, then one line per row, ``\\n`` line ends) of ``rows``, columns those of the first
    row; without rows the header of ``columns``, or nothing when ``columns`` is None. None, NaN and infinities are
    written as empty cells."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else list(columns or ()), lineterminator="\n")
    if rows or columns is not None:
        w.writeheader()
    for r in rows:
        w.writerow({k: "" if v is None else v for k, v in json_safe(r).items()})
    return buf.getvalue()


def stdout_console(piped_width: int | None) -> Console:
    """A rich console on stdout: the terminal's width, or ``piped_width`` characters when stdout is not a terminal
    (so piped and captured output does not depend on the terminal it ran in)."""
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else piped_width)


def table(title: str, columns: Sequence[str], *, right: Callable[[str], bool] | bool = False, fold: bool = True,
          **kw: Any) -> Table:
    """A rich table titled ``title`` with ``columns``, right-justified where ``right(column)`` (or all when
    ``right`` is True), long cells folded onto more lines when ``fold`` (else cut with an ellipsis); ``kw`` go to
    :class:`rich.table.Table` (e.g. ``title_justify="left"``)."""
    from rich.table import Table

    t = Table(title=title, **kw)
    for c in columns:
        justify: Literal["left", "right"] = "right" if (right(c) if callable(right) else right) else "left"
        if fold:
            t.add_column(c, justify=justify, overflow="fold")
        else:
            t.add_column(c, justify=justify)
    return t


@contextlib.contextmanager
def progress_status(enabled: bool = True) -> Iterator[Callable[[str], None]]:
    """A spinner on stderr that shows the current step and the elapsed time (rich); yields ``say(text)``."""
    if not enabled:
        yield lambda s: None
        return
    from rich.console import Console

    console = Console(stderr=True)
    t0 = time.perf_counter()
    with console.status("starting") as status:
        def say(text: str) -> None:
            status.update(f"{text} ({time.perf_counter() - t0:.0f} s)")

        yield say


@contextlib.contextmanager
def progress_bar(label: str, total: int, *, quiet: bool) -> Iterator[Callable[[int], None]]:
    """A rich progress bar on stderr over ``total`` tasks (none when ``quiet``); yields ``done(n)``, the callback
    an executor's ``map`` calls with the number of tasks finished."""
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), disable=quiet, transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.update(task, completed=n)


def map_with_progress(ex: Executor, fn: Callable[..., Any], items: Sequence[Any], *, label: str, quiet: bool,
                      common: Any = None, with_common: bool = False) -> list[Any]:
    """``ex.map(fn, items, ...)`` with a progress bar on stderr (none when ``quiet``); results in item order."""
    with progress_bar(f"{label} ({ex.describe()})", len(items), quiet=quiet) as done:
        return ex.map(fn, items, common=common, with_common=with_common, progress=done)
