"""Readers for the shipped data catalogs (GPU specs, model architectures, prices, egress) and user additions.

Every loader reads a shipped CSV under ``fleetplan/datasets/data`` through :mod:`importlib.resources` and, when
``extra=`` names a user file (CSV with the same header, or YAML holding a list of row mappings with the same keys),
adds its rows; a user row overrides the shipped row of the same name (case-insensitive). A bad cell raises
:class:`fleetplan.errors.InputError` naming the file, the 1-based data row, the field and the fix.

Units: the CSVs use vendor units (GB = 1e9 bytes, GB/s, TFLOPS, billions of parameters) except the GPU memory the
engine reports (memory_mib_reported, MiB = 2^20 bytes, preferred over the vendor GB label); the records hold bytes,
bytes/s, FLOP/s and parameter counts. Sources of every number are in the PROVENANCE.md beside each file.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal, overload

from fleetplan.costmodels.hardware import GPU, Model, architecture_params, check_params
from fleetplan.costmodels.prices import (
    CATEGORY_TO_ROUTE_CLASS,
    GIB_PER_GB,
    ROUTE_CLASSES,
    EgressTable,
    EgressTier,
    GpuPrice,
)
from fleetplan.costmodels.prices import find_price as _find_price
from fleetplan.errors import InputError, UnknownNameError, check_range
from fleetplan.fileio import parse_yaml

GB = 1e9  #: bytes per (decimal) GB, the unit of vendors and clouds
MIB = 2**20  #: bytes per MiB, the unit nvidia-smi reports memory in
TERA = 1e12

# --------------------------------------------------------------------------------------------------------------
# Reading rows from shipped and user files
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Rows:
    """Rows of one file: ``source`` names the file in messages; ``rows`` are (1-based data row, mapping) pairs."""

    source: str
    rows: tuple[tuple[int, dict[str, str]], ...]
    columns: tuple[str, ...]


def _data_text(*parts: str) -> str:
    return resources.files("fleetplan.datasets").joinpath("data", *parts).read_text(encoding="utf-8")


def _parse_csv_text(text: str, source: str) -> _Rows:
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames:
        raise InputError("the file is empty; give a header row and at least one data row", source=source)
    columns = tuple(c.strip() for c in reader.fieldnames)
    rows = []
    for i, raw in enumerate(reader, start=1):
        if None in raw:
            raise InputError(f"the row has more cells than the header's {len(columns)} columns; quote cells "
                             "that contain commas", source=source, row=i)
        row = {k.strip(): (v or "").strip() for k, v in raw.items() if k is not None}
        if not any(row.values()):
            continue
        rows.append((i, row))
    return _Rows(source, tuple(rows), columns)


def _shipped_rows(*parts: str) -> _Rows:
    return _parse_csv_text(_data_text(*parts), "/".join(("datasets", "data", *parts)))


def read_user_rows(path: str | Path) -> _Rows:
    """Read a user's CSV (header row) or YAML (a list of mappings) file into rows.

    Raises:
        InputError: the file is missing, unreadable, not CSV/YAML, or its YAML is not a list of mappings.
    """
    p = Path(path)
    source = str(p)
    if not p.is_file():
        raise InputError("file not found; give the path of a CSV or YAML file", source=source)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the file ({exc}); save it as UTF-8 text", source=source) from None
    if p.suffix.lower() in (".yaml", ".yml"):
        data = parse_yaml(text, source=source)
        if isinstance(data, dict) and len(data) == 1 and isinstance(next(iter(data.values())), list):
            data = next(iter(data.values()))  # allow `gpus: [...]` as well as a bare list
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise InputError("a YAML catalog file must hold a list of row mappings (- name: ..., field: value)",
                             source=source)
        columns: list[str] = []
        rows = []
        for i, r in enumerate(data, start=1):
            row = {str(k).strip(): ("" if v is None else str(v).strip()) for k, v in r.items()}
            columns.extend(k for k in row if k not in columns)
            rows.append((i, row))
        return _Rows(source, tuple(rows), tuple(columns))
    if p.suffix.lower() not in (".csv", ".txt", ""):
        raise InputError(f"unsupported file type {p.suffix!r}; give a .csv or .yaml file", source=source)
    return _parse_csv_text(text, source)


def _require_columns(rows: _Rows, required: Iterable[str], what: str) -> None:
    missing = [c for c in required if c not in rows.columns]
    if missing:
        raise InputError(f"missing column(s) {', '.join(missing)} for {what}; the header must include "
                         f"{', '.join(required)}", source=rows.source, field=missing[0])


_NUMBER = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?")


@overload
def _cell_number(row: dict[str, str], name: str, rows: _Rows, i: int, *, required: Literal[True],
                 low: float | None = None, high: float | None = None, unit: str = "", fix: str = "",
                 leading: bool = False) -> float: ...
@overload
def _cell_number(row: dict[str, str], name: str, rows: _Rows, i: int, *, required: bool, low: float | None = None,
                 high: float | None = None, unit: str = "", fix: str = "", leading: bool = False) -> float | None: ...
def _cell_number(row: dict[str, str], name: str, rows: _Rows, i: int, *, required: bool, low: float | None = None,
                 high: float | None = None, unit: str = "", fix: str = "", leading: bool = False) -> float | None:
    """The number in cell ``name`` (None when blank and not required); range-checked with :func:`check_range`.

    ``leading=True`` accepts a number followed by a note ('671 (+14 MTP = 685 on HF)' -> 671).
    """
    text = row.get(name, "").replace(",", "") if leading else row.get(name, "")
    if text == "":
        if required:
            raise InputError(f"value is missing{'; ' + fix if fix else ''}", source=rows.source, row=i, field=name)
        return None
    if leading:
        m = _NUMBER.match(text)
        if m and text.lower() not in ("nan", "inf"):
            text = m.group(0)
    return check_range(text, field=name, low=low, high=high, unit=unit, source=rows.source, row=i, fix=fix)


def _merge(shipped: dict[str, Any], user: dict[str, Any], rename: Callable[[Any, str], Any]) -> dict[str, Any]:
    """Shipped records overridden by user records of the same name (case-insensitive; the override takes the
    shipped spelling through ``rename(record, name)``); user-only names are added."""
    out = dict(shipped)
    lower = {k.lower(): k for k in out}
    for name, rec in user.items():
        old = lower.get(name.lower())
        if old is not None:
            out[old] = rename(rec, old) if old != name else rec
        else:
            out[name] = rec
            lower[name.lower()] = name
    return out


# --------------------------------------------------------------------------------------------------------------
# GPUs
# --------------------------------------------------------------------------------------------------------------


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
    rows = _shipped_rows("hardware", "pcie.csv")
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


def _gpu_from_row(row: dict[str, str], rows: _Rows, i: int) -> GpuSpec:
    name = row.get("gpu", "")
    if not name:
        raise InputError("the GPU name is missing", source=rows.source, row=i, field="gpu")
    fix_gb = "give the capacity in GB (e.g. 80 for an 80 GB part)"
    mem_gb = _cell_number(row, "memory_gb_vendor", rows, i, required=True, low=1, high=2000, unit="GB", fix=fix_gb)
    # What the serving engine sees: the total nvidia-smi / torch.cuda report, in MiB (an A100-80GB reports 81,920
    # MiB = 80 GiB, not 80e9 bytes). Used when given; otherwise the vendor label in decimal GB.
    mem_mib = _cell_number(row, "memory_mib_reported", rows, i, required=False, low=1024, high=2_000_000, unit="MiB",
                           fix="give the total memory nvidia-smi reports, in MiB (e.g. 81920 for A100-80GB)")
    mem_bytes = mem_mib * MIB if mem_mib is not None else mem_gb * GB
    bw = _cell_number(row, "mem_bandwidth_GBps", rows, i, required=False, low=10, high=100_000, unit="GB/s",
                      fix="give the peak memory bandwidth in GB/s (e.g. 3350 for H100 SXM)")
    tflops_fix = "give the dense (no sparsity) tensor TFLOPS (e.g. 989.4 for H100 SXM BF16)"
    bf16 = _cell_number(row, "bf16_dense_tflops", rows, i, required=False, low=1, high=100_000, unit="TFLOPS",
                        fix=tflops_fix)
    fp16 = _cell_number(row, "fp16_dense_tflops", rows, i, required=False, low=1, high=100_000, unit="TFLOPS",
                        fix=tflops_fix)
    fp8 = _cell_number(row, "fp8_dense_tflops", rows, i, required=False, low=1, high=200_000, unit="TFLOPS",
                       fix=tflops_fix)
    link = _cell_number(row, "interconnect_GBps", rows, i, required=False, low=1, high=100_000, unit="GB/s",
                        fix="give the GPU-to-GPU link bandwidth in GB/s (bidirectional aggregate)")
    tdp = _cell_number(row, "tdp_w", rows, i, required=False, low=5, high=5000, unit="W",
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


def _gpu_specs_from(rows: _Rows) -> dict[str, GpuSpec]:
    _require_columns(rows, GPU_COLUMNS, "GPU specs")
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
def _shipped_gpu_specs() -> dict[str, GpuSpec]:
    return _gpu_specs_from(_shipped_rows("hardware", "gpus.csv"))


def load_gpu_specs(extra: str | Path | None = None) -> dict[str, GpuSpec]:
    """Every GPU catalog row by name, eligible for the analytic model or not (see :class:`GpuSpec`).

    Args:
        extra: a user CSV/YAML file with the gpus.csv header (required columns: gpu, memory_gb_vendor,
            mem_bandwidth_GBps, and bf16_dense_tflops or fp16_dense_tflops; the others optional); its rows
            override shipped rows of the same name.

    Raises:
        InputError: a missing column or a bad cell (negative, NaN, out of range), naming file, row and field.
    """
    shipped = _shipped_gpu_specs()
    if extra is None:
        return dict(shipped)
    return _merge(shipped, _gpu_specs_from(read_user_rows(extra)), _rename_spec)


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


# --------------------------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------------------------

MODEL_COLUMNS = ("model", "attention_type", "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads",
                 "head_dim")


@overload
def _int_cell(row: dict[str, str], name: str, rows: _Rows, i: int, *, required: Literal[True], low: float,
              high: float, fix: str) -> int: ...
@overload
def _int_cell(row: dict[str, str], name: str, rows: _Rows, i: int, *, required: bool, low: float, high: float,
              fix: str) -> int | None: ...
def _int_cell(row: dict[str, str], name: str, rows: _Rows, i: int, *, required: bool, low: float, high: float,
              fix: str) -> int | None:
    v = _cell_number(row, name, rows, i, required=required, low=low, high=high, fix=fix)
    if v is None:
        return None
    if v != int(v):
        raise InputError(f"{v:g} is not a whole number; {fix}", source=rows.source, row=i, field=name, value=v)
    return int(v)


def _head_dim(row: dict[str, str], rows: _Rows, i: int, mla: bool) -> int:
    """head_dim; for MLA rows like 'qk 192 (=128 nope+64 rope), v 128' the V head dim (128) is used.

    MLA's KV cache does not use head_dim (it caches kv_lora_rank + qk_rope_head_dim per layer), so the choice
    only affects the record's descriptive field; the V head dim is the per-head width of the attention output.
    """
    text = row.get("head_dim", "")
    if mla and not _NUMBER.fullmatch(text):
        m = re.search(r"\bv\s*(\d+)", text)
        if m:
            return int(m.group(1))
    v = _int_cell(row, "head_dim", rows, i, required=True, low=8, high=1024,
                  fix="give the per-head dimension (hidden_size / num_attention_heads unless the config says)")
    assert v is not None
    return v


_SLIDING = re.compile(r"\+\s*sliding window\s+(\d+)", re.IGNORECASE)


def _model_from_row(row: dict[str, str], rows: _Rows, i: int) -> Model:
    name = row.get("model", "")
    if not name:
        raise InputError("the model name is missing", source=rows.source, row=i, field="model")
    att_raw = row.get("attention_type", "") or "GQA"
    attention = re.split(r"[\s;(+]", att_raw.strip(), maxsplit=1)[0].upper()
    if attention not in ("GQA", "MHA", "MQA", "MLA"):
        raise InputError(f"attention type {att_raw!r} not understood; start it with GQA, MHA, MQA or MLA",
                         source=rows.source, row=i, field="attention_type", value=att_raw)
    mla = attention == "MLA"
    arch = (row.get("arch_type", "") or "dense").lower()
    if arch not in ("dense", "moe"):
        raise InputError(f"arch_type {arch!r} must be 'dense' or 'moe'", source=rows.source, row=i,
                         field="arch_type", value=arch)
    layers = _int_cell(row, "num_layers", rows, i, required=True, low=1, high=1000, fix="give the layer count")
    hidden = _int_cell(row, "hidden_size", rows, i, required=True, low=64, high=200_000, fix="give hidden_size")
    heads = _int_cell(row, "num_attention_heads", rows, i, required=True, low=1, high=4096,
                      fix="give num_attention_heads")
    kv_heads = None if mla else _int_cell(row, "num_kv_heads", rows, i, required=True, low=1, high=4096,
                                          fix="give num_key_value_heads from config.json (GQA), or the attention "
                                              "head count for MHA")
    if kv_heads is not None and heads is not None and kv_heads > heads:
        raise InputError(f"num_kv_heads {kv_heads} exceeds num_attention_heads {heads}; swap them?",
                         source=rows.source, row=i, field="num_kv_heads", value=kv_heads)
    head_dim = _head_dim(row, rows, i, mla)
    fix_p = "give parameters in billions (e.g. 8.03 for Llama-3.1-8B)"
    total_b = _cell_number(row, "params_total_b_computed", rows, i, required=False, low=0.01, high=100_000,
                           fix=fix_p)
    if total_b is None:
        total_b = _cell_number(row, "params_total_b_stated", rows, i, required=True, low=0.01, high=100_000,
                               fix=fix_p, leading=True)
    active_b = _cell_number(row, "params_active_b_computed", rows, i, required=False, low=0.01, high=100_000,
                            fix=fix_p)
    if active_b is None:
        active_b = _cell_number(row, "params_active_b_stated", rows, i, required=False, low=0.01, high=100_000,
                                fix=fix_p, leading=True)
    if active_b is None:
        active_b = total_b

    def opt(column: str) -> int:
        """An optional whole-number cell; blank is 0."""
        return _int_cell(row, column, rows, i, required=False, low=0, high=1_000_000,
                         fix="give a whole number or leave the cell blank") or 0

    experts = opt("num_routed_experts")
    topk = opt("experts_per_token")
    moe_inter = opt("moe_intermediate_size")
    lora = opt("kv_lora_rank")
    rope = opt("qk_rope_head_dim")
    ctx = _int_cell(row, "max_context_tokens", rows, i, required=False, low=128, high=100_000_000,
                    fix="give the longest supported context in tokens") or 131072
    window = _int_cell(row, "sliding_window_tokens", rows, i, required=False, low=1, high=100_000_000,
                       fix="give the sliding window in tokens or leave blank")
    if window is None:
        # 'GQA + sliding window 4096' (every layer windowed, Mistral-7B-v0.1) caps the cached tokens; an
        # alternating full/windowed layout (gpt-oss) does not, so it is not matched.
        m = _SLIDING.search(att_raw)
        window = int(m.group(1)) if m else None
    try:
        model = Model(name=name, num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                      num_kv_heads=kv_heads, head_dim=head_dim, params_total=round(total_b * 1e9),
                      params_active=round(active_b * 1e9), attention_type=attention, arch_type=arch,
                      num_routed_experts=experts, experts_per_token=topk, moe_intermediate_size=moe_inter,
                      kv_lora_rank=lora, qk_rope_head_dim=rope, max_context_tokens=ctx,
                      sliding_window_tokens=window, source=row.get("source", ""))
    except InputError as exc:
        raise InputError(str(exc), source=rows.source, row=i, field=exc.field, value=exc.value) from None
    inter = _int_cell(row, "intermediate_size", rows, i, required=False, low=1, high=10_000_000,
                      fix="give intermediate_size from config.json")
    vocab = _int_cell(row, "vocab_size", rows, i, required=False, low=1, high=100_000_000,
                      fix="give vocab_size from config.json")
    if inter and vocab and not mla:  # MLA rows lack q_lora_rank and the per-head dims the count needs
        computed, _ = architecture_params(
            num_layers=layers, hidden_size=hidden, num_attention_heads=heads, num_kv_heads=kv_heads,
            head_dim=head_dim, intermediate_size=inter, vocab_size=vocab, attention_bias="bias" in att_raw.lower(),
            num_experts=experts, experts_per_token=topk, moe_intermediate_size=moe_inter,
            num_shared_experts=opt("num_shared_experts"))
        try:
            check_params(model.params_total, computed, owner=f"model {name}")
        except InputError as exc:
            raise InputError(str(exc).removeprefix("field 'params': "), source=rows.source, row=i,
                             field="params_total_b_stated", value=exc.value) from None
    stated_kv = _cell_number(row, "kv_cache_bytes_per_token_bf16", rows, i, required=False, low=1, high=1e8,
                             unit="bytes")
    if stated_kv is not None and not math.isclose(stated_kv, model.kv_bytes_per_token("bf16"), rel_tol=1e-9):
        raise InputError(f"states {stated_kv:g} KV bytes/token but the architecture gives "
                         f"{model.kv_bytes_per_token('bf16'):g} (2 x layers x KV heads x head dim x 2 bytes, or "
                         "(kv_lora_rank + qk_rope_head_dim) x layers x 2 for MLA); fix the shape or the figure",
                         source=rows.source, row=i, field="kv_cache_bytes_per_token_bf16", value=stated_kv)
    return model


def _models_from(rows: _Rows) -> tuple[dict[str, Model], dict[str, str]]:
    _require_columns(rows, MODEL_COLUMNS, "model architectures")
    out: dict[str, Model] = {}
    repos: dict[str, str] = {}
    for i, row in rows.rows:
        m = _model_from_row(row, rows, i)
        out[m.name] = m
        if row.get("hf_repo"):
            repos[row["hf_repo"]] = m.name
    return out, repos


@lru_cache(maxsize=1)
def _shipped_models() -> tuple[dict[str, Model], dict[str, str]]:
    return _models_from(_shipped_rows("models", "models.csv"))


#: config.json ``torch_dtype`` -> fleetplan data type (the dtype the weights were saved in).
_HF_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "bf16"}


def _hf_name(cfg: dict[str, Any], path: Path) -> str:
    """A config.json's model name: the last part of its ``_name_or_path``, else its folder's name (a downloaded
    repo), else the file name without extension."""
    named = str(cfg.get("_name_or_path") or "").rstrip("/").split("/")[-1]
    if named:
        return named
    return path.parent.name if path.stem == "config" and path.parent.name else path.stem


def model_from_hf_config(path: str | Path, *, name: str | None = None) -> Model:
    """A :class:`Model` from a Hugging Face ``config.json``, its parameter count computed from the architecture.

    Keys read: num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads (default: the attention
    heads, MHA), head_dim (default hidden_size / heads), intermediate_size, vocab_size, tie_word_embeddings,
    attention_bias (Qwen2's q/k/v bias is implied by model_type qwen2), MoE: num_local_experts (Mixtral) /
    num_experts (Qwen-MoE) / n_routed_experts (DeepSeek), num_experts_per_tok, moe_intermediate_size,
    n_shared_experts, first_k_dense_replace; MLA (DeepSeek): kv_lora_rank, q_lora_rank, qk_rope_head_dim,
    qk_nope_head_dim, v_head_dim; max_position_embeddings; sliding_window (when use_sliding_window is not false
    and model_type is mistral); torch_dtype (kept in the record's source). Parameters:
    :func:`fleetplan.costmodels.hardware.architecture_params`.

    Raises:
        InputError: the file is missing, not JSON, not a mapping, or lacks a key the count needs (names the key).
    """
    p = Path(path)
    source = str(p)
    if not p.is_file():
        raise InputError("file not found; give the path of a Hugging Face config.json", source=source)
    try:
        cfg = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"not a JSON config.json ({exc}); give the model's config.json from Hugging Face",
                         source=source) from None
    if not isinstance(cfg, dict):
        raise InputError("a config.json must hold one JSON object", source=source)
    if isinstance(cfg.get("text_config"), dict):  # multimodal wrappers keep the language model's shape here
        cfg = {**cfg["text_config"], "_name_or_path": cfg.get("_name_or_path", "")}

    def key(k: str, default: Any = None, *, required: bool = False, alt: tuple[str, ...] = ()) -> Any:
        for kk in (k, *alt):
            v = cfg.get(kk)
            if v is not None:
                if isinstance(v, bool) or not isinstance(v, int | float):
                    raise InputError(f"{kk} must be a number, got {v!r}", source=source, field=kk, value=v)
                return int(v)
        if required:
            raise InputError(f"config.json has no {k}; it is needed for the architecture (a decoder-only "
                             "transformer's config has it)", source=source, field=k)
        return default

    layers = key("num_hidden_layers", required=True, alt=("n_layer", "num_layers"))
    hidden = key("hidden_size", required=True, alt=("n_embd", "d_model"))
    heads = key("num_attention_heads", required=True, alt=("n_head",))
    kv_heads = key("num_key_value_heads", heads)
    head_dim = key("head_dim", None) or (hidden // heads if heads else 0)
    inter = key("intermediate_size", required=True, alt=("ffn_dim",))
    vocab = key("vocab_size", required=True)
    experts = key("num_local_experts", 0, alt=("num_experts", "n_routed_experts")) or 0
    topk = key("num_experts_per_tok", 0) or 0
    moe_inter = key("moe_intermediate_size", 0) or 0
    shared = key("n_shared_experts", 0, alt=("num_shared_experts",)) or 0
    first_dense = key("first_k_dense_replace", 0) or 0
    lora, rope = key("kv_lora_rank", 0) or 0, key("qk_rope_head_dim", 0) or 0
    model_type = str(cfg.get("model_type", ""))
    bias = bool(cfg.get("attention_bias", model_type == "qwen2"))
    total, active = architecture_params(
        num_layers=layers, hidden_size=hidden, num_attention_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
        intermediate_size=inter, vocab_size=vocab, tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        attention_bias=bias, num_experts=experts, experts_per_token=topk, moe_intermediate_size=moe_inter,
        num_shared_experts=shared, first_dense_layers=first_dense, q_lora_rank=key("q_lora_rank", 0) or 0,
        kv_lora_rank=lora, qk_nope_head_dim=key("qk_nope_head_dim", 0) or 0, qk_rope_head_dim=rope,
        v_head_dim=key("v_head_dim", 0) or 0)
    window = cfg.get("sliding_window") if model_type == "mistral" and cfg.get("use_sliding_window", True) else None
    dtype = _HF_DTYPES.get(str(cfg.get("torch_dtype", "")), "")
    try:
        return Model(name=name or _hf_name(cfg, p), num_layers=layers, hidden_size=hidden,
                     num_attention_heads=heads, num_kv_heads=None if lora else kv_heads,
                     head_dim=key("v_head_dim", 0) or head_dim if lora else head_dim, params_total=total,
                     params_active=active, attention_type="MLA" if lora else ("MHA" if kv_heads == heads else "GQA"),
                     arch_type="moe" if experts else "dense", num_routed_experts=experts, experts_per_token=topk,
                     moe_intermediate_size=moe_inter or (inter if experts else 0), kv_lora_rank=lora,
                     qk_rope_head_dim=rope, max_context_tokens=key("max_position_embeddings", 131072),
                     sliding_window_tokens=int(window) if isinstance(window, int) else None,
                     source=f"config.json {source}" + (f" (saved as {dtype})" if dtype else ""))
    except InputError as exc:
        raise InputError(str(exc), source=source, field=exc.field, value=exc.value) from None


def load_models(extra: str | Path | None = None) -> dict[str, Model]:
    """Model architectures by catalog name -> :class:`Model` (parameter counts, not billions).

    Parameters: the computed count where the file has one (params_total_b_computed), else the stated one
    (gpt-oss-120b: 117 B stated; DeepSeek-V3: 671 B, its note '(+14 MTP ...)' dropped). MLA (DeepSeek-V3):
    num_kv_heads None, head_dim = the V head dim (128) parsed from 'qk 192 ..., v 128'; its KV cache uses
    kv_lora_rank + qk_rope_head_dim. Mistral-7B-v0.1: sliding_window_tokens 4096 from 'GQA + sliding window 4096'.
    Where a row states kv_cache_bytes_per_token_bf16, it must equal ``Model.kv_bytes_per_token('bf16')``.

    Args:
        extra: a user CSV/YAML file with the models.csv header (required: model, attention_type, num_layers,
            hidden_size, num_attention_heads, num_kv_heads, head_dim and params_total_b_stated or
            params_total_b_computed); optional sliding_window_tokens column. Where a row gives intermediate_size
            and vocab_size (not MLA), its parameter count must be within 10% of the architecture's
            (:func:`fleetplan.costmodels.hardware.check_params`). Or a Hugging Face config.json
            (:func:`model_from_hf_config`), one model.

    Raises:
        InputError: a missing column or bad cell, naming file, row and field.
    """
    shipped, _ = _shipped_models()
    if extra is None:
        return dict(shipped)
    if str(extra).lower().endswith(".json"):
        m = model_from_hf_config(extra)
        user = {m.name: m}
    else:
        user, _ = _models_from(read_user_rows(extra))
    return _merge(shipped, user, lambda m, name: replace(m, name=name))


# --------------------------------------------------------------------------------------------------------------
# Rows as the catalog files write them (what ``--extra`` reads back)
# --------------------------------------------------------------------------------------------------------------

#: Columns :func:`gpu_file_row` writes: the gpus.csv columns the reader uses.
GPU_FILE_COLUMNS = ("gpu", "vendor", "form_factor", "memory_gb_vendor", "memory_mib_reported", "mem_bandwidth_GBps",
                    "bf16_dense_tflops", "fp8_dense_tflops", "interconnect_GBps", "pcie", "tdp_w", "source")
#: Columns :func:`model_file_row` writes: the models.csv columns the reader uses.
MODEL_FILE_COLUMNS = ("model", "hf_repo", "arch_type", "attention_type", "num_layers", "hidden_size",
                      "num_attention_heads", "num_kv_heads", "head_dim", "moe_intermediate_size",
                      "num_routed_experts", "experts_per_token", "kv_lora_rank", "qk_rope_head_dim",
                      "max_context_tokens", "sliding_window_tokens", "params_total_b_computed",
                      "params_active_b_computed", "kv_cache_bytes_per_token_bf16", "source")
#: Columns :func:`price_file_row` writes: the gpu_prices.csv columns the reader uses, plus zone.
PRICE_FILE_COLUMNS = ("provider", "instance", "region", "zone", "gpu", "gpu_count", "usd_per_hour",
                      "usd_per_gpu_hour", "pricing_model", "as_of", "source")


def _per(x: float | None, unit: float) -> float | None:
    return None if x is None else x / unit


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
            "memory_gb_vendor": _per(mem, GB), "memory_mib_reported": int(mem / MIB) if whole_mib and mem else None,
            "pcie": None if pcie is None else f"{pcie!r} GB/s", "source": spec.source} | part
    return {
        "gpu": spec.name, "vendor": spec.vendor, "form_factor": spec.form_factor,
        "memory_gb_vendor": _per(mem, GB), "memory_mib_reported": int(mem / MIB) if whole_mib and mem else None,
        "mem_bandwidth_GBps": g and g.hbm_bandwidth_bytes_per_s / GB,
        "bf16_dense_tflops": g and g.bf16_flops_per_s / TERA,
        "fp8_dense_tflops": g and _per(g.fp8_flops_per_s, TERA),
        "interconnect_GBps": g and _per(g.interconnect_bytes_per_s, GB),
        "pcie": f"{g.pcie_bytes_per_s / GB!r} GB/s" if g and g.pcie_bytes_per_s else None,
        "tdp_w": g and g.tdp_w, "source": spec.source,
    }


def model_file_row(m: Model) -> dict[str, Any]:
    """One model as a models.csv row (:data:`MODEL_FILE_COLUMNS`; None = blank cell): read back by
    :func:`load_models` (``extra``), it gives the same :class:`Model` (parameters in billions, the computed
    columns; the KV bytes per token stated, so the reader re-checks it against the architecture)."""
    return {
        "model": m.name, "hf_repo": model_hf_repo(m.name), "arch_type": m.arch_type,
        "attention_type": m.attention_type, "num_layers": m.num_layers, "hidden_size": m.hidden_size,
        "num_attention_heads": m.num_attention_heads, "num_kv_heads": m.num_kv_heads, "head_dim": m.head_dim,
        "moe_intermediate_size": m.moe_intermediate_size or None, "num_routed_experts": m.num_routed_experts or None,
        "experts_per_token": m.experts_per_token or None, "kv_lora_rank": m.kv_lora_rank or None,
        "qk_rope_head_dim": m.qk_rope_head_dim or None, "max_context_tokens": m.max_context_tokens,
        "sliding_window_tokens": m.sliding_window_tokens, "params_total_b_computed": m.params_total / 1e9,
        "params_active_b_computed": m.params_active / 1e9,
        "kv_cache_bytes_per_token_bf16": int(m.kv_bytes_per_token("bf16")), "source": m.source,
    }


def price_file_row(p: GpuPrice) -> dict[str, Any]:
    """One price as a gpu_prices.csv row (:data:`PRICE_FILE_COLUMNS`): read back by :func:`load_gpu_prices`
    (``extra``), it gives the same price, as the user's row (``user`` True, its snapshot named after the file)."""
    return {
        "provider": p.cloud, "instance": p.instance, "region": p.region, "zone": p.zone, "gpu": p.gpu,
        "gpu_count": p.gpus_per_node, "usd_per_hour": p.node_usd_per_hour, "usd_per_gpu_hour": p.usd_per_gpu_hour,
        "pricing_model": p.pricing_model, "as_of": p.as_of, "source": p.source,
    }


# --------------------------------------------------------------------------------------------------------------
# Names and aliases
# --------------------------------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def load_aliases() -> dict[str, dict[str, str]]:
    """The alias table datasets/data/aliases.csv as {kind: {alias: catalog name}} (kind 'gpu' or 'model')."""
    out: dict[str, dict[str, str]] = {}
    for _, row in _shipped_rows("aliases.csv").rows:
        out.setdefault(row["kind"], {})[row["alias"]] = row["name"]
    return out


def _squash(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


def resolve_name(kind: str, name: str, known: Iterable[str], extra_aliases: dict[str, str] | None = None) -> str:
    """The catalog name that ``name`` refers to among ``known``.

    Tries, in order: exact; case-insensitive; the alias table (case-insensitive); the same ignoring spaces,
    hyphens and punctuation ('h100 sxm 80gb' -> 'H100-SXM-80GB').

    Raises:
        UnknownNameError: no match; the message suggests close names ("did you mean ...").
    """
    known = list(known)
    if name in known:
        return name
    lower = {k.lower(): k for k in known}
    key = name.strip().lower()
    if key in lower:
        return lower[key]
    aliases = dict(load_aliases().get(kind, {}))
    aliases.update(extra_aliases or {})
    by_lower = {a.lower(): t for a, t in aliases.items()}
    if key in by_lower and by_lower[key].lower() in lower:
        return lower[by_lower[key].lower()]
    squashed = {_squash(k): k for k in known}
    if _squash(name) in squashed:
        return squashed[_squash(name)]
    for alias, target in aliases.items():
        if _squash(alias) == _squash(name) and target.lower() in lower:
            return lower[target.lower()]
    # Suggest aliases too (an 'H10' typo should suggest 'H100', not only the long catalog names).
    raise UnknownNameError(kind, name, known + [a for a, t in aliases.items() if t.lower() in lower])


def get_gpu(name: str, extra: str | Path | None = None) -> GPU:
    """The :class:`GPU` named ``name`` (case-insensitive, aliases such as 'H100', 'A100-80GB', 'L4', 'A10G').

    Raises:
        UnknownNameError: no such GPU ("did you mean ...").
        InputError: the GPU is in the catalog but lacks numbers the analytic model needs (names them and says
            how to add them with an extra file).
    """
    specs = load_gpu_specs(extra)
    canonical = resolve_name("gpu", name, specs)
    spec = specs[canonical]
    if spec.gpu is None:
        raise InputError(f"GPU {canonical!r} is in the catalog but has no {', '.join(spec.missing)} in a cited "
                         "source, so the analytic model cannot use it; add the numbers in your own GPU file "
                         "(same columns as gpus.csv) passed with --extra", field="gpu", value=name)
    return spec.gpu


def get_model(name: str, extra: str | Path | None = None) -> Model:
    """The :class:`Model` named ``name`` (case-insensitive, aliases such as 'llama-3.1-70b', 'Mixtral-8x7B',
    or the Hugging Face repo id 'meta-llama/Llama-3.1-8B').

    Raises:
        UnknownNameError: no such model ("did you mean ...").
    """
    models = load_models(extra)
    _, repos = _shipped_models()
    return models[resolve_name("model", name, models, extra_aliases=repos)]


def model_hf_repo(name: str) -> str | None:
    """The Hugging Face repository the shipped catalog gives for model ``name`` (its catalog name, e.g.
    'Llama-3.1-8B' -> 'meta-llama/Llama-3.1-8B'; models.csv's hf_repo column), or None when it gives none."""
    _, repos = _shipped_models()
    return next((repo for repo, model in repos.items() if model == name), None)


# --------------------------------------------------------------------------------------------------------------
# GPU prices
# --------------------------------------------------------------------------------------------------------------

PRICE_COLUMNS = ("provider", "instance", "region", "gpu", "gpu_count", "usd_per_hour", "pricing_model")
_SKY = ("pricing", "skypilot_catalog")


@dataclass(frozen=True)
class SkippedPriceRow:
    """A shipped price row left out of :func:`load_gpu_prices`, and why (its GPU is not in the catalog, ...)."""

    source: str
    row: int
    instance: str
    price_gpu: str
    reason: str


@lru_cache(maxsize=1)
def _gpu_name_map() -> tuple[tuple[str, str, str, float | None, str, str], ...]:
    rows = _shipped_rows("pricing", "gpu_name_map.csv")
    return tuple((r["source"], r["instance_prefix"], r["price_gpu"],
                  float(r["gpu_memory_gb"]) if r["gpu_memory_gb"] else None, r["gpu"], r["note"])
                 for _, r in rows.rows)


def price_gpu_to_catalog(source: str, instance: str, price_gpu: str, memory_gb: float | None = None
                         ) -> tuple[str | None, str]:
    """Map a price file's GPU name to a catalog GPU name: (name or None, reason).

    First the rules of datasets/data/pricing/gpu_name_map.csv (by source 'gpu_prices'/'aws'/'gcp'/'azure',
    instance prefix, price-file name and memory; a blank ``gpu`` there means 'not in the catalog'), then the alias
    table and case-insensitive names (:func:`resolve_name`). None when the GPU is not in the catalog.
    """
    for src, prefix, pname, mem, gpu, note in _gpu_name_map():
        if src != source or pname.lower() != price_gpu.lower() or not instance.startswith(prefix):
            continue
        if mem is not None and (memory_gb is None or abs(mem - memory_gb) > 0.5):
            continue
        return (gpu or None), note or ("mapped" if gpu else "not in the GPU catalog")
    if not price_gpu:
        return None, "no GPU name in the row"
    try:
        return resolve_name("gpu", price_gpu, load_gpu_specs()), "alias"
    except UnknownNameError:
        return None, "not in the GPU catalog"


def _pricing_model(text: str, rows: _Rows, i: int) -> str:
    t = text.strip().lower()
    if "capacity block" in t or t.startswith("capacity-block"):
        return "capacity-block"
    for m in ("on-demand-equivalent", "on-demand", "spot", "reserved", "negotiated", "committed-1y", "committed-3y",
              "owned"):
        if t.startswith(m):
            return m
    raise InputError(f"pricing model {text!r} not understood; start it with on-demand, spot, reserved, "
                     "negotiated, committed-1y, committed-3y, owned or capacity-block", source=rows.source, row=i,
                     field="pricing_model", value=text)


def _regions(text: str) -> list[str]:
    """'us-east-1 / us-east-2' -> both; '(not stated in excerpt)' -> ['']."""
    if not text or text.startswith("("):
        return [""]
    return [r.strip() for r in text.split("/") if r.strip()]


def _short(source: str) -> str:
    """A source URL shortened to its site and first path part ('raw.githubusercontent.com/datareceipts')."""
    m = re.match(r"(?:https?://)?([^/\s]+)(/[^/\s]+)?", source)
    return (m.group(1) + (m.group(2) or "")) if m else source[:40]


@lru_cache(maxsize=1)
def _instance_gpu_counts() -> dict[tuple[str, str], int]:
    """(cloud, instance lower-case) -> GPUs, from pricing/instance_shapes.csv and pricing/gcp_host_shapes.csv."""
    out = {(r["cloud"].lower(), r["instance"].lower()): int(r["gpu_count"])
           for _, r in _shipped_rows("pricing", "instance_shapes.csv").rows}
    for _, r in _shipped_rows("pricing", "gcp_host_shapes.csv").rows:
        out[("gcp", r["instance"].lower())] = int(r["accelerator_count"])
    return out


def _shape_flags(cloud: str, instance: str, count: int) -> tuple[str, ...]:
    """A flag when a row's GPU count contradicts the instance type's (instance_shapes.csv), else ()."""
    known = _instance_gpu_counts().get((cloud.lower(), instance.lower()))
    if known is not None and known != count:
        return (f"{cloud} {instance} has {known} GPUs (pricing/instance_shapes.csv), but the row says {count}; "
                "its per-GPU price cannot be trusted",)
    return ()


@lru_cache(maxsize=1)
def _price_rules() -> dict[tuple[str, str, str, str], str]:
    """(cloud, source file, instance lower-case, pricing model) -> why those rows are never chosen
    (pricing/price_rules.csv)."""
    return {(r["cloud"].lower(), r["file"], r["instance"].lower(), r["pricing_model"]): r["reason"]
            for _, r in _shipped_rows("pricing", "price_rules.csv").rows}


def _sky_flags(cloud: str, file: str, instance: str, count: int, model: str) -> tuple[str, ...]:
    rule = _price_rules().get((cloud, file, instance.lower(), model))
    return _shape_flags(cloud, instance, count) + ((f"price_rules.csv: {rule}",) if rule else ())


@lru_cache(maxsize=1)
def _sky_snapshots() -> dict[str, tuple[str, str]]:
    """SkyPilot extract file -> (as_of or '', snapshot label), from pricing/skypilot_catalog/snapshots.csv."""
    return {r["file"]: (r["as_of"], f"SkyPilot {r['cloud']} catalog @ {r['commit'][:12]}")
            for _, r in _shipped_rows(*_SKY, "snapshots.csv").rows}


def _prices_from_table(rows: _Rows, *, user: bool, skipped: list[SkippedPriceRow]) -> list[GpuPrice]:
    """Rows with the gpu_prices.csv header (plus optional zone column)."""
    _require_columns(rows, PRICE_COLUMNS, "GPU prices")
    out = []
    for i, row in rows.rows:
        cloud = row["provider"].lower()
        if not cloud:
            raise InputError("the cloud/provider name is missing", source=rows.source, row=i, field="provider")
        mem = _cell_number(row, "gpu_memory_gb", rows, i, required=False, low=1, high=2000, unit="GB")
        count = _int_cell(row, "gpu_count", rows, i, required=True, low=1, high=64,
                          fix="give the number of GPUs in the instance")
        node = _cell_number(row, "usd_per_hour", rows, i, required=True, low=0, high=1000, unit="USD/h",
                            fix="give the instance price in USD per hour")
        per_gpu = _cell_number(row, "usd_per_gpu_hour", rows, i, required=False, low=0, high=1000, unit="USD/h")
        model = _pricing_model(row["pricing_model"], rows, i)
        if user:
            gpu = resolve_name("gpu", row["gpu"], load_gpu_specs()) if row["gpu"] else None
            if gpu is None:
                raise InputError("the GPU name is missing", source=rows.source, row=i, field="gpu")
        else:
            gpu, reason = price_gpu_to_catalog("gpu_prices", row["instance"], row["gpu"], mem)
            if gpu is None:
                skipped.append(SkippedPriceRow(rows.source, i, row["instance"], row["gpu"], reason))
                continue
        as_of = row.get("as_of", "")
        source = row.get("source", "") or rows.source
        flags = () if user else _shape_flags(cloud, row["instance"], count)
        for region in _regions(row["region"]):
            try:
                out.append(GpuPrice(cloud=cloud, region=region, zone=row.get("zone", ""), gpu=gpu,
                                    instance=row["instance"], gpus_per_node=count, node_usd_per_hour=node,
                                    usd_per_gpu_hour=per_gpu, pricing_model=model, source=source, as_of=as_of,
                                    snapshot=f"{'your file ' + rows.source if user else _short(source)} @ "
                                             f"{as_of or 'undated'}",
                                    user=user, flags=flags))
            except InputError as exc:
                raise InputError(str(exc), source=rows.source, row=i, field=exc.field, value=exc.value) from None
    return out


def _sky_price(row: dict[str, str], name: str, rows: _Rows, i: int) -> float | None:
    return _cell_number(row, name, rows, i, required=False, low=0, high=1000, unit="USD/h")


def _aws_azure_prices(file: str, cloud: str, skipped: list[SkippedPriceRow]) -> list[GpuPrice]:
    """SkyPilot AWS v7 (per zone) and Azure v6 (per region) rows: Price = on-demand, SpotPrice = spot, $/h."""
    rows = _shipped_rows(*_SKY, file)
    src = f"SkyPilot catalog extract {file} (datasets/data/pricing/skypilot_catalog/README.md)"
    out = []
    for i, row in rows.rows:
        gpu, reason = price_gpu_to_catalog(cloud, row["InstanceType"], row["AcceleratorName"])
        if gpu is None:
            skipped.append(SkippedPriceRow(rows.source, i, row["InstanceType"], row["AcceleratorName"], reason))
            continue
        count = _int_cell(row, "AcceleratorCount", rows, i, required=True, low=1, high=64, fix="")
        assert count is not None
        as_of, snap = _sky_snapshots()[file]
        for col, model in (("Price", "on-demand"), ("SpotPrice", "spot")):
            price = _sky_price(row, col, rows, i)
            if price is None:  # blank = not offered under that model there
                continue
            out.append(GpuPrice(cloud=cloud, region=row["Region"], zone=row.get("AvailabilityZone", ""), gpu=gpu,
                                instance=row["InstanceType"], gpus_per_node=count, node_usd_per_hour=price,
                                pricing_model=model, source=src, as_of=as_of, snapshot=snap,
                                flags=_sky_flags(cloud, file, row["InstanceType"], count, model)))
    return out


def _gcp_prices(skipped: list[SkippedPriceRow]) -> list[GpuPrice]:
    """GCP node prices = host VM row + GPU row of the same zone, accelerator and count (SkyPilot adds the two).

    The host shapes (a2-highgpu-Ng: N x A100 40 GB, a2-megagpu-16g: 16 x A100 40 GB, a2-ultragpu-Ng:
    N x A100 80 GB, a3-highgpu-Ng: N x H100 80 GB) come from datasets/data/pricing/gcp_host_shapes.csv (Google's
    accelerator-optimized machine docs). GPU rows with no host row in the extract (H100 x4/x8, H100-MEGA, H200,
    B200, L4) and host rows with no GPU row give no node price: a GPU-only price would understate the cost.
    """
    shapes = {r["instance"]: (r["accelerator"], int(r["accelerator_count"]))
              for _, r in _shipped_rows("pricing", "gcp_host_shapes.csv").rows}
    host_file = "gcp_v7_gpu_host_vm_rows_extract.csv"
    hosts = _shipped_rows(*_SKY, host_file)
    as_of, snap = _sky_snapshots()[host_file]
    gpus = _shipped_rows(*_SKY, "gcp_v7_accelerator_rows_extract.csv")
    gpu_rows: dict[tuple[str, str, str, int], tuple[int, dict[str, str]]] = {}
    for i, row in gpus.rows:
        count = _int_cell(row, "AcceleratorCount", gpus, i, required=True, low=1, high=64, fix="")
        gpu_rows[(row["Region"], row["AvailabilityZone"], row["AcceleratorName"], count or 0)] = (i, row)
    used = set()
    src = ("SkyPilot catalog extracts gcp_v7_gpu_host_vm_rows_extract.csv + gcp_v7_accelerator_rows_extract.csv "
           "(host VM + GPUs)")
    out = []
    for i, host in hosts.rows:
        inst = host["InstanceType"]
        if inst not in shapes:
            skipped.append(SkippedPriceRow(hosts.source, i, inst, "", "host shape not in gcp_host_shapes.csv"))
            continue
        accel, count = shapes[inst]
        key = (host["Region"], host["AvailabilityZone"], accel, count)
        if key not in gpu_rows:
            skipped.append(SkippedPriceRow(hosts.source, i, inst, accel, "no GPU price row for this zone"))
            continue
        used.add(key)
        j, grow = gpu_rows[key]
        gpu, reason = price_gpu_to_catalog("gcp", inst, accel)
        if gpu is None:
            skipped.append(SkippedPriceRow(hosts.source, i, inst, accel, reason))
            continue
        for col, model in (("Price", "on-demand"), ("SpotPrice", "spot")):
            h = _sky_price(host, col, hosts, i)
            g = _sky_price(grow, col, gpus, j)
            if h is None or g is None:
                continue
            out.append(GpuPrice(cloud="gcp", region=host["Region"], zone=host["AvailabilityZone"], gpu=gpu,
                                instance=inst, gpus_per_node=count, node_usd_per_hour=h + g, pricing_model=model,
                                source=src, as_of=as_of, snapshot=snap,
                                flags=_sky_flags("gcp", host_file, inst, count, model)))
    for key, (j, _) in gpu_rows.items():
        if key not in used:
            skipped.append(SkippedPriceRow(gpus.source, j, "", f"{key[2]} x{key[3]}",
                                           "GPU-only row with no host VM row in the extract"))
    return out


@lru_cache(maxsize=1)
def _shipped_prices() -> tuple[tuple[GpuPrice, ...], tuple[SkippedPriceRow, ...]]:
    skipped: list[SkippedPriceRow] = []
    prices = _prices_from_table(_shipped_rows("pricing", "gpu_prices.csv"), user=False, skipped=skipped)
    prices += _aws_azure_prices("aws_v7_accelerator_rows_extract.csv", "aws", skipped)
    prices += _aws_azure_prices("azure_v6_gpu_rows_extract.csv", "azure", skipped)
    prices += _gcp_prices(skipped)
    return tuple(prices), tuple(skipped)


def _price_key(p: GpuPrice) -> tuple[str, str, str, str, str]:
    return (p.cloud, p.region, p.zone, p.instance.lower(), p.pricing_model)


def load_gpu_prices(extra: str | Path | None = None) -> list[GpuPrice]:
    """Every GPU price the shipped files give, as :class:`GpuPrice` rows (one per site, instance, pricing model).

    Sources: pricing/gpu_prices.csv (hand-collected, cited per row; 'us-east-1 / us-east-2' gives one row per
    region; 'EC2 Capacity Block' rows get pricing_model 'capacity-block'); the SkyPilot catalog extracts: AWS v7
    per zone (Price -> 'on-demand', SpotPrice -> 'spot'; blank = not offered), Azure v6 per region (zone ''),
    GCP v7 host VM + GPU rows summed (see ``_gcp_prices``). Price-file GPU names are mapped to catalog names by
    :func:`price_gpu_to_catalog`; rows whose GPU is not in the catalog are left out (see
    :func:`skipped_price_rows`).

    Args:
        extra: a user CSV/YAML file with the gpu_prices.csv header (required: provider, instance, region, gpu,
            gpu_count, usd_per_hour, pricing_model; optional zone, usd_per_gpu_hour, gpu_memory_gb, source).
            Its GPU names must resolve (else "did you mean"); a user row replaces shipped rows with the same
            cloud, region, zone, instance and pricing model.

    Raises:
        InputError / UnknownNameError: a bad user row, naming file, row and field.
    """
    shipped, _ = _shipped_prices()
    if extra is None:
        return list(shipped)
    user = _prices_from_table(read_user_rows(extra), user=True, skipped=[])
    keys = {_price_key(p) for p in user}
    return [p for p in shipped if _price_key(p) not in keys] + user


def skipped_price_rows() -> list[SkippedPriceRow]:
    """Shipped price rows :func:`load_gpu_prices` leaves out, each with its reason."""
    return list(_shipped_prices()[1])


# --------------------------------------------------------------------------------------------------------------
# Egress
# --------------------------------------------------------------------------------------------------------------

EGRESS_COLUMNS = ("provider", "category", "scope", "tier_from_gb", "tier_to_gb", "usd_per_unit_low",
                  "usd_per_unit_high", "unit")


def _egress_from(rows: _Rows, bound: str) -> list[EgressTable]:
    """Group rows by (provider, category, scope) into tables, in file order.

    A group whose first band starts above 0 continues the previous tiered group of the same cloud and class
    (GCP internet: 'to North America' 0-1,024 GiB, then 'any source/destination' from 1,024 GB; Azure internet:
    0-100 GB free, then the range above 100 GB); where the pieces overlap the later one starts where the
    earlier one ends.
    """
    _require_columns(rows, EGRESS_COLUMNS, "egress prices")
    if bound not in ("high", "low"):
        raise InputError(f"range bound {bound!r} must be 'high' (conservative, the default) or 'low'",
                         field="bound", value=bound)
    groups: dict[tuple[str, str, str], list[tuple[int, dict[str, str]]]] = {}
    for i, row in rows.rows:
        groups.setdefault((row["provider"].lower(), row["category"], row["scope"]), []).append((i, row))
    tables: list[EgressTable] = []
    for (cloud, category, scope), grp in groups.items():
        i0, first = grp[0]
        route = CATEGORY_TO_ROUTE_CLASS.get(category, category if category in ROUTE_CLASSES else "")
        if not route:
            raise InputError(f"category {category!r} is not one of {', '.join(CATEGORY_TO_ROUTE_CLASS)} (or "
                             f"{', '.join(ROUTE_CLASSES)})", source=rows.source, row=i0, field="category",
                             value=category)
        bands = []
        ranged = False
        per_direction = False
        for i, row in grp:
            unit = row["unit"].strip()
            u = unit.lower()
            if not u.startswith(("usd/gb", "usd/gib")):
                raise InputError(f"unit {unit!r} must be USD/GB or USD/GiB (optionally 'each direction')",
                                 source=rows.source, row=i, field="unit", value=unit)
            gib = u.startswith("usd/gib")
            per_direction = per_direction or "each direction" in u
            low = _cell_number(row, "usd_per_unit_low", rows, i, required=True, low=0, high=5, unit="USD",
                               fix="give the price per GB (e.g. 0.09)")
            high = _cell_number(row, "usd_per_unit_high", rows, i, required=False, low=0, high=5, unit="USD")
            if high is None:
                high = low
            if high < low:
                raise InputError(f"high {high:g} is below low {low:g}; swap them", source=rows.source, row=i,
                                 field="usd_per_unit_high", value=high)
            ranged = ranged or high != low
            rate = high if bound == "high" else low
            frm = _cell_number(row, "tier_from_gb", rows, i, required=False, low=0, high=1e12, unit="GB") or 0.0
            to = _cell_number(row, "tier_to_gb", rows, i, required=False, low=0, high=1e12, unit="GB")
            scale = GIB_PER_GB if gib else 1.0  # GiB bounds -> GB; $/GiB -> $/GB
            bands.append(EgressTier(frm * scale, None if to is None else to * scale, rate / scale))
        bands.sort(key=lambda t: t.from_gb)
        both_sides = 2 if per_direction else 1  # 'each direction': sender and receiver both pay
        tiers = tuple(EgressTier(t.from_gb, t.to_gb, t.usd_per_gb * both_sides) for t in bands)
        source = first.get("source", "")
        historical = "historical" in first.get("source_type", "").lower() or "old" in scope.lower().split()
        rb = bound if ranged else "single"
        if tiers[0].from_gb > 0:
            prev = next((t for t in reversed(tables) if t.cloud == cloud and t.route_class == route
                         and t.tiers[-1].to_gb is not None), None)
            if prev is None:
                raise InputError(f"the first band of {cloud} {category} ({scope}) starts at {tiers[0].from_gb:g} "
                                 "GB; add the band from 0", source=rows.source, row=i0, field="tier_from_gb",
                                 value=tiers[0].from_gb)
            end = prev.tiers[-1].to_gb
            assert end is not None
            cont = [EgressTier(max(t.from_gb, end), t.to_gb, t.usd_per_gb) for t in tiers
                    if t.to_gb is None or t.to_gb > end]
            merged = EgressTable(cloud, route, f"{prev.scope} + {scope}", prev.tiers + tuple(cont),
                                 prev.usd_per_gb_per_direction, prev.historical or historical,
                                 rb if rb != "single" else prev.range_bound, f"{prev.source} | {source}")
            tables[tables.index(prev)] = merged
            continue
        try:
            tables.append(EgressTable(cloud, route, scope, tiers,
                                      usd_per_gb_per_direction=tiers[0].usd_per_gb / 2 if per_direction else None,
                                      historical=historical, range_bound=rb, source=source))
        except InputError as exc:
            raise InputError(str(exc), source=rows.source, row=i0, field=exc.field, value=exc.value) from None
    return tables


@lru_cache(maxsize=2)
def _shipped_egress(bound: str) -> tuple[EgressTable, ...]:
    return tuple(_egress_from(_shipped_rows("pricing", "egress.csv"), bound))


def load_egress(extra: str | Path | None = None, *, bound: str = "high") -> list[EgressTable]:
    """Egress price tables from pricing/egress.csv, one per (cloud, route class, scope), rates in USD per GB.

    Conversions: USD/GiB rates ÷ 1.073741824 and GiB band bounds × 1.073741824 (GCP quotes GiB). Rows quoted as a
    range use the ``high`` end by default (conservative: a plan's cost is not understated); ``bound='low'``
    takes the other end. AWS cross-AZ "USD/GB each direction" (0.01) is charged on both sides: the table's rate
    is per GB moved (0.02) and ``usd_per_gb_per_direction`` keeps 0.01. Rows the source marks historical are
    kept but never chosen by default (see :func:`fleetplan.costmodels.prices.select_egress_table`).

    Args:
        extra: a user CSV/YAML with the egress.csv header; its tables come first (so they are the defaults) and
            replace shipped tables of the same cloud, category and scope.
        bound: 'high' or 'low' end of quoted ranges.

    Raises:
        InputError: a missing column, a bad cell, bands that are not contiguous from 0.
    """
    shipped = list(_shipped_egress(bound))
    if extra is None:
        return shipped
    user = _egress_from(read_user_rows(extra), bound)
    keys = {(t.cloud, t.route_class, t.scope) for t in user}
    return user + [t for t in shipped if (t.cloud, t.route_class, t.scope) not in keys]


def find_price(gpu: str, cloud: str, region: str | None = None, pricing_model: str = "on-demand",
               prices: Iterable[GpuPrice] | None = None, *, zone: str | None = None,
               gpus_per_node: int | None = None, price_date: str | None = None) -> GpuPrice:
    """The price per GPU-hour for ``gpu`` at (cloud, region[, zone]) under ``pricing_model``: the user's rows
    first, else the newest consistent catalog snapshot, nodes of ``gpus_per_node`` GPUs first, then the cheapest.

    ``gpu`` is a GPU name or alias ('H100', 'A100-80GB'), resolved through the catalog; ``prices`` defaults to the
    shipped rows (:func:`load_gpu_prices`). The search: :func:`fleetplan.costmodels.prices.find_price`.

    Raises:
        UnknownNameError: unknown GPU or cloud.
        InputError: no row matches; the message lists the regions / pricing models that do have a price.
    """
    rows = list(load_gpu_prices() if prices is None else prices)
    gpu_name = resolve_name("gpu", gpu, set(load_gpu_specs()) | {p.gpu for p in rows})
    return _find_price(gpu_name, cloud, region, pricing_model, rows, zone=zone, gpus_per_node=gpus_per_node,
                       price_date=price_date)


__all__ = [
    "EGRESS_COLUMNS", "GPU_COLUMNS", "GPU_FILE_COLUMNS", "MODEL_COLUMNS", "MODEL_FILE_COLUMNS", "PRICE_COLUMNS",
    "PRICE_FILE_COLUMNS", "GpuSpec", "SkippedPriceRow", "find_price", "gpu_file_row", "model_file_row",
    "price_file_row",
    "get_gpu", "get_model", "load_aliases", "load_egress", "load_gpu_prices", "load_gpu_specs", "load_gpus",
    "load_models", "model_from_hf_config", "pcie_bytes_per_s", "price_gpu_to_catalog", "read_user_rows", "resolve_name",
    "skipped_price_rows",
]
