"""dissolve_shared: shared GPUs of a plan removed only where that lowers the plan's cost (hand arithmetic below);
every plan is re-checked by the independent ``validate``."""

from __future__ import annotations

import pytest

from fleetplan.placement.plan import Plan, SharedGPU, evaluate
from fleetplan.placement.problem import ModelSpec, Pool, Problem, ReplicaOption, ShareOption
from fleetplan.placement.validate import validate
from fleetplan.solvers.decompose import dissolve_shared


def _problem(small_price: float) -> Problem:
    """Two windows of one hour, margin 0.1. Pool B (80 GB, $3.50/GPU-h) takes shared GPUs; pool S (24 GB,
    ``small_price``/GPU-h) dedicated tp-1 replicas only. Models a, b: demand (2, 1) and (1, 2) req/s; capacity
    10 req/s on a shared B GPU, 5 req/s on a dedicated S replica (4.5 usable: one replica covers either)."""
    big = Pool("s:r", "B", nodes=1, gpus_per_node=8, usd_per_gpu_hour=3.5, memory_bytes_per_gpu=80e9)
    small = Pool("s:r", "S", nodes=1, gpus_per_node=8, usd_per_gpu_hour=small_price, memory_bytes_per_gpu=24e9)
    models = (ModelSpec("a", (2.0, 1.0), 1.0, 0.05), ModelSpec("b", (1.0, 2.0), 1.0, 0.05))
    options = tuple(ReplicaOption(m, small.id, 1, 1, 5.0, 20e9) for m in ("a", "b"))
    shares = tuple(ShareOption(m, big.id, 10.0, 20e9) for m in ("a", "b"))
    return Problem(3600.0, 2, (big, small), models, options, shares, margin=0.1, name="dissolve")


def _shared_plan(problem: Problem) -> Plan:
    # one B GPU all day holding a and b: load (2 + 1) / 10 = 0.3 per window <= 0.9
    g = SharedGPU("s:r/B", ("a", "b"), {m.name: m.demand_req_per_s for m in problem.models})
    return Plan(replicas={}, shared=(g,))


def test_a_shared_gpu_that_costs_more_than_dedicated_replicas_is_removed():
    problem = _problem(small_price=0.9)
    plan = _shared_plan(problem)
    assert validate(problem, plan, check_objective=False).ok
    # shared: 1 GPU x 2 h x $3.50 = $7.00; dedicated: a and b one S replica each in both windows
    # (2 <= 4.5 req/s): 2 x 2 h x $0.90 = $3.60, no starts (a replica runs in both windows)
    assert evaluate(problem, plan).total_usd == pytest.approx(7.0)
    out = dissolve_shared(problem, plan)
    assert validate(problem, out, check_objective=False).ok
    assert out.shared == ()
    assert out.replicas == {("a", "s:r/S", 1, 1): (1, 1), ("b", "s:r/S", 1, 1): (1, 1)}
    assert evaluate(problem, out).total_usd == pytest.approx(3.6)
    assert out.objective_usd == pytest.approx(3.6)


def test_a_shared_gpu_that_pays_is_kept():
    problem = _problem(small_price=2.0)
    plan = _shared_plan(problem)
    # dedicated: 2 x 2 h x $2.00 = $8.00 > $7.00 shared: nothing to remove, the plan itself comes back
    assert dissolve_shared(problem, plan) is plan


def test_residents_move_to_another_shared_gpu_with_room():
    problem = _problem(small_price=2.0)
    # the same two models on two B GPUs (one each): $14.00. Removing one GPU re-homes its model on the other
    # (load 0.3 <= 0.9 in both windows, memory 40 GB <= 0.9 x 80 GB) at no cost instead of a dedicated S replica
    # (2 h x $2.00 = $4.00): one GPU left, $7.00
    gpus = tuple(SharedGPU("s:r/B", (m.name,), {m.name: m.demand_req_per_s}) for m in problem.models)
    plan = Plan(replicas={}, shared=gpus)
    assert evaluate(problem, plan).total_usd == pytest.approx(14.0)
    out = dissolve_shared(problem, plan)
    assert validate(problem, out, check_objective=False).ok
    assert len(out.shared) == 1 and set(out.shared[0].models) == {"a", "b"} and out.replicas == {}
    assert evaluate(problem, out).total_usd == pytest.approx(7.0)
