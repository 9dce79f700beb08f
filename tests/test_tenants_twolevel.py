"""Two-level scheduling in the tenant replay: the engine's priority hook and ``replay_allocation(in_node=...)``."""

from __future__ import annotations

import numpy as np
import pytest

from fleetplan.cli.main import main
from fleetplan.costmodels.engine import PREFILL_FIRST
from fleetplan.costmodels.interference import InterferenceTable
from fleetplan.errors import InputError
from fleetplan.placement.tenants import Allocation, Node, Tenant, TenantProblem, validate_allocation
from fleetplan.scenario.tenants import TenantWorkload
from fleetplan.simulator.engine import DeviceSpec, EngineSpec, Policy, StepModel, run
from fleetplan.simulator.tenants import replay_allocation
from tests.test_tenants_replay import GPU, _workload


def _step() -> StepModel:
    # prefill 1 ms per prompt token (linear: the table's interpolation is exact), 10 ms per decode step, 150 tokens
    # of KV
    return StepModel(lambda t: t * 1e-3, lambda b, c: 0.01, kv_bytes_per_token=1.0, kv_budget_bytes=150.0,
                     max_tokens=200)


def _two_requests(priority: np.ndarray | None):
    # r0 (low, priority 1): arrives 0, prompt 100, 11 output tokens; r1 (high, priority 3): arrives 0.125, prompt
    # 40, 11 output tokens. Whole-sequence KV reservations (kv_block_tokens None): 111 and 51 tokens; 111 + 51 =
    # 162 > 150, so both never run at once.
    return run(np.array([0.0, 0.125]), np.array([100, 40]), np.array([11, 11]), np.array(["m", "m"], dtype=object),
               [EngineSpec("m", 0, _step(), engine=PREFILL_FIRST)], [DeviceSpec("d", 1, 0.0, 0.0)],
               Policy(kv_block_tokens=None),
               priority_of=priority)


def test_priority_admits_first_and_preempts_one_by_hand():
    """FCFS: r0 prefills 0 -> 0.100 (100 × 1 ms), decodes 10 steps -> 0.200; r1 waits (no KV room), prefills
    0.200 -> 0.240 (TTFT 0.115), decodes 10 steps -> 0.340.
    Priority: r1 arrives at 0.125 inside r0's 3rd decode step (0.120-0.130); it cannot fit, a lower-priority
    sequence runs, so the run stops at 0.130 (r0 has 1 + 3 = 4 tokens) and r0 is preempted; r1 prefills 0.130 ->
    0.170 (TTFT 0.045), decodes 10 steps -> 0.270; r0 then recomputes its 100 + 4 = 104 tokens (0.104 s) ->
    0.374 and decodes its last 11 - 4 = 7 steps -> 0.444."""
    fcfs = _two_requests(None)
    assert fcfs.first_token_s == pytest.approx([0.100, 0.240])
    assert fcfs.done_s == pytest.approx([0.200, 0.340])
    assert list(fcfs.preemptions) == [0, 0]
    prio = _two_requests(np.array([1.0, 3.0]))
    assert prio.prefill_start_s == pytest.approx([0.0, 0.130])
    assert prio.first_token_s == pytest.approx([0.100, 0.170])
    assert prio.done_s == pytest.approx([0.444, 0.270])
    assert list(prio.preemptions) == [1, 0]
    with pytest.raises(InputError, match="preempt_after_s"):
        run(np.array([0.0]), np.array([10]), np.array([2]), np.array(["m"], dtype=object),
            [EngineSpec("m", 0, _step(), engine=PREFILL_FIRST)], [DeviceSpec("d", 1, 0.0, 0.0)],
            Policy(preempt_after_s=1.0),
            priority_of=np.array([1.0]))


def test_equal_priorities_are_fcfs():
    """With one priority for every request the hook changes nothing: the same times as FCFS on a random stream
    with block-wise KV short enough to preempt (the one-level replay's engine)."""
    rng = np.random.default_rng(5)
    n = 200
    a = np.sort(rng.uniform(0, 5, n))
    inp, out = rng.integers(10, 60, n), rng.integers(2, 40, n)
    models = np.array(["m"] * n, dtype=object)
    sm = StepModel(lambda t: t * 1e-3, lambda b, c: 0.002 + 0.0001 * b, kv_bytes_per_token=1.0,
                   kv_budget_bytes=400.0, max_tokens=200)
    eng, dev = [EngineSpec("m", 0, sm, engine=PREFILL_FIRST)], [DeviceSpec("d", 1, 0.0, 0.0)]
    base = run(a, inp, out, models, eng, dev)
    same = run(a, inp, out, models, eng, dev, priority_of=np.full(n, 2.0))
    assert base.preemptions.sum() > 0  # the KV budget is short: preemption is exercised
    for f in ("first_token_s", "done_s", "preemptions"):
        np.testing.assert_array_equal(getattr(base, f), getattr(same, f))


def _problem() -> TenantProblem:
    table = InterferenceTable({("interactive", "batch"): 0.2, ("interactive", "interactive"): 0.0,
                               ("batch", "batch"): 0.0})
    hi = Tenant("a", 1, 1, 3.0, (1.0,), 0.9, "interactive", (GPU,))
    lo = Tenant("b", 1, 1, 1.0, (1.0,), 0.9, "batch", (GPU,))
    return TenantProblem((Node("n0", GPU, 2), Node("n1", GPU, 2)), (hi, lo), table, window_s=3600)


def test_two_level_equals_one_level_without_shared_nodes_and_pools_shared_ones():
    """Each tenant alone on a node: the node scheduler has no one to rank, so two-level gives the one-level
    latencies exactly (and the default is one-level). On one shared node the tenants' replicas of the same model
    pool, so b's requests (40 req/s on its own replica before) are spread over both: its latencies change. (a's
    P99 need not fall: a prefill already running is not preempted, and the router may send a's request to the
    replica in the middle of b's prefill.)"""
    problem = _problem()
    b_wl = TenantWorkload("b", "Llama-3.1-8B", GPU, 1, _workload(1.0).mix, _workload(1.0).slo, 10.0, (40.0,))
    wl = {"a": (_workload(2.0),), "b": (b_wl,)}
    alone = Allocation("alone", {("a", 0, "n0"): 1, ("b", 0, "n1"): 1})
    shared = Allocation("shared", {("a", 0, "n0"): 1, ("b", 0, "n0"): 1}, margin=False)
    for alloc in (alone, shared):
        validate_allocation(problem, alloc, check_guarantees=False)
    # Two-level is modelled on the prefill-first engine only: both policies replay it here (like for like).
    kw = dict(windows=[0], slice_s=60, warmup_s=0, seed=1, engine=PREFILL_FIRST)
    d = replay_allocation(problem, alone, wl, **kw)
    one = replay_allocation(problem, alone, wl, in_node="one-level", **kw)
    two = replay_allocation(problem, alone, wl, in_node="two-level", **kw)
    for t in ("a", "b"):
        assert d.tenants[t] == one.tenants[t] == two.tenants[t]
    # Without an engine the replay runs the one the demand was sized for (vLLM V1), which two-level refuses.
    v1 = replay_allocation(problem, alone, wl, windows=[0], slice_s=60, warmup_s=0, seed=1)
    assert v1.tenants["b"] != one.tenants["b"]  # b's 40 req/s queue: chunked prefill changes its latencies
    with pytest.raises(InputError, match="prefill-first engine only"):
        replay_allocation(problem, alone, wl, windows=[0], slice_s=60, warmup_s=0, seed=1, in_node="two-level")
    s1 = replay_allocation(problem, shared, wl, in_node="one-level", **kw)
    s2 = replay_allocation(problem, shared, wl, in_node="two-level", **kw)
    assert s2.tenants["a"].requests == s1.tenants["a"].requests > 0
    assert s2.tenants["b"].requests == s1.tenants["b"].requests > 0
    assert s2.tenants["b"].ttft_s[50] != s1.tenants["b"].ttft_s[50]
    # a's replica and b's on n0 both serve a and b
    assert (s1.pooled_replicas, s2.pooled_replicas, two.pooled_replicas) == (0, 2, 0)
    with pytest.raises(InputError, match="in-node"):
        replay_allocation(problem, alone, wl, in_node="three-level", **kw)


def test_allocate_in_node_cli(tmp_path):
    """The default --verify output is the one-level one (no in-node table, the same as --in-node one-level);
    two-level adds the side-by-side table; --in-node without --verify is refused with the fix."""
    from click.testing import CliRunner

    from tests.test_tenants_replay import VERIFY

    f = tmp_path / "t.yaml"
    f.write_text(VERIFY)
    args = ["allocate", str(f), "--verify", "--slice", "10", "--burst", "a:2"]
    default = CliRunner().invoke(main, args)
    one = CliRunner().invoke(main, [*args, "--in-node", "one-level"])
    two = CliRunner().invoke(main, [*args, "--in-node", "two-level"])
    for r in (default, one, two):
        assert r.exit_code == 0, r.output
    assert default.output == one.output and "In-node policy" not in default.output
    assert "In-node policy" in two.output and "two-level" in two.output.split("In-node policy")[1]
    r = CliRunner().invoke(main, ["allocate", str(f), "--in-node", "two-level"])
    assert r.exit_code != 0 and "--verify" in r.output
