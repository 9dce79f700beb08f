"""Measured latency/throughput profiles that can replace the analytic roofline for a (model, GPU) pair.

Two shapes are read:

1. Splitwise CSV (github.com/Mutinifni/splitwise-sim data/perf_model.csv, MIT): one row per run with columns
   model, hardware, prompt_size, batch_size, token_size, prompt_time, token_time, e2e_time (milliseconds; a header
   may also spell them ``prompt_time(ms)``), tensor_parallel. ``prompt_time`` is the time to prefill the whole batch
   (batch_size prompts of prompt_size tokens: it grows linearly with batch_size in the data); ``token_time`` is the
   time per output token at that batch, i.e. one decode step (e2e_time = prompt_time + (token_size − 1) ×
   token_time on the batch/prompt sweep). Repeated runs of one configuration are reduced to their median.
   :class:`SplitwiseProfile` turns one (model, hardware, tp) slice into prefill/decode functions for
   :func:`fleetplan.costmodels.capacity.replica_capacity_from_latency`.
2. AIBrix GPU-optimizer / Mélange "tputs" JSON (github.com/vllm-project/aibrix, Apache-2.0): ``tputs`` is a 2-D list
   of the max request rate (req/s) meeting the profile's SLO, ``indexes`` the bucket ticks. We read AIBrix's order:
   ``tputs[i][j]`` is OUTPUT bucket ``indexes[0][i]`` and INPUT bucket ``indexes[1][j]`` — transposed from the
   Mélange README, whose rows are input lengths. A Mélange-order table (rows = input) is read when it names its
   ticks ``input_ticks`` and ``output_ticks`` instead of ``indexes`` (Mélange's own files carry no ticks). The
   shape is checked against the ticks; a mismatch raises InputError. :class:`ProfileCapacity` looks up req/s for
   a token mix.

:func:`capacity_for` picks, for one (model, GPU type), a profile when one is given, else the analytic model when the
GPU has analytic data, else returns zero capacity with a reason (never free capacity).
"""

from __future__ import annotations

import dataclasses
import glob
import importlib.resources
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fleetplan.costmodels.calibration import Calibration
from fleetplan.costmodels.capacity import ReplicaCapacity, replica_capacity
from fleetplan.costmodels.demand import TokenMix
from fleetplan.costmodels.hardware import GPU, Model
from fleetplan.costmodels.latency import decode_step_time_s, prefill_time_s
from fleetplan.costmodels.profile_capacity import PROFILE_FORMATS, MeasuredProfile, ServingPoint
from fleetplan.costmodels.slo import SLO
from fleetplan.datasets.calibration import load_calibration, load_reference_models
from fleetplan.datasets.catalog.names import get_gpu
from fleetplan.errors import InputError, UnknownNameError
from fleetplan.fileio import DuplicateJsonKey, loads_unique, parse_json, read_json

#: Splitwise hardware labels -> catalog GPU names (the profiles were measured on DGX A100 (SXM4 80 GB) and
#: DGX H100 (SXM5 80 GB) machines, per the Splitwise paper, ISCA 2024). 'h100-80gb-pcap' is the power-capped H100.
SPLITWISE_GPU_NAMES = {"a100-80gb": "A100-SXM4-80GB", "h100-80gb": "H100-SXM-80GB", "h100-80gb-pcap": "H100-SXM-80GB"}
#: Splitwise model labels -> reference model names (datasets/data/calibration/reference_models.csv).
SPLITWISE_MODEL_NAMES = {"llama2-70b": "Llama-2-70B"}

_SPLITWISE_COLUMNS = ("model", "hardware", "prompt_size", "batch_size", "token_size", "prompt_time", "token_time",
                      "e2e_time", "tensor_parallel")


def _profiles_dir():
    return importlib.resources.files("fleetplan.datasets") / "data" / "profiles"


def load_splitwise(path: str | Path | None = None) -> pd.DataFrame:
    """Read a Splitwise-shaped CSV (the shipped perf_model.csv when ``path`` is None), medians over repeats.

    Returns a DataFrame with one row per (model, hardware, tp, prompt_tokens, batch, token_size): columns model,
    hardware, tp, prompt_tokens, batch, token_size, prompt_time_s, token_time_s, e2e_time_s, runs.
    Raises InputError for a missing column, a non-numeric or non-positive time.
    """
    source = str(path) if path else "datasets/data/profiles/splitwise/perf_model.csv"
    if path:
        df = pd.read_csv(path)
    else:
        with (_profiles_dir() / "splitwise" / "perf_model.csv").open() as f:
            df = pd.read_csv(f)
    df = df.rename(columns={c: c.replace("(ms)", "").strip() for c in df.columns})
    missing = [c for c in _SPLITWISE_COLUMNS if c not in df.columns]
    if missing:
        raise InputError(f"missing columns {missing}; a Splitwise profile needs {', '.join(_SPLITWISE_COLUMNS)}",
                         source=source)
    for c in ("prompt_size", "batch_size", "token_size", "prompt_time", "token_time", "tensor_parallel"):
        vals = pd.to_numeric(df[c], errors="coerce")
        bad = vals.isna() | (vals <= 0)
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise InputError(f"{df[c].iloc[i]!r} is not a positive number (times in ms, sizes in tokens)",
                             source=source, row=i + 1, field=c, value=df[c].iloc[i])
        df[c] = vals
    g = df.groupby(["model", "hardware", "tensor_parallel", "prompt_size", "batch_size", "token_size"], sort=True)
    out = g.agg(prompt_time_ms=("prompt_time", "median"), token_time_ms=("token_time", "median"),
                e2e_time_ms=("e2e_time", "median"), runs=("prompt_time", "size")).reset_index()
    out = out.rename(columns={"tensor_parallel": "tp", "prompt_size": "prompt_tokens", "batch_size": "batch"})
    for c in ("prompt_time", "token_time", "e2e_time"):
        out[f"{c}_s"] = out.pop(f"{c}_ms") / 1e3
    out["tp"] = out["tp"].astype(int)
    return out


def splitwise_fit_rows(df: pd.DataFrame | None = None, memory_utilization: float = 0.9) -> pd.DataFrame:
    """The Splitwise configurations the roofline is fitted to and compared against.

    Keeps Llama-2-70B on 'a100-80gb' and 'h100-80gb' (the power-capped 'h100-80gb-pcap' rows and BLOOM-176B are
    left out: no model record / a different operating point). Drops configurations whose KV cache does not fit next
    to the weights by our own memory model (batch × (prompt + tokens) × KV bytes > memory_utilization × tp × GPU
    memory − weights): they ran under preemption (TP2 batch 32/64, where prompt_time even falls below batch 16's).
    Adds columns gpu (catalog name), context_tokens (prompt + token_size/2, the mean decode context) and prefill_row
    (True on the first row of each prefill configuration; the output-length sweep repeats prefill configurations).
    """

    df = load_splitwise() if df is None else df
    model = load_reference_models()["Llama-2-70B"]
    d = df[(df.model == "llama2-70b") & df.hardware.isin(["a100-80gb", "h100-80gb"])].copy()
    d["gpu"] = d.hardware.map(SPLITWISE_GPU_NAMES)
    mem = d.gpu.map(lambda n: get_gpu(n).memory_bytes)
    budget = memory_utilization * d.tp * mem - model.weight_bytes("bf16")
    need = d.batch * (d.prompt_tokens + d.token_size) * model.kv_bytes_per_token("bf16")
    d = d[need <= budget].copy()
    d["context_tokens"] = d.prompt_tokens + d.token_size / 2
    # The output-length sweep repeats one prefill configuration; count each prefill configuration once.
    d["prefill_row"] = ~d.duplicated(["gpu", "tp", "prompt_tokens", "batch"])
    return d.reset_index(drop=True)


def roofline_predictions(rows: pd.DataFrame, calibs: dict[str, Calibration] | None = None) -> pd.DataFrame:
    """Add predicted prefill/decode seconds and absolute percentage errors to :func:`splitwise_fit_rows` output.

    ``calibs`` maps GPU name -> Calibration (default: the shipped calibration rows). Columns added: pred_prefill_s,
    pred_decode_s, ape_prefill, ape_decode (|pred − measured| / measured; ape_prefill is NaN on rows that repeat a
    prefill configuration).
    """

    model = load_reference_models()["Llama-2-70B"]
    out = rows.copy()
    pp_, dd_ = [], []
    for gpu_name, prompt_tokens, tp, batch, context_tokens in zip(
            rows["gpu"], rows["prompt_tokens"], rows["tp"], rows["batch"], rows["context_tokens"], strict=True):
        gpu = get_gpu(gpu_name)
        c = calibs[gpu_name] if calibs else load_calibration(gpu)
        pp_.append(prefill_time_s(model, gpu, prompt_tokens, tp=int(tp), batch=batch, calib=c))
        dd_.append(decode_step_time_s(model, gpu, batch, context_tokens, tp=int(tp), calib=c))
    out["pred_prefill_s"] = pp_
    out["pred_decode_s"] = dd_
    counted = out["prefill_row"] if "prefill_row" in out else pd.Series(True, index=out.index)
    out["ape_prefill"] = ((out.pred_prefill_s - out.prompt_time_s).abs() / out.prompt_time_s).where(counted)
    out["ape_decode"] = (out.pred_decode_s - out.token_time_s).abs() / out.token_time_s
    return out


def mdape_table(pred: pd.DataFrame) -> pd.DataFrame:
    """Median absolute percentage error (%) of prefill and decode per (gpu, tp), per gpu, and overall.

    Input: :func:`roofline_predictions` output. Output columns: gpu, tp ('all' for aggregates), n_prefill,
    n_decode, mdape_prefill_pct, mdape_decode_pct.
    """
    recs = []
    groups = [((g, str(t)), d) for (g, t), d in pred.groupby(["gpu", "tp"])]
    groups += [((g, "all"), d) for g, d in pred.groupby("gpu")]
    groups += [(("all", "all"), pred)]
    for (g, t), d in groups:
        recs.append({"gpu": g, "tp": t, "n_prefill": int(d.ape_prefill.notna().sum()), "n_decode": len(d),
                     "mdape_prefill_pct": 100 * float(d.ape_prefill.median()),
                     "mdape_decode_pct": 100 * float(d.ape_decode.median())})
    return pd.DataFrame(recs)


@dataclass(frozen=True)
class SplitwiseProfile:
    """Measured prefill and decode times of one (model, hardware, tp) slice of a Splitwise profile.

    Attributes:
        model, hardware, tp: the slice.
        prefill_tokens, prefill_s: prompt length and measured seconds of single-prompt prefills (batch 1), sorted;
            a batch of b prompts is looked up at b × prompt tokens.
        decode_batch, decode_s: batch size and measured seconds per decode step (prompt 512 sweep), sorted.
    Lookups interpolate linearly; prefill extrapolates linearly past the last point (time grows with tokens);
    decode beyond the largest measured batch is refused by :attr:`max_batch` (capacity stops there). Decode time
    does not depend on context in this profile (it is flat with output length in the data), so context is ignored.
    """

    model: str
    hardware: str
    tp: int
    prefill_tokens: tuple[float, ...]
    prefill_s: tuple[float, ...]
    decode_batch: tuple[float, ...]
    decode_s: tuple[float, ...]
    extrapolate: bool = False

    @classmethod
    def from_frame(cls, df: pd.DataFrame, model: str, hardware: str, tp: int) -> SplitwiseProfile:
        """Build from :func:`load_splitwise` output. Raises InputError when the slice is empty."""
        d = df[(df.model == model) & (df.hardware == hardware) & (df.tp == tp)]
        if d.empty:
            raise InputError(f"no Splitwise rows for model {model!r}, hardware {hardware!r}, tp {tp}",
                             field="hardware", value=hardware)
        pre = d[d.batch == 1].groupby("prompt_tokens").prompt_time_s.median()
        dec = d[d.prompt_tokens == d.prompt_tokens.mode().iloc[0]].groupby("batch").token_time_s.median()
        return cls(model, hardware, int(tp), tuple(pre.index.astype(float)), tuple(pre.to_numpy(float)),
                   tuple(dec.index.astype(float)), tuple(dec.to_numpy(float)))

    @property
    def max_batch(self) -> float:
        """Largest measured decode batch."""
        return self.decode_batch[-1]

    def prefill_time_s(self, prompt_tokens: float, batch: float = 1) -> float:
        """Seconds to prefill ``batch`` prompts of ``prompt_tokens`` (interpolated on total tokens)."""
        x, y = np.asarray(self.prefill_tokens), np.asarray(self.prefill_s)
        t = prompt_tokens * batch
        if t > x[-1] and len(x) > 1:
            return float(y[-1] + (y[-1] - y[-2]) / (x[-1] - x[-2]) * (t - x[-1]))
        return float(np.interp(t, x, y))

    def decode_step_time_s(self, batch: float, context_tokens: float = 0.0) -> float:
        """Seconds per decode step at ``batch`` (interpolated; ``math.inf`` beyond :attr:`max_batch`, or extended
        linearly when built by :meth:`for_replay`)."""
        return _interp(batch, self.decode_batch, self.decode_s, self.extrapolate)

    @property
    def max_prompt_tokens(self) -> float:
        """Longest measured single prompt (the capacity model refuses longer ones; :meth:`prefill_time_s` itself
        extends linearly)."""
        return self.prefill_tokens[-1]

    def for_replay(self) -> SplitwiseProfile:
        """The same profile with decode extended linearly beyond the largest measured batch (for the simulator)."""
        return dataclasses.replace(self, extrapolate=True)


@dataclass(frozen=True)
class ProfileCapacity:
    """Max request rate per (input, output) token bucket for one (model, GPU) deployment, from an AIBrix/Mélange
    "tputs" profile.

    Attributes:
        name: profile's deployment name ('gpu' field).
        input_buckets_tokens, output_buckets_tokens: bucket upper ticks, ascending.
        req_per_s: grid indexed [input bucket][output bucket] (normalised from AIBrix's [output][input] order);
            0.0 means no rate met the SLO (infeasible).
        slo: the profile's SLO dict as stored (e.g. {'percentile': 99, 'e2e': 5.0}).
        source: file the profile came from.
    """

    name: str
    input_buckets_tokens: tuple[float, ...]
    output_buckets_tokens: tuple[float, ...]
    req_per_s: tuple[tuple[float, ...], ...]
    slo: dict | None = None
    source: str = ""

    @classmethod
    def from_aibrix_json(cls, path: str | Path) -> ProfileCapacity:
        """Read an AIBrix profile JSON (rows = OUTPUT buckets, columns = INPUT buckets; see module docstring).

        A Mélange-order file (``input_ticks``, ``output_ticks``, rows = input buckets) is read too.
        Raises InputError when 'tputs' or the ticks are missing, when the shape of tputs does not match the ticks,
        when ticks are not ascending, or when a rate is negative or NaN.
        """
        source = str(path)
        doc = read_json(path, what="profile JSON (AIBrix: 'tputs' and 'indexes')")
        if "tputs" not in doc:
            raise InputError("profile has no 'tputs'; an AIBrix profile has 'tputs' and 'indexes'", source=source,
                             field="tputs")
        grid = doc["tputs"]
        if "indexes" in doc:
            idx = doc["indexes"]
            if not isinstance(idx, list) or len(idx) != 2:
                raise InputError("'indexes' must be [output-token ticks, input-token ticks]", source=source,
                                 field="indexes")
            out_ticks, in_ticks = [float(v) for v in idx[0]], [float(v) for v in idx[1]]
            if len(grid) != len(out_ticks) or any(len(row) != len(in_ticks) for row in grid):
                shape = f"{len(grid)}×{sorted({len(r) for r in grid})}"
                raise InputError(f"tputs shape {shape} does not match indexes: expected {len(out_ticks)} rows "
                                 f"(output buckets) × {len(in_ticks)} columns (input buckets), AIBrix order; a "
                                 "Mélange-order table (rows = input) gives 'input_ticks' and 'output_ticks' instead "
                                 "of 'indexes'", source=source, field="tputs")
        elif "input_ticks" in doc and "output_ticks" in doc:
            # Mélange order (its README: rows = input buckets, columns = output buckets), ticks named explicitly.
            in_ticks, out_ticks = [float(v) for v in doc["input_ticks"]], [float(v) for v in doc["output_ticks"]]
            if len(grid) != len(in_ticks) or any(len(row) != len(out_ticks) for row in grid):
                shape = f"{len(grid)}×{sorted({len(r) for r in grid})}"
                raise InputError(f"tputs shape {shape} does not match the ticks: expected {len(in_ticks)} rows "
                                 f"(input buckets) × {len(out_ticks)} columns (output buckets), Mélange order",
                                 source=source, field="tputs")
            grid = [list(col) for col in zip(*grid, strict=True)]  # to AIBrix order: rows = output
        else:
            raise InputError("profile has 'tputs' but no bucket ticks: give 'indexes' ([output ticks, input ticks], "
                             "AIBrix order: rows = output) or 'input_ticks' and 'output_ticks' (Mélange order: rows "
                             "= input; Mélange's own files carry no ticks: add the bucket upper edges you profiled "
                             "with, in tokens)", source=source, field="indexes")
        for name, ticks in (("output", out_ticks), ("input", in_ticks)):
            if any(b <= a for a, b in zip(ticks, ticks[1:], strict=False)):
                raise InputError(f"{name}-token ticks must be ascending", source=source, field="indexes")
        arr = np.asarray(grid, dtype=float)
        if np.isnan(arr).any() or (arr < 0).any():
            raise InputError("tputs holds a negative or NaN rate", source=source, field="tputs")
        return cls(str(doc.get("gpu", Path(path).stem)), tuple(in_ticks), tuple(out_ticks),
                   tuple(tuple(float(v) for v in row) for row in arr.T), doc.get("slos"), source)

    def lookup(self, input_tokens: float, output_tokens: float) -> tuple[float, str]:
        """(req/s, reason) for requests up to these lengths: the smallest bucket >= each length (conservative).

        Returns (0.0, reason) when a length exceeds the largest bucket or the cell is 0.0 (infeasible).
        """
        i = int(np.searchsorted(self.input_buckets_tokens, input_tokens, side="left"))
        j = int(np.searchsorted(self.output_buckets_tokens, output_tokens, side="left"))
        if i >= len(self.input_buckets_tokens) or j >= len(self.output_buckets_tokens):
            return 0.0, (f"{input_tokens:g} input / {output_tokens:g} output tokens exceed the profile's largest "
                         f"buckets ({self.input_buckets_tokens[-1]:g} / {self.output_buckets_tokens[-1]:g})")
        rate = self.req_per_s[i][j]
        if rate <= 0:
            return 0.0, (f"profile {self.name}: no rate meets its SLO at bucket input<={self.input_buckets_tokens[i]:g}"
                         f", output<={self.output_buckets_tokens[j]:g}")
        return rate, ""

    def req_per_s_for(self, mix: TokenMix) -> float:
        """req/s for a :class:`~fleetplan.costmodels.demand.TokenMix`, looked up at its p95 input/output lengths."""
        return self.lookup(mix.input_tokens_p95, mix.output_tokens_p95)[0]


def load_aibrix_profile(name: str) -> ProfileCapacity:
    """A shipped AIBrix profile by file stem, e.g. 'simulator-llama2-7b-a100' (simulated, not GPU measurements)."""
    p = _profiles_dir() / "aibrix" / f"{name}.json"
    if not p.is_file():
        known = [f.name[:-5] for f in (_profiles_dir() / "aibrix").iterdir() if f.name.endswith(".json")]
        raise UnknownNameError("AIBrix profile", name, known)
    with importlib.resources.as_file(p) as real:
        return ProfileCapacity.from_aibrix_json(real)


def capacity_for(model: Model, gpu: GPU | None, mix: TokenMix, slo: SLO, *, gpu_name: str = "",
                 profile: ProfileCapacity | None = None, **kwargs: Any) -> ReplicaCapacity:
    """Capacity of one replica of ``model`` on a GPU type, from the best source available.

    Order: a measured ``profile`` (req/s from its bucket at the mix's p95 lengths); else the analytic model when
    ``gpu`` is a GPU record (``kwargs`` go to :func:`~fleetplan.costmodels.capacity.replica_capacity`, with
    ``calib`` the GPU's shipped calibration row unless given); else —
    a GPU type with no profile and no analytic data (``gpu`` None, e.g. a catalog row without bandwidth or FLOP/s)
    — zero capacity with limiting 'no_data' and a reason: such a GPU is not eligible, never free capacity.
    Returns a :class:`~fleetplan.costmodels.capacity.ReplicaCapacity`.
    """

    name = gpu.name if gpu is not None else gpu_name
    tp = int(kwargs.get("tp", 1))
    pp = int(kwargs.get("pp", 1))
    if profile is not None:
        rate, why = profile.lookup(mix.input_tokens_p95, mix.output_tokens_p95)
        return ReplicaCapacity(req_per_s=rate, max_batch=0.0, batch_at_capacity=0.0, tpot_p95_s=math.nan,
                               ttft_p95_s=math.nan, weights_bytes_per_gpu=math.nan, kv_bytes_available=math.nan,
                               memory_bytes_per_gpu=math.nan, gpus=tp * pp,
                               limiting="profile" if rate > 0 else "profile_infeasible", reason=why,
                               source=f"measured profile {profile.name} ({profile.source})")
    if gpu is not None:
        kwargs.setdefault("calib", load_calibration(gpu))
        return replica_capacity(model, gpu, mix, slo, **kwargs)
    return ReplicaCapacity(req_per_s=0.0, max_batch=0.0, batch_at_capacity=0.0, tpot_p95_s=math.nan,
                           ttft_p95_s=math.nan, weights_bytes_per_gpu=math.nan, kv_bytes_available=math.nan,
                           memory_bytes_per_gpu=math.nan, gpus=tp * pp, limiting="no_data",
                           reason=f"GPU {name or '?'} has no measured profile and no analytic data (memory "
                                  "bandwidth or dense FLOP/s missing in the catalog); it is not eligible",
                           source="")


# ---------------------------------------------------------------------------------------------------------------
# Measured profiles as planner and simulator input


def _interp(x: float, xs: tuple[float, ...], ys: tuple[float, ...], extrapolate: bool) -> float:
    """Linear interpolation; below the first point the first value (times grow with size: conservative); beyond
    the last point ``math.inf`` (not measured), or the line through the last two points when ``extrapolate``
    (proportional through the origin with one point)."""
    if x <= xs[-1]:
        return float(np.interp(x, xs, ys))
    if not extrapolate:
        return math.inf
    if len(xs) == 1:
        return ys[-1] * x / xs[-1]
    return ys[-1] + (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]) * (x - xs[-1])


@dataclass(frozen=True)
class StepCurves:
    """Measured prefill times (vs prompt length) and decode step times (vs batch, at one or more contexts).

    Attributes:
        model, hardware, tp: labels (the profile entry's model, GPU and tp).
        prefill_tokens, prefill_s: prompt tokens and seconds of one prefill, ascending.
        decode_contexts: context tokens the decode curves were measured at, ascending.
        decode_curves: per context, (batches ascending, seconds per step).
        extrapolate: beyond the measured range, extend linearly (the simulator's replay) instead of returning
            ``math.inf`` (the capacity model: nothing beyond the measurements is vouched for).
    Between contexts the step time is interpolated linearly; below the smallest context or batch the first value
    is used (conservative: step time grows with both).
    """

    model: str
    hardware: str
    tp: int
    prefill_tokens: tuple[float, ...]
    prefill_s: tuple[float, ...]
    decode_contexts: tuple[float, ...]
    decode_curves: tuple[tuple[tuple[float, ...], tuple[float, ...]], ...]
    extrapolate: bool = False

    @property
    def max_prompt_tokens(self) -> float:
        """Longest measured prompt."""
        return self.prefill_tokens[-1]

    @property
    def max_context_tokens(self) -> float:
        """Largest measured decode context."""
        return self.decode_contexts[-1]

    @property
    def max_batch(self) -> float:
        """Largest batch measured at every context."""
        return min(b[-1] for b, _ in self.decode_curves)

    def prefill_time_s(self, prompt_tokens: float, batch: float = 1) -> float:
        """Seconds to prefill ``batch`` prompts of ``prompt_tokens`` (looked up at batch × prompt tokens)."""
        return _interp(prompt_tokens * batch, self.prefill_tokens, self.prefill_s, self.extrapolate)

    def decode_step_time_s(self, batch: float, context_tokens: float = 0.0) -> float:
        """Seconds of one decode step of ``batch`` sequences at mean context ``context_tokens``."""
        cs = self.decode_contexts

        def at(j: int) -> float:
            b, t = self.decode_curves[j]
            return _interp(batch, b, t, self.extrapolate)

        if context_tokens <= cs[0] or len(cs) == 1:
            # One measured context: beyond it the replay keeps that context's curve (stated in its notes).
            return math.inf if context_tokens > cs[-1] and not self.extrapolate else at(0)
        if context_tokens > cs[-1]:
            if not self.extrapolate:
                return math.inf
            j = len(cs) - 2
        else:
            j = int(np.searchsorted(cs, context_tokens, side="left")) - 1
        f = (context_tokens - cs[j]) / (cs[j + 1] - cs[j])
        return at(j) + f * (at(j + 1) - at(j))

    def for_replay(self) -> StepCurves:
        """The same curves extended linearly beyond the measured range (for the simulator)."""
        return StepCurves(self.model, self.hardware, self.tp, self.prefill_tokens, self.prefill_s,
                          self.decode_contexts, self.decode_curves, extrapolate=True)


_STEP_COLUMNS = ("phase", "prompt_tokens", "batch", "context_tokens")


def read_step_csv(path: str | Path, *, model: str = "", gpu: str = "", tp: int = 1) -> StepCurves:
    """Read a step-time CSV: one row per measurement, columns phase (prefill | decode), prompt_tokens (prefill
    rows), batch (decode rows; prefill rows may give it, default 1: looked up at batch × prompt tokens),
    context_tokens (decode rows: mean tokens in each sequence's KV cache), and time_ms or time_s. Repeated
    measurements of one point are reduced to their median.

    Raises InputError (naming the file, row and column) for a missing column, a non-positive number, an unknown
    phase, or no prefill or no decode rows.
    """
    source = str(path)
    try:
        df = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read the step-time CSV: {e}", source=source) from None
    df.columns = [c.strip() for c in df.columns]
    time_col = "time_ms" if "time_ms" in df.columns else "time_s" if "time_s" in df.columns else None
    missing = [c for c in _STEP_COLUMNS if c not in df.columns] + ([] if time_col else ["time_ms or time_s"])
    if missing:
        raise InputError(f"missing columns {missing}; a step-time CSV has phase, prompt_tokens, batch, "
                         "context_tokens and time_ms (or time_s)", source=source)
    phase = df["phase"].astype(str).str.strip().str.lower()
    bad_phase = ~phase.isin(["prefill", "decode"])
    if bad_phase.any():
        i = int(np.flatnonzero(bad_phase.to_numpy())[0])
        raise InputError(f"phase {df['phase'].iloc[i]!r} must be prefill or decode", source=source, row=i + 2,
                         field="phase", value=df["phase"].iloc[i])
    need = {"prefill": ("prompt_tokens", time_col), "decode": ("batch", "context_tokens", time_col)}
    vals = {c: pd.to_numeric(df[c], errors="coerce") for c in ("prompt_tokens", "batch", "context_tokens", time_col)}
    for ph, cols in need.items():
        for c in cols:
            v = vals[c][phase == ph]
            bad = v.isna() | (v <= 0)
            if bad.any():
                i = int(v.index[bad.to_numpy()][0])
                raise InputError(f"{ph} rows need a positive {c}, got {df[c].iloc[i]!r}", source=source, row=i + 2,
                                 field=c, value=df[c].iloc[i])
    scale = 1e-3 if time_col == "time_ms" else 1.0
    pre = pd.DataFrame({"tokens": vals["prompt_tokens"] * vals["batch"].fillna(1.0),
                        "s": vals[time_col] * scale})[phase == "prefill"]
    dec = pd.DataFrame({"batch": vals["batch"], "ctx": vals["context_tokens"], "s": vals[time_col] * scale})[
        phase == "decode"]
    if pre.empty or dec.empty:
        raise InputError(f"the step-time CSV has no {'prefill' if pre.empty else 'decode'} rows; it needs both",
                         source=source, field="phase")
    p = pre.groupby("tokens").s.median()
    curves = []
    for _, g in dec.groupby("ctx", sort=True):
        m = g.groupby("batch").s.median()
        curves.append((tuple(m.index.astype(float)), tuple(m.to_numpy(float))))
    return StepCurves(model, gpu, tp, tuple(p.index.astype(float)), tuple(p.to_numpy(float)),
                      tuple(float(c) for c in sorted(dec.ctx.unique())), tuple(curves))


def _json_records(path: Path, source: str) -> list[Any]:
    """The JSON value of a file, or its JSON lines (``vllm bench serve --append-result``) as a list."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read the profile: {e}", source=source) from None
    try:
        return [loads_unique(text)]
    except DuplicateJsonKey:
        return [parse_json(text, source=source, what="profile")]  # raises, naming the key
    except json.JSONDecodeError:
        pass
    return [parse_json(line, source=source, row=i, what="JSON value or JSON lines")
            for i, line in enumerate(text.splitlines(), start=1) if line.strip()]


def _num(d: dict, key: str, source: str, *, required: bool = True) -> float | None:
    v = d.get(key)
    if v is None and not required:
        return None
    try:
        x = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(f"{key} {v!r} is not a number", source=source, field=key, value=v) from None
    if math.isnan(x) or x < 0:
        raise InputError(f"{key} {v!r} must be a number >= 0", source=source, field=key, value=v)
    return x


_VLLM_METRICS = {"ttft": "ttft", "tpot": "tpot", "e2el": "e2e"}


def _vllm_load(rec: dict) -> tuple[str, bool] | None:
    """(how a vllm bench run loaded the server, whether it was a closed loop) of result record ``rec``: a request
    rate (with a concurrency cap, gamma arrivals) or a concurrency; None for a burst run (request_rate inf, no
    max_concurrency), which measures no latency at a rate."""
    rate = rec.get("request_rate", "inf")
    conc = rec.get("max_concurrency")
    finite = rate not in ("inf", None) and math.isfinite(float(rate))
    if not finite and conc is None:
        return None
    load = (f"rate {float(rate):g} req/s" if finite else f"concurrency {conc} (closed loop)")
    if finite and conc is not None:
        load += f", concurrency cap {conc}"
    if finite and float(rec.get("burstiness", 1.0) or 1.0) != 1.0:
        load += f", gamma arrivals (burstiness {rec['burstiness']})"
    return load, not finite


def _vllm_percentile(head: str) -> float | None:
    """The percentile a vllm bench latency key starts with: 'median' 50, 'p99' 99; None for another head."""
    if head == "median":
        return 50.0
    if head.startswith("p"):
        try:
            return float(head[1:])
        except ValueError:
            return None
    return None


def _vllm_latencies(rec: dict) -> dict[str, dict[float, float]]:
    """{metric (ttft, tpot, e2e): {percentile: seconds}} of the keys median_{m}_ms and p{P}_{m}_ms of a vllm bench
    result record (milliseconds)."""
    lat: dict[str, dict[float, float]] = {}
    for key, val in rec.items():
        parts = key.split("_")
        if len(parts) == 3 and parts[2] == "ms" and parts[1] in _VLLM_METRICS and val is not None:
            pct = _vllm_percentile(parts[0])
            if pct is not None:
                lat.setdefault(_VLLM_METRICS[parts[1]], {})[pct] = float(val) / 1e3
    return lat


@dataclass
class _VllmRuns:
    """The runs of vllm bench result files as they are read: serving points, notes on runs left out, the model
    ids, the token lengths (saved per request, or the totals) and whether any run was a closed loop."""

    points: list[ServingPoint] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    models: set[str] = dataclasses.field(default_factory=set)
    ins: list[float] = dataclasses.field(default_factory=list)
    outs: list[float] = dataclasses.field(default_factory=list)
    tot_in: float = 0.0
    tot_out: float = 0.0
    tot_n: float = 0.0
    closed: bool = False

    def add(self, rec: Any, where: str) -> None:
        """Add result record ``rec`` (at ``where``). Raises InputError when it is not a vllm bench result."""
        if not isinstance(rec, dict) or "request_throughput" not in rec or "completed" not in rec:
            raise InputError("not a vllm bench serve result (no request_throughput / completed); write one "
                             "with vllm bench serve --save-result", source=where)
        self.models.add(str(rec.get("model_id", "")))
        loaded = _vllm_load(rec)
        if loaded is None:
            self.notes.append(f"{where}: left out: a burst run (request_rate inf, no max_concurrency) measures no "
                              "latency at a rate")
            return
        load, closed = loaded
        self.closed = self.closed or closed
        lat = _vllm_latencies(rec)
        completed = int(_num(rec, "completed", where) or 0)
        self.points.append(ServingPoint(float(_num(rec, "request_throughput", where) or 0.0), load, lat, completed,
                                        int(_num(rec, "failed", where, required=False) or 0)))
        if isinstance(rec.get("input_lens"), list) and isinstance(rec.get("output_lens"), list):
            self.ins += [float(x) for x in rec["input_lens"]]
            self.outs += [float(x) for x in rec["output_lens"] if x]
        self.tot_in += _num(rec, "total_input_tokens", where, required=False) or 0.0
        self.tot_out += _num(rec, "total_output_tokens", where, required=False) or 0.0
        self.tot_n += completed

    def token_mix(self) -> tuple[float | None, float | None, float | None, float | None]:
        """(input mean, input p95, output mean, output p95) tokens: from the saved lengths, else the means of the
        totals (no p95s), else unknown."""
        if self.ins and self.outs:
            return (float(np.mean(self.ins)), float(np.percentile(self.ins, 95)), float(np.mean(self.outs)),
                    float(np.percentile(self.outs, 95)))
        if self.tot_n > 0 and self.tot_in > 0 and self.tot_out > 0:
            return self.tot_in / self.tot_n, None, self.tot_out / self.tot_n, None
        return None, None, None, None


def read_vllm_bench(paths: list[Path], *, source: str) -> MeasuredProfile:
    """Serving points from ``vllm bench serve`` / ``benchmark_serving.py`` result files (module docstring).

    Latency keys are read in milliseconds: median_{m}_ms as p50 and p{P}_{m}_ms (m = ttft, tpot, e2el). The token
    lengths come from input_lens / output_lens when saved (--save-detailed: mean and p95), else the means
    total_input_tokens / completed and total_output_tokens / completed. Raises InputError for a record without
    completed or request_throughput, runs of different models, or no usable run.
    """
    runs = _VllmRuns()
    for path in paths:
        for k, rec in enumerate(_json_records(path, str(path)), start=1):
            runs.add(rec, f"{path}" + (f" (record {k})" if k > 1 else ""))
    models = runs.models
    models.discard("")
    if len(models) > 1:
        raise InputError(f"the files hold runs of different models ({', '.join(sorted(models))}); give one "
                         "model's runs per profile", source=source)
    if not runs.points:
        raise InputError("no usable run in the profile (every run was a burst without rate or concurrency)",
                         source=source)
    mix = runs.token_mix()
    return MeasuredProfile("vllm-bench", source, model=next(iter(models), ""),
                           points=tuple(sorted(runs.points, key=lambda p: p.req_per_s)), input_tokens_mean=mix[0],
                           input_tokens_p95=mix[1], output_tokens_mean=mix[2], output_tokens_p95=mix[3],
                           closed_loop=runs.closed, notes=tuple(runs.notes))


def _gl_dist(metrics: dict, name: str, where: str, scale: float = 1.0) -> dict[float, float] | None:
    """{percentile: value × scale} of a guidellm distribution's successful requests (None when absent)."""
    d = metrics.get(name)
    if not isinstance(d, dict):
        return None
    s = d.get("successful", d)
    if not isinstance(s, dict) or not s.get("count", 1):
        return None
    out = {}
    for k, v in (s.get("percentiles") or {}).items():
        if v is None:
            continue
        digits = k[1:]
        # p001 = 0.1, p01 = 1, p05 = 5, p10 .. p99 as written, p999 = 99.9
        pct = {"001": 0.1, "01": 1.0, "05": 5.0, "999": 99.9}.get(digits)
        try:
            out[pct if pct is not None else float(digits)] = float(v) * scale
        except ValueError:
            raise InputError(f"guidellm percentile key {k!r} is not p<digits>", source=where, field=name) from None
    if "median" in s and s["median"] is not None:
        out.setdefault(50.0, float(s["median"]) * scale)
    return out


def _gl_load(strat: dict) -> tuple[str, bool]:
    """(how a guidellm benchmark loaded the server, whether it was a closed loop) from its strategy."""
    kind = strat.get("type_", "")
    if kind in ("constant", "poisson"):
        return f"{kind} rate {float(strat.get('rate', 0)):g} req/s", False
    if kind == "synchronous":
        return "synchronous (concurrency 1, closed loop)", True
    if kind == "concurrent":
        return f"concurrency {strat.get('streams', '?')} (closed loop)", True
    return kind or "unknown strategy", False


def _gl_point(m: dict, load: str, where: str) -> ServingPoint:
    """The serving point of one guidellm benchmark's metrics ``m``: successful requests per second (mean), TTFT
    and TPOT (ms -> s) and end-to-end latency distributions, successful and failed (incomplete + errored) request
    counts. Raises InputError naming ``where`` without requests_per_second.successful.mean."""
    rps = (m.get("requests_per_second") or {}).get("successful") or {}
    if "mean" not in rps:
        raise InputError("benchmark has no metrics.requests_per_second.successful.mean", source=where,
                         field="metrics.requests_per_second")
    lat = {k: v for k, v in (("ttft", _gl_dist(m, "time_to_first_token_ms", where, 1e-3)),
                             ("tpot", _gl_dist(m, "inter_token_latency_ms", where, 1e-3)),
                             ("e2e", _gl_dist(m, "request_latency", where))) if v}
    totals = m.get("request_totals") or {}
    n_ok = int(totals.get("successful", 0) or 0)
    failed = int(totals.get("incomplete", 0) or 0) + int(totals.get("errored", 0) or 0)
    return ServingPoint(float(rps["mean"]), load, lat, n_ok, failed)


def _gl_token_stats(m: dict, n_ok: int, where: str, stats: dict[str, list[tuple[float, float]]]) -> None:
    """Add one benchmark's prompt and output token means and p95s, each weighted by its successful requests (at
    least 1), to ``stats`` (keys in_mean, in_p95, out_mean, out_p95)."""
    for key, name in (("in", "prompt_token_count"), ("out", "output_token_count")):
        d = _gl_dist(m, name, where)
        s = ((m.get(name) or {}).get("successful") or {})
        if s.get("mean") is not None:
            stats[f"{key}_mean"].append((float(s["mean"]), max(n_ok, 1)))
        if d and 95.0 in d:
            stats[f"{key}_p95"].append((d[95.0], max(n_ok, 1)))


def _gl_config(b: dict) -> dict:
    """A guidellm benchmark's configuration (``config``, or ``args`` in older reports)."""
    return b.get("config") or b.get("args") or {}


def read_guidellm(path: Path, *, source: str) -> MeasuredProfile:
    """Serving points from a guidellm benchmark report (module docstring). TTFT from time_to_first_token_ms, TPOT
    from inter_token_latency_ms, end-to-end from request_latency (seconds); req/s is requests_per_second's mean
    over successful requests; token lengths from prompt_token_count / output_token_count (means and p95s,
    weighted by requests). Raises InputError when there is no 'benchmarks' list or no usable benchmark."""
    (doc,) = _json_records(path, source)[:1] or [None]
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise InputError("not a guidellm report (no 'benchmarks' list); write one with guidellm benchmark "
                         "--output-path report.json", source=source, field="benchmarks")
    points, notes = [], []
    stats: dict[str, list[tuple[float, float]]] = {"in_mean": [], "in_p95": [], "out_mean": [], "out_p95": []}
    closed = False
    for i, b in enumerate(doc["benchmarks"]):
        where = f"{source}: benchmarks[{i}]"
        strat = _gl_config(b).get("strategy") or {}
        m = b.get("metrics") or {}
        if strat.get("type_", "") == "throughput":
            notes.append(f"{where}: left out: a throughput (burst) benchmark measures no latency at a rate")
            continue
        load, closed_loop = _gl_load(strat)
        closed = closed or closed_loop
        point = _gl_point(m, load, where)
        points.append(point)
        _gl_token_stats(m, point.completed, where, stats)
    if not points:
        raise InputError("no usable benchmark in the guidellm report (only throughput/burst runs)", source=source)

    def wmean(k: str) -> float | None:
        v = stats[k]
        return sum(x * w for x, w in v) / sum(w for _, w in v) if v else None

    model = ""
    for b in doc["benchmarks"]:
        be = (_gl_config(b).get("backend") or {})
        model = model or str(be.get("model", "") or "")
    return MeasuredProfile("guidellm", source, model=model, points=tuple(sorted(points, key=lambda p: p.req_per_s)),
                           input_tokens_mean=wmean("in_mean"), input_tokens_p95=wmean("in_p95"),
                           output_tokens_mean=wmean("out_mean"), output_tokens_p95=wmean("out_p95"),
                           closed_loop=closed, notes=tuple(notes))


def detect_profile_format(path: Path) -> str:
    """The format of a profile file, from its content: a CSV with a 'phase' column is 'step-csv', one with
    Splitwise's columns 'splitwise'; JSON with 'benchmarks' is 'guidellm', with 'tputs' 'aibrix', with
    'request_throughput' (or JSON lines of such) 'vllm-bench'. Raises InputError when none matches."""
    source = str(path)
    if path.suffix.lower() == ".csv":
        try:
            header = path.read_text().splitlines()[0] if path.stat().st_size else ""
        except (OSError, UnicodeDecodeError, IndexError) as e:
            raise InputError(f"cannot read the profile: {e}", source=source) from None
        cols = {c.strip().replace("(ms)", "") for c in header.split(",")}
        if "phase" in cols:
            return "step-csv"
        if set(_SPLITWISE_COLUMNS) <= cols:
            return "splitwise"
        raise InputError("CSV is neither a step-time profile (phase, prompt_tokens, batch, context_tokens, time_ms) "
                         "nor a Splitwise profile; give format: explicitly", source=source)
    recs = _json_records(path, source)
    first = recs[0] if recs else None
    if isinstance(first, dict):
        if "benchmarks" in first:
            return "guidellm"
        if "tputs" in first:
            return "aibrix"
        if "request_throughput" in first:
            return "vllm-bench"
    raise InputError(f"cannot tell the profile's format; give format: one of {', '.join(PROFILE_FORMATS)}",
                     source=source, field="format")


def profile_files(pattern: str, base: Path | None = None) -> list[Path]:
    """Files a profile entry names: a path or a glob pattern (relative to ``base`` unless absolute), sorted; a
    relative name that matches nothing there is looked up among the shipped profiles (``datasets/data/profiles``,
    e.g. ``melange/toy-a10g.json``), so shipped scenarios can name them. Raises InputError when nothing matches."""
    p = Path(pattern)
    full = p if p.is_absolute() or base is None else base / p

    def matches(path: Path) -> list[Path]:
        if any(ch in pattern for ch in "*?["):
            return sorted(Path(f) for f in glob.glob(str(path)))
        return [path] if path.is_file() else []

    found = matches(full)
    if not found and not p.is_absolute():
        shipped = _profiles_dir()
        if isinstance(shipped, Path):  # an installed package directory (not a zip)
            found = matches(shipped / p)
    if not found:
        raise InputError(f"no profile file matches {pattern!r}" + (f" (relative to {base})" if base else ""),
                         source=pattern, field="file", value=pattern)
    return found


def load_profile(files: list[Path], fmt: str | None = None, *, tp: int = 1, model: str = "", gpu: str = "",
                 source: str = "") -> MeasuredProfile:
    """Read a measured profile of ``model`` on ``tp`` × ``gpu`` from ``files`` (several only for vllm-bench runs),
    detecting the format when ``fmt`` is None. Returns a
    :class:`~fleetplan.costmodels.profile_capacity.MeasuredProfile`.
    Raises InputError for an unreadable or malformed file, formats that disagree, or several files of a
    one-file format."""
    source = source or ", ".join(str(f) for f in files)
    fmts = {detect_profile_format(f) for f in files} if fmt is None else {fmt}
    if len(fmts) != 1:
        raise InputError(f"the files are in different formats ({', '.join(sorted(fmts))}); one profile is one "
                         "format", source=source, field="format")
    (fmt,) = fmts
    if fmt not in PROFILE_FORMATS:
        raise InputError(f"unknown profile format {fmt!r}; one of {', '.join(PROFILE_FORMATS)}", source=source,
                         field="format", value=fmt)
    if fmt == "vllm-bench":
        return read_vllm_bench(files, source=source)
    if len(files) != 1:
        raise InputError(f"a {fmt} profile is one file, got {len(files)}", source=source, field="file")
    (f,) = files
    if fmt == "guidellm":
        return read_guidellm(f, source=source)
    if fmt == "aibrix":
        return MeasuredProfile("aibrix", source, table=ProfileCapacity.from_aibrix_json(f))
    if fmt == "step-csv":
        return MeasuredProfile("step-csv", source, model=model, step=read_step_csv(f, model=model, gpu=gpu, tp=tp))
    df = load_splitwise(f)
    sl = df[df.tp == tp][["model", "hardware"]].drop_duplicates()
    if len(sl) != 1:
        have = sorted(set(zip(df.model.astype(str), df.hardware.astype(str), df.tp.astype(int), strict=True)))
        raise InputError(f"the Splitwise file must hold exactly one (model, hardware) at tp {tp}; it holds "
                         f"{have}", source=source, field="tp", value=tp)
    r = sl.iloc[0]
    return MeasuredProfile("splitwise", source, model=str(r.model),
                           step=SplitwiseProfile.from_frame(df, str(r.model), str(r.hardware), tp))
