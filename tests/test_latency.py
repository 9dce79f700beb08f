"""Roofline latency: hand-checked values, monotonicity, and the error against the measured Splitwise profile."""

from __future__ import annotations

import math

import pytest

from fleetplan.costmodels.calibration import Calibration
from fleetplan.costmodels.calibration_fit import fit_calibration
from fleetplan.costmodels.hardware import GPU, Model
from fleetplan.costmodels.latency import allreduce_time_s, decode_step_time_s, moe_params_read, prefill_time_s
from fleetplan.costmodels.network import Link
from fleetplan.datasets.calibration import load_calibration, load_calibration_table, write_calibration_table
from fleetplan.datasets.catalog.names import get_gpu, get_model
from fleetplan.datasets.measured import load_measurements, observations
from fleetplan.datasets.profiles import mdape_table, roofline_predictions, splitwise_fit_rows
from fleetplan.errors import InputError
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.read import read_scenario, scenario_from_raw

# Records built from the shipped CSV numbers (datasets/data/hardware/gpus.csv, datasets/data/models/models.csv).
H100 = GPU("H100-SXM-80GB", 80e9, 3350e9, 989.4e12, 1978.9e12, 900e9, 128e9, 700)
A100 = GPU("A100-SXM4-80GB", 80e9, 2039e9, 312e12, None, 600e9, 64e9, 400)
L8B = Model("Llama-3.1-8B", 32, 4096, 32, 8, 128, 8.03e9, 8.03e9)
L70B = Model("Llama-3.1-70B", 80, 8192, 64, 8, 128, 70.554e9, 70.554e9)
MIXTRAL = Model("Mixtral-8x7B-v0.1", 32, 4096, 32, 8, 128, 46.703e9, 12.88e9, arch_type="moe",
                num_routed_experts=8, experts_per_token=2, moe_intermediate_size=14336)
# Fixed constants so the hand arithmetic does not depend on the fitted file.
CAL = Calibration("test", prefill_mfu=0.5, prefill_overhead_s=0.01, decode_bw_efficiency=0.8,
                  decode_overhead_per_layer_s=1e-4, decode_overhead_per_seq_s=2e-4, allreduce_bw_efficiency=0.5,
                  allreduce_step_latency_s=5e-6)


def test_decode_llama8b_h100_by_hand():
    # bytes = 8.03e9 params × 2 B + 1 seq × 1 token × 131,072 B = 16,060,131,072 B
    # memory time = 16,060,131,072 / (3.35e12 × 0.8) = 5.992586e-3 s
    # compute = (2·8.03e9 + 4·32·1·32·128) / (989.4e12 × 0.5) = 3.25e-5 s  (< memory time, so memory-bound)
    # overheads = 32 layers × 1e-4 + 1 seq × 2e-4 = 3.4e-3 s   -> total 9.392586e-3 s
    t = decode_step_time_s(L8B, H100, 1, 1, calib=CAL)
    assert t == pytest.approx(16_060_131_072 / (3.35e12 * 0.8) + 3.4e-3, rel=1e-9)
    assert t == pytest.approx(9.392586e-3, rel=1e-6)


def test_prefill_llama8b_h100_by_hand():
    # FLOPs = 2·8.03e9·2048 + 2·32·2048²·(32·128) = 3.289088e13 + 1.099512e12 = 3.3990392e13
    # time = 3.3990392e13 / (989.4e12 × 0.5) + 0.01 = 0.0687091 + 0.01 = 0.0787091 s
    t = prefill_time_s(L8B, H100, 2048, calib=CAL)
    assert t == pytest.approx(3.3990392e13 / (989.4e12 * 0.5) + 0.01, rel=1e-6)


def test_fp8_uses_fp8_flops_only_where_the_gpu_has_them():
    # H100 FP8 peak is 2× BF16, so the compute part halves; A100 has no FP8: unchanged.
    h_bf16 = prefill_time_s(L8B, H100, 2048, calib=CAL) - 0.01
    h_fp8 = prefill_time_s(L8B, H100, 2048, weight_dtype="fp8", calib=CAL) - 0.01
    assert h_fp8 == pytest.approx(h_bf16 * 989.4 / 1978.9, rel=1e-9)
    assert prefill_time_s(L8B, A100, 2048, weight_dtype="fp8", calib=CAL) == prefill_time_s(L8B, A100, 2048, calib=CAL)


def test_allreduce_alpha_beta_by_hand():
    # tp 4, 16,384 B: 2·3 steps × 5e-6 s + 2·3/4 × 16,384 / (450e9 × 0.5) = 3e-5 + 1.0923e-7 s
    assert allreduce_time_s(16384, 4, H100, CAL) == pytest.approx(3e-5 + 1.5 * 16384 / 2.25e11, rel=1e-12)
    assert allreduce_time_s(16384, 1, H100, CAL) == 0.0


def test_tp_adds_two_allreduces_per_layer_in_decode():
    # Llama-3.1-70B decode, batch 1: tp 2 time = memory/2 + 160 all-reduces of 8192·2 B + overheads.
    t1 = decode_step_time_s(L70B, H100, 1, 100, tp=1, calib=CAL) - 80 * 1e-4 - 2e-4
    t2 = decode_step_time_s(L70B, H100, 1, 100, tp=2, calib=CAL) - 80 * 1e-4 - 2e-4
    assert t2 == pytest.approx(t1 / 2 + 160 * allreduce_time_s(8192 * 2, 2, H100, CAL), rel=1e-9)


def test_pp_adds_one_hop_per_stage_boundary():
    # pp 2, batch 1 (one micro-batch): both stages run in turn (same total as pp 1) plus one hop of
    # 4096 × 2 B = 8,192 B over 50e9 B/s with RTT 10 µs: 8192/50e9 + 5e-6 = 5.16384e-6 s.
    link = Link(50e9, 10e-6)
    d1 = decode_step_time_s(L8B, H100, 1, 10, calib=CAL)
    d2 = decode_step_time_s(L8B, H100, 1, 10, pp=2, link=link, calib=CAL)
    assert d2 - d1 == pytest.approx(8192 / 50e9 + 5e-6, rel=1e-6)
    # Prefill of 4 prompts on pp 2: m = 2 micro-batches of 2 prompts; m + pp − 1 = 3 stage-times, each half the
    # layers of half the batch = 1/4 of the pp 1 compute, so 3/4 in all, plus one hop of 1,024 tokens × 8,192 B.
    p1 = prefill_time_s(L8B, H100, 512, batch=4, calib=CAL) - 0.01
    p2 = prefill_time_s(L8B, H100, 512, batch=4, pp=2, link=link, calib=CAL) - 0.01
    assert p2 == pytest.approx(0.75 * p1 + 2 * 512 * 8192 / 50e9 + 5e-6, rel=1e-6)


def test_moe_reads_only_touched_experts():
    # expert = (46.703e9 − 12.88e9)/(8 − 2) = 5.63717e9; dense = 12.88e9 − 2·expert = 1.60567e9
    # 1 token touches 8·(1 − (6/8)^1) = 2 experts -> exactly params_active; many tokens touch all 8 -> params_total
    assert moe_params_read(MIXTRAL, 1) == pytest.approx(12.88e9, rel=1e-9)
    assert moe_params_read(MIXTRAL, 4) == pytest.approx(1.60567e9 + 8 * (1 - 0.75**4) * 5.63717e9, rel=1e-5)
    assert moe_params_read(MIXTRAL, 10_000) == pytest.approx(46.703e9, rel=1e-6)
    assert moe_params_read(L8B, 7) == 8.03e9


def test_decode_monotone_in_batch_and_context():
    cal = load_calibration(H100)
    times = [decode_step_time_s(L70B, H100, b, c, tp=4, calib=cal) for b in (1, 2, 8, 32, 128) for c in (100,)]
    assert times == sorted(times)
    times = [decode_step_time_s(L70B, H100, 8, c, tp=4, calib=cal) for c in (10, 1000, 10_000, 100_000)]
    assert times == sorted(times)


@pytest.mark.parametrize("kw", [dict(tp=0), dict(tp=3.0), dict(pp=100)])
def test_bad_parallelism_rejected(kw):
    with pytest.raises(InputError):
        prefill_time_s(L8B, H100, 100, calib=CAL, **kw)


def test_bad_dtype_and_tokens_rejected():
    with pytest.raises(InputError):
        decode_step_time_s(L8B, H100, 1, 10, weight_dtype="fp7", calib=CAL)
    with pytest.raises(InputError):
        prefill_time_s(L8B, H100, 0, calib=CAL)
    with pytest.raises(InputError):
        decode_step_time_s(L8B, H100, math.nan, 10, calib=CAL)


def test_uncalibrated_gpu_uses_default_row():
    table = load_calibration_table()
    assert {"A100-SXM4-80GB", "H100-SXM-80GB", "default"} <= set(table)
    assert load_calibration("L40S") == table["default"]
    assert load_calibration(H100) == table["H100-SXM-80GB"]


def test_calibration_fitted_to_splitwise_matches_it_within_25_percent():
    # The shipped constants represent a current vLLM (fleetplan calibrate); Splitwise's profile is another engine, so
    # the check fits the same structure to the Splitwise rows alone and recomputes the median absolute percentage
    # error on the measured profile of Llama-2-70B on A100/H100 at TP 2/4/8.
    rows = splitwise_fit_rows()
    d = load_measurements()
    fit = fit_calibration(observations(d[d.framework == "Splitwise profile"]), anchor="Splitwise profile")
    t = mdape_table(roofline_predictions(rows, {g: fit.calibration(g) for g in rows.gpu.unique()}))
    overall = t[(t.gpu == "all") & (t.tp == "all")].iloc[0]
    assert overall.n_prefill >= 60 and overall.n_decode >= 100
    assert overall.mdape_prefill_pct <= 25.0
    assert overall.mdape_decode_pct <= 25.0
    per_gpu = t[(t.gpu != "all") & (t.tp == "all")]
    assert (per_gpu.mdape_prefill_pct <= 25.0).all() and (per_gpu.mdape_decode_pct <= 25.0).all()


def test_issue_decode_step_llama3_8b_a100_near_measured_kernels():
    # The issue's finding: decode step of Llama-3-8B on one A100 was 16.6 ms at batch 1 and 40.0 ms at batch 64 in
    # fleetplan vs 10.7 and 19.5 ms in Vidur (built on measured kernels), because the Llama-2-70B-only fit put 259 us
    # per layer and 305 us per sequence into overheads. The shipped calibration (vLLM 0.11, fitted across models)
    # bounds those per-layer/per-sequence terms to 100/200 us and fits them across 8B..405B models.
    # Hand arithmetic of the floor at batch 1: weights 8.03e9 × 2 B / 2.039e12 B/s = 7.88 ms at full bandwidth, so
    # the step is above 7.88 ms and must now sit within 25% of Vidur's 10.7 ms; at batch 64, 1000 tokens of context:
    # weights + 64 × 1000 × 131,072 B KV = 24.45e9 B / 2.039e12 = 12.0 ms floor, within 25% of Vidur's 19.5 ms.
    gpu = get_gpu("A100-SXM4-80GB")
    m = get_model("Llama-3.1-8B")
    cal = load_calibration(gpu)
    t1 = decode_step_time_s(m, gpu, 1, 1000, calib=cal)
    t64 = decode_step_time_s(m, gpu, 64, 1000, calib=cal)
    assert 8.03e9 * 2 / 2.039e12 < t1 <= 1.25 * 10.7e-3
    assert 24.45e9 / 2.039e12 < t64 <= 1.25 * 19.5e-3
    # The per-sequence overhead is a small model's own: at most 200 us by its bound, here far below the old 305 us.
    assert cal.decode_overhead_per_seq_s < 305e-6 and cal.decode_overhead_per_layer_s < 259e-6



def test_scenario_names_a_calibration_file(tmp_path):
    # options.calibration (relative to the scenario's folder) replaces the shipped rows: with every efficiency halved
    # and the overheads kept, each step is slower, so no option's capacity can rise and the total must fall. Two of
    # the default scenario's models (a dense one at tp 1-2 and one at tp 2-8) on its four pools: the claim holds
    # option by option, so the other three models only cost time.

    rows = [c.replace(prefill_mfu=c.prefill_mfu / 2, decode_bw_efficiency=c.decode_bw_efficiency / 2)
            for c in load_calibration_table().values()]
    write_calibration_table(rows, str(tmp_path / "slow.csv"))
    raw, _, base = read_scenario()
    raw = {**raw, "models": [m for m in raw["models"] if m["name"] in ("Llama-3.1-8B", "Llama-3.1-70B")]}
    fast = build_problem(scenario_from_raw(raw, base=str(base)))
    raw = {**raw, "options": {**(raw.get("options") or {}), "calibration": "slow.csv"}}
    slow = build_problem(scenario_from_raw(raw, base=str(tmp_path)))
    cap = {(o.model, o.pool, o.tp, o.pp): o.capacity_req_per_s for o in fast.options}
    both = [(cap[k], o.capacity_req_per_s) for o in slow.options
            if (k := (o.model, o.pool, o.tp, o.pp)) in cap]
    assert both and all(s <= f + 1e-9 for f, s in both) and sum(s for _, s in both) < sum(f for f, _ in both)
