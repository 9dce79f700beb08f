"""The miss-rate vs TTFT curve of a replica's prefix cache in each KV tier: a cache of S bytes misses a share m(S) of
the prefix-block reads (recomputed by the prefill); its hits are read from the tier that holds the cache, HBM (free),
host DRAM (over PCIe) or NVMe, before the prefill can use them. The TTFT at a percentile, at a fixed arrival rate,
by the capacity model's latency (:func:`~fleetplan.costmodels.capacity.latency_at_rate`) with the tier's prefill
(:meth:`~fleetplan.costmodels.kvtiers.HostTier.prefill_s`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from fleetplan.costmodels.capacity import latency_at_rate
from fleetplan.costmodels.demand import TokenMix
from fleetplan.costmodels.engine import EngineConfig
from fleetplan.costmodels.kvtiers import HostTier, TierShares, tier_shares
from fleetplan.costmodels.slo import SLO


@dataclass(frozen=True)
class CurvePoint:
    """One point of the curve.

    Attributes:
        cache_bytes: the prefix cache's size, bytes.
        miss: share of prefix-block reads it misses (recomputed).
        ttft_s: {tier name: TTFT at the SLO's percentile with the cache in that tier}, seconds (math.inf when the
            prefills saturate the replica).
    """

    cache_bytes: float
    miss: float
    ttft_s: dict[str, float]


def miss_rate_ttft_curve(distances: np.ndarray, block_bytes: float, cache_bytes: Sequence[float], *,
                         read_bytes_per_s: Mapping[str, float], kv_bytes_per_token: float,
                         prefill_s: Callable[[float], float], decode_step_s: Callable[[float, float], float],
                         mix: TokenMix, slo: SLO, rate_req_per_s: float, engine: EngineConfig) -> list[CurvePoint]:
    """One :class:`CurvePoint` per cache size in ``cache_bytes``: the miss share of the prefix-block reads
    (``distances``: LRU stack distances of the trace's block reads, blocks of ``block_bytes``;
    :func:`~fleetplan.costmodels.kvtiers.tier_shares`), and the TTFT at ``slo``'s TTFT percentile at
    ``rate_req_per_s`` of one replica (``prefill_s``, ``decode_step_s``: its latencies; ``engine``: resolved) with
    the cache's hits read at each tier's bandwidth in ``read_bytes_per_s`` ({name: bytes/s}; math.inf: HBM, no
    fetch)."""
    out = []
    for size in cache_bytes:
        hit = tier_shares(distances, int(size // block_bytes), 0, 0).hbm
        ttft = {}
        for name, bw in read_bytes_per_s.items():
            shares = TierShares(hit, 0.0, 0.0, 1.0 - hit) if math.isinf(bw) else TierShares(0.0, hit, 0.0, 1.0 - hit)
            tier = HostTier(shares, kv_bytes_per_token=kv_bytes_per_token,
                            dram_read_bytes_per_s=bw if not math.isinf(bw) else 0.0, nvme_read_bytes_per_s=0.0)
            ttft[name] = latency_at_rate(tier.prefill_s(prefill_s), decode_step_s, mix, slo, rate_req_per_s,
                                         engine=engine)[0]
        out.append(CurvePoint(size, 1.0 - hit, ttft))
    return out
