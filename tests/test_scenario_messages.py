"""Scenario errors name the file, the field path, the value and the fix (new-user trial, findings 8 and 15).

Each case edits the README's small example; none solves (the errors come before the solve, or from the
infeasibility prechecks)."""

from __future__ import annotations

import copy

import pytest
import yaml
from click.testing import CliRunner

from fleetplan.cli.main import main

SMALL = {
    "name": "small",
    "options": {"window_length_s": 3600, "margin": 0.1},
    "sites": [{"name": "aws:us-east-1", "inventory": [{"gpu": "H100", "nodes": 1, "gpus_per_node": 8}]}],
    "models": [{"name": "Llama-3.1-8B", "tp": [1, 2], "min_replicas": 1,
                "slo": {"ttft_p95_s": 1.5, "tpot_p95_s": 0.1}, "token_mix": {"trace": "azure-conv"},
                "demand": {"rates": [1.0, 4.0, 12.0]}}],
}


def _model(**kw):
    return lambda d: d["models"][0].update(**kw)


@pytest.mark.parametrize("edit, args, needles", [
    (lambda d: d["models"][0]["demand"].update(rates=[1.0, 1e9]), [],
     ["field 'demand.rates[1]'", "models[0]", "1e+09 req/s is outside 0..1e+07"]),
    (lambda d: d["models"].append(copy.deepcopy(d["models"][0])), [],
     ["models[1], field 'name'", "models[0] and models[1] are both the model 'Llama-3.1-8B'"]),
    (_model(min_replicas=5, max_replicas=2), [],
     ["models[0], field 'max_replicas'", "max_replicas 2 is below min_replicas 5", ">= 5"]),
    (_model(demand={"servegen": {"series": "zzz", "mean_rate_req_per_s": 2}}), [],
     ["models[0], field 'demand.servegen.series'", "known ServeGen series:"]),
    (lambda d: d["sites"][0].update(name="aws"), [], ["sites[0], field 'name'", "site 'aws'"]),
    (lambda d: d["sites"].append(copy.deepcopy(d["sites"][0])), [],
     ["sites[1], field 'name'", "listed twice (sites[0] and sites[1])"]),
    (_model(demand={"day_curve": {"file": "."}}), [],
     ["models[0], field 'demand.day_curve.file'", "is a folder, not a file"]),
    (lambda d: None, ["--profile", "Llama-3.1-8B@H100:tp3=x.json"],
     ["field '--profile'", "tp3 is not a tensor-parallel degree"]),
    (_model(token_mix={"input_tokens_mean": 1000, "input_tokens_p95": 2_000_000, "output_tokens_mean": 200,
                       "output_tokens_p95": 400}), [],
     ["exceeds Llama-3.1-8B's context", "--best-effort cannot serve Llama-3.1-8B"]),
    (lambda d: d.update(name=""), [], ["field 'name'", "must not be empty"]),
])
def test_scenario_errors_name_file_path_and_fix(tmp_path, edit, args, needles):
    d = copy.deepcopy(SMALL)
    edit(d)
    f = tmp_path / "small.yaml"
    f.write_text(yaml.safe_dump(d))
    r = CliRunner().invoke(main, ["plan", str(f), "--no-baselines", *args])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    for n in needles:
        assert n in r.output, (n, r.output)
    if "--profile" not in args and "--best-effort cannot" not in needles[-1]:
        assert str(f) in r.output, r.output
    if "--profile" in args:
        assert str(f) not in r.output, r.output


@pytest.mark.parametrize("best_effort", [False, True])
def test_replica_floors_beyond_the_inventory_say_lower_the_floor_not_best_effort(tmp_path, best_effort):
    # min_replicas 1000 at the fewest GPUs per replica (tp 1): 1000 GPUs against 1 node x 8 GPUs. --best-effort drops
    # demand, never a floor, so it cannot help and must not be suggested.
    d = copy.deepcopy(SMALL)
    d["models"][0]["min_replicas"] = 1000
    f = tmp_path / "small.yaml"
    f.write_text(yaml.safe_dump(d))
    r = CliRunner().invoke(main, ["plan", str(f), "--no-baselines", *(["--best-effort"] * best_effort)])
    assert r.exit_code != 0 and "Traceback" not in r.output, r.output
    assert "replica floors need at least 1000 GPUs but the inventory has 8" in r.output
    assert "rerun with --best-effort" not in r.output
    assert "lower min_replicas or add inventory" in r.output
