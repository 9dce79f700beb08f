"""Measured profiles: AIBrix tputs shape and bucket lookup, Splitwise reading, eligibility without data."""

from __future__ import annotations

import importlib.resources
import json
import math

import pandas as pd
import pytest

from fleetplan.costmodels.demand import TokenMix
from fleetplan.costmodels.hardware import GPU, Model
from fleetplan.costmodels.profile_capacity import profile_replica_capacity
from fleetplan.costmodels.slo import SLO
from fleetplan.datasets.profiles import (
    ProfileCapacity,
    SplitwiseProfile,
    capacity_for,
    load_aibrix_profile,
    load_splitwise,
)
from fleetplan.errors import InputError

A100 = GPU("A100-SXM4-80GB", 80e9, 2039e9, 312e12, None, 600e9, 64e9, 400)
L2_70B = Model("Llama-2-70B", 80, 8192, 64, 8, 128, 68.98e9, 68.98e9, max_context_tokens=4096)
L7B = Model("llama2-7b", 32, 4096, 32, 32, 128, 6.74e9, 6.74e9, max_context_tokens=4096)


def test_aibrix_shape_and_orientation():
    p = load_aibrix_profile("simulator-llama2-7b-a100")
    # File: indexes = [[4, 8, ..., 512] output ticks (8), [128, ..., 2048] input ticks (5)]; tputs is 8 rows × 5.
    assert p.output_buckets_tokens == (4, 8, 16, 32, 64, 128, 256, 512)
    assert p.input_buckets_tokens == (128, 256, 512, 1024, 2048)
    assert len(p.req_per_s) == 5 and all(len(r) == 8 for r in p.req_per_s)
    # tputs[0][1] (output 4, input 256) = 32.3132... sits at [input 256][output 4] after normalisation.
    assert p.req_per_s[1][0] == pytest.approx(32.3132063155413)
    # Lookup rounds up to the next bucket: 200 input -> 256, 5 output -> 8: tputs[1][1] = 31.7433...
    assert p.lookup(200, 5)[0] == pytest.approx(31.743326005665654)
    assert p.req_per_s_for(TokenMix(100, 200, 3, 5)) == pytest.approx(31.743326005665654)


def test_aibrix_zero_cell_and_out_of_range_are_infeasible():
    p = load_aibrix_profile("simulator-llama2-7b-a100")
    rate, why = p.lookup(100, 500)  # output bucket 512 row is all 0.0 in the file
    assert rate == 0.0 and "no rate meets" in why
    rate, why = p.lookup(4000, 10)
    assert rate == 0.0 and "exceed" in why


def test_aibrix_transposed_file_rejected(tmp_path):
    doc = json.loads(json.dumps({"gpu": "x", "indexes": [[4, 8, 16], [128, 256]],
                                 "tputs": [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]}))  # 2×3 = Mélange order
    f = tmp_path / "p.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="does not match indexes"):
        ProfileCapacity.from_aibrix_json(f)
    doc["tputs"] = [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]  # 3×2 = AIBrix order: accepted
    f.write_text(json.dumps(doc))
    assert ProfileCapacity.from_aibrix_json(f).req_per_s == ((1.0, 2.0, 3.0), (4.0, 5.0, 6.0))
    f.write_text(json.dumps({"gpu": "x", "tputs": []}))
    with pytest.raises(InputError, match="indexes"):
        ProfileCapacity.from_aibrix_json(f)


def test_gpu_without_profile_or_data_is_not_eligible():
    c = capacity_for(L7B, None, TokenMix(100, 200, 50, 100), SLO(1.0, 0.1), gpu_name="H100-PCIe-80GB")
    assert c.req_per_s == 0.0 and c.limiting == "no_data" and "not eligible" in c.reason
    p = load_aibrix_profile("simulator-llama2-7b-a100")
    c = capacity_for(L7B, None, TokenMix(100, 200, 3, 5), SLO(1.0, 0.1), profile=p)
    assert c.req_per_s == pytest.approx(31.743326005665654) and c.limiting == "profile"


def test_splitwise_medians_and_interpolation():
    with (importlib.resources.files("fleetplan.datasets") / "data/profiles/splitwise/perf_model.csv").open() as f:
        raw = pd.read_csv(f)
    df = load_splitwise()
    sel = raw[(raw.model == "llama2-70b") & (raw.hardware == "a100-80gb") & (raw.tensor_parallel == 2)
              & (raw.batch_size == 1) & (raw.token_size == 128)]
    m1024 = sel[sel.prompt_size == 1024].prompt_time.median() / 1e3
    m2048 = sel[sel.prompt_size == 2048].prompt_time.median() / 1e3
    prof = SplitwiseProfile.from_frame(df, "llama2-70b", "a100-80gb", 2)
    # Single-prompt points are the medians of the raw runs; 1,536 tokens lies halfway between 1,024 and 2,048.
    pts = dict(zip(prof.prefill_tokens, prof.prefill_s, strict=True))
    assert pts[2048.0] == pytest.approx(m2048)
    assert pts[1024.0] == pytest.approx(m1024)
    assert prof.prefill_time_s(1536) == pytest.approx((m1024 + m2048) / 2)
    assert prof.prefill_time_s(768, batch=2) == pytest.approx((m1024 + m2048) / 2)
    assert prof.max_batch == 64 and math.isinf(prof.decode_step_time_s(65))


def test_splitwise_missing_column_rejected(tmp_path):
    f = tmp_path / "perf.csv"
    f.write_text("model,hardware,prompt_size,batch_size,token_size,prompt_time,e2e_time,tensor_parallel\n"
                 "m,h,1,1,1,1,1,1\n")
    with pytest.raises(InputError, match="token_time"):
        load_splitwise(f)
    f.write_text("model,hardware,prompt_size,batch_size,token_size,prompt_time(ms),token_time(ms),e2e_time(ms),"
                 "tensor_parallel\nm,h,1,1,1,-3,1,1,1\n")
    with pytest.raises(InputError, match="row 1"):
        load_splitwise(f)


def test_capacity_from_measured_profile_stays_within_measured_batch():
    prof = SplitwiseProfile.from_frame(load_splitwise(), "llama2-70b", "a100-80gb", 8)
    mix = TokenMix(500, 1000, 100, 300)
    c = profile_replica_capacity(prof, mix, SLO(5.0, 0.2), model=L2_70B, gpu=A100)
    assert 0 < c.req_per_s and c.batch_at_capacity <= prof.max_batch
    tight = profile_replica_capacity(prof, mix, SLO(5.0, 0.05), model=L2_70B, gpu=A100)
    assert tight.req_per_s <= c.req_per_s
