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
   Mélange README, whose rows are input lengths. The shape is checked against the indexes; a mismatch raises
   InputError. :class:`ProfileCapacity` looks up req/s for a token mix.

:func:`capacity_for` picks, for one (model, GPU type), a profile when one is given, else the analytic model when the
GPU has analytic data, else returns zero capacity with a reason (never free capacity).
"""

from __future__ import annotations

import importlib.resources
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fleetplan.costmodels.calibration import Calibration
from fleetplan.costmodels.capacity import SLO, ReplicaCapacity, replica_capacity
from fleetplan.costmodels.demand import TokenMix
from fleetplan.costmodels.hardware import GPU, Model
from fleetplan.costmodels.latency import decode_step_time_s, prefill_time_s
from fleetplan.datasets.calibration import load_calibration, load_reference_models
from fleetplan.datasets.catalog import get_gpu
from fleetplan.errors import InputError, UnknownNameError

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
        """Seconds per decode step at ``batch`` (interpolated; ``math.inf`` beyond :attr:`max_batch`)."""
        if batch > self.max_batch:
            return math.inf
        return float(np.interp(batch, self.decode_batch, self.decode_s))


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

        Raises InputError when 'tputs' or 'indexes' is missing, when the shape of tputs is not
        len(indexes[0]) × len(indexes[1]), when ticks are not ascending, or when a rate is negative or NaN.
        """
        source = str(path)
        try:
            doc = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise InputError(f"cannot read profile JSON: {e}", source=source) from None
        for k in ("tputs", "indexes"):
            if k not in doc:
                raise InputError(f"profile has no {k!r}; an AIBrix profile has 'tputs' and 'indexes'",
                                 source=source, field=k)
        idx = doc["indexes"]
        if not isinstance(idx, list) or len(idx) != 2:
            raise InputError("'indexes' must be [output-token ticks, input-token ticks]", source=source,
                             field="indexes")
        out_ticks, in_ticks = [float(v) for v in idx[0]], [float(v) for v in idx[1]]
        grid = doc["tputs"]
        if len(grid) != len(out_ticks) or any(len(row) != len(in_ticks) for row in grid):
            shape = f"{len(grid)}×{sorted({len(r) for r in grid})}"
            raise InputError(f"tputs shape {shape} does not match indexes: expected {len(out_ticks)} rows (output "
                             f"buckets) × {len(in_ticks)} columns (input buckets), AIBrix order; a Mélange-order "
                             "file (rows = input) must be transposed first", source=source, field="tputs")
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
