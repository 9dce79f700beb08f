"""One entry point for every backend: ``solve(problem, backend=...)``."""

from __future__ import annotations

import time
from collections.abc import Callable

from fleetplan.errors import SolverError
from fleetplan.placement.baselines import greedy
from fleetplan.placement.explain import explain_infeasible, precheck
from fleetplan.placement.plan import Plan, Status

BACKENDS = ("highs", "cbc", "cpsat")

#: Share of the time limit the LP relaxation may use for the lower bound (it runs first).
LP_BOUND_SHARE = 0.35


def solve(problem, backend: str = "highs", *, time_limit_s: float = 60, threads: int | None = None,
          gap: float = 1e-4, warm_start: bool = True, lp_bound: bool = True,
          progress: Callable[[str], None] | None = None) -> Plan:
    """Solve a placement Problem with ``backend`` ('highs' default, 'cbc', or 'cpsat'); returns a new Plan.

    Steps, all within ``time_limit_s`` of wall time (model building included): prechecks (a certainly infeasible
    problem is explained without a solve); the greedy plan (it warm-starts the MILP as initial values and CP-SAT
    as hints); the LP relaxation from the same builder (``lp_bound``; at most LP_BOUND_SHARE of the time), kept
    as the lower bound when it beats the solver's own; the exact solve with the remaining time, ``threads`` and
    relative ``gap``. If the exact solve ends without beating the greedy plan, the greedy plan is returned as
    FEASIBLE with the bound. An INFEASIBLE answer carries the explanation in ``message``.
    Raises SolverError for an unknown backend.
    """
    if backend not in BACKENDS:
        raise SolverError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
    say = progress or (lambda s: None)
    t0 = time.perf_counter()
    deadline = t0 + time_limit_s
    reasons = precheck(problem)
    if reasons:
        return Plan(status=Status.INFEASIBLE, backend=backend, message="; ".join(reasons),
                    solve_time_s=time.perf_counter() - t0)
    start = None
    if warm_start:
        say("building the greedy warm start")
        g = greedy(problem)
        start = g if not g.message else None
    lb = None
    if lp_bound:
        say("solving the LP relaxation for a lower bound")
        from fleetplan.solvers.milp import solve_lp_bound

        lb = solve_lp_bound(problem, time_limit_s=max(1.0, LP_BOUND_SHARE * time_limit_s), threads=threads)
    remaining = max(1.0, deadline - time.perf_counter())
    say(f"solving with {backend} (at most {remaining:.0f} s)")
    if backend == "cpsat":
        from fleetplan.solvers.cpsat import solve_cpsat

        plan = solve_cpsat(problem, time_limit_s=remaining, threads=threads or 2, gap=gap, warm_start=start,
                           deadline=deadline)
    else:
        from fleetplan.solvers.milp import solve_milp

        plan = solve_milp(problem, backend=backend, time_limit_s=remaining, threads=threads, gap=gap,
                          warm_start=start, deadline=deadline)
    worse = plan.has_solution and start is not None and plan.objective_usd > start.objective_usd + 1e-9
    if start is not None and (plan.status is Status.NO_SOLUTION or worse):
        # The solver ran out of time without improving on its warm start (or without accepting it): keep the
        # better plan, with the solver's bound and an honest status.
        plan = Plan(replicas=start.replicas, shared=start.shared, status=Status.FEASIBLE, backend=backend,
                    objective_usd=start.objective_usd, bound_usd=plan.bound_usd, gap=None,
                    solve_time_s=plan.solve_time_s,
                    message=f"time limit {time_limit_s:g} s reached; the greedy warm start is the best plan found")
    if plan.status is Status.INFEASIBLE:
        say("explaining infeasibility")
        return Plan(status=Status.INFEASIBLE, backend=backend, solve_time_s=time.perf_counter() - t0,
                    message="; ".join(explain_infeasible(problem)))
    bound = plan.bound_usd
    if plan.has_solution:
        if lb is not None and (bound is None or lb > bound):
            bound = min(lb, plan.objective_usd)
        gap_ = None
        if bound is not None:
            gap_ = (plan.objective_usd - bound) / plan.objective_usd if plan.objective_usd > 0 else 0.0
        plan = Plan(replicas=plan.replicas, shared=plan.shared, status=plan.status, backend=plan.backend,
                    objective_usd=plan.objective_usd, bound_usd=bound, gap=gap_, solve_time_s=plan.solve_time_s,
                    message=plan.message)
    return Plan(replicas=plan.replicas, shared=plan.shared, status=plan.status, backend=plan.backend,
                objective_usd=plan.objective_usd, bound_usd=plan.bound_usd, gap=plan.gap,
                solve_time_s=time.perf_counter() - t0, message=plan.message)
