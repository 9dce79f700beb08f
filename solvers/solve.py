"""One entry point for every backend: ``solve(problem, backend=...)``, with one registry of backends."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from fleetplan.errors import SolverError, check_range
from fleetplan.placement.plan import Plan, Status, evaluate
from fleetplan.placement.validate import validate
from fleetplan.solvers.baselines import greedy
from fleetplan.solvers.common import SafetyStop, build_index, finish_plan, relative_gap
from fleetplan.solvers.cpsat import solve_cpsat
from fleetplan.solvers.decompose import (
    dissolve_shared,
    solve_by_windows,
    split_pays,
    window_bound,
    window_bounds,
)
from fleetplan.solvers.executor import Executor, make_executor
from fleetplan.solvers.explain import explain_infeasible, precheck
from fleetplan.solvers.milp import solve_best_effort, solve_lp_bound, solve_milp
from fleetplan.solvers.pop import default_parts, solve_pop

#: Solver threads when none are given: a fixed number, not this machine's core count, because HiGHS's and
#: CP-SAT's searches depend on it (the default scenario's exact model: 1 thread $899.08/day, 2 threads $898.59).
DEFAULT_THREADS = 2
#: Branch-and-bound nodes of the exact model per unit of effort, by backend. HiGHS: the default scenario closes
#: a 0.2% gap at its root and a few nodes (2 threads, about 7 CPU seconds); the budget binds on harder problems.
#: CBC's nodes are cheaper and it needs more of them (a planted 3 x 3 x 4 instance from its warm start: 5,941
#: nodes in 4 CPU seconds to prove the optimum).
EXACT_NODES = {"highs": 1000, "cbc": 10_000}
#: CP-SAT's deterministic time (its own work units) for the exact model per unit of effort (the default scenario:
#: 8 units took 10 CPU seconds on 2 workers).
EXACT_CPSAT_UNITS = 20.0
#: Branch-and-bound nodes of each one-window model of the fix-and-optimize pass and of repairs (HiGHS, CBC) per
#: unit of effort (the default scenario's windows close at their gap within 1 node each).
WINDOW_NODES = 200
#: CP-SAT's deterministic time of each one-window model per unit of effort.
WINDOW_CPSAT_UNITS = 1.0
#: Branch-and-bound nodes of each window of the per-window bound of a problem with request classes per unit of
#: effort.
BOUND_WINDOW_NODES = 200
#: The same for problems above MONOLITHIC_MAX_VARS, where the windows run without HiGHS's primal heuristics: the
#: root node (its cuts) gives nearly all of the bound (synthetic 200 models, window 0: $1,903.51 in 2.9 CPU s at
#: 1 node, $1,903.69 in 6.7 CPU s at 200 nodes; 2026-12-03), and 24 roots fit the time 200-node windows did not.
#: A root that overruns its share of the time is still stopped by it
#: (:func:`~fleetplan.solvers.decompose.window_bound`; the bound, not the plan, depends on it).
LARGE_BOUND_WINDOW_NODES = 1
#: The default effort (``solve(effort=...)``, ``--effort``), and the range accepted.
DEFAULT_EFFORT = 1.0
MIN_EFFORT, MAX_EFFORT = 0.01, 1000.0


@dataclass(frozen=True)
class Effort:
    """The deterministic work budget of :func:`solve`: each stage's budget (the constants above) × ``scale``,
    counted in work (branch-and-bound nodes, CP-SAT's deterministic time, windows and passes by count), never in
    seconds, so the same problem, options and effort give the same plan on an idle or a busy machine."""

    scale: float = DEFAULT_EFFORT

    def _nodes(self, per_unit: int) -> int:
        return max(1, round(per_unit * self.scale))

    def exact_nodes(self, backend: str) -> int:
        """Branch-and-bound nodes of the exact model with ``backend`` ('highs' or 'cbc')."""
        return self._nodes(EXACT_NODES[backend])

    @property
    def exact_cpsat_units(self) -> float:
        """CP-SAT's deterministic time of the exact model."""
        return EXACT_CPSAT_UNITS * self.scale

    @property
    def window_nodes(self) -> int:
        """Branch-and-bound nodes of each one-window model (HiGHS, CBC)."""
        return self._nodes(WINDOW_NODES)

    @property
    def window_cpsat_units(self) -> float:
        """CP-SAT's deterministic time of each one-window model."""
        return WINDOW_CPSAT_UNITS * self.scale

    @property
    def bound_window_nodes(self) -> int:
        """Branch-and-bound nodes of each window of the per-window bound."""
        return self._nodes(BOUND_WINDOW_NODES)

    @property
    def large_bound_window_nodes(self) -> int:
        """Branch-and-bound nodes of each window of the per-window bound above MONOLITHIC_MAX_VARS."""
        return self._nodes(LARGE_BOUND_WINDOW_NODES)

    def windows(self, stop: SafetyStop) -> dict:
        """The effort keywords of :func:`~fleetplan.solvers.decompose.solve_by_windows` under ``stop``."""
        return dict(max_nodes=self.window_nodes, deterministic_time=self.window_cpsat_units, stop=stop)


def _milp(backend: str) -> Callable[..., Plan]:
    def run(problem, *, effort: Effort, **kw) -> Plan:
        return solve_milp(problem, backend=backend, max_nodes=effort.exact_nodes(backend), **kw)
    return run


def _cpsat(problem, *, effort: Effort, threads=None, **kw) -> Plan:
    return solve_cpsat(problem, threads=threads or DEFAULT_THREADS, deterministic_time=effort.exact_cpsat_units,
                       **kw)


#: The placement backends: name -> exact solver taking (problem, effort=, time_limit_s=, threads=, gap=,
#: warm_start=, deadline=, extra_bounds=), bounded by the effort's budget for the exact model with ``deadline`` as
#: the wall-clock safety stop, and returning a Plan whose status comes from ``common.finish_plan``.
REGISTRY: dict[str, Callable[..., Plan]] = {"highs": _milp("highs"), "cbc": _milp("cbc"), "cpsat": _cpsat}
BACKENDS = tuple(REGISTRY)

#: Relative gap of each one-window model that repairs a greedy plan which does not fit the inventory.
BY_WINDOW_GAP = 0.005
#: The same on problems too large for the monolithic model, where that pass gives the plan: at 200 models x 960
#: GPUs on 2 idle cores its 24 windows close at 0.01% in 20 s ($51,914.72 a day; 0.1%: 20 s, $51,958.55; 0.5%:
#: 12 s, $52,032.35).
LARGE_WINDOW_GAP = 1e-4
#: Relative gap at which a window of the per-window bound stops: small, so each window runs until its node budget
#: or its share of the time (at 200 models the windows' bounds still rise after 15 s each; none closes at this gap).
BOUND_WINDOW_GAP = 1e-4
#: Above this many variables (estimated) the monolithic model is not built: at 200 models × 24 windows PuLP and
#: HiGHS need over 4 GiB and the whole time limit without improving on the fix-and-optimize plan.
MONOLITHIC_MAX_VARS = 150_000
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


def check_solve_options(time_limit_s: float, gap: float, *,
                        names: tuple[str, str] = ("time_limit_s", "gap")) -> tuple[float, float]:
    """(time_limit_s, gap) as finite floats, or InputError naming the option (``names``: how the caller's user
    gives the two, e.g. the CLI's ('--time-limit', '--gap'); the arguments' names by default) with its value and
    the range to give: the limit in [MIN_TIME_LIMIT_S, 86400] s, the gap in [0, 1)."""
    t = check_range(time_limit_s, field=names[0], low=MIN_TIME_LIMIT_S, high=86400, unit="s",
                    fix=f"give {names[0]} from {MIN_TIME_LIMIT_S:g} to 86400 seconds (one day)")
    g = check_range(gap, field=names[1], low=0.0, high=0.999999,
                    fix=f"give {names[1]} as a relative gap below 1, such as 0.005")
    return t, g


def check_effort(effort: float, *, name: str = "effort") -> float:
    """``effort`` as a finite float in [MIN_EFFORT, MAX_EFFORT], or InputError naming the option (``name``: how
    the caller's user gives it, e.g. the CLI's '--effort')."""
    return check_range(effort, field=name, low=MIN_EFFORT, high=MAX_EFFORT,
                       fix=f"give {name} from {MIN_EFFORT:g} to {MAX_EFFORT:g} (1 is the default budget)")


def _repair(problem, g: Plan, *, backend: str, threads: int | None, effort: Effort, stop: SafetyStop,
            notes: list[str], say: Callable[[str], None],
            otherwise: str = "the exact model starts without a warm start") -> Plan | None:
    """The greedy plan ``g`` (which does not fit the problem) repaired window by window within ``effort``'s
    window budgets, or None (with a note ending in ``otherwise``: what the caller does then) if the repair does not
    give a valid plan."""
    fixed = solve_by_windows(problem, g, backend=backend, threads=threads, gap=BY_WINDOW_GAP, progress=say,
                             **effort.windows(stop))
    # the greedy packing does not plan the spread (18): with one, that may be why its plan does not fit
    spread = any(m.spread_bounds for m in problem.models)
    what = "the inventory or the spread (which the greedy packing does not plan)" if spread else "the inventory"
    if fixed is not g and validate(problem, fixed, check_objective=False).ok:
        notes.append(f"the greedy plan did not fit {what} and was repaired window by window")
        return fixed
    if spread and g.shared:
        # The window models keep the greedy plan's shared GPUs fixed and plan the dedicated replicas for the rest
        # of the demand, so their spread covers the dedicated capacity only: a model whose shared GPU sits at one
        # site breaks (18) in the combined plan however its windows are solved (the default scenario at
        # max_share_per_site 0.6: all 24 windows solved, 72 spread violations combined). Without the shared
        # GPUs every window plans each model's whole capacity under the spread; the exact model may open shared
        # GPUs again.
        say("repairing the greedy plan window by window without its shared GPUs (the spread)")
        dedicated = replace(g, shared=())
        fixed = solve_by_windows(problem, dedicated, backend=backend, threads=threads, gap=BY_WINDOW_GAP,
                                 progress=say, **effort.windows(stop))
        if fixed is not dedicated and validate(problem, fixed, check_objective=False).ok:
            notes.append(f"the greedy plan did not fit {what}; with its shared GPUs fixed no window-by-window "
                         "repair could hold the spread (the window models do not count the shared GPUs' capacity "
                         "in it), so it was repaired window by window without them")
            return fixed
    notes.append(f"the greedy plan does not fit {what} and its window-by-window repair gave no valid plan: "
                 f"{otherwise}")
    return None


def _dissolve(problem, plan: Plan, stop: SafetyStop) -> Plan:
    """:func:`~fleetplan.solvers.decompose.dissolve_shared` of ``plan`` (its sweeps bounded by count), with
    ``stop`` as the safety stop (recorded when it passes during the sweeps)."""
    out = dissolve_shared(problem, plan, deadline=stop.deadline)
    if stop.passed():
        stop.cut("removing the shared GPUs that do not pay")
    return out


def _solve_large(problem, backend: str, *, size: int, t0: float, stop: SafetyStop, effort: Effort,
                 threads: int | None, gap: float, say: Callable[[str], None],
                 executor: Executor | None = None) -> Plan:
    """Problems above MONOLITHIC_MAX_VARS: the greedy plan without its shared GPUs that do not pay
    (:func:`~fleetplan.solvers.decompose.dissolve_shared`), improved (or first repaired) window by window, then,
    when that pass leaves shared GPUs that no longer pay, without them and improved window by window again; then
    the per-window bound; the window passes bounded by ``effort`` (nodes), ``stop`` only their safety stop; the
    per-window bound (each window's root node only, LARGE_BOUND_WINDOW_NODES, HiGHS's primal heuristics off; each
    window split into :func:`~fleetplan.solvers.decompose.bound_parts` when
    :func:`~fleetplan.solvers.decompose.split_pays`, and priced with its
    :func:`~fleetplan.solvers.decompose.start_prices`) in equal shares of the time left (no node budget bounds a
    root; only the bound and gap depend on it, and the message says when a share stopped a window). No monolithic
    model and no LP relaxation (building either alone overran 20 s at 200 models, and the per-window bound is
    stronger than the LP's). The windows' bounds run at once on ``executor`` (default: a local process pool of
    this machine's CPUs), each on one solver thread, so the bound does not depend on which executor ran it."""
    notes = [f"large problem ({size:,} variables > {MONOLITHIC_MAX_VARS:,}): greedy plan improved window by window "
             "with exact one-window models; no monolithic model"]
    say("building the greedy plan")
    g = greedy(problem)
    if g.message:
        say("repairing the greedy plan window by window")
        start = _repair(problem, g, backend=backend, threads=threads, effort=effort, stop=stop, notes=notes, say=say,
                        otherwise="this path has no other start (it builds no monolithic model)")
        if start is not None:
            start = _dissolve(problem, start, stop)
    else:
        say("removing the greedy plan's shared GPUs that do not pay")
        start = _dissolve(problem, g, stop)
        say("improving the plan window by window")
        start = solve_by_windows(problem, start, backend=backend, threads=threads, gap=LARGE_WINDOW_GAP,
                                 progress=say, **effort.windows(stop))
        again = _dissolve(problem, start, stop)
        if again is not start and not stop.passed():
            # the dedicated replicas changed around the shared GPUs: some no longer pay, and the windows
            # re-solved around the ones left find a cheaper plan (200 models: $51,919 -> $51,898 a day)
            say("improving the plan window by window again, with fewer shared GPUs")
            start = solve_by_windows(problem, again, backend=backend, threads=threads, gap=LARGE_WINDOW_GAP,
                                     progress=say, **effort.windows(stop))
    say("per-window bound: whether to split its windows")
    # the bound only: HiGHS's primal heuristics off and the root node alone (200 models: 2.9 CPU s per window
    # instead of 23-25)
    split = split_pays(problem, stop=stop, max_nodes=effort.large_bound_window_nodes, heuristics=False, starts=True)
    say("per-window bound")
    ex = executor or make_executor("process")  # the windows' bounds at once on this machine's CPUs
    try:
        bounds = {"per-window": window_bound(problem, deadline=stop.deadline, threads=threads,
                                             gap=BOUND_WINDOW_GAP, progress=say, executor=ex,
                                             max_nodes=effort.large_bound_window_nodes, stop=stop,
                                             heuristics=False, split=split, starts=True)}
    finally:
        if executor is None:
            ex.close()
    cut = stop.note()
    return finish_plan(problem, backend=backend, gap=gap, bounds=bounds, start=start,
                       time_limit_reached=cut is not None, time_limit_s=stop.time_limit_s,
                       solve_time_s=time.perf_counter() - t0, notes=(*notes, *([cut] if cut else [])),
                       backend_ran=False)


def solve(problem, backend: str = "highs", *, time_limit_s: float = 60, threads: int | None = None,
          gap: float = 1e-4, warm_start: bool = True, lp_bound: bool = True,
          progress: Callable[[str], None] | None = None, best_effort: bool = False, decompose: int | None = None,
          executor: Executor | None = None, partition: str = "shape", seed: int = 0,
          effort: float = DEFAULT_EFFORT) -> Plan:
    """Solve a placement Problem with ``backend`` (a name in REGISTRY); returns a new Plan.

    Reproducible: every stage is bounded by a deterministic budget of work, :class:`Effort` (``effort`` × the stage
    budgets EXACT_NODES, EXACT_CPSAT_UNITS, WINDOW_NODES, WINDOW_CPSAT_UNITS, BOUND_WINDOW_NODES,
    LARGE_BOUND_WINDOW_NODES; passes and sweeps by count) on ``threads`` solver threads (DEFAULT_THREADS when None:
    the searches depend on the thread count), with the solvers' seeds fixed, so the same problem and options give
    the same plan on an idle or a busy machine. ``time_limit_s`` of wall time (model building included, plus the
    last step's overrun) is only a safety stop: a stage it cuts or skips is named in the plan's message, which then
    says the plan may differ on another machine (:class:`~fleetplan.solvers.common.SafetyStop`).
    Steps: prechecks (a certainly infeasible problem is explained without a solve); the greedy plan (the warm
    start), repaired window by window if it does not fit the inventory; the LP relaxation (``lp_bound``; run to
    its end) as a lower bound; fix-and-optimize by windows from the greedy plan; then the exact model. Above
    MONOLITHIC_MAX_VARS (:func:`_solve_large`): the greedy plan improved or repaired window by window, then the
    per-window bound (the sum of each window's own proven bound, valid because the windows relax the all-day
    shared GPUs and the start costs) with the time left, in shares (so there the bound and gap, not the plan, may
    depend on the machine, and the message says so); ``warm_start`` and ``lp_bound`` do not apply there. Status,
    bound and message: :func:`fleetplan.solvers.common.finish_plan`.
    ``best_effort=True``: when the problem is infeasible (by the prechecks or the solver), the best-effort plan of
    :func:`fleetplan.solvers.milp.solve_best_effort` (most demand served by priority, then cost; unserved demand
    listed in the plan) with the time left (at least BEST_EFFORT_MIN_S); the MILP backends only (CP-SAT's model
    rounds capacities and has no unserved demand: with ``backend='cpsat'`` the best-effort stage runs HiGHS and
    the message says so). A problem that even best effort cannot plan (replica floors beyond the inventory) stays
    INFEASIBLE with its explanation. Its stages (one per priority class, then the cost) are bounded by the exact
    model's node budget, the time limit only their safety stop, like the rest.
    ``decompose=k`` (k >= 2): POP decomposition into k sub-fleets (:func:`fleetplan.solvers.pop.solve_pop`, with
    ``partition`` and ``seed``), its parts and per-window bounds run on ``executor`` (default: a local process
    pool of :func:`~fleetplan.solvers.executor.default_workers`); problems of POP_AUTO_MODELS models or more are
    decomposed by default (``decompose=None``; k from :func:`~fleetplan.solvers.pop.default_parts`), and
    ``decompose=1`` turns it off. Not with request classes, best effort or a spread (not decomposed by default).
    POP's one-window models are bounded by the window node budget, its stages' time shares only safety stops.
    Raises SolverError for an unknown backend, InputError for a time limit, gap or effort out of range (NaN
    included).
    """
    if backend not in REGISTRY:
        raise SolverError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
    time_limit_s, gap = check_solve_options(time_limit_s, gap)
    budget = Effort(check_effort(effort))
    threads = threads or DEFAULT_THREADS
    say = progress or (lambda s: None)
    t0 = time.perf_counter()
    deadline = t0 + time_limit_s
    stop = SafetyStop(deadline=deadline, time_limit_s=time_limit_s)
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
                            gap=gap, why=reasons, effort=budget)
    if reasons:
        return Plan(status=Status.INFEASIBLE, backend=backend, message="; ".join(reasons),
                    solve_time_s=time.perf_counter() - t0)
    spread = any(m.spread_bounds for m in problem.models)
    k = decompose if decompose is not None else (default_parts(problem) if len(problem.models) >= POP_AUTO_MODELS
                                                 and not problem.has_classes and not best_effort
                                                 and not problem.has_disaggregation and not spread else 1)
    if k != 1:
        plan = _decomposed(problem, k, backend, best_effort=best_effort, executor=executor, time_limit_s=time_limit_s,
                           threads=threads, gap=gap, partition=partition, seed=seed, deadline=deadline, say=say,
                           effort=budget)
        return replace(plan, solve_time_s=time.perf_counter() - t0)
    size = model_size(problem)
    if size > MONOLITHIC_MAX_VARS and not problem.has_disaggregation:
        return _solve_large(problem, backend, size=size, t0=t0, stop=stop, effort=budget, threads=threads, gap=gap,
                            say=say, executor=executor)
    return _solve_monolithic(problem, backend, t0=t0, stop=stop, effort=budget, threads=threads, gap=gap, say=say,
                             warm_start=warm_start, lp_bound=lp_bound, best_effort=best_effort)


def _decomposed(problem, k: int, backend: str, *, best_effort: bool, executor: Executor | None, time_limit_s: float,
                threads: int | None, gap: float, partition: str, seed: int, deadline: float,
                say: Callable[[str], None], effort: Effort) -> Plan:
    """The POP plan of ``problem`` in ``k`` sub-fleets on ``executor`` (default: a local process pool, closed after),
    each one-window model of its parts, seam pass and repair bounded by ``effort``'s window node budget
    (:attr:`Effort.window_nodes`), the time shares only safety stops;
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
                         partition=partition, seed=seed, deadline=deadline, progress=say,
                         max_nodes=effort.window_nodes)
    finally:
        if executor is None:
            ex.close()


def _solve_monolithic(problem, backend: str, *, t0: float, stop: SafetyStop, effort: Effort, threads: int | None,
                      gap: float, say: Callable[[str], None], warm_start: bool, lp_bound: bool,
                      best_effort: bool) -> Plan:
    """Problems up to MONOLITHIC_MAX_VARS (see :func:`solve`): the greedy warm start (repaired if it does not fit),
    the LP bound, fix-and-optimize by windows, then the exact model, each within ``effort``, ``stop`` only a safety
    stop; an infeasible answer is explained, or planned by best effort."""
    start = None
    notes: list[str] = []
    if warm_start:
        say("building the greedy warm start")
        g = greedy(problem)
        start = g if not g.message else None
        if start is None:
            say("repairing the greedy plan window by window")
            start = _repair(problem, g, backend=backend, threads=threads, effort=effort, stop=stop, notes=notes,
                            say=say)
    bounds: dict[str, float | None] = {}
    if lp_bound:
        say("solving the LP relaxation for a lower bound")
        if stop.passed():
            stop.cut("the LP bound before it started", bound_only=True)
        else:
            bounds["LP relaxation"] = solve_lp_bound(problem, time_limit_s=stop.left_s(), threads=threads,
                                                     deadline=stop.deadline)
            if bounds["LP relaxation"] is None and stop.passed():
                stop.cut("the LP bound", bound_only=True)
    each: tuple[float | None, ...] | None = None
    if problem.has_classes:
        # Request classes: the LP relaxation routes classes fractionally and is weak (a one-model 70B day with
        # 2 x 2 classes: LP $2,417.41/day, per-window bound $2,541.38, plan $2,543.84); the windows are coupled
        # only by starts (class models have no shared GPUs), so the sum of each window's proven bound is close.
        say("per-window bound (request classes)")
        if stop.passed():
            stop.cut("the per-window bound before it started", bound_only=True)
        else:
            each = window_bounds(problem, deadline=stop.deadline, threads=threads, gap=BOUND_WINDOW_GAP,
                                 progress=say, max_nodes=effort.bound_window_nodes, stop=stop)
            found = [b for b in each or () if b is not None]
            bounds["per-window"] = sum(found) if found else None
    if start is not None:
        say("improving the greedy plan window by window")
        # CP-SAT's window models stop once within the gap of their window's bound (HiGHS's, above)
        start = solve_by_windows(problem, start, backend=backend, threads=threads, progress=say,
                                 window_floors_usd=each, **effort.windows(stop))
    best = bounds.get("per-window")
    if start is not None and best is not None and best > 0:
        proven = relative_gap(evaluate(problem, start).total_usd, best)
        if proven is not None and proven <= gap:
            # the plan so far is already proven within the gap by the per-window bound (request classes, above):
            # the exact model could only confirm it
            notes.append(f"the window-by-window plan is within the requested gap of the bound: no {backend} model "
                         "was needed")
            return finish_plan(problem, backend=backend, gap=gap, bounds=bounds, start=start,
                               time_limit_s=stop.time_limit_s, solve_time_s=time.perf_counter() - t0,
                               notes=(*notes, *[n for n in [stop.note()] if n]), backend_ran=False)
    if stop.passed():
        stop.cut(f"the {backend} model before it started")
        return finish_plan(problem, backend=backend, gap=gap, bounds=bounds, start=start, time_limit_reached=True,
                           time_limit_s=stop.time_limit_s, solve_time_s=time.perf_counter() - t0,
                           notes=(*notes, *[n for n in [stop.note()] if n]), backend_ran=False)
    say(f"solving with {backend} (safety stop in {max(0.0, stop.left_s()):.0f} s)")
    plan = REGISTRY[backend](problem, effort=effort, time_limit_s=stop.time_limit_s, threads=threads, gap=gap,
                             warm_start=start, deadline=stop.deadline, extra_bounds=bounds)
    if plan.status is Status.INFEASIBLE and best_effort:
        say("demand exceeds the inventory: best effort by priority")
        return _best_effort(problem, backend, t0=t0, deadline=stop.deadline, time_limit_s=stop.time_limit_s,
                            threads=threads, gap=gap, why=["the solver proved the problem infeasible"],
                            effort=effort)
    if plan.status is Status.INFEASIBLE:
        say("explaining infeasibility")
        return Plan(status=Status.INFEASIBLE, backend=backend, solve_time_s=time.perf_counter() - t0,
                    message="; ".join(explain_infeasible(problem)))
    msg = "; ".join([*notes, *[n for n in [stop.note()] if n], plan.message])
    return replace(plan, solve_time_s=time.perf_counter() - t0, message=msg)


#: Least time, seconds, the best-effort stage gets after the exact solve proved the problem infeasible.
BEST_EFFORT_MIN_S = 2.0


def _best_effort(problem, backend: str, *, t0: float, deadline: float, time_limit_s: float, threads: int | None,
                 gap: float, why: list[str], effort: Effort) -> Plan:
    """The best-effort plan of an infeasible ``problem`` (see :func:`solve`), or INFEASIBLE with the explanation
    when even best effort has no plan. Each of its stages (one per priority class, then the cost) is bounded by
    the exact model's node budget of ``effort`` (:meth:`Effort.exact_nodes`), ``deadline`` being only the safety
    stop (at least BEST_EFFORT_MIN_S from now), so the plan does not depend on the machine's speed unless the
    message says the safety stop cut a stage."""
    milp = backend if backend in ("highs", "cbc") else "highs"
    deadline = max(deadline, time.perf_counter() + BEST_EFFORT_MIN_S)
    plan = solve_best_effort(problem, backend=milp, time_limit_s=time_limit_s, threads=threads, gap=gap,
                             deadline=deadline, max_nodes=effort.exact_nodes(milp))
    if plan.status is Status.INFEASIBLE:
        return Plan(status=Status.INFEASIBLE, backend=backend, solve_time_s=time.perf_counter() - t0,
                    message="; ".join(explain_infeasible(problem)))
    notes = [f"infeasible as given ({'; '.join(why)})"]
    if milp != backend:
        notes.append(f"best effort is solved by the {milp} MILP ({backend} has no unserved-demand model)")
    return replace(plan, solve_time_s=time.perf_counter() - t0, message="; ".join([*notes, plan.message]))
