"""The GPU catalog (``datasets/data/hardware/gpus.csv`` and user rows): specs as :class:`GpuSpec` and
:class:`~fleetplan.costmodels.hardware.GPU` records, PCIe bandwidths, and rows as the file writes them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from fleetplan.costmodels.hardware import GPU
from fleetplan.datasets.catalog.rows import (
    GB,
    MIB,
    TERA,
    Rows,
    cell_number,
    merge_rows,
    per_unit,
    read_user_rows,
    require_columns,
    shipped_rows,
)
from fleetplan.errors import InputError


@dataclass(frozen=True)
class GpuSpec:
    """One row of the GPU catalog, eligible for the analytic model or not.

    Attributes:
        name: catalog name ('H100-SXM-80GB').
        gpu: the :class:`GPU` record, or None when the row lacks a number the analytic latency model needs.
        missing: the blank fields that make the row ineligible (empty when ``gpu`` is set).
        vendor, form_factor: as in the file.
        memory_bytes: capacity as the engine sees it (memory_mib_reported × 2^20 when given, else vendor GB × 1e9)
            even for ineligible rows, or None.
        source: the row's source column.
        partial: for an ineligible row, the number cells it does give, as (gpus.csv column, value in that column's
            unit) pairs (so :func:`gpu_file_row` writes them back); empty for an eligible row (``gpu`` has them).
    """

    name: str
    gpu: GPU | None
    missing: tuple[str, ...] = ()
    vendor: str = ""
    form_factor: str = ""
    memory_bytes: float | None = None
    source: str = ""
    partial: tuple[tuple[str, float], ...] = ()

    @property
    def eligible(self) -> bool:
        """True when the analytic model can use this GPU (every needed number is in the data)."""
        return self.gpu is not None


GPU_COLUMNS = ("gpu", "memory_gb_vendor", "mem_bandwidth_GBps")  # plus bf16_dense_tflops or fp16_dense_tflops


@lru_cache(maxsize=1)
def _pcie_table() -> dict[str, float]:
    rows = shipped_rows("hardware", "pcie.csv")
    return {r["generation"].lower(): float(r["x16_bidir_GBps"]) * GB for _, r in rows.rows}


def pcie_bytes_per_s(text: str) -> float | None:
    """Host-link bandwidth (bidirectional bytes/s) from a pcie cell.

    'Gen5 (128 GB/s bidir)' -> 128e9 (the stated figure); 'Gen4 x16' -> 64e9 from the generation table
    datasets/data/hardware/pcie.csv (Gen3 32, Gen4 64, Gen5 128 GB/s, x16 bidirectional; PCI-SIG); 'see note' or
    blank -> None.
    """
    m = re.search(r"(\d+(?:\.\d+)?)\s*GB/s", text, re.IGNORECASE)
    if m:
        return float(m.group(1)) * GB
    m = re.search(r"gen\s*(\d)", text, re.IGNORECASE)
    if m:
        return _pcie_table().get(f"gen{m.group(1)}")
    return None


def _gpu_from_row(row: dict[str, str], rows: Rows, i: int) -> GpuSpec:
    name = row.get("gpu", "")
    if not name:
        raise InputError("the GPU name is missing", source=rows.source, row=i, field="gpu")
    fix_gb = "give the capacity in GB (e.g. 80 for an 80 GB part)"
    mem_gb = cell_number(row, "memory_gb_vendor", rows, i, required=True, low=1, high=2000, unit="GB", fix=fix_gb)
    # What the serving engine sees: the total nvidia-smi / torch.cuda report, in MiB (an A100-80GB reports 81,920
    # MiB = 80 GiB, not 80e9 bytes). Used when given; otherwise the vendor label in decimal GB.
    mem_mib = cell_number(row, "memory_mib_reported", rows, i, required=False, low=1024, high=2_000_000, unit="MiB",
                           fix="give the total memory nvidia-smi reports, in MiB (e.g. 81920 for A100-80GB)")
    mem_bytes = mem_mib * MIB if mem_mib is not None else mem_gb * GB
    bw = cell_number(row, "mem_bandwidth_GBps", rows, i, required=False, low=10, high=100_000, unit="GB/s",
                      fix="give the peak memory bandwidth in GB/s (e.g. 3350 for H100 SXM)")
    tflops_fix = "give the dense (no sparsity) tensor TFLOPS (e.g. 989.4 for H100 SXM BF16)"
    bf16 = cell_number(row, "bf16_dense_tflops", rows, i, required=False, low=1, high=100_000, unit="TFLOPS",
                        fix=tflops_fix)
    fp16 = cell_number(row, "fp16_dense_tflops", rows, i, required=False, low=1, high=100_000, unit="TFLOPS",
                        fix=tflops_fix)
    fp8 = cell_number(row, "fp8_dense_tflops", rows, i, required=False, low=1, high=200_000, unit="TFLOPS",
                       fix=tflops_fix)
    link = cell_number(row, "interconnect_GBps", rows, i, required=False, low=1, high=100_000, unit="GB/s",
                        fix="give the GPU-to-GPU link bandwidth in GB/s (bidirectional aggregate)")
    tdp = cell_number(row, "tdp_w", rows, i, required=False, low=5, high=5000, unit="W",
                       fix="give the board power in watts")
    # A GPU without NVLink/Infinity Fabric ("none (no NVLink)", "PCIe ...") does tensor parallelism over PCIe;
    # the GPU record then holds the PCIe figure in pcie_bytes_per_s and no interconnect figure.
    inter_text = row.get("interconnect", "").strip().lower()
    if inter_text.startswith(("none", "pcie")):
        link = None
    pcie = pcie_bytes_per_s(row.get("pcie", ""))
    flops = bf16 if bf16 is not None else fp16  # no BF16 (T4, V100, A10G entry): the FP16 tensor figure
    missing = tuple(f for f, v in (("mem_bandwidth_GBps", bw), ("bf16_dense_tflops|fp16_dense_tflops", flops))
                    if v is None)
    vendor, form_factor, source = row.get("vendor", ""), row.get("form_factor", ""), row.get("source", "")
    if missing or bw is None or flops is None:
        given = (("mem_bandwidth_GBps", bw), ("bf16_dense_tflops", flops), ("fp8_dense_tflops", fp8),
                 ("interconnect_GBps", link), ("tdp_w", tdp))
        return GpuSpec(name=name, gpu=None, missing=missing, vendor=vendor, form_factor=form_factor,
                       memory_bytes=mem_bytes, source=source,
                       partial=tuple((k, v) for k, v in given if v is not None)
                       + ((("pcie_GBps", pcie / GB),) if pcie else ()))
    try:
        gpu = GPU(name=name, memory_bytes=mem_bytes, hbm_bandwidth_bytes_per_s=bw * GB,
                  bf16_flops_per_s=flops * TERA, fp8_flops_per_s=None if fp8 is None else fp8 * TERA,
                  interconnect_bytes_per_s=None if link is None else link * GB, pcie_bytes_per_s=pcie,
                  tdp_w=tdp, vendor=row.get("vendor", ""), source=row.get("source", ""))
    except InputError as exc:
        raise InputError(str(exc), source=rows.source, row=i, field=exc.field, value=exc.value) from None
    return GpuSpec(name=name, gpu=gpu, vendor=vendor, form_factor=form_factor, memory_bytes=mem_bytes, source=source)


def _gpu_specs_from(rows: Rows) -> dict[str, GpuSpec]:
    require_columns(rows, GPU_COLUMNS, "GPU specs")
    if "bf16_dense_tflops" not in rows.columns and "fp16_dense_tflops" not in rows.columns:
        raise InputError("missing column bf16_dense_tflops (or fp16_dense_tflops for GPUs without BF16)",
                         source=rows.source, field="bf16_dense_tflops")
    out: dict[str, GpuSpec] = {}
    for i, row in rows.rows:
        spec = _gpu_from_row(row, rows, i)
        out[spec.name] = spec
    return out


def _rename_spec(spec: GpuSpec, name: str) -> GpuSpec:
    return replace(spec, name=name, gpu=None if spec.gpu is None else replace(spec.gpu, name=name))


@lru_cache(maxsize=1)
def shipped_gpu_specs() -> dict[str, GpuSpec]:
    return _gpu_specs_from(shipped_rows("hardware", "gpus.csv"))


def load_gpu_specs(extra: str | Path | None = None) -> dict[str, GpuSpec]:
    """Every GPU catalog row by name, eligible for the analytic model or not (see :class:`GpuSpec`).

    Args:
        extra: a user CSV/YAML file with the gpus.csv header (required columns: gpu, memory_gb_vendor,
            mem_bandwidth_GBps, and bf16_dense_tflops or fp16_dense_tflops; the others optional); its rows
            override shipped rows of the same name.

    Raises:
        InputError: a missing column or a bad cell (negative, NaN, out of range), naming file, row and field.
    """
    shipped = shipped_gpu_specs()
    if extra is None:
        return dict(shipped)
    return merge_rows(shipped, _gpu_specs_from(read_user_rows(extra)), _rename_spec)


def load_gpus(extra: str | Path | None = None) -> dict[str, GPU]:
    """The GPUs the analytic model can use, by catalog name -> :class:`GPU` (bytes, bytes/s, FLOP/s).

    Conversions: GB × 1e9 -> bytes, GB/s × 1e9 -> bytes/s, TFLOPS × 1e12 -> FLOP/s; BF16 falls back to the FP16
    tensor figure where BF16 is blank (T4, V100, A10G); the PCIe figure is the one the row states, else the
    generation's x16 bidirectional rate from hardware/pcie.csv. Rows lacking memory bandwidth or dense
    TFLOPS (H100-PCIe-80GB in the shipped file) are NOT returned: no number is invented for them; they are listed
    by :func:`load_gpu_specs` and ``fleetplan data gpus`` as not eligible.

    Raises:
        InputError: see :func:`load_gpu_specs`.
    """
    return {n: s.gpu for n, s in load_gpu_specs(extra).items() if s.gpu is not None}


#: Columns :func:`gpu_file_row` writes: the gpus.csv columns the reader uses.
GPU_FILE_COLUMNS = ("gpu", "vendor", "form_factor", "memory_gb_vendor", "memory_mib_reported", "mem_bandwidth_GBps",
                    "bf16_dense_tflops", "fp8_dense_tflops", "interconnect_GBps", "pcie", "tdp_w", "source")


def gpu_file_row(spec: GpuSpec) -> dict[str, Any]:
    """One GPU as a gpus.csv row (:data:`GPU_FILE_COLUMNS`; None = blank cell): read back by
    :func:`load_gpu_specs` (``extra``), it gives the same :class:`GpuSpec`. Memory goes in MiB when it is a whole
    number of MiB (what the engine reports, the reader's first choice), else in vendor GB only."""
    g = spec.gpu
    mem = spec.memory_bytes
    whole_mib = mem is not None and float(mem / MIB).is_integer()
    if g is None:  # ineligible: the cells the row gave
        part = dict(spec.partial)
        pcie = part.pop("pcie_GBps", None)
        return {c: None for c in GPU_FILE_COLUMNS} | {
            "gpu": spec.name, "vendor": spec.vendor, "form_factor": spec.form_factor,
            "memory_gb_vendor": per_unit(mem, GB), "memory_mib_reported": int(mem / MIB) if whole_mib and mem else None,
            "pcie": None if pcie is None else f"{pcie!r} GB/s", "source": spec.source} | part
    return {
        "gpu": spec.name, "vendor": spec.vendor, "form_factor": spec.form_factor,
        "memory_gb_vendor": per_unit(mem, GB), "memory_mib_reported": int(mem / MIB) if whole_mib and mem else None,
        "mem_bandwidth_GBps": g and g.hbm_bandwidth_bytes_per_s / GB,
        "bf16_dense_tflops": g and g.bf16_flops_per_s / TERA,
        "fp8_dense_tflops": g and per_unit(g.fp8_flops_per_s, TERA),
        "interconnect_GBps": g and per_unit(g.interconnect_bytes_per_s, GB),
        "pcie": f"{g.pcie_bytes_per_s / GB!r} GB/s" if g and g.pcie_bytes_per_s else None,
        "tdp_w": g and g.tdp_w, "source": spec.source,
    }
