"""CP-SAT model of time-windowed placement (OR-Tools), the same problem as ``fleetplan.solvers.milp``.

CP-SAT works on integers, so the continuous quantities are scaled, always in the safe direction so that every
CP-SAT answer is feasible for the exact problem (``validate`` re-checks):
- req/s in units of 1/RATE_SCALE req/s; demand rounded up, capacity coefficients rounded down;
- a shared GPU's compute in SHARE_SCALE parts: u[m,p,b,w] parts of the GPU serve u·cs[m,p]/SHARE_SCALE req/s,
  and Σ_m u ≤ floor(SHARE_SCALE·(1-μ))·y;
- memory in MB (footprints rounded up, the limit rounded down);
- cost in micro-dollars (rounded); the Plan's objective is re-evaluated exactly from the decisions.
Constraints are numbered as in the MILP's docstring; variables are indexed by the Problem's keys.
"""

from __future__ import annotations

import math
import time

from ortools.sat.python import cp_model

from fleetplan.placement.plan import Plan, SharedGPU, Status, evaluate, tidy_shared
from fleetplan.placement.problem import Problem
from fleetplan.solvers.common import build_index, by_model_and_site, warm_values

RATE_SCALE = 1000  # 1 unit = 0.001 req/s
_FUZZ = 1e-9  # relative: keeps 8999.999999 (float noise of 9000) from rounding to 8999; far inside validate's 1e-6


def _down(x: float) -> int:
    return math.floor(x * (1 + _FUZZ))


def _up(x: float) -> int:
    return math.ceil(x * (1 - _FUZZ))
SHARE_SCALE = 1000  # a shared GPU's compute in permille
COST_SCALE = 1e6  # micro-dollars


def solve_cpsat(problem: Problem, *, time_limit_s: float = 60, threads: int = 2, gap: float = 1e-4,
                warm_start: Plan | None = None, log: bool = False, deadline: float | None = None) -> Plan:
    """Build and solve the CP-SAT model; returns a new Plan (status, objective, bound and gap in USD).

    The bound is CP-SAT's best objective bound converted back to USD: a bound on the integer-scaled model, which is
    slightly more conservative than the exact problem, so ``solve`` reports the LP relaxation's bound instead when
    it has one. OPTIMAL means optimal for the scaled model; a time-limited stop is FEASIBLE, never OPTIMAL.
    """
    t0 = time.perf_counter()
    idx = build_index(problem)
    W = idx.W
    mu = 1 - problem.margin
    h = problem.window_hours
    pools = problem.pool_by_id
    models = problem.model_by_name
    md = cp_model.CpModel()

    # Variables.
    n = {(o.key, w): md.new_int_var(0, idx.ub[o.key], f"n_{i}_{w}") for i, o in enumerate(idx.options) for w in W}
    st = {(o.key, w): md.new_int_var(0, idx.ub[o.key], f"st_{i}_{w}") for i, o in enumerate(idx.options)
          for w in W if o.start_cost_usd > 0 and len(W) > 1}
    y = {(p, b): md.new_bool_var(f"y_{j}") for j, (p, b) in enumerate(idx.bins)}
    a, u = {}, {}
    share_cap_units = _down(SHARE_SCALE * mu)
    for j, (p, b) in enumerate(idx.bins):
        for m in idx.residents[(p, b)]:
            a[(m, p, b)] = md.new_bool_var(f"a_{j}_{m}")
            for w in W:
                u[(m, p, b, w)] = md.new_int_var(0, share_cap_units, f"u_{j}_{m}_{w}")
    q = {}
    for m, sites in idx.sites_of.items():
        if len(sites) > 1:
            dmax = max(models[m].demand_req_per_s)
            for s in sites:
                for w in W:
                    q[(m, s, w)] = md.new_int_var(0, math.ceil(dmax * RATE_SCALE), f"q_{m}_{s}_{w}")

    def served_coef(m: str, p: str) -> int:
        return _down(idx.share[(m, p)].capacity_req_per_s * RATE_SCALE / SHARE_SCALE)

    opts_of, bins_of = by_model_and_site(problem, idx)

    for m in problem.models:
        sites = idx.sites_of[m.name]
        for w in W:
            demand_units = _up(m.demand_req_per_s[w] * RATE_SCALE)
            # (1) Coverage at each site.
            for s in sites:
                supply = [_down(mu * o.capacity_req_per_s * RATE_SCALE) * n[(o.key, w)]
                          for o in opts_of.get((m.name, s), [])]
                supply += [served_coef(m.name, p) * u[(m.name, p, b, w)] for (p, b) in bins_of.get((m.name, s), [])]
                rhs = q[(m.name, s, w)] if len(sites) > 1 else demand_units
                md.add(sum(supply) >= rhs)
            # (2) Demand is served across sites.
            if len(sites) > 1:
                md.add(sum(q[(m.name, s, w)] for s in sites) >= demand_units)
            if not sites and demand_units > 0:
                md.add_bool_or([])  # no option at all: infeasible (explained before solving)

    for (p, b) in idx.bins:
        residents = idx.residents[(p, b)]
        for w in W:
            # (3) Compute share of a shared GPU stays within 1 - margin.
            md.add(sum(u[(m, p, b, w)] for m in residents) <= share_cap_units * y[(p, b)])
            # (4) Only resident models are served.
            for m in residents:
                md.add(u[(m, p, b, w)] <= share_cap_units * a[(m, p, b)])
        # (5) Resident footprints fit the GPU's memory (MB: footprints up, limit down).
        lim_mb = math.floor(pools[p].memory_bytes_per_gpu * problem.shared_memory_utilization / 1e6)
        md.add(sum(math.ceil(idx.share[(m, p)].memory_bytes / 1e6) * a[(m, p, b)] for m in residents)
               <= lim_mb * y[(p, b)])
        # (10) At most K models reside on one shared GPU.
        if problem.max_models_per_shared_gpu is not None:
            md.add(sum(a[(m, p, b)] for m in residents) <= problem.max_models_per_shared_gpu * y[(p, b)])
        # (9) Symmetry breaking.
        if b > 0:
            md.add(y[(p, b)] <= y[(p, b - 1)])

    for pid, pool in pools.items():
        bins = [y[k] for k in idx.bins if k[0] == pid]
        opts = [o for o in idx.options if o.pool == pid]
        if not opts and not bins:
            continue
        for w in W:
            # (6) Inventory.
            md.add(sum(o.gpus * n[(o.key, w)] for o in opts) + sum(bins) <= pool.gpus)

    for m in problem.models:
        resident = [var for (mm, p, b), var in a.items() if mm == m.name]
        for w in W:
            reps = [n[(o.key, w)] for o in idx.options if o.model == m.name] + resident
            # (7) Replica floor and ceiling.
            if m.min_replicas:
                md.add(sum(reps) >= m.min_replicas)
            if m.max_replicas is not None:
                md.add(sum(reps) <= m.max_replicas)

    # (8) Starts (cyclic).
    for (key, w), var in st.items():
        md.add(var >= n[(key, w)] - n[(key, W[w - 1])])

    # Objective in micro-dollars.
    terms = []
    for o in idx.options:
        c = round(o.gpus * pools[o.pool].usd_per_gpu_hour * h * COST_SCALE)
        terms += [c * n[(o.key, w)] for w in W]
        sc = round(o.start_cost_usd * COST_SCALE)
        terms += [sc * st[(o.key, w)] for w in W if (o.key, w) in st]
    for (p, _b), var in y.items():
        terms.append(round(pools[p].usd_per_gpu_hour * h * len(W) * COST_SCALE) * var)
    for (m, s, _w), var in q.items():
        e = problem.egress_usd_per_req_per_s_window(models[m], s) / RATE_SCALE
        if e:
            terms.append(round(e * COST_SCALE) * var)
    md.minimize(sum(terms))

    # Hint: the greedy plan.
    used_hint = False
    warm = warm_values(problem, idx, warm_start) if warm_start is not None else {}
    if warm:
        used_hint = True
        for (key, w), var in n.items():
            md.add_hint(var, warm["n"][key][w])
        for (key, w), var in st.items():
            md.add_hint(var, warm["st"][key][w])
        for k, var in y.items():
            md.add_hint(var, warm["y"].get(k, 0))
        for k, var in a.items():
            md.add_hint(var, warm["a"].get(k, 0))
        for (m, p, b, w), var in u.items():
            f = warm["f"].get((m, p, b), [0.0] * len(W))[w]
            md.add_hint(var, min(share_cap_units, math.ceil(f / idx.share[(m, p)].capacity_req_per_s * SHARE_SCALE)))
        for k, var in q.items():
            md.add_hint(var, math.ceil(warm["q"].get(k, 0.0) * RATE_SCALE))

    if deadline is not None:
        time_limit_s = max(1.0, min(time_limit_s, deadline - time.perf_counter()))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit_s)
    solver.parameters.num_workers = max(1, int(threads or 1))
    solver.parameters.relative_gap_limit = float(gap)
    solver.parameters.log_search_progress = log
    code = solver.solve(md)
    elapsed = time.perf_counter() - t0
    if code == cp_model.INFEASIBLE:
        return Plan(status=Status.INFEASIBLE, backend="cpsat", solve_time_s=elapsed)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return Plan(status=Status.NO_SOLUTION, backend="cpsat", solve_time_s=elapsed,
                    message=f"no feasible plan within {time_limit_s:g} s ({solver.status_name(code)})")
    replicas = {}
    for o in idx.options:
        counts = tuple(int(solver.value(n[(o.key, w)])) for w in W)
        if any(counts):
            replicas[o.key] = counts
    shared = []
    for (p, b), var in y.items():
        if solver.value(var):
            residents = tuple(m for m in idx.residents[(p, b)] if solver.value(a[(m, p, b)]))
            served = {m: tuple(solver.value(u[(m, p, b, w)]) * idx.share[(m, p)].capacity_req_per_s / SHARE_SCALE
                               for w in W) for m in residents}
            shared.append(SharedGPU(pool=p, models=residents, served_req_per_s=served))
    shared = list(tidy_shared(problem, replicas, tuple(shared)))
    plan = Plan(replicas=replicas, shared=tuple(shared))
    objective = evaluate(problem, plan).total_usd
    bound = min(objective, solver.best_objective_bound / COST_SCALE)
    status = Status.OPTIMAL if code == cp_model.OPTIMAL else Status.FEASIBLE
    g = (objective - bound) / objective if objective > 0 else 0.0
    message = ("hinted with the heuristic plan; " if used_hint else "") + (
        f"optimal within the {gap:.2%} relative gap" if status is Status.OPTIMAL
        else f"time limit {time_limit_s:.0f} s reached")
    return Plan(replicas=replicas, shared=tuple(shared), status=status, backend="cpsat", objective_usd=objective,
                bound_usd=bound, gap=max(0.0, g), solve_time_s=time.perf_counter() - t0, message=message)
