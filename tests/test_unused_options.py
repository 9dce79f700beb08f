"""No silent drop (issue 26, item 7): every option a plan does not use is listed with its category and fix, and
a measured profile that removes an option is a warning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from scenario_support import two_gpu_8b

from fleetplan.cli.main import main as cli
from fleetplan.outputs.unused import categorize, options_not_used, summary_line
from fleetplan.placement.problem import ModelSpec, Pool, Problem, ReplicaOption
from fleetplan.placement.validate import validate
from fleetplan.solvers.solve import solve


@pytest.mark.parametrize(("reason", "category"), [
    ("/x/mean.json: the table's SLO {'percentile': 50, 'e2e': 5.0} does not imply TTFT p95 <= 1.5 s; its rates "
     "hold for another SLO", "dropped_profile"),
    ("x.json: a rate-only profile measures a dedicated replica; sharing a GPU with another model was not measured",
     "dropped_profile"),
    ("TTFT p95 1.690 s with no queueing exceeds the target 1.500 s", "slo_infeasible"),
    ("weights 810 GB exceed 0.9 × 80 GB × tp 8", "memory"),
    ("tp 2 does not fit its 1-GPU nodes (a tp group runs inside one node)", "node_size"),
])
def test_categories_of_the_builders_reasons(reason, category):
    assert categorize(reason) == category


def test_not_chosen_options_carry_their_cost_per_capacity():
    # Option A: 1 GPU at $2/h, 10 req/s -> 0.2 $/h per req/s; option B: 2 GPUs at $2/h, 10 req/s -> 0.4. Demand
    # 5 req/s fits one A replica (9 usable), so B is not chosen; the memory drop is listed first.
    pool = Pool("t:a", "G", nodes=1, gpus_per_node=8, usd_per_gpu_hour=2.0, memory_bytes_per_gpu=80e9)
    m = ModelSpec("m", (5.0,), 1.0, 0.05)
    opts = (ReplicaOption("m", pool.id, 1, 1, 10.0, 40e9), ReplicaOption("m", pool.id, 2, 1, 10.0, 40e9))
    problem = Problem(3600.0, 1, (pool,), (m,), opts, margin=0.1,
                      option_notes={"m": ("t:a/G tp 4: weights 810 GB exceed 0.9 × 80 GB × tp 4",)})
    plan = solve(problem, "highs", time_limit_s=10)
    assert validate(problem, plan).ok
    assert plan.replicas[("m", pool.id, 1, 1)] == (1,)
    entries = options_not_used(problem, plan)
    assert [(e["option"], e["category"]) for e in entries] == [("t:a/G tp 4", "memory"), ("t:a/G tp 2", "not_chosen")]
    assert "0.4 USD/h per req/s" in entries[1]["reason"] and "uses for m: 0.2" in entries[1]["reason"]
    assert summary_line(entries).startswith("options not used: 1 memory, 1 not_chosen")


SCENARIO = two_gpu_8b("dropped", rates="[2, 4, 6, 3]")


@pytest.mark.parametrize("slos", [{"percentile": 50, "ttft": 0.5, "tpot": 0.05},  # AIBrix's default: the mean
                                  {"percentile": 99, "e2e": 5.0}])               # an e2e SLO only
def test_a_profile_that_drops_an_option_is_warned_and_listed(tmp_path: Path, slos):
    doc = {"gpu": "a100", "indexes": [[128, 256], [512, 1024]], "tputs": [[9.0, 6.0], [7.0, 4.0]], "slos": slos}
    (tmp_path / "t.json").write_text(json.dumps(doc))
    (tmp_path / "s.yaml").write_text(SCENARIO)
    res = CliRunner().invoke(cli, ["plan", str(tmp_path / "s.yaml"), "--no-baselines", "--format", "json",
                                   "--profile", f"Llama-3.1-8B@A100-80GB:tp1:aibrix={tmp_path}/t.json"])
    assert res.exit_code == 0, res.output
    assert "warning: Llama-3.1-8B aws:us-east-1/A100-SXM4-80GB tp 1 is not planned" in res.stderr
    d = json.loads(res.stdout)
    dropped = [e for e in d["options_not_used"] if e["category"] == "dropped_profile"]
    assert [e["option"] for e in dropped][:1] == ["aws:us-east-1/A100-SXM4-80GB tp 1"]
    assert "does not imply TTFT" in dropped[0]["reason"] and "percentile" in dropped[0]["fix"]
    assert all(r["gpu"] != "A100-SXM4-80GB" or r["tp"] != 1 for r in d["replicas"])
    res = CliRunner().invoke(cli, ["plan", str(tmp_path / "s.yaml"), "--no-baselines", "--wide",
                                   "--profile", f"Llama-3.1-8B@A100-80GB:tp1:aibrix={tmp_path}/t.json"])
    assert res.exit_code == 0, res.output
    assert "Options not used" in res.stdout and "dropped_profile" in res.stdout
    assert "options not used: " in " ".join(res.stdout.split())
