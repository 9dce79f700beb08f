"""Prefix-cache hit rates by LRU stack distances (costmodels.prefixcache, datasets.prefix_blocks)."""

from __future__ import annotations

import pytest

from fleetplan.costmodels.prefixcache import hit_rate, per_replica_and_shared, stack_distances
from fleetplan.datasets.prefix_blocks import read_block_ids
from fleetplan.errors import InputError


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

    from fleetplan.cli.main import main

    r = CliRunner().invoke(main, ["prefix-cache", "--requests", "200", "--replicas", "1,2"])
    assert r.exit_code == 0, r.output
    assert "shared hit rate" in r.output and "break-even link bandwidth" in r.output
    r = CliRunner().invoke(main, ["prefix-cache", "--replicas", "0"])
    assert r.exit_code != 0 and "replicas" in r.output
