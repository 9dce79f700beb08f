"""Analytic roofline model of LLM serving latency: prefill time and decode step time.

Units: seconds, bytes, FLOP. Efficiency constants (MFU, bandwidth efficiency, overheads, all-reduce latency) are
data, fitted to measurements: see :mod:`fleetplan.costmodels.calibration` and ``benchmarks/calibrate_roofline.py``;
callers pass the GPU's row as ``calib`` (the shipped rows: :func:`fleetplan.datasets.calibration.load_calibration`).

Model (every approximation listed):

* Prefill is compute-bound. FLOPs = 2 × params_active × tokens (one multiply-add per parameter per token) plus
  causal attention 2 × layers × prompt² × (attention heads × head_dim) per sequence (QKᵀ and PV are 2·T²·d each,
  halved by the causal mask). Time = FLOPs / (tp × peak dense FLOP/s × prefill_mfu); FP8 peak when the weights are
  fp8 and the GPU has FP8, else BF16.
* Decode is memory-bound: one step reads the weights once (per GPU: weight bytes / (tp × pp)) and every sequence's
  KV cache (batch × context × KV bytes per token / (tp × pp)) at HBM bandwidth × decode_bw_efficiency. A MoE model
  reads its dense part plus only the experts the batch touches: with E routed experts, k per token and b tokens,
  the expected distinct experts per layer are E·(1 − (1 − k/E)^b) (tokens routed independently and uniformly — an
  approximation; real routers are skewed, which reads fewer experts). Per-expert and dense parameter counts are
  derived from the model's total and active counts: expert = (total − active)/(E − k), dense = active − k·expert.
  The step takes max(memory time, compute time) (compute = 2·params_active·batch + attention 4·layers·context·
  heads·head_dim per sequence).
* Tensor parallelism (inside a node): 2 all-reduces per layer (after attention and after the MLP) of
  tokens × hidden × 2 bytes (bf16 activations), ring algorithm, α–β model: 2(tp−1) steps of
  allreduce_step_latency_s plus 2(tp−1)/tp × bytes / (GPU.tp_link_bytes_per_s × allreduce_bw_efficiency).
  Not overlapped with compute.
* Pipeline parallelism (across nodes): each stage holds layers/pp. A batch is split into m = min(batch, pp)
  micro-batches (GPipe schedule). Prefill takes (m + pp − 1) stage times (the pipeline bubble) plus (pp − 1)
  activation hops; a decode step (the time between two tokens of one sequence) takes pp stage times (each micro-batch
  passes every stage; with m < pp some stages idle: the bubble) plus (pp − 1) hops. A hop moves the micro-batch's
  activations (tokens × hidden × 2 bytes, split over the tp GPUs of a stage, each on its own NIC) over the
  inter-node ``link`` (network.Link: bytes / per-GPU bandwidth + RTT/2), required when pp > 1; the shipped one is
  the inter-node default of datasets/data/network/links.csv (fleetplan.datasets.network.inter_node_link). The
  return of the sampled token to stage 1 is not counted.
* Overheads: prefill_overhead_s per prefill pass; decode_overhead_per_step_s + decode_overhead_per_layer_s × layers
  + decode_overhead_per_seq_s × batch per decode step (the scheduler's iteration; kernel launches per layer;
  sampling and scheduling per sequence). Each is bounded to what its cause can cost (Calibration.BOUNDS), so the fit
  cannot move bandwidth or compute time into them, and they are fitted across models of several sizes.
* A step may score several positions per sequence (``positions``; speculative decoding's verification of k drafted
  tokens scores k + 1, Leviathan et al. 2023): the weights and each sequence's KV are read once, while the compute,
  the MoE experts touched and the all-reduce bytes grow with batch × positions. 1 position is a plain decode step.
* A sparse decode (``kv_read_fraction`` f < 1: attention over selected KV blocks, e.g. top-k block selection in
  long contexts) reads f of each sequence's KV and does f of the attention compute; the KV still takes its whole
  memory. Only the traffic is modelled: the output differs from dense attention, a quality change to validate.
* Not modelled: prefix caching, chunked prefill interleaving (see capacity.py for how prefill and decode share time;
  :mod:`fleetplan.costmodels.speculative` composes draft and verification steps), CUDA-graph effects,
  quantization kernels' own efficiency (fp8/int4 weights simply read fewer bytes).
"""

from __future__ import annotations

from typing import Literal, get_args

from fleetplan.costmodels.calibration import Calibration
from fleetplan.costmodels.hardware import GPU, Model, bytes_per_element
from fleetplan.costmodels.network import Link
from fleetplan.errors import InputError, check_range

__all__ = ["prefill_time_s", "decode_step_time_s", "decode_roofline_s", "allreduce_time_s", "moe_params_read",
           "flops_per_s", "ACTIVATION_BYTES", "TP_DEGREES", "TpDegree"]

#: Bytes per activation element exchanged between GPUs (serving runs activations in bf16/fp16).
ACTIVATION_BYTES = 2.0

#: Tensor-parallel degrees the cost models accept (and scenarios may list): powers of two up to 16, since a tp group
#: splits attention heads evenly and runs within a node (nodes have 1, 2, 4, 8 or 16 GPUs).
TpDegree = Literal[1, 2, 4, 8, 16]
TP_DEGREES: tuple[int, ...] = get_args(TpDegree)


def _check_parallel(tp: int, pp: int, link: Link | None, calib: Calibration) -> None:
    if not isinstance(tp, int) or isinstance(tp, bool) or tp not in TP_DEGREES:
        raise InputError(f"tp must be one of {', '.join(map(str, TP_DEGREES))}, got {tp!r}", field="tp", value=tp)
    if not isinstance(pp, int) or isinstance(pp, bool) or not 1 <= pp <= 64:
        raise InputError(f"pp must be an integer in 1..64, got {pp!r}", field="pp", value=pp)
    if not isinstance(calib, Calibration):
        raise InputError(f"calib must be a Calibration row (fleetplan.datasets.calibration.load_calibration(gpu)), "
                         f"got {calib!r}", field="calib", value=calib)
    if pp > 1 and not isinstance(link, Link):
        raise InputError(f"pp {pp} sends activations between nodes: give the inter-node link "
                         "(fleetplan.datasets.network.inter_node_link())", field="link", value=link)


def flops_per_s(gpu: GPU, weight_dtype: str = "bf16") -> float:
    """Peak dense FLOP/s used for ``weight_dtype``: FP8 when the weights are fp8 and the GPU has FP8, else BF16."""
    bytes_per_element(weight_dtype, field="weight_dtype")
    if weight_dtype.lower() == "fp8" and gpu.fp8_flops_per_s:
        return gpu.fp8_flops_per_s
    return gpu.bf16_flops_per_s


def moe_params_read(model: Model, tokens: float) -> float:
    """Parameters a forward pass over ``tokens`` tokens reads (count).

    Dense model: params_total. MoE: dense part + expected distinct experts × per-expert parameters, with
    distinct = E·(1 − (1 − k/E)^tokens) (uniform independent routing), expert = (total − active)/(E − k),
    dense = active − k·expert.
    """
    if not model.is_moe or model.num_routed_experts <= model.experts_per_token:
        return model.params_total
    e, k = model.num_routed_experts, model.experts_per_token
    expert = (model.params_total - model.params_active) / (e - k)
    dense = max(model.params_active - k * expert, 0.0)
    distinct = e * (1.0 - (1.0 - k / e) ** max(tokens, 1.0))
    return min(dense + distinct * expert, model.params_total)


def allreduce_time_s(nbytes: float, tp: int, gpu: GPU, calib: Calibration) -> float:
    """One ring all-reduce of ``nbytes`` over ``tp`` GPUs: 2(tp−1)·α + 2(tp−1)/tp · nbytes / (link B/s × eff);
    0 when tp == 1. α = calib.allreduce_step_latency_s, link = GPU.tp_link_bytes_per_s (per direction)."""
    if tp <= 1:
        return 0.0
    steps = 2 * (tp - 1)
    return steps * calib.allreduce_step_latency_s + steps / tp * nbytes / (
        gpu.tp_link_bytes_per_s * calib.allreduce_bw_efficiency)


def _hop_time_s(tokens: float, model: Model, tp: int, link: Link) -> float:
    return link.transfer_time_s(tokens * model.hidden_size * ACTIVATION_BYTES / tp)


def prefill_time_s(model: Model, gpu: GPU, prompt_tokens: float, *, tp: int = 1, pp: int = 1, batch: float = 1,
                   weight_dtype: str = "bf16", link: Link | None = None, calib: Calibration) -> float:
    """Seconds to prefill ``batch`` prompts of ``prompt_tokens`` tokens each on one replica (tp × pp GPUs).

    See the module docstring for the formula. ``calib``: the GPU's calibration row; ``link``: the inter-node link
    (required when pp > 1, ignored otherwise). Raises InputError for tp not in TP_DEGREES, pp outside 1..64,
    prompt_tokens or batch below 1, an unknown dtype, a missing ``calib``, or pp > 1 without a ``link``.

    Example (hand arithmetic): Llama-3.1-8B (8.03e9 params, 32 layers, 32 heads × 128) on H100 (989.4e12 FLOP/s),
    2048 tokens, tp 1: FLOPs = 2·8.03e9·2048 + 2·32·2048²·4096 = 3.289e13 + 1.100e12 = 3.399e13.
    """
    _check_parallel(tp, pp, link, calib)
    prompt = check_range(prompt_tokens, field="prompt_tokens", low=1, high=1e8)
    b = check_range(batch, field="batch", low=1, high=1e8)
    tokens = b * prompt
    attn = b * 2.0 * model.num_layers * prompt * prompt * model.num_attention_heads * model.head_dim
    flops = 2.0 * model.params_active * tokens + attn
    m = min(b, pp)
    stage_compute = flops / pp / m / (tp * flops_per_s(gpu, weight_dtype) * calib.prefill_mfu)
    stage_ar = 2.0 * model.num_layers / pp * allreduce_time_s(
        tokens / m * model.hidden_size * ACTIVATION_BYTES, tp, gpu, calib)
    total = (m + pp - 1) * (stage_compute + stage_ar)
    if pp > 1 and link is not None:  # _check_parallel raised when pp > 1 has no link
        total += (pp - 1) * _hop_time_s(tokens / m, model, tp, link)
    return total + calib.prefill_overhead_s


def decode_roofline_s(model: Model, gpu: GPU, batch: float, context_tokens: float, *, tp: int = 1, pp: int = 1,
                      weight_dtype: str = "bf16", kv_dtype: str = "bf16", calib: Calibration,
                      positions: float = 1.0, kv_read_fraction: float = 1.0) -> tuple[float, float]:
    """(memory seconds, compute seconds) of one pipeline stage's share of a decode step: the two roofline terms
    :func:`decode_step_time_s` takes the larger of (before all-reduces, hops and overheads). The micro-batch is
    batch / min(batch, pp) sequences of ``context_tokens`` context, each scoring ``positions`` tokens (1: a decode
    step; k + 1: a speculative verification, whose weights and KV are read once and whose compute is per position).
    ``kv_read_fraction``: the share of each sequence's cached KV the step reads and attends to (1: dense attention;
    below 1: a sparse decode that selects KV blocks, whose output differs from dense attention). Arguments are not
    checked here (the callers check them)."""
    mb = batch / min(batch, pp)
    weight_bytes = moe_params_read(model, mb * positions) * bytes_per_element(weight_dtype, field="weight_dtype")
    kv_bytes = mb * model.kv_tokens_cached(context_tokens) * model.kv_bytes_per_token(kv_dtype) * kv_read_fraction
    mem_s = (weight_bytes + kv_bytes) / (tp * pp) / (gpu.hbm_bandwidth_bytes_per_s * calib.decode_bw_efficiency)
    flops = mb * positions * (2.0 * model.params_active + 4.0 * model.num_layers * kv_read_fraction
                              * model.kv_tokens_cached(context_tokens) * model.num_attention_heads * model.head_dim)
    comp_s = flops / pp / (tp * flops_per_s(gpu, weight_dtype) * calib.prefill_mfu)
    return mem_s, comp_s


def decode_step_time_s(model: Model, gpu: GPU, batch: float, context_tokens: float, *, tp: int = 1, pp: int = 1,
                       weight_dtype: str = "bf16", kv_dtype: str = "bf16", link: Link | None = None,
                       calib: Calibration, positions: float = 1.0, kv_read_fraction: float = 1.0) -> float:
    """Seconds per decode step (= time per output token of each sequence) with ``batch`` sequences of
    ``context_tokens`` tokens of context each, on one replica (tp × pp GPUs).

    ``batch`` may be fractional (an average concurrency, >= 1). ``positions``: tokens scored per sequence in the
    step (1; k + 1 for a speculative verification of k drafted tokens), >= 1. See the module docstring for the
    formula. ``kv_read_fraction``: share of the KV a sparse decode reads (:func:`decode_roofline_s`), in (0, 1].
    Raises InputError as :func:`prefill_time_s` does, for ``positions`` below 1 and a fraction outside (0, 1].

    Example (hand arithmetic): Llama-3.1-8B bf16 on H100, tp 1, batch 1, context 1: bytes = 8.03e9·2 + 131,072
    = 1.606e10; time = 1.606e10 / (3.35e12 × decode_bw_efficiency) + decode_overhead_per_step_s
    + 32 × decode_overhead_per_layer_s + 1 × decode_overhead_per_seq_s.
    """
    _check_parallel(tp, pp, link, calib)
    b = check_range(batch, field="batch", low=1, high=1e8)
    ctx = check_range(context_tokens, field="context_tokens", low=1, high=1e8)
    pos = check_range(positions, field="positions", low=1, high=1e4)
    kv_f = check_range(kv_read_fraction, field="kv_read_fraction", low=1e-6, high=1.0)
    m = min(b, pp)
    mb = b / m
    mem_s, comp_s = decode_roofline_s(model, gpu, b, ctx, tp=tp, pp=pp, weight_dtype=weight_dtype,
                                      kv_dtype=kv_dtype, calib=calib, positions=pos, kv_read_fraction=kv_f)
    stage_ar = 2.0 * model.num_layers / pp * allreduce_time_s(mb * pos * model.hidden_size * ACTIVATION_BYTES, tp,
                                                              gpu, calib)
    total = pp * (max(mem_s, comp_s) + stage_ar)
    if pp > 1 and link is not None:  # _check_parallel raised when pp > 1 has no link
        total += (pp - 1) * _hop_time_s(mb * pos, model, tp, link)
    return (total + calib.decode_overhead_per_step_s + calib.decode_overhead_per_layer_s * model.num_layers
            + calib.decode_overhead_per_seq_s * b)
