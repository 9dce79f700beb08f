"""Latency targets of a model (:class:`SLO`): TTFT, TPOT and an optional end-to-end latency at any percentile, and an
attainment target; the accepted ranges (sanity bounds that catch wrong units, not physical limits).
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetplan.errors import check_range

#: Accepted TTFT targets, seconds (low, high), at any percentile: below is not a real target, above is milliseconds
#: given as seconds. (The name predates the other percentiles.)
TTFT_P95_RANGE_S = (0.01, 120.0)


#: Accepted TPOT targets, seconds (low, high), at any percentile.
TPOT_P95_RANGE_S = (0.001, 2.0)


#: Accepted end-to-end latency targets, seconds (low, high).
E2E_RANGE_S = (0.01, 3600.0)


#: Percentiles a scenario may name in its SLO keys (``ttft_p99_s``, ``tpot_p50_s``, ...).
SLO_PERCENTILES = (50, 90, 95, 99)


#: Accepted attainment targets (share of requests meeting all of a model's targets).
ATTAINMENT_RANGE = (0.5, 0.9999)


#: Metrics an SLO can target: time to first token, time per output token, end-to-end latency.
SLO_METRICS = ("ttft", "tpot", "e2e")


@dataclass(frozen=True)
class SLO:
    """Latency targets of one model's traffic: each target is a latency at a percentile of the model's requests.

    Attributes:
        ttft_s: time-to-first-token target, seconds (TTFT_P95_RANGE_S: 0.01..120), at ``ttft_percentile``.
        tpot_s: time-per-output-token target, seconds (TPOT_P95_RANGE_S: 0.001..2), at ``tpot_percentile``.
        ttft_percentile, tpot_percentile: percentile of the requests the target holds for (50 <= p < 100;
            scenarios name 50, 90, 95 or 99). Default 95.
        e2e_s: optional end-to-end latency target (arrival to last token), seconds, at ``e2e_percentile``.
        attainment: optional share of requests that must meet all of the targets at once (0.5..0.9999).
    Raises InputError outside those ranges (e.g. a TTFT of 500, milliseconds where seconds are expected).

    The capacity model sizes each target at its :meth:`planning_quantile`: the target's own percentile, raised to
    1 − (1 − attainment)/n (n = number of targets) when an attainment is given, so that by the union bound at
    most a share 1 − attainment of requests misses any target.
    """

    ttft_s: float
    tpot_s: float
    ttft_percentile: float = 95.0
    tpot_percentile: float = 95.0
    e2e_s: float | None = None
    e2e_percentile: float = 95.0
    attainment: float | None = None

    def __post_init__(self) -> None:
        check_range(self.ttft_s, field="ttft_s", low=TTFT_P95_RANGE_S[0], high=TTFT_P95_RANGE_S[1], unit="s",
                    fix="give seconds (e.g. 0.5 for 500 ms)")
        check_range(self.tpot_s, field="tpot_s", low=TPOT_P95_RANGE_S[0], high=TPOT_P95_RANGE_S[1], unit="s",
                    fix="give seconds (e.g. 0.05 for 50 ms)")
        if self.e2e_s is not None:
            check_range(self.e2e_s, field="e2e_s", low=E2E_RANGE_S[0], high=E2E_RANGE_S[1], unit="s",
                        fix="give seconds (e.g. 30 for 30 s)")
        for name in ("ttft_percentile", "tpot_percentile", "e2e_percentile"):
            check_range(getattr(self, name), field=name, low=50.0, high=99.99,
                        fix=f"give a percentile such as {', '.join(map(str, SLO_PERCENTILES))}")
        if self.attainment is not None:
            check_range(self.attainment, field="attainment", low=ATTAINMENT_RANGE[0], high=ATTAINMENT_RANGE[1],
                        fix="give a share of requests, e.g. 0.99")

    def targets(self) -> list[tuple[str, float, float]]:
        """[(metric, percentile, target seconds)] for every target set: 'ttft', 'tpot' and 'e2e' when given."""
        out = [("ttft", self.ttft_percentile, self.ttft_s), ("tpot", self.tpot_percentile, self.tpot_s)]
        if self.e2e_s is not None:
            out.append(("e2e", self.e2e_percentile, self.e2e_s))
        return out

    def planning_quantile(self, metric: str) -> float:
        """The quantile (0..1) at which the capacity model sizes ``metric``'s target (class docstring)."""
        pct = {"ttft": self.ttft_percentile, "tpot": self.tpot_percentile, "e2e": self.e2e_percentile}[metric]
        q = pct / 100.0
        if self.attainment is not None:
            q = max(q, 1.0 - (1.0 - self.attainment) / len(self.targets()))
        return q

    def label(self) -> str:
        """E.g. 'TTFT p99 <= 2 s, TPOT p95 <= 100 ms, attainment >= 99%'."""
        parts = [f"TTFT p{self.ttft_percentile:g} <= {self.ttft_s:g} s",
                 f"TPOT p{self.tpot_percentile:g} <= {self.tpot_s * 1e3:g} ms"]
        if self.e2e_s is not None:
            parts.append(f"E2E p{self.e2e_percentile:g} <= {self.e2e_s:g} s")
        if self.attainment is not None:
            parts.append(f"attainment >= {self.attainment:.4g}")
        return ", ".join(parts)
