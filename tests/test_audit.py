"""The claims audit (benchmarks/bench_audit.py): its enumeration agrees with the solvers on one instance of every
constraint family, and it flags a false OPTIMAL and a bound above a valid plan (so the benchmark's zero can fail)."""

from __future__ import annotations

import importlib.util
import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fleetplan.placement.plan import Plan, Status
from fleetplan.placement.problem import ModelSpec, Pool, Problem, ReplicaOption, ShareOption
from fleetplan.placement.validate import plan_cost_usd, validate

_spec = importlib.util.spec_from_file_location("bench_audit", Path(__file__).parents[1] / "benchmarks" /
                                               "bench_audit.py")
assert _spec is not None and _spec.loader is not None
audit = importlib.util.module_from_spec(_spec)
sys.modules["bench_audit"] = audit  # its dataclasses look their module up while the file runs
_spec.loader.exec_module(audit)


@pytest.mark.parametrize("family", audit.FAMILIES)
def test_one_instance_per_family_has_no_false_claim(family):
    problem = audit.make_instance(family, np.random.default_rng(7))
    best_effort = family == "best-effort"
    ref = audit.enumerate_best(problem, best_effort=best_effort)
    for stage in ("pipeline", "exact"):
        plan, bad = audit.audit_one(problem, "highs", best_effort, ref, stage)
        assert bad == [], stage
        assert validate(problem, plan).ok


def _remainder_case() -> Problem:
    """One pool of 4 GPUs at $1/GPU-h, two 1-h windows, margin 0.1. Model a: 2.0 then 0.2 req/s, dedicated tp1
    option 2.0 req/s (1.8 usable), share option 1.0 req/s (0.9 usable); model b: 0.5 req/s both windows, same
    options. Cheapest by hand: one shared GPU all day holding a and b ($2) plus one dedicated replica of a in
    window 0 ($1): in window 0 the shared GPU serves a's remainder 0.2 (share 0.2/1.0) and b's 0.5 (0.5/1.0),
    0.7 <= 0.9; in window 1 a's 0.2 and b's 0.5 again. Total $3."""
    pool = Pool("t:a", "G", nodes=1, gpus_per_node=4, usd_per_gpu_hour=1.0, memory_bytes_per_gpu=80e9)
    models = (ModelSpec("a", (2.0, 0.2), 1.0, 0.05), ModelSpec("b", (0.5, 0.5), 1.0, 0.05))
    opts = tuple(ReplicaOption(m, pool.id, 1, 1, 2.0, 40e9) for m in ("a", "b"))
    shares = tuple(ShareOption(m, pool.id, 1.0, 30e9) for m in ("a", "b"))
    return Problem(3600.0, 2, (pool,), models, opts, shares, margin=0.1, max_shared_gpus_per_pool=1)


def test_enumeration_finds_the_hand_optimum():
    ref = audit.enumerate_best(_remainder_case())
    assert ref.cost_usd == pytest.approx(3.0)


def test_a_false_optimal_and_a_high_bound_are_flagged():
    problem = _remainder_case()
    ref = audit.enumerate_best(problem)
    # A valid but dearer plan: two dedicated replicas of a in window 0, one in window 1, one of b all day:
    # 3 + 2 = 5 GPU-hours = $5 (no start costs); claimed OPTIMAL with a bound of $5.
    dear = Plan(replicas={("a", "t:a/G", 1, 1): (2, 1), ("b", "t:a/G", 1, 1): (1, 1)})
    assert validate(problem, dear, check_objective=False).ok and plan_cost_usd(problem, dear) == pytest.approx(5.0)
    claimed = replace(dear, status=Status.OPTIMAL, objective_usd=5.0, bound_usd=5.0, gap=0.0, requested_gap=1e-4)
    bad = audit.false_claims(problem, claimed, ref)
    assert any("false OPTIMAL" in b for b in bad) and any("bound $5.0000 above" in b for b in bad)
    # The same plan claimed only FEASIBLE with a bound at the true optimum is honest.
    honest = replace(claimed, status=Status.FEASIBLE, bound_usd=3.0, gap=0.4)
    assert audit.false_claims(problem, honest, ref) == []
    assert math.isfinite(ref.cost_usd)
