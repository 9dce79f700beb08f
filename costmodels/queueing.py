"""Queueing and distribution formulas used by more than one model: the one home of the normal quantile.

* :func:`normal_quantile` and :data:`Z95`: standard normal quantiles (``statistics.NormalDist``; no SciPy needed).
* :func:`mm1_wait_quantile_s`: the waiting-time quantile of an M/M/1 queue (the capacity model's prefill queue,
  point 4 of :mod:`fleetplan.costmodels.capacity`, and the disaggregated prefill pool of
  :mod:`fleetplan.costmodels.split`).
* :func:`poisson_occupancy_quantile`: the p95 of a Poisson number of sequences in decode (M/G/∞ occupancy,
  point 8 of :mod:`fleetplan.costmodels.capacity`), normal approximation.
* :func:`lognormal_quantile`: any quantile of that lognormal (token lengths at an SLO's percentile,
  point 9 of :mod:`fleetplan.costmodels.capacity`).
* :func:`lognormal_sigma`: the sigma of a lognormal with a given mean and 95th percentile (synthetic token lengths of
  :mod:`fleetplan.datasets.traces` and :mod:`fleetplan.simulator.replay`).
"""

from __future__ import annotations

import math
from statistics import NormalDist

_STANDARD_NORMAL = NormalDist()


def normal_quantile(q: float) -> float:
    """The ``q`` quantile of the standard normal distribution (0 < q < 1); raises ``StatisticsError`` (a
    ValueError) outside that range."""
    return _STANDARD_NORMAL.inv_cdf(q)


#: Standard normal 95th percentile, 1.6448536...
Z95 = normal_quantile(0.95)
#: Tail probability of a p95 (the queueing terms of the capacity model size for it).
P95_TAIL = 0.05


def mm1_wait_quantile_s(arrival_rate_per_s: float, service_rate_per_s: float, tail: float = P95_TAIL) -> float:
    """Waiting time (before service starts) that an M/M/1 queue exceeds with probability ``tail``, seconds.

    P(W > t) = ρ·exp(−(μ − λ)·t) with ρ = λ/μ, so t = max(0, ln(ρ/tail)) / (μ − λ) (Kleinrock, Queueing Systems
    vol. 1, §3.2). 0 for no arrivals (λ ≤ 0); the caller keeps λ < μ (the queue is unstable otherwise).
    """
    lam, mu = arrival_rate_per_s, service_rate_per_s
    if lam <= 0:
        return 0.0
    return max(0.0, math.log(lam / mu / tail)) / (mu - lam)


def poisson_occupancy_quantile(mean: float, z: float = Z95) -> float:
    """The p95 (for the default ``z``) of a Poisson count with mean ``mean``, normal approximation:
    mean + z·sqrt(mean). With Poisson arrivals the sequences in decode are Poisson (M/G/∞ occupancy)."""
    return mean + z * math.sqrt(mean)


def lognormal_sigma(mean: float, p95: float, z: float = Z95) -> float:
    """Sigma of a lognormal with mean ``mean`` and 95th percentile ``p95``: ln(p95/mean) = z·s − s²/2, the smaller
    root. Ratios above exp(z²/2) (about 3.87) cannot be met; sigma = z then gives the largest p95/mean possible.
    Ratios at or below 1 give sigma = 0 (every draw is the mean). The lognormal's mu is then ln(mean) − s²/2."""
    r = math.log(p95 / mean)
    if r <= 0:
        return 0.0
    disc = z * z - 2 * r
    return z - math.sqrt(disc) if disc > 0 else z


def lognormal_quantile(mean: float, p95: float, q: float) -> float:
    """The ``q`` quantile (0 < q < 1) of the lognormal with mean ``mean`` and 95th percentile ``p95``
    (:func:`lognormal_sigma`): exp(mu + s·z_q) with mu = ln(mean) − s²/2. Equals ``p95`` at q = 0.95 when that
    p95/mean ratio is reachable (<= exp(z95²/2)); the mean itself when p95 <= mean."""
    s = lognormal_sigma(mean, p95)
    return math.exp(math.log(mean) - s * s / 2 + s * normal_quantile(q))
