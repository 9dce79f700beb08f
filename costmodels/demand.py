"""Per-window demand: what one model (or tenant) asks of the fleet in each time window.

Readers in ``fleetplan.datasets`` turn traces and day curves into :class:`Demand`; the planner reads
``rate_mean_req_per_s`` (or the peak, if the options ask for it) and the token mix of each window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from fleetplan.errors import InputError

#: Highest request rate a window accepts, req/s (a sanity bound: it catches a rate given in the wrong unit).
MAX_RATE_REQ_PER_S = 1e7

#: Accepted token lengths of one request (prompt or output), tokens (low, high).
TOKENS_PER_REQUEST_RANGE: tuple[float, float] = (1.0, 2_000_000.0)


@dataclass(frozen=True)
class TokenMix:
    """Token lengths of a request population (tokens).

    Attributes:
        input_tokens_mean, input_tokens_p95: prompt length mean and 95th percentile.
        output_tokens_mean, output_tokens_p95: generated length mean and 95th percentile.
    """

    input_tokens_mean: float
    input_tokens_p95: float
    output_tokens_mean: float
    output_tokens_p95: float

    def __post_init__(self) -> None:
        low, high = TOKENS_PER_REQUEST_RANGE
        for f in ("input_tokens_mean", "input_tokens_p95", "output_tokens_mean", "output_tokens_p95"):
            v = getattr(self, f)
            if not isinstance(v, int | float) or math.isnan(v) or v < low or v > high:
                raise InputError(f"{v!r} tokens is outside 1..2,000,000; give token counts per request",
                                 field=f, value=v)
        if (self.input_tokens_p95 < self.input_tokens_mean * 0.5
                or self.output_tokens_p95 < self.output_tokens_mean * 0.5):
            raise InputError("p95 token length is far below the mean; check the columns are not swapped",
                             field="input_tokens_p95", value=self.input_tokens_p95)


@dataclass(frozen=True)
class WindowDemand:
    """Demand in one window.

    Attributes:
        start_s: window start, seconds from the start of the day (or trace).
        length_s: window length, seconds.
        rate_mean_req_per_s: mean arrival rate over the window, req/s.
        rate_peak_req_per_s: highest arrival rate over any 1-minute (or finer) sub-interval, req/s (>= mean).
        tokens: token mix of the window's requests.
        requests: number of requests observed (None for a day curve without a request count).
    """

    start_s: float
    length_s: float
    rate_mean_req_per_s: float
    rate_peak_req_per_s: float
    tokens: TokenMix
    requests: int | None = None

    def __post_init__(self) -> None:
        for f in ("rate_mean_req_per_s", "rate_peak_req_per_s"):
            v = getattr(self, f)
            if not isinstance(v, int | float) or math.isnan(v) or v < 0 or v > MAX_RATE_REQ_PER_S:
                raise InputError(f"{v!r} req/s is outside 0..{MAX_RATE_REQ_PER_S:g}", field=f, value=v)
        if not (self.length_s > 0):
            raise InputError(f"window length {self.length_s!r} s must be positive", field="length_s",
                             value=self.length_s)
        if self.rate_peak_req_per_s + 1e-9 < self.rate_mean_req_per_s:
            raise InputError(f"peak rate {self.rate_peak_req_per_s:g} req/s is below the mean "
                             f"{self.rate_mean_req_per_s:g} req/s", field="rate_peak_req_per_s",
                             value=self.rate_peak_req_per_s)


@dataclass(frozen=True)
class Demand:
    """Demand of one model (or tenant) over consecutive windows of equal length.

    Attributes:
        windows: one :class:`WindowDemand` per window, in time order, all of length ``window_length_s``.
        window_length_s: seconds per window (60 to 3600 for traces; a day curve may use its own).
        source: where it came from (trace name, day-curve series and scaling), shown in reports.
        synthetic: True when a seeded generator made it; every report labels such demand as synthetic.
    """

    windows: tuple[WindowDemand, ...]
    window_length_s: float
    source: str = ""
    synthetic: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not self.windows:
            raise InputError(f"demand from {self.source or 'input'} has no windows; the trace may be empty",
                             field="windows")
        for w in self.windows:
            if abs(w.length_s - self.window_length_s) > 1e-6:
                raise InputError(f"window at {w.start_s:g} s has length {w.length_s:g} s, expected "
                                 f"{self.window_length_s:g} s", field="length_s", value=w.length_s)

    @property
    def rates_req_per_s(self) -> list[float]:
        """Mean rate per window, req/s."""
        return [w.rate_mean_req_per_s for w in self.windows]

    @property
    def peak_req_per_s(self) -> float:
        """Highest window-mean rate, req/s."""
        return max(self.rates_req_per_s)
