"""Energy of GPU time: an ESTIMATE, not a measurement.

Board power is modelled as linear in utilization between idle and TDP:
    power_w(u) = idle_w + (tdp_w − idle_w) × u,  idle_w = idle_fraction × tdp_w,
and energy = power × hours / 1000 (kWh). Real boards draw less than TDP even when busy (memory-bound decode in
particular), so this overestimates busy power; the idle fraction is data with its sources in
datasets/data/calibration/power.csv (read by :func:`fleetplan.datasets.calibration.load_idle_fractions`; callers
pass it in). Facility overhead (PUE), host CPUs and network are not included.
"""

from __future__ import annotations

from collections.abc import Mapping

from fleetplan.errors import InputError, check_range


def idle_fraction_for(table: Mapping[str, float], gpu_name: str | None = None) -> float:
    """Idle fraction of TDP for ``gpu_name`` in ``table`` (GPU name -> fraction, with a 'default' row used for GPUs
    without a row of their own). Raises InputError when the table has no 'default' row."""
    if "default" not in table:
        raise InputError("idle-fraction table has no 'default' row", field="gpu", value=sorted(table))
    return table.get(gpu_name or "default", table["default"])


def power_w(tdp_w: float, utilization: float, idle_fraction: float) -> float:
    """Estimated board power, watts: idle + (TDP − idle) × utilization, idle = idle_fraction × TDP (module
    docstring).

    Raises InputError for a TDP outside 1..5000 W, a utilization or idle fraction outside 0..1.
    """
    tdp = check_range(tdp_w, field="tdp_w", low=1, high=5000, unit="W", fix="give watts per GPU")
    u = check_range(utilization, field="utilization", low=0, high=1, fix="give a fraction, e.g. 0.6 for 60%")
    f = check_range(idle_fraction, field="idle_fraction", low=0, high=1, fix="give a fraction of TDP")
    idle = f * tdp
    return idle + (tdp - idle) * u


def energy_kwh(power_w: float, utilization: float, hours: float, idle_fraction: float) -> float:
    """Estimated energy, kWh, of one GPU with board power ``power_w`` (its TDP, W) busy at ``utilization`` (0..1)
    for ``hours``: (idle + (TDP − idle) × utilization) × hours / 1000, idle = idle_fraction × TDP. An estimate
    (module docstring). Raises InputError for out-of-range inputs (hours 0..1e6).

    Example: 700 W, utilization 0.5, 10 h, idle fraction 0.15: idle 105 W, power 105 + 595 × 0.5 = 402.5 W,
    energy 4.025 kWh.
    """
    h = check_range(hours, field="hours", low=0, high=1e6, unit="h")
    return _power(power_w, utilization, idle_fraction) * h / 1000.0


def owned_marginal_usd_per_gpu_hour(tdp_w: float, idle_fraction: float, usd_per_kwh: float, pue: float) -> float:
    """Marginal cost of one busy hour of a GPU one owns, USD: the power a busy GPU draws above an idle one
    (TDP − idle, i.e. :func:`power_w` at utilization 1 less at 0: an owned GPU draws idle power and was bought
    whether it serves or not, so neither is a decision), times the facility overhead ``pue`` and the electricity
    price ``usd_per_kwh``. An ESTIMATE (module docstring: busy power is taken at TDP, an upper estimate).

    Example: H100 SXM 700 W, idle fraction 0.15, PUE 1.56, 0.13 USD/kWh: (700 − 105) W × 1.56 × 0.13 / 1000
    = 0.1207 USD per GPU-hour. Raises InputError for out-of-range inputs.
    """
    price = check_range(usd_per_kwh, field="electricity_usd_per_kwh", low=0, high=10, unit="USD/kWh")
    overhead = check_range(pue, field="pue", low=1, high=5, fix="give a power usage effectiveness >= 1")
    extra_w = power_w(tdp_w, 1.0, idle_fraction) - power_w(tdp_w, 0.0, idle_fraction)
    return extra_w * overhead * price / 1000.0


_power = power_w

__all__ = ["energy_kwh", "idle_fraction_for", "owned_marginal_usd_per_gpu_hour", "power_w"]
