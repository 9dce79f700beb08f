"""Accepted input must not poison the forecast: each test reproduces a finding measured on main (all requests
authenticated, all answered 2xx there) and checks the fix.

- the ceiling was per observation while the forecast sums tenants: 99 new tenants each just under it gave a forecast
  of 322,259 req/s (980x the fleet's capacity); now the sum over a model's live tenants and the fleet's total are
  capped;
- an observation dated a day ago moved today's forecast 2 -> 490 req/s, one dated 290 s ahead pinned it at 20x after
  later normal observations: now both are refused and an observation never moves the forecaster's "now";
- one 2 req/s stream under 15 rotating tenant labels forecast 32 req/s: now spans that follow each other are not
  summed, and silent labels expire after a few of their own reports;
- ``{"arrivals": 5, "arrivals": 50000}`` was stored as 50000: now 422 naming the key;
- DELETE restored the forecast but kept the extra replicas for the cooldown (1,800 s, about +$119/h): now the fleet
  is repaired in the DELETE's own round.
"""

from __future__ import annotations

import math
import warnings

import pytest
from service_support import AUTH, TOKEN, Clock, M

from fleetplan.placement.validate import validate
from fleetplan.service.app import create_app, duplicate_key
from fleetplan.service.runtime import ReplanService, ServiceSettings
from fleetplan.solvers.online.config import OnlineConfig
from fleetplan.solvers.online.forecast import Forecaster, concurrent_total

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


def make(shipped, db, *, clock=None, **kw):
    problem, loads = shipped
    s = ServiceSettings(db_url=db, token=TOKEN, interval_s=0, resolve_every_s=0, **kw)
    svc = ReplanService(s, problem, loads, clock=clock or Clock())
    return TestClient(create_app(s, svc, background=False)), svc


def post(c, *items):
    return c.post("/v1/observations", json={"observations": list(items)}, headers=AUTH)


def forecast(svc, model=M) -> float:
    fc = svc.replanner.forecaster
    now = svc.clock()
    return fc.forecast(model, fc.window_at(now), now)


def test_concurrent_total_sums_only_what_was_measured_at_one_time():
    # (rate, end, span): two tenants over the same minute add up; a relabelled stream (consecutive minutes) does not
    assert concurrent_total([(2.0, 60.0, 60.0), (3.0, 60.0, 60.0)]) == 5.0
    assert concurrent_total([(2.0, 60.0, 60.0), (2.0, 120.0, 60.0), (2.0, 180.0, 60.0)]) == 2.0
    # overlap of (0, 60] and (30, 90]: 2 + 3 at t in (30, 60]; the third, (100, 160], alone
    assert concurrent_total([(2.0, 60.0, 60.0), (3.0, 90.0, 60.0), (4.0, 160.0, 60.0)]) == 5.0
    # an infinite span (an observation without interval_s) overlaps everything before its end, as main summed
    assert concurrent_total([(2.0, 10.0, math.inf), (3.0, 500.0, math.inf)]) == 5.0
    assert concurrent_total([]) == 0.0


def test_the_ceiling_caps_the_sum_over_tenants_not_each_observation(shipped, tmp_path):
    client, svc = make(shipped, f"sqlite:///{tmp_path / 'a.db'}")
    ceiling = svc.rate_ceiling_req_per_s[M]
    with client as c:
        # main: 99 tenants at 0.99 x the ceiling each were all accepted (a forecast of 99 x 0.99 x 3,288 req/s)
        assert post(c, {"model": M, "tenant": "t0", "interval_s": 60, "arrivals": 0.99 * ceiling * 60}
                    ).status_code == 202
        r = post(c, {"model": M, "tenant": "t1", "interval_s": 60, "arrivals": 0.99 * ceiling * 60})
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == ["body", "observations", 0, "arrivals"]
        assert "would sum to" in r.json()["detail"][0]["msg"]
        assert forecast(svc) <= ceiling
        # 99 tenants that together stay under it are accepted: 0.99 x ceiling / 99 each, 0.99 x ceiling in all
        items = [{"model": M, "tenant": f"u{k}", "interval_s": 60, "arrivals": 0.99 * ceiling / 99 * 60}
                 for k in range(99)]
        c.post("/v1/observations", json={"observations": [{"model": M, "tenant": "t0", "interval_s": 60,
                                                           "arrivals": 0}]}, headers=AUTH)
        assert post(c, *items).status_code == 202
        assert forecast(svc) == pytest.approx(0.99 * ceiling)
        assert svc.store.count_observations() == 1 + 1 + 99


def test_the_fleet_ceiling_caps_the_total_over_models(shipped, tmp_path):
    client, svc = make(shipped, f"sqlite:///{tmp_path / 'a.db'}")
    m1, m2 = "Llama-3.1-8B", "Qwen2.5-7B"
    cap = svc.fleet_capacity_req_per_s
    with client as c:
        # 9.9 whole fleets of Llama-3.1-8B (0.99 x its ceiling of 10 fleets) is accepted alone ...
        assert post(c, {"model": m1, "interval_s": 60, "arrivals": 9.9 * cap[m1] * 60}).status_code == 202
        # ... 9.9 more of Qwen2.5-7B would make 19.8 > 10 fleets: main accepted it (each under its own ceiling)
        r = post(c, {"model": m2, "interval_s": 60, "arrivals": 9.9 * cap[m2] * 60})
        assert r.status_code == 422 and "whole fleets" in r.json()["detail"][0]["msg"], r.text
        # 0.1 fleets of Qwen2.5-7B fits: 9.9 + 0.1 = 10
        assert post(c, {"model": m2, "interval_s": 60, "arrivals": 0.099 * cap[m2] * 60}).status_code == 202


def test_old_and_future_observations_are_refused(shipped, tmp_path):
    clock = Clock()
    client, svc = make(shipped, f"sqlite:///{tmp_path / 'a.db'}", clock=clock)
    ceiling = svc.rate_ceiling_req_per_s[M]
    with client as c:
        for _ in range(5):
            clock.t += 60
            assert post(c, {"model": M, "interval_s": 60, "arrivals": 120, "at_s": clock.t}).status_code == 202
        before = forecast(svc)
        assert before == pytest.approx(2.0)  # 120 / 60 s, the floor
        # main: 202, and the recent average took 0.3 x 0.15 x the ceiling: 2 -> 75.6 req/s
        r = post(c, {"model": M, "tenant": "late", "interval_s": 60, "arrivals": 0.15 * ceiling * 60,
                     "at_s": clock.t - 86000})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "at_s", r.text
        # also from a live tenant (main moved its recent average with it): a tenant's observations come in order
        r = post(c, {"model": M, "interval_s": 60, "arrivals": 0.15 * ceiling * 60, "at_s": clock.t - 120})
        assert r.status_code == 422 and "time order" in r.json()["detail"][0]["msg"], r.text
        # 290 s ahead: main accepted it (skew 300 s), and its 40 req/s held the floor over later normal observations
        r = post(c, {"model": M, "tenant": "ahead", "interval_s": 60, "arrivals": 40 * 60, "at_s": clock.t + 290})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "at_s", r.text
        assert forecast(svc) == pytest.approx(before)
        assert svc.store.count_observations() == 5
        # at the edge of the horizon (max_observation_age_s, 30 min) and of the skew (5 s)
        age, skew = svc.settings.max_observation_age_s, svc.settings.max_clock_skew_s
        assert post(c, {"model": M, "tenant": "old", "interval_s": 60, "arrivals": 60,
                        "at_s": clock.t - age + 1}).status_code == 202
        assert post(c, {"model": M, "tenant": "old2", "interval_s": 60, "arrivals": 60,
                        "at_s": clock.t - age - 1}).status_code == 422
        assert post(c, {"model": M, "tenant": "soon", "interval_s": 60, "arrivals": 60,
                        "at_s": clock.t + skew}).status_code == 202


def test_an_observation_never_moves_the_forecasters_now():
    cfg = OnlineConfig(forecast_method="blend", floor_on_latest=True)
    fc = Forecaster({"a": [1.0] * 24}, 3600.0, cfg)
    t = 100_000.0
    fc.observe("a", 5.0, t, "b", interval_s=60, now_s=t)
    # a sender with a clock a day ahead (the forecaster takes it; the service refuses it): on main the newest time
    # seen was "now", so tenant b expired at once and the forecast followed the future one alone
    fc.observe("a", 7.0, t + 86400, "c", interval_s=60, now_s=t + 1)
    assert fc.tenants("a", t + 10) == {"b", "c"}
    assert fc.total("a", t + 10) == 7.0  # b over (t-60, t], c over (t+86340, t+86400]: not at one time
    # b keeps reporting: it stays live by the service's clock
    for k in range(1, 5):
        fc.observe("a", 5.0, t + 60 * k, "b", interval_s=60, now_s=t + 60 * k)
    assert "b" in fc.tenants("a", t + 240)


def test_a_relabelled_stream_counts_once(shipped, tmp_path):
    clock = Clock()
    client, svc = make(shipped, f"sqlite:///{tmp_path / 'a.db'}", clock=clock)
    with client as c:
        # one 2 req/s stream, a new label every minute: main forecast 30 req/s (15 live labels summed)
        for k in range(15):
            clock.t += 60
            assert post(c, {"model": M, "tenant": f"r{k}", "interval_s": 60, "arrivals": 120,
                            "at_s": clock.t}).status_code == 202
        # floor: the newest label's 2 req/s (the spans (t-60, t] follow each other); blend 0.5 x curve (1.85) +
        # 0.5 x the same one label's EWMA 2 = 1.92 is below it
        assert forecast(svc) == pytest.approx(2.0)
        # silent labels expire after 3 of their own 60-s spans, not tenant_ttl_s (900 s): at most 4 are live
        assert len(svc.replanner.forecaster.tenants(M, clock.t)) <= 4
        # 15 tenants that report the same minute are 15 tenants: 15 x 2 = 30 req/s
        clock.t += 600
        items = [{"model": M, "tenant": f"s{k}", "interval_s": 60, "arrivals": 120, "at_s": clock.t}
                 for k in range(15)]
        assert post(c, *items).status_code == 202
        assert forecast(svc) == pytest.approx(30.0)


def test_duplicate_json_keys_get_422_naming_the_key(shipped, tmp_path):
    client, svc = make(shipped, f"sqlite:///{tmp_path / 'a.db'}")
    with client as c:
        body = b'{"observations": [{"model": "Llama-3.1-8B", "interval_s": 60, "arrivals": 5, "arrivals": 50000}]}'
        r = c.post("/v1/observations", content=body, headers={**AUTH, "Content-Type": "application/json"})
        assert r.status_code == 422, r.text  # main: 202, stored as 50000
        d = r.json()["detail"][0]
        assert d["loc"] == ["body", "observations", 0, "arrivals"] and d["type"] == "duplicate_key"
        assert "'arrivals' is given twice" in d["msg"]
        r = c.post("/v1/replan", content=b'{"full": false, "full": true}',
                   headers={**AUTH, "Content-Type": "application/json"})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "full"], r.text
        assert svc.store.count_observations() == 0
    assert duplicate_key(b'{"a": {"b": 1, "c": {"b": 2}}}') is None  # the same key in two objects is fine
    assert duplicate_key(b'[{"x": 1}, {"y": [1, {"z": 0, "z": 1}]}]') == ["body", 1, "y", 1, "z"]
    assert duplicate_key(b"not json") is None


def _replicas(svc) -> dict:
    return svc.replanner.counts()


def test_delete_repairs_the_fleet_at_once(shipped, tmp_path):
    """A twin service that never saw the bad observation is the reference: after the DELETE the fleet is the twin's
    (main: the poisoned replicas stayed for the cooldown, 1,800 s)."""
    poisoned_clock, twin_clock = Clock(), Clock()
    client, svc = make(shipped, f"sqlite:///{tmp_path / 'a.db'}", clock=poisoned_clock)
    twin_client, twin = make(shipped, f"sqlite:///{tmp_path / 'b.db'}", clock=twin_clock)
    ceiling = svc.rate_ceiling_req_per_s[M]
    with client as c, twin_client as tc:
        start_cost = svc.plan_row["cost_usd_per_hour"]
        for k in range(6):
            for clock, cl in ((poisoned_clock, c), (twin_clock, tc)):
                clock.t += 60
                assert post(cl, {"model": M, "interval_s": 60, "arrivals": 120, "at_s": clock.t}).status_code == 202
            if k == 1:  # one observation at 0.99 x the ceiling, from a broken exporter (the poisoned service only)
                bad = post(c, {"model": M, "tenant": "broken", "interval_s": 60, "arrivals": 0.99 * ceiling * 60,
                               "at_s": poisoned_clock.t}).json()["ids"]
            for clock, cl in ((poisoned_clock, c), (twin_clock, tc)):
                clock.t += 1
                assert cl.post("/v1/replan", headers=AUTH).status_code == 200
        poisoned_cost = svc.plan_row["cost_usd_per_hour"]
        assert poisoned_cost > 2 * start_cost  # the fleet grew for the bad observation
        for clock in (poisoned_clock, twin_clock):
            clock.t += 30
        r = c.delete("/v1/observations", params={"ids": str(bad[0])}, headers=AUTH)
        assert r.status_code == 200 and r.json()["deleted"] == 1, r.text
        assert tc.post("/v1/replan", headers=AUTH).status_code == 200
        assert forecast(svc) == pytest.approx(forecast(twin))
        assert _replicas(svc) == _replicas(twin)
        assert svc.plan_row["cost_usd_per_hour"] == pytest.approx(twin.plan_row["cost_usd_per_hour"])
        assert svc.plan_row["cost_usd_per_hour"] < 0.5 * poisoned_cost
        # the cooldown's record holds the rebuilt forecasts, not the poisoned ones
        held = max(v for _, v in svc.replanner.recent_forecasts[M])
        assert held == pytest.approx(max(v for _, v in twin.replanner.recent_forecasts[M]))
        res = svc.replanner.current
        assert res.reason == "rebuild" and validate(res.problem, res.plan).ok
