"""Capacity errors told and planned for (issue 26, item 5): the basis of each error from the held-out table, the
margins of a plan against them, the cost they put at risk, --robust and --suggest-benchmark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from scenario_support import two_gpu_8b

from fleetplan.cli.main import main as cli
from fleetplan.costmodels.uncertainty import CapacityError, HeldOutError, group_errors, measured_error, roofline_error
from fleetplan.datasets.held_out import load_held_out_table
from fleetplan.errors import InputError
from fleetplan.outputs.planio import load_plan_file
from fleetplan.outputs.uncertainty import cost_at_risk, window_margins
from fleetplan.placement.plan import Plan
from fleetplan.placement.problem import ModelSpec, Pool, Problem, ReplicaOption
from fleetplan.placement.validate import validate
from fleetplan.scenario.uncertainty import robust_derating

ROWS = [HeldOutError("M", "H100-X", "vLLM 0.11", "tpot_mixed", 10, 0.05),
        HeldOutError("M", "H100-X", "vLLM 0.11", "prefill", 2, 0.12),
        HeldOutError("N", "H100-X", "vLLM 0.11", "tpot_mixed", 4, 0.20),
        HeldOutError("O", "H100-Y", "vLLM 0.11", "decode", 4, 0.09),
        HeldOutError("M", "A100-X", "vLLM 0.5", "e2e", 3, 0.21),
        HeldOutError("N", "A100-X", "TRT", "decode", 3, 0.07),
        HeldOutError("N", "A100-X", "TRT", "other", 3, 0.90)]  # not a capacity kind: ignored
FAMILY = {"H100-X": "H100", "H100-Y": "H100", "A100-X": "A100", "L4": "L4"}


def test_group_error_is_the_worst_goal():
    g = group_errors(ROWS)
    # M on H100-X: decode goal 5%, prefill 12% -> 12%; N on A100-X (TRT): decode 7% (the 90% kind is ignored)
    assert g[("M", "H100-X", "vLLM 0.11")] == pytest.approx(0.12)
    assert g[("N", "A100-X", "TRT")] == pytest.approx(0.07)


def test_basis_follows_what_was_measured():
    e = roofline_error("M", "H100-X", engine="vLLM 0.11", family_of=FAMILY, rows=ROWS)
    assert (e.basis, e.relative) == ("fitted in-sample", pytest.approx(0.12))
    # an unmeasured model on H100: median of the H100 vLLM 0.11 groups 12%, 20%, 9% -> 12%
    e = roofline_error("Z", "H100-Y", engine="vLLM 0.11", family_of=FAMILY, rows=ROWS)
    assert (e.basis, e.relative) == ("held-out family", pytest.approx(0.12))
    # A100 has no vLLM 0.11 group: the largest A100 group error on other engines, 21%
    e = roofline_error("M", "A100-X", engine="vLLM 0.11", family_of=FAMILY, rows=ROWS)
    assert (e.basis, e.relative) == ("extrapolated", pytest.approx(0.21)) and "TRT, vLLM 0.5 only" in e.detail
    # L4 is in no group: the largest of all groups, 21%
    e = roofline_error("M", "L4", engine="vLLM 0.11", family_of=FAMILY, rows=ROWS)
    assert (e.basis, e.relative) == ("extrapolated", pytest.approx(0.21)) and "GPU L4" in e.detail


def test_shipped_table_gives_the_h100_family_median():
    # datasets/data/calibration/held_out_errors.csv, vLLM 0.11 groups on H100 (tpot_mixed only): 405B 7.00%,
    # 70B 5.38%, 8B 20.24% -> median 7.00% for a model not measured there
    e = roofline_error("Qwen2.5-7B", "H100-SXM-80GB", engine="vLLM 0.11",
                       family_of={r.gpu: r.gpu.split("-")[0] for r in load_held_out_table()},
                       rows=load_held_out_table())
    assert (e.basis, e.relative) == ("held-out family", pytest.approx(0.07))


def test_measured_error_is_the_farther_load_level():
    # capacity 5 between measured levels 4 and 8: max(5 - 4, 8 - 5) / 5 = 0.6; at a level: 0
    assert measured_error(5.0, [2.0, 4.0, 8.0]).relative == pytest.approx(0.6)
    assert measured_error(4.0, [2.0, 4.0, 8.0]).relative == 0.0


def _one_option(demand: float) -> tuple[Problem, Plan, dict]:
    pool = Pool("t:a", "G", nodes=1, gpus_per_node=8, usd_per_gpu_hour=2.0, memory_bytes_per_gpu=80e9)
    problem = Problem(3600.0, 1, (pool,), (ModelSpec("m", (demand,), 1.0, 0.05),),
                      (ReplicaOption("m", pool.id, 1, 1, 10.0, 40e9),), margin=0.1)
    plan = Plan(replicas={("m", pool.id, 1, 1): (1,)})
    assert validate(problem, plan).ok
    return problem, plan, {("m", pool.id, 1, 1): CapacityError(0.2, "extrapolated", "x")}


def test_margin_against_error_by_hand():
    # one replica of 10 req/s, error 20%: demand 7 -> margin 30% > 20%, load at 8 req/s pessimistic 0.875 holds;
    # demand 8.5 -> margin 15% < 20%: 8.5 / 8 > 1 misses at the pessimistic end
    problem, plan, errors = _one_option(7.0)
    [m] = window_margins(problem, plan, errors)
    assert m["margin"] == pytest.approx(0.3) and m["capacity_error"] == pytest.approx(0.2)
    assert m["holds_at_pessimistic_end"]
    problem, plan, errors = _one_option(8.5)
    [m] = window_margins(problem, plan, errors)
    assert m["margin"] == pytest.approx(0.15) and not m["holds_at_pessimistic_end"]
    # read as a --robust problem derated by 0.8, the 10 req/s stand for a nominal 10 / 0.8 = 12.5:
    # margin 1 - 8.5 / 12.5 = 0.32, pessimistic capacity 12.5 x 0.8 = 10 >= 8.5 holds
    [m] = window_margins(problem, plan, errors, {("m", "t:a/G", 1, 1): 0.8})
    assert m["margin"] == pytest.approx(0.32) and m["holds_at_pessimistic_end"]


def test_cost_at_risk_by_hand():
    # 1 GPU at $2/h for a 1-hour horizon = $48/day; at 20% less capacity 1/0.8 - 1 = 25% more: $12/day
    problem, plan, errors = _one_option(7.0)
    [r] = cost_at_risk(problem, plan, errors)
    assert r["usd_per_day"] == pytest.approx(12.0)
    assert robust_derating(errors) == {("m", "t:a/G", 1, 1): pytest.approx(0.8)}


SCENARIO = two_gpu_8b("robust")


def test_robust_plan_costs_more_and_its_file_reads_back(tmp_path: Path):
    (tmp_path / "s.yaml").write_text(SCENARIO)
    out = tmp_path / "p.json"
    res = CliRunner().invoke(cli, ["plan", str(tmp_path / "s.yaml"), "--no-baselines", "--robust",
                                   "--suggest-benchmark", "--out", str(out)])
    assert res.exit_code == 0, res.output
    d = json.loads(out.read_text())
    assert d["cost_usd_per_day"] >= d["robust"]["plain_cost_usd_per_day"] - 1e-9
    assert all(r["capacity_error"]["relative"] > 0 and r["capacity_error"]["basis"] for r in d["replicas"])
    assert all(m["holds_at_pessimistic_end"] for m in d["capacity_margins"])
    assert "robust plan" in res.output and "against the plain plan's" in res.output
    sb = d["suggested_benchmark"]
    assert sb["model"] == "Llama-3.1-8B" and sb["bench_commands"][0].startswith("vllm bench serve --model ")
    problem, plan, _sc, _d = load_plan_file(out)  # rebuilt with the robust derating, re-checked
    assert validate(problem, plan).ok


def test_bad_held_out_table_names_row_and_column(tmp_path: Path):
    f = tmp_path / "h.csv"
    f.write_text("group,model,gpu,framework,kind,n,mdape_pct,source\nM @ G,M,G,vLLM 0.11,decode,3,x,s\n")
    with pytest.raises(InputError, match="mdape_pct") as exc:
        load_held_out_table(str(f))
    assert exc.value.row == 1  # the first data row
