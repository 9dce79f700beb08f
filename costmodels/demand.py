"""Per-window demand: what one model (or tenant) asks of the fleet in each time window.

Readers in ``fleetplan.datasets`` turn traces and day curves into :class:`Demand`; the planner reads
``rate_mean_req_per_s`` (or the peak, if the options ask for it) and the token mix of each window.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass, field

import numpy as np

from fleetplan.costmodels.queueing import lognormal_sigma
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
        lengths: the population itself when known (a trace's requests): (prompt tokens, output tokens), two int
            arrays of the same length >= 1; None when the mix is given by its four statistics. Not compared:
            two mixes with the same statistics are equal. :meth:`draw` samples from it.
    """

    input_tokens_mean: float
    input_tokens_p95: float
    output_tokens_mean: float
    output_tokens_p95: float
    lengths: tuple[np.ndarray, np.ndarray] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        low, high = TOKENS_PER_REQUEST_RANGE
        for f in ("input_tokens_mean", "input_tokens_p95", "output_tokens_mean", "output_tokens_p95"):
            v = getattr(self, f)
            if not isinstance(v, int | float) or math.isnan(v) or v < low or v > high:
                raise InputError(f"{v!r} tokens is outside 1..2,000,000; give token counts per request",
                                 field=f, value=v)
        for kind in ("input", "output"):
            mean, p95 = getattr(self, f"{kind}_tokens_mean"), getattr(self, f"{kind}_tokens_p95")
            if p95 < mean * 0.5:
                raise InputError(f"p95 {p95:g} tokens is far below the mean {mean:g}; check the columns are not "
                                 "swapped", field=f"{kind}_tokens_p95", value=p95)
        if self.lengths is not None:
            inp, out = self.lengths
            if len(inp) != len(out) or len(inp) == 0:
                raise InputError(f"lengths need as many prompt as output lengths, at least one ({len(inp)} and "
                                 f"{len(out)} given)", field="lengths", value=(len(inp), len(out)))

    @functools.cached_property
    def lengths_digest(self) -> str:
        """A digest of :attr:`lengths` ('' without them): with the four statistics, it tells two populations apart
        (e.g. as a cache key)."""
        if self.lengths is None:
            return ""
        h = hashlib.blake2b(digest_size=16)
        for a in self.lengths:
            h.update(np.ascontiguousarray(a, dtype=np.int64).tobytes())
        return h.hexdigest()

    def scaled(self, input_factor: float = 1.0, output_factor: float = 1.0, *,
               input_cap_tokens: float | None = None) -> TokenMix:
        """This mix with every prompt length × ``input_factor`` and every output length × ``output_factor``: the
        statistics, and the population when known (rounded to whole tokens >= 1). With ``input_cap_tokens`` no
        prompt exceeds it (the p95, the mean and every prompt of the population are capped: e.g. the context minus
        the output). Raises InputError as the constructor does."""
        cap = math.inf if input_cap_tokens is None else max(1.0, float(input_cap_tokens))
        ip = min(self.input_tokens_p95 * input_factor, cap)
        lengths = None
        if self.lengths is not None:
            inp = np.clip(np.rint(np.asarray(self.lengths[0], dtype=np.float64) * input_factor), 1, cap)
            out = np.maximum(1, np.rint(np.asarray(self.lengths[1], dtype=np.float64) * output_factor))
            lengths = (inp.astype(np.int64), out.astype(np.int64))
        return TokenMix(min(self.input_tokens_mean * input_factor, ip), ip, self.output_tokens_mean * output_factor,
                        self.output_tokens_p95 * output_factor, lengths=lengths)

    def draw(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``n`` requests' (prompt tokens, output tokens), int64 arrays of shape (n,): drawn with replacement from
        :attr:`lengths` when known, else each length from the lognormal with the mix's mean and p95
        (:func:`~fleetplan.costmodels.queueing.lognormal_sigma`), rounded to whole tokens >= 1. The draws consume
        ``rng`` in a fixed order (indices; or prompts then outputs), so a seed gives the same requests."""
        if self.lengths is not None:
            idx = rng.integers(0, len(self.lengths[0]), size=n)
            return (np.asarray(self.lengths[0], dtype=np.int64)[idx],
                    np.asarray(self.lengths[1], dtype=np.int64)[idx])
        return (_lognormal(rng, self.input_tokens_mean, self.input_tokens_p95, n),
                _lognormal(rng, self.output_tokens_mean, self.output_tokens_p95, n))


def _lognormal(rng: np.random.Generator, mean: float, p95: float, n: int) -> np.ndarray:
    s = lognormal_sigma(mean, max(p95, 1.0))
    mu = math.log(mean) - s * s / 2
    return np.maximum(1, np.rint(rng.lognormal(mu, s, size=n))).astype(np.int64)


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
