"""Plan files read through the PlanFile model: wrong types and unknown keys refused, derived figures re-checked."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fleetplan.cli.main import main

PLAN = Path(__file__).parent / "golden" / "export" / "default_plan.json"


def _export(tmp_path, d: dict):
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(d))
    return CliRunner().invoke(main, ["export", "vllm", str(f), "--window", "00:00"])


def _edit(path: tuple, value):
    d = json.loads(PLAN.read_text())
    cur = d
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = value
    return d


def test_untouched_plan_file_is_read(tmp_path):
    r = _export(tmp_path, json.loads(PLAN.read_text()))
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("path, value, message", [
    # int(1.5) was 1 and int("2") was 2: a fractional or string replica count was read silently
    (("replicas", 0, "counts", 3), 1.5, "field 'replicas[0].counts[3]': 1.5 must be a whole number"),
    (("replicas", 0, "counts", 3), "2", "field 'replicas[0].counts[3]': '2' must be a whole number"),
    (("replicas", 0, "tp"), 3, "field 'replicas[0].tp'"),
    (("replicas", 0, "cunts"), [1], "unknown key 'cunts' in 'replicas[0]'; did you mean 'counts'?"),
    (("costs_usd_per_day",), 1.0, "did you mean 'cost_usd_per_day'?"),
    (("status",), "great", "field 'status': plan file is malformed: status 'great' is not one of"),
])
def test_wrong_types_and_unknown_keys_refused(tmp_path, path, value, message):
    r = _export(tmp_path, _edit(path, value))
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output, r.output
    assert str(tmp_path / "plan.json") in r.output


@pytest.mark.parametrize("path, field", [
    (("gpu_hours_per_day",), "gpu_hours_per_day"),               # read by nothing before: silently ignored
    (("windows", 2, "gpus"), "windows[2].gpus"),
    (("pools", 0, "usd_per_gpu_hour"), "pools[0].usd_per_gpu_hour"),
    (("replicas", 0, "capacity_req_per_s"), "replicas[0].capacity_req_per_s"),
])
def test_edited_derived_figures_refused(tmp_path, path, field):
    d = json.loads(PLAN.read_text())
    cur = d
    for p in path[:-1]:
        cur = cur[p]
    before = cur[path[-1]]
    r = _export(tmp_path, _edit(path, before * 0.5))
    assert r.exit_code == 2, r.output
    assert f"field '{field}': says {before * 0.5!r}" in r.output and "recomputed" in r.output, r.output


def test_edited_replica_counts_are_revalidated(tmp_path):
    # Raising one count by a replica keeps the types right; the stated cost no longer matches and is refused
    # (the cost is derived: the replicas win, and the file must be re-written with the recomputed cost).
    d = copy.deepcopy(json.loads(PLAN.read_text()))
    d["replicas"][0]["counts"][0] += 1
    r = _export(tmp_path, d)
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert "cost" in r.output, r.output
