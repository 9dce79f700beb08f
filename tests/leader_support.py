"""What the two leader-election test files share (test_service_leader: SQLite; test_service_leader_postgres:
PostgreSQL, in a file of its own so that xdist's --dist loadfile can run the two on different workers):
two real `fleetplan serve` processes on one database, the leader killed with SIGKILL.

On main two replicas on one PostgreSQL diverged (one served 48 GPUs at $212.1/h, the other 10 GPUs at $45.2/h) and
their stored history alternated; with --actuate they would have patched replica counts back and forth. Now the
standby serves the leader's plans from the database, refuses leader-only requests, stores what it is sent, and takes
over once the leader's lease expires; the stored history comes from one leader at a time (epochs never go back).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
from service_support import SERVE_SCENARIO, free_port, http_get, wait_until
from sqlalchemy import create_engine, select

from fleetplan.service.store import Store, leases, normalize_url, plans

TOKEN = "leader-token-77"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
M = "Llama-3.1-8B"


def start(db: str, port: int, log) -> subprocess.Popen:
    env = {**os.environ, "FLEETPLAN_TOKEN": TOKEN}
    return subprocess.Popen([sys.executable, "-m", "fleetplan.cli.main", "serve", "--scenario", SERVE_SCENARIO,
                             "--db", db, "--host", "127.0.0.1", "--port", str(port), "--interval", "0",
                             "--resolve-every", "0", "--lease-ttl", "2", "--log-level", "warning"],
                            env=env, stdout=log, stderr=subprocess.STDOUT)


def wait_for(what, cond, proc: subprocess.Popen | None = None):
    """``cond()``'s first truthy value, polled (service_support.wait_until; HTTP errors while starting count as
    not yet)."""
    return wait_until(what, cond, proc=proc, ignore=(httpx.HTTPError,), poll_s=0.1)


def health(base: str) -> dict | None:
    r = http_get(base + "/healthz", timeout=1.0)
    return r.json() if r.status_code == 200 else None


def stop(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def two_replicas_one_leader(db: str, tmp_path) -> None:
    log = open(tmp_path / "serve.log", "wb")
    pa, pb = free_port(), free_port()
    a_url, b_url = f"http://127.0.0.1:{pa}", f"http://127.0.0.1:{pb}"
    a = start(db, pa, log)
    b = None
    acked: list[int] = []
    try:
        assert wait_for("A healthy", lambda: health(a_url), a)["role"] == "leader"
        b = start(db, pb, log)
        assert wait_for("B healthy", lambda: health(b_url), b)["role"] == "standby"
        with httpx.Client(headers=AUTH, timeout=10) as c:
            # both take observations (the standby stores them; the leader feeds them to its forecaster)
            for k, base in enumerate([a_url, b_url] * 5):
                r = c.post(base + "/v1/observations", json={"observations": [
                    {"model": M, "tenant": f"t{k % 2}", "interval_s": 60, "arrivals": 600.0 + k}]})
                assert r.status_code == 202, r.text
                acked += r.json()["ids"]
            r = c.post(a_url + "/v1/replan")
            assert r.status_code == 200, r.text
            leader_plan = r.json()["plan_id"]
            r = c.post(b_url + "/v1/replan")
            assert r.status_code == 503 and "standby" in r.json()["detail"] and r.headers["Retry-After"]
            assert c.delete(b_url + "/v1/observations", params={"ids": str(acked[0])}).status_code == 503
            # the standby serves the leader's plan (from the database, within its 1-s follow)
            wait_for("B serving the leader's plan", lambda: c.get(b_url + "/v1/plan").json()["id"] == leader_plan)
            pa_body, pb_body = c.get(a_url + "/v1/plan").json(), c.get(b_url + "/v1/plan").json()
            assert pa_body["replicas"] == pb_body["replicas"] and pa_body["id"] == pb_body["id"]
            os.kill(a.pid, signal.SIGKILL)
            a.wait(timeout=10)
            # the lease (2 s) expires and B takes over, from the newest stored plan
            assert wait_for("B leading", lambda: (health(b_url) or {}).get("role") == "leader", b)
            r = c.post(b_url + "/v1/observations", json={"observations": [
                {"model": M, "tenant": "t0", "interval_s": 60, "arrivals": 900.0}]})
            assert r.status_code == 202
            acked += r.json()["ids"]
            r = c.post(b_url + "/v1/replan")
            assert r.status_code == 200, r.text
            assert r.json()["plan_id"] > leader_plan and r.json()["diff"]["previous_plan_id"] == leader_plan
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()
        code = stop(b) if b is not None else 0
        log.close()
    assert code == 0, (tmp_path / "serve.log").read_text()[-2000:]
    store_missing = set(acked) - Store(db).observation_ids()
    assert not store_missing, f"{len(store_missing)} acknowledged observations lost"
    engine = create_engine(normalize_url(db))
    with engine.connect() as c:
        epochs = [int(e) for (e,) in c.execute(select(plans.c.epoch).order_by(plans.c.id))]
        (lease_epoch,) = c.execute(select(leases.c.epoch)).one()
    engine.dispose()
    # one leader at a time: the history never goes back to an earlier leader's epoch
    assert epochs == sorted(epochs) and len(set(epochs)) == 2 and epochs[-1] == lease_epoch, epochs
