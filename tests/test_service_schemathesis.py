"""Schemathesis against a running `fleetplan serve` on 127.0.0.1: requests generated from the service's own OpenAPI
document, a fixed number per operation, must get no server error (5xx other than the documented 503) and only
documented status codes, content types, headers and bodies that match the documented schemas.

On main every response schema was `{}` and a lone surrogate in a label gave 500. A second service on the same
database (a standby) is fuzzed with valid requests too: its leader-only answers (503) are documented as well.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
import pytest
from service_support import SERVE_SCENARIO, free_port, http_get, wait_until

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is a dev extra: pip install -e '.[dev]'")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402
from schemathesis.checks import (  # noqa: E402
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

pytestmark = pytest.mark.xdist_group("schemathesis")

TOKEN = "fuzz-token-1234"
EXAMPLES = 15  # per operation and run: bounded, at most 450 requests in all


def _serve(db: str, log) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "FLEETPLAN_TOKEN": TOKEN}
    proc = subprocess.Popen([sys.executable, "-m", "fleetplan.cli.main", "serve", "--scenario", SERVE_SCENARIO,
                             "--db", db, "--host", "127.0.0.1", "--port", str(port), "--interval", "0",
                             "--resolve-every", "0", "--resolve-time-limit", "5", "--log-level", "warning"],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    wait_until("the service healthy", lambda: http_get(base + "/healthz", timeout=1).status_code == 200, proc=proc,
               ignore=(httpx.HTTPError,), poll_s=0.1)
    return proc, base


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def replicas(tmp_path_factory):
    """{'leader': base URL, 'standby': base URL}: two services on one database (the second is a standby)."""
    tmp = tmp_path_factory.mktemp("fuzz")
    log = open(tmp / "serve.log", "wb")
    db = f"sqlite:///{tmp}/f.db"
    procs = []
    try:
        leader, base = _serve(db, log)
        procs.append(leader)
        standby, standby_base = _serve(db, log)
        procs.append(standby)
        yield {"leader": base, "standby": standby_base}
    finally:
        for p in procs:
            _stop(p)
        log.close()


CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance]


@pytest.mark.parametrize(("role", "mode"), [("leader", GenerationMode.POSITIVE), ("leader", GenerationMode.NEGATIVE),
                                            ("standby", GenerationMode.POSITIVE)],
                         ids=["valid", "invalid", "valid-on-a-standby"])
def test_the_running_service_conforms_to_its_openapi_document(replicas, role, mode):
    service = replicas[role]
    # (schemathesis's own pytest loader does not run under pytest 9, so each operation gets a hypothesis test here)
    schema = schemathesis.openapi.from_url(service + "/openapi.json")
    labels = []
    for result in schema.get_all_operations():
        op = result.ok()
        labels.append(op.label)

        @given(case=op.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def run(case):
            response = case.call(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
            # a standby's 503 for a leader-only request is its documented answer, not a server error
            standby_refusal = role == "standby" and response.status_code == 503 and "standby" in response.text
            case.validate_response(response, checks=[c for c in CHECKS if c is not not_a_server_error or
                                                     not standby_refusal])

        try:
            run()
        except Unsatisfiable:
            # an operation without parameters or body has no invalid request to make
            assert mode is GenerationMode.NEGATIVE and not list(op.iter_parameters()) and not op.body, op.label
            labels.remove(op.label)
    # every endpoint was exercised with valid requests; those that take input with invalid ones too
    assert len(labels) >= (10 if mode is GenerationMode.POSITIVE else 4), labels
    assert "GET /v1/leader" in labels or mode is GenerationMode.NEGATIVE
