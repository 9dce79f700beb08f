"""Energy of GPU time: an ESTIMATE, not a measurement.

Board power is modelled as linear in utilization between idle and TDP:
    power_w(u) = idle_w + (tdp_w − idle_w) × u,  idle_w = idle_fraction × tdp_w,
and energy = power × hours / 1000 (kWh). Real boards draw less than TDP even when busy (memory-bound decode in
particular), so this overestimates busy power; the idle fraction (default 0.15) is data with its sources in
datasets/data/calibration/power.csv. Facility overhead (PUE), host CPUs and network are not included.
"""

from __future__ import annotations

import csv
import functools
import importlib.resources

from fleetplan.errors import InputError, check_range


@functools.lru_cache(maxsize=1)
def idle_fractions() -> dict[str, float]:
    """Idle board power as a fraction of TDP, by GPU name ('default' for all others), from power.csv."""
    path = importlib.resources.files("fleetplan.datasets") / "data" / "calibration" / "power.csv"
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    out = {}
    for i, r in enumerate(rows, start=1):
        out[r["gpu"]] = check_range(r["idle_fraction_of_tdp"], field="idle_fraction_of_tdp", low=0.0, high=1.0,
                                    source="datasets/data/calibration/power.csv", row=i)
    if "default" not in out:
        raise InputError("power.csv has no 'default' row", source="datasets/data/calibration/power.csv", field="gpu")
    return out


def idle_fraction(gpu_name: str | None = None) -> float:
    """Idle fraction of TDP for ``gpu_name`` (the default row when it has none)."""
    table = idle_fractions()
    return table.get(gpu_name or "default", table["default"])


_default_idle_fraction = idle_fraction


def power_w(tdp_w: float, utilization: float, idle_fraction: float | None = None) -> float:
    """Estimated board power, watts: idle + (TDP − idle) × utilization (module docstring).

    Raises InputError for a TDP outside 1..5000 W, a utilization or idle fraction outside 0..1.
    """
    tdp = check_range(tdp_w, field="tdp_w", low=1, high=5000, unit="W", fix="give watts per GPU")
    u = check_range(utilization, field="utilization", low=0, high=1, fix="give a fraction, e.g. 0.6 for 60%")
    f = _default_idle_fraction() if idle_fraction is None else check_range(
        idle_fraction, field="idle_fraction", low=0, high=1, fix="give a fraction of TDP")
    idle = f * tdp
    return idle + (tdp - idle) * u


def energy_kwh(power_w: float, utilization: float, hours: float, idle_fraction: float | None = None) -> float:
    """Estimated energy, kWh, of one GPU with board power ``power_w`` (its TDP, W) busy at ``utilization`` (0..1)
    for ``hours``: (idle + (TDP − idle) × utilization) × hours / 1000, idle = idle_fraction × TDP (default from
    power.csv). An estimate (module docstring). Raises InputError for out-of-range inputs (hours 0..1e6).

    Example: 700 W, utilization 0.5, 10 h, idle fraction 0.15: idle 105 W, power 105 + 595 × 0.5 = 402.5 W,
    energy 4.025 kWh.
    """
    h = check_range(hours, field="hours", low=0, high=1e6, unit="h")
    return _power(power_w, utilization, idle_fraction) * h / 1000.0


_power = power_w
