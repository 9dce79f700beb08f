"""What-if policies on one replayed window: FCFS vs progress-aware preemption, and a two-tier (HBM + host DRAM) KV
cache. Both replay the same requests on the same fleet and differ only in :class:`~fleetplan.simulator.engine.
Policy` (see :mod:`fleetplan.simulator.engine` for how preemption, resume costs and the host tier are modelled).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fleetplan.simulator.engine import Policy
from fleetplan.simulator.fleet import FleetBuilder
from fleetplan.simulator.metrics import request_latencies
from fleetplan.simulator.replay import run_window
from fleetplan.simulator.workload import Workload


def _q(x: np.ndarray, q: float) -> float:
    x = x[np.isfinite(x)]
    return float(np.quantile(x, q)) if len(x) else math.nan


@dataclass(frozen=True)
class PreemptionResult:
    """FCFS vs preemption on the same requests.

    Attributes:
        threshold_s: waiting time that triggers a preemption, seconds.
        resume: 'recompute' or 'swap'.
        short_ttft_p95_fcfs_s, short_ttft_p95_preempt_s: P95 TTFT of short requests (prompt + output at or below
            the median), seconds.
        ttft_p95_fcfs_s, ttft_p95_preempt_s: P95 TTFT of all requests, seconds.
        preempted_requests: requests paused at least once; preemptions: pauses in all.
        slowdown_median, slowdown_p95: end-to-end latency with preemption / without, over the preempted requests.
        swap_gb: bytes copied over PCIe for swaps, GB.
    """

    threshold_s: float
    resume: str
    short_ttft_p95_fcfs_s: float
    short_ttft_p95_preempt_s: float
    ttft_p95_fcfs_s: float
    ttft_p95_preempt_s: float
    preempted_requests: int
    preemptions: int
    slowdown_median: float
    slowdown_p95: float
    swap_gb: float


def preemption_whatif(builder: FleetBuilder, wl: Workload, w: int, *, threshold_s: float = 1.0,
                      resume: str = "recompute", router: str = "least-work") -> PreemptionResult:
    """Replay ``wl`` on window ``w`` with FCFS and with preemption after ``threshold_s`` of KV-blocked waiting."""
    _, a = run_window(builder, wl, w, Policy(router=router))
    _, b = run_window(builder, wl, w, Policy(router=router, preempt_after_s=threshold_s, resume=resume))
    ta, _, _ = request_latencies(wl, a)
    tb, _, _ = request_latencies(wl, b)
    size = wl.input_tokens + wl.output_tokens
    short = size <= np.median(size)
    hit = b.preemptions > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        slow = (b.done_s[hit] - wl.arrival_s[hit]) / (a.done_s[hit] - wl.arrival_s[hit])
    return PreemptionResult(threshold_s, resume, _q(ta[short], .95), _q(tb[short], .95), _q(ta, .95), _q(tb, .95),
                            int(hit.sum()), int(b.preemptions.sum()), _q(slow, .5), _q(slow, .95),
                            float(b.swap_bytes.sum()) / 1e9)


@dataclass(frozen=True)
class TwoTierRow:
    """One host-tier share of the two-tier KV what-if.

    Attributes:
        host_kv_share: share of each sequence's KV held in host DRAM (0 = HBM only).
        kv_capacity_factor: KV capacity relative to HBM only (1 / (1 − share)).
        swap_gb: bytes read from host DRAM over PCIe during the replay, GB.
        ttft_p95_s, tpot_p95_s: latency, seconds; slo_attainment: share meeting both targets.
    """

    host_kv_share: float
    kv_capacity_factor: float
    swap_gb: float
    ttft_p95_s: float
    tpot_p95_s: float
    slo_attainment: float


def two_tier_whatif(builder: FleetBuilder, wl: Workload, w: int, shares: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75),
                    router: str = "least-work") -> list[TwoTierRow]:
    """Replay ``wl`` on window ``w`` with a growing share of the KV cache in host DRAM (read over PCIe each step)."""
    specs = builder.problem.model_by_name
    rows = []
    for s in shares:
        _, r = run_window(builder, wl, w, Policy(router=router, host_kv_share=s))
        ttft, tpot, _ = request_latencies(wl, r)
        ok = np.zeros(len(ttft), dtype=bool)
        for m, spec in specs.items():
            sel = wl.model == m
            ok[sel] = (ttft[sel] <= spec.ttft_p95_s) & (tpot[sel] <= spec.tpot_p95_s) & ~r.dropped[sel]
        tp = tpot[wl.output_tokens > 1]
        rows.append(TwoTierRow(s, 1.0 / (1.0 - s), float(r.swap_bytes.sum()) / 1e9, _q(ttft, .95), _q(tp, .95),
                               float(ok.mean()) if len(ok) else math.nan))
    return rows
