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
from collections.abc import Sequence

from fleetplan.errors import SolverError
from fleetplan.placement.status import Status
from fleetplan.placement.tenants import OBJECTIVE_SENSE, Node, SolveOutcome, Tenant, TenantProblem
from fleetplan.solvers.highs import HiGHS
from fleetplan.solvers.milp import HIGHS_SEED, highspy_status


class TenantMilpModel:
    """The MILP of the module docstring over ``windows``, built with PuLP; re-solvable with new objectives/limits.

    Args:
        problem: the TenantProblem (never mutated).
        windows: the windows to model (all for a joint solve, one for a per-window solve).
        margin: reserve interference headroom on shared nodes (constraint 4); False drops the G_n s term.
    """

    def __init__(self, problem: TenantProblem, windows: Sequence[int], *, margin: bool = True) -> None:
        import pulp

        self.problem, self.windows, self.margin = problem, list(windows), margin
        self.pulp = pulp
        self.lp = pulp.LpProblem("tenant_allocation", pulp.LpMaximize)
        P = problem
        self.x: dict[tuple[str, int, str], pulp.LpVariable] = {}
        self._y: dict[tuple[str, int, str], pulp.LpVariable] = {}
        classes = sorted({t.interference_class for t in P.tenants})
        self._cmax = max([P.class_coefficient(a, b) for a in classes for b in classes] + [0.0])
        # Names use indices: PuLP rewrites characters like '-' and ' ', which could make two names collide.
        self._tid = {t.name: i for i, t in enumerate(P.tenants)}
        self._nid = {n.name: i for i, n in enumerate(P.nodes)}
        self._cid = {c: i for i, c in enumerate(classes)}
        self.s: dict[tuple[int, str], pulp.LpVariable] = {}
        self.v: dict[tuple[str, int], pulp.LpVariable] = {}
        self.u: dict[tuple[str, int], pulp.LpVariable] = {}
        for w in self.windows:
            for n in P.nodes:
                self._node(w, n)
            self._symmetry(w)
            for t in P.tenants:
                self._served(w, t)
        cap = P.capacity_gpu_windows
        self.expr = {
            "utilization": pulp.lpSum(self.v.values()) * (1.0 / cap),
            "isolation": pulp.lpSum(self.s.values()),
            "sla": pulp.lpSum(P.tenant(t).weight * u for (t, _), u in self.u.items()),
        }
        self._n_limits = 0
        #: True when the last solve was ended by its wall-clock safety stop (not by its node budget or a proof).
        self.cut_by_clock = False

    def _node(self, w: int, n: Node) -> None:
        """Node n in window w: x and y of the tenants that may run there with (1), the coefficient s with (2) and
        (3) when two or more may (else s = 0), and (4)."""
        lp, pulp = self.lp, self.pulp
        here = [t for t in self.problem.tenants if t.runs_on(n.gpu) and t.wanted(w) > 0]
        for t in here:
            ub = min(n.gpus, t.wanted(w))
            tag = f"{self._tid[t.name]}_{w}_{self._nid[n.name]}"
            self.x[t.name, w, n.name] = lp.add_variable(f"x_{tag}", 0, ub, cat="Integer")
            self._y[t.name, w, n.name] = lp.add_variable(f"y_{tag}", cat="Binary")
            # (1) A GPU count needs presence.
            lp += self.x[t.name, w, n.name] <= ub * self._y[t.name, w, n.name], f"presence_{tag}"
        s = self.s[w, n.name] = lp.add_variable(f"s_{w}_{self._nid[n.name]}", 0, self._cmax)
        if len(here) >= 2:
            self._interference(w, n, here, s)
        else:
            s.upBound = 0
        # (4) Capacity minus the interference headroom.
        head = n.gpus * s if self.margin else 0
        lp += (pulp.lpSum(self.x[t.name, w, n.name] for t in here) + head <= n.gpus,
               f"capacity_{w}_{self._nid[n.name]}")

    def _interference(self, w: int, n: Node, here: list[Tenant], s) -> None:
        """(2) class presence p and same-class pairs m of node n in window w, and (3) the node coefficient s."""
        lp, pulp, P = self.lp, self.pulp, self.problem
        y, tid, cid, nn = self._y, self._tid, self._cid, self._nid[n.name]
        p = {}
        for k in {t.interference_class for t in here}:
            members = [t for t in here if t.interference_class == k]
            p[k] = lp.add_variable(f"p_{cid[k]}_{w}_{nn}", cat="Binary")
            # (2) Class presence; two or more of one class set m.
            for t in members:
                lp += y[t.name, w, n.name] <= p[k], f"class_{tid[t.name]}_{w}_{nn}"
            if len(members) >= 2:
                m = lp.add_variable(f"m_{cid[k]}_{w}_{nn}", cat="Binary")
                lp += (pulp.lpSum(y[t.name, w, n.name] for t in members) <= 1 + (len(members) - 1) * m,
                       f"same_{cid[k]}_{w}_{nn}")
                # (3) Same-class pair.
                lp += s >= P.class_coefficient(k, k) * m, f"pairkk_{cid[k]}_{w}_{nn}"
        ks = sorted(p)
        for i, a in enumerate(ks):
            for b in ks[i + 1:]:
                # (3) The worst co-located class pair sets the node coefficient.
                lp += s >= P.class_coefficient(a, b) * (p[a] + p[b] - 1), f"pair_{cid[a]}_{cid[b]}_{w}_{nn}"

    def _symmetry(self, w: int) -> None:
        """(7) Identical nodes are used in order of non-increasing load in window w."""
        P = self.problem
        load = {n.name: self.pulp.lpSum(self.x[t.name, w, n.name] for t in P.tenants if (t.name, w, n.name) in self.x)
                for n in P.nodes}
        for prev, n in zip(P.nodes, P.nodes[1:], strict=False):
            if (prev.gpu, prev.gpus) == (n.gpu, n.gpus):
                self.lp += load[prev.name] >= load[n.name], f"symmetry_{w}_{self._nid[n.name]}"

    def _served(self, w: int, t: Tenant) -> None:
        """Tenant t in window w: v (the guarantee its lower bound) with (5), (6), and u >= the SLA shortfall."""
        lp, P, tid = self.lp, self.problem, self._tid
        d = float(t.demand_gpus[w])
        v = self.v[t.name, w] = lp.add_variable(f"v_{tid[t.name]}_{w}", t.guaranteed(w), d)
        self.u[t.name, w] = lp.add_variable(f"u_{tid[t.name]}_{w}", 0)
        # (5) Served GPUs are allocated GPUs; the guarantee is v's lower bound.
        held = self.pulp.lpSum(self.x[t.name, w, n.name] for n in P.nodes if (t.name, w, n.name) in self.x)
        lp += v <= held, f"served_{tid[t.name]}_{w}"
        # (6) Burst limit and no GPUs beyond the demand.
        lp += held <= t.wanted(w), f"burst_{tid[t.name]}_{w}"
        lp += self.u[t.name, w] >= t.sla_target * d - v, f"sla_{tid[t.name]}_{w}"

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

    def solve(self, time_limit_s: float, threads: int = 1, budget: float | None = None) -> SolveOutcome:
        """Solve with HiGHS (random seed HIGHS_SEED). ``budget``: the effort budget, branch-and-bound nodes
        (HiGHS ``mip_max_nodes``, rounded; None: none): the same model and budget give the same answer on an idle or a
        busy machine. ``time_limit_s``: wall-clock seconds, a safety stop; :attr:`cut_by_clock` says afterwards
        whether it ended the search (the answer may then differ on another machine)."""
        pulp = self.pulp

        self.cut_by_clock = False
        solver = HiGHS(msg=False, timeLimit=max(0.01, time_limit_s), threads=threads, random_seed=HIGHS_SEED,
                       mip_max_nodes=None if budget is None else max(1, round(budget)))
        t0 = time.perf_counter()
        try:
            with quiet_stdout():
                self.lp.solve(solver)
        except pulp.PulpSolverError as exc:
            raise SolverError(f"HiGHS failed: {exc}") from None
        dt = time.perf_counter() - t0
        with contextlib.suppress(AttributeError):  # no solver model when PuLP stopped before HiGHS ran
            self.cut_by_clock = self.lp.solverModel.getModelStatus() == highspy_status("kTimeLimit")
        sol = self.lp.sol_status
        if sol == pulp.LpSolutionInfeasible or self.lp.status == pulp.LpStatusInfeasible:
            return SolveOutcome(Status.INFEASIBLE, {}, {}, None, None, dt)
        if sol not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
            return SolveOutcome(Status.NO_SOLUTION, {}, {}, None, None, dt)
        status = Status.OPTIMAL if sol == pulp.LpSolutionOptimal else Status.FEASIBLE
        gpus = {k: int(round(v.value() or 0)) for k, v in self.x.items() if (v.value() or 0) > 0.5}
        values = {k: float(pulp.value(e) or 0.0) for k, e in self.expr.items()}
        obj = float(pulp.value(self.lp.objective) or 0.0)
        # PuLP hands a maximization to HiGHS as the minimization of −f (its buildSolverModel multiplies the
        # objective by −1), so HiGHS's dual bound is a lower bound on min −f: the bound on max f is its negation
        # (plus the objective's constant, which PuLP does not pass). No bound is claimed when HiGHS gives none.
        bound: float | None = None
        try:
            info = self.lp.solverModel.getInfo()
            if math.isfinite(info.mip_dual_bound):
                bound = -float(info.mip_dual_bound) + float(self.lp.objective.constant)
        except AttributeError:
            pass
        if bound is None and status is Status.OPTIMAL:
            status = Status.FEASIBLE  # optimal only with a proven bound
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


