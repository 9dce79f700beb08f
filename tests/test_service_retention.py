"""Retention and the cost of a DELETE: old observations are folded into the forecaster state stored with the plans and
removed, the plan history is capped, and a DELETE replays only the observations after the newest plan that predates
what it deletes.

On main nothing was ever removed (~1.9 MB/min at 70 obs/s, 59 kB per plan row), and a DELETE of one observation
replayed the whole table (14 s in a 106k-row database, all ingestion blocked).
"""

from __future__ import annotations

import warnings

from service_support import AUTH, TOKEN, Clock, M

from fleetplan.service.app import create_app
from fleetplan.service.runtime import ReplanService, ServiceSettings

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


def make(shipped, db, *, clock=None, **kw):
    problem, loads = shipped
    s = ServiceSettings(db_url=db, token=TOKEN, interval_s=0, resolve_every_s=0, **kw)
    svc = ReplanService(s, problem, loads, clock=clock or Clock())
    return TestClient(create_app(s, svc, background=False)), svc


def test_retention_folds_old_observations_and_caps_the_plans(shipped, tmp_path):
    db = f"sqlite:///{tmp_path / 'a.db'}"
    clock = Clock()
    client, svc = make(shipped, db, clock=clock, observation_retention_s=3600, plan_retention_s=7200, max_plans=5)
    with client as c:
        marks = []  # (plan id, its last observation id), one plan per 10 minutes for 3 hours
        for k in range(18):
            clock.t += 600
            r = c.post("/v1/observations", json={"observations": [
                {"model": M, "interval_s": 600, "arrivals": 600 * (2 + k % 3), "at_s": clock.t}]}, headers=AUTH)
            assert r.status_code == 202
            assert c.post("/v1/replan", headers=AUTH).status_code == 200
            marks.append((svc.plan_row["id"], svc.last_obs_id))
        assert svc.store.count_plans() == 19 and svc.store.count_observations() == 18
        state = svc.replanner.forecaster.to_dict()
        out = svc.retain()
        # plans: the newest 5 (the cap; all are younger than 2 h). The newest plan made an hour or more ago is
        # older than those, so the oldest kept plan is the base: its state holds observations 1..14 (plan 15's)
        assert svc.store.count_plans() == 5 and out["plans_deleted"] == 14
        oldest_kept, base_mark = marks[-5]
        assert out["folded_through_id"] == base_mark == 14
        assert svc.store.observation_ids() == set(range(15, 19))
        assert c.get("/v1/plans", params={"since": 0}).json()["plans"][0]["id"] == oldest_kept
        # folded observations cannot be deleted (409 naming them); kept ones can, replaying only those after the
        # base plan
        r = c.delete("/v1/observations", params={"ids": "3"}, headers=AUTH)
        assert r.status_code == 409 and "folded" in r.json()["detail"], r.text
        assert svc.replanner.forecaster.to_dict() == state
    _, again = make(shipped, db, clock=clock, observation_retention_s=3600, plan_retention_s=7200, max_plans=5)
    try:
        assert again.resumed and again.replanner.forecaster.to_dict() == state  # nothing the forecast needs was lost
    finally:
        again.close()


def test_a_delete_replays_only_what_follows_the_plan_before_it(shipped, tmp_path):
    clock = Clock()
    client, svc = make(shipped, f"sqlite:///{tmp_path / 'a.db'}", clock=clock)
    with client as c:
        # 2,000 observations, then a round; then 3 more
        for _ in range(2):
            items = []
            for _ in range(1000):
                clock.t += 0.5
                items.append({"model": M, "interval_s": 60, "arrivals": 120, "at_s": clock.t})
            assert c.post("/v1/observations", json={"observations": items}, headers=AUTH).status_code == 202
        assert c.post("/v1/replan", headers=AUTH).status_code == 200
        ids = []
        for k in range(3):
            clock.t += 60
            ids += c.post("/v1/observations", json={"observations": [
                {"model": M, "tenant": "late", "interval_s": 60, "arrivals": 60 * (5 + k), "at_s": clock.t}]},
                headers=AUTH).json()["ids"]
        r = c.delete("/v1/observations", params={"ids": str(ids[-1])}, headers=AUTH)
        assert r.status_code == 200, r.text
        # main replayed all 2,002 others; now the two after the round's plan (its state holds the first 2,000)
        assert r.json()["replayed"] == 2 and r.json()["deleted"] == 1
        fc = svc.replanner.forecaster
        # the tenant's newest kept rate is the second one: 6 req/s
        assert fc.latest[(M, "late")][0] == 6.0
        assert svc.store.count_observations() == 2002
