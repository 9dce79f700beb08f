"""`fleetplan ledger split` and `fleetplan ledger whatif` through click's CliRunner."""

import csv
import io
import json
import math

import pytest
from click.testing import CliRunner

from fleetplan.cli.grid import parse_vary
from fleetplan.cli.main import main
from fleetplan.datasets.catalog.prices import load_gpu_prices
from fleetplan.errors import InputError

BASE = ["ledger", "split", "--model", "llama-3.1-70b", "--prefill-site", "aws:us-east-1", "--decode-site",
        "aws:us-west-2", "--trace", "azure-conv", "--rate-req-per-s", "2", "--no-prompt-break-even",
        # one consistent price snapshot for both sites (split_default.yaml says why)
        "--price-date", "2025-05-31"]


def test_split_json_one_object():
    r = CliRunner().invoke(main, BASE + ["--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert set(d["options"]) == {"colocated", "disaggregated", "split"}
    for o in d["options"].values():
        for k in ("total_usd_per_day", "egress_usd_per_day", "gpu_usd_per_day", "ttft_added_s"):
            assert isinstance(o[k], float | int)
        # total = GPU + egress when energy is not billed
        assert o["total_usd_per_day"] == o["gpu_usd_per_day"] + o["egress_usd_per_day"] or abs(
            o["total_usd_per_day"] - o["gpu_usd_per_day"] - o["egress_usd_per_day"]) < 1e-6
    assert "break_even_egress_usd_per_gb" in d and "break_even_prompt_tokens" in d and d["verdict"]
    # us-west-2's H100 price comes from the catalog (12.29 USD/GPU-hour, SkyPilot extract): GPUs × 24 × 12.29.
    g = d["options"]["colocated"]["gpus"]["colocated"]
    assert abs(d["options"]["colocated"]["gpu_usd_per_day"] - g * 24 * 12.29) < 1e-6


def test_split_csv_and_files(tmp_path):
    x, c = tmp_path / "l.xlsx", tmp_path / "l.csv"
    r = CliRunner().invoke(main, BASE + ["--format", "csv", "--xlsx", str(x), "--csv-out", str(c)])
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(r.output)))
    assert {row["category"] for row in rows} >= {"gpu", "egress", "energy"}
    assert c.read_text() == r.output
    assert x.stat().st_size > 0
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_missing_price_exit_2_no_traceback_no_file(tmp_path):
    x = tmp_path / "l.xlsx"
    args = ["ledger", "split", "--model", "llama-3.1-70b", "--prefill-site", "aws:us-east-1", "--decode-site",
            "aws:eu-west-1", "--xlsx", str(x)]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2
    assert "aws:eu-west-1" in r.output and "H100-SXM-80GB" in r.output and "Traceback" not in r.output
    assert not x.exists()
    ok = CliRunner().invoke(main, args + ["--decode-usd-per-gpu-hour", "9", "--no-prompt-break-even",
                                          "--format", "json"])
    assert ok.exit_code == 0, ok.output
    assert x.exists()


def test_bad_inputs_exit_2():
    for extra in (["--model", "llama-9"], ["--decode-site", "nowhere"], ["--egress-usd-per-gb", "-1"]):
        args = list(BASE)
        if extra[0] in args:
            args[args.index(extra[0]) + 1] = extra[1]
        else:
            args += extra
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2, (extra, r.output)
        assert "Error:" in r.output and "Traceback" not in r.output


def test_whatif_grid(tmp_path):
    out, png = tmp_path / "w.csv", tmp_path / "w.png"
    args = ["ledger", "whatif", "--model", "llama-3.1-70b", "--prefill-site", "aws:us-east-1", "--decode-site",
            "aws:us-west-2", "--rate-req-per-s", "2", "--price-date", "2025-05-31",
            "--vary", "egress_usd_per_gb=0:0.02:2",
            "--vary", "prompt_tokens=1024,2048", "--workers", "1", "--format", "json", "--out", str(out),
            "--plot", str(png)]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert [(x["egress_usd_per_gb"], x["prompt_tokens"]) for x in rows] == [
        (0.0, 1024.0), (0.0, 2048.0), (0.02, 1024.0), (0.02, 2048.0)]
    # Same prompt length: the split's cost moves by 0.02 × cross-site GB, the single-site options do not move.
    assert rows[0]["colocated_usd_per_day"] == rows[2]["colocated_usd_per_day"]
    assert rows[2]["split_usd_per_day"] > rows[0]["split_usd_per_day"]
    assert all(x["verdict"] for x in rows)
    assert out.exists() and png.stat().st_size > 0
    bad = CliRunner().invoke(main, args[:-4] + ["--vary", "nonsense=1"])
    assert bad.exit_code == 2 and "sweep variable" in bad.output


WHATIF = ["ledger", "whatif", "--model", "llama-3.1-70b", "--prefill-site", "aws:us-east-1", "--decode-site",
          "aws:us-west-2", "--price-date", "2025-05-31", "--workers", "1", "--format", "json"]


def test_whatif_infeasible_cell_names_the_binding_constraint():
    # A 16,384-token mean prompt cannot meet TTFT 2 s at any tp: the prefill binds, not the decode GPU. The verdict
    # names the TTFT target, its value and each tp's TTFT, largest tp first.
    r = CliRunner().invoke(main, WHATIF + ["--vary", "prompt_tokens=16384"])
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.output)
    v = row["verdict"]
    assert v.startswith("infeasible: field 'ttft_slo_s'"), v
    assert "TTFT (the prefill) binds" in v and "exceeds the target 2.000 s" in v and "--ttft-slo-s" in v
    assert v.index("tp 8:") < v.index("tp 4:") < v.index("tp 2:")
    assert "field 'decode_gpu'" not in v
    # Independent check that TTFT is what binds: the tp-8 TTFT the message quotes, as the target, makes the cell
    # feasible (same prompts, same GPU).
    quoted = float(v.split("tp 8: TTFT p95 ")[1].split(" s")[0])
    ok = CliRunner().invoke(main, WHATIF + ["--vary", "prompt_tokens=16384", "--ttft-slo-s", str(quoted * 1.05)])
    assert ok.exit_code == 0, ok.output
    assert not json.loads(ok.output)[0]["verdict"].startswith("infeasible"), ok.output
    # The table: the long verdict under it (it filled a 14-character column 40 lines high), numbers without
    # exponents (the prompt column read 1.638e+04), headers that wrap rather than end in '…'.
    t = CliRunner().invoke(main, [a for a in WHATIF if a not in ("--format", "json")]
                           + ["--vary", "prompt_tokens=16384,1024"])
    assert t.exit_code == 0, t.output
    assert "row 1 verdict: infeasible: field 'ttft_slo_s'" in t.output and "16,384" in t.output
    assert "e+0" not in t.output and "usd_…" not in t.output and "prompt" in t.output


def test_whatif_never_says_split_saves_when_the_split_misses_its_slo():
    # At an 8,192-token mean prompt the colocated designs meet TTFT 2 s but the split (its KV transfer added to
    # TTFT) does not: the verdict names the single site and the miss, never "split saves".
    r = CliRunner().invoke(main, WHATIF + ["--vary", "prompt_tokens=8192"])
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.output)
    assert row["split_slo_ok"] is False
    assert row["verdict"].endswith("(the split misses the SLO)") and "split saves" not in row["verdict"]
    # No cost or savings for a design that misses its SLO; the sizing column says why it misses.
    assert row["split_usd_per_day"] is None and row["savings_usd_per_day"] is None
    assert "split misses the SLO: TTFT p95" in row["sizing"] and row["split_ttft_p95_s"] > 2.0
    # Colocated needs 336 GPUs here (24 at 4,096 tokens): TTFT binds at tp 8, the p95 prompt of ~29k tokens
    # prefilling in 1.81 s of the 2 s target leaves little time to queue, so a replica serves ~0.15 req/s:
    # 8 × ceil(5.53 req/s / (0.1496 × 0.9)) = 8 × 42 = 336. The row says so.
    assert "colocated: TTFT binds at tp 8" in row["sizing"], row["sizing"]
    cap = float(row["sizing"].split("colocated: ")[1].split(" req/s per replica")[0].rsplit(", ", 1)[1])
    assert row["colocated_gpus"] == 8 * math.ceil(5.53042198907183 / (cap * 0.9))


def test_decode_pool_failure_names_tpot_when_tpot_binds():
    # A 1 ms TPOT target: no decode step of a 70B model at batch 1 is that fast (memory bandwidth alone: 141 GB of
    # weights / (8 × 3.35 TB/s) = 5.3 ms), so TPOT binds, and the message says so with the field --tpot-slo-s sets.
    r = CliRunner().invoke(main, BASE + ["--tpot-slo-s", "0.001"])
    assert r.exit_code == 2
    assert "field 'tpot_slo_s'" in r.output and "TPOT" in r.output and "binds" in r.output, r.output
    assert "Traceback" not in r.output


def test_vary_empty_item_and_two_part_range_refused():

    for text, words in (("prompt_tokens=1,,2", "value 2 of the list is empty"),
                        ("prompt_tokens=1,2,", "value 3 of the list is empty"),
                        # was "values must be numbers": the range lacks its COUNT
                        ("prompt_tokens=1:2", "a range is START:STOP:COUNT (three numbers")):
        try:
            parse_vary(text)
        except InputError as exc:
            assert words in str(exc) and text in str(exc), str(exc)
        else:
            raise AssertionError(f"{text} accepted")
    assert parse_vary("prompt_tokens=1, 2") == ("prompt_tokens", [1.0, 2.0])


def test_vary_count_out_of_range_names_the_count():
    # was "values must be numbers" although START and STOP are numbers: the COUNT is what is wrong
    for text in ("egress_usd_per_gb=0.01:0.09:0", "egress_usd_per_gb=0.01:0.09:100000",
                 "egress_usd_per_gb=0.01:0.09:2.5"):
        with pytest.raises(InputError, match=r"COUNT .* must be a whole number from 1 to 1000") as exc:
            parse_vary(text)
        assert text in str(exc.value) and "values must be numbers" not in str(exc.value)
    with pytest.raises(InputError, match="START and STOP must be numbers"):
        parse_vary("egress_usd_per_gb=a:0.09:3")
    with pytest.raises(InputError, match="finite"):
        parse_vary("egress_usd_per_gb=0:inf:2")
    # 0.01 to 0.09 in 5 values: steps of (0.09 - 0.01) / 4 = 0.02
    assert parse_vary("egress_usd_per_gb=0.01:0.09:5") == ("egress_usd_per_gb", [0.01, 0.03, 0.05, 0.07, 0.09])
    # prompt_tokens is a mean length (the split workbook itself varies it by x0.25), so a fraction is a value
    assert parse_vary("prompt_tokens=1.5") == ("prompt_tokens", [1.5])


def test_sweep_window_error_names_vary():
    r = CliRunner().invoke(main, ["sweep", "--vary", "window_length_s=7"])
    assert r.exit_code == 2, r.output
    assert "--vary window_length_s" in r.output and "7" in r.output and "--window," not in r.output, r.output


def test_json_break_even_none_is_null_as_the_table_says():
    # Here the split costs more than colocated even with free egress (table: "none"); the break-even egress price
    # solving cost(split at p) = cost(best) is negative, which JSON printed as a number. Now null, with a note.
    r = CliRunner().invoke(main, BASE + ["--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["options"]["split"]["gpu_usd_per_day"] > d["options"]["colocated"]["total_usd_per_day"]
    assert d["break_even_egress_usd_per_gb"] is None
    assert d["break_even_egress_note"].startswith("none")
    t = CliRunner().invoke(main, BASE)
    assert "Break-even cross-site egress: none" in t.output


def test_break_even_egress_of_a_split_whose_gpus_cost_what_one_site_costs():
    # The README's command (the default rate): the split's GPUs cost what colocated costs, to the cent, so with free
    # egress it costs the same. It said "none (the split costs more even with free egress)": a rounding residue
    # (tb - fixed of about -1e-12 USD/day) read as a negative break-even price.
    args = [a for a in BASE if a not in ("--rate-req-per-s", "2")]
    r = CliRunner().invoke(main, args + ["--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["options"]["split"]["gpu_usd_per_day"] == pytest.approx(d["options"]["colocated"]["total_usd_per_day"])
    assert d["break_even_egress_usd_per_gb"] == 0.0 and "costs the same" in d["break_even_egress_note"]
    assert "with free egress it would cost the same" in d["verdict"]
    t = CliRunner().invoke(main, args)
    assert "Break-even cross-site egress: none (with free egress the split costs the same" in t.output, t.output


def test_output_with_the_wrong_suffix_refused(tmp_path):
    x = tmp_path / "x.csv"
    r = CliRunner().invoke(main, BASE + ["--xlsx", str(x)])
    assert r.exit_code == 2 and "--xlsx writes a .xlsx file" in r.output and "x.xlsx" in r.output, r.output
    assert not x.exists()


def test_split_yaml_files_are_relative_to_the_yaml(tmp_path, monkeypatch):
    # prices_file in a split YAML is found beside the YAML, whatever the current directory (it was resolved against
    # the current directory). The user's 9 USD/GPU-h row for us-west-2 gives the same totals as the same price given
    # on the command line (--decode-usd-per-gpu-hour 9), an independent path to that price.
    sub = tmp_path / "design"
    sub.mkdir()
    (sub / "my_prices.csv").write_text(
        "provider,instance,region,gpu,gpu_count,usd_per_hour,pricing_model\n"
        "aws,p5.48xlarge,us-west-2,H100-SXM-80GB,8,72,on-demand\n")
    (sub / "split.yaml").write_text(
        "model: llama-3.1-70b\nprefill_site: aws:us-east-1\ndecode_site: aws:us-west-2\ntrace: azure-conv\n"
        "price_date: '2025-05-31'\nprices_file: my_prices.csv\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    args = ["--vary", "egress_usd_per_gb=0.02", "--workers", "1", "--format", "json"]
    r = CliRunner().invoke(main, ["whatif", str(sub / "split.yaml"), *args])
    assert r.exit_code == 0, r.output
    given = CliRunner().invoke(main, ["whatif", "--decode-usd-per-gpu-hour", "9", *args])
    assert given.exit_code == 0, given.output
    (a,), (b,) = json.loads(r.output), json.loads(given.output)
    assert a["colocated_usd_per_day"] == b["colocated_usd_per_day"]


def test_price_date_must_be_a_date_with_a_snapshot_on_or_before_it():
    earliest = min(p.as_of for p in load_gpu_prices() if p.as_of)
    args = [a for a in BASE if a != "2025-05-31"]
    at = args.index("--price-date") + 1
    for bad, words in (("2025-13-45", "is not a date"), ("2025-02-29", "is not a date"),
                       ("1999-01-01", f"the earliest is {earliest}")):
        r = CliRunner().invoke(main, args[:at] + [bad] + args[at:])
        assert r.exit_code == 2, (bad, r.output)
        assert "price_date" in r.output and bad in r.output and words in r.output and "Traceback" not in r.output
    ok = CliRunner().invoke(main, args[:at] + [earliest] + args[at:])
    assert ok.exit_code == 0, ok.output


def test_one_site_break_even_egress_is_not_applicable():
    args = BASE[:BASE.index("--prefill-site") + 1] + ["aws:us-west-2"] + BASE[BASE.index("--prefill-site") + 2:]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert "Break-even cross-site egress: n/a (one site" in r.output and "0.00000 USD/GB" not in r.output


def test_a_bad_option_value_is_blamed_on_the_option_not_on_the_file_it_overrides():
    # whatif reads split_default.yaml and the command line overrides it: --margin 0.95 was reported as
    # "split_default.yaml, field 'margin'".
    r = CliRunner().invoke(main, ["whatif", "--margin", "0.95", "--vary", "egress_usd_per_gb=0.01"])
    assert r.exit_code == 2 and "field '--margin'" in r.output and "split_default.yaml" not in r.output, r.output
