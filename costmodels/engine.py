"""The serving engine a replica runs, as the cost models, the replay and the exports see it (one home).

:class:`EngineConfig` names the scheduler and the knobs that change capacity:

* ``vllm-v1`` (the default): vLLM's V1 scheduler. Every step packs the running decodes first (one token each), then
  chunks of waiting prefills, oldest first, up to ``max_num_batched_tokens`` tokens per step, with at most
  ``max_num_seqs`` sequences in the running set (``vllm/v1/core/sched/scheduler.py``: running requests, then
  waiting ones, each given ``min(remaining tokens, token budget left)``; Sarathi-Serve's stall-free batching is
  the same rule). Prefix caching is on (``enable_prefix_caching``, V1's default) with a hit rate: the share of
  prompt tokens whose KV blocks are found in the cache and not recomputed.
* ``prefill-first``: one prefill at a time, whole, with priority over decode and no chunking (vLLM V0's default
  scheduler without ``--enable-chunked-prefill``; what fleetplan modelled before this record, and the default of
  a scenario without an ``engine`` key until the default became ``vllm-v1``).

:data:`DEFAULT_ENGINE` is the one default: the engine of a scenario model without any ``engine`` key, and of an
option built without the record (by hand, or by a planner that sizes none) wherever an engine is needed: its
replay, its export flags, its calibration row and its capacity error (:func:`engine_or_default`).

Defaults and where they come from (vLLM ``vllm/engine/arg_utils.py``, ``EngineArgs.get_batch_defaults``, vLLM
0.10-0.11, for the OpenAI API server usage context, i.e. ``vllm serve``):

=========================================  ========================  ============
GPU                                        max_num_batched_tokens    max_num_seqs
=========================================  ========================  ============
>= 70 GiB and not an A100 (H100, H200...)  8192                      1024
every other GPU (A100, L4, L40S, ...)      2048                      256
=========================================  ========================  ============

(The offline ``LLM`` class uses 16384 / 8192 instead; vLLM 0.8-0.9's ``_set_default_args_v1`` used 2048 and 256
for the API server on every GPU. The A100 exception is vLLM PR #17885: a larger budget lowered A100 throughput.)
The KV block is 16 tokens (vLLM's ``--block-size`` default on CUDA). The default prefix-cache hit rate is 0: a
hit rate is a property of the workload, stated in the scenario or measured from a trace's block hashes
(:func:`lru_block_hit_rate`), never assumed.

Speculative decoding (:class:`Speculation`, ``EngineConfig.speculative``; off by default): a proposer drafts k
tokens per sequence (a small draft model run k times, or n-gram matches in the prompt, which cost no GPU work), and
the target scores the k + 1 positions in one pass (Leviathan, Kalman and Matias, "Fast Inference from Transformers
via Speculative Decoding", ICML 2023). With each drafted token accepted independently with probability alpha, a
target step yields (1 − alpha^(k+1)) / (1 − alpha) tokens on average (their eq. 1; k + 1 at alpha = 1):
:func:`expected_tokens_per_step`. The step's cost (draft steps, the verification over k + 1 positions) is composed
in :mod:`fleetplan.costmodels.speculative`.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from fleetplan.costmodels.hardware import Model
from fleetplan.errors import InputError

#: Scheduler modes known to :class:`EngineConfig`.
ENGINE_MODES = ("vllm-v1", "prefill-first")
#: vLLM's default token budget and running-set cap for ``vllm serve`` (module docstring), by GPU class:
#: (max_num_batched_tokens, max_num_seqs).
VLLM_SERVE_DEFAULTS_LARGE_GPU = (8192, 1024)
VLLM_SERVE_DEFAULTS_OTHER_GPU = (2048, 256)
#: GPU memory (GiB) from which vLLM picks the larger defaults (unless the GPU is an A100).
VLLM_LARGE_GPU_MIN_GIB = 70.0
#: vLLM's KV block size on CUDA, tokens (``--block-size`` default).
VLLM_BLOCK_TOKENS = 16
#: Token budgets the planner tries when a chunked engine's budget is not stated (those up to vLLM's default for the
#: GPU): a smaller budget bounds the stall a prefill chunk adds to a decode step, a larger one raises prefill
#: throughput (Sarathi-Serve, Agrawal et al., OSDI 2024, evaluates chunks of 512 to 2048 tokens).
BUDGET_CANDIDATES = (512, 1024, 2048, 4096, 8192)
#: Proposers of speculative decoding known to :class:`Speculation`: a draft model run on the replica's GPUs, or
#: n-gram lookup in the prompt (vLLM's ``ngram``, on the host: no GPU work).
SPECULATION_METHODS = ("draft_model", "ngram")


def expected_tokens_per_step(acceptance_rate: float, num_speculative_tokens: int) -> float:
    """Expected tokens a sequence gains per target step with ``num_speculative_tokens`` (k) drafted tokens each
    accepted independently with probability ``acceptance_rate`` (alpha): (1 − alpha^(k+1)) / (1 − alpha), k + 1 at
    alpha = 1 (Leviathan et al. 2023, eq. 1: the accepted prefix plus the target's own token). Example: alpha 0.8,
    k 4: (1 − 0.8^5) / 0.2 = 3.3616. Raises InputError for alpha outside [0, 1] or k below 1."""
    if not 0.0 <= acceptance_rate <= 1.0:
        raise InputError("speculative acceptance_rate must be in [0, 1] (the share of drafted tokens accepted)",
                         field="engine.speculative.acceptance_rate", value=acceptance_rate)
    if not (isinstance(num_speculative_tokens, int) and num_speculative_tokens >= 1):
        raise InputError("speculative num_speculative_tokens must be a whole number >= 1",
                         field="engine.speculative.num_speculative_tokens", value=num_speculative_tokens)
    k = num_speculative_tokens
    if acceptance_rate >= 1.0:
        return float(k + 1)
    return (1.0 - acceptance_rate ** (k + 1)) / (1.0 - acceptance_rate)


@dataclass(frozen=True)
class Speculation:
    """Speculative decoding on a replica (module docstring).

    Attributes:
        acceptance_rate: alpha, the probability that a drafted token is accepted, in [0, 1]: a property of the
            (draft, target, workload) triple, measured (vLLM reports it as the draft acceptance rate) or stated;
            never assumed here.
        num_speculative_tokens: k, tokens drafted per step (vLLM ``num_speculative_tokens``), >= 1.
        method: 'draft_model' (a smaller model of the same tokenizer, run k times per step on the replica's GPUs
            with its tp) or 'ngram' (prompt lookup on the host: no draft GPU work, no draft memory).
        draft_model: the draft model's catalog name (method 'draft_model'; None for 'ngram').
        draft: the draft's architecture, resolved from ``draft_model`` by the scenario reader (None until then;
            the cost models refuse a 'draft_model' speculation without it).

    Raises InputError naming the field for an unknown method, alpha outside [0, 1], k below 1, a draft model
    missing for 'draft_model' or given for 'ngram'.
    """

    acceptance_rate: float
    num_speculative_tokens: int = 4
    method: str = "draft_model"
    draft_model: str | None = None
    draft: Model | None = None

    def __post_init__(self) -> None:
        if self.method not in SPECULATION_METHODS:
            raise InputError(f"unknown speculative method {self.method!r}; use {' or '.join(SPECULATION_METHODS)}",
                             field="engine.speculative.method", value=self.method)
        expected_tokens_per_step(self.acceptance_rate, self.num_speculative_tokens)  # checks both
        if self.method == "draft_model" and not self.draft_model:
            raise InputError("speculative method draft_model needs draft_model (a catalog model name, e.g. "
                             "Llama-3.1-8B for Llama-3.1-70B)", field="engine.speculative.draft_model")
        if self.method == "ngram" and self.draft_model:
            raise InputError("speculative method ngram drafts from the prompt; drop draft_model or use method "
                             "draft_model", field="engine.speculative.draft_model", value=self.draft_model)

    @property
    def tokens_per_step(self) -> float:
        """Expected tokens per target step (:func:`expected_tokens_per_step`)."""
        return expected_tokens_per_step(self.acceptance_rate, self.num_speculative_tokens)

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form (without the resolved architecture)."""
        return {"method": self.method, "draft_model": self.draft_model,
                "num_speculative_tokens": self.num_speculative_tokens, "acceptance_rate": self.acceptance_rate,
                "tokens_per_step": round(self.tokens_per_step, 6)}

    def vllm_config(self, draft_repo: str | None = None) -> dict[str, object]:
        """vLLM's ``--speculative-config`` object: {"method": "ngram", "num_speculative_tokens": k,
        "prompt_lookup_max": 4} or {"model": draft repository, "num_speculative_tokens": k, "method":
        "draft_model"} (vLLM's speculative decoding docs; ``draft_repo`` defaults to the draft's catalog name).
        vLLM V1 accepts the draft-model form only from the release with vllm-project/vllm pull request 24322 (it
        rejected it up to at least 0.13); n-gram runs on earlier V1 releases."""
        if self.method == "ngram":
            return {"method": "ngram", "num_speculative_tokens": self.num_speculative_tokens, "prompt_lookup_max": 4}
        return {"model": draft_repo or self.draft_model, "num_speculative_tokens": self.num_speculative_tokens,
                "method": "draft_model"}


def speculation_from_mapping(data: object) -> Speculation | None:
    """A :class:`Speculation` from a scenario mapping (keys as its attributes but ``draft``), None for None.
    Raises InputError for a value that is not a mapping or an unknown key (named)."""
    if data is None or isinstance(data, Speculation):
        return data
    if not isinstance(data, dict):
        raise InputError("engine.speculative must be a mapping (acceptance_rate, num_speculative_tokens, method, "
                         "draft_model)", field="engine.speculative", value=data)
    known = set(Speculation.__dataclass_fields__) - {"draft"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise InputError(f"unknown engine.speculative field(s) {', '.join(unknown)}; known: "
                         f"{', '.join(sorted(known))}", field="engine.speculative", value=unknown[0])
    if "acceptance_rate" not in data:
        raise InputError("engine.speculative needs acceptance_rate (measured for the draft, target and workload)",
                         field="engine.speculative.acceptance_rate")
    return Speculation(**data)


@dataclass(frozen=True)
class EngineConfig:
    """The engine of one replica (module docstring).

    Attributes:
        mode: 'vllm-v1' (chunked prefill, the default) or 'prefill-first'.
        max_num_batched_tokens: token budget of one step (decode tokens + prefill-chunk tokens), tokens; None takes
            vLLM's default for the GPU (:func:`vllm_defaults`). Unused by 'prefill-first'.
        max_num_seqs: most sequences in the running set (decoding or prefilling); None takes vLLM's default.
        prefix_caching: automatic prefix caching on (vLLM V1's default) or off.
        prefix_hit_rate: share of prompt tokens served from the prefix cache, in [0, 1) (0 unless stated or
            measured); counted only when ``prefix_caching`` is on.
        version: the engine version the figures assume, e.g. '0.11' (shown in plans and exports).
        speculative: speculative decoding (:class:`Speculation`), or None (off, vLLM's default).
        kv_read_fraction: share of each sequence's cached KV a decode step reads, in (0, 1]: 1 for dense attention;
            below 1 for a long-context sparse decode that attends to selected KV blocks (a model's sparse attention,
            e.g. top-k block selection). A KV-read multiplier only: the KV keeps its whole memory, and the output
            differs from dense attention, a quality change fleetplan does not model (validate it on the workload).
            vLLM has no flag for it (a model's architecture brings it): exports write none.

    Raises InputError naming the field for an unknown mode, a budget or cap below 1, a hit rate outside [0, 1),
    or a hit rate stated with prefix caching off (it would be silently ignored).
    """

    mode: str = "vllm-v1"
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    prefix_caching: bool = True
    prefix_hit_rate: float = 0.0
    version: str = "0.11"
    speculative: Speculation | None = None
    kv_read_fraction: float = 1.0

    def __post_init__(self) -> None:
        if self.mode not in ENGINE_MODES:
            raise InputError(f"unknown engine mode {self.mode!r}; use {' or '.join(ENGINE_MODES)}",
                             field="engine.mode", value=self.mode)
        for name in ("max_num_batched_tokens", "max_num_seqs"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
                raise InputError(f"engine.{name} must be a whole number >= 1 (or unset for vLLM's default)",
                                 field=f"engine.{name}", value=v)
        if not (0.0 <= self.prefix_hit_rate < 1.0):
            raise InputError("engine.prefix_hit_rate must be in [0, 1) (a share of prompt tokens)",
                             field="engine.prefix_hit_rate", value=self.prefix_hit_rate)
        if not (isinstance(self.kv_read_fraction, int | float) and 0.0 < self.kv_read_fraction <= 1.0):
            raise InputError("engine.kv_read_fraction must be in (0, 1] (the share of the KV a decode step reads; "
                             "1 for dense attention)", field="engine.kv_read_fraction", value=self.kv_read_fraction)
        if self.prefix_hit_rate > 0 and not self.prefix_caching:
            raise InputError("engine.prefix_hit_rate is set but prefix_caching is off; turn prefix_caching on or "
                             "drop the hit rate", field="engine.prefix_hit_rate", value=self.prefix_hit_rate)

    @property
    def framework(self) -> str:
        """The engine and version as the calibration data names them, e.g. 'vLLM 0.11'."""
        return f"vLLM {self.version}"

    @property
    def chunked(self) -> bool:
        """True for the chunked-prefill scheduler (vllm-v1)."""
        return self.mode == "vllm-v1"

    @property
    def effective_hit_rate(self) -> float:
        """Share of prompt tokens not recomputed (0 when prefix caching is off)."""
        return self.prefix_hit_rate if self.prefix_caching else 0.0

    def resolved(self, gpu_memory_gib: float, gpu_name: str) -> EngineConfig:
        """This record with unset knobs filled with vLLM's defaults for the GPU (:func:`vllm_defaults`)."""
        tokens, seqs = vllm_defaults(gpu_memory_gib, gpu_name)
        return replace(self, max_num_batched_tokens=self.max_num_batched_tokens or tokens,
                       max_num_seqs=self.max_num_seqs or seqs)

    def budget_candidates(self, gpu_memory_gib: float, gpu_name: str) -> list[EngineConfig]:
        """The resolved engines the planner may choose among: this record's stated budget alone, else vLLM's
        default budget for the GPU and each of :data:`BUDGET_CANDIDATES` below it (largest first); one record for
        'prefill-first'."""
        r = self.resolved(gpu_memory_gib, gpu_name)
        if not self.chunked or self.max_num_batched_tokens is not None:
            return [r]
        top = r.max_num_batched_tokens or 0
        return [r] + [replace(r, max_num_batched_tokens=b) for b in sorted(BUDGET_CANDIDATES, reverse=True)
                      if b < top]

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form (the plan's ``engine`` object on a replica row)."""
        return {"mode": self.mode, "version": self.version, "max_num_batched_tokens": self.max_num_batched_tokens,
                "max_num_seqs": self.max_num_seqs, "prefix_caching": self.prefix_caching,
                "prefix_hit_rate": self.prefix_hit_rate,
                "speculative": self.speculative.as_dict() if self.speculative is not None else None,
                "kv_read_fraction": self.kv_read_fraction}

    def vllm_flags(self, draft_repo: str | None = None) -> list[str]:
        """The ``vllm serve`` flags that deploy this engine (call on a :meth:`resolved` record to pin the budget).

        'prefill-first' has no V1 equivalent (V1 always chunks); it is written as ``--no-enable-chunked-prefill``,
        which vLLM V0 honours. Speculation adds ``--speculative-config JSON`` (:meth:`Speculation.vllm_config`;
        ``draft_repo``: the draft model's repository)."""
        flags: list[str] = []
        if self.chunked:
            if self.max_num_batched_tokens is not None:
                flags += ["--max-num-batched-tokens", str(self.max_num_batched_tokens)]
        else:
            flags.append("--no-enable-chunked-prefill")
        if self.max_num_seqs is not None:
            flags += ["--max-num-seqs", str(self.max_num_seqs)]
        flags.append("--enable-prefix-caching" if self.prefix_caching else "--no-enable-prefix-caching")
        if self.speculative is not None:
            flags += ["--speculative-config", json.dumps(self.speculative.vllm_config(draft_repo))]
        return flags


#: vLLM V1 with vLLM's own defaults.
VLLM_V1 = EngineConfig()
#: The engine fleetplan modelled before the record: whole prefills with priority over decode.
PREFILL_FIRST = EngineConfig(mode="prefill-first")
#: The default engine (module docstring): vLLM V1 with vLLM's defaults, the engine ``vllm serve`` runs.
DEFAULT_ENGINE = VLLM_V1


def engine_or_default(engine: EngineConfig | None, gpu_memory_gib: float, gpu_name: str) -> EngineConfig:
    """``engine``, or for None (an option built without the record) :data:`DEFAULT_ENGINE`, with unset knobs filled
    with vLLM's defaults for the GPU of ``gpu_memory_gib`` GiB named ``gpu_name`` (:meth:`EngineConfig.resolved`;
    a record the planner sized is resolved already and comes back equal)."""
    return (engine or DEFAULT_ENGINE).resolved(gpu_memory_gib, gpu_name)


def vllm_defaults(gpu_memory_gib: float, gpu_name: str) -> tuple[int, int]:
    """vLLM's ``vllm serve`` defaults (max_num_batched_tokens, max_num_seqs) for a GPU of ``gpu_memory_gib`` GiB
    named ``gpu_name`` (module docstring's table: the larger pair from 70 GiB unless the name contains 'a100')."""
    if gpu_memory_gib >= VLLM_LARGE_GPU_MIN_GIB and "a100" not in gpu_name.lower():
        return VLLM_SERVE_DEFAULTS_LARGE_GPU
    return VLLM_SERVE_DEFAULTS_OTHER_GPU


def engine_from_mapping(data: dict[str, object] | None, base: EngineConfig = DEFAULT_ENGINE) -> EngineConfig:
    """An :class:`EngineConfig` from a scenario mapping (keys as the attributes), over ``base``. Raises InputError
    for an unknown key (named), a bad value, or a token budget (``max_num_batched_tokens``, here or in ``base``) on a
    'prefill-first' engine: that scheduler has no token budget, so the figure would be recorded but used by neither
    the capacity model nor the export."""
    if not data:
        return base
    known = set(EngineConfig.__dataclass_fields__)
    unknown = sorted(set(data) - known)
    if unknown:
        raise InputError(f"unknown engine field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}",
                         field="engine", value=unknown[0])
    if "speculative" in data:
        data = {**data, "speculative": speculation_from_mapping(data["speculative"])}
    out = replace(base, **data)  # type: ignore[arg-type]
    if not out.chunked and out.max_num_batched_tokens is not None:
        raise InputError(f"engine.max_num_batched_tokens {out.max_num_batched_tokens} is the token budget of the "
                         f"chunked vllm-v1 scheduler; mode {out.mode!r} prefills whole prompts and has none, so it "
                         "would be ignored: drop max_num_batched_tokens or use mode vllm-v1",
                         field="engine.max_num_batched_tokens", value=out.max_num_batched_tokens)
    return out


def lru_block_hit_rate(requests: Iterable[Sequence[int]], capacity_blocks: int) -> float:
    """Share of prompt blocks found in an LRU cache of ``capacity_blocks`` blocks, over requests in arrival order.

    Args:
        requests: per request, its prompt's block hashes in order (a Mooncake trace's ``hash_ids``; one hash per
            block of tokens). A block counts as a hit only while every earlier block of the same prompt hit too
            (prefix caching reuses a prefix, not scattered blocks; vLLM's hash of a block covers its prefix).
        capacity_blocks: cache size, blocks (KV budget tokens / block tokens), >= 1.

    Returns hits / blocks (0 for no blocks). Every block of a request is inserted (or refreshed) after its lookup;
    the least recently used blocks are evicted beyond the capacity. Raises InputError when the capacity is below 1.
    """
    if capacity_blocks < 1:
        raise InputError("prefix-cache capacity must be at least one block", field="capacity_blocks",
                         value=capacity_blocks)
    cache: OrderedDict[int, None] = OrderedDict()
    hits = total = 0
    for blocks in requests:
        prefix = True
        for h in blocks:
            total += 1
            if prefix and h in cache:
                hits += 1
            else:
                prefix = False
        for h in blocks:
            cache[h] = None
            cache.move_to_end(h)
            if len(cache) > capacity_blocks:
                cache.popitem(last=False)
    return hits / total if total else 0.0
