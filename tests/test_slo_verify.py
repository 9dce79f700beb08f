"""Any-percentile SLOs (schema, capacity by hand), the co-resident prefill stall, replay misses, simulate --check and
plan --verify on a small scenario. Values from hand arithmetic or scipy's brentq, shown in comments."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner
from scipy.optimize import brentq

from fleetplan.cli.main import main
from fleetplan.costmodels.capacity import replica_capacity_from_latency
from fleetplan.costmodels.demand import TokenMix
from fleetplan.costmodels.engine import PREFILL_FIRST
from fleetplan.costmodels.queueing import lognormal_quantile
from fleetplan.costmodels.slo import SLO
from fleetplan.errors import InputError
from fleetplan.fileio import validate_input
from fleetplan.outputs.planio import plan_to_dict
from fleetplan.placement.validate import validate
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.read import scenario_embed, scenario_from_raw
from fleetplan.scenario.schemas import SLOSpec
from fleetplan.simulator.metrics import ModelWindowMetrics
from fleetplan.simulator.replay import simulate_day
from fleetplan.simulator.verify import verify_plan, verify_text
from fleetplan.solvers.solve import solve

# Constant latencies (prefill 0.1 s, decode step 0.02 s), every request 100 tokens in and out.
FLAT = TokenMix(100, 100, 100, 100)


def _flat(slo: SLO, residents: int = 1):
    return replica_capacity_from_latency(lambda i: 0.1, lambda b, c: 0.02, FLAT, slo, kv_bytes_per_seq=1.0,
                                         kv_budget_bytes=1e9, residents=residents,
                                         per_request=False,
                                         engine=PREFILL_FIRST)  # points 1-9 (10: test_capacity_tail.py)


def test_ttft_p99_rate_matches_independent_root():
    # p99: every prefill 0.1 s (M/D/1), ρ = 0.1 λ, Pollaczek-Khinchine mean wait 0.01 λ / (2(1 − ρ)), the wait's
    # exponential tail ρ·exp(−(20 − 2 λ) t), so 0.1 + ln(ρ / 0.01) / (20 − 2 λ) + 0.02
    # = 0.12 + ln(10 λ) / (20 − 2 λ) = 0.3 (wait + own prefill exceeded with probability 1%).
    lam = brentq(lambda x: 0.12 + math.log(10 * x) / (20 - 2 * x) - 0.3, 0.2, 9.99)
    c = _flat(SLO(0.3, 1.0, ttft_percentile=99))
    assert c.limiting == "ttft"
    assert c.req_per_s == pytest.approx(lam, rel=1e-4)
    # The p99 target admits less than the same target at p95.
    assert c.req_per_s < _flat(SLO(0.3, 1.0)).req_per_s


def test_attainment_raises_the_planning_quantile():
    # Two targets, attainment 0.99: each sized at 1 − 0.01/2 = 0.995 (union bound).
    slo = SLO(0.3, 1.0, attainment=0.99)
    assert slo.planning_quantile("ttft") == pytest.approx(0.995)
    assert SLO(0.3, 1.0, ttft_percentile=99.9, attainment=0.99).planning_quantile("ttft") == pytest.approx(0.999)


def test_coresident_prefills_stall_decode_by_hand():
    # TPOT = 0.02 / (1 − K·0.1·λ) <= 0.04: K = 1 gives λ = 5, K = 2 (a co-resident with the same prefill load)
    # gives λ = 2.5.
    assert _flat(SLO(10, 0.04)).req_per_s == pytest.approx(5.0, rel=1e-4)
    c = _flat(SLO(10, 0.04), residents=2)
    assert c.limiting == "tpot"
    assert c.req_per_s == pytest.approx(2.5, rel=1e-4)


def test_lognormal_quantile_meets_the_p95():
    assert lognormal_quantile(1000, 3000, 0.95) == pytest.approx(3000)
    # sigma s solves ln 3 = 1.6449 s − s²/2: s = 1.6449 − sqrt(1.6449² − 2 ln 3) = 0.7927; median = mean·exp(−s²/2).
    s = 1.6448536 - math.sqrt(1.6448536 ** 2 - 2 * math.log(3))
    assert lognormal_quantile(1000, 3000, 0.5) == pytest.approx(1000 * math.exp(-s * s / 2), rel=1e-6)


def test_slo_keys_any_percentile_and_old_keys():
    old = validate_input(SLOSpec, {"ttft_p95_s": 2.0, "tpot_p95_s": 0.1}, source="t").to_slo()
    assert (old.ttft_s, old.tpot_s, old.ttft_percentile, old.tpot_percentile) == (2.0, 0.1, 95.0, 95.0)
    new = validate_input(SLOSpec, {"ttft_p99_s": 3.0, "tpot_p50_s": 0.05, "e2e_p90_s": 60, "attainment": 0.99},
                         source="t").to_slo()
    assert (new.ttft_percentile, new.tpot_percentile, new.e2e_s, new.e2e_percentile, new.attainment) == (
        99.0, 50.0, 60, 90.0, 0.99)
    with pytest.raises(InputError, match="2 TTFT targets"):
        validate_input(SLOSpec, {"ttft_p95_s": 2.0, "ttft_p99_s": 3.0, "tpot_p95_s": 0.1}, source="t")
    with pytest.raises(InputError, match="needs a TPOT target"):
        validate_input(SLOSpec, {"ttft_p95_s": 2.0}, source="t")
    with pytest.raises(InputError, match="give seconds"):
        validate_input(SLOSpec, {"ttft_p99_s": 2000, "tpot_p95_s": 0.1}, source="t")


def test_row_misses_use_the_targets_percentile():

    nan = math.nan
    row = ModelWindowMetrics("m", 0, 100, 0, nan, nan, nan, nan, nan, nan, 0.97, nan, nan, nan, nan, nan, 1.0, 0.1,
                             slo=SLO(1.0, 0.1, tpot_percentile=99, attainment=0.99), ttft_at_target_s=1.01,
                             tpot_at_target_s=0.125)
    # TTFT 1.01 is within 2% of 1.0; TPOT p99 125 ms > 100 ms; attainment 97% < 99%.
    assert row.misses() == ["TPOT p99 125 ms > 100 ms", "attainment 97.00% < 99.00%"]


def _small_scenario(tpot: float):

    raw = {"name": "verify-test", "options": {"window_length_s": 600, "margin": 0.1},
           "sites": [{"name": "aws:us-east-1",
                      "inventory": [{"gpu": "H100", "nodes": 1, "gpus_per_node": 8, "usd_per_gpu_hour": 4.0}]}],
           "models": [{"name": "Llama-3.1-8B", "tp": [1], "min_replicas": 1,
                       "slo": {"ttft_p95_s": 1.0, "tpot_p95_s": tpot},
                       "token_mix": {"input_tokens_mean": 500, "input_tokens_p95": 1500, "output_tokens_mean": 100,
                                     "output_tokens_p95": 300},
                       "demand": {"rates": [2.0, 6.0]}}]}
    return scenario_from_raw(raw, source="test scenario")


def test_derating_scales_the_named_option_only():

    sc = _small_scenario(0.05)
    base = build_problem(sc)
    (opt,) = base.options
    half = build_problem(sc, derating={opt.key: 0.5})
    assert half.options[0].capacity_req_per_s == pytest.approx(0.5 * opt.capacity_req_per_s)
    with pytest.raises(InputError, match="derating factor"):
        build_problem(sc, derating={opt.key: 1.5})


def test_verify_loop_reports_rounds_and_plan_is_valid():

    sc = _small_scenario(0.05)
    vr = verify_plan(sc, solve_options={"time_limit_s": 10, "threads": 1}, max_rounds=2, seed=1)
    assert validate(vr.problem, vr.plan).ok
    # ok exactly when the last replay has no misses; every derating factor is in [MIN_FACTOR, 1).
    assert vr.ok == (not vr.report.misses())
    assert all(0.3 <= f < 1.0 for f, _ in vr.derating.values())
    assert len(vr.rounds) >= 1 and "replay verification" in verify_text(vr)


def test_simulate_check_exit_code(tmp_path):
    import json


    sc = _small_scenario(0.05)
    problem = build_problem(sc)
    plan = solve(problem, "highs", time_limit_s=10, threads=1)
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(plan_to_dict(problem, plan, scenario=scenario_embed(sc))))
    misses = simulate_day(problem, plan, sc, seed=0).misses()
    out = CliRunner().invoke(main, ["simulate", str(p), "--check"])
    assert out.exit_code == (1 if misses else 0), out.output
    assert ("SLO check failed" if misses else "SLO check passed") in out.output
