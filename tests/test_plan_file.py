"""Plan files read through the PlanFile model: wrong types and unknown keys refused, derived figures re-checked."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from scenario_support import SMALL

from fleetplan.cli.main import main
from fleetplan.errors import InputError
from fleetplan.outputs.planio import load_plan_file
from fleetplan.placement.validate import validate
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.read import scenario_from_raw

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
    # 10**300 and 10**10 replicas raised OverflowError / MemoryError in validate's per-GPU lists; the schema's
    # sanity bound (MAX_PLAN_COUNT) refuses them, and a huge number is shown by its size, not its 301 digits
    (("replicas", 0, "counts", 0), 10**300, "field 'replicas[0].counts[0]': about 10^300 is outside 0..1e+06"),
    (("replicas", 0, "counts", 0), 10**10, "field 'replicas[0].counts[0]': 10000000000 is outside 0..1e+06"),
    (("commitments",), [{"pool": "x", "gpus": 10**300, "committed_usd_per_gpu_hour": 1.0,
                           "committed_price_source": "x"}], "about 10^300 is outside 0..1e+06"),
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


def test_count_beyond_the_pool_refused_without_building_lists(tmp_path):
    # Within the schema's bound but beyond the pool: replicas[0] is tp 4 on aws:us-east-1/H100-SXM-80GB, 2 nodes
    # x 8 = 16 GPUs, so at most 16 // 4 = 4 replicas; 999,999 is refused by validate, naming option and window.
    d = _edit(("replicas", 0, "counts", 5), 999_999)
    assert (d["replicas"][0]["pool"], d["replicas"][0]["tp"]) == ("aws:us-east-1/H100-SXM-80GB", 4)
    r = _export(tmp_path, d)
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert ("window 5: 999999 replicas of 4 GPUs each do not fit the 16 GPUs of pool aws:us-east-1/H100-SXM-80GB; "
            "give at most 4 replicas") in r.output, r.output


def test_validate_refuses_a_huge_count_without_allocating():
    # Past the schema (a Plan built in code): validate must answer at once, not build 4 * 10**300 list entries.
    problem, plan, _, _ = load_plan_file(PLAN)
    key = next(iter(plan.replicas))
    counts = list(plan.replicas[key])
    counts[0] = 10**300
    report = validate(problem, dataclasses.replace(plan, replicas={**plan.replicas, key: tuple(counts)}))
    assert not report.ok and "window 0: about 10^300 replicas" in report.violations[0], report.violations


# The golden plan: cost 899.0809, lower bound 894.7335, gap (899.0809 - 894.7335) / 899.0809 = 0.48%, status optimal.
@pytest.mark.parametrize("path, value, field", [
    (("lower_bound_usd_per_day",), 99999.0, "lower_bound_usd_per_day"),   # a bound above the cost passed silently
    (("gap",), 0.5, "gap"),                                               # gap 0.5 with status optimal passed
    (("baselines", "dedicated_peak", "cost_usd_per_day"), 1.0,            # a baseline below the proven bound
     "baselines.dedicated_peak.cost_usd_per_day"),
    (("scenario", "window_length_s"), 1800.0, "scenario.window_length_s"),  # was ignored
])
def test_edited_solver_report_refused(tmp_path, path, value, field):
    r = _export(tmp_path, _edit(path, value))
    assert r.exit_code == 2 and f"field '{field}'" in r.output and "Traceback" not in r.output, r.output


def test_optimal_beyond_the_requested_gap_refused(tmp_path):
    # bound and gap edited consistently (bound = cost x 0.5, gap 0.5): status optimal needs gap <= requested_gap.
    d = json.loads(PLAN.read_text())
    d.update(lower_bound_usd_per_day=d["cost_usd_per_day"] * 0.5, gap=0.5, requested_gap=0.005)
    r = _export(tmp_path, d)
    assert r.exit_code == 2 and "status optimal with a gap of 50.00%, above the requested 0.50%" in r.output, r.output


def test_edits_get_one_advice(tmp_path):
    # A changed replica count (refused by validate's cost check) and a changed capacity (refused by the derived
    # check) say the same thing: the file cannot be hand-edited, and how to get other counts.
    d = json.loads(PLAN.read_text())
    d["replicas"][0]["counts"][0] += 1
    r1 = _export(tmp_path, d)
    r2 = _export(tmp_path, _edit(("replicas", 0, "capacity_req_per_s"), 1.0))
    for r in (r1, r2):
        assert r.exit_code == 2 and "cannot be hand-edited" in r.output and "min_replicas" in r.output, r.output


def test_bad_embedded_scenario_is_blamed_on_the_plan_file(tmp_path):
    r = _export(tmp_path, _edit(("scenario", "raw", "models", 0, "tp"), [3]))
    assert r.exit_code == 2 and "field 'scenario.raw.models[0].tp[0]'" in r.output, r.output
    assert "plan file's copy" in r.output, r.output


def test_plan_file_from_before_the_vllm_v1_default_keeps_its_engine(tmp_path):
    # A plan file written while a scenario without an engine key was planned for prefill-first (replica rows say
    # mode prefill-first, the embedded scenario has no engine key) is rebuilt with that engine, not the new default:
    # its capacities are the ones it was planned with, so it loads and replays as planned.
    # (a TTFT target of 0.3 s: where the two engines' capacities differ; at 1.5 s this scenario's are equal)
    text = SMALL.replace("ttft_p95_s: 1.5", "ttft_p95_s: 0.3")
    scen = tmp_path / "small.yaml"
    scen.write_text(text.replace("options: {", "options: {engine: {mode: prefill-first}, "))
    f = tmp_path / "plan.json"
    r = CliRunner().invoke(main, ["plan", str(scen), "--out", str(f), "--no-baselines"])
    assert r.exit_code == 0, r.output
    d = json.loads(f.read_text())
    del d["scenario"]["raw"]["options"]["engine"]  # as an older file embeds it
    assert {row["engine"]["mode"] for row in d["replicas"]} == {"prefill-first"}
    f.write_text(json.dumps(d))
    problem, plan, _, _ = load_plan_file(f)
    assert validate(problem, plan).ok
    assert {o.engine.mode for o in problem.options if o.engine is not None} == {"prefill-first"}
    # the new default sizes the same options differently, so without the pin the file would not hold
    v1 = build_problem(scenario_from_raw(yaml.safe_load(text)))
    assert {o.engine.mode for o in v1.options if o.engine is not None} == {"vllm-v1"}
    before = {o.key: o.capacity_req_per_s for o in problem.options}
    assert any(abs(o.capacity_req_per_s - before[o.key]) > 1e-6 for o in v1.options)


def test_a_shared_gpu_states_its_capacity_and_load_beside_the_load_it_is_given(tmp_path):
    # The README's small scenario with 16 req/s in its last hour plans Llama-3.1-8B alone on a shared GPU all day
    # beside one dedicated replica in the last hour; windows[].capacity_req_per_s counts the shared GPU's allocated
    # load (1.0 in window 0: exactly the demand), not what it could serve (issue 28). Its shared_gpus entry now says
    # both: capacity_req_per_s (the share option's capacity) and load_share = served / capacity per window.
    sc = tmp_path / "s.yaml"
    sc.write_text(SMALL.replace("rates: [1.0, 4.0, 12.0]", "rates: [1.0, 4.0, 16.0]"))
    out = tmp_path / "plan.json"
    res = CliRunner().invoke(main, ["plan", str(sc), "--no-baselines", "--out", str(out)])
    assert res.exit_code == 0, res.output
    problem, plan, _sc, d = load_plan_file(out)
    assert validate(problem, plan).ok
    (g,) = d["shared_gpus"]
    assert g["models"] == ["Llama-3.1-8B"]
    cap = g["capacity_req_per_s"]["Llama-3.1-8B"]
    assert cap == problem.share_by_key[("Llama-3.1-8B", g["pool"])].capacity_req_per_s
    served = g["served_req_per_s"]["Llama-3.1-8B"]
    assert g["load_share"] == pytest.approx([s / cap for s in served])
    assert served[0] == pytest.approx(1.0) and d["windows"][0]["capacity_req_per_s"]["Llama-3.1-8B"] == \
        pytest.approx(1.0)  # window 0 has no dedicated replica: the figure is the shared GPU's load
    assert all(x <= 1 - problem.margin + 1e-9 for x in g["load_share"])
    assert "1 GPU, all day; load " in res.output
    # A file written before the two keys existed still reads; an edited load is refused like any derived figure.
    old = json.loads(out.read_text())
    for k in ("capacity_req_per_s", "load_share"):
        del old["shared_gpus"][0][k]
    out.write_text(json.dumps(old))
    load_plan_file(out)
    old["shared_gpus"][0]["load_share"] = [0.0] * len(served)
    out.write_text(json.dumps(old))
    with pytest.raises(InputError, match="shared_gpus"):
        load_plan_file(out)
