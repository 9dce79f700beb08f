"""`fleetplan allocate` through click's CliRunner: JSON shape, checker-consistent numbers, plot, bad input."""

from __future__ import annotations

import json

from click.testing import CliRunner

from fleetplan.cli.main import main
from fleetplan.placement.tenants import load_scenario

SMALL = """
name: small
pool:
  - {name: h, gpu: H100-SXM-80GB, gpus_per_node: 8, count: 2}
tenants:
  - {name: a, quota_gpus: 4, burst_gpus: 10, demand_gpus: [10, 4], interference_class: interactive}
  - {name: b, quota_gpus: 2, burst_gpus: 6, demand_gpus: [6, 4], interference_class: interactive}
"""


def test_json_default_scenario():
    r = CliRunner().invoke(main, ["allocate", "--backend", "cpsat", "--format", "json", "--time-limit", "20"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    problem, _ = load_scenario()
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


def test_small_scenario_table_and_plot(tmp_path):
    sc = tmp_path / "s.yaml"
    sc.write_text(SMALL)
    png = tmp_path / "front.png"
    r = CliRunner().invoke(main, ["allocate", str(sc), "--mode", "pareto", "--points", "3", "--backend", "cpsat",
                                  "--plot", str(png), "--time-limit", "10"])
    assert r.exit_code == 0, r.output
    assert "Pareto front" in r.stdout and png.read_bytes()[:4] == b"\x89PNG"


def test_small_scenario_json_lexicographic_highs(tmp_path):
    sc = tmp_path / "s.yaml"
    sc.write_text(SMALL + "order: [utilization, isolation, sla]\ntolerance: 0\n")
    r = CliRunner().invoke(main, ["allocate", str(sc), "--mode", "lexicographic", "--format", "json",
                                  "--time-limit", "10"])
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
