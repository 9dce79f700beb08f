"""The spread (issue 25, item 2): at most a share of a model's capacity at one site or in one pool, per window
(constraint (18)), by hand: the exact solvers pay for it, validate checks it, bad values are clear errors, and an
online round keeps it (and relaxes it while a site is down). Every plan is re-checked by validate."""

from __future__ import annotations

import copy
import time

import pytest

from fleetplan.errors import FleetplanError, InputError
from fleetplan.placement.plan import Plan, SharedGPU
from fleetplan.placement.problem import ModelSpec, Pool, Problem, ReplicaOption, ShareOption
from fleetplan.placement.validate import validate
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.read import load_scenario, scenario_from_raw
from fleetplan.solvers.baselines import greedy
from fleetplan.solvers.common import SafetyStop
from fleetplan.solvers.decompose import window_bound
from fleetplan.solvers.milp import solve_lp_bound
from fleetplan.solvers.online.config import OnlineConfig
from fleetplan.solvers.online.replanner import Replanner
from fleetplan.solvers.solve import Effort, _repair, solve

H = 3600.0
A = ("m", "c:a/X", 1, 1)
B = ("m", "c:b/X", 1, 1)
# Forecast = the newest observation exactly, no scale-down cooldown (as tests/test_online_fleet.py).
EXACT = OnlineConfig(ewma_alpha=1.0, day_curve_weight=0.0, floor_on_latest=False, target_utilization=0.8,
                     migration_budget=8, cooldown_s=0.0, migration_cost_replica_hours=0.0,
                     resolve_horizon_s=3600.0)


def _pool(site: str, usd: float, gpu: str = "X") -> Pool:
    return Pool(site, gpu, nodes=1, gpus_per_node=8, usd_per_gpu_hour=usd, memory_bytes_per_gpu=80e9)


def two_sites(share: float | None, windows: int = 1, **kw) -> Problem:
    """Model m, 5 req/s; one tp-1 replica sustains 1 req/s (margin 0) at site c:a for $1/GPU-h or at c:b for $2."""
    pools = (_pool("c:a", 1.0), _pool("c:b", 2.0))
    opts = tuple(ReplicaOption("m", p.id, 1, 1, 1.0, 40e9) for p in pools)
    return Problem(H, windows, pools, (ModelSpec("m", (5.0,) * windows, 1.0, 0.1, max_share_per_site=share, **kw),),
                   opts, margin=0.0)


@pytest.mark.parametrize("backend", ["highs", "cbc", "cpsat"])
def test_the_spread_forces_a_share_onto_the_dearer_site(backend):
    # Without a spread: 5 replicas at c:a, $5 per window. With at most 0.7 at one site: a replicas at c:a and b at
    # c:b with a + b >= 5, a <= 0.7(a + b) (b >= 3a/7) and b <= 0.7(a + b); (4, 1): 1 < 12/7; (3, 2): 2 >= 9/7
    # holds, $3 + $4 = $7; (2, 3) and the rest cost more: the optimum is $7.
    free = solve(two_sites(None), backend, time_limit_s=20, threads=1)
    assert free.replicas == {A: (5,)} and free.objective_usd == pytest.approx(5.0)
    p = two_sites(0.7)
    plan = solve(p, backend, time_limit_s=20, threads=1)
    assert validate(p, plan).ok, validate(p, plan).violations
    assert plan.replicas == {A: (3,), B: (2,)}
    assert plan.objective_usd == pytest.approx(7.0)
    assert not validate(p, free).ok  # the unconstrained optimum breaks it


@pytest.mark.parametrize("backend", ["highs", "cpsat"])
def test_the_spread_per_pool_splits_one_site_between_its_pools(backend):
    # Two pools at one site, $1 and $1.5 per GPU-h, 4 req/s: at most half in one pool means a = c replicas, a + c
    # >= 4: 2 + 2 at $2 + $3 = $5 (without the bound: 4 in the cheaper pool, $4).
    pools = (_pool("c:a", 1.0), _pool("c:a", 1.5, gpu="Y"))
    opts = tuple(ReplicaOption("m", p.id, 1, 1, 1.0, 40e9) for p in pools)
    p = Problem(H, 1, pools, (ModelSpec("m", (4.0,), 1.0, 0.1, max_share_per_pool=0.5),), opts, margin=0.0)
    plan = solve(p, backend, time_limit_s=20, threads=1)
    assert validate(p, plan).ok and plan.objective_usd == pytest.approx(5.0)
    assert plan.replicas == {A: (2,), ("m", "c:a/Y", 1, 1): (2,)}


def test_validate_names_the_site_and_the_share_of_a_plan_that_breaks_it():
    # 4 replicas at c:a and 1 at c:b: 4 of 5 req/s (80%) at c:a > 0.7 (window 1; window 0 holds with 3 + 2).
    p = two_sites(0.7, windows=2)
    v = validate(p, Plan(replicas={A: (3, 4), B: (2, 1)})).violations
    assert v == ("m window 1: 4.000 of its 5.000 req/s of capacity (80.0%) is in site c:a, above its spread "
                 "max_share_per_site 0.7",)


@pytest.mark.parametrize("share", [0.0, -0.1, 1.5])
def test_a_share_outside_zero_to_one_is_refused(share):
    with pytest.raises(InputError, match="must be a share in \\(0, 1\\]"):
        two_sites(share)


def test_a_model_whose_sites_cannot_meet_its_spread_is_refused_naming_the_model_site_and_fix():
    # Capacity at c:a only: at most 0.7 of it there is impossible (one site holds 100%).
    pools = (_pool("c:a", 1.0), _pool("c:b", 2.0))
    with pytest.raises(InputError) as e:
        Problem(H, 1, pools, (ModelSpec("m", (5.0,), 1.0, 0.1, max_share_per_site=0.7),),
                (ReplicaOption("m", "c:a/X", 1, 1, 1.0, 40e9),), margin=0.0)
    assert "model m" in str(e.value) and "c:a" in str(e.value) and "at least 1" in str(e.value)
    # two sites cannot hold at most 0.4 each (2 x 0.4 = 80%): raise it to >= 0.5
    with pytest.raises(InputError, match="at least 0.5"):
        two_sites(0.4)


def _small_raw(spread: dict | None = None, model_spread: dict | None = None) -> tuple[dict, str | None]:
    base = load_scenario(None)
    raw = copy.deepcopy(base.raw)
    raw["models"] = [m for m in raw["models"] if m["name"] == "Llama-3.1-8B"]
    if spread is not None:
        raw["options"]["spread"] = spread
    if model_spread is not None:
        raw["models"][0]["spread"] = model_spread
    return raw, base.base_dir


@pytest.mark.parametrize(("spread", "needles"), [
    ({"max_share_per_site": 0}, ["max_share_per_site", "0.6"]),
    ({"max_share_per_site": 1.2}, ["max_share_per_site", "1.2"]),
    ({"max_share_per_sit": 0.6}, ["max_share_per_sit", "max_share_per_site"]),
])
def test_a_bad_spread_in_a_scenario_is_a_clear_error(spread, needles):
    raw, base = _small_raw(spread)
    with pytest.raises(FleetplanError) as e:
        scenario_from_raw(raw, source="test", base=base)
    for n in needles:
        assert n in str(e.value), str(e.value)


def test_the_scenario_spread_reaches_the_model_and_its_own_keys_override_it():
    raw, base = _small_raw({"max_share_per_site": 0.6}, {"max_share_per_pool": 0.5})
    p = build_problem(scenario_from_raw(raw, source="test", base=base))
    # the model's keys over the options': the site bound from the options, the pool bound its own
    assert p.models[0].spread_bounds == {"site": 0.6, "pool": 0.5}
    raw, base = _small_raw({"max_share_per_site": 0.6}, {"max_share_per_site": 1})  # 1: no bound for it
    assert build_problem(scenario_from_raw(raw, source="test", base=base)).models[0].spread_bounds == {}
    raw, base = _small_raw({"max_share_per_site": 0.6})
    assert build_problem(scenario_from_raw(raw, source="test", base=base)).models[0].spread_bounds == {"site": 0.6}
    raw, base = _small_raw()
    assert build_problem(scenario_from_raw(raw, source="test", base=base)).models[0].spread_bounds == {}


def test_an_online_round_keeps_the_spread_growing_shrinking_and_over_an_outage():
    p = two_sites(0.7, windows=24)
    off = solve(p, "highs", time_limit_s=20)
    assert off.replicas == {A: (3,) * 24, B: (2,) * 24}
    r = Replanner(p, EXACT)
    assert r.start_from(off, 0.0).report.ok
    # Forecast 9: 4 more replicas, one at a time, the cheapest that keeps <= 0.7 at one site: c:a (4,2) 4/6;
    # c:a (5,2) would be 5/7 = 0.714, so c:b (4,3); c:a (5,3) 5/8; c:a (6,3) 6/9 = 0.667. Without the spread the
    # round would take 4 at c:a (7, 2): 7/9 = 0.78 at c:a.
    r.forecaster.observe("m", 9.0, 10.0)
    up = r.round(20.0)
    assert up.plan.replicas == {A: (6,), B: (3,)} and up.report.ok, up.report.violations
    # Forecast 2: removals while the rest carries 2 / 0.8 = 2.5 req/s, the dearer (c:b) first unless its going
    # breaks the spread: (6,2) 0.75 no -> (5,3); (5,2) 0.714 no -> (4,3); (4,2); (4,1) 0.8 no -> (3,2);
    # (3,1) 0.75 no -> (2,2); (2,1) 0.667 (3 req/s); then (2,0) breaks it and (1,1) carries 2 < 2.5: (2, 1).
    r.forecaster.observe("m", 2.0, 30.0)
    down = r.round(40.0)
    assert down.plan.replicas == {A: (2,), B: (1,)} and down.report.ok, down.report.violations
    # c:b down: its replica is lost; one site left, the spread no longer binds (the fleet problem says so)
    out = r.set_unavailable(r.site_nodes("c:b"), 50.0)
    assert out.plan.replicas == {A: (2,)} and out.report.ok and out.problem.models[0].spread_bounds == {}
    # c:b back: the bound is back and the round puts a replica there again (2/3 = 0.667 at c:a)
    back = r.set_unavailable({pid: () for pid in r.site_nodes("c:b")}, 60.0)
    assert back.plan.replicas == {A: (2,), B: (1,)} and back.report.ok


def test_a_resolve_on_the_fleet_keeps_the_spread():
    # The re-planner's candidate problem carries the bound: at 9 req/s its optimum is the cheapest split with
    # <= 0.7 at one site: (6, 3) at $12 ((7, 2) would be $11 but 7/9 = 0.78).
    r = Replanner(two_sites(0.7, windows=24), EXACT)
    cp = r.candidate_problem({"m": 9.0})
    cand = solve(cp, "highs", time_limit_s=20, lp_bound=False)
    assert validate(cp, cand).ok and cand.replicas == {A: (6,), B: (3,)}


def test_the_greedy_warm_start_spreads_out_or_says_it_does_not_fit():
    # The packing puts all 5 replicas at c:a (cheapest); then one replica at a time, the cheapest that lowers the
    # largest share: a 6th at c:a keeps 100%, so c:b: 5/6 = 0.83, 5/7 = 0.71, 5/8 = 0.625 <= 0.7: (5, 3), $5 + $6.
    p = two_sites(0.7)
    g = greedy(p)
    assert not g.message and validate(p, g).ok
    assert g.replicas == {A: (5,), B: (3,)} and g.objective_usd == pytest.approx(11.0)
    # c:b has room for one replica only: 5/6 = 0.83 > 0.7 is as far as it goes, and the plan says it does not fit
    tight = Problem(H, 1, (_pool("c:a", 1.0), Pool("c:b", "X", nodes=1, gpus_per_node=1, usd_per_gpu_hour=2.0,
                                                   memory_bytes_per_gpu=80e9)),
                    p.models, p.options, margin=0.0)
    g = greedy(tight)
    assert "above its spread max_share_per_site 0.7" in g.message
    # the exact model finds none either: c:b holds at most 1 req/s, so c:a at most 0.7/0.3 × 1 = 2.33 req/s and
    # 3.33 < 5 req/s (short by 1.67 even fractionally): infeasible, and the explanation names the spread
    r = solve(tight, "highs", time_limit_s=20)
    assert r.status.value == "infeasible"
    assert "model m in window 0: 1.67 req/s cannot be served" in r.message
    assert "without the spread (m: max_share_per_site 0.7) every model is served" in r.message


def test_the_lp_relaxation_and_the_window_bound_carry_the_spread():
    # LP: min a + 2b, a + b >= 5, a <= 0.7(a + b): at a = 3.5, b = 1.5, $3.50 + $3.00 = $6.50 (without the spread,
    # $5); the per-window bound solves the window's MILP: $7, the optimum (two windows of the same: 2 x).
    p = two_sites(0.7)
    assert solve_lp_bound(p, time_limit_s=20) == pytest.approx(6.5)
    assert solve_lp_bound(two_sites(None), time_limit_s=20) == pytest.approx(5.0)
    assert window_bound(two_sites(0.7, windows=2), deadline=time.perf_counter() + 20,
                        max_nodes=Effort().bound_window_nodes) == pytest.approx(14.0)


@pytest.mark.parametrize("backend", ["highs", "cpsat"])
def test_a_shared_gpu_counts_at_the_models_capacity_there_alone(backend):
    # m: 1 req/s; a dedicated replica at c:a sustains 1 req/s for $1/h; at c:b only a shared GPU ($3/h, all day)
    # on which m alone sustains 2 req/s (margin 0). Without a spread: one replica at c:a, $1. With at most 0.6 at
    # one site: the shared GPU counts 2 req/s at c:b, so 2 <= 0.6 (n + 2) needs n >= 1.33 -> 2 replicas at c:a
    # (2 <= 0.6 x 4 = 2.4 holds), $2 + $3 = $5; without the shared GPU c:a would hold 100%, with it alone c:b would.
    pools = (_pool("c:a", 1.0), _pool("c:b", 3.0))
    share = (ShareOption("m", "c:b/X", 2.0, 20e9),)
    ded = (ReplicaOption("m", "c:a/X", 1, 1, 1.0, 40e9),)
    free = Problem(H, 1, pools, (ModelSpec("m", (1.0,), 1.0, 0.1),), ded, share_options=share, margin=0.0)
    assert solve(free, backend, time_limit_s=20, threads=1).objective_usd == pytest.approx(1.0)
    p = Problem(H, 1, pools, (ModelSpec("m", (1.0,), 1.0, 0.1, max_share_per_site=0.6),), ded, share_options=share,
                margin=0.0)
    plan = solve(p, backend, time_limit_s=20, threads=1)
    assert validate(p, plan).ok, validate(p, plan).violations
    assert plan.objective_usd == pytest.approx(5.0)
    assert plan.replicas == {("m", "c:a/X", 1, 1): (2,)} and [g.pool for g in plan.shared] == ["c:b/X"]


def test_a_greedy_plan_whose_shared_gpu_breaks_the_spread_is_repaired_without_it():
    # m: 2 req/s; dedicated tp-1 replicas sustain 1 req/s at c:a ($1/GPU-h) or c:b ($2); a shared GPU at c:a holds
    # m at 2 req/s. A warm start with that shared GPU alone has 100% of m's capacity at c:a, above 0.6. The window
    # repair keeps a base's shared GPUs fixed and plans the dedicated replicas for the rest (here 0 req/s), so its
    # spread never sees the shared GPU's 2 req/s: whatever the window model does, c:a keeps 100% (the default
    # scenario at 0.6: every window solved, 72 violations combined, "repair gave no valid plan"). Without the
    # shared GPU the window plans all 2 req/s under the spread: a + b >= 2, a <= 0.6 (a + b), b <= 0.6 (a + b):
    # (1, 1), 1 <= 1.2, $1 + $2 = $3 an hour; (2, 0) and (0, 2) hold 100% at one site.
    pools = (_pool("c:a", 1.0), _pool("c:b", 2.0))
    opts = tuple(ReplicaOption("m", p.id, 1, 1, 1.0, 40e9) for p in pools)
    p = Problem(H, 1, pools, (ModelSpec("m", (2.0,), 1.0, 0.1, max_share_per_site=0.6),), opts,
                share_options=(ShareOption("m", "c:a/X", 2.0, 20e9),), margin=0.0)
    base = Plan(shared=(SharedGPU("c:a/X", ("m",), {"m": (2.0,)}),))
    assert "above its spread max_share_per_site 0.6" in " ".join(validate(p, base, check_objective=False).violations)
    notes: list[str] = []
    fixed = _repair(p, base, backend="highs", threads=1, effort=Effort(1.0),
                    stop=SafetyStop(deadline=time.perf_counter() + 60, time_limit_s=60), notes=notes,
                    say=lambda s: None)
    assert fixed is not None and validate(p, fixed, check_objective=False).ok
    assert fixed.replicas == {A: (1,), B: (1,)} and not fixed.shared
    assert "repaired window by window without them" in notes[0] and "no valid plan" not in notes[0]
