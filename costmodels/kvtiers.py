"""KV-cache tiers as capacity: HBM, host DRAM and local NVMe of a node, hot and cold blocks by popularity, the
extra KV room a host tier gives a replica and the swap-in time it costs.

The model (pure math; the numbers come from ``datasets/data/hardware/host_tiers.csv`` and the GPU catalog, the
block popularity from a trace with block hashes, e.g. the Mooncake traces):

1. Tiers per replica. A node's host DRAM and NVMe are split evenly between its GPUs; a replica on g GPUs gets g
   shares, of which the scenario gives the KV tier a part (``dram_share``, ``nvme_share``). DRAM is read into HBM
   over the GPUs' PCIe links (one direction: half the catalog's bidirectional figure, times g); NVMe at the drives'
   read bandwidth (the node's drives × read / GPUs per node, times g), at most the PCIe figure.
2. Hot and cold blocks by popularity. Prefix blocks (a request's prompt blocks, by their hashes) live in one LRU
   order across the tiers: the most recently used ``C_hbm`` blocks in HBM, the next ``C_dram`` in DRAM, the next
   ``C_nvme`` on NVMe (an exclusive hierarchy that demotes on eviction and promotes on a hit; by Mattson's
   inclusion property its tier of a read is the read's LRU stack distance cut at C_hbm, C_hbm + C_dram, C_hbm +
   C_dram + C_nvme). A read beyond them, or a block's first read, is a miss: recomputed by the prefill. The HBM
   miss rate is the share of reads not in HBM (DRAM + NVMe + miss). :func:`tier_shares`.
3. Swap-in at the tail. A prefix hit in DRAM or NVMe is fetched before the prefill can use it, at the tier's read
   bandwidth: a prompt of I tokens costs I × (s_dram / B_dram + s_nvme / B_nvme) × KV bytes per token seconds,
   added to its prefill (the GPU waits for its blocks: conservative, an asynchronous prefetch overlaps part of it),
   and the hits save the prefill of h × I tokens (h = s_hbm + s_dram + s_nvme, the capacity model's prefix-hit
   rule). :meth:`HostTier.swap_in_s`, :meth:`HostTier.prefill_s`.
4. Extra KV room. A replica's running batch stays in HBM at its mean: the mean concurrent sequences must fit the
   HBM KV budget. Above the mean (the occupancy quantile the capacity model sizes TPOT and TTFT at), sequences over
   HBM's room are swapped out to the DRAM room reserved for them (``spill_share`` of the DRAM tier; vLLM's swap
   preemption, LMCache's offload) instead of being refused: the largest batch becomes
   (HBM budget + DRAM room − one p95-length request) / KV per sequence + 1 (:func:`max_batch`), and every decode
   step at that batch brings the excess sequences' KV back in: (b − n_hbm) × KV per sequence / B_dram seconds more
   per step (:meth:`HostTier.spill_step_s`; each running sequence advances one token per step, so each step reads
   the excess in while as many go out on the other direction of the link).

Limits: blocks are counted on their own (a hit after a miss in the same prompt counts, as in
:mod:`~fleetplan.costmodels.prefixcache`); every request reads the trace's blocks in the trace's order (one replica
sees the whole stream: session-affine routing); spilled sequences and cached blocks use separate parts of DRAM;
NVMe writes (demotions) are not charged.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fleetplan.errors import InputError, check_range


@dataclass(frozen=True)
class NodeTiers:
    """Host tiers of one node type, per GPU (module docstring, point 1).

    Attributes:
        gpu: GPU catalog name. instance: the node, e.g. 'aws:p5.48xlarge'.
        dram_bytes_per_gpu: host memory / GPUs per node, bytes.
        dram_read_bytes_per_s_per_gpu: host-to-GPU PCIe bandwidth, one direction, bytes/s.
        nvme_bytes_per_gpu: local NVMe / GPUs per node, bytes (0: none).
        nvme_read_bytes_per_s_per_gpu: NVMe read bandwidth / GPUs per node, at most the PCIe figure, bytes/s.
        source: where the figures come from.
    """

    gpu: str
    instance: str
    dram_bytes_per_gpu: float
    dram_read_bytes_per_s_per_gpu: float
    nvme_bytes_per_gpu: float
    nvme_read_bytes_per_s_per_gpu: float
    source: str = ""


@dataclass(frozen=True)
class TierShares:
    """Where a prefix-block read is served (module docstring, point 2): shares of the reads, summing to 1."""

    hbm: float
    dram: float
    nvme: float
    miss: float

    @property
    def hit(self) -> float:
        """Share of reads not recomputed (HBM + DRAM + NVMe)."""
        return self.hbm + self.dram + self.nvme

    @property
    def hbm_miss(self) -> float:
        """Share of reads not found in HBM (fetched from DRAM or NVMe, or recomputed)."""
        return 1.0 - self.hbm


def tier_shares(distances: np.ndarray, hbm_blocks: int, dram_blocks: int, nvme_blocks: int) -> TierShares:
    """Shares of block reads served by each tier, from LRU stack distances (``distances``: int array, -1 for a
    first read; :func:`~fleetplan.costmodels.prefixcache.stack_distances`) and the tiers' sizes in blocks (module
    docstring, point 2). Example: distances [-1, 0, 3, 9], 1 HBM block, 4 DRAM blocks, 0 NVMe blocks: 0 < 1 in
    HBM, 3 < 5 in DRAM, 9 and the first read missed: (0.25, 0.25, 0, 0.5). Raises InputError for a negative size;
    all shares 0 except miss = 1 for no reads."""
    for name, v in (("hbm_blocks", hbm_blocks), ("dram_blocks", dram_blocks), ("nvme_blocks", nvme_blocks)):
        if v < 0:
            raise InputError(f"{name} must be >= 0", field=name, value=v)
    n = len(distances)
    if n == 0:
        return TierShares(0.0, 0.0, 0.0, 1.0)
    d = np.asarray(distances)
    seen = d >= 0
    c1, c2, c3 = hbm_blocks, hbm_blocks + dram_blocks, hbm_blocks + dram_blocks + nvme_blocks
    hbm = int((seen & (d < c1)).sum())
    dram = int((seen & (d >= c1) & (d < c2)).sum())
    nvme = int((seen & (d >= c2) & (d < c3)).sum())
    return TierShares(hbm / n, dram / n, nvme / n, (n - hbm - dram - nvme) / n)


@dataclass(frozen=True)
class HostTier:
    """One replica's host tier as the capacity model sees it (module docstring, points 3 and 4).

    Attributes:
        shares: where its prefix-block reads are served (:func:`tier_shares`).
        kv_bytes_per_token: the model's KV bytes per token at its KV dtype.
        dram_read_bytes_per_s, nvme_read_bytes_per_s: read bandwidths into the replica's HBM, bytes/s.
        spill_room_bytes: DRAM reserved for running sequences swapped out above HBM's room, bytes.
        label: what the tier is (shown in plans and notes).

    Raises InputError for a non-positive bandwidth where its tier serves reads (or holds spilled sequences), a
    negative room or KV size.
    """

    shares: TierShares
    kv_bytes_per_token: float
    dram_read_bytes_per_s: float
    nvme_read_bytes_per_s: float
    spill_room_bytes: float = 0.0
    label: str = ""

    def __post_init__(self) -> None:
        check_range(self.spill_room_bytes, field="spill_room_bytes", low=0.0, high=1e15, unit="bytes")
        check_range(self.kv_bytes_per_token, field="kv_bytes_per_token", low=0.0, high=1e9, unit="bytes")
        for name, used in (("dram_read_bytes_per_s", self.shares.dram > 0 or self.spill_room_bytes > 0),
                           ("nvme_read_bytes_per_s", self.shares.nvme > 0)):
            if used and not getattr(self, name) > 0:
                raise InputError(f"{name} must be > 0 where that tier serves reads", field=name,
                                 value=getattr(self, name))

    def swap_in_s(self, prompt_tokens: float) -> float:
        """Seconds to fetch a prompt's DRAM and NVMe prefix hits into HBM (point 3): I × KV bytes per token ×
        (s_dram / B_dram + s_nvme / B_nvme). Example: 10,000 tokens, 128 KiB per token, s_dram 0.5 at 32 GB/s:
        10,000 × 131,072 × 0.5 / 32e9 = 0.0205 s."""
        b = prompt_tokens * self.kv_bytes_per_token
        s = 0.0
        if self.shares.dram > 0:
            s += b * self.shares.dram / self.dram_read_bytes_per_s
        if self.shares.nvme > 0:
            s += b * self.shares.nvme / self.nvme_read_bytes_per_s
        return s

    def prefill_s(self, prefill: Callable[[float], float]) -> Callable[[float], float]:
        """The prefill seconds of a prompt of I tokens with the tier (point 3): prefill(I) − prefill(h·I) +
        prefill(1) + :meth:`swap_in_s` (I), h the hit share (``prefill``: the replica's prefill seconds)."""
        h = self.shares.hit
        one = prefill(1.0)
        if h <= 0:
            return prefill
        return lambda i: prefill(i) - prefill(max(1.0, h * i)) + one + self.swap_in_s(i)

    def spill_step_s(self, batch: float, hbm_batch: float, kv_bytes_per_seq: float) -> float:
        """Extra seconds of a decode step at ``batch`` sequences when HBM holds ``hbm_batch`` (point 4):
        max(0, batch − hbm_batch) × kv_bytes_per_seq / B_dram (0 without spill room)."""
        if self.spill_room_bytes <= 0 or batch <= hbm_batch:
            return 0.0
        return (batch - hbm_batch) * kv_bytes_per_seq / self.dram_read_bytes_per_s


def max_batch(kv_budget_bytes: float, kv_bytes_per_seq: float, kv_bytes_per_seq_p95: float,
              room_bytes: float = 0.0) -> float:
    """Largest concurrent batch (sequences): (KV budget + host room − one p95-length request) / KV per sequence + 1
    (the capacity model's point 8, with the host tier's spill room, point 4); inf for kv_bytes_per_seq <= 0.
    Example: 40 GB budget, 1 GB per sequence, 4 GB p95 request: 37 sequences; with 20 GB of DRAM room, 57
    (a factor 57 / 37 = 1.54)."""
    if kv_bytes_per_seq <= 0:
        return math.inf
    return (kv_budget_bytes + room_bytes - kv_bytes_per_seq_p95) / kv_bytes_per_seq + 1


def replica_tier_sizes(node: NodeTiers, gpus: int, *, dram_share: float, nvme_share: float,
                       spill_share: float) -> tuple[float, float, float, float, float]:
    """(DRAM cache bytes, DRAM spill room bytes, NVMe cache bytes, DRAM read bytes/s, NVMe read bytes/s) of a
    replica on ``gpus`` GPUs of ``node`` (module docstring, point 1): the KV tier gets ``dram_share`` of the GPUs'
    host memory, of which ``spill_share`` is room for swapped-out sequences and the rest prefix cache, and
    ``nvme_share`` of their NVMe. Raises InputError for shares outside [0, 1] or gpus < 1."""
    for name, v in (("dram_share", dram_share), ("nvme_share", nvme_share), ("spill_share", spill_share)):
        check_range(v, field=f"host_tier.{name}", low=0.0, high=1.0, fix="give a share between 0 and 1")
    if gpus < 1:
        raise InputError("a replica has at least one GPU", field="gpus", value=gpus)
    dram = node.dram_bytes_per_gpu * gpus * dram_share
    return (dram * (1.0 - spill_share), dram * spill_share, node.nvme_bytes_per_gpu * gpus * nvme_share,
            node.dram_read_bytes_per_s_per_gpu * gpus, node.nvme_read_bytes_per_s_per_gpu * gpus)
