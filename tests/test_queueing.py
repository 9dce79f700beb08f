"""The M/G/1 sojourn quantile of the capacity model's TTFT tail (costmodels.queueing.mg1_sojourn_quantile_s)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleetplan.costmodels.queueing import mg1_sojourn_quantile_s, mm1_wait_quantile_s


def test_deterministic_service_by_hand():
    # S = 0.1 s at 5/s: rho 0.5, E[W] = 5 x 0.01 / (2 x 0.5) = 0.05 s, P(W + S > t) = 0.5 exp(-10 (t - 0.1)) = 0.05
    # at t = 0.1 + ln(10) / 10 = 0.33026 s
    assert mg1_sojourn_quantile_s(5.0, np.full(100, 0.1)) == pytest.approx(0.1 + math.log(10) / 10, rel=1e-6)
    assert mg1_sojourn_quantile_s(0.0, np.full(100, 0.1)) == pytest.approx(0.1)
    assert mg1_sojourn_quantile_s(11.0, np.full(100, 0.1)) == math.inf  # rho = 1.1: unstable


def test_matches_a_direct_sum_over_every_point():
    # The running log-sum-exp must give the tail the plain sum over all 512 quantile points gives (an independent
    # evaluation of the same formula), solved here by bisection on that sum.
    rng = np.random.default_rng(3)
    s = rng.lognormal(-2.0, 0.8, size=2000)
    lam = 0.6 / s.mean()
    rho = lam * s.mean()
    theta = rho / (lam * np.mean(s * s) / (2 * (1 - rho)))
    sub = np.quantile(s, (np.arange(512) + 0.5) / 512)

    def over(t):
        return float(np.mean(np.where(sub >= t, 1.0, rho * np.exp(-theta * np.maximum(t - sub, 0.0)))))

    lo, hi = 0.0, 100.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if over(mid) > 0.05 else (lo, mid)
    assert mg1_sojourn_quantile_s(lam, s) == pytest.approx(hi, rel=1e-6)


def test_exponential_service_is_the_mm1_tail_plus_service():
    # exponential service: the approximation is exact for the wait; with a large sample the sojourn quantile lies
    # between the wait's quantile and wait quantile + the service's p95
    rng = np.random.default_rng(0)
    s = rng.exponential(0.1, size=20000)
    w = mm1_wait_quantile_s(5.0, 10.0)
    q = mg1_sojourn_quantile_s(5.0, s)
    assert w < q < w + float(np.quantile(s, 0.95))
