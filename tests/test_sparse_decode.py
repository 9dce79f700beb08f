"""Long-context sparse decode as a KV-read multiplier (engine.kv_read_fraction), with its quality caveat stated."""

from __future__ import annotations

from pathlib import Path

import pytest
from scenario_support import default_with_one_model

from fleetplan.costmodels.capacity import replica_capacity
from fleetplan.costmodels.demand import TokenMix
from fleetplan.costmodels.engine import EngineConfig
from fleetplan.costmodels.latency import decode_roofline_s
from fleetplan.costmodels.slo import SLO
from fleetplan.datasets.calibration import load_calibration
from fleetplan.datasets.catalog.names import get_gpu, get_model
from fleetplan.errors import InputError
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.read import load_scenario

ROOT = Path(__file__).parents[1]


def test_kv_read_multiplier_by_hand():
    # Llama-3.1-8B on H100 tp 1, 16 sequences of 32,000 tokens, reading a quarter of the KV: bytes = weights +
    # 0.25 x 16 x 32,000 x 131,072 (KV bytes per token, bf16) = weights + 1.678e10; over 3.35e12 B/s x efficiency.
    m, g = get_model("Llama-3.1-8B"), get_gpu("H100-SXM-80GB")
    c = load_calibration(g)
    mem, comp = decode_roofline_s(m, g, 16, 32000, calib=c, kv_read_fraction=0.25)
    kv = 0.25 * 16 * 32000 * 131072
    assert kv == pytest.approx(1.678e10, rel=1e-3)
    assert mem == pytest.approx((m.weight_bytes("bf16") + kv) / (g.hbm_bandwidth_bytes_per_s * c.decode_bw_efficiency))
    # attention compute is a quarter too: 16 x (2 x params + 0.25 x 4 x 32 layers x 32,000 x 32 heads x 128)
    flops = 16 * (2 * m.params_active + 0.25 * 4 * 32 * 32000 * 32 * 128)
    assert comp == pytest.approx(flops / (g.bf16_flops_per_s * c.prefill_mfu))
    with pytest.raises(InputError):
        EngineConfig(kv_read_fraction=0.0)


def test_long_context_capacity_rises_and_the_source_states_the_caveat(tmp_path):
    m, g = get_model("Llama-3.1-8B"), get_gpu("H100-SXM-80GB")
    c = load_calibration(g)
    mix = TokenMix(input_tokens_mean=30000, input_tokens_p95=60000, output_tokens_mean=400, output_tokens_p95=1000)
    slo = SLO(ttft_s=30.0, tpot_s=0.05)
    dense = replica_capacity(m, g, mix, slo, calib=c, engine=EngineConfig(mode="prefill-first"))
    sparse = replica_capacity(m, g, mix, slo, calib=c, engine=EngineConfig(mode="prefill-first",
                                                                             kv_read_fraction=0.25))
    assert sparse.req_per_s > dense.req_per_s > 0
    assert sparse.max_batch == dense.max_batch  # the KV keeps its memory

    scen = default_with_one_model(tmp_path, "Llama-3.1-8B", {"kv_read_fraction": 0.5})
    p = build_problem(load_scenario(scen))
    sources = [o.capacity_source for o in p.options] + [s.capacity_source for s in p.share_options]
    assert sources and all("sparse decode reading 50% of the KV" in s and "quality change is not modelled" in s
                           for s in sources)
