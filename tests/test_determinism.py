"""Reproducible solves: a deterministic effort budget gives the same plan twice (no wall-clock limit in play)."""

from __future__ import annotations

from fleetplan.placement.generators import random_instance
from fleetplan.placement.validate import validate
from fleetplan.solvers.cpsat import solve_cpsat
from fleetplan.solvers.milp import solve_milp


def _fingerprint(plan):
    """Replicas, shared GPUs (pool, residents) and the cost to the cent: what must not change between runs."""
    return (sorted(plan.replicas.items()), sorted((g.pool, g.models) for g in plan.shared),
            round(plan.objective_usd, 2), plan.status)


def test_cpsat_with_a_deterministic_budget_gives_the_same_plan_twice():
    # 4 models x 4 windows on 2 workers at gap 0: CP-SAT does not close it in 0.1 units of deterministic time,
    # so the budget (not the 600-s safety stop, far away) ends both searches; fixed seed and interleaved workers
    # make the two searches the same.
    problem = random_instance(4, 4, seed=3)
    runs = [solve_cpsat(problem, time_limit_s=600, threads=2, gap=0.0, deterministic_time=0.1) for _ in range(2)]
    for plan in runs:
        assert plan.has_solution and validate(problem, plan).ok, plan.message
        assert "deterministic budget of 0.1 units was used up" in plan.message and "safety stop" not in plan.message
    assert _fingerprint(runs[0]) == _fingerprint(runs[1])


def test_highs_with_a_node_budget_gives_the_same_plan_twice():
    # The same instance at gap 0 does not close in 5 branch-and-bound nodes: the node budget (not the 600-s
    # safety stop) ends both solves, with HiGHS's seed fixed; the plan is read back although PuLP does not map
    # HiGHS's node-limit status.
    problem = random_instance(4, 4, seed=3)
    runs = [solve_milp(problem, time_limit_s=600, threads=1, gap=0.0, max_nodes=5) for _ in range(2)]
    for plan in runs:
        assert plan.has_solution and validate(problem, plan).ok, plan.message
        assert "budget of 5 branch-and-bound nodes was used up" in plan.message
        assert plan.bound_usd is not None and plan.bound_usd <= plan.objective_usd
    assert _fingerprint(runs[0]) == _fingerprint(runs[1])
