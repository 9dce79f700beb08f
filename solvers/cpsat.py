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
Restricted class routing (``build_cpsat(..., restrict_classes=True)``, which :func:`fleetplan.solvers.solve.solve`
uses): the relaxation above needs LOAD_PARTS = 2**24 parts per replica, so a class route's variable ranges over
up to 10**8 values, and CP-SAT's workers then branch through those domains a value at a time (a one-window model
of a 70B day with 2 x 2 classes: 42 CPU seconds for 1 unit of deterministic time, which does not count that
work). The restricted routing uses RESTRICTED_CLASS_PARTS parts per replica with every rounding the other way: one
part serves (1-μ)·cap_o,c / RESTRICTED_CLASS_PARTS req/s rounded *down*, the class's demand is rounded *up*, and
(12b) has no slack, so every answer routes its classes exactly within the replicas' usable capacity (validate
passes), at the price of at most C_o parts of one replica per option (0.4% of a replica with 4 classes); the
model is then a restriction, its objective bound is no bound on the problem, and ``solve_cpsat`` reports none
(the caller's bounds, e.g. HiGHS's LP relaxation and per-window bound, give the gap).
After the solve, the served rates of the shared GPUs are recomputed exactly from the integer decisions (the
demand left after the dedicated replicas, split in proportion to CP-SAT's parts) and the plan is re-checked by
``validate``; if the check fails (a scaling error beyond the bound), the warm start is returned and the message
says so. Constraints are numbered as in the MILP's docstring and built by one function each, in the MILP's order
(:func:`build_cpsat`); variables are indexed by the Problem's keys through the MILP's index
(:class:`fleetplan.solvers.common.Index`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from ortools.sat.python import cp_model

from fleetplan.errors import SolverError
from fleetplan.placement.plan import Plan, SharedGPU, Status, tidy_shared
from fleetplan.placement.problem import Problem
from fleetplan.placement.validate import validate
from fleetplan.solvers.common import (
    TIME_LIMIT_SHARE,
    Index,
    build_index,
    by_model_and_site,
    finish_plan,
    spread_rows,
    warm_values,
)

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


#: Parts per unit of a spot pool's interruption rate in the fallback row (16), rounded down: a relaxation.
RATE_PARTS = 1_000_000


#: Parts of a replica's usable capacity in the restricted class routing (module docstring): a power of two; at
#: most C_o of them per option are lost to rounding, and a route's variable ranges over at most this many values
#: per replica (2**24 in the relaxation).
RESTRICTED_CLASS_PARTS = 1024


def load_parts(problem: Problem, restricted: bool = False) -> int:
    """LOAD_PARTS of the module docstring: parts of a replica's usable capacity in the class routing (1 without
    classes): the least power of two with (most classes an option serves) / parts <= SCALE_ERROR, or
    RESTRICTED_CLASS_PARTS for the restricted routing."""
    most = max((len(o.class_capacity_req_per_s) for o in problem.options), default=0)
    if not most:
        return 1
    return RESTRICTED_CLASS_PARTS if restricted else _pow2_at_least(most / SCALE_ERROR)


def scales(problem: Problem, idx, restricted: bool = False) -> tuple[int, dict[str, int], dict[tuple[str, int], int]]:
    """(SHARE_PARTS, {model: R_m rate units per req/s}, {bin: k_pb}) for the scaling in the module docstring
    (``restricted``: R_m for the restricted class routing's parts)."""
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
            need = max(need, load_parts(problem, restricted) / (min(ccs) * SCALE_ERROR))
        rate[m.name] = _pow2_at_least(need)
    return parts, rate, kmax


def _fill_shared(problem: Problem, replicas: dict, shared: list[tuple[str, tuple[str, ...], dict]]) -> tuple:
    """Shared GPUs with exact served rates: each model's demand left after its dedicated replicas, split over its
    shared GPUs in proportion to the req/s CP-SAT's parts give there (parts × cs[m,p]: a part of a small GPU
    serves less than one of a large one; equally where it gave none)."""
    opts = problem.option_by_key
    W = problem.n_windows
    mu = 1 - problem.margin
    ded = {m.name: [0.0] * W for m in problem.models}
    for key, counts in replicas.items():
        o = opts[key]
        for w, n in enumerate(counts):
            ded[o.model][w] += n * o.capacity_req_per_s * mu
    weight: dict[str, list[list[float]]] = {}
    cs = problem.share_by_key
    for i, (p, _res, parts) in enumerate(shared):
        for m, u in parts.items():
            weight.setdefault(m, [[0.0] * len(shared) for _ in range(W)])
            for w in range(W):
                weight[m][w][i] = u[w] * cs[(m, p)].capacity_req_per_s
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


@dataclass
class PlacementCpSatModel:
    """A CP-SAT model of :func:`build_cpsat`: the problem, its index (the MILP's,
    :func:`fleetplan.solvers.common.build_index`), the scaling of the module docstring and the variables, keyed
    like the MILP's. Variables: n[o,w], st[o,w], y[p,b], a[m,p,b], u[m,p,b,w] (parts of a shared GPU's compute),
    q[m,s,w] (rate units), qe[m,s,w] (1/EGRESS_UNITS_PER_REQ_PER_S req/s), z[o,c,w] (parts of a replica's usable
    capacity, with z_units[o,c,w] the rate units one part serves and class_units[m,c,w] the class's demand in
    rate units), c[p] (the commitments of (15)); opts_of, bins_of: :func:`fleetplan.solvers.common.by_model_and_site`;
    load_parts: :func:`load_parts`; restricted: the restricted class routing (module docstring); objective: the
    objective's linear expression (nano-dollars)."""

    problem: Problem
    idx: Index
    md: cp_model.CpModel
    parts: int
    R: dict[str, int]
    kmax: dict[tuple[str, int], int]
    n: dict = field(default_factory=dict)
    st: dict = field(default_factory=dict)
    y: dict = field(default_factory=dict)
    a: dict = field(default_factory=dict)
    u: dict = field(default_factory=dict)
    q: dict = field(default_factory=dict)
    qe: dict = field(default_factory=dict)
    z: dict = field(default_factory=dict)
    z_units: dict = field(default_factory=dict)
    class_units: dict = field(default_factory=dict)
    c: dict = field(default_factory=dict)
    opts_of: dict = field(default_factory=dict)
    bins_of: dict = field(default_factory=dict)
    load_parts: int = 1
    restricted: bool = False
    objective: Any = 0

    @property
    def mu(self) -> float:
        """1 - μ: the usable share of a capacity after the margin."""
        return 1 - self.problem.margin

    @property
    def share_cap(self) -> int:
        """floor(SHARE_PARTS·(1-μ)): the parts of a shared GPU's compute within the margin."""
        return _down(self.parts * self.mu)


def build_cpsat(problem: Problem, *, restrict_classes: bool = False) -> PlacementCpSatModel:
    """The CP-SAT model of ``problem`` (module docstring): the MILP's numbered blocks over the MILP's index, its rows
    in the MILP's order (``fleetplan.solvers.milp._constraints``), no hint. ``restrict_classes``: the restricted
    class routing (module docstring; the model is then a restriction for a problem with request classes). Raises
    SolverError when a class model's capacities and demand span too wide a range for the integer scaling."""
    idx = build_index(problem)
    restricted = restrict_classes and problem.has_classes
    parts, R, kmax = scales(problem, idx, restricted)
    cb = PlacementCpSatModel(problem, idx, cp_model.CpModel(), parts, R, kmax,
                             load_parts=load_parts(problem, restricted), restricted=restricted)
    _variables(cb)
    _constraints(cb)
    _objective(cb)
    return cb


def _variables(cb: PlacementCpSatModel) -> None:
    """Every variable, in the order of their indices: n, st, y, a and u (per candidate shared GPU), q and qe (with
    qe's defining rows), z, c."""
    problem, idx, md = cb.problem, cb.idx, cb.md
    W = idx.W
    cb.opts_of, cb.bins_of = by_model_and_site(problem, idx)
    cb.n = {(o.key, w): md.new_int_var(0, idx.ub[o.key], f"n_{i}_{w}") for i, o in enumerate(idx.options) for w in W}
    cb.st = {(o.key, w): md.new_int_var(0, idx.ub[o.key], f"st_{i}_{w}") for i, o in enumerate(idx.options)
             for w in W if o.start_cost_usd > 0 and len(W) > 1}
    cb.y = {(p, b): md.new_bool_var(f"y_{j}") for j, (p, b) in enumerate(idx.bins)}
    for j, (p, b) in enumerate(idx.bins):
        for mname in idx.residents[(p, b)]:
            cb.a[(mname, p, b)] = md.new_bool_var(f"a_{j}_{mname}")
            for w in W:
                cb.u[(mname, p, b, w)] = md.new_int_var(0, cb.share_cap + cb.kmax[(p, b)], f"u_{j}_{mname}_{w}")
    _site_variables(cb)
    _class_variables(cb)
    for j, pool in enumerate(problem.pools):
        if pool.committed and _pool_use(cb, pool.id, 0):
            cb.c[pool.id] = md.new_int_var(0, pool.gpus, f"commit_{j}")


def _site_variables(cb: PlacementCpSatModel) -> None:
    """q[m,s,w] for the models without classes with capacity at several sites, and qe[m,s,w] where serving m at s
    pays egress, with qe >= floor((q - 1 unit) / units per qe): any exact routing has a qe no larger than its own
    rate."""
    problem, md = cb.problem, cb.md
    models = problem.model_by_name
    for mname, sites in cb.idx.sites_of.items():
        if len(sites) <= 1 or models[mname].class_shares:  # a class model covers its demand by (12a)
            continue
        dmax = max(models[mname].demand_req_per_s)
        for s in sites:
            for w in cb.idx.W:
                q = cb.q[(mname, s, w)] = md.new_int_var(0, _up(dmax * cb.R[mname]) + 1, f"q_{mname}_{s}_{w}")
                if problem.egress_usd_per_req_per_s_window(models[mname], s):
                    qe = cb.qe[(mname, s, w)] = md.new_int_var(0, _up(dmax * EGRESS_UNITS_PER_REQ_PER_S) + 1,
                                                               f"qe_{mname}_{s}_{w}")
                    per = cb.R[mname] // EGRESS_UNITS_PER_REQ_PER_S
                    md.add(per * qe >= q - per + 1)


def _class_variables(cb: PlacementCpSatModel) -> None:
    """(12)'s z[o,c,w] (module docstring): for each class of a model and each option serving it, the parts of the
    option's usable capacity routed to the class, with the rate units one part serves rounded *up* (a relaxation)
    and the class's demand in rate units rounded down (the restricted routing: the other way, and an option whose
    part rounds to 0 units does not serve the class). Raises SolverError for a class demand beyond MAX_UNITS."""
    problem, idx, lp = cb.problem, cb.idx, cb.load_parts
    for m in problem.models:
        if not m.class_shares:
            continue
        r = cb.R[m.name]
        mine = [o for o in idx.options if o.model == m.name]
        for w in idx.W:
            for cls, share in m.class_shares:
                rnd = _up if cb.restricted else _down
                demand_units = cb.class_units[(m.name, cls, w)] = rnd(share * m.demand_req_per_s[w] * r)
                for o in mine:
                    cap = o.class_capacity.get(cls)
                    per_part = (0 if cap is None else _down(cb.mu * cap * r / lp) if cb.restricted
                                else _up(cb.mu * cap * r / lp))
                    if per_part <= 0:
                        continue
                    cb.z_units[(o.key, cls, w)] = per_part
                    # a route never needs more parts than carry the whole class demand (keeps products in int64)
                    most = min((lp + len(o.class_capacity)) * idx.ub[o.key], demand_units // per_part + 2)
                    cb.z[(o.key, cls, w)] = cb.md.new_int_var(0, most, f"z_{len(cb.z)}")
                if demand_units > MAX_UNITS:
                    raise SolverError(f"model {m.name}: its class capacities and demand span too wide a range for "
                                      "CP-SAT's integer scaling; use --backend highs")


def _constraints(cb: PlacementCpSatModel) -> None:
    """Every constraint, in the MILP's order (``fleetplan.solvers.milp._constraints``; CP-SAT has no (11),
    (13) or (14)): (12) per model and window; (1), (2) per model and window; per shared GPU (3), (4) per window,
    then (5), (10), (9); (6); (7); (8); (15); (16); (18)."""
    problem, idx = cb.problem, cb.idx
    for m in problem.models:
        if not m.class_shares:
            continue
        for w in idx.W:
            _c12a_classes_served(cb, m, w)
            _c12b_additive_load(cb, m, w)
    for m in problem.models:
        if m.class_shares:
            continue  # (1) and (2) are (12a) for a model with request classes
        for w in idx.W:
            _c1_coverage(cb, m, w)
            _c2_demand(cb, m, w)
    for (p, b) in idx.bins:
        for w in idx.W:
            _c3_shared_compute(cb, p, b, w)
            _c4_only_residents_serve(cb, p, b, w)
        _c5_shared_memory(cb, p, b)
        _c10_residents_per_gpu(cb, p, b)
        _c9_symmetry(cb, p, b)
    _c6_inventory(cb)
    _c7_replica_floor_ceiling(cb)
    _c8_starts(cb)
    _c15_commitments(cb)
    _c16_spot_fallback(cb)
    _c18_spread(cb)


def _c1_coverage(cb: PlacementCpSatModel, m, w: int) -> None:
    """(1) Coverage at each site of model ``m`` (without classes) in window ``w``, in rate units, supply rounded
    up (a relaxation): q[m,s,w], or the demand rounded down for a model with one site."""
    idx, r = cb.idx, cb.R[m.name]
    sites = idx.sites_of[m.name]
    for s in sites:
        supply = [_up(cb.mu * o.capacity_req_per_s * r) * cb.n[(o.key, w)] for o in cb.opts_of.get((m.name, s), [])]
        supply += [_up(idx.share[(m.name, p)].capacity_req_per_s * r / cb.parts) * cb.u[(m.name, p, b, w)]
                   for (p, b) in cb.bins_of.get((m.name, s), [])]
        rhs = cb.q[(m.name, s, w)] if len(sites) > 1 else _down(m.demand_req_per_s[w] * r)
        cb.md.add(sum(supply) >= rhs)


def _c2_demand(cb: PlacementCpSatModel, m, w: int) -> None:
    """(2) The demand of model ``m`` in window ``w`` (rate units, rounded down) is served across its sites; a model
    with demand and no option at all makes the model infeasible (explained before solving)."""
    sites = cb.idx.sites_of[m.name]
    demand_units = _down(m.demand_req_per_s[w] * cb.R[m.name])
    if len(sites) > 1:
        cb.md.add(sum(cb.q[(m.name, s, w)] for s in sites) >= demand_units)
    if not sites and demand_units > 0:
        cb.md.add_bool_or([])


def _c3_shared_compute(cb: PlacementCpSatModel, p: str, b: int, w: int) -> None:
    """(3) The compute parts of shared GPU (p, b) in window ``w`` (plus the rounding slack k_pb parts)."""
    cb.md.add(sum(cb.u[(m, p, b, w)] for m in cb.idx.residents[(p, b)])
              <= (cb.share_cap + cb.kmax[(p, b)]) * cb.y[(p, b)])


def _c4_only_residents_serve(cb: PlacementCpSatModel, p: str, b: int, w: int) -> None:
    """(4) Only the models resident on shared GPU (p, b) are served by it in window ``w``."""
    for mname in cb.idx.residents[(p, b)]:
        cb.md.add(cb.u[(mname, p, b, w)] <= (cb.share_cap + cb.kmax[(p, b)]) * cb.a[(mname, p, b)])


def _c5_shared_memory(cb: PlacementCpSatModel, p: str, b: int) -> None:
    """(5) The residents' footprints fit the memory of shared GPU (p, b), in kB: footprints rounded down, the limit
    up (a relaxation; validate checks the exact bytes)."""
    problem, idx = cb.problem, cb.idx
    lim_kb = _up(problem.pool_by_id[p].memory_bytes_per_gpu * problem.shared_memory_utilization / 1e3)
    cb.md.add(sum(_down(idx.share[(m, p)].memory_bytes / 1e3) * cb.a[(m, p, b)] for m in idx.residents[(p, b)])
              <= lim_kb * cb.y[(p, b)])


def _c6_inventory(cb: PlacementCpSatModel) -> None:
    """(6) In every window the GPUs in use (replicas and shared GPUs) fit the pool."""
    idx = cb.idx
    for pid, pool in cb.problem.pool_by_id.items():
        bins = [cb.y[k] for k in idx.bins if k[0] == pid]
        opts = [o for o in idx.options if o.pool == pid]
        if not opts and not bins:
            continue
        for w in idx.W:
            cb.md.add(sum(o.gpus * cb.n[(o.key, w)] for o in opts) + sum(bins) <= pool.gpus)


def _c7_replica_floor_ceiling(cb: PlacementCpSatModel) -> None:
    """(7) Replicas and residencies of a model within its floor and ceiling in every window."""
    idx = cb.idx
    for m in cb.problem.models:
        resident = [var for (mm, p, b), var in cb.a.items() if mm == m.name]
        for w in idx.W:
            reps = [cb.n[(o.key, w)] for o in idx.options if o.model == m.name] + resident
            if m.min_replicas:
                cb.md.add(sum(reps) >= m.min_replicas)
            if m.max_replicas is not None:
                cb.md.add(sum(reps) <= m.max_replicas)


def _c8_starts(cb: PlacementCpSatModel) -> None:
    """(8) Starts between consecutive windows (cyclic)."""
    W = cb.idx.W
    for (key, w), var in cb.st.items():
        cb.md.add(var >= cb.n[(key, w)] - cb.n[(key, W[w - 1])])


def _c9_symmetry(cb: PlacementCpSatModel, p: str, b: int) -> None:
    """(9) Symmetry breaking among a pool's candidate shared GPUs: y[p,b] <= y[p,b-1]."""
    if b > 0:
        cb.md.add(cb.y[(p, b)] <= cb.y[(p, b - 1)])


def _c10_residents_per_gpu(cb: PlacementCpSatModel, p: str, b: int) -> None:
    """(10) At most K = max_models_per_shared_gpu models reside on shared GPU (p, b), when K is set."""
    k = cb.problem.max_models_per_shared_gpu
    if k is not None:
        cb.md.add(sum(cb.a[(m, p, b)] for m in cb.idx.residents[(p, b)]) <= k * cb.y[(p, b)])


def _c12a_classes_served(cb: PlacementCpSatModel, m, w: int) -> None:
    """(12a) Each request class of model ``m`` in window ``w`` is served (rate units; module docstring); a class no
    option serves makes the model infeasible (explained before solving)."""
    for cls, _share in m.class_shares:
        supply = [cb.z_units[(o.key, cls, w)] * cb.z[(o.key, cls, w)] for o in cb.idx.options
                  if o.model == m.name and (o.key, cls, w) in cb.z]
        demand_units = cb.class_units[(m.name, cls, w)]
        if supply:
            cb.md.add(sum(supply) >= demand_units)
        elif demand_units > 0:
            cb.md.add_bool_or([])


def _c12b_additive_load(cb: PlacementCpSatModel, m, w: int) -> None:
    """(12b) The class parts of each option of model ``m`` in window ``w`` within LOAD_PARTS per replica (plus the
    rounding slack C_o parts)."""
    lp = cb.load_parts
    for o in cb.idx.options:
        if o.model == m.name:
            load = [cb.z[(o.key, c, w)] for c in o.class_capacity if (o.key, c, w) in cb.z]
            slack = 0 if cb.restricted else len(o.class_capacity)  # the restricted routing has none
            cb.md.add(sum(load) <= (lp + slack) * cb.n[(o.key, w)])


def _pool_use(cb: PlacementCpSatModel, pid: str, w: int) -> list:
    """Terms of the GPUs pool ``pid`` uses in window ``w``: replicas' k_o·n[o,w] and its shared GPUs y[p,b]."""
    return ([o.gpus * cb.n[(o.key, w)] for o in cb.idx.options if o.pool == pid]
            + [var for (p, _b), var in cb.y.items() if p == pid])


def _c15_commitments(cb: PlacementCpSatModel) -> None:
    """(15) A committed pool's use <= its commitment c[p] in every window (the objective prices c)."""
    for pid, var in cb.c.items():
        for w in cb.idx.W:
            cb.md.add(sum(_pool_use(cb, pid, w)) <= var)


def _c16_spot_fallback(cb: PlacementCpSatModel) -> None:
    """(16) In every window the fallback pool of each spot pool leaves interruption_rate × the spot GPUs in use
    unused, the rate in RATE_PARTS rounded down (a relaxation; validate checks the exact rule)."""
    pools = cb.problem.pool_by_id
    for pool in cb.problem.pools:
        if pool.fallback_pool is None or not pool.interruption_rate:
            continue
        fb = pools[pool.fallback_pool]
        rho = _down(pool.interruption_rate * RATE_PARTS)
        for w in cb.idx.W:
            if _pool_use(cb, pool.id, w):
                cb.md.add(rho * sum(_pool_use(cb, pool.id, w)) + RATE_PARTS * sum(_pool_use(cb, fb.id, w))
                          <= RATE_PARTS * fb.gpus)


#: Largest |coefficient| × upper bound summed over a row of (18) (int64 with room).
SPREAD_ROW_MAX = 1 << 62


def _c18_spread(cb: PlacementCpSatModel) -> None:
    """(18) The MILP's spread rows (:func:`fleetplan.solvers.common.spread_rows`) as
    Σ_{terms at the place} (1-β)·c_t·var_t - Σ_{other terms} β·c_t·var_t <= 0 with c_t the req/s of one unit of
    the term (a replica's usable capacity n[o,w]; a residency a[m,p,b], (1-μ)·cs[m,p]), in units K chosen so
    that the smallest coefficient is >= 1/SCALE_ERROR, the first coefficients rounded down and the others up: a
    relaxation (every exact plan satisfies it) whose error stays within SCALE_ERROR of each term. Raises
    SolverError when a row does not fit int64 (then use --backend highs)."""
    idx = cb.idx
    for row in spread_rows(cb.problem, idx):
        terms = [(c, kind, k, place) for place, ts in row.places.items() for c, kind, k in ts]
        if not terms:
            continue
        lo = min(row.share, 1 - row.share) * min(c for c, *_ in terms)
        scale = 1.0 / (lo * SCALE_ERROR)
        ub = {t[2]: (idx.ub[t[2]] if t[1] == "n" else 1) for t in terms}
        if sum(_up(c * scale) * ub[k] for c, _kind, k, _p in terms) > SPREAD_ROW_MAX:
            raise SolverError(f"model {row.model}: its capacities span too wide a range for CP-SAT's integer "
                              "scaling of its spread; use --backend highs")
        for place in sorted(row.places):
            for w in idx.W:
                def var(kind: str, k: tuple, w: int = w):
                    return cb.n[(k, w)] if kind == "n" else cb.a[k]

                here = [_down((1 - row.share) * c * scale) * var(kind, k) for c, kind, k, p in terms if p == place]
                other = [_up(row.share * c * scale) * var(kind, k) for c, kind, k, p in terms if p != place]
                cb.md.add(sum(here) - sum(other) <= 0)


def _objective(cb: PlacementCpSatModel) -> None:
    """The MILP's objective in nano-dollars, every coefficient rounded down (CP-SAT's bound stays a bound on the
    exact cost): GPU-hours × price, starts × start cost, egress through qe, commitments."""
    problem, idx, W = cb.problem, cb.idx, cb.idx.W
    pools, models, h = problem.pool_by_id, problem.model_by_name, problem.window_hours
    terms = []
    for o in idx.options:
        c = _down(o.gpus * pools[o.pool].usd_per_gpu_hour * h * COST_SCALE)
        terms += [c * cb.n[(o.key, w)] for w in W]
        sc = _down(o.start_cost_usd * COST_SCALE)
        terms += [sc * cb.st[(o.key, w)] for w in W if (o.key, w) in cb.st]
    for (p, _b), var in cb.y.items():
        terms.append(_down(pools[p].usd_per_gpu_hour * h * len(W) * COST_SCALE) * var)
    for (mname, s, _w), var in cb.qe.items():
        e = problem.egress_usd_per_req_per_s_window(models[mname], s) / EGRESS_UNITS_PER_REQ_PER_S
        terms.append(_down(e * COST_SCALE) * var)
    for pid, var in cb.c.items():
        terms.append(_down(pools[pid].committed_usd_per_gpu_hour * problem.horizon_hours * COST_SCALE) * var)
    cb.objective = sum(terms)
    cb.md.minimize(cb.objective)


def _objective_floor(cb: PlacementCpSatModel, floor_usd: float) -> bool:
    """Add objective >= ``floor_usd`` (a proven lower bound on the problem's optimum), in nano-dollars less the
    objective's rounding (each coefficient rounded down by < 1 per unit of its variable: Σ of the variables' upper
    bounds), so that CP-SAT's own bound starts there and its gap limit stops the search once its plan is within
    the gap of it. Every plan CP-SAT finds costs at least the optimum, so the row cuts none off; not added (False)
    when the model prices egress, whose qe relaxes the exact egress."""
    if cb.qe:
        return False
    slack = sum(cb.idx.ub[key] for key, _w in cb.n) + sum(cb.idx.ub[key] for key, _w in cb.st) + len(cb.y)
    slack += sum(pool.gpus for pool in cb.problem.pools if pool.id in cb.c)
    cb.md.add(cb.objective >= _down(floor_usd * COST_SCALE) - slack - 1)
    return True


def _hint(cb: PlacementCpSatModel, warm_start: Plan) -> None:
    """The warm start as CP-SAT's hint (nothing when it does not map onto the index)."""
    warm = warm_values(cb.problem, cb.idx, warm_start)
    if not warm:
        return
    md, W = cb.md, cb.idx.W
    for (key, w), var in cb.n.items():
        md.add_hint(var, warm["n"][key][w])
    for (key, w), var in cb.st.items():
        md.add_hint(var, warm["st"][key][w])
    for k, var in cb.y.items():
        md.add_hint(var, warm["y"].get(k, 0))
    for ka, var in cb.a.items():
        md.add_hint(var, warm["a"].get(ka, 0))
    for (mname, p, b, w), var in cb.u.items():
        f = warm["f"].get((mname, p, b), [0.0] * len(W))[w]
        md.add_hint(var, min(cb.share_cap, _up(f / cb.idx.share[(mname, p)].capacity_req_per_s * cb.parts)))
    for (mname, s, w), var in cb.q.items():
        md.add_hint(var, _down(warm["q"].get((mname, s, w), 0.0) * cb.R[mname]))


def _extract_plan(cb: PlacementCpSatModel, solver: cp_model.CpSolver) -> Plan:
    """The plan of CP-SAT's answer: its replicas and shared GPUs, the served rates recomputed exactly
    (:func:`_fill_shared`), its commitments."""
    problem, idx, W = cb.problem, cb.idx, cb.idx.W
    replicas = {}
    for o in idx.options:
        counts = tuple(int(solver.value(cb.n[(o.key, w)])) for w in W)
        if any(counts):
            replicas[o.key] = counts
    raw = []
    for (p, b), var in cb.y.items():
        if solver.value(var):
            residents = tuple(m for m in idx.residents[(p, b)] if solver.value(cb.a[(m, p, b)]))
            raw.append((p, residents, {m: [solver.value(cb.u[(m, p, b, w)]) for w in W] for m in residents}))
    shared = tidy_shared(problem, replicas, _fill_shared(problem, replicas, raw))
    return Plan(replicas=replicas, shared=shared,
                commitments={pid: int(solver.value(var)) for pid, var in cb.c.items()})


#: CP-SAT's random seed (fixed: the same problem and budget give the same search).
CPSAT_SEED = 0
#: CP-SAT's workers left out with the restricted class routing: on its models their work runs far beyond its
#: deterministic time, and an interleaved batch waits for them (a one-window model of a 70B day with 2 x 2 classes,
#: 2 workers: 'core' 5.2 CPU seconds for 1 unit while 'default_lp' proved the optimum in 0.005 units; the 24
#: windows took 1.0-2.6 CPU seconds each with them, 0.04-0.13 without; measured 2026-12-03).
RESTRICTED_IGNORED_SUBSOLVERS = ("core", "no_lp", "quick_restart_no_lp")


def solve_cpsat(problem: Problem, *, time_limit_s: float = 60, threads: int = 2, gap: float = 1e-4,
                warm_start: Plan | None = None, log: bool = False, deadline: float | None = None,
                extra_bounds: dict[str, float | None] | None = None,
                deterministic_time: float | None = None, restrict_classes: bool = False,
                objective_floor_usd: float | None = None) -> Plan:
    """Build and solve the CP-SAT model; returns a new Plan (status, objective, bound and gap in USD).

    The search always runs with random_seed CPSAT_SEED and ``threads`` workers. ``deterministic_time`` (CP-SAT's
    own work units, ``max_deterministic_time``; None: none) is a budget of effort, not of seconds: with it the
    workers' search is interleaved (``interleave_search``) so that the same problem and options give the same plan
    on an idle or a busy machine; ``time_limit_s`` (and ``deadline``) is then only a safety stop, and a plan cut
    by it says so in its message (it may differ from one machine to another).

    The bound is CP-SAT's best objective bound in USD: a valid lower bound on the exact optimum because the model
    is a relaxation with costs rounded down (module docstring). Status and message follow
    :func:`fleetplan.solvers.common.finish_plan` (the cheaper of CP-SAT's plan and ``warm_start`` is returned).
    ``restrict_classes``: the restricted class routing (module docstring): for a problem with request classes
    CP-SAT's bound is then no bound and is not reported; the gap is against ``extra_bounds`` only (none: "no bound
    yet"). ``objective_floor_usd``: a proven lower bound on the problem's optimum (e.g. a window's HiGHS bound),
    given to CP-SAT as a row (:func:`_objective_floor`) so that the search stops once its plan is within ``gap``
    of it, and counted among the bounds as "given".
    """
    t0 = time.perf_counter()
    user_limit_s = time_limit_s  # what messages name: the share left after building is an internal figure
    cb = build_cpsat(problem, restrict_classes=restrict_classes)
    bounds = dict(extra_bounds or {})
    if objective_floor_usd is not None and _objective_floor(cb, objective_floor_usd):
        bounds["given"] = objective_floor_usd
    if warm_start is not None:
        _hint(cb, warm_start)
    if deadline is not None:
        time_limit_s = min(time_limit_s, deadline - time.perf_counter())
    if time_limit_s <= 0.05:
        note = ("no time left for the solver after building the model" if deterministic_time is None else
                f"the wall-clock safety stop ({user_limit_s:.3g} s) left no time for CP-SAT's search after "
                "building its model: this plan may differ on another machine")
        return finish_plan(problem, backend="cpsat", gap=gap, bounds=bounds, start=warm_start,
                           time_limit_reached=True, time_limit_s=user_limit_s,
                           solve_time_s=time.perf_counter() - t0, notes=(note,))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit_s)
    solver.parameters.num_workers = max(1, int(threads or 1))
    solver.parameters.random_seed = CPSAT_SEED
    solver.parameters.relative_gap_limit = float(gap)
    solver.parameters.log_search_progress = log
    if deterministic_time is not None:
        solver.parameters.max_deterministic_time = float(deterministic_time)
        solver.parameters.interleave_search = solver.parameters.num_workers > 1
    if cb.restricted:
        solver.parameters.ignore_subsolvers.extend(RESTRICTED_IGNORED_SUBSOLVERS)
    code = solver.solve(cb.md)
    reached = code != cp_model.OPTIMAL and solver.wall_time >= TIME_LIMIT_SHARE * time_limit_s
    det_reached = (deterministic_time is not None and code != cp_model.OPTIMAL and not reached
                   and solver.deterministic_time >= TIME_LIMIT_SHARE * deterministic_time)
    if code == cp_model.INFEASIBLE and not cb.restricted:  # a restriction's infeasibility proves nothing
        return Plan(status=Status.INFEASIBLE, backend="cpsat", solve_time_s=time.perf_counter() - t0)
    if code == cp_model.MODEL_INVALID:
        raise RuntimeError(f"CP-SAT rejected the model: {cb.md.validate()}")
    # the restricted routing's model is a restriction: its objective bound is no bound on the problem
    if not cb.restricted and (code in (cp_model.OPTIMAL, cp_model.FEASIBLE)
                              or math.isfinite(solver.best_objective_bound)):
        cp_bound = solver.best_objective_bound / COST_SCALE
        bounds["CP-SAT"] = cp_bound if math.isfinite(cp_bound) else None
    incumbent = None
    notes: list[str] = []
    if deterministic_time is not None and reached:
        notes.append(f"the wall-clock safety stop ({user_limit_s:.3g} s) cut CP-SAT's search before its "
                     f"deterministic budget ({solver.deterministic_time:.3g} of {deterministic_time:.3g} units "
                     "done): this plan may differ on another machine")
    elif det_reached:
        notes.append(f"CP-SAT's deterministic budget of {deterministic_time:.3g} units was used up")
    if cb.restricted and code == cp_model.INFEASIBLE:
        notes.append(f"CP-SAT's restricted class routing ({RESTRICTED_CLASS_PARTS} parts per replica) has no plan")
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        incumbent = _extract_plan(cb, solver)
        report = validate(problem, incumbent, check_objective=False)
        if not report.ok:
            notes.append("CP-SAT's plan fails the exact check after rescaling (" + report.violations[0] + ")")
            incumbent = None
    return finish_plan(problem, backend="cpsat", gap=gap, bounds=bounds, incumbent=incumbent, start=warm_start,
                       time_limit_reached=reached, time_limit_s=user_limit_s, solve_time_s=time.perf_counter() - t0,
                       notes=tuple(notes))
