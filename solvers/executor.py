"""Executors: where fleetplan's fan-outs run — in this process, in local worker processes, or on a Ray cluster.

Every fan-out in fleetplan goes through :meth:`Executor.map`: the what-if grids of ``fleetplan ledger whatif``
(:func:`fleetplan.cli.whatif.run_cells`), the cells of ``fleetplan sweep`` (:mod:`fleetplan.solvers.sweep`), the
Pareto anchors and points of the tenant solver (:func:`fleetplan.solvers.tenants.allocate._pareto`). ``map`` returns the
results in the order of its items whichever executor ran them and however the tasks finished, so a fan-out gives
the same answer to the cent on every executor provided its tasks are deterministic: a task takes everything it
needs (its time limit, its solver threads, its seed from :func:`spawn_seeds`) as arguments, never from the clock,
the worker or a global random state.

Executors:
    - ``process`` (:class:`LocalExecutor`, the default): ``concurrent.futures.ProcessPoolExecutor`` with
      ``workers`` processes; with one worker (or one item) the tasks run in this process, without pickling.
    - ``ray`` (:class:`RayExecutor`): Ray tasks (1 CPU each) on the cluster at ``address`` (``auto``: the running
      cluster; ``ray://host:10001``: a remote one through Ray Client), or on a local Ray instance started with
      ``workers`` CPUs, listening on the loopback interface only, when no address is given. Ray is an optional
      extra: ``pip install 'fleetplan[ray]'``. On a remote cluster the workers need fleetplan installed (the same
      version; e.g. a ``runtime_env`` with ``pip: [fleetplan]``), as tasks are sent as references to fleetplan's
      functions.

How a solver fans out (the per-window hook of :mod:`fleetplan.solvers.decompose`, and the decomposition into
sub-fleets, will use it this way): write the unit of work as a module-level function of one picklable argument
(e.g. ``_solve_window(task)`` with ``task = (window problem, backend, time_limit_s, threads, gap, warm start)``),
give every task a budget fixed before the fan-out (``time_limit_s / n`` of the deadline left, not the time left when
the task happens to start, which would differ between executors), pass data every task shares (the Problem) as
``common`` so Ray stores it once, and combine the results in item order::

    with make_executor("ray", address="auto") as ex:
        plans = ex.map(_solve_window, [(w, per_window_s) for w in range(W)], common=problem)

A task's error reaches the caller as itself (a fleetplan error keeps its one-line message), whichever executor ran
it. Executors are context managers: ``close()`` stops the processes, or the Ray instance if this executor started
it (a cluster it only connected to keeps running).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

from fleetplan.errors import InputError

#: The executors ``make_executor`` builds, by name (``--executor``).
EXECUTORS = ("process", "ray")
#: The extra that installs Ray (named in the error when it is missing).
RAY_EXTRA = "fleetplan[ray]"


def default_workers() -> int:
    """Worker processes when none are asked for: the CPUs of this machine, at most 4 (≥ 1)."""
    return max(1, min(4, os.cpu_count() or 1))


def spawn_seeds(seed: int, n: int) -> list[int]:
    """``n`` independent 32-bit seeds derived from ``seed`` (numpy ``SeedSequence.spawn``), one per task, so a
    randomized fan-out gives the same answers on every executor and with any number of workers."""
    import numpy as np

    return [int(s.generate_state(1)[0]) for s in np.random.SeedSequence(seed).spawn(n)]


def _call(fn: Callable[..., Any], common: Any, item: Any, with_common: bool) -> Any:
    return fn(common, item) if with_common else fn(item)


class Executor:
    """Runs ``fn`` over items somewhere and returns the results in item order (see the module docstring).

    Attributes:
        kind: 'process' or 'ray'.
        workers: tasks run at once (for Ray on an existing cluster: the cluster's CPUs decide; None).
    """

    kind = "serial"
    workers: int | None = 1

    def map(self, fn: Callable[..., Any], items: Sequence[Any], *, common: Any = None, with_common: bool = False,
            progress: Callable[[int], None] | None = None) -> list[Any]:
        """``[fn(item) for item in items]`` (or ``fn(common, item)`` with ``with_common``), run by this executor.

        Args:
            fn: a module-level function (workers receive it by reference), deterministic in its arguments.
            items: one picklable argument per task.
            common: data every task shares: stored once in Ray (pickled with each task by the process pool).
            with_common: call ``fn(common, item)`` instead of ``fn(item)``.
            progress: called with the number of finished tasks after each one finishes (in finishing order).

        Returns the results in the order of ``items``. Raises the first failing task's exception (in item order
        for the in-process path, in finishing order otherwise).
        """
        out = []
        for i, item in enumerate(items):
            out.append(_call(fn, common, item, with_common))
            if progress:
                progress(i + 1)
        return out

    def close(self) -> None:
        """Release the workers (idempotent)."""

    def describe(self) -> str:
        """A short label for reports, e.g. 'process pool (2 workers)'."""
        return "this process"

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalExecutor(Executor):
    """Local worker processes (``concurrent.futures.ProcessPoolExecutor``), started at the first fan-out with more
    than one item and reused until :meth:`close`; with ``workers`` = 1 the tasks run in this process."""

    kind = "process"

    def __init__(self, workers: int | None = None) -> None:
        w = default_workers() if workers is None else workers
        if not isinstance(w, int) or w < 1:
            raise InputError(f"workers must be a whole number ≥ 1, got {workers!r}", field="workers", value=workers)
        self.workers = w
        self._pool: ProcessPoolExecutor | None = None

    def map(self, fn: Callable[..., Any], items: Sequence[Any], *, common: Any = None, with_common: bool = False,
            progress: Callable[[int], None] | None = None) -> list[Any]:
        if self.workers == 1 or len(items) <= 1:
            return super().map(fn, items, common=common, with_common=with_common, progress=progress)
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.workers)
        futs: dict[Future, int] = {self._pool.submit(_call, fn, common, item, with_common): i
                                   for i, item in enumerate(items)}
        out: list[Any] = [None] * len(items)
        pending = set(futs)
        done_count = 0
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in sorted(done, key=futs.__getitem__):
                    out[futs[f]] = f.result()
                    done_count += 1
                    if progress:
                        progress(done_count)
        except BaseException:
            for f in pending:
                f.cancel()
            raise
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def describe(self) -> str:
        return "this process" if self.workers == 1 else f"process pool ({self.workers} workers)"


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise InputError(f"--executor ray needs Ray, which is not installed: pip install '{RAY_EXTRA}'",
                         field="executor", value="ray") from None
    return ray


class RayExecutor(Executor):
    """Ray tasks (one CPU each). Connects to ``address`` ('auto' or 'ray://host:port'), or uses the Ray instance
    this process already initialised, or starts a local one with ``workers`` CPUs on 127.0.0.1 (no dashboard);
    only a local instance it started is shut down by :meth:`close`.

    Raises InputError when Ray is not installed (naming the extra) or cannot start or connect (with Ray's reason).
    """

    kind = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None) -> None:
        ray = _import_ray()
        self._ray = ray
        self.address = address
        self._started = False
        if workers is not None and (not isinstance(workers, int) or workers < 1):
            raise InputError(f"workers must be a whole number ≥ 1, got {workers!r}", field="workers", value=workers)
        if ray.is_initialized():
            self.workers = workers
            return
        import logging

        kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                              "logging_level": logging.ERROR, "configure_logging": True}
        try:
            if address:
                ray.init(address=address, **({} if address.startswith("ray://") else kw))
                self.workers = workers
            else:
                self.workers = workers or default_workers()
                ray.init(num_cpus=self.workers, _node_ip_address="127.0.0.1", **kw)
        except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError, ... with its reason
            where = f"the Ray cluster at {address}" if address else "a local Ray instance"
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise InputError(f"could not start or reach {where}: {first}", field="ray-address",
                             value=address) from None
        self._started = True

    def map(self, fn: Callable[..., Any], items: Sequence[Any], *, common: Any = None, with_common: bool = False,
            progress: Callable[[int], None] | None = None) -> list[Any]:
        ray = self._ray
        if not items:
            return []
        task = ray.remote(num_cpus=1, max_retries=0)(_call)
        shared = ray.put(common) if with_common else None
        refs = [task.remote(fn, shared, item, with_common) for item in items]
        index = {ref: i for i, ref in enumerate(refs)}
        out: list[Any] = [None] * len(items)
        pending = list(refs)
        done_count = 0
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    out[index[ref]] = self._get(ref)
                    done_count += 1
                    if progress:
                        progress(done_count)
        except BaseException:
            for ref in pending:
                ray.cancel(ref)
            raise
        return out

    def _get(self, ref: Any) -> Any:
        try:
            return self._ray.get(ref)
        except self._ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from None  # the task's own error (a fleetplan error keeps its one-line message)
            raise

    def close(self) -> None:
        if self._started:
            self._ray.shutdown()
            self._started = False

    def describe(self) -> str:
        if self.address:
            return f"Ray cluster at {self.address}"
        return f"local Ray ({self.workers} workers)" if self.workers else "Ray"


def make_executor(kind: str = "process", *, workers: int | None = None, address: str | None = None) -> Executor:
    """The executor ``kind`` names ('process' or 'ray'; see the module docstring).

    Args:
        workers: processes (process pool) or CPUs of a local Ray instance; default :func:`default_workers`.
        address: Ray only: 'auto' or 'ray://host:port'; None starts a local instance.

    Raises InputError for an unknown kind, an address without Ray, Ray missing or unable to start.
    """
    if kind == "process":
        if address:
            raise InputError(f"--ray-address {address!r} needs --executor ray", field="ray-address", value=address)
        return LocalExecutor(workers)
    if kind == "ray":
        return RayExecutor(address, workers)
    raise InputError(f"unknown executor {kind!r}; use one of {', '.join(EXECUTORS)}", field="executor", value=kind)


__all__ = ["EXECUTORS", "RAY_EXTRA", "Executor", "LocalExecutor", "RayExecutor", "default_workers", "make_executor",
           "spawn_seeds"]
