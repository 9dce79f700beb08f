"""One entry point for every backend: ``solve(problem, backend=...)``."""

from __future__ import annotations

import time
from collections.abc import Callable

from fleetplan.errors import SolverError
from fleetplan.placement.plan import Plan, Status
from fleetplan.solvers.baselines import greedy
from fleetplan.solvers.common import build_index
from fleetplan.solvers.cpsat import solve_cpsat
from fleetplan.solvers.decompose import solve_by_windows
from fleetplan.solvers.explain import explain_infeasible, precheck
from fleetplan.solvers.milp import solve_lp_bound, solve_milp

BACKENDS = ("highs", "cbc", "cpsat")

#: Share of the time limit the LP relaxation may use for the lower bound (it runs first).
LP_BOUND_SHARE = 0.35
#: Share of the time limit the fix-and-optimize pass by windows may use before the monolithic model.
BY_WINDOW_SHARE = 0.3
#: Above this many variables (estimated) the monolithic model is not built: at 200 models × 24 windows PuLP and
#: HiGHS need over 4 GiB and the whole time limit without improving on the fix-and-optimize plan.
MONOLITHIC_MAX_VARS = 150_000


def model_size(problem) -> int:
    """Estimated variables of the monolithic model: replicas and starts per option and window, and the shared
    GPUs' residency and served-rate variables (candidate bins × candidate residents × windows)."""

    idx = build_index(problem)
    shared = sum(len(r) for r in idx.residents.values()) * (problem.n_windows + 1)
    return 2 * len(idx.options) * problem.n_windows + shared


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

        lb = solve_lp_bound(problem, time_limit_s=max(1.0, LP_BOUND_SHARE * time_limit_s), threads=threads)
    size = model_size(problem)
    if start is not None:

        say("improving the greedy plan window by window")
        share = 1.0 if size > MONOLITHIC_MAX_VARS else BY_WINDOW_SHARE
        budget_end = min(deadline, time.perf_counter() + share * max(1.0, deadline - time.perf_counter()))
        improved = solve_by_windows(problem, start, backend=backend, threads=threads, deadline=budget_end,
                                    progress=say)
        if improved is not start:
            start = improved
    if size > MONOLITHIC_MAX_VARS:
        if start is None:
            return Plan(status=Status.NO_SOLUTION, backend=backend, solve_time_s=time.perf_counter() - t0,
                        message=f"the problem is too large for the exact model ({size:,} variables) and the greedy "
                                "plan does not fit the inventory")
        bound = min(lb, start.objective_usd) if lb is not None else None
        gap_ = ((start.objective_usd - bound) / start.objective_usd
                if bound is not None and start.objective_usd else None)
        return Plan(replicas=start.replicas, shared=start.shared, status=Status.FEASIBLE, backend=backend,
                    objective_usd=start.objective_usd, bound_usd=bound, gap=gap_,
                    solve_time_s=time.perf_counter() - t0,
                    message=f"large problem ({size:,} variables > {MONOLITHIC_MAX_VARS:,}): greedy plan improved "
                            "window by window with exact one-window models; the bound is the LP relaxation's")
    remaining = max(1.0, deadline - time.perf_counter())
    say(f"solving with {backend} (at most {remaining:.0f} s)")
    if backend == "cpsat":

        plan = solve_cpsat(problem, time_limit_s=remaining, threads=threads or 2, gap=gap, warm_start=start,
                           deadline=deadline)
    else:

        plan = solve_milp(problem, backend=backend, time_limit_s=remaining, threads=threads, gap=gap,
                          warm_start=start, deadline=deadline)
    worse = plan.has_solution and start is not None and plan.objective_usd > start.objective_usd + 1e-9
    if start is not None and (plan.status is Status.NO_SOLUTION or worse):
        # The solver ran out of time without improving on its warm start (or without accepting it): keep the
        # better plan, with the solver's bound and an honest status.
        plan = Plan(replicas=start.replicas, shared=start.shared, status=Status.FEASIBLE, backend=backend,
                    objective_usd=start.objective_usd, bound_usd=plan.bound_usd, gap=None,
                    solve_time_s=plan.solve_time_s,
                    message=f"time limit {time_limit_s:g} s reached; the warm start ({start.backend}) is the best "
                            "plan found")
    if plan.status is Status.INFEASIBLE:
        say("explaining infeasibility")
        return Plan(status=Status.INFEASIBLE, backend=backend, solve_time_s=time.perf_counter() - t0,
                    message="; ".join(explain_infeasible(problem)))
    # CP-SAT's own bound is a bound on its integer-scaled model (capacities rounded down, demand up), which can
    # exceed the exact problem's optimum; only the LP relaxation's bound (exact data) is reported for it.
    bound = plan.bound_usd if backend != "cpsat" or lb is None else None
    if plan.has_solution:
        if lb is not None and (bound is None or lb > bound):
            bound = lb
        if bound is not None:
            bound = min(bound, plan.objective_usd)
        gap_ = None
        if bound is not None:
            gap_ = (plan.objective_usd - bound) / plan.objective_usd if plan.objective_usd > 0 else 0.0
        plan = Plan(replicas=plan.replicas, shared=plan.shared, status=plan.status, backend=plan.backend,
                    objective_usd=plan.objective_usd, bound_usd=bound, gap=gap_, solve_time_s=plan.solve_time_s,
                    message=plan.message)
    return Plan(replicas=plan.replicas, shared=plan.shared, status=plan.status, backend=plan.backend,
                objective_usd=plan.objective_usd, bound_usd=plan.bound_usd, gap=plan.gap,
                solve_time_s=time.perf_counter() - t0, message=plan.message)
