"""The calibration fit: the vectorised prediction agrees with the scalar latency functions, the fitted constants
stay physical, and the held-out protocol leaves a whole (model, GPU) group out."""

from __future__ import annotations

import numpy as np
import pytest

from fleetplan.costmodels.calibration import Calibration
from fleetplan.costmodels.calibration_fit import (
    KINDS,
    FitResult,
    Observation,
    ObservationArrays,
    fit_calibration,
    predict,
    predict_many,
)
from fleetplan.costmodels.latency import decode_step_time_s, prefill_time_s
from fleetplan.datasets.catalog.names import get_gpu, get_model
from fleetplan.datasets.measured import load_measurements, observations, steady_state_rates
from fleetplan.errors import InputError

H100 = get_gpu("H100-SXM-80GB")
A100 = get_gpu("A100-SXM4-80GB")
L8B = get_model("Llama-3.1-8B")
L70B = get_model("Llama-3.1-70B")
MIXTRAL = get_model("Mixtral-8x7B-v0.1")
# Hand-set constants (not fitted) so the comparison does not depend on the optimiser.
FIT = FitResult(
    family={"H100": {"prefill_mfu": 0.6, "decode_bw_efficiency": 0.85, "overhead_scale": 1.0},
            "A100": {"prefill_mfu": 0.7, "decode_bw_efficiency": 0.8, "overhead_scale": 1.3}},
    framework={"eng": {"prefill_overhead_s": 0.01, "decode_overhead_per_step_s": 0.002,
                       "decode_overhead_per_layer_s": 5e-5, "decode_overhead_per_seq_s": 1e-4}},
    allreduce_bw_efficiency=0.6, allreduce_step_latency_s=5e-6, anchor="eng", reference_family="H100")


def _obs(kind, model=L8B, gpu=H100, tp=1, batch=8.0, prompt=500.0, out=200.0, wd="bf16"):
    return Observation(framework="eng", model=model, gpu=gpu, tp=tp, kind=kind, batch=batch, prompt_tokens=prompt,
                       output_tokens=out, measured_s=1.0, weight_dtype=wd, kv_dtype=wd, group="g")


def test_vectorised_prediction_equals_scalar_reference_for_every_kind():
    obs = [_obs(k, model=m, gpu=g, tp=tp, batch=b, wd=wd)
           for k in KINDS for m, tp in ((L8B, 1), (L70B, 4), (MIXTRAL, 2)) for g in (H100, A100)
           for b in (1.0, 37.5, 512.0) for wd in ("bf16", "fp8")]
    vec = predict_many(FIT, ObservationArrays(obs))
    ref = np.array([predict(FIT, o) for o in obs])
    np.testing.assert_allclose(vec, ref, rtol=1e-12)


def test_kinds_by_hand_from_the_scalar_functions():
    # A100 row: efficiencies of the A100 family, overheads × 1.3 (the A100 host scale).
    c = FIT.calibration(A100)
    assert c.decode_overhead_per_seq_s == pytest.approx(1.3e-4) and c.prefill_mfu == 0.7
    o = _obs("e2e", gpu=A100, batch=4, prompt=300, out=11)
    step = decode_step_time_s(L8B, A100, 4, 300 + 11 / 2, calib=c)
    assert predict(FIT, o) == pytest.approx(prefill_time_s(L8B, A100, 300, batch=4, calib=c) + 10 * step)
    # Steady state with separate prefill iterations: each step also runs batch/output = 64/200 prefills of a prompt.
    o = _obs("tpot", gpu=A100, batch=64, prompt=300, out=200)
    step = decode_step_time_s(L8B, A100, 64, 400, calib=c)
    assert predict(FIT, o) == pytest.approx(step + 64 / 200 * prefill_time_s(L8B, A100, 300, calib=c))
    # Chunked prefill: at batch 8 the step is memory-bound and 8/200 × a 300-token prompt's compute
    # (2 × 8.03e9 × 300 = 4.8e12 FLOP, ~23 ms at 0.7 × 312 TFLOP/s → ~0.9 ms per step) stays below the memory time
    # (16 GB / (2.039e12 × 0.8) ≈ 9.8 ms), so the step does not grow.
    o = _obs("tpot_mixed", gpu=A100, batch=8, prompt=300, out=200)
    assert predict(FIT, o) == pytest.approx(decode_step_time_s(L8B, A100, 8, 400, calib=c))


def test_observation_rejects_bad_rows():
    with pytest.raises(InputError):
        _obs("throughput")
    with pytest.raises(InputError):
        _obs("decode", prompt=0.0)


def test_fit_recovers_constants_it_generated():
    # Synthetic observations made by FIT itself (two families, one engine): the fit must reproduce them closely.
    obs = [Observation(framework="eng", model=m, gpu=g, tp=tp, kind=k, batch=b, prompt_tokens=p, output_tokens=200,
                       measured_s=1.0, group=f"{m.name} @ {g.name}")
           for m, tp in ((L8B, 1), (L70B, 4)) for g in (H100, A100) for k in ("prefill", "decode", "tpot")
           for b in (1.0, 16.0, 128.0) for p in (128.0, 2048.0)]
    truth = predict_many(FIT, ObservationArrays(obs))
    obs = [Observation(**{**o.__dict__, "measured_s": float(t)}) for o, t in zip(obs, truth, strict=True)]
    fit = fit_calibration(obs, anchor="eng")
    err = np.abs(predict_many(fit, ObservationArrays(obs)) / truth - 1)
    assert np.median(err) < 0.02


def test_shipped_fit_constants_are_physical():
    # Every constant inside Calibration.BOUNDS, efficiencies below 1 (no engine reaches the peak), and the per-layer
    # and per-sequence overheads of the shipped (vLLM 0.11) rows far below the eager engines' (Splitwise, vLLM 0.5.4).
    fit = fit_calibration(observations(), anchor="vLLM 0.11")
    for fam in fit.family.values():
        assert 0.3 < fam["prefill_mfu"] < 1.0 and 0.5 < fam["decode_bw_efficiency"] < 1.0
    for fw in fit.framework:
        c = fit.calibration(H100, fw)
        for k, (lo, hi) in Calibration.BOUNDS.items():
            assert lo <= getattr(c, k) <= hi
    new = fit.framework["vLLM 0.11"]
    for old in ("vLLM 0.5.4", "Splitwise profile"):
        assert new["decode_overhead_per_seq_s"] < fit.framework[old]["decode_overhead_per_seq_s"]
    assert fit.framework["TensorRT-LLM 0.9"]["prefill_overhead_s"] < 0.05


def test_measurements_have_prompt_lengths_and_no_preempted_splitwise_rows():
    d = load_measurements()
    assert (d.prompt_tokens >= 1).all()
    s = d[(d.framework == "Splitwise profile") & (d.tp == 2)]
    assert s.batch.max() <= 32  # TP2 batch 64 ran faster than batch 32: preempted, left out


def test_steady_state_rates_are_throughput_over_output():
    # ML.ENERGY v3, Llama-3.1-8B on H100, max_num_seqs 8: 1069.569 output tokens/s at 388.678 mean output tokens
    # = 2.752 req/s, median ITL 7.316 ms (mlenergy_v3_vllm_steady_state.csv).

    d = steady_state_rates()
    r = d[(d.model == "Llama-3.1-8B") & (d.batch < 9)].iloc[0]
    assert r.rate_req_per_s == pytest.approx(1069.569 / 388.678, rel=1e-5)
    assert r.itl_p50_s == pytest.approx(7.316e-3, rel=1e-3) and r.prompt_tokens == 69.5
