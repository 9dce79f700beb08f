"""ServeGen day curves: gaps are never read as zero load, rescaling hits the requested mean, bad input is named."""

from __future__ import annotations

import numpy as np
import pytest

from fleetplan.costmodels.demand import TokenMix
from fleetplan.datasets.servegen import (
    fill_gaps,
    servegen_arrival_params,
    servegen_day_curve,
    servegen_demand,
    servegen_gap_windows,
    servegen_listed_gaps,
    servegen_series,
)
from fleetplan.errors import InputError, UnknownNameError

MIX = TokenMix(1000, 3000, 200, 500)
# m-mid, day 3, from servegen_total_rate_10min.csv: 14:50 -> 2103.286667 req/s, 15:00..16:50 (12 windows) are gaps
# (0 req/s except 14.128 at 16:50), 17:00 -> 2123.480000 req/s.
BEFORE, AFTER = 2103.286667, 2123.480000
SLOT_1450 = 14 * 6 + 5  # 10-min slot index of 14:50


def test_series_listing():
    rows = {r["name"]: r for r in servegen_series()}
    assert set(rows) == {"m-large", "m-mid", "m-small", "deepseek-r1", "mm-image"}
    assert rows["m-mid"]["days"] == 14 and rows["deepseek-r1"]["days"] == 1 and rows["mm-image"]["windows_10min"] == 144
    assert rows["m-mid"]["gap_windows"] == 102 and rows["m-small"]["gap_windows"] == 37  # PROVENANCE.md counts


def test_detected_gaps_match_the_shipped_list():
    listed = servegen_listed_gaps()
    for series in ("m-mid", "m-small"):
        assert servegen_gap_windows(series) == listed[series]
    assert servegen_gap_windows("m-large") == []
    assert (3, "15:00") in servegen_gap_windows("m-mid") and (3, "16:50") in servegen_gap_windows("m-mid")


def test_missing_window_is_interpolated_between_neighbours():
    c10 = servegen_day_curve("m-mid", day=3, window_length_s=600)
    assert c10[SLOT_1450] == pytest.approx(BEFORE)
    # 15:00 is 1/13 of the way from 14:50 to 17:00: 2103.286667 + 20.193333/13 = 2104.8400.
    assert c10[SLOT_1450 + 1] == pytest.approx(BEFORE + (AFTER - BEFORE) / 13)
    assert c10[SLOT_1450 + 12] == pytest.approx(BEFORE + (AFTER - BEFORE) * 12 / 13)  # 16:50 (14.1 req/s raw)
    hourly = servegen_day_curve("m-mid", day=3)
    assert hourly.shape == (24,)
    # Hour 15 = slots 1..6 after 14:50: mean offset 3.5/13 -> 2103.286667 + 20.193333*3.5/13 = 2108.7234.
    assert hourly[15] == pytest.approx(BEFORE + (AFTER - BEFORE) * 3.5 / 13)
    # Never read as zero load: every window of every day is above 5 % of the median (1901).
    for day in range(14):
        assert servegen_day_curve("m-mid", day, 600).min() > 0.05 * 1901
        assert servegen_day_curve("m-small", day, 600).min() > 0.05 * 1158.5


def test_mask_mode_and_mean_over_days():
    masked = servegen_day_curve("m-mid", day=3, gaps="mask")
    assert np.isnan(masked[15]) and np.isnan(masked[16]) and not np.isnan(masked[14])
    # With 'mean', a masked slot is averaged over the days that have it (15:00 is a gap on days 3 and 9, so 12 days),
    # not over 14 days with zeros.
    m10 = servegen_day_curve("m-mid", "mean", 600, gaps="mask")
    per_day = np.array([servegen_day_curve("m-mid", d, 600, gaps="mask") for d in range(14)])
    slot = SLOT_1450 + 1
    have = [per_day[d, slot] for d in range(14) if not np.isnan(per_day[d, slot])]
    assert len(have) == 12 and m10[slot] == pytest.approx(sum(have) / 12)
    # Hourly = mean of the six 10-min values.
    assert servegen_day_curve("m-mid", "mean")[2] == pytest.approx(m10[12:18].mean())
    # 5-minute windows repeat each 10-minute value.
    five = servegen_day_curve("deepseek-r1", 0, 300)
    assert five.shape == (288,) and five[0] == five[1] == pytest.approx(14.863333)


def test_fill_gaps_is_linear_and_cyclic():
    rates = np.array([10.0, 0.0, 30.0, 40.0, 0.0])
    gap = rates == 0
    # Index 1 lies between 10 and 30 -> 20. Index 4 lies between index 3 (40) and index 0 of the next cycle (10) -> 25.
    assert fill_gaps(rates, gap).tolist() == [10, 20, 30, 40, 25]
    out = fill_gaps(rates, gap, "mask")
    assert np.isnan(out[[1, 4]]).all() and out[0] == 10
    with pytest.raises(InputError, match="every window is a gap"):
        fill_gaps(rates, np.ones(5, bool))


def test_rescaled_demand_has_requested_mean():
    d = servegen_demand("m-small", 12.5, MIX, window_length_s=3600, day="mean")
    assert len(d.windows) == 24 and np.mean(d.rates_req_per_s) == pytest.approx(12.5, rel=1e-12)
    curve = servegen_day_curve("m-small", "mean")
    factor = 12.5 / curve.mean()
    assert d.rates_req_per_s == pytest.approx((curve * factor).tolist())
    assert "m-small" in d.source and "day mean" in d.source and f"x{factor:.6g}" in d.source
    assert "interpolated" in d.source and not d.synthetic
    # Peak = the highest 10-min rate inside the hour, times the same factor.
    ten = servegen_day_curve("m-small", "mean", 600)
    assert d.windows[20].rate_peak_req_per_s == pytest.approx(ten[120:126].max() * factor)
    assert all(w.rate_peak_req_per_s >= w.rate_mean_req_per_s for w in d.windows)
    assert d.windows[0].tokens == MIX
    # Masked gaps with day 3: hours 15 and 16 have no data at all.
    with pytest.raises(InputError, match=r"window 15 \(15:00\) of m-mid day 3.*gaps='interpolate'"):
        servegen_demand("m-mid", 10, MIX, day=3, gaps="mask")
    # Masked gaps with the mean over days still work.
    assert np.mean(servegen_demand("m-mid", 10, MIX, gaps="mask").rates_req_per_s) == pytest.approx(10)


def test_bad_servegen_input():
    with pytest.raises(UnknownNameError, match="did you mean 'm-mid'"):
        servegen_day_curve("m-midd")
    with pytest.raises(InputError, match="day 1 is not available for series deepseek-r1"):
        servegen_day_curve("deepseek-r1", 1)
    with pytest.raises(InputError, match="day 14"):
        servegen_day_curve("m-large", 14)
    with pytest.raises(InputError, match="window length 700"):
        servegen_day_curve("m-large", 0, 700)
    with pytest.raises(InputError, match="gap handling 'zero'"):
        servegen_day_curve("m-large", 0, 3600, gaps="zero")
    for bad in (0, -1, float("nan")):
        with pytest.raises(InputError, match="mean rate"):
            servegen_demand("m-large", bad, MIX)


def test_arrival_params_agree_with_the_totals():
    p = servegen_arrival_params("mm-image", 0)
    assert len(p) == 144 and not p["gap"].any()
    # The sum of the client rates is the shipped 10-min total (an independent file).
    assert p["rate_req_per_s"].to_numpy() == pytest.approx(servegen_day_curve("mm-image", 0, 600), rel=1e-6)
    assert p["rate_req_per_s"].iloc[0] == pytest.approx(5.558333, rel=1e-6)
    ok = p["cv_rate_weighted"] > 0
    # An equivalent Gamma renewal process has mean inter-arrival shape*scale = 1/rate.
    assert (p["gamma_shape"][ok] * p["gamma_scale_s"][ok] * p["rate_req_per_s"][ok]).to_numpy() == pytest.approx(1.0)
    assert ((p["gamma_share"] >= 0) & (p["gamma_share"] <= 1)).all()
