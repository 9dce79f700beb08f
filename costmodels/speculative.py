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

from fleetplan.costmodels.engine import Speculation
from fleetplan.errors import InputError

__all__ = ["break_even_acceptance_rate", "per_token_decode", "speculative_step_s", "speed_up"]


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


def break_even_acceptance_rate(capacity_at: Callable[[float], float], target: float, *,
                               tolerance: float = 1e-4) -> float | None:
    """The smallest acceptance rate alpha in [0, 1] at which ``capacity_at(alpha)`` reaches ``target`` (the
    capacity per dollar without speculation: the draft runs on the replica's own GPUs, so equal capacity is equal
    cost), by bisection (capacity grows with alpha: tau does, the step cost does not depend on it).

    Returns 0.0 when speculation reaches the target at alpha 0, None when it does not even at alpha 1, else the
    rate within ``tolerance``. Raises InputError for a target that is not a positive finite number."""
    if not (math.isfinite(target) and target > 0):
        raise InputError("the capacity without speculation must be a positive number to break even against",
                         field="target", value=target)
    if capacity_at(0.0) >= target:
        return 0.0
    if capacity_at(1.0) < target:
        return None
    lo, hi = 0.0, 1.0
    while hi - lo > tolerance:
        mid = 0.5 * (lo + hi)
        if capacity_at(mid) >= target:
            hi = mid
        else:
            lo = mid
    return hi
