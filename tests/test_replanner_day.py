"""The re-planner service starting from an offline plan (fleetplan serve --plan)."""

from __future__ import annotations

import json

import pytest

from fleetplan.errors import InputError
from fleetplan.outputs.planio import plan_to_dict
from fleetplan.placement.validate import validate
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.read import load_scenario, scenario_embed
from fleetplan.service.runtime import ReplanService, ServiceSettings, load_problem
from fleetplan.simulator.fleetday import FleetStep, count_migrations, lifetimes
from fleetplan.solvers.baselines import autoscale_dedicated


def test_serve_starts_from_an_offline_plan(tmp_path):
    sc = load_scenario(None)
    problem = build_problem(sc)
    plan = autoscale_dedicated(problem)  # a per-window offline plan (fast; any valid plan will do)
    assert validate(problem, plan).ok
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(plan_to_dict(problem, plan, scenario=scenario_embed(sc))))
    p, lt = load_problem(None)
    at = 3 * 3600.0 + 60  # window 3
    svc = ReplanService(ServiceSettings(db_url=f"sqlite:///{tmp_path}/s.db", insecure_no_auth=True, interval_s=0,
                                        resolve_every_s=0, plan_file=str(f)), p, lt, clock=lambda: at)
    try:
        row = svc.plan_row
        assert row["reason"] == "offline-plan"
        got = {(r["model"], r["pool"], r["tp"], r["pp"]): r["counts"][0] for r in row["body"]["replicas"]}
        want = {k: c[3] for k, c in plan.replicas.items() if c[3]}
        assert got == want  # the offline plan's window-3 replicas, nothing started or stopped
    finally:
        svc.close()
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(InputError, match="not a fleetplan plan"):
        ReplanService(ServiceSettings(db_url=f"sqlite:///{tmp_path}/b.db", insecure_no_auth=True, interval_s=0,
                                      resolve_every_s=0, plan_file=str(bad)), p, lt, clock=lambda: at)


def test_fleet_lifetimes_bill_from_start_serve_after_load_and_stop_loading_first():

    k = ("a", "p", 1, 1)
    steps = [FleetStep(0.0, {k: 1}), FleetStep(100.0, {k: 3}), FleetStep(150.0, {k: 2}), FleetStep(400.0, {k: 1})]
    lives = lifetimes(steps, {k: 120.0})
    got = sorted((x.start_s, x.ready_s, x.stop_s) for x in lives)
    # the first step's replica is up at once; two start at 100 (ready 220); at 150 the newest loading one stops;
    # at 400 the newest remaining (started 100) stops, the original keeps serving
    assert got == [(0.0, 0.0, float("inf")), (100.0, 220.0, 150.0), (100.0, 220.0, 400.0)]
    assert count_migrations(steps) == 2 + 1 + 1
