"""Reader of the shipped public measurements (datasets/data/measured, plus the Splitwise profile) as one table of
latency observations the roofline can be fitted to (:func:`fleetplan.costmodels.calibration.fit_calibration`).

Each row is one measured time of one configuration, normalised to what the latency model predicts:

* ``kind='prefill'``: seconds to prefill ``batch`` prompts of ``prompt_tokens`` (Splitwise prompt_time; Argonne's
  TTFT study: 16 × 1024 tokens, output length 1).
* ``kind='decode'``: seconds of one decode step at ``batch`` sequences of mean context prompt + output/2 (Splitwise
  token_time).
* ``kind='tpot'`` / ``'tpot_mixed'``: the mean time per output token of a saturated server in steady state at the
  average running batch (ML.ENERGY v2's mean TPOT under vLLM 0.5.4, whose prefills run as iterations of their own:
  'tpot'; v3's median inter-token latency under vLLM 0.11, which runs prompts inside the decode step by chunked
  prefill: 'tpot_mixed'). Both include the prefills of the requests that replace finished ones
  (:class:`fleetplan.costmodels.calibration_fit.Observation`). ML.ENERGY publishes no prompt length: the prompt set's
  mean comes from prompt_sets.csv (a published statistic of the public set it draws from, with its source).
* ``kind='e2e'``: seconds to run one static batch to completion = prefill of the batch + (output − 1) decode steps
  (Argonne offline batches: the published latency; TensorRT-LLM 0.9 static batches: batch × output /
  (per-GPU output tokens/s × tp)).

Columns: source, framework, model (a model name of :func:`models`), gpu (catalog name), tp, kind, batch,
prompt_tokens, output_tokens, task, weight_dtype, kv_dtype, measured_s, group ('model @ gpu', the held-out unit).
Choices (each also in the folders' PROVENANCE.md): Argonne's A100 is taken as A100-SXM4-40GB (Polaris nodes; its
repository does not state the size); TensorRT-LLM 0.9's A100 as A100-SXM4-80GB (NVIDIA, github.com/NVIDIA/TensorRT-LLM
issue 281: "based on SXM and 80GB memory"); Argonne's vLLM (unpinned)
(its scripts date from the 0.5.x era) is kept apart from ML.ENERGY's vLLM 0.5.4 (a version
factor each: the measurement methods differ too); Llama-3.3-70B has Llama-3.1-70B's architecture. Configurations
whose KV cache cannot fit next to the weights (they ran under preemption) are left out, and so are Splitwise
configurations measured faster than at half the batch (preempted too), as are models without a record
(MoE, Falcon, GPT-J) and ML.ENERGY v2's 405B (its dtype is not stated; bf16 weights do not fit on 8 × H100).
"""

from __future__ import annotations

import functools
import importlib.resources
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from fleetplan.costmodels.calibration import Calibration
from fleetplan.costmodels.calibration_fit import (
    FitResult,
    Observation,
    ObservationArrays,
    absolute_percentage_errors,
    default_row,
    fit_calibration,
    gpu_family,
    held_out_predictions,
    predict_many,
)
from fleetplan.costmodels.hardware import Model
from fleetplan.datasets.calibration import load_reference_models
from fleetplan.datasets.catalog.gpus import load_gpus
from fleetplan.datasets.catalog.names import get_gpu, get_model
from fleetplan.datasets.profiles import splitwise_fit_rows
from fleetplan.errors import InputError

__all__ = ["COLUMNS", "DEFAULT_FRAMEWORK", "GOALS", "CalibrationReport", "calibrate", "load_measurements", "models",
           "observations", "prompt_set_means", "read_user_measurements", "steady_state_rates"]

#: The framework the shipped default calibration represents (a current vLLM: ML.ENERGY v3 ran vLLM 0.11.1).
DEFAULT_FRAMEWORK = "vLLM 0.11"

#: The issue's accuracy goals on held-out groups: goal -> (observation kinds it covers, largest median absolute
#: error, %). "Decode step time" covers the measured steps (Splitwise) and the steady-state time per output token
#: (ML.ENERGY), which the model predicts as decode steps plus the prefills that share them.
GOALS: dict[str, tuple[tuple[str, ...], float]] = {
    "prefill time": (("prefill",), 15.0),
    "decode step time": (("decode", "tpot", "tpot_mixed"), 15.0),
}

COLUMNS = ("source", "framework", "model", "gpu", "tp", "kind", "batch", "prompt_tokens", "output_tokens", "task",
           "weight_dtype", "kv_dtype", "measured_s", "group")

_MODEL_NAMES = {
    "meta-llama/Llama-2-7b-hf": "Llama-2-7B", "meta-llama/Llama-2-70b-hf": "Llama-2-70B",
    "meta-llama/Meta-Llama-3-8B": "Llama-3-8B", "meta-llama/Meta-Llama-3-70B": "Llama-3-70B",
    "meta-llama/Meta-Llama-3.1-8B-Instruct": "Llama-3.1-8B", "meta-llama/Meta-Llama-3.1-70B-Instruct": "Llama-3.1-70B",
    "meta-llama/Llama-3.1-8B-Instruct": "Llama-3.1-8B", "meta-llama/Llama-3.1-70B-Instruct": "Llama-3.1-70B",
    "meta-llama/Llama-3.3-70B-Instruct": "Llama-3.1-70B", "meta-llama/Llama-3.1-405B-Instruct-FP8": "Llama-3.1-405B",
    "mistralai/Mistral-7B-v0.1": "Mistral-7B-v0.1",
}


def _dir():
    return importlib.resources.files("fleetplan.datasets") / "data" / "measured"


def _csv(folder: str, name: str) -> pd.DataFrame:
    with (_dir() / folder / name).open() as f:
        return pd.read_csv(f)


@functools.lru_cache(maxsize=1)
def prompt_set_means() -> dict[str, float]:
    """Mean prompt length (tokens) of each prompt set whose runs publish none (prompt_sets.csv: the value taken and
    its source; ML.ENERGY publishes no input lengths)."""
    d = _csv(".", "prompt_sets.csv")
    return {str(t): float(v) for t, v in zip(d.task, d.mean_prompt_tokens, strict=True)}


@functools.lru_cache(maxsize=1)
def models() -> dict[str, Model]:
    """Model records of every model in :func:`load_measurements` (reference models plus catalog models)."""
    out = dict(load_reference_models())
    for name in ("Llama-3.1-8B", "Llama-3.1-70B", "Llama-3.1-405B", "Mistral-7B-v0.1"):
        out[name] = get_model(name)
    return out


def _splitwise() -> pd.DataFrame:
    d = splitwise_fit_rows()
    base = dict(source="Splitwise perf_model.csv", framework="Splitwise profile", model="Llama-2-70B", task="",
                weight_dtype="bf16", kv_dtype="bf16")
    pre = d[d.prefill_row]
    a = pd.DataFrame(dict(gpu=pre.gpu, tp=pre.tp, kind="prefill", batch=pre.batch, prompt_tokens=pre.prompt_tokens,
                          output_tokens=1, measured_s=pre.prompt_time_s, **base))
    b = pd.DataFrame(dict(gpu=d.gpu, tp=d.tp, kind="decode", batch=d.batch, prompt_tokens=d.prompt_tokens,
                          output_tokens=d.token_size, measured_s=d.token_time_s, **base))
    out = pd.concat([a, b])
    # A configuration measured faster than the same one at half the batch did not run the whole batch at once (the
    # engine preempted: Splitwise's TP2 batch 64 prefill takes 0.79 s against 6.6 s at batch 32): left out.
    key = ["gpu", "tp", "kind", "prompt_tokens", "output_tokens"]
    half = out.assign(batch=out.batch * 2).set_index([*key, "batch"]).measured_s
    idx = pd.MultiIndex.from_frame(out[[*key, "batch"]])
    slower_half = half.reindex(idx).to_numpy()
    return out[~(slower_half > out.measured_s.to_numpy())]


def _argonne() -> pd.DataFrame:
    a = _csv("argonne_llm_inference_bench", "argonne_offline_batch.csv")
    variant = a.variant.eq("baseline") | a.variant.str.startswith("ttft_study")
    a = a[(a.framework == "vLLM") & a.model.isin(_MODEL_NAMES) & variant
          & a.gpu.isin(["H100-SXM-80GB", "A100-SXM4 (memory size not stated)"])].copy()
    a["gpu"] = a.gpu.where(a.gpu == "H100-SXM-80GB", "A100-SXM4-40GB")
    pre = a.kind == "prefill_batch"
    return pd.DataFrame(dict(
        source="Argonne LLM-Inference-Bench", framework="vLLM 0.5.x (Argonne)", model=a.model.map(_MODEL_NAMES),
        gpu=a.gpu,
        tp=a.tp.astype(int), kind=np.where(pre, "prefill", "e2e"), batch=a.batch_size, prompt_tokens=a.input_tokens,
        output_tokens=a.output_tokens, task="", weight_dtype="bf16", kv_dtype="bf16",
        measured_s=np.where(pre, a.ttft_s, a.e2e_latency_s)))


def _mlenergy(folder: str, name: str, framework: str, time_col: str, task: str, kind: str) -> pd.DataFrame:
    m = _csv(folder, name)
    m = m[m.model.isin(_MODEL_NAMES)].copy()
    if "weight_dtype" in m:
        wd = m.weight_dtype.map({"bfloat16": "bf16", "fp8": "fp8"})
        m = m[wd.notna()]
        wd = wd[wd.notna()]
    else:
        m = m[~m.model.str.contains("405B")]
        wd = pd.Series("bf16", index=m.index)
    return pd.DataFrame(dict(source=folder, framework=framework, model=m.model.map(_MODEL_NAMES), gpu=m.gpu,
                             tp=m.tp.astype(int), kind=kind, batch=m.avg_batch_size_reqs,
                             prompt_tokens=prompt_set_means()[task],
                             output_tokens=m.avg_output_tokens, task=task, weight_dtype=wd, kv_dtype="bf16",
                             measured_s=m[time_col]))


def _trtllm() -> pd.DataFrame:
    t = _csv("trtllm_perf_docs", "trtllm_perf_tables.csv")
    t = t[(t.kind == "static_batch_throughput") & t.model.isin(_MODEL_NAMES)].copy()
    fp8 = t.dtype.str.startswith("fp8")
    gpu = np.where(t.gpu.str.startswith("H100"), "H100-SXM-80GB", "A100-SXM4-80GB")
    secs = t.batch_size * t.output_tokens / (t.throughput_output_tokens_per_s_per_gpu * t.tp)
    return pd.DataFrame(dict(source="TensorRT-LLM perf docs", framework="TensorRT-LLM 0.9",
                             model=t.model.map(_MODEL_NAMES), gpu=gpu, tp=t.tp.astype(int), kind="e2e",
                             batch=t.batch_size, prompt_tokens=t.input_tokens, output_tokens=t.output_tokens, task="",
                             weight_dtype=np.where(fp8, "fp8", "bf16"), kv_dtype=np.where(fp8, "fp8", "bf16"),
                             measured_s=secs))


@functools.lru_cache(maxsize=1)
def _load() -> pd.DataFrame:
    d = pd.concat([_splitwise(), _argonne(),
                   _mlenergy("mlenergy_v2", "mlenergy_v2_vllm_steady_state.csv", "vLLM 0.5.4", "tpot_mean_s",
                             "ShareGPT (ML.ENERGY v2)", "tpot"),
                   _mlenergy("mlenergy_v3", "mlenergy_v3_vllm_steady_state.csv", DEFAULT_FRAMEWORK, "itl_p50_s",
                             "LMArena chat (ML.ENERGY v3)", "tpot_mixed"),
                   _trtllm()], ignore_index=True)
    d = d[d.measured_s.notna() & (d.measured_s > 0)]
    # Leave out configurations whose KV cache cannot hold the whole batch next to the weights (they preempt).
    ms = models()
    keep = []
    for r in d.to_dict("records"):
        m = ms[str(r["model"])]
        g = get_gpu(str(r["gpu"]))
        budget = 0.9 * float(r["tp"]) * g.memory_bytes - m.weight_bytes(str(r["weight_dtype"]))
        length = float(r["prompt_tokens"]) + float(r["output_tokens"])
        keep.append(budget > 0 and float(r["batch"]) * m.kv_tokens_cached(length)
                    * m.kv_bytes_per_token(str(r["kv_dtype"])) <= budget)
    d = d[np.asarray(keep)].copy()
    d["group"] = d.model + " @ " + d.gpu
    return d[list(COLUMNS)].reset_index(drop=True)


def steady_state_rates() -> pd.DataFrame:
    """ML.ENERGY v3's steady-state serving rows (vLLM 0.11 on H100, the shipped default framework) as measured
    (rate, TPOT) points: each run held ``batch`` requests running and produced output tokens at a measured rate, so
    one replica sustained rate_req_per_s = output tokens/s ÷ mean output tokens at a median inter-token latency of
    itl_p50_s. Columns: model (a name of :func:`models`), gpu, tp, weight_dtype, batch, prompt_tokens (the prompt
    set's mean, prompt_sets.csv), output_tokens, itl_p50_s, itl_p95_s, rate_req_per_s. Rows whose model has no
    record are left out, as in :func:`load_measurements`."""
    m = _csv("mlenergy_v3", "mlenergy_v3_vllm_steady_state.csv")
    m = m[m.model.isin(_MODEL_NAMES)]
    wd = m.weight_dtype.map({"bfloat16": "bf16", "fp8": "fp8"})
    m, wd = m[wd.notna()], wd[wd.notna()]
    return pd.DataFrame(dict(
        model=m.model.map(_MODEL_NAMES), gpu=m.gpu, tp=m.tp.astype(int), weight_dtype=wd, batch=m.avg_batch_size_reqs,
        prompt_tokens=prompt_set_means()["LMArena chat (ML.ENERGY v3)"], output_tokens=m.avg_output_tokens,
        itl_p50_s=m.itl_p50_s, itl_p95_s=m.itl_p95_s,
        rate_req_per_s=m.throughput_output_tokens_per_s / m.avg_output_tokens)).reset_index(drop=True)


def load_measurements() -> pd.DataFrame:
    """The shipped public measurements as one table (module docstring for the columns and the choices made)."""
    return _load().copy()


def observations(df: pd.DataFrame | None = None) -> list[Observation]:
    """Rows of :func:`load_measurements` (or a table with the same columns) as fitting records."""
    d = load_measurements() if df is None else df
    ms = models()
    out = []
    for r in d.to_dict("records"):
        out.append(Observation(framework=str(r["framework"]), model=ms[str(r["model"])], gpu=get_gpu(str(r["gpu"])),
                               tp=int(r["tp"]), kind=str(r["kind"]), batch=float(r["batch"]),
                               prompt_tokens=float(r["prompt_tokens"]),
                               output_tokens=float(r["output_tokens"]), measured_s=float(r["measured_s"]),
                               task=str(r["task"]) if isinstance(r["task"], str) else "",
                               weight_dtype=str(r["weight_dtype"]), kv_dtype=str(r["kv_dtype"]),
                               group=str(r["group"])))
    return out


def read_user_measurements(path: str) -> pd.DataFrame:
    """A user's measurements: a CSV with the columns of :data:`COLUMNS` (group may be blank: 'model @ gpu'; model
    and gpu are catalog names; kind one of :data:`fleetplan.costmodels.calibration_fit.KINDS`; prompt_tokens the
    prompt length, or its mean for steady-state rows). Raises InputError for missing columns or non-positive times
    or prompt lengths (unknown models or GPUs: when the rows are turned into observations)."""
    try:
        d = pd.read_csv(path)
    except (OSError, ValueError) as e:
        raise InputError(f"cannot read measurements: {e}", source=str(path)) from None
    need = [c for c in COLUMNS if c != "group"]
    missing = [c for c in need if c not in d.columns]
    if missing:
        raise InputError(f"missing columns {missing}; a measurement file needs {', '.join(need)}", source=str(path))
    bad = ~(pd.to_numeric(d.measured_s, errors="coerce") > 0)
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise InputError(f"measured_s {d.measured_s.iloc[i]!r} is not a positive number of seconds",
                         source=str(path), row=i + 1, field="measured_s", value=d.measured_s.iloc[i])
    bad = ~(pd.to_numeric(d.prompt_tokens, errors="coerce") >= 1)
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise InputError(f"prompt_tokens {d.prompt_tokens.iloc[i]!r} is not a number of tokens >= 1 (give the mean "
                         "prompt length where rows are steady-state averages)", source=str(path), row=i + 1,
                         field="prompt_tokens", value=d.prompt_tokens.iloc[i])
    d = d.copy()
    d["task"] = d.task.fillna("")
    if "group" not in d or d.group.isna().any():
        d["group"] = d.model + " @ " + d.gpu
    return d[list(COLUMNS)]


@dataclass(frozen=True)
class CalibrationReport:
    """What :func:`calibrate` fitted and how well.

    Attributes:
        fit: the fitted constants.
        rows: Calibration rows of ``framework`` for every catalog GPU of a fitted family, plus 'default'.
        framework: the framework the rows represent.
        framework_rows: the same rows for every fitted framework and version (the families' efficiencies are
            pooled over frameworks, the host overheads are each framework's own).
        fit_mdape_pct: kind, and each goal of :data:`GOALS` -> median absolute percentage error (MdAPE) on the
            fitting data.
        held_out_mdape_pct: the same on held-out (model, GPU) groups (empty when not run): every group left out in
            turn, the constants refitted on the others, its rows predicted.
        held_out: per group, framework and kind: (group, framework, kind, n, MdAPE %).
        n_observations: rows fitted.
        held_out_predictions: (observation, predicted seconds with its group held out) of every held-out row (for
            signed errors, e.g. a family's bias; empty when not run).
    """

    fit: FitResult
    rows: list[Calibration]
    framework: str
    framework_rows: list[Calibration]
    fit_mdape_pct: dict[str, float]
    held_out_mdape_pct: dict[str, float]
    held_out: list[tuple[str, str, str, int, float]]
    n_observations: int
    held_out_predictions: tuple[tuple[Observation, float], ...] = ()


def calibrate(extra: Sequence[str] = (), *, shipped: bool = True, anchor: str = DEFAULT_FRAMEWORK,
              framework: str | None = None, held_out: bool = True) -> CalibrationReport:
    """Fit the roofline to the shipped measurements (unless ``shipped`` is False) and the users' CSV files
    ``extra`` (:func:`read_user_measurements`), and measure the held-out error (leave one (model, GPU) group out).

    Returns the rows of ``framework`` (default: ``anchor``) for every catalog GPU whose family was fitted, plus the
    'default' row (geometric mean of the families). Raises InputError for bad files, no observations, or an
    ``anchor`` no observation is of.
    """
    frames = ([load_measurements()] if shipped else []) + [read_user_measurements(p) for p in extra]
    if not frames:
        raise InputError("no measurements: give a measurement file or use the shipped ones", field="measurements")
    obs = observations(pd.concat(frames, ignore_index=True))
    if not obs:
        raise InputError("the measurement files hold no rows", field="measurements")
    measured = sorted({o.framework for o in obs})
    if anchor not in measured:
        # Its rows would be the fit's starting values, not a fit: a mis-cased 'vllm 0.11' wrote round default
        # overheads with exit 0.
        close = [f for f in measured if f.lower() == anchor.lower()]
        raise InputError(f"no measurement is of the anchor framework {anchor!r}, so its rows would not be fitted"
                         + (f"; did you mean {close[0]!r}?" if close else "") + f" (measured: {', '.join(measured)})",
                         field="--anchor", value=anchor)
    fit = fit_calibration(obs, anchor=anchor)
    fw = framework or anchor
    what = f"{len(obs)} measurements ({', '.join(sorted({o.framework for o in obs}))})"
    src = (f"fleetplan calibrate: roofline fitted to {what}; rows for {fw}; GPU families "
           f"{', '.join(sorted(fit.family))}")
    names = [g for g in sorted(load_gpus()) if gpu_family(g) in fit.family]

    def rows_of(f: str, source: str) -> list[Calibration]:
        return [fit.calibration(g, f, source) for g in names] + [
            default_row(fit, f, source + "; default row: geometric mean of the families, for other GPU types")]

    rows = rows_of(fw, src)
    every = [r for f in sorted(fit.framework)
             for r in rows_of(f, f"fleetplan calibrate: roofline fitted to {what}; rows for {f}: the GPU families' "
                                 "efficiencies pooled over every framework, this framework's own host overheads")]
    pred = predict_many(fit, ObservationArrays(obs))
    fit_ape = [(o, 100 * abs(p - o.measured_s) / o.measured_s) for o, p in zip(obs, pred, strict=True)]
    ho_pred = held_out_predictions(obs, anchor=anchor, start=fit) if held_out else []
    ho = absolute_percentage_errors(ho_pred)
    groups: dict[tuple[str, str, str], list[float]] = {}
    for o, ape in ho:
        groups.setdefault((o.group, o.framework, o.kind), []).append(ape)
    return CalibrationReport(
        fit=fit, rows=rows, framework=fw, framework_rows=every, fit_mdape_pct=_mdape_by_kind(fit_ape),
        held_out_mdape_pct=_mdape_by_kind(ho),
        held_out=[(g, f, k, len(v), float(np.median(v))) for (g, f, k), v in sorted(groups.items())],
        n_observations=len(obs), held_out_predictions=tuple(ho_pred))


def _mdape_by_kind(errors: Sequence[tuple[Observation, float]]) -> dict[str, float]:
    """kind and goal name -> median of the absolute percentage errors of its observations (absent when none)."""
    by: dict[str, list[float]] = {}
    for o, ape in errors:
        by.setdefault(o.kind, []).append(ape)
    out = {k: float(np.median(v)) for k, v in sorted(by.items())}
    for goal, (kinds, _) in GOALS.items():
        v = [ape for o, ape in errors if o.kind in kinds]
        if v:
            out[goal] = float(np.median(v))
    return out
