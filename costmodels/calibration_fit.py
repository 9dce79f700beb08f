"""Fit the roofline's constants (:class:`~fleetplan.costmodels.calibration.Calibration`) to measured latencies of
several models, GPUs and serving frameworks, and measure the error on held-out (model, GPU) groups.

The fitted structure keeps every term physical:

* per GPU family (the catalog name's first part: 'A100', 'H100', ...): ``prefill_mfu`` and ``decode_bw_efficiency``
  of the best-understood framework (the anchor, a current vLLM): what the hardware achieves;
* per (framework, version): a prefill factor and a decode factor on those efficiencies (vLLM 0.5 vs 0.11 vs
  TensorRT-LLM differ by up to ~2.7x in published comparisons; pooling them would average incompatible engines), and
  its own overheads: per prefill pass, per decode step, per layer and per sequence (bounded by
  ``Calibration.BOUNDS`` to what launches and host work cost, so bandwidth time cannot hide in them);
  the anchor's factors are 1; every vLLM version shares the anchor's prefill factor (prefill is GEMM-bound; the
  public vLLM 0.11 data has no prefill time to fit a factor of its own);
* shared by all: the all-reduce bandwidth efficiency and step latency;
* per prompt set whose lengths are not published (ML.ENERGY): its mean prompt length (a nuisance parameter).

Residuals are log(predicted / measured), weighted so every (model, GPU) group counts about equally, with a robust
loss (scipy.optimize.least_squares, soft_l1, f_scale 0.1). Observations are :class:`Observation` records; the
shipped ones come from :func:`fleetplan.datasets.measured.load_measurements`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares

from fleetplan.costmodels.calibration import DEFAULT_ROW, Calibration
from fleetplan.costmodels.hardware import GPU, Model
from fleetplan.costmodels.latency import decode_step_time_s, prefill_time_s
from fleetplan.errors import InputError

__all__ = ["KINDS", "FitResult", "Observation", "default_row", "fit_calibration", "gpu_family", "held_out_errors",
           "predict"]

#: Kinds of observation: one prefill pass, one decode step, one static batch run to completion.
KINDS = ("prefill", "decode", "e2e")
#: Bounds of the fitted per-framework factors on the GPU family's efficiencies.
FACTOR_BOUNDS = (0.2, 3.0)
#: Bounds of a fitted mean prompt length, tokens.
PROMPT_BOUNDS = (32.0, 2048.0)
_OVERHEADS = ("prefill_overhead_s", "decode_overhead_per_step_s", "decode_overhead_per_layer_s",
              "decode_overhead_per_seq_s")


def _prefill_key(framework: str) -> str:
    """Frameworks sharing prefill constants: every vLLM version ('vLLM'); others their own."""
    return "vLLM" if framework.lower().startswith("vllm") else framework


def gpu_family(gpu: GPU | str) -> str:
    """The family a GPU's efficiencies are shared within: the catalog name's first dash-separated part
    ('A100-SXM4-80GB' -> 'A100')."""
    name = gpu.name if isinstance(gpu, GPU) else gpu
    return name.split("-")[0].split(" ")[0]


@dataclass(frozen=True)
class Observation:
    """One measured time.

    Attributes:
        framework: serving framework and version, e.g. 'vLLM 0.11'.
        model, gpu, tp: what ran (tp GPUs, no pipeline parallelism).
        kind: 'prefill' (one pass over ``batch`` prompts), 'decode' (one step at ``batch`` sequences of context
            prompt + output/2) or 'e2e' (prefill of the batch + (output − 1) decode steps).
        batch: sequences (may be an average, >= 1).
        prompt_tokens: prompt length, tokens; None when unpublished (then ``task`` names the prompt set).
        output_tokens: output length, tokens (mean for decode rows).
        measured_s: the measured seconds.
        group: the held-out unit, e.g. 'Llama-3.1-8B @ H100-SXM-80GB'.
    """

    framework: str
    model: Model
    gpu: GPU
    tp: int
    kind: str
    batch: float
    prompt_tokens: float | None
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
        if self.prompt_tokens is None and not self.task:
            raise InputError("an observation without prompt_tokens needs a task (its prompt set)", field="task")


@dataclass(frozen=True)
class FitResult:
    """Fitted constants.

    Attributes:
        family: GPU family -> {'prefill_mfu', 'decode_bw_efficiency'} of the anchor framework.
        framework: framework -> {'prefill_factor', 'decode_factor', and the four overheads}.
        allreduce_bw_efficiency, allreduce_step_latency_s: shared.
        prompt_tokens: task -> fitted mean prompt length (tokens).
        anchor: the framework whose factors are 1.
    """

    family: dict[str, dict[str, float]]
    framework: dict[str, dict[str, float]]
    allreduce_bw_efficiency: float
    allreduce_step_latency_s: float
    prompt_tokens: dict[str, float] = field(default_factory=dict)
    anchor: str = ""

    def calibration(self, gpu: GPU | str, framework: str | None = None, source: str = "") -> Calibration:
        """The Calibration row of ``gpu`` under ``framework`` (default: the anchor). A GPU whose family was not
        fitted gets the geometric mean of the fitted families' efficiencies. A factor times a family efficiency
        above 1 is capped at 1 (no engine exceeds the peak; :func:`predict` caps the same way while fitting)."""
        fw = framework or self.anchor
        if fw not in self.framework:
            raise InputError(f"framework {fw!r} was not fitted; fitted: {', '.join(sorted(self.framework))}",
                             field="framework", value=fw)
        name = gpu.name if isinstance(gpu, GPU) else gpu
        fam = self.family.get(gpu_family(name))
        if fam is None:
            fam = {k: float(np.exp(np.mean([np.log(f[k]) for f in self.family.values()])))
                   for k in ("prefill_mfu", "decode_bw_efficiency")}
        f = self.framework[fw]
        return Calibration(gpu=name, prefill_mfu=min(1.0, fam["prefill_mfu"] * f["prefill_factor"]),
                           decode_bw_efficiency=min(1.0, fam["decode_bw_efficiency"] * f["decode_factor"]),
                           allreduce_bw_efficiency=self.allreduce_bw_efficiency,
                           allreduce_step_latency_s=self.allreduce_step_latency_s, source=source, framework=fw,
                           **{k: f[k] for k in _OVERHEADS})


class _Layout:
    """Position of every fitted constant in the parameter vector."""

    def __init__(self, obs: Sequence[Observation], anchor: str):
        self.families = sorted({gpu_family(o.gpu) for o in obs})
        self.frameworks = sorted({o.framework for o in obs} | {anchor})
        self.tasks = sorted({o.task for o in obs if o.prompt_tokens is None})
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
        for fw in self.frameworks:
            if fw != anchor and not fw.lower().startswith("vllm"):
                add(f"{fw}.prefill_factor", *FACTOR_BOUNDS, 1.0)
            if fw != anchor:
                add(f"{fw}.decode_factor", *FACTOR_BOUNDS, 1.0)
            for k in _OVERHEADS:
                if k == "prefill_overhead_s" and _prefill_key(fw) != fw:
                    continue
                add(f"{fw}.{k}", b[k][0], b[k][1], min(b[k][1] / 4, 0.005))
        for key in sorted({_prefill_key(fw) for fw in self.frameworks} - set(self.frameworks)):
            add(f"{key}.prefill_overhead_s", *b["prefill_overhead_s"], 0.01)
        add("allreduce_bw_efficiency", *b["allreduce_bw_efficiency"], 0.5)
        add("allreduce_step_latency_s", *b["allreduce_step_latency_s"], 1e-5)
        for t in self.tasks:
            add(f"task:{t}", *PROMPT_BOUNDS, 500.0)
        self.names = names
        self.index = {n: i for i, n in enumerate(names)}
        self.low, self.high, self.x0 = np.array(lo), np.array(hi), np.array(x0)
        self.scale = np.maximum(np.abs(self.x0), 1e-6)

    def result(self, x: np.ndarray) -> FitResult:
        v = dict(zip(self.names, (float(t) for t in x), strict=True))
        fam = {f: {k: v[f"{f}.{k}"] for k in ("prefill_mfu", "decode_bw_efficiency")} for f in self.families}
        fws = {}
        for fw in self.frameworks:
            fws[fw] = {"prefill_factor": v.get(f"{fw}.prefill_factor", 1.0),
                       "decode_factor": v.get(f"{fw}.decode_factor", 1.0),
                       **{k: v[f"{_prefill_key(fw) if k == 'prefill_overhead_s' else fw}.{k}"]
                          for k in _OVERHEADS}}
        return FitResult(fam, fws, v["allreduce_bw_efficiency"], v["allreduce_step_latency_s"],
                         {t: v[f"task:{t}"] for t in self.tasks}, self.anchor)


def predict(fit: FitResult, o: Observation) -> float:
    """Predicted seconds of observation ``o`` under ``fit`` (the kinds as :class:`Observation` describes), with the
    row :meth:`FitResult.calibration` gives."""
    c = fit.calibration(o.gpu, o.framework)
    prompt = o.prompt_tokens if o.prompt_tokens is not None else fit.prompt_tokens[o.task]
    ctx = prompt + o.output_tokens / 2

    def prefill() -> float:
        return prefill_time_s(o.model, o.gpu, prompt, batch=o.batch, tp=o.tp, weight_dtype=o.weight_dtype, calib=c)

    if o.kind == "prefill":
        return prefill()
    step = decode_step_time_s(o.model, o.gpu, max(o.batch, 1.0), ctx, kv_dtype=o.kv_dtype, tp=o.tp,
                              weight_dtype=o.weight_dtype, calib=c)
    if o.kind == "decode":
        return step
    return prefill() + max(o.output_tokens - 1, 0) * step


def fit_calibration(obs: Sequence[Observation], *, anchor: str, start: FitResult | None = None,
                    max_nfev: int = 200) -> FitResult:
    """Fit the constants to ``obs`` (module docstring for the structure and the loss).

    ``anchor``: the framework whose factors are 1 (the shipped default: a current vLLM). ``start``: a previous fit to
    start from (faster for held-out refits). Raises InputError when ``obs`` is empty.
    """
    if not obs:
        raise InputError("no observations to fit", field="observations")
    lay = _Layout(obs, anchor)
    groups: dict[str, int] = {}
    for o in obs:
        groups[o.group] = groups.get(o.group, 0) + 1
    w = np.array([1.0 / math.sqrt(groups[o.group]) for o in obs])
    meas = np.array([o.measured_s for o in obs])

    def resid(x: np.ndarray) -> np.ndarray:
        fit = lay.result(np.clip(x, lay.low, lay.high))
        pred = np.array([predict(fit, o) for o in obs])
        return w * np.log(pred / meas)

    x0 = lay.x0.copy()
    if start is not None:
        prev = _flatten(start)
        for n, i in lay.index.items():
            if n in prev:
                x0[i] = min(max(prev[n], lay.low[i]), lay.high[i])
    res = least_squares(resid, x0, bounds=(lay.low, lay.high), x_scale=lay.scale, loss="soft_l1", f_scale=0.1,
                        max_nfev=max_nfev)
    return lay.result(res.x)


def _flatten(fit: FitResult) -> dict[str, float]:
    out = {f"{f}.{k}": v for f, d in fit.family.items() for k, v in d.items()}
    out.update({f"{fw}.{k}": v for fw, d in fit.framework.items() for k, v in d.items()})
    out.update({f"task:{t}": v for t, v in fit.prompt_tokens.items()})
    out["allreduce_bw_efficiency"] = fit.allreduce_bw_efficiency
    out["allreduce_step_latency_s"] = fit.allreduce_step_latency_s
    return out


def held_out_errors(obs: Sequence[Observation], *, anchor: str, start: FitResult | None = None,
                    max_nfev: int = 60) -> list[tuple[Observation, float]]:
    """Leave-one-group-out: for every group, fit on the other groups and predict this one. Returns (observation,
    absolute percentage error |pred − measured| / measured × 100) for every observation whose framework and task
    are still represented in the other groups (others cannot be predicted and are left out)."""
    out = []
    for g in sorted({o.group for o in obs}):
        train = [o for o in obs if o.group != g]
        test = [o for o in obs if o.group == g]
        fws = {o.framework for o in train}
        tasks = {o.task for o in train if o.prompt_tokens is None}
        test = [o for o in test if o.framework in fws and (o.prompt_tokens is not None or o.task in tasks)]
        if not test:
            continue
        fit = fit_calibration(train, anchor=anchor, start=start, max_nfev=max_nfev)
        for o in test:
            out.append((o, 100.0 * abs(predict(fit, o) - o.measured_s) / o.measured_s))
    return out


def default_row(fit: FitResult, framework: str | None = None, source: str = "") -> Calibration:
    """The 'default' row (GPU types without a row of their own): the geometric mean of the fitted families."""
    return fit.calibration(DEFAULT_ROW, framework, source)
