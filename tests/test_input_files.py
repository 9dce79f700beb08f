"""Input files: YAML read with duplicate keys refused, checked by the pydantic models of scenario.schemas, errors
as one line naming the file, the field path, the value and the fix; `fleetplan schema` prints their JSON Schemas."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from click.testing import CliRunner
from scenario_support import SMALL

from fleetplan.cli.main import main
from fleetplan.costmodels.latency import TP_DEGREES, prefill_time_s
from fleetplan.datasets.calibration import load_calibration
from fleetplan.datasets.catalog.models import model_from_hf_config
from fleetplan.datasets.catalog.names import get_gpu, get_model
from fleetplan.datasets.traces import read_mooncake_jsonl
from fleetplan.errors import InputError
from fleetplan.fileio import parse_json, parse_yaml, read_yaml, yaml12_numbers
from fleetplan.outputs.planio import problem_from_plan_dict
from fleetplan.scenario.read import load_scenario
from fleetplan.service.app import duplicate_key

TENANTS = """\
pool:
  - {name: n, gpu: H100, gpus_per_node: 8, count: 2}
tenants:
  - name: chat
    quota_gpus: 4
    interference_class: interactive
    demand_gpus: [1, 2]
"""

# A PNG header and a few bytes that are not UTF-8.
BINARY = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe"


def run(*args: str):
    """Invoke the CLI; return (exit code, output). User mistakes must end with exit code 2 and no traceback."""
    res = CliRunner().invoke(main, list(args))
    return res.exit_code, res.output


def assert_one_line_error(code: int, out: str, *needles: str) -> None:
    assert code == 2, out
    assert "Traceback" not in out
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), out
    for n in needles:
        assert n in out, (n, out)


# ------------------------------------------------------------------------------------------- duplicate keys


def test_duplicate_key_in_a_scenario_is_refused_with_key_line_and_file(tmp_path):
    # min_replicas on line 10, then again on line 11: YAML's last-one-wins would plan 4 replicas, not 1.
    p = tmp_path / "dup.yaml"
    p.write_text(SMALL.replace("    min_replicas: 1\n", "    min_replicas: 1\n    min_replicas: 4\n"))
    code, out = run("plan", str(p))
    assert_one_line_error(code, out, str(p), "'min_replicas'", "line 11", "first on line 10", "twice")


def test_duplicate_key_in_tenants_and_split_files(tmp_path):
    t = tmp_path / "t.yaml"
    t.write_text(TENANTS.replace("    quota_gpus: 4\n", "    quota_gpus: 4\n    quota_gpus: 40\n"))
    assert_one_line_error(*run("allocate", str(t)), str(t), "'quota_gpus'", "line 6", "twice")
    s = tmp_path / "split.yaml"
    s.write_text("model: llama-3.1-70b\nmodel: llama-3.1-8b\n")
    assert_one_line_error(*run("whatif", str(s), "--vary", "egress_usd_per_gb=0.01,0.02"), str(s), "'model'",
                          "line 2")


def test_merge_keys_may_still_be_overridden():
    # YAML merge keys (<<) are defaults that the mapping's own keys override: not a duplicate.
    doc = parse_yaml("base: &b {nodes: 1, gpus_per_node: 8}\nrow: {<<: *b, nodes: 2}\n", source="m.yaml")
    assert doc["row"] == {"nodes": 2, "gpus_per_node": 8}


def test_yaml_1_2_floats_are_numbers():
    # YAML 1.1 reads 1e9 and 1.0e9 (no sign in the exponent) as strings; the loader reads them as floats.
    assert parse_yaml("a: 1e9\nb: 1.0e9\nc: 2.5e-3\nd: 12\ne: 1.5\n", source="f.yaml") == {
        "a": 1e9, "b": 1e9, "c": 0.0025, "d": 12, "e": 1.5}


# ------------------------------------------------------------------------------------ binary, non-UTF-8 files


@pytest.mark.parametrize("command", [["plan"], ["allocate"], ["whatif", "--vary", "egress_usd_per_gb=0.01"]])
def test_binary_file_is_a_one_line_error(tmp_path, command):
    p = tmp_path / "picture.yaml"
    p.write_bytes(BINARY)
    code, out = run(command[0], str(p), *command[1:])
    assert_one_line_error(code, out, str(p), "not a UTF-8 text file")


def test_read_yaml_names_the_file_for_latin1_text(tmp_path):
    p = tmp_path / "latin1.yaml"
    p.write_bytes("name: caf\u00e9\n".encode("latin-1"))
    with pytest.raises(InputError, match="not a UTF-8 text file") as exc:
        read_yaml(p)
    assert str(p) in str(exc.value)


# --------------------------------------------------------------------------------- schema errors, one line each


@pytest.mark.parametrize(("old", "new", "needles"), [
    # unknown key: the closest known key is suggested
    ("    min_replicas: 1\n", "    min_replica: 1\n",
     ["field 'models[0].min_replica'", "unknown key 'min_replica'", "did you mean 'min_replicas'?"]),
    ("options: {window_length_s: 3600, margin: 0.1}", "options: {window_length_s: 3600, margn: 0.1}",
     ["field 'options.margn'", "did you mean 'margin'?"]),
    # wrong type: the value and the field's meaning
    ("nodes: 1,", "nodes: two,",
     ["field 'sites[0].inventory[0].nodes'", "site aws:us-east-1", "'two' must be a whole number", "nodes of"]),
    ("min_replicas: 1\n", "min_replicas: true\n", ["models[0].min_replicas", "True must be a whole number"]),
    # out of range: the value, the range and the fix
    ("window_length_s: 3600", "window_length_s: 5",
     ["field 'options.window_length_s'", "5 is outside 60..86400", "below the minimum 60", "give whole seconds"]),
    ("ttft_p95_s: 1.5", "ttft_p95_s: 1500",
     ["field 'models[0].slo.ttft_p95_s'", "model Llama-3.1-8B", "1500 is outside 0.01..120", "0.5 for 500 ms"]),
    ("ttft_p95_s: 1.5", "ttft_p95_ms: 1500",
     ["models[0].slo.ttft_p95_ms", "milliseconds", "ttft_p95_s: 0.5"]),
    ("rates: [1.0, 4.0, 12.0]", "rates: [1.0, -4.0, 12.0]",
     ["field 'models[0].demand.rates[1]'", "-4.0 is below the minimum 0", "req/s"]),
    # one tensor-parallel set, the cost models' (TP_DEGREES)
    ("tp: [1, 2]", "tp: [1, 3]", ["field 'models[0].tp[1]'", "3 is not one of 1, 2, 4, 8 or 16"]),
    ("demand: {rates: [1.0, 4.0, 12.0]}", "demand: {}", ["models[0].demand", "exactly one of servegen"]),
])
def test_scenario_errors_name_field_value_and_fix(tmp_path, old, new, needles):
    assert old in SMALL
    p = tmp_path / "s.yaml"
    p.write_text(SMALL.replace(old, new, 1))
    with pytest.raises(InputError) as exc:
        load_scenario(p)
    for n in [str(p), *needles]:
        assert n in str(exc.value), (n, str(exc.value))
    code, out = run("plan", str(p))
    assert_one_line_error(code, out, str(p), *needles)


@pytest.mark.parametrize(("old", "new", "needles"), [
    ("    demand_gpus: [1, 2]\n", "    demand_gpu: [1, 2]\n",
     ["field 'tenants[0].demand_gpu'", "tenant chat", "did you mean 'demand_gpus'?"]),
    ("quota_gpus: 4", "quota_gpus: four", ["tenants[0].quota_gpus", "tenant chat", "'four' must be a whole number"]),
    ("demand_gpus: [1, 2]", "demand_gpus: [1, -2]", ["tenants[0].demand_gpus[1]", "-2 is outside 0..100000"]),
    ("count: 2", "count: 0", ["pool[0].count", "pool entry n", "0 is outside 1..100000"]),
])
def test_tenant_errors_name_field_value_and_fix(tmp_path, old, new, needles):
    p = tmp_path / "t.yaml"
    p.write_text(TENANTS.replace(old, new, 1))
    assert_one_line_error(*run("allocate", str(p)), str(p), *needles)


def test_latency_and_scenario_share_one_tp_set():
    # tp 3 was accepted by the latency model (1..64) but refused by scenarios ({1, 2, 4, 8, 16}); now both refuse it.
    assert TP_DEGREES == (1, 2, 4, 8, 16)
    with pytest.raises(InputError, match="tp must be one of 1, 2, 4, 8, 16"):
        prefill_time_s(get_model("Llama-3.1-8B"), get_gpu("H100"), 100, tp=3, calib=load_calibration("H100-SXM-80GB"))
    assert prefill_time_s(get_model("Llama-3.1-8B"), get_gpu("H100"), 100, tp=16,
                          calib=load_calibration("H100-SXM-80GB")) > 0


# ------------------------------------------------------------------------------------------------ JSON Schema


def schema_of(kind: str) -> dict:
    code, out = run("schema", kind)
    assert code == 0, out
    return json.loads(out)


@pytest.mark.parametrize(("kind", "shipped"), [("scenario", "default.yaml"), ("tenants", "tenants_default.yaml")])
def test_shipped_files_validate_against_the_printed_schema(kind, shipped):
    from importlib import resources

    schema = schema_of(kind)
    jsonschema.Draft202012Validator.check_schema(schema)
    text = (resources.files("fleetplan.datasets") / "scenarios" / shipped).read_text(encoding="utf-8")
    doc = parse_yaml(text, source=shipped)
    validator = jsonschema.Draft202012Validator(schema)
    assert list(validator.iter_errors(doc)) == []
    # ... and as a user's own validator reads it, with PyYAML (YAML 1.1: '1.0e9' is a string there; the shipped
    # default.yaml failed its published schema that way)
    assert list(validator.iter_errors(yaml.safe_load(text))) == []
    # The schema is not vacuous: an unknown key, a wrong type and an out-of-range value are each refused.
    key = "sites" if kind == "scenario" else "pool"
    assert not validator.is_valid({**doc, "colour": "blue"})
    assert not validator.is_valid({**doc, key: "none"})
    assert not validator.is_valid({**doc, key: []})


def test_scenario_schema_checks_the_same_rules_as_the_loader():
    validator = jsonschema.Draft202012Validator(schema_of("scenario"))
    doc = parse_yaml(SMALL, source="small")
    assert validator.is_valid(doc)
    bad_window = json.loads(json.dumps(doc))
    bad_window["options"]["window_length_s"] = 5
    two_demands = json.loads(json.dumps(doc))
    two_demands["models"][0]["demand"]["trace"] = {"name": "azure-conv"}
    bad_tp = json.loads(json.dumps(doc))
    bad_tp["models"][0]["tp"] = [3]
    for bad in (bad_window, two_demands, bad_tp):
        assert not validator.is_valid(bad)
    # Descriptions reach the schema (what an editor shows on hover).
    props = schema_of("scenario")["$defs"]["ScenarioOptions"]["properties"]
    assert "seconds" in props["window_length_s"]["description"] and props["window_length_s"]["minimum"] == 60


def test_older_plan_files_with_yaml_1_1_number_text_still_replay():
    # Plan files written by the YAML 1.1 loader embed `load_bandwidth_bytes_per_s: 1.0e9` as the text "1.0e9".

    raw = parse_yaml(SMALL, source="small")
    raw["options"]["load_bandwidth_bytes_per_s"] = "1.0e9"
    _, scenario = problem_from_plan_dict({"scenario": {"raw": raw, "source": "old plan"}})
    assert scenario.options["load_bandwidth_bytes_per_s"] == 1e9
    # Text that is no number is still an error.
    raw["options"]["load_bandwidth_bytes_per_s"] = "fast"
    with pytest.raises(InputError, match="'fast' must be a number"):
        problem_from_plan_dict({"scenario": {"raw": raw, "source": "old plan"}})



def test_quoted_text_that_looks_like_a_number_survives_the_plan_file(tmp_path):
    # Found by a fresh user: `engine: {version: "0.11"}`, quoted as docs/engine.md asks, planned, but every reader
    # of the plan file turned the embedded "0.11" into the number 0.11 and refused it ("must be text"). Only text
    # that a YAML 1.1 loader left unread (an exponent without a dot or a sign: "1e9", "1.0e9") is a number kept as
    # text; "0.11", "2025.12" and "1.0e+9" were quoted on purpose (YAML 1.1 reads them as floats unquoted).
    assert yaml12_numbers({"a": "1.0e9", "b": ["1e9", "0.11", "2025.12", "1.0e+9", ".5"]}) == {
        "a": 1e9, "b": [1e9, "0.11", "2025.12", "1.0e+9", ".5"]}
    raw = parse_yaml(SMALL, source="small")
    raw["models"][0]["engine"] = {"version": "0.11"}
    raw["name"] = "2025.12"
    (tmp_path / "s.yaml").write_text(json.dumps(raw))  # JSON is YAML: the quotes stay
    out = tmp_path / "p.json"
    res = CliRunner().invoke(main, ["plan", str(tmp_path / "s.yaml"), "--no-baselines", "--out", str(out)])
    assert res.exit_code == 0, res.output
    problem, scenario = problem_from_plan_dict(json.loads(out.read_text()))
    assert problem.name == "2025.12"
    assert all(o.engine is not None and o.engine.version == "0.11" for o in problem.options)

# ------------------------------------------------------------------------- duplicate keys in JSON input (issue 28)
GOLDEN_PLAN = Path(__file__).parent / "golden" / "export" / "default_plan.json"


def test_a_key_given_twice_in_a_json_object_is_refused_naming_key_and_path():
    # Python's json keeps the last value: {"n": 1, "n": 4} would read as 4, silently.
    with pytest.raises(InputError, match="'n' is given twice") as e:
        parse_json('{"steps": [{"at_s": 0}, {"at_s": 1, "n": 1, "n": 4}]}', source="f.json")
    assert (e.value.source, e.value.field, e.value.value) == ("f.json", "steps[1].n", "n")
    # the same key in two objects is no duplicate; nor a key and its nested namesake
    assert parse_json('[{"a": 1}, {"a": 2, "b": {"a": 3}}]', source="f.json") == [{"a": 1}, {"a": 2, "b": {"a": 3}}]
    assert duplicate_key(b'{"observations": [{"model": "m", "arrivals": 5, "arrivals": 50000}]}') == [
        "body", "observations", 0, "arrivals"]  # the service's request bodies: the same helper


def test_plan_fleet_and_trace_files_with_a_repeated_key_are_refused(tmp_path):
    text = GOLDEN_PLAN.read_text()
    assert text.count('"status": ') == 1
    plan = tmp_path / "plan.json"
    plan.write_text(text.replace('"status": ', '"status": "optimal", "status": ', 1))
    for args in (["simulate", str(plan)], ["diff", str(GOLDEN_PLAN), str(plan)],
                 ["export", "vllm", str(plan)]):
        assert_one_line_error(*run(*args), str(plan), "field 'status'", "'status' is given twice")
    fleet = tmp_path / "steps.json"
    fleet.write_text('{"steps": [{"at_s": 0, "at_s": 3600, "replicas": [], "shared": []}]}')
    assert_one_line_error(*run("simulate", str(GOLDEN_PLAN), "--fleet", str(fleet)), str(fleet),
                          "field 'steps[0].at_s'", "given twice")
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 5}\n'
                     '{"timestamp": 1, "input_length": 10, "input_length": 9000, "output_length": 5}\n')
    with pytest.raises(InputError, match="given twice") as e:
        read_mooncake_jsonl(trace)
    assert (e.value.row, e.value.field) == (2, "input_length")
    config = tmp_path / "config.json"
    config.write_text('{"num_hidden_layers": 32, "hidden_size": 4096, "num_hidden_layers": 80}')
    with pytest.raises(InputError, match="'num_hidden_layers' is given twice"):
        model_from_hf_config(config)


def test_a_window_length_of_a_fraction_of_a_second_is_refused(tmp_path):
    # 3600.5-s windows were planned: window 23 starts at 23 x 3600.5 = 82,811.5 s = 23:00:11.5, which the table,
    # the export (HH:MM, cron) and diff --at all label 23:00; the drift is 0.5 s per window. Refused: whole seconds.
    p = tmp_path / "w.yaml"
    p.write_text(SMALL.replace("window_length_s: 3600,", "window_length_s: 3600.5,"))
    assert_one_line_error(*run("plan", str(p)), str(p), "field 'options.window_length_s'",
                          "3600.5 s is not a whole number of seconds", "e.g. 3600")
    assert_one_line_error(*run("plan", "--window", "3600.5"), "--window", "not a whole number of seconds")
    # a whole number written as a float is the same length
    assert load_scenario(_written(tmp_path, SMALL.replace("window_length_s: 3600,", "window_length_s: 3600.0,"))
                         ).options["window_length_s"] == 3600.0


def _written(tmp_path, text: str) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return p
