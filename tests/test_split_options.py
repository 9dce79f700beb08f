"""SplitOptions (the split design's options record) and the pure cost-model signatures: tables are passed in."""

from __future__ import annotations

import pytest

from fleetplan.costmodels.hardware import GPU, Model
from fleetplan.costmodels.latency import decode_step_time_s, prefill_time_s
from fleetplan.datasets.calibration import load_calibration
from fleetplan.errors import InputError
from fleetplan.scenario.split import SplitOptions

H100 = GPU("H100-SXM-80GB", 80e9, 3350e9, 989.4e12, 1978.9e12, 900e9, 128e9, 700)
L8B = Model("Llama-3.1-8B", 32, 4096, 32, 8, 128, 8.03e9, 8.03e9)
SITES = {"model": "llama-3.1-70b", "prefill_site": "aws:us-east-1", "decode_site": "aws:us-west-2"}


def test_defaults_and_json_schema():
    o = SplitOptions.from_mapping(SITES)
    assert (o.trace, o.gpu, o.ttft_slo_s, o.tpot_slo_s, o.margin) == ("azure-conv", "H100-SXM-80GB", 2.0, 0.1, 0.1)
    schema = SplitOptions.model_json_schema()
    assert set(schema["required"]) == {"model", "prefill_site", "decode_site"}
    assert schema["properties"]["margin"]["maximum"] == 0.9 and schema["additionalProperties"] is False


def test_errors_name_file_field_value_and_fix():
    with pytest.raises(InputError) as e:
        SplitOptions.from_mapping({**SITES, "margin": 0.95}, source="x.yaml")
    # The one translation of schema errors (fleetplan.fileio.input_error): file, field, value, range, what it is.
    assert str(e.value) == ("x.yaml, field 'margin': 0.95 is outside 0..0.9, above the maximum 0.9 "
                            "(capacity headroom, a fraction (0..0.9))")
    with pytest.raises(InputError, match="did you mean 'prefill_site'"):
        SplitOptions.from_mapping({**SITES, "prefil_site": "aws:us-east-1"}, source="x.yaml")
    with pytest.raises(InputError, match="'decode_site' is missing"):
        SplitOptions.from_mapping({"model": "m", "prefill_site": "aws:us-east-1"})
    with pytest.raises(InputError, match="ttft_slo_s.*below the minimum 0.01"):
        SplitOptions.from_mapping({**SITES, "ttft_slo_s": 0.0})


def test_latency_needs_calibration_and_a_link_for_pipeline_stages():
    cal = load_calibration(H100)
    with pytest.raises(InputError, match="inter-node link"):
        prefill_time_s(L8B, H100, 512, pp=2, calib=cal)
    with pytest.raises(InputError, match="inter-node link"):
        decode_step_time_s(L8B, H100, 1, 10, pp=2, calib=cal)
    with pytest.raises(InputError, match="calib"):
        decode_step_time_s(L8B, H100, 1, 10, calib=None)
