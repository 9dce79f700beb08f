"""Speculative decoding as the cost models see it: the extra GPU work of a step and the tokens it yields.

One target step with speculation (:class:`~fleetplan.costmodels.engine.Speculation`: k drafted tokens, acceptance
rate alpha) costs

    step(B, c) = verify(B, c, k + 1) + k × draft_step(B, c)

* ``verify``: the target's forward pass over k + 1 positions per sequence (the k drafts and the position after
  them): the weights and each sequence's KV are read once, the compute, MoE experts touched and all-reduce bytes
  grow with B × (k + 1) (:func:`fleetplan.costmodels.latency.decode_step_time_s` with ``positions``);
* ``draft_step``: one decode step of the draft model at the same batch and context, on the same GPUs and tp (the
  draft proposes its k tokens one pass at a time); 0 for n-gram proposals (host work, not modelled);

and yields tau = (1 − alpha^(k+1)) / (1 − alpha) tokens per sequence on average
(:func:`~fleetplan.costmodels.engine.expected_tokens_per_step`, Leviathan et al. 2023). The cost models and the
replay take the *per-token* step, step(B, c) / tau, where they took the decode step: TPOT, Little's law and the
replay's decode runs then hold in expectation (the spread of accepted lengths around tau is not modelled: a TPOT
percentile is that of the mean acceptance). The decode speed-up at batch B is decode_step(B, c) × tau / step(B, c):
above 1 while the step is memory-bound (a verification reads the weights once for k + 1 tokens), below 1 once the
batch is compute-bound, where the k + 1 positions and the draft's passes cost more than they save.

Also charged: the draft prefills every prompt (prefill time adds the draft's), the draft's weights take GPU memory
and its KV cache adds its bytes per token to every sequence's. With chunked prefill a running sequence takes k + 1
tokens of the step's token budget (vLLM counts the drafted tokens).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from fleetplan.costmodels.engine import Speculation
from fleetplan.errors import InputError, check_range

__all__ = ["ACCEPTANCE_GRID_STEP", "AcceptanceBreakEven", "acceptance_break_even", "per_token_decode",
           "speculative_step_s", "speed_up"]


def speculative_step_s(verify_s: Callable[[float, float, float], float],
                       draft_step_s: Callable[[float, float], float] | None, spec: Speculation, batch: float,
                       context_tokens: float) -> float:
    """Seconds of one target step with speculation (module docstring): verify_s(batch, context, k + 1) + k ×
    draft_step_s(batch, context) (no draft term for 'ngram', or when ``draft_step_s`` is None for it).

    Args:
        verify_s: the target's step seconds for (batch, context tokens, positions per sequence).
        draft_step_s: the draft model's decode step seconds for (batch, context tokens); None only for 'ngram'.
        spec: the speculation (k, method).
        batch, context_tokens: running sequences and their mean context, tokens.

    Raises InputError when a 'draft_model' speculation has no ``draft_step_s``."""
    k = spec.num_speculative_tokens
    step = verify_s(batch, context_tokens, float(k + 1))
    if spec.method == "ngram":
        return step
    if draft_step_s is None:
        raise InputError(f"speculative decoding with draft model {spec.draft_model}: its step time is needed",
                         field="engine.speculative.draft_model", value=spec.draft_model)
    return step + k * draft_step_s(batch, context_tokens)


def per_token_decode(verify_s: Callable[[float, float, float], float],
                     draft_step_s: Callable[[float, float], float] | None,
                     spec: Speculation) -> Callable[[float, float], float]:
    """The decode-step function the cost models and the replay use under speculation: (batch, context) ->
    :func:`speculative_step_s` / tau seconds, one output token's share of a speculative step."""
    tau = spec.tokens_per_step

    def step(batch: float, context_tokens: float) -> float:
        return speculative_step_s(verify_s, draft_step_s, spec, batch, context_tokens) / tau

    return step


def speed_up(decode_step_s: Callable[[float, float], float], verify_s: Callable[[float, float, float], float],
             draft_step_s: Callable[[float, float], float] | None, spec: Speculation, batch: float,
             context_tokens: float) -> float:
    """Decode speed-up of speculation at (batch, context): decode_step_s × tau / :func:`speculative_step_s`
    (dimensionless; below 1 where speculation slows decoding down)."""
    return decode_step_s(batch, context_tokens) * spec.tokens_per_step / speculative_step_s(
        verify_s, draft_step_s, spec, batch, context_tokens)


#: Acceptance-rate step of the grid :func:`acceptance_break_even` samples before refining each crossing.
ACCEPTANCE_GRID_STEP = 0.05


@dataclass(frozen=True)
class AcceptanceBreakEven:
    """Where speculation pays over the acceptance rate alpha in [0, 1] (:func:`acceptance_break_even`).

    Capacity with speculation need not grow with alpha (under vLLM V1 the limiting check can move from TTFT to
    TPOT as alpha rises, and capacity falls), so paying is a set of ranges, not one threshold.

    Attributes:
        pays_at: the closed ranges (lo, hi) of alpha, in increasing order, on which capacity with speculation is
            above the target; each end is a rate that pays, within the search's tolerance of where paying starts
            or stops (lo 0.0 / hi 1.0 at the ends of [0, 1]). Empty: it pays at no sampled rate.
        break_even: the lowest alpha from which speculation pays at every higher rate (the start of the last range
            when that range reaches 1.0); None when it does not pay at alpha 1.
    """

    pays_at: tuple[tuple[float, float], ...]
    break_even: float | None

    def pays(self, alpha: float) -> bool:
        """True when ``alpha`` lies in one of the paying ranges (a rate the search sampled is decided exactly)."""
        return any(lo <= alpha <= hi for lo, hi in self.pays_at)

    def ranges_text(self) -> str:
        """The paying ranges as text: 'never', 'any', '>= 0.228', '0.226-0.576' or several joined by ', '."""
        if not self.pays_at:
            return "never"
        if self.pays_at == ((0.0, 1.0),):
            return "any"
        return ", ".join(f">= {lo:.3f}" if hi >= 1.0 else f"{lo:.3f}-{hi:.3f}" for lo, hi in self.pays_at)

    def note(self) -> str:
        """Why there is no break-even rate ('' when there is one)."""
        if self.break_even is not None:
            return ""
        if not self.pays_at:
            return "pays at no acceptance rate sampled, not even at 1"
        return f"pays only at {self.ranges_text()}, not at every higher rate"


def acceptance_break_even(capacity_at: Callable[[float], float], target: float, *, sample: tuple[float, ...] = (),
                          step: float = ACCEPTANCE_GRID_STEP, tolerance: float = 1e-4) -> AcceptanceBreakEven:
    """Where ``capacity_at(alpha)`` (req/s with speculation at acceptance rate alpha) is above ``target`` (the
    capacity without speculation, req/s: the draft runs on the replica's own GPUs, so equal capacity is equal cost).

    The rates 0, step, 2 × step, ..., 1 and those of ``sample`` (e.g. the rate asked about, so that the answer for
    it is exact) are evaluated; between two neighbours on either side of the target the crossing is found by
    bisection within ``tolerance``. The curve need not be monotone; a dip or a peak narrower than ``step`` between
    two samples on the same side is not seen.

    Returns :class:`AcceptanceBreakEven`. Raises InputError for a target that is not a finite number >= 0, a step
    outside (0, 1] or a sampled rate outside [0, 1]."""
    if not (math.isfinite(target) and target >= 0):
        raise InputError("the capacity without speculation must be a finite number >= 0 to break even against",
                         field="target", value=target)
    if not 0 < step <= 1:
        raise InputError("the acceptance-rate grid step must be in (0, 1]", field="step", value=step)
    for a in sample:
        check_range(a, field="acceptance_rate", low=0.0, high=1.0)
    n = math.ceil(1.0 / step - 1e-9)
    alphas = sorted({min(1.0, i * step) for i in range(n + 1)} | {1.0} | set(sample))
    memo: dict[float, bool] = {}

    def pays(a: float) -> bool:
        if a not in memo:
            memo[a] = capacity_at(a) > target
        return memo[a]

    def crossing(lo: float, hi: float) -> tuple[float, float]:
        # pays(lo) != pays(hi): narrow to within tolerance; (last rate on lo's side, first on hi's side).
        side = pays(lo)
        while hi - lo > tolerance:
            mid = 0.5 * (lo + hi)
            if pays(mid) == side:
                lo = mid
            else:
                hi = mid
        return lo, hi

    ranges: list[tuple[float, float]] = []
    start: float | None = 0.0 if pays(alphas[0]) else None
    for a, b in zip(alphas, alphas[1:], strict=False):
        if pays(a) == pays(b):
            continue
        last, first = crossing(a, b)
        if start is None:
            start = first
        else:
            ranges.append((start, last))
            start = None
    if start is not None:
        ranges.append((start, 1.0))
    break_even = ranges[-1][0] if ranges and ranges[-1][1] >= 1.0 else None
    return AcceptanceBreakEven(tuple(ranges), break_even)
