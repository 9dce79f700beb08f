"""The service's store on a real PostgreSQL server: observations, plans and diffs stored, and a resume from them.

The server is the one `.ci/run` starts (URL in FLEETPLAN_TEST_POSTGRES_URL); without it, the test setup starts a
private one with Debian's initdb/pg_ctl on 127.0.0.1. Where neither works the test is skipped, saying why.
"""

from __future__ import annotations

import uuid

import pytest
from service_support import private_postgres
from test_plan_diff import check_stored_plan_diff

from fleetplan.service.app import create_app
from fleetplan.service.runtime import ReplanService, ServiceSettings, load_problem
from fleetplan.service.store import Store, normalize_url

pytestmark = pytest.mark.xdist_group("postgres")


@pytest.fixture()
def restartable_pg():
    """A private server this test may stop and start (never the one .ci/run shares)."""
    yield from private_postgres()


def test_postgres_store_keeps_observations_plans_and_resumes(pg_url):
    import sqlalchemy

    # A schema of its own, so runs never see each other's rows.
    schema = "t_" + uuid.uuid4().hex[:10]
    try:
        admin = sqlalchemy.create_engine(normalize_url(pg_url))
        with admin.begin() as c:
            c.execute(sqlalchemy.text(f"CREATE SCHEMA {schema}"))
    except sqlalchemy.exc.OperationalError as exc:
        pytest.skip(f"PostgreSQL test skipped: the server at {pg_url.split('@')[-1]} is unreachable ({exc.orig})")
    url = normalize_url(pg_url) + ("&" if "?" in pg_url else "?") + f"options=-csearch_path%3D{schema}"
    problem, loads = load_problem(None)
    settings = ServiceSettings(db_url=url, token="pg-test-token", interval_s=0, resolve_every_s=0)
    try:
        svc = ReplanService(settings, problem, loads, clock=lambda: 1_700_000_000.0)
        assert svc.store.engine.dialect.name == "postgresql" and not svc.resumed
        ids = svc.observe([{"model": "Llama-3.1-8B", "interval_s": 60.0, "arrivals": 1440.0},
                           {"model": "Qwen2.5-7B", "interval_s": 60.0, "completions": 60.0, "waiting_start": 0.0,
                            "waiting_end": 30.0}])
        row = svc.replan()
        assert row["id"] == 2 and svc.store.diff_for(2)["previous_plan_id"] == 1
        svc.close()
        again = ReplanService(settings, problem, loads, clock=lambda: 1_700_000_100.0)
        assert again.resumed and again.plan_row["id"] == 2
        assert again.store.observation_ids() == set(ids)
        rows = again.store.observations_after(0)
        # (60 completions + 30 queue growth) / 60 s = 1.5 req/s
        assert [round(r["demand_req_per_s"], 6) for r in rows] == [24.0, 1.5]
        assert again.replanner.counts() == svc.replanner.counts()
        assert Store(url).count_plans() == 2
        again.close()
    finally:
        with admin.begin() as c:
            c.execute(sqlalchemy.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


def test_postgres_restart_the_loop_survives_and_readiness_tells_the_truth(restartable_pg):
    """On main the background thread died on the first database error and /healthz kept answering "ok"."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    url, stop, start = restartable_pg
    now = [1_700_000_000.0]
    problem, loads = load_problem(None)
    settings = ServiceSettings(db_url=url, token="pg-test-token", interval_s=60, resolve_every_s=0, db_timeout_s=2)
    svc = ReplanService(settings, problem, loads, clock=lambda: now[0])
    auth = {"Authorization": "Bearer pg-test-token"}
    with TestClient(create_app(settings, svc, background=False)) as c:
        assert c.get("/readyz").status_code == 200
        svc.observe([{"model": "Llama-3.1-8B", "interval_s": 60.0, "arrivals": 1440.0}])
        stop()
        try:
            now[0] += 60
            state = {"next_round": now[0]}
            svc.tick(now[0], state)  # the round's write fails: counted, retried with backoff, nothing swapped in
            assert svc.counters["round_errors"] == 1 and svc.plan_row["id"] == 1
            ready = c.get("/readyz")
            assert ready.status_code == 503 and ready.json()["checks"]["database_writable"] is False
            assert c.get("/healthz").status_code == 200  # alive: liveness is not the database's health
            r = c.post("/v1/observations", json={"observations": [
                {"model": "Llama-3.1-8B", "interval_s": 60, "arrivals": 60}]}, headers=auth)
            assert r.status_code == 503 and "database unavailable" in r.json()["detail"]
            assert c.get("/metrics").status_code == 200
        finally:
            start()
        now[0] = state["next_round"]
        svc.tick(now[0], state)
        assert svc.plan_row["id"] == 2 and svc.store.count_plans() == 2
        assert svc.store.diff_for(2)["previous_plan_id"] == 1
        assert c.get("/readyz").status_code == 200


def test_diff_against_the_plan_the_service_stored_in_postgres(pg_schema):
    # the same check as on SQLite (tests/test_plan_diff.py), on the database the service runs on in production
    check_stored_plan_diff(pg_schema)
