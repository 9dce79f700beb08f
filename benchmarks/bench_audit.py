"""Audit of the exact backends' claims on random small instances against an independent enumeration.

Run: `.venv/bin/python benchmarks/bench_audit.py [--instances 210] [--backends highs cbc cpsat] [--seed 0]`
(about 2-4 CPU-minutes for 210 instances on the three backends; `--families shared classes` for a subset).

Each instance is tiny (one or two models, two windows, two or three replica options, at most one shared GPU), drawn
at random for one constraint family:

* shared: two models that may share one GPU of a pool, with a remainder beside dedicated replicas or off-peak only;
* floors: the same with replica floors and ceilings per model (a shared residency counts as a replica);
* commitments: a committed pool (a rate per committed GPU-hour, the commitment a decision) beside an on-demand pool
  of the same GPU type;
* spot: a spot pool whose interruption rate must fit in the free GPUs of its small on-demand fallback pool;
* sites: one model with traffic at an origin site and capacity at two sites, request egress priced per GB;
* classes: one model with two request classes and options that serve one class, the other, or both;
* best-effort: demand beyond the inventory, two models of different priority (``solve(best_effort=True)``);
* disagg: one model served colocated at site t:a or prefilled there and decoded at the cheaper site t:b, the KV
  cache and prompts crossing the WAN priced by a three-band monthly-volume egress table;
* mixed (only with ``--families mixed``, so the default draws stay those measured below): a model that may use a
  shared GPU and one that may not, competing for a small pool that is also a spot pool's fallback.

The reference is an enumeration written from the problem's definition, sharing no code with the solvers' models: every
replica count 0..N_o per option and window (N_o = the replicas the option needs for its model's highest demand, or
the model's floor if larger, within the pool: a plan with more replicas of an option in some window stays feasible
with N_o there and costs no more, since GPU-hours fall and clipping a sequence never adds a rise), every subset of
the models on the shared GPU serving what their dedicated replicas leave (the least load a shared GPU can take: if
any split is feasible, this one is), for best effort the unserved demand the plan's own capacity leaves, and for
prefill/decode pools the KV flow that the colocated replicas leave (the least flow that serves the demand: every
band of the egress table has a rate >= 0, so more flow never costs less).
Feasibility is :func:`fleetplan.placement.validate.validate`, the cost its ``plan_cost_usd`` (commitments at the
plan's peak use, the cheapest commitment for those replicas; egress served at the cheapest sites first), and for best
effort the lexicographic order (unserved demand of the higher priority, then of the lower, then cost).

Each instance is solved by each backend twice: through the `fleetplan plan` pipeline, and by the exact model alone
from a cold start (``--stages``); the stage ``fleet-bound`` (when named) checks, once per instance (not best
effort), the per-window bound of the fleet-scale path split into its parts and with its start prices
(:func:`fleet_bound_claims`). Checked per solve: a plan returned passes ``validate`` with its reported cost;
OPTIMAL only when the plan is within the requested gap of the enumeration's optimum (a "false OPTIMAL" otherwise);
a lower bound never above the enumeration's optimum ("bound above a valid plan"); INFEASIBLE exactly when the
enumeration finds no plan; a best-effort plan serves as much of each priority as the enumeration's best. CP-SAT
plans neither best effort nor prefill/decode pools (solve() hands the first to HiGHS and refuses the second), so
those two families run on HiGHS and CBC only.

Measured (2026-12-03, 2 cores shared with other work, load 11-12, `--instances 240`, the default stages and
backends): 1,320 solves (30 instances a family, each by the pipeline and by the exact model alone; best effort and
disagg on HiGHS and CBC only), all OPTIMAL, 0 false claims (no false OPTIMAL, no bound above a valid plan, every plan
valid at its reported cost); 116 CPU-s. Before this round's two fixes the same script found: on prefill/decode
instances, HiGHS proving its own optimum below the plan's true cost (the open top egress band filled first, (14)),
so optimal plans were reported "feasible, gap 2.03%"; and CBC proving a $8.79 plan optimal where $7.47 exists (its
preprocessing; the pipeline's warm start hid it as a DEFECT note, the exact stage shows it). On the code before the
exact-sharing fix (commit 17019c7's parent, `--families shared floors --instances 40 --backends highs --stages
pipeline`): 17 of 40 solves false (a false OPTIMAL with a bound above a valid plan in each; e.g. $6.00 "optimal"
against $4.00). No instance drawn was infeasible (the floors family's ceilings never bound below its floors):
INFEASIBLE honesty is checked by tests/test_planner_honesty.py, not here.
The stage fleet-bound (2026-12-03, load 4-5): `--instances 240 --stages fleet-bound --backends highs`, 210 bounds
(every family but best effort; the start prices priced in 118 of them, none split: each of these families has one
part), none above the enumeration's optimum, 85 CPU-s; `--instances 30 --families mixed --backends highs` (every
instance split in two parts; 8 of the 30 infeasible), 90 checks, 0 false claims, 11.5 CPU-s.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import time
from collections import Counter
from dataclasses import dataclass

import numpy as np

from fleetplan.costmodels.prices import EgressTable, EgressTier
from fleetplan.placement.plan import Plan, SharedGPU, Status
from fleetplan.placement.problem import KvRoute, ModelSpec, Pool, Problem, ReplicaOption, ShareOption
from fleetplan.placement.validate import plan_cost_usd, validate
from fleetplan.solvers.common import SafetyStop
from fleetplan.solvers.decompose import window_bounds
from fleetplan.solvers.milp import solve_best_effort
from fleetplan.solvers.solve import REGISTRY, Effort, solve

#: The constraint families drawn, in turn.
FAMILIES = ("shared", "floors", "commitments", "spot", "sites", "classes", "best-effort", "disagg")
#: Families drawn only when named (``--families mixed``), so the default draws stay those measured below.
EXTRA_FAMILIES = ("mixed",)
#: Windows per instance (two keep the enumeration to a few thousand plans and still exercise starts).
N_WINDOWS = 2
#: Absolute tolerance, USD, when comparing costs (the plan files' cent).
TOL_USD = 0.005
#: Tolerance on unserved demand, req/s, when comparing best-effort plans (the solver fixes each stage within
#: fleetplan.solvers.milp.BEST_EFFORT_FIX_TOL plus its stage gap on a few req/s).
TOL_UNSERVED = 0.01


def _pool(site: str, gpus: int, price: float, **kw) -> Pool:
    return Pool(site, "G", nodes=1, gpus_per_node=gpus, usd_per_gpu_hour=price, memory_bytes_per_gpu=80e9, **kw)


def _r(rng: np.random.Generator, low: float, high: float) -> float:
    return round(float(rng.uniform(low, high)), 2)


def _shared_instance(rng: np.random.Generator, floors: bool) -> Problem:
    """Two models on a pool of 4 GPUs with a tp1 option each and a share option each (one shared GPU at most), and
    a tp2 option of the first model on a second pool."""
    a = _pool("t:a", 4, 1.0)
    b = _pool("t:b", 2, _r(rng, 0.5, 3.0))
    c1, c2 = _r(rng, 2, 8), _r(rng, 2, 8)
    lo = [int(rng.integers(0, 2)), int(rng.integers(0, 2))] if floors else [0, 0]
    hi = [int(rng.integers(max(1, lo[0]), 4)), None] if floors else [None, None]
    models = (ModelSpec("x", (_r(rng, 0, 6), _r(rng, 0, 6)), 1.0, 0.05, min_replicas=lo[0], max_replicas=hi[0]),
              ModelSpec("y", (_r(rng, 0, 6), _r(rng, 0, 6)), 1.0, 0.05, min_replicas=lo[1], max_replicas=hi[1]))
    opts = (ReplicaOption("x", a.id, 1, 1, c1, 40e9, start_cost_usd=_r(rng, 0, 0.5)),
            ReplicaOption("y", a.id, 1, 1, c2, 40e9, start_cost_usd=_r(rng, 0, 0.5)),
            ReplicaOption("x", b.id, 2, 1, round(2.5 * c1, 2), 40e9))
    shares = (ShareOption("x", a.id, round(c1 * _r(rng, 0.5, 1.0), 2), 30e9),
              ShareOption("y", a.id, round(c2 * _r(rng, 0.5, 1.0), 2), 30e9))
    return Problem(3600.0, N_WINDOWS, (a, b), models, opts, shares, margin=0.1, max_shared_gpus_per_pool=1,
                   name="audit shared" + (" floors" if floors else ""))


def _mixed_instance(rng: np.random.Generator) -> Problem:
    """Two models competing for a small pool t:a/G (2 GPUs), which is also the fallback of a spot pool: x may use a
    shared GPU there (or a dedicated replica), y has dedicated options only (spot, t:a/G, a dearer GPU type), so
    the fleet-scale bound splits them into two parts (:func:`fleetplan.solvers.decompose.bound_parts`)."""
    od = _pool("t:a", 2, 1.0, name="on-demand")
    spot = _pool("t:a", 2, _r(rng, 0.3, 1.2), name="spot", pricing_model="spot",
                 interruption_rate=_r(rng, 0.1, 0.5), fallback_pool=od.id)
    other = Pool("t:a", "H", nodes=1, gpus_per_node=2, usd_per_gpu_hour=_r(rng, 2.0, 5.0), memory_bytes_per_gpu=80e9)
    c1, c2 = _r(rng, 2, 6), _r(rng, 2, 6)
    models = (ModelSpec("x", (_r(rng, 0, 5), _r(rng, 0, 5)), 1.0, 0.05),
              ModelSpec("y", (_r(rng, 0, 8), _r(rng, 0, 8)), 1.0, 0.05))
    opts = (ReplicaOption("x", od.id, 1, 1, c1, 40e9, start_cost_usd=_r(rng, 0, 0.5)),
            ReplicaOption("y", spot.id, 1, 1, round(c2 * (1 - spot.interruption_rate), 2), 40e9),
            ReplicaOption("y", od.id, 1, 1, c2, 40e9, start_cost_usd=_r(rng, 0, 0.5)),
            ReplicaOption("y", other.id, 1, 1, round(c2 * 1.8, 2), 40e9, start_cost_usd=_r(rng, 0, 0.5)))
    shares = (ShareOption("x", od.id, round(c1 * _r(rng, 0.5, 1.0), 2), 30e9),)
    return Problem(3600.0, N_WINDOWS, (spot, od, other), models, opts, shares, margin=0.1,
                   max_shared_gpus_per_pool=1, name="audit mixed")


def _commitment_instance(rng: np.random.Generator) -> Problem:
    """One model; a committed pool (a committed rate below the on-demand rate) and an on-demand pool of the same
    GPU type and site; a tp1 option on each."""
    od_rate = _r(rng, 1.0, 3.0)
    com = _pool("t:a", 4, 0.0, name="committed", pricing_model="committed-1y",
                committed_usd_per_gpu_hour=round(od_rate * _r(rng, 0.4, 0.9), 2), on_demand_usd_per_gpu_hour=od_rate)
    od = _pool("t:a", 4, od_rate, name="on-demand")
    cap = _r(rng, 2, 6)
    models = (ModelSpec("x", (_r(rng, 0, 10), _r(rng, 0, 10)), 1.0, 0.05),)
    opts = tuple(ReplicaOption("x", p.id, 1, 1, cap, 40e9, start_cost_usd=_r(rng, 0, 0.3)) for p in (com, od))
    return Problem(3600.0, N_WINDOWS, (com, od), models, opts, margin=0.1, name="audit commitments")


def _spot_instance(rng: np.random.Generator) -> Problem:
    """One model; a spot pool (interruption rate 0.1-0.5) falling back to a small on-demand pool of the same GPU
    type, and a dearer second GPU type."""
    od = _pool("t:a", 2, _r(rng, 1.5, 3.0), name="on-demand")
    spot = _pool("t:a", 4, _r(rng, 0.3, 1.2), name="spot", pricing_model="spot",
                 interruption_rate=_r(rng, 0.1, 0.5), fallback_pool=od.id)
    other = Pool("t:a", "H", nodes=1, gpus_per_node=2, usd_per_gpu_hour=_r(rng, 2.0, 5.0), memory_bytes_per_gpu=80e9)
    cap = _r(rng, 2, 5)
    models = (ModelSpec("x", (_r(rng, 0, 12), _r(rng, 0, 12)), 1.0, 0.05),)
    opts = (ReplicaOption("x", spot.id, 1, 1, round(cap * (1 - spot.interruption_rate), 2), 40e9),
            ReplicaOption("x", od.id, 1, 1, cap, 40e9), ReplicaOption("x", other.id, 1, 1, round(cap * 1.8, 2), 40e9))
    return Problem(3600.0, N_WINDOWS, (spot, od, other), models, opts, margin=0.1, name="audit spot")


def _sites_instance(rng: np.random.Generator) -> Problem:
    """One model whose traffic starts at site t:a; capacity at t:a (dearer) and at t:b (cheaper GPUs, egress per
    GB for requests served there)."""
    a = _pool("t:a", 2, _r(rng, 1.5, 3.0))
    b = _pool("t:b", 4, _r(rng, 0.5, 1.5))
    cap = _r(rng, 2, 5)
    models = (ModelSpec("x", (_r(rng, 0, 8), _r(rng, 0, 8)), 1.0, 0.05, origin_site="t:a",
                        request_bytes=_r(rng, 1e4, 2e5)),)
    opts = (ReplicaOption("x", a.id, 1, 1, cap, 40e9), ReplicaOption("x", b.id, 1, 1, cap, 40e9))
    egress = {("t:a", "t:b"): _r(rng, 0.01, 0.12), ("t:b", "t:a"): 0.09}
    return Problem(3600.0, N_WINDOWS, (a, b), models, opts, egress_usd_per_gb=egress, margin=0.1, name="audit sites")


def _classes_instance(rng: np.random.Generator) -> Problem:
    """One model with classes 'short' and 'long' (shares s and 1 - s); option A serves both (long at a lower
    rate), option B (cheaper) serves short only, option C (another pool) serves long only."""
    a = _pool("t:a", 4, 1.0)
    b = _pool("t:b", 4, _r(rng, 0.5, 2.0))
    s = _r(rng, 0.2, 0.8)
    models = (ModelSpec("x", (_r(rng, 0, 8), _r(rng, 0, 8)), 1.0, 0.05,
                        class_shares=(("short", s), ("long", round(1 - s, 2)))),)
    cs, cl = _r(rng, 3, 8), _r(rng, 1, 3)
    opts = (ReplicaOption("x", a.id, 1, 1, cs, 40e9, class_capacity_req_per_s=(("short", cs), ("long", cl))),
            ReplicaOption("x", a.id, 2, 1, round(2 * cs, 2), 40e9,
                          class_capacity_req_per_s=(("short", round(2.2 * cs, 2)),)),
            ReplicaOption("x", b.id, 1, 1, round(cl * 1.5, 2), 40e9,
                          class_capacity_req_per_s=(("long", round(cl * 1.5, 2)),)))
    return Problem(3600.0, N_WINDOWS, (a, b), models, opts, margin=0.1, name="audit classes")


def _best_effort_instance(rng: np.random.Generator) -> Problem:
    """Two models of different priority on a pool of 2 GPUs whose demand exceeds it in at least one window."""
    a = _pool("t:a", 2, _r(rng, 0.5, 2.0))
    c1, c2 = _r(rng, 1, 4), _r(rng, 1, 4)
    models = (ModelSpec("x", (_r(rng, 0, 8), _r(rng, 2, 8)), 1.0, 0.05, priority=1),
              ModelSpec("y", (_r(rng, 0, 8), _r(rng, 2, 8)), 1.0, 0.05, priority=int(rng.integers(0, 2))))
    opts = (ReplicaOption("x", a.id, 1, 1, c1, 40e9), ReplicaOption("y", a.id, 1, 1, c2, 40e9))
    return Problem(3600.0, N_WINDOWS, (a,), models, opts, margin=0.1, name="audit best-effort")


def _disagg_instance(rng: np.random.Generator) -> Problem:
    """One model, no origin site; at t:a (dearer GPUs) a colocated tp1 option and a prefill tp1 option sending to
    t:b; at t:b (cheaper GPUs) a decode tp1 option. The route t:a -> t:b moves 0.5-3 MB of KV per request and
    2-8 kB of prompt, billed by one table of three monthly bands (100 GB free, then $0.09/GB, then $0.05/GB
    above 2,000 GB)."""
    a = _pool("t:a", 4, _r(rng, 2.0, 4.0))
    b = _pool("t:b", 4, _r(rng, 0.8, 2.0))
    table = EgressTable("t", "inter_region", "audit bands", (EgressTier(0.0, 100.0, 0.0),
                                                               EgressTier(100.0, 2000.0, 0.09),
                                                               EgressTier(2000.0, None, 0.05)))
    models = (ModelSpec("x", (_r(rng, 0, 6), _r(rng, 0, 6)), 1.0, 0.05),)
    c = _r(rng, 1.5, 4)
    opts = (ReplicaOption("x", a.id, 1, 1, c, 40e9, start_cost_usd=_r(rng, 0, 0.3)),)
    pd = (ReplicaOption("x", a.id, 1, 1, round(c * _r(rng, 1.5, 3.0), 2), 40e9, role="prefill", decode_site="t:b"),
          ReplicaOption("x", b.id, 1, 1, round(c * _r(rng, 0.8, 1.5), 2), 40e9, role="decode"))
    route = KvRoute("x", "t:a", "t:b", "inter_region", kv_bytes_per_request=_r(rng, 0.5e6, 3e6),
                    prompt_bytes_per_request=_r(rng, 2e3, 8e3), kv_table=table, prompt_table=table)
    return Problem(3600.0, N_WINDOWS, (a, b), models, opts, margin=0.1, pd_options=pd, kv_routes=(route,),
                   name="audit disagg")


def make_instance(family: str, rng: np.random.Generator) -> Problem:
    """A random instance of ``family`` (one of FAMILIES or EXTRA_FAMILIES)."""
    return {"shared": lambda: _shared_instance(rng, floors=False), "floors": lambda: _shared_instance(rng, floors=True),
            "commitments": lambda: _commitment_instance(rng), "spot": lambda: _spot_instance(rng),
            "sites": lambda: _sites_instance(rng), "classes": lambda: _classes_instance(rng),
            "best-effort": lambda: _best_effort_instance(rng), "disagg": lambda: _disagg_instance(rng),
            "mixed": lambda: _mixed_instance(rng)}[family]()


# --- the enumeration (the reference), from the problem's definition -------------------------------------------


def _count_ranges(problem: Problem) -> list[range]:
    """0..N_o per option (see the module docstring): the replicas the option needs for its model's highest demand
    at its usable capacity (any class's lowest rate for a class model, so every class routed to it fits), or the
    model's floor if larger, and no more than its pool holds."""
    out = []
    models = problem.model_by_name
    for o in (*problem.options, *problem.pd_options):
        m = models[o.model]
        caps = [c for _, c in o.class_capacity_req_per_s] or [o.capacity_req_per_s]
        need = math.ceil(max(m.demand_req_per_s) / ((1 - problem.margin) * min(caps)) - 1e-9)
        pool = problem.pool_by_id[o.pool]
        out.append(range(min(max(need, m.min_replicas), pool.gpus // (o.tp * o.pp)) + 1))
    return out


def _shared_choices(problem: Problem) -> list[tuple[str, tuple[str, ...]]]:
    """(pool, residents) for no shared GPU (pool '') and every non-empty subset of the models with a share option
    on a pool, one shared GPU (the audit's instances allow one)."""
    out: list[tuple[str, tuple[str, ...]]] = [("", ())]
    by_pool: dict[str, list[str]] = {}
    for s in problem.share_options:
        by_pool.setdefault(s.pool, []).append(s.model)
    for pid, ms in by_pool.items():
        out += [(pid, c) for k in range(1, len(ms) + 1) for c in itertools.combinations(ms, k)]
    return out


@dataclass
class Reference:
    """The enumeration's best plan: cost (inf when none is feasible), unserved req/s by priority (best effort)."""

    cost_usd: float
    unserved_by_priority: tuple[float, ...] = ()
    plans: int = 0


def enumerate_best(problem: Problem, best_effort: bool = False) -> Reference:
    """The cheapest plan ``validate`` accepts among those the module docstring lists (for ``best_effort``: the
    least unserved demand by priority, highest first, then the cheapest)."""
    opts = (*problem.options, *problem.pd_options)
    W = problem.n_windows
    mu = 1 - problem.margin
    priorities = sorted({m.priority for m in problem.models}, reverse=True)
    best_key: tuple[float, ...] = (math.inf,)
    best = Reference(math.inf)
    ranges = _count_ranges(problem)
    n = 0
    for counts in itertools.product(*[r for r in ranges for _ in range(W)]):
        by_option = {o: tuple(counts[i * W:(i + 1) * W]) for i, o in enumerate(opts)}
        replicas = {o.key: c for o, c in by_option.items() if o.role == "colocated" and any(c)}
        pd_replicas = {o.pd_key: c for o, c in by_option.items() if o.role != "colocated" and any(c)}
        ded = {m.name: [sum(c[w] * problem.option_by_key[k].capacity_req_per_s * mu for k, c in replicas.items()
                            if k[0] == m.name) for w in range(W)] for m in problem.models}
        flows = {r.key: tuple(max(0.0, problem.model_by_name[r.model].demand_req_per_s[w] - ded[r.model][w])
                              for w in range(W)) for r in problem.kv_routes}
        flows = {k: f for k, f in flows.items() if any(f)}
        for pid, residents in _shared_choices(problem):
            shared = ()
            if residents:
                served = {m: tuple(max(0.0, problem.model_by_name[m].demand_req_per_s[w] - ded[m][w])
                                   for w in range(W)) for m in residents}
                if best_effort:  # a shared GPU serves at most its usable share: the rest is unserved
                    caps = {s.model: s.capacity_req_per_s for s in problem.share_options if s.pool == pid}
                    load = [sum(served[m][w] / caps[m] for m in residents) for w in range(W)]
                    served = {m: tuple(v * min(1.0, mu / load[w]) if load[w] > 0 else 0.0 for w, v in
                                       enumerate(served[m])) for m in residents}
                shared = (SharedGPU(pid, residents, served),)
            unserved = {}
            if best_effort:
                for m in problem.models:
                    sh = [sum(g.served_req_per_s.get(m.name, (0.0,) * W)[w] for g in shared) for w in range(W)]
                    u = tuple(max(0.0, m.demand_req_per_s[w] - ded[m.name][w] - sh[w]) for w in range(W))
                    if any(u):
                        unserved[m.name] = u
            plan = Plan(replicas=replicas, shared=shared, unserved_req_per_s=unserved, pd_replicas=pd_replicas,
                        kv_flows_req_per_s=flows)
            n += 1
            if not validate(problem, plan, check_objective=False).ok:
                continue
            cost = plan_cost_usd(problem, plan)
            by_p = tuple(sum(sum(unserved.get(m.name, ())) for m in problem.models if m.priority == p)
                         for p in priorities) if best_effort else ()
            key = tuple(round(u, 6) for u in by_p) + (cost,)
            if key < best_key:
                best_key, best = key, Reference(cost, by_p)
    best.plans = n
    return best


# --- the audit ------------------------------------------------------------------------------------------------


def audit_one(problem: Problem, backend: str, best_effort: bool, ref: Reference,
              stage: str = "pipeline") -> tuple[Plan, list[str]]:
    """One solve of ``problem`` with ``backend`` (30 s, one thread, gap 1e-4) and its false claims against the
    enumeration ``ref`` (:func:`false_claims`). ``stage`` 'pipeline': :func:`fleetplan.solvers.solve.solve`, what
    `fleetplan plan` runs (greedy warm start, LP bound, window passes, then the exact model); 'exact': the backend's
    exact model alone, cold (no warm start, no other bound), so a false proof cannot hide behind a better warm
    start (best effort: :func:`fleetplan.solvers.milp.solve_best_effort`)."""
    if stage == "pipeline":
        plan = solve(problem, backend, time_limit_s=30, threads=1, gap=1e-4, best_effort=best_effort)
    elif best_effort:
        plan = solve_best_effort(problem, backend=backend, time_limit_s=30, threads=1, gap=1e-4)
    else:
        plan = REGISTRY[backend](problem, effort=Effort(), time_limit_s=30, threads=1, gap=1e-4)
    return plan, false_claims(problem, plan, ref, best_effort)


def fleet_bound_claims(problem: Problem, ref: Reference) -> list[str]:
    """The per-window bound of the fleet-scale path (:func:`fleetplan.solvers.decompose.window_bounds`: each
    window's root node, heuristics off, split into its parts and priced with its start prices, uncut) against the
    enumeration's optimum: a bound above it, or "infeasible" where the enumeration has a plan."""
    stop = SafetyStop(deadline=time.perf_counter() + 600, time_limit_s=600)
    each = window_bounds(problem, deadline=0.0, max_nodes=1, stop=stop, heuristics=False, split=True, starts=True)
    if each is None:
        return [f"per-window bound: infeasible, but the enumeration has a plan at ${ref.cost_usd:.2f}"] if (
            math.isfinite(ref.cost_usd)) else []
    b = sum(x for x in each if x is not None)
    if b > ref.cost_usd + TOL_USD:
        return [f"per-window bound ${b:.4f} (split, start prices) above a valid plan of ${ref.cost_usd:.4f}"]
    return []


def false_claims(problem: Problem, plan: Plan, ref: Reference, best_effort: bool = False) -> list[str]:
    """What ``plan`` claims that the enumeration ``ref`` shows false (empty when every claim holds): a plan that
    fails validate, OPTIMAL beyond the requested gap, a bound above the enumeration's optimum, INFEASIBLE with a
    plan at hand (or a plan where none exists), less demand served by a priority than the enumeration's best."""
    bad = []
    if plan.status is Status.INFEASIBLE:
        if math.isfinite(ref.cost_usd):
            bad.append(f"INFEASIBLE but the enumeration has a plan at ${ref.cost_usd:.2f}")
        return bad
    if not plan.has_solution:
        return [f"no plan ({plan.status.value}: {plan.message})"] if math.isfinite(ref.cost_usd) else []
    rep = validate(problem, plan)
    if not rep.ok:
        bad.append("plan fails validate: " + "; ".join(rep.violations[:2]))
    if not math.isfinite(ref.cost_usd):
        return bad + ["a plan returned where the enumeration finds none"]
    if best_effort:
        priorities = sorted({m.priority for m in problem.models}, reverse=True)
        got = tuple(sum(sum(plan.unserved_req_per_s.get(m.name, ())) for m in problem.models if m.priority == p)
                    for p in priorities)
        for p, g, r in zip(priorities, got, ref.unserved_by_priority, strict=True):
            if g > r + TOL_UNSERVED:
                bad.append(f"priority {p}: {g:.3f} req/s unserved (summed over windows) > the enumeration's {r:.3f}")
        if any(g < r - TOL_UNSERVED for g, r in zip(got, ref.unserved_by_priority, strict=True)):
            bad.append(f"serves more than the enumeration's best ({got} vs {ref.unserved_by_priority}): "
                       "the enumeration misses plans")
        if bad:
            return bad
    obj = plan.objective_usd or 0.0
    if obj < ref.cost_usd - TOL_USD:
        bad.append(f"plan ${obj:.4f} below the enumeration's optimum ${ref.cost_usd:.4f}: the enumeration misses "
                   "plans")
    if plan.status is Status.OPTIMAL and obj > ref.cost_usd * (1 + (plan.requested_gap or 0.0)) + TOL_USD:
        bad.append(f"false OPTIMAL: ${obj:.4f} against the enumeration's ${ref.cost_usd:.4f}")
    if plan.bound_usd is not None and plan.bound_usd > ref.cost_usd + TOL_USD:
        bad.append(f"bound ${plan.bound_usd:.4f} above a valid plan of ${ref.cost_usd:.4f}")
    return bad


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (CBC runs as a subprocess)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def main() -> None:
    """Run the audit and print its figures."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instances", type=int, default=210, help="instances, drawn in turn from the families")
    ap.add_argument("--backends", nargs="+", default=["highs", "cbc", "cpsat"], choices=["highs", "cbc", "cpsat"])
    ap.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES + EXTRA_FAMILIES)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stages", nargs="+", default=["pipeline", "exact"],
                    choices=["pipeline", "exact", "fleet-bound"],
                    help="what is solved: the plan pipeline and/or each backend's exact model alone (see audit_one), "
                         "and/or the fleet-scale path's per-window bound (fleet_bound_claims; not best effort)")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    cpu0 = _cpu_s()
    counts: Counter[str] = Counter()
    statuses: Counter[tuple[str, str]] = Counter()
    by_status: Counter[str] = Counter()
    failures: list[str] = []
    for i in range(args.instances):
        family = args.families[i % len(args.families)]
        problem = make_instance(family, rng)
        best_effort = family == "best-effort"
        ref = enumerate_best(problem, best_effort=best_effort)
        counts[family] += 1
        if "fleet-bound" in args.stages and not best_effort:
            bad = fleet_bound_claims(problem, ref)
            statuses[(family, "ok" if not bad else "FALSE")] += 1
            failures += [f"instance {i} ({family}, fleet-bound): {b}" for b in bad]
        for backend in args.backends:
            if backend == "cpsat" and (best_effort or problem.has_disaggregation):
                continue  # see the module docstring: HiGHS and CBC only
            for stage in (s for s in args.stages if s != "fleet-bound"):
                plan, bad = audit_one(problem, backend, best_effort, ref, stage)
                statuses[(family, "ok" if not bad else "FALSE")] += 1
                by_status[plan.status.value] += 1
                failures += [f"instance {i} ({family}, {backend}, {stage}): {b}" for b in bad]
        if (i + 1) % 20 == 0:
            print(f"  {i + 1}/{args.instances} instances, {len(failures)} false claims so far, "
                  f"{_cpu_s() - cpu0:.0f} CPU-s", flush=True)
    print(f"\n{args.instances} instances ({', '.join(f'{f} {n}' for f, n in counts.items())}), backends "
          f"{', '.join(args.backends)} (best effort, disagg: highs and cbc); CPU {_cpu_s() - cpu0:.1f} s (solver "
          "subprocesses included)")
    print(f"statuses returned: {', '.join(f'{k} {v}' for k, v in sorted(by_status.items()))}")
    for f in args.families:
        print(f"  {f:12} solves checked {statuses[(f, 'ok')] + statuses[(f, 'FALSE')]:4}, with a false claim "
              f"{statuses[(f, 'FALSE')]}")
    print(f"false claims: {len(failures)}")
    for line in failures[:40]:
        print("  " + line)


if __name__ == "__main__":
    main()
