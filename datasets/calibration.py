"""Readers of datasets/data/calibration: the roofline efficiency constants (roofline.csv), the reference model
records they were fitted with (reference_models.csv), and idle board power as a fraction of TDP (power.csv).

The records and the math live in costmodels (:class:`fleetplan.costmodels.calibration.Calibration`,
:mod:`fleetplan.costmodels.energy`); this module only knows where the shipped files are and how to read them.
Sources of the numbers: PROVENANCE.md beside the files.
"""

from __future__ import annotations

import csv
import functools
import importlib.resources

from fleetplan.costmodels.calibration import DEFAULT_ROW, Calibration, calibration_for
from fleetplan.costmodels.energy import idle_fraction_for
from fleetplan.costmodels.hardware import GPU, Model
from fleetplan.errors import InputError, check_range
from fleetplan.fileio import atomic_path

#: The roofline constants' file name under datasets/data/calibration.
CALIBRATION_FILE = "roofline.csv"
#: The same constants for every fitted engine and version (``fleetplan calibrate --frameworks-out``).
FRAMEWORKS_FILE = "roofline_frameworks.csv"
_POWER_FILE = "datasets/data/calibration/power.csv"


def _data_dir():
    return importlib.resources.files("fleetplan.datasets") / "data" / "calibration"


def _read_rows(path: str | None, name: str) -> list[Calibration]:
    """The rows of a calibration CSV in the roofline.csv format: ``path``, else the shipped file ``name``. Raises
    InputError for a missing column or a bad value."""
    source = str(path) if path else f"datasets/data/calibration/{name}"
    f = open(path, newline="") if path else (_data_dir() / name).open(newline="")  # noqa: SIM115
    with f:
        rows = list(csv.DictReader(f))
    # decode_overhead_per_step_s came later: files written before it hold no such column (0 s).
    optional = {"decode_overhead_per_step_s"}
    need = ("gpu",) + tuple(n for n in Calibration.parameter_names() if n not in optional)
    if not rows or not set(need) <= set(rows[0]):
        missing = sorted(set(need) - set(rows[0] if rows else ()))
        raise InputError(f"calibration file has no rows or lacks columns {missing}; rerun "
                         "benchmarks/calibrate_roofline.py", source=source)
    out: list[Calibration] = []
    for i, r in enumerate(rows, start=1):
        try:
            vals = {k: float(r[k]) if r.get(k) not in (None, "") or k not in optional else 0.0
                    for k in Calibration.parameter_names()}
        except ValueError as e:
            raise InputError(f"not a number: {e}", source=source, row=i) from None
        try:
            out.append(Calibration(gpu=r["gpu"], source=r.get("source", ""), framework=r.get("framework", ""),
                                   **vals))
        except InputError as e:
            raise InputError(str(e), source=source, row=i, field=e.field, value=e.value) from None
    return out


@functools.lru_cache(maxsize=4)
def load_calibration_table(path: str | None = None) -> dict[str, Calibration]:
    """All rows of roofline.csv (the shipped file when ``path`` is None), keyed by GPU name.

    Raises InputError for a missing column, a bad value, or a file without a 'default' row.
    """
    out = {r.gpu: r for r in _read_rows(path, CALIBRATION_FILE)}
    if DEFAULT_ROW not in out:
        source = str(path) if path else f"datasets/data/calibration/{CALIBRATION_FILE}"
        raise InputError(f"calibration file has no '{DEFAULT_ROW}' row", source=source, field="gpu")
    return out


@functools.lru_cache(maxsize=2)
def load_framework_table(path: str | None = None) -> dict[tuple[str, str], Calibration]:
    """Rows of every fitted engine and version (the shipped roofline_frameworks.csv when ``path`` is None), keyed
    by (framework, GPU name); each framework has a 'default' row. The fit behind them pools the GPU families'
    efficiencies across engines and keeps each engine version's host overheads apart
    (:mod:`fleetplan.costmodels.calibration_fit`). Raises InputError as :func:`load_calibration_table`."""
    return {(r.framework, r.gpu): r for r in _read_rows(path, FRAMEWORKS_FILE)}


def calibration_for_engine(gpu: GPU, calib_file: str | None, framework: str) -> tuple[Calibration, str, str]:
    """The roofline row a replica of ``gpu`` running ``framework`` (an engine and version, e.g. 'vLLM 0.11') is
    sized with: (row, the file it comes from, a note on what it rests on, '' when none is due).

    * the row of roofline.csv (or the scenario's ``calib_file``) when it was fitted for ``framework``: no note;
    * else, without a scenario file, that framework's row in roofline_frameworks.csv (the GPU's, else its
      'default' row): no note (the capacity error's basis says where the framework was measured);
    * else the roofline.csv row, noting that ``framework`` is not in the calibration data and the row's own
      framework's constants are extrapolated to it.
    """
    row = load_calibration(gpu, calib_file)
    where = calib_file or f"the shipped calibration {CALIBRATION_FILE}"
    if not row.framework or row.framework == framework:
        return row, where, ""
    if calib_file is None:
        table = load_framework_table()
        own = table.get((framework, gpu.name)) or table.get((framework, DEFAULT_ROW))
        if own is not None:
            return own, f"the shipped calibration {FRAMEWORKS_FILE}", ""
    return row, where, f"{framework} is not in the calibration data: {row.framework}'s constants extrapolated to it"


def load_calibration(gpu: GPU | str | None = None, path: str | None = None) -> Calibration:
    """The calibration row of ``gpu`` (a GPU record or catalog name), or the 'default' row when that GPU type has
    no row of its own (or ``gpu`` is None); from roofline.csv (the shipped file when ``path`` is None)."""
    return calibration_for(load_calibration_table(path), gpu)


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


@functools.lru_cache(maxsize=1)
def load_idle_fractions() -> dict[str, float]:
    """Idle board power as a fraction of TDP (0..1), by GPU name ('default' for all others), from power.csv.

    Raises InputError for a value outside 0..1 or a file without a 'default' row.
    """
    with (_data_dir() / "power.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    out = {}
    for i, r in enumerate(rows, start=1):
        out[r["gpu"]] = check_range(r["idle_fraction_of_tdp"], field="idle_fraction_of_tdp", low=0.0, high=1.0,
                                    source=_POWER_FILE, row=i)
    if "default" not in out:
        raise InputError("power.csv has no 'default' row", source=_POWER_FILE, field="gpu")
    return out


def idle_fraction(gpu_name: str | None = None) -> float:
    """Idle fraction of TDP (0..1) for ``gpu_name`` from power.csv (the default row when it has none)."""
    return idle_fraction_for(load_idle_fractions(), gpu_name)


__all__ = ["CALIBRATION_FILE", "FRAMEWORKS_FILE", "calibration_for_engine", "idle_fraction", "load_calibration",
           "load_calibration_table", "load_framework_table", "load_idle_fractions", "shipped_calibration_path",
           "write_calibration_table", "load_reference_models"]


def write_calibration_table(rows: list[Calibration], path: str, extra: dict[str, dict[str, str]] | None = None) -> None:
    """Write ``rows`` in the roofline.csv format (columns gpu, the constants, framework, source, plus ``extra``
    columns per GPU name, e.g. the fit errors), atomically. Raises InputError when no row is named 'default'."""
    if not any(r.gpu == DEFAULT_ROW for r in rows):
        raise InputError(f"a calibration file needs a '{DEFAULT_ROW}' row", field="gpu")
    extra = extra or {}
    cols = ["gpu", *Calibration.parameter_names(), "framework"]
    cols += sorted({k for d in extra.values() for k in d})
    cols.append("source")
    with atomic_path(path, field="--out") as tmp, open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, cols, lineterminator="\n")
        w.writeheader()
        for r in rows:
            rec = {"gpu": r.gpu, "framework": r.framework, "source": r.source,
                   **{n: f"{getattr(r, n):.6g}" for n in Calibration.parameter_names()}, **extra.get(r.gpu, {})}
            w.writerow(rec)
    load_calibration_table.cache_clear()
    load_framework_table.cache_clear()


def shipped_calibration_path(name: str = CALIBRATION_FILE) -> str:
    """Path of the shipped roofline.csv (or ``name`` beside it, e.g. :data:`FRAMEWORKS_FILE`), for the calibration
    script that rewrites it."""
    return str(_data_dir() / name)
