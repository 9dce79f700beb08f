"""Errors raised by fleetplan. They share one root class, :class:`FleetplanError`.

Every user-facing error names what is wrong (file, row, field, value) and how to fix it; the CLI prints the message
and exits with code 2, without a traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class FleetplanError(Exception):
    """Root of every error fleetplan raises on purpose."""


class InputError(FleetplanError, ValueError):
    """Bad user input: a value out of range, a missing column, a malformed file.

    Args:
        message: what is wrong and how to fix it (kept as ``message``; ``str()`` prefixes source, row and field).
        source: file (or other origin) the value came from, if any.
        row: 1-based data row (header excluded) or line number, if any.
        field: the field or column name, if any.
        value: the offending value, if any.
    """

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        row: int | None = None,
        field: str | None = None,
        value: object = None,
    ) -> None:
        self.message = message
        self.source = source
        self.row = row
        self.field = field
        self.value = value
        where = []
        if source:
            where.append(str(source))
        if row is not None:
            where.append(f"row {row}")
        if field:
            where.append(f"field '{field}'")
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {message}" if prefix else message)


def _plural(noun: str) -> str:
    """English plural of a kind of name: 'GPU type' -> 'GPU types', 'ServeGen series' -> 'ServeGen series'."""
    if noun.endswith("series"):
        return noun
    return noun + "es" if noun.endswith(("s", "x", "ch", "sh")) else noun + "s"


class UnknownNameError(InputError, KeyError):
    """A name (GPU type, model, site, trace) that no catalog holds; the message suggests close names."""

    def __init__(self, kind: str, name: str, known: Iterable[str], *, source: str | None = None,
                 field: str | None = None) -> None:
        known = sorted(set(known))
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        if not close:
            lowered = {k.lower(): k for k in known}
            close = [lowered[k] for k in difflib.get_close_matches(name.lower(), list(lowered), n=3, cutoff=0.4)]
        hint = f"did you mean {' or '.join(repr(c) for c in close)}?" if close else (
            f"known {_plural(kind)}: {', '.join(known[:12])}{' ...' if len(known) > 12 else ''}" if known
            else f"there are no {_plural(kind)} to choose from")
        self.kind = kind
        self.name = name
        self.suggestions = close
        super().__init__(f"unknown {kind} {name!r}; {hint}", source=source, field=field, value=name)

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return Exception.__str__(self)


class InfeasibleError(FleetplanError):
    """A problem that has no feasible answer; the message explains which model, window or site and by how much."""


class SolverError(FleetplanError):
    """A solver backend failed or is not available."""


def check_range(value: float | str, *, field: str, low: float | None = None, high: float | None = None,
                unit: str = "", source: str | None = None, row: int | None = None, fix: str = "") -> float:
    """Return ``value`` as float if it is a finite number within [low, high], else raise :class:`InputError`.

    Catches negative, NaN, infinite and absurd values (for example a TTFT of 500 where seconds are expected).
    """
    import math

    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{value!r} is not a number{'; ' + fix if fix else ''}", source=source, row=row,
                         field=field, value=value) from None
    if math.isnan(v) or math.isinf(v):
        raise InputError(f"{value!r} is not a finite number{'; ' + fix if fix else ''}", source=source, row=row,
                         field=field, value=value)
    u = f" {unit}" if unit else ""
    if low is not None and v < low:
        raise InputError(f"{v:g}{u} is below the minimum {low:g}{u}{'; ' + fix if fix else ''}", source=source,
                         row=row, field=field, value=value)
    if high is not None and v > high:
        raise InputError(f"{v:g}{u} is above the maximum {high:g}{u}{'; ' + fix if fix else ''}", source=source,
                         row=row, field=field, value=value)
    return v
