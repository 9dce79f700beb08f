"""Forecast accuracy, measured (issue 14, item 6): backtest the re-planner's forecasters on held-out ServeGen days.

Run: `.venv/bin/python benchmarks/bench_forecast.py [--train-days 10] [--methods blend seasonal_naive autoets mstl]`
(needs the `forecast` extra, statsforecast, for the library methods; `make test` installs it through dev).

Data: the shipped ServeGen totals (datasets/data/traces/servegen), the three series with 14 days (m-large, m-mid,
m-small), in 10-minute slots. Missing collection windows (gaps,
:func:`fleetplan.datasets.servegen.servegen_gap_windows`)
are never read as zero: they are not fed to the forecaster (which interpolates a slot with no observation) and they
are not scored.

Method: for each series and forecast method, a :class:`fleetplan.solvers.online.Forecaster` exactly as the service
runs it (default OnlineConfig but the method; history of ``history_days`` = 7 days in 600-s slots) with a day curve
of hourly windows = the per-slot mean of the training days (as a scenario's curve would be). It is fed every slot's
total of the first ``--train-days`` days (training: the library models fit on this history), then walks through the
held-out days: after observing slot t (at its end), it forecasts slot t + 1 — the service's horizon, the next
round's rate (rounds every 300 s; ServeGen's resolution is 600 s, so one slot). The library models keep being
refitted as the service refits them (AutoETS and MSTL once a day of history has been added).

Printed per series, method and floor (served: floored at the newest observation, as the service does; model: the
method alone): MAPE = mean |forecast − actual| / actual over the held-out non-gap slots, and the share of those slots
under-forecast by more than 10 % (forecast < 0.9 × actual: what the fleet would be short of). Then the mean over the
series, and the winner (the default of OnlineConfig.forecast_method): the lowest mean served MAPE among the methods
whose served under-forecast share is at most the blend's plus two standard errors of that share (sqrt(p (1 − p) / n)
over the scored slots): a method may be more accurate on average but must not leave the fleet short more often than
today's forecaster does, since an under-forecast costs SLO attainment and an over-forecast only money.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from fleetplan.datasets.servegen import (
    SLOT_S,
    SLOTS_PER_DAY,
    servegen_day_curve,
    servegen_gap_windows,
    servegen_series,
)
from fleetplan.solvers.online.config import FORECAST_METHODS, OnlineConfig
from fleetplan.solvers.online.forecast import Forecaster

SERIES = ("m-large", "m-mid", "m-small")
WINDOW_S = 3600.0


def series_slots(series: str) -> tuple[np.ndarray, np.ndarray]:
    """(rates per 10-min slot over all days with gaps as NaN, gap mask), both (days × 144,)."""
    n_days = next(x["days"] for x in servegen_series() if x["name"] == series)
    days = [servegen_day_curve(series, d, window_length_s=SLOT_S, gaps="mask") for d in range(n_days)]
    y = np.concatenate(days)
    gap = np.isnan(y)
    listed = {(day, hhmm) for day, hhmm in servegen_gap_windows(series)}
    assert int(gap.sum()) == len(listed), "masked slots are the detected gaps"
    return y, gap


def training_curve(y: np.ndarray, train_days: int) -> list[float]:
    """Hourly curve: the mean of the training days' non-gap slots, slot by slot, then per hour."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        per_slot = np.nanmean(y[: train_days * SLOTS_PER_DAY].reshape(train_days, SLOTS_PER_DAY), axis=0)
        return np.nanmean(per_slot.reshape(-1, int(WINDOW_S // SLOT_S)), axis=1).tolist()


def backtest(series: str, method: str, train_days: int, floor: bool) -> tuple[float, float, int]:
    """(MAPE, share under-forecast by > 10 %, slots scored) of ``method`` on the held-out days of ``series``."""
    y, gap = series_slots(series)
    cfg = OnlineConfig(forecast_method=method, floor_on_latest=floor)
    fc = Forecaster({series: training_curve(y, train_days)}, WINDOW_S, cfg)
    start = train_days * SLOTS_PER_DAY
    err, under = [], []
    for t in range(len(y) - 1):
        at = (t + 1) * float(SLOT_S)
        if not gap[t]:
            fc.observe(series, float(y[t]), at)
        if t + 1 >= start and not gap[t + 1]:
            f = fc.forecast(series, fc.window_at(at), at)
            err.append(abs(f - y[t + 1]) / y[t + 1])
            under.append(f < 0.9 * y[t + 1])
    return float(np.mean(err)), float(np.mean(under)), len(err)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train-days", type=int, default=10)
    ap.add_argument("--methods", nargs="+", default=list(FORECAST_METHODS), choices=FORECAST_METHODS)
    a = ap.parse_args()
    print(f"Held-out days {a.train_days}..13 of {', '.join(SERIES)}; one 600-s slot ahead; gap slots not scored.")
    print(f"{'series':8s} {'method':15s} {'served MAPE':>11s} {'under>10%':>9s} {'model MAPE':>10s} "
          f"{'under>10%':>9s} {'slots':>5s} {'time':>6s}")
    mean: dict[tuple[str, bool], list[tuple[float, float]]] = {}
    n_scored = 0
    for series in SERIES:
        for method in a.methods:
            t0 = time.perf_counter()
            row = []
            for floor in (True, False):
                mape, under, n = backtest(series, method, a.train_days, floor)
                mean.setdefault((method, floor), []).append((mape, under))
                row += [mape, under]
            n_scored += n if method == a.methods[0] else 0
            print(f"{series:8s} {method:15s} {row[0]:11.1%} {row[1]:9.1%} {row[2]:10.1%} {row[3]:9.1%} {n:5d} "
                  f"{time.perf_counter() - t0:5.0f}s")
    print("Mean over the series:")
    for method in a.methods:
        s, m = np.mean(mean[(method, True)], axis=0), np.mean(mean[(method, False)], axis=0)
        print(f"  {method:15s} served MAPE {s[0]:6.1%} under>10% {s[1]:6.1%}   model MAPE {m[0]:6.1%} "
              f"under>10% {m[1]:6.1%}")
    served = {k: np.mean(mean[(k, True)], axis=0) for k in a.methods}
    lowest = min(a.methods, key=lambda k: float(served[k][0]))
    print(f"Lowest served MAPE: {lowest}")
    if "blend" in served:
        p = float(served["blend"][1])
        limit = p + 2 * (p * (1 - p) / max(1, n_scored)) ** 0.5
        ok = [k for k in a.methods if served[k][1] <= limit]
        best = min(ok, key=lambda k: float(served[k][0]))
        print(f"Under-forecast share allowed: <= {limit:.1%} (the blend's {p:.1%} + 2 standard errors over "
              f"{n_scored} slots); winner: {best} (OnlineConfig.forecast_method default: "
              f"{OnlineConfig().forecast_method})")


if __name__ == "__main__":
    main()
