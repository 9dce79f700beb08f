"""Tenant pool allocation: records, checker, baselines, MILP and CP-SAT modes, second-level split.

Interference coefficients used below come from the shipped table: interactive-interactive 0.075,
interactive-batch 0.15 (datasets/data/interference/coefficients.csv).
"""

from __future__ import annotations

import random

import pytest

from fleetplan.datasets.sharing import load_interference
from fleetplan.errors import InfeasibleError, InputError, UnknownNameError
from fleetplan.placement.status import Status
from fleetplan.placement.tenants import (
    OBJECTIVE_SENSE,
    Allocation,
    AllocationError,
    Node,
    Tenant,
    TenantProblem,
    validate_allocation,
)
from fleetplan.scenario.tenants import load_tenants
from fleetplan.solvers.tenants.allocate import dominates, normalisers, solve_allocation, weighted_score
from fleetplan.solvers.tenants.baselines import fair_share, packed_greedy, static_partition
from fleetplan.solvers.tenants.milp import TenantMilpModel
from fleetplan.solvers.tenants.slicing import node_needs, split_allocation, split_kind, split_mig, split_mps

TABLE = load_interference()
H100 = "H100-SXM-80GB"
BACKENDS = ["highs", "cpsat"]


def tenant(name, quota, demand, cls="interactive", burst=None, weight=1.0, sla=1.0, types=()):
    return Tenant(name, quota, burst if burst is not None else max(quota, 64), weight, tuple(demand), sla, cls,
                  tuple(types))


def pool(n_nodes, gpus=8, gpu=H100):
    return tuple(Node(f"n{i}", gpu, gpus) for i in range(n_nodes))


def solve(problem, **kw):
    res = solve_allocation(problem, **kw)
    validate_allocation(problem, res.allocation)  # independent re-check of every answer
    for alloc, _ in res.pareto:
        validate_allocation(problem, alloc)
    return res


# --------------------------------------------------------------------------------------------- records


def test_records_reject_bad_values():
    with pytest.raises(InputError, match="burst_gpus"):
        tenant("a", 8, [1], burst=4)
    with pytest.raises(InputError, match="demand_gpus"):
        tenant("a", 1, [-1])
    with pytest.raises(InputError, match="sla_target"):
        tenant("a", 1, [1], sla=1.5)
    with pytest.raises(UnknownNameError, match="did you mean"):
        TenantProblem(pool(1), (tenant("a", 1, [1], cls="interactiv"),), TABLE)


def test_interference_table_bad_row(tmp_path):
    p = tmp_path / "c.csv"
    p.write_text("class_a,class_b,coefficient\nx,y,0.1\nx,x,1.5\n")
    with pytest.raises(InputError, match="row 2"):
        load_interference(p)


def test_default_scenario_loads():
    problem, opts = load_tenants()
    assert len(problem.tenants) >= 4 and problem.n_windows == 24
    assert {n.gpu for n in problem.nodes} == {"H100-SXM-80GB", "A100-SXM4-80GB"}
    assert opts["order"][0] == "sla"


def test_checker_catches_overfull_and_margin():
    p = TenantProblem(pool(1), (tenant("a", 0, [8]), tenant("b", 0, [8])), TABLE)
    with pytest.raises(AllocationError, match="9 GPUs allocated"):
        validate_allocation(p, Allocation("x", {("a", 0, "n0"): 5, ("b", 0, "n0"): 4}))
    # Shared node: capacity 8 × (1 − 0.075) = 7.4, so 4 + 4 = 8 breaks the margin.
    with pytest.raises(AllocationError, match="interference-adjusted"):
        validate_allocation(p, Allocation("x", {("a", 0, "n0"): 4, ("b", 0, "n0"): 4}))
    ok = validate_allocation(p, Allocation("x", {("a", 0, "n0"): 4, ("b", 0, "n0"): 3}))
    # served 7 of 8 GPUs; isolation 0.075; one shared node-window.
    assert ok.utilization == pytest.approx(7 / 8)
    assert ok.isolation == pytest.approx(0.075) and ok.shared_node_windows == 1


# --------------------------------------------------------------------------------------------- baselines


def test_static_partition_whole_nodes():
    # a (weight 2) quota 5 -> ceil(5/8) = 1 node; b quota 9 needs 2 nodes but only 1 is left.
    p = TenantProblem(pool(2), (tenant("a", 5, [6], weight=2), tenant("b", 9, [12])), TABLE)
    a = static_partition(p)
    o = validate_allocation(p, a, check_guarantees=False)
    # a gets 6 on its node, b gets 8 (its one node); served 14 of 16; no sharing.
    assert a.gpus == {("a", 0, "n0"): 6, ("b", 0, "n1"): 8}
    assert o.utilization == pytest.approx(14 / 16) and o.shared_node_windows == 0
    # b's guarantee 9 is unmet by 1 GPU.
    assert o.unmet_guaranteed_gpu_windows == pytest.approx(1)


def test_fair_share_lends_by_weight_and_suffers_interference():
    # One node of 8. Guarantees 2 + 2; the 4 idle GPUs are lent 3:1 by weight -> a 5, b 3.
    p = TenantProblem(pool(1), (tenant("a", 2, [6], weight=3), tenant("b", 2, [6], weight=1)), TABLE)
    a = fair_share(p)
    assert a.gpus == {("a", 0, "n0"): 5, ("b", 0, "n0"): 3}
    o = validate_allocation(p, a, check_guarantees=False)
    # No headroom: the shared node delivers 7.4 of 8 -> a 5 × 0.925 = 4.625, b 3 × 0.925 = 2.775.
    assert o.served_gpu_windows == pytest.approx(7.4)
    assert o.attainment["a"] == pytest.approx(4.625 / 6)


def test_packed_greedy_respects_margin():
    # One node; a (weight 2) guaranteed 4 takes 4 first; b then shares: capacity floor(8 × 0.925) = 7 -> b gets 3.
    p = TenantProblem(pool(1), (tenant("a", 4, [4], weight=2), tenant("b", 1, [6])), TABLE)
    a = packed_greedy(p)
    assert a.gpus == {("a", 0, "n0"): 4, ("b", 0, "n0"): 3}
    validate_allocation(p, a)
    problem, _ = load_tenants()
    assert validate_allocation(problem, packed_greedy(problem)).unmet_guaranteed_gpu_windows == 0


# --------------------------------------------------------------------------------------------- optimizer


@pytest.mark.parametrize("backend", BACKENDS)
def test_isolation_prefers_separate_nodes(backend):
    # Two 8-GPU nodes, two tenants wanting 4 each: each alone on a node; utilization 8/16, isolation 0.
    p = TenantProblem(pool(2), (tenant("a", 4, [4]), tenant("b", 4, [4])), TABLE)
    r = solve(p, backend=backend)
    assert r.objectives.utilization == pytest.approx(0.5)
    assert r.objectives.shared_node_windows == 0
    assert r.allocation.status is Status.OPTIMAL


@pytest.mark.parametrize("backend", BACKENDS)
def test_margin_reserves_headroom(backend):
    # One node; interactive + batch share it: headroom 8 × 0.15 = 1.2 -> at most floor(6.8) = 6 GPUs.
    # Guarantees a 4, b 2 fill exactly 6: utilization 6/8, isolation 0.15.
    p = TenantProblem(pool(1), (tenant("a", 4, [4]), tenant("b", 2, [4], cls="batch")), TABLE)
    r = solve(p, backend=backend)
    assert r.objectives.utilization == pytest.approx(0.75)
    assert r.objectives.isolation == pytest.approx(0.15)
    # Without the margin all 8 GPUs are handed out (a 4, b 4), but the shared node then delivers 6.8.
    r2 = solve(p, backend=backend, margin=False)
    assert r2.objectives.allocated_gpu_windows == 8
    assert r2.objectives.served_gpu_windows == pytest.approx(6.8)


def _instance_e():
    # Two 8-GPU nodes; a wants 10 (quota 4), b wants 6 (quota 2), both interactive (coefficient 0.075).
    # No sharing: a 8 on one node, b 6 on the other -> served 14, utilization 14/16 = 0.875, isolation 0.
    # Sharing node 2 (capacity 8 × 0.925 = 7.4 -> 7): a 8 + (a 1, b 6) -> served 15, utilization 0.9375,
    # isolation 0.075.
    return TenantProblem(pool(2), (tenant("a", 4, [10]), tenant("b", 2, [6])), TABLE)


@pytest.mark.parametrize("backend", BACKENDS)
def test_lexicographic_keeps_the_order(backend):
    p = _instance_e()
    iso_first = solve(p, backend=backend, mode="lexicographic", order=["isolation", "utilization", "sla"],
                      tolerance=0.0)
    assert iso_first.objectives.isolation == pytest.approx(0.0)
    assert iso_first.objectives.utilization == pytest.approx(0.875)
    util_first = solve(p, backend=backend, mode="lexicographic", order=["utilization", "isolation", "sla"],
                       tolerance=0.0)
    assert util_first.objectives.utilization == pytest.approx(0.9375)
    assert util_first.objectives.isolation == pytest.approx(0.075)
    # Each stage's kept bound is honored by the final answer.
    for name, _best, kept in util_first.stages:
        v = util_first.objectives.value(name)
        assert (v >= kept - 1e-6) if name == "utilization" else (v <= kept + 1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_pareto_points_non_dominated(backend):
    p = _instance_e()
    r = solve(p, backend=backend, mode="pareto", points=3)
    objs = [o for _, o in r.pareto]
    pts = {(round(o.utilization, 6), round(o.isolation, 6)) for o in objs}
    assert (0.875, 0.0) in pts and (0.9375, 0.075) in pts
    for a in objs:
        assert not any(dominates(b, a) for b in objs)


def test_infeasible_guarantees_are_explained():
    # 8 GPUs; a (weight 2) guaranteed 6, b guaranteed 4 -> 10 > 8: b is short by 2.
    p = TenantProblem(pool(1), (tenant("a", 6, [6], weight=2), tenant("b", 4, [4])), TABLE)
    with pytest.raises(InfeasibleError, match=r"b \(quota 4.*short by 2 GPUs"):
        solve_allocation(p)


def test_gpu_type_restriction_infeasible_named():
    # c runs only on A100 (8 GPUs) and is guaranteed 10 -> short by 2; the H100 node cannot help.
    nodes = (Node("h", H100, 8), Node("a", "A100-SXM4-80GB", 8))
    p = TenantProblem(nodes, (tenant("c", 10, [10], types=["A100-SXM4-80GB"]),), TABLE)
    with pytest.raises(InfeasibleError, match="c .*short by 2"):
        solve_allocation(p)


def _random_problem(seed: int) -> TenantProblem:
    rng = random.Random(seed)
    nodes = pool(3, gpus=4)
    classes = ["interactive", "batch", "prefill"]
    tenants = []
    for i in range(3):
        dem = [float(rng.randint(0, 6)) for _ in range(2)]
        tenants.append(tenant(f"t{i}", rng.randint(0, 2), dem, cls=rng.choice(classes), burst=rng.randint(2, 6),
                              weight=rng.choice([1, 2, 3]), sla=rng.choice([0.5, 0.9, 1.0])))
    return TenantProblem(nodes, tuple(tenants), TABLE)


@pytest.mark.parametrize("seed", range(4))
def test_backends_agree_and_guarantees_hold(seed):
    # Σ quotas ≤ 6 of 12 GPUs: guarantees always fit, so they must be honored (the checker verifies it).
    p = _random_problem(seed)
    a = solve(p, backend="highs")
    b = solve(p, backend="cpsat")
    assert a.objectives.unmet_guaranteed_gpu_windows == pytest.approx(0)
    assert b.objectives.unmet_guaranteed_gpu_windows == pytest.approx(0)
    if a.allocation.status is Status.OPTIMAL and b.allocation.status is Status.OPTIMAL:
        w = {"utilization": 1.0, "isolation": 1.0, "sla": 1.0}
        assert weighted_score(p, a.objectives, w) == pytest.approx(weighted_score(p, b.objectives, w), abs=1e-4)


def test_optimizer_beats_baselines_on_default_scenario():
    problem, opts = load_tenants()
    r = solve(problem, backend="cpsat", weights=opts["weights"])
    st = validate_allocation(problem, static_partition(problem), check_guarantees=False)
    fs = validate_allocation(problem, fair_share(problem), check_guarantees=False)
    w = opts["weights"]
    assert weighted_score(problem, r.objectives, w) >= weighted_score(problem, st, w)
    assert weighted_score(problem, r.objectives, w) >= weighted_score(problem, fs, w)
    assert r.objectives.unmet_guaranteed_gpu_windows == pytest.approx(0)


# --------------------------------------------------------------------------------------------- second level


def test_mig_split_packs_4g_and_3g():
    # 4 + 3 compute slices fit one A100-80GB as 4g.40gb at slot 0 and 3g.40gb at slot 4.
    s = split_mig("A100-SXM4-80GB", 1, {"a": 4, "b": 3})
    assert s.unmet == {"a": 0, "b": 0}
    assert set(s.parts) == {(0, "4g.40gb", 0, "a"), (0, "3g.40gb", 4, "b")}
    # 4 + 4 slices exceed the 7 of one GPU: one slice is unmet.
    s2 = split_mig("A100-SXM4-80GB", 1, {"a": 4, "b": 4})
    assert sum(s2.unmet.values()) == 1


def test_mig_split_h200_and_unknown_gpu():
    s = split_mig("H200-SXM-141GB", 2, {"a": 7, "b": 7})
    assert s.shared_gpus == 0 and {p[1] for p in s.parts} == {"7g.141gb"}
    with pytest.raises(UnknownNameError):
        split_mig("L4", 1, {"a": 1})


def test_mps_split_headroom():
    # One GPU, a and b need half each; sharing keeps 10% free -> 90% granted, 10 percent unmet.
    s = split_mps(1, {"a": 0.5, "b": 0.5}, {("a", "b"): 0.1})
    assert sum(s.unmet.values()) == 10 and s.shared_gpus == 1
    # Two GPUs: each alone on a GPU, nothing unmet, nothing shared.
    s2 = split_mps(2, {"a": 0.5, "b": 0.5}, {("a", "b"): 0.1})
    assert sum(s2.unmet.values()) == 0 and s2.shared_gpus == 0


def test_split_allocation_needs_and_kinds():

    # a holds 2 GPUs on n0 and 1 on n1 for a demand of 2.5: needs 2 × 2.5/3 = 1.667 and 1 × 2.5/3 = 0.833 GPUs.
    # b holds 4 on n0 for a demand of 4: needs 4. Only n0 is shared.
    p = TenantProblem(pool(2), (tenant("a", 0, [2.5]), tenant("b", 0, [4])), TABLE)
    alloc = Allocation("x", {("a", 0, "n0"): 2, ("a", 0, "n1"): 1, ("b", 0, "n0"): 4})
    assert node_needs(p, alloc, 0, "n0") == pytest.approx({"a": 5 / 3, "b": 4.0})
    assert node_needs(p, alloc, 0, "n1") == pytest.approx({"a": 2.5 / 3})
    sp = split_allocation(p, alloc)
    # H100 has MIG profiles: a ceil(7 × 5/3) = ceil(11.67) = 12 slices, b 28 slices.
    assert list(sp) == [(0, "n0")] and sp[0, "n0"].kind == "mig" and sp[0, "n0"].needs == {"a": 12, "b": 28}
    assert split_allocation(p, alloc, kind="none") == {}
    assert split_kind("auto", "L4") == "mps" and split_kind("auto", H100) == "mig"
    with pytest.raises(InputError, match="no MIG profiles"):
        split_kind("mig", "L4")


def test_tenant_milp_bound_is_an_upper_bound_of_the_maximization():
    # PuLP passes a maximization to HiGHS as min −f, so HiGHS's dual bound is −(bound on max f). Read raw (no
    # clamp), a proven optimum's bound equals its objective within HiGHS's default relative gap (1e-4); with the
    # sign wrong it would be −objective.
    problem, _ = load_tenants()
    norm = normalisers(problem)
    m = TenantMilpModel(problem, [12])
    m.set_objective({k: 1.0 / norm[k] for k in OBJECTIVE_SENSE})
    o = m.solve(600, 1, budget=20_000)  # window 12 is proven optimal at 72 nodes (docs/tenants.md)
    assert o.status is Status.OPTIMAL and o.objective is not None and o.objective > 0.01 and o.bound is not None
    assert o.objective - 1e-9 <= o.bound <= o.objective * (1 + 1e-4) + 1e-9


def test_pareto_points_never_claim_a_bound_below_their_score():
    # The shipped scenario's windows 8-9 (HiGHS proves each weighted window within 232-901 nodes; a fifth of the
    # default effort, 100 nodes per solve, stops some of the 8 solves by their budget, with a bound).
    import dataclasses

    problem, _ = load_tenants()
    problem = dataclasses.replace(problem, tenants=tuple(
        dataclasses.replace(t, demand_gpus=t.demand_gpus[8:10], models=()) for t in problem.tenants))
    res = solve_allocation(problem, mode="pareto", points=3, effort=0.2)
    for alloc, _obj in res.pareto:
        validate_allocation(problem, alloc)
        assert alloc.gap is None or alloc.gap >= 0.0


def test_pareto_front_drops_points_the_weighted_answer_dominates(monkeypatch):
    # An epsilon-constraint point stopped by its limit can be worse than the weighted answer on every objective:
    # here _pareto is made to return such a point (the weighted answer with 0.1 less utilization, 0.1 more
    # isolation); the front must drop it and keep the weighted answer.
    import dataclasses

    import fleetplan.solvers.tenants.allocate as allocate_mod

    p = _instance_e()
    w = solve(p, backend="highs", mode="weighted")
    worse = dataclasses.replace(w.objectives, utilization=w.objectives.utilization - 0.1,
                                isolation=w.objectives.isolation + 0.1)
    assert dominates(w.objectives, worse)
    monkeypatch.setattr(allocate_mod, "_pareto", lambda run, points: [(w.allocation, worse)])
    r = solve(p, backend="highs", mode="pareto", points=3)
    objs = [o for _, o in r.pareto]
    assert worse not in objs and any(not dominates(o, w.objectives) and not dominates(w.objectives, o)
                                     for o in objs)
    for a in objs:
        assert not any(dominates(b, a) for b in objs)
