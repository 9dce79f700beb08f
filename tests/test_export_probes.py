"""The exported vLLM containers have a startup probe: vLLM downloads and loads its weights for minutes, and without one
a liveness probe (or an impatient operator's) restarts a server that is still loading."""

from __future__ import annotations

from pathlib import Path

import yaml

from fleetplan.export.k8s import STARTUP_MIN_S, _probe, _probes

GOLDEN = Path(__file__).parent / "golden" / "export"


def _containers(doc: dict):
    spec = doc.get("spec", {})
    if doc.get("kind") == "Deployment":
        yield from spec["template"]["spec"]["containers"]
    elif doc.get("kind") == "LeaderWorkerSet":
        yield from spec["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"]


def test_every_exported_vllm_container_may_start_for_at_least_30_minutes():
    seen = 0
    for path in sorted(GOLDEN.rglob("window-*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            for c in _containers(doc or {}):
                seen += 1
                ready, live, start = c["readinessProbe"], c["livenessProbe"], c["startupProbe"]
                check = {k: v for k, v in ready.items() if k not in ("periodSeconds", "failureThreshold")}
                assert {k: v for k, v in start.items() if k in check} == check, path  # the same /health check
                assert {k: v for k, v in live.items() if k in check} == check, path
                # 180 tries x 10 s = 1,800 s before liveness may restart it
                assert start["failureThreshold"] * start["periodSeconds"] >= STARTUP_MIN_S, path
    assert seen >= 4


def test_a_slow_load_gets_four_times_its_load_time():
    c: dict = {}
    _probes(c, _probe(8000, []), load_s=1000.0)
    assert c["startupProbe"]["failureThreshold"] == 400  # 4 x 1,000 s / 10 s
    _probes(c, _probe(8000, []), load_s=20.0)
    assert c["startupProbe"]["failureThreshold"] == 180  # the 1,800-s floor
