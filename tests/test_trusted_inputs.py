"""Issue 13 items 1-2: the user's price rows win, dated and consistent catalog snapshots, models from a Hugging Face
config.json (parameter count from the architecture), base_model, per-model dtypes."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fleetplan.cli.main import main
from fleetplan.costmodels.hardware import architecture_params, check_params
from fleetplan.costmodels.prices import GpuPrice, find_price, price_problems, usable_prices
from fleetplan.datasets.catalog.models import model_from_hf_config
from fleetplan.datasets.catalog.prices import _shape_flags, load_gpu_prices
from fleetplan.datasets.catalog.prices import find_price as catalog_find_price
from fleetplan.errors import InputError
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.read import load_scenario

# Key sets of the public config.json files; numbers as datasets/data/models/models.csv gives them (with sources).
LLAMA_31_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
               "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
               "tie_word_embeddings": False, "torch_dtype": "bfloat16", "rope_theta": 500000.0}
MIXTRAL_8X7B = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096,
                "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
                "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000,
                "max_position_embeddings": 32768, "sliding_window": None, "torch_dtype": "bfloat16"}
QWEN25_7B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
             "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
             "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 32768,
             "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def _write(tmp_path, name, cfg):
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(cfg))
    return p


@pytest.mark.parametrize("cfg,total_b,active_b", [
    # models.csv params_*_b_computed: 8.03 / 46.703 and 12.88 / 7.616.
    (LLAMA_31_8B, 8.03, 8.03), (MIXTRAL_8X7B, 46.703, 12.88), (QWEN25_7B, 7.616, 7.616)])
def test_config_json_parameter_count(tmp_path, cfg, total_b, active_b):
    m = model_from_hf_config(_write(tmp_path, "m/config.json", cfg))
    assert m.name == "m"  # the folder of a downloaded repo
    assert m.params_total / 1e9 == pytest.approx(total_b, rel=2e-3)
    assert m.params_active / 1e9 == pytest.approx(active_b, rel=2e-3)
    # KV bytes per token, bf16: 2 x layers x KV heads x 128 x 2 (models.csv kv_cache_bytes_per_token_bf16).
    assert m.kv_bytes_per_token("bf16") == 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * 128 * 2


def test_llama_8b_count_by_hand():
    # Per layer: q 4096², k and v 4096·1024 each, o 4096², MLP 3·4096·14336, norms 2·4096 = 218,112,000;
    # × 32 = 6,979,584,000; embeddings and head 2·128256·4096 = 1,050,673,152; final norm 4096.
    total, _ = architecture_params(num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
                                   head_dim=128, intermediate_size=14336, vocab_size=128256)
    assert total == 6_979_584_000 + 1_050_673_152 + 4096


def test_params_typo_refused_with_both_numbers():
    with pytest.raises(InputError, match=r"3\.25e\+09 parameters but its architecture has 3\.2"):
        check_params(3.25e9, 32.5e9, owner="model my-32b")


def test_user_models_row_typo_refused(tmp_path):
    # Qwen2.5-32B's shape (64 layers, 5120 hidden, 40/8 heads, 27648 MLP, 152064 vocab) with 3.25 B stated.
    f = tmp_path / "m.csv"
    f.write_text("model,attention_type,num_layers,hidden_size,num_attention_heads,num_kv_heads,head_dim,"
                 "intermediate_size,vocab_size,params_total_b_stated\n"
                 "my-32b,GQA (qkv bias),64,5120,40,8,128,27648,152064,3.25\n")
    r = CliRunner().invoke(main, ["data", "models", "--extra", str(f)])
    assert r.exit_code == 2 and "3.25e+09 parameters but its architecture has 3.276e+10" in r.output, r.output


def _scenario(tmp_path, model_entry: str, extra: str = "", options: str = "") -> str:
    p = tmp_path / "s.yaml"
    p.write_text(f"""name: t
{extra}
options: {{pricing_model: on-demand{options}}}
sites:
  - name: gcp:us-central1
    inventory:
      - {{gpu: H100, nodes: 1, gpus_per_node: 8}}
models:
  - {model_entry}
    tp: [1]
    slo: {{ttft_p95_s: 2.0, tpot_p95_s: 0.1}}
    token_mix: {{trace: azure-conv}}
    demand: {{rates: [1.0, 2.0]}}
""")
    return str(p)


def test_user_price_row_wins(tmp_path):
    # Before: the shipped a3-highgpu-1g row (1.18251 + 4.20076 = 5.38 USD/GPU-h) beat the user's 8 USD/GPU-h.
    (tmp_path / "p.csv").write_text("provider,instance,region,gpu,gpu_count,usd_per_hour,pricing_model,source\n"
                                    "GCP,a3-highgpu-8g,us-central1,H100,8,64,on-demand,our contract\n")
    sc = load_scenario(_scenario(tmp_path, "name: Llama-3.1-8B", "files: {prices: p.csv}"))
    (pool,) = build_problem(sc).pools
    assert pool.usd_per_gpu_hour == 8.0  # 64 / 8
    assert pool.price_source.startswith("your price row") and "our contract" in pool.price_source


def test_user_price_row_other_pricing_model_is_an_error(tmp_path):
    (tmp_path / "p.csv").write_text("provider,instance,region,gpu,gpu_count,usd_per_hour,pricing_model\n"
                                    "GCP,a3-highgpu-8g,us-central1,H100,8,64,negotiated\n")
    with pytest.raises(InputError, match="as negotiated only, but this pool is priced on-demand"):
        build_problem(load_scenario(_scenario(tmp_path, "name: Llama-3.1-8B", "files: {prices: p.csv}")))


def test_unknown_pricing_model_names_its_field():
    with pytest.raises(InputError) as e:
        catalog_find_price("H100", "aws", "us-east-1", "on-demnd")
    assert e.value.field == "pricing_model" and "spot" in str(e.value)


def test_p5_newest_snapshot_and_stale_regions():
    rows = load_gpu_prices()
    # us-east-1: the 2026-11-09 row (55.04 / 8) wins over the undated pre-cut SkyPilot rows (98.32 / 8).
    p = catalog_find_price("H100", "aws", "us-east-1", gpus_per_node=8)
    assert (p.usd_per_gpu_hour, p.as_of) == (pytest.approx(6.88), "2026-11-09")
    kinds = {(q.kind, q.row.region) for q in price_problems(rows) if q.row.instance == "p5.48xlarge"
             and q.row.pricing_model == "on-demand"}
    assert ("snapshots-disagree", "us-east-1") in kinds and ("superseded", "us-west-2") in kinds
    # us-west-2 has only the superseded pre-cut price: an error, not a silent 12.29 ...
    with pytest.raises(InputError, match="superseded|changed to 6.88"):
        catalog_find_price("H100", "aws", "us-west-2")
    # ... unless the user asks for the snapshot before the cut: then both regions are 98.32 / 8 = 12.29.
    for region in ("us-east-1", "us-west-2"):
        assert catalog_find_price("H100", "aws", region, price_date="2025-05-31").usd_per_gpu_hour == \
            pytest.approx(12.29)


def test_gcp_h100_and_spot_above_on_demand():
    rows = load_gpu_prices()
    # a3-highgpu-1g/2g on-demand rows are excluded (price_rules.csv): the 8-GPU node costs 88.49 / 8 = 11.06.
    p = catalog_find_price("H100", "gcp", "us-central1", gpus_per_node=8)
    assert p.instance == "a3-highgpu-8g" and p.usd_per_gpu_hour == pytest.approx(11.0612, rel=1e-4)
    usable = {id(q) for q in usable_prices(rows)}
    spot = [q for q in rows if q.zone == "asia-northeast1-b" and q.instance == "a3-highgpu-1g"
            and q.pricing_model == "spot"]
    assert spot and all(id(q) not in usable for q in spot)  # 11.09 spot > 5.72 on-demand
    with pytest.raises(InputError, match="spot 11.09 USD/GPU-h is above on-demand 5.719"):
        catalog_find_price("H100", "gcp", "asia-northeast1", "spot", zone="asia-northeast1-b")


def test_gpu_count_contradicting_instance_flagged():
    # SkyPilot's Azure ND96isr_H100_v5 rows say 12 GPUs; the size has 8 (instance_shapes.csv).
    (flag,) = _shape_flags("azure", "Standard_ND96isr_H100_v5", 12)
    assert "has 8 GPUs" in flag and "says 12" in flag
    assert _shape_flags("azure", "Standard_ND96isr_H100_v5", 8) == ()


def test_node_size_preferred():
    rows = [GpuPrice("x", "r", "", "G", "one", 1, 1.0), GpuPrice("x", "r", "", "G", "eight", 8, 16.0)]
    assert find_price("G", "x", "r", "on-demand", rows).instance == "one"  # cheapest per GPU-hour
    assert find_price("G", "x", "r", "on-demand", rows, gpus_per_node=8).instance == "eight"


def test_ledger_on_gcp_a100_prices_an_8_gpu_node():
    # It priced a 1-GPU VM and said "no tp up to 1"; a2-ultragpu-8g has the same 2.9458 USD/GPU-h.
    r = CliRunner().invoke(main, ["ledger", "split", "--model", "llama-3.1-70b", "--prefill-site", "gcp:us-central1",
                                  "--decode-site", "gcp:us-central1", "--gpu", "A100-80GB", "--rate-req-per-s", "1",
                                  "--no-prompt-break-even", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert "no tp up to" not in r.output


def test_config_base_model_and_dtypes_in_scenario(tmp_path):
    _write(tmp_path, "q/config.json", QWEN25_7B)
    sc = load_scenario(_scenario(tmp_path, "name: my-qwen\n    config: q/config.json\n    params: 7.6e9\n"
                                 "    weight_dtype: fp8\n    kv_dtype: fp8"))
    pr = build_problem(sc)
    assert pr.models[0].name == "my-qwen" and pr.options
    ft = load_scenario(_scenario(tmp_path, "name: my-llama-ft\n    base_model: Llama-3.1-8B"))
    assert build_problem(ft).models[0].name == "my-llama-ft"
    with pytest.raises(InputError, match="states 3.25e\\+09 parameters but its architecture has 8.03e\\+09"):
        build_problem(load_scenario(_scenario(tmp_path, "name: x\n    base_model: Llama-3.1-8B\n    params: 3.25e9")))


def test_data_models_from_config_and_prices_check(tmp_path):
    f = _write(tmp_path, "Mixtral/config.json", MIXTRAL_8X7B)
    r = CliRunner().invoke(main, ["data", "models", "--from-config", str(f), "--format", "json"])
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.output)
    assert row["name"] == "Mixtral" and row["params_total"] == 46_702_792_704
    r = CliRunner().invoke(main, ["data", "prices", "--check", "--format", "json"])
    kinds = {x["used"] for x in json.loads(r.output)}
    assert {"no: spot-above-on-demand", "no: snapshots-disagree", "no: superseded", "no: flagged"} <= kinds
    r = CliRunner().invoke(main, ["data", "prices", "--gpu", "H100", "--cloud", "aws", "--region", "us-east-1",
                                  "--format", "json"])
    assert "2026-11-09" in {x["as_of"] for x in json.loads(r.output)}
