"""Typed records for accelerators and model architectures, and the memory arithmetic on them.

Units: bytes, bytes/s, FLOP/s, watts. GB in the shipped CSV is decimal (1e9 bytes), as vendors label memory
and bandwidth, except GPU memory, which the loaders take from the MiB (2^20 bytes) that nvidia-smi reports where the
catalog has it (an A100-80GB reports 81,920 MiB = 85.9e9 bytes: HBM's "80 GB" is 80 GiB); the loaders in
``fleetplan.datasets`` convert when they build these records.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from fleetplan.errors import InputError

#: Bytes per stored element for each weight / KV-cache data type. bf16 and fp16 are 2 bytes, fp8 1 byte,
#: int4 half a byte (4-bit weight-only quantization; scales and zero points are ignored, a < 2% overhead
#: for group size 128).
BYTES_PER_ELEMENT: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
#: The keys of BYTES_PER_ELEMENT as a type (for input schemas); tests/test_capacity.py checks that they agree.
DType = Literal["bf16", "fp16", "fp8", "int8", "int4"]


def bytes_per_element(dtype: str, *, field: str = "dtype") -> float:
    """Bytes per element of ``dtype`` ('bf16', 'fp16', 'fp8', 'int8', 'int4'); raises InputError otherwise."""
    try:
        return BYTES_PER_ELEMENT[dtype.lower()]
    except (KeyError, AttributeError):
        raise InputError(f"unknown data type {dtype!r}; use one of {', '.join(BYTES_PER_ELEMENT)}", field=field,
                         value=dtype) from None


def _positive(name: str, value: float, owner: str) -> None:
    if value is None or not isinstance(value, int | float) or math.isnan(value) or value <= 0:
        raise InputError(f"{owner}: must be a positive number, got {value!r}", field=name, value=value)


@dataclass(frozen=True)
class GPU:
    """One accelerator type.

    Attributes:
        name: catalog name, e.g. 'H100-SXM-80GB'.
        memory_bytes: HBM/GDDR capacity in bytes as the serving engine sees it (the MiB nvidia-smi reports × 2^20;
            the vendor 'GB' label × 1e9 where the catalog has no report).
        hbm_bandwidth_bytes_per_s: peak memory bandwidth, bytes/s.
        bf16_flops_per_s: dense (no 2:4 sparsity) BF16 tensor throughput, FLOP/s; for GPUs without BF16
            (T4, V100) the FP16 figure.
        fp8_flops_per_s: dense FP8 throughput, FLOP/s, or None where the GPU has no FP8.
        interconnect_bytes_per_s: GPU-to-GPU link bandwidth (aggregate, bidirectional as datasheets state),
            bytes/s, or None where the GPU has no NVLink/Infinity Fabric (then tensor parallelism runs over PCIe).
        pcie_bytes_per_s: host link bandwidth (bidirectional), bytes/s.
        tdp_w: board power, watts.
        vendor: 'NVIDIA' or 'AMD'.
        source: where the numbers come from (the catalog row's source column).
    """

    name: str
    memory_bytes: float
    hbm_bandwidth_bytes_per_s: float
    bf16_flops_per_s: float
    fp8_flops_per_s: float | None = None
    interconnect_bytes_per_s: float | None = None
    pcie_bytes_per_s: float | None = None
    tdp_w: float | None = None
    vendor: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        for f in ("memory_bytes", "hbm_bandwidth_bytes_per_s", "bf16_flops_per_s"):
            _positive(f, getattr(self, f), f"GPU {self.name}")
        if self.memory_bytes < 1e9 or self.memory_bytes > 2e12:
            raise InputError(f"GPU {self.name}: memory {self.memory_bytes:g} bytes is outside 1 GB..2 TB; "
                             "give bytes, not GB", field="memory_bytes", value=self.memory_bytes)

    @property
    def tp_link_bytes_per_s(self) -> float:
        """Per-direction bandwidth for tensor-parallel all-reduce: half the bidirectional NVLink figure, or
        half the PCIe figure where the GPU has no NVLink (PCIe Gen4 x16 = 64 GB/s bidir when unknown)."""
        if self.interconnect_bytes_per_s:
            return self.interconnect_bytes_per_s / 2
        if self.pcie_bytes_per_s:
            return self.pcie_bytes_per_s / 2
        return 32e9


@dataclass(frozen=True)
class Model:
    """One model architecture (numbers from its config.json; see datasets/data/models/PROVENANCE.md).

    Attributes:
        name: catalog name, e.g. 'Llama-3.1-8B'.
        num_layers, hidden_size, num_attention_heads: transformer shape.
        num_kv_heads: key/value heads (GQA); None for MLA models.
        head_dim: per-head dimension (attention heads and KV heads share it).
        params_total: total parameters (all experts), count (not billions).
        params_active: parameters used per token (MoE: shared + top-k experts), count.
        attention_type: 'GQA', 'MHA' or 'MLA'.
        arch_type: 'dense' or 'moe'.
        num_routed_experts, experts_per_token, moe_intermediate_size: MoE shape (0 for dense models).
        kv_lora_rank, qk_rope_head_dim: MLA compressed-cache shape (DeepSeek-V3); 0 otherwise.
        max_context_tokens: longest context the model supports.
        sliding_window_tokens: per-sequence KV cap for sliding-window models (Mistral-7B-v0.1: 4096), else None.
        source: provenance.
        vocab_size: tokens in the vocabulary (the catalog's or config.json's ``vocab_size``; 0 when unknown): a
            speculative draft model must share its target's tokenizer, and a different vocabulary shows it does not.
    """

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int | None
    head_dim: int
    params_total: float
    params_active: float
    attention_type: str = "GQA"
    arch_type: str = "dense"
    num_routed_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    max_context_tokens: int = 131072
    sliding_window_tokens: int | None = None
    source: str = ""
    vocab_size: int = 0

    def __post_init__(self) -> None:
        for f in ("num_layers", "hidden_size", "num_attention_heads", "head_dim", "params_total", "params_active"):
            _positive(f, getattr(self, f), f"model {self.name}")
        if self.is_mla:
            if self.kv_lora_rank <= 0:
                raise InputError(f"model {self.name}: MLA needs kv_lora_rank > 0", field="kv_lora_rank",
                                 value=self.kv_lora_rank)
        elif not self.num_kv_heads or self.num_kv_heads <= 0:
            raise InputError(f"model {self.name}: num_kv_heads must be a positive integer (GQA/MHA)",
                             field="num_kv_heads", value=self.num_kv_heads)
        if self.params_active > self.params_total * (1 + 1e-9):
            raise InputError(f"model {self.name}: params_active {self.params_active:g} exceeds params_total "
                             f"{self.params_total:g}", field="params_active", value=self.params_active)

    @property
    def is_mla(self) -> bool:
        """True for multi-head latent attention (a compressed KV cache), as in DeepSeek-V3."""
        return self.attention_type.upper().startswith("MLA")

    @property
    def is_moe(self) -> bool:
        return self.arch_type.lower() == "moe" and self.num_routed_experts > 0

    def weight_bytes(self, dtype: str = "bf16") -> float:
        """Bytes of all weights in ``dtype`` = params_total × bytes per element (bf16 2, fp8 1, int4 0.5)."""
        return self.params_total * bytes_per_element(dtype)

    def kv_bytes_per_token(self, dtype: str = "bf16") -> float:
        """KV-cache bytes one token occupies, all layers.

        GQA/MHA: 2 (K and V) × layers × KV heads × head dim × bytes per element (the KV heads, never the
        attention heads). MLA: (kv_lora_rank + qk_rope_head_dim) × layers × bytes per element (one compressed
        latent plus the decoupled RoPE key per layer, no separate V). Examples in bf16: Llama-3.1-8B
        2·32·8·128·2 = 131,072 B; Llama-3.1-70B 2·80·8·128·2 = 327,680 B; DeepSeek-V3 (512+64)·61·2 = 70,272 B.
        """
        b = bytes_per_element(dtype)
        if self.is_mla:
            return (self.kv_lora_rank + self.qk_rope_head_dim) * self.num_layers * b
        assert self.num_kv_heads is not None
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * b

    def kv_tokens_cached(self, context_tokens: float) -> float:
        """Tokens of one sequence actually held in the KV cache (a sliding window caps it)."""
        if self.sliding_window_tokens:
            return min(context_tokens, self.sliding_window_tokens)
        return context_tokens


@dataclass(frozen=True)
class MigProfile:
    """One MIG GPU-instance profile of a GPU type (datasets/data/mig/profiles.csv).

    Attributes: gpu, name ('3g.40gb'), compute_slices (of 7), memory_slices (span of 8), memory_gb,
    max_instances per GPU, placements (allowed start slots), source (URL).
    """

    gpu: str
    name: str
    compute_slices: int
    memory_slices: int
    memory_gb: float
    max_instances: int
    placements: tuple[int, ...]
    source: str


#: A stated parameter count off by more than this share from the architecture's is an error (a typo such as
#: 3.25e9 for a 32B model); the formula below leaves out only small terms (biases other than q/k/v, rotary tables).
PARAMS_TOLERANCE = 0.10


def architecture_params(*, num_layers: int, hidden_size: int, num_attention_heads: int, num_kv_heads: int | None,
                        head_dim: int, intermediate_size: int, vocab_size: int, tie_word_embeddings: bool = False,
                        attention_bias: bool = False, num_experts: int = 0, experts_per_token: int = 0,
                        moe_intermediate_size: int = 0, num_shared_experts: int = 0, first_dense_layers: int = 0,
                        q_lora_rank: int = 0, kv_lora_rank: int = 0, qk_nope_head_dim: int = 0,
                        qk_rope_head_dim: int = 0, v_head_dim: int = 0) -> tuple[float, float]:
    """(total, active per token) parameter counts of a decoder-only transformer from its config.json shape.

    Per layer: attention (GQA/MHA: q h·H·d, k and v h·K·d each, o H·d·h, plus q/k/v biases when
    ``attention_bias``; MLA when ``kv_lora_rank`` > 0: q h·q_lora + q_lora + q_lora·H·(nope + rope) (or h·H·(nope +
    rope) without q_lora), kv h·(kv_lora + rope) + kv_lora + kv_lora·H·(nope + v), o H·v·h), two RMSNorms (2h), and
    a gated MLP of 3·h·I (SwiGLU: gate, up, down). MoE layers (all but the first ``first_dense_layers``): E routed
    experts of 3·h·I_moe, shared experts of the same size, a router h·E; active = top-k routed + shared + router.
    Embeddings V·h, plus an untied output head V·h; a final norm h. Examples: Llama-3.1-8B 8.03e9; Mixtral-8x7B
    46.70e9 total, 12.88e9 active; Qwen2.5-7B (q/k/v bias) 7.62e9; DeepSeek-V3 671e9 (datasets/data/models).

    Raises:
        InputError: a non-positive dimension.
    """
    h = hidden_size
    for name, v in (("num_layers", num_layers), ("hidden_size", h), ("num_attention_heads", num_attention_heads),
                    ("head_dim", head_dim), ("intermediate_size", intermediate_size), ("vocab_size", vocab_size)):
        _positive(name, v, "architecture")
    heads = num_attention_heads
    if kv_lora_rank > 0:
        qk = qk_nope_head_dim + qk_rope_head_dim
        q = (h * q_lora_rank + q_lora_rank + q_lora_rank * heads * qk) if q_lora_rank else h * heads * qk
        kv = h * (kv_lora_rank + qk_rope_head_dim) + kv_lora_rank + kv_lora_rank * heads * (qk_nope_head_dim
                                                                                            + v_head_dim)
        attn = q + kv + heads * v_head_dim * h
    else:
        kvh = num_kv_heads or heads
        attn = 2 * h * heads * head_dim + 2 * h * kvh * head_dim
        if attention_bias:
            attn += (heads + 2 * kvh) * head_dim
    norms = 2 * h
    dense = attn + norms + 3 * h * intermediate_size
    if num_experts > 0:
        expert = 3 * h * (moe_intermediate_size or intermediate_size)
        shared = num_shared_experts * expert + h * num_experts
        moe_total = attn + norms + num_experts * expert + shared
        moe_active = attn + norms + experts_per_token * expert + shared
        n_moe = num_layers - first_dense_layers
        total = first_dense_layers * dense + n_moe * moe_total
        active = first_dense_layers * dense + n_moe * moe_active
    else:
        total = active = num_layers * dense
    emb = vocab_size * h * (1 if tie_word_embeddings else 2) + h
    return float(total + emb), float(active + emb)


def check_params(stated: float, computed: float, *, owner: str, field: str = "params") -> None:
    """Raise InputError when a stated parameter count is off by more than :data:`PARAMS_TOLERANCE` from the
    architecture's, showing both numbers (3.25e9 stated for a 32.8e9 architecture is a typo, not a model)."""
    if computed > 0 and abs(stated - computed) > PARAMS_TOLERANCE * computed:
        raise InputError(f"{owner}: states {stated:.4g} parameters but its architecture has {computed:.4g} "
                         f"({stated / computed:.2f}x, more than {PARAMS_TOLERANCE:.0%} off); fix the count (a count, "
                         "not billions) or the shape", field=field, value=stated)
