"""allocate --verify: tenant requests replayed on an allocation (fleetplan.simulator.tenants)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from fleetplan.cli.main import main
from fleetplan.costmodels.demand import TokenMix
from fleetplan.costmodels.interference import InterferenceTable
from fleetplan.costmodels.latency import prefill_time_s
from fleetplan.costmodels.slo import SLO
from fleetplan.datasets.calibration import load_calibration
from fleetplan.datasets.catalog.names import get_gpu, get_model
from fleetplan.errors import InputError
from fleetplan.placement.status import Status
from fleetplan.placement.tenants import Allocation, ModelDemand, Node, Tenant, TenantProblem, validate_allocation
from fleetplan.scenario.tenants import TenantWorkload
from fleetplan.simulator.tenants import (
    _quantile,
    carve_replicas,
    geometric_mean,
    isolation_ratio,
    replay_allocation,
    split_slices,
    with_burst,
)
from fleetplan.solvers.tenants.slicing import NodeSplit, split_allocation, whole_gpus

GPU = "H100-SXM-80GB"


def _problem(coef: float) -> TenantProblem:
    table = InterferenceTable({("interactive", "batch"): coef, ("interactive", "interactive"): 0.0,
                               ("batch", "batch"): 0.0})
    a = Tenant("a", 1, 1, 1.0, (1.0,), 0.9, "interactive", (GPU,))
    b = Tenant("b", 1, 1, 1.0, (1.0,), 0.9, "batch", (GPU,))
    return TenantProblem((Node("n0", GPU, 2), Node("n1", GPU, 2)), (a, b), table, window_s=3600)


def _workload(rate: float) -> TenantWorkload:
    # Every request the same: 512 prompt tokens, 1 output token (TTFT = one prefill, no decode).
    mix = TokenMix(512, 512, 1, 1, lengths=(np.array([512]), np.array([1])))
    return TenantWorkload("a", "Llama-3.1-8B", GPU, 1, mix, SLO(1.0, 0.1), 10.0, (rate,))


def test_carve_replicas_fills_the_largest_unmet_need():
    # Node x has 3 GPUs, node y 2. Needs: m2 (tp 2) 4 GPUs, m1 (tp 1) 1 GPU.
    # x: m2 (unmet 4 vs 1) -> m2 given 2, 1 GPU left: only m1 fits -> m1. y: m2 (unmet 2 vs 0) -> m2. Idle 0.
    reps, idle = carve_replicas([("x", 3), ("y", 2)], {"m1": (1, 1.0), "m2": (2, 4.0)})
    assert reps == [("x", "m2"), ("x", "m1"), ("y", "m2")]
    assert idle == 0
    # Only tp 2 on 3 GPUs: one replica, 1 GPU idle.
    assert carve_replicas([("x", 3)], {"m2": (2, 9.0)}) == ([("x", "m2")], 1)


def test_nearest_rank_quantile_counts_unserved_as_largest():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    assert _quantile(x, 50) == 2.0  # ceil(0.5 * 4) = 2nd smallest
    assert _quantile(x, 99) == 4.0  # ceil(3.96) = 4th
    assert _quantile(np.array([1.0, math.inf]), 50) == 1.0
    assert _quantile(np.array([1.0, math.inf]), 99) == math.inf
    assert math.isnan(_quantile(np.zeros(0), 50))
    assert geometric_mean([0.5, 2.0, math.nan]) == pytest.approx(1.0)


def test_shared_node_slows_steps_by_one_over_one_minus_s():
    """A lone request waits for nothing: its TTFT is one prefill. Sharing the node with b (s = 0.2) makes it
    1 / (1 - 0.2) = 1.25 times longer."""
    s = 0.2
    problem = _problem(s)
    prefill = prefill_time_s(get_model("Llama-3.1-8B"), get_gpu(GPU), 512, calib=load_calibration(get_gpu(GPU)))
    alone = Allocation("alone", {("a", 0, "n0"): 1, ("b", 0, "n1"): 1})
    shared = Allocation("shared", {("a", 0, "n0"): 1, ("b", 0, "n0"): 1}, margin=False)
    for alloc in (alone, shared):
        validate_allocation(problem, alloc, check_guarantees=False)
    # 0.01 req/s over 1000 s: a handful of requests, far apart (each prefill is milliseconds).
    wl = {"a": (_workload(0.01),)}
    r0 = replay_allocation(problem, alone, wl, windows=[0], slice_s=1000, warmup_s=0, seed=3).tenants["a"]
    r1 = replay_allocation(problem, shared, wl, windows=[0], slice_s=1000, warmup_s=0, seed=3).tenants["a"]
    assert r0.requests == r1.requests > 0
    assert r0.ttft_s[50] == pytest.approx(prefill, rel=1e-3)
    assert r1.ttft_s[99] == pytest.approx(prefill / (1 - s), rel=1e-3)
    assert (r0.slowed, r1.slowed) == (0, 1)
    assert r0.attainment == 1.0
    assert isolation_ratio(r1, r0) == pytest.approx(1.25, rel=1e-3)


def test_no_replica_means_every_request_is_dropped():
    problem = _problem(0.1)
    alloc = Allocation("none", {("b", 0, "n1"): 1})
    r = replay_allocation(problem, alloc, {"a": (_workload(1.0),)}, windows=[0], slice_s=100, warmup_s=0).tenants["a"]
    assert r.requests > 0 and r.dropped == r.requests
    assert r.attainment == 0.0 and r.ttft_s[50] == math.inf


def test_burst_and_bad_input():
    p = with_burst(_problem(0.1), "a", 0, 2.0)
    assert p.tenant("a").demand_gpus == (2.0,) and p.tenant("b").demand_gpus == (1.0,)
    with pytest.raises(InputError, match="factor"):
        with_burst(_problem(0.1), "a", 0, 0.0)
    with pytest.raises(InputError, match="window"):
        replay_allocation(_problem(0.1), Allocation("x", {}), {}, windows=[3])


def test_split_slices_factors_by_hand():
    """MIG 3g.40gb on an A100-SXM4-80GB: 3 of 7 compute slices, 4 of 8 memory slices, 40 GB -> prefill x 7/3,
    decode x 8/4 = 2, no interference. MPS 40% on a GPU shared with a neighbour at s = 0.2 -> both x 100/40/0.8 =
    3.125, memory 0.4 x the GPU's; 60% alone on its GPU -> x 100/60."""
    a100 = "A100-SXM4-80GB"
    table = InterferenceTable({("interactive", "batch"): 0.2, ("interactive", "interactive"): 0.0,
                               ("batch", "batch"): 0.0})
    a = Tenant("a", 1, 8, 1.0, (1.0,), 0.9, "interactive")
    b = Tenant("b", 1, 8, 1.0, (1.0,), 0.9, "batch")
    problem = TenantProblem((Node("n0", a100, 8),), (a, b), table)
    mig = NodeSplit("mig", ((0, "3g.40gb", 0, "a"), (0, "4g.40gb", 4, "b")), {"a": 3, "b": 4}, {}, 1,
                    Status.OPTIMAL)
    sl = split_slices(problem, "n0", mig)["a"][0]
    assert (sl.prefill_x, sl.decode_x, sl.memory_bytes, sl.gpus_fraction) == pytest.approx((7 / 3, 2.0, 40e9, 3 / 7))
    mps = NodeSplit("mps", ((0, "a", 40), (0, "b", 40), (1, "a", 60)), {"a": 100, "b": 40}, {}, 1, Status.OPTIMAL)
    sa = split_slices(problem, "n0", mps)["a"]
    assert sa[0].prefill_x == sa[0].decode_x == pytest.approx(3.125)
    assert sa[0].memory_bytes == pytest.approx(0.4 * get_gpu(a100).memory_bytes)
    assert sa[1].decode_x == pytest.approx(100 / 60)
    # Replayed: a lone request's TTFT on the MIG instance is the whole GPU's prefill x 7/3.
    gpu = get_gpu(a100)
    prefill = prefill_time_s(get_model("Llama-3.1-8B"), gpu, 512, calib=load_calibration(gpu))
    alloc = Allocation("opt", {("a", 0, "n0"): 1, ("b", 0, "n0"): 1})
    wl = {"a": (replace(_workload(0.01), gpu=a100),)}
    r = replay_allocation(problem, alloc, wl, windows=[0], slice_s=1000, warmup_s=0, seed=3,
                          splits={(0, "n0"): mig}).tenants["a"]
    assert r.replicas == r.slowed == 1
    assert r.ttft_s[50] == pytest.approx(prefill * 7 / 3, rel=1e-3)
    # A 1g.10gb instance cannot hold the 16 GB of weights: no replica, every request dropped.
    tiny = NodeSplit("mig", ((0, "1g.10gb", 0, "a"),), {"a": 1}, {}, 0, Status.OPTIMAL)
    r = replay_allocation(problem, alloc, wl, windows=[0], slice_s=1000, warmup_s=0, seed=3,
                          splits={(0, "n0"): tiny}).tenants["a"]
    assert r.replicas == 0 and r.dropped == r.requests > 0


VERIFY = """
name: verify-small
pool:
  - {name: h, gpu: H100-SXM-80GB, gpus_per_node: 8, count: 2}
tenants:
  - name: a
    quota_gpus: 8
    burst_gpus: 12
    weight: 2
    demand_gpus: [2, 2]
    interference_class: interactive
    replay: {name: Llama-3.1-8B, token_mix: {trace: azure-conv}, slo: {ttft_p95_s: 1.0, tpot_p95_s: 0.05}}
  - {name: t, quota_gpus: 8, burst_gpus: 8, demand_gpus: [1, 1], interference_class: training}
"""


def test_allocate_verify_cli(tmp_path):
    """Tenant a's quota (8) is one node under static partitions; it asks 2 GPUs, so both policies hold its demand
    and the replay has requests for it; t sends none and is reported as not replayed."""
    from click.testing import CliRunner

    f = tmp_path / "t.yaml"
    f.write_text(VERIFY)
    r = CliRunner().invoke(main, ["allocate", str(f), "--verify", "--slice", "10",
                                  "--burst", "a:2"])
    assert r.exit_code == 0, r.output
    assert "not replayed" in r.output and "Burst: a × 2" in r.output and "P99 TTFT optimizer / static" in r.output
    r = CliRunner().invoke(main, ["allocate", str(f), "--verify", "--burst", "zz"])
    assert r.exit_code != 0 and "zz" in r.output
    r = CliRunner().invoke(main, ["allocate", str(f), "--verify", "--verify-windows", "7"])
    assert r.exit_code != 0 and "outside" in r.output


def test_a_tp2_tenant_keeps_whole_gpus_on_a_split_node_and_its_replica_serves():
    """Tenant c serves a tp-2 model needing 2 GPUs and a tp-1 model needing 0.5 GPU (demand 2.5), holding 3 GPUs of
    an 8-GPU A100 node it shares with b (2 GPUs, demand 2). Its need there: 3 × min(1, 2.5 / 3) = 2.5 GPUs; the tp-2
    part: 2.5 × 2 / 2.5 = 2 -> one tp-2 replica, 2 whole GPUs; the 0.5 left: ceil(7 × 0.5) = 4 MIG compute slices.
    Before, all 2.5 GPUs were sliced (18 slices), slices serve tp-1 models only, and every request of the tp-2 model
    was dropped (the shipped copilot tenant's 89.8% SLO attainment under --split auto, 100.0% now)."""
    a100 = "A100-SXM4-80GB"
    table = InterferenceTable({("interactive", "batch"): 0.2, ("interactive", "interactive"): 0.0,
                               ("batch", "batch"): 0.0})
    c = Tenant("c", 1, 8, 1.0, (2.5,), 0.9, "interactive",
               models=(ModelDemand("Qwen2.5-7B", a100, 2, 8.0, (4.0,), (2.0,)),
                       ModelDemand("Llama-3.1-8B", a100, 1, 10.0, (5.0,), (0.5,))))
    b = Tenant("b", 1, 8, 1.0, (2.0,), 0.9, "batch")
    problem = TenantProblem((Node("n0", a100, 8),), (c, b), table)
    alloc = Allocation("opt", {("c", 0, "n0"): 3, ("b", 0, "n0"): 2})
    validate_allocation(problem, alloc, check_guarantees=False)
    sp = split_allocation(problem, alloc, kind="mig")[0, "n0"]
    assert dict(sp.whole) == {"c": 2}
    assert sp.needs == {"b": 14, "c": 4}  # b: ceil(7 × 2) = 14 slices; c: ceil(7 × 0.5) = 4
    assert sp.used_gpus <= 8 - 2 and sum(sp.unmet.values()) == 0
    # A tenant holding fewer GPUs than its tp keeps none whole (no tp-2 replica fits on 1 GPU).
    assert whole_gpus(problem, Allocation("x", {("c", 0, "n0"): 1, ("b", 0, "n0"): 2}), 0, "n0",
                      {"c": 1.0, "b": 2.0}) == {}
    # A tenant given in GPUs with a tp-2 replay model keeps all its need whole, rounded up to replicas: 3 GPUs
    # held, need 2.5 -> ceil(2.5 / 2) × 2 = 4, capped at 3 // 2 × 2 = 2.
    c2 = Tenant("c", 1, 8, 1.0, (2.5,), 0.9, "interactive", replica_tp=2)
    p2 = replace(problem, tenants=(c2, b))
    assert whole_gpus(p2, alloc, 0, "n0", {"c": 2.5, "b": 2.0}) == {"c": 2}

    # Replayed: both of c's models get replicas; the tp-2 one on the whole GPUs (not slowed: no neighbour there).
    mix = TokenMix(512, 512, 1, 1, lengths=(np.array([512]), np.array([1])))
    wl = {"c": (TenantWorkload("c", "Qwen2.5-7B", a100, 2, mix, SLO(1.0, 0.1), 8.0, (0.05,)),
                TenantWorkload("c", "Llama-3.1-8B", a100, 1, mix, SLO(1.0, 0.1), 10.0, (0.05,)))}
    r = replay_allocation(problem, alloc, wl, windows=[0], slice_s=400, warmup_s=0, seed=1,
                          splits={(0, "n0"): sp}).tenants["c"]
    assert r.requests > 0 and r.dropped == 0 and r.attainment == 1.0
    assert r.replicas >= 2 and r.slowed == r.replicas - 1  # the slices count as slowed, the whole-GPU replica not


def test_busy_time_of_an_overloaded_pool_stays_at_most_one():
    # Tenant a holds all 4 GPUs and sends 20,000 req/s of 512-token prompts for 2 s: its queue drains long after
    # the slice. The devices' busy seconds count the drain; so must the pool's seconds. Counted over the slice
    # alone, a fresh user read "busy time of the pool 298.3%".
    base = _problem(0.0)
    problem = replace(base, tenants=(replace(base.tenant("a"), burst_gpus=4, demand_gpus=(4.0,)), base.tenant("b")))
    alloc = Allocation("all", {("a", 0, "n0"): 2, ("a", 0, "n1"): 2}, margin=False)
    validate_allocation(problem, alloc, check_guarantees=False)
    r = replay_allocation(problem, alloc, {"a": (_workload(20000.0),)}, windows=[0], slice_s=2.0, warmup_s=0.0,
                          seed=1)
    assert r.busy_gpu_s > 4 * 2.0  # the drain: more busy GPU-seconds than the slice has
    assert 0.9 < r.busy_gpu_s / r.pool_gpu_s <= 1.0 + 1e-9
