"""MILP of time-windowed placement (PuLP; HiGHS by default, CBC available).

Notation (all from the Problem; w ∈ W windows, cyclic; o ∈ O dedicated options (model m_o, pool p_o, tp, pp);
p ∈ P pools at site s_p with G_p GPUs at c_p $/GPU-hour; b ∈ B_p candidate shared GPUs of pool p; μ the margin;
h the window length in hours; d[m,w] demand req/s; cap_o replica capacity req/s; k_o = tp·pp GPUs per replica;
cs[m,p], ms[m,p] capacity and memory footprint of m on a shared GPU of p; M_p the GPU memory × the shared-memory
utilization; e[m,s] egress USD per req/s per window when m is served at site s; σ_o the start cost of o.)

Variables:
    n[o,w] ∈ Z≥0      dedicated replicas of option o in window w
    st[o,w] ≥ 0       replicas of o started in window w
    y[p,b] ∈ {0,1}    candidate shared GPU b of pool p is on (all day)
    a[m,p,b] ∈ {0,1}  model m resides on shared GPU (p,b)
    f[m,p,b,w] ≥ 0    req/s of m served by shared GPU (p,b) in window w
    q[m,s,w] ≥ 0      req/s of m served at site s (only for models with capacity at several sites)

Minimize  Σ n[o,w]·k_o·c_{p_o}·h + Σ y[p,b]·c_p·h·|W| + Σ σ_o·st[o,w] + Σ e[m,s]·q[m,s,w]
subject to
    (1) coverage at each site:   Σ_{o: m_o=m, s_{p_o}=s} (1-μ)·cap_o·n[o,w] + Σ_{p at s, b} f[m,p,b,w] ≥ q[m,s,w]
        (for a model with one site, q is replaced by d[m,w])
    (2) demand is served:         Σ_s q[m,s,w] ≥ d[m,w]
    (3) shared compute share:     Σ_m f[m,p,b,w] / cs[m,p] ≤ (1-μ)·y[p,b]
    (4) only residents serve:     f[m,p,b,w] ≤ (1-μ)·cs[m,p]·a[m,p,b]
    (5) shared memory:            Σ_m ms[m,p]·a[m,p,b] ≤ M_p·y[p,b]
    (6) inventory:                Σ_{o in p} k_o·n[o,w] + Σ_b y[p,b] ≤ G_p
        (tp and the node size are powers of two with tp | node size and pp > 1 only with whole nodes, so any
        multiset of groups within the GPU count packs onto the nodes: groups of divisible sizes pack perfectly)
    (7) replica floor/ceiling:    L_m ≤ Σ_{o: m_o=m} n[o,w] + Σ_{p,b} a[m,p,b] ≤ U_m
    (8) starts:                   st[o,w] ≥ n[o,w] - n[o,w-1]   (w-1 of the first window is the last)
    (9) symmetry breaking:        y[p,b] ≥ y[p,b+1]
    (10) residents per shared GPU: Σ_m a[m,p,b] ≤ K·y[p,b]   (K = max_models_per_shared_gpu, when set)
    (12) request classes (a model m with class shares r[m,c]; x[o,c,w] ≥ 0 req/s of class c routed to option o,
        only where o serves c with class capacity cap_o,c; such a model has no shared GPUs and no egress):
        (12a) each class is served:  Σ_{o serves c} x[o,c,w] ≥ r[m,c]·d[m,w]
        (12b) additive load:         Σ_c x[o,c,w] / cap_o,c ≤ (1-μ)·n[o,w]
        and (1) becomes Σ_{o at s, c} x[o,c,w] ≥ q[m,s,w] (dropped for a model with one site). A model without
        classes keeps (1) as written: one class, the whole mix.
    (13) disaggregated serving (Problem.pd_options / kv_routes): nd[o,w] ∈ Z≥0 replicas of prefill or decode
        option o; g[m,r,s,w] ≥ 0 req/s of m prefilled at site r and decoded at site s (a KV route):
        (13a) prefill capacity:  Σ_{o prefill of m at r, sending to s} (1-μ)·cap_o·nd[o,w] ≥ g[m,r,s,w]
        (13b) decode capacity:   Σ_{o decode of m at s} (1-μ)·cap_o·nd[o,w] ≥ Σ_r g[m,r,s,w]
        and Σ_r g[m,r,s,w] joins the supply of (1) at the decode site s; nd counts in (6) with its GPUs, decode
        replicas in (7), nd in the GPU cost and (8) starts like n.
    (14) KV egress by monthly volume band (concave, exact): per egress table t (cloud, route class, scope; the
        KV of cross-site routes at the prefill site's table, the prompts at the decode site's), its monthly volume
        V_t = Σ_{routes, w} g·window seconds·bytes per request/1e9 × (month hours / horizon hours) is split into
        band fills v[t,k] ∈ [0, width_k]; a band fills only after the one below is full: binaries z[t,k] with
        v[t,k] ≤ width_k·z[t,k], v[t,k] ≥ width_k·z[t,k+1], z[t,k+1] ≤ z[t,k] (a flat table needs none). The
        objective gets Σ_k rate_k·v[t,k] × (horizon hours / month hours): the band-by-band price of the plan's own
        monthly volume, as the ledger bills it. The open top band has v[t,last] <= V_max·z[t,last], V_max the
        table's volume with every flow at its bound g[m,r,s,w] <= d[m,w].
    (15) commitments (a committed pool p, rate r_p per committed GPU-hour; c[p] ∈ Z≥0, c[p] <= G_p):
        Σ_{o in p} k_o·n[o,w] + Σ_b y[p,b] (+ prefill/decode replicas' GPUs) <= c[p] in every window, and
        Σ_p r_p·c[p]·h·|W| joins the objective
        (the pool's per-use price c_p is 0 or its own marginal cost). Committed and on-demand GPUs of one type at
        one site are separate pools with the same options, so the on-demand overflow max(0, used - c) per window is
        the on-demand pool's use: the optimum of the two pools costs r·c·h·|W| + on-demand rate × overflow hours.
    (16) spot fallback (a spot pool p with interruption rate ρ_p and fallback pool f):
        ρ_p · Σ_{o in p} k_o·n[o,w] + Σ_{o in f} k_o·n[o,w] + Σ_b y[f,b] <= G_f - ρ_p·Σ_b y[p,b]
        (the fallback pool leaves room for the expected interrupted share of the spot GPUs in use)
    (17) shared GPUs per pool:     Σ_b y[p,b] <= max_shared_gpus_per_pool (held by the index: a pool has at most
        that many candidate shared GPUs b, :func:`fleetplan.solvers.common.shared_bins_per_pool`; no row needed)
    (18) spread (a model m with a bound β_m < 1 on its share per site, and/or β'_m per pool: ModelSpec.
        max_share_per_site / max_share_per_pool): with C[m,s,w] = Σ_{o of m at s} (1-μ)·cap_o·n[o,w]
        + Σ_{p at s, b} (1-μ)·cs[m,p]·a[m,p,b] its capacity at site s (dedicated replicas, and each shared GPU it
        resides on at its capacity there alone),  C[m,s,w] <= β_m · Σ_{s'} C[m,s',w]  for every site s and window
        w; per pool the same with the pool in place of the site. (Problem refuses a bound for a model with
        prefill/decode options, and one its sites cannot meet: β_m × its sites < 1.)
With ``relax=True`` every integer and binary variable is continuous: the LP relaxation, a lower bound.

In the code, :func:`build_milp` adds the variables, then each numbered constraint by one function ``_cN_...``
(laid out in the numbering's order; :func:`_constraints` adds their rows in the order the solver has always been
given them), then the objective. :mod:`fleetplan.solvers.cpsat` builds the same blocks over the same index in the
same order.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import pulp

from fleetplan.costmodels.ledger import DAYS_PER_MONTH, HOURS_PER_DAY, table_key
from fleetplan.errors import SolverError
from fleetplan.placement.plan import (
    UNSERVED_TOL_REQ_PER_S,
    Plan,
    SharedGPU,
    Status,
    evaluate,
    tidy_shared,
    unserved,
)
from fleetplan.placement.problem import Problem
from fleetplan.solvers.common import (
    SAFETY_STOP_NOTE,
    TIME_LIMIT_SHARE,
    Index,
    build_index,
    by_model_and_site,
    cover_cost_floor,
    finish_plan,
    spread_rows,
    warm_values,
)
from fleetplan.solvers.highs import HiGHS

#: HiGHS's random seed (fixed: the same problem and node budget give the same search).
HIGHS_SEED = 0
#: Options CBC always gets: its preprocessing off. PuLP's bundled CBC (2.10) with preprocessing returned a plan as
#: proven optimal at $8.79 where a $7.47 plan exists (a spot pool with a fallback row 0.25·n_spot + n_od <= 2;
#: found by benchmarks/bench_audit.py, test_planner_honesty.py); without it the same search proves $7.47. On the
#: default scenario both stop at a 120-s limit in the same CPU time (33-34 s beside other work), $912.99 with
#: preprocessing and $901.61 without.
CBC_OPTIONS = ["preprocess off"]
#: KV flows below this, req/s, read from a solved model are solver dust (HiGHS's feasibility tolerance is 1e-7 on
#: rows of a few req/s) and are read as 0: a route the plan does not use is not listed.
FLOW_DUST_REQ_PER_S = 1e-9
#: Penalty per req/s of unmet demand (or per missing replica) in the elastic model: far above any GPU price.
ELASTIC_PENALTY_USD = 1e6


@dataclass
class PlacementMilpModel:
    """A built PuLP model with its variables, keyed by the Problem's own keys."""

    lp: pulp.LpProblem
    idx: Index
    n: dict
    st: dict
    y: dict
    a: dict
    f: dict
    q: dict
    relax: bool
    short: dict
    floor_short: dict
    unserved: dict
    x: dict | None = None
    nd: dict | None = None
    g: dict | None = None
    c: dict | None = None
    unserved_class: dict | None = None
    short_class: dict | None = None


@dataclass
class _MilpBuild:
    """The MILP while :func:`build_milp` builds it: the problem, its index, the options of the build and every
    variable (the names of the module docstring), each keyed by the Problem's own keys. The variables come first
    (:func:`_variables`), then the constraints (:func:`_constraints`, one ``_cN_...`` function per numbered
    constraint), then the objective (:func:`_objective`).

    Variables beyond the module docstring's list: short[m,w], floor_short[m,w] (elastic shortfalls, req/s and
    replicas) and short_c[m,c,w]; unserved[m,w] and unserved_c[m,c,w] (best effort, req/s); x[o,c,w] of (12);
    nd[o,w], std[o,w] (their starts) and g[r,w] of (13), keyed by pd key and route key; st_nb[o] = (st_in[o],
    st_out[o]) the starts against fixed neighbour windows; c[p] of (15); kv_egress, the objective terms of (14);
    opts_of, bins_of: :func:`fleetplan.solvers.common.by_model_and_site`.
    """

    problem: Problem
    idx: Index
    lp: pulp.LpProblem
    relax: bool
    elastic: bool
    aggregate: bool
    with_starts: bool
    with_unserved: bool
    option_usd: dict = field(default_factory=dict)
    n: dict = field(default_factory=dict)
    st: dict = field(default_factory=dict)
    y: dict = field(default_factory=dict)
    a: dict = field(default_factory=dict)
    f: dict = field(default_factory=dict)
    q: dict = field(default_factory=dict)
    short: dict = field(default_factory=dict)
    floor_short: dict = field(default_factory=dict)
    unserved: dict = field(default_factory=dict)
    x: dict = field(default_factory=dict)
    short_c: dict = field(default_factory=dict)
    unserved_c: dict = field(default_factory=dict)
    pd_opts: list = field(default_factory=list)
    nd: dict = field(default_factory=dict)
    std: dict = field(default_factory=dict)
    g: dict = field(default_factory=dict)
    st_nb: dict = field(default_factory=dict)
    c: dict = field(default_factory=dict)
    kv_egress: list = field(default_factory=list)
    opts_of: dict = field(default_factory=dict)
    bins_of: dict = field(default_factory=dict)

    @property
    def mu(self) -> float:
        """1 - μ: the usable share of a capacity after the margin."""
        return 1 - self.problem.margin

    @property
    def icat(self) -> str:
        """PuLP category of the integer variables (continuous in the LP relaxation)."""
        return pulp.LpContinuous if self.relax else pulp.LpInteger

    def slack(self, m, w: int) -> list:
        """The elastic shortfall and the unserved demand of model ``m`` in window ``w``, where the build has them."""
        return ([self.short[(m.name, w)]] if self.elastic else []) + (
            [self.unserved[(m.name, w)]] if self.with_unserved else [])


def build_milp(problem: Problem, *, relax: bool = False, elastic: bool = False,
               aggregate: bool = False, with_starts: bool = True, cover_cuts: bool = False,
               neighbours: tuple[dict, dict] | None = None, unserved: bool = False,
               option_usd: dict | None = None) -> PlacementMilpModel:
    """Build the MILP (or, with ``relax=True``, its LP relaxation) of ``problem``; a pure function of it.

    ``elastic=True`` adds a shortfall variable short[m,w] >= 0 (req/s, penalty ELASTIC_PENALTY_USD each) to the
    demand side of (1)/(2) and floor_short[m,w] to the floor in (7): an always-feasible model whose positive
    shortfalls say which model and window cannot be served and by how much (used to explain infeasibility). For a
    model with request classes each class has its own shortfall short_class[m,cls,w] in (12a), and short[m,w] is
    their sum (one variable in every class's constraint would let one req/s of shortfall cover each class at once).
    ``aggregate=True`` merges each pool's identical candidate shared GPUs into one bin with y, a ∈ [0, B_p] and
    a ≤ y (y: shared GPUs on, a: GPUs the model resides on). With ``relax=True`` it is the same LP bound (any
    aggregate solution splits evenly over the B_p bins) without the symmetric copies; with ``relax=False`` y and
    a are integers: a relaxation of the MILP (each aggregate constraint is the sum of the bins' constraints, so
    any plan maps onto it at the same cost) that drops which model shares which GPU, a valid lower bound without
    the bins' symmetry (used by the per-window bound).
    ``with_starts=False`` drops the start variables and constraints (8): a weaker but still valid relaxation (start
    costs are >= 0) whose windows couple only through the shared GPUs, for a fast bound on large problems.
    ``cover_cuts=True`` adds, for each model that cannot use a shared GPU and each window, the valid inequality
    (11) Σ_{o of m} k_o·c_{p_o}·h·n[o,w] >= the least cost of whole replicas covering d[m,w] and L_m
    (:func:`fleetplan.solvers.common.cover_cost_floor`, inventory ignored): every integer plan satisfies it, and
    the LP relaxation then keeps those models' whole-replica rounding (used by the per-window bound).
    ``neighbours=(before, after)`` (one-window problems only; {option key: replicas} in the windows before and
    after it, held fixed) adds the starts this window causes: st_in[o] >= n[o] - before[o] and
    st_out[o] >= after[o] - n[o], each at the option's start cost (used by fix-and-optimize by windows).
    ``unserved=True`` adds the unserved demand u[m,w] ∈ [0, d[m,w]] (req/s) to the supply side of (1)/(2), with
    no cost: the objective stays the cost, and :func:`solve_best_effort` minimises the unserved demand by
    priority class first (best effort when demand exceeds the inventory). For a model with request classes,
    u[m,w] = Σ_c uc[m,c,w] with uc[m,c,w] ∈ [0, r[m,c]·d[m,w]] on the demand side of (12a).
    ``option_usd`` ({option key: USD}): a price added to each replica of that option in every window, beside its
    GPU cost (the start prices of :func:`fleetplan.solvers.decompose.start_prices`, for a bound; a negative
    price is a credit). None: none.
    Raises ValueError for ``neighbours`` on a problem of several windows.
    """
    if neighbours is not None and problem.n_windows != 1:
        raise ValueError("neighbours is only valid for a one-window problem")
    lp = pulp.LpProblem("placement", pulp.LpMinimize)
    mb = _MilpBuild(problem, build_index(problem, aggregate=aggregate), lp, relax=relax, elastic=elastic,
                    aggregate=aggregate, with_starts=with_starts, with_unserved=unserved,
                    option_usd=dict(option_usd or {}))
    _variables(mb, neighbours)
    _constraints(mb, cover_cuts=cover_cuts, neighbours=neighbours)
    _objective(mb)
    return PlacementMilpModel(lp=lp, idx=mb.idx, n=mb.n, st=mb.st, y=mb.y, a=mb.a, f=mb.f, q=mb.q, relax=relax,
                              short=mb.short, floor_short=mb.floor_short, unserved=mb.unserved, x=mb.x, nd=mb.nd,
                              g=mb.g, c=mb.c, unserved_class=mb.unserved_c, short_class=mb.short_c)


def _variables(mb: _MilpBuild, neighbours: tuple[dict, dict] | None) -> None:
    """Every variable of the build but (14)'s band fills and (15)'s commitments (their blocks add them)."""
    mb.opts_of, mb.bins_of = by_model_and_site(mb.problem, mb.idx)
    _replica_variables(mb)
    _shared_variables(mb)
    _site_variables(mb)
    _slack_variables(mb)
    _pd_variables(mb)
    _class_variables(mb)
    if neighbours is not None:
        for i, o in enumerate(mb.idx.options):
            if o.start_cost_usd > 0:
                mb.st_nb[o.key] = (mb.lp.add_variable(f"st_in_{i}", 0), mb.lp.add_variable(f"st_out_{i}", 0))


def _replica_variables(mb: _MilpBuild) -> None:
    """n[o,w] ∈ [0, ub_o] replicas, and st[o,w] >= 0 starts (options with a start cost, several windows)."""
    idx, W = mb.idx, mb.idx.W
    mb.n = {(o.key, w): mb.lp.add_variable(f"n_{i}_{w}", 0, idx.ub[o.key], mb.icat)
            for i, o in enumerate(idx.options) for w in W}
    mb.st = {(o.key, w): mb.lp.add_variable(f"st_{i}_{w}", 0) for i, o in enumerate(idx.options) for w in W
             if o.start_cost_usd > 0 and len(W) > 1 and mb.with_starts}


def _shared_variables(mb: _MilpBuild) -> None:
    """y[p,b], a[m,p,b] (binary, or integers in [0, B_p] with a <= y for an aggregate bin) and f[m,p,b,w] >= 0."""
    idx, lp = mb.idx, mb.lp
    bcat = pulp.LpContinuous if mb.relax else (pulp.LpInteger if mb.aggregate else pulp.LpBinary)
    mb.y = {(p, b): lp.add_variable(f"y_{j}", 0, idx.bin_ub[(p, b)], bcat) for j, (p, b) in enumerate(idx.bins)}
    a, f = mb.a, mb.f
    for j, (p, b) in enumerate(idx.bins):
        for mname in idx.residents[(p, b)]:
            a[(mname, p, b)] = lp.add_variable(f"a_{j}_{len(a)}", 0, idx.bin_ub[(p, b)], bcat)
            if mb.aggregate:
                lp += a[(mname, p, b)] <= mb.y[(p, b)], f"agg_{j}_{len(a)}"
            for w in idx.W:
                f[(mname, p, b, w)] = lp.add_variable(f"f_{j}_{len(f)}", 0)


def _site_variables(mb: _MilpBuild) -> None:
    """q[m,s,w] >= 0 for the models with capacity at several sites."""
    for mname, sites in mb.idx.sites_of.items():
        if len(sites) > 1:
            for s in sites:
                for w in mb.idx.W:
                    mb.q[(mname, s, w)] = mb.lp.add_variable(f"q_{len(mb.q)}", 0)


def _slack_variables(mb: _MilpBuild) -> None:
    """Elastic: short[m,w], floor_short[m,w] >= 0; best effort: unserved[m,w] ∈ [0, d[m,w]]."""
    for i, m in enumerate(mb.problem.models):
        for w in mb.idx.W:
            if mb.elastic:
                mb.short[(m.name, w)] = mb.lp.add_variable(f"short_{i}_{w}", 0)
                mb.floor_short[(m.name, w)] = mb.lp.add_variable(f"fshort_{i}_{w}", 0)
            if mb.with_unserved:
                mb.unserved[(m.name, w)] = mb.lp.add_variable(f"unserved_{i}_{w}", 0, m.demand_req_per_s[w])


def _pd_variables(mb: _MilpBuild) -> None:
    """(13)'s nd[o,w] ∈ [0, ub] prefill and decode replicas (options with room for one), their starts std[o,w]
    and the KV flows g[r,w] >= 0."""
    problem, lp, W = mb.problem, mb.lp, mb.idx.W
    pools, models = problem.pool_by_id, problem.model_by_name
    pd_ub = {}
    for o in problem.pd_options:
        u = pools[o.pool].gpus // o.gpus
        mx = models[o.model].max_replicas
        pd_ub[o.pd_key] = u if mx is None else min(u, mx)
    mb.pd_opts = [o for o in problem.pd_options if pd_ub[o.pd_key] > 0]
    mb.nd = {(o.pd_key, w): lp.add_variable(f"nd_{i}_{w}", 0, pd_ub[o.pd_key], mb.icat)
             for i, o in enumerate(mb.pd_opts) for w in W}
    mb.std = {(o.pd_key, w): lp.add_variable(f"std_{i}_{w}", 0) for i, o in enumerate(mb.pd_opts) for w in W
              if o.start_cost_usd > 0 and len(W) > 1 and mb.with_starts}
    # a route's flow never exceeds its model's demand in the window (a plan with more serves the same demand
    # with less: (1), (2), (13) still hold and no cost rises), which gives (14) the bound of the open top band
    mb.g = {(r.key, w): lp.add_variable(f"g_{i}_{w}", 0, models[r.model].demand_req_per_s[w])
            for i, r in enumerate(problem.kv_routes) for w in W}


def _class_variables(mb: _MilpBuild) -> None:
    """(12)'s x[o,c,w] >= 0 for every class o serves, and each class's own shortfall short_c[m,c,w] >= 0
    (elastic) or unserved demand unserved_c[m,c,w] ∈ [0, r[m,c]·d[m,w]] (best effort)."""
    lp, W = mb.lp, mb.idx.W
    for o in mb.idx.options:
        for cls in o.class_capacity:
            for w in W:
                mb.x[(o.key, cls, w)] = lp.add_variable(f"x_{len(mb.x)}", 0)
    for m in mb.problem.models:
        for w in W if m.class_shares else ():
            for cls, share in m.class_shares:
                if mb.elastic:
                    mb.short_c[(m.name, cls, w)] = lp.add_variable(f"short_c_{len(mb.short_c)}", 0)
                if mb.with_unserved:
                    mb.unserved_c[(m.name, cls, w)] = lp.add_variable(f"unserved_c_{len(mb.unserved_c)}", 0,
                                                                      share * m.demand_req_per_s[w])


def _constraints(mb: _MilpBuild, *, cover_cuts: bool, neighbours: tuple[dict, dict] | None) -> None:
    """Every constraint, in the order its rows reach the solver: (14); (12) per model and window; (1), (2) per
    model and window; per shared GPU (3), (4) per window, then (5), (10), (9); (6); (7); (8) against fixed
    neighbours; (11); (13); (8); (15); (16); (18); :func:`fleetplan.solvers.cpsat.build_cpsat` adds its rows in the same
    order. Not the numbering's order: HiGHS's search path depends on the order of the rows (measured when the blocks
    were cut apart: with the rows in the numbering's order the default scenario's plan is another one within its
    0.5% gap, $898.58 a day instead of $899.08), and this is the order every plan so far was solved with."""
    problem, idx = mb.problem, mb.idx
    _c14_kv_egress(mb)
    for m in problem.models:
        if not m.class_shares:
            continue
        for w in idx.W:
            _c12a_classes_served(mb, m, w)
            _c12b_additive_load(mb, m, w)
    for m in problem.models:
        for w in idx.W:
            _c1_coverage(mb, m, w)
            _c2_demand(mb, m, w)
    for (p, b) in idx.bins:
        for w in idx.W:
            _c3_shared_compute(mb, p, b, w)
            _c4_only_residents_serve(mb, p, b, w)
        _c5_shared_memory(mb, p, b)
        _c10_residents_per_gpu(mb, p, b)
        _c9_symmetry(mb, p, b)
    _c6_inventory(mb)
    _c7_replica_floor_ceiling(mb)
    if neighbours is not None:
        _c8_neighbour_starts(mb, neighbours)
    if cover_cuts:
        _c11_cover_cuts(mb)
    _c13_disaggregated(mb)
    _c8_starts(mb)
    _c15_commitments(mb)
    _c16_spot_fallback(mb)
    _c18_spread(mb)


def _c1_coverage(mb: _MilpBuild, m, w: int) -> None:
    """(1) Coverage at each site of model ``m`` in window ``w``: the usable capacity of the dedicated replicas
    there, the shared GPUs' served rates and the KV flows decoded there cover q[m,s,w]; for a model with one site
    they cover its demand (with the shortfall or unserved demand, where the build has them). A model with request
    classes covers q with its class flows x (at one site (12a) alone covers its demand); a model with no option
    at all only with the shortfall or unserved demand."""
    problem, lp = mb.problem, mb.lp
    sites = mb.idx.sites_of[m.name]
    if not sites and m.demand_req_per_s[w] > 0:
        lp += pulp.lpSum(mb.slack(m, w)) >= m.demand_req_per_s[w], f"c1_no_option_{m.name}_{w}"
    if m.class_shares:
        for s in sites if len(sites) > 1 else ():
            supply = [mb.x[(o.key, k, w)] for o in mb.opts_of.get((m.name, s), []) for k in o.class_capacity]
            lp += pulp.lpSum(supply) >= mb.q[(m.name, s, w)], f"c1_cover_{m.name}_{s}_{w}"
        return
    for s in sites:
        supply = [mb.mu * o.capacity_req_per_s * mb.n[(o.key, w)] for o in mb.opts_of.get((m.name, s), [])]
        supply += [mb.f[(m.name, p, b, w)] for (p, b) in mb.bins_of.get((m.name, s), [])]
        supply += [mb.g[(r.key, w)] for r in problem.kv_routes if r.model == m.name and r.decode_site == s]
        rhs = mb.q[(m.name, s, w)] if len(sites) > 1 else m.demand_req_per_s[w]
        if len(sites) == 1:
            supply += mb.slack(m, w)
        lp += pulp.lpSum(supply) >= rhs, f"c1_cover_{m.name}_{s}_{w}"


def _c2_demand(mb: _MilpBuild, m, w: int) -> None:
    """(2) The demand of model ``m`` in window ``w`` is served across its sites, when it has several (with the
    shortfall or unserved demand, where the build has them)."""
    sites = mb.idx.sites_of[m.name]
    if len(sites) > 1:
        mb.lp += (pulp.lpSum([mb.q[(m.name, s, w)] for s in sites] + mb.slack(m, w)) >= m.demand_req_per_s[w],
                  f"c2_demand_{m.name}_{w}")


def _c3_shared_compute(mb: _MilpBuild, p: str, b: int, w: int) -> None:
    """(3) The compute share of shared GPU (p, b) in window ``w`` stays within 1 - margin."""
    idx = mb.idx
    mb.lp += (pulp.lpSum(mb.f[(m, p, b, w)] * (1.0 / idx.share[(m, p)].capacity_req_per_s)
                         for m in idx.residents[(p, b)]) <= mb.mu * mb.y[(p, b)], f"c3_share_{p}_{b}_{w}")


def _c4_only_residents_serve(mb: _MilpBuild, p: str, b: int, w: int) -> None:
    """(4) Only the models resident on shared GPU (p, b) are served by it in window ``w``."""
    idx = mb.idx
    for mname in idx.residents[(p, b)]:
        mb.lp += (mb.f[(mname, p, b, w)] <= mb.mu * idx.share[(mname, p)].capacity_req_per_s * mb.a[(mname, p, b)],
                  f"c4_{mname}_{p}_{b}_{w}")


def _c5_shared_memory(mb: _MilpBuild, p: str, b: int) -> None:
    """(5) The residents' footprints fit the memory of shared GPU (p, b) (GB on both sides)."""
    problem, idx = mb.problem, mb.idx
    lim = problem.pool_by_id[p].memory_bytes_per_gpu * problem.shared_memory_utilization
    mb.lp += (pulp.lpSum(idx.share[(m, p)].memory_bytes / 1e9 * mb.a[(m, p, b)] for m in idx.residents[(p, b)])
              <= lim / 1e9 * mb.y[(p, b)], f"c5_mem_{p}_{b}")


def _c6_inventory(mb: _MilpBuild) -> None:
    """(6) In every window the GPUs in use (replicas, prefill/decode replicas, shared GPUs) fit the pool."""
    idx, n, nd = mb.idx, mb.n, mb.nd
    for pid, pool in mb.problem.pool_by_id.items():
        bins = [mb.y[(p, b)] for (p, b) in idx.bins if p == pid]
        opts = [o for o in idx.options if o.pool == pid]
        popts = [o for o in mb.pd_opts if o.pool == pid]
        if not opts and not bins and not popts:
            continue
        for w in idx.W:
            mb.lp += (pulp.lpSum(o.gpus * n[(o.key, w)] for o in opts) + pulp.lpSum(bins)
                      + pulp.lpSum(o.gpus * nd[(o.pd_key, w)] for o in popts) <= pool.gpus, f"c6_inv_{pid}_{w}")


def _c7_replica_floor_ceiling(mb: _MilpBuild) -> None:
    """(7) Replicas, residencies and decode replicas of a model within its floor (less the elastic floor shortfall)
    and its ceiling in every window."""
    idx = mb.idx
    for m in mb.problem.models:
        resident = [var for (mm, p, b), var in mb.a.items() if mm == m.name]
        for w in idx.W:
            reps = [mb.n[(o.key, w)] for o in idx.options if o.model == m.name] + resident
            reps += [mb.nd[(o.pd_key, w)] for o in mb.pd_opts if o.model == m.name and o.role == "decode"]
            if m.min_replicas:
                extra = [mb.floor_short[(m.name, w)]] if mb.elastic else []
                mb.lp += pulp.lpSum(reps + extra) >= m.min_replicas, f"c7_floor_{m.name}_{w}"
            if m.max_replicas is not None:
                mb.lp += pulp.lpSum(reps) <= m.max_replicas, f"c7_ceil_{m.name}_{w}"


def _c8_starts(mb: _MilpBuild) -> None:
    """(8) Starts between consecutive windows (cyclic) of the replicas and of the prefill/decode replicas."""
    lp, W, n, nd = mb.lp, mb.idx.W, mb.n, mb.nd
    for (key, w), var in mb.st.items():
        lp += var >= n[(key, w)] - n[(key, W[w - 1])], f"c8_start_{key[0]}_{key[1]}_{key[2]}_{key[3]}_{w}"
    for i, ((pkey, w), var) in enumerate(mb.std.items()):
        lp += var >= nd[(pkey, w)] - nd[(pkey, W[w - 1])], f"c8_pdstart_{i}"


def _c8_neighbour_starts(mb: _MilpBuild, neighbours: tuple[dict, dict]) -> None:
    """(8) of a one-window problem against the fixed windows before and after it (``neighbours``, see
    :func:`build_milp`): st_in[o] >= n[o] - before[o] and st_out[o] >= after[o] - n[o]."""
    before, after = neighbours
    for i, o in enumerate(mb.idx.options):
        if o.key in mb.st_nb:
            s_in, s_out = mb.st_nb[o.key]
            mb.lp += s_in >= mb.n[(o.key, 0)] - before.get(o.key, 0), f"c8_in_{i}"
            mb.lp += s_out >= after.get(o.key, 0) - mb.n[(o.key, 0)], f"c8_out_{i}"


def _c9_symmetry(mb: _MilpBuild, p: str, b: int) -> None:
    """(9) Symmetry breaking among a pool's candidate shared GPUs: y[p,b] <= y[p,b-1]."""
    if b > 0:
        mb.lp += mb.y[(p, b)] <= mb.y[(p, b - 1)], f"c9_sym_{p}_{b}"


def _c10_residents_per_gpu(mb: _MilpBuild, p: str, b: int) -> None:
    """(10) At most K = max_models_per_shared_gpu models reside on shared GPU (p, b) (their decode steps
    interleave), when K is set."""
    k = mb.problem.max_models_per_shared_gpu
    if k is not None:
        mb.lp += (pulp.lpSum(mb.a[(m, p, b)] for m in mb.idx.residents[(p, b)]) <= k * mb.y[(p, b)],
                  f"c10_residents_{p}_{b}")


def _c11_cover_cuts(mb: _MilpBuild) -> None:
    """(11) of :func:`build_milp`: the dedicated replicas of a model that cannot use a shared GPU (without classes
    or prefill/decode pools, whose capacities are not capacity_req_per_s) cost at least its least whole-replica
    covering in each window."""
    problem, idx = mb.problem, mb.idx
    pools, h = problem.pool_by_id, problem.window_hours
    can_share = {m for (m, _p) in idx.share}
    for m in problem.models:
        if m.name in can_share or m.class_shares or any(o.model == m.name for o in mb.pd_opts):
            continue
        mine = [o for o in idx.options if o.model == m.name]
        cost = {o.key: o.gpus * pools[o.pool].usd_per_gpu_hour * h for o in mine}
        spec = [(cost[o.key], mb.mu * o.capacity_req_per_s, idx.ub[o.key]) for o in mine]
        for w in idx.W:
            floor_usd = cover_cost_floor(spec, m.demand_req_per_s[w], m.min_replicas)
            if 0 < floor_usd < math.inf:
                mb.lp += (pulp.lpSum(cost[o.key] * mb.n[(o.key, w)] for o in mine) >= floor_usd * (1 - 1e-9),
                          f"c11_cover_{m.name}_{w}")


def _c12a_classes_served(mb: _MilpBuild, m, w: int) -> None:
    """(12a) Each request class of model ``m`` in window ``w`` is served by the options serving it (with the
    class's own shortfall or unserved demand, where the build has them, whose sums over the classes are
    short[m,w] and unserved[m,w])."""
    lp = mb.lp
    mine = [o for o in mb.idx.options if o.model == m.name]
    for ci, (cls, share) in enumerate(m.class_shares):
        extra = [mb.short_c[(m.name, cls, w)]] if mb.elastic else []
        extra += [mb.unserved_c[(m.name, cls, w)]] if mb.with_unserved else []
        lp += (pulp.lpSum([mb.x[(o.key, cls, w)] for o in mine if cls in o.class_capacity] + extra)
               >= share * m.demand_req_per_s[w], f"c12a_class_{m.name}_{ci}_{w}")
    if mb.with_unserved:
        lp += (mb.unserved[(m.name, w)] == pulp.lpSum(mb.unserved_c[(m.name, c, w)] for c, _ in m.class_shares),
               f"c12_unserved_{m.name}_{w}")
    if mb.elastic:
        lp += (mb.short[(m.name, w)] == pulp.lpSum(mb.short_c[(m.name, c, w)] for c, _ in m.class_shares),
               f"c12_short_{m.name}_{w}")


def _c12b_additive_load(mb: _MilpBuild, m, w: int) -> None:
    """(12b) The class flows of each option of model ``m`` load its replicas in window ``w`` additively, within
    1 - margin of each."""
    idx = mb.idx
    for o in idx.options:
        if o.model == m.name:
            mb.lp += (pulp.lpSum(mb.x[(o.key, k, w)] * (1.0 / cap) for k, cap in o.class_capacity.items())
                      <= mb.mu * mb.n[(o.key, w)], f"c12b_load_{m.name}_{idx.options.index(o)}_{w}")


def _c13_disaggregated(mb: _MilpBuild) -> None:
    """(13a) The prefill replicas of a KV route's sites carry its flow; (13b) the decode replicas of a site carry
    every flow decoded there (usable capacities after the margin)."""
    problem, lp, nd, g = mb.problem, mb.lp, mb.nd, mb.g
    pools = problem.pool_by_id
    for i, r in enumerate(problem.kv_routes):
        pre = [o for o in mb.pd_opts if o.role == "prefill" and o.model == r.model
               and pools[o.pool].site == r.prefill_site and o.decode_site == r.decode_site]
        for w in mb.idx.W:
            lp += (pulp.lpSum(mb.mu * o.capacity_req_per_s * nd[(o.pd_key, w)] for o in pre) >= g[(r.key, w)],
                   f"c13a_prefill_{i}_{w}")
    for j, (mname, s) in enumerate(sorted({(r.model, r.decode_site) for r in problem.kv_routes})):
        dec = [o for o in mb.pd_opts if o.role == "decode" and o.model == mname and pools[o.pool].site == s]
        into = [r for r in problem.kv_routes if r.model == mname and r.decode_site == s]
        for w in mb.idx.W:
            lp += (pulp.lpSum(mb.mu * o.capacity_req_per_s * nd[(o.pd_key, w)] for o in dec)
                   >= pulp.lpSum(g[(r.key, w)] for r in into), f"c13b_decode_{j}_{w}")


def _c14_kv_egress(mb: _MilpBuild) -> None:
    """(14) Each egress table's monthly volume of KV and prompt traffic (over the flows g) split into band fills
    that fill in order (binaries z; continuous when relaxed, where cheaper bands may fill first: still a lower
    bound); sets ``mb.kv_egress``, the objective terms that price the bands over the horizon. The open top band
    is gated like the others: v[t,last] <= V_max·z[t,last], V_max the table's volume with every flow at its
    model's demand (the flows' upper bound); without it the top band, usually the cheapest, filled before the
    bands below were full and the MILP under-priced the egress (found by benchmarks/bench_audit.py)."""
    problem, lp = mb.problem, mb.lp
    if not problem.kv_routes:
        return
    month_factor = DAYS_PER_MONTH * HOURS_PER_DAY / problem.horizon_hours
    volume: dict[tuple[str, str, str], list] = {}
    tables = {}
    for r in problem.kv_routes:
        for nbytes, table in ((r.kv_bytes_per_request, r.kv_table), (r.prompt_bytes_per_request, r.prompt_table)):
            if table is None or nbytes <= 0:
                continue
            tk = table_key(table)
            tables[tk] = table
            gb_per_req_per_s = problem.window_length_s * nbytes / 1e9 * month_factor
            volume.setdefault(tk, []).extend((gb_per_req_per_s, mb.g[(r.key, w)]) for w in mb.idx.W)
    for t_i, (tk, parts) in enumerate(sorted(volume.items())):
        tiers = tables[tk].tiers
        total = pulp.lpSum(c * g for c, g in parts)
        most_gb = sum(c * g.upBound for c, g in parts)  # V_max: every flow at its upper bound
        if len({t.usd_per_gb for t in tiers}) == 1 and tiers[-1].to_gb is None:  # flat
            mb.kv_egress.append(tiers[0].usd_per_gb / month_factor * total)
            continue
        v = []
        z = []
        for k, t in enumerate(tiers):
            width = None if t.to_gb is None else t.to_gb - t.from_gb
            v.append(lp.add_variable(f"kvband_{t_i}_{k}", 0, width))
            z.append(lp.add_variable(f"kvz_{t_i}_{k}", 0, 1, pulp.LpContinuous if mb.relax else pulp.LpBinary))
        lp += pulp.lpSum(v) == total, f"c14_volume_{t_i}"
        for k, t in enumerate(tiers):
            if t.to_gb is None:
                lp += v[k] <= most_gb * z[k], f"c14_open_{t_i}_{k}"
            else:
                width = t.to_gb - t.from_gb
                lp += v[k] <= width * z[k], f"c14_open_{t_i}_{k}"
                if k + 1 < len(tiers):
                    lp += v[k] >= width * z[k + 1], f"c14_full_{t_i}_{k}"
                    lp += z[k + 1] <= z[k], f"c14_order_{t_i}_{k}"
            mb.kv_egress.append(t.usd_per_gb / month_factor * v[k])


def _pool_use(idx: Index, pid: str, n: dict, y: dict, nd: dict, w: int) -> list:
    """Terms of the GPUs pool ``pid`` uses in window ``w``: replicas' k_o·n[o,w], prefill/decode replicas'
    tp·nd[o,w] (keys (model, role, pool, tp, decode site)) and its shared GPUs y[p,b]."""
    return ([o.gpus * n[(o.key, w)] for o in idx.options if o.pool == pid]
            + [pkey[3] * var for (pkey, ww), var in nd.items() if ww == w and pkey[2] == pid]
            + [var for (p, _b), var in y.items() if p == pid])


def _c15_commitments(mb: _MilpBuild) -> None:
    """(15) The commitment c[p] ∈ [0, G_p] (integer, continuous when relaxed) of every committed pool in use, and
    its use <= c[p] in every window (the objective prices c)."""
    idx = mb.idx
    for j, pool in enumerate(mb.problem.pools):
        if not pool.committed or not _pool_use(idx, pool.id, mb.n, mb.y, mb.nd, 0):
            continue
        mb.c[pool.id] = var = mb.lp.add_variable(f"commit_{j}", 0, pool.gpus, mb.icat)
        for w in idx.W:
            mb.lp += pulp.lpSum(_pool_use(idx, pool.id, mb.n, mb.y, mb.nd, w)) <= var, f"c15_commit_{j}_{w}"


def _c16_spot_fallback(mb: _MilpBuild) -> None:
    """(16) In every window the fallback pool of each spot pool leaves interruption_rate × the spot GPUs in use
    unused."""
    idx = mb.idx
    pools = mb.problem.pool_by_id
    for j, pool in enumerate(mb.problem.pools):
        if pool.fallback_pool is None or not pool.interruption_rate:
            continue
        fb = pools[pool.fallback_pool]
        for w in idx.W:
            spot = _pool_use(idx, pool.id, mb.n, mb.y, mb.nd, w)
            if not spot:
                continue
            mb.lp += (pool.interruption_rate * pulp.lpSum(spot)
                      + pulp.lpSum(_pool_use(idx, fb.id, mb.n, mb.y, mb.nd, w)) <= fb.gpus, f"c16_fallback_{j}_{w}")


def _c18_spread(mb: _MilpBuild) -> None:
    """(18) In every window the capacity of a model with a spread bound at one site (in one pool) is at most the
    bound × its capacity everywhere (dedicated replicas' usable capacity plus, per shared GPU it resides on, its
    usable capacity there alone); the terms: :func:`fleetplan.solvers.common.spread_rows`."""
    for j, row in enumerate(spread_rows(mb.problem, mb.idx)):
        for w in mb.idx.W:
            def cap(terms: list, w: int = w) -> list:
                return [c * (mb.n[(k, w)] if kind == "n" else mb.a[k]) for c, kind, k in terms]

            total = [t for terms in row.places.values() for t in cap(terms)]
            for i, (_place, terms) in enumerate(sorted(row.places.items())):
                mb.lp += (pulp.lpSum(cap(terms)) - row.share * pulp.lpSum(total) <= 0,
                          f"c18_spread_{j}_{row.level}_{i}_{w}")


def _objective(mb: _MilpBuild) -> None:
    """Minimize GPU-hours × price (replicas, shared GPUs all day, prefill/decode replicas) + starts × start cost
    (against the fixed neighbour windows too) + egress of the site split q + (14)'s KV egress bands + (15)'s
    commitments × committed rate × horizon hours; elastic: + ELASTIC_PENALTY_USD per req/s or replica short;
    + the build's ``option_usd`` per replica (see :func:`build_milp`)."""
    problem, idx, W = mb.problem, mb.idx, mb.idx.W
    pools, models, h = problem.pool_by_id, problem.model_by_name, problem.window_hours
    obj = [ELASTIC_PENALTY_USD * v for v in mb.short.values()]
    obj += [ELASTIC_PENALTY_USD * v for v in mb.floor_short.values()]
    for o in idx.options:
        c = o.gpus * pools[o.pool].usd_per_gpu_hour * h + mb.option_usd.get(o.key, 0.0)
        obj += [c * mb.n[(o.key, w)] for w in W]
        obj += [o.start_cost_usd * mb.st[(o.key, w)] for w in W if (o.key, w) in mb.st]
    for (p, _b), var in mb.y.items():
        obj.append(pools[p].usd_per_gpu_hour * h * len(W) * var)
    for (mname, s, _w), var in mb.q.items():
        e = problem.egress_usd_per_req_per_s_window(models[mname], s)
        if e:
            obj.append(e * var)
    for o in mb.pd_opts:
        c = o.gpus * pools[o.pool].usd_per_gpu_hour * h
        obj += [c * mb.nd[(o.pd_key, w)] for w in W]
        obj += [o.start_cost_usd * mb.std[(o.pd_key, w)] for w in W if (o.pd_key, w) in mb.std]
    obj += mb.kv_egress
    for o in idx.options:
        if o.key in mb.st_nb:
            obj += [o.start_cost_usd * s for s in mb.st_nb[o.key]]
    for pid, var in mb.c.items():
        obj.append(pools[pid].committed_usd_per_gpu_hour * problem.horizon_hours * var)
    mb.lp += pulp.lpSum(obj)


def extract_commitments(model: PlacementMilpModel) -> dict[str, int]:
    """{committed pool id: GPUs committed} of a solved (integer) model."""
    return {pid: int(round(var.value() or 0)) for pid, var in (model.c or {}).items()}


def _set_initial(model: PlacementMilpModel, warm: dict) -> bool:
    if not warm:
        return False
    for (key, w), var in model.n.items():
        var.setInitialValue(warm["n"][key][w])
    for (key, w), var in model.st.items():
        var.setInitialValue(warm["st"][key][w])
    for k, var in model.y.items():
        var.setInitialValue(warm["y"].get(k, 0))
    for k, var in model.a.items():
        var.setInitialValue(warm["a"].get(k, 0))
    for (m, p, b, w), var in model.f.items():
        var.setInitialValue(warm["f"].get((m, p, b), [0.0] * len(model.idx.W))[w])
    for k, var in model.q.items():
        var.setInitialValue(warm["q"].get(k, 0.0))
    return True


def extract_pd(model: PlacementMilpModel) -> tuple[dict, dict]:
    """({pd key: prefill/decode replicas per window}, {route key: KV flow req/s per window}) of a solved model."""
    W = model.idx.W
    pd: dict = {}
    for (key, w), var in (model.nd or {}).items():
        pd.setdefault(key, [0] * len(W))[w] = int(round(var.value() or 0))
    flows: dict = {}
    for (key, w), var in (model.g or {}).items():
        x = var.value() or 0.0
        # dust below the solver's tolerances (1e-15 req/s on a route the plan does not use) is no flow
        flows.setdefault(key, [0.0] * len(W))[w] = x if x > FLOW_DUST_REQ_PER_S else 0.0
    return ({k: tuple(v) for k, v in pd.items() if any(v)},
            {k: tuple(v) for k, v in flows.items() if any(x > 0 for x in v)})


def extract_plan(problem: Problem, model: PlacementMilpModel) -> tuple[dict, tuple[SharedGPU, ...]]:
    """Read replica counts and shared GPUs from a solved (integer) model (prefill/decode pools and KV flows:
    :func:`extract_pd`)."""
    W = model.idx.W
    replicas = {}
    for o in model.idx.options:
        counts = tuple(int(round(model.n[(o.key, w)].value() or 0)) for w in W)
        if any(counts):
            replicas[o.key] = counts
    shared = []
    for (p, b), var in model.y.items():
        if (var.value() or 0) > 0.5:
            residents = tuple(m for m in model.idx.residents[(p, b)] if (model.a[(m, p, b)].value() or 0) > 0.5)
            served = {m: tuple(max(0.0, model.f[(m, p, b, w)].value() or 0.0) for w in W) for m in residents}
            shared.append(SharedGPU(pool=p, models=residents, served_req_per_s=served))
    return replicas, tidy_shared(problem, replicas, tuple(shared))


#: Above this many replica variables (options × windows) the LP bound leaves out start costs (see build_milp).
LP_BOUND_WITH_STARTS_MAX_VARS = 20_000


def solve_lp_bound(problem: Problem, *, time_limit_s: float = 60, threads: int | None = None,
                   with_starts: bool | None = None, deadline: float | None = None) -> float | None:
    """Objective of the LP relaxation (a lower bound on the optimum), USD, or None if not solved in time. The
    relaxation carries the covering inequalities (11) of :func:`build_milp` (valid for every integer plan).

    ``with_starts`` None chooses: the full relaxation for problems up to LP_BOUND_WITH_STARTS_MAX_VARS replica
    variables, the relaxation without start costs above (simplex stalls on the full one at 50+ models).
    ``deadline`` (a time.perf_counter() value) caps the whole call, model building included.
    """
    if with_starts is None:
        with_starts = len(problem.options) * problem.n_windows <= LP_BOUND_WITH_STARTS_MAX_VARS
    t0 = time.perf_counter()
    model = build_milp(problem, relax=True, aggregate=True, with_starts=with_starts, cover_cuts=True)
    if deadline is not None:  # the hand-over to HiGHS takes about the build time again (see solve_milp)
        time_limit_s = min(time_limit_s, deadline - time.perf_counter() - (time.perf_counter() - t0))
        if time_limit_s <= 0.05:
            return None
    # Interior point (with crossover): dual simplex stalls on these degenerate LPs (60 s without an answer at 50
    # models where IPM needs 3 s; 200 models: 12 s).
    solver = HiGHS(msg=False, timeLimit=time_limit_s, threads=threads, solver="ipm")
    model.lp.solve(solver)
    if model.lp.status == pulp.LpStatusOptimal and model.lp.sol_status == pulp.LpSolutionOptimal:
        return float(pulp.value(model.lp.objective) or 0.0)
    return None


@dataclass(frozen=True)
class BoundResult:
    """A proven lower bound from a relaxation. ``bound_usd``: USD, or None when the solver proved none in time;
    ``infeasible``: the relaxation (hence the problem) has no solution; ``closed``: solved to its gap."""

    bound_usd: float | None
    infeasible: bool = False
    closed: bool = False
    time_limit_reached: bool = False


#: HiGHS options that turn its primal heuristics off, for a solve whose only use is its dual bound: at 200
#: models a window's aggregate MILP took 23-25 CPU s for 200 nodes with them, 6.7-7.5 without, its bound 0.1%
#: lower (2026-12-03, synthetic 200 models x 24 windows, windows 0 and 12, 1 thread). A feasibility pump still
#: runs at the root (HiGHS has no option for it).
NO_HEURISTICS = {"mip_heuristic_effort": 0.0, "mip_heuristic_run_rens": False, "mip_heuristic_run_rins": False,
                 "mip_heuristic_run_feasibility_jump": False, "mip_heuristic_run_root_reduced_cost": False,
                 "mip_heuristic_run_shifting": False, "mip_heuristic_run_zi_round": False}


def solve_aggregate_bound(problem: Problem, *, time_limit_s: float, threads: int | None = None,
                          gap: float = 1e-4, deadline: float | None = None,
                          max_nodes: int | None = None, heuristics: bool = True,
                          option_usd: dict | None = None) -> BoundResult:
    """HiGHS's proven bound on the aggregate MILP of ``problem`` (``build_milp(aggregate=True, cover_cuts=True)``:
    integer replicas, integer counts of shared GPUs per pool, the covering inequalities (11); a relaxation of the
    exact MILP, see build_milp), USD.

    The dual bound is valid whether or not HiGHS closes the gap within ``time_limit_s`` (which counts the solve,
    not the model building); ``deadline`` (a time.perf_counter() value) also caps it once the model is built.
    ``max_nodes``: a deterministic budget of branch-and-bound nodes (seed HIGHS_SEED; see :func:`solve_milp`), the
    time limit then only a safety stop (``time_limit_reached`` says whether it stopped the search).
    ``heuristics=False``: HiGHS's primal heuristics off (NO_HEURISTICS): the bound only, for less work per node;
    without an incumbent the search rarely closes the gap, so it runs to its node budget.
    ``option_usd``: prices added per replica (see :func:`build_milp`); the bound is then one of that objective."""
    model = build_milp(problem, aggregate=True, cover_cuts=True, option_usd=option_usd)
    if deadline is not None:
        time_limit_s = min(time_limit_s, deadline - time.perf_counter())
    solver = HiGHS(msg=False, timeLimit=max(0.01, time_limit_s), threads=threads, gapRel=gap,
                   random_seed=HIGHS_SEED, mip_max_nodes=max_nodes, **({} if heuristics else NO_HEURISTICS))
    model.lp.solve(solver)
    if model.lp.status == pulp.LpStatusInfeasible or model.lp.sol_status == pulp.LpSolutionInfeasible:
        return BoundResult(None, infeasible=True)
    h = model.lp.solverModel
    b = float(h.getInfo().mip_dual_bound)
    closed = h.getModelStatus() == highspy_status("kOptimal")
    return BoundResult(b if math.isfinite(b) else None, closed=closed,
                       time_limit_reached=h.getModelStatus() == highspy_status("kTimeLimit"))


def solve_milp(problem: Problem, *, backend: str = "highs", time_limit_s: float = 60, threads: int | None = None,
               gap: float = 1e-4, warm_start: Plan | None = None, msg: bool = False,
               deadline: float | None = None, extra_bounds: dict[str, float | None] | None = None,
               neighbours: tuple[dict, dict] | None = None, max_nodes: int | None = None) -> Plan:
    """Solve the MILP with HiGHS (``backend='highs'``) or CBC (``'cbc'``); returns a new Plan.

    ``max_nodes``: a deterministic effort budget, branch-and-bound nodes (HiGHS ``mip_max_nodes``, CBC
    ``maxNodes``; None: none), with HiGHS's random_seed fixed at HIGHS_SEED and CBC's several threads in its
    repeatable mode: the same problem and budget give the same plan on an idle or a busy machine, the time limit
    being only a safety stop (a plan it cuts says so).

    Status, bound, gap and message come from :func:`fleetplan.solvers.common.finish_plan`: the returned plan is the
    cheaper of the backend's incumbent and ``warm_start`` (a valid plan), OPTIMAL only when the proven bound
    (HiGHS's MIP dual bound; for CBC, which PuLP gives no bound for, the LP relaxation in ``extra_bounds`` or, when
    CBC reports optimality, its objective × (1 - gap)) is within ``gap``.
    HiGHS gets no MIP start: HiGHS 1.16's presolve maps a start into its reduced space with a wrong objective
    (a 7.34 start valued 3.67 there, then "optimal" at 3.67 while the returned columns are the start's), so a
    start could only lower quality; the start competes after the solve instead. CBC gets it as its warm start.
    ``deadline`` (a time.perf_counter() value) caps the solver's time limit after the model is built; a message
    names ``time_limit_s`` (the caller's limit, of which ``deadline`` is the end), never the share left for the solver.
    ``neighbours``: see :func:`build_milp` (the solver then also weighs the starts against the fixed neighbour
    windows; the returned plan's objective and status are still those of ``problem`` alone).
    Raises SolverError if the backend is unknown or not available.
    """
    t0 = time.perf_counter()
    if backend not in ("highs", "cbc"):
        raise SolverError(f"unknown MILP backend {backend!r}; use 'highs' or 'cbc'")
    model = build_milp(problem, neighbours=neighbours)
    used_warm = False
    if backend == "cbc" and warm_start is not None:
        used_warm = _set_initial(model, warm_values(problem, model.idx, warm_start))
    user_limit_s = time_limit_s  # what messages name: the solver's own share below is an internal figure
    if deadline is not None:
        # PuLP hands the model to HiGHS and reads the answer back in Python, in about the time it took to build
        # it: that time is kept back from the solver's limit so the whole call ends by the deadline.
        time_limit_s = min(time_limit_s, deadline - time.perf_counter() - (time.perf_counter() - t0))
    bounds = dict(extra_bounds or {})
    if time_limit_s <= 0.05:
        note = ("no time left for the solver after building the model" if max_nodes is None else
                f"the wall-clock safety stop ({user_limit_s:.3g} s) left no time for the {backend} search after "
                "building its model: this plan may differ on another machine")
        return finish_plan(problem, backend=backend, gap=gap, bounds=bounds, start=warm_start,
                           time_limit_reached=True, time_limit_s=user_limit_s,
                           solve_time_s=time.perf_counter() - t0, notes=(note,))
    if backend == "cbc" and max_nodes is not None and threads is not None and threads > 1:
        # With a node budget and several threads, CBC's repeatable parallel mode (threads = 100 + n): its plain
        # parallel search is not (random_instance(6, 6, seed=4), 300 nodes, 2 threads: $208.80 then $205.51;
        # 102: the same plan twice).
        threads = 100 + threads
    if backend == "highs":
        solver = HiGHS(msg=msg, timeLimit=time_limit_s, threads=threads, gapRel=gap, random_seed=HIGHS_SEED,
                       mip_max_nodes=max_nodes)
    else:
        # Wall-clock time limit (CBC counts CPU seconds by default); CBC takes fractional seconds (a whole
        # second rounded up overran a 1-s limit by 0.4 s).
        solver = pulp.PULP_CBC_CMD(msg=msg, timeLimit=round(time_limit_s, 2), threads=threads, gapRel=gap,
                                   warmStart=used_warm, timeMode="elapsed", maxNodes=max_nodes, options=CBC_OPTIONS)
    if not solver.available():
        raise SolverError(f"MILP backend {backend!r} is not available in this environment; install highspy "
                          "(for highs) or use PuLP's bundled CBC")
    t_solve = time.perf_counter()
    try:
        model.lp.solve(solver)
    except pulp.PulpSolverError as exc:
        raise SolverError(f"the {backend} solver failed: {str(exc).split('/')[0].strip()}; try --backend highs "
                          "or cpsat") from None
    solver_s = time.perf_counter() - t_solve
    st, sol = model.lp.status, model.lp.sol_status
    if sol == pulp.LpSolutionInfeasible or st == pulp.LpStatusInfeasible:
        return Plan(status=Status.INFEASIBLE, backend=backend, solve_time_s=time.perf_counter() - t0)
    if backend == "highs":
        h = model.lp.solverModel
        reached = h.getModelStatus() == highspy_status("kTimeLimit")
        b = float(h.getInfo().mip_dual_bound)
        if neighbours is None:  # with neighbours it bounds cost + starts, not this problem's optimum
            bounds["HiGHS dual"] = b if math.isfinite(b) else None
    else:
        reached = solver_s >= TIME_LIMIT_SHARE * time_limit_s
    incumbent = None
    if sol in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        replicas, shared = extract_plan(problem, model)
        pd, flows = extract_pd(model)
        incumbent = Plan(replicas=replicas, shared=shared, pd_replicas=pd, kv_flows_req_per_s=flows,
                         commitments=extract_commitments(model))
        if backend == "cbc" and sol == pulp.LpSolutionOptimal and neighbours is None:
            # CBC proved optimality within gapRel; PuLP does not expose its bound, so this is the bound it proved.
            bounds["CBC proof"] = evaluate(problem, incumbent).total_usd * (1 - gap)
    notes: tuple[str, ...] = ("warm-started from the heuristic plan",) if used_warm else ()
    if max_nodes is not None and reached:
        done = f"after {h.getInfo().mip_node_count:,} of its" if backend == "highs" else "before its budget of"
        notes += (f"the wall-clock safety stop ({user_limit_s:.3g} s) cut the {backend} search {done} "
                  f"{max_nodes:,} nodes: this plan may differ on another machine",)
    elif max_nodes is not None and backend == "highs" and h.getInfo().mip_node_count >= max_nodes:
        notes += (f"the budget of {max_nodes:,} branch-and-bound nodes was used up",)
    return finish_plan(problem, backend=backend, gap=gap, bounds=bounds, incumbent=incumbent, start=warm_start,
                       time_limit_reached=reached, time_limit_s=user_limit_s, solve_time_s=time.perf_counter() - t0,
                       notes=notes)


#: Relative gap of each priority stage of :func:`solve_best_effort` (the least unserved demand of a class).
BEST_EFFORT_STAGE_GAP = 1e-6
#: Slack, req/s summed over a class's windows, when a class's least unserved demand is fixed for the later stages
#: (room for the solvers' 1e-7 feasibility tolerance on each row).
BEST_EFFORT_FIX_TOL = 1e-6


def _run(model: PlacementMilpModel, backend: str, time_limit_s: float, threads: int | None, gap: float,
         msg: bool, max_nodes: int | None = None) -> tuple[bool, float | None, float | None, bool]:
    """Solve ``model.lp`` as it stands: (infeasible, objective or None, proven lower bound or None,
    time limit reached). ``max_nodes``: a deterministic budget of branch-and-bound nodes, as in
    :func:`solve_milp` (HiGHS's seed fixed, CBC's several threads in its repeatable mode); the time limit is then
    only a safety stop."""
    if backend == "highs":
        solver = HiGHS(msg=msg, timeLimit=max(0.05, time_limit_s), threads=threads, gapRel=gap,
                       **({} if max_nodes is None else {"random_seed": HIGHS_SEED, "mip_max_nodes": max_nodes}))
    else:
        if max_nodes is not None and threads is not None and threads > 1:
            threads = 100 + threads  # CBC's repeatable parallel mode (see solve_milp)
        solver = pulp.PULP_CBC_CMD(msg=msg, timeLimit=max(1, math.ceil(time_limit_s)), threads=threads,
                                   gapRel=gap, timeMode="elapsed", maxNodes=max_nodes, options=CBC_OPTIONS)
    if not solver.available():
        raise SolverError(f"MILP backend {backend!r} is not available in this environment")
    t = time.perf_counter()
    try:
        model.lp.solve(solver)
    except pulp.PulpSolverError as exc:
        raise SolverError(f"the {backend} solver failed: {str(exc).split('/')[0].strip()}") from None
    st, sol = model.lp.status, model.lp.sol_status
    if sol == pulp.LpSolutionInfeasible or st == pulp.LpStatusInfeasible:
        return True, None, None, False
    value = (float(pulp.value(model.lp.objective) or 0.0)
             if sol in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible) else None)
    if backend == "highs":
        h = model.lp.solverModel
        b = float(h.getInfo().mip_dual_bound)
        return False, value, (b if math.isfinite(b) else None), h.getModelStatus() == highspy_status("kTimeLimit")
    # CBC: optimal within gapRel is the only proof PuLP exposes
    bound = value * (1 - gap) if value is not None and sol == pulp.LpSolutionOptimal else None
    return False, value, bound, time.perf_counter() - t >= TIME_LIMIT_SHARE * time_limit_s


def solve_best_effort(problem: Problem, *, backend: str = "highs", time_limit_s: float = 60,
                      threads: int | None = None, gap: float = 1e-4, deadline: float | None = None,
                      msg: bool = False, max_nodes: int | None = None) -> Plan:
    """The best-effort plan when demand may exceed the inventory: the most demand served in order of the models'
    ``priority`` (higher first), then the lowest cost; a new Plan whose ``unserved_req_per_s`` lists the demand
    left unserved.

    Lexicographic by stages on one model (:func:`build_milp` with ``unserved=True``): for each priority class,
    highest first, minimise the class's unserved demand Σ u[m,w] (req/s summed over windows, to a relative gap
    of BEST_EFFORT_STAGE_GAP) and fix it (Σ u <= the value found + BEST_EFFORT_FIX_TOL) for the later stages;
    last, minimise the cost to ``gap``. Stages rather than one weighted objective: the weights that would make
    one objective lexicographic grow with each class's demand divided by the smallest difference in served
    demand that counts, far beyond the solvers' numerical range. The unserved demand reported is the plan's own
    (demand - usable capacity, :func:`fleetplan.placement.plan.unserved`), not the solver's variables.
    The cost bound (status OPTIMAL/FEASIBLE) is the last stage's: a bound on the cost at the service levels fixed
    by the stages; it is given only when every stage proved its least unserved demand, otherwise the plan is
    HEURISTIC and the message says which class was not proven. Each stage gets an equal share of the time left;
    with ``max_nodes``, each stage is bounded by that many branch-and-bound nodes instead (seed fixed, see
    :func:`_run`), so the same problem and budget give the same plan on an idle or a busy machine, and the time
    left until the deadline is only a safety stop: a stage it stops is named in the message ("the wall-clock
    safety stop ... cut the best-effort stage of priority k ...: this plan may differ on another machine").
    Raises SolverError for an unknown or unavailable backend.
    """
    t0 = time.perf_counter()
    if backend not in ("highs", "cbc"):
        raise SolverError(f"unknown MILP backend {backend!r}; use 'highs' or 'cbc'")
    end = deadline if deadline is not None else t0 + time_limit_s
    model = build_milp(problem, unserved=True)
    cost = model.lp.objective
    prio = {m.name: m.priority for m in problem.models}
    classes = sorted(set(prio.values()), reverse=True)
    notes: list[str] = []
    cuts: list[str] = []  # the stages the safety stop cut (with max_nodes)
    proven = True
    for i, k in enumerate(classes):
        terms = [v for (m, _w), v in model.unserved.items() if prio[m] == k]
        model.lp.setObjective(pulp.lpSum(terms))
        left = (end - time.perf_counter()) / (1 if max_nodes is not None else len(classes) + 1 - i)
        infeasible, value, bound, reached = _run(model, backend, left, threads, BEST_EFFORT_STAGE_GAP, msg,
                                                 max_nodes)
        if reached and max_nodes is not None:
            cuts.append(f"the best-effort stage of priority {k}")
        if infeasible:
            return Plan(status=Status.INFEASIBLE, backend=backend, solve_time_s=time.perf_counter() - t0)
        if value is None:
            return finish_plan(problem, backend=backend, gap=gap, bounds={}, time_limit_reached=reached,
                               time_limit_s=time_limit_s, solve_time_s=time.perf_counter() - t0,
                               notes=(f"best effort: no plan for priority class {k} "
                                      + ("in its share of the time" if max_nodes is None else
                                         f"before the wall-clock safety stop ({time_limit_s:.3g} s)" if reached
                                         else f"within its budget of {max_nodes:,} nodes"),))
        if bound is None or value - bound > BEST_EFFORT_STAGE_GAP * max(1.0, value) + BEST_EFFORT_FIX_TOL:
            proven = False
            why = "time limit reached" if reached else "stopped"
            notes.append(f"best effort: the least unserved demand of priority {k} is not proven ({why}; "
                         f"{value:.3f} req/s over the windows found, bound {bound if bound is not None else 'none'})")
        model.lp += pulp.lpSum(terms) <= value + BEST_EFFORT_FIX_TOL, f"best_effort_fix_{i}"
    model.lp.setObjective(cost)
    infeasible, value, bound, reached = _run(model, backend, end - time.perf_counter(), threads, gap, msg,
                                             max_nodes)
    if reached and max_nodes is not None:
        cuts.append("the best-effort cost stage")
    if cuts:
        notes.append(f"{SAFETY_STOP_NOTE} at {time_limit_s:.3g} s cut " + "; ".join(cuts)
                     + f" before its budget of {max_nodes:,} nodes: this plan may differ on another machine")
    incumbent = None
    if not infeasible and value is not None:
        replicas, shared = extract_plan(problem, model)
        pd, flows = extract_pd(model)
        by_model = unserved(problem, replicas, shared, flows)
        by_class = class_unserved(problem, model)
        by_model = {m: row for m, row in by_model.items() if not problem.model_by_name[m].class_shares}
        for (mname, _c), row in by_class.items():  # a class model's unserved demand is the sum of its classes'
            prev = by_model.get(mname, (0.0,) * len(row))
            by_model[mname] = tuple(a + b for a, b in zip(prev, row, strict=True))
        incumbent = Plan(replicas=replicas, shared=shared, pd_replicas=pd, kv_flows_req_per_s=flows,
                         unserved_req_per_s=by_model, class_unserved_req_per_s=by_class,
                         commitments=extract_commitments(model))
    bounds = {f"{backend} (at the served levels)": bound} if proven else {}
    return finish_plan(problem, backend=backend, gap=gap, bounds=bounds, incumbent=incumbent,
                       time_limit_reached=reached, time_limit_s=time_limit_s,
                       solve_time_s=time.perf_counter() - t0, notes=tuple(notes))


def class_unserved(problem: Problem, model: PlacementMilpModel) -> dict[tuple[str, str], tuple[float, ...]]:
    """{(model, class): req/s of the class left unserved in each window} of a solved model, for the models with
    request classes that leave any: the plan's own routing, not the solver's uc variables: each replica option's
    class flows x (scaled down, when the solver's tolerance put them above the replicas' usable capacity, to fit
    it exactly), then unserved = the class's demand - what its flows serve (below UNSERVED_TOL_REQ_PER_S: 0)."""
    W = model.idx.W
    mu = 1 - problem.margin
    out = {}
    for m in problem.models:
        if not m.class_shares:
            continue
        mine = [o for o in model.idx.options if o.model == m.name]
        rows: dict[str, list[float]] = {c: [0.0] * len(W) for c, _ in m.class_shares}
        for w in W:
            served = dict.fromkeys(rows, 0.0)
            for o in mine:
                flows = {c: max(0.0, (model.x or {})[(o.key, c, w)].value() or 0.0) for c in o.class_capacity}
                load = sum(f / o.class_capacity[c] for c, f in flows.items())
                n = round(model.n[(o.key, w)].value() or 0)
                scale = min(1.0, mu * n / load) if load > 0 else 0.0
                for c, f in flows.items():
                    served[c] += f * scale
            for c, share in m.class_shares:
                left = share * m.demand_req_per_s[w] - served[c]
                rows[c][w] = left if left > UNSERVED_TOL_REQ_PER_S else 0.0
        out.update({(m.name, c): tuple(r) for c, r in rows.items() if any(r)})
    return out


def highspy_status(name: str):
    """HiGHS's model status ``name`` (e.g. 'kTimeLimit')."""
    import highspy

    return getattr(highspy.HighsModelStatus, name)
