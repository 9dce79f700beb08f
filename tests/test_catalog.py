"""GPU and model catalogs: unit conversions, KV-cache and weight arithmetic, aliases, user rows, bad rows."""

from __future__ import annotations

import csv
import io
from importlib import resources

import pytest

from fleetplan.datasets.catalog.gpus import load_gpu_specs, load_gpus, pcie_bytes_per_s
from fleetplan.datasets.catalog.models import load_models
from fleetplan.datasets.catalog.names import get_gpu, get_model
from fleetplan.errors import InputError, UnknownNameError

GPU_HEADER = ("gpu,vendor,form_factor,memory_gb_vendor,memory_type,mem_bandwidth_GBps,bf16_dense_tflops,"
              "fp16_dense_tflops,fp8_dense_tflops,sparsity_note,interconnect,interconnect_GBps,pcie,tdp_w,source,notes")
MODEL_HEADER = ("model,arch_type,attention_type,num_layers,hidden_size,num_attention_heads,num_kv_heads,head_dim,"
                "params_total_b_stated,params_active_b_stated,kv_cache_bytes_per_token_bf16")


# ---- KV cache and weights ------------------------------------------------------------------------------------

def test_kv_bytes_llama_examples():
    # Llama-3.1-8B: 2 (K,V) x 32 layers x 8 KV heads x 128 head dim x 2 bytes = 131,072 B/token.
    assert get_model("Llama-3.1-8B").kv_bytes_per_token("bf16") == 131_072
    # Llama-3.1-70B: 2 x 80 x 8 x 128 x 2 = 327,680 B/token (8 KV heads, not the 64 attention heads).
    assert get_model("Llama-3.1-70B").kv_bytes_per_token("bf16") == 327_680
    # fp8 halves it: 2 x 80 x 8 x 128 x 1 = 163,840.
    assert get_model("Llama-3.1-70B").kv_bytes_per_token("fp8") == 163_840


def test_kv_bytes_match_csv_column_for_every_row():
    text = resources.files("fleetplan.datasets").joinpath("data", "models", "models.csv").read_text()
    rows = list(csv.DictReader(io.StringIO(text)))
    models = load_models()
    assert len(rows) == len(models) == 9
    for row in rows:
        assert models[row["model"]].kv_bytes_per_token("bf16") == float(row["kv_cache_bytes_per_token_bf16"]), \
            row["model"]


def test_mla_and_sliding_window_and_stated_params():
    ds = get_model("DeepSeek-V3")
    assert ds.is_mla and ds.num_kv_heads is None
    assert ds.head_dim == 128  # the V head dim parsed from 'qk 192 (=128 nope+64 rope), v 128'
    assert ds.kv_bytes_per_token("bf16") == (512 + 64) * 61 * 2 == 70_272
    assert ds.params_total == 671e9  # '671 (+14 MTP = 685 on HF)': the leading number
    assert get_model("Mistral-7B-v0.1").sliding_window_tokens == 4096
    assert get_model("Mistral-7B-v0.1").kv_tokens_cached(10_000) == 4096
    oss = get_model("gpt-oss-120b")
    assert oss.sliding_window_tokens is None  # alternating full/windowed layers: no per-sequence cap
    assert oss.params_total == 117e9 and oss.params_active == 5.1e9  # stated (no computed column)
    mix = get_model("Mixtral-8x7B")
    assert mix.is_moe and mix.params_active == 12.88e9  # computed column preferred over stated 12.9


def test_weight_bytes_by_dtype():
    m = get_model("Llama-3.1-8B")
    # 8.03e9 parameters (params_total_b_computed): bf16 x2 = 16.06e9, fp8 x1 = 8.03e9, int4 x0.5 = 4.015e9 bytes.
    assert m.weight_bytes("bf16") == 16_060_000_000
    assert m.weight_bytes("fp8") == 8_030_000_000
    assert m.weight_bytes("int4") == 4_015_000_000
    # Llama-3.1-70B: 70.554e9 x 2 = 141.108e9 bytes.
    assert get_model("Llama-3.1-70B").weight_bytes("bf16") == 141_108_000_000


# ---- GPUs ----------------------------------------------------------------------------------------------------

def test_gpu_unit_conversions():
    h = get_gpu("H100-SXM-80GB")
    assert h.memory_bytes == 81559 * 2**20  # nvidia-smi reports 81,559 MiB (memory_mib_reported), not 80e9 bytes
    assert h.hbm_bandwidth_bytes_per_s == 3350e9  # 3350 GB/s
    assert h.bf16_flops_per_s == pytest.approx(989.4e12)  # 989.4 TFLOPS dense
    assert h.fp8_flops_per_s == pytest.approx(1978.9e12)
    assert h.interconnect_bytes_per_s == 900e9  # NVLink 4, bidirectional
    assert h.pcie_bytes_per_s == 128e9  # stated 'Gen5 (128 GB/s bidir)'
    assert h.tdp_w == 700


def test_gpu_fallbacks_and_pcie_inference():
    t4 = get_gpu("T4")
    assert t4.bf16_flops_per_s == 65e12  # no BF16 on Turing: FP16 tensor figure
    assert t4.fp8_flops_per_s is None
    assert t4.pcie_bytes_per_s == 32e9  # 'Gen3 x16' -> pcie.csv Gen3 32 GB/s
    assert get_gpu("A100-SXM4-80GB").pcie_bytes_per_s == 64e9  # 'Gen4' -> 64 GB/s
    assert get_gpu("L40S").interconnect_bytes_per_s is None  # 'none (no NVLink)'
    assert get_gpu("A10G").bf16_flops_per_s == 70e12


def test_pcie_parse():
    assert pcie_bytes_per_s("Gen5 (128 GB/s bidir)") == 128e9
    assert pcie_bytes_per_s("Gen4 x16 (64 GB/s bidir)") == 64e9
    assert pcie_bytes_per_s("Gen5 x16") == 128e9
    assert pcie_bytes_per_s("see note") is None
    assert pcie_bytes_per_s("") is None


def test_gpu_without_flops_is_listed_but_not_eligible():
    specs = load_gpu_specs()
    assert not specs["H100-PCIe-80GB"].eligible
    assert specs["H100-PCIe-80GB"].memory_bytes == 80e9
    assert "H100-PCIe-80GB" not in load_gpus()
    assert len(load_gpus()) == len(specs) - 1 == 14
    with pytest.raises(InputError, match="no bf16_dense_tflops") as exc:
        get_gpu("H100-PCIe")
    assert not isinstance(exc.value, UnknownNameError)


# ---- names ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("alias,name", [
    ("H100", "H100-SXM-80GB"), ("h100", "H100-SXM-80GB"), ("A100-80GB", "A100-SXM4-80GB"),
    ("a100 40gb", "A100-SXM4-40GB"), ("A10G", "A10G"), ("l4", "L4"), ("B200", "B200 (HGX)"),
    ("h100 sxm 80gb", "H100-SXM-80GB"),
])
def test_gpu_aliases(alias, name):
    assert get_gpu(alias).name == name


@pytest.mark.parametrize("alias,name", [
    ("llama-3.1-70b", "Llama-3.1-70B"), ("Mixtral-8x7B", "Mixtral-8x7B-v0.1"), ("Mistral-7B", "Mistral-7B-v0.1"),
    ("meta-llama/Llama-3.1-8B", "Llama-3.1-8B"), ("Qwen2.5-72B-Instruct", "Qwen2.5-72B"),
])
def test_model_aliases(alias, name):
    assert get_model(alias).name == name


def test_unknown_names_suggest():
    with pytest.raises(UnknownNameError, match="did you mean") as exc:
        get_gpu("H1000")
    assert "H100" in exc.value.suggestions
    with pytest.raises(UnknownNameError, match="did you mean.*Llama-3.1-70B"):
        get_model("Llama-3.1-70")


# ---- user rows -----------------------------------------------------------------------------------------------

def test_user_gpu_rows_csv_override(tmp_path):
    f = tmp_path / "my_gpus.csv"
    f.write_text(GPU_HEADER + "\n"
                 "h100-sxm-80gb,NVIDIA,SXM5,80,HBM3,3000,900,900,,,NVLink 4,900,Gen5,700,my lab,measured\n"
                 "MyGPU,ACME,PCIe,48,GDDR6,1000,200,,,,none,,Gen4,300,vendor sheet,\n")
    gpus = load_gpus(f)
    # The user row (same name, other case) replaced the shipped one and keeps the catalog spelling.
    assert "h100-sxm-80gb" not in gpus and gpus["H100-SXM-80GB"].name == "H100-SXM-80GB"
    assert gpus["H100-SXM-80GB"].hbm_bandwidth_bytes_per_s == 3000e9 and gpus["H100-SXM-80GB"].source == "my lab"
    assert get_gpu("H100", extra=f).hbm_bandwidth_bytes_per_s == 3000e9  # alias still resolves
    assert gpus["MyGPU"].pcie_bytes_per_s == 64e9 and gpus["MyGPU"].memory_bytes == 48e9
    assert load_gpus()["H100-SXM-80GB"].hbm_bandwidth_bytes_per_s == 3350e9  # shipped data untouched


def test_user_rows_yaml(tmp_path):
    f = tmp_path / "my_models.yaml"
    # Llama-3.1-8B with 16 layers: KV = 2 x 16 x 8 x 128 x 2 = 65,536 B/token.
    f.write_text("- model: Llama-3.1-8B\n  attention_type: GQA\n  num_layers: 16\n  hidden_size: 4096\n"
                 "  num_attention_heads: 32\n  num_kv_heads: 8\n  head_dim: 128\n  params_total_b_stated: 4\n"
                 "- model: Tiny-1B\n  attention_type: MHA\n  num_layers: 16\n  hidden_size: 2048\n"
                 "  num_attention_heads: 16\n  num_kv_heads: 16\n  head_dim: 128\n  params_total_b_stated: 1.2\n")
    models = load_models(f)
    assert models["Llama-3.1-8B"].kv_bytes_per_token() == 65_536
    assert models["Llama-3.1-8B"].weight_bytes("bf16") == 8e9  # 4e9 x 2
    assert models["Tiny-1B"].kv_bytes_per_token() == 2 * 16 * 16 * 128 * 2  # 131,072
    g = tmp_path / "gpus.yaml"
    g.write_text("- gpu: H100-PCIe-80GB\n  memory_gb_vendor: 80\n  mem_bandwidth_GBps: 2000\n"
                 "  bf16_dense_tflops: 756\n")
    assert get_gpu("H100-PCIe", extra=g).bf16_flops_per_s == 756e12  # now eligible


@pytest.mark.parametrize("cells,field,match", [
    ("Bad,X,PCIe,80,HBM,-5,100,,,,none,,Gen4,300,s,", "mem_bandwidth_GBps", "below the minimum"),
    ("Bad,X,PCIe,80,HBM,nan,100,,,,none,,Gen4,300,s,", "mem_bandwidth_GBps", "not a finite number"),
    ("Bad,X,PCIe,80000,HBM,2000,100,,,,none,,Gen4,300,s,", "memory_gb_vendor", "above the maximum"),
    ("Bad,X,PCIe,80,HBM,2000,lots,,,,none,,Gen4,300,s,", "bf16_dense_tflops", "not a number"),
    ("Bad,X,PCIe,80,HBM,2000,100,,,,none,,Gen4,300000,s,", "tdp_w", "above the maximum"),
])
def test_bad_gpu_rows(tmp_path, cells, field, match):
    f = tmp_path / "bad.csv"
    f.write_text(GPU_HEADER + "\n" + cells + "\n")
    with pytest.raises(InputError, match=match) as exc:
        load_gpus(f)
    assert exc.value.field == field and exc.value.row == 1 and str(f) in str(exc.value)


def test_bad_model_rows(tmp_path):
    f = tmp_path / "m.csv"
    f.write_text(MODEL_HEADER + "\nX,dense,GQA,32,4096,32,8,128,8,8,999\n")
    with pytest.raises(InputError, match="architecture gives 131072") as exc:  # 2*32*8*128*2
        load_models(f)
    assert exc.value.field == "kv_cache_bytes_per_token_bf16"
    f.write_text(MODEL_HEADER + "\nX,dense,GQA,32,4096,8,32,128,8,8,\n")
    with pytest.raises(InputError, match="exceeds num_attention_heads"):
        load_models(f)
    f.write_text(MODEL_HEADER + "\nX,dense,GQA,32.5,4096,32,8,128,8,8,\n")
    with pytest.raises(InputError, match="whole number"):
        load_models(f)
    f.write_text("model,num_layers\nX,32\n")
    with pytest.raises(InputError, match="missing column") as exc:
        load_models(f)
    assert exc.value.field == "attention_type"


def test_bad_files(tmp_path):
    with pytest.raises(InputError, match="file not found"):
        load_gpus(tmp_path / "nope.csv")
    y = tmp_path / "x.yaml"
    y.write_text("gpu: H100\n")
    with pytest.raises(InputError, match="list of row mappings"):
        load_gpus(y)
    e = tmp_path / "empty.csv"
    e.write_text("")
    with pytest.raises(InputError, match="empty"):
        load_gpus(e)
