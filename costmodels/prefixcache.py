"""Prefix-cache hit rates from block-id traces by LRU stack distances: per-replica caches vs one cache shared
across a model's replicas.

A request reads its prefix blocks in order. Under LRU, an access hits a cache of C blocks iff its stack distance
(distinct blocks touched since the previous access to the same block) is below C (Mattson et al. 1970), so one
pass gives the hit rate at every size. Per-replica: requests go to R replicas round-robin (a router without prefix
affinity) and each replica has its own LRU of C blocks; shared: one LRU of R × C blocks over all requests (the
pooled "cloud" cache). Block-level counting: each block hits or misses on its own.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


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
