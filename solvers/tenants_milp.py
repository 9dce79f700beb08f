"""Node-level tenant allocation as a MILP (PuLP + HiGHS), and the three modes shared with the CP-SAT backend.

Notation (windows w, nodes n with G_n GPUs, tenants t of interference class k(t), coefficient c_kl):

Variables
    x[t,n,w] ∈ {0..min(G_n, want_tw)}  GPUs of tenant t on node n in window w (only where t runs on n's GPU type);
    y[t,n,w] ∈ {0,1}                   t is present on n;
    p[k,n,w] ∈ {0,1}                   some tenant of class k is present on n;
    m[k,n,w] ∈ {0,1}                   two or more tenants of class k are present on n;
    s[n,w]   ∈ [0, max c]              the node's interference coefficient (largest co-located pair);
    v[t,w]   ∈ [g_tw, d_tw]            GPUs served (g = min(quota, demand), the guarantee, is a hard lower bound);
    u[t,w]   ≥ 0                       SLA shortfall, ≥ sla_t d_tw − v[t,w].
Constraints (numbered as in the code)
    (1) x ≤ min(G_n, want_tw) · y                     a GPU count needs presence;
    (2) y[t,n,w] ≤ p[k(t),n,w];  Σ_{t∈k} y ≤ 1 + (|k|−1) m[k,n,w]   class presence and same-class pairs;
    (3) s ≥ c_kl (p_k + p_l − 1) for classes k < l;  s ≥ c_kk m_k   the worst co-located pair sets s;
    (4) Σ_t x[t,n,w] + G_n s[n,w] ≤ G_n                capacity minus the interference headroom (the margin);
    (5) v[t,w] ≤ Σ_n x[t,n,w]                          served GPUs are allocated GPUs;
    (6) Σ_n x[t,n,w] ≤ want_tw = min(burst_t, ceil(d_tw))  the burst limit, and no GPUs beyond the demand;
    (7) Σ_t x[t,n,w] ≥ Σ_t x[t,n',w] for consecutive identical nodes n, n' (same GPU type and count): symmetry
        breaking (any answer can be permuted among identical nodes so that their loads do not increase).
Objectives (the units of ``fleetplan.placement.tenants.Objectives``)
    utilization = Σ v / (Σ_n G_n · W),  isolation = Σ s,  sla = Σ weight_t u[t,w].
Weighted mode maximizes  a·utilization − b·isolation/(N·W) − c·sla/Σ(weight·sla·d)  (each term normalised to about
0..1); lexicographic optimizes the objectives in order, each stage constraining the earlier ones to within
``tolerance`` (relative) of their optimum; Pareto runs the epsilon-constraint method on isolation (maximize
utilization s.t. isolation ≤ ε for N values of ε between the two anchors) and keeps the non-dominated points.

Status: HiGHS may stop at the time limit with model status "Optimal"-like codes while the incumbent is only integer
feasible; the status here comes from PuLP's ``sol_status`` and HiGHS's own model status, never the bare status.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fleetplan.errors import InfeasibleError, InputError, SolverError
from fleetplan.placement.tenants import (
    OBJECTIVE_SENSE,
    Allocation,
    Objectives,
    SolveStatus,
    TenantProblem,
    explain_guarantees,
    validate_allocation,
)

MODES = ("weighted", "lexicographic", "pareto")
BACKENDS = ("highs", "cpsat")
DEFAULT_WEIGHTS = {"utilization": 1.0, "isolation": 1.0, "sla": 1.0}
DEFAULT_ORDER = ("sla", "utilization", "isolation")
#: Weight of the secondary terms that break ties (keeps s tight and avoids weakly dominated points).
TIE_BREAK = 1e-3


@dataclass
class SolveOutcome:
    """What one backend solve returns: status, GPUs, model objective values (Objectives units), bound and gap of
    the solved (maximized) scalar objective."""

    status: SolveStatus
    gpus: dict[tuple[str, int, str], int]
    values: dict[str, float]
    objective: float | None
    bound: float | None
    solve_s: float


@dataclass
class AllocationResult:
    """The answer of :func:`solve_allocation`.

    Attributes:
        allocation: the chosen allocation (for Pareto, the point with the best weighted score).
        objectives: its objective values (from the independent checker).
        mode, backend: how it was produced.
        pareto: for mode 'pareto', the non-dominated points [(Allocation, Objectives)] by increasing isolation.
        stages: for mode 'lexicographic', [(objective, optimum found, bound kept)] in order.
    """

    allocation: Allocation
    objectives: Objectives
    mode: str
    backend: str
    pareto: list[tuple[Allocation, Objectives]] = field(default_factory=list)
    stages: list[tuple[str, float, float]] = field(default_factory=list)


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


class MilpModel:
    """The MILP of the module docstring over ``windows``, built with PuLP; re-solvable with new objectives/limits.

    Args:
        problem: the TenantProblem (never mutated).
        windows: the windows to model (all for a joint solve, one for a per-window solve).
        margin: reserve interference headroom on shared nodes (constraint 4); False drops the G_n s term.
    """

    def __init__(self, problem: TenantProblem, windows: Sequence[int], *, margin: bool = True,
                 hint: dict | None = None) -> None:
        import pulp

        self.problem, self.windows, self.margin = problem, list(windows), margin
        self.pulp = pulp
        lp = pulp.LpProblem("tenant_allocation", pulp.LpMaximize)
        P = problem
        self.x: dict[tuple[str, int, str], pulp.LpVariable] = {}
        y: dict[tuple[str, int, str], pulp.LpVariable] = {}
        classes = sorted({t.interference_class for t in P.tenants})
        cmax = max([P.class_coefficient(a, b) for a in classes for b in classes] + [0.0])
        # Names use indices: PuLP rewrites characters like '-' and ' ', which could make two names collide.
        tid = {t.name: i for i, t in enumerate(P.tenants)}
        nid = {n.name: i for i, n in enumerate(P.nodes)}
        cid = {c: i for i, c in enumerate(classes)}
        self.s: dict[tuple[int, str], pulp.LpVariable] = {}
        self.v: dict[tuple[str, int], pulp.LpVariable] = {}
        self.u: dict[tuple[str, int], pulp.LpVariable] = {}
        for w in self.windows:
            for n in P.nodes:
                here = [t for t in P.tenants if t.runs_on(n.gpu) and t.wanted(w) > 0]
                for t in here:
                    ub = min(n.gpus, t.wanted(w))
                    tag = f"{tid[t.name]}_{w}_{nid[n.name]}"
                    self.x[t.name, w, n.name] = lp.add_variable(f"x_{tag}", 0, ub, cat="Integer")
                    y[t.name, w, n.name] = lp.add_variable(f"y_{tag}", cat="Binary")
                    # (1) A GPU count needs presence.
                    lp += self.x[t.name, w, n.name] <= ub * y[t.name, w, n.name], f"presence_{tag}"
                s = self.s[w, n.name] = lp.add_variable(f"s_{w}_{nid[n.name]}", 0, cmax)
                if len(here) >= 2:
                    p = {}
                    for k in {t.interference_class for t in here}:
                        members = [t for t in here if t.interference_class == k]
                        p[k] = lp.add_variable(f"p_{cid[k]}_{w}_{nid[n.name]}", cat="Binary")
                        # (2) Class presence; two or more of one class set m.
                        for t in members:
                            lp += y[t.name, w, n.name] <= p[k], f"class_{tid[t.name]}_{w}_{nid[n.name]}"
                        if len(members) >= 2:
                            m = lp.add_variable(f"m_{cid[k]}_{w}_{nid[n.name]}", cat="Binary")
                            lp += (pulp.lpSum(y[t.name, w, n.name] for t in members) <= 1 + (len(members) - 1) * m,
                                   f"same_{cid[k]}_{w}_{nid[n.name]}")
                            # (3) Same-class pair.
                            lp += s >= P.class_coefficient(k, k) * m, f"pairkk_{cid[k]}_{w}_{nid[n.name]}"
                    ks = sorted(p)
                    for i, a in enumerate(ks):
                        for b in ks[i + 1:]:
                            # (3) The worst co-located class pair sets the node coefficient.
                            lp += (s >= P.class_coefficient(a, b) * (p[a] + p[b] - 1),
                                   f"pair_{cid[a]}_{cid[b]}_{w}_{nid[n.name]}")
                else:
                    s.upBound = 0
                # (4) Capacity minus the interference headroom.
                head = n.gpus * s if margin else 0
                lp += (pulp.lpSum(self.x[t.name, w, n.name] for t in here) + head <= n.gpus,
                       f"capacity_{w}_{nid[n.name]}")
            # (7) Identical nodes are used in order of non-increasing load.
            load = {n.name: pulp.lpSum(self.x[t.name, w, n.name] for t in P.tenants if (t.name, w, n.name) in self.x)
                    for n in P.nodes}
            for prev, n in zip(P.nodes, P.nodes[1:], strict=False):
                if (prev.gpu, prev.gpus) == (n.gpu, n.gpus):
                    lp += load[prev.name] >= load[n.name], f"symmetry_{w}_{nid[n.name]}"
            for t in P.tenants:
                d = float(t.demand_gpus[w])
                v = self.v[t.name, w] = lp.add_variable(f"v_{tid[t.name]}_{w}", t.guaranteed(w), d)
                self.u[t.name, w] = lp.add_variable(f"u_{tid[t.name]}_{w}", 0)
                # (5) Served GPUs are allocated GPUs; the guarantee is v's lower bound.
                held = pulp.lpSum(self.x[t.name, w, n.name] for n in P.nodes if (t.name, w, n.name) in self.x)
                lp += v <= held, f"served_{tid[t.name]}_{w}"
                # (6) Burst limit and no GPUs beyond the demand.
                lp += held <= t.wanted(w), f"burst_{tid[t.name]}_{w}"
                lp += self.u[t.name, w] >= t.sla_target * d - v, f"sla_{tid[t.name]}_{w}"
        cap = P.capacity_gpu_windows
        self.expr = {
            "utilization": pulp.lpSum(self.v.values()) * (1.0 / cap),
            "isolation": pulp.lpSum(self.s.values()),
            "sla": pulp.lpSum(P.tenant(t).weight * u for (t, _), u in self.u.items()),
        }
        self.lp = lp
        self._n_limits = 0

    def set_objective(self, coefs: dict[str, float]) -> None:
        """Maximize Σ coef_k · sense_k · objective_k (coefficients already include any normalisation)."""
        self.lp.setObjective(self.pulp.lpSum(c * OBJECTIVE_SENSE[k] * self.expr[k] for k, c in coefs.items() if c))

    def add_limit(self, name: str, value: float) -> None:
        """utilization ≥ value, or isolation / sla ≤ value (Objectives units)."""
        self._n_limits += 1
        if OBJECTIVE_SENSE[name] > 0:
            self.lp += self.expr[name] >= value, f"limit_{self._n_limits}_{name}"
        else:
            self.lp += self.expr[name] <= value, f"limit_{self._n_limits}_{name}"

    def solve(self, time_limit_s: float, threads: int = 1) -> SolveOutcome:
        pulp = self.pulp
        from fleetplan.solvers.highs import HiGHS

        solver = HiGHS(msg=False, timeLimit=max(0.05, time_limit_s), threads=threads)
        t0 = time.perf_counter()
        try:
            with quiet_stdout():
                self.lp.solve(solver)
        except pulp.PulpSolverError as exc:
            raise SolverError(f"HiGHS failed: {exc}") from None
        dt = time.perf_counter() - t0
        sol = self.lp.sol_status
        if sol == pulp.LpSolutionInfeasible or self.lp.status == pulp.LpStatusInfeasible:
            return SolveOutcome(SolveStatus.INFEASIBLE, {}, {}, None, None, dt)
        if sol not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
            return SolveOutcome(SolveStatus.NO_SOLUTION, {}, {}, None, None, dt)
        status = SolveStatus.OPTIMAL if sol == pulp.LpSolutionOptimal else SolveStatus.FEASIBLE
        gpus = {k: int(round(v.value() or 0)) for k, v in self.x.items() if (v.value() or 0) > 0.5}
        values = {k: float(pulp.value(e) or 0.0) for k, e in self.expr.items()}
        obj = float(pulp.value(self.lp.objective) or 0.0)
        bound = obj
        try:
            info = self.lp.solverModel.getInfo()
            if math.isfinite(info.mip_dual_bound):
                bound = float(info.mip_dual_bound)  # HiGHS reports the bound of the maximization directly
        except AttributeError:
            pass
        if status is SolveStatus.OPTIMAL:
            bound = max(bound, obj) if bound is not None else obj
        return SolveOutcome(status, gpus, values, obj, bound, dt)


@contextlib.contextmanager
def quiet_stdout():
    """Silence file descriptor 1 for the duration (HiGHS prints its banner from C++ even with msg=False, which
    would corrupt JSON output)."""
    import os
    import sys

    try:
        sys.stdout.flush()
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # no real stdout (captured by a test runner)
        yield
        return
    saved = os.dup(fd)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), fd)
            yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


def _factory(backend: str) -> Callable[..., object]:
    if backend == "highs":
        return MilpModel
    if backend == "cpsat":
        from fleetplan.solvers.tenants_cpsat import CpSatModel

        return CpSatModel
    raise InputError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}", field="backend", value=backend)


def _combine(outs: list[SolveOutcome]) -> tuple[SolveStatus, dict, float | None, float | None, float]:
    for o in outs:
        if o.status in (SolveStatus.INFEASIBLE, SolveStatus.NO_SOLUTION):
            return o.status, {}, None, None, sum(x.solve_s for x in outs)
    status = SolveStatus.OPTIMAL if all(o.status is SolveStatus.OPTIMAL for o in outs) else SolveStatus.FEASIBLE
    gpus: dict = {}
    for o in outs:
        gpus.update(o.gpus)
    obj = sum(o.objective or 0.0 for o in outs)
    bound = sum(o.bound if o.bound is not None else (o.objective or 0.0) for o in outs)
    return status, gpus, obj, bound, sum(o.solve_s for o in outs)


def _gap(obj: float | None, bound: float | None) -> float | None:
    if obj is None or bound is None:
        return None
    return max(0.0, bound - obj) / max(abs(obj), 1e-9)


def _raise_unsolved(problem: TenantProblem, status: SolveStatus, what: str) -> None:
    if status is SolveStatus.INFEASIBLE:
        raise InfeasibleError(f"{what}: the guarantees fit the pool only without interference headroom on shared "
                              "nodes; give more nodes, lower quotas, or run with the margin off")
    raise SolverError(f"{what}: no allocation found within the time limit; raise --time-limit")


def solve_allocation(problem: TenantProblem, *, mode: str = "weighted", backend: str = "highs",
                     weights: dict[str, float] | None = None, order: Sequence[str] | None = None,
                     tolerance: float = 0.01, points: int = 5, time_limit_s: float = 30.0, threads: int = 1,
                     margin: bool = True, decompose: bool | None = None,
                     progress: Callable[[str], None] | None = None) -> AllocationResult:
    """Allocate the pool to the tenants.

    Args:
        problem: the pool, tenants and interference table.
        mode: 'weighted' (maximize the weighted normalised score), 'lexicographic' (``order``, each stage keeping
            earlier optima within ``tolerance``, relative) or 'pareto' (``points`` epsilon-constraint solves).
        backend: 'highs' (this MILP) or 'cpsat' (``fleetplan.solvers.tenants_cpsat``).
        weights: {'utilization', 'isolation', 'sla': weight ≥ 0}; default 1 each.
        time_limit_s: wall-time budget for the whole call, split over its solves; threads: solver threads.
        margin: reserve interference headroom on shared nodes.
        decompose: solve each window apart: exact for 'weighted' (the objective is a sum over windows) and for
            'lexicographic' with tolerance 0; with a tolerance each window keeps its own stage optima within it
            (so the sums do too); for 'pareto' each window gets its own ε between its own anchors (the points meet
            the global ε-constraint on the sum but may lie slightly inside the exact global front). Default True.
        progress: called with a short message before each solve.

    Returns an AllocationResult whose allocations all passed ``validate_allocation``.
    Raises InfeasibleError (guarantees that cannot be met, explained), SolverError (nothing found in time),
    InputError (bad mode, backend, weights, order, points).
    """
    if mode not in MODES:
        raise InputError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}", field="mode", value=mode)
    Model = _factory(backend)
    weights = dict(DEFAULT_WEIGHTS if weights is None else weights)
    for k, v in weights.items():
        if k not in OBJECTIVE_SENSE:
            raise InputError(f"unknown objective {k!r} in weights; use {', '.join(OBJECTIVE_SENSE)}", field="weights")
        if not isinstance(v, int | float) or v < 0 or not math.isfinite(v):
            raise InputError(f"weight of {k} must be a number ≥ 0, got {v!r}", field="weights", value=v)
    order = tuple(order or DEFAULT_ORDER)
    if sorted(order) != sorted(set(order)) or any(o not in OBJECTIVE_SENSE for o in order):
        raise InputError(f"order {list(order)} must list distinct objectives among {', '.join(OBJECTIVE_SENSE)}",
                         field="order")
    if not 0 <= tolerance <= 1:
        raise InputError(f"tolerance {tolerance} must be within 0..1 (relative)", field="tolerance")
    if mode == "pareto" and not 2 <= points <= 50:
        raise InputError(f"points must be 2..50, got {points}", field="points", value=points)
    explain_guarantees(problem)
    say = progress or (lambda _m: None)
    norm = normalisers(problem)
    W = list(range(problem.n_windows))
    if decompose is None:
        decompose = len(W) > 1
    coefs = {k: weights.get(k, 0.0) / norm[k] for k in OBJECTIVE_SENSE}
    # Tiny tie-break on every objective keeps s tight and answers non-dominated.
    coefs = {k: c + TIE_BREAK / norm[k] for k, c in coefs.items()}

    def finish(gpus: dict, status: SolveStatus, obj: float | None, bound: float | None, dt: float,
               policy: str) -> tuple[Allocation, Objectives]:
        alloc = Allocation(policy, gpus, margin=margin, status=status, bound=bound, gap=_gap(obj, bound),
                           solve_s=dt)
        return alloc, validate_allocation(problem, alloc)

    if mode == "weighted":
        groups = [[w] for w in W] if decompose else [W]
        outs = []
        for i, g in enumerate(groups):
            say(f"solving {'window ' + str(g[0]) if decompose else 'all windows'} ({i + 1}/{len(groups)})")
            m = Model(problem, g, margin=margin)
            m.set_objective(coefs)
            budget = time_limit_s / len(groups)
            o = m.solve(budget, threads)
            if o.status in (SolveStatus.INFEASIBLE, SolveStatus.NO_SOLUTION):
                _raise_unsolved(problem, o.status, f"window {g[0]}" if decompose else "allocation")
            outs.append(o)
        status, gpus, obj, bound, dt = _combine(outs)
        alloc, ob = finish(gpus, status, obj, bound, dt, "optimizer")
        return AllocationResult(alloc, ob, mode, backend)

    if mode == "lexicographic":
        groups = [[w] for w in W] if decompose else [W]
        budget = time_limit_s / (len(order) * len(groups))
        totals = {name: [0.0, 0.0] for name in order}  # Σ over groups of (stage optimum, bound kept)
        finals = []
        for gi, g in enumerate(groups):
            model = Model(problem, g, margin=margin)
            last = None
            for i, name in enumerate(order):
                say(f"lexicographic stage {i + 1}/{len(order)} ({name})"
                    + (f", window {g[0]} ({gi + 1}/{len(groups)})" if decompose else ""))
                model.set_objective({k: (1.0 if k == name else TIE_BREAK) / norm[k] for k in OBJECTIVE_SENSE})
                o = model.solve(budget, threads)
                if o.status is SolveStatus.NO_SOLUTION and last is not None:
                    # The previous stage's answer meets every limit so far: keep it, flagged as not proven.
                    o = SolveOutcome(SolveStatus.FEASIBLE, last.gpus, last.values, last.objective, None, o.solve_s)
                elif o.status in (SolveStatus.INFEASIBLE, SolveStatus.NO_SOLUTION):
                    _raise_unsolved(problem, o.status, f"lexicographic stage {name}")
                best = o.values[name]
                slack = tolerance * abs(best) + 1e-7
                keep = best - slack if OBJECTIVE_SENSE[name] > 0 else best + slack
                # Later stages keep this objective within the tolerance of its optimum.
                model.add_limit(name, keep)
                totals[name][0] += best
                totals[name][1] += keep
                last = o
            assert last is not None
            finals.append(last)
        status, gpus, obj, bound, dt = _combine(finals)
        alloc, ob = finish(gpus, status, obj, bound, dt, "optimizer")
        stages = [(name, totals[name][0], totals[name][1]) for name in order]
        return AllocationResult(alloc, ob, mode, backend, stages=stages)

    # Pareto front by the epsilon-constraint method on isolation: per group of windows, two anchors (most
    # utilization; least isolation), then points - 2 solves maximizing utilization with isolation ≤ ε_j, where ε_j
    # steps evenly between the group's anchors. With one group per window (decompose), point j is the union of
    # the windows' j-th answers: it meets the global constraint Σ isolation ≤ Σ_w ε_wj.
    groups = [[w] for w in W] if decompose else [W]
    budget = time_limit_s / (points * len(groups))
    util_first = {"utilization": 1.0, "isolation": TIE_BREAK / norm["isolation"], "sla": TIE_BREAK / norm["sla"]}
    per_point: list[list[SolveOutcome | None]] = [[] for _ in range(points)]
    for gi, g in enumerate(groups):
        where = f" (window {g[0]}, {gi + 1}/{len(groups)})" if decompose else ""
        say("Pareto anchors" + where)
        hi_m = Model(problem, g, margin=margin)
        hi_m.set_objective(util_first)
        hi = hi_m.solve(budget, threads)
        if hi.status in (SolveStatus.INFEASIBLE, SolveStatus.NO_SOLUTION):
            _raise_unsolved(problem, hi.status, "Pareto anchor" + where)
        lo_m = Model(problem, g, margin=margin)
        lo_m.set_objective({"isolation": 1.0 / norm["isolation"], "utilization": TIE_BREAK,
                            "sla": TIE_BREAK / norm["sla"]})
        lo = lo_m.solve(budget, threads)
        if lo.status in (SolveStatus.INFEASIBLE, SolveStatus.NO_SOLUTION):
            _raise_unsolved(problem, lo.status, "Pareto anchor" + where)
        per_point[0].append(lo)
        per_point[points - 1].append(hi)
        i_lo, i_hi = lo.values["isolation"], hi.values["isolation"]
        for j in range(1, points - 1):
            eps = i_lo + (i_hi - i_lo) * j / (points - 1)
            say(f"Pareto point {j + 1}/{points}: isolation ≤ {eps:.3f}" + where)
            if i_hi - i_lo < 1e-9:
                per_point[j].append(lo)
                continue
            m = Model(problem, g, margin=margin)
            m.set_objective(util_first)
            m.add_limit("isolation", eps + 1e-7)
            o = m.solve(budget, threads)
            per_point[j].append(o if o.status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE) else lo)
    cands = []
    for j, outs in enumerate(per_point):
        status, gpus, obj, bound, dt = _combine([o for o in outs if o is not None])
        cands.append(finish(gpus, status, obj, bound, dt, f"pareto-{j}"))
    front = non_dominated(cands)
    best = max(front, key=lambda p: weighted_score(problem, p[1], weights))
    return AllocationResult(best[0], best[1], mode, backend, pareto=front)


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
