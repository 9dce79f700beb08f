"""Fit the roofline's constants (:class:`~fleetplan.costmodels.calibration.Calibration`) to measured latencies of
several models, GPUs and serving frameworks, and measure the error on held-out (model, GPU) groups.

The fitted structure gives every term one physical cause, shared where the cause is shared:

* per GPU family (the catalog name's first part: 'A100', 'H100', ...), shared by every framework:
  ``prefill_mfu`` (the GEMM efficiency cuBLAS/CUTLASS reach on that chip) and ``decode_bw_efficiency`` (the share
  of peak HBM bandwidth a weight and KV read reaches); and ``overhead_scale``, a factor on every host-side overhead
  (the hosts differ: a DGX A100 has AMD EPYC 7742 CPUs, a DGX H100 Intel Xeon 8480C), 1 for the reference family
  (the one the anchor framework was measured on);
* per (framework, version): its overheads on the reference family's host: per prefill pass, per decode step, per
  layer and per sequence (bounded by ``Calibration.BOUNDS`` to what launches and host work cost). Engines differ
  mostly there (Python scheduling, eager launches vs CUDA graphs, detokenising in the serving loop), not in the
  chip's GEMM or bandwidth efficiency: fitting an efficiency per framework as well left the fit unidentified
  (efficiencies at their bounds, a TensorRT-LLM prefill overhead of 0.5 s) and raised the held-out error;
* shared by all: the all-reduce bandwidth efficiency and step latency.

Residuals are log(predicted / measured), weighted so every (model, GPU) group counts about equally, with a robust
loss (scipy.optimize.least_squares, soft_l1, f_scale 0.1). The prediction is vectorised (:class:`ObservationArrays`,
:func:`predict_many`); :func:`predict` goes through the scalar functions of :mod:`fleetplan.costmodels.latency`, the
reference the vectorised form is tested against. Observations are :class:`Observation` records; the shipped ones
come from :func:`fleetplan.datasets.measured.load_measurements`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from fleetplan.costmodels.calibration import DEFAULT_ROW, Calibration
from fleetplan.costmodels.hardware import GPU, Model, bytes_per_element
from fleetplan.costmodels.latency import (
    ACTIVATION_BYTES,
    TP_DEGREES,
    allreduce_time_s,
    decode_roofline_s,
    decode_step_time_s,
    flops_per_s,
    prefill_time_s,
)
from fleetplan.errors import InputError

__all__ = ["FAMILY_PARAMETERS", "KINDS", "OVERHEAD_SCALE_BOUNDS", "FitResult", "Observation", "ObservationArrays",
           "absolute_percentage_errors", "default_row", "fit_calibration", "gpu_family", "held_out_errors",
           "held_out_gpu_predictions", "held_out_predictions", "model_family", "predict", "predict_many"]

#: Kinds of observation (see :class:`Observation`).
KINDS = ("prefill", "decode", "e2e", "tpot", "tpot_mixed")
#: Constants fitted per GPU family.
FAMILY_PARAMETERS = ("prefill_mfu", "decode_bw_efficiency", "overhead_scale")
#: Bounds of a GPU family's factor on the host-side overheads (the reference family's is 1).
OVERHEAD_SCALE_BOUNDS = (0.3, 3.0)
_OVERHEADS = ("prefill_overhead_s", "decode_overhead_per_step_s", "decode_overhead_per_layer_s",
              "decode_overhead_per_seq_s")


def gpu_family(gpu: GPU | str) -> str:
    """The family a GPU's efficiencies are shared within: the catalog name's first dash-separated part
    ('A100-SXM4-80GB' -> 'A100')."""
    name = gpu.name if isinstance(gpu, GPU) else gpu
    return name.split("-")[0].split(" ")[0]


def model_family(model: Model | str) -> str:
    """A model's family: its catalog name up to its parameter count ('Llama-3.1-70B' -> 'Llama-3.1',
    'Mistral-7B-v0.1' -> 'Mistral'; a name without a count is its own family)."""
    name = model.name if isinstance(model, Model) else model
    m = re.match(r"^(.+?)-\d+(?:\.\d+)?[BM](?:\b|-)", name)
    return m.group(1) if m else name


@dataclass(frozen=True)
class Observation:
    """One measured time.

    Attributes:
        framework: serving framework and version, e.g. 'vLLM 0.11'.
        model, gpu, tp: what ran (tp GPUs, no pipeline parallelism).
        kind: 'prefill': one pass over ``batch`` prompts; 'decode': one step at ``batch`` sequences of context
            prompt + output/2; 'e2e': one static batch to completion = prefill of the batch + (output − 1) decode
            steps; 'tpot': mean time per output token of a saturated server in steady state whose prefills run as
            iterations of their own (vLLM 0.5): a decode step plus, per step, batch/output prefills of one prompt
            (the requests that finish are replaced); 'tpot_mixed': the same for an engine that runs the prompts'
            tokens inside the decode step (chunked prefill, vLLM 0.11): max(memory time, compute time of the
            decode tokens plus batch/output prompts) plus the step's all-reduces and overheads.
        batch: sequences (may be an average, >= 1).
        prompt_tokens: prompt length, tokens (mean for tpot rows).
        output_tokens: output length, tokens (mean for tpot rows).
        measured_s: the measured seconds.
        task: the prompt set, where the prompt length is the set's mean rather than measured.
        group: the held-out unit, e.g. 'Llama-3.1-8B @ H100-SXM-80GB'.
    """

    framework: str
    model: Model
    gpu: GPU
    tp: int
    kind: str
    batch: float
    prompt_tokens: float
    output_tokens: float
    measured_s: float
    task: str = ""
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    group: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InputError(f"kind must be one of {', '.join(KINDS)}", field="kind", value=self.kind)
        if not self.measured_s > 0:
            raise InputError("measured_s must be a positive number of seconds", field="measured_s",
                             value=self.measured_s)
        if not (isinstance(self.prompt_tokens, int | float) and self.prompt_tokens >= 1):
            raise InputError("prompt_tokens must be a number of tokens >= 1 (a mean where not measured per row)",
                             field="prompt_tokens", value=self.prompt_tokens)
        if not self.output_tokens >= 1:
            raise InputError("output_tokens must be at least 1", field="output_tokens", value=self.output_tokens)


@dataclass(frozen=True)
class FitResult:
    """Fitted constants.

    Attributes:
        family: GPU family -> {'prefill_mfu', 'decode_bw_efficiency', 'overhead_scale'}.
        framework: framework -> its four overheads (seconds) on the reference family's host.
        allreduce_bw_efficiency, allreduce_step_latency_s: shared.
        anchor: the framework the default rows represent.
        reference_family: the family whose overhead_scale is 1.
    """

    family: dict[str, dict[str, float]]
    framework: dict[str, dict[str, float]]
    allreduce_bw_efficiency: float
    allreduce_step_latency_s: float
    anchor: str = ""
    reference_family: str = ""

    def family_constants(self, gpu: GPU | str) -> dict[str, float]:
        """The family constants of ``gpu``; a GPU whose family was not fitted (or 'default') gets the geometric
        mean of the fitted families'."""
        fam = self.family.get(gpu_family(gpu))
        if fam is not None:
            return fam
        return {k: float(np.exp(np.mean([np.log(f[k]) for f in self.family.values()]))) for k in FAMILY_PARAMETERS}

    def calibration(self, gpu: GPU | str, framework: str | None = None, source: str = "") -> Calibration:
        """The Calibration row of ``gpu`` under ``framework`` (default: the anchor): the family's efficiencies and
        the framework's overheads times the family's overhead_scale. Raises InputError for a framework not fitted."""
        fw = framework or self.anchor
        if fw not in self.framework:
            raise InputError(f"framework {fw!r} was not fitted; fitted: {', '.join(sorted(self.framework))}",
                             field="framework", value=fw)
        name = gpu.name if isinstance(gpu, GPU) else gpu
        fam = self.family_constants(name)
        f = self.framework[fw]
        return Calibration(gpu=name, prefill_mfu=fam["prefill_mfu"], decode_bw_efficiency=fam["decode_bw_efficiency"],
                           allreduce_bw_efficiency=self.allreduce_bw_efficiency,
                           allreduce_step_latency_s=self.allreduce_step_latency_s, source=source, framework=fw,
                           **{k: min(f[k] * fam["overhead_scale"], Calibration.BOUNDS[k][1]) for k in _OVERHEADS})


class _Layout:
    """Position of every fitted constant in the parameter vector."""

    def __init__(self, obs: Sequence[Observation], anchor: str):
        self.families = sorted({gpu_family(o.gpu) for o in obs})
        self.frameworks = sorted({o.framework for o in obs} | {anchor})
        anchored = sorted({gpu_family(o.gpu) for o in obs if o.framework == anchor})
        self.reference = (anchored or self.families)[0]
        self.anchor = anchor
        names, lo, hi, x0 = [], [], [], []

        def add(name: str, low: float, high: float, start: float) -> None:
            names.append(name)
            lo.append(low)
            hi.append(high)
            x0.append(start)

        b = Calibration.BOUNDS
        for fam in self.families:
            add(f"{fam}.prefill_mfu", *b["prefill_mfu"], 0.5)
            add(f"{fam}.decode_bw_efficiency", *b["decode_bw_efficiency"], 0.7)
            if fam != self.reference:
                add(f"{fam}.overhead_scale", *OVERHEAD_SCALE_BOUNDS, 1.0)
        for fw in self.frameworks:
            for k in _OVERHEADS:
                add(f"{fw}.{k}", b[k][0], b[k][1], min(b[k][1] / 4, 0.005))
        add("allreduce_bw_efficiency", *b["allreduce_bw_efficiency"], 0.75)
        add("allreduce_step_latency_s", *b["allreduce_step_latency_s"], 1e-5)
        self.names = names
        self.index = {n: i for i, n in enumerate(names)}
        self.low, self.high, self.x0 = np.array(lo), np.array(hi), np.array(x0)
        self.scale = np.maximum(np.abs(self.x0), 1e-6)

    def result(self, x: np.ndarray) -> FitResult:
        v = dict(zip(self.names, (float(t) for t in x), strict=True))
        fam = {f: {k: v.get(f"{f}.{k}", 1.0) for k in FAMILY_PARAMETERS} for f in self.families}
        fws = {fw: {k: v[f"{fw}.{k}"] for k in _OVERHEADS} for fw in self.frameworks}
        return FitResult(fam, fws, v["allreduce_bw_efficiency"], v["allreduce_step_latency_s"], self.anchor,
                         self.reference)


def predict(fit: FitResult, o: Observation) -> float:
    """Predicted seconds of observation ``o`` under ``fit`` (the kinds as :class:`Observation` describes), with the
    row :meth:`FitResult.calibration` gives, through the scalar latency functions of
    :mod:`fleetplan.costmodels.latency` (the reference :func:`predict_many` must agree with)."""
    c = fit.calibration(o.gpu, o.framework)
    prompt = o.prompt_tokens
    b = max(o.batch, 1.0)
    step = decode_step_time_s(o.model, o.gpu, b, prompt + o.output_tokens / 2, kv_dtype=o.kv_dtype, tp=o.tp,
                              weight_dtype=o.weight_dtype, calib=c)
    if o.kind == "decode":
        return step
    if o.kind == "prefill":
        return prefill_time_s(o.model, o.gpu, prompt, batch=o.batch, tp=o.tp, weight_dtype=o.weight_dtype, calib=c)
    if o.kind == "e2e":
        return (prefill_time_s(o.model, o.gpu, prompt, batch=o.batch, tp=o.tp, weight_dtype=o.weight_dtype, calib=c)
                + max(o.output_tokens - 1, 0) * step)
    replaced = b / o.output_tokens
    one = prefill_time_s(o.model, o.gpu, prompt, tp=o.tp, weight_dtype=o.weight_dtype, calib=c)
    if o.kind == "tpot":
        return step + replaced * one
    # tpot_mixed: the prompts' compute joins the step's. A prompt's compute alone = its prefill time minus the
    # prefill's all-reduces and fixed overhead.
    ar = 2.0 * o.model.num_layers * allreduce_time_s(prompt * o.model.hidden_size * ACTIVATION_BYTES, o.tp, o.gpu, c)
    prompt_comp = one - ar - c.prefill_overhead_s
    mem, comp = decode_roofline_s(o.model, o.gpu, b, prompt + o.output_tokens / 2, tp=o.tp,
                                  weight_dtype=o.weight_dtype, kv_dtype=o.kv_dtype, calib=c)
    return step - max(mem, comp) + max(mem, comp + replaced * prompt_comp)


def _check_observations(obs: Sequence[Observation]) -> None:
    """InputError, as the scalar latency functions raise it, for a tp outside TP_DEGREES or a batch or prompt
    length below 1."""
    for o in obs:
        if o.tp not in TP_DEGREES:
            raise InputError(f"tp must be one of {', '.join(map(str, TP_DEGREES))}", field="tp", value=o.tp)
        for name, v in (("batch", o.batch), ("prompt_tokens", o.prompt_tokens)):
            if not v >= 1:
                raise InputError(f"{name} must be at least 1", field=name, value=v)


class ObservationArrays:
    """Observations as numpy columns (one entry per observation), for :func:`predict_many`.

    Holds what the latency model reads of each observation's model, GPU and run (pp = 1): parameter counts, shapes,
    bytes per weight and per KV token, peak bandwidth and FLOP/s for its dtype, the tp link, batch, lengths.
    ``pairs`` lists the distinct (GPU name, framework) of the observations and ``pair`` indexes it per observation.
    Raises InputError as the scalar functions would for tp outside TP_DEGREES or batch/lengths below 1.
    """

    def __init__(self, obs: Sequence[Observation]):
        _check_observations(obs)
        self.obs = list(obs)
        self.n = len(obs)
        self.kind = np.array([KINDS.index(o.kind) for o in obs], dtype=int)
        self.batch = np.array([o.batch for o in obs], dtype=float)
        self.prompt = np.array([o.prompt_tokens for o in obs], dtype=float)
        self.output = np.array([o.output_tokens for o in obs], dtype=float)
        self.tp = np.array([o.tp for o in obs], dtype=float)
        self._model_columns([o.model for o in obs])
        self.weight_bpe = np.array([bytes_per_element(o.weight_dtype, field="weight_dtype") for o in obs])
        self.kv_bpt = np.array([o.model.kv_bytes_per_token(o.kv_dtype) for o in obs], dtype=float)
        self.hbm = np.array([o.gpu.hbm_bandwidth_bytes_per_s for o in obs], dtype=float)
        self.flops = np.array([flops_per_s(o.gpu, o.weight_dtype) for o in obs], dtype=float)
        self.link = np.array([o.gpu.tp_link_bytes_per_s for o in obs], dtype=float)
        self.pairs = sorted({(o.gpu.name, o.framework) for o in obs})
        index = {p: i for i, p in enumerate(self.pairs)}
        self.pair = np.array([index[(o.gpu.name, o.framework)] for o in obs], dtype=int)

    def _model_columns(self, m: list[Model]) -> None:
        """The columns of the observations' models ``m``: layers, hidden size, attention width, parameter counts,
        sliding window (inf without), and for MoE models (more routed experts than active ones) the expert count,
        top-k, parameters per expert and the dense parameters (the rest of the active ones)."""
        self.layers = np.array([x.num_layers for x in m], dtype=float)
        self.hidden = np.array([x.hidden_size for x in m], dtype=float)
        self.attn_dim = np.array([x.num_attention_heads * x.head_dim for x in m], dtype=float)
        self.params_active = np.array([x.params_active for x in m], dtype=float)
        self.params_total = np.array([x.params_total for x in m], dtype=float)
        self.window = np.array([x.sliding_window_tokens or np.inf for x in m], dtype=float)
        moe = [x.is_moe and x.num_routed_experts > x.experts_per_token for x in m]
        self.moe = np.array(moe, dtype=bool)
        self.experts = np.array([x.num_routed_experts if f else 1 for x, f in zip(m, moe, strict=True)], dtype=float)
        self.top_k = np.array([x.experts_per_token if f else 0 for x, f in zip(m, moe, strict=True)], dtype=float)
        expert = np.where(self.moe, (self.params_total - self.params_active) / np.maximum(self.experts - self.top_k,
                                                                                           1.0), 0.0)
        self.expert_params = expert
        self.dense_params = np.maximum(self.params_active - self.top_k * expert, 0.0)

    def times(self, cal: Mapping[str, np.ndarray]) -> np.ndarray:
        """Predicted seconds per observation, given per-observation constants ``cal`` (Calibration parameter
        name -> array): the formulas of :mod:`fleetplan.costmodels.latency` at pp = 1, combined per kind as
        :class:`Observation` describes."""
        tp, b, prompt = self.tp, self.batch, self.prompt
        multi = tp > 1

        def allreduce(nbytes: np.ndarray) -> np.ndarray:
            steps = 2.0 * (tp - 1.0)
            t = steps * cal["allreduce_step_latency_s"] + steps / tp * nbytes / (
                self.link * cal["allreduce_bw_efficiency"])
            return np.where(multi, t, 0.0)

        peak = tp * self.flops * cal["prefill_mfu"]
        tokens = b * prompt
        flops = 2.0 * self.params_active * tokens + b * 2.0 * self.layers * prompt * prompt * self.attn_dim
        prefill = (flops / peak + 2.0 * self.layers * allreduce(tokens * self.hidden * ACTIVATION_BYTES)
                   + cal["prefill_overhead_s"])
        flops1 = 2.0 * self.params_active * prompt + 2.0 * self.layers * prompt * prompt * self.attn_dim
        prefill1 = (flops1 / peak + 2.0 * self.layers * allreduce(prompt * self.hidden * ACTIVATION_BYTES)
                    + cal["prefill_overhead_s"])
        ctx = np.minimum(prompt + self.output / 2.0, self.window)
        distinct = self.experts * (1.0 - (1.0 - self.top_k / self.experts) ** np.maximum(b, 1.0))
        params_read = np.where(self.moe, np.minimum(self.dense_params + distinct * self.expert_params,
                                                    self.params_total), self.params_total)
        mem = (params_read * self.weight_bpe + b * ctx * self.kv_bpt) / tp / (
            self.hbm * cal["decode_bw_efficiency"])
        comp = b * (2.0 * self.params_active + 4.0 * self.layers * ctx * self.attn_dim) / peak
        step = (np.maximum(mem, comp) + 2.0 * self.layers * allreduce(b * self.hidden * ACTIVATION_BYTES)
                + cal["decode_overhead_per_step_s"] + cal["decode_overhead_per_layer_s"] * self.layers
                + cal["decode_overhead_per_seq_s"] * b)
        e2e = prefill + np.maximum(self.output - 1.0, 0.0) * step
        replaced = b / self.output  # requests finishing (and replaced) per step in steady state
        tpot = step + replaced * prefill1
        mixed = step - np.maximum(mem, comp) + np.maximum(mem, comp + replaced * flops1 / peak)
        return np.choose(self.kind, [prefill, step, e2e, tpot, mixed])


def predict_many(fit: FitResult, arrays: ObservationArrays) -> np.ndarray:
    """Predicted seconds of every observation of ``arrays`` under ``fit``: the vectorised form of :func:`predict`
    (the same rows from :meth:`FitResult.calibration`, the same formulas; tests check both agree)."""
    rows = [fit.calibration(g, fw) for g, fw in arrays.pairs]
    names = Calibration.parameter_names()
    return arrays.times({k: np.array([getattr(r, k) for r in rows])[arrays.pair] for k in names})


def fit_calibration(obs: Sequence[Observation], *, anchor: str, start: FitResult | None = None,
                    max_nfev: int = 300) -> FitResult:
    """Fit the constants to ``obs`` (module docstring for the structure and the loss).

    ``anchor``: the framework the default rows represent (the shipped default: a current vLLM); its GPU family is
    the reference of the overhead scale. ``start``: a previous fit to start from (faster for held-out refits).
    Raises InputError when ``obs`` is empty.
    """
    if not obs:
        raise InputError("no observations to fit", field="observations")
    lay = _Layout(obs, anchor)
    arrays = ObservationArrays(obs)
    groups: dict[str, int] = {}
    for o in obs:
        groups[o.group] = groups.get(o.group, 0) + 1
    w = np.array([1.0 / math.sqrt(groups[o.group]) for o in obs])
    meas = np.array([o.measured_s for o in obs])

    def resid(x: np.ndarray) -> np.ndarray:
        return w * np.log(predict_many(lay.result(np.clip(x, lay.low, lay.high)), arrays) / meas)

    x0 = lay.x0.copy()
    if start is not None:
        prev = _flatten(start)
        for n, i in lay.index.items():
            if n in prev:
                x0[i] = min(max(prev[n], lay.low[i]), lay.high[i])
    # tr_solver 'lsmr': no dense SVD per iteration (which multi-threaded BLAS makes slow on a loaded machine).
    res = least_squares(resid, x0, bounds=(lay.low, lay.high), x_scale=lay.scale, loss="soft_l1", f_scale=0.1,
                        tr_solver="lsmr", max_nfev=max_nfev)
    return lay.result(res.x)


def _flatten(fit: FitResult) -> dict[str, float]:
    out = {f"{f}.{k}": v for f, d in fit.family.items() for k, v in d.items()}
    out.update({f"{fw}.{k}": v for fw, d in fit.framework.items() for k, v in d.items()})
    out["allreduce_bw_efficiency"] = fit.allreduce_bw_efficiency
    out["allreduce_step_latency_s"] = fit.allreduce_step_latency_s
    return out


def held_out_predictions(obs: Sequence[Observation], *, anchor: str, start: FitResult | None = None,
                         max_nfev: int = 300) -> list[tuple[Observation, float]]:
    """Leave-one-group-out: for every group (a (model, GPU) pair, all its frameworks together), fit on the other
    groups and predict this one. Returns (observation, predicted seconds) for every observation whose framework is
    still represented in the other groups (others cannot be predicted and are left out)."""
    out: list[tuple[Observation, float]] = []
    for g in sorted({o.group for o in obs}):
        train = [o for o in obs if o.group != g]
        out.extend(_fit_and_predict(train, [o for o in obs if o.group == g], anchor=anchor, start=start,
                                    max_nfev=max_nfev))
    return out


def held_out_gpu_predictions(obs: Sequence[Observation], framework: str, *, anchor: str,
                             start: FitResult | None = None, max_nfev: int = 300
                             ) -> tuple[list[tuple[Observation, float]], list[str]]:
    """Held out by GPU for one framework: for every GPU type with ``framework``'s rows, fit on every observation
    except that framework's rows on that GPU (so the framework's constants come from its other GPUs) and predict
    them. Returns ((observation, predicted seconds) of the GPUs that could be predicted, the GPU names that could
    not: the framework has rows on no other GPU)."""
    gpus = sorted({o.gpu.name for o in obs if o.framework == framework})
    out: list[tuple[Observation, float]] = []
    alone: list[str] = []
    for g in gpus:
        if len(gpus) < 2:
            alone.append(g)
            continue
        test = [o for o in obs if o.framework == framework and o.gpu.name == g]
        train = [o for o in obs if not (o.framework == framework and o.gpu.name == g)]
        out.extend(_fit_and_predict(train, test, anchor=anchor, start=start, max_nfev=max_nfev))
    return out, alone


def _fit_and_predict(train: Sequence[Observation], test: Sequence[Observation], *, anchor: str,
                     start: FitResult | None, max_nfev: int) -> list[tuple[Observation, float]]:
    """(observation, predicted seconds) of the ``test`` rows whose framework ``train`` holds, fitted on ``train``."""
    fws = {o.framework for o in train}
    test = [o for o in test if o.framework in fws]
    if not test:
        return []
    fit = fit_calibration(train, anchor=anchor, start=start, max_nfev=max_nfev)
    return list(zip(test, (float(p) for p in predict_many(fit, ObservationArrays(test))), strict=True))


def held_out_errors(obs: Sequence[Observation], *, anchor: str, start: FitResult | None = None,
                    max_nfev: int = 300) -> list[tuple[Observation, float]]:
    """:func:`held_out_predictions` as :func:`absolute_percentage_errors`."""
    return absolute_percentage_errors(held_out_predictions(obs, anchor=anchor, start=start, max_nfev=max_nfev))


def absolute_percentage_errors(predictions: Sequence[tuple[Observation, float]]) -> list[tuple[Observation, float]]:
    """(observation, |predicted − measured| / measured × 100) of each (observation, predicted seconds)."""
    return [(o, 100.0 * abs(p - o.measured_s) / o.measured_s) for o, p in predictions]


def default_row(fit: FitResult, framework: str | None = None, source: str = "") -> Calibration:
    """The 'default' row (GPU types without a row of their own): the geometric mean of the fitted families."""
    return fit.calibration(DEFAULT_ROW, framework, source)
