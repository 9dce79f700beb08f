"""Prefix-cache hit rates by LRU stack distances (costmodels.prefixcache, datasets.prefix_blocks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetplan.cli.main import main
from fleetplan.costmodels.prefixcache import (
    CacheCosts,
    break_even_egress_usd_per_gb,
    break_even_hit_rate,
    hit_rate,
    per_replica_and_shared,
    prefix_cache_ledgers,
    stack_distances,
)
from fleetplan.costmodels.prices import EgressTable, EgressTier, GpuPrice
from fleetplan.datasets.catalog.names import get_model
from fleetplan.datasets.kv_tiers import trace_hit_rate
from fleetplan.datasets.prefix_blocks import read_block_ids
from fleetplan.errors import InputError
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.read import load_scenario
from tests.scenario_support import default_with_one_model


def test_stack_distances_by_hand():
    # a b c a b b: a again after {b, c} -> 2; b after {c, a} -> 2; b right after b -> 0.
    assert stack_distances([1, 2, 3, 1, 2, 2]).tolist() == [-1, -1, -1, 2, 2, 0]
    d = stack_distances([1, 2, 3, 1, 2, 2])
    assert hit_rate(d, 1) == pytest.approx(1 / 6)  # only the distance-0 access
    assert hit_rate(d, 3) == pytest.approx(3 / 6)


def test_shared_cache_sees_what_round_robin_splits():
    # Requests [0], [0], [1], [1] on 2 replicas round-robin: replica 0 gets [0], [1], replica 1 gets [0], [1]:
    # no repeat on either -> per-replica 0/4. Shared (2 blocks): accesses 0 0 1 1 -> hits at positions 2 and 4: 2/4.
    per, shared = per_replica_and_shared([[0], [0], [1], [1]], 2, 1)
    assert (per, shared) == (0.0, 0.5)


def test_reader(tmp_path):
    ids = read_block_ids("mooncake-conversation", limit=2)
    assert ids[0][:3] == [0, 1, 2] and ids[1][0] == 0
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"hash_ids": "x"}\n')
    with pytest.raises(InputError, match="hash_ids"):
        read_block_ids(bad)


def test_cli_prefix_cache():
    from click.testing import CliRunner

    r = CliRunner().invoke(main, ["prefix-cache", "--requests", "200", "--replicas", "1,2"])
    assert r.exit_code == 0, r.output
    assert "shared hit rate" in r.output and "break-even link bandwidth" in r.output
    r = CliRunner().invoke(main, ["prefix-cache", "--replicas", "0"])
    assert r.exit_code != 0 and "replicas" in r.output
    # A tp-1 replica that cannot hold the weights (141 GB on a 24-GB A10G) was priced with exit 0; an unknown site
    # was refused only after the hit-rate table: both are refused before any output.
    r = CliRunner().invoke(main, ["prefix-cache", "--gpu", "A10G", "--model", "Llama-3.1-70B", "--replicas", "2"])
    assert r.exit_code == 2 and "field '--model'" in r.output and "exceed 0.9 × 24 GB" in r.output, r.output
    r = CliRunner().invoke(main, ["prefix-cache", "--site", "aws:nowhere", "--replicas", "2", "--requests", "50"])
    assert r.exit_code == 2 and "no on-demand price" in r.output and "hit rate" not in r.output, r.output


def _costs(egress_usd_per_gb: float | None = None):
    price = GpuPrice("aws", "us-east-1", "", "H100-SXM-80GB", "x", 1, 3.6, 3.6, "on-demand", source="test")
    table = None if egress_usd_per_gb is None else EgressTable(
        "aws", "cross_zone", "test", (EgressTier(0.0, None, egress_usd_per_gb),), source="test")
    return CacheCosts(requests_per_day=1e6, blocks_per_request=10, block_bytes=0.05e9, prefill_gpu_s_per_block=0.02,
                      fetch_gpu_s_per_block=0.002, price=price, cache_gpu_hours_per_day=12.0, egress_table=table,
                      route="aws:us-east-1:a to aws:us-east-1:b")


def test_prefix_cache_ledger_by_hand():
    # 1e6 requests x 10 blocks = 1e7 reads; a block's prefill 0.02 GPU-s at $3.6/GPU-h = $0.001/GPU-s.
    # no cache: 1e7 x 0.02 = 2e5 GPU-s = 55.56 GPU-h = $200.00/day
    # per-replica (10% hits): 0.9 x $200 = $180 + memory 12 GPU-h x 3.6 = $43.20 -> $223.20
    # shared (15% hits): $170 + $43.20 + moved 1e7 x 0.05 = 5e5 blocks x 0.002 GPU-s = 1000 GPU-s = $1.00
    #   + 5e5 x 0.05 GB = 25,000 GB x $0.02 = $500 -> $714.20
    led = prefix_cache_ledgers(0.10, 0.15, _costs(0.02))
    assert led["no cache"].total_usd_per_day == pytest.approx(200.0)
    assert led["per-replica caches"].total_usd_per_day == pytest.approx(223.2)
    assert led["shared cache"].total_usd_per_day == pytest.approx(170 + 43.2 + 1.0 + 500.0)
    # break-even egress: (0.02 - 0.002) x 0.001 / 0.05 = $0.00036/GB: $0.02 is far above it
    assert break_even_egress_usd_per_gb(_costs(0.02)) == pytest.approx(0.00036)
    # at that price the shared cache's extra hits cost what they save: 0.05 x $200 = $10 saved,
    # $1 of waiting + 25,000 GB x $0.00036 = $9
    at_be = prefix_cache_ledgers(0.10, 0.15, _costs(0.00036))
    assert at_be["shared cache"].total_usd_per_day == pytest.approx(led["per-replica caches"].total_usd_per_day)
    # within a zone (no egress table): $170 + $43.20 + $1 = $214.20 < $223.20
    assert prefix_cache_ledgers(0.10, 0.15, _costs())["shared cache"].total_usd_per_day == pytest.approx(214.2)
    # the memory pays at 12 GPU-h x 3600 / (1e7 x 0.02) = 21.6% hits
    assert break_even_hit_rate(_costs()) == pytest.approx(0.216)


def test_prefix_cache_command_prints_the_ledger():
    from click.testing import CliRunner

    res = CliRunner().invoke(main, ["prefix-cache", "--requests", "200", "--replicas", "1,2",
                                    "--peer-site", "aws:us-west-2"])
    assert res.exit_code == 0, res.output
    assert "ledger per day" in res.output and "egress" in res.output
    # Llama-3.1-8B on H100: a 67-MB block over the 5-Gb/s inter-region default link takes ~0.1 s, more than its
    # ~20-ms prefill: fetching never pays
    assert "break-even egress: none" in res.output


def _repeated_prompt_trace(folder: Path) -> Path:
    # Four requests with the same four-block prompt: 16 block reads; the first request's 4 miss, and each later read
    # has LRU stack distance 3 (the other three blocks were read since), so a cache of >= 4 blocks holds all of
    # them: 12 / 16 = 0.75; a cache of 3 blocks evicts each block just before it is read again: 0 hits.
    t = folder / "t.jsonl"
    t.write_text("".join(json.dumps({"hash_ids": [1, 2, 3, 4]}) + "\n" for _ in range(4)))
    return t


def test_trace_hit_rate_by_hand(tmp_path):
    t = _repeated_prompt_trace(tmp_path)
    m = get_model("Llama-3.1-8B")
    block = 512 * m.kv_bytes_per_token("bf16")  # 512 tokens x 131,072 bytes = 67,108,864 bytes
    assert block == 67_108_864
    assert trace_hit_rate(m, str(t), 100, 4 * block) == pytest.approx(12 / 16)
    assert trace_hit_rate(m, str(t), 100, 4 * block - 1) == 0.0  # 3 whole blocks
    assert trace_hit_rate(m, str(t), 2, 4 * block) == pytest.approx(4 / 8)  # first 2 requests: 4 hits of 8 reads


def test_engine_prefix_hit_rate_from_a_trace(tmp_path):
    # A scenario whose model measures its hit rate from the trace: every option's KV budget holds the trace's 4
    # blocks many times over, so each option is sized at 0.75, says so in its capacity source, and rates as the same
    # model with prefix_hit_rate: 0.75 stated.
    t = _repeated_prompt_trace(tmp_path)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    traced = default_with_one_model(tmp_path / "a", "Llama-3.1-8B", {"prefix_hit_rate": {"from_trace": str(t)}})
    stated = default_with_one_model(tmp_path / "b", "Llama-3.1-8B", {"prefix_hit_rate": 0.75})
    p_traced, p_stated = build_problem(load_scenario(traced)), build_problem(load_scenario(stated))
    assert p_traced.options
    for o in p_traced.options:
        assert o.engine is not None and o.engine.prefix_hit_rate == pytest.approx(0.75)
        assert "prefix hit rate 75.0% from trace t.jsonl" in o.capacity_source, o.capacity_source
    by_key = {(o.pool, o.tp): o.capacity_req_per_s for o in p_stated.options}
    assert {(o.pool, o.tp): o.capacity_req_per_s for o in p_traced.options} == pytest.approx(by_key)
    # Without the hit rate the same options rate lower (the shared prefix is recomputed).
    plain = build_problem(load_scenario(default_with_one_model(tmp_path, "Llama-3.1-8B", {})))
    assert sum(o.capacity_req_per_s for o in plain.options) < sum(by_key.values())


def test_engine_hit_rate_trace_that_is_missing_names_the_key(tmp_path):
    s = default_with_one_model(tmp_path, "Llama-3.1-8B", {"prefix_hit_rate": {"from_trace": "nope.jsonl"}})
    with pytest.raises(InputError) as e:
        build_problem(load_scenario(s))
    assert e.value.field == "engine.prefix_hit_rate.from_trace" and "does not exist" in str(e.value)
