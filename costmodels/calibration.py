"""Roofline efficiency constants (fitted data): the :class:`Calibration` record and the row lookup.

The constants live in ``datasets/data/calibration/roofline.csv`` (read by
:func:`fleetplan.datasets.calibration.load_calibration_table`), written by ``benchmarks/calibrate_roofline.py``
(= ``fleetplan calibrate``), which fits them across models, GPUs and serving frameworks to public measurements
(:mod:`fleetplan.costmodels.calibration_fit`, :mod:`fleetplan.datasets.measured`). The shipped rows represent a
current vLLM (0.11). One row per catalog GPU of a fitted family (A100, H100), plus a row named ``default``: the
geometric mean of the fitted families, used by every GPU type without a row of its own (treat capacities of
uncalibrated GPUs as estimates).
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
        prefill_overhead_s: fixed time per prefill pass (scheduling, input preparation, sampling; an engine that
            runs prefill eagerly also launches every layer's kernels from Python), seconds; at most 50 ms (an eager
            80-layer pass at ~0.4 ms of launches per layer plus the scheduler's work).
        decode_bw_efficiency: achieved fraction of peak HBM bandwidth during decode (0..1].
        decode_overhead_per_layer_s: time per decode step per layer (kernel launches and per-layer host work, which
            grow with depth), seconds; at most 500 us: an engine running eagerly (no CUDA graphs: vLLM 0.5 above
            its captured batch sizes, older engines always) dispatches ~10-12 kernels per layer from Python at
            ~20-40 us each; with CUDA graphs it is near 0.
        decode_overhead_per_seq_s: time per sequence per decode step (scheduling, sampling, detokenising and, in an
            engine whose API server shares the loop, streaming each token), seconds; at most 500 us (host work per
            sequence, which does not depend on the model's size; vLLM 0.5's single-process Python server was the
            slow case at ~200 us, vLLM 0.11 ~50 us).
        decode_overhead_per_step_s: fixed time per decode step (the scheduler's iteration, input preparation), s.
        allreduce_bw_efficiency: achieved fraction of the per-direction GPU link bandwidth in a ring all-reduce
            (the beta term: the large-message bandwidth; small messages are slow through the alpha term); at least
            0.5: nccl-tests' all_reduce_perf reaches a bus bandwidth of about 0.75-0.8 of the per-direction NVLink
            bandwidth at large sizes (8 × A100-SXM4 ~230-250 of 300 GB/s). A lower value lets the fit move
            per-sequence host time (which is the same at tp 1) into the all-reduce bytes (which grow with batch ×
            hidden × layers only at tp > 1): fitted without a tp-1 group of vLLM 0.11 it chose 0.24 and 18 us per
            sequence, and predicted Llama-3.1-8B's steps at tp 1 40% short.
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
        "prefill_overhead_s": (0.0, 0.05),
        "decode_bw_efficiency": (0.05, 1.0),
        "decode_overhead_per_layer_s": (0.0, 5e-4),
        "decode_overhead_per_step_s": (0.0, 0.02),
        "decode_overhead_per_seq_s": (0.0, 5e-4),
        "allreduce_bw_efficiency": (0.5, 1.0),
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
