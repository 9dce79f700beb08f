"""Queueing and distribution formulas used by more than one model: the one home of the normal quantile.

* :func:`normal_quantile` and :data:`Z95`: standard normal quantiles (``statistics.NormalDist``; no SciPy needed).
* :func:`mm1_wait_quantile_s`: the waiting-time quantile of an M/M/1 queue (the capacity model's prefill queue,
  point 4 of :mod:`fleetplan.costmodels.capacity`, and the disaggregated prefill pool of
  :mod:`fleetplan.costmodels.split`).
* :func:`mg1_sojourn_quantile_s`: the quantile of wait + own service in an M/G/1 queue whose service times are a
  sample (the capacity model's TTFT, point 4 of :mod:`fleetplan.costmodels.capacity`).
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

import numpy as np

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


def mg1_sojourn_quantile_s(arrival_rate_per_s: float, service_s: np.ndarray, tail: float = P95_TAIL, *,
                           points: int = 512) -> float:
    """Time that wait + own service of an FCFS M/G/1 queue exceeds with probability ``tail``, seconds.

    ``service_s``: a sample of the service times (shape (n,), seconds; the queue's service distribution). The wait W
    takes the exponential approximation that matches the atom P(W > 0) = ρ and the Pollaczek-Khinchine mean
    E[W] = λ·E[S²] / (2(1 − ρ)): P(W > t) ≈ ρ·exp(−ρ·t / E[W]) (exact for exponential service, where it is the
    M/M/1 tail of :func:`mm1_wait_quantile_s`; Abate, Choudhury and Whitt, "Exponential approximations for tail
    probabilities in queues, I: waiting times", Operations Research 43(5), 1995, discuss its accuracy). Under FCFS a
    request's wait does not depend on its own service, so P(W + S > t) = E_S[P(W > t − S)], taken over ``points``
    quantiles of the sample and solved for t by bisection. λ ≤ 0: the quantile of S alone; ρ = λ·E[S] ≥ 1: inf.
    Example: deterministic S = 0.1 s at λ = 5/s: ρ = 0.5, E[W] = 5 × 0.01 / 1 = 0.05 s, P(W + S > t) =
    0.5·exp(−10·(t − 0.1)) = 0.05 at t = 0.1 + ln(10) / 10 = 0.330 s.
    """
    s = np.sort(np.asarray(service_s, dtype=np.float64))
    n = len(s)
    q_s = float(s[min(n - 1, math.ceil((1.0 - tail) * (n - 1) - 1e-12))])  # np.quantile's method="higher"
    rho = arrival_rate_per_s * float(s.mean())
    if arrival_rate_per_s <= 0 or rho <= 0:
        return q_s
    if rho >= 1.0:
        return math.inf
    mean_wait = arrival_rate_per_s * float(np.mean(s * s)) / (2.0 * (1.0 - rho))
    theta = rho / mean_wait
    # np.quantile's linear method at (i + 0.5) / points, on the sorted sample
    sub = np.interp((np.arange(points) + 0.5) / points * (n - 1), np.arange(n), s)
    # sum over sub_j < t of exp(-theta (t - sub_j)) = exp(log(sum_{j<k} exp(theta sub_j)) - theta t), k the first
    # j with sub_j >= t: one search and one running log-sum-exp instead of a pass over every point (same sum)
    log_cum = np.logaddexp.accumulate(theta * sub)

    def over(t: float) -> float:
        k = int(np.searchsorted(sub, t, side="left"))
        below = rho * math.exp(float(log_cum[k - 1]) - theta * t) if k > 0 else 0.0
        return ((points - k) + below) / points

    lo, hi = float(sub.min()), float(s.max()) + max(0.0, math.log(rho / tail)) / theta
    if over(lo) <= tail:
        return lo
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if over(mid) > tail:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-7 * hi:
            break
    return hi


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
