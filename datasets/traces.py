"""Request traces and the per-window demand the planner reads.

A :class:`Trace` holds one request per array element (arrival time, prompt and output length, optional model and
tenant). Readers turn the shipped traces and users' files into traces, one reader per format, all producing the same
record:

* :func:`read_azure_csv`: the Azure LLM inference trace 2023 (``TIMESTAMP,ContextTokens,GeneratedTokens``);
* :func:`read_mooncake_jsonl`: the Mooncake FAST'25 traces (``timestamp`` in ms, ``input_length``,
  ``output_length``, ``hash_ids``; the hash ids are dropped);
* :func:`read_generic_csv`: ``timestamp`` (seconds, or an ISO datetime), ``input_tokens``, ``output_tokens``,
  optional ``model`` and ``tenant``.

:func:`load_trace` takes a shipped name (see ``datasets/data/traces/catalog.csv``) or a path. Arrival times are
always seconds from the first request of the file.

:func:`trace_to_demand` cuts a trace into windows and gives one :class:`~fleetplan.costmodels.demand.Demand` per
model (or tenant). Day-long shapes come from :mod:`fleetplan.datasets.servegen` or :func:`read_day_curve_csv`;
:func:`day_curve_demand` joins such a curve with a trace's token mix (:func:`token_mix_from_trace`).
:func:`synthetic_trace` draws a seeded Poisson trace for tests; it is marked ``synthetic=True`` everywhere.
"""

from __future__ import annotations

import csv
import functools
import importlib.resources
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from fleetplan.costmodels.arrivals import peak_rate_factor
from fleetplan.costmodels.demand import Demand, TokenMix, WindowDemand
from fleetplan.costmodels.queueing import lognormal_sigma
from fleetplan.errors import InputError, UnknownNameError, check_range
from fleetplan.fileio import parse_json

#: Largest token count accepted per request; the same bound as :class:`~fleetplan.costmodels.demand.TokenMix`.
MAX_TOKENS_PER_REQUEST = 2_000_000
#: Longest trace accepted, seconds (366 days): a longer span means the timestamps are not in seconds.
MAX_TRACE_SPAN_S = 366 * 86400.0
#: Seconds per unit of a numeric timestamp column of :func:`read_generic_csv`, by column name: ``timestamp_ms``
#: gives the unit, plain ``timestamp`` means seconds (then checked by the implied rate below).
TIMESTAMP_UNITS_S: dict[str, float] = {"timestamp": 1.0, "timestamp_s": 1.0, "timestamp_ms": 1e-3,
                                       "timestamp_us": 1e-6}
#: A plain numeric ``timestamp`` column read as seconds is refused when its requests span more than a day at a
#: mean rate below this (req/s): the shape of millisecond timestamps read as seconds (issue 28: 99,750 s at
#: 0.004 req/s). A sanity bound, not a fact about any workload; ``timestamp_s`` states seconds and skips it.
MIN_IMPLIED_RATE_REQ_PER_S = 0.01
#: A plain numeric ``timestamp`` read as seconds is refused at or above this: 1e11 s after 1970 is the year 5138, so
#: such values are epoch milliseconds (1.7e12 in 2023) or microseconds. A sanity bound; ``timestamp_s`` skips it.
MAX_EPOCH_S = 1e11
#: Window lengths :func:`trace_to_demand` accepts, seconds (1 minute to 1 hour).
MIN_WINDOW_S, MAX_WINDOW_S = 60.0, 3600.0
#: Group key used when the trace has none of the grouping columns.
ALL = "all"

_TRACES_DIR = ("data", "traces")


def _as_str_array(values: Sequence | np.ndarray | None) -> np.ndarray | None:
    if values is None:
        return None
    arr = np.asarray(values, dtype=object)
    return arr


@dataclass(frozen=True, eq=False)
class Trace:
    """A request trace: one request per array element, in arrival order.

    Attributes:
        arrival_s: float64 array (n,), arrival time of each request in seconds from the trace start, non-decreasing.
        input_tokens: int64 array (n,), prompt length per request, tokens (1..2,000,000).
        output_tokens: int64 array (n,), generated length per request, tokens (1..2,000,000).
        model: object array (n,) of model names, or None when the trace has no model column.
        tenant: object array (n,) of tenant names, or None when the trace has no tenant column.
        name: short name shown in reports ('azure-conv', a file stem, 'synthetic-poisson-...').
        source: where the requests come from (file and upstream URL, or the generator and its seed).
        synthetic: True when a generator made the arrivals; reports label such traces as synthetic.
        start_datetime: wall-clock time of the first request (ISO string) when the file gives one, else None.

    The arrays are made read-only, so a trace can be shared (and cached) safely.

    Raises:
        InputError: arrays of different lengths, no requests, timestamps out of order or negative, token counts
            that are not whole numbers in 1..2,000,000. The error names the row (1-based element index) and field.
    """

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    model: np.ndarray | None = None
    tenant: np.ndarray | None = None
    name: str = ""
    source: str = ""
    synthetic: bool = False
    start_datetime: str | None = None

    def __post_init__(self) -> None:
        arrays = {
            "arrival_s": np.asarray(self.arrival_s, dtype=np.float64),
            "input_tokens": np.asarray(self.input_tokens),
            "output_tokens": np.asarray(self.output_tokens),
        }
        where = self.name or "trace"
        for f in ("input_tokens", "output_tokens"):
            _check_tokens(arrays[f], field=f, source=where)
            arrays[f] = arrays[f].astype(np.int64)
        _check_arrivals(arrays["arrival_s"], field="arrival_s", source=where)
        n = len(arrays["arrival_s"])
        for f in ("model", "tenant"):
            v = _as_str_array(getattr(self, f))
            if v is not None:
                arrays[f] = v
        for f, arr in arrays.items():
            if arr.ndim != 1 or len(arr) != n:
                raise InputError(f"has shape {arr.shape}, expected ({n},) like arrival_s", source=where, field=f)
            arr.setflags(write=False)
            object.__setattr__(self, f, arr)

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def span_s(self) -> float:
        """Seconds from the first to the last arrival."""
        return float(self.arrival_s[-1] - self.arrival_s[0])

    def window(self, start_s: float, end_s: float) -> Trace:
        """The requests arriving in [start_s, end_s), with arrival times shifted so that start_s becomes 0.

        Raises InputError if no request falls in the interval.
        """
        lo, hi = np.searchsorted(self.arrival_s, [start_s, end_s], side="left")
        if hi <= lo:
            raise InputError(f"no request arrives in [{start_s:g} s, {end_s:g} s); the trace spans "
                             f"{self.arrival_s[0]:g}..{self.arrival_s[-1]:g} s", source=self.name, field="window")
        sl = slice(int(lo), int(hi))
        return Trace(self.arrival_s[sl] - start_s, self.input_tokens[sl], self.output_tokens[sl],
                     None if self.model is None else self.model[sl], None if self.tenant is None else self.tenant[sl],
                     name=f"{self.name}[{start_s:g}s,{end_s:g}s)", source=self.source, synthetic=self.synthetic)

    def time_scaled(self, rate_factor: float) -> Trace:
        """The same requests with inter-arrival times divided by ``rate_factor`` (2.0 doubles the request rate)."""
        if not (isinstance(rate_factor, int | float) and math.isfinite(rate_factor) and rate_factor > 0):
            raise InputError(f"rate factor {rate_factor!r} must be a positive number", field="rate_factor",
                             value=rate_factor)
        return Trace(self.arrival_s / rate_factor, self.input_tokens, self.output_tokens, self.model, self.tenant,
                     name=f"{self.name} x{rate_factor:g} rate", source=self.source, synthetic=self.synthetic)


# --------------------------------------------------------------------------------------------------------------
# Validation shared by the record and the readers (the readers pass the file name, so errors name the file).


def _first(mask: np.ndarray) -> int | None:
    idx = np.flatnonzero(mask)
    return int(idx[0]) if len(idx) else None


def _row(i: int, rows: np.ndarray | None) -> int:
    return int(rows[i]) if rows is not None else i + 1


def _check_tokens(values: np.ndarray, *, field: str, source: str, rows: np.ndarray | None = None,
                  shown_field: str | None = None) -> None:
    shown = shown_field or field
    if values.dtype == object or values.dtype.kind not in "iuf":
        try:
            values = values.astype(np.float64)
        except (TypeError, ValueError):
            raise InputError("token counts must be numbers", source=source, field=shown) from None
    v = values.astype(np.float64)
    if len(v) == 0:
        raise InputError("the trace has no requests; give at least one row", source=source, field=shown)
    i = _first(~np.isfinite(v))
    if i is not None:
        raise InputError(f"{values[i]!r} is not a token count; fill the cell with a whole number of tokens or drop "
                         "the row", source=source, row=_row(i, rows), field=shown, value=values[i])
    i = _first(v != np.round(v))
    if i is not None:
        raise InputError(f"{v[i]:g} is not a whole number of tokens; give integer token counts", source=source,
                         row=_row(i, rows), field=shown, value=v[i])
    i = _first((v < 1) | (v > MAX_TOKENS_PER_REQUEST))
    if i is not None:
        raise InputError(f"{v[i]:g} tokens is outside 1..{MAX_TOKENS_PER_REQUEST:,}; give tokens per request "
                         "(drop rows of failed requests with no tokens)", source=source, row=_row(i, rows),
                         field=shown, value=v[i])


def _check_arrivals(t: np.ndarray, *, field: str, source: str, rows: np.ndarray | None = None,
                    shown_field: str | None = None) -> None:
    shown = shown_field or field
    if len(t) == 0:
        raise InputError("the trace has no requests; give at least one row", source=source, field=shown)
    i = _first(~np.isfinite(t))
    if i is not None:
        raise InputError("the timestamp is missing or not a number; fill it or drop the row", source=source,
                         row=_row(i, rows), field=shown, value=t[i])
    i = _first(np.diff(t) < 0)
    if i is not None:
        raise InputError(f"timestamps out of order: this row is earlier than the row before it "
                         f"({t[i + 1]:g} s < {t[i]:g} s); sort the file by timestamp", source=source,
                         row=_row(i + 1, rows), field=shown, value=t[i + 1])
    i = _first(t < 0)
    if i is not None:
        raise InputError(f"arrival time {t[i]:g} s is negative; times count seconds from the trace start",
                         source=source, row=_row(i, rows), field=shown, value=t[i])
    if t[-1] - t[0] > MAX_TRACE_SPAN_S:
        raise InputError(f"the trace spans {t[-1] - t[0]:g} s, more than 366 days; timestamps must be seconds "
                         "(divide milliseconds by 1000)", source=source, row=len(t) if rows is None else int(rows[-1]),
                         field=shown, value=t[-1])


# --------------------------------------------------------------------------------------------------------------
# Readers


def _read_csv_frame(path: Path, display: str) -> pd.DataFrame:
    if path.is_dir():
        raise InputError(f"{path} is a folder, not a file; give the path of a CSV file", source=display)
    if not path.is_file():
        raise InputError(f"file not found: {path}; check the path", source=display)
    try:
        _check_csv_shape(path, display)
    except csv.Error as exc:  # a NUL byte, an unterminated quote at the end
        raise InputError(f"not a readable CSV file ({exc}); save it as comma-separated UTF-8 text",
                         source=display) from None
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except pd.errors.EmptyDataError:
        raise InputError("the file is empty; give a header row and at least one request", source=display) from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise InputError(f"not a readable CSV file ({exc}); save it as comma-separated UTF-8 text",
                         source=display) from None
    df.columns = [str(c).strip() for c in df.columns]
    return df


def _check_csv_shape(path: Path, display: str) -> None:
    """Raise InputError when the header names a column twice or a row's cells do not match the header's columns
    (csv.Error when the file is no CSV)."""
    with path.open(encoding="utf-8", errors="replace", newline="") as f:
        rows = csv.reader(f)
        header = [c.strip().lower() for c in next(rows, [])]
        # pandas renames a repeated header ('timestamp', 'timestamp.1') and reads the first: refuse it instead
        twice = sorted({c for c in header if c and header.count(c) > 1})
        if twice:
            raise InputError(f"the header names column {twice[0]!r} twice; keep one", source=display,
                             field=twice[0])
        # pandas reads rows with one cell more than the header by taking the first column as the index (every
        # column shifted by one: '0,100,10,5' under 'timestamp,input_tokens,output_tokens' read 100 as the time)
        # and fills missing cells with empty ones: a row must have the header's cells (blank lines are skipped,
        # as pandas does, and not counted)
        n = 0
        for cells in rows:
            if not cells:
                continue
            n += 1
            if len(cells) != len(header):
                more = len(cells) > len(header)
                raise InputError(f"{len(cells)} cells but the header has {len(header)} columns "
                                 f"({', '.join(header)}); "
                                 + ("remove the extra cells" if more else "give a value in every column"),
                                 source=display, row=n, value=",".join(cells))


def _require_columns(df: pd.DataFrame, required: Sequence[str], display: str, fmt: str) -> dict[str, str]:
    """Map each required column (case-insensitive) to its name in ``df``; raise InputError naming what is missing."""
    lower = {c.lower(): c for c in df.columns}
    found = {}
    for col in required:
        if col.lower() not in lower:
            raise InputError(f"missing column '{col}'; the {fmt} format needs the columns {', '.join(required)} "
                             f"(found: {', '.join(df.columns) or 'none'})", source=display, field=col)
        found[col] = lower[col.lower()]
    if df.empty:
        raise InputError("the trace has no requests (header only); add at least one row", source=display)
    return found


def _numbers(df: pd.DataFrame, col: str, display: str, what: str) -> np.ndarray:
    raw = df[col].astype(str).str.strip()
    vals = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64)
    i = _first(np.isnan(vals))
    if i is not None:
        shown = raw.iloc[i]
        problem = "is empty" if shown == "" else f"{shown!r} is not a number"
        raise InputError(f"{problem}; give {what}", source=display, row=i + 1, field=col, value=shown)
    return vals


def _timestamps(raw: pd.Series, display: str, field: str, want: str) -> tuple[np.ndarray, str]:
    """Parse ISO 8601 datetimes ('T' or space, any number of fractional digits; with a UTC offset or 'Z' on any
    row, all rows are read as UTC). Return (seconds since the first row, ISO start). ``want`` is the format hint
    for the error naming the first unparseable row."""
    s = raw.astype(str).str.strip()
    parsed = pd.to_datetime(s, format="ISO8601", errors="coerce",
                            utc=bool(s.str.contains(r"[+-]\d\d:?\d\d$|Z$", regex=True).any()))
    i = _first(parsed.isna().to_numpy())
    if i is not None:
        raise InputError(f"{s.iloc[i]!r} is not a timestamp; use {want}", source=display, row=i + 1, field=field,
                         value=s.iloc[i])
    ns = parsed.to_numpy().astype("datetime64[ns]").astype(np.int64) if parsed.dt.tz is None else \
        parsed.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy().astype("datetime64[ns]").astype(np.int64)
    seconds = (ns - ns[0]) / 1e9
    return seconds.astype(np.float64), parsed.iloc[0].isoformat()


def _finish(display: str, t: np.ndarray, tin: np.ndarray, tout: np.ndarray, fields: tuple[str, str, str],
            rows: np.ndarray | None = None, **kw) -> Trace:
    _check_arrivals(t, field="arrival_s", shown_field=fields[0], source=display, rows=rows)
    _check_tokens(tin, field="input_tokens", shown_field=fields[1], source=display, rows=rows)
    _check_tokens(tout, field="output_tokens", shown_field=fields[2], source=display, rows=rows)
    return Trace(t - t[0], tin.astype(np.int64), tout.astype(np.int64), **kw)


def _resolve(path_or_name: str | Path, expected_format: str) -> tuple[Path, str, dict]:
    """A shipped trace name of the right format -> (path, display, catalog row); else a user path."""
    name = str(path_or_name)
    cat = _catalog()
    if name in cat:
        row = cat[name]
        if row["format"] != expected_format:
            raise InputError(f"trace {name!r} is a {row['format']} file; read it with load_trace({name!r})",
                             source=name)
        return _shipped_path(row["file"]), f"{name} ({Path(row['file']).name})", row
    return Path(path_or_name), str(path_or_name), {}


def read_azure_csv(path_or_name: str | Path) -> Trace:
    """Read an Azure LLM inference trace (2023 format) into a :class:`Trace`.

    Columns ``TIMESTAMP`` (``YYYY-MM-DD HH:MM:SS.fffffff``, 7 fractional digits, 100 ns ticks; a 2024-style
    ``+00:00`` offset is also accepted), ``ContextTokens`` (prompt tokens), ``GeneratedTokens`` (output tokens).
    Arrival times become seconds from the first request; ``start_datetime`` keeps the first TIMESTAMP.
    Source: https://github.com/Azure/AzurePublicDataset (AzureLLMInferenceDataset2023.md).

    Args:
        path_or_name: a file path, or 'azure-conv' / 'azure-code' for the shipped files.

    Raises:
        InputError: file missing or unreadable, a column missing, no rows, a bad number or timestamp, timestamps
            out of order (each naming the file, the 1-based data row and the column).
    """
    path, display, row = _resolve(path_or_name, "azure-csv")
    df = _read_csv_frame(path, display)
    cols = _require_columns(df, ("TIMESTAMP", "ContextTokens", "GeneratedTokens"), display, "Azure trace CSV")
    t, start = _timestamps(df[cols["TIMESTAMP"]], display, cols["TIMESTAMP"], "YYYY-MM-DD HH:MM:SS.fffffff")
    tin = _numbers(df, cols["ContextTokens"], display, "the prompt length in tokens")
    tout = _numbers(df, cols["GeneratedTokens"], display, "the output length in tokens")
    return _finish(display, t, tin, tout, (cols["TIMESTAMP"], cols["ContextTokens"], cols["GeneratedTokens"]),
                   name=row.get("name", path.stem), source=row.get("source", str(path_or_name)),
                   synthetic=row.get("synthetic", False), start_datetime=start)


def read_mooncake_jsonl(path_or_name: str | Path) -> Trace:
    """Read a Mooncake trace (JSON Lines, one request per line) into a :class:`Trace`.

    Fields ``timestamp`` (milliseconds from the trace start), ``input_length``, ``output_length`` (tokens);
    ``hash_ids`` (prefix-cache block ids) is not kept. Blank lines are skipped; rows in errors are line numbers.
    Source: https://github.com/kvcache-ai/Mooncake (FAST25-release/README.md).

    Args:
        path_or_name: a file path, or 'mooncake-conversation' / 'mooncake-synthetic' for the shipped files.

    Raises:
        InputError: file missing, a line that is not a JSON object, a missing field, bad numbers, no requests,
            timestamps out of order (naming the file, the line and the field).
    """
    path, display, row = _resolve(path_or_name, "mooncake-jsonl")
    if not path.is_file():
        raise InputError(f"file not found: {path}; check the path", source=display)
    fields = ("timestamp", "input_length", "output_length")
    cols: list[list[float]] = [[], [], []]
    lines: list[int] = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            obj = parse_json(line, source=display, row=lineno, what="JSON object on each line")
            if not isinstance(obj, dict):
                raise InputError("each line must be a JSON object with timestamp, input_length, output_length",
                                 source=display, row=lineno)
            for k, f in enumerate(fields):
                if f not in obj:
                    raise InputError(f"missing field '{f}'; each line needs {', '.join(fields)}", source=display,
                                     row=lineno, field=f)
                v = obj[f]
                if isinstance(v, bool) or not isinstance(v, int | float):
                    raise InputError(f"{v!r} is not a number", source=display, row=lineno, field=f, value=v)
                cols[k].append(float(v))
            lines.append(lineno)
    if not lines:
        raise InputError("the trace has no requests; give at least one line", source=display)
    rows = np.asarray(lines)
    t = np.asarray(cols[0], dtype=np.float64) / 1000.0
    return _finish(display, t, np.asarray(cols[1]), np.asarray(cols[2]), fields, rows=rows,
                   name=row.get("name", path.stem), source=row.get("source", str(path_or_name)),
                   synthetic=row.get("synthetic", False))


def read_generic_csv(path: str | Path) -> Trace:
    """Read a CSV trace with columns ``timestamp``, ``input_tokens``, ``output_tokens`` and optional ``model``,
    ``tenant`` (header names are case-insensitive; other columns are ignored).

    ``timestamp`` is either numbers of seconds (any origin, e.g. Unix time) or ISO datetimes
    (``2024-05-01T12:00:00.5``, optionally with a UTC offset); arrival times become seconds from the first row. A
    numeric column may give its unit in its name instead (:data:`TIMESTAMP_UNITS_S`: ``timestamp_ms``,
    ``timestamp_us``, ``timestamp_s``); plain ``timestamp`` numbers whose implied rate looks like milliseconds read
    as seconds (:data:`MIN_IMPLIED_RATE_REQ_PER_S`) are refused.

    Raises:
        InputError: file missing, a required column missing, no rows, a bad number, timestamp, or empty
            model/tenant cell, timestamps out of order, a span over 366 days (timestamps in ms), each naming the file,
            the 1-based data row and the column.
    """
    display = str(path)
    path = Path(path)
    df = _read_csv_frame(path, display)
    lower_cols = {c.lower() for c in df.columns}
    given = [c for c in TIMESTAMP_UNITS_S if c in lower_cols]
    if len(given) > 1:
        raise InputError(f"two timestamp columns ({', '.join(given)}); keep one", source=display, field=given[1])
    ts_col = given[0] if given else "timestamp"
    cols = _require_columns(df, (ts_col, "input_tokens", "output_tokens"), display, "trace CSV")
    cols["timestamp"] = cols[ts_col]
    ts = df[cols["timestamp"]].astype(str).str.strip()
    numeric = pd.to_numeric(ts, errors="coerce")
    if numeric.notna().all():
        t = numeric.to_numpy(dtype=np.float64) * TIMESTAMP_UNITS_S[ts_col]
        start = None
        span_s = float(t[-1] - t[0]) if len(t) else 0.0
        slow = 86400 < span_s <= MAX_TRACE_SPAN_S and (len(t) - 1) / span_s < MIN_IMPLIED_RATE_REQ_PER_S
        if ts_col == "timestamp" and len(t) and float(np.abs(t).max()) >= MAX_EPOCH_S:
            raise InputError(f"read as seconds, timestamp {float(np.abs(t).max()):.0f} is after the year 5000, the "
                             "shape of epoch milliseconds (or microseconds) read as seconds; name the column "
                             "timestamp_ms (timestamp_us) if they are, or timestamp_s if seconds are right",
                             source=display, field=cols["timestamp"], value=float(np.abs(t).max()))
        if ts_col == "timestamp" and slow:
            raise InputError(f"read as seconds, the {len(t):,} requests span {span_s:,.0f} s "
                             f"({span_s / 86400:.1f} days) at {(len(t) - 1) / span_s:.3g} req/s, the shape of "
                             "milliseconds read as seconds; name the column timestamp_ms if they are milliseconds, "
                             "or timestamp_s if seconds are right", source=display, field=cols["timestamp"],
                             value=float(t[-1]))
    elif numeric.notna().any() and ts.str.fullmatch(r"-?\d+(\.\d*)?").iloc[0]:
        at = int(np.argmax(numeric.isna().to_numpy()))  # the first text timestamp (some are numbers, not all)
        raise InputError(f"{ts.iloc[at]!r} is not a number of seconds; use one timestamp format in the whole column",
                         source=display, row=at + 1, field=cols["timestamp"], value=ts.iloc[at])
    else:
        t, start = _timestamps(ts, display, cols["timestamp"],
                               "seconds or an ISO datetime (YYYY-MM-DDTHH:MM:SS)")
    tin = _numbers(df, cols["input_tokens"], display, "the prompt length in tokens")
    tout = _numbers(df, cols["output_tokens"], display, "the output length in tokens")
    extra: dict[str, np.ndarray | None] = {}
    lower = {c.lower(): c for c in df.columns}
    for f in ("model", "tenant"):
        if f in lower:
            vals = df[lower[f]].astype(str).str.strip()
            i = _first((vals == "").to_numpy())
            if i is not None:
                raise InputError(f"empty {f}; give every row a {f} name or drop the column", source=display,
                                 row=i + 1, field=lower[f])
            extra[f] = vals.to_numpy(dtype=object)
        else:
            extra[f] = None
    return _finish(display, t, tin, tout, (cols["timestamp"], cols["input_tokens"], cols["output_tokens"]),
                   model=extra["model"], tenant=extra["tenant"], name=path.stem, source=display,
                   start_datetime=start)


# --------------------------------------------------------------------------------------------------------------
# Shipped catalog


def _shipped_path(rel: str) -> Path:
    res = importlib.resources.files("fleetplan.datasets").joinpath(*_TRACES_DIR, *rel.split("/"))
    return Path(str(res))


@functools.cache
def _catalog() -> dict[str, dict]:
    """The shipped traces: ``datasets/data/traces/catalog.csv`` (name, file, format, synthetic, license, source)."""
    res = importlib.resources.files("fleetplan.datasets").joinpath(*_TRACES_DIR, "catalog.csv")
    with res.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return {r["name"]: {**r, "synthetic": r["synthetic"].strip().lower() == "true"} for r in rows}


@functools.cache
def _load_shipped(name: str) -> Trace:
    fmt = _catalog()[name]["format"]
    return read_azure_csv(name) if fmt == "azure-csv" else read_mooncake_jsonl(name)


def load_trace(name_or_path: str | Path) -> Trace:
    """Load a shipped trace by name or a user's file by extension.

    Shipped names: 'azure-conv', 'azure-code', 'mooncake-conversation', 'mooncake-synthetic' (see
    :func:`list_traces`); they are read once per process and shared (the arrays are read-only).
    Files: ``.jsonl`` is read as Mooncake JSON Lines; ``.csv`` as an Azure trace when its header has
    ``TIMESTAMP`` and ``ContextTokens``, else as a generic trace CSV.

    Raises:
        UnknownNameError: neither a shipped name nor a file name with a known extension (suggests close names).
        InputError: the file is missing or malformed (see the readers).
    """
    name = str(name_or_path)
    if name in _catalog():
        return _load_shipped(name)
    path = Path(name_or_path)
    ext = path.suffix.lower()
    if ext in (".jsonl", ".json", ".ndjson"):
        return read_mooncake_jsonl(path)
    if ext == ".csv":
        if path.is_file():
            with path.open(encoding="utf-8", errors="replace") as fh:
                header = {h.strip().lower() for h in fh.readline().split(",")}
            if "contexttokens" in header or "generatedtokens" in header:
                return read_azure_csv(path)  # names the Azure column that is missing, if one is
        return read_generic_csv(path)
    if path.is_file() or ext:
        raise InputError(f"cannot tell the trace format from the extension {ext or '(none)'!r}; use .csv or .jsonl, "
                         f"or a shipped trace name ({', '.join(_catalog())})", source=name)
    raise UnknownNameError("trace", name, _catalog())


def list_traces() -> list[dict]:
    """The shipped traces, one dict each: name, file, requests, span_s, license, source, synthetic, description.

    ``requests`` and ``span_s`` are measured from the files (the first call reads them, about 0.3 s).
    """
    out = []
    for name, row in _catalog().items():
        tr = _load_shipped(name)
        out.append({"name": name, "file": row["file"], "requests": len(tr), "span_s": round(tr.span_s, 3),
                    "license": row["license"], "source": row["source"], "synthetic": row["synthetic"],
                    "description": row["description"]})
    return out


# --------------------------------------------------------------------------------------------------------------
# Demand


def _token_mix(inp: np.ndarray, out: np.ndarray, where: str) -> TokenMix:
    try:
        return TokenMix(float(np.mean(inp)), float(np.percentile(inp, 95)), float(np.mean(out)),
                        float(np.percentile(out, 95)), lengths=(inp, out))
    except InputError as exc:
        raise InputError(f"{where}: {exc}", field=exc.field, value=exc.value) from None


def token_mix_from_trace(trace: Trace) -> TokenMix:
    """Token mix of all requests of ``trace``: mean and 95th percentile of prompt and output tokens.

    Percentiles use numpy's default linear interpolation between order statistics.
    """
    return _token_mix(trace.input_tokens, trace.output_tokens, f"trace {trace.name}")


def _check_window_length(window_length_s: float, low: float = MIN_WINDOW_S, high: float = MAX_WINDOW_S) -> float:
    return check_range(window_length_s, field="window_length_s", low=low, high=high, unit="s",
                       fix="give the window length in seconds (e.g. 3600 for one hour, 300 for five minutes)")


def peak_subinterval_s(window_length_s: float) -> float:
    """Length of the sub-intervals over which :func:`trace_to_demand` takes the peak rate, seconds.

    The window is cut into n = max(10, ceil(L / 60)) equal sub-intervals: 60 s when L is a multiple of 60 s and at
    least 10 minutes (60 per hour), L / 10 for shorter windows (6 s for a 1-minute window).
    """
    return window_length_s / max(10, math.ceil(window_length_s / 60.0 - 1e-9))


def _group_keys(trace: Trace, by: Sequence[str]) -> np.ndarray | None:
    for f in by:
        if f not in ("model", "tenant"):
            raise InputError(f"cannot group by {f!r}; use ('model',), ('tenant',), ('model', 'tenant') or ()",
                             field="by", value=f)
    cols = [getattr(trace, f) for f in by if getattr(trace, f) is not None]
    if not cols:
        return None
    if len(cols) == 1:
        return np.asarray(cols[0], dtype=str)
    return np.asarray(["/".join(map(str, parts)) for parts in zip(*cols, strict=True)], dtype=str)


def trace_to_demand(trace: Trace, window_length_s: float = 3600, by: Sequence[str] = ("model",)) -> dict[str, Demand]:
    """Cut ``trace`` into windows and measure each group's demand per window.

    Windows are [k L, (k+1) L) seconds from the trace start, k = 0 .. floor(last arrival / L); every group gets the
    same windows, so the planner can line models up. Per window:

    * ``rate_mean_req_per_s`` = requests in the window / L (a last, partly covered window is still divided by L);
    * ``rate_peak_req_per_s`` = the highest request count in one of the window's equal sub-intervals divided by the
      sub-interval length (:func:`peak_subinterval_s`: 60 s for windows of 10 minutes to 1 hour, L / 10 below);
    * ``tokens``: mean and 95th percentile (numpy linear interpolation) of the window's prompt and output tokens.

    A window in which the group has no request gets rate 0, peak 0, ``requests=0`` and the group's token mix over the
    whole trace (so the planner still knows what a request of that group looks like); the Demand's notes list them.

    Args:
        trace: the requests.
        window_length_s: window length L in seconds, 60..3600.
        by: grouping columns: ('model',), ('tenant',), ('model', 'tenant') (keys 'model/tenant') or () for one group.
            Columns the trace lacks are ignored; with none left the single group is keyed ``"all"``.

    Returns:
        {group key: Demand}, keys sorted. ``Demand.synthetic`` follows ``trace.synthetic``.

    Raises:
        InputError: window length out of range, unknown grouping column.
    """
    length = _check_window_length(window_length_s)
    keys = _group_keys(trace, tuple(by))
    t = trace.arrival_s
    n_sub = max(10, math.ceil(length / 60.0 - 1e-9))
    sub_s = length / n_sub
    n_win = int(math.floor(t[-1] / length)) + 1
    sub_idx = np.minimum(np.floor(t * n_sub / length).astype(np.int64), n_win * n_sub - 1)
    groups = {ALL: np.arange(len(t))} if keys is None else {
        k: np.flatnonzero(keys == k) for k in sorted(set(keys.tolist()))}
    label = f"{trace.name} (synthetic)" if trace.synthetic and "synthetic" not in trace.name else trace.name
    out: dict[str, Demand] = {}
    for key, idx in groups.items():
        g_sub = sub_idx[idx]
        g_win = g_sub // n_sub
        sub_counts = np.bincount(g_sub, minlength=n_win * n_sub).reshape(n_win, n_sub)
        counts = sub_counts.sum(axis=1)
        inp, outp = trace.input_tokens[idx], trace.output_tokens[idx]
        group_where = f"trace {trace.name}" + ("" if key == ALL else f", group {key}")
        whole = _token_mix(inp, outp, group_where)
        bounds = np.searchsorted(g_win, np.arange(n_win + 1))  # g_win is sorted because arrivals are
        windows, empty = [], []
        for w in range(n_win):
            lo, hi = bounds[w], bounds[w + 1]
            mean_rate = counts[w] / length
            if hi > lo:
                mix = _token_mix(inp[lo:hi], outp[lo:hi], f"{group_where}, window {w} ({w * length:g} s)")
            else:
                mix = whole
                empty.append(w)
            peak = max(float(sub_counts[w].max()) / sub_s, mean_rate)
            windows.append(WindowDemand(start_s=w * length, length_s=length, rate_mean_req_per_s=float(mean_rate),
                                        rate_peak_req_per_s=peak, tokens=mix, requests=int(counts[w])))
        notes = [f"peak rate over {sub_s:g}-s sub-intervals"]
        if empty:
            notes.append(f"windows with no requests (rate 0, whole-trace token mix): {empty}")
        source = f"trace {label}" + ("" if key == ALL else f", {'/'.join(by)} {key}") + f", {length:g}-s windows"
        out[key] = Demand(tuple(windows), length, source=source, synthetic=trace.synthetic, notes=tuple(notes))
    return out


def day_curve_demand(rates_req_per_s: Sequence[float] | np.ndarray, window_length_s: float, token_mix: TokenMix,
                     source: str, *, peaks_req_per_s: Sequence[float] | np.ndarray | None = None,
                     start_s: float = 0.0, synthetic: bool = False, notes: Sequence[str] = ()) -> Demand:
    """A Demand from a day curve (one mean rate per window, req/s) and one token mix for every window.

    Args:
        rates_req_per_s: mean request rate per window, req/s, in time order (no NaN: fill gaps first).
        window_length_s: window length, seconds (60..86400).
        token_mix: token lengths of every window's requests, e.g. :func:`token_mix_from_trace` of a trace.
        source: where the curve and the token mix come from (shown in reports).
        peaks_req_per_s: optional peak rate per window (defaults to the mean: a day curve has no finer data).
        start_s: start of the first window, seconds from midnight.

    Raises:
        InputError: NaN or negative rates, lengths that differ, window length out of range.
    """
    length = _check_window_length(window_length_s, 60.0, 86400.0)
    rates = np.asarray(rates_req_per_s, dtype=np.float64)
    peaks = rates if peaks_req_per_s is None else np.asarray(peaks_req_per_s, dtype=np.float64)
    if rates.ndim != 1 or len(rates) == 0 or peaks.shape != rates.shape:
        raise InputError(f"give one rate (and at most one peak) per window; got {rates.shape} rates and "
                         f"{peaks.shape} peaks", source=source, field="rates_req_per_s")
    i = _first(~np.isfinite(rates) | (rates < 0))
    if i is not None:
        raise InputError(f"rate {rates[i]!r} req/s in window {i} is not a non-negative number; interpolate or drop "
                         "missing windows first", source=source, row=i + 1, field="rates_req_per_s", value=rates[i])
    windows = tuple(
        WindowDemand(start_s=start_s + k * length, length_s=length, rate_mean_req_per_s=float(rates[k]),
                     rate_peak_req_per_s=float(max(peaks[k], rates[k])), tokens=token_mix)
        for k in range(len(rates)))
    return Demand(windows, length, source=source, synthetic=synthetic, notes=tuple(notes))


@dataclass(frozen=True, eq=False)
class DayCurve:
    """Mean request rate per window over a day (or part of one).

    Attributes:
        rates_req_per_s: float64 array (n,), req/s per window.
        window_length_s: seconds per window.
        start_s: start of the first window, seconds from midnight.
        source: file or series it came from.
    """

    rates_req_per_s: np.ndarray
    window_length_s: float
    start_s: float = 0.0
    source: str = ""

    def to_demand(self, token_mix: TokenMix, *, source: str | None = None) -> Demand:
        """This curve with ``token_mix`` in every window (see :func:`day_curve_demand`)."""
        return day_curve_demand(self.rates_req_per_s, self.window_length_s, token_mix, source or self.source,
                                start_s=self.start_s)


def read_day_curve_csv(path: str | Path) -> DayCurve:
    """Read a day curve: columns ``window_start_s`` (seconds from midnight, equally spaced, increasing) or ``hour``
    (consecutive whole hours, 1-hour windows), and ``rate_req_per_s`` (mean req/s in the window, >= 0).

    Raises:
        InputError: file missing, columns missing, fewer than two rows with window_start_s (the window length is their
            spacing), unequal spacing, bad or negative rates (naming the file, row and column).
    """
    display = str(path)
    df = _read_csv_frame(Path(path), display)
    lower = {c.lower(): c for c in df.columns}
    time_col = lower.get("window_start_s") or lower.get("hour")
    if time_col is None or "rate_req_per_s" not in lower:
        missing = "rate_req_per_s" if time_col else "window_start_s (or hour)"
        raise InputError(f"missing column '{missing}'; a day curve CSV needs window_start_s or hour, and "
                         f"rate_req_per_s (found: {', '.join(df.columns) or 'none'})", source=display,
                         field=missing.split(" ")[0])
    if df.empty:
        raise InputError("the day curve has no rows; give one row per window", source=display)
    rate_col = lower["rate_req_per_s"]
    rates = _numbers(df, rate_col, display, "the mean request rate in req/s")
    times = _numbers(df, time_col, display, "the window start")
    i = _first(rates < 0)
    if i is not None:
        raise InputError(f"rate {rates[i]:g} req/s is negative; give the mean request rate of the window",
                         source=display, row=i + 1, field=rate_col, value=rates[i])
    if time_col.lower() == "hour":
        if np.any(times != np.round(times)) or np.any(np.diff(times) != 1):
            i = _first(np.r_[False, np.diff(times) != 1] | (times != np.round(times)))
            raise InputError("hours must be consecutive whole numbers (0, 1, 2, ...)", source=display,
                             row=(i or 0) + 1, field=time_col, value=times[i or 0])
        length, start = 3600.0, float(times[0]) * 3600.0
    else:
        if len(times) < 2:
            raise InputError("give at least two windows, so that the window length is known (or use an hour column)",
                             source=display, field=time_col)
        steps = np.diff(times)
        i = _first(np.abs(steps - steps[0]) > 1e-6 * max(1.0, abs(steps[0])))
        if steps[0] <= 0 or i is not None:
            j = 1 if steps[0] <= 0 or i is None else i + 1
            raise InputError(f"window starts must increase in equal steps (first step {steps[0]:g} s); sort the rows "
                             "and give one row per window", source=display, row=j + 1, field=time_col, value=times[j])
        length, start = float(steps[0]), float(times[0])
    _check_window_length(length, 60.0, 86400.0)
    return DayCurve(rates, length, start, display)


# --------------------------------------------------------------------------------------------------------------
# Synthetic


def synthetic_trace(rate_req_per_s: float, duration_s: float, token_mix: TokenMix, seed: int,
                    model: str | None = None) -> Trace:
    """A seeded synthetic trace: Poisson arrivals and lognormal token lengths. Marked ``synthetic=True``.

    Arrivals: the count is Poisson(rate × duration) and the times are uniform on [0, duration), sorted, which is a
    homogeneous Poisson process. Token lengths: lognormal with the mix's mean and p95 (sigma from
    :func:`fleetplan.costmodels.queueing.lognormal_sigma`), rounded to whole tokens, clipped to 1..2,000,000.

    Args:
        rate_req_per_s: mean arrival rate, req/s (> 0).
        duration_s: trace length, seconds (> 0, at most 366 days).
        token_mix: target token lengths.
        seed: numpy random seed; the same seed gives the same trace.
        model: model name given to every request, or None for no model column.

    Raises:
        InputError: non-positive rate or duration, or a draw with no request (raise the rate or the duration).
    """
    for f, v in (("rate_req_per_s", rate_req_per_s), ("duration_s", duration_s)):
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
            raise InputError(f"{v!r} must be a positive number", field=f, value=v)
    if duration_s > MAX_TRACE_SPAN_S:
        raise InputError(f"duration {duration_s:g} s is over 366 days; give seconds", field="duration_s",
                         value=duration_s)
    rng = np.random.default_rng(seed)
    n = int(rng.poisson(rate_req_per_s * duration_s))
    if n == 0:
        raise InputError(f"a Poisson draw at {rate_req_per_s:g} req/s over {duration_s:g} s gave no request; raise "
                         "the rate or the duration", field="rate_req_per_s", value=rate_req_per_s)
    arrivals = np.sort(rng.uniform(0.0, duration_s, size=n))
    def lengths(mean: float, p95: float) -> np.ndarray:
        sigma = lognormal_sigma(mean, p95)
        mu = math.log(mean) - sigma * sigma / 2
        return np.clip(np.rint(rng.lognormal(mu, sigma, size=n)), 1, MAX_TOKENS_PER_REQUEST).astype(np.int64)

    tin = lengths(token_mix.input_tokens_mean, token_mix.input_tokens_p95)
    tout = lengths(token_mix.output_tokens_mean, token_mix.output_tokens_p95)
    name = f"synthetic-poisson-{rate_req_per_s:g}rps-seed{seed}"
    source = (f"synthetic: Poisson arrivals at {rate_req_per_s:g} req/s for {duration_s:g} s, lognormal tokens "
              f"(input mean {token_mix.input_tokens_mean:g} p95 {token_mix.input_tokens_p95:g}, output mean "
              f"{token_mix.output_tokens_mean:g} p95 {token_mix.output_tokens_p95:g}), seed {seed}")
    models = None if model is None else np.full(n, model, dtype=object)
    return Trace(arrivals, tin, tout, model=models, name=name, source=source, synthetic=True)


@functools.lru_cache(maxsize=32)
def trace_peak_factor(name_or_path: str, *, interval_s: float, quantile: float, window_s: float) -> tuple[float, str]:
    """(peak-to-mean rate factor, where it comes from) of a trace's arrivals: the ``quantile`` of its
    ``interval_s`` rates over each ``window_s`` window's mean rate
    (:func:`fleetplan.costmodels.arrivals.peak_rate_factor`), and a sentence naming the trace and its source.
    Raises what :func:`load_trace` and ``peak_rate_factor`` raise."""
    tr = load_trace(name_or_path)
    f = peak_rate_factor(tr.arrival_s, interval_s=interval_s, quantile=quantile, window_s=window_s)
    return f, (f"p{quantile * 100:g} of the {interval_s:g} s arrival rates / the {window_s:g} s window's mean in trace "
               f"{tr.name} ({tr.source})")
