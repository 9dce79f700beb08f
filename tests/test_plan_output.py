"""`fleetplan plan -o table|wide|json|yaml|csv` (issue 28, item 2): one option for what is printed, the older
`--format` and `--wide` kept as aliases, contradictions refused; the short table leaves the sources to `-o wide`."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner
from scenario_support import SMALL

from fleetplan.cli.main import main
from fleetplan.cli.options import resolve_output
from fleetplan.errors import InputError


@pytest.mark.parametrize(("output", "fmt", "wide", "shown"), [
    (None, None, False, "table"), ("yaml", None, False, "yaml"), (None, "json", False, "json"),
    (None, None, True, "wide"), (None, "table", True, "wide"), ("wide", None, True, "wide"),
    ("json", "json", False, "json"),
])
def test_one_output_from_the_three_options(output, fmt, wide, shown):
    assert resolve_output(output, fmt, wide) == shown


@pytest.mark.parametrize(("output", "fmt", "wide"), [("json", "csv", False), ("json", None, True),
                                                     (None, "json", True), ("table", None, True)])
def test_contradicting_outputs_are_refused(output, fmt, wide):
    with pytest.raises(InputError, match="ask for different outputs"):
        resolve_output(output, fmt, wide)


def test_short_wide_yaml_and_json_of_one_plan(tmp_path):
    f = tmp_path / "small.yaml"
    f.write_text(SMALL)
    run = CliRunner(env={"COLUMNS": "120"}).invoke
    short = run(main, ["plan", str(f), "--no-baselines"])
    assert short.exit_code == 0, short.output
    # the short table: no capacity sources, price lines without their source, one line on margins and arrivals
    assert "capacity from" not in short.output and "calibrated" not in short.output
    assert "price: aws:us-east-1/H100-SXM-80GB 6.88 USD/GPU-h (on-demand, as of 2026-11-09)" in short.output
    assert "capacity margins:" in short.output and "arrivals: capacities assume Poisson" in short.output
    wide = run(main, ["plan", str(f), "--no-baselines", "-o", "wide"])
    assert wide.exit_code == 0, wide.output
    assert "capacity from" in wide.output and "Options not used" in wide.output
    assert "Llama-3.1-8B: capacity assumes Poisson" in " ".join(wide.output.split())
    as_yaml = yaml.safe_load(run(main, ["plan", str(f), "--no-baselines", "-o", "yaml"]).output)
    as_json = json.loads(run(main, ["plan", str(f), "--no-baselines", "--format", "json"]).output)
    for d in (as_yaml, as_json):
        d.pop("solve_time_s")
    assert as_yaml == as_json and as_json["pools"][0]["price_as_of"] == "2026-11-09"


def test_margins_of_a_scenario_without_demand_say_there_are_none(tmp_path):
    # The rates-all-zero scenario printed "every model-window of the 0 models holds ..." of its 1 model.
    sc = tmp_path / "zero.yaml"
    sc.write_text(SMALL.replace("rates: [1.0, 4.0, 12.0]", "rates: [0, 0, 0]").replace("min_replicas: 1",
                                                                                       "min_replicas: 0"))
    short = CliRunner().invoke(main, ["plan", str(sc), "--no-baselines"])
    assert short.exit_code == 0, short.output
    assert "capacity margins: none to check: no window of the 1 model has demand" in short.output
    assert "0 models" not in short.output
    wide = CliRunner().invoke(main, ["plan", str(sc), "--no-baselines", "-o", "wide"])
    assert "capacity margin against its stated error" in wide.output
    assert "  none to check: no window of any model has demand" in wide.output
