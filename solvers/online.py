"""Online re-planning: keep a live plan for the current window and revise it every few minutes with few migrations.

Pieces (used by the ``fleetplan serve`` service, usable on their own):

* :func:`estimate_demand` turns one interval's counters into a demand rate from arrivals and queue growth (not
  completions alone: completions under-count when the fleet is saturated).
* :class:`Forecaster` forecasts a model's demand for a window of the day: the same window of the day curve
  (the scenario's curve, slowly reshaped by what is observed) blended with a recent exponentially weighted
  average (EWMA) of the observations; the newest observed rate is a floor (what arrives now is demand now).
* :class:`Replanner` holds the live placement (replica instances on nodes, each ready or still loading its
  weights, and shared GPUs) and runs heuristic rounds: add replicas where the forecast exceeds capacity (loading
  replicas count as coming capacity), best fit onto nodes with free GPUs; remove with hysteresis, only when the
  survivors carry the forecast at the target utilization after absorbing the removed replica's share; at most a
  migration budget of starts + stops per round. :meth:`Replanner.consider` adopts the part of a full MILP re-solve
  (the models it would move, in groups that share GPUs) whose saving over ``resolve_horizon_s`` exceeds a threshold
  after the cost of the migrations it needs; re-solves are sized for :meth:`Replanner.resolve_demand` (the
  forecast held over the scale-down cooldown, as the rounds' removals are).

The online plan is for one window: it is expressed as a one-window :class:`~fleetplan.placement.problem.Problem`
(:func:`window_problem`) and :class:`~fleetplan.placement.plan.Plan`, so ``validate`` checks it like any plan;
every plan a Replanner adopts passes it.

Units: seconds, req/s, bytes, USD.
"""

from __future__ import annotations

import copy
import logging
import math
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from fleetplan.errors import InputError
from fleetplan.placement.plan import Plan, SharedGPU, Status, evaluate
from fleetplan.placement.problem import Problem, ReplicaOption
from fleetplan.placement.validate import ValidationReport, validate

log = logging.getLogger(__name__)

OptionKey = tuple[str, str, int, int]
_EPS = 1e-9
#: Ways observations reshape the day curve (see OnlineConfig.curve_update).
CURVE_UPDATES = ("median", "ewma")
#: Most observed totals buffered per model for one window's median (later ones replace the oldest).
_MAX_WINDOW_SAMPLES = 512
#: Forecast methods (see OnlineConfig.forecast_method): today's blend, and statsforecast's models fitted on the
#: observed-rate history (season = one day of history slots).
FORECAST_METHODS = ("blend", "seasonal_naive", "autoets", "mstl")


@dataclass(frozen=True)
class OnlineConfig:
    """Policy knobs of the online re-planner (choices of the operator, not numbers about the world).

    Attributes:
        ewma_alpha: weight of the newest observation in the recent average, in (0, 1].
        day_curve_weight: forecast = w × day curve[window] + (1 − w) × EWMA, in [0, 1] (the 'blend' method), before
            the floor: with floor_on_latest even w = 1 forecasts the newest observed rate when that is higher.
        day_curve_alpha: with curve_update 'ewma', how fast each observation reshapes the day curve's value for its
            window, in [0, 1].
        floor_on_latest: never forecast below the newest observed rate (a burst is met within one round), whatever
            the method and day_curve_weight; an observation sets the floor until a newer one of its tenant replaces
            it or it is older than latest_max_age_s (``fleetplan serve --no-floor-on-latest`` turns it off).
            Measured with benchmarks/bench_replanner.py on ServeGen days 1, 5 and 9: without it the day costs 7.2%
            less ($938.57 instead of $1,011.52) but SLO attainment falls from 99.44% to 98.49% (the reactive
            autoscaler's: 99.11%), so it stays on.
        latest_max_age_s: an observation older than this no longer sets the floor, seconds.
        target_utilization: a replica is removed only if the survivors then run at most at this share of their
            usable capacity, in (0, 1]; the gap to 1 is the hysteresis band.
        migration_budget: most replica starts + stops in one heuristic round.
        resolve_min_saving_usd: a MILP re-solve is adopted only if it saves more than this, USD.
        resolve_horizon_s: the saving of a re-solve is counted over this long (until the next one), seconds.
        tenant_ttl_s: a tenant label silent for longer than this (by observation time) is dropped from the recent
            average and the floor, seconds: a relabelled or departed tenant stops counting.
        max_tenants_per_model: most live tenant labels per model; :meth:`Forecaster.observe` refuses one more.
        curve_update: how observations reshape the day curve. 'median' (robust, the default): the observed totals
            of one window of one day are buffered and, once that window is over, the curve's value moves
            ``day_curve_day_alpha`` of the way to their median, so a burst shorter than half a window does not
            rewrite tomorrow's curve. 'ewma': every observation moves it ``day_curve_alpha`` of the way (a 1000x
            burst of one round is echoed the next day at ~100x).
        day_curve_day_alpha: with curve_update 'median', the weight of one day's window median, in [0, 1].
        cooldown_s: scale-down stabilization window, seconds: removals are decided on the highest forecast of the
            last ``cooldown_s`` (the rule of Kubernetes' HPA scale-down stabilization), so the fleet does not turn
            from growing to shrinking within the cooldown; growing is never delayed (the forecast exceeding
            usable capacity is the band that lets the direction change back at once). 0 turns it off. Measured
            as floor_on_latest (days 1, 5 and 9): 900 s costs 1.5% less a day than 1800 s at 99.42% attainment
            instead of 99.44% (34 migrations a day instead of 29), 600 s 2.7% less at 99.41% (37 migrations); on
            days 3, 7 and 11 600 s costs 4.6% less ($971.74 instead of $1,018.20) at 99.53% instead of 99.58%, with
            39 migrations a day instead of 22 (the reactive autoscaler: $989.53, 99.41%, 74). The cooldown holds a
            replica after each peak for the forecast's 30-minute maximum (each forecast being max(MSTL point, newest
            observation)); the reactive autoscaler holds the larger of two readings. 1800 s stays the default: it
            keeps migrations well inside a budget of 40 a day.
        migration_cost_replica_hours: operational cost of one replica start or stop, in hours of that replica's
            price, charged on top of its load time when a re-solve is weighed: draining a stopped replica's queue
            and cold prefix caches on a new one cost minutes of its capacity, and each change risks a failed
            start; a quarter hour of the replica's price is a stated guess for these, not a measurement.
        resolve_drift_margin: a heuristic round whose plan costs more than (1 + margin) × the cost the last
            re-solve had per forecast req/s (model by model, at today's forecast) asks for a re-solve now
            (:attr:`Replanner.drifted`); the service runs one at its next tick.
        add_max_cost_ratio: a heuristic round adds only replicas whose GPU cost per usable req/s is at most this
            multiple of the model's most efficient option that fits (>= 1; e.g. not a tp-2 A100 replica of a 70B
            model at 3x the cost per req/s of a tp-4 one, to cover a small deficit a little cheaper this hour):
            such fragments made the fleet drift above the re-solve's cost and the next re-solve swap them out again
            (two migrations each, measured in benchmarks/bench_replanner.py).
        forecast_method: what forecasts a model's rate before the floor on the latest observation. 'blend': the
            day-curve/EWMA blend above. 'seasonal_naive', 'autoets', 'mstl': statsforecast's SeasonalNaive, AutoETS
            and MSTL (trend by AutoETS without season) with a season of one day, fitted on the history of observed
            totals in ``history_slot_s`` slots (missing slots interpolated, never zero) and forecasting the slot
            that holds the time asked for; AutoETS is refitted once a day of history has been added, MSTL and
            seasonal naive run on the newest history at every forecast. They need two days of history and the
            ``forecast`` extra (statsforecast); until then, or without it, the blend is used (logged once).
            The default is the winner of ``benchmarks/bench_forecast.py`` (held-out ServeGen days, one slot ahead,
            with the floor): the lowest MAPE among the methods that under-forecast by more than 10 % no more often
            than the blend (within two standard errors). Measured: MSTL 13.7 % MAPE, 10.4 % of slots under by
            > 10 %; blend 19.5 %, 10.0 %; AutoETS 11.9 % but 14.7 % under; seasonal naive 27.9 %, 8.7 %.
        history_slot_s: length of one slot of the observed-rate history, seconds (a divisor of a day; 600 is
            ServeGen's resolution and two service rounds).
        history_days: days of history kept per model (bounded state), >= 2; the slots the current fit was made on
            stay until it is replaced (at most a day more). It is part of the state stored with every plan, at full
            precision so a restarted service forecasts exactly as before: about 20 KB of JSON per model for 7 days
            of 600-s slots.
    """

    ewma_alpha: float = 0.3
    day_curve_weight: float = 0.5
    day_curve_alpha: float = 0.1
    floor_on_latest: bool = True
    latest_max_age_s: float = 1800.0
    target_utilization: float = 0.8
    migration_budget: int = 8
    resolve_min_saving_usd: float = 1.0
    resolve_horizon_s: float = 3600.0
    tenant_ttl_s: float = 900.0
    max_tenants_per_model: int = 100
    curve_update: str = "median"
    day_curve_day_alpha: float = 0.5
    cooldown_s: float = 1800.0
    migration_cost_replica_hours: float = 0.25
    resolve_drift_margin: float = 0.1
    add_max_cost_ratio: float = 1.5
    forecast_method: str = "mstl"
    history_slot_s: float = 600.0
    history_days: int = 7

    def __post_init__(self) -> None:
        if self.forecast_method not in FORECAST_METHODS:
            raise InputError(f"online config: forecast_method {self.forecast_method!r} is unknown; use one of "
                             f"{', '.join(FORECAST_METHODS)}", field="forecast_method", value=self.forecast_method)
        h = self.history_slot_s
        if not (isinstance(h, int | float) and math.isfinite(h) and 60 <= h <= 86400 and 86400 % h == 0):
            raise InputError("online config: history_slot_s must divide a day and be >= 60 seconds (e.g. 600)",
                             field="history_slot_s", value=h)
        if not isinstance(self.history_days, int) or self.history_days < 2:
            raise InputError("online config: history_days must be a whole number >= 2 (the models need two days)",
                             field="history_days", value=self.history_days)
        if self.curve_update not in CURVE_UPDATES:
            raise InputError(f"online config: curve_update {self.curve_update!r} is unknown; use "
                             f"{' or '.join(CURVE_UPDATES)}", field="curve_update", value=self.curve_update)
        for name, low, high, low_open in (("ewma_alpha", 0, 1, True), ("day_curve_weight", 0, 1, False),
                                          ("day_curve_day_alpha", 0, 1, False),
                                          ("day_curve_alpha", 0, 1, False), ("target_utilization", 0, 1, True)):
            v = getattr(self, name)
            if not isinstance(v, int | float) or not (low < v <= high if low_open else low <= v <= high):
                raise InputError(f"online config: {name} = {v!r} must be in {'(' if low_open else '['}{low}, {high}]",
                                 field=name, value=v)
        if not isinstance(self.max_tenants_per_model, int) or self.max_tenants_per_model < 1:
            raise InputError("online config: max_tenants_per_model must be a whole number >= 1",
                             field="max_tenants_per_model", value=self.max_tenants_per_model)
        if not isinstance(self.migration_budget, int) or self.migration_budget < 0:
            raise InputError("online config: migration_budget must be a whole number >= 0 (starts + stops per "
                             "round)", field="migration_budget", value=self.migration_budget)
        v = self.add_max_cost_ratio
        if not (isinstance(v, int | float) and math.isfinite(v) and v >= 1):
            raise InputError("online config: add_max_cost_ratio must be a finite number >= 1",
                             field="add_max_cost_ratio", value=v)
        for name in ("resolve_min_saving_usd", "resolve_horizon_s", "latest_max_age_s", "tenant_ttl_s", "cooldown_s",
                     "migration_cost_replica_hours", "resolve_drift_margin"):
            v = getattr(self, name)
            if not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                raise InputError(f"online config: {name} must be a finite number >= 0", field=name, value=v)


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
class Forecaster:
    """Demand forecast per model for a window of the day.

    Args:
        day_curve: {model: req/s per window} — the scenario's curve (``ModelSpec.demand_req_per_s``).
        window_length_s: seconds per window; the curve repeats every len(curve) × window_length_s.
        config: see :class:`OnlineConfig`.

    ``observe`` takes a rate per (model, tenant); a model's demand is the sum over its live tenants (a tenant is
    live while its newest observation is at most ``tenant_ttl_s`` older than the newest observation seen, or than
    ``now_s`` when a forecast is asked for a time).
    ``forecast(model, window, now_s)`` = day_curve_weight × curve[window] + (1 − day_curve_weight) × Σ EWMA,
    floored at the newest observed total when ``floor_on_latest`` (observations older than latest_max_age_s do
    not set the floor). Without live observations the EWMA term is the curve value itself.
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
        self.latest: dict[tuple[str, str], tuple[float, float]] = {}  # (rate, at_s)
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

    def _live(self, key: tuple[str, str], now_s: float | None) -> bool:
        ref = self.newest_at_s if now_s is None else max(now_s, self.newest_at_s or now_s)
        last = self.latest.get(key)
        return last is not None and (ref is None or ref - last[1] <= self.config.tenant_ttl_s)

    def tenants(self, model: str, now_s: float | None = None) -> set[str]:
        """Live tenant labels of ``model`` at ``now_s`` (default: the newest observation time)."""
        return {t for (m, t) in self.latest if m == model and self._live((m, t), now_s)}

    def expire(self, now_s: float | None = None, model: str | None = None) -> int:
        """Drop the state of tenants (of ``model``, or of every model) silent for more than ``tenant_ttl_s``;
        returns how many were dropped."""
        dead = [k for k in self.latest if (model is None or k[0] == model) and not self._live(k, now_s)]
        for k in dead:
            self.latest.pop(k, None)
            self.ewma.pop(k, None)
        return len(dead)

    def observe(self, model: str, rate_req_per_s: float, at_s: float, tenant: str = "default") -> None:
        """Record one interval's demand estimate (req/s) ending at ``at_s`` (unix s) for (model, tenant).

        Raises InputError (nothing changed) for an unknown model, a rate or time that is not a finite number
        (rate >= 0), or a new tenant label beyond ``max_tenants_per_model`` live ones."""
        if model not in self.curve:
            raise InputError(f"unknown model {model!r}", field="model", value=model)
        if not (isinstance(rate_req_per_s, int | float) and math.isfinite(rate_req_per_s) and rate_req_per_s >= 0):
            raise InputError("demand rate must be a finite number >= 0 req/s", field="rate_req_per_s",
                             value=rate_req_per_s)
        if not (isinstance(at_s, int | float) and math.isfinite(at_s)):
            raise InputError("observation time must be a finite number of unix seconds", field="at_s", value=at_s)
        c = self.config
        key = (model, tenant)
        if key not in self.latest or not self._live(key, at_s):
            live = self.tenants(model, at_s) - {tenant}
            if len(live) >= c.max_tenants_per_model:
                raise InputError(f"model {model!r} already has {len(live)} live tenant labels (the cap): reuse a "
                                 f"label, wait {c.tenant_ttl_s:g} s for silent ones to expire, or raise the cap",
                                 field="tenant", value=tenant)
        self.newest_at_s = at_s if self.newest_at_s is None else max(self.newest_at_s, at_s)
        self.expire(model=model)
        w = self.window_at(at_s)
        # the error of the forecast served last (a library model is not run again for every observation)
        before = self._blend(model, w) if c.forecast_method == "blend" else self._served.get(model)
        prev = self.ewma.get(key)
        self.ewma[key] = rate_req_per_s if prev is None else (1 - c.ewma_alpha) * prev + c.ewma_alpha * rate_req_per_s
        old = self.latest.get(key)
        if old is None or at_s >= old[1]:
            self.latest[key] = (rate_req_per_s, at_s)
        total = sum(r for (m, _), (r, _) in self.latest.items() if m == model)
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
        vals = [v for k, v in self.ewma.items() if k[0] == model and self._live(k, now_s)]
        recent = sum(vals) if vals else curve
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
            fresh = [r for (m, t), (r, at) in self.latest.items()
                     if m == model and (now_s is None or now_s - at <= self.config.latest_max_age_s)
                     and self._live((m, t), now_s)]
            if fresh:
                f = max(f, sum(fresh))
        return f

    def to_dict(self) -> dict:
        """JSON-ready state (for storage and resume): a copy, later observations do not change it."""
        return {"curve": {m: list(v) for m, v in self.curve.items()},
                "ewma": [[m, t, v] for (m, t), v in self.ewma.items()],
                "latest": [[m, t, r, at] for (m, t), (r, at) in self.latest.items()], "error": dict(self.error),
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
        self.latest = {(m, t): (float(r), float(at)) for m, t, r, at in d.get("latest", []) if m in self.curve}
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
            newest = max(at for _, at in self.latest.values())
        self.newest_at_s = None if newest is None else float(newest)


# ---- one-window problems ----------------------------------------------------------------------------------------
def window_problem(problem: Problem, demand_req_per_s: Mapping[str, float], *, name: str | None = None) -> Problem:
    """A one-window copy of ``problem`` whose demand is ``demand_req_per_s`` ({model: req/s}; 0 for models not
    given): the online plan is checked against it by ``validate``. Pools, options, margin, floors and ceilings
    are the same; the window keeps the original length."""
    models = tuple(replace(m, demand_req_per_s=(float(demand_req_per_s.get(m.name, 0.0)),)) for m in problem.models)
    return replace(problem, n_windows=1, models=models, name=name or f"{problem.name} (online window)")


def load_times(problem: Problem, load_bandwidth_bytes_per_s: float,
               weight_bytes: Mapping[str, float] | None = None) -> dict[OptionKey, float]:
    """Seconds a new replica of each option needs before it serves: its weights per GPU / load bandwidth per GPU
    (every GPU of the replica loads its shard in parallel). ``weight_bytes`` {model: bytes}; a model missing
    there is charged its whole per-GPU memory footprint (weights + KV reservation, an upper bound).
    Raises InputError for a bandwidth <= 0."""
    if not load_bandwidth_bytes_per_s > 0:
        raise InputError("load bandwidth must be > 0 bytes/s", field="load_bandwidth_bytes_per_s",
                         value=load_bandwidth_bytes_per_s)
    out = {}
    for o in problem.options:
        if weight_bytes and o.model in weight_bytes:
            per_gpu = weight_bytes[o.model] / (o.tp * o.pp)
        else:
            per_gpu = o.memory_bytes_per_gpu
        out[o.key] = per_gpu / load_bandwidth_bytes_per_s
    return out


# ---- live placement ---------------------------------------------------------------------------------------------
@dataclass
class _Instance:
    nodes: tuple[int, ...]
    ready_at_s: float


@dataclass
class _Shared:
    pool: str
    models: tuple[str, ...]
    node: int


class _Nodes:
    """Free GPUs per node of every pool; tensor-parallel groups stay inside a node, pipeline stages take whole
    nodes."""

    def __init__(self, problem: Problem) -> None:
        self.size = {p.id: p.gpus_per_node for p in problem.pools}
        self.free = {p.id: [p.gpus_per_node] * p.nodes for p in problem.pools}

    def place(self, pool: str, tp: int, pp: int) -> tuple[int, ...] | None:
        """Best fit: the node(s) with the fewest free GPUs that still hold the group; None when none does."""
        free = self.free[pool]
        if pp > 1:
            whole = [i for i, f in enumerate(free) if f == self.size[pool]][:pp]
            if len(whole) < pp:
                return None
            for i in whole:
                free[i] = 0
            return tuple(whole)
        best = -1
        for i, f in enumerate(free):
            if f >= tp and (best < 0 or f < free[best]):
                best = i
                if f == tp:
                    break
        if best < 0:
            return None
        free[best] -= tp
        return (best,)

    def can_place(self, pool: str, tp: int, pp: int) -> bool:
        free = self.free[pool]
        if pp > 1:
            return sum(1 for f in free if f == self.size[pool]) >= pp
        return any(f >= tp for f in free)

    def release(self, pool: str, nodes: tuple[int, ...], tp: int, pp: int) -> None:
        for i in nodes:
            self.free[pool][i] += self.size[pool] if pp > 1 else tp


@dataclass(frozen=True)
class Action:
    """One change between two consecutive plans: ``count`` replicas of an option started or stopped, or a shared GPU
    (``tp`` = 0, ``models`` its residents) started or stopped. ``ready_at_s``: when started replicas serve."""

    action: str  # 'start' | 'stop'
    model: str
    pool: str
    tp: int
    pp: int
    count: int
    ready_at_s: float | None = None
    models: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        d = {"action": self.action, "model": self.model, "pool": self.pool, "tp": self.tp, "pp": self.pp,
             "count": self.count}
        if self.ready_at_s is not None:
            d["ready_at_s"] = self.ready_at_s
        if self.models:
            d["shared_models"] = list(self.models)
        return d


@dataclass(frozen=True)
class OnlineResult:
    """A plan the Replanner adopted (or the outcome of a round).

    Attributes:
        at_s: unix time of the round.
        window: window index of the day curve the plan is for.
        reason: 'initial', 'round', 'resolve' or 'restored'.
        problem: the one-window Problem (demand = the demand the plan commits to: forecast minus ``unmet``).
        plan: the one-window Plan (target state: loading replicas included).
        report: ``validate(problem, plan)``.
        forecast_req_per_s: {model: forecast}.
        unmet_req_per_s: {model: forecast the plan cannot cover (migration budget or inventory exhausted)}.
        loading: {option key: ready times (unix s) of replicas still loading}.
        actions: changes against the previous plan.
        migrations: replica starts + stops (shared GPUs count one each).
        cost_usd_per_hour: GPU + egress cost of the plan per hour.
        round_time_s: wall time of the computation, seconds.
        message: notes (why a re-solve was or was not adopted, ...).
    """

    at_s: float
    window: int
    reason: str
    problem: Problem
    plan: Plan
    report: ValidationReport
    forecast_req_per_s: dict[str, float]
    unmet_req_per_s: dict[str, float]
    loading: dict[OptionKey, tuple[float, ...]]
    actions: tuple[Action, ...]
    migrations: int
    cost_usd_per_hour: float
    round_time_s: float
    message: str = ""
    extra: dict = field(default_factory=dict)


class Replanner:
    """The live placement of one fleet and the heuristic rounds that revise it.

    Args:
        problem: the (daily) Problem: pools, models with their day curves, options, margin.
        config: see :class:`OnlineConfig`.
        load_time_s: {option key: seconds before a new replica serves} (see :func:`load_times`); options missing
            there are ready at once.
        forecaster: a :class:`Forecaster` (default: one on the problem's day curves).

    Not thread-safe: the service serializes calls with a lock.
    """

    def __init__(self, problem: Problem, config: OnlineConfig | None = None,
                 load_time_s: Mapping[OptionKey, float] | None = None, forecaster: Forecaster | None = None) -> None:
        self.problem = problem
        self.config = config or OnlineConfig()
        self.load_time_s = dict(load_time_s or {})
        self.forecaster = forecaster or Forecaster({m.name: m.demand_req_per_s for m in problem.models},
                                                   problem.window_length_s, self.config)
        self.pools = problem.pool_by_id
        self.models = problem.model_by_name
        self.opts = problem.option_by_key
        self.shares = problem.share_by_key
        mu = 1 - problem.margin
        self.usable = {o.key: o.capacity_req_per_s * mu for o in problem.options}
        # a one-window plan commits what it uses: a committed GPU costs its committed rate per hour in use here
        self.price_per_hour = {o.key: o.gpus * self.pools[o.pool].usd_per_busy_gpu_hour for o in problem.options}
        self.by_model: dict[str, list[ReplicaOption]] = {m.name: [] for m in problem.models}
        for o in problem.options:
            self.by_model[o.model].append(o)
        self.egress_per_req_per_s_hour = {
            (m.name, p.site): problem.egress_usd_per_req_per_s_window(m, p.site) / problem.window_hours
            for m in problem.models for p in problem.pools}
        self.nodes = _Nodes(problem)
        self.instances: dict[OptionKey, list[_Instance]] = {}
        self.shared: list[_Shared] = []
        self.current: OnlineResult | None = None
        # forecasts of the last cooldown_s per model, [(at_s, req/s)], for the scale-down stabilization window
        self.recent_forecasts: dict[str, list[tuple[float, float]]] = {}
        # the last re-solve's GPU cost per model, USD/h, and the forecast it was sized for, req/s
        self.reference: dict[str, tuple[float, float]] = {}
        self.drifted = False

    # ---- state ---------------------------------------------------------------------------------------------
    def _clear(self) -> None:
        self.nodes = _Nodes(self.problem)
        self.instances = {}
        self.shared = []

    def _install(self, replicas: Mapping[OptionKey, int], shared: list[tuple[str, tuple[str, ...]]],
                 ready_at: Mapping[OptionKey, list[float]] | None = None) -> None:
        """Replace the placement by these counts, packed onto nodes largest group first (FFD: for group sizes that
        are powers of two dividing the node size, it packs whenever any packing exists)."""
        self._clear()
        ready_at = ready_at or {}
        for pool, models in shared:
            nodes = self.nodes.place(pool, 1, 1)
            if nodes is None:
                raise InputError(f"shared GPU on {pool} does not fit the pool's nodes", field="shared", value=pool)
            self.shared.append(_Shared(pool, tuple(models), nodes[0]))
        for key in sorted(replicas, key=lambda k: (-(k[2] * k[3]), k)):
            n = replicas[key]
            if key not in self.opts:
                raise InputError(f"replica key {key} is not an option of the problem", field="replicas", value=key)
            times = sorted(ready_at.get(key, []))[-n:] if n else []
            times = [0.0] * (n - len(times)) + list(times)
            for t in times:
                nodes = self.nodes.place(key[1], key[2], key[3])
                if nodes is None:
                    raise InputError(f"{n} replicas of {key} do not fit the pool's nodes", field="replicas",
                                     value=key)
                self.instances.setdefault(key, []).append(_Instance(nodes, t))

    def counts(self) -> dict[OptionKey, int]:
        """{option key: replicas} of the live placement (loading ones included)."""
        return {k: len(v) for k, v in self.instances.items() if v}

    def snapshot(self) -> dict:
        """JSON-ready live state: replicas with their ready times, shared GPUs, forecaster state."""
        return {"replicas": [{"model": k[0], "pool": k[1], "tp": k[2], "pp": k[3],
                              "ready_at_s": [i.ready_at_s for i in v]} for k, v in sorted(self.instances.items()) if v],
                "shared": [{"pool": s.pool, "models": list(s.models)} for s in self.shared],
                "forecaster": self.forecaster.to_dict(),
                "recent_forecasts": {m: [list(x) for x in v] for m, v in self.recent_forecasts.items()},
                "reference": {m: list(v) for m, v in self.reference.items()}}

    def clone(self) -> Replanner:
        """A copy whose rounds, re-solves and observations leave this one untouched (the problem and its tables
        are shared; the placement, nodes and forecaster are copied). The service stages a round on a clone and
        swaps it in only after the round's plan is committed."""
        other = copy.copy(self)
        other.load_time_s = dict(self.load_time_s)
        other.instances = {k: [replace(i) for i in v] for k, v in self.instances.items()}
        other.shared = list(self.shared)
        other.nodes = copy.deepcopy(self.nodes)
        other.forecaster = copy.deepcopy(self.forecaster)
        other.recent_forecasts = {m: list(v) for m, v in self.recent_forecasts.items()}
        other.reference = dict(self.reference)
        return other

    def fresh_forecaster(self) -> Forecaster:
        """A forecaster on the problem's day curves with no observations (to rebuild state by replaying)."""
        return Forecaster({m.name: m.demand_req_per_s for m in self.problem.models}, self.problem.window_length_s,
                          self.config)

    def refresh(self, at_s: float, reason: str) -> OnlineResult:
        """The live placement, unchanged, evaluated against the current forecast at ``at_s`` (no actions)."""
        return self._result(at_s, reason, t0=time.perf_counter(), before=self.counts())

    def restore(self, snap: dict, at_s: float) -> OnlineResult:
        """Resume from :meth:`snapshot`; returns the restored plan, validated against the current forecast (it
        is adopted even if the forecast moved: the next round repairs it). Raises InputError for a snapshot that
        does not match the problem."""
        self.forecaster.load_dict(snap.get("forecaster", {}))
        self.recent_forecasts = {m: [(float(t), float(f)) for t, f in v]
                                 for m, v in snap.get("recent_forecasts", {}).items() if m in self.models}
        self.reference = {m: (float(c), float(f)) for m, (c, f) in snap.get("reference", {}).items()
                          if m in self.models}
        reps, times = {}, {}
        for r in snap.get("replicas", []):
            key = (r["model"], r["pool"], int(r["tp"]), int(r["pp"]))
            reps[key] = len(r["ready_at_s"])
            times[key] = [float(t) for t in r["ready_at_s"]]
        self._install(reps, [(s["pool"], tuple(s["models"])) for s in snap.get("shared", [])], times)
        return self._result(at_s, "restored", t0=time.perf_counter(), before=self.counts())

    # ---- capacity ------------------------------------------------------------------------------------------
    def _dedicated(self) -> dict[str, float]:
        cap = dict.fromkeys(self.models, 0.0)
        for k, v in self.instances.items():
            cap[k[0]] += len(v) * self.usable[k]
        return cap

    def _fill_shared(self, need: Mapping[str, float]) -> list[dict[str, float]]:
        """Served rate of each shared GPU per resident model: each model's need (forecast − dedicated) spread over
        its shared GPUs, each GPU's compute share Σ served / capacity kept <= 1 − margin."""
        left = {m: max(0.0, v) for m, v in need.items()}
        mu = 1 - self.problem.margin
        out = []
        for s in self.shared:
            room = mu
            served = {}
            for m in s.models:
                cap = self.shares[(m, s.pool)].capacity_req_per_s
                take = min(left.get(m, 0.0), room * cap)
                served[m] = take
                left[m] = left.get(m, 0.0) - take
                room -= take / cap
            out.append(served)
        return out

    def _replica_count(self, model: str) -> int:
        return sum(len(v) for k, v in self.instances.items() if k[0] == model) + sum(
            1 for s in self.shared if model in s.models)

    # ---- the heuristic round --------------------------------------------------------------------------------
    def _choose_option(self, model: str, deficit: float) -> ReplicaOption | None:
        """The option a round adds for ``deficit`` req/s of ``model``: among those that fit the nodes and meet the
        model's SLO, and whose GPU cost per usable req/s is at most ``add_max_cost_ratio`` × the lowest among them
        (all of them when none is), the lowest hourly cost for the deficit (GPU + egress + start cost spread over
        resolve_horizon_s); None when nothing fits."""
        spec = self.models[model]
        fits = [o for o in self.by_model[model] if self.nodes.can_place(o.pool, o.tp, o.pp)
                and o.ttft_p95_s <= spec.ttft_p95_s * (1 + 1e-6) and o.tpot_p95_s <= spec.tpot_p95_s * (1 + 1e-6)]
        if not fits:
            return None
        per_req = {o.key: self.price_per_hour[o.key] / self.usable[o.key] for o in fits}
        cap = min(per_req.values()) * self.config.add_max_cost_ratio
        efficient = [o for o in fits if per_req[o.key] <= cap * (1 + 1e-9)]
        best, best_score = None, None
        for o in efficient:
            u = self.usable[o.key]
            n = max(1, math.ceil(deficit / u - _EPS))
            site = self.pools[o.pool].site
            hourly = n * self.price_per_hour[o.key] + min(deficit, n * u) * self.egress_per_req_per_s_hour[
                (model, site)]
            score = (hourly + o.start_cost_usd * 3600.0 / max(self.config.resolve_horizon_s, 1.0), -u, o.key)
            if best_score is None or score < best_score:
                best, best_score = o, score
        return best

    def round(self, at_s: float | None = None, *, budget: int | None = None, reason: str = "round") -> OnlineResult:
        """One heuristic round at unix time ``at_s`` (default now) for the current window; adopts and returns
        the new plan. ``budget`` overrides the config's migration budget (None: the config's; a negative value:
        unlimited, for a cold start).

        Order: (1) floors, then models whose forecast exceeds usable capacity (dedicated of ready and loading
        replicas + what their shared GPUs can serve) get replicas of the option with the lowest hourly cost for
        the deficit, best fit onto nodes, in order of the models' priority (higher first) and then of deficit;
        when nothing of a model fits, replicas of lower-priority models are stopped to make room
        (:meth:`_preempt`; each stop counts against the budget): when the forecast exceeds the fleet, demand is
        served by priority and the rest is reported in ``unmet_req_per_s``; (2) while budget is left, the replica
        whose removal saves the most is stopped if the survivors' usable capacity still covers
        forecast / target_utilization (for N equal replicas: forecast / (N − 1) <= target × usable per replica:
        the survivors absorb the removed share, N/(N − 1) more load each); loading replicas are stopped first
        (cancelling a load costs nothing served).
        """
        t0 = time.perf_counter()
        at_s = time.time() if at_s is None else float(at_s)
        c = self.config
        budget = c.migration_budget if budget is None else budget
        unlimited = budget < 0
        before = self.counts()
        w = self.forecaster.window_at(at_s)
        self.forecaster.expire(at_s)
        forecast = {m: self.forecaster.forecast(m, w, at_s) for m in self.models}
        held = self._hold(forecast, at_s)
        moves = 0
        ded = self._dedicated()
        served = self._fill_shared({m: forecast[m] - ded[m] for m in self.models})
        shared_cap = dict.fromkeys(self.models, 0.0)
        for s in served:
            for m, f in s.items():
                shared_cap[m] += f

        # (1) adds: floors first, then the largest deficit first.
        def deficit(m: str) -> float:
            return forecast[m] - ded[m] - shared_cap[m]

        # priority first (higher served first when the inventory runs out), then the largest deficit
        order = sorted(self.models, key=lambda m: (-self.models[m].priority, -deficit(m), m))
        for m in order:
            spec = self.models[m]
            while unlimited or moves < budget:
                n = self._replica_count(m)
                short_floor = n < spec.min_replicas
                d = deficit(m)
                if not short_floor and d <= 1e-9 * max(1.0, forecast[m]):
                    break
                if spec.max_replicas is not None and n >= spec.max_replicas:
                    break
                o = self._choose_option(m, max(d, 0.0))
                if o is None:
                    # nothing fits: stop replicas of lower-priority models to make room, within the budget
                    stopped = self._preempt(m, ded, budget=None if unlimited else budget - moves - 1)
                    moves += stopped
                    o = self._choose_option(m, max(d, 0.0)) if stopped else None
                if o is None:
                    break
                nodes = self.nodes.place(o.pool, o.tp, o.pp)
                if nodes is None:  # _choose_option checked that it fits; a pool that filled up meanwhile ends the round
                    break
                self.instances.setdefault(o.key, []).append(
                    _Instance(nodes, at_s + self.load_time_s.get(o.key, 0.0)))
                ded[m] += self.usable[o.key]
                moves += 1

        # (2) removals with hysteresis.
        target = c.target_utilization
        while unlimited or moves < budget:
            best = None
            for key, insts in self.instances.items():
                if not insts:
                    continue
                m = key[0]
                spec = self.models[m]
                if self._replica_count(m) - 1 < spec.min_replicas:
                    continue
                if ded[m] - self.usable[key] + shared_cap[m] < held[m] / target - 1e-9:
                    continue
                loading = max(i.ready_at_s for i in insts) > at_s
                score = (loading, self.price_per_hour[key], key)
                if best is None or score > best[0]:
                    best = (score, key)
            if best is None:
                break
            key = best[1]
            insts = self.instances[key]
            inst = max(insts, key=lambda i: i.ready_at_s)
            insts.remove(inst)
            self.nodes.release(key[1], inst.nodes, key[2], key[3])
            ded[key[0]] -= self.usable[key]
            moves += 1
        res = self._result(at_s, reason, t0=t0, before=before, forecast=forecast)
        self.drifted = self._drift(res)
        return res

    def _preempt(self, model: str, ded: dict[str, float], *, budget: int | None) -> int:
        """Stop replicas of models of lower priority than ``model`` (lowest priority first, loading ones first,
        never below a model's replica floor) until one replica of ``model`` fits; at most ``budget`` stops (None:
        unlimited), none at all when no set within it makes room. Updates ``ded`` (usable dedicated req/s per model)
        and returns the number of replicas stopped."""
        prio = self.models[model].priority
        spec = self.models[model]
        for o in sorted(self.by_model[model], key=lambda o: (self.price_per_hour[o.key] / self.usable[o.key], o.key)):
            if o.ttft_p95_s > spec.ttft_p95_s * (1 + 1e-6) or o.tpot_p95_s > spec.tpot_p95_s * (1 + 1e-6):
                continue
            victims = sorted(((self.models[k[0]].priority, -inst.ready_at_s, k, i)
                              for k, insts in self.instances.items() for i, inst in enumerate(insts)
                              if k[1] == o.pool and self.models[k[0]].priority < prio), key=lambda v: v[:3])
            trial = copy.deepcopy(self.nodes)
            left = {m: self._replica_count(m) for m in self.models}
            chosen: list[tuple[OptionKey, int]] = []
            for _p, _r, k, i in victims:
                if left[k[0]] - 1 < self.models[k[0]].min_replicas:
                    continue
                if budget is not None and len(chosen) >= budget:
                    break
                trial.release(k[1], self.instances[k][i].nodes, k[2], k[3])
                left[k[0]] -= 1
                chosen.append((k, i))
                if trial.can_place(o.pool, o.tp, o.pp):
                    break
            else:
                continue
            if not trial.can_place(o.pool, o.tp, o.pp):
                continue
            for k, i in sorted(chosen, key=lambda c: -c[1]):  # highest index first keeps the others' positions
                inst = self.instances[k].pop(i)
                self.nodes.release(k[1], inst.nodes, k[2], k[3])
                ded[k[0]] -= self.usable[k]
            return len(chosen)
        return 0

    def _hold(self, forecast: Mapping[str, float], at_s: float) -> dict[str, float]:
        """Record this round's forecasts and return, per model, the highest forecast of the last ``cooldown_s``
        (the forecast removals are decided on; with cooldown 0, the forecast itself)."""
        keep = self.config.cooldown_s
        out = {}
        for m, f in forecast.items():
            hist = [(t, v) for t, v in self.recent_forecasts.get(m, []) if at_s - keep < t <= at_s]
            hist.append((at_s, f))
            self.recent_forecasts[m] = hist if keep > 0 else []
            out[m] = max(v for _, v in hist) if keep > 0 else f
        return out

    def _cost_by_model(self, plan: Plan) -> dict[str, float]:
        """GPU cost per hour of each model's replicas in ``plan`` (a shared GPU split equally between its
        residents), USD/h."""
        out = dict.fromkeys(self.models, 0.0)
        for key, (n, *_) in plan.replicas.items():
            out[key[0]] += n * self.price_per_hour[key]
        for g in plan.shared:
            for m in g.models:
                out[m] += self.pools[g.pool].usd_per_busy_gpu_hour / len(g.models)
        return out

    def _set_reference(self, plan: Plan, forecast: Mapping[str, float]) -> None:
        cost = self._cost_by_model(plan)
        self.reference = {m: (cost[m], float(forecast.get(m, 0.0))) for m in self.models}

    def _drift(self, res: OnlineResult) -> bool:
        """True when ``res`` costs more than (1 + resolve_drift_margin) × what the last re-solve's plan cost per
        forecast req/s, model by model (a model whose forecast fell keeps the re-solve's cost as its reference)."""
        if not self.reference:
            return False
        expected = 0.0
        for m, (cost, f_ref) in self.reference.items():
            f = res.forecast_req_per_s.get(m, 0.0)
            expected += cost * max(1.0, f / f_ref) if f_ref > 0 else cost
        actual = sum(self._cost_by_model(res.plan).values())
        return actual > (1 + self.config.resolve_drift_margin) * expected + 1e-9

    def _result(self, at_s: float, reason: str, *, t0: float, before: Mapping[OptionKey, int],
                forecast: Mapping[str, float] | None = None, before_shared: list | None = None,
                message: str = "") -> OnlineResult:
        w = self.forecaster.window_at(at_s)
        if forecast is None:
            forecast = {m: self.forecaster.forecast(m, w, at_s) for m in self.models}
        ded = self._dedicated()
        served = self._fill_shared({m: forecast[m] - ded[m] for m in self.models})
        cover = dict(ded)
        for s in served:
            for m, f in s.items():
                cover[m] += f
        unmet = {m: max(0.0, forecast[m] - cover[m]) for m in self.models}
        committed = {m: forecast[m] - unmet[m] for m in self.models}
        problem = window_problem(self.problem, committed)
        counts = self.counts()
        plan = Plan(replicas={k: (n,) for k, n in counts.items()},
                    shared=tuple(SharedGPU(s.pool, s.models, {m: (f,) for m, f in sv.items()})
                                 for s, sv in zip(self.shared, served, strict=True)),
                    status=Status.HEURISTIC, backend=f"online-{reason}")
        ev = evaluate(problem, plan)
        plan = replace(plan, objective_usd=ev.total_usd)
        report = validate(problem, plan)
        actions = self._actions(before, counts, before_shared, at_s)
        loading = {k: tuple(sorted(i.ready_at_s for i in v if i.ready_at_s > at_s)) for k, v in self.instances.items()}
        loading = {k: v for k, v in loading.items() if v}
        migrations = sum(a.count for a in actions)
        res = OnlineResult(at_s=at_s, window=w, reason=reason, problem=problem, plan=plan, report=report,
                           forecast_req_per_s=dict(forecast), unmet_req_per_s=unmet, loading=loading,
                           actions=actions, migrations=migrations,
                           cost_usd_per_hour=ev.total_usd / problem.window_hours,
                           round_time_s=time.perf_counter() - t0, message=message)
        self.current = res
        return res

    def _actions(self, before: Mapping[OptionKey, int], after: Mapping[OptionKey, int], before_shared: list | None,
                 at_s: float) -> tuple[Action, ...]:
        out = []
        for key in sorted(set(before) | set(after)):
            d = after.get(key, 0) - before.get(key, 0)
            if d > 0:
                out.append(Action("start", key[0], key[1], key[2], key[3], d,
                                  ready_at_s=at_s + self.load_time_s.get(key, 0.0)))
            elif d < 0:
                out.append(Action("stop", key[0], key[1], key[2], key[3], -d))
        if before_shared is not None:
            now = [(s.pool, s.models) for s in self.shared]
            old = list(before_shared)
            for g in now:
                if g in old:
                    old.remove(g)
                else:
                    out.append(Action("start", "+".join(g[1]), g[0], 0, 1, 1, ready_at_s=at_s, models=g[1]))
            for g in old:
                out.append(Action("stop", "+".join(g[1]), g[0], 0, 1, 1, models=g[1]))
        return tuple(out)

    # ---- initial plan and full re-solves --------------------------------------------------------------------
    def initial(self, at_s: float | None = None) -> OnlineResult:
        """A cold-start plan for the current window: a heuristic round from an empty fleet with no migration
        budget and replicas counted as ready (there is nothing to migrate from)."""
        at_s = time.time() if at_s is None else float(at_s)
        self._clear()
        self.recent_forecasts = {}
        saved = self.load_time_s
        self.load_time_s = {}
        try:
            return self.round(at_s, budget=-1, reason="initial")
        finally:
            self.load_time_s = saved

    def start_from(self, plan: Plan, at_s: float, reason: str = "offline-plan") -> OnlineResult:
        """Install an offline (daily) plan's replicas and shared GPUs of the window of ``at_s``, counted as ready,
        and return it as the live plan (no actions). Raises InputError when its window count differs from the
        problem's or its replicas are not options of the problem or do not fit the nodes."""
        n_w = self.problem.n_windows
        if any(len(c) != n_w for c in plan.replicas.values()):
            raise InputError(f"the plan's replica counts do not have the problem's {n_w} windows (a plan of "
                             "another scenario?)", field="replicas")
        w = self.forecaster.window_at(at_s)
        self.recent_forecasts = {}
        self._install({k: c[w] for k, c in plan.replicas.items() if c[w]},
                      [(g.pool, tuple(g.models)) for g in plan.shared])
        return self.refresh(at_s, reason)

    def migration_cost_usd(self, candidate: Plan) -> tuple[float, int]:
        """(USD, count) of the replica starts and stops ``candidate`` needs from the live placement: each start
        costs its option's start cost (load time × price); a new shared GPU costs the start cost of its models'
        tp-1 options in that pool; and every start or stop costs ``migration_cost_replica_hours`` × its
        replica's (or shared GPU's) price per hour (drain, warm-up, risk: see :class:`OnlineConfig`)."""
        now = self.counts()
        h = self.config.migration_cost_replica_hours
        usd, n = 0.0, 0
        for key, counts in candidate.replicas.items():
            d = counts[0] - now.get(key, 0)
            if d > 0:
                usd += d * (self.opts[key].start_cost_usd + h * self.price_per_hour[key])
                n += d
        for key, c in now.items():
            d = max(0, c - (candidate.replicas.get(key, (0,))[0]))
            usd += d * h * self.price_per_hour[key]
            n += d
        old = [(s.pool, s.models) for s in self.shared]
        for g in candidate.shared:
            k = (g.pool, tuple(g.models))
            if k in old:
                old.remove(k)
                continue
            n += 1
            usd += h * self.pools[g.pool].usd_per_busy_gpu_hour
            usd += sum(self.opts[(m, g.pool, 1, 1)].start_cost_usd for m in g.models if (m, g.pool, 1, 1) in self.opts)
        usd += sum(h * self.pools[pool].usd_per_busy_gpu_hour for pool, _ in old)
        return usd, n + len(old)

    def resolve_demand(self, at_s: float) -> dict[str, float]:
        """{model: req/s} a full re-solve at ``at_s`` is sized for and checked against: the forecast, or the highest
        forecast a round recorded in the last ``cooldown_s`` when that is higher (the scale-down stabilization of
        the rounds holds for re-solves too: a re-solve does not shrink a model right after a round grew it, which
        made the fleet flap at a replica boundary, one start and one stop each time)."""
        w = self.forecaster.window_at(at_s)
        out = {}
        for m in self.models:
            f = self.forecaster.forecast(m, w, at_s)
            if self.config.cooldown_s > 0:
                f = max([f] + [v for t, v in self.recent_forecasts.get(m, []) if at_s - self.config.cooldown_s < t
                               <= at_s])
            out[m] = f
        return out

    def consider(self, candidate: Plan, at_s: float | None = None) -> tuple[bool, OnlineResult | None, str]:
        """Offer a full re-solve's one-window plan and adopt the part of it that pays for its migrations. Plans are
        checked against :meth:`resolve_demand` (what the candidate should be solved for).

        The models are split into groups that must move together (models sharing a GPU in the live plan or in
        the candidate); a group whose replicas and shared GPUs are the same in both needs no decision. For every
        subset of the other groups (all subsets up to 8 groups; beyond that all, none and each one alone), the
        mixed plan takes those groups from the candidate and keeps the rest; it counts only if it is valid against
        the current forecast. Its net saving is (current cost/h − its cost/h) × resolve_horizon_s − the cost of
        the migrations it needs (:meth:`migration_cost_usd`). The mix with the largest net saving is adopted when
        that saving exceeds resolve_min_saving_usd (the whole candidate is one of the mixes): a re-solve that
        reshuffles a model for a few cents does not move it, and one model's real saving is not blocked by
        another's needless moves. The cheaper of the re-solve's plan and the live one becomes the reference the
        rounds' drift is measured against (:attr:`drifted`), adopted or not: a cheaper plan kept out by its
        migrations stays the reference, so while the live fleet costs more than resolve_drift_margin above it the
        next rounds ask for a re-solve again (measured on ServeGen days 7 and 11: ~100 re-solves offered a day
        against 24 hourly ones). Those re-solves are what removes replicas the removal band keeps (with no drift
        re-solves at all, Llama-3.1-70B's GPU-hours rose from 218 to 222 a day), so the rule stays until the band
        is revisited with it.

        Returns (adopted, the adopted result or None, a message with the figures).
        """
        at_s = time.time() if at_s is None else float(at_s)
        t0 = time.perf_counter()
        forecast = self.resolve_demand(at_s)
        prob = window_problem(self.problem, forecast)
        if not candidate.has_solution or not candidate.replicas and not candidate.shared:
            return False, None, f"re-solve has no plan ({candidate.status.value}: {candidate.message[:200]})"
        cand = replace(candidate, objective_usd=None)
        rep = validate(prob, cand)
        if not rep.ok:
            return False, None, "re-solve plan fails the current forecast: " + "; ".join(rep.violations[:3])
        # the live placement evaluated at this forecast (its shared GPUs' served rates recomputed)
        kept_current = self.current
        cur_plan = replace(self._result(at_s, "round", t0=t0, before=self.counts(), forecast=forecast).plan,
                           objective_usd=None)
        self.current = kept_current
        cost_cur = evaluate(prob, cur_plan).total_usd / prob.window_hours
        cost_new = evaluate(prob, cand).total_usd / prob.window_hours
        best: tuple[float, int, Plan, float, float, tuple[str, ...]] | None = None
        all_groups = self._groups(cur_plan, cand)
        for take in self._subsets(all_groups):
            models = frozenset(m for g in take for m in g)
            mix = cand if len(take) == len(all_groups) else self._mix(cur_plan, cand, models)
            if mix is not cand and not validate(prob, mix).ok:
                continue
            cost_mix = cost_new if mix is cand else evaluate(prob, mix).total_usd / prob.window_hours
            mig_usd, mig_n = self.migration_cost_usd(mix)
            saving = (cost_cur - cost_mix) * self.config.resolve_horizon_s / 3600.0 - mig_usd
            if best is None or (saving, -mig_n) > (best[0], -best[1]):
                best = (saving, mig_n, mix, cost_mix, mig_usd, tuple(sorted(models)))
        assert best is not None  # the whole candidate is always a mix, and it is valid
        saving, mig_n, mix, cost_mix, mig_usd, taken = best
        part = "" if mix is cand else f" (its part for {', '.join(taken) or 'no model'})"
        msg = (f"re-solve: ${cost_new:,.2f}/h vs current ${cost_cur:,.2f}/h; best adoption{part}: ${cost_mix:,.2f}/h, "
               f"{mig_n} migrations costing ${mig_usd:,.2f}, net saving ${saving:,.2f} over "
               f"{self.config.resolve_horizon_s:g} s (threshold ${self.config.resolve_min_saving_usd:,.2f})")
        self.drifted = False
        self._set_reference(cand if cost_new <= cost_cur else cur_plan, forecast)
        if saving <= self.config.resolve_min_saving_usd or mig_n == 0:
            return False, None, msg + ": kept the current plan"
        before = self.counts()
        before_shared = [(s.pool, s.models) for s in self.shared]
        old_instances = {k: list(v) for k, v in self.instances.items()}
        ready = {}
        for key, counts in mix.replicas.items():
            keep = sorted(i.ready_at_s for i in old_instances.get(key, []))[:counts[0]]
            new = [at_s + self.load_time_s.get(key, 0.0)] * (counts[0] - len(keep))
            ready[key] = keep + new
        snap = self.snapshot()
        try:
            self._install({k: v[0] for k, v in mix.replicas.items() if v[0]},
                          [(g.pool, tuple(g.models)) for g in mix.shared], ready)
        except InputError as exc:
            self.restore(snap, at_s)
            return False, None, f"{msg}: not adopted ({exc})"
        res = self._result(at_s, "resolve", t0=t0, before=before, forecast=forecast, before_shared=before_shared,
                           message=msg + ": adopted")
        return True, res, msg + ": adopted"

    def _groups(self, a: Plan, b: Plan) -> list[frozenset[str]]:
        """The models that must move together between plans ``a`` and ``b`` (connected by shared GPUs in either),
        only the groups whose replicas or shared GPUs differ between the two."""
        parent = {m: m for m in self.models}

        def find(m: str) -> str:
            while parent[m] != m:
                m = parent[m]
            return m

        for g in (*a.shared, *b.shared):
            for m in g.models[1:]:
                parent[find(m)] = find(g.models[0])
        groups: dict[str, set[str]] = {}
        for m in self.models:
            groups.setdefault(find(m), set()).add(m)

        def part(p: Plan, ms: set[str]) -> tuple:
            reps = sorted((k, v[0]) for k, v in p.replicas.items() if k[0] in ms and v[0])
            sh = sorted((g.pool, tuple(g.models)) for g in p.shared if g.models[0] in ms)
            return tuple(reps), tuple(sh)

        return [frozenset(ms) for _, ms in sorted(groups.items()) if part(a, ms) != part(b, ms)]

    @staticmethod
    def _subsets(groups: list[frozenset[str]]) -> list[tuple[frozenset[str], ...]]:
        """The subsets of ``groups`` :meth:`consider` weighs: all of them up to 8 groups; beyond, all, none and
        each one alone."""
        if len(groups) <= 8:
            return [tuple(g for i, g in enumerate(groups) if mask >> i & 1) for mask in range(1 << len(groups))]
        return [tuple(groups), ()] + [(g,) for g in groups]

    @staticmethod
    def _mix(current: Plan, candidate: Plan, take: frozenset[str]) -> Plan:
        """``current`` with the replicas and shared GPUs of the models in ``take`` from ``candidate`` (``take`` is a
        union of :meth:`_groups`, so no shared GPU has residents on both sides)."""
        reps = {k: v for k, v in current.replicas.items() if k[0] not in take}
        reps.update({k: v for k, v in candidate.replicas.items() if k[0] in take})
        shared = tuple(g for g in current.shared if g.models[0] not in take) + tuple(
            g for g in candidate.shared if g.models[0] in take)
        return replace(candidate, replicas=reps, shared=shared, objective_usd=None)


__all__ = ["Action", "Forecaster", "OnlineConfig", "OnlineResult", "Replanner", "estimate_demand", "load_times",
           "window_problem"]
