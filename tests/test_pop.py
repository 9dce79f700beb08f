"""POP decomposition into sub-fleets (fleetplan.solvers.pop) on tiny instances: the partition and the resource split,
the recombined plan re-checked by ``validate``, the whole problem's bound against known optima, honest statuses.
The equality of plans between this process, the process pool and Ray is in test_executor.py (it reuses the Ray
instance of that module)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fleetplan.errors import InputError, SolverError
from fleetplan.placement.generators import fleet_instance, planted_instance
from fleetplan.placement.plan import Status, evaluate
from fleetplan.placement.problem import ModelSpec, Pool, Problem, ReplicaOption
from fleetplan.placement.validate import validate
from fleetplan.solvers.baselines import greedy
from fleetplan.solvers.common import cheapest_cover, cover_cost_floor
from fleetplan.solvers.decompose import cover_window, solve_by_windows
from fleetplan.solvers.executor import Executor, LocalExecutor
from fleetplan.solvers.pop import (
    partition_models,
    separable_bound,
    separable_bound_by_window,
    solve_pop,
    split_problem,
)
from fleetplan.solvers.solve import Effort, solve


def _four_models() -> Problem:
    """Two windows, one pool of 4 nodes × 8 GPUs at $1/GPU-h; one option per model (tp 1, 10 req/s, margin 0).
    Models a, b peak in window 0 (demand 40 and 20 req/s, then 10 and 0); c, d peak in window 1 (0 and 30,
    then 10 and 10): GPU-equivalents (demand / 10) a (4, 1), b (2, 0), c (0, 3), d (1, 1)."""
    pool = Pool("s:r", "G", nodes=4, gpus_per_node=8, usd_per_gpu_hour=1.0, memory_bytes_per_gpu=80e9)
    demand = {"a": (40.0, 10.0), "b": (20.0, 0.0), "c": (0.0, 30.0), "d": (10.0, 10.0)}
    models = tuple(ModelSpec(n, d, 1.0, 0.05) for n, d in demand.items())
    options = tuple(ReplicaOption(n, pool.id, 1, 1, 10.0, 20e9) for n in demand)
    return Problem(3600.0, 2, (pool,), models, options, margin=0.0, max_shared_gpus_per_pool=0, name="four")


def test_shape_partition_deals_every_peak_window_to_every_part():
    parts = partition_models(_four_models(), 2, method="shape")
    # sorted by (peak window, heaviest first): a (w0, 4), b (w0, 2), d (w0, 1: ties go to the first window), c (w1)
    # dealt round-robin: part 1 = a, d; part 2 = b, c
    assert parts == [["a", "d"], ["b", "c"]]
    rnd = partition_models(_four_models(), 3, method="random", seed=7)
    assert sorted(len(p) for p in rnd) == [1, 1, 2] and sorted(sum(rnd, [])) == ["a", "b", "c", "d"]
    assert rnd == partition_models(_four_models(), 3, method="random", seed=7)  # seeded


def test_split_gives_each_part_nodes_in_proportion_to_its_peak():
    problem = _four_models()
    subs = split_problem(problem, [["a", "d"], ["b", "c"]])
    # peaks of the parts' summed GPU-equivalents: a + d = (5, 2) -> 5; b + c = (2, 3) -> 3; 4 nodes × 5/8 = 2.5
    # and × 3/8 = 1.5: largest remainder, ties to the first part: 3 and 1 nodes
    assert [s.pools[0].nodes for s in subs] == [3, 1]
    assert [sorted(m.name for m in s.models) for s in subs] == [["a", "d"], ["b", "c"]]
    assert [len(s.options) for s in subs] == [2, 2]


def test_bad_part_counts_are_refused():
    problem = _four_models()
    for k in (0, 5):
        with pytest.raises(InputError, match="--decompose"):
            partition_models(problem, k)
    with pytest.raises(InputError, match="unknown partition"):
        partition_models(problem, 2, method="zigzag")


@pytest.mark.parametrize("n_gpus,per_gpu,windows,seed", [(3, 2, 3, 1), (4, 3, 2, 2)])
@pytest.mark.parametrize("partition", ["shape", "random"])
def test_pop_plan_is_valid_and_its_bound_is_below_the_known_optimum(n_gpus, per_gpu, windows, seed, partition):
    # planted optimum (generator docstring): n_gpus × windows × 1 h × $2
    problem, optimum = planted_instance(n_gpus, models_per_gpu=per_gpu, n_windows=windows, seed=seed)
    assert optimum == n_gpus * windows * 2.0
    plan = solve(problem, time_limit_s=20, gap=1e-4, decompose=2, partition=partition, executor=Executor())
    assert plan.has_solution and validate(problem, plan).ok
    assert plan.bound_usd is not None and plan.bound_usd <= optimum + 1e-6 <= plan.objective_usd + 1e-6
    assert plan.gap == pytest.approx((plan.objective_usd - plan.bound_usd) / plan.objective_usd)
    # OPTIMAL only within the requested gap
    assert (plan.status is Status.OPTIMAL) == (plan.gap <= 1e-4 + 1e-9)
    assert "POP decomposition into 2 parts" in plan.message


def test_pop_bound_is_below_the_monolithic_proven_optimum():
    problem = _four_models()
    mono = solve(problem, time_limit_s=20, gap=1e-6)
    # hand check: every window needs ceil(demand / 10) GPUs per model: w0 4 + 2 + 0 + 1, w1 1 + 0 + 3 + 1 = 12
    # GPU-h at $1, and starts are free
    assert mono.status is Status.OPTIMAL and mono.objective_usd == pytest.approx(12.0)
    plan = solve_pop(problem, 2, Executor(), time_limit_s=20, gap=1e-6, max_nodes=Effort().window_nodes)
    assert validate(problem, plan).ok and plan.bound_usd <= mono.objective_usd + 1e-6
    # no sharing and an inventory that does not bind: the parts are independent and each is solved exactly
    assert plan.objective_usd == pytest.approx(12.0) and plan.status is Status.OPTIMAL


def test_pop_repairs_a_part_whose_models_fit_only_where_another_part_sits():
    # Pool X: 2 GPUs at $1/h; pool Y: 2 GPUs at $3/h; 10 req/s per GPU, margin 0, one window. Model a runs on X
    # only, b on X or Y, both at 20 req/s (2 GPUs): the only plan is a on both X GPUs and b on both Y GPUs,
    # $2 + $6 = $8. Both parts weigh 2 GPUs, so each gets one GPU of X and one of Y: a's part has no valid plan,
    # b's takes X first; the recombined plan is repaired on the whole fleet.
    x = Pool("s:r", "X", nodes=2, gpus_per_node=1, usd_per_gpu_hour=1.0, memory_bytes_per_gpu=80e9)
    y = Pool("s:r", "Y", nodes=2, gpus_per_node=1, usd_per_gpu_hour=3.0, memory_bytes_per_gpu=80e9)
    models = (ModelSpec("a", (20.0,), 1.0, 0.05), ModelSpec("b", (20.0,), 1.0, 0.05))
    options = (ReplicaOption("a", x.id, 1, 1, 10.0, 20e9), ReplicaOption("b", x.id, 1, 1, 10.0, 20e9),
               ReplicaOption("b", y.id, 1, 1, 10.0, 20e9))
    problem = Problem(3600.0, 1, (x, y), models, options, margin=0.0, max_shared_gpus_per_pool=0)
    subs = split_problem(problem, [["a"], ["b"]])
    assert [[p.nodes for p in s.pools] for s in subs] == [[1, 1], [1, 1]]
    plan = solve_pop(problem, 2, Executor(), time_limit_s=10, gap=1e-6, max_nodes=Effort().window_nodes)
    assert validate(problem, plan).ok and plan.objective_usd == pytest.approx(8.0)
    assert "1 part(s) still without a valid plan" in plan.message
    assert "repaired window by window on the whole fleet" in plan.message
    assert plan.bound_usd is not None and plan.bound_usd <= 8.0 + 1e-6


def test_pop_is_refused_with_request_classes_or_best_effort():
    problem, _ = planted_instance(2, models_per_gpu=2, n_windows=2, seed=0)
    with pytest.raises(SolverError, match="--decompose"):
        solve(problem, time_limit_s=5, decompose=2, best_effort=True)


def test_pop_on_the_process_pool_equals_this_process():
    problem, _ = planted_instance(3, models_per_gpu=2, n_windows=3, seed=1)
    here = solve(problem, time_limit_s=20, gap=1e-4, decompose=2, executor=Executor())
    with LocalExecutor(2) as ex:
        pool = solve(problem, time_limit_s=20, gap=1e-4, decompose=2, executor=ex)
    assert (pool.replicas, pool.shared, pool.objective_usd, pool.bound_usd) == (
        here.replicas, here.shared, here.objective_usd, here.bound_usd)


def test_fleet_instance_has_the_benchmark_size():
    p = fleet_instance(20, 24, n_gpus=20_000, seed=0)
    # 20,000 GPUs over 6 pools of 8-GPU nodes: 416 nodes each (20,000 // 48), 19,968 GPUs
    assert len(p.models) == 20 and p.n_windows == 24 and sum(x.gpus for x in p.pools) == 19_968


def test_per_model_bound_by_hand():
    # _four_models has no shared GPUs: per model and window the least whole-GPU covering, as in the monolithic
    # test above: 7 + 5 = 12 GPU-h at $1 (the inventory does not bind, so the bound is the optimum)
    assert separable_bound(_four_models()) == pytest.approx(12.0)
    # by window: w0 ceil(40/10) + ceil(20/10) + 0 + ceil(10/10) = 7 GPUs, w1 1 + 0 + 3 + 1 = 5, at $1 each
    assert separable_bound_by_window(_four_models()) == pytest.approx([7.0, 5.0])
    # planted: every model may share and its shared capacity equals its dedicated one, so the bound is
    # Σ demand / (0.9 × capacity) × $2 = n_gpus × 0.9 / 0.9 × $2 per window: the planted optimum itself
    problem, optimum = planted_instance(3, models_per_gpu=2, n_windows=3, seed=1)
    assert separable_bound(problem) == pytest.approx(optimum)


def test_cheapest_cover_by_hand():
    # options (USD per replica, usable req/s, most replicas): A 2/10, B 3/20, C 5/20 (C costs more than B for the
    # same capacity). Demand 25: A + B = $5 (30 req/s) beats B + B = $6, 3 A = $6, C + A = $7.
    a, b, c = (2.0, 10.0, 5), (3.0, 20.0, 5), (5.0, 20.0, 5)
    assert cheapest_cover([a, b, c], 25.0, 0) == (5.0, [1, 1, 0])
    # at least 3 replicas: 3 A = $6 (30 req/s) beats 2 A + B = $7
    assert cheapest_cover([a, b, c], 25.0, 3) == (6.0, [3, 0, 0])
    # at most 1 replica: none covers 25 req/s alone
    assert cheapest_cover([a, b, c], 25.0, 0, ceiling=1) is None
    # B limited to one replica, demand 45: 3 A + B = $9 (50) beats A + B + C = $10 and 5 A = $10; C may not be
    # dropped for B here (B has no room for a second replica), and the bound agrees with the covering found
    assert cheapest_cover([a, (3.0, 20.0, 1), c], 45.0, 0) == (9.0, [3, 1, 0])
    assert cover_cost_floor([a, (3.0, 20.0, 1), c], 45.0, 0) == pytest.approx(9.0)


def _two_pools_one_window() -> Problem:
    """One window; pool P: 2 GPUs at $1/h, pool Q: 8 GPUs at $2/h; tp 1 options of 10 req/s on both, margin 0;
    model a 15 req/s, b 5 req/s."""
    p = Pool("s:r", "P", nodes=1, gpus_per_node=2, usd_per_gpu_hour=1.0, memory_bytes_per_gpu=80e9)
    q = Pool("s:r", "Q", nodes=1, gpus_per_node=8, usd_per_gpu_hour=2.0, memory_bytes_per_gpu=80e9)
    models = (ModelSpec("a", (15.0,), 1.0, 0.05), ModelSpec("b", (5.0,), 1.0, 0.05))
    options = tuple(ReplicaOption(m, pool.id, 1, 1, 10.0, 20e9) for m in ("a", "b") for pool in (p, q))
    return Problem(3600.0, 1, (p, q), models, options, margin=0.0, max_shared_gpus_per_pool=0, name="two pools")


def test_cover_window_sheds_the_cheapest_move_off_a_full_pool():
    problem = _two_pools_one_window()
    plan = cover_window(problem)
    # alone, a takes 2 P GPUs ($2) and b 1 P GPU ($1): 3 > 2 GPUs of P. Moving b to Q costs +$1, moving a +$2:
    # b moves; a on 2 P GPUs + b on 1 Q GPU = $2 + $2 = $4, the optimum (a on P + Q and b on P is also $4)
    assert plan is not None and validate(problem, plan).ok
    assert evaluate(problem, plan).total_usd == pytest.approx(4.0)
    mono = solve(problem, time_limit_s=20, gap=1e-6)
    assert mono.status is Status.OPTIMAL and mono.objective_usd == pytest.approx(4.0)


def test_cover_window_gives_up_when_nothing_fits():
    problem = _two_pools_one_window()
    # 100 req/s for a needs 10 GPUs: P and Q hold 10, b needs one more
    tight = replace(problem, models=(replace(problem.models[0], demand_req_per_s=(100.0,)), problem.models[1]))
    assert cover_window(tight) is None


def test_by_windows_with_cover_is_valid_and_below_greedy_but_not_below_the_optimum():
    problem = fleet_instance(10, 2, n_gpus=200, seed=3)
    g = greedy(problem)
    assert validate(problem, g, check_objective=False).ok
    plan = solve_by_windows(problem, g, time_limit_s=10, cover=True, max_nodes=Effort().window_nodes)
    assert validate(problem, plan, check_objective=False).ok
    cost = evaluate(problem, plan).total_usd
    exact = solve(problem, time_limit_s=20, gap=1e-3, decompose=1)
    assert exact.bound_usd is not None and exact.bound_usd <= cost + 1e-6
    # greedy picks one option per model for all windows; covering each window mixes options (measured: $7,750.19
    # -> $7,326.27)
    assert cost < evaluate(problem, g).total_usd - 100
