"""Tenant allocation with OR-Tools CP-SAT: the node-level model (same notation and numbered constraints as
:mod:`fleetplan.solvers.tenants.milp`); the split inside one node is :mod:`fleetplan.solvers.tenants.slicing`.

CP-SAT works on integers, so the node-level model counts served GPUs and SLA shortfall in milli-GPUs and the
node coefficient s in thousandths (coefficients are rounded to 0.001, the precision of the shipped table); the
objective is made integer (each objective's factor relative to the smallest, ×1000, rounded). A greedy answer
(margin-aware packing, then on re-solves the previous answer) is given as a hint. The effort budget (CP-SAT's
deterministic time), the seed and the workers are always explicit; the wall-clock limit is a safety stop.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from fleetplan.errors import SolverError
from fleetplan.placement.status import Status
from fleetplan.placement.tenants import OBJECTIVE_SENSE, Node, SolveOutcome, Tenant, TenantProblem
from fleetplan.solvers.cpsat import CPSAT_SEED
from fleetplan.solvers.tenants.baselines import packed_greedy

if TYPE_CHECKING:  # OR-Tools is imported when a model is built (start-up speed); its types are for mypy only
    from ortools.sat.python.cp_model import IntVar


SCALE = 1000


#: Above this many GPU-count variables CP-SAT runs without presolve (measured: at 100 tenants × 500 nodes presolve
#: did not finish within 10 s per window, while the hinted search found a 0.35%-gap answer).
LARGE_MODEL_VARS = 20_000


#: Greedy hints (margin-aware packing) of the last few problems, so per-window models do not recompute them.
_HINTS: dict[int, tuple[TenantProblem, Mapping[tuple[str, int, str], int]]] = {}


def cpsat_status(cp_model, code) -> Status:
    """The :class:`Status` of CP-SAT's status code ``code`` (UNKNOWN and MODEL_INVALID: NO_SOLUTION)."""
    return {cp_model.OPTIMAL: Status.OPTIMAL, cp_model.FEASIBLE: Status.FEASIBLE,
            cp_model.INFEASIBLE: Status.INFEASIBLE}.get(code, Status.NO_SOLUTION)


def cut_by_clock(cp_model, code, solver, time_limit_s: float, deterministic_time: float | None) -> bool:
    """True if CP-SAT's wall-clock limit ``time_limit_s`` ended the search of ``solver`` (status ``code``): not
    proven optimal or infeasible, the wall time at the limit (99%), and the deterministic budget, if any, not used
    up. CP-SAT reports no stop reason, so this is read from its clocks."""
    if code in (cp_model.OPTIMAL, cp_model.INFEASIBLE):
        return False
    if solver.wall_time < 0.99 * time_limit_s:
        return False
    return deterministic_time is None or solver.deterministic_time < 0.99 * deterministic_time


class CpSatModel:
    """The node-level allocation model over ``windows`` in CP-SAT (interface of ``tenants_milp.TenantMilpModel``)."""

    def __init__(self, problem: TenantProblem, windows: Sequence[int], *, margin: bool = True,
                 hint: Mapping[tuple[str, int, str], int] | None = None) -> None:
        from ortools.sat.python import cp_model

        self.cp = cp_model
        self.problem, self.windows, self.margin = problem, list(windows), margin
        P = problem
        self.md = cp_model.CpModel()
        self.x: dict[tuple[str, int, str], IntVar] = {}
        self.y: dict[tuple[str, int, str], IntVar] = {}
        classes = sorted({t.interference_class for t in P.tenants})
        self._cmax = max([round(SCALE * P.class_coefficient(a, b)) for a in classes for b in classes] + [0])
        self.s: dict[tuple[int, str], IntVar] = {}
        self.p: dict[tuple[str, int, str], IntVar] = {}
        self.m: dict[tuple[str, int, str], IntVar] = {}
        self.v: dict[tuple[str, int], IntVar] = {}
        self.u: dict[tuple[str, int], IntVar] = {}
        for w in self.windows:
            for n in P.nodes:
                self._node(w, n)
            self._symmetry(w)
            for t in P.tenants:
                self._served(w, t)
        cap = P.capacity_gpu_windows
        wts = {t.name: round(SCALE * t.weight) for t in P.tenants}
        self.int_expr = {
            "utilization": sum(self.v.values()),
            "isolation": sum(self.s.values()),
            "sla": sum(wts[t] * u for (t, _), u in self.u.items()),
        }
        self.unit = {"utilization": 1.0 / (SCALE * cap), "isolation": 1.0 / SCALE, "sla": 1.0 / (SCALE * SCALE)}
        self._last: dict | None = None
        #: True when the last solve was ended by its wall-clock safety stop (not by its budget or a proof).
        self.cut_by_clock = False
        if hint is None:
            cached = _HINTS.get(id(P))
            if cached is None or cached[0] is not P:
                cached = _HINTS[id(P)] = (P, packed_greedy(P).gpus)
                while len(_HINTS) > 4:
                    _HINTS.pop(next(iter(_HINTS)))
            hint = {k: v for k, v in cached[1].items() if k[1] in set(self.windows)}
        self._hint(hint)

    def _node(self, w: int, n: Node) -> None:
        """Node n in window w: x and y of the tenants that may run there with (1), the coefficient s (thousandths)
        with (2) and (3) when two or more may (else s = 0), and (4)."""
        md = self.md
        here = [t for t in self.problem.tenants if t.runs_on(n.gpu) and t.wanted(w) > 0]
        for t in here:
            ub = min(n.gpus, t.wanted(w))
            x = self.x[t.name, w, n.name] = md.new_int_var(0, ub, f"x_{t.name}_{w}_{n.name}")
            y = self.y[t.name, w, n.name] = md.new_bool_var(f"y_{t.name}_{w}_{n.name}")
            # (1) A GPU count needs presence.
            md.add(x <= ub * y)
            md.add(x >= 1).only_enforce_if(y)
        s = self.s[w, n.name] = md.new_int_var(0, self._cmax if len(here) >= 2 else 0, f"s_{w}_{n.name}")
        if len(here) >= 2:
            self._interference(w, n, here, s)
        # (4) Capacity minus the interference headroom (thousandths of a GPU).
        node_load = sum(self.x[t.name, w, n.name] for t in here)
        md.add(SCALE * node_load + (n.gpus * s if self.margin else 0) <= SCALE * n.gpus)

    def _interference(self, w: int, n: Node, here: list[Tenant], s: IntVar) -> None:
        """(2) class presence p and same-class pairs m of node n in window w, and (3) the node coefficient s."""
        md, P = self.md, self.problem
        p: dict[str, IntVar] = {}
        for k in sorted({t.interference_class for t in here}):
            members = [self.y[t.name, w, n.name] for t in here if t.interference_class == k]
            p[k] = self.p[k, w, n.name] = md.new_bool_var(f"p_{k}_{w}_{n.name}")
            # (2) Class presence; two or more of one class set m.
            md.add_max_equality(p[k], members)
            if len(members) >= 2:
                m = self.m[k, w, n.name] = md.new_bool_var(f"m_{k}_{w}_{n.name}")
                md.add(sum(members) <= 1 + (len(members) - 1) * m)
                # (3) Same-class pair.
                md.add(s >= round(SCALE * P.class_coefficient(k, k)) * m)
        ks = sorted(p)
        for i, a in enumerate(ks):
            for b in ks[i + 1:]:
                # (3) The worst co-located class pair sets the node coefficient.
                md.add(s >= round(SCALE * P.class_coefficient(a, b)) * (p[a] + p[b] - 1))

    def _symmetry(self, w: int) -> None:
        """(7) Identical nodes are used in order of non-increasing load in window w."""
        P = self.problem
        load = {n.name: sum(self.x[t.name, w, n.name] for t in P.tenants if (t.name, w, n.name) in self.x)
                for n in P.nodes}
        for prev, n in zip(P.nodes, P.nodes[1:], strict=False):
            if (prev.gpu, prev.gpus) == (n.gpu, n.gpus):
                self.md.add(load[prev.name] >= load[n.name])

    def _served(self, w: int, t: Tenant) -> None:
        """Tenant t in window w (milli-GPUs): v within [guarantee, demand] with (5), (6), and u >= the SLA
        shortfall."""
        md, P = self.md, self.problem
        d_m = round(SCALE * float(t.demand_gpus[w]))
        g_m = math.ceil(SCALE * t.guaranteed(w) - 1e-6)
        v = self.v[t.name, w] = md.new_int_var(g_m, d_m, f"v_{t.name}_{w}")
        u = self.u[t.name, w] = md.new_int_var(0, d_m, f"u_{t.name}_{w}")
        held = sum(self.x[t.name, w, n.name] for n in P.nodes if (t.name, w, n.name) in self.x)
        # (5) Served GPUs are allocated GPUs; (6) burst limit and no GPUs beyond the demand.
        md.add(v <= SCALE * held)
        md.add(held <= t.wanted(w))
        md.add(u >= round(SCALE * t.sla_target * t.demand_gpus[w]) - v)

    def _hint(self, gpus: Mapping[tuple[str, int, str], int]) -> None:
        """Hint every variable from a GPU allocation (a complete hint lets CP-SAT start from it at once)."""
        P = self.problem
        self.md.clear_hints()
        x = {k: min(int(gpus.get(k, 0)), self.x_ub(k)) for k in self.x}
        for k, var in self.x.items():
            self.md.add_hint(var, x[k])
            self.md.add_hint(self.y[k], 1 if x[k] > 0 else 0)
        cls = {t.name: t.interference_class for t in P.tenants}
        for (klass, w, n), var in self.p.items():
            self.md.add_hint(var, int(any(x.get((t, w, n), 0) > 0 for t in cls if cls[t] == klass)))
        for (klass, w, n), var in self.m.items():
            self.md.add_hint(var, int(sum(x.get((t, w, n), 0) > 0 for t in cls if cls[t] == klass) >= 2))
        for (w, n), var in self.s.items():
            here = [t for t in P.tenants if x.get((t.name, w, n), 0) > 0]
            self.md.add_hint(var, round(SCALE * P.node_coefficient(here)) if len(here) >= 2 else 0)
        for (t, w), var in self.v.items():
            tt = P.tenant(t)
            held = sum(x.get((t, w, n.name), 0) for n in P.nodes)
            v = max(math.ceil(SCALE * tt.guaranteed(w) - 1e-6), min(round(SCALE * tt.demand_gpus[w]), SCALE * held))
            self.md.add_hint(var, v)
            self.md.add_hint(self.u[t, w], max(0, round(SCALE * tt.sla_target * tt.demand_gpus[w]) - v))

    def x_ub(self, k: tuple[str, int, str]) -> int:
        return int(list(self.x[k].proto.domain)[-1])

    def set_objective(self, coefs: dict[str, float]) -> None:
        """Maximize Σ coef_k · sense_k · objective_k (objective_k in Objectives units)."""
        # An integer objective (CP-SAT's float objectives are scaled with limited precision): each term's factor
        # relative to the smallest one, times 1000, rounded.
        a = {k: c * self.unit[k] for k, c in coefs.items() if c}
        lo = min(a.values())
        self._obj_scale = 1000.0 / lo
        self.md.maximize(sum(round(1000 * v / lo) * OBJECTIVE_SENSE[k] * self.int_expr[k] for k, v in a.items()))

    def add_limit(self, name: str, value: float) -> None:
        """utilization ≥ value, or isolation / sla ≤ value (Objectives units, rounded to the integer grid)."""
        scaled = value / self.unit[name]
        if OBJECTIVE_SENSE[name] > 0:
            self.md.add(self.int_expr[name] >= math.ceil(scaled - 1e-6))
        else:
            self.md.add(self.int_expr[name] <= math.floor(scaled + 1e-6))

    def solve(self, time_limit_s: float, threads: int = 1, budget: float | None = None) -> SolveOutcome:
        """Solve with CP-SAT (``threads`` workers, random seed CPSAT_SEED). ``budget``: the
        effort budget in CP-SAT's own work units (``max_deterministic_time``; None: none), the workers' search
        interleaved so that the same model and budget give the same answer on an idle or a busy machine.
        ``time_limit_s``: wall-clock seconds, a safety stop; :attr:`cut_by_clock` says afterwards whether it ended
        the search (the answer may then differ on another machine)."""
        cp = self.cp
        if self._last is not None:
            self._hint(self._last)
        solver = cp.CpSolver()
        limit_s = max(0.01, float(time_limit_s))
        solver.parameters.max_time_in_seconds = limit_s
        solver.parameters.num_workers = max(1, int(threads))
        solver.parameters.random_seed = CPSAT_SEED
        if budget is not None:
            solver.parameters.max_deterministic_time = float(budget)
            solver.parameters.interleave_search = solver.parameters.num_workers > 1
        if len(self.x) > LARGE_MODEL_VARS:
            # On large models presolve alone can use the whole budget; without it CP-SAT starts from the hint.
            solver.parameters.cp_model_presolve = False
        t0 = time.perf_counter()
        code = solver.solve(self.md)
        dt = time.perf_counter() - t0
        self.cut_by_clock = cut_by_clock(cp, code, solver, limit_s, budget)
        status = cpsat_status(cp, code)
        if status not in (Status.OPTIMAL, Status.FEASIBLE):
            if code == cp.MODEL_INVALID:
                raise SolverError(f"CP-SAT rejected the model: {self.md.validate()}")
            return SolveOutcome(status, {}, {}, None, None, dt)
        gpus = {k: int(solver.value(v)) for k, v in self.x.items() if solver.value(v) > 0}
        self._last = gpus
        values = {k: solver.value(e) * self.unit[k] for k, e in self.int_expr.items()}
        k = self._obj_scale
        return SolveOutcome(status, gpus, values, float(solver.objective_value) / k,
                            float(solver.best_objective_bound) / k, dt)
