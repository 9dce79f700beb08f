"""Rows of the shipped catalog files and of user additions, read the same way by every catalog (one module per
catalog: :mod:`.gpus`, :mod:`.models`, :mod:`.prices`, :mod:`.egress`; names and aliases in :mod:`.names`).

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
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal, overload

from fleetplan.errors import InputError, check_range
from fleetplan.fileio import parse_yaml

GB = 1e9  #: bytes per (decimal) GB, the unit of vendors and clouds


MIB = 2**20  #: bytes per MiB, the unit nvidia-smi reports memory in


TERA = 1e12


@dataclass(frozen=True)
class Rows:
    """Rows of one file: ``source`` names the file in messages; ``rows`` are (1-based data row, mapping) pairs."""

    source: str
    rows: tuple[tuple[int, dict[str, str]], ...]
    columns: tuple[str, ...]


def _data_text(*parts: str) -> str:
    return resources.files("fleetplan.datasets").joinpath("data", *parts).read_text(encoding="utf-8")


def _parse_csv_text(text: str, source: str) -> Rows:
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
    return Rows(source, tuple(rows), columns)


def shipped_rows(*parts: str) -> Rows:
    return _parse_csv_text(_data_text(*parts), "/".join(("datasets", "data", *parts)))


def read_user_rows(path: str | Path) -> Rows:
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
        return Rows(source, tuple(rows), tuple(columns))
    if p.suffix.lower() not in (".csv", ".txt", ""):
        raise InputError(f"unsupported file type {p.suffix!r}; give a .csv or .yaml file", source=source)
    return _parse_csv_text(text, source)


def require_columns(rows: Rows, required: Iterable[str], what: str) -> None:
    missing = [c for c in required if c not in rows.columns]
    if missing:
        raise InputError(f"missing column(s) {', '.join(missing)} for {what}; the header must include "
                         f"{', '.join(required)}", source=rows.source, field=missing[0])


NUMBER = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?")


@overload
def cell_number(row: dict[str, str], name: str, rows: Rows, i: int, *, required: Literal[True],
                 low: float | None = None, high: float | None = None, unit: str = "", fix: str = "",
                 leading: bool = False) -> float: ...


@overload
def cell_number(row: dict[str, str], name: str, rows: Rows, i: int, *, required: bool, low: float | None = None,
                 high: float | None = None, unit: str = "", fix: str = "", leading: bool = False) -> float | None: ...


def cell_number(row: dict[str, str], name: str, rows: Rows, i: int, *, required: bool, low: float | None = None,
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
        m = NUMBER.match(text)
        if m and text.lower() not in ("nan", "inf"):
            text = m.group(0)
    return check_range(text, field=name, low=low, high=high, unit=unit, source=rows.source, row=i, fix=fix)


def merge_rows(shipped: dict[str, Any], user: dict[str, Any], rename: Callable[[Any, str], Any]) -> dict[str, Any]:
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


@overload
def int_cell(row: dict[str, str], name: str, rows: Rows, i: int, *, required: Literal[True], low: float,
              high: float, fix: str) -> int: ...


@overload
def int_cell(row: dict[str, str], name: str, rows: Rows, i: int, *, required: bool, low: float, high: float,
              fix: str) -> int | None: ...


def int_cell(row: dict[str, str], name: str, rows: Rows, i: int, *, required: bool, low: float, high: float,
              fix: str) -> int | None:
    v = cell_number(row, name, rows, i, required=required, low=low, high=high, fix=fix)
    if v is None:
        return None
    if v != int(v):
        raise InputError(f"{v:g} is not a whole number; {fix}", source=rows.source, row=i, field=name, value=v)
    return int(v)


def per_unit(x: float | None, unit: float) -> float | None:
    return None if x is None else x / unit
