"""What the re-planner service's tests share: the bearer token, a fixed 20:00 UTC start, the model most tests
observe, and a clock the tests move by hand (the service takes ``clock=`` so nothing waits on real time)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from fleetplan.service.store import normalize_url

TOKEN = "test-token-123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
T0 = 1_700_000_000.0 - (1_700_000_000.0 % 86400) + 20 * 3600  # 20:00 UTC of some day
M = "Llama-3.1-8B"
#: The scenario a test gives a real `fleetplan serve` process (--scenario): two models (Llama-3.1-8B, Qwen2.5-7B) on
#: two H100 nodes, which starts in about a quarter of the default scenario's CPU time (the file says why).
SERVE_SCENARIO = str(Path(__file__).parent / "data" / "scenarios" / "service_small.yaml")


class Clock:
    """A clock for the service: returns ``t``, seconds since the epoch, which a test sets."""

    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


#: The longest a test polls for a condition (a service started, a round committed, a scrape made) before it fails:
#: a safety stop, not a speed target. Tests return as soon as the condition holds, so it is generous (a busy machine
#: passes); FLEETPLAN_TEST_WAIT_S sets another.
WAIT_S = float(os.environ.get("FLEETPLAN_TEST_WAIT_S", "600"))


def wait_until(what: str, cond: Callable[[], Any], *, proc: Any = None, ignore: tuple[type[BaseException], ...] = (),
               poll_s: float = 0.05, timeout_s: float | None = None) -> Any:
    """Poll ``cond()`` until it returns a truthy value, and return that value (readiness polling, never a fixed
    wait). An exception of a type in ``ignore`` (e.g. httpx.HTTPError while a server starts) counts as not yet.
    Fails the test naming ``what`` when the process ``proc`` (a subprocess.Popen) has exited, or after
    ``timeout_s`` (default :data:`WAIT_S`) seconds."""
    import pytest

    end = time.monotonic() + (WAIT_S if timeout_s is None else timeout_s)
    while True:
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the process exited with {proc.returncode} while waiting for {what}")
        try:
            got = cond()
        except ignore:
            got = None
        if got:
            return got
        if time.monotonic() > end:
            pytest.fail(f"gave up waiting for {what} after {WAIT_S if timeout_s is None else timeout_s:g} s "
                        "(FLEETPLAN_TEST_WAIT_S)")
        time.sleep(poll_s)


_CLIENT: httpx.Client | None = None


def http_get(url: str, **kwargs: Any) -> httpx.Response:
    """``httpx.get(url, **kwargs)`` through one client kept for the test process. ``httpx.get`` builds a client, and
    with it a TLS context, on every call (about 25 ms of CPU), so a readiness poll every 0.1 s with it kept a quarter
    of a core busy while the service started; a kept client costs about 0.2 ms a call."""
    global _CLIENT
    if _CLIENT is None:
        _CLIENT = httpx.Client()
    return _CLIENT.get(url, **kwargs)


def free_port() -> int:
    """A loopback port nothing listens on now (for `fleetplan serve`, which checks its port before it starts)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- PostgreSQL for the tests that need a real server ---------------------------------------------------------------
def private_postgres():
    """Start a throw-away PostgreSQL on 127.0.0.1 (as the postgres user when run as root); yields (its URL, a
    function that stops it, a function that starts it again on the same port and data). Skips the test, saying why,
    where no server is installed or it cannot start."""
    import glob
    import os
    import shutil
    import socket
    import subprocess
    import tempfile

    import pytest

    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not bins:
        pytest.skip("PostgreSQL test skipped: no server installed (Debian's postgresql package; .ci/run installs it)")
    bindir = os.path.dirname(bins[-1])
    data = tempfile.mkdtemp(prefix="fleetplan-pg-")
    pre: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(data, "postgres", "postgres")
        pre = ["runuser", "-u", "postgres", "--"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    def start():
        subprocess.run(pre + [f"{bindir}/pg_ctl", "-D", data, "-l", f"{data}/log", "-w", "-t", "60", "-o",
                              f"-p {port} -k {data} -c listen_addresses=127.0.0.1", "start"], check=True,
                       capture_output=True, timeout=120)

    def stop(mode: str = "fast"):
        subprocess.run(pre + [f"{bindir}/pg_ctl", "-D", data, "-m", mode, "-w", "stop"], capture_output=True,
                       timeout=60)

    try:
        subprocess.run(pre + [f"{bindir}/initdb", "-D", data, "-U", "fleetplan", "--auth=trust"], check=True,
                       capture_output=True, timeout=120)
        start()
    except (subprocess.SubprocessError, OSError) as exc:
        shutil.rmtree(data, ignore_errors=True)
        pytest.skip(f"PostgreSQL test skipped: the server could not start ({exc})")
    try:
        yield f"postgresql://fleetplan@127.0.0.1:{port}/postgres", stop, start
    finally:
        stop("immediate")
        shutil.rmtree(data, ignore_errors=True)


def postgres_server_url():
    """The URL of the PostgreSQL the tests share (FLEETPLAN_TEST_POSTGRES_URL, which .ci/run sets), else of a private
    one started for the calling module (a generator: use it as a module-scoped fixture's body)."""
    import os

    url = os.environ.get("FLEETPLAN_TEST_POSTGRES_URL")
    if url:
        yield url
    else:
        yield from (u for u, _stop, _start in private_postgres())


def postgres_schema(server_url: str):
    """A fresh schema on the server (a generator: use it as a fixture's body): yields a URL whose connections use
    it (search_path), so runs never see each other's rows; the schema is dropped afterwards. Skips the test when the
    server is unreachable."""
    import uuid

    import pytest
    import sqlalchemy

    schema = "t_" + uuid.uuid4().hex[:10]
    admin = sqlalchemy.create_engine(normalize_url(server_url))
    try:
        with admin.begin() as c:
            c.execute(sqlalchemy.text(f"CREATE SCHEMA {schema}"))
    except sqlalchemy.exc.OperationalError as exc:
        admin.dispose()
        pytest.skip(f"PostgreSQL test skipped: the server at {server_url.split('@')[-1]} is unreachable ({exc.orig})")
    try:
        yield normalize_url(server_url) + ("&" if "?" in server_url else "?") + f"options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as c:
            c.execute(sqlalchemy.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()
