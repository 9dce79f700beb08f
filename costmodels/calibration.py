"""Roofline efficiency constants (fitted data): the :class:`Calibration` record and the row lookup.

The constants live in ``datasets/data/calibration/roofline.csv`` (read by
:func:`fleetplan.datasets.calibration.load_calibration_table`), written by ``benchmarks/calibrate_roofline.py``,
which fits them by least squares on relative error to the measured Splitwise profile (Llama-2-70B on DGX A100-80GB
and DGX H100, TP 2/4/8; github.com/Mutinifni/splitwise-sim data/perf_model.csv). One row per GPU type the profile
covers, plus a row named ``default`` fitted to both GPUs pooled: a GPU type with no row of its own uses the default
row (its efficiencies are a middle ground between A100 and H100; treat capacities of uncalibrated GPUs as estimates).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

from fleetplan.costmodels.hardware import GPU
from fleetplan.errors import InputError

#: Name of the row a GPU type without a row of its own uses.
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
            grow with depth), seconds; at most 100 us (a layer launches ~10-20 kernels of a few us each).
        decode_overhead_per_seq_s: time per sequence per decode step (sampling, detokenising, scheduling), seconds;
            at most 200 us (host work per sequence, which does not depend on the model's size; vLLM 0.5's Python
            scheduler and sampler were the slow case).
        decode_overhead_per_step_s: fixed time per decode step (the scheduler's iteration, input preparation), s.
        allreduce_bw_efficiency: achieved fraction of the per-direction GPU link bandwidth in a ring all-reduce.
        allreduce_step_latency_s: latency of one of the 2(tp-1) ring steps of an all-reduce (the alpha term), s.
        source: how the row was obtained.
        framework: the serving framework and version the row represents (e.g. 'vLLM 0.11'), '' when not stated.
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
    decode_overhead_per_step_s: float = 0.0
    framework: str = ""

    #: (low, high) bounds of each constant; the fitting script uses the same bounds.
    BOUNDS = {
        "prefill_mfu": (0.05, 1.0),
        "prefill_overhead_s": (0.0, 0.5),
        "decode_bw_efficiency": (0.05, 1.0),
        "decode_overhead_per_layer_s": (0.0, 1e-4),
        "decode_overhead_per_step_s": (0.0, 0.02),
        "decode_overhead_per_seq_s": (0.0, 2e-4),
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


def calibration_for(table: Mapping[str, Calibration], gpu: GPU | str | None = None) -> Calibration:
    """The row of ``gpu`` (a GPU record or catalog name) in ``table`` (GPU name -> Calibration, as
    :func:`fleetplan.datasets.calibration.load_calibration_table` returns), or the 'default' row when that GPU type
    has no row of its own (or ``gpu`` is None). Raises InputError when the table has no 'default' row."""
    if DEFAULT_ROW not in table:
        raise InputError(f"calibration table has no '{DEFAULT_ROW}' row", field="gpu", value=sorted(table))
    name = gpu.name if isinstance(gpu, GPU) else gpu
    return table.get(name or DEFAULT_ROW, table[DEFAULT_ROW])


__all__ = ["DEFAULT_ROW", "Calibration", "calibration_for"]
