"""One entry point for every backend: ``solve(problem, backend=...)``."""

from __future__ import annotations

import time
from collections.abc import Callable

from fleetplan.errors import SolverError
from fleetplan.placement.baselines import greedy
from fleetplan.placement.explain import explain_infeasible, precheck
from fleetplan.placement.plan import Plan, Status

BACKENDS = ("highs", "cbc", "cpsat")


def solve(problem, backend: str = "highs", *, time_limit_s: float = 60, threads: int | None = None,
          gap: float = 1e-4, warm_start: bool = True, lp_bound: bool = True,
          progress: Callable[[str], None] | None = None) -> Plan:
    """Solve a placement Problem with ``backend`` ('highs' default, 'cbc', or 'cpsat'); returns a new Plan.

    Steps: prechecks (a certainly infeasible problem is explained without a solve); the greedy plan (it
    warm-starts the MILP as initial values and CP-SAT as hints); the exact solve under ``time_limit_s`` with
    ``threads`` and relative ``gap``; the LP relaxation's objective from the same builder (``lp_bound``),
    reported as a lower bound when it is better than the solver's own bound. An INFEASIBLE answer carries the
    explanation in ``message``. Raises SolverError for an unknown backend.
    """
    if backend not in BACKENDS:
        raise SolverError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
    say = progress or (lambda s: None)
    t0 = time.perf_counter()
    reasons = precheck(problem)
    if reasons:
        return Plan(status=Status.INFEASIBLE, backend=backend, message="; ".join(reasons),
                    solve_time_s=time.perf_counter() - t0)
    start = None
    if warm_start:
        say("building the greedy warm start")
        g = greedy(problem)
        start = g if not g.message else None
    say(f"solving with {backend} (time limit {time_limit_s:g} s)")
    if backend == "cpsat":
        from fleetplan.solvers.cpsat import solve_cpsat

        plan = solve_cpsat(problem, time_limit_s=time_limit_s, threads=threads or 2, gap=gap, warm_start=start)
    else:
        from fleetplan.solvers.milp import solve_milp

        plan = solve_milp(problem, backend=backend, time_limit_s=time_limit_s, threads=threads, gap=gap,
                          warm_start=start)
    if plan.status is Status.INFEASIBLE:
        say("explaining infeasibility")
        return Plan(status=Status.INFEASIBLE, backend=backend, solve_time_s=time.perf_counter() - t0,
                    message="; ".join(explain_infeasible(problem)))
    if plan.has_solution and lp_bound:
        say("solving the LP relaxation for a lower bound")
        from fleetplan.solvers.milp import solve_lp_bound

        lb = solve_lp_bound(problem, time_limit_s=max(5.0, time_limit_s / 4), threads=threads)
        if lb is not None and (plan.bound_usd is None or lb > plan.bound_usd):
            bound = min(lb, plan.objective_usd)
            gap_ = (plan.objective_usd - bound) / plan.objective_usd if plan.objective_usd > 0 else 0.0
            plan = Plan(replicas=plan.replicas, shared=plan.shared, status=plan.status, backend=plan.backend,
                        objective_usd=plan.objective_usd, bound_usd=bound, gap=gap_,
                        solve_time_s=plan.solve_time_s, message=plan.message)
    return Plan(replicas=plan.replicas, shared=plan.shared, status=plan.status, backend=plan.backend,
                objective_usd=plan.objective_usd, bound_usd=plan.bound_usd, gap=plan.gap,
                solve_time_s=time.perf_counter() - t0, message=plan.message)
