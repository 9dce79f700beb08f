"""A replica's host KV tier from the shipped data: its node's DRAM and NVMe (``hardware/host_tiers.csv``), its GPUs'
PCIe links, and the popularity of prefix blocks in a trace with block hashes (LRU stack distances of its block
reads, computed once per trace and request count)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from fleetplan.costmodels.hardware import GPU, Model
from fleetplan.costmodels.kvtiers import HostTier, replica_tier_sizes, tier_shares
from fleetplan.costmodels.prefixcache import stack_distances
from fleetplan.datasets.catalog.host_tiers import load_node_tiers
from fleetplan.datasets.prefix_blocks import MOONCAKE_BLOCK_TOKENS, read_block_ids
from fleetplan.errors import InputError


@lru_cache(maxsize=8)
def block_stack_distances(trace: str | Path, requests: int) -> np.ndarray:
    """LRU stack distances of every prefix-block read of the first ``requests`` requests of ``trace`` (a shipped
    name or a JSON Lines file with hash_ids; :func:`~fleetplan.datasets.prefix_blocks.read_block_ids`), in
    trace order (int64 array, -1 for a block's first read; read-only). Raises InputError for a bad trace."""
    reqs = read_block_ids(trace, limit=requests)
    d = stack_distances([b for q in reqs for b in q])
    d.setflags(write=False)
    return d


def block_bytes(model: Model, kv_dtype: str = "bf16") -> float:
    """KV bytes of one 512-token block of the Mooncake traces for ``model`` at ``kv_dtype``."""
    return MOONCAKE_BLOCK_TOKENS * model.kv_bytes_per_token(kv_dtype)


def trace_hit_rate(model: Model, trace: str | Path, requests: int, cache_bytes: float, *,
                   kv_dtype: str = "bf16") -> float:
    """Share of the prefix-block reads of the first ``requests`` requests of ``trace`` (its block hashes) found in
    an LRU cache of ``cache_bytes`` bytes of ``model``'s KV at ``kv_dtype``: the reads whose LRU stack distance
    (:func:`block_stack_distances`) is below the cache's blocks (cache_bytes // :func:`block_bytes`), as the host
    tier's HBM share (:func:`~fleetplan.costmodels.kvtiers.tier_shares` with no DRAM or NVMe). As for the host tier,
    one cache sees every request of the trace (routing over several replicas splits the reads and lowers the rate;
    ``fleetplan prefix-cache`` shows by how much) and a block is the trace's 512 tokens. Example: hashes [1, 2],
    [1, 2, 3], [4, 1] with a cache of 2 blocks: distances -1, -1, 1, 1, -1, -1, 3: hits 2 of 7 = 0.2857. Raises
    InputError for a bad trace or a negative cache."""
    if not cache_bytes >= 0:
        raise InputError("the prefix cache's size must be >= 0 bytes", field="cache_bytes", value=cache_bytes)
    return tier_shares(block_stack_distances(trace, requests), int(cache_bytes // block_bytes(model, kv_dtype)),
                       0, 0).hbm


def replica_host_tier(model: Model, gpu: GPU, gpus: int, *, kv_dtype: str = "bf16",
                      block_trace: str = "mooncake-conversation", requests: int = 3000, dram_share: float = 0.5,
                      spill_share: float = 0.5, nvme_share: float = 0.5,
                      hbm_cache_bytes: float = 0.0) -> HostTier:
    """The host tier of a replica of ``model`` on ``gpus`` GPUs of type ``gpu``
    (:func:`~fleetplan.costmodels.kvtiers.replica_tier_sizes` for the sizes; :func:`block_stack_distances` for
    where its prefix-block reads are served, with ``hbm_cache_bytes`` of HBM caching the hottest blocks: 0 in the
    planner, whose HBM holds the running batch). Raises InputError for a GPU without a host-tier row, a bad trace
    or a share outside [0, 1]."""
    node = load_node_tiers(gpu)
    dram_cache, spill, nvme, dram_bw, nvme_bw = replica_tier_sizes(node, gpus, dram_share=dram_share,
                                                                   nvme_share=nvme_share, spill_share=spill_share)
    blk = block_bytes(model, kv_dtype)
    shares = tier_shares(block_stack_distances(block_trace, requests), int(hbm_cache_bytes // blk),
                         int(dram_cache // blk), int(nvme // blk))
    return HostTier(shares=shares, kv_bytes_per_token=model.kv_bytes_per_token(kv_dtype),
                    dram_read_bytes_per_s=dram_bw, nvme_read_bytes_per_s=nvme_bw, spill_room_bytes=spill,
                    label=f"{node.instance}: DRAM {dram_cache / 1e9:.0f} GB cache + {spill / 1e9:.0f} GB spill at "
                          f"{dram_bw / 1e9:.0f} GB/s, NVMe {nvme / 1e9:.0f} GB at {nvme_bw / 1e9:.0f} GB/s; "
                          f"prefix hits {100 * shares.dram:.1f}% DRAM, {100 * shares.nvme:.1f}% NVMe ({block_trace})")
