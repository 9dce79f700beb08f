"""fleetplan diff: plan against plan, per model, pool and window, with the cost delta (issue 28, item 1)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from fleetplan.cli.main import main
from fleetplan.errors import InputError
from fleetplan.outputs.plandiff import diff_plans
from fleetplan.outputs.planio import load_plan_file
from fleetplan.placement.validate import validate

GOLDEN = Path(__file__).parent / "golden" / "export"
PLAN = GOLDEN / "default_plan.json"
DISAGG = GOLDEN / "disagg_wins" / "plan.json"


def test_one_more_replica_in_one_window_is_one_row_its_gpu_hours_and_its_start():
    problem, plan, _sc, _d = load_plan_file(PLAN)
    # A model served only at its origin site (no request egress before or after, so the delta is GPUs + start).
    key = next(k for k in plan.replicas if k[0] == "Mixtral-8x7B-v0.1")
    assert problem.pool_by_id[key[1]].site == problem.model_by_name[key[0]].origin_site
    counts = list(plan.replicas[key])
    assert counts[4] == counts[5] == counts[6]  # so one more in window 5 is one rise and one fall
    counts[5] += 1
    more = replace(plan, replicas={**plan.replicas, key: tuple(counts)}, objective_usd=None, bound_usd=None, gap=None)
    assert validate(problem, more).ok  # more capacity than the original: still a valid plan
    d = diff_plans(problem, plan, problem, more)
    assert len(d.rows) == 1 and d.rows[0].windows() == [5]
    assert (d.rows[0].added, d.rows[0].removed, d.migrations) == (1, 0, 1)
    o = problem.option_by_key[key]
    pool = problem.pool_by_id[o.pool]
    # By hand: one more replica for one 1-h window = tp x pp GPUs x the pool's price x 1 h, plus one start
    # (the rise from window 4 to window 5) at the option's start cost; nothing else changes.
    expected = o.tp * o.pp * pool.usd_per_gpu_hour * 1.0 + o.start_cost_usd
    assert d.cost_delta_usd_per_day == pytest.approx(expected, rel=1e-9)
    back = diff_plans(problem, more, problem, plan)
    assert (back.rows[0].added, back.rows[0].removed) == (0, 1)
    assert back.cost_delta_usd_per_day == pytest.approx(-expected, rel=1e-9)


def test_the_same_plan_is_no_change_and_plans_on_other_windows_are_refused():
    problem, plan, _sc, _d = load_plan_file(PLAN)
    assert diff_plans(problem, plan, problem, plan).rows == ()
    p2, plan2, _s2, _d2 = load_plan_file(DISAGG)
    with pytest.raises(InputError, match="different windows"):
        diff_plans(problem, plan, p2, plan2)


def test_cli_json_and_the_refusal_as_one_line():
    r = CliRunner().invoke(main, ["diff", str(PLAN), str(PLAN), "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["rows"] == [] and d["cost_delta_usd_per_day"] == 0 and d["migrations"] == 0
    r = CliRunner().invoke(main, ["diff", str(PLAN), str(DISAGG)])
    assert r.exit_code == 2 and "different windows" in r.output and "Traceback" not in r.output
