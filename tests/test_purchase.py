"""How the GPUs are bought: owned, committed, on-demand and spot pools of one GPU type at one site (issue 15 item 4).

The hand-built problem below is small enough to solve by hand; every solver's plan is re-checked by validate.
"""

from __future__ import annotations

import copy
import json

import pytest

from fleetplan.cli.plan import _render_table
from fleetplan.costmodels.energy import owned_marginal_usd_per_gpu_hour
from fleetplan.costmodels.prices import break_even_utilization
from fleetplan.errors import InputError
from fleetplan.export.deployment import DeployFile, workloads
from fleetplan.outputs.ledger import plan_ledger
from fleetplan.outputs.planio import load_plan_file, plan_from_dict, plan_to_dict
from fleetplan.placement.plan import Plan, commitments, evaluate
from fleetplan.placement.problem import ModelSpec, Pool, Problem, ReplicaOption
from fleetplan.placement.validate import plan_cost_usd, validate
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.read import load_scenario, read_scenario, scenario_embed, scenario_from_raw
from fleetplan.service.actuate import plan_targets
from fleetplan.solvers.baselines import greedy
from fleetplan.solvers.cpsat import solve_cpsat
from fleetplan.solvers.milp import solve_milp
from fleetplan.solvers.online.replanner import Replanner
from fleetplan.solvers.solve import Effort, solve

SITE = "gcp:us-central1"
GPU = "H100-SXM-80GB"


def _pool(name: str, gpus: int, usd: float, pricing_model: str, **kw) -> Pool:
    return Pool(SITE, GPU, nodes=gpus, gpus_per_node=1, usd_per_gpu_hour=usd, memory_bytes_per_gpu=80e9,
                pricing_model=pricing_model, name=name, **kw)


def four_pools(on_demand_gpus: int = 8) -> Problem:
    """One model, 4 windows of 6 h, demand [2, 6, 10, 4] req/s, margin 0, one GPU serves 1 req/s (a spot GPU
    0.5: its interruption rate 0.5 derates it, as the scenario builder does). Pools: owned 2 GPUs at 0.20 $/h
    (power), committed up to 8 GPUs at 6.50 $/h each committed hour, on-demand at 10.00 $/h, spot 4 GPUs at
    4.00 $/h with the on-demand pool as its fallback."""
    pools = (_pool("owned", 2, 0.20, "owned"),
             _pool("committed", 8, 0.0, "committed-1y", committed_usd_per_gpu_hour=6.5,
                   on_demand_usd_per_gpu_hour=10.0, on_demand_price_source="the on-demand pool"),
             _pool("on-demand", on_demand_gpus, 10.0, "on-demand"),
             _pool("spot", 4, 4.0, "spot", interruption_rate=0.5, fallback_pool="on-demand"))
    options = tuple(ReplicaOption("m", p.id, 1, 1, 0.5 if p.id == "spot" else 1.0, 40e9) for p in pools)
    model = ModelSpec("m", (2.0, 6.0, 10.0, 4.0), ttft_p95_s=1.0, tpot_p95_s=0.1)
    return Problem(window_length_s=6 * 3600, n_windows=4, pools=pools, models=(model,), options=options, margin=0.0)


# Hand arithmetic for four_pools(). Marginal cost per req/s in a 6-h window: a committed GPU 0 (its 6.5 × 24 = 156 $
# a day are paid whatever it serves), owned 0.20 × 6 = 1.20 $, spot 2 GPUs × 4 × 6 = 48 $ (at most 4 spot GPUs
# = 2 req/s), on demand 10 × 6 = 60 $. Demand [2, 6, 10, 4] is filled in that order for each commitment c:
#   c = 0: w0 2 owned 2.4; w1 2.4 + 2 spot 96 + 2 od 120; w2 2.4 + 96 + 6 od 360; w3 2.4 + 96          -> 777.6
#   c = 1: 156 + w0 1 owned 1.2; w1 2.4 + 96 + 60; w2 2.4 + 96 + 300; w3 2.4 + 1 spot 48             -> 764.4
#   c = 2: 312 + w0 0; w1 2.4 + 96; w2 2.4 + 96 + 4 od 240; w3 2.4                                    -> 751.2
#   c = 3: 468 + w0 0; w1 2.4 + 1 spot 48; w2 2.4 + 96 + 3 od 180; w3 1 owned 1.2                      -> 798.0
# (the 2nd committed GPU saves 1.2 + 60 + 60 + 48 - 156 = 13.2 $; the 3rd 2.4 + 48 + 60 + 1.2 - 156 < 0).
# So 2 GPUs are committed and the day costs 751.20 $. Break-even of the commitment: 6.5 / 10 = 0.65.
# Fallback: in w2 4 spot GPUs need 0.5 × 4 = 2 free on-demand GPUs; 8 - 4 used = 4 free: the rule holds.
HAND_COMMIT = 2
HAND_COST_USD = 751.20


def test_hand_arithmetic_commitment_and_cost_milp_and_cpsat():
    problem = four_pools()
    for plan in (solve(problem, time_limit_s=20),
                 solve_milp(problem, time_limit_s=20, max_nodes=Effort().exact_nodes("highs")),
                 solve_cpsat(problem, time_limit_s=20, deterministic_time=Effort().exact_cpsat_units)):
        assert validate(problem, plan).ok, (plan.backend, validate(problem, plan).violations)
        assert plan.commitments == {"committed": HAND_COMMIT}, plan.backend
        assert plan.objective_usd == pytest.approx(HAND_COST_USD, abs=1e-6), plan.backend
        assert plan_cost_usd(problem, plan) == pytest.approx(HAND_COST_USD, abs=1e-6)
        assert evaluate(problem, plan).committed_usd == pytest.approx(2 * 6.5 * 24)
    assert problem.pool_by_id["committed"].break_even_utilization == pytest.approx(0.65)


def test_fallback_rule_binds_when_on_demand_is_short():
    # With 5 on-demand GPUs the hand plan's w2 (4 spot GPUs and 4 on-demand ones) breaks the rule: the solver's
    # plan keeps it, and validate catches a plan that breaks it.
    problem = four_pools(on_demand_gpus=5)
    plan = solve(problem, time_limit_s=20)
    assert validate(problem, plan).ok, validate(problem, plan).violations
    use = {p: [0] * 4 for p in problem.pool_by_id}
    for key, counts in plan.replicas.items():
        for w, n in enumerate(counts):
            use[key[1]][w] += n
    assert all(0.5 * use["spot"][w] <= 5 - use["on-demand"][w] + 1e-9 for w in range(4))
    # w2: 2 owned + 2 committed + 4 spot (2 req/s) + 4 on-demand = 10 req/s, but 0.5 × 4 = 2 > 5 - 4 = 1 free
    bad = Plan(replicas={("m", "owned", 1, 1): (2, 2, 2, 2), ("m", "committed", 1, 1): (2, 2, 2, 2),
                         ("m", "spot", 1, 1): (0, 4, 4, 0), ("m", "on-demand", 1, 1): (0, 0, 4, 0)})
    assert [v for v in validate(problem, bad).violations] == [
        "spot window 2: fallback headroom 1 GPUs of on-demand < interruption rate 0.5 × 4 spot GPUs = 2.00"]


def test_commitment_is_checked_and_defaults_to_peak_use():
    problem = four_pools()
    plan = Plan(replicas={("m", "owned", 1, 1): (2, 2, 2, 2), ("m", "committed", 1, 1): (0, 4, 8, 2)})
    # No stated commitment: the peak use, 8 GPUs, is committed: 8 × 6.5 × 24 = 1248 $ + owned 9.60 $.
    assert commitments(problem, plan) == {"committed": 8}
    assert evaluate(problem, plan).total_usd == pytest.approx(1248 + 9.6)
    assert plan_cost_usd(problem, plan) == pytest.approx(1248 + 9.6)
    short = Plan(replicas=plan.replicas, commitments={"committed": 6})
    assert any("> the 6 GPUs committed" in v for v in validate(problem, short).violations)
    wrong = Plan(replicas=plan.replicas, commitments={"on-demand": 3})
    assert any("not a committed pool" in v for v in validate(problem, wrong).violations)


def test_commitment_reports_deployed_and_load_shares(capsys):
    # A committed-only plan keeps 10 replicas up in every window (idle committed GPUs cost nothing more, starts do):
    # deployed 40 / (10 × 4) = 100% of the committed GPU-hours, but the load is demand / capacity =
    # (2 + 6 + 10 + 4) req/s / (10 GPUs × 1 req/s × 4 windows) = 22 / 40 = 55%. "busy 100%" reported the first only.
    committed = _pool("committed", 10, 0.0, "committed-1y", committed_usd_per_gpu_hour=6.5)
    model = ModelSpec("m", (2.0, 6.0, 10.0, 4.0), ttft_p95_s=1.0, tpot_p95_s=0.1)
    problem = Problem(window_length_s=6 * 3600, n_windows=4, pools=(committed,), models=(model,),
                      options=(ReplicaOption("m", "committed", 1, 1, 1.0, 40e9),), margin=0.0)
    plan = Plan(replicas={("m", "committed", 1, 1): (10, 10, 10, 10)}, commitments={"committed": 10})
    assert validate(problem, plan).ok, validate(problem, plan).violations
    (c,) = plan_to_dict(problem, plan)["commitments"]
    assert c["deployed_share"] == pytest.approx(1.0) and c["load_share"] == pytest.approx(22 / 40)
    _render_table(problem, plan, plan_to_dict(problem, plan))
    assert "committed 10 GPUs for the whole horizon, deployed 100% of their hours, load 55% of their capacity" \
        in capsys.readouterr().out


def test_greedy_keeps_the_fallback_headroom():
    problem = four_pools(on_demand_gpus=5)
    g = greedy(problem)
    assert not g.message and validate(problem, g).ok


def test_greedy_offers_only_the_spot_gpus_its_fallback_can_cover():
    # A 1-GPU fallback at interruption rate 0.5 covers 2 spot GPUs (0.5 × 2 = 1): the greedy may use 2 of the 4
    # spot GPUs and keeps the one fallback GPU free, so its plan holds the rule. It used to offer all 4 spot GPUs
    # with nothing kept: 1.5 req/s on 3 spot GPUs (0.5 × 3 = 1.5 > 1 fallback GPU), a plan validate refuses.
    pools = (_pool("on-demand", 1, 10.0, "on-demand"),
             _pool("spot", 4, 4.0, "spot", interruption_rate=0.5, fallback_pool="on-demand"),
             _pool("extra", 8, 20.0, "on-demand"))
    options = tuple(ReplicaOption("m", p.id, 1, 1, 0.5 if p.id == "spot" else 1.0, 40e9) for p in pools)
    model = ModelSpec("m", (1.5,), ttft_p95_s=1.0, tpot_p95_s=0.1)
    problem = Problem(window_length_s=3600, n_windows=1, pools=pools, models=(model,), options=options, margin=0.0)
    g = greedy(problem)
    assert validate(problem, g).ok, validate(problem, g).violations
    assert g.replicas.get(("m", "spot", 1, 1), (0,))[0] <= 2 and ("m", "on-demand", 1, 1) not in g.replicas


def test_pool_ids_and_bad_pools():
    assert _pool("", 1, 1.0, "on-demand").id == f"{SITE}/{GPU}"  # default id unchanged
    a = _pool("", 1, 1.0, "on-demand")
    with pytest.raises(InputError, match="own name"):
        Problem(window_length_s=3600, n_windows=1, pools=(a, a), models=(), options=())
    with pytest.raises(InputError, match="committed pricing model"):
        _pool("x", 1, 1.0, "on-demand", committed_usd_per_gpu_hour=1.0)
    with pytest.raises(InputError, match="spot pools"):
        _pool("x", 1, 1.0, "on-demand", interruption_rate=0.1)
    spot = _pool("s", 1, 1.0, "spot", interruption_rate=0.1, fallback_pool="nowhere")
    with pytest.raises(InputError, match="fallback"):
        Problem(window_length_s=3600, n_windows=1, pools=(spot,), models=(), options=())
    committed = _pool("c", 1, 0.0, "committed-1y", committed_usd_per_gpu_hour=1.0)
    spot = _pool("s", 1, 1.0, "spot", interruption_rate=0.1, fallback_pool="c")
    with pytest.raises(InputError, match="'c' is a committed pool"):
        Problem(window_length_s=3600, n_windows=1, pools=(committed, spot), models=(), options=())


def test_break_even_and_owned_marginal_cost():
    # A committed rate of 7.50 against on demand 11.0612 USD/GPU-h: 7.5 / 11.0612 = 0.67805.
    assert break_even_utilization(7.5, 11.0612) == pytest.approx(0.67805, abs=1e-5)
    # (700 - 0.15 × 700) W × 1.56 × 0.13 USD/kWh / 1000 = 0.120666 USD per GPU-hour
    assert owned_marginal_usd_per_gpu_hour(700, 0.15, 0.13, 1.56) == pytest.approx(0.120666, abs=1e-6)
    with pytest.raises(InputError):
        break_even_utilization(1.0, 0.0)


@pytest.fixture(scope="module")
def example():
    """(problem, scenario, plan) of the shipped purchase_example scenario, solved once for this module."""
    scenario = load_scenario("purchase_example")
    problem = build_problem(scenario)
    return problem, scenario, solve(problem, time_limit_s=30)


def test_shipped_example_scenario_by_hand(example):
    problem, _scenario, plan = example
    pools = problem.pool_by_id
    assert [p.id for p in problem.pools] == ["owned", "committed", "on-demand", "spot"]
    owned, committed, spot = pools["owned"], pools["committed"], pools["spot"]
    # Prices: owned (700 - 0.15 × 700) W × 1.56 × 0.13 / 1000 = 0.120666 USD/GPU-h (data files); committed 7.5 (the
    # scenario's negotiated rate), on demand 11.0612 (Cyclenerd), spot 2.52493 (SkyPilot a3-highgpu-1g).
    assert owned.usd_per_gpu_hour == pytest.approx(0.120666)
    assert committed.committed_usd_per_gpu_hour == pytest.approx(7.5) and committed.usd_per_gpu_hour == 0
    assert committed.on_demand_usd_per_gpu_hour == pytest.approx(11.0612)
    assert committed.break_even_utilization == pytest.approx(7.5 / 11.0612)
    assert spot.usd_per_gpu_hour == pytest.approx(2.52493)
    # One H100 tp-1 replica serves C req/s (the capacity model); at margin 0.1 a GPU gives 0.9 C, a spot one
    # 0.9 × 0.9 C. In units of 0.9 C (C = 14.79 req/s) the night (126 req/s) needs 9.47 GPUs and the day (258
    # req/s) 19.38.
    cap = {o.pool: o.capacity_req_per_s for o in problem.options}
    assert cap["spot"] == pytest.approx(0.9 * cap["owned"])
    unit = 0.9 * cap["owned"]
    assert 9 < 126 / unit < 9.5 and 19.35 < 258 / unit < 19.5  # the pattern the arithmetic below assumes
    # By hand, in the order of marginal cost (committed 0 once committed, owned 0.12, spot 2.525 per 0.9 GPU,
    # on demand 11.06): with c committed GPUs the day fills c + 8 owned + 8 spot (7.2 units) + on demand.
    #   c = 4: day 4 + 8 + 7.2 = 19.2 < 19.38: 1 on-demand GPU for 18 h = 199.10 $; night 4 + 6 owned
    #   c = 5: day 5 + 8 + 7 spot (6.3) = 19.3 < 19.38, so 8 spot: 20.2 >= 19.38, no on-demand; night 5 + 5
    #          owned. The 5th GPU costs 7.5 × 24 = 180.00 $ and saves 199.10 + one owned GPU for 6 h (0.72) =
    #          199.83 $: commit it.
    #   c = 6: day 6 + 8 + 7 spot (6.3) = 20.3: saves 1 spot GPU × 18 h = 45.45 $ + 0.72 < 180.00 $: don't.
    # Cost at c = 5: 5 × 7.5 × 24 = 900.00; owned 6 h × 5 + 18 h × 8 = 174 GPU-h × 0.120666 = 20.995884;
    # spot 18 h × 8 × 2.52493 = 363.58992; starts (one GB/s loading of 16.06 GB per GPU, priced at the pool's
    # rate: the options' start_cost_usd) 3 owned + 8 spot starts at 06:00.
    starts_usd = 3 * problem.option_by_key[("Llama-3.1-8B", "owned", 1, 1)].start_cost_usd \
        + 8 * problem.option_by_key[("Llama-3.1-8B", "spot", 1, 1)].start_cost_usd
    hand_usd = 900.00 + 20.995884 + 363.58992 + starts_usd
    assert validate(problem, plan).ok, validate(problem, plan).violations
    assert plan.commitments == {"committed": 5}
    assert plan.objective_usd == pytest.approx(hand_usd, abs=1e-6)
    assert plan.replicas[("Llama-3.1-8B", "spot", 1, 1)] == (0,) * 6 + (8,) * 18
    assert ("Llama-3.1-8B", "on-demand", 1, 1) not in plan.replicas


def test_on_demand_reference_of_a_committed_row():
    # Equal to the on-demand row's rate within half a cent (11.06 vs 11.0612): accepted, and the row's value is
    # the break-even's reference (7.5 / 11.06). Without an on-demand row it is the only reference: accepted as given.
    raw = _raw_example()
    raw["sites"][0]["inventory"][1]["on_demand_usd_per_gpu_hour"] = 11.06
    pool = build_problem(scenario_from_raw(raw, source="example")).pool_by_id["committed"]
    assert pool.break_even_utilization == pytest.approx(7.5 / 11.06)
    raw = _raw_example()
    raw["sites"][0]["inventory"][1]["on_demand_usd_per_gpu_hour"] = 15.0
    del raw["sites"][0]["inventory"][2]
    raw["sites"][0]["inventory"][2]["fallback"] = "owned"
    pool = build_problem(scenario_from_raw(raw, source="example")).pool_by_id["committed"]
    assert pool.break_even_utilization == pytest.approx(7.5 / 15.0)


def _raw_example() -> dict:
    raw, _where, _base = read_scenario("purchase_example")
    return copy.deepcopy(raw)


@pytest.mark.parametrize("edit, field, words", [
    (lambda r: r["sites"][0]["inventory"][3].pop("interruption_rate"), "interruption_rate", "needs interruption_rate"),
    (lambda r: r["sites"][0]["inventory"][1].pop("name"), "name", "own name"),
    (lambda r: r["sites"][0]["inventory"][3].update(fallback="spot"), "fallback", "fallback pool"),
    # a committed fallback was accepted: its headroom was the uncommitted GPUs, which may never run anything
    (lambda r: r["sites"][0]["inventory"][3].update(fallback="committed"), "fallback",
     "is a committed row: its GPUs beyond the commitment run nothing"),
    (lambda r: r["sites"][0]["inventory"][2].update(interruption_rate=0.1), "interruption_rate", "spot rows"),
    # 12 against the on-demand row's 11.0612 (Cyclenerd): only the break-even moved, the overflow stayed at 11.0612
    (lambda r: r["sites"][0]["inventory"][1].update(on_demand_usd_per_gpu_hour=12.0), "on_demand_usd_per_gpu_hour",
     "differs from the 11.0612 USD/GPU-h of the on-demand pool 'on-demand'"),
])
def test_scenario_purchase_errors_name_the_row(edit, field, words):
    raw = _raw_example()
    edit(raw)
    if field == "name":  # two unnamed H100 rows at one site: both get the id 'gcp:us-central1/H100-SXM-80GB'
        raw["sites"][0]["inventory"][2].pop("name")
        raw["sites"][0]["inventory"][3].pop("fallback")
    with pytest.raises(InputError) as e:
        build_problem(scenario_from_raw(raw, source="example"))
    assert e.value.field == field and words in str(e.value) and "inventory[" in str(e.value)


@pytest.mark.parametrize("edit, words, absent", [
    # was "1.0 is outside 0..1, not below 1"
    (lambda r: r["sites"][0]["inventory"][3].update(interruption_rate=1.0),
     "field 'sites[0].inventory[3].interruption_rate': site gcp:us-central1: must be below 1; got 1.0; give the "
     "share of spot hours lost", "outside"),
    # was "unknown fallback pool ... known fallback pool (a row of the same site and GPU type, not spot)s: ..."
    (lambda r: r["sites"][0]["inventory"][3].update(fallback="spot"),
     "sites[0].inventory[3], field 'fallback': a spot row cannot be its own fallback pool", ")s:"),
    # the second row of a pool id is the one to rename (it pointed at the first)
    (lambda r: r["sites"][0]["inventory"][2].update(name="owned"),
     "sites[0].inventory[2], field 'name': an earlier inventory row already makes the pool 'owned'", "inventory[0]"),
])
def test_purchase_error_wording(edit, words, absent):
    raw = _raw_example()
    edit(raw)
    if raw["sites"][0]["inventory"][2].get("name") == "owned":
        raw["sites"][0]["inventory"][3]["fallback"] = "owned"
    with pytest.raises(InputError) as e:
        build_problem(scenario_from_raw(raw, source="example"))
    assert words in str(e.value) and absent not in str(e.value), str(e.value)


def test_example_plan_file_round_trip(example):
    problem, _scenario, plan = example
    d = json.loads(json.dumps(plan_to_dict(problem, plan)))
    (c,) = d["commitments"]
    assert (c["pool"], c["gpus"], c["deployed_share"]) == ("committed", 5, 1.0)
    assert c["break_even_utilization"] == pytest.approx(7.5 / 11.0612)
    assert "scenario" in c["committed_price_source"] and "on-demand" in c["on_demand_price_source"]
    assert d["cost_breakdown_usd_per_day"]["of_which_commitments"] == pytest.approx(5 * 7.5 * 24)
    back = plan_from_dict(d, problem)
    assert back.commitments == {"committed": 5} and validate(problem, back).ok
    # the plan ledger carries the commitment as its own line, and its GPU total is evaluate's
    led = plan_ledger(problem, plan).ledger
    line = next(i for i in led.items if i.unit == "committed GPU-hour")
    assert (line.quantity_per_day, line.unit_price_usd, line.pool) == (5 * 24, pytest.approx(7.5), "committed")


def test_plan_file_reader_takes_commitments_and_refuses_edits(example, tmp_path):
    # The plan file reader (a schema, then every derived figure recomputed) knows the commitments: the file reads
    # back with its commitment; a fractional commitment and an edited break-even are refused, naming the field.
    problem, scenario, plan = example
    d = json.loads(json.dumps(plan_to_dict(problem, plan, scenario=scenario_embed(scenario))))
    f = tmp_path / "p.json"
    f.write_text(json.dumps(d))
    _p, back, _s, _d = load_plan_file(f)
    assert back.commitments == {"committed": 5}
    for edit, field in ((lambda x: x["commitments"][0].update(gpus=4.5), "commitments"),
                        (lambda x: x["commitments"][0].update(break_even_utilization=0.5), "commitments")):
        bad = copy.deepcopy(d)
        edit(bad)
        f.write_text(json.dumps(bad))
        with pytest.raises(InputError) as e:
            load_plan_file(f)
        assert f"field '{field}[0]" in str(e.value), e.value


def test_named_pools_get_their_own_workloads(example):
    problem, scenario, plan = example
    # one Deployment per pool the plan uses, named after the pool; the actuator derives the same names
    names = sorted(w.name for w in workloads(problem, plan, scenario))
    assert names == ["llama-3-1-8b-h100-sxm-80gb-tp1-committed", "llama-3-1-8b-h100-sxm-80gb-tp1-owned",
                     "llama-3-1-8b-h100-sxm-80gb-tp1-spot"]
    targets = plan_targets(json.loads(json.dumps(plan_to_dict(problem, plan))), DeployFile())
    assert sorted(t.name for t in targets) == names
    # window 0 (night): 5 committed + 5 owned, no spot
    assert {t.name.rsplit("-", 1)[-1]: t.replicas for t in targets} == {"committed": 5, "owned": 5, "spot": 0}


def test_online_rounds_use_the_days_commitment_first_and_never_beyond_it(example):
    problem, _scenario, plan = example
    # The commitment is bought for the day (the plan commits 5 GPUs), so online its GPUs cost nothing more and a
    # round cannot change it: a cold start, which would have to choose one, is refused.
    with pytest.raises(InputError, match="fleetplan serve --plan"):
        Replanner(problem).initial(0.0)
    assert plan.commitments == {"committed": 5}
    r = Replanner(problem)
    night = r.start_from(plan, 0.0)  # window 0: 5 owned + 5 committed replicas, as planned
    assert {k[1]: v[0] for k, v in night.plan.replicas.items()} == {"owned": 5, "committed": 5}
    assert night.report.ok
    # 258 req/s. Usable req/s per replica: 14.7906 x 0.9 = 13.3115 (spot x 0.9 more: 11.9804). Per usable req/s an
    # hour costs: committed 0 (sunk, all 5 in use already), owned 0.120666 / 13.3115 = 0.0091, spot
    # 2.52493 / 11.9804 = 0.2108, on demand 11.0612 / 13.3115 = 0.831. The budget of 8 starts: 3 owned (8 in all),
    # then 5 spot: 13 x 13.3115 + 5 x 11.9804 = 233.0 req/s, the rest unmet until the next round.
    r.forecaster.observe("Llama-3.1-8B", 258.0, at_s=10.0)
    res = r.round(60.0)
    assert res.report.ok, res.report.violations
    assert {k[1]: v[0] for k, v in res.plan.replicas.items()} == {"owned": 8, "committed": 5, "spot": 5}
    assert res.unmet_req_per_s["Llama-3.1-8B"] == pytest.approx(258 - (13 * 13.31153 + 5 * 11.98037), rel=1e-4)
    # the hour: the commitment 5 x 7.50 (paid whatever runs) + 8 owned x 0.120666 + 5 spot x 2.52493
    assert res.cost_usd_per_hour == pytest.approx(5 * 7.5 + 8 * 0.120666 + 5 * 2.52493)
    # next round: 3 more spot (8 in all: 268.9 req/s >= 258); the on-demand pool keeps 0.1 x 8 spot GPUs free
    res = r.round(120.0)
    assert {k[1]: v[0] for k, v in res.plan.replicas.items()} == {"owned": 8, "committed": 5, "spot": 8}
    assert res.report.ok and res.unmet_req_per_s["Llama-3.1-8B"] == 0.0
