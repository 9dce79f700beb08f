"""The serving engine a replica runs, as the cost models, the replay and the exports see it (one home).

:class:`EngineConfig` names the scheduler and the knobs that change capacity:

* ``vllm-v1`` (the default): vLLM's V1 scheduler. Every step packs the running decodes first (one token each), then
  chunks of waiting prefills, oldest first, up to ``max_num_batched_tokens`` tokens per step, with at most
  ``max_num_seqs`` sequences in the running set (``vllm/v1/core/sched/scheduler.py``: running requests, then
  waiting ones, each given ``min(remaining tokens, token budget left)``; Sarathi-Serve's stall-free batching is
  the same rule). Prefix caching is on (``enable_prefix_caching``, V1's default) with a hit rate: the share of
  prompt tokens whose KV blocks are found in the cache and not recomputed.
* ``prefill-first``: one prefill at a time, whole, with priority over decode and no chunking (vLLM V0's default
  scheduler without ``--enable-chunked-prefill``; what fleetplan modelled before this record).

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
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

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

    Raises InputError naming the field for an unknown mode, a budget or cap below 1, a hit rate outside [0, 1),
    or a hit rate stated with prefix caching off (it would be silently ignored).
    """

    mode: str = "vllm-v1"
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    prefix_caching: bool = True
    prefix_hit_rate: float = 0.0
    version: str = "0.11"

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
        if self.prefix_hit_rate > 0 and not self.prefix_caching:
            raise InputError("engine.prefix_hit_rate is set but prefix_caching is off; turn prefix_caching on or "
                             "drop the hit rate", field="engine.prefix_hit_rate", value=self.prefix_hit_rate)

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
                "prefix_hit_rate": self.prefix_hit_rate}

    def vllm_flags(self) -> list[str]:
        """The ``vllm serve`` flags that deploy this engine (call on a :meth:`resolved` record to pin the budget).

        'prefill-first' has no V1 equivalent (V1 always chunks); it is written as ``--no-enable-chunked-prefill``,
        which vLLM V0 honours."""
        flags: list[str] = []
        if self.chunked:
            if self.max_num_batched_tokens is not None:
                flags += ["--max-num-batched-tokens", str(self.max_num_batched_tokens)]
        else:
            flags.append("--no-enable-chunked-prefill")
        if self.max_num_seqs is not None:
            flags += ["--max-num-seqs", str(self.max_num_seqs)]
        flags.append("--enable-prefix-caching" if self.prefix_caching else "--no-enable-prefix-caching")
        return flags


#: The default engine: vLLM V1 with vLLM's own defaults.
VLLM_V1 = EngineConfig()
#: The engine fleetplan modelled before the record: whole prefills with priority over decode.
PREFILL_FIRST = EngineConfig(mode="prefill-first")


def vllm_defaults(gpu_memory_gib: float, gpu_name: str) -> tuple[int, int]:
    """vLLM's ``vllm serve`` defaults (max_num_batched_tokens, max_num_seqs) for a GPU of ``gpu_memory_gib`` GiB
    named ``gpu_name`` (module docstring's table: the larger pair from 70 GiB unless the name contains 'a100')."""
    if gpu_memory_gib >= VLLM_LARGE_GPU_MIN_GIB and "a100" not in gpu_name.lower():
        return VLLM_SERVE_DEFAULTS_LARGE_GPU
    return VLLM_SERVE_DEFAULTS_OTHER_GPU


def engine_from_mapping(data: dict[str, object] | None, base: EngineConfig = VLLM_V1) -> EngineConfig:
    """An :class:`EngineConfig` from a scenario mapping (keys as the attributes), over ``base``. Raises InputError
    for an unknown key (named) or a bad value."""
    if not data:
        return base
    known = set(EngineConfig.__dataclass_fields__)
    unknown = sorted(set(data) - known)
    if unknown:
        raise InputError(f"unknown engine field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}",
                         field="engine", value=unknown[0])
    return replace(base, **data)  # type: ignore[arg-type]


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
