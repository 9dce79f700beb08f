"""Readers of the shipped tables about sharing a GPU or a node: interference coefficients between workload classes
(``data/interference/coefficients.csv``) and MIG GPU-instance profiles (``data/mig/profiles.csv``); provenance in
each folder's PROVENANCE.md."""

from __future__ import annotations

import csv
from importlib import resources
from pathlib import Path

from fleetplan.costmodels.hardware import MigProfile
from fleetplan.costmodels.interference import InterferenceTable
from fleetplan.errors import InputError, UnknownNameError, check_range


def _data_text(*parts: str) -> str:
    return resources.files("fleetplan.datasets").joinpath("data", *parts).read_text(encoding="utf-8")


def load_interference(path: str | Path | None = None) -> InterferenceTable:
    """Read an interference CSV (columns class_a, class_b, coefficient, source); the shipped defaults if no path.

    Raises InputError for a missing file, column or bad value (file and row named).
    """
    if path is None:
        text, src = _data_text("interference", "coefficients.csv"), "interference/coefficients.csv"
    else:
        p = Path(path)
        if not p.is_file():
            raise InputError(f"interference file {p} does not exist", source=str(p))
        text, src = p.read_text(encoding="utf-8"), str(p)
    rows = list(csv.DictReader(text.splitlines()))
    need = {"class_a", "class_b", "coefficient"}
    if not rows or not need <= set(rows[0]):
        raise InputError(f"needs columns {', '.join(sorted(need))}", source=src)
    coef: dict[tuple[str, str], float] = {}
    for i, r in enumerate(rows, start=1):
        coef[(r["class_a"].strip(), r["class_b"].strip())] = check_range(
            r["coefficient"], field="coefficient", low=0.0, high=0.9, source=src, row=i,
            fix="a throughput-loss fraction, e.g. 0.15")
    return InterferenceTable(coef, source=src)


def load_mig_profiles(gpu: str) -> list[MigProfile]:
    """MIG profiles of GPU type ``gpu``; raises UnknownNameError if the table has none for it."""
    rows = list(csv.DictReader(_data_text("mig", "profiles.csv").splitlines()))
    out = [MigProfile(r["gpu"], r["profile"], int(r["compute_slices"]), int(r["memory_slices"]),
                      float(r["memory_gb"]), int(r["max_instances"]),
                      tuple(int(s) for s in r["placements"].split(";")), r["source"]) for r in rows if r["gpu"] == gpu]
    if not out:
        raise UnknownNameError("MIG-capable GPU type", gpu, {r["gpu"] for r in rows})
    return out
