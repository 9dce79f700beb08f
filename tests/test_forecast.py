"""The re-planner's forecast methods (OnlineConfig.forecast_method) on small synthetic series with known answers."""

from __future__ import annotations

import logging
import math
import sys

import pytest

from fleetplan.cli.main import main
from fleetplan.errors import InputError
from fleetplan.service.runtime import ReplanService, ServiceSettings, load_problem
from fleetplan.solvers.online.config import OnlineConfig
from fleetplan.solvers.online.forecast import Forecaster

SLOT_S = 3600.0  # one-hour history slots: a season of 24


def _fc(method: str, **kw) -> Forecaster:
    cfg = OnlineConfig(forecast_method=method, floor_on_latest=False, history_slot_s=SLOT_S, **kw)
    return Forecaster({"m": [10.0] * 24}, 3600.0, cfg)


def _periodic(h: int) -> float:
    return 10.0 + 5.0 * math.sin(2 * math.pi * h / 24)  # req/s in hour h of any day


def _feed(fc: Forecaster, values) -> None:
    for h, v in enumerate(values):
        if v is not None:
            fc.observe("m", v, (h + 1) * SLOT_S)  # the interval [h, h+1) h ends at (h+1) h


def test_seasonal_naive_forecasts_a_periodic_series_exactly():
    fc = _fc("seasonal_naive")
    _feed(fc, [_periodic(h) for h in range(48)])
    for ahead in range(1, 5):  # now = 48 h + ...: the slot holding now is hour 48 + ahead - 1 = same hour a day ago
        now = (48 + ahead - 1) * SLOT_S + 1.0
        assert fc.forecast("m", fc.window_at(now), now) == pytest.approx(_periodic(ahead - 1))


def test_autoets_forecasts_a_constant_series_as_that_constant():
    fc = _fc("autoets")
    _feed(fc, [7.0] * 48)
    now = 48 * SLOT_S
    assert fc.forecast("m", fc.window_at(now), now) == pytest.approx(7.0, rel=1e-3)


def test_mstl_forecasts_a_periodic_series_closely():
    fc = _fc("mstl")
    _feed(fc, [_periodic(h) for h in range(72)])
    now = 72 * SLOT_S
    # MSTL's seasonal component of a noise-free sine is the sine; its trend the mean (10): about 10 + 0 at hour 0.
    assert fc.forecast("m", fc.window_at(now), now) == pytest.approx(_periodic(0), abs=0.5)


def test_a_missing_slot_is_interpolated_never_zero():
    fc = _fc("seasonal_naive")
    values: list[float | None] = [_periodic(h) for h in range(48)]
    values[25] = None  # no observation in hour 1 of day 1
    _feed(fc, values)
    now = 49 * SLOT_S + 1.0  # the slot of hour 49 = hour 1 of day 2: seasonal naive repeats hour 25
    want = (_periodic(0) + _periodic(2)) / 2  # linear between its neighbours (hours 24 and 26)
    assert fc.forecast("m", fc.window_at(now), now) == pytest.approx(want)


def test_less_than_two_days_of_history_falls_back_to_the_blend(caplog):
    fc = _fc("seasonal_naive", curve_update="ewma", day_curve_alpha=0.0)  # the curve stays 10
    _feed(fc, [4.0] * 30)
    now = 30 * SLOT_S
    # blend = 0.5 x curve 10 + 0.5 x EWMA of a constant 4 = 7
    with caplog.at_level(logging.WARNING, logger="fleetplan.solvers.online"):
        assert fc.forecast("m", fc.window_at(now), now) == pytest.approx(7.0)
    assert "less than two days" in caplog.text


def test_without_statsforecast_the_blend_is_used_with_a_log_line(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "statsforecast.models", None)  # import fails
    fc = _fc("autoets", curve_update="ewma", day_curve_alpha=0.0)
    _feed(fc, [4.0] * 48)
    now = 48 * SLOT_S
    with caplog.at_level(logging.WARNING, logger="fleetplan.solvers.online"):
        assert fc.forecast("m", fc.window_at(now), now) == pytest.approx(7.0)  # the blend, as above
    assert "needs statsforecast" in caplog.text


def test_the_floor_applies_to_a_library_forecast():
    cfg = OnlineConfig(forecast_method="seasonal_naive", history_slot_s=SLOT_S)
    fc = Forecaster({"m": [10.0] * 24}, 3600.0, cfg)
    _feed(fc, [5.0] * 47 + [9.0])
    now = 48 * SLOT_S
    assert fc.forecast("m", fc.window_at(now), now) == pytest.approx(9.0)  # seasonal naive says 5; latest is 9


def test_history_is_bounded_and_survives_to_dict():
    fc = _fc("seasonal_naive", history_days=2)
    _feed(fc, [_periodic(h) for h in range(100)])
    assert len(fc.history["m"]) == 48  # two days of slots
    other = _fc("seasonal_naive", history_days=2)
    other.load_dict(fc.to_dict())
    now = 100 * SLOT_S + 1.0
    # stored at full precision; the history itself is periodic to float rounding
    got = other.forecast("m", other.window_at(now), now)
    assert got == pytest.approx(fc.forecast("m", fc.window_at(now), now), rel=1e-5)
    assert got == pytest.approx(_periodic(100 % 24), rel=1e-5)


def test_unknown_method_and_bad_history_are_refused():
    with pytest.raises(InputError, match="forecast_method"):
        OnlineConfig(forecast_method="prophet")
    with pytest.raises(InputError, match="history_slot_s"):
        OnlineConfig(history_slot_s=7000)
    with pytest.raises(InputError, match="history_days"):
        OnlineConfig(history_days=1)


def test_service_says_when_statsforecast_is_missing(tmp_path, monkeypatch, caplog):
    import importlib.util

    from click.testing import CliRunner


    r = CliRunner().invoke(main, ["serve", "--help"])
    assert "--forecast" in r.output and "autoets" in r.output
    problem, lt = load_problem(None)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "statsforecast"
                        else real(name, *a))
    with caplog.at_level(logging.WARNING, logger="fleetplan.service"):
        svc = ReplanService(ServiceSettings(db_url=f"sqlite:///{tmp_path}/s.db", insecure_no_auth=True, interval_s=0,
                                            resolve_every_s=0, online=OnlineConfig(forecast_method="mstl")),
                            problem, lt, clock=lambda: 1_764_547_200.0)
        svc.close()
    assert "needs statsforecast" in caplog.text and "blend" in caplog.text


def test_service_restart_carries_the_mstl_history(tmp_path):
    """The forecast after a restart equals the one before: the MSTL history (full precision) and the slots its fit was
    made on are part of the stored state. Hourly observations of a sine day plus noise, fed through the service: a
    round after two days fits MSTL; three more hours, another round (the same fit, run forward), then a second
    service resumes from the same database. Before the fix: 6-digit means and a refit on the newest slots."""
    problem, loads = load_problem(None)
    model = problem.models[0].name
    day0 = 1_700_000_000.0 - (1_700_000_000.0 % 86400)
    clock = [day0]
    online = OnlineConfig(forecast_method="mstl", history_slot_s=SLOT_S)
    settings = ServiceSettings(db_url=f"sqlite:///{tmp_path / 'a.db'}", insecure_no_auth=True, interval_s=0,
                               resolve_every_s=0, max_observation_age_s=1e9, online=online)
    svc = ReplanService(settings, problem, loads, clock=lambda: clock[0])
    noise = [0.3, -0.2, 0.1, -0.4, 0.25, 0.0, -0.1]
    for h in range(52):
        clock[0] = day0 + (h + 1) * SLOT_S
        rate = (_periodic(h) + noise[h % 7]) / 10
        svc.observe([{"model": model, "interval_s": SLOT_S, "arrivals": rate * SLOT_S, "at_s": clock[0]}])
        if h == 48:
            svc.replan()
    svc.replan()
    clock[0] += 1.0
    fc = svc.replanner.forecaster
    before = fc._library(model, clock[0])  # the MSTL forecast itself (the floor would hide a difference)
    assert before is not None  # MSTL ran (two days of history), not the blend
    again = ReplanService(settings, problem, loads, clock=lambda: clock[0])
    assert again.resumed
    assert again.replanner.forecaster._library(model, clock[0]) == before
    w = fc.window_at(clock[0])
    assert again.replanner.forecaster.forecast(model, w, clock[0]) == fc.forecast(model, w, clock[0])
