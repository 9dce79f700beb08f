"""Replica capacity under an SLO: queueing arithmetic by hand, memory limits, monotonicity, SLO range checks."""

from __future__ import annotations

import math
from typing import get_args

import pytest
from scipy.optimize import brentq

from fleetplan.costmodels.capacity import kv_tokens_held, replica_capacity, replica_capacity_from_latency
from fleetplan.costmodels.demand import TokenMix
from fleetplan.costmodels.engine import PREFILL_FIRST
from fleetplan.costmodels.hardware import BYTES_PER_ELEMENT, GPU, DType, Model
from fleetplan.costmodels.slo import SLO
from fleetplan.datasets.calibration import load_calibration
from fleetplan.datasets.catalog.names import get_gpu, get_model
from fleetplan.errors import InputError

H100 = GPU("H100-SXM-80GB", 80e9, 3350e9, 989.4e12, 1978.9e12, 900e9, 128e9, 700)
#: The shipped roofline calibration row of the H100 (datasets/data/calibration/roofline.csv).
CAL = load_calibration(H100)
L8B = Model("Llama-3.1-8B", 32, 4096, 32, 8, 128, 8.03e9, 8.03e9)
L70B = Model("Llama-3.1-70B", 80, 8192, 64, 8, 128, 70.554e9, 70.554e9)
MIX = TokenMix(input_tokens_mean=1000, input_tokens_p95=3000, output_tokens_mean=200, output_tokens_p95=600)
# Constant latencies make the queueing model solvable by hand: prefill 0.1 s, decode step 0.02 s, O_mean 100.
FLAT = TokenMix(100, 100, 100, 100)


def _flat(slo: SLO, max_batch: float = 1e9):
    return replica_capacity_from_latency(lambda i: 0.1, lambda b, c: 0.02, FLAT, slo, kv_bytes_per_seq=1.0,
                                         kv_budget_bytes=max_batch, per_request=False,
                                         engine=PREFILL_FIRST)  # points 1-9


def test_slo_rejects_milliseconds():
    with pytest.raises(InputError, match="give seconds"):
        SLO(ttft_s=500, tpot_s=0.05)
    with pytest.raises(InputError, match="give seconds"):
        SLO(ttft_s=1.0, tpot_s=50)
    with pytest.raises(InputError):
        SLO(ttft_s=math.nan, tpot_s=0.05)
    with pytest.raises(InputError):
        SLO(ttft_s=-1, tpot_s=0.05)


def test_tpot_limited_rate_by_hand():
    # TPOT = 0.02 / (1 − 0.1 λ) <= 0.04  <=>  λ <= 5 req/s. At λ = 5: ρ = 0.5; every prefill takes 0.1 s (M/D/1),
    # so the Pollaczek-Khinchine mean wait is λ·E[S²] / (2(1 − ρ)) = 5 × 0.01 / 1 = 0.05 s and the wait's tail
    # P(W > t) = ρ·exp(−ρ t / 0.05) = 0.5·exp(−10 t); with its own 0.1-s prefill, P(W + 0.1 > t) = 0.05 at
    # t = 0.1 + ln(10) / 10 = 0.3303 s, TTFT = 0.3303 + 0.02 = 0.3503 s (< 10 s target).
    # Batch by Little's law = 5 × 100 × 0.04 = 20.
    c = _flat(SLO(ttft_s=10, tpot_s=0.04))
    assert c.req_per_s == pytest.approx(5.0, rel=1e-4)
    assert c.limiting == "tpot"
    assert c.batch_at_capacity == pytest.approx(20.0, rel=1e-3)
    assert c.ttft_p95_s == pytest.approx(0.1 + math.log(10) / 10 + 0.02, rel=1e-3)


def test_ttft_limited_rate_matches_independent_root():
    # M/D/1 as above at rate λ: ρ = 0.1 λ, mean wait 0.01 λ / (2(1 − 0.1 λ)), so the wait's exponent is
    # ρ / mean wait = 20 (1 − 0.1 λ) = 20 − 2 λ, and TTFT p95 = 0.1 + ln(ρ / 0.05) / (20 − 2 λ) + 0.02
    # = 0.12 + ln(2 λ) / (20 − 2 λ) = 0.3, solved by scipy's brentq (independent of the bisection).
    lam = brentq(lambda x: 0.12 + math.log(2 * x) / (20 - 2 * x) - 0.3, 0.6, 9.99)
    c = _flat(SLO(ttft_s=0.3, tpot_s=1.0))
    assert c.limiting == "ttft"
    assert c.req_per_s == pytest.approx(lam, rel=1e-4)


def test_kv_limited_rate_by_hand():
    # Budget holds 10 sequences (capacity point 8). Every request is 100 + 100 tokens (FLAT: p95 = mean, so every
    # drawn length is the mean): a decoding sequence holds X ~ 100 + U(0, 100) tokens, E[X] = 150,
    # E[X²] = 100² + 100·100 + 100²/3 = 23,333.3, so E[X²]/E[X]² = 23,333.3 / 22,500 = 1.037037. Prefills (0.1 s)
    # hold their 100-token prompts: λ × 0.1 × 100 / 150 = λ/15 sequences; the admitted p95 prompt 100 / 150 = 2/3.
    # B = λ·100·0.02/(1 − 0.1λ) = 2λ / (1 − 0.1λ), and B + 1.645·sqrt(1.037037·B) + λ/15 + 2/3 = 10, solved by
    # scipy's brentq (λ = 2.103).
    z = 1.6448536269514722

    def kv(lam):
        b = 2 * lam / (1 - 0.1 * lam)
        return b + z * math.sqrt(23333.333333 / 22500 * b) + lam / 15 + 2 / 3 - 10

    c = _flat(SLO(ttft_s=10, tpot_s=0.5), max_batch=10)
    assert c.limiting == "kv_memory"
    assert c.req_per_s == pytest.approx(brentq(kv, 0.5, 5.0), rel=1e-4)
    assert c.req_per_s == pytest.approx(2.103, rel=1e-3)


def test_weights_that_do_not_fit_give_zero_with_reason():
    # 70.554e9 × 2 B = 141 GB > 0.9 × 80 GB on one GPU.
    c = replica_capacity(L70B, H100, MIX, SLO(2.0, 0.05), tp=1, calib=CAL)
    assert c.req_per_s == 0.0
    assert c.limiting == "weights_do_not_fit"
    assert "weights 141 GB exceed 0.9 × 80 GB × tp 1" in c.reason


def test_slo_impossible_at_any_rate_gives_zero_with_reason():
    c = replica_capacity(L8B, H100, MIX, SLO(2.0, 0.002), calib=CAL)
    assert c.req_per_s == 0.0 and c.limiting == "tpot" and "TPOT p95" in c.reason


def test_context_too_long():
    short = Model("short", 32, 4096, 32, 8, 128, 8.03e9, 8.03e9, max_context_tokens=2048)
    c = replica_capacity(short, H100, MIX, SLO(2.0, 0.05), calib=CAL)
    assert c.req_per_s == 0.0 and c.limiting == "context_too_long"


def test_block_wise_kv_admission_by_hand():
    # vLLM allocates KV in 16-token blocks as tokens are produced: a sequence holds on average 1000 + 200/2 + 16/2 =
    # 1108 tokens; the p95 request at its end ceil(3600/16)·16 = 3600 tokens. Max batch:
    # (55.94e9 − 3600 × 131,072) / (1108 × 131,072) + 1 = 382.94 (vs 353.66 when whole sequences are reserved).
    c = replica_capacity(L8B, H100, MIX, SLO(2.0, 0.05), calib=CAL)
    assert c.max_batch == pytest.approx((55.94e9 - 3600 * 131072) / (1108 * 131072) + 1)
    assert kv_tokens_held(L8B, 1000, 200) == 1108
    assert kv_tokens_held(L8B, 1000, 201, whole=True) == 1216  # ceil(1201 / 16) = 76 blocks
    assert kv_tokens_held(L8B, 1000, 200, block_tokens=None) == 1200
    whole = replica_capacity(L8B, H100, MIX, SLO(2.0, 0.05), calib=CAL, kv_block_tokens=None)
    assert c.req_per_s >= whole.req_per_s


def test_kv_tokens_in_gib_budget_70b_tp2_a100():
    # The finding: 70B at tp 2 on A100-80GB held ~8.8k KV tokens because GPU memory was taken as 80e9 bytes.
    # The engine sees 81,920 MiB per GPU: 0.9 × 2 × 81,920 × 2^20 = 154,618,822,656 B; minus the weights
    # 70.554e9 × 2 = 141,108,000,000 B leaves 13,510,822,656 B / 327,680 B per token = 41,231 tokens (was
    # (144e9 − 141.108e9) / 327,680 = 8,826).
    gpu = get_gpu("A100-SXM4-80GB")
    m = get_model("Llama-3.1-70B")
    assert gpu.memory_bytes == 81920 * 2**20
    c = replica_capacity(m, gpu, MIX, SLO(5.0, 0.2), tp=2, calib=load_calibration(gpu))
    assert c.kv_bytes_available / m.kv_bytes_per_token() == pytest.approx(41231.76, abs=0.01)


def test_memory_accounting_by_hand():
    # 8B bf16 on one H100: weights 16.06 GB; KV budget 0.9·80 − 16.06 = 55.94 GB; reserve 0.1·80 = 8 GB;
    # memory per GPU = 16.06 + 55.94 + 8 = 80 GB. Max batch: room for one p95 request (3600 tokens) plus mean
    # ones (1200 tokens): (55.94e9 − 3600 × 131,072) / (1200 × 131,072) + 1 = 353.66 (whole sequences reserved at
    # admission: kv_block_tokens=None; the block-wise default is checked in test_block_wise_kv_admission_by_hand).
    c = replica_capacity(L8B, H100, MIX, SLO(2.0, 0.05), calib=CAL, kv_block_tokens=None)
    assert c.weights_bytes_per_gpu == pytest.approx(16.06e9)
    assert c.kv_bytes_available == pytest.approx(55.94e9)
    assert c.memory_bytes_per_gpu == pytest.approx(80e9)
    assert c.max_batch == pytest.approx((55.94e9 - 3600 * 131072) / (1200 * 131072) + 1)
    assert c.gpus == 1 and c.req_per_s > 0
    # A smaller budget (a shared GPU) occupies less memory and never sustains more.
    small = replica_capacity(L8B, H100, MIX, SLO(2.0, 0.05), kv_budget_bytes=2e9, calib=CAL)
    assert small.memory_bytes_per_gpu == pytest.approx(16.06e9 + 2e9 + 8e9)
    assert small.req_per_s <= c.req_per_s and small.limiting == "kv_memory"


def test_capacity_non_increasing_as_tpot_tightens():
    caps = [replica_capacity(L8B, H100, MIX, SLO(5.0, t), calib=CAL).req_per_s
            for t in (0.2, 0.1, 0.05, 0.03, 0.02, 0.01)]
    assert all(a >= b for a, b in zip(caps, caps[1:], strict=False))
    assert caps[0] > caps[-1]


def test_capacity_non_decreasing_with_tp_for_a_large_model():
    caps = [replica_capacity(L70B, H100, MIX, SLO(2.0, 0.05), tp=tp, calib=CAL).req_per_s for tp in (1, 2, 4, 8)]
    assert caps[0] == 0.0
    assert all(a <= b for a, b in zip(caps, caps[1:], strict=False))
    assert caps[-1] > 0


def test_bad_options_rejected():
    with pytest.raises(InputError):
        replica_capacity(L8B, H100, MIX, SLO(2.0, 0.05), memory_utilization=90, calib=CAL)
    with pytest.raises(InputError):
        replica_capacity(L8B, H100, MIX, SLO(2.0, 0.05), kv_budget_bytes=-1, calib=CAL)


def test_dtype_literal_names_the_bytes_table():
    """The schema type DType and the bytes table BYTES_PER_ELEMENT list the same data types (two spellings, one set)."""
    assert set(get_args(DType)) == set(BYTES_PER_ELEMENT)
