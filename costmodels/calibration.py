"""Roofline efficiency constants (fitted data) and the reference model records they were fitted with.

The constants live in ``datasets/data/calibration/roofline.csv``, written by ``benchmarks/calibrate_roofline.py``,
which fits them by least squares on relative error to the measured Splitwise profile (Llama-2-70B on DGX A100-80GB
and DGX H100, TP 2/4/8; github.com/Mutinifni/splitwise-sim data/perf_model.csv). One row per GPU type the profile
covers, plus a row named ``default`` fitted to both GPUs pooled: a GPU type with no row of its own uses the default
row (its efficiencies are a middle ground between A100 and H100; treat capacities of uncalibrated GPUs as estimates).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import importlib.resources
import math
from dataclasses import dataclass

from fleetplan.costmodels.hardware import GPU, Model
from fleetplan.errors import InputError

CALIBRATION_FILE = "roofline.csv"
DEFAULT_ROW = "default"


@dataclass(frozen=True)
class Calibration:
    """Efficiency constants of the roofline model for one GPU type (see :mod:`fleetplan.costmodels.latency`).

    Attributes:
        gpu: GPU catalog name, or 'default'.
        prefill_mfu: achieved fraction of peak dense FLOP/s during prefill (0..1].
        prefill_overhead_s: fixed time per prefill pass (launch, scheduling, sampling), seconds.
        decode_bw_efficiency: achieved fraction of peak HBM bandwidth during decode (0..1].
        decode_overhead_per_layer_s: time per decode step per layer (kernel launches and per-layer host work, which
            grow with depth; the fitting data has one model, so a fixed per-step part cannot be told apart), s.
        decode_overhead_per_seq_s: time per sequence per decode step (sampling, detokenising, scheduling), seconds.
        allreduce_bw_efficiency: achieved fraction of the per-direction GPU link bandwidth in a ring all-reduce.
        allreduce_step_latency_s: latency of one of the 2(tp-1) ring steps of an all-reduce (the alpha term), s.
        source: how the row was obtained.
    """

    gpu: str
    prefill_mfu: float
    prefill_overhead_s: float
    decode_bw_efficiency: float
    decode_overhead_per_layer_s: float
    decode_overhead_per_seq_s: float
    allreduce_bw_efficiency: float
    allreduce_step_latency_s: float
    source: str = ""

    #: (low, high) bounds of each constant; the fitting script uses the same bounds.
    BOUNDS = {
        "prefill_mfu": (0.05, 1.0),
        "prefill_overhead_s": (0.0, 0.5),
        "decode_bw_efficiency": (0.05, 1.0),
        "decode_overhead_per_layer_s": (0.0, 5e-3),
        "decode_overhead_per_seq_s": (0.0, 0.01),
        "allreduce_bw_efficiency": (0.01, 1.0),
        "allreduce_step_latency_s": (0.0, 1e-3),
    }

    def __post_init__(self) -> None:
        for f, (lo, hi) in self.BOUNDS.items():
            v = getattr(self, f)
            if not isinstance(v, int | float) or math.isnan(v) or not lo <= v <= hi:
                raise InputError(f"calibration for {self.gpu}: {v!r} is outside {lo:g}..{hi:g}", field=f, value=v)

    @classmethod
    def parameter_names(cls) -> tuple[str, ...]:
        """Names of the fitted constants, in file order."""
        return tuple(cls.BOUNDS)

    def replace(self, **changes) -> Calibration:
        """A copy with some constants changed."""
        return dataclasses.replace(self, **changes)


def _data_dir():
    return importlib.resources.files("fleetplan.datasets") / "data" / "calibration"


@functools.lru_cache(maxsize=4)
def load_calibration_table(path: str | None = None) -> dict[str, Calibration]:
    """All rows of roofline.csv (the shipped file when ``path`` is None), keyed by GPU name.

    Raises InputError for a missing column, a bad value, or a file without a 'default' row.
    """
    source = str(path) if path else f"datasets/data/calibration/{CALIBRATION_FILE}"
    f = open(path, newline="") if path else (_data_dir() / CALIBRATION_FILE).open(newline="")  # noqa: SIM115
    with f:
        rows = list(csv.DictReader(f))
    need = ("gpu",) + Calibration.parameter_names()
    if not rows or not set(need) <= set(rows[0]):
        missing = sorted(set(need) - set(rows[0] if rows else ()))
        raise InputError(f"calibration file has no rows or lacks columns {missing}; rerun "
                         "benchmarks/calibrate_roofline.py", source=source)
    out: dict[str, Calibration] = {}
    for i, r in enumerate(rows, start=1):
        try:
            vals = {k: float(r[k]) for k in Calibration.parameter_names()}
        except ValueError as e:
            raise InputError(f"not a number: {e}", source=source, row=i) from None
        try:
            out[r["gpu"]] = Calibration(gpu=r["gpu"], source=r.get("source", ""), **vals)
        except InputError as e:
            raise InputError(str(e), source=source, row=i, field=e.field, value=e.value) from None
    if DEFAULT_ROW not in out:
        raise InputError(f"calibration file has no '{DEFAULT_ROW}' row", source=source, field="gpu")
    return out


def load_calibration(gpu: GPU | str | None = None, path: str | None = None) -> Calibration:
    """The calibration row of ``gpu`` (a GPU record or catalog name), or the 'default' row when that GPU type has
    no row of its own (or ``gpu`` is None)."""
    table = load_calibration_table(path)
    name = gpu.name if isinstance(gpu, GPU) else gpu
    return table.get(name or DEFAULT_ROW, table[DEFAULT_ROW])


@functools.lru_cache(maxsize=1)
def load_reference_models() -> dict[str, Model]:
    """Model records used for calibration (datasets/data/calibration/reference_models.csv; Llama-2-70B from its
    Hugging Face config.json), keyed by name."""
    source = "datasets/data/calibration/reference_models.csv"
    with (_data_dir() / "reference_models.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    out = {}
    for i, r in enumerate(rows, start=1):
        try:
            out[r["model"]] = Model(
                name=r["model"], num_layers=int(r["num_layers"]), hidden_size=int(r["hidden_size"]),
                num_attention_heads=int(r["num_attention_heads"]), num_kv_heads=int(r["num_kv_heads"]),
                head_dim=int(r["head_dim"]), params_total=float(r["params_total"]),
                params_active=float(r["params_active"]), arch_type=r["arch_type"],
                attention_type=r["attention_type"], max_context_tokens=int(r["max_context_tokens"]),
                source=r["source"])
        except (KeyError, ValueError) as e:
            raise InputError(f"bad reference model row: {e}", source=source, row=i) from None
    return out
