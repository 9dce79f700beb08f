"""KV tiers as capacity (costmodels/kvtiers.py, capacity point 12, the host_tier scenario option): every figure is
hand arithmetic from the docstrings' rules."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleetplan.cli.main import main
from fleetplan.costmodels.capacity import replica_capacity, replica_capacity_from_latency
from fleetplan.costmodels.demand import TokenMix
from fleetplan.costmodels.engine import PREFILL_FIRST, VLLM_V1, EngineConfig
from fleetplan.costmodels.kvtier_curve import miss_rate_ttft_curve
from fleetplan.costmodels.kvtiers import HostTier, TierShares, max_batch, replica_tier_sizes, tier_shares
from fleetplan.costmodels.slo import SLO
from fleetplan.datasets.calibration import load_calibration
from fleetplan.datasets.catalog.host_tiers import load_node_tiers
from fleetplan.datasets.catalog.names import get_gpu, get_model
from fleetplan.datasets.kv_tiers import replica_host_tier
from fleetplan.errors import InputError
from fleetplan.placement.validate import validate
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.read import load_scenario
from fleetplan.simulator.verify import verify_plan
from fleetplan.solvers.solve import solve


def test_tier_shares_cut_one_lru_stack_at_the_tier_sizes() -> None:
    # distances -1 (first read), 0, 3, 9, 4; HBM 1 block, DRAM 4, NVMe 5: 0 < 1 HBM; 3 < 5 DRAM; 4 < 5 DRAM;
    # 9 < 10 NVMe; the first read misses -> (1, 2, 1, 1) / 5
    s = tier_shares(np.array([-1, 0, 3, 9, 4]), 1, 4, 5)
    assert (s.hbm, s.dram, s.nvme, s.miss) == (0.2, 0.4, 0.2, 0.2)
    assert s.hit == pytest.approx(0.8) and s.hbm_miss == pytest.approx(0.8)
    # no NVMe: the read at distance 9 misses
    assert tier_shares(np.array([-1, 0, 3, 9, 4]), 1, 4, 0).miss == pytest.approx(0.4)
    with pytest.raises(InputError, match="dram_blocks"):
        tier_shares(np.array([0]), 1, -1, 0)


def test_swap_in_is_bytes_over_bandwidth_at_the_miss_rate() -> None:
    # 10,000 prompt tokens x 131,072 B (Llama-3.1-8B bf16) = 1.31072e9 B; HBM misses: 30% from DRAM at 32 GB/s,
    # 10% from NVMe at 7 GB/s: 1.31072e9 x (0.3 / 32e9 + 0.1 / 7e9) = 0.012288 + 0.018725 = 0.031013 s
    t = HostTier(TierShares(0.1, 0.3, 0.1, 0.5), kv_bytes_per_token=131_072, dram_read_bytes_per_s=32e9,
                 nvme_read_bytes_per_s=7e9)
    assert t.swap_in_s(10_000) == pytest.approx(1.31072e9 * 0.3 / 32e9 + 1.31072e9 * 0.1 / 7e9)
    assert t.swap_in_s(10_000) == pytest.approx(0.031013, abs=1e-6)
    # the prefill with the tier: prefill(I) - prefill(h I) + prefill(1) + swap; h = 0.5; linear prefill 1e-4 s/token:
    # 1.0 - 0.5 + 0.0001 + 0.031013
    p = t.prefill_s(lambda i: 1e-4 * i)
    assert p(10_000) == pytest.approx(1.0 - 0.5 + 1e-4 + t.swap_in_s(10_000))


def test_a_tier_that_serves_reads_needs_a_bandwidth() -> None:
    with pytest.raises(InputError, match="nvme_read_bytes_per_s"):
        HostTier(TierShares(0.0, 0.0, 0.2, 0.8), kv_bytes_per_token=1.0, dram_read_bytes_per_s=1e9,
                 nvme_read_bytes_per_s=0.0)


def test_max_batch_and_spill_step() -> None:
    # (40 GB + 20 GB room - 4 GB) / 1 GB + 1 = 57 vs (40 - 4) / 1 + 1 = 37
    assert max_batch(40e9, 1e9, 4e9) == 37 and max_batch(40e9, 1e9, 4e9, 20e9) == 57
    t = HostTier(TierShares(0, 0, 0, 1), kv_bytes_per_token=1.0, dram_read_bytes_per_s=50e9,
                 nvme_read_bytes_per_s=0.0, spill_room_bytes=20e9)
    # 3.5 sequences over HBM's 37, 1 GB each, at 50 GB/s: 0.07 s more per step; none at or below 37
    assert t.spill_step_s(40.5, 37, 1e9) == pytest.approx(0.07)
    assert t.spill_step_s(37, 37, 1e9) == 0.0


def _flat(mix: TokenMix, slo: SLO, tier: HostTier | None):
    # prefill ~free (1 ns per token) and a flat 10-ms decode step: only KV memory limits the rate
    return replica_capacity_from_latency(lambda i: 1e-9 * i, lambda b, c: 0.01, mix, slo, kv_bytes_per_seq=1e9,
                                         kv_bytes_per_seq_p95=1e9, kv_budget_bytes=10e9, per_request=False,
                                         host_tier=tier, engine=PREFILL_FIRST)


def test_hbm_limited_replica_gains_batch_and_rate_by_the_computed_factor() -> None:
    mix = TokenMix(1000, 1000, 100, 100)
    slo = SLO(ttft_s=10.0, tpot_s=0.1)
    hbm = _flat(mix, slo, None)
    # HBM: (10 - 1) / 1 + 1 = 10 sequences; the p95 of the KV the batch holds (capacity point 8: a compound Poisson
    # sum, B + 1.645 sqrt(r B) mean sequences, r = E[X²]/E[X]² for X ~ 1000 + U(0, 100): (1000² + 1000·100 +
    # 100²/3) / 1050² = 1.000756) plus the admitted p95 prompt (1000 / 1050 = 0.952 sequences; prefills of 1 µs
    # hold next to nothing) must stay <= 10: sqrt(B) = (-1.645 sqrt(r) + sqrt(1.645² r + 4 (10 - 0.952))) / 2,
    # B = 5.270; lambda = B / (100 x 0.01) = 5.270 req/s
    assert hbm.max_batch == pytest.approx(10.0) and hbm.limiting == "kv_memory"
    r, p95_prompt = (1000**2 + 1000 * 100 + 100**2 / 3) / 1050**2, 1000 / 1050

    def batch(cap):
        return ((-1.645 * math.sqrt(r) + math.sqrt(1.645**2 * r + 4 * (cap - p95_prompt))) / 2) ** 2

    b1 = batch(10)
    assert hbm.req_per_s == pytest.approx(b1 / 1.0, rel=2e-3)
    assert b1 == pytest.approx(5.270, rel=1e-3)
    # 5 GB of DRAM spill room at a (very fast) 1e15 B/s: 15 sequences, a factor 15 / 10 = 1.5; the quantile may
    # reach 15: B = 9.087 <= 10 (the mean still fits HBM)
    tier = HostTier(TierShares(0, 0, 0, 1), kv_bytes_per_token=1.0, dram_read_bytes_per_s=1e15,
                    nvme_read_bytes_per_s=0.0, spill_room_bytes=5e9)
    dram = _flat(mix, slo, tier)
    assert dram.max_batch / hbm.max_batch == pytest.approx(1.5)
    b2 = batch(15)
    assert dram.req_per_s == pytest.approx(b2, rel=2e-3)
    assert dram.req_per_s / hbm.req_per_s == pytest.approx(b2 / b1, rel=3e-3)  # 1.724
    # the same room over a slow link: the p95 step pays (bq - 10) x 1 GB / 20 GB/s; at the DRAM rate (B = 9.087,
    # bq = 9.087 + 1.645 sqrt(9.087) = 14.05) that is 4.05 x 0.05 = 0.20 s more per step: TPOT 0.21 s > 0.1 s, so
    # the rate stops lower
    slow = _flat(mix, slo, HostTier(TierShares(0, 0, 0, 1), kv_bytes_per_token=1.0, dram_read_bytes_per_s=20e9,
                                    nvme_read_bytes_per_s=0.0, spill_room_bytes=5e9))
    assert hbm.req_per_s < slow.req_per_s < dram.req_per_s


def test_tier_and_stated_hit_rate_are_not_both_taken() -> None:
    with pytest.raises(InputError, match="prefix_hit_rate"):
        replica_capacity_from_latency(lambda i: 1e-4 * i, lambda b, c: 0.01, TokenMix(100, 100, 10, 10),
                                      SLO(ttft_s=1.0, tpot_s=0.1), kv_bytes_per_seq=1e6, kv_budget_bytes=1e9,
                                      engine=EngineConfig(mode="prefill-first", prefix_hit_rate=0.2),
                                      host_tier=HostTier(TierShares(0, 0, 0, 1), 1.0, 1e9, 1e9))


def test_node_tiers_per_gpu_from_the_catalog() -> None:
    # p5.48xlarge: 2048 GiB / 8 GPUs = 256 GiB; 8 x 3.84 TB / 8 = 3.84 TB; DRAM over PCIe Gen5 128 / 2 = 64 GB/s one
    # way; NVMe 8 drives x 7 GB/s / 8 GPUs = 7 GB/s
    n = load_node_tiers(get_gpu("H100"))
    assert n.dram_bytes_per_gpu == 256 * 2**30 and n.nvme_bytes_per_gpu == pytest.approx(3.84e12)
    assert n.dram_read_bytes_per_s_per_gpu == 64e9 and n.nvme_read_bytes_per_s_per_gpu == pytest.approx(7e9)
    # a tp-2 replica, half the DRAM to the tier, half of that spill room, a quarter of the NVMe:
    # 2 x 256 GiB x 0.5 = 256 GiB -> 128 GiB cache + 128 GiB spill; 2 x 3.84 TB x 0.25 = 1.92 TB; 128 GB/s, 14 GB/s
    cache, spill, nvme, dbw, nbw = replica_tier_sizes(n, 2, dram_share=0.5, nvme_share=0.25, spill_share=0.5)
    assert (cache, spill) == (128 * 2**30, 128 * 2**30) and nvme == pytest.approx(1.92e12)
    assert (dbw, nbw) == (128e9, pytest.approx(14e9))
    with pytest.raises(InputError, match="host_tier"):
        load_node_tiers(get_gpu("L4"))



LONG = {
    "name": "long",
    "options": {"window_length_s": 21600, "engine": {"mode": "vllm-v1"}},
    "sites": [{"name": "aws:us-east-1", "inventory": [{"gpu": "H100", "nodes": 1, "gpus_per_node": 8}]}],
    "models": [{"name": "Llama-3.1-8B", "tp": [1, 2], "slo": {"ttft_p95_s": 5.0, "tpot_p95_s": 0.1},
                "token_mix": {"trace": "mooncake-conversation"}, "demand": {"rates": [1.0, 2.0, 3.0, 1.5]}}],
}


def test_host_tier_option_sizes_dedicated_replicas_with_the_tier(tmp_path) -> None:
    import yaml

    def problem(doc: dict, name: str):
        p = tmp_path / name
        p.write_text(yaml.safe_dump(doc))
        sc = load_scenario(p)
        return sc, build_problem(sc)

    _, hbm = problem(LONG, "hbm.yaml")
    tiered_doc = {**LONG, "options": {**LONG["options"], "host_tier": {"requests": 1000}}}
    sc, tiered = problem(tiered_doc, "tier.yaml")
    by_tp = {o.tp: o for o in tiered.options}
    # the option's capacity is the capacity model's with the replica's tier (the same inputs, the margin aside)
    m, g = get_model("Llama-3.1-8B"), get_gpu("H100")
    mix = sc.token_mixes["Llama-3.1-8B"]
    cap = replica_capacity(m, g, mix, SLO(ttft_s=5.0, tpot_s=0.1), tp=1, calib=load_calibration(g), engine=VLLM_V1,
                           host_tier=replica_host_tier(m, g, 1, requests=1000))
    assert by_tp[1].capacity_req_per_s == pytest.approx(cap.req_per_s)
    assert "host KV tier" in by_tp[1].capacity_source
    # the tier only adds capacity on this long-prompt mix (prefix hits fetched instead of recomputed)
    for o in hbm.options:
        assert by_tp[o.tp].capacity_req_per_s >= o.capacity_req_per_s
    plans = []
    for prob in (hbm, tiered):
        plan = solve(prob, "highs", time_limit_s=20, threads=1)
        assert validate(prob, plan).ok
        plans.append(plan)
    assert plans[1].objective_usd <= plans[0].objective_usd + 1e-6


def test_kv_tiers_command_prints_the_tiers_and_writes_the_curve(tmp_path) -> None:
    from click.testing import CliRunner

    png = tmp_path / "curve.png"
    res = CliRunner().invoke(main, ["kv-tiers", "--requests", "300", "--cache-gb", "0,64", "--rate", "0.2",
                                    "--plot", str(png)])
    assert res.exit_code == 0, res.output
    assert "aws:p5.48xlarge" in res.output and "TTFT p99" in res.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a 0-GB cache misses every read: the three tiers give the same TTFT
    row = next(line for line in res.output.splitlines() if "100.0%" in line)
    assert len({c.strip() for c in row.split("│")[3:6]}) == 1
    bad = CliRunner().invoke(main, ["kv-tiers", "--cache-gb", "a,b"])
    assert bad.exit_code == 2 and "--cache-gb" in bad.output and "Traceback" not in bad.output
    l4 = CliRunner().invoke(main, ["kv-tiers", "--gpu", "L4"])
    assert l4.exit_code == 2 and "no host-tier row for L4" in l4.output
    # Weights that do not fit (141 GB on one 80-GB H100): refused before any table (it printed tables of 0 req/s
    # and nan, then advised --rate, which drew a plot of empty axes).
    big = CliRunner().invoke(main, ["kv-tiers", "--model", "Llama-3.1-70B", "--tp", "1", "--requests", "50"])
    assert big.exit_code == 2 and "field '--tp'" in big.output and "does not fit" in big.output
    assert "KV tiers of the replica" not in big.output
    # A rate far above capacity: said, and no plot of a curve that is unbounded everywhere
    flood = tmp_path / "flood.png"
    res = CliRunner().invoke(main, ["kv-tiers", "--requests", "300", "--cache-gb", "0,64", "--rate", "1000",
                                    "--plot", str(flood)])
    assert res.exit_code == 2 and "above the replica's capacity" in res.output and "no plot written" in res.output
    assert not flood.exists()


def test_verify_refuses_a_host_tier_it_cannot_replay() -> None:
    with pytest.raises(InputError, match="host_tier"):
        verify_plan(load_scenario("kv_tiers_long"))


def test_curve_orders_the_tiers_by_their_bandwidth() -> None:
    # 4 requests of blocks [0 1], [0 1], [2 3], [0 1]: distances -1 -1 1 1 -1 -1 3 3; a 2-block cache holds the
    # 1s (hit 2/8), a 4-block cache the 3s too (hit 4/8)
    d = np.array([-1, -1, 1, 1, -1, -1, 3, 3])
    curve = miss_rate_ttft_curve(d, 1.0, [0.0, 2.0, 4.0], read_bytes_per_s={"HBM": math.inf, "DRAM": 64e9,
                                                                          "NVMe": 7e9},
                                 kv_bytes_per_token=131_072, prefill_s=lambda i: 1e-4 * i,
                                 decode_step_s=lambda b, c: 0.01, mix=TokenMix(8000, 16000, 100, 200),
                                 slo=SLO(ttft_s=5.0, tpot_s=0.1, ttft_percentile=99.0), rate_req_per_s=0.05,
                                 engine=PREFILL_FIRST)
    assert [p.miss for p in curve] == [1.0, 0.75, 0.5]
    assert len(set(curve[0].ttft_s.values())) == 1  # nothing cached: no tier matters
    for p in curve[1:]:
        assert p.ttft_s["HBM"] < p.ttft_s["DRAM"] < p.ttft_s["NVMe"] < curve[0].ttft_s["HBM"]


def test_a_missing_block_trace_names_the_option(tmp_path) -> None:
    import yaml

    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({**LONG, "options": {**LONG["options"], "host_tier": {"block_trace": "no.jsonl"}}}))
    with pytest.raises(InputError, match="no.jsonl") as exc:
        build_problem(load_scenario(p))
    assert exc.value.field == "options.host_tier.block_trace"
