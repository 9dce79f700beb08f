"""The re-plan loop survives database faults, the live plan changes only after its plan and diff are committed, and
/healthz, /readyz and /metrics tell the truth meanwhile: a read-only database, a SQLite write lock held by another
process, an exception inside a round, and (in tests/test_service_postgres.py) a PostgreSQL restart.

On main each of these killed the background thread (only FleetplanError was caught) while /healthz answered 200 "ok";
a locked write left memory ahead of the database, so the next stored diff missed the replicas already started.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import warnings

from service_support import AUTH, TOKEN, Clock, M, wait_until

from fleetplan.service.app import create_app
from fleetplan.service.runtime import ReplanService, ServiceSettings

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient



def make(shipped, db, *, clock=None, interval_s=60.0, **kw):
    problem, loads = shipped
    s = ServiceSettings(db_url=db, token=TOKEN, interval_s=interval_s, resolve_every_s=0, **kw)
    svc = ReplanService(s, problem, loads, clock=clock or Clock())
    return TestClient(create_app(s, svc, background=False)), svc


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in /metrics")


def replicas(counts: dict) -> int:
    return sum(counts.values())


def test_read_only_database_is_not_ready_and_the_loop_keeps_running(shipped, tmp_path):
    path = tmp_path / "ro.db"
    clock = Clock()
    _, first = make(shipped, f"sqlite:///{path}", clock=clock)
    first.close()
    # SQLite's read-only open mode (a chmod would not stop root, who runs CI)
    client, svc = make(shipped, f"sqlite:///file:{path}?mode=ro&uri=true", clock=clock)
    with client as c:
        assert svc.resumed and svc.plan_row["id"] == 1
        ready = c.get("/readyz")
        assert ready.status_code == 503 and ready.json()["checks"]["database_writable"] is False, ready.json()
        live = c.get("/healthz")
        assert live.status_code == 200 and "database" not in live.json()  # liveness claims nothing of the database
        r = c.post("/v1/observations", json={"observations": [{"model": M, "interval_s": 60, "arrivals": 1440}]},
                   headers=AUTH)
        assert r.status_code == 503 and "database" in r.json()["detail"]
        state: dict = {}
        for _ in range(3):
            clock.t += 61
            svc.tick(clock.t, state)  # never raises
        m = c.get("/metrics").text
        # it cannot write the lease, so it serves the stored plan as a standby and counts each failed try
        assert metric(m, "fleetplan_loop_errors_total") >= 1 and metric(m, "fleetplan_leader") == 0
        assert svc.plan_row["id"] == 1 and c.get("/v1/plan").json()["id"] == 1
        assert c.post("/v1/replan", headers=AUTH).status_code == 503


def test_locked_database_leaves_memory_and_database_together(shipped, tmp_path):
    path = tmp_path / "lock.db"
    clock = Clock()
    client, svc = make(shipped, f"sqlite:///{path}", clock=clock, db_timeout_s=1.5)
    with client as c:
        stored1 = svc.store.last_plan()
        n1 = replicas(svc.replanner.counts())
        # 24 req/s of Llama-3.1-8B: the next round starts replicas
        assert c.post("/v1/observations", json={"observations": [
            {"model": M, "interval_s": 60, "arrivals": 1440, "at_s": clock.t}]}, headers=AUTH).status_code == 202
        other = sqlite3.connect(path, timeout=0)
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        try:
            clock.t += 61
            state: dict = {"next_round": clock.t}  # a round is due now
            svc.tick(clock.t, state)  # the round's write times out after db_timeout_s
            assert svc.counters["round_errors"] == 1
            # nothing was swapped in: memory still equals the stored plan 1
            assert svc.plan_row["id"] == 1 and replicas(svc.replanner.counts()) == n1
            assert c.get("/v1/plan").json()["replicas"] == stored1["body"]["replicas"]
            # /metrics does not wait behind a write that waits for the lock
            svc.write_lock.acquire()  # the re-plan below queues behind it, as behind a write that waits on the database
            try:
                writer = threading.Thread(target=lambda: c.post("/v1/replan", headers=AUTH))
                writer.start()
                wait_until("the re-plan admitted and queued for the write lock", lambda: svc._pending == 1)
                m = c.get("/metrics")
                # answered while that write cannot proceed (this thread holds the lock): /metrics did not wait
                # behind it, shown without reading a clock
                assert m.status_code == 200 and writer.is_alive()
                assert metric(m.text, "fleetplan_plan_id") == 1
            finally:
                svc.write_lock.release()
            writer.join()  # it then waits on the database lock the other connection holds, and fails
            assert c.get("/readyz").status_code == 503
            # retried with backoff: the next try is due well before the next interval
            assert state["next_round"] - clock.t < svc.settings.interval_s
        finally:
            other.rollback()
            other.close()
        clock.t = state["next_round"]
        svc.tick(clock.t, state)
        assert svc.plan_row["id"] == 2
        diff = c.get("/v1/plan/diff").json()
        started = sum(a["count"] for a in diff["actions"] if a["action"] == "start")
        stopped = sum(a["count"] for a in diff["actions"] if a["action"] == "stop")
        # the stored diff accounts for every replica between the two stored plans
        assert started > 0 and n1 + started - stopped == replicas(svc.replanner.counts())
        assert diff["previous_plan_id"] == 1
        assert c.get("/readyz").status_code == 200


def test_the_loop_survives_any_exception_and_counts_it(shipped, tmp_path):
    clock = Clock()
    problem, loads = shipped
    s = ServiceSettings(db_url=f"sqlite:///{tmp_path / 'x.db'}", token=TOKEN, interval_s=1, resolve_every_s=0)
    svc = ReplanService(s, problem, loads, clock=clock)
    calls = {"n": 0}
    real_round = type(svc.replanner).round

    def flaky(self, *a, **kw):
        calls["n"] += 1
        if calls["n"] <= 2:
            raise RuntimeError("simulated bug in a round")
        return real_round(self, *a, **kw)

    type(svc.replanner).round = flaky
    try:
        with TestClient(create_app(s, svc, background=True)) as c:
            wait_until("the loop recovering and committing a plan", lambda: svc.plan_row["id"] >= 2)
            assert svc._thread.is_alive()
            assert metric(c.get("/metrics").text, "fleetplan_round_errors_total") == 2
            assert c.get("/healthz").status_code == 200
    finally:
        type(svc.replanner).round = real_round


def test_a_leader_that_cannot_renew_its_lease_steps_down_once_it_expires(shipped, tmp_path, caplog):
    """A leader whose database refuses writes (another process holds SQLite's write lock) cannot renew its lease.
    Before, it said role 'leader' with a negative expires_in_s (a fresh user saw -16.7 s on a full disk) while a
    standby could take the lease; and it logged the failure at every 0.5-s tick."""
    path = tmp_path / "lease.db"
    clock = Clock(time.time())  # the lease row was written on the real clock: start the test's there
    client, svc = make(shipped, f"sqlite:///{path}", clock=clock, db_timeout_s=0.2, lease_ttl_s=15)
    svc.lease.clock = lambda: clock.t  # the lease's expiry on the test's clock
    with client as c:
        svc.lease.renewed_s = clock.t
        assert svc.role == "leader"
        other = sqlite3.connect(path, timeout=0)
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock: renewals fail
        state: dict = {}
        try:
            clock.t += 6  # renewal due (15 / 3 = 5 s) but fails; the lease still runs 9 s by its own clock
            svc.tick(clock.t, state)
            assert svc.role == "leader"
            clock.t += 1
            svc.tick(clock.t, state)  # the same failure within LEASE_ERROR_LOG_S: counted, not logged again
            clock.t += 9  # 16 s since the last renewal > 15: it may have been taken over
            svc.tick(clock.t, state)
            assert svc.role == "standby" and c.get("/v1/leader").json()["role"] == "standby"
            assert c.post("/v1/replan", headers=AUTH).status_code == 503
        finally:
            other.rollback()
            other.close()
        logged = [r for r in caplog.records if "lease or follow failed" in r.getMessage()]
        assert len(logged) == 1 and svc.counters["loop_errors"] == 3
        clock.t += 1
        svc.tick(clock.t, state)  # the database answers again: the expired lease is taken again
        assert svc.role == "leader"
