"""ServeGen day curves: real per-model request rates in 10-minute windows, turned into per-window demand.

Data: ``datasets/data/traces/servegen/`` (see its PROVENANCE.md), from https://github.com/alibaba/ServeGen
(Xiang et al., "ServeGen: Workload Characterization and Generation of Large Language Model Serving in Production",
arXiv:2505.09999). ``servegen_total_rate_10min.csv`` holds, per series (m-large, m-mid, m-small, deepseek-r1,
mm-image) and per 10-minute window, the sum of the clients' mean rates (req/s); t = 0 is 00:00 local time.
The per-client files (``servegen_trace_csvs_f891d11.tar.xz``) add the fitted inter-arrival distribution of each
client and window (Gamma or Weibull, shape and scale, and the coefficient of variation).

Gaps: some windows of m-mid and m-small have a total near zero (most with no active client at all): missing
collection data, not an idle service. A window is a gap when its total is below :data:`GAP_FRACTION_OF_MEDIAN`
(5 %) of the series' median 10-minute total; gaps are detected from the data (they agree with
``servegen_near_zero_windows.txt``) and are interpolated or masked, never read as zero load.
"""

from __future__ import annotations

import functools
import importlib.resources
import io
import math
import re
import tarfile
import warnings
from pathlib import Path
from typing import Literal, get_args

import numpy as np
import pandas as pd

from fleetplan.costmodels.demand import Demand, TokenMix
from fleetplan.datasets.traces import day_curve_demand
from fleetplan.errors import InputError, UnknownNameError

#: A 10-minute window whose total rate is below this fraction of the series' median is missing data (a gap).
#: The 5 % threshold is the one used to build servegen_near_zero_windows.txt (see the data's PROVENANCE.md).
GAP_FRACTION_OF_MEDIAN = 0.05
#: Length of ServeGen's windows, seconds (upstream ``timestamp_s`` steps by 600).
SLOT_S = 600
SLOTS_PER_DAY = 86400 // SLOT_S
GapMode = Literal["interpolate", "mask"]
GAP_MODES: tuple[str, ...] = get_args(GapMode)

_DIR = ("data", "traces", "servegen")
_CATEGORY = {"m-large": "language", "m-mid": "language", "m-small": "language", "deepseek-r1": "reason",
             "mm-image": "multimodal"}


def _resource(name: str):
    return importlib.resources.files("fleetplan.datasets").joinpath(*_DIR, name)


@functools.cache
def _table() -> pd.DataFrame:
    with _resource("servegen_total_rate_10min.csv").open(encoding="utf-8") as fh:
        return pd.read_csv(fh)


def _series_names() -> list[str]:
    return [c[: -len("_rps")] for c in _table().columns if c.endswith("_rps")]


def _check_series(series: str) -> str:
    names = _series_names()
    if series not in names:
        raise UnknownNameError("ServeGen series", str(series), names)
    return series


@functools.cache
def _raw(series: str) -> np.ndarray:
    """Total rate per 10-min window, shape (days, 144), req/s, over the days the series has data."""
    df = _table()
    vals = df[f"{series}_rps"].to_numpy(dtype=np.float64)
    n = int(np.flatnonzero(~np.isnan(vals))[-1]) + 1
    n_days = n // SLOTS_PER_DAY
    if n_days == 0 or n % SLOTS_PER_DAY or np.isnan(vals[:n]).any():
        raise InputError(f"series {series} does not cover whole days from day 0",
                         source="servegen_total_rate_10min.csv", field=f"{series}_rps")
    return vals[:n].reshape(n_days, SLOTS_PER_DAY)


@functools.cache
def _gap_mask(series: str) -> np.ndarray:
    raw = _raw(series)
    median = float(np.median(raw))
    mask = raw < GAP_FRACTION_OF_MEDIAN * median
    mask.setflags(write=False)
    return mask


def servegen_gap_windows(series: str) -> list[tuple[int, str]]:
    """The gap windows of ``series`` detected from the data: (day, 'HH:MM' start) pairs, in time order.

    A gap is a 10-minute window whose total rate is below 5 % of the series' median 10-minute total.
    """
    mask = _gap_mask(_check_series(series))
    return [(int(d), f"{s * SLOT_S // 3600:02d}:{s * SLOT_S % 3600 // 60:02d}") for d, s in zip(*np.nonzero(mask),
                                                                                                  strict=True)]


def servegen_listed_gaps() -> dict[str, list[tuple[int, str]]]:
    """The windows listed in the shipped ``servegen_near_zero_windows.txt``: {series: [(day, 'HH:MM'), ...]}."""
    out: dict[str, list[tuple[int, str]]] = {}
    current = None
    with _resource("servegen_near_zero_windows.txt").open(encoding="utf-8") as fh:
        for line in fh:
            head = re.match(r"^(\S+) median", line)
            item = re.match(r"^\s+day (\d+) (\d\d:\d\d)", line)
            if head:
                current = head.group(1)
                out[current] = []
            elif item and current:
                out[current].append((int(item.group(1)), item.group(2)))
    return out


def servegen_series() -> list[dict]:
    """The ServeGen series, one dict each.

    Keys: name, category ('language', 'reason', 'multimodal'), days (days of data), windows_10min,
    mean_rate_req_per_s (over the non-gap windows, as shipped: the absolute scale is indicative only),
    gap_windows (number of 10-min gap windows).
    """
    out = []
    for name in _series_names():
        raw, gap = _raw(name), _gap_mask(name)
        out.append({"name": name, "category": _CATEGORY.get(name, ""), "days": raw.shape[0],
                    "windows_10min": raw.size, "mean_rate_req_per_s": round(float(raw[~gap].mean()), 3),
                    "gap_windows": int(gap.sum())})
    return out


def _check_gaps(gaps: str) -> str:
    if gaps not in GAP_MODES:
        raise InputError(f"gap handling {gaps!r} is unknown; use 'interpolate' or 'mask'", field="gaps", value=gaps)
    return gaps


def fill_gaps(rates_req_per_s: np.ndarray, gap: np.ndarray, gaps: str = "interpolate") -> np.ndarray:
    """Fill the gap windows of a rate series: linear interpolation in time between the nearest non-gap windows,
    cyclic (the last window is followed by the first), or NaN with gaps='mask'.

    Args:
        rates_req_per_s: (n,) rates of equally long consecutive windows.
        gap: (n,) bool, True where the window is missing data.
        gaps: 'interpolate' or 'mask'.

    Returns:
        A new (n,) float64 array. Raises InputError if every window is a gap.
    """
    _check_gaps(gaps)
    out = np.asarray(rates_req_per_s, dtype=np.float64).copy()
    gap = np.asarray(gap, dtype=bool)
    if gap.all():
        raise InputError("every window is a gap; there is no data to fill from", field="gaps")
    if gap.any():
        if gaps == "mask":
            out[gap] = np.nan
        else:
            x = np.arange(out.size, dtype=np.float64)
            out[gap] = np.interp(x[gap], x[~gap], out[~gap], period=out.size)
    return out


def _filled(series: str, gaps: str) -> np.ndarray:
    """(days, 144) rates with gaps filled over the whole series (across midnight into the neighbouring day; cyclic
    at the ends: the last window of the last day is followed by the first of day 0)."""
    raw = _raw(series)
    return fill_gaps(raw.ravel(), _gap_mask(series).ravel(), gaps).reshape(raw.shape)


def _check_day(series: str, day: int | str) -> int | str:
    n_days = _raw(series).shape[0]
    if day == "mean":
        return day
    if isinstance(day, bool) or not isinstance(day, int | np.integer) or not 0 <= day < n_days:
        raise InputError(f"day {day!r} is not available for series {series}: give 0..{n_days - 1} or 'mean'",
                         field="day", value=day)
    return int(day)


def _check_curve_window(window_length_s: float) -> int:
    ok = (isinstance(window_length_s, int | float) and not isinstance(window_length_s, bool)
          and math.isfinite(window_length_s) and window_length_s == int(window_length_s))
    if ok:
        length = int(window_length_s)
        ok = 60 <= length <= 86400 and 86400 % length == 0 and (SLOT_S % length == 0 or length % SLOT_S == 0)
    if not ok:
        raise InputError(f"window length {window_length_s!r} s does not fit ServeGen's 10-minute windows: give a "
                         "divisor of 600 s (60, 120, 300, 600) or a multiple of 600 s that divides a day (1200, "
                         "1800, 3600, ...)", field="window_length_s", value=window_length_s)
    return length


def _profile(series: str, day: int | str, gaps: str) -> np.ndarray:
    filled = _filled(series, gaps)
    if day == "mean":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # an all-masked slot stays NaN
            return np.nanmean(filled, axis=0)
    return filled[day]


def _aggregate(profile: np.ndarray, length: int, how) -> np.ndarray:
    if length <= SLOT_S:
        return np.repeat(profile, SLOT_S // length)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a window with every slot masked stays NaN
        return how(profile.reshape(-1, length // SLOT_S), axis=1)


def servegen_day_curve(series: str, day: int | str = 0, window_length_s: float = 3600,
                       gaps: str = "interpolate") -> np.ndarray:
    """Mean request rate per window over one day of a ServeGen series, req/s.

    Args:
        series: 'm-large', 'm-mid', 'm-small' (14 days), 'deepseek-r1' or 'mm-image' (1 day).
        day: day index (0-based) or 'mean' (the per-slot mean over the available days, after gap handling, so a
            masked slot is averaged over the days that have data).
        window_length_s: a divisor of 600 (each 10-min value repeated) or a multiple of 600 that divides 86400
            (the mean of the 10-min values inside the window).
        gaps: 'interpolate' (linear in time between the nearest non-gap windows, across midnight into the
            neighbouring day, cyclic at the ends of the series) or 'mask' (NaN; a window is the mean of its
            non-gap 10-min values and NaN only when all of them are gaps).

    Returns:
        float64 array of shape (86400 / window_length_s,), req/s (24 values for 1-hour windows); window k starts
        at k × window_length_s seconds after midnight.

    Raises:
        UnknownNameError: unknown series. InputError: day not available, window length or gap mode not allowed.
    """
    _check_series(series)
    _check_gaps(gaps)
    day = _check_day(series, day)
    length = _check_curve_window(window_length_s)
    return _aggregate(_profile(series, day, gaps), length, np.nanmean)


def servegen_demand(series: str, mean_rate_req_per_s: float, token_mix: TokenMix, window_length_s: float = 3600,
                    day: int | str = "mean", gaps: str = "interpolate") -> Demand:
    """Per-window demand shaped like a ServeGen day curve and rescaled to a chosen mean rate.

    The curve (:func:`servegen_day_curve`) is multiplied by factor = mean_rate_req_per_s / (mean of the curve), so
    the mean over the day's windows is exactly ``mean_rate_req_per_s``. Each window's peak is the highest 10-minute
    rate inside it, times the same factor (equal to the mean for windows of 10 minutes or less: the data has no
    finer detail). Every window gets ``token_mix`` (e.g. :func:`~fleetplan.datasets.traces.token_mix_from_trace`).
    ``Demand.source`` names the series, day, factor and gap handling.

    Raises:
        InputError: mean rate not positive or above 1e7 req/s; with gaps='mask', a window with no data at all
            (use gaps='interpolate' or day='mean'); see :func:`servegen_day_curve`.
    """
    if isinstance(mean_rate_req_per_s, bool) or not isinstance(mean_rate_req_per_s, int | float) or not (
            math.isfinite(mean_rate_req_per_s) and 0 < mean_rate_req_per_s <= 1e7):
        raise InputError(f"mean rate {mean_rate_req_per_s!r} req/s must be a positive number up to 1e7",
                         field="mean_rate_req_per_s", value=mean_rate_req_per_s)
    curve = servegen_day_curve(series, day, window_length_s, gaps)
    length = _check_curve_window(window_length_s)
    day = _check_day(series, day)
    if np.isnan(curve).any():
        k = int(np.flatnonzero(np.isnan(curve))[0])
        raise InputError(f"window {k} ({k * length // 3600:02d}:{k * length % 3600 // 60:02d}) of {series} day {day} "
                         "has no data once gaps are masked; use gaps='interpolate' or day='mean'", field="gaps",
                         value=gaps)
    peaks = _aggregate(_profile(series, day, gaps), length, np.nanmax)
    factor = mean_rate_req_per_s / float(curve.mean())
    n_gaps = int(_gap_mask(series).sum() if day == "mean" else _gap_mask(series)[day].sum())
    source = (f"ServeGen {series}, day {day}, scaled x{factor:.6g} to a mean of {mean_rate_req_per_s:g} req/s, "
              f"gaps {'interpolated' if gaps == 'interpolate' else 'masked'} ({n_gaps} 10-min gap windows)")
    notes = ["ServeGen absolute rates are indicative only; the curve's shape is production data"]
    if length <= SLOT_S:
        notes.append("peak = mean: ServeGen has no detail finer than 10 minutes")
    return day_curve_demand(curve * factor, length, token_mix, source,
                            peaks_req_per_s=peaks * factor, notes=notes)


# --------------------------------------------------------------------------------------------------------------
# Per-client fitted inter-arrival distributions


@functools.cache
def servegen_client_windows(series: str) -> pd.DataFrame:
    """The upstream per-client rows of ``series`` from the shipped tar.xz, one row per (client, 10-min window).

    Columns: client (int, from ``chunk-<client>-trace.csv``), window_start_s (seconds from the start of day 0),
    rate_req_per_s, cv (of inter-arrival times), pattern ('Gamma', 'Weibull' or '' when the client sent nothing),
    shape, scale_s (the fitted distribution's parameters; scale in seconds). Reading takes about a second.
    """
    _check_series(series)
    prefix = f"data/{_CATEGORY[series]}/{series}/"
    frames = []
    with _resource("servegen_trace_csvs_f891d11.tar.xz").open("rb") as raw, tarfile.open(fileobj=raw,
                                                                                            mode="r:xz") as tar:
        for member in tar:
            if not (member.isfile() and member.name.startswith(prefix) and member.name.endswith("-trace.csv")):
                continue
            client = int(Path(member.name).name.split("-")[1])
            fobj = tar.extractfile(member)
            if fobj is None:  # not a regular file (checked above); tarfile types it as optional
                continue
            data = fobj.read()
            df = pd.read_csv(io.BytesIO(data), header=None, keep_default_na=False,
                             names=["window_start_s", "rate_req_per_s", "cv", "pattern", "shape", "scale_s"])
            df.insert(0, "client", client)
            frames.append(df)
    out = pd.concat(frames, ignore_index=True)
    for c in ("rate_req_per_s", "cv", "shape", "scale_s"):
        out[c] = pd.to_numeric(out[c])
    return out.sort_values(["window_start_s", "client"], ignore_index=True)


def servegen_arrival_params(series: str, day: int | str = 0) -> pd.DataFrame:
    """Inter-arrival burstiness per 10-minute window of one day, aggregated over the clients of ``series``.

    Returns a DataFrame with 144 rows (window k starts k × 600 s after midnight) and columns:
    window_start_s; rate_req_per_s (sum of the clients' rates, as in the day curve before gap handling);
    active_clients; cv_rate_weighted (the clients' inter-arrival CV weighted by their rate; NaN with no traffic);
    gamma_share (share of the rate from clients fitted with a Gamma, the rest Weibull); gap (True for a gap window,
    see the module doc); gamma_shape and gamma_scale_s, a single Gamma renewal process with this rate and CV
    (shape = 1 / cv², scale = cv² / rate, so mean inter-arrival = 1 / rate).

    With day='mean', each slot's figures are rate-weighted over the available days (rates averaged).

    Caveat: the superposition of many independent clients is closer to Poisson than its parts, so the rate-weighted
    CV overstates the burstiness of the total stream; drawing each client from its own fitted distribution
    (:func:`servegen_client_windows`) is the faithful alternative.
    """
    _check_series(series)
    day = _check_day(series, day)
    df = servegen_client_windows(series)
    df = df[df["rate_req_per_s"] > 0]
    slot = (df["window_start_s"] // SLOT_S).astype(np.int64)
    d = slot // SLOTS_PER_DAY
    if day != "mean":
        df, slot = df[d == day], slot[d == day]
    rate = df["rate_req_per_s"].to_numpy()
    tod = (slot % SLOTS_PER_DAY).to_numpy()
    n_days = _raw(series).shape[0] if day == "mean" else 1
    total = np.bincount(tod, weights=rate, minlength=SLOTS_PER_DAY)
    cv_w = np.bincount(tod, weights=rate * df["cv"].to_numpy(), minlength=SLOTS_PER_DAY)
    gamma_w = np.bincount(tod, weights=rate * (df["pattern"] == "Gamma").to_numpy(), minlength=SLOTS_PER_DAY)
    clients = np.bincount(tod, minlength=SLOTS_PER_DAY) / n_days
    with np.errstate(invalid="ignore", divide="ignore"):
        cv = np.where(total > 0, cv_w / total, np.nan)
        gshare = np.where(total > 0, gamma_w / total, np.nan)
        mean_rate = total / n_days
        shape = np.where(cv > 0, 1.0 / cv ** 2, np.nan)
        scale = np.where((cv > 0) & (mean_rate > 0), cv ** 2 / mean_rate, np.nan)
    gap = _gap_mask(series).any(axis=0) if day == "mean" else _gap_mask(series)[day]
    return pd.DataFrame({"window_start_s": np.arange(SLOTS_PER_DAY) * SLOT_S, "rate_req_per_s": mean_rate,
                         "active_clients": clients, "cv_rate_weighted": cv, "gamma_share": gshare,
                         "gap": np.asarray(gap), "gamma_shape": shape, "gamma_scale_s": scale})


@functools.cache
def servegen_client_mix(series: str, day: int | str = 0) -> tuple[tuple[tuple[float, float], ...], ...]:
    """Per 10-minute slot of the day (144 slots), the clients that send traffic: (share of the slot's rate, CV of
    its inter-arrival times) for each, from the upstream per-client fits (:func:`servegen_client_windows`).

    With day='mean' the clients of day 0 are used for every slot that has traffic on day 0, else those of the first
    day that has (a day curve averaged over days has no single set of clients; the mix is the shape of the
    burstiness, the day curve gives the rate). A slot with no client anywhere gets an empty tuple (callers fall
    back to Poisson arrivals). Used by the simulator to superpose one renewal process per client: the faithful
    way to reproduce the total stream's burstiness (see :func:`servegen_arrival_params`).
    """
    _check_series(series)
    day = _check_day(series, day)
    df = servegen_client_windows(series)
    df = df[df["rate_req_per_s"] > 0]
    slot = (df["window_start_s"] // SLOT_S).astype(np.int64).to_numpy()
    dd = slot // SLOTS_PER_DAY
    tod = slot % SLOTS_PER_DAY
    days = [day] if day != "mean" else list(range(int(dd.max()) + 1))
    rates = df["rate_req_per_s"].to_numpy()
    cvs = df["cv"].to_numpy()
    out = []
    for k in range(SLOTS_PER_DAY):
        mix: tuple[tuple[float, float], ...] = ()
        for d in days:
            sel = (dd == d) & (tod == k)
            total = rates[sel].sum()
            if total > 0:
                mix = tuple((float(r / total), float(c) if np.isfinite(c) and c > 0 else 1.0)
                            for r, c in zip(rates[sel], cvs[sel], strict=True))
                break
        out.append(mix)
    return tuple(out)
