"""Fit the roofline efficiency constants to the measured Splitwise profile and write the calibration file.

Usage:
    .venv/bin/python benchmarks/calibrate_roofline.py            # fit, print MdAPE, write roofline.csv
    .venv/bin/python benchmarks/calibrate_roofline.py --check    # only print MdAPE of the shipped file

Data: Splitwise perf_model.csv (github.com/Mutinifni/splitwise-sim, MIT): Llama-2-70B on DGX A100-80GB and DGX H100,
TP 2/4/8, prompt_time and token_time (one decode step) by prompt size and batch size. The configurations kept are
those of ``fleetplan.datasets.profiles.splitwise_fit_rows`` (power-capped H100 and BLOOM left out; runs whose KV
cache cannot fit left out). The model record of Llama-2-70B comes from datasets/data/calibration/reference_models.csv.

Fit: scipy.optimize.least_squares on the relative errors (pred − measured)/measured of prefill and decode times
together (robust loss soft_l1 with f_scale 0.1: residuals beyond ~10% count linearly, so a few irregular runs — e.g.
batched prefills that are slower than one prompt of the same total length — do not drag the fit), within the bounds
of ``Calibration.BOUNDS``; one row per GPU type, plus a 'default' row fitted to both GPUs
pooled (used for GPU types the profile does not cover). Prints the median absolute percentage error (MdAPE) of
prefill and of decode time per GPU and TP and overall.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from importlib import resources

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from fleetplan.costmodels.calibration import Calibration
from fleetplan.datasets.calibration import load_calibration_table
from fleetplan.datasets.profiles import mdape_table, roofline_predictions, splitwise_fit_rows

NAMES = Calibration.parameter_names()
LOW = np.array([Calibration.BOUNDS[n][0] for n in NAMES])
HIGH = np.array([Calibration.BOUNDS[n][1] for n in NAMES])
# Typical magnitudes, so the optimizer sees well-scaled variables.
SCALE = np.array([0.5, 0.01, 0.8, 1e-4, 1e-4, 0.3, 1e-5])
START = np.array([0.5, 0.01, 0.8, 1e-4, 1e-4, 0.3, 5e-6])
SOURCE = ("least-squares fit on relative error to Splitwise perf_model.csv (github.com/Mutinifni/splitwise-sim "
          "@8f99e7dc, Llama-2-70B, TP 2/4/8) by benchmarks/calibrate_roofline.py")


def _calib(gpu: str, x: np.ndarray, source: str) -> Calibration:
    return Calibration(gpu=gpu, source=source, **{n: float(v) for n, v in zip(NAMES, x, strict=True)})


def _residuals(x: np.ndarray, rows: pd.DataFrame) -> np.ndarray:
    c = _calib("fit", np.clip(x, LOW, HIGH), "")
    pred = roofline_predictions(rows, {g: c for g in rows.gpu.unique()})
    pre = pred[pred.prefill_row]
    return np.concatenate([(pre.pred_prefill_s - pre.prompt_time_s) / pre.prompt_time_s,
                           (pred.pred_decode_s - pred.token_time_s) / pred.token_time_s])


def fit(rows: pd.DataFrame) -> np.ndarray:
    """Best constants for these rows (least squares on relative error, bounded)."""
    res = least_squares(_residuals, START, bounds=(LOW, HIGH), x_scale=SCALE, args=(rows,), method="trf",
                        loss="soft_l1", f_scale=0.1)
    return res.x


def _print_table(pred: pd.DataFrame, title: str) -> None:
    t = mdape_table(pred)
    print(title)
    print(f"{'gpu':<16}{'tp':>4}{'n prefill':>10}{'n decode':>9}{'MdAPE prefill %':>17}{'MdAPE decode %':>16}")
    for r in t.itertuples(index=False):
        print(f"{r.gpu:<16}{r.tp:>4}{r.n_prefill:>10}{r.n_decode:>9}{r.mdape_prefill_pct:>17.1f}"
              f"{r.mdape_decode_pct:>16.1f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only evaluate the shipped calibration file")
    ap.add_argument("--out", default=None, help="output CSV (default: the shipped datasets/data/calibration file)")
    args = ap.parse_args(argv)
    rows = splitwise_fit_rows()
    if args.check:
        table = load_calibration_table()
        _print_table(roofline_predictions(rows, {g: table.get(g, table["default"]) for g in rows.gpu.unique()}),
                     "Roofline vs Splitwise, shipped calibration")
        return 0
    calibs: dict[str, Calibration] = {}
    for gpu, sub in rows.groupby("gpu"):
        calibs[gpu] = _calib(gpu, fit(sub), SOURCE + f"; fitted to {len(sub)} {gpu} configurations")
    calibs["default"] = _calib("default", fit(rows), SOURCE + f"; fitted to all {len(rows)} configurations pooled "
                               "(A100 and H100), used for GPU types without a row")
    pred = roofline_predictions(rows, {g: calibs[g] for g in rows.gpu.unique()})
    _print_table(pred, "Roofline vs Splitwise, per-GPU calibration")
    _print_table(roofline_predictions(rows, {g: calibs["default"] for g in rows.gpu.unique()}),
                 "Roofline vs Splitwise, default (pooled) row")
    per = mdape_table(pred).set_index(["gpu", "tp"])
    out_rows = []
    for g, c in calibs.items():
        key = (g, "all") if g != "default" else ("all", "all")
        rec = {"gpu": g, **{n: f"{getattr(c, n):.6g}" for n in NAMES}}
        if g != "default":
            rec["mdape_prefill_pct"] = f"{per.loc[key, 'mdape_prefill_pct']:.1f}"
            rec["mdape_decode_pct"] = f"{per.loc[key, 'mdape_decode_pct']:.1f}"
        else:
            pooled = mdape_table(roofline_predictions(rows, {g2: c for g2 in rows.gpu.unique()}))
            rec["mdape_prefill_pct"] = f"{pooled.iloc[-1].mdape_prefill_pct:.1f}"
            rec["mdape_decode_pct"] = f"{pooled.iloc[-1].mdape_decode_pct:.1f}"
        rec["source"] = c.source
        out_rows.append(rec)
    out = args.out or str(resources.files("fleetplan.datasets") / "data" / "calibration" / "roofline.csv")
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(out), suffix=".tmp")
    with os.fdopen(fd, "w", newline="") as f:
        pd.DataFrame(out_rows).to_csv(f, index=False)
    os.replace(tmp, out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
