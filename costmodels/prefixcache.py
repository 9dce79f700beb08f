"""Prefix-cache hit rates from block-id traces by LRU stack distances: per-replica caches vs one cache shared
across a model's replicas.

A request reads its prefix blocks in order. Under LRU, an access hits a cache of C blocks iff its stack distance
(distinct blocks touched since the previous access to the same block) is below C (Mattson et al. 1970), so one
pass gives the hit rate at every size. Per-replica: requests go to R replicas round-robin (a router without prefix
affinity) and each replica has its own LRU of C blocks; shared: one LRU of R × C blocks over all requests (the
pooled "cloud" cache). Block-level counting: each block hits or misses on its own.

The cache's dollars (:func:`prefix_cache_ledgers`): the prefill GPU-hours of the blocks each option misses, the
caches' memory (HBM pro rata of the GPU-hour) and, for the shared cache, the GPU time waiting for blocks moved
between replicas and the egress of the moved bytes; the break-evens: the egress price below which a remote hit
beats recomputing (:func:`break_even_egress_usd_per_gb`) and the hit rate at which a cache pays for its memory
(:func:`break_even_hit_rate`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fleetplan.costmodels.ledger import Flow, Ledger, LineItem, egress_items
from fleetplan.costmodels.prices import EgressTable, GpuPrice
from fleetplan.errors import check_range


def stack_distances(accesses: Sequence[int]) -> np.ndarray:
    """LRU stack distance of each access (int64, -1 for a first access): the number of distinct other ids
    accessed since the previous access to the same id. O(n log n) with a Fenwick tree over access positions."""
    n = len(accesses)
    tree = np.zeros(n + 1, dtype=np.int64)

    def add(i: int, v: int) -> None:
        i += 1
        while i <= n:
            tree[i] += v
            i += i & -i

    def prefix(i: int) -> int:  # sum over positions < i
        s = 0
        while i > 0:
            s += int(tree[i])
            i -= i & -i
        return s

    last: dict[int, int] = {}
    out = np.full(n, -1, dtype=np.int64)
    for pos, x in enumerate(accesses):
        j = last.get(x)
        if j is not None:
            out[pos] = prefix(pos) - prefix(j + 1)  # live positions strictly between j and pos
            add(j, -1)
        add(pos, 1)
        last[x] = pos
    return out


def hit_rate(distances: np.ndarray, capacity_blocks: int) -> float:
    """Share of accesses with 0 <= distance < capacity_blocks (0 for no accesses)."""
    if len(distances) == 0:
        return 0.0
    return float(((distances >= 0) & (distances < capacity_blocks)).mean())


def per_replica_and_shared(requests: Sequence[Sequence[int]], replicas: int, capacity_blocks: int
                           ) -> tuple[float, float]:
    """(per-replica hit rate, shared hit rate) of ``requests`` (block ids per request) on ``replicas`` replicas of
    ``capacity_blocks`` blocks each (module docstring). Raises ValueError for replicas or capacity < 1."""
    if replicas < 1 or capacity_blocks < 1:
        raise ValueError("replicas and capacity_blocks must be >= 1")
    hits = total = 0
    for r in range(replicas):
        acc = [b for q in requests[r::replicas] for b in q]
        d = stack_distances(acc)
        hits += int(((d >= 0) & (d < capacity_blocks)).sum())
        total += len(acc)
    shared = stack_distances([b for q in requests for b in q])
    return (hits / total if total else 0.0), hit_rate(shared, replicas * capacity_blocks)


@dataclass(frozen=True)
class CacheCosts:
    """What the prefix cache's ledger prices (:func:`prefix_cache_ledgers`), per day.

    Attributes:
        requests_per_day: requests the replicas serve per day.
        blocks_per_request: prefix blocks a request reads (the trace's mean).
        block_bytes: KV bytes of one block.
        prefill_gpu_s_per_block: GPU-seconds to recompute one block (the replica's prefill seconds × its GPUs).
        fetch_gpu_s_per_block: GPU-seconds a replica waits for one block from another replica (block bytes / the
            link's bandwidth × its GPUs; the fetch is on the prefill's critical path).
        price: the GPUs' price row (USD per GPU-hour, its source).
        cache_gpu_hours_per_day: the caches' memory priced as GPU-hours: replicas × cache bytes / GPU memory × 24
            (HBM held by the cache, pro rata of the GPU-hour).
        egress_table: the egress price table of the route between the replicas (None within a zone: no charge).
        route: where the blocks travel, e.g. 'aws:us-east-1 to aws:us-west-2' (for the egress line's label).
    """

    requests_per_day: float
    blocks_per_request: float
    block_bytes: float
    prefill_gpu_s_per_block: float
    fetch_gpu_s_per_block: float
    price: GpuPrice
    cache_gpu_hours_per_day: float
    egress_table: EgressTable | None = None
    route: str = ""

    @property
    def usd_per_gpu_s(self) -> float:
        """The price per GPU-second, USD."""
        return float(self.price.usd_per_gpu_hour) / 3600.0


def prefix_cache_ledgers(per_replica_hit: float, shared_hit: float, costs: CacheCosts) -> dict[str, Ledger]:
    """Ledgers per day of the replicas' prefix-block prefill with no cache, per-replica caches and one shared cache
    (hit rates from :func:`per_replica_and_shared`); each line's quantity × price, in GPU-hours and GB:

    * prefill of the blocks the option misses: requests × blocks × (1 − hit) × prefill GPU-s / 3600 GPU-hours;
    * the caches' memory (both caches hold the same bytes: the shared one pools the replicas' own):
      ``cache_gpu_hours_per_day`` GPU-hours;
    * shared only, for its extra hits (all taken as remote, as `fleetplan prefix-cache` counts them): the GPUs'
      wait for the moved blocks, requests × blocks × (shared − per-replica) × fetch GPU-s / 3600 GPU-hours, and
      the moved GB priced by the route's egress table (none within a zone).

    Example: 1e6 requests/day × 10 blocks, prefill 0.02 GPU-s a block at $3.6/GPU-h ($0.001/GPU-s): no cache
    1e7 × 0.02 / 3600 = 55.56 GPU-h = $200/day. Raises InputError for hit rates outside [0, 1]."""
    for name, h in (("per_replica_hit", per_replica_hit), ("shared_hit", shared_hit)):
        check_range(h, field=name, low=0.0, high=1.0)
    c = costs
    reads = c.requests_per_day * c.blocks_per_request
    src = c.price.source or "catalog"

    def prefill(hit: float, option: str) -> LineItem:
        return LineItem(option, "gpu", f"prefill of missed prefix blocks ({100 * (1 - hit):.1f}% of "
                        f"{reads:,.0f} block reads)", reads * (1 - hit) * c.prefill_gpu_s_per_block / 3600.0,
                        "GPU-hour", float(c.price.usd_per_gpu_hour), src, gpu=c.price.gpu, input_share=1.0)

    def memory(option: str) -> LineItem:
        return LineItem(option, "gpu", "prefix-cache memory (HBM pro rata of the GPU-hour)",
                        c.cache_gpu_hours_per_day, "GPU-hour", float(c.price.usd_per_gpu_hour), src,
                        gpu=c.price.gpu, input_share=1.0)

    moved = reads * max(0.0, shared_hit - per_replica_hit)
    shared_items = [prefill(shared_hit, "shared cache"), memory("shared cache"),
                    LineItem("shared cache", "gpu", "GPUs waiting for blocks fetched from other replicas",
                             moved * c.fetch_gpu_s_per_block / 3600.0, "GPU-hour", float(c.price.usd_per_gpu_hour),
                             src, gpu=c.price.gpu, input_share=1.0)]
    flows = [] if c.egress_table is None else [Flow("kv", c.route.split(" to ")[0], c.route.split(" to ")[-1],
                                                     c.egress_table.route_class, moved * c.block_bytes / 1e9,
                                                     c.egress_table, input_share=1.0)]
    shared_items += egress_items("shared cache", flows)
    return {"no cache": Ledger("no cache", (prefill(0.0, "no cache"),), c.requests_per_day),
            "per-replica caches": Ledger("per-replica caches", (prefill(per_replica_hit, "per-replica caches"),
                                                                memory("per-replica caches")), c.requests_per_day),
            "shared cache": Ledger("shared cache", tuple(shared_items), c.requests_per_day)}


def break_even_egress_usd_per_gb(costs: CacheCosts) -> float:
    """Egress price, USD per GB moved, below which a block fetched from another replica costs less than recomputing
    it: (prefill GPU-s − fetch GPU-s) × USD per GPU-s / (block bytes / 1e9); negative when fetching loses even
    when free (a slow link). Example: 0.02 − 0.002 GPU-s at $0.001/GPU-s for a 0.0671-GB block: $0.268/GB."""
    c = costs
    return (c.prefill_gpu_s_per_block - c.fetch_gpu_s_per_block) * c.usd_per_gpu_s / (c.block_bytes / 1e9)


def break_even_hit_rate(costs: CacheCosts) -> float:
    """Hit rate at which a cache's saved prefill pays for its memory: cache GPU-hours × 3600 / (block reads per day
    × prefill GPU-s per block); above 1 the memory never pays. Example: 12 GPU-hours of cache memory, 1e7 reads of
    0.02 GPU-s: 43,200 / 200,000 = 0.216."""
    c = costs
    reads = c.requests_per_day * c.blocks_per_request
    return c.cache_gpu_hours_per_day * 3600.0 / (reads * c.prefill_gpu_s_per_block) if reads > 0 else math.inf
