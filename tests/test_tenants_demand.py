"""Tenant demand derived from models and request rates through the cost models (placement.tenants).

Expected GPUs are recomputed here from ``replica_capacity``'s req_per_s, independently of ``demand_from_models``:
best tp = the most req/s per GPU; GPUs = Σ_models rate / cap × tp, rounded up per window.
"""

from __future__ import annotations

import math

import pytest

from fleetplan.costmodels.capacity import replica_capacity
from fleetplan.costmodels.slo import SLO
from fleetplan.datasets.calibration import load_calibration
from fleetplan.datasets.catalog.names import get_gpu, get_model
from fleetplan.datasets.traces import load_trace, token_mix_from_trace
from fleetplan.errors import InputError, UnknownNameError
from fleetplan.scenario.tenants import demand_from_models, load_tenants, problem_from_dict, tenant_engine

A100 = "A100-SXM4-80GB"
H100 = "H100-SXM-80GB"
SLO_S = {"ttft_p95_s": 2.0, "tpot_p95_s": 0.1}


def best_option(model: str, gpu: str, trace: str, tps=(1, 2, 4, 8)) -> tuple[int, float]:
    """(tp, req/s of one replica) with the most req/s per GPU, straight from replica_capacity on the tenants'
    engine (vLLM V1 with vLLM's defaults for the GPU)."""
    mix = token_mix_from_trace(load_trace(trace))
    g = get_gpu(gpu)
    caps = {tp: replica_capacity(get_model(model), g, mix, SLO(2.0, 0.1), tp=tp, calib=load_calibration(g),
                                 engine=tenant_engine(g)).req_per_s for tp in tps}
    tp = max((t for t in tps if caps[t] > 0), key=lambda t: (caps[t] / t, -t))
    return tp, caps[tp]


def scenario(models, *, gpus_per_node=8, types=(A100,), **tenant):
    return {"pool": [{"name": "a", "gpu": A100, "gpus_per_node": gpus_per_node, "count": 2},
                     {"name": "h", "gpu": H100, "gpus_per_node": 8, "count": 1}],
            "tenants": [{"name": "copilot", "quota_gpus": 1, "burst_gpus": 16, "interference_class": "interactive",
                         "gpu_types": list(types), "slo": SLO_S, "token_mix": {"trace": "azure-conv"},
                         "models": models, **tenant}]}


def test_two_models_summed_then_rounded_up():
    # With the shipped calibration (values at the time of writing; the test recomputes them):
    #   Llama-3.1-8B on A100-80GB, azure-conv mix: tp 1, 5.093 req/s per replica (the most per GPU).
    #   Qwen2.5-7B on A100-80GB, azure-code mix: tp 2, 5.313 req/s per replica (2.656 per GPU).
    # Window 0: 0/5.093 + 1/5.313 × 2 = 0.376 -> 1 GPU.
    # Window 1: 1.5/5.093 + 1.5/5.313 × 2 = 0.295 + 0.565 = 0.859 -> 1 GPU (rounding each model first would give 2).
    # Window 2: 10/5.093 + 1/5.313 × 2 = 1.963 + 0.376 = 2.340 -> 3 GPUs.
    llama = [0, 1.5, 10]
    qwen = [1, 1.5, 1]
    p = problem_from_dict(scenario([
        {"name": "Llama-3.1-8B", "rates_req_per_s": llama},
        {"name": "qwen2.5-7b", "rates_req_per_s": qwen, "token_mix": {"trace": "azure-code"}}]))
    tp_l, cap_l = best_option("Llama-3.1-8B", A100, "azure-conv")
    tp_q, cap_q = best_option("Qwen2.5-7B", A100, "azure-code")
    frac = [a / cap_l * tp_l + b / cap_q * tp_q for a, b in zip(llama, qwen, strict=True)]
    expected = tuple(math.ceil(f - 1e-9) for f in frac)
    t = p.tenant("copilot")
    assert t.demand_gpus == expected
    # The sum is rounded, not each model: window 1 needs 1 GPU where rounding per model would give 2.
    assert expected[1] == 1 < sum(math.ceil(x) for x in (1.5 / cap_l * tp_l, 2 / cap_q * tp_q))
    assert [(m.model, m.tp) for m in t.models] == [("Llama-3.1-8B", tp_l), ("Qwen2.5-7B", tp_q)]
    assert t.models[0].replica_req_per_s == pytest.approx(cap_l)
    assert t.models[1].gpus == pytest.approx(tuple(b / cap_q * tp_q for b in qwen))


def test_best_tp_skips_options_that_do_not_fit():
    # Llama-3.1-70B (141 GB in bf16) on H100-80GB: tp1 does not fit (141 > 0.9 × 80); per GPU the calibration gives
    # tp2 1.009, tp4 1.382, tp8 0.964 req/s -> tp 4, about 5.53 req/s per replica.
    # 5 req/s -> 5 / 5.53 × 4 = 3.62 -> 4 GPUs.
    tp, cap = best_option("Llama-3.1-70B", H100, "azure-conv")
    gpus, models = demand_from_models("big", [{"name": "Llama-3.1-70B", "rates_req_per_s": [5, 0]}], H100, 8,
                                      slo=SLO_S, token_mix={"trace": "azure-conv"})
    assert models[0].tp == tp and models[0].tp > 1
    assert gpus == (math.ceil(5 / cap * tp - 1e-9), 0)
    # Limited to tp 1 and 2 by the node size of 2 GPUs: tp 2 is the only option left.
    gpus2, models2 = demand_from_models("big", [{"name": "Llama-3.1-70B", "rates_req_per_s": [0.05]}], H100, 2,
                                        slo=SLO_S, token_mix={"trace": "azure-conv"})
    tp2, cap2 = best_option("Llama-3.1-70B", H100, "azure-conv", tps=(1, 2))
    assert models2[0].tp == tp2 == 2 and gpus2 == (math.ceil(0.05 / cap2 * 2 - 1e-9),)


def test_shipped_scenario_derived_tenant():
    problem, _ = load_tenants()
    t = problem.tenant("copilot")
    assert [m.model for m in t.models] == ["Qwen2.5-7B", "Llama-3.1-8B"]
    tp_q, cap_q = best_option("Qwen2.5-7B", A100, "azure-code")
    tp_l, cap_l = best_option("Llama-3.1-8B", A100, "azure-conv")
    q, ll = t.models[0].rates_req_per_s, t.models[1].rates_req_per_s
    # e.g. window 14 (14:00 UTC), on vLLM V1 (the default engine; chunked prefill no longer stalls Qwen's short
    # answers behind long prompts): Qwen2.5-7B at tp 2 sustains 8.606 req/s, Llama-3.1-8B at tp 1 5.093 req/s:
    # 9 / 8.606 × 2 + 3 / 5.093 = 2.092 + 0.589 = 2.681 -> 3 GPUs (4 on the prefill-first engine, where Qwen
    # sustained 5.313 req/s: 3.388 + 0.589 = 3.977).
    assert t.demand_gpus == tuple(math.ceil(a / cap_q * tp_q + b / cap_l * tp_l - 1e-9) for a, b in zip(q, ll,
                                                                                                       strict=True))
    assert t.demand_gpus[14] == 3
    # At least four tenants, the derived one among them, each with its own daily curve.
    assert len(problem.tenants) >= 4
    assert len({t.demand_gpus for t in problem.tenants}) == len(problem.tenants)


@pytest.mark.parametrize(("models", "extra", "needles"), [
    ([{"name": "Lama-3.1-8B", "rates_req_per_s": [1]}], {}, ["copilot", "models[0].name", "did you mean",
                                                             "Llama-3.1-8B"]),
    ([{"name": "Llama-3.1-8B", "rates_req_per_s": [1, -2]}], {},
     ["copilot", "Llama-3.1-8B", "rates_req_per_s[1]", "below the minimum 0"]),
    ([{"name": "Llama-3.1-8B", "rates_req_per_s": [1], "slo": {"ttft_p95_s": 500, "tpot_p95_s": 0.1}}], {},
     ["copilot", "Llama-3.1-8B", "ttft_p95_s", "0.5 for 500 ms"]),
    ([{"name": "Llama-3.1-8B", "rates_req_per_s": [1], "slo": {"ttft_p95_ms": 500, "tpot_p95_s": 0.1}}], {},
     ["copilot", "Llama-3.1-8B", "ttft_p95_ms", "milliseconds", "ttft_p95_s: 0.5"]),
    ([{"name": "Llama-3.1-70B", "rates_req_per_s": [1]}], {"gpus_per_node": 1},
     ["copilot", "Llama-3.1-70B", "fits no tensor-parallel degree", "weights", "more memory"]),
    ([{"name": "Llama-3.1-8B", "rates_req_per_s": [1], "token_mix": {"trace": "azure-cnv"}}], {},
     ["copilot", "Llama-3.1-8B", "token_mix", "did you mean"]),
    ([{"name": "Llama-3.1-8B", "rate_req_per_s": [1]}], {}, ["copilot", "did you mean 'rates_req_per_s'"]),
    ([{"name": "Llama-3.1-8B", "rates_req_per_s": [1]}, {"name": "Qwen2.5-7B", "rates_req_per_s": [1, 2]}], {},
     ["copilot", "Qwen2.5-7B", "one rate per window"]),
    ([{"name": "Llama-3.1-8B", "rates_req_per_s": [1]}], {"types": ()}, ["copilot", "gpu_types", "exactly one"]),
    ([{"name": "Llama-3.1-8B", "rates_req_per_s": [1]}], {"demand_gpus": [1]}, ["copilot", "both"]),
])
def test_bad_model_input_is_explained(models, extra, needles):
    kw = {k: extra[k] for k in ("gpus_per_node", "types") if k in extra}
    data = scenario(models, **kw, **{k: v for k, v in extra.items() if k not in kw})
    with pytest.raises(InputError) as e:
        problem_from_dict(data, source="t.yaml")
    msg = str(e.value)
    assert "t.yaml" in msg
    for n in needles:
        assert n in msg, (n, msg)


def test_unknown_model_keeps_its_error_class():
    with pytest.raises(UnknownNameError):
        problem_from_dict(scenario([{"name": "Lama-3.1-8B", "rates_req_per_s": [1]}]))
