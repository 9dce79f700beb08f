"""The outcome of a solve, shared by the placement planner and the tenant solvers."""

from __future__ import annotations

import enum


class Status(enum.Enum):
    """Outcome of a solve: the one status enum of the planner and the tenant solvers."""

    OPTIMAL = "optimal"
    """A proven bound on the same problem lies within the requested relative gap of the returned objective."""
    FEASIBLE = "feasible"
    """A feasible answer with a proven bound outside the requested gap; ``gap`` says how far it may be."""
    INFEASIBLE = "infeasible"
    """Proven that no plan meets every constraint; ``message`` explains which model, window or site."""
    NO_SOLUTION = "no_solution"
    """No feasible plan found within the time limit, and infeasibility not proven either."""
    HEURISTIC = "heuristic"
    """Made by a heuristic or baseline, or a solver answer with no proven bound: no optimality claim."""
