"""Calibration per engine and version: each measured row names its engine, the fit pools the GPU families'
efficiencies and keeps each version's host overheads apart, and a plan for a version or GPU the data does not hold
says so in its capacity source and capacity error."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from fleetplan.costmodels.calibration_fit import held_out_gpu_predictions, model_family
from fleetplan.costmodels.engine import EngineConfig
from fleetplan.costmodels.latency import decode_step_time_s
from fleetplan.datasets.calibration import calibration_for_engine, load_calibration, load_framework_table
from fleetplan.datasets.catalog.names import get_gpu, get_model
from fleetplan.datasets.measured import load_measurements, observations
from fleetplan.errors import InputError
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.read import load_scenario
from fleetplan.scenario.uncertainty import option_errors

ROOT = Path(__file__).parents[1]


def test_every_measured_row_names_its_engine():
    # An engine and a version ('vLLM 0.11', 'vLLM 0.5.4', 'TensorRT-LLM 0.9', 'vLLM 0.5.x (Argonne)': unpinned,
    # its scripts date from 0.5.x), or the one source that states none: Splitwise's published profile.
    fws = set(load_measurements().framework)
    named = {f for f in fws if re.fullmatch(r"(vLLM|TensorRT-LLM) \d+\.\d+(\.[\dx]+)?( \(.+\))?", f)}
    assert fws - named == {"Splitwise profile"}
    assert {"vLLM 0.11", "vLLM 0.5.4"} <= named


def test_versions_pool_efficiencies_and_keep_overheads_apart():
    t = load_framework_table()
    for gpu in ("H100-SXM-80GB", "A100-SXM4-80GB", "default"):
        a, b = t[("vLLM 0.11", gpu)], t[("vLLM 0.5.4", gpu)]
        assert (a.prefill_mfu, a.decode_bw_efficiency) == (b.prefill_mfu, b.decode_bw_efficiency)  # pooled
        assert a.decode_overhead_per_layer_s != b.decode_overhead_per_layer_s  # each version's own


def test_decode_step_differs_by_the_versions_overheads_by_hand():
    # Llama-3.1-70B, H100 tp 4, batch 1, context 1: the two versions' rows share the efficiencies, so the weight read
    # and the all-reduces take the same time and the steps differ by the overheads alone:
    # d(step) + 80 layers x d(per layer) + 1 sequence x d(per sequence). With the shipped rows (H100, vLLM 0.5.4
    # minus vLLM 0.11): (0 - 1.977 ms) + 80 x (398.4 - 0) us + (193.2 - 51.2) us = 30.03 ms.
    m, g = get_model("Llama-3.1-70B"), get_gpu("H100-SXM-80GB")
    old, _, note = calibration_for_engine(g, None, "vLLM 0.5.4")
    new = load_framework_table()[("vLLM 0.11", g.name)]
    assert old.framework == "vLLM 0.5.4" and note == ""
    diff = (old.decode_overhead_per_step_s - new.decode_overhead_per_step_s
            + 80 * (old.decode_overhead_per_layer_s - new.decode_overhead_per_layer_s)
            + (old.decode_overhead_per_seq_s - new.decode_overhead_per_seq_s))
    assert diff == pytest.approx(0.03003, abs=2e-4)
    got = decode_step_time_s(m, g, 1, 1, tp=4, calib=old) - decode_step_time_s(m, g, 1, 1, tp=4, calib=new)
    assert got == pytest.approx(diff, rel=1e-9)


def test_the_shipped_engine_keeps_roofline_csv_and_an_unmeasured_version_says_so():
    g = get_gpu("H100-SXM-80GB")
    row, where, note = calibration_for_engine(g, None, EngineConfig().framework)  # vLLM 0.11
    assert row == load_calibration(g) and note == "" and where.endswith("roofline.csv")
    row, where, note = calibration_for_engine(g, None, "vLLM 0.10")
    assert row == load_calibration(g) and "vLLM 0.10 is not in the calibration data" in note
    row, where, note = calibration_for_engine(g, None, "vLLM 0.18")  # newer than the fit: the same honesty
    assert row == load_calibration(g) and "vLLM 0.18 is not in the calibration data: vLLM 0.11's" in note


def test_plan_for_an_unmeasured_version_states_it(tmp_path):
    # Llama-3.1-70B planned for vLLM 0.10 (not measured): every option's capacity source says the vLLM 0.11
    # constants are extrapolated, and its capacity error's basis is 'extrapolated' to vLLM 0.10 (for H100 the
    # largest held-out error of the H100 groups on any engine, 20.2% with the shipped table).
    raw = yaml.safe_load((ROOT / "datasets" / "scenarios" / "default.yaml").read_text())
    raw["models"] = [m for m in raw["models"] if m["name"] == "Llama-3.1-70B"]
    raw["models"][0]["engine"] = {"mode": "prefill-first", "version": "0.10"}
    raw["models"][0]["tp"] = [4]
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(raw))
    sc = load_scenario(scen)
    problem = build_problem(sc)
    assert problem.options
    for o in problem.options:
        assert "vLLM 0.10 is not in the calibration data" in o.capacity_source
    errs = option_errors(sc, problem)
    for e in errs.values():
        assert e.basis == "extrapolated" and "vLLM 0.10" in e.detail


@pytest.mark.parametrize("version, needles", [
    # vLLM 0.99 was planned with vLLM 0.11's constants "extrapolated" to it (issue 28): no such release exists.
    ("0.99", ["field 'models[0].engine.version'", "vLLM 0.99 does not exist", "0.9, 0.10, 0.11, 0.12",
              "0.24, 0.25", "vllm_releases.csv", 'version: "0.11"']),
    ("v0.11", ["'v0.11' is not a vLLM version", "no 'v'"]),
])
def test_a_version_that_names_no_vllm_release_is_refused(tmp_path, version, needles):
    raw = yaml.safe_load((ROOT / "datasets" / "scenarios" / "default.yaml").read_text())
    raw["models"] = [m for m in raw["models"] if m["name"] == "Llama-3.1-8B"]
    raw["models"][0]["engine"] = {"version": version}
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(raw))
    with pytest.raises(InputError) as exc:
        load_scenario(scen)
    for n in needles:
        assert n in str(exc.value), (n, str(exc.value))


@pytest.mark.parametrize("version", ["0.10", "0.11.0", "0.5.4", "0.6.3.post1", "0.5.x (Argonne)", "0.18",
                                     "0.25.0"])
def test_a_released_or_fitted_version_is_accepted(tmp_path, version):
    # release lines from vllm_releases.csv (patch numbers unchecked), and the fitted rows' own names; 0.18 and 0.25
    # (2026) were refused as "does not exist" while the table stopped at 0.11
    raw = yaml.safe_load((ROOT / "datasets" / "scenarios" / "default.yaml").read_text())
    raw["models"] = [m for m in raw["models"] if m["name"] == "Llama-3.1-8B"]
    raw["models"][0]["engine"] = {"version": version}
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(raw))
    assert load_scenario(scen)


def test_model_family_is_the_name_up_to_its_parameter_count():
    assert [model_family(n) for n in ("Llama-3.1-70B", "Llama-3.1-405B", "Llama-2-7B", "Mistral-7B-v0.1",
                                      "Qwen2.5-7B", "gpt-oss")] == [
        "Llama-3.1", "Llama-3.1", "Llama-2", "Mistral", "Qwen2.5", "gpt-oss"]


def test_gpu_hold_out_of_a_version_measured_on_one_gpu_says_so():
    # The shipped vLLM 0.11 rows (ML.ENERGY v3) are all on H100: nothing to fit on another GPU, no prediction made;
    # vLLM 0.5.4 has rows on A100-40GB and H100, so each GPU's rows are predicted from the other's.
    obs = observations()
    assert {o.gpu.name for o in obs if o.framework == "vLLM 0.11"} == {"H100-SXM-80GB"}
    assert held_out_gpu_predictions(obs, "vLLM 0.11", anchor="vLLM 0.11") == ([], ["H100-SXM-80GB"])
    pairs, alone = held_out_gpu_predictions(obs, "vLLM 0.5.4", anchor="vLLM 0.11", max_nfev=50)
    assert alone == [] and len(pairs) == sum(1 for o in obs if o.framework == "vLLM 0.5.4") > 0
    assert all(o.framework == "vLLM 0.5.4" and p > 0 for o, p in pairs)
