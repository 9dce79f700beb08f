"""``replay_fleet_day`` on a tiny case computed by hand, and ``fleetplan simulate PLAN --fleet steps.json``."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from fleetplan.cli.main import main
from fleetplan.errors import InputError
from fleetplan.outputs.planio import plan_to_dict
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.read import scenario_embed, scenario_from_raw
from fleetplan.service.runtime import ReplanService, ServiceSettings, load_problem
from fleetplan.simulator.fleetday import (
    FleetStep,
    Outage,
    day_requests,
    lifetimes,
    replay_fleet_day,
    steps_from_dict,
)
from fleetplan.simulator.workload import scenario_workload
from fleetplan.solvers.baselines import autoscale_dedicated

USD_PER_GPU_HOUR = 4.0


def _scenario(rates_8b: list[float], rates_70b: list[float]):
    raw = {"name": "fleetday-test", "options": {"window_length_s": 600, "margin": 0.1},
           "sites": [{"name": "aws:us-east-1", "inventory": [{"gpu": "H100", "nodes": 1, "gpus_per_node": 8,
                                                             "usd_per_gpu_hour": USD_PER_GPU_HOUR}]}],
           "models": [{"name": "Llama-3.1-8B", "tp": [1], "slo": {"ttft_p95_s": 1.0, "tpot_p95_s": 0.05},
                       "token_mix": {"trace": "azure-conv"}, "demand": {"rates": rates_8b}},
                      {"name": "Llama-3.1-70B", "tp": [4], "slo": {"ttft_p95_s": 2.0, "tpot_p95_s": 0.1},
                       "token_mix": {"trace": "azure-conv"}, "demand": {"rates": rates_70b}}]}
    return scenario_from_raw(raw, source="test scenario")


def test_replay_fleet_day_bills_from_start_to_stop_and_drops_a_model_without_replicas():
    # Two 600-s windows; no 8B requests (rate 0), 70B requests but never a 70B replica.
    sc = _scenario([0.0, 0.0], [0.05, 0.05])
    problem = build_problem(sc)
    (k8,) = [o.key for o in problem.options if o.model == "Llama-3.1-8B"]
    steps = [FleetStep(0.0, {k8: 1}), FleetStep(300.0, {k8: 2}), FleetStep(900.0, {k8: 1})]
    rep = replay_fleet_day(problem, sc, steps, {k8: 60.0}, seed=0)
    # By hand: replica A bills 0..1200 s, replica B 300..900 s (it serves nothing, so it stops at its step):
    # 1800 GPU-s = 0.5 GPU-h x $4 = $2.00. Migrations: one start (at 300) + one stop (at 900) = 2.
    assert rep.gpu_hours == pytest.approx(0.5)
    assert rep.gpu_hours_by_model == pytest.approx({"Llama-3.1-8B": 0.5})  # the only replicas billed
    assert rep.cost_usd == pytest.approx(0.5 * USD_PER_GPU_HOUR)
    assert rep.migrations == 2
    assert rep.busy_gpu_hours == 0.0 and rep.utilization == 0.0
    # Every 70B request is dropped (no replica ever): the count is the workload's, none met.
    n70 = sum(int((scenario_workload(sc, w, 0.0, 600.0, 0, names=["Llama-3.1-8B", "Llama-3.1-70B"]).model
                   == "Llama-3.1-70B").sum()) for w in range(2))
    assert n70 > 0
    assert rep.by_model["Llama-3.1-70B"] == (n70, 0)
    assert rep.by_model["Llama-3.1-8B"] == (0, 0)
    assert (rep.requests, rep.met, rep.attainment) == (n70, 0, 0.0)


def test_capacity_utilization_is_rated_gpu_seconds_of_served_requests_over_billed():
    # One 8B replica (1 GPU) for two 600-s windows, 70B never served. Capacity utilization = (served 8B requests x
    # 1 GPU / the option's capacity_req_per_s) / billed GPU-seconds; the 70B requests are dropped and use nothing.
    sc = _scenario([0.5, 0.5], [0.05, 0.05])
    problem = build_problem(sc)
    (o8,) = [o for o in problem.options if o.model == "Llama-3.1-8B"]
    rep = replay_fleet_day(problem, sc, [FleetStep(0.0, {o8.key: 1})], {o8.key: 60.0}, seed=0)
    n8 = sum(int((scenario_workload(sc, w, 0.0, 600.0, 0, names=["Llama-3.1-8B", "Llama-3.1-70B"]).model
                  == "Llama-3.1-8B").sum()) for w in range(2))
    assert n8 > 0 and rep.by_model["Llama-3.1-8B"][0] == n8
    # By hand: billed 1200 GPU-s at least (the replica runs the whole day; its queue may end a little later).
    assert rep.gpu_hours * 3600 == pytest.approx(1200.0, abs=60.0)
    assert rep.rated_gpu_hours == pytest.approx(n8 / o8.capacity_req_per_s / 3600.0)
    assert rep.capacity_utilization == pytest.approx(n8 / o8.capacity_req_per_s / (rep.gpu_hours * 3600.0))
    # About 0.5 req/s against the option's rating (a few req/s): well below 1, unlike the busy-time figure.
    assert 0.0 < rep.capacity_utilization < 0.5


def test_cli_simulate_fleet_replays_a_changing_fleet(tmp_path):
    sc = _scenario([0.0, 0.0], [0.0, 0.0])
    problem = build_problem(sc)
    plan = autoscale_dedicated(problem)
    pf = tmp_path / "plan.json"
    pf.write_text(json.dumps(plan_to_dict(problem, plan, scenario=scenario_embed(sc))))
    steps = {"steps": [{"at_s": 0, "replicas": [{"model": "Llama-3.1-8B", "pool": problem.pools[0].id, "tp": 1,
                                                 "pp": 1, "count": 2}]},
                       {"at_s": 600, "replicas": [{"model": "Llama-3.1-8B", "pool": problem.pools[0].id, "tp": 1,
                                                   "pp": 1, "count": 1}]}]}
    sf = tmp_path / "steps.json"
    sf.write_text(json.dumps(steps))
    r = CliRunner().invoke(main, ["simulate", str(pf), "--fleet", str(sf), "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    # By hand: two replicas for 600 s, then one for 600 s: 1800 GPU-s = 0.5 GPU-h, $2.00; one stop = 1 migration.
    assert d["gpu_hours"] == pytest.approx(0.5)
    assert d["cost_usd"] == pytest.approx(2.0)
    assert d["migrations"] == 1
    assert d["requests"] == 0 and d["first_step_at_s"] == 0
    # A history that starts late (a service that ran from 00:10): the table says the fleet before it was empty.
    late = {"steps": steps["steps"][1:]}
    sf.write_text(json.dumps(late))
    r = CliRunner().invoke(main, ["simulate", str(pf), "--fleet", str(sf)])
    assert r.exit_code == 0 and "no fleet before 00:10 (the first step, at_s 600)" in r.output, r.output
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"steps": [{"at_s": 0, "replicas": [{"model": "nope", "pool": "x", "tp": 1, "pp": 1,
                                                                   "count": 1}]}]}))
    r = CliRunner().invoke(main, ["simulate", str(pf), "--fleet", str(bad)])
    assert r.exit_code != 0 and "Traceback" not in r.output
    assert "field 'steps[0].replicas[0].model': unknown model 'nope'" in r.output


def test_export_history_turns_stored_plans_into_fleet_steps(tmp_path):

    problem, lt = load_problem(None)
    day0 = 1_764_547_200.0  # 2025-12-01 00:00 UTC
    now = {"t": day0 - 600.0}  # the cold-start plan is stored the evening before: the step at 0
    db = tmp_path / "s.db"
    svc = ReplanService(ServiceSettings(db_url=f"sqlite:///{db}", insecure_no_auth=True, interval_s=0,
                                        resolve_every_s=0), problem, lt, clock=lambda: now["t"])
    try:
        first = {(r["model"], r["pool"], r["tp"], r["pp"]): r["counts"][0] for r in svc.plan_row["body"]["replicas"]}
        now["t"] = day0 + 3600.0
        model = problem.models[0].name
        svc.observe([{"model": model, "interval_s": 300, "arrivals": 300 * 40.0, "at_s": now["t"]}])
        row = svc.replan()
        second = {(r["model"], r["pool"], r["tp"], r["pp"]): r["counts"][0] for r in row["body"]["replicas"]}
        now["t"] = day0 + 86400.0 + 60  # the next day: not exported
        svc.replan()
    finally:
        svc.close()
    assert first != second  # 40 req/s more of the first model changes the fleet
    out = tmp_path / "steps.json"
    r = CliRunner().invoke(main, ["export-history", "--db", f"sqlite:///{db}", "--day", "2025-12-01",
                                  "--out", str(out)])
    assert r.exit_code == 0, r.output
    d = json.loads(out.read_text())
    assert [s["at_s"] for s in d["steps"]] == [0.0, 3600.0]
    steps = steps_from_dict(d, problem)  # the --fleet reader takes it
    assert [dict(s.replicas) for s in steps] == [{k: n for k, n in first.items() if n},
                                                 {k: n for k, n in second.items() if n}]
    r = CliRunner().invoke(main, ["export-history", "--db", f"sqlite:///{db}", "--day", "2025-11-01"])
    assert r.exit_code != 0 and "no stored plan" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(main, ["export-history", "--db", f"sqlite:///{db}", "--day", "yesterday"])
    assert r.exit_code != 0 and "YYYY-MM-DD" in r.output
    assert json.loads(r.stdout)["error"]["field"] == "--day"  # its output is JSON on stdout: so is its error
    # ... but with --out FILE stdout carries no JSON, and the error is said once, on stderr
    r = CliRunner().invoke(main, ["export-history", "--db", f"sqlite:///{db}", "--day", "yesterday", "--out",
                                  str(tmp_path / "s.json")])
    assert r.exit_code == 2 and r.stdout == "" and r.stderr.count("YYYY-MM-DD") == 1, (r.stdout, r.stderr)
    # a database file that does not exist is named, and not created empty
    missing = tmp_path / "none.db"
    r = CliRunner().invoke(main, ["export-history", "--db", f"sqlite:///{missing}", "--day", "2025-12-01"])
    assert r.exit_code == 2 and "no database file" in r.output and not missing.exists()


def test_lifetimes_make_before_break_and_outages_by_hand():
    x, y = ("a", "p", 1, 1), ("a", "q", 1, 1)
    steps = [FleetStep(0.0, {x: 1}), FleetStep(100.0, {y: 1})]
    # X is replaced by Y at 100 s; Y loads 120 s: make-before-break keeps X serving (and billed) until 220 s
    got = sorted((life.key, life.start_s, life.ready_s, life.stop_s) for life in lifetimes(steps, {y: 120.0}))
    assert got == [(x, 0.0, 0.0, 220.0), (y, 100.0, 220.0, math.inf)]
    got = sorted((life.key, life.stop_s) for life in lifetimes(steps, {y: 120.0}, make_before_break=False))
    assert got == [(x, 100.0), (y, math.inf)]
    # pool q down 150..400 s: Y (loading until 220) never serves then; it starts again at 400 (ready 520)
    lives = lifetimes(steps, {y: 120.0}, outages=[Outage(("q",), 150.0, 400.0)])
    got = sorted((life.key, life.start_s, life.ready_s, life.stop_s, life.killed) for life in lives)
    assert got == [(x, 0.0, 0.0, 220.0, False), (y, 100.0, 220.0, 150.0, True), (y, 400.0, 520.0, math.inf, False)]
    with pytest.raises(InputError, match="from_s < to_s"):
        Outage(("q",), 5.0, 5.0)


def test_demand_factors_thin_and_add_independent_draws():
    sc = _scenario([2.0, 2.0], [0.5, 0.5])
    problem = build_problem(sc)
    names = [m.name for m in problem.models]
    base = day_requests(problem, sc, 3)
    n8 = int((base.model == "Llama-3.1-8B").sum())
    # x 0.5 on the 8B in window 0: a subset of the base requests (each kept or not), the 70B untouched
    half = day_requests(problem, sc, 3, demand_factors={("Llama-3.1-8B", 0): 0.5})
    kept8 = half.arrival_s[(half.model == "Llama-3.1-8B") & (half.arrival_s < 600)]
    assert set(kept8) <= set(base.arrival_s) and 0 < len(kept8) < n8
    assert int((half.model == "Llama-3.1-70B").sum()) == int((base.model == "Llama-3.1-70B").sum())
    # x 2 on the 70B in window 1: the base plus one independent draw of that window (seed + 104729)
    twice = day_requests(problem, sc, 3, demand_factors={("Llama-3.1-70B", 1): 2.0})
    extra = scenario_workload(sc, 1, 0.0, 600.0, 3 + 104729, names=names, models=["Llama-3.1-70B"])
    assert len(twice.arrival_s) == len(base.arrival_s) + len(extra.arrival_s)
    with pytest.raises(InputError, match="unknown model"):
        day_requests(problem, sc, 3, demand_factors={("nope", 0): 2.0})


def test_an_outage_drops_what_its_replicas_hold_and_requests_meanwhile():
    sc = _scenario([0.5, 0.5], [0.0, 0.0])
    problem = build_problem(sc)
    (o8,) = [o for o in problem.options if o.model == "Llama-3.1-8B"]
    steps = [FleetStep(0.0, {o8.key: 1})]
    full = replay_fleet_day(problem, sc, steps, {o8.key: 60.0}, seed=0)
    cut = replay_fleet_day(problem, sc, steps, {o8.key: 60.0}, seed=0,
                           outages=[Outage((o8.pool,), 300.0, 900.0)])
    # the requests arriving 300..900 s have no replica: all missed; before and after, as without the outage
    req, met = cut.between(300.0, 900.0)
    assert req > 0 and met == 0
    assert cut.between(0.0, 240.0) == full.between(0.0, 240.0)
    # billed: 0..300 s, then again from 900 s to the end (1200 s): 600 GPU-s = 1/6 GPU-h
    assert cut.gpu_hours == pytest.approx(600.0 / 3600.0, abs=60.0 / 3600.0)
    assert cut.requests == full.requests and cut.met < full.met
    with pytest.raises(InputError, match="unknown pool"):
        replay_fleet_day(problem, sc, steps, {}, outages=[Outage(("nope",), 0.0, 1.0)])


def test_queues_carried_over_or_not_agree_when_nothing_waits_at_a_boundary():
    sc = _scenario([0.3, 0.3], [0.0, 0.0])
    problem = build_problem(sc)
    (o8,) = [o for o in problem.options if o.model == "Llama-3.1-8B"]
    steps = [FleetStep(0.0, {o8.key: 1})]
    a = replay_fleet_day(problem, sc, steps, {}, seed=1, carry_queues=True)
    b = replay_fleet_day(problem, sc, steps, {}, seed=1, carry_queues=False)
    assert (a.requests, a.met) == (b.requests, b.met)
    assert a.gpu_hours == pytest.approx(b.gpu_hours, abs=1e-3)


def test_a_fleet_step_beyond_the_inventory_is_refused():
    # issue 28 item 2: 150 GPU-hours were billed on an 8-GPU pool. One 1×8-GPU node holds 8 replicas of tp 1 or
    # 2 of tp 4: 8 of tp 1 pass; 2 of tp 4 + 1 of tp 1 = 9 GPUs do not.
    problem = build_problem(_scenario([0.1, 0.1], [0.05, 0.05]))
    (k8,) = [o.key for o in problem.options if o.model == "Llama-3.1-8B"]
    (k70,) = [o.key for o in problem.options if o.model == "Llama-3.1-70B"]

    def step(reps):
        return {"steps": [{"at_s": 0, "replicas": [{"model": k[0], "pool": k[1], "tp": k[2], "pp": k[3], "count": n}
                                                   for k, n in reps.items()]}]}

    assert len(steps_from_dict(step({k8: 8}), problem)) == 1
    with pytest.raises(InputError, match=r"steps\[0\]: the replicas on pool .* need 9 GPUs but its inventory holds 8"):
        steps_from_dict(step({k70: 2, k8: 1}), problem)


def test_fleet_steps_at_one_time_or_a_model_twice_on_a_shared_gpu_are_refused():
    # Found by a fresh user: both were replayed without a word (which step won? a model resident twice?), and an
    # unknown option's message held a raw exception repr.
    problem = build_problem(_scenario([0.1, 0.1], [0.05, 0.05]))
    (k8,) = [o.key for o in problem.options if o.model == "Llama-3.1-8B"]
    rep = [{"model": k8[0], "pool": k8[1], "tp": k8[2], "pp": k8[3], "count": 1}]
    with pytest.raises(InputError, match=r"steps\[0\] and steps\[1\] are both at 60 s.*merge them"):
        steps_from_dict({"steps": [{"at_s": 60, "replicas": rep}, {"at_s": 60, "replicas": rep}]}, problem)
    twice = {"steps": [{"at_s": 0, "shared": [{"pool": k8[1], "models": ["Llama-3.1-8B", "Llama-3.1-8B"]}]}]}
    with pytest.raises(InputError, match=r"lists Llama-3.1-8B twice") as e:
        steps_from_dict(twice, problem)
    assert e.value.field == "steps[0].shared[0].models"
    bad = {"steps": [{"at_s": 0, "replicas": [{**rep[0], "pool": "aws:us-east-1/H10O"}]}]}
    with pytest.raises(InputError) as e:
        steps_from_dict(bad, problem)
    assert e.value.field == "steps[0].replicas[0].pool" and "InputError(" not in str(e.value)
    assert "unknown pool 'aws:us-east-1/H10O'; did you mean 'aws:us-east-1/H100-SXM-80GB'" in str(e.value)
    # the internal option tuple is no message: the shapes the model has on the pool are
    with pytest.raises(InputError, match=r"no tp 4 pp 1 option on .*its options there: tp 1 pp 1") as e:
        steps_from_dict({"steps": [{"at_s": 0, "replicas": [{**rep[0], "tp": 4}]}]}, problem)
    # one option listed twice in a step: its two counts were added up without a word
    with pytest.raises(InputError, match=r"replicas\[1\] repeats the option of replicas\[0\]") as e:
        steps_from_dict({"steps": [{"at_s": 0, "replicas": [rep[0], {**rep[0], "count": 2}]}]}, problem)
    assert e.value.field == "steps[0].replicas[1]"
