"""Refit the shipped roofline calibration (datasets/data/calibration/roofline.csv) to the shipped measurements.

Usage:
    .venv/bin/python benchmarks/calibrate_roofline.py            # fit (no held-out refits), write roofline.csv
    .venv/bin/python benchmarks/calibrate_roofline.py --held-out # also the held-out errors (slow), written to
                                                                 # datasets/data/calibration/held_out_errors.csv

The same as ``fleetplan calibrate --out datasets/data/calibration/roofline.csv``: the rows represent a current vLLM
(vLLM 0.11, ML.ENERGY v3's engine; the anchor framework), with GPU-family efficiencies and per-framework factors
fitted across the Splitwise profile, Argonne's vLLM runs, ML.ENERGY v2/v3 and TensorRT-LLM 0.9's static batches
(fleetplan.costmodels.calibration_fit). ``benchmarks/bench_calibration.py`` prints the goals. It also writes
datasets/data/calibration/roofline_frameworks.csv: the same fit's rows for every fitted engine and version (the
planner sizes an engine version other than vLLM 0.11 with them).
"""

from __future__ import annotations

import argparse
import sys

from fleetplan.cli.calibrate import calibrate
from fleetplan.datasets.calibration import FRAMEWORKS_FILE, shipped_calibration_path
from fleetplan.datasets.held_out import shipped_held_out_path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--held-out", action="store_true", help="also refit without each (model, GPU) group")
    args = ap.parse_args(argv)
    extra = ["--held-out", "--held-out-table", shipped_held_out_path()] if args.held_out else ["--no-held-out"]
    calibrate.main(["--out", shipped_calibration_path(), "--frameworks-out", shipped_calibration_path(FRAMEWORKS_FILE),
                    *extra], standalone_mode=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
