"""The online re-planner on the fleet as it stands (issue 25): make-before-break in rounds and re-solves, nodes that
go down and come back, a restart on a smaller inventory, prefill/decode pools and spot fallback kept online, what
it refuses at start, and the node placement by hand. Every plan is re-checked by validate."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fleetplan.errors import InputError
from fleetplan.placement.problem import KvRoute, ModelSpec, Pool, Problem, ReplicaOption
from fleetplan.placement.validate import validate
from fleetplan.solvers.online.config import OnlineConfig
from fleetplan.solvers.online.replanner import Replanner
from fleetplan.solvers.online.state import FreeGpus, online_problem, window_problem
from fleetplan.solvers.solve import solve

H = 3600.0
# Forecast = the newest observation exactly (ewma 1, no curve, no floor), no scale-down cooldown.
EXACT = OnlineConfig(ewma_alpha=1.0, day_curve_weight=0.0, floor_on_latest=False, target_utilization=0.8,
                     migration_budget=8, cooldown_s=0.0, migration_cost_replica_hours=0.0,
                     resolve_horizon_s=3600.0)  # the tests' savings are counted over one hour


def _pool(gpu: str, usd: float, *, site: str = "t:r1", nodes: int = 2, gpn: int = 8, **kw) -> Pool:
    return Pool(site, gpu, nodes=nodes, gpus_per_node=gpn, usd_per_gpu_hour=usd, memory_bytes_per_gpu=80e9, **kw)


def two_options(y_capacity: float = 10.0, load_s: float = 600.0) -> tuple[Problem, dict]:
    """Model 'a' (floor 1): on X ($2/GPU-h) a tp-1 replica sustains 10 req/s (usable 9 after the 10% margin), on Y
    ($1/GPU-h) ``y_capacity``; every new replica loads for ``load_s`` seconds."""
    pools = (_pool("X", 2.0), _pool("Y", 1.0))
    opts = (ReplicaOption("a", "t:r1/X", 1, 1, 10.0, 40e9, start_cost_usd=0.1),
            ReplicaOption("a", "t:r1/Y", 1, 1, y_capacity, 40e9, start_cost_usd=0.1))
    p = Problem(H, 24, pools, (ModelSpec("a", (5.0,) * 24, 1.0, 0.1, min_replicas=1),), opts, margin=0.1)
    return p, {o.key: load_s for o in opts}


def on_x(n: int) -> dict:
    return {"replicas": [{"model": "a", "pool": "t:r1/X", "tp": 1, "pp": 1, "ready_at_s": [0.0] * n}],
            "shared": [], "forecaster": {}}


X = ("a", "t:r1/X", 1, 1)
Y = ("a", "t:r1/Y", 1, 1)


def test_an_adopted_resolve_keeps_the_old_replicas_serving_until_the_new_ones_do():
    p, lt = two_options()
    r = Replanner(p, EXACT, lt)
    r.restore(on_x(2), 0.0)
    r.forecaster.observe("a", 15.0, 5.0)
    cand = solve(window_problem(p, {"a": 15.0}), "highs", time_limit_s=10, lp_bound=False)
    assert cand.replicas == {Y: (2,)}
    # saving (2 x $2 - 2 x $1) x 1 h = $2.00, less 2 starts x $0.10 and the overlap: the 2 X replicas serve 600 s
    # more while the Y ones load, 2 x $2/h x 600/3600 h = $0.667: net $1.13 > the $1 threshold
    ok, res, msg = r.consider(cand, 10.0)
    assert ok and "net saving $1.13" in msg, msg
    assert res.plan.replicas == {X: (2,), Y: (2,)}  # both run during the load
    assert [(a.action, a.pool, a.count) for a in res.actions] == [("start", "t:r1/Y", 2)]
    assert res.retiring == {X: (610.0, 610.0)} and res.loading == {Y: (610.0, 610.0)}
    assert res.report.ok and res.unmet_req_per_s == {"a": 0.0}
    assert r.settle(609.0) is None  # not yet: the Y replicas load until 610 s
    done = r.settle(610.0)
    assert done is not None and done.plan.replicas == {Y: (2,)}
    assert [(a.action, a.pool, a.count, a.reason) for a in done.actions] == [("stop", "t:r1/X", 2, "replaced")]
    assert done.migrations == 2 and validate(done.problem, done.plan).ok
    assert r.next_settle_s() is None


def test_a_round_stops_a_serving_replica_only_once_its_replacement_serves():
    # Y: one replica sustains 20 req/s (18 usable) for $1/h. One X replica (9 usable) serves; the forecast rises to
    # 20: deficit 11 -> one Y replica (cheapest for it), loading until 60 + 600 s.
    p, lt = two_options(y_capacity=20.0)
    r = Replanner(p, EXACT, lt)
    r.restore(on_x(1), 0.0)
    r.forecaster.observe("a", 20.0, 50.0)
    grow = r.round(60.0)
    assert grow.plan.replicas == {X: (1,), Y: (1,)} and grow.loading == {Y: (660.0,)}
    # Forecast 14 at 120 s: the survivors must carry 14 / 0.8 = 17.5 req/s. Cancelling the loading Y leaves 9:
    # no. Removing X leaves 18 once Y serves: yes, but Y does not serve yet (0 now < 17.5), so X serves until 660 s.
    r.forecaster.observe("a", 14.0, 110.0)
    hold = r.round(120.0)
    assert hold.plan.replicas == {X: (1,), Y: (1,)} and hold.retiring == {X: (660.0,)}
    assert hold.actions == () and hold.report.ok
    assert r.round(300.0).plan.replicas == {X: (1,), Y: (1,)}  # still loading: nothing changes
    later = r.round(700.0)  # the stop came due at 660 s
    assert later.plan.replicas == {Y: (1,)}
    assert [(a.action, a.reason) for a in later.actions] == [("stop", "replaced")]


def test_a_site_going_down_is_repaired_in_the_same_call_beyond_the_migration_budget():
    # Site A: 1 node of 8 GPUs at $1 (cheap); site B: 1 node of 8 at $2. 30 req/s -> ceil(30 / 9) = 4 replicas on A.
    pools = (_pool("X", 1.0, site="t:a", nodes=1), _pool("X", 2.0, site="t:b", nodes=1))
    opts = tuple(ReplicaOption("a", q.id, 1, 1, 10.0, 40e9) for q in pools)
    p = Problem(H, 24, pools, (ModelSpec("a", (30.0,) * 24, 1.0, 0.1),), opts, margin=0.1)
    r = Replanner(p, OnlineConfig(ewma_alpha=1.0, day_curve_weight=0.0, floor_on_latest=False, cooldown_s=0.0,
                                  migration_budget=2))
    assert r.initial(0.0).plan.replicas == {("a", "t:a/X", 1, 1): (4,)}
    res = r.set_unavailable(r.site_nodes("t:a"), 100.0)
    # the 4 replicas are lost; their replacement is not limited by the budget of 2: 4 start on B at once
    assert res.lost == 4 and res.plan.replicas == {("a", "t:b/X", 1, 1): (4,)}
    assert sorted((a.action, a.pool, a.count, a.reason) for a in res.actions) == [
        ("start", "t:b/X", 4, "plan"), ("stop", "t:a/X", 4, "lost")]
    assert res.migrations == 4 and res.report.ok and res.unmet_req_per_s == {"a": 0.0}
    assert {q.id: q.gpus for q in res.problem.pools} == {"t:a/X": 0, "t:b/X": 8}
    # the site comes back: its GPUs are free again, the fleet problem has them, nothing else moves
    back = r.set_unavailable({"t:a/X": []}, 200.0)
    assert back.actions == () and {q.id: q.gpus for q in back.problem.pools} == {"t:a/X": 8, "t:b/X": 8}
    with pytest.raises(InputError, match="node 5"):
        r.set_unavailable({"t:a/X": [5]})
    with pytest.raises(InputError, match="unknown site"):
        r.site_nodes("t:zz")


def test_a_restart_on_a_smaller_inventory_resumes_and_repairs():
    # Stored: 3 replicas on nodes 0, 0 and 1 of a pool of 2 nodes x 2 GPUs; the pool now has 1 node.
    small = Problem(H, 24, (_pool("X", 2.0, nodes=1, gpn=2),),
                    (ModelSpec("a", (5.0,) * 24, 1.0, 0.1, min_replicas=1),),
                    (ReplicaOption("a", "t:r1/X", 1, 1, 10.0, 40e9),), margin=0.1)
    snap = {"replicas": [{"model": "a", "pool": "t:r1/X", "tp": 1, "pp": 1, "ready_at_s": [0.0] * 3,
                          "stop_at_s": [None] * 3, "nodes": [[0], [0], [1]]}], "shared": [], "forecaster": {}}
    r = Replanner(small, EXACT)
    res = r.restore(snap, 10.0)
    assert res.plan.replicas == {X: (2,)} and "1 no longer fit" in res.message and res.report.ok
    with pytest.raises(InputError, match="not an option"):
        Replanner(small, EXACT).restore({"replicas": [{"model": "a", "pool": "t:r1/Z", "tp": 1, "pp": 1,
                                                       "ready_at_s": [0.0]}]}, 0.0)


def test_prefill_and_decode_pools_are_planned_online():
    # One pool at $1/GPU-h; a prefill replica sustains 10 req/s (9 usable), a decode replica 5 (4.5 usable).
    pool = _pool("X", 1.0)
    pre = ReplicaOption("a", pool.id, 1, 1, 10.0, 40e9, role="prefill", decode_site="t:r1", ttft_p95_s=0.5)
    dec = ReplicaOption("a", pool.id, 1, 1, 5.0, 40e9, role="decode", tpot_p95_s=0.05)
    route = KvRoute("a", "t:r1", "t:r1", "", kv_bytes_per_request=1e6, prompt_bytes_per_request=1e3)
    p = Problem(H, 24, (pool,), (ModelSpec("a", (5.0,) * 24, 1.0, 0.1, min_replicas=1),), (), margin=0.1,
                pd_options=(pre, dec), kv_routes=(route,))
    r = Replanner(p, EXACT)
    P, D = pre.pd_key, dec.pd_key
    start = r.initial(0.0)
    # 5 req/s: 1 prefill (9) and ceil(5 / 4.5) = 2 decode (9); the KV flow carries the 5
    assert start.plan.pd_replicas == {P: (1,), D: (2,)} and start.plan.kv_flows_req_per_s == {("a", "t:r1", "t:r1"):
                                                                                                (5.0,)}
    r.forecaster.observe("a", 20.0, 10.0)
    up = r.round(60.0)  # 20 req/s: ceil(20 / 9) = 3 prefill, ceil(20 / 4.5) = 5 decode
    assert up.plan.pd_replicas == {P: (3,), D: (5,)} and up.report.ok and up.unmet_req_per_s == {"a": 0.0}
    assert sorted((a.role, a.count) for a in up.actions) == [("decode", 3), ("prefill", 2)]
    r.forecaster.observe("a", 4.0, 70.0)
    down = r.round(120.0)  # 4 req/s: survivors carry 4 / 0.8 = 5: 1 prefill (9), 2 decode (9; 1 would be 4.5)
    assert down.plan.pd_replicas == {P: (1,), D: (2,)} and validate(down.problem, down.plan).ok
    snap = r.snapshot()
    again = Replanner(p, EXACT)
    assert again.restore(snap, 130.0).plan.pd_replicas == {P: (1,), D: (2,)}


def test_spot_fallback_headroom_is_kept_online():
    # Spot: 4 GPUs at $0.5 with interruption rate 0.5 (a replica's 10 req/s derated to 5, usable 4.5); its fallback
    # on demand: 4 GPUs at $2 (usable 9). 50 req/s: the 4 spot replicas first (0.111 $/usable req/s against
    # 0.222), then on demand, which must keep 0.5 x 4 = 2 GPUs free for interrupted spot replicas: 2 on demand.
    spot = _pool("X", 0.5, nodes=1, gpn=4, name="spot", pricing_model="spot", interruption_rate=0.5,
                 fallback_pool="od")
    od = _pool("X", 2.0, nodes=1, gpn=4, name="od")
    opts = (ReplicaOption("a", "spot", 1, 1, 5.0, 40e9), ReplicaOption("a", "od", 1, 1, 10.0, 40e9))
    p = Problem(H, 24, (spot, od), (ModelSpec("a", (1.0,) * 24, 1.0, 0.1),), opts, margin=0.1)
    r = Replanner(p, replace(EXACT, migration_budget=20))
    r.initial(0.0)
    r.forecaster.observe("a", 50.0, 10.0)
    res = r.round(60.0)
    assert {k[1]: v[0] for k, v in res.plan.replicas.items()} == {"spot": 4, "od": 2}
    assert res.report.ok and res.unmet_req_per_s["a"] == pytest.approx(50 - 4 * 4.5 - 2 * 9)


def test_what_the_online_replanner_cannot_plan_is_refused_at_start():
    p, _ = two_options()
    opts = tuple(replace(o, class_capacity_req_per_s=(("s", 12.0), ("l", 8.0))) for o in p.options)
    classes = replace(p, models=(ModelSpec("a", (5.0,) * 24, 1.0, 0.1, class_shares=(("s", 0.5), ("l", 0.5)),
                                           class_max_tokens=(("s", 1000.0, 100.0), ("l", 1e9, 1e9))),),
                      options=opts)
    with pytest.raises(InputError, match="request classes"):
        Replanner(classes, EXACT)


def test_free_gpus_best_fit_and_nodes_down_by_hand():
    p = Problem(H, 1, (_pool("X", 1.0, nodes=3, gpn=8),), (ModelSpec("a", (1.0,), 1.0, 0.1),),
                (ReplicaOption("a", "t:r1/X", 1, 1, 10.0, 40e9),))
    g = FreeGpus(p, down={"t:r1/X": [1]})
    assert g.free["t:r1/X"] == [8, 0, 8]
    assert g.place("t:r1/X", 4, 1) == (0,)  # best fit among 8 and 8: the lowest index
    assert g.place("t:r1/X", 2, 1) == (0,)  # node 0 has 4 free: fewer than node 2's 8
    assert g.place("t:r1/X", 8, 2) is None  # two whole nodes: only node 2 is whole
    assert g.place("t:r1/X", 8, 1) == (2,)
    assert not g.can_place("t:r1/X", 4, 1) and g.can_place("t:r1/X", 2, 1)
    g.release("t:r1/X", (1,), 4, 1)  # a node that is down gets nothing back
    assert g.free["t:r1/X"] == [2, 0, 0]
    reserved = FreeGpus(p, reserved={"t:r1/X": 11})  # a commitment of 13 of 24 GPUs: 11 taken from the end
    assert reserved.free["t:r1/X"] == [8, 5, 0]
    fleet = online_problem(p, {"t:r1/X": [0, 2]})
    assert fleet.pools[0].gpus == 8
