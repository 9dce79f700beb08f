"""Reader of datasets/data/ledger/assumptions.csv: the numbers the cost ledger needs beyond prices (bytes of text
per token, electricity price, PUE), each with its source (PROVENANCE.md beside the file)."""

from __future__ import annotations

import csv
import functools
import importlib.resources
import io

from fleetplan.costmodels.ledger import Assumption
from fleetplan.errors import InputError, check_range

_ASSUMPTIONS_FILE = "datasets/data/ledger/assumptions.csv"
#: Rows the ledger needs.
REQUIRED_ASSUMPTIONS = ("text_bytes_per_token", "electricity_usd_per_kwh", "pue")


@functools.lru_cache(maxsize=1)
def load_assumptions() -> dict[str, Assumption]:
    """The shipped ledger assumptions (datasets/data/ledger/assumptions.csv) keyed by name: text_bytes_per_token,
    electricity_usd_per_kwh, pue (and any other rows). Raises InputError on a malformed file or a missing row."""
    path = importlib.resources.files("fleetplan.datasets") / "data" / "ledger" / "assumptions.csv"
    # A Traversable's open() takes no newline argument: wrap its bytes as csv asks (newline="").
    with io.TextIOWrapper(path.open("rb"), encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    out = {}
    for i, r in enumerate(rows, start=1):
        v = check_range(r["value"], field="value", low=0, high=1e6, source=_ASSUMPTIONS_FILE, row=i)
        out[r["name"]] = Assumption(r["name"], v, r["unit"], r["source"], r["estimate"].strip().lower() == "yes")
    for need in REQUIRED_ASSUMPTIONS:
        if need not in out:
            raise InputError(f"no row named {need!r}; add it", source=_ASSUMPTIONS_FILE, field="name")
    return out


__all__ = ["REQUIRED_ASSUMPTIONS", "load_assumptions"]
