"""Trace readers, per-window demand and the synthetic generator. Expected values are worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from fleetplan.costmodels.demand import TokenMix
from fleetplan.datasets.traces import (
    ALL,
    Trace,
    day_curve_demand,
    list_traces,
    load_trace,
    peak_subinterval_s,
    read_azure_csv,
    read_day_curve_csv,
    read_generic_csv,
    read_mooncake_jsonl,
    synthetic_trace,
    token_mix_from_trace,
    trace_to_demand,
)
from fleetplan.errors import InputError, UnknownNameError

# Seven requests. With 60-s windows: window 0 = [0,60) holds t=0,1,2,10; window 1 = [60,120) holds 65,70;
# window 2 = [120,180) holds 130.
TINY = """timestamp,input_tokens,output_tokens,model
0,100,10,a
1,200,20,a
2,300,30,b
10,400,40,a
65,1000,5,b
70,3000,15,a
130,50,7,b
"""


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_generic_csv_windows_rates_and_percentiles(tmp_path):
    tr = read_generic_csv(write(tmp_path, "tiny.csv", TINY))
    assert len(tr) == 7 and tr.name == "tiny" and not tr.synthetic
    d = trace_to_demand(tr, window_length_s=60, by=())[ALL]
    assert len(d.windows) == 3  # floor(130 / 60) + 1
    w0, w1, w2 = d.windows
    # Window 0: 4 requests / 60 s. Peak over 6-s sub-intervals (60 / 10): [0,6) holds t=0,1,2 -> 3 / 6 = 0.5 req/s.
    assert w0.requests == 4 and w0.rate_mean_req_per_s == pytest.approx(4 / 60)
    assert w0.rate_peak_req_per_s == pytest.approx(0.5)
    # Inputs 100,200,300,400: mean 250; p95 at rank 0.95*3 = 2.85 -> 300 + 0.85*100 = 385.
    # Outputs 10,20,30,40: mean 25; p95 = 30 + 0.85*10 = 38.5.
    got = w0.tokens
    assert (got.input_tokens_mean, got.output_tokens_mean) == (250, 25)
    assert (got.input_tokens_p95, got.output_tokens_p95) == pytest.approx((385, 38.5))
    # Window 1: 2 requests (t=65 in [60,66), t=70 in [66,72)): mean 2/60, peak 1/6.
    # Inputs 1000,3000: mean 2000, p95 = 1000 + 0.95*2000 = 2900; outputs 5,15: mean 10, p95 = 5 + 0.95*10 = 14.5.
    assert w1.rate_mean_req_per_s == pytest.approx(2 / 60) and w1.rate_peak_req_per_s == pytest.approx(1 / 6)
    assert w1.tokens.input_tokens_mean == 2000 and w1.tokens.input_tokens_p95 == pytest.approx(2900)
    assert w1.tokens.output_tokens_p95 == pytest.approx(14.5)
    # Window 2: one request: mean = p95 = its own lengths.
    assert w2.requests == 1 and w2.tokens == TokenMix(50.0, 50.0, 7.0, 7.0)
    assert [w.start_s for w in d.windows] == [0, 60, 120]


def test_one_hour_window_peak_uses_one_minute_bins(tmp_path):
    tr = read_generic_csv(write(tmp_path, "tiny.csv", TINY))
    (w,) = trace_to_demand(tr, 3600, by=())[ALL].windows
    # 7 requests / 3600 s; peak: the minute [0,60) holds 4 requests -> 4 / 60.
    assert w.rate_mean_req_per_s == pytest.approx(7 / 3600) and w.rate_peak_req_per_s == pytest.approx(4 / 60)
    assert peak_subinterval_s(3600) == 60 and peak_subinterval_s(600) == 60 and peak_subinterval_s(60) == 6


def test_group_by_model_shares_windows(tmp_path):
    tr = read_generic_csv(write(tmp_path, "tiny.csv", TINY))
    d = trace_to_demand(tr, 60, by=("model",))
    assert sorted(d) == ["a", "b"]
    # Model a: t=0,1,10 | 70 | none. Model b: t=2 | 65 | 130.
    assert [w.requests for w in d["a"].windows] == [3, 1, 0]
    assert [w.requests for w in d["b"].windows] == [1, 1, 1]
    empty = d["a"].windows[2]
    # The empty window has rate 0 and model a's whole-trace mix: inputs 100,200,400,3000 -> mean 925.
    assert empty.rate_mean_req_per_s == 0 and empty.rate_peak_req_per_s == 0
    assert empty.tokens.input_tokens_mean == pytest.approx(925)
    assert any("no requests" in n for n in d["a"].notes)
    # A trace without a tenant column falls back to one group.
    assert list(trace_to_demand(tr, 60, by=("tenant",))) == [ALL]


def test_iso_timestamps_and_azure_and_mooncake_formats(tmp_path):
    iso = "timestamp,input_tokens,output_tokens\n2024-05-01T12:00:00,5,5\n2024-05-01T12:00:00.5,5,5\n" \
          "2024-05-01T12:01:00,5,5\n"
    assert read_generic_csv(write(tmp_path, "iso.csv", iso)).arrival_s.tolist() == [0.0, 0.5, 60.0]
    az = ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
          "2023-11-16 18:15:50.9951690,396,109\n2023-11-16 18:16:46.6805900,10,1\n")
    tr = load_trace(write(tmp_path, "az.csv", az))  # detected as Azure by its header
    # 50.9951690 - 46.6805900 = 4.3145790 s; one minute later exactly 60 s.
    assert tr.arrival_s == pytest.approx([0.0, 4.314579, 60.0], abs=1e-6)
    assert tr.input_tokens.tolist() == [374, 396, 10] and tr.start_datetime.startswith("2023-11-16T18:15:46")
    # 2024-style offsets: 01:00:00.5+01:00 is 00:00:00.5 UTC, half a second after the first row.
    az24 = ("TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00.000000+00:00,1,1\n"
            "2024-05-10 01:00:00.500000+01:00,1,1\n")
    assert read_azure_csv(write(tmp_path, "az24.csv", az24)).arrival_s.tolist() == [0.0, 0.5]
    mc = ('{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [0]}\n\n'
          '{"timestamp": 1500, "input_length": 20, "output_length": 3, "hash_ids": [0, 1]}\n'
          '{"timestamp": 61000, "input_length": 30, "output_length": 4, "hash_ids": []}\n')
    tr = load_trace(write(tmp_path, "mc.jsonl", mc))
    assert tr.arrival_s.tolist() == [0.0, 1.5, 61.0] and tr.output_tokens.tolist() == [2, 3, 4]


def test_shipped_traces_documented_counts_and_means():
    conv = load_trace("azure-conv")
    assert len(conv) == 19_366
    # PROVENANCE.md: ContextTokens mean 1,154.7, GeneratedTokens mean 211.1, span 3,501.7 s.
    assert round(conv.input_tokens.mean(), 1) == 1154.7 and round(conv.output_tokens.mean(), 1) == 211.1
    assert conv.span_s == pytest.approx(3501.7, abs=0.05)
    code = read_azure_csv("azure-code")
    assert len(code) == 8_819 and round(code.input_tokens.mean(), 1) == 2047.8
    moon = read_mooncake_jsonl("mooncake-conversation")
    # README table: average input 12,035, output 343; last timestamp 3,536,999 ms.
    assert len(moon) == 12_031 and round(moon.input_tokens.mean()) == 12035 and round(moon.output_tokens.mean()) == 343
    assert moon.arrival_s[-1] == pytest.approx(3536.999)
    assert load_trace("mooncake-synthetic").synthetic
    rows = {r["name"]: r for r in list_traces()}
    assert set(rows) == {"azure-conv", "azure-code", "mooncake-conversation", "mooncake-synthetic"}
    assert rows["azure-conv"]["requests"] == 19_366 and rows["azure-conv"]["license"] == "CC-BY-4.0"
    assert {"name", "file", "requests", "span_s", "license", "source"} <= set(rows["azure-code"])
    # The whole hour in one window: 19,366 / 3600 s = 5.379 req/s.
    (w,) = trace_to_demand(conv)[ALL].windows
    assert w.rate_mean_req_per_s == pytest.approx(19366 / 3600) and w.rate_peak_req_per_s > w.rate_mean_req_per_s
    with pytest.raises(ValueError):
        conv.arrival_s[0] = 1.0  # shared arrays are read-only


def test_unknown_trace_name_suggests():
    with pytest.raises(UnknownNameError, match="did you mean 'azure-conv'"):
        load_trace("azure-cnv")


def test_trace_window_and_time_scaling(tmp_path):
    tr = read_generic_csv(write(tmp_path, "tiny.csv", TINY))
    part = tr.window(60, 120)
    assert part.arrival_s.tolist() == [5.0, 10.0] and part.model.tolist() == ["b", "a"]
    assert tr.time_scaled(2.0).arrival_s.tolist() == [0, 0.5, 1, 5, 32.5, 35, 65]


BAD_CSV = [
    # (file body, expected fragments of the message)
    ("timestamp,input_tokens\n0,5\n", ["missing column 'output_tokens'", "bad.csv"]),
    ("timestamp,input_tokens,output_tokens\n", ["no requests"]),
    ("", ["empty"]),
    ("timestamp,input_tokens,output_tokens\n0,5,5\n1,-3,5\n", ["row 2", "'input_tokens'", "-3 tokens", "1..2,000,000"]),
    ("timestamp,input_tokens,output_tokens\n0,5,5\n1,5,\n", ["row 2", "'output_tokens'", "empty"]),
    ("timestamp,input_tokens,output_tokens\n0,5,nan\n", ["row 1", "'output_tokens'", "not a number"]),
    ("timestamp,input_tokens,output_tokens\n0,5,inf\n", ["row 1", "'output_tokens'", "not a token count"]),
    ("timestamp,input_tokens,output_tokens\n0,5000000,5\n", ["row 1", "5e+06 tokens", "outside"]),
    ("timestamp,input_tokens,output_tokens\n0,5.5,5\n", ["row 1", "whole number"]),
    ("timestamp,input_tokens,output_tokens\n0,5,5\n10,5,5\n4,5,5\n", ["row 3", "'timestamp'", "out of order",
                                                                      "sort the file"]),
    ("timestamp,input_tokens,output_tokens\n0,5,5\n40000000000,5,5\n", ["row 2", "366 days", "milliseconds"]),
    ("timestamp,input_tokens,output_tokens\nnoon,5,5\n", ["row 1", "not a timestamp"]),
    ("timestamp,input_tokens,output_tokens\n0,5,5\nnoon,5,5\n", ["row 2", "not a number of seconds"]),
    ("timestamp,input_tokens,output_tokens,model\n0,5,5,a\n1,5,5,\n", ["row 2", "'model'", "empty model"]),
]


@pytest.mark.parametrize(("body", "fragments"), BAD_CSV)
def test_bad_generic_csv(tmp_path, body, fragments):
    with pytest.raises(InputError) as err:
        read_generic_csv(write(tmp_path, "bad.csv", body))
    msg = str(err.value)
    assert "bad.csv" in msg
    for f in fragments:
        assert f in msg


def test_bad_azure_and_mooncake(tmp_path):
    with pytest.raises(InputError, match="missing column 'GeneratedTokens'"):
        read_azure_csv(write(tmp_path, "a.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.6805900,3\n"))
    with pytest.raises(InputError, match=r"a2.csv, row 1, field 'TIMESTAMP'.*not a timestamp"):
        read_azure_csv(write(tmp_path, "a2.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n18:15,3,4\n"))
    with pytest.raises(InputError, match=r"m.jsonl, row 2: not JSON"):
        read_mooncake_jsonl(write(tmp_path, "m.jsonl", '{"timestamp": 0, "input_length": 1, "output_length": 1}\n{x\n'))
    with pytest.raises(InputError, match=r"row 1, field 'output_length': missing field"):
        read_mooncake_jsonl(write(tmp_path, "m2.jsonl", '{"timestamp": 0, "input_length": 1}\n'))
    with pytest.raises(InputError, match=r"row 3, field 'timestamp'.*out of order"):
        # line 2 is blank and skipped; the decrease is on line 3
        read_mooncake_jsonl(write(tmp_path, "m3.jsonl", '{"timestamp": 5, "input_length": 1, "output_length": 1}\n\n'
                                                       '{"timestamp": 1, "input_length": 1, "output_length": 1}\n'))
    with pytest.raises(InputError, match="no requests"):
        read_mooncake_jsonl(write(tmp_path, "m4.jsonl", "\n"))
    with pytest.raises(InputError, match="file not found"):
        load_trace(tmp_path / "nope.csv")


@pytest.mark.parametrize("length", [30, 7200, float("nan"), 0])
def test_window_length_out_of_range(tmp_path, length):
    tr = read_generic_csv(write(tmp_path, "tiny.csv", TINY))
    with pytest.raises(InputError, match="window length"):
        trace_to_demand(tr, window_length_s=length)


def test_trace_record_validates():
    with pytest.raises(InputError, match="row 2, field 'arrival_s'.*out of order"):
        Trace(np.array([1.0, 0.5]), np.array([1, 1]), np.array([1, 1]))
    with pytest.raises(InputError, match="shape"):
        Trace(np.array([0.0, 1.0]), np.array([1, 1]), np.array([1]))


def test_synthetic_trace_is_seeded_and_labeled():
    mix = TokenMix(1000, 3000, 200, 500)
    a = synthetic_trace(10.0, 3600, mix, seed=7, model="m")
    b = synthetic_trace(10.0, 3600, mix, seed=7, model="m")
    assert np.array_equal(a.arrival_s, b.arrival_s) and a.synthetic and "synthetic" in a.name
    # N ~ Poisson(36,000), sd 190: 3 % is over 5 sd.
    assert len(a) == pytest.approx(36_000, rel=0.03)
    # Lognormal with mean 1000, p95 3000 (sigma 0.931): the sample mean's sd is about 1000*1.17/190 = 6 tokens.
    got = token_mix_from_trace(a)
    assert got.input_tokens_mean == pytest.approx(1000, rel=0.03)
    assert got.input_tokens_p95 == pytest.approx(3000, rel=0.05)
    assert got.output_tokens_mean == pytest.approx(200, rel=0.03)
    d = trace_to_demand(a, 600)["m"]
    assert d.synthetic and "synthetic" in d.source
    assert np.mean(d.rates_req_per_s) == pytest.approx(10, rel=0.03)
    with pytest.raises(InputError, match="positive"):
        synthetic_trace(-1, 10, mix, seed=1)


def test_day_curve_csv_and_demand(tmp_path):
    c = read_day_curve_csv(write(tmp_path, "h.csv", "hour,rate_req_per_s\n0,1.0\n1,3.0\n2,2\n"))
    assert c.window_length_s == 3600 and c.rates_req_per_s.tolist() == [1, 3, 2]
    c2 = read_day_curve_csv(write(tmp_path, "w.csv", "window_start_s,rate_req_per_s\n0,1\n900,2\n1800,0\n"))
    assert c2.window_length_s == 900
    mix = TokenMix(100, 200, 10, 20)
    d = c.to_demand(mix)
    assert d.rates_req_per_s == [1, 3, 2] and d.windows[1].start_s == 3600 and d.windows[2].tokens == mix
    d2 = day_curve_demand([1.0, 2.0], 1800, mix, "test", peaks_req_per_s=[1.5, 2.0])
    assert d2.windows[0].rate_peak_req_per_s == 1.5
    with pytest.raises(InputError, match=r"row 2, field 'rate_req_per_s'.*negative"):
        read_day_curve_csv(write(tmp_path, "n.csv", "hour,rate_req_per_s\n0,1\n1,-1\n"))
    with pytest.raises(InputError, match="equal steps"):
        read_day_curve_csv(write(tmp_path, "s.csv", "window_start_s,rate_req_per_s\n0,1\n900,2\n2000,1\n"))
    with pytest.raises(InputError, match="missing column 'rate_req_per_s'"):
        read_day_curve_csv(write(tmp_path, "m.csv", "hour,rate\n0,1\n"))
    with pytest.raises(InputError, match="interpolate"):
        day_curve_demand([1.0, float("nan")], 3600, mix, "test")


def test_trace_time_units_are_given_or_the_implied_rate_is_checked(tmp_path):
    # issue 28 item 2: millisecond timestamps read as seconds. 401 requests 250 ms apart: as seconds they span
    # 400 × 250 = 100,000 s (1.2 days) at 400 / 100,000 = 0.004 req/s; refused. As timestamp_ms: 100 s, 4 req/s.
    rows = "".join(f"{250 * i},5,5\n" for i in range(401))
    with pytest.raises(InputError, match=r"span 100,000 s \(1.2 days\) at 0.004 req/s.*timestamp_ms"):
        read_generic_csv(write(tmp_path, "ms.csv", "timestamp,input_tokens,output_tokens\n" + rows))
    tr = read_generic_csv(write(tmp_path, "ms2.csv", "timestamp_ms,input_tokens,output_tokens\n" + rows))
    assert tr.arrival_s[-1] == pytest.approx(100.0) and tr.arrival_s[1] == pytest.approx(0.25)
    tr = read_generic_csv(write(tmp_path, "s.csv", "timestamp_s,input_tokens,output_tokens\n" + rows))
    assert tr.arrival_s[-1] == pytest.approx(100_000.0)  # seconds stated: taken as given
    # Found by a fresh user: two epoch-millisecond timestamps 1 s apart (1,700,000,000,000 and +1,000) span only
    # 1,000 s read as seconds, under the day the rate check needs; as seconds they are in the year ~55,900 (1e11 s
    # after 1970 is already the year 5138): refused. As timestamp_ms they are 1 s apart.
    ep = "1700000000000,5,5\n1700000001000,5,5\n"
    with pytest.raises(InputError, match=r"after the year 5000.*timestamp_ms"):
        read_generic_csv(write(tmp_path, "ep.csv", "timestamp,input_tokens,output_tokens\n" + ep))
    tr = read_generic_csv(write(tmp_path, "ep2.csv", "timestamp_ms,input_tokens,output_tokens\n" + ep))
    assert tr.arrival_s[-1] - tr.arrival_s[0] == pytest.approx(1.0)


def test_a_column_named_twice_is_refused(tmp_path):
    # Found by a fresh user: pandas read `timestamp,input_tokens,output_tokens,timestamp` as 'timestamp' and
    # 'timestamp.1' and used the first without a word.
    with pytest.raises(InputError, match="names column 'timestamp' twice"):
        read_generic_csv(write(tmp_path, "d.csv", "timestamp,input_tokens,output_tokens,timestamp\n0,5,5,9\n"))


@pytest.mark.parametrize("body, row, words", [
    # every row one cell longer than the header: pandas took the first column as the index and shifted the others
    # (the timestamp read from the input_tokens cell) without a word
    ("0,100,10,5\n1,100,10,6\n", 1, "4 cells but the header has 3 columns"),
    # one longer row among good ones: pandas failed later with "row 2 ... is empty", blaming the wrong row
    ("0,100,10\n1,100,10,5\n", 2, "remove the extra cells"),
    ("0,100,10\n\n1,100\n", 2, "2 cells but the header has 3 columns"),  # the blank line is not counted
])
def test_a_row_whose_cells_do_not_match_the_header_is_refused(tmp_path, body, row, words):
    with pytest.raises(InputError, match=words) as exc:
        read_generic_csv(write(tmp_path, "x.csv", "timestamp,input_tokens,output_tokens\n" + body))
    assert exc.value.row == row, str(exc.value)
