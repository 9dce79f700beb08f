"""Golden placement instances small enough to solve by hand (optimum in a comment), on every backend.

Every plan a solver returns is re-checked by the independent ``validate``.
"""

from __future__ import annotations

import pytest

from fleetplan.placement.plan import Status, evaluate
from fleetplan.placement.problem import ModelSpec, Pool, Problem, ReplicaOption, ShareOption
from fleetplan.placement.validate import validate
from fleetplan.solvers.baselines import autoscale_dedicated, dedicated_peak, ffd_peak, greedy
from fleetplan.solvers.solve import solve

BACKENDS = ["highs", "cbc", "cpsat"]
SITE_A, SITE_B = "cloud:a", "cloud:b"


def pool(site=SITE_A, gpu="G", nodes=1, gpn=8, price=2.0, mem=80e9):
    return Pool(site, gpu, nodes=nodes, gpus_per_node=gpn, usd_per_gpu_hour=price, memory_bytes_per_gpu=mem)


def solved(problem, backend):
    plan = solve(problem, backend, time_limit_s=20, threads=1)
    assert plan.status is Status.OPTIMAL, plan.message
    report = validate(problem, plan)
    assert report.ok, report.violations
    assert plan.bound_usd is not None and plan.bound_usd <= plan.objective_usd + 1e-6
    return plan


def complementary_pair():
    # Two models with opposite curves (5 then 1 req/s, and 1 then 5); capacity 10 req/s each on one GPU,
    # margin 0.1. Shared: per window 5/10 + 1/10 = 0.6 <= 0.9, so ONE GPU all day: 1 GPU × 2 h × $2 = $4.
    # Dedicated: each needs a replica in each window (floor 1): 2 GPUs × 2 h × $2 = $8.
    p = pool()
    models = (ModelSpec("m1", (5.0, 1.0), 1.0, 0.05, min_replicas=1), ModelSpec("m2", (1.0, 5.0), 1.0, 0.05,
                                                                                min_replicas=1))
    opts = (ReplicaOption("m1", p.id, 1, 1, 10.0, 40e9), ReplicaOption("m2", p.id, 1, 1, 10.0, 40e9))
    shares = (ShareOption("m1", p.id, 10.0, 30e9), ShareOption("m2", p.id, 10.0, 30e9))
    return Problem(3600.0, 2, (p,), models, opts, shares, margin=0.1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_complementary_models_share_one_gpu(backend):
    problem = complementary_pair()
    plan = solved(problem, backend)
    assert plan.objective_usd == pytest.approx(4.0)
    assert len(plan.shared) == 1 and set(plan.shared[0].models) == {"m1", "m2"}
    # Baselines: dedicated peak $8, FFD on peaks: 0.5 + 0.5 = 1.0 > 0.9 -> two GPUs, $8; autoscale $8.
    assert dedicated_peak(problem).objective_usd == pytest.approx(8.0)
    assert ffd_peak(problem).objective_usd == pytest.approx(8.0)
    assert autoscale_dedicated(problem).objective_usd == pytest.approx(8.0)
    assert greedy(problem).objective_usd == pytest.approx(4.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_autoscaling_with_start_costs(backend):
    # Demand 9, 18, 27 req/s; capacity 10 req/s, margin 0.1 -> 9 usable per replica: 1, 2, 3 replicas.
    # GPU cost 6 GPU-h × $3 = $18; starts (cyclic): w0 max(0,1-3)=0, w1 1, w2 1 -> 2 × $1 = $2; total $20.
    # Flat 3 replicas: 9 GPU-h × $3 = $27. Optimum $20.
    p = pool(price=3.0)
    m = ModelSpec("m", (9.0, 18.0, 27.0), 1.0, 0.05)
    o = ReplicaOption("m", p.id, 1, 1, 10.0, 40e9, start_cost_usd=1.0)
    problem = Problem(3600.0, 3, (p,), (m,), (o,), margin=0.1)
    plan = solved(problem, backend)
    assert plan.objective_usd == pytest.approx(20.0)
    assert plan.replicas[o.key] == (1, 2, 3)
    ev = evaluate(problem, plan)
    assert ev.gpu_usd == pytest.approx(18.0) and ev.start_usd == pytest.approx(2.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_parallel_choice(backend):
    # tp1: 5 req/s per GPU; tp2: 12 req/s per 2 GPUs. Demand 10.8 req/s, margin 0.1:
    # tp1 needs ceil(10.8 / 4.5) = 3 GPUs ($3); tp2 needs ceil(10.8 / 10.8) = 1 replica = 2 GPUs ($2).
    p = pool(price=1.0)
    m = ModelSpec("m", (10.8,), 1.0, 0.05)
    o1 = ReplicaOption("m", p.id, 1, 1, 5.0, 40e9)
    o2 = ReplicaOption("m", p.id, 2, 1, 12.0, 40e9)
    problem = Problem(3600.0, 1, (p,), (m,), (o1, o2), margin=0.1)
    plan = solved(problem, backend)
    assert plan.objective_usd == pytest.approx(2.0)
    assert plan.replicas == {o2.key: (1,)}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("request_bytes, expected_site, expected_usd", [
    # Served at B: $1 GPU + 1 req/s × 3600 s × 1e6 B / 1e9 × $0.02/GB = $0.072 egress -> $1.072 < $4 at A.
    (1e6, SITE_B, 1.072),
    # 100 MB per request: egress 3600 × 0.1 GB × $0.02 = $7.2 -> serving at A ($4) is cheaper.
    (1e8, SITE_A, 4.0),
])
def test_egress_decides_the_site(backend, request_bytes, expected_site, expected_usd):
    pa, pb = pool(SITE_A, price=4.0), pool(SITE_B, price=1.0)
    m = ModelSpec("m", (1.0,), 1.0, 0.05, origin_site=SITE_A, request_bytes=request_bytes)
    opts = (ReplicaOption("m", pa.id, 1, 1, 10.0, 40e9), ReplicaOption("m", pb.id, 1, 1, 10.0, 40e9))
    problem = Problem(3600.0, 1, (pa, pb), (m,), opts, margin=0.1,
                      egress_usd_per_gb={(SITE_A, SITE_B): 0.02, (SITE_B, SITE_A): 0.02})
    plan = solved(problem, backend)
    assert plan.objective_usd == pytest.approx(expected_usd, rel=1e-3)
    ((key, counts),) = plan.replicas.items()
    assert key[1].startswith(expected_site) and counts == (1,)


@pytest.mark.parametrize("backend", BACKENDS)
def test_memory_forbids_sharing(backend):
    # Footprints 40 GB + 40 GB = 80 GB > 0.9 × 80 GB = 72 GB: no sharing; each model takes its own GPU:
    # 2 GPUs × 2 h × $2 = $8.
    p = pool()
    models = (ModelSpec("m1", (5.0, 1.0), 1.0, 0.05, min_replicas=1), ModelSpec("m2", (1.0, 5.0), 1.0, 0.05,
                                                                                min_replicas=1))
    opts = (ReplicaOption("m1", p.id, 1, 1, 10.0, 40e9), ReplicaOption("m2", p.id, 1, 1, 10.0, 40e9))
    shares = (ShareOption("m1", p.id, 10.0, 40e9), ShareOption("m2", p.id, 10.0, 40e9))
    problem = Problem(3600.0, 2, (p,), models, opts, shares, margin=0.1)
    plan = solved(problem, backend)
    assert plan.objective_usd == pytest.approx(8.0)
    assert all(len(g.models) == 1 for g in plan.shared)


@pytest.mark.parametrize("backend", BACKENDS)
def test_pipeline_parallel_across_nodes(backend):
    # A model that needs 16 GPUs (tp 8 × pp 2) on two 8-GPU nodes: one replica, 16 GPU-h × $1 = $16.
    p = pool(nodes=2, price=1.0)
    m = ModelSpec("big", (1.0,), 2.0, 0.1)
    o = ReplicaOption("big", p.id, 8, 2, 2.0, 70e9)
    problem = Problem(3600.0, 1, (p,), (m,), (o,), margin=0.1)
    plan = solved(problem, backend)
    assert plan.objective_usd == pytest.approx(16.0)


def test_validate_catches_broken_plans():
    problem = complementary_pair()
    plan = solve(problem, "highs", time_limit_s=10)
    # Drop the shared GPU: demand is uncovered and floors are missed.
    from dataclasses import replace

    broken = replace(plan, shared=())
    report = validate(problem, broken, check_objective=False)
    assert not report.ok and any("demand" in v for v in report.violations)
    # Claim a wrong objective.
    wrong = replace(plan, objective_usd=1.0)
    assert any("objective" in v for v in validate(problem, wrong).violations)
    # Too many GPUs: 9 replicas of m1 on an 8-GPU pool.
    key = problem.options[0].key
    over = replace(plan, replicas={key: (9, 9)}, objective_usd=None)
    assert any("do not fit" in v for v in validate(problem, over).violations)


def test_validate_checks_the_shared_gpus_per_pool_limit():
    # (17): the same plan with a shared GPU passes at max_shared_gpus_per_pool 1 (one shared GPU in the pool)
    # and fails at 0 (no shared GPU allowed), naming the pool, the count and the limit.
    from dataclasses import replace

    problem = complementary_pair()
    plan = solve(problem, "highs", time_limit_s=10, threads=1)
    assert len(plan.shared) == 1 and problem.max_shared_gpus_per_pool >= 1
    assert validate(problem, plan, check_objective=False).ok
    none_allowed = replace(problem, max_shared_gpus_per_pool=0)
    violations = validate(none_allowed, plan, check_objective=False).violations
    pid = plan.shared[0].pool
    assert violations == (f"pool {pid}: 1 shared GPUs > max_shared_gpus_per_pool 0",)
    # and the solvers honour the limit: at 0 the plan has no shared GPU
    plan0 = solve(none_allowed, "highs", time_limit_s=10, threads=1)
    assert plan0.has_solution and not plan0.shared and validate(none_allowed, plan0).ok
