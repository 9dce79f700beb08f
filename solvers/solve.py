"""One entry point for every backend: ``solve(problem, backend=...)``, with one registry of backends."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from fleetplan.errors import SolverError, check_range
from fleetplan.placement.plan import Plan, Status
from fleetplan.placement.validate import validate
from fleetplan.solvers.baselines import greedy
from fleetplan.solvers.common import build_index, finish_plan
from fleetplan.solvers.cpsat import solve_cpsat
from fleetplan.solvers.decompose import dissolve_shared, solve_by_windows, window_bound
from fleetplan.solvers.executor import Executor, make_executor
from fleetplan.solvers.explain import explain_infeasible, precheck
from fleetplan.solvers.milp import solve_best_effort, solve_lp_bound, solve_milp
from fleetplan.solvers.pop import default_parts, solve_pop


def _milp(backend: str) -> Callable[..., Plan]:
    def run(problem, **kw) -> Plan:
        return solve_milp(problem, backend=backend, **kw)
    return run


def _cpsat(problem, *, threads=None, **kw) -> Plan:
    return solve_cpsat(problem, threads=threads or 2, **kw)


#: The placement backends: name -> exact solver taking (problem, time_limit_s=, threads=, gap=, warm_start=,
#: deadline=, extra_bounds=) and returning a Plan whose status comes from ``common.finish_plan``.
REGISTRY: dict[str, Callable[..., Plan]] = {"highs": _milp("highs"), "cbc": _milp("cbc"), "cpsat": _cpsat}
BACKENDS = tuple(REGISTRY)

#: Share of the time limit the LP relaxation may use for the lower bound (it runs first).
LP_BOUND_SHARE = 0.35
#: Share of the time limit the fix-and-optimize pass by windows may use before the monolithic model.
BY_WINDOW_SHARE = 0.3
#: Share of the time limit the per-window bound may use on problems too large for the monolithic model.
WINDOW_BOUND_SHARE = 0.5
#: Share of the time left that repairing a greedy plan that does not fit may use (a plan comes before a bound).
REPAIR_SHARE = 0.7
#: Relative gap of each one-window model of the fix-and-optimize pass (its time share usually stops it first).
BY_WINDOW_GAP = 0.005
#: The same on problems too large for the monolithic model, where that pass gives the plan: at 200 models x 960
#: GPUs on 2 idle cores its 24 windows close at 0.01% in 20 s ($51,914.72 a day; 0.1%: 20 s, $51,958.55; 0.5%:
#: 12 s, $52,032.35).
LARGE_WINDOW_GAP = 1e-4
#: Relative gap at which a window of the per-window bound stops: small, so each window uses its whole share of the
#: time (at 200 models the windows' bounds still rise after 15 s each; none closes at this gap).
BOUND_WINDOW_GAP = 1e-4
#: Above this many variables (estimated) the monolithic model is not built: at 200 models × 24 windows PuLP and
#: HiGHS need over 4 GiB and the whole time limit without improving on the fix-and-optimize plan.
MONOLITHIC_MAX_VARS = 150_000
#: Seconds to build the monolithic model per variable (model_size), measured at 50 models on 2 busy cores; the
#: model is not built when less than twice that (build and hand-over to the solver) is left.
BUILD_S_PER_VAR = 4e-5
#: From this many models on, ``solve`` decomposes into sub-fleets by default (:mod:`fleetplan.solvers.pop`): at 500
#: models x 4,992 GPUs the window-by-window path ends 11.7% from its bound in 300 s, POP (2 parts) within 5%.
POP_AUTO_MODELS = 500
#: Shortest time limit accepted, seconds (model building alone takes longer on all but tiny problems).
MIN_TIME_LIMIT_S = 0.5


def model_size(problem) -> int:
    """Estimated variables of the monolithic model: replicas and starts per option and window, and the shared
    GPUs' residency and served-rate variables (candidate bins × candidate residents × windows)."""

    idx = build_index(problem)
    shared = sum(len(r) for r in idx.residents.values()) * (problem.n_windows + 1)
    return 2 * len(idx.options) * problem.n_windows + shared


def check_solve_options(time_limit_s: float, gap: float) -> tuple[float, float]:
    """(time_limit_s, gap) as finite floats, or InputError naming the option: the limit in
    [MIN_TIME_LIMIT_S, 86400] s, the gap in [0, 1)."""
    t = check_range(time_limit_s, field="time limit", low=MIN_TIME_LIMIT_S, high=86400, unit="s",
                    fix=f"give a time limit from {MIN_TIME_LIMIT_S:g} s to 86400 s (one day)")
    g = check_range(gap, field="gap", low=0.0, high=0.999999, fix="give a relative gap such as 0.005")
    return t, g


def _repair(problem, g: Plan, *, backend: str, threads: int | None, deadline: float, notes: list[str],
            say: Callable[[str], None]) -> Plan | None:
    """The greedy plan ``g`` (which does not fit the problem) repaired window by window within ``deadline``, or
    None (with a note) if the repair does not give a valid plan in time."""
    fixed = solve_by_windows(problem, g, backend=backend, threads=threads, deadline=deadline, gap=BY_WINDOW_GAP,
                             progress=say)
    # the greedy packing does not plan the spread (18): with one, that may be why its plan does not fit
    what = ("the inventory or the spread (which the greedy packing does not plan)"
            if any(m.spread_bounds for m in problem.models) else "the inventory")
    if fixed is not g and validate(problem, fixed, check_objective=False).ok:
        notes.append(f"the greedy plan did not fit {what} and was repaired window by window")
        return fixed
    notes.append(f"the greedy plan does not fit {what} and its window-by-window repair gave no valid plan "
                 "in the time it had")
    return None


def _solve_large(problem, backend: str, *, size: int, t0: float, deadline: float, time_limit_s: float,
                 threads: int | None, gap: float, say: Callable[[str], None],
                 executor: Executor | None = None) -> Plan:
    """Problems above MONOLITHIC_MAX_VARS: the greedy plan without its shared GPUs that do not pay
    (:func:`~fleetplan.solvers.decompose.dissolve_shared`), improved (or first repaired) window by window with
    WINDOW_BOUND_SHARE of the time left (REPAIR_SHARE when it does not fit), then the per-window bound with the
    rest; no monolithic model and no LP relaxation (building either alone overran 20 s at 200 models, and the
    per-window bound is stronger than the LP's). The windows' bounds run at once on ``executor`` (default: a local
    process pool of this machine's CPUs)."""
    notes = [f"large problem ({size:,} variables > {MONOLITHIC_MAX_VARS:,}): greedy plan improved window by window "
             "with exact one-window models; no monolithic model"]
    say("building the greedy plan")
    g = greedy(problem)
    left = max(0.0, deadline - time.perf_counter())
    if g.message:
        say("repairing the greedy plan window by window")
        start = _repair(problem, g, backend=backend, threads=threads, deadline=time.perf_counter()
                        + REPAIR_SHARE * left, notes=notes, say=say)
        if start is not None:
            start = dissolve_shared(problem, start, deadline=deadline)
    else:
        say("removing the greedy plan's shared GPUs that do not pay")
        start = dissolve_shared(problem, g, deadline=deadline)
        say("improving the plan window by window")
        end = time.perf_counter() + (1 - WINDOW_BOUND_SHARE) * left
        t = time.perf_counter()
        start = solve_by_windows(problem, start, backend=backend, threads=threads, gap=LARGE_WINDOW_GAP,
                                 deadline=end, progress=say)
        took = time.perf_counter() - t
        again = dissolve_shared(problem, start, deadline=end)
        if again is not start and end - time.perf_counter() > took:
            # the dedicated replicas changed around the shared GPUs: some no longer pay, and the windows
            # re-solved around the ones left find a cheaper plan (200 models: $51,919 -> $51,898 a day)
            say("improving the plan window by window again, with fewer shared GPUs")
            start = solve_by_windows(problem, again, backend=backend, threads=threads, gap=LARGE_WINDOW_GAP,
                                     deadline=end, progress=say)
    say("per-window bound")
    ex = executor or make_executor("process")  # the windows' bounds at once on this machine's CPUs
    try:
        bounds = {"per-window": window_bound(problem, deadline=deadline, threads=threads, gap=BOUND_WINDOW_GAP,
                                             progress=say, executor=ex)}
    finally:
        if executor is None:
            ex.close()
    return finish_plan(problem, backend=backend, gap=gap, bounds=bounds, start=start,
                       time_limit_reached=time.perf_counter() >= deadline - 0.2, time_limit_s=time_limit_s,
                       solve_time_s=time.perf_counter() - t0, notes=tuple(notes), backend_ran=False)


def solve(problem, backend: str = "highs", *, time_limit_s: float = 60, threads: int | None = None,
          gap: float = 1e-4, warm_start: bool = True, lp_bound: bool = True,
          progress: Callable[[str], None] | None = None, best_effort: bool = False, decompose: int | None = None,
          executor: Executor | None = None, partition: str = "shape", seed: int = 0) -> Plan:
    """Solve a placement Problem with ``backend`` (a name in REGISTRY); returns a new Plan.

    Steps, all within ``time_limit_s`` of wall time (model building included, plus the last step's overrun):
    prechecks (a certainly infeasible problem is explained without a solve); the greedy plan (the warm start),
    repaired window by window if it does not fit the inventory; the LP relaxation (``lp_bound``; at most
    LP_BOUND_SHARE of the time) as a lower bound; fix-and-optimize by windows from the greedy plan; then the
    exact model with the remaining time (unless too little is left to build it). Above MONOLITHIC_MAX_VARS
    (:func:`_solve_large`): the greedy plan improved or repaired window by window, then the per-window bound
    (the sum of each window's own proven bound, valid because the windows relax the all-day shared GPUs and the
    start costs); ``warm_start`` and ``lp_bound`` do not apply there. Status, bound and message:
    :func:`fleetplan.solvers.common.finish_plan`.
    ``best_effort=True``: when the problem is infeasible (by the prechecks or the solver), the best-effort plan of
    :func:`fleetplan.solvers.milp.solve_best_effort` (most demand served by priority, then cost; unserved demand
    listed in the plan) with the time left (at least BEST_EFFORT_MIN_S); the MILP backends only (CP-SAT's model
    rounds capacities and has no unserved demand: with ``backend='cpsat'`` the best-effort stage runs HiGHS and
    the message says so). A problem that even best effort cannot plan (replica floors beyond the inventory) stays
    INFEASIBLE with its explanation.
    ``decompose=k`` (k >= 2): POP decomposition into k sub-fleets (:func:`fleetplan.solvers.pop.solve_pop`, with
    ``partition`` and ``seed``), its parts and per-window bounds run on ``executor`` (default: a local process
    pool of :func:`~fleetplan.solvers.executor.default_workers`); problems of POP_AUTO_MODELS models or more are
    decomposed by default (``decompose=None``; k from :func:`~fleetplan.solvers.pop.default_parts`), and
    ``decompose=1`` turns it off. Not with request classes, best effort or a spread (not decomposed by default).
    Raises SolverError for an unknown backend, InputError for a time limit or gap out of range (NaN included).
    """
    if backend not in REGISTRY:
        raise SolverError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
    time_limit_s, gap = check_solve_options(time_limit_s, gap)
    say = progress or (lambda s: None)
    t0 = time.perf_counter()
    deadline = t0 + time_limit_s
    if problem.has_disaggregation:
        # Prefill and decode pools (constraint (13) with the KV egress bands) are in the MILP only: the greedy warm
        # start, the per-window paths and CP-SAT know whole replicas, and the prechecks count colocated capacity.
        if backend not in ("highs", "cbc"):
            raise SolverError(f"backend {backend!r} does not plan disaggregated prefill/decode pools; use highs or "
                              "cbc, or set disaggregation: {enabled: false} in the scenario")
        warm_start = False
    reasons = [] if problem.has_disaggregation else precheck(problem)
    if reasons and best_effort:
        say("demand exceeds the inventory: best effort by priority")
        return _best_effort(problem, backend, t0=t0, deadline=deadline, time_limit_s=time_limit_s, threads=threads,
                            gap=gap, why=reasons)
    if reasons:
        return Plan(status=Status.INFEASIBLE, backend=backend, message="; ".join(reasons),
                    solve_time_s=time.perf_counter() - t0)
    spread = any(m.spread_bounds for m in problem.models)
    k = decompose if decompose is not None else (default_parts(problem) if len(problem.models) >= POP_AUTO_MODELS
                                                 and not problem.has_classes and not best_effort
                                                 and not problem.has_disaggregation and not spread else 1)
    if k != 1:
        plan = _decomposed(problem, k, backend, best_effort=best_effort, executor=executor, time_limit_s=time_limit_s,
                           threads=threads, gap=gap, partition=partition, seed=seed, deadline=deadline, say=say)
        return replace(plan, solve_time_s=time.perf_counter() - t0)
    size = model_size(problem)
    if size > MONOLITHIC_MAX_VARS and not problem.has_disaggregation:
        return _solve_large(problem, backend, size=size, t0=t0, deadline=deadline, time_limit_s=time_limit_s,
                            threads=threads, gap=gap, say=say, executor=executor)
    return _solve_monolithic(problem, backend, size=size, t0=t0, deadline=deadline, time_limit_s=time_limit_s,
                             threads=threads, gap=gap, say=say, warm_start=warm_start, lp_bound=lp_bound,
                             best_effort=best_effort)


def _decomposed(problem, k: int, backend: str, *, best_effort: bool, executor: Executor | None, time_limit_s: float,
                threads: int | None, gap: float, partition: str, seed: int, deadline: float,
                say: Callable[[str], None]) -> Plan:
    """The POP plan of ``problem`` in ``k`` sub-fleets on ``executor`` (default: a local process pool, closed after);
    SolverError for request classes, best effort, disaggregated pools or a spread (POP splits each pool's nodes
    between the parts, so a part may not have the sites a model's spread needs)."""
    if problem.has_classes or best_effort or problem.has_disaggregation:
        raise SolverError("--decompose does not support request classes, --best-effort or disaggregated "
                          "prefill/decode pools yet; plan without it")
    if any(m.spread_bounds for m in problem.models):
        raise SolverError("--decompose does not plan a spread (options.spread / models[].spread: constraint (18)) "
                          "yet: it splits each pool between sub-fleets; plan without --decompose, or without the "
                          "spread")
    say(f"decomposing into {k} sub-fleets")
    ex = executor or make_executor("process")
    try:
        return solve_pop(problem, k, ex, backend=backend, time_limit_s=time_limit_s, threads=threads, gap=gap,
                         partition=partition, seed=seed, deadline=deadline, progress=say)
    finally:
        if executor is None:
            ex.close()


def _solve_monolithic(problem, backend: str, *, size: int, t0: float, deadline: float, time_limit_s: float,
                      threads: int | None, gap: float, say: Callable[[str], None], warm_start: bool, lp_bound: bool,
                      best_effort: bool) -> Plan:
    """Problems up to MONOLITHIC_MAX_VARS (see :func:`solve`): the greedy warm start (repaired if it does not fit),
    the LP bound, fix-and-optimize by windows, then the exact model with the time left; an infeasible answer is
    explained, or planned by best effort."""
    start = None
    notes: list[str] = []
    if warm_start:
        say("building the greedy warm start")
        g = greedy(problem)
        start = g if not g.message else None
        if start is None:
            say("repairing the greedy plan window by window")
            start = _repair(problem, g, backend=backend, threads=threads, deadline=time.perf_counter()
                            + BY_WINDOW_SHARE * max(0.0, deadline - time.perf_counter()), notes=notes, say=say)
    bounds: dict[str, float | None] = {}
    if lp_bound:
        say("solving the LP relaxation for a lower bound")
        left = deadline - time.perf_counter()
        if left > 0.2:
            bounds["LP relaxation"] = solve_lp_bound(problem, time_limit_s=left, threads=threads,
                                                     deadline=time.perf_counter() + LP_BOUND_SHARE * left)
    if start is not None:
        say("improving the greedy plan window by window")
        budget_end = min(deadline, time.perf_counter() + BY_WINDOW_SHARE * max(0.0, deadline - time.perf_counter()))
        start = solve_by_windows(problem, start, backend=backend, threads=threads, deadline=budget_end,
                                 progress=say)
    left = deadline - time.perf_counter()
    if left < 2 * BUILD_S_PER_VAR * size + 0.1:
        # building and handing over the model would use up the time left: the plan so far is the answer
        notes.append(f"no time left for the {backend} model ({left:.1f} s left; building it takes about "
                     f"{BUILD_S_PER_VAR * size:.1f} s)")
        return finish_plan(problem, backend=backend, gap=gap, bounds=bounds, start=start, time_limit_reached=True,
                           time_limit_s=time_limit_s, solve_time_s=time.perf_counter() - t0, notes=tuple(notes),
                           backend_ran=False)
    say(f"solving with {backend} (at most {max(0.0, deadline - time.perf_counter()):.0f} s)")
    plan = REGISTRY[backend](problem, time_limit_s=time_limit_s, threads=threads, gap=gap, warm_start=start,
                             deadline=deadline, extra_bounds=bounds)
    if plan.status is Status.INFEASIBLE and best_effort:
        say("demand exceeds the inventory: best effort by priority")
        return _best_effort(problem, backend, t0=t0, deadline=deadline, time_limit_s=time_limit_s, threads=threads,
                            gap=gap, why=["the solver proved the problem infeasible"])
    if plan.status is Status.INFEASIBLE:
        say("explaining infeasibility")
        return Plan(status=Status.INFEASIBLE, backend=backend, solve_time_s=time.perf_counter() - t0,
                    message="; ".join(explain_infeasible(problem)))
    msg = "; ".join([*notes, plan.message]) if notes else plan.message
    return replace(plan, solve_time_s=time.perf_counter() - t0, message=msg)


#: Least time, seconds, the best-effort stage gets after the exact solve proved the problem infeasible.
BEST_EFFORT_MIN_S = 2.0


def _best_effort(problem, backend: str, *, t0: float, deadline: float, time_limit_s: float, threads: int | None,
                 gap: float, why: list[str]) -> Plan:
    """The best-effort plan of an infeasible ``problem`` (see :func:`solve`), or INFEASIBLE with the explanation
    when even best effort has no plan."""
    milp = backend if backend in ("highs", "cbc") else "highs"
    deadline = max(deadline, time.perf_counter() + BEST_EFFORT_MIN_S)
    plan = solve_best_effort(problem, backend=milp, time_limit_s=time_limit_s, threads=threads, gap=gap,
                             deadline=deadline)
    if plan.status is Status.INFEASIBLE:
        return Plan(status=Status.INFEASIBLE, backend=backend, solve_time_s=time.perf_counter() - t0,
                    message="; ".join(explain_infeasible(problem)))
    notes = [f"infeasible as given ({'; '.join(why)})"]
    if milp != backend:
        notes.append(f"best effort is solved by the {milp} MILP ({backend} has no unserved-demand model)")
    return replace(plan, solve_time_s=time.perf_counter() - t0, message="; ".join([*notes, plan.message]))
