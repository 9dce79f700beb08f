"""Measured profiles as planner and simulator input: the readers (vllm bench serve, guidellm, step-time CSV,
AIBrix), capacity from serving points (interpolated between measured rates only, refusals explained), the
scenario key and --profile option, capacity_source in plans, and the replay's step model from a profile.

Fixture files (tests/data/profiles/) are written in the real formats with illustrative numbers: vLLM's
vllm/benchmarks/serve.py result keys, guidellm's report schema (benchmarks[].config.strategy, metrics with
successful/incomplete/errored/total distributions and p001..p999 percentiles)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from fleetplan.cli.main import main as cli
from fleetplan.costmodels.demand import TokenMix
from fleetplan.costmodels.profile_capacity import MeasuredProfile, measured_replica_capacity, serving_profile_capacity
from fleetplan.costmodels.slo import SLO
from fleetplan.datasets.catalog.names import get_gpu, get_model
from fleetplan.datasets.profiles import (
    detect_profile_format,
    load_profile,
    profile_files,
    read_step_csv,
)
from fleetplan.errors import InputError
from fleetplan.outputs.planio import plan_to_dict
from fleetplan.placement.validate import validate
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.profiles import parse_profile_option, scenario_profiles, with_profiles
from fleetplan.scenario.read import load_scenario
from fleetplan.simulator.fleet import FleetBuilder
from fleetplan.solvers.solve import solve

DATA = Path(__file__).parent / "data" / "profiles"
VLLM_GLOB = str(DATA / "vllm-*qps-Llama-3.1-8B-Instruct-h100.json")
MIX = TokenMix(1000, 1100, 200, 220)  # the vllm fixtures ran 1,000 prompt / 200 output tokens


def vllm_profile() -> MeasuredProfile:
    return load_profile(profile_files(VLLM_GLOB))


def test_vllm_bench_reader_points_percentiles_and_mix():
    p = vllm_profile()
    assert p.format == "vllm-bench" and p.model == "meta-llama/Llama-3.1-8B-Instruct"
    # Four runs at 2, 4, 8, 16 req/s offered; the points are the measured throughputs, ascending.
    assert [pt.req_per_s for pt in p.points] == [1.98, 3.97, 7.92, 15.6]
    assert p.points[2].latency_s["ttft"][95.0] == pytest.approx(0.110)   # p95_ttft_ms 110.0
    assert p.points[2].latency_s["ttft"][50.0] == pytest.approx(0.049)   # median_ttft_ms 49.0
    assert p.points[3].latency_s["tpot"][99.0] == pytest.approx(0.025)   # p99_tpot_ms 25.0
    assert "e2e" in p.points[0].latency_s and "itl" not in p.points[0].latency_s
    # No input_lens saved: means from the totals (1,000,000 / 1000 and 200,000 / 1000), p95 unknown.
    assert (p.input_tokens_mean, p.output_tokens_mean, p.input_tokens_p95) == (1000.0, 200.0, None)
    assert p.points[0].load == "rate 2 req/s" and not p.closed_loop


def test_vllm_bench_jsonl_burst_runs_and_mixed_models(tmp_path):
    recs = [json.loads(f.read_text()) for f in profile_files(VLLM_GLOB)]
    burst = dict(recs[0], request_rate="inf", max_concurrency=None)
    f = tmp_path / "appended.json"
    f.write_text("\n".join(json.dumps(r) for r in recs + [burst]))  # vllm bench serve --append-result
    p = load_profile([f])
    assert len(p.points) == 4 and "burst run" in p.notes[0]
    conc = dict(recs[0], request_rate="inf", max_concurrency=16)
    f.write_text(json.dumps(conc))
    assert load_profile([f]).closed_loop and "concurrency 16" in load_profile([f]).points[0].load
    f.write_text(json.dumps(dict(recs[0], model_id="other/model")) + "\n" + json.dumps(recs[1]))
    with pytest.raises(InputError, match="different models"):
        load_profile([f])
    f.write_text(json.dumps({"completed": 3}))
    with pytest.raises(InputError, match="cannot tell the profile's format"):
        load_profile([f])


def test_serving_capacity_interpolates_between_measured_rates():
    p = vllm_profile()
    rate, limiting, why, lat = serving_profile_capacity(p, MIX, SLO(0.2, 0.015))
    # 7.92 req/s meets both (TTFT p95 0.110 s, TPOT p95 11.8 ms); 15.6 misses both (0.390 s, 21.5 ms).
    # TTFT crosses 0.2 s at 7.92 + 7.68 × (200 − 110) / (390 − 110) = 10.3886 req/s;
    # TPOT crosses 15 ms at 7.92 + 7.68 × (15 − 11.8) / (21.5 − 11.8) = 10.4536: TTFT binds.
    assert rate == pytest.approx(7.92 + 7.68 * 90 / 280) and limiting == "ttft" and why == ""
    assert lat["ttft"] == pytest.approx(0.2)
    assert lat["tpot"] == pytest.approx(0.0118 + (0.0215 - 0.0118) * 90 / 280)


def test_serving_capacity_never_extrapolates_and_explains_refusals():
    p = vllm_profile()
    rate, limiting, _, _ = serving_profile_capacity(p, MIX, SLO(2.0, 0.1))
    assert rate == 15.6 and limiting == "profile_range"      # holds at the largest measured rate: capped there
    rate, limiting, why, _ = serving_profile_capacity(p, MIX, SLO(0.05, 0.1))
    assert rate == 0.0 and "lowest measured load" in why     # TTFT p95 61 ms at 1.98 req/s > 50 ms
    rate, limiting, why, _ = serving_profile_capacity(p, MIX, SLO(0.2, 0.015, attainment=0.999))
    # attainment 0.999 over two targets: each sized at q = 1 − 0.001/2 = 0.9995; the files stop at p99.
    assert rate == 0.0 and limiting == "profile_percentile" and "p99.95" in why
    rate, limiting, why, _ = serving_profile_capacity(p, TokenMix(3000, 4000, 200, 300), SLO(0.2, 0.015))
    assert rate == 0.0 and limiting == "profile_mix" and "mean prompt 1000 vs 3000" in why
    # A p90 target is read at the next measured percentile, p95 (conservative): the same answer as a p95 target.
    r90, _, _, _ = serving_profile_capacity(p, MIX, SLO(0.2, 0.015, ttft_percentile=90, tpot_percentile=90))
    assert r90 == pytest.approx(7.92 + 7.68 * 90 / 280)


def test_guidellm_reader():
    p = load_profile([DATA / "guidellm-8b-a100.json"])
    assert p.format == "guidellm" and detect_profile_format(DATA / "guidellm-8b-a100.json") == "guidellm"
    # The throughput (burst) benchmark is left out; synchronous is a closed-loop point.
    assert [pt.req_per_s for pt in p.points] == [1.05, 3.96, 7.81] and p.closed_loop
    assert "throughput (burst)" in p.notes[0]
    # TPOT from inter_token_latency_ms p95 (ms -> s); TTFT p95 at 4 req/s is 118 ms.
    assert p.points[1].latency_s["tpot"][95.0] == pytest.approx(0.0181)
    assert p.points[1].latency_s["ttft"][95.0] == pytest.approx(0.118)
    assert p.points[0].latency_s["ttft"][99.9] > p.points[0].latency_s["ttft"][99.0]
    assert (p.input_tokens_mean, p.input_tokens_p95, p.output_tokens_mean) == (512.0, 512.0, 128.0)
    # TTFT p95 <= 0.3 s: 3.96 ok (0.118), 7.81 misses (0.402): 3.96 + 3.85 × (0.3 − 0.118) / (0.402 − 0.118).
    rate, lim, _, _ = serving_profile_capacity(p, TokenMix(512, 512, 128, 128), SLO(0.3, 0.05))
    assert rate == pytest.approx(3.96 + 3.85 * 0.182 / 0.284) and lim == "ttft"


def test_step_csv_reader_interpolation_and_range():
    st = read_step_csv(DATA / "steps-8b-a100.csv")
    assert st.prefill_time_s(768) == pytest.approx((0.036 + 0.068) / 2)     # halfway 512 -> 1024
    assert math.isinf(st.prefill_time_s(5000))                              # beyond 4,096: not measured
    assert st.decode_step_time_s(48, 512) == pytest.approx((0.015 + 0.019) / 2)
    # Context 1280 is halfway between 512 and 2048: the mean of 19 ms and 22.2 ms at batch 64.
    assert st.decode_step_time_s(64, 1280) == pytest.approx((0.019 + 0.0222) / 2)
    assert math.isinf(st.decode_step_time_s(129, 512)) and math.isinf(st.decode_step_time_s(8, 3000))
    r = st.for_replay()
    assert r.prefill_time_s(5096) == pytest.approx(0.298 + (0.298 - 0.139) / 2048 * 1000)


def test_step_csv_errors(tmp_path):
    f = tmp_path / "s.csv"
    f.write_text("phase,prompt_tokens,batch,context_tokens,time_ms\nprefil,128,1,,14\n")
    with pytest.raises(InputError, match="prefill or decode"):
        read_step_csv(f)
    f.write_text("phase,prompt_tokens,batch,context_tokens,time_ms\nprefill,128,1,,14\n")
    with pytest.raises(InputError, match="no decode rows"):
        read_step_csv(f)
    f.write_text("phase,prompt_tokens,batch,context_tokens\nprefill,128,1,\n")
    with pytest.raises(InputError, match="time_ms or time_s"):
        read_step_csv(f)


def test_measured_capacity_from_step_times_refuses_beyond_range():
    model, gpu = get_model("Llama-3.1-8B"), get_gpu("A100-SXM4-80GB")
    prof = load_profile([DATA / "steps-8b-a100.csv"], tp=1, model=model.name, gpu=gpu.name)
    c = measured_replica_capacity(prof, TokenMix(500, 1000, 150, 300), SLO(1.0, 0.05), model=model, gpu=gpu, tp=1)
    assert c.req_per_s > 0 and c.source.startswith("measured step-csv")
    long = measured_replica_capacity(prof, TokenMix(3000, 6000, 150, 300), SLO(5.0, 0.05), model=model, gpu=gpu,
                                     tp=1)
    assert long.req_per_s == 0 and "measure longer prompts" in long.reason
    # A rate-only profile cannot size a shared GPU (co-residence was not measured).
    shared = measured_replica_capacity(vllm_profile(), MIX, SLO(0.2, 0.015), model=model,
                                       gpu=get_gpu("H100-SXM-80GB"), tp=1, residents=2)
    assert shared.req_per_s == 0 and shared.limiting == "profile_shared"


def test_throughput_table_needs_an_slo_that_implies_the_scenarios(tmp_path):
    model, gpu = get_model("Llama-3.1-8B"), get_gpu("A100-SXM4-80GB")
    doc = {"gpu": "a100", "indexes": [[128, 256], [512, 1024]], "tputs": [[9.0, 6.0], [7.0, 4.0]],
           "slos": {"percentile": 99, "ttft": 0.5, "tpot": 0.05}}
    f = tmp_path / "t.json"
    f.write_text(json.dumps(doc))
    prof = load_profile([f])
    mix = TokenMix(400, 900, 100, 200)  # p95 900 in -> 1024 bucket, 200 out -> 256 bucket: tputs[1][1] = 4.0
    c = measured_replica_capacity(prof, mix, SLO(1.0, 0.1), model=model, gpu=gpu, tp=1)
    assert c.req_per_s == 4.0 and c.ttft_p95_s == 0.5 and c.tpot_p95_s == 0.05
    c = measured_replica_capacity(prof, mix, SLO(0.3, 0.1), model=model, gpu=gpu, tp=1)
    assert c.req_per_s == 0 and "does not imply TTFT" in c.reason


def test_parse_profile_option():
    assert parse_profile_option("Llama-3.1-8B@H100:tp2:guidellm=r.json") == ("Llama-3.1-8B", "H100", 2,
                                                                             "guidellm", "r.json")
    assert parse_profile_option("Llama-3.1-8B@H100=b/*.json") == ("Llama-3.1-8B", "H100", 1, None, "b/*.json")
    with pytest.raises(InputError, match="MODEL@GPU"):
        parse_profile_option("bench.json")
    with pytest.raises(InputError, match="neither tpN nor a format"):
        parse_profile_option("Llama-3.1-8B@H100:tp=x.json")


SCENARIO = """
name: measured
options: {window_length_s: 21600}
sites:
  - name: aws:us-east-1
    inventory:
      - {gpu: H100, nodes: 4, gpus_per_node: 8}
models:
  - name: Llama-3.1-8B
    tp: [1, 2]
    slo: {ttft_p95_s: 0.2, tpot_p95_s: 0.015}
    token_mix: {input_tokens_mean: 1000, input_tokens_p95: 1100, output_tokens_mean: 200, output_tokens_p95: 220}
    demand: {rates: [5, 20, 40, 12]}
"""


def _scenario_dir(tmp_path: Path, with_key: bool) -> Path:
    (tmp_path / "bench").mkdir()
    for f in profile_files(VLLM_GLOB):
        shutil.copy(f, tmp_path / "bench" / f.name)
    text = SCENARIO
    if with_key:
        text = text.replace("    demand:", "    profiles:\n      - {gpu: H100, tp: 1, file: bench/*.json}\n    demand:")
    (tmp_path / "s.yaml").write_text(text)
    return tmp_path / "s.yaml"


def test_scenario_key_drives_planner_and_plan_rows(tmp_path):
    sc = load_scenario(_scenario_dir(tmp_path, True))
    assert set(scenario_profiles(sc)["Llama-3.1-8B"]) == {("H100-SXM-80GB", 1)}
    problem = build_problem(sc)
    opts = {(o.pool.split("/")[-1], o.tp): o for o in problem.options}
    measured = opts[("H100-SXM-80GB", 1)]
    assert measured.capacity_req_per_s == pytest.approx(7.92 + 7.68 * 90 / 280)   # as in the interpolation test
    assert measured.capacity_source.startswith("measured vllm-bench bench/*.json (4 load levels")
    assert measured.ttft_p95_s == pytest.approx(0.2)
    assert opts[("H100-SXM-80GB", 2)].capacity_source.startswith("roofline (H100")
    plan = solve(problem, "highs", time_limit_s=30)
    assert validate(problem, plan).ok
    d = plan_to_dict(problem, plan)
    assert d["replicas"] and all(r["capacity_source"] for r in d["replicas"])


def test_cli_profile_option_and_replay_note(tmp_path):
    path = _scenario_dir(tmp_path, False)
    runner = CliRunner()
    out = tmp_path / "plan.json"
    res = runner.invoke(cli, ["plan", str(path), "--profile", f"Llama-3.1-8B@H100:tp1={tmp_path}/bench/*.json",
                              "--no-baselines", "--out", str(out), "--format", "json"])
    assert res.exit_code == 0, res.output
    d = json.loads(out.read_text())
    srcs = {(r["gpu"], r["tp"]): r["capacity_source"] for r in d["replicas"]}
    assert any(s.startswith("measured vllm-bench") for s in srcs.values())
    # The plan file embeds the profile, so its replay reads the same source and says it uses the roofline.
    assert d["scenario"]["raw"]["models"][0]["profiles"][0]["gpu"] == "H100"
    sc = with_profiles(load_scenario(path), [f"Llama-3.1-8B@H100:tp1={tmp_path}/bench/*.json"])
    assert scenario_profiles(sc)["Llama-3.1-8B"][("H100-SXM-80GB", 1)].format == "vllm-bench"
    res = runner.invoke(cli, ["simulate", str(out), "--slice", "120"])
    assert res.exit_code == 0, res.output
    assert "has no step times; the replay uses the roofline" in " ".join(res.output.split())
    res = runner.invoke(cli, ["plan", str(path), "--profile", "Nope@H100=x.json"])
    assert res.exit_code != 0 and "Nope" in res.output


def test_replay_takes_step_times_from_a_step_profile(tmp_path):

    shutil.copy(DATA / "steps-8b-a100.csv", tmp_path / "steps.csv")
    text = (SCENARIO.replace("{gpu: H100, nodes: 4", "{gpu: A100-SXM4-80GB, nodes: 4")
            .replace("tp: [1, 2]", "tp: [1]").replace("slo: {ttft_p95_s: 0.2, tpot_p95_s: 0.015}",
                                                     "slo: {ttft_p95_s: 1.0, tpot_p95_s: 0.05}")
            .replace("    demand:", "    profiles:\n      - {gpu: A100-SXM4-80GB, file: steps.csv}\n    demand:"))
    (tmp_path / "s.yaml").write_text(text)
    sc = load_scenario(tmp_path / "s.yaml")
    problem = build_problem(sc)
    (opt,) = problem.options
    assert opt.capacity_source.startswith("measured step-csv steps.csv (step times)")
    plan = solve(problem, "highs", time_limit_s=30)
    assert validate(problem, plan).ok
    fb = FleetBuilder(problem, plan, sc)
    sm = fb.step_model("Llama-3.1-8B", opt.pool, 1, 1, None)
    # The replay's prefill is the measured curve: 768 tokens halfway between 36 ms (512) and 68 ms (1,024).
    assert float(sm.prefill(768)) == pytest.approx(0.052, rel=0.02)
    assert sm.decode(64, 512) == pytest.approx(0.019, rel=0.05)
    assert any("step times from measured step-csv" in n and "extends them linearly" in n for n in fb.notes)
