"""PuLP's HiGHS interface (highspy), made safe to call many times in one process.

- HiGHS keeps one task scheduler per process, set up by the first solve with that solve's ``threads``; a later
  solve asking for a different number of threads fails at once with an error status (which PuLP reads as "not
  solved"). :class:`HiGHS` resets that scheduler before every solve.
- HiGHS prints a banner on stdout (file descriptor 1) when its first model is created, before any option can turn
  output off; :func:`silence_highs_banner` creates that first model with fd 1 pointed at /dev/null, so JSON or CSV
  written to stdout stays clean.
- A node budget (``mip_max_nodes``) ends with HiGHS's kSolutionLimit status, which PuLP 2.9 does not map (a
  KeyError): :meth:`HiGHS.findSolutionValues` reads it as PuLP reads a time limit (the incumbent, if any).
- No MIP start is passed: HiGHS 1.16's presolve values a start wrongly in its reduced space (see
  ``fleetplan.solvers.milp.solve_milp``), so the solvers compare the start with HiGHS's answer afterwards.
"""

from __future__ import annotations

import os
import sys
import threading

import pulp
from pulp import constants

_BANNER_SILENCED = False
_LOCK = threading.Lock()


def silence_highs_banner() -> None:
    """Create HiGHS's first model with stdout pointed at /dev/null (see the module docstring). Idempotent."""
    global _BANNER_SILENCED
    with _LOCK:
        if _BANNER_SILENCED:
            return
        import highspy

        sys.stdout.flush()
        saved = os.dup(1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 1)
            highspy.Highs()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            os.close(devnull)
        _BANNER_SILENCED = True


class HiGHS(pulp.HiGHS):
    """pulp.HiGHS plus a reset of HiGHS's process-wide scheduler before each solve."""

    def actualSolve(self, lp, **kwargs):  # noqa: N802 (PuLP's name)
        import highspy

        silence_highs_banner()
        with _LOCK:  # one HiGHS solve at a time per process: the scheduler is shared
            highspy.Highs.resetGlobalScheduler(True)
            return super().actualSolve(lp, **kwargs)

    def findSolutionValues(self, lp):  # noqa: N802 (PuLP's name)
        import highspy

        h = lp.solverModel
        if h.getModelStatus() != highspy.HighsModelStatus.kSolutionLimit:
            return super().findSolutionValues(lp)
        if h.getInfo().primal_solution_status != 2:  # 2: a feasible primal solution
            return constants.LpStatusNotSolved, constants.LpSolutionNoSolutionFound
        cols = list(h.getSolution().col_value)
        for var in lp.variables():
            var.varValue = cols[var.index]
        return constants.LpStatusOptimal, constants.LpSolutionIntegerFeasible
