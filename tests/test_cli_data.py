"""``fleetplan data ...``: JSON/CSV output parseable, user rows, bad input -> exit code 2 without a traceback."""

from __future__ import annotations

import csv
import dataclasses
import io
import json

import pytest
from click.testing import CliRunner

from fleetplan.cli.main import main
from fleetplan.datasets.catalog.gpus import load_gpu_specs
from fleetplan.datasets.catalog.models import load_models
from fleetplan.datasets.catalog.prices import load_gpu_prices


def run(*args: str):
    return CliRunner().invoke(main, ["data", *args])


def test_models_json_shows_costmodels_bytes():
    r = run("models", "--format", "json")
    assert r.exit_code == 0, r.output
    rows = {m["name"]: m for m in json.loads(r.output)}
    # Llama-3.1-8B: KV 2*32*8*128*2 = 131,072 B/token; weights 8.03e9 params x 2 / 1 / 0.5 bytes.
    assert rows["Llama-3.1-8B"]["kv_bytes_per_token_bf16"] == 131_072
    assert rows["Llama-3.1-70B"]["kv_bytes_per_token_bf16"] == 327_680
    assert (rows["Llama-3.1-8B"]["weight_bytes_bf16"], rows["Llama-3.1-8B"]["weight_bytes_fp8"],
            rows["Llama-3.1-8B"]["weight_bytes_int4"]) == (16_060_000_000, 8_030_000_000, 4_015_000_000)
    assert rows["DeepSeek-V3"]["kv_heads"] is None


def test_gpus_csv_parseable_and_ineligible_listed():
    r = run("gpus", "--format", "csv")
    assert r.exit_code == 0, r.output
    # CSV has the gpus.csv columns (what --extra reads); JSON has the derived columns (eligible, ...).
    rows = {g["gpu"]: g for g in csv.DictReader(io.StringIO(r.output))}
    assert len(rows) == 15
    eligible = {g["name"]: g["eligible"] for g in json.loads(run("gpus", "--format", "json").output)}
    assert eligible["H100-PCIe-80GB"] is False and rows["H100-PCIe-80GB"]["bf16_dense_tflops"] == ""
    assert float(rows["H100-SXM-80GB"]["mem_bandwidth_GBps"]) == 3350.0


@pytest.mark.parametrize("sub", ["gpus", "models", "prices", "egress"])
def test_table_default(sub):
    r = run(sub)
    assert r.exit_code == 0, r.output
    assert "┃" in r.output  # a rich table


def test_prices_filters_json():
    r = run("prices", "--gpu", "a100-80gb", "--cloud", "GCP", "--region", "us-central1", "--pricing-model",
            "on-demand", "--format", "json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    # a2-ultragpu-{1,2,4,8}g in zones a and c: 8 rows, each 2.94582 USD per GPU-hour (1.09962 + 1.84620).
    assert len(rows) == 8
    assert {round(x["usd_per_gpu_hour"], 5) for x in rows} == {2.94582}


def test_egress_csv_has_gb_rates():
    r = run("egress", "--format", "csv")
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(r.output)))
    gcp_cross = [x for x in rows if x["cloud"] == "gcp" and x["route_class"] == "cross_zone"]
    assert float(gcp_cross[0]["usd_per_gb"]) == pytest.approx(0.01 / 1.073741824, abs=1e-6)


def test_traces_listing():
    r = run("traces", "--format", "json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert {"name", "file", "requests", "span_s", "license", "source"} <= set(rows[0])
    assert any(x["license"] == "CC-BY-4.0" for x in rows)


def test_extra_rows_override(tmp_path):
    f = tmp_path / "m.yaml"
    f.write_text("- {model: Llama-3.1-8B, attention_type: GQA, num_layers: 16, hidden_size: 4096, "
                 "num_attention_heads: 32, num_kv_heads: 8, head_dim: 128, params_total_b_stated: 4}\n")
    r = run("models", "--extra", str(f), "--format", "json")
    assert r.exit_code == 0, r.output
    rows = {m["name"]: m for m in json.loads(r.output)}
    assert rows["Llama-3.1-8B"]["kv_bytes_per_token_bf16"] == 65_536  # 2*16*8*128*2


@pytest.mark.parametrize("sub,content,expect", [
    ("gpus", "gpu,memory_gb_vendor,mem_bandwidth_GBps,bf16_dense_tflops\nX,80,-3,100\n", "mem_bandwidth_GBps"),
    ("gpus", "gpu,memory_gb_vendor,mem_bandwidth_GBps,bf16_dense_tflops\nX,80,NaN,100\n", "not a finite"),
    ("gpus", "gpu,memory_gb_vendor\nX,80\n", "missing column"),
    ("gpus", "gpu,memory_gb_vendor,mem_bandwidth_GBps,bf16_dense_tflops\nX,80000,3000,100\n", "above the maximum"),
    ("models", "model,num_layers\nX,3\n", "missing column"),
    ("prices", "provider,instance,region,gpu,gpu_count,usd_per_hour,pricing_model\naws,x,r,H100,8,-2,spot\n",
     "usd_per_hour"),
])
def test_bad_extra_exit_2_without_traceback(tmp_path, sub, content, expect):
    f = tmp_path / "bad.csv"
    f.write_text(content)
    r = run(sub, "--extra", str(f))
    assert r.exit_code == 2
    assert r.output.startswith("Error:") and expect in r.output
    if expect != "missing column":
        assert "row 1" in r.output  # names the row
    assert "Traceback" not in r.output
    assert str(f) in r.output  # names the file


def test_unknown_names_exit_2():
    r = run("prices", "--gpu", "H1000")
    assert r.exit_code == 2 and "did you mean" in r.output and "Traceback" not in r.output
    r = run("prices", "--cloud", "awz")
    assert r.exit_code == 2 and "did you mean 'aws'" in r.output
    r = run("gpus", "--extra", "does-not-exist.csv")
    assert r.exit_code == 2 and "file not found" in r.output


@pytest.mark.parametrize("sub", ["gpus", "models", "prices"])
def test_csv_export_reads_back_through_extra(sub, tmp_path):
    # The CSV a user edits is the --extra file format: exported, read back through --extra, exported again, it is
    # the same text (every row is the user's now and replaces the shipped row of its name or key).
    r = run(sub, "--format", "csv")
    assert r.exit_code == 0, r.output
    f = tmp_path / f"{sub}.csv"
    f.write_text(r.output)
    again = run(sub, "--format", "csv", "--extra", str(f))
    assert again.exit_code == 0, again.output
    assert again.output == r.output


def test_csv_export_gives_identical_records(tmp_path):
    # Record by record: the loaders read the exported file into the same GpuSpec, Model and GpuPrice records (a
    # price read from a user's file is marked as the user's, with its file as the snapshot, and carries no flags).
    for sub, load in (("gpus", load_gpu_specs), ("models", load_models)):
        f = tmp_path / f"{sub}.csv"
        f.write_text(run(sub, "--format", "csv").output)
        assert load(f) == load(), sub
    f = tmp_path / "prices.csv"
    f.write_text(run("prices", "--format", "csv").output)
    shipped = load_gpu_prices()
    back = [p for p in load_gpu_prices(f) if p.user]
    assert len(back) == len(shipped)
    assert [dataclasses.replace(p, user=False, snapshot="", flags=()) for p in back] == [
        dataclasses.replace(p, snapshot="", flags=()) for p in shipped]
