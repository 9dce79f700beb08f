"""Unknown names in a scenario: the error names the file, the field path, the value and the closest names."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from fleetplan.cli.main import main

SCENARIO = """\
name: small
sites:
  - name: {site}
    inventory:
      - {{gpu: {gpu}, nodes: 1, gpus_per_node: 8}}
models:
  - name: {model}
    tp: [1, 2]
    slo: {{ttft_p95_s: 1.5, tpot_p95_s: 0.1}}
    token_mix: {{trace: {trace}}}
    demand: {{rates: [1.0, 4.0, 12.0]}}
"""
GOOD = {"site": "aws:us-east-1", "gpu": "H100", "model": "Llama-3.1-8B", "trace": "azure-conv"}


@pytest.mark.parametrize("key, bad, where, suggestion", [
    ("gpu", "H10O", "sites[0].inventory[0], field 'gpu': unknown gpu 'H10O'", "'H100'"),
    ("model", "Lama-3.1-8B", "models[0], field 'name': unknown model 'Lama-3.1-8B'", "'Llama-3.1-8B'"),
    ("trace", "azure-convo", "models[0], field 'token_mix.trace': unknown trace 'azure-convo'", "'azure-conv'"),
    # was: "no on-demand price for H100-SXM-80GB at aws:us-est-1", which hides the typo
    ("site", "aws:us-est-1", "sites[0], field 'name': unknown aws region 'us-est-1'", "'us-east-1'"),
])
def test_unknown_name_names_file_field_and_suggests(tmp_path, key, bad, where, suggestion):
    f = tmp_path / "s.yaml"
    f.write_text(SCENARIO.format(**{**GOOD, key: bad}))
    r = CliRunner().invoke(main, ["plan", str(f)])
    assert r.exit_code == 2, r.output
    line = r.output.strip()
    assert line.startswith(f"Error: {f}: {where}"), line
    assert "did you mean" in line and suggestion in line and "\n" not in line and "Traceback" not in line


def test_unknown_region_with_own_price_is_allowed(tmp_path):
    # A region the catalogs do not price is fine when the inventory row gives its own price (no lookup to miss).
    f = tmp_path / "s.yaml"
    f.write_text(SCENARIO.format(**{**GOOD, "site": "aws:us-est-1"}).replace(
        "gpus_per_node: 8}", "gpus_per_node: 8, usd_per_gpu_hour: 4.0}"))
    r = CliRunner().invoke(main, ["plan", str(f), "--format", "json", "--time-limit", "20"])
    assert "unknown aws region" not in r.output, r.output


def test_plan_table_ratio_is_cost_and_price_printed_once(tmp_path):
    # The README's baseline column is "cost vs the plan": the table's ratio is the baseline's cost / the plan's cost
    # (it was GPU-hours), and each pool's catalog price appears once on its line (it was printed twice).
    import json
    import re

    f = tmp_path / "s.yaml"
    f.write_text(SCENARIO.format(**GOOD))
    r = CliRunner(env={"COLUMNS": "250"}).invoke(main, ["plan", str(f), "--time-limit", "20"])
    assert r.exit_code == 0, r.output
    assert "cost vs this plan" in r.output and "(GPU-h)" not in r.output
    d = json.loads(CliRunner().invoke(main, ["plan", str(f), "--time-limit", "20", "--format", "json"]).output)
    for name, b in d["baselines"].items():
        row = next(line for line in r.output.splitlines() if name in line)
        assert f"{b['cost_usd_per_day'] / d['cost_usd_per_day']:.2f}" in row, row
    price_lines = re.findall(r"price: .*?(?=\nprice: |\ndemand: |\Z)", r.output, flags=re.S)
    assert price_lines
    for line in price_lines:
        assert len(re.findall(r"USD/GPU-h", line)) == 1, line
