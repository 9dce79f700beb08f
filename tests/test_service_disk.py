"""A full disk: writes answer 503 and /readyz says why, nothing acknowledged is lost, and the service recovers by
itself once space is freed. The database lives on a 3 MB tmpfs the test mounts, so it needs root (CI runs as root);
elsewhere it is skipped with the reason.

The readiness probe's one-row rewrite can still fit on a full disk while every insert fails (seen: /readyz 200 while
POSTs got 503): a failed write now keeps /readyz at 503 until a write succeeds. Main's "never recovers after space is
freed" did not reproduce here (in-process and as a process on a 3 MB tmpfs, it recovered); this test keeps it so."""

from __future__ import annotations

import os
import shutil
import subprocess
import warnings

import pytest
from service_support import AUTH, TOKEN, M, wait_until

from fleetplan.service.app import create_app
from fleetplan.service.runtime import ReplanService
from fleetplan.service.settings import ServiceSettings
from fleetplan.service.store import Store

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


@pytest.fixture()
def small_volume(tmp_path):
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("full-disk test skipped: mounting a small tmpfs needs root and mount(8)")
    where = tmp_path / "vol"
    where.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(where)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"full-disk test skipped: cannot mount a tmpfs here ({r.stderr.strip()})")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_a_full_disk_is_reported_and_recovered_from(shipped, small_volume):
    problem, loads = shipped
    s = ServiceSettings(db_url=f"sqlite:///{small_volume / 'fp.db'}", token=TOKEN, interval_s=1, resolve_every_s=0,
                        lease_ttl_s=3)
    svc = ReplanService(s, problem, loads)
    filler = small_volume / "filler"
    st = os.statvfs(small_volume)
    filler.write_bytes(b"x" * (st.f_bavail * st.f_frsize - 400_000))  # leave ~400 kB for the database
    acked: list[int] = []
    with TestClient(create_app(s, svc, background=True)) as c:
        codes: list[int] = []
        for _ in range(400):  # bounded: 20 observations of ~0.4 kB per request
            r = c.post("/v1/observations", json={"observations": [
                {"model": M, "tenant": f"t{j}", "interval_s": 60, "arrivals": 60} for j in range(20)]}, headers=AUTH)
            codes.append(r.status_code)
            if r.status_code == 202:
                acked += r.json()["ids"]
            if codes[-3:] == [503] * 3:
                break
        assert codes[-1] == 503 and "full" in r.json()["detail"], r.text
        ready = c.get("/readyz")
        assert ready.status_code == 503 and "full" in ready.json()["detail"]["database"], ready.json()
        assert c.get("/healthz").status_code == 200 and c.get("/v1/plan").status_code == 200
        filler.unlink()  # space freed: the next write (the lease's renewal, a round, a POST) succeeds
        wait_until("ready again", lambda: c.get("/readyz").status_code == 200)
        r = c.post("/v1/observations", json={"observations": [{"model": M, "interval_s": 60, "arrivals": 60}]},
                   headers=AUTH)
        assert r.status_code == 202
        acked += r.json()["ids"]
        first = svc.plan_row["id"]
        wait_until("a round committed", lambda: svc.plan_row["id"] > first)  # rounds commit again
    store = Store(s.db_url)
    try:
        assert not set(acked) - store.observation_ids()
    finally:
        store.close()
