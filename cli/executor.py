"""The ``--executor`` and ``--ray-address`` options of the commands that fan out (``ledger whatif``, ``whatif``,
``sweep``, ``allocate``), and a progress bar over an executor's ``map``. The executors themselves:
:mod:`fleetplan.solvers.executor`."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import click

from fleetplan.solvers.executor import EXECUTORS, Executor


def executor_options(f: Callable) -> Callable:
    """Add ``--executor process|ray`` and ``--ray-address`` (click keyword arguments ``executor``,
    ``ray_address``)."""
    f = click.option("--ray-address", default=None, metavar="auto|ray://HOST:PORT",
                     help="With --executor ray: the cluster to use ('auto': the running one); default: start a local "
                          "Ray instance with --workers CPUs.")(f)
    return click.option("--executor", type=click.Choice(EXECUTORS), default="process", show_default=True,
                        help="Where the cells run: local processes (--workers), or Ray (pip install "
                             "'fleetplan[ray]'). Results are the same on both.")(f)


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
