"""The online re-planner's policy knobs (:class:`OnlineConfig`): choices of the operator, each with the measurement
behind its default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fleetplan.errors import InputError

#: Ways observations reshape the day curve (see OnlineConfig.curve_update).
CURVE_UPDATES = ("median", "ewma")


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
            Chosen on ServeGen days 1, 5 and 9 (an H100 replica of Llama-3.1-70B bought for a peak stayed all day
            under 3,600 s: no re-solve saved enough within one hour to pay its migrations); checked on days 3, 7
            and 11 (`benchmarks/bench_replanner.py --arrivals poisson --variant resolve_horizon_s=3600`, with the
            1,800-s cooldown of then): 14,400 s
            averages $963.64/day at 99.60% attainment and 34 migrations, against $1,019.08, 99.60% and 23 at
            3,600 s and the reactive autoscaler's $991.28, 99.46% and 76.
        tenant_ttl_s: a tenant label silent for longer than this (by observation time) is dropped from the recent
            average and the floor, seconds: a relabelled or departed tenant stops counting.
        tenant_silent_spans: a tenant is also dropped once silent for this many of its own spans (the longer of its
            ``interval_s`` and the time between its last two reports), seconds / seconds, > 0: a label that reports
            every minute and stops counts for 3 minutes, not ``tenant_ttl_s`` (a relabelled stream made 15 live
            labels of one 2 req/s stream). Observations without ``interval_s`` keep ``tenant_ttl_s`` alone.
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
            usable capacity is the band that lets the direction change back at once). 0 turns it off. Chosen on
            ServeGen days 1, 5 and 9 at the benchmark's 300-s rounds (`benchmarks/bench_replanner.py --arrivals
            poisson --days 1 5 9 --no-clairvoyant --variant cooldown_s=600 --variant cooldown_s=900 --variant
            cooldown_s=1200`, with make-before-break and queues carried): averages per day 600 s $948.50 at 99.39%
            attainment and 48 migrations; 900 s $960.71, 99.40%, 45; 1200 s $962.20, 99.40%, 42; 1800 s (the
            default before) $968.59, 99.35%, 33; the reactive autoscaler $1,028.72, 99.31%, 111; the HPA-like
            $1,071.01, 99.54%, 167. 600 s is the cheapest setting and does not lower attainment; no setting
            reaches the HPA-like's attainment on these days. Its 48 migrations a day are above the 40 the 1800-s
            default was kept for, below every baseline that follows demand. Checked on days 3, 7 and 11 in
            docs/online.md.
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
    resolve_horizon_s: float = 14400.0
    tenant_ttl_s: float = 900.0
    max_tenants_per_model: int = 100
    curve_update: str = "median"
    day_curve_day_alpha: float = 0.5
    cooldown_s: float = 600.0
    migration_cost_replica_hours: float = 0.25
    resolve_drift_margin: float = 0.1
    add_max_cost_ratio: float = 1.5
    forecast_method: str = "mstl"
    history_slot_s: float = 600.0
    history_days: int = 7
    tenant_silent_spans: float = 3.0

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
        v = self.tenant_silent_spans
        if not (isinstance(v, int | float) and not isinstance(v, bool) and v > 0 and not math.isnan(v)):
            raise InputError("online config: tenant_silent_spans must be a number > 0 (inf: tenant_ttl_s alone)",
                             field="tenant_silent_spans", value=v)
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
