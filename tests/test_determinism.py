"""Reproducible solves: a deterministic effort budget gives the same plan twice, and on a clock as slow as we like
the plan of ``solve`` changes only when the wall-clock safety stop fires, which the plan then says."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from click.testing import CliRunner
from clock_support import StepClock

import fleetplan.solvers.common as common
import fleetplan.solvers.cpsat as cpsat
import fleetplan.solvers.decompose as decompose
import fleetplan.solvers.milp as milp
import fleetplan.solvers.pop as pop
import fleetplan.solvers.solve as solve_mod
from fleetplan.cli.main import main
from fleetplan.errors import InputError
from fleetplan.placement.generators import planted_instance, random_instance
from fleetplan.placement.validate import validate
from fleetplan.solvers.common import SafetyStop
from fleetplan.solvers.cpsat import solve_cpsat
from fleetplan.solvers.decompose import window_bound, window_bounds
from fleetplan.solvers.executor import Executor, make_executor
from fleetplan.solvers.milp import solve_milp
from fleetplan.solvers.solve import Effort, check_effort, solve


def _fingerprint(plan):
    """Replicas, shared GPUs (pool, residents) and the cost to the cent: what must not change between runs."""
    return (sorted(plan.replicas.items()), sorted((g.pool, g.models) for g in plan.shared),
            round(plan.objective_usd, 2), plan.status)


def test_cpsat_with_a_deterministic_budget_gives_the_same_plan_twice():
    # 4 models x 4 windows on 2 workers at gap 0: CP-SAT does not close it in 0.1 units of deterministic time,
    # so the budget (not the 600-s safety stop, far away) ends both searches; fixed seed and interleaved workers
    # make the two searches the same.
    problem = random_instance(4, 4, seed=3)
    runs = [solve_cpsat(problem, time_limit_s=600, threads=2, gap=0.0, deterministic_time=0.1) for _ in range(2)]
    for plan in runs:
        assert plan.has_solution and validate(problem, plan).ok, plan.message
        assert "deterministic budget of 0.1 units was used up" in plan.message and "safety stop" not in plan.message
    assert _fingerprint(runs[0]) == _fingerprint(runs[1])


def test_highs_with_a_node_budget_gives_the_same_plan_twice():
    # The same instance at gap 0 does not close in 5 branch-and-bound nodes: the node budget (not the 600-s
    # safety stop) ends both solves, with HiGHS's seed fixed; the plan is read back although PuLP does not map
    # HiGHS's node-limit status.
    problem = random_instance(4, 4, seed=3)
    runs = [solve_milp(problem, time_limit_s=600, threads=1, gap=0.0, max_nodes=5) for _ in range(2)]
    for plan in runs:
        assert plan.has_solution and validate(problem, plan).ok, plan.message
        assert "budget of 5 branch-and-bound nodes was used up" in plan.message
        assert plan.bound_usd is not None and plan.bound_usd <= plan.objective_usd
    assert _fingerprint(runs[0]) == _fingerprint(runs[1])


def _solve_on_clock(monkeypatch, problem, step_s: float | None, **kw):
    """solve() with every solver module reading a StepClock of ``step_s`` (None: the real clock); ``kw`` goes to
    solve()."""

    with monkeypatch.context() as mp:
        if step_s is not None:
            clock = StepClock(step_s)
            for mod in (common, cpsat, decompose, milp, solve_mod):
                mp.setattr(mod, "time", clock)
        return solve_mod.solve(problem, "highs", time_limit_s=30, gap=0.0, effort=0.01, **kw)


def test_the_plan_does_not_depend_on_the_clock_unless_the_safety_stop_fires(monkeypatch):
    # 4 models x 4 windows at gap 0 with effort 0.01 (10 nodes for the exact model, 2 per window): the budgets,
    # not the clock, end every stage. A clock 0.01 s per read is a fast machine, 0.2 s per read a slow one (the
    # whole pipeline reads it a few dozen times: well within the 30-s limit), 5 s per read one too slow for the
    # limit: there the safety stop fires and the plan must say so and name what it cut.
    problem = random_instance(4, 4, seed=3)
    ref = _solve_on_clock(monkeypatch, problem, None)
    assert ref.has_solution and validate(problem, ref).ok, ref.message
    assert "safety stop" not in ref.message
    for step_s in (0.01, 0.2):
        plan = _solve_on_clock(monkeypatch, problem, step_s)
        assert validate(problem, plan).ok, plan.message
        assert "safety stop" not in plan.message, (step_s, plan.message)
        assert _fingerprint(plan) == _fingerprint(ref), step_s
    cut = _solve_on_clock(monkeypatch, problem, 5.0)
    assert cut.has_solution and validate(problem, cut).ok, cut.message
    assert "the wall-clock safety stop at 30 s cut" in cut.message, cut.message
    assert "this plan may differ on another machine" in cut.message


def test_best_effort_by_effort_gives_the_same_plan_on_a_slow_clock(monkeypatch):
    # 3 models x 4 windows with 24 GPUs and alternating priorities: the exact model proves it infeasible, then
    # best effort's stages (priority 1, priority 0, the cost) each run within the exact model's budget (effort
    # 0.01: 10 nodes), which ends the priority-0 stage unproven. The budget, not the clock, decides: a clock of
    # 0.2 s per read (a slow machine, within the 30-s limit) gives the same plan and unserved demand, and neither
    # message says the wall clock shared or cut anything.
    problem = random_instance(3, 4, seed=3, max_gpus=24)
    problem = replace(problem, models=tuple(replace(m, priority=i % 2) for i, m in enumerate(problem.models)))
    ref = _solve_on_clock(monkeypatch, problem, None, best_effort=True)
    slow = _solve_on_clock(monkeypatch, problem, 0.2, best_effort=True)
    for plan in (ref, slow):
        assert plan.best_effort and validate(problem, plan).ok, plan.message
        assert "wall clock" not in plan.message and "safety stop" not in plan.message, plan.message
        assert "the least unserved demand of priority 0 is not proven (stopped" in plan.message
    assert _fingerprint(slow) == _fingerprint(ref)
    assert slow.unserved_req_per_s == ref.unserved_req_per_s


def test_pop_by_effort_gives_the_same_plan_on_a_slow_clock(monkeypatch):
    # POP (2 parts, in this process) with effort 0.01: every one-window model of the parts and of the seam pass
    # within 2 nodes. A clock of 0.05 s per read (a slow machine) gives the same plan as the real clock, and no
    # message says the wall clock shared the time (before: "POP shares the time limit between its stages by the
    # wall clock: this plan may differ on another machine"). At 5 s per read the safety stop fires, and the plan
    # says what it cut.
    problem, _ = planted_instance(3, models_per_gpu=2, n_windows=3, seed=1)
    runs = []
    for step_s in (None, 0.05, 5.0):
        with monkeypatch.context() as mp:
            if step_s is not None:
                clock = StepClock(step_s)
                for mod in (common, cpsat, decompose, milp, pop, solve_mod):
                    mp.setattr(mod, "time", clock)
            runs.append(solve_mod.solve(problem, "highs", time_limit_s=30, gap=1e-4, effort=0.01, decompose=2,
                                        executor=Executor()))
    for plan in runs:
        assert plan.has_solution and validate(problem, plan).ok, plan.message
        assert "wall clock" not in plan.message
    assert "safety stop" not in runs[0].message and "safety stop" not in runs[1].message
    assert _fingerprint(runs[0]) == _fingerprint(runs[1])
    assert "the wall-clock safety stop at 30 s cut the covering pass before window 1 of 3 (part 1 of 2)" \
           in runs[2].message and "this plan may differ on another machine" in runs[2].message, runs[2].message


def test_effort_scales_every_stage_budget():
    # effort 0.01 of the stage budgets: HiGHS 1,000 nodes -> 10, CBC 10,000 -> 100, windows 200 -> 2, CP-SAT 20
    # units -> 0.2; a budget never falls below 1 node (0.01 x 1 = 0.01 rounds to 0, kept at 1)
    e = Effort(0.01)
    assert (e.exact_nodes("highs"), e.exact_nodes("cbc"), e.window_nodes, e.bound_window_nodes) == (10, 100, 2, 2)
    assert e.exact_cpsat_units == pytest.approx(0.2) and e.window_cpsat_units == pytest.approx(0.01)
    assert Effort(0.001).window_nodes == 1


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0.0, -1.0, 1e6])
def test_effort_out_of_range_is_refused(bad):
    with pytest.raises(InputError, match="effort"):
        check_effort(bad)
    with pytest.raises(InputError, match="effort"):
        solve(random_instance(2, 2, seed=1), effort=bad)


def test_plan_takes_effort_on_the_command_line():
    r = CliRunner().invoke(main, ["plan", "--effort", "0"])
    assert r.exit_code == 2 and "effort" in r.output, r.output
    r = CliRunner().invoke(main, ["plan", "--help"])
    assert "--effort" in r.output and "safety stop" in r.output, r.output


def test_the_safety_stop_says_what_it_cut():
    stop = SafetyStop(deadline=time.perf_counter() + 600, time_limit_s=60)
    assert stop.note() is None and not stop.passed()
    stop.cut("the LP bound", bound_only=True)
    assert stop.note() == ("the wall-clock safety stop at 60 s cut the LP bound: the plan does not depend on it, "
                           "but its bound and gap may differ on another machine")
    stop.cut("the highs model before it started")
    assert stop.note() == ("the wall-clock safety stop at 60 s cut the LP bound; the highs model before it "
                           "started: this plan may differ on another machine")
    assert SafetyStop(deadline=time.perf_counter() - 1, time_limit_s=1).passed()


def test_per_window_bound_by_effort_is_a_bound_and_the_same_twice():
    # planted optimum (a known plan cost); 20 nodes per window on one thread, the 600-s safety stop far away
    problem, optimum = planted_instance(2, models_per_gpu=2, n_windows=3, seed=5)
    got = []
    for _ in range(2):
        stop = SafetyStop(deadline=time.perf_counter() + 600, time_limit_s=600)
        got.append(window_bound(problem, deadline=0.0, max_nodes=20, stop=stop))
        assert not stop.cuts
    assert got[0] is not None and got[0] == got[1] and got[0] <= optimum + 1e-6


def test_per_window_bound_without_heuristics_is_a_bound_and_the_same_twice():
    # the fleet-scale path's bound: HiGHS's primal heuristics off, the root node alone; still a bound of the
    # planted optimum, the same twice, and each window's bound <= the window's own proven bound with them
    problem, optimum = planted_instance(2, models_per_gpu=2, n_windows=3, seed=5)
    got = []
    for _ in range(2):
        stop = SafetyStop(deadline=time.perf_counter() + 600, time_limit_s=600)
        got.append(window_bounds(problem, deadline=0.0, max_nodes=1, stop=stop, heuristics=False))
        assert not stop.cuts
    assert got[0] is not None and got[0] == got[1] and all(b is not None for b in got[0])
    assert sum(got[0]) <= optimum + 1e-6
    # each window's bound with HiGHS's heuristics, within the exact model's node budget (the 600 s a safety stop)
    closed = window_bounds(problem, deadline=time.perf_counter() + 600, threads=1, gap=0.0,
                           max_nodes=solve_mod.Effort().exact_nodes("highs"))
    assert closed is not None and all(b <= c + 1e-6 for b, c in zip(got[0], closed, strict=True))


def test_cbc_with_a_node_budget_on_two_threads_gives_the_same_plan_twice():
    # CBC's plain parallel search is not repeatable (this instance, 300 nodes, 2 threads: $208.80 then $205.51);
    # with a node budget solve_milp runs it in CBC's repeatable mode. 30 nodes at gap 0 do not close it.
    problem = random_instance(6, 6, seed=4)
    runs = [solve_milp(problem, backend="cbc", time_limit_s=600, threads=2, gap=0.0, max_nodes=30)
            for _ in range(2)]
    for plan in runs:
        assert plan.has_solution and validate(problem, plan).ok, plan.message
    assert _fingerprint(runs[0]) == _fingerprint(runs[1])


def test_the_fleet_scale_path_does_not_depend_on_the_clock(monkeypatch):
    # The path of problems too large for the monolithic model (forced here), on one worker (no fan-out): its
    # window passes by effort give the same plan on a fast and a slow clock, the 30-s safety stop far away; a
    # window of the per-window bound stopped by its share of the time would change the bound only, never the
    # replicas compared here.

    problem = random_instance(4, 4, seed=3)
    monkeypatch.setattr(solve_mod, "MONOLITHIC_MAX_VARS", 10)
    plans = []
    for step_s in (None, 0.01, 0.3):
        with make_executor("process", workers=1) as ex:
            plan = _solve_on_clock(monkeypatch, problem, step_s, executor=ex)
        assert plan.has_solution and validate(problem, plan).ok, plan.message
        assert "large problem" in plan.message and "this plan may differ" not in plan.message, plan.message
        assert plan.bound_usd is None or plan.bound_usd <= plan.objective_usd + 1e-6
        plans.append(plan)
    assert all(sorted(p.replicas.items()) == sorted(plans[0].replicas.items()) for p in plans)
    assert len({round(p.objective_usd, 2) for p in plans}) == 1
