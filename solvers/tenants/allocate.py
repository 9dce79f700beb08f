"""Tenant allocation in its three modes (weighted, lexicographic, Pareto) over either backend: the MILP of
:mod:`fleetplan.solvers.tenants.milp` (PuLP + HiGHS) or the CP-SAT model of :mod:`fleetplan.solvers.tenants.cpsat`
(same notation and numbered constraints; see the MILP module's docstring for the model and the objectives)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from fleetplan.errors import InfeasibleError, InputError, SolverError
from fleetplan.placement.status import Status
from fleetplan.placement.tenants import (
    OBJECTIVE_SENSE,
    Allocation,
    AllocationError,
    Objectives,
    SolveOutcome,
    TenantProblem,
    evaluate_allocation,
    explain_guarantees,
    validate_allocation,
)
from fleetplan.solvers.executor import Executor
from fleetplan.solvers.tenants.baselines import packed_greedy
from fleetplan.solvers.tenants.cpsat import CpSatModel
from fleetplan.solvers.tenants.milp import TenantMilpModel

MODES = ("weighted", "lexicographic", "pareto")
BACKENDS = ("highs", "cpsat")
DEFAULT_WEIGHTS = {"utilization": 1.0, "isolation": 1.0, "sla": 1.0}
DEFAULT_ORDER = ("sla", "utilization", "isolation")
#: Weight of the secondary terms that break ties (keeps s tight and avoids weakly dominated points).
TIE_BREAK = 1e-3

#: Effort budget of one solve of the node-level model, per backend, at ``effort`` 1: HiGHS branch-and-bound nodes
#: (``mip_max_nodes``) and CP-SAT deterministic time (its own work units). Measured on the shipped
#: tenants_default.yaml (24 one-window weighted solves, 1 thread; docs/tenants.md): CP-SAT proves every window
#: optimal within 0.21 units (2.6 CPU s in all); HiGHS needs up to 6,705 nodes per window to prove one (58 CPU s
#: in all); at the budget below it stops at a 4.0% gap after 13.5 CPU s, with the allocation and bound it has.
NODES_PER_SOLVE = 500
CPSAT_UNITS_PER_SOLVE = 1.0


def _clock() -> float:
    """The wall clock the safety stop reads (epoch seconds, comparable across the executor's processes); a test
    replaces it to stand for a slow or loaded machine."""
    return time.time()


def wall_clock() -> float:
    """Now, on the clock of the safety stop (seconds): what a ``deadline`` of :func:`solve_allocation` counts in."""
    return _clock()


class TenantModel(Protocol):
    """What the allocation loops ask of a backend's model (:class:`TenantMilpModel`, :class:`CpSatModel`)."""

    def set_objective(self, coefs: dict[str, float]) -> None: ...

    def add_limit(self, name: str, value: float) -> None: ...

    #: True when the last solve was ended by its wall-clock safety stop.
    cut_by_clock: bool

    def solve(self, time_limit_s: float, threads: int = 1, budget: float | None = None) -> SolveOutcome: ...


class TenantModelFactory(Protocol):
    """A backend's model class: builds the model of ``problem`` over ``windows``."""

    def __call__(self, problem: TenantProblem, windows: Sequence[int], *, margin: bool = True) -> TenantModel: ...


@dataclass
class AllocationResult:
    """The answer of :func:`solve_allocation`.

    Attributes:
        allocation: the chosen allocation (for Pareto, the point with the best weighted score).
        objectives: its objective values (from the independent checker).
        mode, backend: how it was produced.
        pareto: for mode 'pareto', the non-dominated points [(Allocation, Objectives)] by increasing isolation.
        stages: for mode 'lexicographic', [(objective, optimum found, bound kept)] in order.
        notes: what the wall-clock safety stop cut, and which windows hold the greedy packing's answer because no
            solve of theirs found one (empty: every solve ran to its effort budget or a proof).
    """

    allocation: Allocation
    objectives: Objectives
    mode: str
    backend: str
    pareto: list[tuple[Allocation, Objectives]] = field(default_factory=list)
    stages: list[tuple[str, float, float]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def normalisers(problem: TenantProblem) -> dict[str, float]:
    """Divisors that bring each objective to about 0..1: utilization 1; isolation N·W (node-windows);
    sla Σ weight·sla_target·demand (the weighted SLA demand; 1 if zero)."""
    sla_den = sum(t.weight * t.sla_target * d for t in problem.tenants for d in t.demand_gpus)
    return {"utilization": 1.0, "isolation": float(len(problem.nodes) * problem.n_windows),
            "sla": sla_den if sla_den > 0 else 1.0}


def weighted_score(problem: TenantProblem, obj: Objectives, weights: dict[str, float]) -> float:
    """Σ_k weight_k · sense_k · objective_k / normaliser_k (higher is better)."""
    norm = normalisers(problem)
    return sum(weights.get(k, 0.0) * OBJECTIVE_SENSE[k] * obj.value(k) / norm[k] for k in OBJECTIVE_SENSE)



def _factory(backend: str) -> TenantModelFactory:
    if backend == "highs":
        return TenantMilpModel
    if backend == "cpsat":
        return CpSatModel
    raise InputError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}", field="backend", value=backend)


def _combine(outs: list[SolveOutcome]) -> tuple[Status, dict, float | None, float | None, float]:
    for o in outs:
        if o.status in (Status.INFEASIBLE, Status.NO_SOLUTION):
            return o.status, {}, None, None, sum(x.solve_s for x in outs)
    gpus: dict = {}
    for o in outs:
        gpus.update(o.gpus)
    # A bound on the sum needs a bound on every part: one part without a proven bound leaves the whole without.
    parts = [o.bound for o in outs]
    bound = sum(b for b in parts if b is not None) if all(b is not None for b in parts) else None
    known = all(o.objective is not None for o in outs)
    obj = sum(o.objective or 0.0 for o in outs) if known else None
    if all(o.status is Status.OPTIMAL for o in outs):
        status = Status.OPTIMAL
    else:  # a feasible answer has a bound to be measured against; without one it is a heuristic answer
        status = Status.FEASIBLE if bound is not None and known else Status.HEURISTIC
    return status, gpus, obj, bound, sum(o.solve_s for o in outs)


#: Relative float tolerance of the solvers (feasibility ~1e-7): a bound this close below the objective is noise.
_BOUND_TOLERANCE = 1e-6


def _gap(obj: float | None, bound: float | None) -> float | None:
    """Relative gap (bound − objective) / |objective| of the maximized score, or None without a bound. A bound
    below the objective beyond float tolerance cannot come from a correct solver: raised as a defect, not hidden."""
    if obj is None or bound is None:
        return None
    scale = max(abs(obj), 1e-9)
    if bound < obj - _BOUND_TOLERANCE * max(1.0, abs(obj)):
        raise SolverError(f"defect: the proven bound {bound:.9g} lies below the allocation's score {obj:.9g} "
                          "(a maximization); please report this with the tenants file")
    return max(bound - obj, 0.0) / scale  # within float tolerance: a proven optimum


def _raise_infeasible(what: str) -> None:
    raise InfeasibleError(f"{what}: the guarantees fit the pool only without interference headroom on shared "
                          "nodes; give more nodes, lower quotas, or run with the margin off")


def _budget(backend: str, effort: float) -> float:
    """The budget of one solve of ``backend``'s model at ``effort`` × the default: HiGHS nodes (whole, ≥ 1) or
    CP-SAT deterministic time units."""
    if backend == "highs":
        return float(max(1, round(effort * NODES_PER_SOLVE)))
    return effort * CPSAT_UNITS_PER_SOLVE


def _budget_text(backend: str, budget: float) -> str:
    if backend == "highs":
        return f"{budget:,.0f} branch-and-bound nodes"
    return f"{budget:.3g} units of CP-SAT deterministic time"


def _timed_solve(model: TenantModel, deadline: float, threads: int, budget: float
                 ) -> tuple[SolveOutcome, str | None]:
    """Solve ``model`` within its effort ``budget``, the wall clock left until ``deadline`` as a safety stop.
    Returns the outcome and None, or 'not started' (the stop had fired: NO_SOLUTION without a solve) or 'cut'
    (the stop ended the search before the budget)."""
    left = deadline - _clock()
    if left <= 0:
        return SolveOutcome(Status.NO_SOLUTION, {}, {}, None, None, 0.0), "not started"
    o = model.solve(left, threads, budget)
    return o, ("cut" if model.cut_by_clock else None)


@dataclass
class _Run:
    """What every mode of :func:`solve_allocation` shares: the problem, the backend's model class, the groups of
    windows solved apart, the normalisers, limits, the progress callback, the backend's name, the executor of
    the fan-outs (in this process by default), each solve's effort budget, the safety stop's deadline (a
    :func:`wall_clock` value) and the limit it came from; and what the stop cut and where the greedy packing stands
    in (for :meth:`notes`)."""

    problem: TenantProblem
    Model: TenantModelFactory
    groups: list[list[int]]
    decompose: bool
    norm: dict[str, float]
    margin: bool
    threads: int
    say: Callable[[str], None]
    backend: str = "highs"
    executor: Executor = field(default_factory=Executor)
    budget: float = 1.0
    deadline: float = math.inf
    time_limit_s: float = math.inf
    cut: list[str] = field(default_factory=list)
    filled: list[str] = field(default_factory=list)
    _greedy: Allocation | None = None

    def model(self, windows: list[int]) -> TenantModel:
        return self.Model(self.problem, windows, margin=self.margin)

    def where(self, g: list[int]) -> str:
        return f"window {g[0]}" if self.decompose else "all windows"

    def solve(self, model: TenantModel, what: str) -> SolveOutcome:
        """One solve within the run's budget and safety stop; a solve the stop cut or never started is noted."""
        o, cut = _timed_solve(model, self.deadline, self.threads, self.budget)
        self.record(what, cut)
        return o

    def record(self, what: str, cut: str | None) -> None:
        if cut == "cut":
            self.cut.append(what)
        elif cut == "not started":
            self.cut.append(what + " (not started)")

    def fallback(self, g: list[int], what: str, status: Status) -> SolveOutcome:
        """The greedy packing's answer (:func:`packed_greedy`) in the windows of group ``g``, for a group whose
        solves found nothing (NO_SOLUTION: the safety stop, or a budget too small); InfeasibleError for a group
        proven infeasible; SolverError when the greedy packing misses a guarantee (then nothing valid is known)."""
        if status is Status.INFEASIBLE:
            _raise_infeasible(what)
        if self._greedy is None:
            self._greedy = packed_greedy(self.problem)
        greedy = self._greedy
        try:
            validate_allocation(self.problem, greedy)
        except AllocationError:
            stop = f" (--time-limit {self.time_limit_s:g} s)" if self.cut else ""
            raise SolverError(f"{what}: no allocation found within the effort budget or before the safety stop"
                              f"{stop}, and the greedy packing misses a guarantee; raise --time-limit or --effort"
                              ) from None
        ws = set(g)
        gpus = {k: v for k, v in greedy.gpus.items() if k[1] in ws}
        ob = evaluate_allocation(self.problem, Allocation("part", gpus, margin=True))
        # evaluate counts the other windows as unserved: their SLA shortfall is taken off.
        other = sum(t.weight * t.sla_target * t.demand_gpus[w] for t in self.problem.tenants
                    for w in range(self.problem.n_windows) if w not in ws)
        values = {"utilization": ob.utilization, "isolation": ob.isolation, "sla": ob.sla - other}
        self.filled.append(self.where(g))
        return SolveOutcome(Status.HEURISTIC, gpus, values, None, None, 0.0)

    def notes(self) -> list[str]:
        """What the safety stop cut, and where the greedy packing's answer stands in, as sentences."""
        out = []
        if self.cut:
            shown = ", ".join(self.cut[:6]) + (f" and {len(self.cut) - 6} more" if len(self.cut) > 6 else "")
            out.append(f"the wall-clock safety stop (--time-limit {self.time_limit_s:g} s) cut {len(self.cut)} "
                       f"solve(s) before their effort budget of {_budget_text(self.backend, self.budget)} each: "
                       f"{shown}; this allocation may differ on another machine or under another load")
        if self.filled:
            out.append(f"no solve found an allocation for {', '.join(dict.fromkeys(self.filled))}: the greedy "
                       "packing's GPUs stand there (no bound, status heuristic)")
        return out

    def finish(self, outs: list[SolveOutcome], policy: str, *, one_objective: bool = True
               ) -> tuple[Allocation, Objectives]:
        """The allocation the outcomes of all groups make together, re-checked by the independent checker.
        ``one_objective``: every outcome solved the same scalar objective; otherwise their objectives and bounds do
        not add up to a bound on anything, so the allocation has no bound and no gap (status HEURISTIC)."""
        status, gpus, obj, bound, dt = _combine(outs)
        if not one_objective:
            bound = None
            status = Status.HEURISTIC
        alloc = Allocation(policy, gpus, margin=self.margin, status=status, bound=bound, gap=_gap(obj, bound),
                           solve_s=dt)
        return alloc, validate_allocation(self.problem, alloc)


def _check_arguments(mode: str, weights: dict[str, float], order: tuple[str, ...], tolerance: float,
                     points: int) -> None:
    if mode not in MODES:
        raise InputError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}", field="mode", value=mode)
    for k, v in weights.items():
        if k not in OBJECTIVE_SENSE:
            raise InputError(f"unknown objective {k!r} in weights; use {', '.join(OBJECTIVE_SENSE)}", field="weights")
        if not isinstance(v, int | float) or v < 0 or not math.isfinite(v):
            raise InputError(f"weight of {k} must be a number ≥ 0, got {v!r}", field="weights", value=v)
    if weights and mode == "weighted" and not any(v > 0 for v in weights.values()):
        # Every objective weighted 0 left only the tie-break terms, reported "optimal" as if it were an answer.
        raise InputError("every objective weight is 0, so the weighted objective is empty: give at least one weight "
                         f"> 0 among {', '.join(OBJECTIVE_SENSE)}", field="weights", value=dict(weights))
    if sorted(order) != sorted(set(order)) or any(o not in OBJECTIVE_SENSE for o in order):
        raise InputError(f"order {list(order)} must list distinct objectives among {', '.join(OBJECTIVE_SENSE)}",
                         field="order")
    if not 0 <= tolerance <= 1:
        raise InputError(f"tolerance {tolerance} must be within 0..1 (relative)", field="tolerance")
    if mode == "pareto" and not 2 <= points <= 50:
        raise InputError(f"points must be 2..50, got {points}", field="points", value=points)


def solve_allocation(problem: TenantProblem, *, mode: str = "weighted", backend: str = "highs",
                     weights: dict[str, float] | None = None, order: Sequence[str] | None = None,
                     tolerance: float = 0.01, points: int = 5, time_limit_s: float = 300.0, threads: int = 1,
                     margin: bool = True, decompose: bool | None = None,
                     progress: Callable[[str], None] | None = None,
                     executor: Executor | None = None, effort: float = 1.0,
                     deadline: float | None = None) -> AllocationResult:
    """Allocate the pool to the tenants.

    Args:
        problem: the pool, tenants and interference table.
        mode: 'weighted' (maximize the weighted normalised score), 'lexicographic' (``order``, each stage keeping
            earlier optima within ``tolerance``, relative) or 'pareto' (``points`` epsilon-constraint solves).
        backend: 'highs' (this MILP) or 'cpsat' (``fleetplan.solvers.tenants.cpsat``).
        weights: {'utilization', 'isolation', 'sla': weight ≥ 0}; default 1 each.
        effort: the effort budget of every solve, × the defaults (:data:`NODES_PER_SOLVE` HiGHS nodes,
            :data:`CPSAT_UNITS_PER_SOLVE` CP-SAT units): the same problem, options and effort give the same
            allocation on any machine and under any load, whatever the wall clock does.
        time_limit_s: a wall-clock safety stop for the whole call (``deadline``, a :func:`wall_clock` value, when
            given: e.g. the command's start plus its limit); when it fires, the best answer so far is returned and
            ``notes`` names what it cut. threads: solver threads (CP-SAT's workers search interleaved).
        margin: reserve interference headroom on shared nodes.
        decompose: solve each window apart: exact for 'weighted' (the objective is a sum over windows) and for
            'lexicographic' with tolerance 0; with a tolerance each window keeps its own stage optima within it
            (so the sums do too); for 'pareto' each window gets its own ε between its own anchors (the points meet
            the global ε-constraint on the sum but may lie slightly inside the exact global front). Default True.
        progress: called with a short message before each solve (before each fan-out's solves are sent).
        executor: where the independent solves of 'pareto' run (:mod:`fleetplan.solvers.executor`); default this
            process. Same answers on every executor (each solve's budget is fixed beforehand).

    A group of windows whose solves find nothing (the stop fired first, or the budget was too small) takes the
    greedy packing's GPUs there (status HEURISTIC), said in ``notes``. Returns an AllocationResult whose allocations
    all passed ``validate_allocation``. Raises InfeasibleError (guarantees that cannot be met, explained),
    SolverError (nothing found and the greedy packing misses a guarantee), InputError (bad mode, backend, weights,
    order, points, effort).
    """
    weights = dict(DEFAULT_WEIGHTS if weights is None else weights)
    order = tuple(order or DEFAULT_ORDER)
    _check_arguments(mode, weights, order, tolerance, points)
    if not (isinstance(effort, int | float) and math.isfinite(effort) and effort > 0):
        raise InputError(f"effort must be a number > 0 (× the default budgets), got {effort!r}", field="effort",
                         value=effort)
    Model = _factory(backend)
    explain_guarantees(problem)
    W = list(range(problem.n_windows))
    if decompose is None:
        decompose = len(W) > 1
    run = _Run(problem, Model, [[w] for w in W] if decompose else [W], decompose, normalisers(problem), margin,
               threads, progress or (lambda _m: None), backend, executor or Executor(), _budget(backend, effort),
               deadline if deadline is not None else _clock() + time_limit_s, time_limit_s)
    if mode == "weighted":
        alloc, ob = _weighted(run, weights)
        return AllocationResult(alloc, ob, mode, backend, notes=run.notes())
    if mode == "lexicographic":
        alloc, ob, stages = _lexicographic(run, order, tolerance)
        return AllocationResult(alloc, ob, mode, backend, stages=stages, notes=run.notes())
    # The weighted answer is solved too: the front keeps only the points that no solved point dominates (an
    # epsilon-constraint point stopped by its budget can be dominated by it).
    front = _pareto(run, points)
    front = non_dominated([*front, _weighted(run, weights)])
    chosen = max(front, key=lambda p: weighted_score(problem, p[1], weights))
    return AllocationResult(chosen[0], chosen[1], mode, backend, pareto=front, notes=run.notes())


def _weighted(run: _Run, weights: dict[str, float]) -> tuple[Allocation, Objectives]:
    """Maximize Σ_k weight_k · sense_k · objective_k / normaliser_k, one solve per group of windows (the
    objective is a sum over windows, so solving them apart is exact)."""
    coefs = {k: weights.get(k, 0.0) / run.norm[k] for k in OBJECTIVE_SENSE}
    # Tiny tie-break on every objective keeps s tight and answers non-dominated.
    coefs = {k: c + TIE_BREAK / run.norm[k] for k, c in coefs.items()}
    outs = []
    for i, g in enumerate(run.groups):
        run.say(f"solving {run.where(g)} ({i + 1}/{len(run.groups)})")
        m = run.model(g)
        m.set_objective(coefs)
        o = run.solve(m, f"{run.where(g)} (weighted)")
        if o.status in (Status.INFEASIBLE, Status.NO_SOLUTION):
            o = run.fallback(g, run.where(g) if run.decompose else "allocation", o.status)
        outs.append(o)
    return run.finish(outs, "optimizer")


def _lexicographic(run: _Run, order: tuple[str, ...], tolerance: float
                   ) -> tuple[Allocation, Objectives, list[tuple[str, float, float]]]:
    """Optimize the objectives in ``order``, each stage keeping the earlier ones within ``tolerance`` (relative)
    of their optimum; returns the allocation, its objectives and [(objective, Σ optimum, Σ limit kept)]."""
    totals = {name: [0.0, 0.0] for name in order}  # Σ over groups of (stage optimum, bound kept)
    finals = []
    for gi, g in enumerate(run.groups):
        model = run.model(g)
        last: SolveOutcome | None = None
        for i, name in enumerate(order):
            run.say(f"lexicographic stage {i + 1}/{len(order)} ({name})"
                    + (f", window {g[0]} ({gi + 1}/{len(run.groups)})" if run.decompose else ""))
            model.set_objective({k: (1.0 if k == name else TIE_BREAK) / run.norm[k] for k in OBJECTIVE_SENSE})
            o = run.solve(model, f"{run.where(g)} (lexicographic stage {name})")
            if o.status is Status.NO_SOLUTION and last is not None:
                # The previous stage's answer meets every limit so far: keep it, flagged as not proven.
                o = SolveOutcome(Status.HEURISTIC, last.gpus, last.values, None, None, o.solve_s)
            elif o.status is Status.NO_SOLUTION:
                # No stage found anything: the greedy packing stands, and its values set the later stages' limits.
                o = run.fallback(g, f"lexicographic stage {name}, {run.where(g)}", o.status)
            elif o.status is Status.INFEASIBLE:
                _raise_infeasible(f"lexicographic stage {name}")
            best = o.values[name]
            slack = tolerance * abs(best) + 1e-7
            keep = best - slack if OBJECTIVE_SENSE[name] > 0 else best + slack
            # Later stages keep this objective within the tolerance of its optimum.
            model.add_limit(name, keep)
            totals[name][0] += best
            totals[name][1] += keep
            last = o
        if last is None:  # order is never empty (checked), so every group ran at least one stage
            raise SolverError("lexicographic mode ran no stage")
        finals.append(last)
    alloc, ob = run.finish(finals, "optimizer")
    return alloc, ob, [(name, totals[name][0], totals[name][1]) for name in order]


@dataclass(frozen=True)
class _SolveTask:
    """One solve of the Pareto fan-out: the windows, objective coefficients, limits (objective, value), all fixed
    before the fan-out so every executor solves the same models, and what the solve is called in notes."""

    windows: tuple[int, ...]
    objective: dict[str, float]
    limits: tuple[tuple[str, float], ...]
    what: str = ""


def _solve_task(common: tuple[TenantProblem, str, bool, int, float, float], task: _SolveTask
                ) -> tuple[SolveOutcome, str | None]:
    """Build the backend's model of ``task.windows`` and solve it within the effort budget and before the
    deadline (an executor task: module level, picklable); returns the outcome and what the stop did
    (see :func:`_timed_solve`)."""
    problem, backend, margin, threads, budget, deadline = common
    m = _factory(backend)(problem, list(task.windows), margin=margin)
    m.set_objective(task.objective)
    for name, value in task.limits:
        m.add_limit(name, value)
    return _timed_solve(m, deadline, threads, budget)


def _pareto(run: _Run, points: int) -> list[tuple[Allocation, Objectives]]:
    """The Pareto front by the epsilon-constraint method on isolation: per group of windows, two anchors (most
    utilization; least isolation), then points - 2 solves maximizing utilization with isolation ≤ ε_j, where ε_j
    steps evenly between the group's anchors. With one group per window (decompose), point j is the union of the
    windows' j-th answers: it meets the global constraint Σ isolation ≤ Σ_w ε_wj. Returns the non-dominated
    points.

    The solves fan out on ``run.executor`` in two rounds: every group's two anchors, then every group's points
    (a point needs its group's anchors). Each solve has the run's effort budget on every executor; the results are
    combined in group order. An anchor without an answer takes the greedy packing's; a point without one takes
    its group's least-isolation anchor."""
    norm = run.norm
    util_first = {"utilization": 1.0, "isolation": TIE_BREAK / norm["isolation"], "sla": TIE_BREAK / norm["sla"]}
    iso_first = {"isolation": 1.0 / norm["isolation"], "utilization": TIE_BREAK, "sla": TIE_BREAK / norm["sla"]}
    common = (run.problem, run.backend, run.margin, run.threads, run.budget, run.deadline)

    def where(gi: int) -> str:
        g = run.groups[gi]
        return f" (window {g[0]}, {gi + 1}/{len(run.groups)})" if run.decompose else ""

    anchor_tasks = []
    for gi, g in enumerate(run.groups):
        run.say("Pareto anchors" + where(gi))
        anchor_tasks += [_SolveTask(tuple(g), util_first, (), f"{run.where(g)} (Pareto anchor, utilization)"),
                         _SolveTask(tuple(g), iso_first, (), f"{run.where(g)} (Pareto anchor, isolation)")]
    anchors = []
    for task, (o, cut) in zip(anchor_tasks, run.executor.map(_solve_task, anchor_tasks, common=common,
                                                              with_common=True), strict=True):
        run.record(task.what, cut)
        anchors.append(o)
    per_point: list[list[SolveOutcome | None]] = [[None] * len(run.groups) for _ in range(points)]
    # Which scalar objective each part solved ('util': utilization first, 'iso': isolation first, the lo anchor).
    tags: list[set[str]] = [set() for _ in range(points)]
    point_tasks: list[tuple[int, int, _SolveTask]] = []  # (point j, group gi, task)
    for gi, g in enumerate(run.groups):
        hi, lo = (o if o.status not in (Status.INFEASIBLE, Status.NO_SOLUTION)
                  else run.fallback(g, "Pareto anchor" + where(gi), o.status)
                  for o in (anchors[2 * gi], anchors[2 * gi + 1]))
        per_point[0][gi] = lo
        per_point[points - 1][gi] = hi
        tags[0].add("iso")
        tags[points - 1].add("util")
        i_lo, i_hi = lo.values["isolation"], hi.values["isolation"]
        for j in range(1, points - 1):
            eps = i_lo + (i_hi - i_lo) * j / (points - 1)
            run.say(f"Pareto point {j + 1}/{points}: isolation ≤ {eps:.3f}" + where(gi))
            if i_hi - i_lo < 1e-9:
                per_point[j][gi] = lo
                tags[j].add("iso")
                continue
            point_tasks.append((j, gi, _SolveTask(tuple(g), util_first, (("isolation", eps + 1e-7),),
                                                  f"{run.where(g)} (Pareto point {j + 1})")))
    solved = run.executor.map(_solve_task, [t for _, _, t in point_tasks], common=common, with_common=True)
    for (j, gi, task), (o, cut) in zip(point_tasks, solved, strict=True):
        run.record(task.what, cut)
        lo = per_point[0][gi]
        found = o.status in (Status.OPTIMAL, Status.FEASIBLE)
        per_point[j][gi] = o if found else lo
        tags[j].add("util" if found else "iso")
    fronts = [[o for o in outs if o is not None] for outs in per_point]
    return non_dominated([run.finish(point_outs, f"pareto-{j}", one_objective=len(tags[j]) == 1)
                          for j, point_outs in enumerate(fronts)])


def dominates(a: Objectives, b: Objectives, eps: float = 1e-9) -> bool:
    """True if ``a`` is at least as good as ``b`` on every objective and strictly better on one."""
    ge = all(OBJECTIVE_SENSE[k] * (a.value(k) - b.value(k)) >= -eps for k in OBJECTIVE_SENSE)
    gt = any(OBJECTIVE_SENSE[k] * (a.value(k) - b.value(k)) > eps for k in OBJECTIVE_SENSE)
    return ge and gt


def non_dominated(cands: list[tuple[Allocation, Objectives]]) -> list[tuple[Allocation, Objectives]]:
    """The candidates no other candidate dominates, duplicates (same objective values) removed, by isolation."""
    out: list[tuple[Allocation, Objectives]] = []
    for a in cands:
        if any(dominates(b[1], a[1]) for b in cands):
            continue
        key = tuple(round(a[1].value(k), 9) for k in OBJECTIVE_SENSE)
        if any(tuple(round(b[1].value(k), 9) for k in OBJECTIVE_SENSE) == key for b in out):
            continue
        out.append(a)
    return sorted(out, key=lambda p: (p[1].isolation, -p[1].utilization))
