"""`fleetplan serve --prometheus` against a real Prometheus server (Debian's `prometheus` package) that scrapes a small
exporter serving vLLM's metric names; `POST /v1/replan` pulls on demand even with `--interval 0`.

The server is the one `.ci/run` starts (FLEETPLAN_TEST_PROMETHEUS_URL, with FLEETPLAN_TEST_PROMETHEUS_TARGETS the
file-based service-discovery file it watches); without it the test starts a private one when the `prometheus`
binary is installed. Where neither works the test is skipped, saying why. All traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from service_support import SERVE_SCENARIO, WAIT_S, http_get, wait_until

from fleetplan.service.store import Store

pytestmark = pytest.mark.xdist_group("prometheus")

TOKEN = "prom-test-token"
RATE_REQ_PER_S = 12.0  # the exporter's request counter grows by this much per second
SERVED = "meta-llama/Llama-3.1-8B-Instruct"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prometheus_config(targets_file: str) -> str:
    """A Prometheus configuration scraping the targets listed in ``targets_file`` every 0.5 s."""
    return ("global:\n  scrape_interval: 500ms\n  evaluation_interval: 1s\nscrape_configs:\n"
            "  - job_name: vllm\n    file_sd_configs:\n"
            f"      - files: ['{targets_file}']\n        refresh_interval: 1s\n")


class _Exporter(BaseHTTPRequestHandler):
    t0 = time.time()

    def do_GET(self):  # noqa: N802 - http.server's name
        t = time.time() - self.t0
        lab = f'{{model_name="{SERVED}"}}'
        body = "\n".join([
            "# TYPE vllm:request_success_total counter",
            f'vllm:request_success_total{{model_name="{SERVED}",finished_reason="stop"}} {RATE_REQ_PER_S * t:.3f}',
            "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{lab} 4",
            "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{lab} 0",
            "# TYPE vllm:prompt_tokens_total counter", f"vllm:prompt_tokens_total{lab} {1000 * RATE_REQ_PER_S * t:.1f}",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{lab} {200 * RATE_REQ_PER_S * t:.1f}", ""]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture(scope="module")
def prometheus():
    """(base URL, targets file) of a Prometheus server on 127.0.0.1."""
    url = os.environ.get("FLEETPLAN_TEST_PROMETHEUS_URL")
    targets = os.environ.get("FLEETPLAN_TEST_PROMETHEUS_TARGETS")
    if url and targets:
        yield url, targets
        return
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("Prometheus test skipped: no `prometheus` binary (Debian's prometheus package; "
                    ".ci/run installs it)")
    tmp = tempfile.mkdtemp(prefix="fleetplan-prom-")
    targets = os.path.join(tmp, "targets.json")
    with open(targets, "w") as f:
        f.write("[]")
    with open(os.path.join(tmp, "prometheus.yml"), "w") as f:
        f.write(prometheus_config(targets))
    port = free_port()
    log = open(os.path.join(tmp, "log"), "wb")
    proc = subprocess.Popen([binary, f"--config.file={tmp}/prometheus.yml", f"--storage.tsdb.path={tmp}/data",
                             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                            stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + WAIT_S  # a busy machine starts it slowly; it is ready when it answers
        while time.monotonic() < end and proc.poll() is None:
            try:
                if http_get(base + "/-/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        else:
            pytest.skip(f"Prometheus test skipped: the server did not start (exit {proc.poll()}; log {tmp}/log)")
        yield base, targets
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def test_serve_pulls_vllm_metrics_from_a_real_prometheus_on_replan(prometheus, tmp_path):
    base_prom, targets = prometheus
    exporter = ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    th = threading.Thread(target=exporter.serve_forever, daemon=True)
    th.start()
    with open(targets, "w") as f:
        json.dump([{"targets": [f"127.0.0.1:{exporter.server_address[1]}"], "labels": {"job": "vllm"}}], f)
    proc = None
    try:
        # the service starts (a few seconds) while Prometheus scrapes the exporter
        db = f"sqlite:///{tmp_path / 'p.db'}"
        port = free_port()
        env = {**os.environ, "FLEETPLAN_TOKEN": TOKEN}
        proc = subprocess.Popen([sys.executable, "-m", "fleetplan.cli.main", "serve", "--scenario", SERVE_SCENARIO,
                                 "--db", db, "--host", "127.0.0.1", "--port", str(port), "--interval", "0",
                                 "--resolve-every", "0",
                                 "--prometheus", base_prom, "--prometheus-window", "2", "--log-level", "warning"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # wait (bounded) until Prometheus holds 6 scrapes (2.5 s, more than the 2-s pull window) of the exporter
        query = f'count_over_time(vllm:request_success_total{{model_name="{SERVED}"}}[10s])'

        def scrapes() -> float:
            res = http_get(base_prom + "/api/v1/query", params={"query": query}, timeout=2).json()["data"]["result"]
            return float(res[0]["value"][1]) if res else 0.0

        wait_until("6 scrapes of the exporter in Prometheus", lambda: scrapes() >= 6,
                   ignore=(httpx.HTTPError, KeyError, ValueError), poll_s=0.25)
        base = f"http://127.0.0.1:{port}"
        wait_until("fleetplan serve healthy", lambda: http_get(base + "/healthz", timeout=1).status_code == 200,
                   proc=proc, ignore=(httpx.HTTPError,), poll_s=0.1)
        r = httpx.post(base + "/v1/replan", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
        assert r.status_code == 200, r.text
        assert r.json()["prometheus"] == "pulled 1 observations", r.json()  # --interval 0, pulled on demand
        (row,) = Store(db).observations_after(0)
        assert row["source"] == "prometheus" and row["model"] == "Llama-3.1-8B"
        # completions grow by 12/s and the queues are constant: demand ~ 12 req/s. Prometheus's increase()
        # extrapolates the 0.5-s scrapes to the 2-s window, so allow +-30%.
        assert 0.7 * RATE_REQ_PER_S <= row["demand_req_per_s"] <= 1.3 * RATE_REQ_PER_S, row
        metrics = http_get(base + "/metrics", timeout=5).text
        assert "fleetplan_prometheus_errors_total 0.0" in metrics
    finally:
        with open(targets, "w") as f:
            f.write("[]")
        exporter.shutdown()
        exporter.server_close()
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
