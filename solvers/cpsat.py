"""CP-SAT model of time-windowed placement (OR-Tools), the same problem as ``fleetplan.solvers.milp``.

CP-SAT works on integers. The scaling here makes the CP-SAT model a *relaxation* of the exact problem whose error
is bounded far inside ``validate``'s tolerance (1e-6), so that every plan feasible for the MILP is feasible for the
CP-SAT model (its optimum and bound are valid lower bounds on the exact optimum) and every CP-SAT answer, once its
served rates are recomputed exactly, passes ``validate``:
- a shared GPU's compute in SHARE_PARTS parts (u[m,p,b,w] parts serve u·cs[m,p]/SHARE_PARTS req/s); the share row
  is Σ_m u <= floor(SHARE_PARTS·(1-μ)) + k_pb (k_pb = most residents the GPU can hold): the slack absorbs the
  rounding up of a MILP plan's rates to whole parts; SHARE_PARTS is chosen so that k_pb / SHARE_PARTS <= SCALE_ERROR;
- req/s of model m in units of 1/R_m (a power of two); supply coefficients rounded *up* (a relaxation), demand
  rounded down; R_m is chosen so that rounding one part or one replica costs at most SCALE_ERROR of the rate;
- egress through qe[m,s,w] in 1/1024 req/s, qe >= (q - 1 unit) rounded down, costs rounded down;
- cost in nano-dollars, rounded *down* (so CP-SAT's bound stays a bound on the exact cost);
- request classes (constraint (12)): z[o,c,w] parts of option o's usable capacity given to class c, LOAD_PARTS
  parts per replica (a power of two with C_o / LOAD_PARTS <= SCALE_ERROR, C_o the classes o serves); one part
  serves (1-μ)·cap_o,c / LOAD_PARTS req/s of class c, in rate units rounded *up*; (12b) is
  Σ_c z[o,c,w] <= (LOAD_PARTS + C_o)·n[o,w] (the C_o slack absorbs the rounding up of a MILP routing to whole
  parts, and is 0 without a replica); (12a) Σ_o supply >= the class's demand in rate units, rounded down. R_m is
  chosen so that one part's rounding is at most SCALE_ERROR of its rate. A class model has no shared GPUs and no
  egress (the Problem refuses both), so it needs no site split q: (12a) over all its options covers the demand.
After the solve, the served rates of the shared GPUs are recomputed exactly from the integer decisions (the
demand left after the dedicated replicas, split in proportion to CP-SAT's parts) and the plan is re-checked by
``validate``; if the check fails (a scaling error beyond the bound), the warm start is returned and the message
says so. Constraints are numbered as in the MILP's docstring; variables are indexed by the Problem's keys.
"""

from __future__ import annotations

import math
import time

from ortools.sat.python import cp_model

from fleetplan.errors import SolverError
from fleetplan.placement.plan import Plan, SharedGPU, Status, tidy_shared
from fleetplan.placement.problem import Problem
from fleetplan.placement.validate import validate
from fleetplan.solvers.common import TIME_LIMIT_SHARE, build_index, by_model_and_site, finish_plan, warm_values

#: Largest relative error each scaling step may add (well inside validate's 1e-6).
SCALE_ERROR = 2.5e-7
COST_SCALE = 1e9  # nano-dollars
EGRESS_UNITS_PER_REQ_PER_S = 1024
#: Largest demand of a class in rate units (2**60: with the parts' own bounds every row stays inside int64).
MAX_UNITS = 1 << 60


def _pow2_at_least(x: float) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1.0, x))))


def _up(x: float) -> int:
    return math.ceil(x)  # exact: every rounding here goes in the relaxing direction, float noise included


def _down(x: float) -> int:
    return math.floor(x)


#: Parts per unit of a spot pool's interruption rate in the fallback row (14), rounded down: a relaxation.
RATE_PARTS = 1_000_000


def _add_purchase(problem: Problem, idx, md: cp_model.CpModel, n: dict, y: dict) -> dict:
    """The MILP's (15) commitments (returns {pool id: c variable}; the caller adds their cost) and (16) spot
    fallback rows, the rate in RATE_PARTS rounded down (a relaxation; validate checks the exact rule)."""
    def use(pid: str, w: int) -> list:
        return ([o.gpus * n[(o.key, w)] for o in idx.options if o.pool == pid]
                + [var for (p, _b), var in y.items() if p == pid])

    commit = {}
    pools = problem.pool_by_id
    for j, pool in enumerate(problem.pools):
        if pool.committed and use(pool.id, 0):
            commit[pool.id] = md.new_int_var(0, pool.gpus, f"commit_{j}")
            for w in idx.W:
                md.add(sum(use(pool.id, w)) <= commit[pool.id])
        if pool.fallback_pool is not None and pool.interruption_rate:
            fb = pools[pool.fallback_pool]
            rho = _down(pool.interruption_rate * RATE_PARTS)
            for w in idx.W:
                if use(pool.id, w):
                    md.add(rho * sum(use(pool.id, w)) + RATE_PARTS * sum(use(fb.id, w)) <= RATE_PARTS * fb.gpus)
    return commit


def load_parts(problem: Problem) -> int:
    """LOAD_PARTS of the module docstring: parts of a replica's usable capacity in the class routing (1 without
    classes): the least power of two with (most classes an option serves) / parts <= SCALE_ERROR."""
    most = max((len(o.class_capacity_req_per_s) for o in problem.options), default=0)
    return _pow2_at_least(most / SCALE_ERROR) if most else 1


def scales(problem: Problem, idx) -> tuple[int, dict[str, int], dict[tuple[str, int], int]]:
    """(SHARE_PARTS, {model: R_m rate units per req/s}, {bin: k_pb}) for the scaling in the module docstring."""
    pools = problem.pool_by_id
    kmax = {}
    for (p, b), residents in idx.residents.items():
        lim = pools[p].memory_bytes_per_gpu * problem.shared_memory_utilization
        fp = sorted(idx.share[(m, p)].memory_bytes for m in residents)
        fit = 0
        used = 0.0
        for x in fp:
            if used + x > lim * (1 + 1e-9):
                break
            used += x
            fit += 1
        k = min(len(residents), fit)
        if problem.max_models_per_shared_gpu is not None:
            k = min(k, problem.max_models_per_shared_gpu)
        kmax[(p, b)] = max(1, k)
    parts = _pow2_at_least(max(kmax.values(), default=1) / SCALE_ERROR)
    mu = 1 - problem.margin
    rate = {}
    for m in problem.models:
        need = EGRESS_UNITS_PER_REQ_PER_S
        caps = [mu * o.capacity_req_per_s for o in idx.options if o.model == m.name]
        if caps:
            need = max(need, 1 / (min(caps) * SCALE_ERROR))
        css = [s.capacity_req_per_s for (mm, _p), s in idx.share.items() if mm == m.name]
        if css:
            need = max(need, parts / (min(css) * SCALE_ERROR))
        ccs = [mu * c for o in idx.options if o.model == m.name for _k, c in o.class_capacity_req_per_s]
        if ccs:  # one part of a class route: (1-μ)·cap_o,c / LOAD_PARTS req/s, rounded up by at most one unit
            need = max(need, load_parts(problem) / (min(ccs) * SCALE_ERROR))
        rate[m.name] = _pow2_at_least(need)
    return parts, rate, kmax


def _fill_shared(problem: Problem, replicas: dict, shared: list[tuple[str, tuple[str, ...], dict]]) -> tuple:
    """Shared GPUs with exact served rates: each model's demand left after its dedicated replicas, split over its
    shared GPUs in proportion to CP-SAT's parts (equally where it gave none)."""
    opts = problem.option_by_key
    W = problem.n_windows
    mu = 1 - problem.margin
    ded = {m.name: [0.0] * W for m in problem.models}
    for key, counts in replicas.items():
        o = opts[key]
        for w, n in enumerate(counts):
            ded[o.model][w] += n * o.capacity_req_per_s * mu
    weight: dict[str, list[list[float]]] = {}
    for i, (_p, _res, parts) in enumerate(shared):
        for m, u in parts.items():
            weight.setdefault(m, [[0.0] * len(shared) for _ in range(W)])
            for w in range(W):
                weight[m][w][i] = u[w]
    served: list[dict[str, list[float]]] = [{m: [0.0] * W for m in res} for (_p, res, _u) in shared]
    for m, per_w in weight.items():
        d = problem.model_by_name[m].demand_req_per_s
        for w in range(W):
            need = max(0.0, d[w] - ded[m][w])
            tot = sum(per_w[w])
            holders = [i for i in range(len(shared)) if m in shared[i][1]]
            for i in holders:
                share = per_w[w][i] / tot if tot > 0 else 1 / len(holders)
                served[i][m][w] = need * share
    return tuple(SharedGPU(pool=p, models=res, served_req_per_s={m: tuple(v) for m, v in served[i].items()})
                 for i, (p, res, _u) in enumerate(shared))


def _class_routing(problem: Problem, idx, md: cp_model.CpModel, n: dict, R: dict[str, int], mu: float) -> dict:
    """Constraint (12) in integers (module docstring): adds z[o,c,w] and rows (12a), (12b) to ``md``; returns z."""
    lp = load_parts(problem)
    z: dict = {}
    for m in problem.models:
        if not m.class_shares:
            continue
        r = R[m.name]
        mine = [o for o in idx.options if o.model == m.name]
        for w in idx.W:
            for cls, share in m.class_shares:
                demand_units = _down(share * m.demand_req_per_s[w] * r)
                supply = []
                for o in mine:
                    cap = o.class_capacity.get(cls)
                    if cap is None:
                        continue
                    per_part = _up(mu * cap * r / lp)  # rate units one part serves, rounded up (a relaxation)
                    # a route never needs more parts than carry the whole class demand (keeps products in int64)
                    most = min((lp + len(o.class_capacity)) * idx.ub[o.key], demand_units // per_part + 2)
                    z[(o.key, cls, w)] = md.new_int_var(0, most, f"z_{len(z)}")
                    supply.append(per_part * z[(o.key, cls, w)])
                if demand_units > MAX_UNITS:
                    raise SolverError(f"model {m.name}: its class capacities and demand span too wide a range for "
                                      "CP-SAT's integer scaling; use --backend highs")
                # (12a) each class is served.
                if supply:
                    md.add(sum(supply) >= demand_units)
                elif demand_units > 0:
                    md.add_bool_or([])  # no option serves this class: infeasible (explained before solving)
            for o in mine:
                # (12b) additive load within the replicas' usable capacity (plus the rounding slack C_o parts).
                load = [z[(o.key, c, w)] for c in o.class_capacity if (o.key, c, w) in z]
                md.add(sum(load) <= (lp + len(o.class_capacity)) * n[(o.key, w)])
    return z


def solve_cpsat(problem: Problem, *, time_limit_s: float = 60, threads: int = 2, gap: float = 1e-4,
                warm_start: Plan | None = None, log: bool = False, deadline: float | None = None,
                extra_bounds: dict[str, float | None] | None = None) -> Plan:
    """Build and solve the CP-SAT model; returns a new Plan (status, objective, bound and gap in USD).

    The bound is CP-SAT's best objective bound in USD: a valid lower bound on the exact optimum because the model
    is a relaxation with costs rounded down (module docstring). Status and message follow
    :func:`fleetplan.solvers.common.finish_plan` (the cheaper of CP-SAT's plan and ``warm_start`` is returned).
    """
    t0 = time.perf_counter()
    idx = build_index(problem)
    W = idx.W
    mu = 1 - problem.margin
    h = problem.window_hours
    pools = problem.pool_by_id
    models = problem.model_by_name
    parts, R, kmax = scales(problem, idx)
    share_cap = _down(parts * mu)
    md = cp_model.CpModel()

    # Variables.
    n = {(o.key, w): md.new_int_var(0, idx.ub[o.key], f"n_{i}_{w}") for i, o in enumerate(idx.options) for w in W}
    st = {(o.key, w): md.new_int_var(0, idx.ub[o.key], f"st_{i}_{w}") for i, o in enumerate(idx.options)
          for w in W if o.start_cost_usd > 0 and len(W) > 1}
    y = {(p, b): md.new_bool_var(f"y_{j}") for j, (p, b) in enumerate(idx.bins)}
    a, u = {}, {}
    for j, (p, b) in enumerate(idx.bins):
        for mname in idx.residents[(p, b)]:
            a[(mname, p, b)] = md.new_bool_var(f"a_{j}_{mname}")
            for w in W:
                u[(mname, p, b, w)] = md.new_int_var(0, share_cap + kmax[(p, b)], f"u_{j}_{mname}_{w}")
    q, qe = {}, {}
    for mname, sites in idx.sites_of.items():
        if len(sites) > 1 and not models[mname].class_shares:  # a class model covers its demand by (12a)
            dmax = max(models[mname].demand_req_per_s)
            for s in sites:
                for w in W:
                    q[(mname, s, w)] = md.new_int_var(0, _up(dmax * R[mname]) + 1, f"q_{mname}_{s}_{w}")
                    if problem.egress_usd_per_req_per_s_window(models[mname], s):
                        qe[(mname, s, w)] = md.new_int_var(0, _up(dmax * EGRESS_UNITS_PER_REQ_PER_S) + 1,
                                                       f"qe_{mname}_{s}_{w}")
                        per = R[mname] // EGRESS_UNITS_PER_REQ_PER_S
                        # qe >= floor((q - 1) / per): any exact routing has a qe no larger than its own rate.
                        md.add(per * qe[(mname, s, w)] >= q[(mname, s, w)] - per + 1)

    opts_of, bins_of = by_model_and_site(problem, idx)
    _class_routing(problem, idx, md, n, R, mu)
    for m in problem.models:
        if m.class_shares:
            continue  # (1) and (2) are (12a) for a model with request classes
        sites = idx.sites_of[m.name]
        r = R[m.name]
        for w in W:
            demand_units = _down(m.demand_req_per_s[w] * r)
            # (1) Coverage at each site (supply rounded up: a relaxation).
            for s in sites:
                supply = [_up(mu * o.capacity_req_per_s * r) * n[(o.key, w)] for o in opts_of.get((m.name, s), [])]
                supply += [_up(idx.share[(m.name, p)].capacity_req_per_s * r / parts) * u[(m.name, p, b, w)]
                           for (p, b) in bins_of.get((m.name, s), [])]
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
            # (3) Compute share of a shared GPU (plus the rounding slack k_pb parts).
            md.add(sum(u[(m, p, b, w)] for m in residents) <= (share_cap + kmax[(p, b)]) * y[(p, b)])
            # (4) Only resident models are served.
            for mname in residents:
                md.add(u[(mname, p, b, w)] <= (share_cap + kmax[(p, b)]) * a[(mname, p, b)])
        # (5) Resident footprints fit the GPU's memory (kB: footprints down, limit up: a relaxation; validate
        # checks the exact bytes).
        lim_kb = _up(pools[p].memory_bytes_per_gpu * problem.shared_memory_utilization / 1e3)
        md.add(sum(_down(idx.share[(m, p)].memory_bytes / 1e3) * a[(m, p, b)] for m in residents)
               <= lim_kb * y[(p, b)])
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
    commit = _add_purchase(problem, idx, md, n, y)

    # Objective in nano-dollars, every coefficient rounded down (CP-SAT's bound stays a bound on the exact cost).
    terms = []
    for o in idx.options:
        c = _down(o.gpus * pools[o.pool].usd_per_gpu_hour * h * COST_SCALE)
        terms += [c * n[(o.key, w)] for w in W]
        sc = _down(o.start_cost_usd * COST_SCALE)
        terms += [sc * st[(o.key, w)] for w in W if (o.key, w) in st]
    for (p, _b), var in y.items():
        terms.append(_down(pools[p].usd_per_gpu_hour * h * len(W) * COST_SCALE) * var)
    for (mname, s, _w), var in qe.items():
        e = problem.egress_usd_per_req_per_s_window(models[mname], s) / EGRESS_UNITS_PER_REQ_PER_S
        terms.append(_down(e * COST_SCALE) * var)
    for pid, var in commit.items():
        terms.append(_down(pools[pid].committed_usd_per_gpu_hour * problem.horizon_hours * COST_SCALE) * var)
    md.minimize(sum(terms))

    # Hint: the warm start.
    warm = warm_values(problem, idx, warm_start) if warm_start is not None else {}
    if warm:
        for (key, w), var in n.items():
            md.add_hint(var, warm["n"][key][w])
        for (key, w), var in st.items():
            md.add_hint(var, warm["st"][key][w])
        for k, var in y.items():
            md.add_hint(var, warm["y"].get(k, 0))
        for ka, var in a.items():
            md.add_hint(var, warm["a"].get(ka, 0))
        for (mname, p, b, w), var in u.items():
            f = warm["f"].get((mname, p, b), [0.0] * len(W))[w]
            md.add_hint(var, min(share_cap, _up(f / idx.share[(mname, p)].capacity_req_per_s * parts)))
        for (mname, s, w), var in q.items():
            md.add_hint(var, _down(warm["q"].get((mname, s, w), 0.0) * R[mname]))

    if deadline is not None:
        time_limit_s = min(time_limit_s, deadline - time.perf_counter())
    bounds = dict(extra_bounds or {})
    if time_limit_s <= 0.05:
        return finish_plan(problem, backend="cpsat", gap=gap, bounds=bounds, start=warm_start,
                           time_limit_reached=True, time_limit_s=max(0.0, time_limit_s),
                           solve_time_s=time.perf_counter() - t0,
                           notes=("no time left for the solver after building the model",))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit_s)
    solver.parameters.num_workers = max(1, int(threads or 1))
    solver.parameters.relative_gap_limit = float(gap)
    solver.parameters.log_search_progress = log
    code = solver.solve(md)
    reached = code != cp_model.OPTIMAL and solver.wall_time >= TIME_LIMIT_SHARE * time_limit_s
    if code == cp_model.INFEASIBLE:
        return Plan(status=Status.INFEASIBLE, backend="cpsat", solve_time_s=time.perf_counter() - t0)
    if code == cp_model.MODEL_INVALID:
        raise RuntimeError(f"CP-SAT rejected the model: {md.validate()}")
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE) or math.isfinite(solver.best_objective_bound):
        cp_bound = solver.best_objective_bound / COST_SCALE
        bounds["CP-SAT"] = cp_bound if math.isfinite(cp_bound) else None
    incumbent = None
    notes: list[str] = []
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        replicas = {}
        for o in idx.options:
            counts = tuple(int(solver.value(n[(o.key, w)])) for w in W)
            if any(counts):
                replicas[o.key] = counts
        raw = []
        for (p, b), var in y.items():
            if solver.value(var):
                residents = tuple(m for m in idx.residents[(p, b)] if solver.value(a[(m, p, b)]))
                raw.append((p, residents, {m: [solver.value(u[(m, p, b, w)]) for w in W] for m in residents}))
        shared = tidy_shared(problem, replicas, _fill_shared(problem, replicas, raw))
        incumbent = Plan(replicas=replicas, shared=shared,
                         commitments={pid: int(solver.value(var)) for pid, var in commit.items()})
        report = validate(problem, incumbent, check_objective=False)
        if not report.ok:
            notes.append("CP-SAT's plan fails the exact check after rescaling (" + report.violations[0] + ")")
            incumbent = None
    return finish_plan(problem, backend="cpsat", gap=gap, bounds=bounds, incumbent=incumbent, start=warm_start,
                       time_limit_reached=reached, time_limit_s=time_limit_s, solve_time_s=time.perf_counter() - t0,
                       notes=tuple(notes))
