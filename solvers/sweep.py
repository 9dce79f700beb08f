"""Scenario sweeps (``fleetplan sweep``): plan every cell of a grid of scenario changes on an executor.

A cell is the base scenario with ``{variable: value}`` applied (:func:`fleetplan.scenario.sweep.apply_sweep`),
planned by :func:`fleetplan.solvers.solve.solve` within its own time limit, and re-checked by
:func:`fleetplan.placement.validate.validate`. Cells are independent tasks of an
:class:`~fleetplan.solvers.executor.Executor`; each takes its settings (backend, time limit, threads, gap) as
arguments, so the rows are the same on every executor when each cell's solve ends by itself (not at its time limit;
a cell stopped by its time limit says so in its status and message, and its answer may depend on the machine's
load). CP-SAT with more than one thread is not deterministic: use ``threads=1`` (the default) for reproducible rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from fleetplan.costmodels.split import grid
from fleetplan.errors import InputError
from fleetplan.outputs.planio import per_day_factor
from fleetplan.placement.plan import evaluate
from fleetplan.placement.validate import validate
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.read import Scenario
from fleetplan.scenario.sweep import PriceKey, apply_sweep, base_prices
from fleetplan.solvers.executor import Executor
from fleetplan.solvers.solve import check_solve_options, solve

#: Columns of a sweep row after the variables (see :func:`sweep_cell`).
ROW_COLUMNS = ("status", "cost_usd_per_day", "gpu_hours_per_day", "lower_bound_usd_per_day", "gap", "valid",
               "solve_s", "message")


@dataclass(frozen=True)
class SweepSettings:
    """How every cell is planned: ``backend`` (a name in :data:`fleetplan.solvers.solve.REGISTRY`),
    ``time_limit_s`` per cell, solver ``threads`` per cell (1: reproducible), relative ``gap``."""

    backend: str = "highs"
    time_limit_s: float = 30.0
    threads: int = 1
    gap: float = 0.005


@dataclass(frozen=True)
class SweepBase:
    """What every cell shares (sent once to each executor): the base scenario, its pools' prices and the
    settings."""

    scenario: Scenario
    prices: dict[PriceKey, float]
    settings: SweepSettings


def sweep_cell(base: SweepBase, cell: dict[str, float]) -> dict:
    """Plan one cell. Returns {variable: value, ...} followed by :data:`ROW_COLUMNS`:

    status (a :class:`~fleetplan.placement.status.Status` value, or 'input error' when the changed scenario cannot
    be planned, e.g. no GPU option meets a tightened target), cost_usd_per_day and gpu_hours_per_day (of the plan,
    scaled to 24 h), lower_bound_usd_per_day and gap (proven, else None), valid (the independent check of the
    plan; None without a plan), solve_s (wall time of the solve; differs between runs), message.
    """
    s = base.settings
    row: dict = dict(cell)
    try:
        problem = build_problem(apply_sweep(base.scenario, cell, base.prices))
    except InputError as exc:
        row.update(dict.fromkeys(ROW_COLUMNS))
        row.update(status="input error", message=str(exc))
        return row
    plan = solve(problem, s.backend, time_limit_s=s.time_limit_s, threads=s.threads, gap=s.gap)
    f = per_day_factor(problem)
    row["status"] = plan.status.value
    if plan.has_solution:
        ev = evaluate(problem, plan)
        report = validate(problem, plan)
        row.update(cost_usd_per_day=ev.total_usd * f, gpu_hours_per_day=ev.gpu_hours * f)
        row["valid"] = report.ok
        msg = plan.message if report.ok else "FAILS the independent check: " + "; ".join(report.violations[:3])
    else:
        row.update(cost_usd_per_day=None, gpu_hours_per_day=None, valid=None)
        msg = plan.message
    row["lower_bound_usd_per_day"] = plan.bound_usd * f if plan.bound_usd is not None else None
    row["gap"] = plan.gap
    row["solve_s"] = plan.solve_time_s
    row["message"] = msg
    return row


def check_cells(scenario: Scenario, variables: Mapping[str, Sequence[float]], prices: dict[PriceKey, float]) -> None:
    """Apply every value of every variable alone to ``scenario`` (reading its demand again), so a bad value fails
    before any solve; raises the InputError naming it."""
    for name, values in variables.items():
        for v in values:
            apply_sweep(scenario, {name: v}, prices)


def run_sweep(scenario: Scenario, variables: Mapping[str, Sequence[float]], ex: Executor, settings: SweepSettings,
              *, progress: Callable[[int], None] | None = None) -> list[dict]:
    """Plan every cell of the grid ``variables`` ({variable: values}, first variable slowest) on ``ex``;
    ``progress`` is called with the number of cells done. Returns the rows of :func:`sweep_cell` in grid order.
    Raises InputError for a bad setting or value (before any solve).
    """
    check_solve_options(settings.time_limit_s, settings.gap)
    prices = base_prices(build_problem(scenario))
    check_cells(scenario, variables, prices)
    cells = grid(dict(variables))
    base = SweepBase(scenario, prices, settings)
    return ex.map(sweep_cell, cells, common=base, with_common=True, progress=progress)


__all__ = ["ROW_COLUMNS", "SweepBase", "SweepSettings", "check_cells", "run_sweep", "sweep_cell"]
