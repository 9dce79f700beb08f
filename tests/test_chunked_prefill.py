"""The chunked-prefill scheduler of the replay (simulator/engine.py, vLLM V1 / Sarathi): hand-derived step sequences."""

from __future__ import annotations

import numpy as np
import pytest

from fleetplan.costmodels.capacity import latency_at_rate
from fleetplan.costmodels.demand import TokenMix
from fleetplan.costmodels.engine import PREFILL_FIRST, EngineConfig
from fleetplan.costmodels.slo import SLO
from fleetplan.errors import InputError
from fleetplan.simulator.engine import DeviceSpec, EngineSpec, Policy, StepModel, run

# prefill(x) = 0.010 + 0.001 x seconds (linear: the table's interpolation is exact), decode step 0.020 s always;
# the fixed step cost is prefill(1) = 0.011 s.


def _sm() -> StepModel:
    return StepModel(lambda x: 0.010 + 0.001 * x, lambda b, c: 0.020, kv_bytes_per_token=1.0,
                     kv_budget_bytes=1e6, max_tokens=64)


def _run(engine: EngineConfig, arrivals, inp, out):
    return run(np.asarray(arrivals, float), np.asarray(inp), np.asarray(out), np.asarray(["m"] * len(inp)),
               [EngineSpec("m", 0, _sm(), engine=engine)], [DeviceSpec("d", 1, 1.0, 700.0)])


def test_two_requests_step_by_step():
    # Budget 4 tokens. A: t=0, prompt 6, 3 tokens out. B: t=0.001, prompt 3, 2 tokens out.
    # step 1 [0, 0.014]: no decodes; A chunk 0->4: prefill(4) = 0.014.           (B arrives while it runs)
    # step 2 [0.014, 0.028]: A chunk 4->6 (2 tokens) + B chunk 0->2 (the 2 left):
    #        0.011 + (prefill(6) - prefill(4)) + (prefill(2) - 0.011) = 0.011 + 0.002 + 0.001 = 0.014.
    #        A's prompt is done: first token at 0.028, joins the batch (2 tokens to go).
    # step 3 [0.028, 0.049]: decode A (1 token, budget left 3) + B chunk 2->3: 0.020 + 0.001 = 0.021.
    #        A has its 2nd token; B's first token at 0.049.
    # step 4 [0.049, 0.069]: no prefill work: decode A and B, 0.020; both finish at 0.069.
    r = _run(EngineConfig(max_num_batched_tokens=4, max_num_seqs=8), [0.0, 0.001], [6, 3], [3, 2])
    assert r.prefill_start_s == pytest.approx([0.0, 0.014])
    assert r.first_token_s == pytest.approx([0.028, 0.049])
    assert r.done_s == pytest.approx([0.069, 0.069])
    assert r.device_busy_s[0] == pytest.approx(0.069)
    # Prefill-first on the same requests: A's prefill(6) = 0.016, B's prefill(3) = 0.013 -> 0.029, then decode
    # steps of 0.020 for A and B together: A done at 0.029 + 2 x 0.020 = 0.069, B at 0.049.
    p = _run(PREFILL_FIRST, [0.0, 0.001], [6, 3], [3, 2])
    assert p.first_token_s == pytest.approx([0.016, 0.029])
    assert p.done_s == pytest.approx([0.069, 0.049])


def test_decodes_come_first_and_bound_the_stall():
    # A: t=0, prompt 2, 4 tokens out; B: t=0.013, prompt 40. Budget 8 tokens: decode A 1 + B chunks of 7.
    # A: step prefill(2) = 0.012 [0, 0.012], first token; decode run of 3 steps from 0.012 (ends 0.072) is cut at
    # the end of the step running at 0.013 (0.032). Then mixed steps, A decoding in each: B's chunk 0->7 costs
    # prefill(7) - prefill(1) = 0.006 (0.026 s step), chunk 7->14 costs 0.007 (0.027 s): A's 3rd token at 0.058,
    # 4th (last) at 0.085. A's gaps never exceed 0.027 s (prefill-first stalls it for B's whole prefill(40) = 0.050
    # s: A's 2nd token at 0.032, B's prefill to 0.082, then 2 steps: 0.122).
    r = _run(EngineConfig(max_num_batched_tokens=8, max_num_seqs=8), [0.0, 0.013], [2, 40], [4, 1])
    assert r.first_token_s[0] == pytest.approx(0.012)
    assert r.done_s[0] == pytest.approx(0.085)
    p = _run(PREFILL_FIRST, [0.0, 0.013], [2, 40], [4, 1])
    assert p.done_s[0] == pytest.approx(0.032 + 0.050 + 0.040)


def test_prefix_hits_skip_prompt_tokens():
    # hit rate 0.5 on a 6-token prompt: 3 tokens cached; budget 8: one step 0.011 + prefill(6) - prefill(3) = 0.014
    # (prefill-first with the same hits: prefill(6) - prefill(3) + prefill(1) = 0.014 too).
    for eng in (EngineConfig(max_num_batched_tokens=8, max_num_seqs=8, prefix_hit_rate=0.5),
                EngineConfig(mode="prefill-first", prefix_hit_rate=0.5)):
        r = _run(eng, [0.0], [6], [1])
        assert r.first_token_s[0] == pytest.approx(0.014)


def test_max_num_seqs_caps_the_running_set():
    # max_num_seqs 1: B (t=0) waits until A (t=0, 2 tokens out) leaves. A: prefill(2) 0.012, decode 0.020 -> 0.032;
    # B: prefill(2) in [0.032, 0.044].
    r = _run(EngineConfig(max_num_batched_tokens=64, max_num_seqs=1), [0.0, 0.0], [2, 2], [2, 1])
    assert r.first_token_s == pytest.approx([0.012, 0.044])


def test_chunked_needs_resolved_knobs():
    with pytest.raises(InputError, match="max_num_batched_tokens"):
        _run(EngineConfig(), [0.0], [4], [1])
    with pytest.raises(InputError, match="preempt_after_s"):
        run(np.zeros(1), np.asarray([4]), np.asarray([1]), np.asarray(["m"]),
            [EngineSpec("m", 0, _sm(), engine=EngineConfig(max_num_batched_tokens=8, max_num_seqs=8))],
            [DeviceSpec("d", 1, 1.0, 700.0)], Policy(preempt_after_s=1.0))


def test_capacity_model_chunked_ttft_at_a_vanishing_rate_by_hand():
    # Capacity model (point 11) at rate 0 with prefill(x) = 0.010 + 0.001 x s, decode step 0.020 s, every prompt 100
    # tokens and 10 tokens out, budget 64: the batch is 1, so c = 64 - 1 = 63 and a busy step holds k = min(63,
    # 100 / (1 - 0)) = 63 tokens; TTFT = prefill(100) + 100 / 63 x 0.020 + one step 0.020 = 0.11 + 0.031746 + 0.02.
    # Prefill-first: 0.11 + 0.02. TPOT is the bare step in both (no prefill load).

    mix = TokenMix(100, 100, 10, 10, lengths=(np.full(50, 100), np.full(50, 10)))
    pre, dec = (lambda x: 0.010 + 0.001 * x), (lambda b, c: 0.020)
    ttft, tpot = latency_at_rate(pre, dec, mix, SLO(5.0, 0.5), 0.0,
                                 engine=EngineConfig(max_num_batched_tokens=64, max_num_seqs=8))
    assert ttft == pytest.approx(0.11 + 100 / 63 * 0.02 + 0.02) and tpot == pytest.approx(0.02)
    ttft, tpot = latency_at_rate(pre, dec, mix, SLO(5.0, 0.5), 0.0, engine=PREFILL_FIRST)
    assert ttft == pytest.approx(0.13) and tpot == pytest.approx(0.02)
