"""The held-out errors of the roofline calibration per (model, GPU) group, framework and kind: the data behind
each roofline capacity's stated error (:mod:`fleetplan.costmodels.uncertainty`).

File ``datasets/data/calibration/held_out_errors.csv`` (written by ``fleetplan calibrate --held-out-table``, from
the shipped measurements; do not edit by hand): columns group ('<model> @ <GPU>'), model, gpu, framework, kind
(prefill, decode, tpot, tpot_mixed, e2e), n (observations), mdape_pct (median absolute percentage error of the
group's observations predicted by the constants refitted without the group), source.
"""

from __future__ import annotations

import csv
import functools
import importlib.resources
import os
import tempfile

from fleetplan.costmodels.uncertainty import HeldOutError
from fleetplan.errors import InputError

HELD_OUT_FILE = "held_out_errors.csv"
_COLUMNS = ("group", "model", "gpu", "framework", "kind", "n", "mdape_pct", "source")


def shipped_held_out_path() -> str:
    """Path of the shipped held_out_errors.csv."""
    return str(importlib.resources.files("fleetplan.datasets") / "data" / "calibration" / HELD_OUT_FILE)


def write_held_out_table(rows: list[tuple[str, str, str, int, float]], path: str, source: str) -> None:
    """Write ``rows`` ((group '<model> @ <GPU>', framework, kind, n, MdAPE %), as
    :attr:`fleetplan.datasets.measured.CalibrationReport.held_out`) to ``path`` atomically, each with ``source``."""
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
    with os.fdopen(fd, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(_COLUMNS)
        for group, fw, kind, n, mdape in rows:
            model, _, gpu = group.partition(" @ ")
            w.writerow([group, model, gpu, fw, kind, n, f"{mdape:.2f}", source])
    os.replace(tmp, path)
    load_held_out_table.cache_clear()


@functools.cache
def load_held_out_table(path: str | None = None) -> tuple[HeldOutError, ...]:
    """The held-out errors of ``path`` (default: the shipped file). Raises InputError naming the file, row and
    column for a missing column or a value that is not a number."""
    p = path or shipped_held_out_path()
    try:
        with open(p, newline="") as f:
            recs = list(csv.DictReader(f))
    except OSError as exc:
        raise InputError(f"cannot read the held-out error table: {exc.strerror}", source=p) from None
    out = []
    for i, r in enumerate(recs, start=1):
        missing = [c for c in _COLUMNS if not r.get(c)]
        if missing:
            raise InputError(f"column {missing[0]} is empty or missing; rewrite the file with fleetplan calibrate "
                             "--held-out-table", source=p, row=i, field=missing[0])
        try:
            n, mdape = int(r["n"]), float(r["mdape_pct"])
        except ValueError:
            raise InputError("n must be a whole number and mdape_pct a number", source=p, row=i,
                             field="mdape_pct", value=r["mdape_pct"]) from None
        out.append(HeldOutError(r["model"], r["gpu"], r["framework"], r["kind"], n, mdape / 100))
    return tuple(out)
