"""The tenant allocator's effort budgets and its wall-clock safety stop (issue 24 items 2 and 5).

The allocation is set by fixed effort budgets (CP-SAT deterministic time, HiGHS branch-and-bound nodes, fixed seeds);
the wall clock only stops a run that overruns --time-limit. A loaded machine is played here by the clock the safety
stop reads (``fleetplan.solvers.tenants.allocate._clock``), replaced by a virtual one: no test waits for or times
anything. Interference coefficient interactive-interactive 0.075 (datasets/data/interference/coefficients.csv).

The instance (two 8-GPU H100 nodes, two windows; a: quota 4, demand 10 then 4; b: quota 2, demand 6 then 4):
- window 0: a 8 alone on one node, a 1 + b 6 = 7 on the other (shared: capacity 8 × (1 − 0.075) = 7.4): served 15;
  not sharing serves 14 (a 8, b 6) and leaves a 1 GPU short of its SLA demand, which costs more in the weighted
  score (+1/24 sla, +1/32 utilization) than the shared node (0.075 / (2 nodes × 2 windows)) does;
- window 1: a 4 and b 4 each on a node of its own: served 8, nothing shared. The greedy packing gives the same: a
  takes 4 on h-0 (guarantee), b its guarantee 2 on the empty h-1, then b tops h-1 up to 4.
So the whole: served 23 of 32 GPU-windows (utilization 0.71875), isolation 0.075.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import fleetplan.solvers.tenants.allocate as allocate_mod
from fleetplan.cli.main import main
from fleetplan.datasets.sharing import load_interference
from fleetplan.errors import InputError
from fleetplan.placement.status import Status
from fleetplan.placement.tenants import Allocation, Node, Tenant, TenantProblem, validate_allocation
from fleetplan.solvers.tenants.allocate import solve_allocation

H100 = "H100-SXM-80GB"
# Node names as the scenario reader gives them (pool entry h, count 2), so the CLI test checks against PROBLEM.
PROBLEM = TenantProblem(tuple(Node(f"h-{i}", H100, 8) for i in range(2)),
                        (Tenant("a", 4, 64, 1.0, (10, 4), 1.0, "interactive", ()),
                         Tenant("b", 2, 64, 1.0, (6, 4), 1.0, "interactive", ())), load_interference())
WINDOW_1_GREEDY = {("a", 1, "h-0"): 4, ("b", 1, "h-1"): 4}


class VirtualClock:
    """A clock that reads ``start`` for its first ``fast_reads`` reads and then jumps ``jump_s`` per read (a machine
    that stalls: the safety stop fires at once), or that moves ``step_s`` per read from the start (a slow machine
    whose every solve takes ``step_s`` of wall time)."""

    def __init__(self, *, step_s: float = 0.0, fast_reads: int | None = None, jump_s: float = 1e6) -> None:
        self.now, self.reads = 1000.0, 0
        self.step_s, self.fast_reads, self.jump_s = step_s, fast_reads, jump_s

    def __call__(self) -> float:
        self.reads += 1
        if self.fast_reads is not None and self.reads > self.fast_reads:
            self.now += self.jump_s
        else:
            self.now += self.step_s
        return self.now


def checked(res):
    """Every allocation of the result re-checked by the independent checker."""
    validate_allocation(PROBLEM, res.allocation)
    for alloc, _ in res.pareto:
        validate_allocation(PROBLEM, alloc)
    return res


def same(a, b) -> bool:
    return (dict(a.allocation.gpus), a.allocation.status, a.allocation.gap, a.objectives, a.notes) == \
        (dict(b.allocation.gpus), b.allocation.status, b.allocation.gap, b.objectives, b.notes)


@pytest.mark.parametrize("backend", ["highs", "cpsat"])
@pytest.mark.parametrize("mode", ["weighted", "lexicographic", "pareto"])
def test_a_slow_clock_gives_the_same_allocation(monkeypatch, backend, mode):
    # Each solve "takes" 20 s of wall time (the clock moves 20 s per read); 13 solves at most (pareto: 4 anchors,
    # 1 point, 2 weighted) stay well inside the 600-s safety stop, so the effort budgets alone set the answer.
    kw = {"backend": backend, "mode": mode, "points": 3, "time_limit_s": 600,
          "order": ["utilization", "isolation", "sla"], "tolerance": 0.0}
    idle = checked(solve_allocation(PROBLEM, **kw))
    monkeypatch.setattr(allocate_mod, "_clock", VirtualClock(step_s=20.0))
    loaded = checked(solve_allocation(PROBLEM, **kw))
    assert same(idle, loaded) and loaded.notes == []
    assert loaded.objectives.utilization == pytest.approx(23 / 32)
    if mode != "pareto":
        assert loaded.objectives.isolation == pytest.approx(0.075)


def test_the_stop_keeps_the_best_answer_and_names_what_it_cut(monkeypatch):
    # Reads: 1 the deadline, 2 before window 0's solve; then the clock jumps past the stop: window 1 is never
    # solved and holds the greedy packing's GPUs (the same as its optimum here, but without a bound).
    full = checked(solve_allocation(PROBLEM, backend="cpsat"))
    monkeypatch.setattr(allocate_mod, "_clock", VirtualClock(fast_reads=2))
    res = checked(solve_allocation(PROBLEM, backend="cpsat", time_limit_s=60))
    w0 = {k: v for k, v in full.allocation.gpus.items() if k[1] == 0}
    assert dict(res.allocation.gpus) == {**w0, **WINDOW_1_GREEDY}
    assert res.allocation.status is Status.HEURISTIC and res.allocation.gap is None
    assert res.objectives.utilization == pytest.approx(23 / 32) and res.objectives.isolation == pytest.approx(0.075)
    assert len(res.notes) == 2
    assert "safety stop (--time-limit 60 s) cut 1 solve(s)" in res.notes[0]
    assert "window 1 (weighted) (not started)" in res.notes[0] and "may differ" in res.notes[0]
    assert "no solve found an allocation for window 1" in res.notes[1] and "greedy" in res.notes[1]


def test_a_cut_lexicographic_stage_keeps_the_stage_before(monkeypatch):
    # Reads: the deadline, window 0's utilization stage; then the stop: window 0 keeps its first stage's answer
    # (15 served), window 1 takes the greedy packing's; 5 stages cut (2 in window 0, 3 in window 1).
    monkeypatch.setattr(allocate_mod, "_clock", VirtualClock(fast_reads=2))
    res = checked(solve_allocation(PROBLEM, mode="lexicographic", order=["utilization", "isolation", "sla"],
                                   tolerance=0.0))
    assert res.objectives.served_gpu_windows == pytest.approx(23)
    assert {k: v for k, v in res.allocation.gpus.items() if k[1] == 1} == WINDOW_1_GREEDY
    assert res.allocation.status is Status.HEURISTIC
    assert "cut 5 solve(s)" in res.notes[0] and "window 0 (lexicographic stage isolation) (not started)" in res.notes[0]


def test_a_cut_pareto_front_keeps_what_was_solved(monkeypatch):
    # Reads: the deadline and the 4 anchors (2 per window); then the stop: window 0's middle point is never solved
    # (it takes the least-isolation anchor) and the weighted answer takes the greedy packing's GPUs. The front
    # keeps only non-dominated points, each re-checked.
    monkeypatch.setattr(allocate_mod, "_clock", VirtualClock(fast_reads=5))
    res = checked(solve_allocation(PROBLEM, mode="pareto", points=3, backend="cpsat"))
    assert res.pareto and "window 0 (Pareto point 2) (not started)" in res.notes[0]
    pts = {(round(o.utilization, 6), round(o.isolation, 6)) for _, o in res.pareto}
    # Anchors: window 0 unshared (14 served, isolation 0) or shared (15, 0.075); window 1 always 8 unshared.
    assert pts == {(round(22 / 32, 6), 0.0), (round(23 / 32, 6), 0.075)}


def test_allocate_prints_its_best_answer_when_the_stop_fires_at_once(tmp_path, monkeypatch):
    # Issue 24 item 5: under load `allocate` exited 2 ("no allocation found within the time limit") even at
    # --time-limit 120. Here the stop fires before the first solve: the command still prints a valid allocation
    # (the greedy packing's), without the in-node split, and says why.
    sc = tmp_path / "s.yaml"
    sc.write_text("""
pool:
  - {name: h, gpu: H100-SXM-80GB, gpus_per_node: 8, count: 2}
tenants:
  - {name: a, quota_gpus: 4, burst_gpus: 10, demand_gpus: [10, 4], interference_class: interactive}
  - {name: b, quota_gpus: 2, burst_gpus: 6, demand_gpus: [6, 4], interference_class: interactive}
""")
    monkeypatch.setattr(allocate_mod, "_clock", VirtualClock(fast_reads=1))
    r = CliRunner().invoke(main, ["allocate", str(sc), "--format", "json", "--time-limit", "120"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["status"] == "heuristic" and d["gap"] is None and d["split"]["nodes"] == {}
    gpus = {(t, int(w), n): g for t, ws in d["allocation"].items() for w, ns in ws.items() for n, g in ns.items()}
    validate_allocation(PROBLEM, Allocation("cli", gpus))  # the CLI's scenario is PROBLEM
    # Window 0 by the greedy packing (tenants by name at equal weight; guarantees first): a 4 on h-0, b 2 on the
    # empty h-1; then a tops up h-0 to 8 and takes 2 on h-1 (shared: floor(8 × 0.925) = 7 GPUs), b tops h-1 up to
    # 7 (b 5). Served 10 + 5 = 15. Window 1 as in WINDOW_1_GREEDY.
    assert gpus == {("a", 0, "h-0"): 8, ("a", 0, "h-1"): 2, ("b", 0, "h-1"): 5, **WINDOW_1_GREEDY}
    (cut, filled, no_split) = d["warnings"]
    assert "safety stop (--time-limit 120 s) cut 2 solve(s)" in cut
    assert "for window 0, window 1: the greedy packing's GPUs" in filled
    assert "without its in-node split" in no_split and "fired before the split" in no_split
    assert "Warning: the wall-clock safety stop" in r.stderr


def test_effort_must_be_positive():
    with pytest.raises(InputError, match="effort must be a number > 0"):
        solve_allocation(PROBLEM, effort=0)
    # the CLI checks it as plan's --effort does: the same range and message
    r = CliRunner().invoke(main, ["allocate", "--effort", "0"])
    assert r.exit_code == 2 and "field '--effort'" in r.output and "from 0.01 to 1000" in r.output
    assert "Traceback" not in r.output
