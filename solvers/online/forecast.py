"""Demand per model for the online re-planner: one interval's counters into a rate (:func:`estimate_demand`) and the
forecast for a window of the day (:class:`Forecaster`): the day curve, reshaped by what is observed, blended with
a recent average or replaced by a statsforecast model fitted on the observed history; the newest observed rate is
a floor.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Mapping

import numpy as np

from fleetplan.errors import InputError
from fleetplan.solvers.online.config import OnlineConfig

log = logging.getLogger(__name__)


#: Most observed totals buffered per model for one window's median (later ones replace the oldest).
_MAX_WINDOW_SAMPLES = 512


# ---- demand estimate --------------------------------------------------------------------------------------------
def estimate_demand(interval_s: float, *, arrivals: float | None = None, completions: float | None = None,
                    waiting_start: float | None = None, waiting_end: float | None = None,
                    running_start: float | None = None, running_end: float | None = None) -> float:
    """Demand rate (req/s) over one interval from its counters.

    With an arrival count: arrivals / interval_s. Otherwise requests that completed plus the growth of the queue
    (waiting, and running when given) over the interval: (completions + Δwaiting + Δrunning) / interval_s — when the
    fleet saturates, completions stay flat while the queue grows, and the growth is demand not yet served.
    When both are given, the larger (arrival counters can be sampled late). Never negative.
    Raises InputError when interval_s <= 0 or nothing to estimate from is given.
    """
    if not (isinstance(interval_s, int | float) and interval_s > 0 and math.isfinite(interval_s)):
        raise InputError("interval_s must be a positive number of seconds", field="interval_s", value=interval_s)
    est = []
    if arrivals is not None:
        est.append(arrivals / interval_s)
    if completions is not None:
        growth = 0.0
        if waiting_start is not None and waiting_end is not None:
            growth += waiting_end - waiting_start
        if running_start is not None and running_end is not None:
            growth += running_end - running_start
        est.append((completions + growth) / interval_s)
    if not est:
        raise InputError("give arrivals, or completions (with queue sizes at the interval's start and end)",
                         field="arrivals")
    return max(0.0, max(est))


# ---- forecast ---------------------------------------------------------------------------------------------------
def concurrent_total(entries: list[tuple[float, float, float]]) -> float:
    """The largest sum of rates measured at one time: ``entries`` are (rate req/s, end unix s, span s), each rate
    holding over (end − span, end]; the result is max over instants t of Σ rates whose interval holds t (attained at
    some end), req/s; 0 for no entries. A span of inf covers all time before its end."""
    if not entries:
        return 0.0
    if len(entries) == 1:
        return float(entries[0][0])
    # sweep over the ends: an interval holds (start, end], so at one time the intervals that end there are counted
    # (closes, kind 0, are read before they are removed) and those that start there are not (opens, kind 1, after)
    events = [(end - span, 1, rate) for rate, end, span in entries] + [(end, 0, rate) for rate, end, span in entries]
    events.sort(key=lambda e: (e[0], e[1]))
    best = cur = 0.0
    for _t, kind, rate in events:
        if kind == 1:
            cur += rate
        else:
            best = max(best, cur)
            cur -= rate
    return max(best, 0.0)


class _TenantTable(dict):
    """{(model, tenant): (rate, at_s, span_s)} that also knows each model's tenants, so a model's sum reads its own
    tenants only (a round over 2,000 models read every model's tenants for each: quadratic)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__()
        self._of: dict[str, set[str]] = {}
        for k, v in dict(*args, **kwargs).items():
            self[k] = v

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        self._of.setdefault(key[0], set()).add(key[1])

    def __delitem__(self, key) -> None:
        super().__delitem__(key)
        self._of[key[0]].discard(key[1])

    def pop(self, key, *default):
        if key in self:
            self._of[key[0]].discard(key[1])
        return super().pop(key, *default)

    def tenants_of(self, model: str) -> list[str]:
        """The model's tenant labels held, in a stable (sorted) order."""
        return sorted(self._of.get(model, ()))

    def __reduce__(self):
        return (_TenantTable, (dict(self),))


class Forecaster:
    """Demand forecast per model for a window of the day.

    Args:
        day_curve: {model: req/s per window} — the scenario's curve (``ModelSpec.demand_req_per_s``).
        window_length_s: seconds per window; the curve repeats every len(curve) × window_length_s.
        config: see :class:`OnlineConfig`.

    ``observe`` takes a rate per (model, tenant) over the interval that ends at ``at_s``. A model's demand is the
    sum over its live tenants of the rates *measured at the same time*: each tenant's newest rate covers its span
    (at_s − span, at_s], span = the longer of its ``interval_s`` and the time since its previous observation, and the
    total is the largest sum of rates whose spans overlap (:func:`concurrent_total`). So one stream relabelled at
    every report counts once (its spans follow each other and never overlap), while tenants that report the same
    minutes add up. An observation without ``interval_s`` covers all time before it (every live tenant adds up).
    A tenant is live while its newest observation is at most ``min(tenant_ttl_s, tenant_silent_spans × span)`` older
    than now: a label that stops reporting is dropped after missing a few of its own reports. "Now" is the caller's
    clock (``now_s``, the service's); without it, the newest observation time seen (a replay's clock).
    Observations of one tenant come in time order: an older one than its newest is refused (InputError).
    ``forecast(model, window, now_s)`` = day_curve_weight × curve[window] + (1 − day_curve_weight) × Σ EWMA (Σ
    over tenants as for the rates), floored at the newest observed total when ``floor_on_latest`` (observations
    older than latest_max_age_s do not set the floor). Without live observations the EWMA term is the curve value
    itself.
    With ``forecast_method`` other than 'blend', a statsforecast model fitted on the history of observed totals
    (the mean total of each ``history_slot_s`` slot, ``history_days`` of them) replaces the blend when that history
    spans two days and the library is installed (see :class:`OnlineConfig`); the floor applies to it the same way.
    An observation ending at ``at_s`` counts for the slot holding ``at_s`` − 1 ms (it covers the interval before).
    Forecast error (|forecast − observed| / observed, EWMA over observations) is kept per model for metrics.
    Its state is bounded: at most ``max_tenants_per_model`` live labels per model, silent ones dropped, and
    ``history_days`` of slots per model.
    """

    def __init__(self, day_curve: Mapping[str, tuple[float, ...] | list[float]], window_length_s: float,
                 config: OnlineConfig | None = None) -> None:
        self.config = config or OnlineConfig()
        self.window_length_s = float(window_length_s)
        self.curve = {m: [float(x) for x in v] for m, v in day_curve.items()}
        self.n_windows = len(next(iter(self.curve.values()))) if self.curve else 1
        self.ewma: dict[tuple[str, str], float] = {}
        # {(model, tenant): (rate req/s, at_s, span_s)}: the newest observation and the time it covers (inf: all)
        self.latest: _TenantTable = _TenantTable()
        self.error: dict[str, float] = {}
        self.n_observations = 0
        self.newest_at_s: float | None = None
        # curve_update 'median': {model: ((day, window), observed totals of that window so far)}
        self.pending: dict[str, tuple[tuple[int, int], list[float]]] = {}
        # forecast_method other than 'blend': {model: {slot index: [sum of observed totals, count]}}
        self.history: dict[str, dict[int, list[float]]] = {}
        self._late: dict[str, int] = {}  # observations that landed in a slot older than the model's newest
        self._newest: dict[str, int] = {}  # {model: newest history slot}
        self._fits: dict[str, tuple[int, object]] = {}  # {model: (newest slot fitted on, fitted model)}
        # {model: (first, last) history slots of the current fit}: stored, so a restart refits on the same slots
        self._fit_span: dict[str, tuple[int, int]] = {}
        self._cache: dict[str, tuple[tuple, float | None]] = {}
        self._told: set[str] = set()  # fallback reasons already logged
        self._served: dict[str, float] = {}  # {model: the last forecast before the floor}

    def window_at(self, at_s: float) -> int:
        """Window index of the day curve at unix time ``at_s`` (the curve starts at 00:00 UTC)."""
        return int((at_s % (self.n_windows * self.window_length_s)) // self.window_length_s) % self.n_windows

    def _now(self, now_s: float | None) -> float | None:
        return self.newest_at_s if now_s is None else now_s

    def _ttl(self, span_s: float) -> float:
        c = self.config
        return min(c.tenant_ttl_s, c.tenant_silent_spans * span_s)

    def _live(self, key: tuple[str, str], now_s: float | None) -> bool:
        ref = self._now(now_s)
        last = self.latest.get(key)
        return last is not None and (ref is None or ref - last[1] <= self._ttl(last[2]))

    def first_expiry_s(self, model: str, now_s: float | None = None) -> float | None:
        """Seconds from ``now_s`` (default: the newest observation time) until the first live tenant label of
        ``model`` expires if it stays silent (3 of its own reporting intervals, at most ``tenant_ttl_s``); None
        without a live label."""
        ref = self._now(now_s)
        ends = [last[1] + self._ttl(last[2]) for t in self.latest.tenants_of(model)
                if self._live((model, t), now_s) and (last := self.latest.get((model, t))) is not None]
        if not ends:
            return None
        return max(0.0, min(ends) - (ref if ref is not None else min(ends)))

    def tenants(self, model: str, now_s: float | None = None) -> set[str]:
        """Live tenant labels of ``model`` at ``now_s`` (default: the newest observation time)."""
        return {t for t in self.latest.tenants_of(model) if self._live((model, t), now_s)}

    def expire(self, now_s: float | None = None, model: str | None = None) -> int:
        """Drop the state of tenants (of ``model``, or of every model) that are no longer live at ``now_s`` (see the
        class docstring); returns how many were dropped."""
        keys = list(self.latest) if model is None else [(model, t) for t in self.latest.tenants_of(model)]
        dead = [k for k in keys if not self._live(k, now_s)]
        for k in dead:
            self.latest.pop(k, None)
            self.ewma.pop(k, None)
        return len(dead)

    def newest_at(self, model: str, tenant: str) -> float | None:
        """Unix time of the newest observation of (model, tenant) still held, or None."""
        last = self.latest.get((model, tenant))
        return None if last is None else last[1]

    def span_of(self, model: str, tenant: str, at_s: float, interval_s: float | None) -> float:
        """The span an observation of (model, tenant) ending at ``at_s`` covers for the sum over tenants, seconds:
        the longer of ``interval_s`` and the time since the tenant's previous observation (inf without
        ``interval_s``)."""
        if interval_s is None:
            return math.inf
        prev = self.latest.get((model, tenant))
        return max(float(interval_s), at_s - prev[1]) if prev is not None and prev[1] < at_s else float(interval_s)

    def total(self, model: str, now_s: float | None = None, *, fresh_only: bool = False,
              updates: Mapping[str, tuple[float, float, float]] | None = None) -> float:
        """The model's observed total at ``now_s``, req/s: :func:`concurrent_total` of its live tenants' newest
        rates (``fresh_only``: only observations at most ``latest_max_age_s`` old, as the floor counts them).
        ``updates`` {tenant: (rate, at_s, span_s)} replaces or adds tenants first (what the total would be after
        them; nothing is changed)."""
        ref = self._now(now_s)
        entries = {t: self.latest[(model, t)] for t in self.latest.tenants_of(model)}
        entries.update(updates or {})
        out = []
        for rate, at, span in entries.values():
            if ref is not None and ref - at > self._ttl(span):
                continue
            if fresh_only and ref is not None and ref - at > self.config.latest_max_age_s:
                continue
            out.append((rate, at, span))
        return concurrent_total(out)

    def _recent(self, model: str, now_s: float | None) -> float | None:
        """Σ EWMA over the model's live tenants, summed as :meth:`total` sums their rates (overlapping spans); None
        without live tenants."""
        ref = self._now(now_s)
        out = []
        for t in self.latest.tenants_of(model):
            k = (model, t)
            v = self.latest[k]
            if k in self.ewma and (ref is None or ref - v[1] <= self._ttl(v[2])):
                out.append((self.ewma[k], v[1], v[2]))
        return concurrent_total(out) if out else None

    def observe(self, model: str, rate_req_per_s: float, at_s: float, tenant: str = "default", *,
                interval_s: float | None = None, now_s: float | None = None) -> None:
        """Record one interval's demand estimate (req/s) of ``interval_s`` seconds ending at ``at_s`` (unix s) for
        (model, tenant); ``now_s`` is the caller's clock (the service's; default: the newest observation time).
        An observation never moves "now": liveness and expiry are judged at ``now_s``.

        Raises InputError (nothing changed) for an unknown model, a rate or time that is not a finite number
        (rate >= 0), an ``at_s`` before the tenant's newest observation, or a new tenant label beyond
        ``max_tenants_per_model`` live ones."""
        if model not in self.curve:
            raise InputError(f"unknown model {model!r}", field="model", value=model)
        if not (isinstance(rate_req_per_s, int | float) and math.isfinite(rate_req_per_s) and rate_req_per_s >= 0):
            raise InputError("demand rate must be a finite number >= 0 req/s", field="rate_req_per_s",
                             value=rate_req_per_s)
        if not (isinstance(at_s, int | float) and math.isfinite(at_s)):
            raise InputError("observation time must be a finite number of unix seconds", field="at_s", value=at_s)
        c = self.config
        key = (model, tenant)
        legacy = now_s is None
        if now_s is None:
            now = max(at_s, self.newest_at_s if self.newest_at_s is not None else at_s)
        else:
            now = float(now_s)
        old = self.latest.get(key)
        if old is not None and at_s < old[1] and self._live(key, now):
            raise InputError(f"at_s {at_s:.3f} is before the newest observation of tenant {tenant!r} of {model} "
                             f"({old[1]:.3f}): a tenant's observations must come in time order", field="at_s",
                             value=at_s)
        if not self._live(key, now):
            live = self.tenants(model, now) - {tenant}
            if len(live) >= c.max_tenants_per_model:
                first = self.first_expiry_s(model, now)
                wait = (f"wait {first:.0f} s for the first silent one to expire" if first is not None
                        else "wait for silent ones to expire")
                raise InputError(f"model {model!r} already has {len(live)} live tenant labels (the cap): reuse a "
                                 f"label, {wait} (after 3 of its own reporting intervals, at most "
                                 f"{c.tenant_ttl_s:g} s), or raise the cap",
                                 field="tenant", value=tenant)
            old = None  # an expired tenant starts afresh
        span = self.span_of(model, tenant, at_s, interval_s) if old is not None else (
            math.inf if interval_s is None else float(interval_s))
        if legacy:
            self.newest_at_s = at_s if self.newest_at_s is None else max(self.newest_at_s, at_s)
        else:
            self.newest_at_s = now if self.newest_at_s is None else max(self.newest_at_s, now)
        self.expire(now, model=model)
        w = self.window_at(at_s)
        # the error of the forecast served last (a library model is not run again for every observation)
        before = self._blend(model, w, now) if c.forecast_method == "blend" else self._served.get(model)
        prev = self.ewma.get(key) if old is not None else None
        self.ewma[key] = rate_req_per_s if prev is None else (1 - c.ewma_alpha) * prev + c.ewma_alpha * rate_req_per_s
        self.latest[key] = (float(rate_req_per_s), float(at_s), span)
        total = self.total(model, now)
        if total > 0 and before is not None:
            err = abs(before - total) / total
            e = self.error.get(model)
            self.error[model] = err if e is None else (1 - c.ewma_alpha) * e + c.ewma_alpha * err
        if c.curve_update == "ewma":
            self.curve[model][w] = (1 - c.day_curve_alpha) * self.curve[model][w] + c.day_curve_alpha * total
        else:
            self._buffer(model, at_s, total)
        if c.forecast_method != "blend":
            self._record(model, at_s, total)
        self.n_observations += 1

    def _record(self, model: str, at_s: float, total: float) -> None:
        """Add ``total`` to the history slot of an observation ending at ``at_s``; drop slots older than
        ``history_days`` before the newest."""
        c = self.config
        slot = math.floor((at_s - 1e-3) / c.history_slot_s)
        hist = self.history.setdefault(model, {})
        newest = self._newest.get(model)
        if newest is None:
            newest = self._newest[model] = max(hist, default=slot)
        if slot < newest:
            self._late[model] = self._late.get(model, 0) + 1
        acc = hist.setdefault(slot, [0.0, 0.0])
        acc[0] += total
        acc[1] += 1.0
        if slot > newest:  # a new slot: drop those more than history_days older
            self._newest[model] = slot
            keep_from = slot - c.history_days * self._slots_per_day() + 1
            span = self._fit_span.get(model)
            if span is not None:  # the slots of the current fit stay until it is replaced (at most a day more)
                keep_from = min(keep_from, span[0])
            for k in [k for k in hist if k < keep_from]:
                del hist[k]

    def _slots_per_day(self) -> int:
        return int(round(86400 / self.config.history_slot_s))

    def _fallback(self, reason: str) -> None:
        if reason not in self._told:
            self._told.add(reason)
            log.warning("forecast: %s; forecasting with the day-curve/EWMA blend", reason)

    def _library(self, model: str, now_s: float) -> float | None:
        """The statsforecast model's forecast (req/s) for the slot holding ``now_s``, from the completed slots
        before it; None (use the blend) without two days of history, more than a day since the newest slot, the
        library missing, or a model that fails."""
        c = self.config
        per_day = self._slots_per_day()
        target = math.floor(now_s / c.history_slot_s)
        past = [k for k in self.history.get(model, {}) if k < target]
        if not past:
            return None
        last = max(past)
        hist = self.history[model]
        key = (target, last, tuple(hist[last]), self._late.get(model, 0))
        cached = self._cache.get(model)
        if cached is not None and cached[0] == key:
            return cached[1]
        first = max(min(past), last - c.history_days * per_day + 1)
        horizon = target - last
        value: float | None = None
        if last - first + 1 < 2 * per_day:
            self._fallback(f"{model}: less than two days of observed history for {c.forecast_method}")
        elif horizon > per_day:
            self._fallback(f"{model}: no observation for more than a day")
        else:
            value = self._fit_forecast(model, self._series(hist, first, last), first, last, horizon)
        self._cache[model] = (key, value)
        return value

    @staticmethod
    def _series(hist: Mapping[int, list[float]], first: int, last: int) -> list[float]:
        """Mean observed total per slot first..last; slots without observations interpolated linearly between
        their observed neighbours (missing data, never zero)."""
        x = np.arange(first, last + 1)
        seen = np.array([k in hist for k in x.tolist()])
        y = np.array([hist[k][0] / hist[k][1] if k in hist else np.nan for k in x.tolist()])
        y[~seen] = np.interp(x[~seen], x[seen], y[seen])
        return y.tolist()

    def _fit_forecast(self, model: str, y: list[float], first: int, last: int, horizon: int) -> float | None:
        c = self.config
        per_day = self._slots_per_day()
        try:
            from statsforecast.models import MSTL, AutoETS, SeasonalNaive
        except ImportError:
            self._fallback(f"forecast_method {c.forecast_method!r} needs statsforecast (pip install "
                           "'fleetplan[forecast]')")
            return None
        arr = np.asarray(y, dtype=np.float64)
        try:
            if c.forecast_method == "seasonal_naive":
                out = SeasonalNaive(season_length=per_day).forecast(y=arr, h=horizon)
            else:
                fit = self._fits.get(model)
                span = self._fit_span.get(model)
                todo: tuple[tuple[int, int], np.ndarray] | None = None
                if (fit is None and span is not None and 0 <= last - span[1] < per_day
                        and span[0] >= min(self.history[model])):
                    # restored state: refit on the slots the fit before the restart was made on (same forecast)
                    todo = (span, np.asarray(self._series(self.history[model], span[0], span[1]), np.float64))
                elif fit is None or last - fit[0] >= per_day:
                    todo = ((first, last), arr)
                if todo is not None:
                    m: object = (AutoETS(season_length=per_day) if c.forecast_method == "autoets" else
                                 MSTL(season_length=per_day, trend_forecaster=AutoETS(model="ZZN")))
                    m.fit(y=todo[1])  # type: ignore[attr-defined]
                    fit = self._fits[model] = (todo[0][1], m)
                    self._fit_span[model] = todo[0]
                assert fit is not None
                out = fit[1].forward(y=arr, h=horizon)  # type: ignore[attr-defined]
            value = float(out["mean"][-1])
        except Exception as exc:  # a third-party model failing must not stop the re-planner: blend, logged
            self._fallback(f"{model}: {c.forecast_method} failed ({type(exc).__name__}: {exc})")
            return None
        return max(0.0, value) if math.isfinite(value) else None

    def _buffer(self, model: str, at_s: float, total: float) -> None:
        """curve_update 'median': add ``total`` to the buffer of its (day, window); a newer (day, window) first
        commits the buffered median into the curve. Observations older than the buffer's window are not used."""
        day = int(at_s // (self.n_windows * self.window_length_s))
        slot = (day, self.window_at(at_s))
        pend = self.pending.get(model)
        if pend is not None and slot != pend[0]:
            if slot < pend[0]:
                return
            self._commit(model, pend)
            pend = None
        if pend is None:
            pend = self.pending[model] = (slot, [])
        pend[1].append(total)
        if len(pend[1]) > _MAX_WINDOW_SAMPLES:
            del pend[1][0]

    def _commit(self, model: str, pend: tuple[tuple[int, int], list[float]]) -> None:
        w = pend[0][1]
        a = self.config.day_curve_day_alpha
        self.curve[model][w] = (1 - a) * self.curve[model][w] + a * statistics.median(pend[1])

    def _blend(self, model: str, window: int, now_s: float | None = None) -> float:
        c = self.config
        curve = self.curve[model][window]
        recent = self._recent(model, now_s)
        if recent is None:
            recent = curve
        return c.day_curve_weight * curve + (1 - c.day_curve_weight) * recent

    def _point(self, model: str, window: int, now_s: float | None) -> float:
        """The forecast before the floor: the configured method's, or the blend's when it has none."""
        value = None
        if self.config.forecast_method != "blend" and now_s is not None:
            value = self._library(model, now_s)
        if value is None:
            value = self._blend(model, window, now_s)
        self._served[model] = value
        return value

    def forecast(self, model: str, window: int, now_s: float | None = None) -> float:
        """Forecast demand (req/s) of ``model`` for ``window`` (at ``now_s``: a forecast_method other than 'blend'
        needs it); see the class docstring."""
        f = self._point(model, window, now_s)
        if self.config.floor_on_latest:
            f = max(f, self.total(model, now_s, fresh_only=True))
        return f

    def to_dict(self) -> dict:
        """JSON-ready state (for storage and resume): a copy, later observations do not change it."""
        return {"curve": {m: list(v) for m, v in self.curve.items()},
                "ewma": [[m, t, v] for (m, t), v in self.ewma.items()],
                "latest": [[m, t, r, at, None if math.isinf(sp) else sp]
                           for (m, t), (r, at, sp) in self.latest.items()],
                "error": dict(self.error),
                "n_observations": self.n_observations, "newest_at_s": self.newest_at_s,
                "pending": [[m, d, w, list(v)] for m, ((d, w), v) in self.pending.items()],
                "history": {m: self._history_dict(h) for m, h in self.history.items() if h},
                "fit_span": {m: list(v) for m, v in self._fit_span.items() if m in self.history}}

    @staticmethod
    def _history_dict(hist: Mapping[int, list[float]]) -> dict:
        """A model's history (it is stored with every plan): the first slot, the mean total of every slot from it on
        (None where nothing was observed), and the newest slot's sum and observation count (the only slot still
        being averaged). Full precision, so a restarted forecaster forecasts exactly what this one does."""
        first, last = min(hist), max(hist)
        means = [hist[k][0] / hist[k][1] if k in hist else None for k in range(first, last + 1)]
        return {"first": first, "mean": means, "n_last": hist[last][1], "sum_last": hist[last][0]}

    def load_dict(self, d: dict) -> None:
        """Restore the state written by :meth:`to_dict` (models no longer known are dropped)."""
        for m, v in d.get("curve", {}).items():
            if m in self.curve and len(v) == self.n_windows:
                self.curve[m] = [float(x) for x in v]
        self.ewma = {(m, t): float(v) for m, t, v in d.get("ewma", []) if m in self.curve}
        # a state stored before spans were kept ([m, t, rate, at]) covers all time, as it was summed then
        self.latest = _TenantTable({(e[0], e[1]): (float(e[2]), float(e[3]),
                                                   math.inf if len(e) < 5 or e[4] is None else float(e[4]))
                                    for e in d.get("latest", []) if e[0] in self.curve})
        self.error = {m: float(v) for m, v in d.get("error", {}).items() if m in self.curve}
        self.n_observations = int(d.get("n_observations", 0))
        self.pending = {m: ((int(day), int(w)), [float(x) for x in v][-_MAX_WINDOW_SAMPLES:])
                        for m, day, w, v in d.get("pending", []) if m in self.curve and 0 <= int(w) < self.n_windows}
        self.history = {}
        for m, h in d.get("history", {}).items():
            if m not in self.curve or not h.get("mean"):
                continue
            first, means = int(h["first"]), h["mean"]
            hist = self.history[m] = {first + i: [float(v), 1.0] for i, v in enumerate(means) if v is not None}
            last = first + len(means) - 1
            if last in hist:
                n = max(1.0, float(h.get("n_last", 1.0)))
                hist[last] = [float(h["sum_last"]) if "sum_last" in h else hist[last][0] * n, n]
        self._late, self._fits, self._cache, self._newest = {}, {}, {}, {}
        self._fit_span = {m: (int(a), int(b)) for m, (a, b) in d.get("fit_span", {}).items() if m in self.history}
        newest = d.get("newest_at_s")
        if newest is None and self.latest:
            newest = max(v[1] for v in self.latest.values())
        self.newest_at_s = None if newest is None else float(newest)
