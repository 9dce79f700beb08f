"""Speculative decoding (costmodels/engine.py Speculation, costmodels/speculative.py): tokens per step, the step's
extra work, capacity, the replay, the scenario, the export flags and the break-even acceptance rate, by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from fleetplan.cli.main import main
from fleetplan.costmodels.capacity import replica_capacity, replica_capacity_from_latency
from fleetplan.costmodels.demand import TokenMix
from fleetplan.costmodels.engine import EngineConfig, Speculation, engine_from_mapping, expected_tokens_per_step
from fleetplan.costmodels.latency import decode_roofline_s, decode_step_time_s
from fleetplan.costmodels.profile_capacity import measured_replica_capacity
from fleetplan.costmodels.slo import SLO
from fleetplan.costmodels.speculative import (
    acceptance_break_even,
    per_token_decode,
    speculative_step_s,
    speed_up,
)
from fleetplan.datasets.calibration import load_calibration
from fleetplan.datasets.catalog.names import get_gpu, get_model
from fleetplan.datasets.profiles import load_profile, profile_files
from fleetplan.errors import InputError
from fleetplan.export.deployment import workloads
from fleetplan.outputs.planio import load_plan_file
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.read import load_scenario
from fleetplan.simulator.engine import DeviceSpec, EngineSpec, StepModel, run

ROOT = Path(__file__).parents[1]


def test_expected_tokens_per_step_by_hand():
    # (1 - alpha^(k+1)) / (1 - alpha): alpha 0.8, k 4: (1 - 0.32768) / 0.2 = 3.3616;
    # alpha 0.5, k 2: (1 - 0.125) / 0.5 = 1.75; alpha 0: only the target's token, 1; alpha 1: all k + 1 = 5.
    assert expected_tokens_per_step(0.8, 4) == pytest.approx(3.3616)
    assert expected_tokens_per_step(0.5, 2) == pytest.approx(1.75)
    assert expected_tokens_per_step(0.0, 4) == 1.0
    assert expected_tokens_per_step(1.0, 4) == 5.0
    assert Speculation(acceptance_rate=0.8, draft_model="x").tokens_per_step == pytest.approx(3.3616)


@pytest.mark.parametrize("kw, field", [
    ({"acceptance_rate": 1.2, "draft_model": "x"}, "engine.speculative.acceptance_rate"),
    ({"acceptance_rate": 0.5, "num_speculative_tokens": 0, "draft_model": "x"},
     "engine.speculative.num_speculative_tokens"),
    ({"acceptance_rate": 0.5}, "engine.speculative.draft_model"),
    ({"acceptance_rate": 0.5, "method": "ngram", "draft_model": "x"}, "engine.speculative.draft_model"),
    ({"acceptance_rate": 0.5, "method": "medusa"}, "engine.speculative.method"),
])
def test_bad_speculation_names_the_field(kw, field):
    with pytest.raises(InputError) as e:
        Speculation(**kw)
    assert e.value.field == field


def test_mapping_and_flags():
    e = engine_from_mapping({"speculative": {"acceptance_rate": 0.7, "num_speculative_tokens": 3,
                                             "draft_model": "Llama-3.1-8B"}})
    assert e.speculative == Speculation(acceptance_rate=0.7, num_speculative_tokens=3, draft_model="Llama-3.1-8B")
    with pytest.raises(InputError, match="acceptance_rate"):
        engine_from_mapping({"speculative": {"draft_model": "Llama-3.1-8B"}})
    with pytest.raises(InputError, match="unknown engine.speculative"):
        engine_from_mapping({"speculative": {"acceptance_rate": 0.7, "draft": "x", "draft_model": "y"}})
    flags = e.vllm_flags("meta-llama/Llama-3.1-8B")
    cfg = json.loads(flags[flags.index("--speculative-config") + 1])
    assert cfg == {"model": "meta-llama/Llama-3.1-8B", "num_speculative_tokens": 3, "method": "draft_model"}
    ng = EngineConfig(speculative=Speculation(acceptance_rate=0.5, method="ngram"))
    assert json.loads(ng.vllm_flags()[-1])["method"] == "ngram"
    assert "--speculative-config" not in EngineConfig().vllm_flags()


def test_verification_reads_once_and_computes_per_position():
    # Llama-3.1-70B on A100 tp 4, batch 8, context 1000: scoring 5 positions per sequence reads the same weights and
    # KV (memory term unchanged: a dense model) and does 5 times the compute.
    m, g = get_model("Llama-3.1-70B"), get_gpu("A100-SXM4-80GB")
    c = load_calibration(g)
    mem1, comp1 = decode_roofline_s(m, g, 8, 1000, tp=4, calib=c)
    mem5, comp5 = decode_roofline_s(m, g, 8, 1000, tp=4, calib=c, positions=5.0)
    assert mem5 == mem1 and comp5 == pytest.approx(5 * comp1)
    assert decode_step_time_s(m, g, 8, 1000, tp=4, calib=c, positions=1.0) == decode_step_time_s(m, g, 8, 1000, tp=4,
                                                                                                  calib=c)
    with pytest.raises(InputError):
        decode_step_time_s(m, g, 8, 1000, tp=4, calib=c, positions=0.5)


# Stub step times (seconds): verify(b, c, p) = 0.020 + 0.001 (p - 1) (memory-bound: flat in the batch), a draft step
# 0.002, a plain decode step 0.020. k = 4: a speculative step = 0.020 + 0.004 + 4 x 0.002 = 0.032 s.
def _verify(b, c, p):
    return 0.020 + 0.001 * (p - 1)


def _draft(b, c):
    return 0.002


def test_speculative_step_and_speed_up_by_hand():
    s = Speculation(acceptance_rate=0.8, num_speculative_tokens=4, draft_model="d")
    assert speculative_step_s(_verify, _draft, s, 1, 100) == pytest.approx(0.032)
    # per output token 0.032 / 3.3616 = 0.0095193 s; speed-up 0.020 x 3.3616 / 0.032 = 2.101
    assert per_token_decode(_verify, _draft, s)(1, 100) == pytest.approx(0.032 / 3.3616)
    assert speed_up(lambda b, c: 0.020, _verify, _draft, s, 1, 100) == pytest.approx(2.101)
    # n-gram: no draft work: 0.024 s a step
    ng = Speculation(acceptance_rate=0.8, num_speculative_tokens=4, method="ngram")
    assert speculative_step_s(_verify, None, ng, 1, 100) == pytest.approx(0.024)
    with pytest.raises(InputError):
        speculative_step_s(_verify, None, s, 1, 100)


_MIX = TokenMix(input_tokens_mean=100, input_tokens_p95=100, output_tokens_mean=100, output_tokens_p95=100)
_SLO = SLO(ttft_s=10.0, tpot_s=0.1)


def _capacity(spec: Speculation | None) -> float:
    # Capacity bounded by max_num_seqs 8 (Little's law): B = lambda x O x TPOT with TPOT = d / (1 - rho), rho =
    # lambda x p (prefill p = 1e-4 s): B reaches 8 at lambda = 8 / (O d + 8 p).
    eng = EngineConfig(mode="prefill-first", max_num_seqs=8, speculative=spec)
    decode = per_token_decode(_verify, _draft, spec) if spec is not None else (lambda b, c: 0.020)
    cap = replica_capacity_from_latency(lambda i: 1e-4, decode, _MIX, _SLO, kv_bytes_per_seq=1.0,
                                        kv_budget_bytes=1e9, per_request=False, engine=eng)
    return cap.req_per_s


def test_decode_bound_capacity_rises_by_the_speed_up():
    # no speculation: 8 / (100 x 0.020 + 0.0008) = 3.99840 req/s;
    # alpha 0.8, k 4: d = 0.032 / 3.3616 = 0.0095193, 8 / (0.95193 + 0.0008) = 8.39692 req/s (x 2.1001)
    base = _capacity(None)
    spec = _capacity(Speculation(acceptance_rate=0.8, num_speculative_tokens=4, draft_model="d"))
    assert base == pytest.approx(8 / 2.0008, rel=1e-5)
    assert spec == pytest.approx(8 / (100 * 0.032 / 3.3616 + 0.0008), rel=1e-5)
    assert spec / base == pytest.approx(2.1001, rel=1e-4)


def test_break_even_acceptance_rate_against_the_polynomial_root():
    # Capacity is equal when the per-token step equals the plain step: 0.032 / tau = 0.020, tau = 1.6, i.e.
    # 1 + a + a^2 + a^3 + a^4 = 1.6: the root of a^4 + a^3 + a^2 + a - 0.6 in [0, 1] (numpy.roots, not bisection).
    # Capacity grows with a here, so speculation pays on one range, [root, 1], and the root is the break-even.
    roots = np.roots([1, 1, 1, 1, -0.6])
    root = float(next(r.real for r in roots if abs(r.imag) < 1e-12 and 0 <= r.real <= 1))
    assert root == pytest.approx(0.3797, abs=1e-3)  # a = 0.38: 0.38 + 0.1444 + 0.0549 + 0.0209 = 0.6002
    base = _capacity(None)
    be = acceptance_break_even(
        lambda a: _capacity(Speculation(acceptance_rate=a, num_speculative_tokens=4, draft_model="d")), base)
    assert be.break_even == pytest.approx(root, abs=2e-3)
    assert len(be.pays_at) == 1 and be.pays_at[0][1] == 1.0 and be.pays_at[0][0] == be.break_even
    never, always = acceptance_break_even(lambda a: 1.0, 2.0), acceptance_break_even(lambda a: 3.0, 2.0)
    assert never.pays_at == () and never.break_even is None and "no acceptance rate sampled" in never.note()
    assert always.pays_at == ((0.0, 1.0),) and always.break_even == 0.0 and always.ranges_text() == "any"


def test_break_even_of_a_capacity_that_falls_with_the_acceptance_rate():
    # Capacity 1 + a up to a = 0.6, then 0.5 (it falls where another check starts to bind), against 1.3 without
    # speculation: it pays for 1 + a > 1.3, a > 0.3, up to 0.6 and at no higher rate. So it pays at 0.5 and there
    # is no break-even rate (no rate from which it pays at every higher one): the ranges say where it pays.
    def cap(a: float) -> float:
        return 1.0 + a if a <= 0.6 else 0.5

    be = acceptance_break_even(cap, 1.3, sample=(0.5,), tolerance=1e-4)
    assert len(be.pays_at) == 1
    lo, hi = be.pays_at[0]
    assert lo == pytest.approx(0.3, abs=1e-4) and lo > 0.3 and hi == pytest.approx(0.6, abs=1e-4) and hi <= 0.6
    assert be.pays(0.5) and not be.pays(0.2) and not be.pays(0.8)
    assert be.break_even is None and "pays only at 0.300-0.600" in be.note()
    # Two ranges: 2 below a = 0.2 and above a = 0.7, 1 between, against 1.5: pays on [0, 0.2) and (0.7, 1]; the
    # break-even is the start of the last range, 0.7, from which it pays at every higher rate.
    two = acceptance_break_even(lambda a: 2.0 if a < 0.2 or a > 0.7 else 1.0, 1.5, tolerance=1e-4)
    assert [r[0] for r in two.pays_at] == pytest.approx([0.0, 0.7], abs=1e-4)
    assert [r[1] for r in two.pays_at] == pytest.approx([0.2, 1.0], abs=1e-4)
    assert two.break_even == pytest.approx(0.7, abs=1e-4) and two.note() == ""
    with pytest.raises(InputError):
        acceptance_break_even(cap, math.nan)


def test_roofline_speculation_pays_when_memory_bound_only():
    # Llama-3.1-70B tp 4 on A100 with Llama-3.1-8B drafting 4 tokens at alpha 0.8. At a tight TPOT (35 ms) the
    # replica runs a small, memory-bound batch: speculation raises its capacity (x ~2 here). At a 100-ms TPOT its
    # batch is large and compute-bound: the 5 scored positions and the draft's passes cost more than they save.
    m, g, d = get_model("Llama-3.1-70B"), get_gpu("A100-SXM4-80GB"), get_model("Llama-3.1-8B")
    c = load_calibration(g)
    mix = TokenMix(input_tokens_mean=1000, input_tokens_p95=3000, output_tokens_mean=250, output_tokens_p95=700)
    spec = EngineConfig(mode="prefill-first",
                        speculative=Speculation(acceptance_rate=0.8, draft_model="Llama-3.1-8B", draft=d))
    for tpot, pays in ((0.035, True), (0.1, False)):
        slo = SLO(ttft_s=2.0, tpot_s=tpot)
        base = replica_capacity(m, g, mix, slo, tp=4, calib=c, engine=EngineConfig(mode="prefill-first"))
        with_spec = replica_capacity(m, g, mix, slo, tp=4, calib=c, engine=spec)
        assert (with_spec.req_per_s > base.req_per_s) is pays
    # the draft's weights are counted: 70.554e9 + 8.03e9 params x 2 bytes / 4 GPUs per GPU
    assert with_spec.weights_bytes_per_gpu == pytest.approx((m.weight_bytes("bf16") + d.weight_bytes("bf16")) / 4)
    unresolved = EngineConfig(speculative=Speculation(acceptance_rate=0.8, draft_model="Llama-3.1-8B"))
    with pytest.raises(InputError, match="not resolved"):
        replica_capacity(m, g, mix, SLO(ttft_s=2.0, tpot_s=0.05), tp=4, calib=c, engine=unresolved)


def test_replay_takes_k_plus_1_budget_tokens_and_spreads_the_chunk():
    # prefill(x) = 0.010 + 0.001 x, the per-token decode step 0.020 s; n-gram, k 1, alpha 1: tau = 2, a decoding
    # sequence takes 2 budget tokens; budget 8. A: t=0, prompt 2, 4 tokens; B: t=0.013, prompt 40.
    # [0, 0.012] A's prefill(2), first token; a decode run from 0.012 cut at 0.032 (A's 2nd token). Mixed steps with
    # A decoding: (8 - 2) / tau = 3 prompt tokens each: B 0->3 costs prefill(3) - prefill(1) = 0.002 (0.022 s
    # step, A's 3rd token at 0.054), B 3->6 costs 0.003 (0.023 s, A's 4th and last at 0.077). Without speculation
    # the chunks are 7 tokens and A ends at 0.085 (test_chunked_prefill).
    sm = StepModel(lambda x: 0.010 + 0.001 * x, lambda b, c: 0.020, kv_bytes_per_token=1.0, kv_budget_bytes=1e6,
                   max_tokens=64)
    eng = EngineConfig(max_num_batched_tokens=8, max_num_seqs=8,
                       speculative=Speculation(acceptance_rate=1.0, num_speculative_tokens=1, method="ngram"))
    r = run(np.asarray([0.0, 0.013]), np.asarray([2, 40]), np.asarray([4, 1]), np.asarray(["m", "m"]),
            [EngineSpec("m", 0, sm, engine=eng)], [DeviceSpec("d", 1, 1.0, 700.0)])
    assert r.first_token_s[0] == pytest.approx(0.012)
    assert r.done_s[0] == pytest.approx(0.077)


def _scenario(tmp_path: Path, engine: dict, *, site: str | None = None) -> Path:
    """The default scenario with Llama-3.1-70B alone at tp 4 under ``engine``, written to ``tmp_path``/s.yaml;
    with ``site``, that site's inventory only (and the model's traffic from it)."""
    raw = yaml.safe_load((ROOT / "datasets" / "scenarios" / "default.yaml").read_text())
    raw["models"] = [m for m in raw["models"] if m["name"] == "Llama-3.1-70B"]
    raw["models"][0]["engine"] = engine
    raw["models"][0]["tp"] = [4]
    if site is not None:
        raw["sites"] = [s for s in raw["sites"] if s["name"] == site]
        raw["models"][0]["origin_site"] = site
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(raw))
    return scen


def test_scenario_plan_rows_and_exported_flags(tmp_path):
    # Llama-3.1-70B alone with a Llama-3.1-8B draft: every replica row carries the speculation, and each exported
    # server passes --speculative-config with the draft's repository.
    from click.testing import CliRunner

    scen = _scenario(tmp_path, {"mode": "prefill-first", "speculative": {
        "draft_model": "Llama-3.1-8B", "acceptance_rate": 0.8, "num_speculative_tokens": 4}})
    out = tmp_path / "plan.json"
    r = CliRunner().invoke(main, ["plan", str(scen), "--no-baselines", "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = json.loads(out.read_text())["replicas"]
    assert rows and all(row["engine"]["speculative"]["draft_model"] == "Llama-3.1-8B"
                        and row["engine"]["speculative"]["tokens_per_step"] == pytest.approx(3.3616) for row in rows)
    problem, plan, scenario, _ = load_plan_file(out)
    servers = [s for w in workloads(problem, plan, scenario) for s in w.servers]
    assert servers
    for s in servers:
        a = s.args()
        assert json.loads(a[a.index("--speculative-config") + 1]) == {
            "model": "meta-llama/Llama-3.1-8B", "num_speculative_tokens": 4, "method": "draft_model"}


def test_scenario_unknown_draft_names_the_field(tmp_path):
    scen = _scenario(tmp_path, {"speculative": {"draft_model": "Llama-9-1B", "acceptance_rate": 0.8}})
    with pytest.raises(InputError) as e:
        build_problem(load_scenario(scen))
    assert "speculative.draft_model" in str(e.value.field)


def test_ledger_speculation_json(tmp_path):
    # The ledger what-if on the one-model scenario: H100 and A100 tp 4 with and without an 8B draft at the
    # scenario's 100-ms TPOT; each row's ratio is its two capacities', pays = spec > base, and the break-even
    # rate, when one exists, gives the base capacity back within the search's tolerance.
    from click.testing import CliRunner

    scen = _scenario(tmp_path, {"mode": "prefill-first"})
    r = CliRunner().invoke(main, ["ledger", "speculation", str(scen), "--model", "Llama-3.1-70B", "--draft-model",
                                  "Llama-3.1-8B", "--acceptance-rate", "0.8", "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["options"] and d["verdict"].startswith("speculation")
    for o in d["options"]:
        assert o["ratio"] == pytest.approx(o["spec_req_per_s"] / o["base_req_per_s"])
        assert o["pays"] == (o["spec_req_per_s"] > o["base_req_per_s"])
        assert o["base_usd_per_million_requests"] == pytest.approx(
            o["usd_per_replica_hour"] / (o["base_req_per_s"] * 3600) * 1e6)
        _check_pays_and_break_even(o, 0.8)
    bad = CliRunner().invoke(main, ["ledger", "speculation", str(scen), "--model", "Llama-3.1-70B",
                                    "--acceptance-rate", "0.8"])
    assert bad.exit_code == 2 and "draft_model" in bad.output
    assert not math.isnan(d["options"][0]["usd_per_replica_hour"])


def _check_pays_and_break_even(o: dict, alpha: float) -> None:
    # One option of `ledger speculation --format json` at acceptance rate alpha: pays (at alpha) iff alpha lies in a
    # range where it pays; the break-even rate, when given, starts the last range and that range reaches 1; when
    # not, the note says why (and no range reaches 1).
    ranges = o["pays_at_acceptance"]
    assert all(0 <= lo <= hi <= 1 for lo, hi in ranges)
    assert o["pays"] == any(lo <= alpha <= hi for lo, hi in ranges)
    if o["break_even_acceptance_rate"] is not None:
        assert ranges[-1] == [o["break_even_acceptance_rate"], 1.0] and o["break_even_note"] == ""
    else:
        assert o["break_even_note"] and not (ranges and ranges[-1][1] == 1.0)


def test_ledger_speculation_pays_and_break_even_agree_where_capacity_falls(tmp_path):
    # Found on the default scenario: Llama-3.1-70B on A100 tp 4 under vllm-v1 with n-gram speculation (k 3) has
    # more capacity than without at alpha 0.5 (1.886 vs 1.857 req/s) but less from about 0.6 (1.651 at 0.7,
    # 1.673 at 1.0: TPOT starts to bind), and the break-even search, which assumed capacity grows with alpha,
    # printed "none (not even at 1)" beside "pays: yes". With the capacity model revised the same day the curve
    # still dips, between about 0.57 and 0.60 (printed by the command): it pays on two ranges, the first holding
    # 0.5, and the break-even is where the second starts (it pays at every higher rate from there). The A100 site
    # alone (gcp:us-central1): the H100's single range is checked by test_ledger_speculation_json, and it was half
    # of this test's CPU time.
    from click.testing import CliRunner

    scen = _scenario(tmp_path, {}, site="gcp:us-central1")
    args = ["ledger", "speculation", str(scen), "--model", "Llama-3.1-70B", "--method", "ngram", "-k", "3",
            "--acceptance-rate", "0.5"]
    r = CliRunner().invoke(main, [*args, "--format", "json"])
    assert r.exit_code == 0, r.output
    opts = json.loads(r.output)["options"]
    for o in opts:
        _check_pays_and_break_even(o, 0.5)
    a100 = next(o for o in opts if o["gpu"] == "A100-SXM4-80GB")
    assert a100["pays"]
    [(lo1, hi1), (lo2, hi2)] = a100["pays_at_acceptance"]
    assert lo1 < 0.5 < hi1 < lo2 == a100["break_even_acceptance_rate"] < hi2 == 1.0
    table_out = CliRunner().invoke(main, args).output
    assert "not even at 1" not in table_out


def test_measured_profile_with_speculation_is_refused_with_the_fix():
    # A serving profile holds no verification pass: planning speculation from it would silently ignore the knob.

    prof = load_profile(profile_files(str(ROOT / "tests" / "data" / "profiles"
                                          / "vllm-*qps-Llama-3.1-8B-Instruct-h100.json")))
    eng = EngineConfig(speculative=Speculation(acceptance_rate=0.6, method="ngram"))
    with pytest.raises(InputError, match="drop engine.speculative") as e:
        measured_replica_capacity(prof, TokenMix(1000, 1100, 200, 220), SLO(0.2, 0.015), model=get_model(
            "Llama-3.1-8B"), gpu=get_gpu("H100-SXM-80GB"), tp=1, engine=eng)
    assert e.value.field == "engine.speculative"


def test_speculation_gets_no_shared_gpu_option_and_says_why(tmp_path):
    # Llama-3.1-8B (tp 1 listed, so it has shared options without speculation) with n-gram speculation: none, and
    # the option notes say why.

    raw = yaml.safe_load((ROOT / "datasets" / "scenarios" / "default.yaml").read_text())
    raw["models"] = [m for m in raw["models"] if m["name"] == "Llama-3.1-8B"]
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(raw))
    assert build_problem(load_scenario(scen)).share_options
    raw["models"][0]["engine"] = {"speculative": {"method": "ngram", "acceptance_rate": 0.6}}
    scen.write_text(yaml.safe_dump(raw))
    p = build_problem(load_scenario(scen))
    assert p.options and not p.share_options
    notes = p.option_notes["Llama-3.1-8B"]
    assert any("speculative decoding is planned on dedicated replicas only" in n for n in notes)


@pytest.mark.parametrize("draft, words", [
    # Qwen2.5-7B's vocabulary (152,064 tokens, its config.json) is not Llama 3.1's (128,256): another tokenizer
    ("Qwen2.5-7B", ["152,064", "128,256", "tokenizer"]),
    ("Llama-3.1-70B", ["the model itself"]),
])
def test_a_draft_with_another_tokenizer_or_the_model_itself_is_refused(draft, words):
    target = get_model("Llama-3.1-70B")
    spec = Speculation(acceptance_rate=0.8, num_speculative_tokens=4, draft_model=draft, draft=get_model(draft))
    mix = TokenMix(1000, 2000, 200, 400)
    with pytest.raises(InputError) as e:
        replica_capacity(target, get_gpu("H100"), mix, SLO(2.0, 0.1), tp=4, calib=load_calibration(get_gpu("H100")),
                         engine=EngineConfig(speculative=spec))
    assert e.value.field == "engine.speculative.draft_model" and all(w in str(e.value) for w in words)
