"""`fleetplan allocate` through click's CliRunner: JSON shape, checker-consistent numbers, plot, bad input."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fleetplan.cli.main import main
from fleetplan.costmodels.capacity import replica_capacity
from fleetplan.costmodels.slo import SLO
from fleetplan.datasets.calibration import load_calibration
from fleetplan.datasets.catalog.names import get_gpu, get_model
from fleetplan.datasets.traces import load_trace, token_mix_from_trace
from fleetplan.errors import SolverError
from fleetplan.scenario.tenants import load_tenants, tenant_engine

SMALL = """
name: small
pool:
  - {name: h, gpu: H100-SXM-80GB, gpus_per_node: 8, count: 2}
tenants:
  - {name: a, quota_gpus: 4, burst_gpus: 10, demand_gpus: [10, 4], interference_class: interactive}
  - {name: b, quota_gpus: 2, burst_gpus: 6, demand_gpus: [6, 4], interference_class: interactive}
"""


def test_json_default_scenario():
    # --effort 0.02 (a fiftieth of every solve's budget): what is checked is the shape of the default scenario's
    # answer (node capacities, totals, splits naming their tenants), which holds for any allocation the solver
    # returns, not how good it is (test_tenants checks the optimizer against the baselines).
    r = CliRunner().invoke(main, ["allocate", "--backend", "cpsat", "--format", "json", "--effort", "0.02"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    problem, _ = load_tenants()
    assert set(d["policies"]) == {"optimizer", "static", "fair-share"}
    # Per tenant and window, GPUs per node; no node holds more than its 8 GPUs in any window.
    per_node: dict = {}
    for windows in d["allocation"].values():
        for w, nodes in windows.items():
            for n, g in nodes.items():
                per_node[(w, n)] = per_node.get((w, n), 0) + g
    assert max(per_node.values()) <= 8
    total = sum(per_node.values())
    assert total == d["policies"]["optimizer"]["allocated_gpu_windows"]
    assert d["windows"] == problem.n_windows == 24
    # Every node-window held by two or more tenants has a split naming exactly those tenants (auto: MIG on both
    # types, which have MIG profiles), and none other is split.
    held: dict = {}
    for t, windows in d["allocation"].items():
        for w, nodes in windows.items():
            for n in nodes:
                held.setdefault((w, n), set()).add(t)
    shared = {k for k, ts in held.items() if len(ts) >= 2}
    splits = {(w, n): s for w, nodes in d["split"]["nodes"].items() for n, s in nodes.items()}
    assert set(splits) == shared and shared
    assert all(set(s["needs"]) == held[k] and s["kind"] == "mig" for k, s in splits.items())
    assert d["tenants"]["copilot"]["derived_from"][0]["model"] == "Qwen2.5-7B"


def test_small_scenario_table_and_plot(tmp_path):
    sc = tmp_path / "s.yaml"
    sc.write_text(SMALL)
    png = tmp_path / "front.png"
    r = CliRunner().invoke(main, ["allocate", str(sc), "--mode", "pareto", "--points", "3", "--backend", "cpsat",
                                  "--plot", str(png)])
    assert r.exit_code == 0, r.output
    assert "Pareto front" in r.stdout and png.read_bytes()[:4] == b"\x89PNG"


def test_small_scenario_json_lexicographic_highs(tmp_path):
    sc = tmp_path / "s.yaml"
    sc.write_text(SMALL + "order: [utilization, isolation, sla]\ntolerance: 0\n")
    r = CliRunner().invoke(main, ["allocate", str(sc), "--mode", "lexicographic", "--backend", "highs",
                                  "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    # Window 0: 16 GPUs wanted on 16; sharing one node (capacity floor(8 × 0.925) = 7) serves 15.
    # Window 1: a 4 and b 4 fit on separate nodes: 8 served. Utilization (15 + 8) / 32.
    assert d["policies"]["optimizer"]["utilization"] == round(23 / 32, 6)
    assert [s["objective"] for s in d["lexicographic_stages"]] == ["utilization", "isolation", "sla"]


def test_bad_inputs_exit_2_without_traceback(tmp_path):
    runner = CliRunner()
    r = runner.invoke(main, ["allocate", str(tmp_path / "missing.yaml")])
    assert r.exit_code == 2 and "does not exist" in r.output and "Traceback" not in r.output
    bad = tmp_path / "bad.yaml"
    bad.write_text(SMALL.replace("quota_gpus: 4, burst_gpus: 10", "quota_gpus: 4, burst_gpus: 1"))
    r = runner.invoke(main, ["allocate", str(bad)])
    assert r.exit_code == 2 and "burst_gpus" in r.output and "Traceback" not in r.output
    assert r.output.count("tenant a:") == 1, r.output  # was "tenant a: tenant a: burst_gpus 1 ..." (issue 28)
    gpu = tmp_path / "gpu.yaml"
    gpu.write_text(SMALL.replace("H100-SXM-80GB", "H100-SXM-80G"))
    r = runner.invoke(main, ["allocate", str(gpu)])
    assert r.exit_code == 2 and "did you mean" in r.output
    over = tmp_path / "over.yaml"
    over.write_text(SMALL.replace("quota_gpus: 2, burst_gpus: 6, demand_gpus: [6, 4]",
                                  "quota_gpus: 14, burst_gpus: 14, demand_gpus: [14, 4]"))
    r = runner.invoke(main, ["allocate", str(over)])
    # Window 0 needs 4 + 14 = 18 guaranteed GPUs on 16.
    assert r.exit_code == 2 and "short by 2" in r.output
    r = runner.invoke(main, ["allocate", "--points", "1"])
    assert r.exit_code == 2


# ------------------------------------------------------------------------------------- in-node split (--split)

SPLIT = """
name: split
pool:
  - {name: h, gpu: H100-SXM-80GB, gpus_per_node: 8}
tenants:
  - {name: a, quota_gpus: 3, burst_gpus: 8, demand_gpus: [2.5], interference_class: interactive}
  - {name: b, quota_gpus: 3, burst_gpus: 8, demand_gpus: [3.5], interference_class: interactive}
"""


def _run_json(tmp_path, text, *args):
    sc = tmp_path / "split.yaml"
    sc.write_text(text)
    r = CliRunner().invoke(main, ["allocate", str(sc), "--backend", "cpsat", "--format", "json",
                                  *args])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_split_mig_per_node_and_window(tmp_path):
    # One 8-GPU H100 node must hold both tenants: shared capacity 8 × (1 − 0.075) = 7.4, so a gets ceil(2.5) = 3
    # and b ceil(3.5) = 4 GPUs (7 ≤ 7.4). Needs inside the node: a 3 × 2.5/3 = 2.5 GPUs -> ceil(7 × 2.5) = 18
    # slices; b 4 × 3.5/4 = 3.5 GPUs -> ceil(24.5) = 25 slices. a's 4 leftover slices and b's 4 cannot share a
    # GPU (8 > 7), so the fewest instances with nothing unmet and no GPU shared is a: 7 + 7 + ≥4, b: 7 + 7 + 7 + ≥4,
    # 7 instances on 7 GPUs.
    d = _run_json(tmp_path, SPLIT)  # --split auto: H100 has MIG profiles -> MIG
    assert d["allocation"] == {"a": {"0": {"h": 3}}, "b": {"0": {"h": 4}}}
    assert d["split"]["mode"] == "auto" and d["split"]["kinds"] == {"H100-SXM-80GB": "mig"}
    s = d["split"]["nodes"]["0"]["h"]
    assert s["kind"] == "mig" and s["needs"] == {"a": 18, "b": 25}
    assert s["unmet"] == {"a": 0, "b": 0} and s["shared_gpus"] == 0 and s["used_gpus"] == 7
    assert len(s["instances"]) == 7
    slices: dict = {}
    per_gpu: dict = {}
    for inst in s["instances"]:
        c = int(inst["profile"].split("g.")[0])  # '4g.40gb' -> 4 compute slices
        slices[inst["tenant"]] = slices.get(inst["tenant"], 0) + c
        per_gpu.setdefault(inst["gpu_index"], set()).add(inst["tenant"])
    assert slices["a"] >= 18 and slices["b"] >= 25 and slices == s["granted"]
    assert all(len(ts) == 1 for ts in per_gpu.values()) and sorted(per_gpu) == list(range(7))


def test_split_mps_and_none(tmp_path):
    d = _run_json(tmp_path, SPLIT, "--split", "mps")
    s = d["split"]["nodes"]["0"]["h"]
    # Needs 2.5 and 3.5 GPUs -> 250% and 350%; each GPU gives at most 100% and none is shared.
    assert s["kind"] == "mps" and s["needs"] == {"a": 250, "b": 350} and s["unmet"] == {"a": 0, "b": 0}
    got: dict = {}
    for sh in s["shares"]:
        assert 0 < sh["active_thread_pct"] <= 100
        got[sh["tenant"]] = got.get(sh["tenant"], 0) + sh["active_thread_pct"]
    assert got["a"] >= 250 and got["b"] >= 350 and s["shared_gpus"] == 0
    d = _run_json(tmp_path, SPLIT, "--split", "none")
    assert d["split"] == {"mode": "none", "kinds": {}, "nodes": {}}


def test_split_auto_is_mps_without_mig_and_mig_is_refused(tmp_path):
    l4 = SPLIT.replace("H100-SXM-80GB", "L4")
    d = _run_json(tmp_path, l4)
    assert d["split"]["kinds"] == {"L4": "mps"} and d["split"]["nodes"]["0"]["h"]["kind"] == "mps"
    sc = tmp_path / "l4.yaml"
    sc.write_text(l4)
    r = CliRunner().invoke(main, ["allocate", str(sc), "--split", "mig"])
    assert r.exit_code == 2 and "L4 has no MIG profiles" in r.output and "Traceback" not in r.output


def test_split_table_summary(tmp_path):
    sc = tmp_path / "split.yaml"
    sc.write_text(SPLIT)
    r = CliRunner().invoke(main, ["allocate", str(sc), "--backend", "cpsat"])
    assert r.exit_code == 0, r.output
    # One shared node-window, 7 MIG instances on 7 GPUs, none shared, none kept whole (no tenant at tp >= 2),
    # nothing unmet.
    row = next(line for line in r.stdout.splitlines() if "MIG" in line and "H100" in line)
    assert [c.strip() for c in row.strip("│ ").split("│")][2:] == ["1", "7", "7", "0", "0", "0 slices"]
    r = CliRunner().invoke(main, ["allocate", str(sc), "--backend", "cpsat", "--split", "none"])
    assert r.exit_code == 0 and "In-node split" not in r.stdout


def test_derived_demand_through_cli(tmp_path):
    # One A100 node; Llama-3.1-8B at 0 and 3 req/s: about 3 / 3.544 = 0.85 GPUs -> 1 GPU in window 1.
    sc = tmp_path / "m.yaml"
    sc.write_text("""
pool:
  - {name: a, gpu: A100-SXM4-80GB, gpus_per_node: 8}
tenants:
  - name: m
    quota_gpus: 1
    interference_class: interactive
    slo: {ttft_p95_s: 2.0, tpot_p95_s: 0.1}
    token_mix: {trace: azure-conv}
    models:
      - {name: Llama-3.1-8B, rates_req_per_s: [0, 3]}
  - {name: g, quota_gpus: 2, demand_gpus: [2, 2], interference_class: batch}
""")
    r = CliRunner().invoke(main, ["allocate", str(sc), "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)

    # the tenant's replica runs vLLM's defaults for the GPU (tenant_engine: its token budget, not the planner's
    # search over budgets)
    a100 = get_gpu("A100-SXM4-80GB")
    cap = replica_capacity(get_model("Llama-3.1-8B"), a100, token_mix_from_trace(load_trace("azure-conv")),
                           SLO(2.0, 0.1), tp=1, calib=load_calibration("A100-SXM4-80GB"),
                           engine=tenant_engine(a100)).req_per_s
    m = d["tenants"]["m"]
    assert m["demand_gpus"] == [0, 1] and m["derived_from"][0]["gpus"][1] == pytest.approx(3 / cap, abs=1e-6)
    assert d["allocation"]["m"] == {"1": {"a": 1}}
    bad = tmp_path / "bad.yaml"
    bad.write_text(sc.read_text().replace("ttft_p95_s: 2.0", "ttft_p95_s: 2000"))
    r = CliRunner().invoke(main, ["allocate", str(bad)])
    assert r.exit_code == 2 and "tenant m" in r.output and "500 ms" in r.output and "Traceback" not in r.output


def test_key_typos_and_gpu_aliases(tmp_path):
    from click.testing import CliRunner

    p = tmp_path / "t.yaml"
    p.write_text("pool:\n  - {name: n, gpu: H100, gpus_per_node: 8, count: 2}\n"
                 "tenants:\n  - {name: a, quota_gpus: 4, interference_class: interactive, gpu_type: [H100],"
                 " demand_gpus: [1, 2]}\n")
    res = CliRunner().invoke(main, ["allocate", str(p)])
    assert res.exit_code == 2 and "did you mean 'gpu_types'" in res.output and "Traceback" not in res.output
    # The alias 'H100' names the catalog's H100-SXM-80GB, in the pool and in gpu_types.
    p.write_text(p.read_text().replace("gpu_type:", "gpu_types:"))
    res = CliRunner().invoke(main, ["allocate", str(p), "--backend", "cpsat", "--format", "json"])
    assert res.exit_code == 0, res.output
    assert "H100-SXM-80GB" in res.output


SMALL_TENANTS = """\
name: small
pool:
  - {{name: h100, gpu: H100-SXM-80GB, gpus_per_node: 8, count: 1}}
tenants:
  - {{name: chat, quota_gpus: {q1}, burst_gpus: {b1}, demand_gpus: [6, 2], interference_class: interactive}}
  - {{name: batch, quota_gpus: 4, demand_gpus: [1, 5], interference_class: batch}}
"""


def test_tenant_error_names_the_tenant_and_field(tmp_path):
    # burst below the quota: the message named "row 1"; now the tenant and the field path, value and fix.
    f = tmp_path / "t.yaml"
    f.write_text(SMALL_TENANTS.format(q1=6, b1=2))
    r = CliRunner().invoke(main, ["allocate", str(f)])
    assert r.exit_code == 2, r.output
    assert f"{f}, field 'tenants[0].burst_gpus': tenant chat:" in r.output and "row 1" not in r.output, r.output
    assert "Traceback" not in r.output


def test_quotas_beyond_the_pool_warn(tmp_path):
    # Quotas 6 + 4 = 10 GPUs on one 8-GPU node: oversubscribed. The guarantees min(quota, demand) are 6+1 = 7 and
    # 2+4 = 6 GPUs per window, so the allocation runs, with a warning naming both totals.
    f = tmp_path / "t.yaml"
    f.write_text(SMALL_TENANTS.format(q1=6, b1=8))
    quiet = ["--format", "json", "--split", "none", "--no-margin"]
    r = CliRunner().invoke(main, ["allocate", str(f), *quiet])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    (w,) = out["warnings"]
    assert "quotas add up to 10 GPUs" in w and "pool has 8 GPUs" in w
    assert "largest guaranteed total in a window is 7" in w
    assert "Warning: " in r.stderr
    ok = tmp_path / "ok.yaml"
    ok.write_text(SMALL_TENANTS.format(q1=4, b1=8))
    r = CliRunner().invoke(main, ["allocate", str(ok), *quiet])
    assert r.exit_code == 0 and json.loads(r.stdout)["warnings"] == [], r.output


def test_allocate_table_folds_instead_of_cutting():
    # Rich cuts a cell with "…" when the table is wider than the console (80 columns when not a terminal); every
    # column folds instead, so no value is cut (--effort 0.02: the table is the point, not the optimum).
    r = CliRunner().invoke(main, ["allocate", "--split", "none", "--effort", "0.02"])
    assert r.exit_code == 0, r.output
    assert "…" not in r.output


def test_a_split_that_runs_out_of_time_keeps_the_allocation(tmp_path, monkeypatch):
    # The in-node split gets only the time the allocation leaves; when it finds nothing (here forced, as a MIG
    # split out of time raises), the command still prints the allocation, without the split, and says why.
    import fleetplan.cli.allocate as allocate_cli

    def out_of_time(*_a, **_k):
        raise SolverError("MIG split of 8x A100: no split found within 1.0 s (the time left of --time-limit); "
                          "raise --time-limit")

    monkeypatch.setattr(allocate_cli, "split_allocation", out_of_time)
    sc = tmp_path / "s.yaml"
    sc.write_text(SMALL)
    r = CliRunner().invoke(main, ["allocate", str(sc), "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["allocation"] and not d["split"]["nodes"]
    assert any("without its in-node split" in w and "no split found" in w for w in d["warnings"])


def test_weights_all_zero_and_verify_without_workloads_are_refused_before_the_solve(tmp_path):
    # All-zero weights left only the tie-break terms and were reported "optimal"; --verify on a file whose tenants
    # serve nothing was refused only after the whole allocation had been printed.
    sc = tmp_path / "s.yaml"
    sc.write_text(SMALL)
    r = CliRunner().invoke(main, ["allocate", str(sc), "--verify"])
    assert r.exit_code == 2 and "no tenant says what it serves" in r.output and "Policies" not in r.output, r.output
    sc.write_text(SMALL + "weights: {utilization: 0, isolation: 0, sla: 0}\n")
    r = CliRunner().invoke(main, ["allocate", str(sc)])
    assert r.exit_code == 2 and "every objective weight is 0" in r.output, r.output


A10_PAIR = """
name: a10
pool:
  - {name: n, gpu: A10G, gpus_per_node: 4, count: 1}
tenants:
  - {name: x, quota_gpus: 1, burst_gpus: 4, demand_gpus: [2.5, 1.5], interference_class: interactive}
  - {name: y, quota_gpus: 1, burst_gpus: 4, demand_gpus: [1.5, 2.5], interference_class: batch}
"""


def test_a_baseline_ahead_of_the_optimizer_on_every_objective_is_explained(tmp_path):
    # A new user's 4-GPU node shared by two tenants: the optimizer ("optimal") keeps the interference headroom idle
    # (75.0% served) and fair share hands every GPU out (80.0%, same isolation, smaller SLA shortfall): the table
    # showed a baseline dominating the optimizer without a word. With --no-margin the optimizer is ahead.
    sc = tmp_path / "a10.yaml"
    sc.write_text(A10_PAIR)
    r = CliRunner().invoke(main, ["allocate", str(sc), "--split", "none", "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["policies"]["fair-share"]["utilization"] > d["policies"]["optimizer"]["utilization"]
    assert any("fair-share scores better than the optimizer" in w and "--no-margin" in w for w in d["warnings"])
    r = CliRunner().invoke(main, ["allocate", str(sc), "--split", "none", "--no-margin", "--format", "json"])
    d = json.loads(r.stdout)
    assert r.exit_code == 0 and not any("scores better than the optimizer" in w for w in d["warnings"]), d["warnings"]
