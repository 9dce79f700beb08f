"""Capacity of one replica from measured performance instead of the roofline: step times measured per deployment
(:class:`MeasuredLatency`, e.g. the Splitwise profile) through the same queueing and memory model, and serving
benchmarks or throughput tables (:class:`MeasuredProfile`: ``vllm bench serve``, GuideLLM, AIBrix, step CSVs) read
as the largest measured rate that meets the SLO at its percentile.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol, get_args

from fleetplan.costmodels.capacity import ReplicaCapacity, best_engine, kv_tokens_held, replica_capacity_from_latency
from fleetplan.costmodels.demand import TokenMix
from fleetplan.costmodels.engine import DEFAULT_ENGINE, EngineConfig
from fleetplan.costmodels.hardware import GPU, Model
from fleetplan.costmodels.kvtiers import HostTier
from fleetplan.costmodels.queueing import (
    lognormal_quantile,
)
from fleetplan.costmodels.slo import SLO
from fleetplan.errors import InputError


class MeasuredLatency(Protocol):
    """Measured step times of one deployment (e.g. :class:`fleetplan.datasets.profiles.SplitwiseProfile`)."""

    @property
    def model(self) -> str: ...

    @property
    def hardware(self) -> str: ...

    @property
    def tp(self) -> int: ...

    def prefill_time_s(self, prompt_tokens: float, batch: float = 1) -> float: ...

    def decode_step_time_s(self, batch: float, context_tokens: float = 0.0) -> float: ...


def profile_replica_capacity(profile: MeasuredLatency, mix: TokenMix, slo: SLO, *, model: Model, gpu: GPU,
                             kv_budget_bytes: float | None = None, memory_utilization: float = 0.9,
                             weight_dtype: str = "bf16", kv_dtype: str = "bf16",
                             engine: EngineConfig = DEFAULT_ENGINE) -> ReplicaCapacity:
    """Capacity from a measured :class:`~fleetplan.datasets.profiles.SplitwiseProfile` instead of the roofline
    (same queueing and memory model; decode beyond the profile's largest measured batch is refused), replayed under
    ``engine`` (an unset budget: the best of vLLM's default for ``gpu`` and smaller ones,
    :func:`~fleetplan.costmodels.capacity.best_engine`)."""
    n = profile.tp
    weights = model.weight_bytes(weight_dtype)
    budget = memory_utilization * n * gpu.memory_bytes - weights if kv_budget_bytes is None else kv_budget_bytes
    if budget <= 0:
        raise InputError(f"weights {weights / 1e9:.0f} GB leave no KV memory on {n} × {gpu.name}",
                         field="kv_budget_bytes", value=budget)
    kv_seq = model.kv_tokens_cached(mix.input_tokens_mean + mix.output_tokens_mean) * model.kv_bytes_per_token(kv_dtype)
    kv_seq95 = model.kv_tokens_cached(mix.input_tokens_p95 + mix.output_tokens_p95) * model.kv_bytes_per_token(kv_dtype)
    return best_engine(lambda eng: replica_capacity_from_latency(
        lambda i: profile.prefill_time_s(i), profile.decode_step_time_s, mix, slo,
        kv_bytes_per_seq=kv_seq, kv_bytes_per_seq_p95=kv_seq95,
        kv_budget_bytes=budget, gpus=n, weights_bytes_per_gpu=weights / n,
        memory_bytes_per_gpu=(weights + budget) / n + (1 - memory_utilization) * gpu.memory_bytes,
        source=f"measured Splitwise profile {profile.model}/{profile.hardware}/tp{profile.tp}", engine=eng),
        engine, gpu)


#: Formats a measured profile may come in (:func:`fleetplan.datasets.profiles.load_profile` reads each).
ProfileFormat = Literal["vllm-bench", "guidellm", "aibrix", "step-csv", "splitwise"]


PROFILE_FORMATS: tuple[str, ...] = get_args(ProfileFormat)


#: A serving profile measured at a token mix whose mean prompt or output length differs from the scenario's by
#: more than this share is refused (latency grows with both lengths; a rate measured at another mix is another
#: rate). The p95 lengths are held to the same tolerance when the profile reports them.
PROFILE_MIX_TOLERANCE = 0.15


@dataclass(frozen=True)
class ServingPoint:
    """One load level of a serving benchmark (one ``vllm bench serve`` run, one guidellm benchmark).

    Attributes:
        req_per_s: completed requests per second the server sustained (the benchmark's measured throughput, not
            the offered rate: under overload the two differ and only the first was served).
        load: what was offered, e.g. 'rate 4 req/s (Poisson)' or 'concurrency 16 (closed loop)'.
        latency_s: {metric: {percentile: seconds}} for metric 'ttft', 'tpot' (per request: (latency − TTFT) /
            (output − 1)) and 'e2e'; the median is percentile 50.
        completed, failed: request counts of the run (failed includes guidellm's incomplete and errored).
    """

    req_per_s: float
    load: str
    latency_s: dict[str, dict[float, float]]
    completed: int
    failed: int = 0


class ThroughputTable(Protocol):
    """Max request rate per (input, output) token bucket under the table's own SLO (e.g.
    :class:`fleetplan.datasets.profiles.ProfileCapacity`, an AIBrix / Mélange table)."""

    @property
    def name(self) -> str: ...

    @property
    def slo(self) -> dict | None: ...

    def lookup(self, input_tokens: float, output_tokens: float) -> tuple[float, str]: ...


@dataclass(frozen=True)
class MeasuredProfile:
    """Measured performance of one model on one GPU type at one tensor-parallel degree, from any source.

    Exactly one of ``points`` (rate vs latency: vllm bench serve, guidellm), ``table`` (throughput under an SLO
    per token bucket: AIBrix, Mélange) or ``step`` (prefill time vs prompt and decode step time vs batch and
    context: a step-time CSV, Splitwise) is set.

    Attributes:
        format: one of :data:`PROFILE_FORMATS`.
        source: the file(s) it was read from, as the user named them.
        model: the model as the file names it ('' when it does not).
        points: serving load levels, ascending by req_per_s.
        table: a throughput table.
        step: measured step times (:class:`MeasuredLatency`; ``max_prompt_tokens``, ``max_batch`` and
            ``max_context_tokens`` attributes, when present, bound what was measured).
        input_tokens_mean, input_tokens_p95, output_tokens_mean, output_tokens_p95: token lengths of the measured
            requests (None when the file does not say).
        closed_loop: the serving points were measured at fixed concurrency (each client sends its next request
            when the previous ends): arrivals are smoother than Poisson, so queueing is understated.
        notes: what the reader left out and why (e.g. a burst run with no rate).
    """

    format: str
    source: str
    model: str = ""
    points: tuple[ServingPoint, ...] = ()
    table: ThroughputTable | None = None
    step: MeasuredLatency | None = None
    input_tokens_mean: float | None = None
    input_tokens_p95: float | None = None
    output_tokens_mean: float | None = None
    output_tokens_p95: float | None = None
    closed_loop: bool = False
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.format not in PROFILE_FORMATS:
            raise InputError(f"unknown profile format {self.format!r}; one of {', '.join(PROFILE_FORMATS)}",
                             field="format", value=self.format)
        given = [k for k in ("points", "table", "step") if getattr(self, k)]
        if len(given) != 1:
            raise InputError(f"profile {self.source}: needs exactly one of serving points, a throughput table or "
                             f"step times (got {', '.join(given) or 'none'})", source=self.source)

    @property
    def label(self) -> str:
        """E.g. 'measured vllm-bench bench.json (4 load levels, 0.9-7.6 req/s)'."""
        if self.points:
            lo, hi = self.points[0].req_per_s, self.points[-1].req_per_s
            what = f"{len(self.points)} load level{'s' if len(self.points) > 1 else ''}, {lo:.3g}-{hi:.3g} req/s"
            if self.closed_loop:
                what += ", closed loop"
        elif self.table is not None:
            what = f"throughput table {self.table.name}"
        else:
            what = "step times"
        return f"measured {self.format} {self.source} ({what})"


def _pick_percentile(measured: dict[float, float], q: float) -> tuple[float, float] | None:
    """(percentile, seconds) of the smallest measured percentile >= 100·q (a higher percentile under the target
    implies the lower one is under it too), or None."""
    ok = sorted(p for p in measured if p >= 100.0 * q - 1e-9)
    return (ok[0], measured[ok[0]]) if ok else None


def _mix_mismatch(profile: MeasuredProfile, mix: TokenMix, tol: float) -> str:
    """'' when the profile's measured token lengths match ``mix`` within ``tol``, else what differs."""
    pairs = [("mean prompt", profile.input_tokens_mean, mix.input_tokens_mean),
             ("mean output", profile.output_tokens_mean, mix.output_tokens_mean),
             ("p95 prompt", profile.input_tokens_p95, mix.input_tokens_p95),
             ("p95 output", profile.output_tokens_p95, mix.output_tokens_p95)]
    if profile.input_tokens_mean is None or profile.output_tokens_mean is None:
        return ("the profile does not say which token lengths it was measured at (no input/output token counts), "
                "so its rates cannot be matched to the scenario's token mix")
    bad = [f"{name} {have:.0f} vs {want:.0f} tokens" for name, have, want in pairs
           if have is not None and abs(have - want) > tol * want]
    if bad:
        return (f"measured at another token mix than the scenario's ({'; '.join(bad)}; tolerance {tol:.0%}); "
                "measure at the scenario's mix or give a step-time profile")
    return ""


def serving_profile_capacity(profile: MeasuredProfile, mix: TokenMix, slo: SLO, *,
                             mix_tolerance: float = PROFILE_MIX_TOLERANCE
                             ) -> tuple[float, str, str, dict[str, float]]:
    """The highest measured rate at which every target of ``slo`` holds, from serving load levels.

    Each target (metric, quantile q = :meth:`SLO.planning_quantile`) is read at the smallest measured percentile
    >= 100·q (p99 stands in for a p95 target: conservative). Load levels are walked upward; the capacity lies
    between the last level meeting every target and the first missing one, where the latency is interpolated
    linearly in the rate (latency grows convexly with the rate, so the chord lies above the curve and the crossing
    it gives is at or below the true one: conservative). Nothing is extrapolated: when every level meets the
    targets the capacity is the largest measured rate; a level with failed requests misses.

    Returns (req/s, limiting, reason, latency at capacity {metric: seconds at the percentile read}): req/s 0.0 with
    the reason when no rate can be vouched for (another token mix, a percentile the file lacks, the lowest level
    already misses). ``limiting`` is the metric that binds, 'profile_failed' (requests failed at the next level),
    or 'profile_range' when the largest measured rate met every target.
    """
    why = _mix_mismatch(profile, mix, mix_tolerance)
    if why:
        return 0.0, "profile_mix", why, {}
    picks: dict[str, tuple[float, float, float]] = {}  # metric -> (q, target s, percentile read)
    for metric, _, target in slo.targets():
        q = slo.planning_quantile(metric)
        pcts = set.intersection(*(set(pt.latency_s.get(metric, {})) for pt in profile.points))
        got = _pick_percentile(dict.fromkeys(pcts, 0.0), q)
        if got is None:
            return 0.0, "profile_percentile", (
                f"the profile has no {metric.upper()} percentile >= p{100 * q:g} at every load level (it has "
                f"{', '.join(f'p{p:g}' for p in sorted(pcts)) or 'none'}); rerun the benchmark with that "
                "percentile (e.g. vllm bench serve --metric-percentiles 95,99)"), {}
        picks[metric] = (q, target, got[0])

    def at(pt: ServingPoint) -> dict[str, float]:
        return {m: pt.latency_s[m][p] for m, (_, _, p) in picks.items()}

    def missed(pt: ServingPoint) -> list[str]:
        return [m for m, v in at(pt).items() if v > picks[m][1]]

    first = profile.points[0]
    if first.failed or missed(first):
        what = (f"{first.failed} requests failed" if first.failed else
                "; ".join(f"{m.upper()} p{picks[m][2]:g} {at(first)[m]:.3g} s exceeds the target "
                          f"{picks[m][1]:.3g} s" for m in missed(first)))
        return 0.0, "profile_low", (f"at the lowest measured load ({first.load}, {first.req_per_s:.3g} req/s) "
                                    f"{what}; measure at lower rates"), {}
    for lo, hi in zip(profile.points, profile.points[1:], strict=False):
        bad = missed(hi)
        if not bad and not hi.failed:
            continue
        if not bad or hi.req_per_s <= lo.req_per_s:  # failures, or the throughput stopped growing
            return lo.req_per_s, bad[0] if bad else "profile_failed", "", at(lo)
        a, b = at(lo), at(hi)
        best, limit = math.inf, ""
        for m in bad:
            r = lo.req_per_s + (hi.req_per_s - lo.req_per_s) * (picks[m][1] - a[m]) / (b[m] - a[m])
            if r < best:
                best, limit = r, m
        f = (best - lo.req_per_s) / (hi.req_per_s - lo.req_per_s)
        return best, limit, "", {m: a[m] + f * (b[m] - a[m]) for m in picks}
    return profile.points[-1].req_per_s, "profile_range", "", at(profile.points[-1])


def _table_implies(table_slo: dict | None, slo: SLO) -> str:
    """'' when a throughput table's SLO is at least as strict as every target of ``slo``, else why not.

    The table's SLO is a dict such as {'percentile': 99, 'e2e': 5.0} or {'percentile': 95, 'ttft': 0.5,
    'tpot': 0.05} (seconds). A target (metric, q, v) is implied when the table bounds that metric at a percentile
    >= 100·q by a value <= v; a TTFT target is also implied by an end-to-end bound (TTFT <= end-to-end latency).
    """
    if not table_slo:
        return "the throughput table does not say which SLO its rates meet ('slos' missing)"
    try:
        pct = float(table_slo.get("percentile", 0))
    except (TypeError, ValueError):
        return f"the throughput table's SLO percentile {table_slo.get('percentile')!r} is not a number"
    for metric, _, target in slo.targets():
        q = slo.planning_quantile(metric)
        bounds = [table_slo.get(metric)] + ([table_slo.get("e2e")] if metric == "ttft" else [])
        if not any(b is not None and float(b) <= target for b in bounds) or pct < 100 * q - 1e-9:
            return (f"the table's SLO {table_slo} does not imply {metric.upper()} p{100 * q:g} <= {target:g} s; "
                    "its rates hold for another SLO")
    return ""


def measured_replica_capacity(profile: MeasuredProfile, mix: TokenMix, slo: SLO, *, model: Model, gpu: GPU,
                              tp: int, memory_utilization: float = 0.9, kv_budget_bytes: float | None = None,
                              weight_dtype: str = "bf16", kv_dtype: str = "bf16", residents: int = 1,
                              kv_block_tokens: int | None = 16,
                              mix_tolerance: float = PROFILE_MIX_TOLERANCE,
                              engine: EngineConfig = DEFAULT_ENGINE,
                              host_tier: HostTier | None = None) -> ReplicaCapacity:
    """Capacity of one replica (``tp`` GPUs of type ``gpu``) from a :class:`MeasuredProfile`.

    Step times: the queueing and memory model of :func:`replica_capacity_from_latency` on the measured curves,
    refusing prompt lengths, contexts or batches beyond the measured range. Serving points:
    :func:`serving_profile_capacity`. Throughput table: the bucket of the mix's p95 lengths, when the table's SLO
    implies the scenario's. Rate-only profiles (points, tables) describe a dedicated replica: with ``residents`` > 1
    (a shared GPU) they give no capacity. Memory (weights, KV budget, max_batch) follows the same memory model as
    :func:`replica_capacity`. ``source`` names the profile. Never raises for a profile that does not cover the
    case: req_per_s 0.0 with the reason instead. ``engine``: the serving engine a step-time profile is replayed
    under (an unset budget: the best of vLLM's default for ``gpu`` and smaller ones,
    :func:`~fleetplan.costmodels.capacity.best_engine`); serving points and tables measured an engine already and
    are read as measured. ``host_tier``: a host KV tier (capacity's point 12) for a step-time profile; a rate-only
    profile measured a replica without one, so its rate is not credited and its ``source`` says so.
    Raises InputError for an engine with speculative decoding: a profile's step times or
    rates hold no verification pass or draft model (measure the replica with speculation on and give the profile
    without ``engine.speculative``, or drop the profile to plan speculation on the roofline).
    """
    if engine.speculative is not None:
        raise InputError(f"{model.name} on {gpu.name} tp {tp}: speculative decoding cannot be planned from the "
                         f"measured profile {profile.source}; drop engine.speculative (a profile measured with "
                         "speculation on already holds it) or the profile (to size it on the roofline)",
                         field="engine.speculative", value=profile.source)
    n = tp
    weights = model.weight_bytes(weight_dtype)
    usable = memory_utilization * n * gpu.memory_bytes
    reserve = (1.0 - memory_utilization) * gpu.memory_bytes
    budget = usable - weights if kv_budget_bytes is None else float(kv_budget_bytes)
    memory = (weights + max(budget, 0.0)) / n + reserve
    kvpt = model.kv_bytes_per_token(kv_dtype)
    kv_seq = kv_tokens_held(model, mix.input_tokens_mean, mix.output_tokens_mean, block_tokens=kv_block_tokens) * kvpt
    kv_seq95 = kv_tokens_held(model, mix.input_tokens_p95, mix.output_tokens_p95, block_tokens=kv_block_tokens,
                              whole=True) * kvpt
    max_batch = (budget - kv_seq95) / kv_seq + 1 if kv_seq > 0 else math.inf

    def zero(limiting: str, reason: str) -> ReplicaCapacity:
        return ReplicaCapacity(0.0, max_batch=max(max_batch, 0.0), batch_at_capacity=0.0, tpot_p95_s=math.nan,
                               ttft_p95_s=math.nan, weights_bytes_per_gpu=weights / n,
                               kv_bytes_available=budget, memory_bytes_per_gpu=memory, gpus=n, limiting=limiting,
                               reason=f"{profile.source}: {reason}", source=profile.label)

    if weights > usable:
        return zero("weights_do_not_fit", f"weights {weights / 1e9:.0f} GB exceed {memory_utilization:g} × "
                                          f"{gpu.memory_bytes / 1e9:.0f} GB × tp {tp}")
    if profile.step is not None:
        st = profile.step
        q_max = max(slo.planning_quantile(m) for m, _, _ in slo.targets())
        longest_prompt = mix.input_tokens_p95 if q_max <= 0.95 else lognormal_quantile(
            mix.input_tokens_mean, mix.input_tokens_p95, q_max)
        longest_out = mix.output_tokens_p95 if q_max <= 0.95 else lognormal_quantile(
            mix.output_tokens_mean, mix.output_tokens_p95, q_max)
        top = getattr(st, "max_prompt_tokens", None)
        if top is not None and longest_prompt > top:
            return zero("profile_range", f"prefill measured up to {top:g} prompt tokens; the mix's p{100 * q_max:g} "
                                         f"prompt is {longest_prompt:.0f} tokens: measure longer prompts")
        top_ctx = getattr(st, "max_context_tokens", None)
        ctx = longest_prompt + longest_out / 2
        if top_ctx is not None and ctx > top_ctx:
            return zero("profile_range", f"decode measured up to a context of {top_ctx:g} tokens; the mix's "
                                         f"p{100 * q_max:g} decode context is {ctx:.0f} tokens: measure longer "
                                         "contexts")
        cap = best_engine(lambda eng: replica_capacity_from_latency(
            lambda i: st.prefill_time_s(i), st.decode_step_time_s, mix, slo, kv_bytes_per_seq=kv_seq,
            kv_bytes_per_seq_p95=kv_seq95, kv_budget_bytes=budget, gpus=n, weights_bytes_per_gpu=weights / n,
            memory_bytes_per_gpu=memory, source=profile.label, residents=residents, engine=eng,
            host_tier=host_tier), engine, gpu)
        if cap.req_per_s <= 0 and cap.reason:
            return dataclasses.replace(cap, reason=f"{profile.source}: {cap.reason}")
        if cap.limiting == "batch_limit":
            return dataclasses.replace(cap, source=f"{profile.label}; capped where the measured batch range ends")
        return cap
    cap = _rate_only_capacity(profile, mix, slo, weights=weights, n=n, budget=budget, memory=memory,
                              max_batch=max_batch, residents=residents, mix_tolerance=mix_tolerance, zero=zero)
    if host_tier is not None and cap.req_per_s > 0:
        return dataclasses.replace(cap, source=f"{cap.source}; host KV tier not credited (a rate-only profile)")
    return cap


def _rate_only_capacity(profile: MeasuredProfile, mix: TokenMix, slo: SLO, *, weights: float, n: int, budget: float,
                        memory: float, max_batch: float, residents: int, mix_tolerance: float,
                        zero: Callable[[str, str], ReplicaCapacity]) -> ReplicaCapacity:
    """The capacity of a rate-only profile (a throughput table or serving points) of a dedicated replica."""
    if residents > 1:
        return zero("profile_shared", "a rate-only profile measures a dedicated replica; sharing a GPU with "
                                      "another model was not measured (give a step-time profile)")
    if profile.table is not None:
        why = _table_implies(profile.table.slo, slo)
        if why:
            return zero("profile_slo", why)
        rate, why = profile.table.lookup(mix.input_tokens_p95, mix.output_tokens_p95)
        if rate <= 0:
            return zero("profile_infeasible", why)
        # The table vouches for latencies up to its own SLO bounds (which imply the scenario's, checked above).
        ts = profile.table.slo or {}
        ttft_bound = min(float(b) for b in (ts.get("ttft"), ts.get("e2e")) if b is not None)
        return ReplicaCapacity(rate, max_batch=max_batch, batch_at_capacity=math.nan,
                               tpot_p95_s=float(ts["tpot"]) if ts.get("tpot") is not None else math.nan,
                               ttft_p95_s=ttft_bound, weights_bytes_per_gpu=weights / n, kv_bytes_available=budget,
                               memory_bytes_per_gpu=memory, gpus=n, limiting="profile", source=profile.label)
    rate, limiting, why, lat = serving_profile_capacity(profile, mix, slo, mix_tolerance=mix_tolerance)
    if rate <= 0:
        return zero(limiting, why)
    src = profile.label + ("; capped at the largest measured rate (not extrapolated)"
                           if limiting == "profile_range" else "")
    # Latencies at capacity are the measured (interpolated) ones at the percentile each target was read at.
    return ReplicaCapacity(rate, max_batch=max_batch, batch_at_capacity=math.nan, tpot_p95_s=lat["tpot"],
                           ttft_p95_s=lat["ttft"], weights_bytes_per_gpu=weights / n, kv_bytes_available=budget,
                           memory_bytes_per_gpu=memory, gpus=n, limiting=limiting, source=src)
