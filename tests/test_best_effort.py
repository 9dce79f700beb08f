"""Best effort when demand exceeds the inventory: most demand served by priority, then cost (issue 13 item 3)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

from fleetplan.cli.main import main
from fleetplan.outputs.planio import plan_from_dict, problem_from_plan_dict
from fleetplan.placement.plan import Plan, Status
from fleetplan.placement.problem import ModelSpec, Pool, Problem, ReplicaOption
from fleetplan.placement.validate import validate
from fleetplan.service.app import create_app
from fleetplan.service.runtime import ReplanService, ServiceSettings, load_problem
from fleetplan.solvers.milp import solve_best_effort
from fleetplan.solvers.solve import Effort, solve

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette asks for httpx2, a package not needed here
    from fastapi.testclient import TestClient

POOL = Pool("aws:us-east-1", "H100-SXM-80GB", 1, 4, 2.0, 80e9)


def short_problem(prio_a: int = 1, prio_b: int = 0) -> Problem:
    """Four GPUs at $2/GPU-h, one window of 1 h, no margin. A needs 25 req/s, B 30 req/s, one GPU serves 10 req/s
    of either: all demand needs 3 + 3 = 6 GPUs, so 4 GPUs fall short."""
    models = (ModelSpec("A", (25.0,), 1.0, 0.1, priority=prio_a), ModelSpec("B", (30.0,), 1.0, 0.1, priority=prio_b))
    opts = tuple(ReplicaOption(m, POOL.id, 1, 1, 10.0, 40e9) for m in ("A", "B"))
    return Problem(3600.0, 1, (POOL,), models, opts, margin=0.0)


@pytest.mark.parametrize("backend", ["highs", "cbc", "cpsat"])
def test_priorities_decide_who_is_served(backend):
    """HiGHS and CBC agree on the hand-computed answer; CP-SAT's request is answered by HiGHS."""
    # A first: A gets ceil(25/10) = 3 GPUs (all of it served), B the last GPU: 10 of 30 req/s, 20 unserved.
    # Cost: 4 GPUs × $2 × 1 h = $8.
    plan = solve(short_problem(1, 0), backend, time_limit_s=20, best_effort=True)
    assert plan.has_solution and plan.best_effort, plan.message
    assert validate(short_problem(1, 0), plan).ok, validate(short_problem(1, 0), plan).violations
    assert plan.unserved_req_per_s == {"B": (pytest.approx(20.0),)}
    assert plan.objective_usd == pytest.approx(8.0)
    assert "BEST EFFORT" in plan.message and "B (priority 0) up to 20.00 req/s" in plan.message
    if backend == "cpsat":  # CP-SAT has no unserved-demand model: the MILP answers, and says so
        assert plan.backend == "highs" and "solved by the highs MILP" in plan.message
    else:
        assert plan.backend == backend
    # B first: B gets 3 GPUs (30 served), A the last: 10 of 25, 15 unserved.
    plan = solve(short_problem(0, 1), backend, time_limit_s=20, best_effort=True)
    assert validate(short_problem(0, 1), plan).ok
    assert plan.unserved_req_per_s == {"A": (pytest.approx(15.0),)}


def test_equal_priority_serves_the_most_demand():
    # One class: 4 GPUs serve at most 40 of the 55 req/s (2 + 2 GPUs: 20 + 20, or 1 + 3: 10 + 30), so the least
    # unserved is 15 req/s; 3 + 1 would leave 20.
    p = short_problem(0, 0)
    plan = solve_best_effort(p, time_limit_s=20, max_nodes=Effort().exact_nodes("highs"))
    assert validate(p, plan).ok
    assert sum(sum(r) for r in plan.unserved_req_per_s.values()) == pytest.approx(15.0)
    assert plan.status is Status.OPTIMAL  # every stage proved, then the cost at those levels


def test_without_best_effort_it_stays_an_error():
    plan = solve(short_problem(), "highs", time_limit_s=20)
    assert plan.status is Status.INFEASIBLE and "inventory" in plan.message


def test_validate_checks_served_plus_unserved_is_demand():
    p = short_problem(1, 0)
    plan = solve(p, "highs", time_limit_s=20, best_effort=True)
    # Claiming less unserved than the capacity leaves, or more, or a negative amount, is caught.
    for row in ((10.0,), (25.0,), (-1.0,)):
        bad = Plan(replicas=plan.replicas, shared=plan.shared, unserved_req_per_s={"B": row})
        assert not validate(p, bad, check_objective=False).ok, row
    assert not validate(p, Plan(replicas=plan.replicas, shared=plan.shared), check_objective=False).ok


def test_feasible_problem_is_unchanged_by_best_effort():
    # Demand within the inventory: 1 + 2 GPUs, nothing unserved, the same plan as without the flag.
    models = (ModelSpec("A", (10.0,), 1.0, 0.1, priority=1), ModelSpec("B", (20.0,), 1.0, 0.1))
    opts = tuple(ReplicaOption(m, POOL.id, 1, 1, 10.0, 40e9) for m in ("A", "B"))
    p = Problem(3600.0, 1, (POOL,), models, opts, margin=0.0)
    plan = solve(p, "highs", time_limit_s=20, best_effort=True)
    assert validate(p, plan).ok and not plan.best_effort and plan.objective_usd == pytest.approx(6.0)


# --- the CLI -------------------------------------------------------------------------------------------------

SHORT = str(Path(__file__).parent / "data" / "scenarios" / "short_of_gpus.yaml")


def _cli(*args: str):
    res = CliRunner().invoke(main, list(args), catch_exceptions=True)
    assert "Traceback" not in res.output, res.output
    return res


def test_cli_json_error_object_when_short():
    res = _cli("plan", SHORT, "--no-baselines", "--time-limit", "10", "--format", "json")
    assert res.exit_code == 2
    err = json.loads(res.stdout)  # stdout is the JSON object alone; the one-line error goes to stderr
    err = err["error"]  # one shape for every command's JSON error (fleetplan.cli.output.error_object)
    assert err["type"] == "NoPlanError" and err["message"].startswith("no plan (infeasible)")
    assert err["explanation"] and any("short by" in x for x in err["explanation"]), err
    assert res.stderr.startswith("Error: no plan (infeasible)")


def test_cli_best_effort_table_and_json(tmp_path):
    res = _cli("plan", SHORT, "--no-baselines", "--time-limit", "10", "--best-effort", "--format", "json",
               "--out", str(tmp_path / "p.json"))
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["best_effort"] and "BEST EFFORT" in d["message"] and d["validation"]["ok"]
    problem, sc = problem_from_plan_dict(d)
    plan = plan_from_dict(d, problem)
    assert validate(problem, plan).ok  # the file round-trips with its unserved demand
    u = d["unserved_req_per_s"]
    # Two H100s all day go to the priority-1 model (each serves less than its demand in every window), so all of
    # Qwen2.5-7B's demand is unserved and Llama-3.1-8B's is demand - 2 × 0.9 × the option's capacity.
    assert [r["model"] for r in d["replicas"]] == ["Llama-3.1-8B"] and d["replicas"][0]["counts"] == [2] * 24
    qwen = problem.model_by_name["Qwen2.5-7B"].demand_req_per_s
    assert u["Qwen2.5-7B"] == pytest.approx(list(qwen))
    cap = 2 * (1 - problem.margin) * d["replicas"][0]["capacity_req_per_s"]
    llama = problem.model_by_name["Llama-3.1-8B"].demand_req_per_s
    assert u["Llama-3.1-8B"] == pytest.approx([max(0.0, x - cap) for x in llama], abs=1e-6)
    for win in d["windows"]:
        for m, served in win["served_req_per_s"].items():
            assert served + u[m][win["index"]] == pytest.approx(win["demand_req_per_s"][m])
    table = _cli("plan", SHORT, "--no-baselines", "--time-limit", "10", "--best-effort")
    assert table.exit_code == 0, table.output
    assert "Unserved demand (best effort" in table.stdout and "BEST EFFORT" in table.stdout
    assert "Qwen2.5-7B" in table.stdout.split("Unserved demand")[1]


def test_service_serves_by_priority_and_reports_unserved(tmp_path):
    # The service on the short scenario: its first round (at the day curve's forecast for the window) gives both
    # H100s to Llama-3.1-8B (priority 1; each of its windows needs more than one H100), none to Qwen2.5-7B, whose
    # whole forecast GET /v1/plan reports unmet.
    problem, loads = load_problem(SHORT)
    s = ServiceSettings(db_url=f"sqlite:///{tmp_path / 's.db'}", token="t0ken-123", interval_s=0, resolve_every_s=0)
    svc = ReplanService(s, problem, loads, clock=lambda: 1_700_000_000.0)
    with TestClient(create_app(s, svc, background=False)) as c:
        plan = c.get("/v1/plan").json()
    assert plan["validation"]["ok"]
    assert [(r["model"], r["counts"]) for r in plan["replicas"]] == [("Llama-3.1-8B", [2])]
    online = plan["online"]
    assert online["unmet_req_per_s"]["Qwen2.5-7B"] == pytest.approx(online["forecast_req_per_s"]["Qwen2.5-7B"])
    assert online["forecast_req_per_s"]["Qwen2.5-7B"] > 0
