"""Goals of the calibration across models, GPUs and frameworks (issue "Capacity from reality", item 2).

Usage: .venv/bin/python benchmarks/bench_calibration.py   (about a minute: one refit per held-out group)

Fits the roofline to the shipped measurements (datasets/data/measured, the Splitwise profile), then leaves each
(model, GPU) group out in turn (all its frameworks' rows together), refits on the other groups and predicts it.
Prints the fitted constants, the median absolute percentage error (MdAPE) per kind on the fitting data and on the
held-out groups, per held-out group, and the goals (datasets.measured.GOALS): held-out MdAPE <= 15% for prefill time
and for decode step time (measured steps and steady-state time per output token).

The third goal, <= 25% on the highest rate meeting an SLO: no shipped source sweeps request rates under an SLO, but
ML.ENERGY v3's steady-state rows (vLLM 0.11 on H100, the shipped default engine) are measured (rate, TPOT) points:
with `batch` requests running, one replica produced output at a measured rate (output tokens/s ÷ mean output tokens
= req/s) at a measured median inter-token latency. The check asks fleetplan's capacity model
(costmodels.capacity.replica_capacity, the planner's own) for the highest rate whose median TPOT meets that
measured latency (SLO: TPOT p50 <= itl_p50, TTFT unconstrained at 120 s: the runs submitted every request at once
and publish no TTFT; token mix: the prompt set's mean (prompt_sets.csv) and the run's mean output as both mean and
p95) and compares it with the measured rate. Printed twice: with the constants fitted to every group, and with the
constants refitted without the row's (model, GPU) group (held out).
"""

from __future__ import annotations

import sys
import time

import numpy as np

from fleetplan.costmodels.calibration_fit import FitResult, fit_calibration
from fleetplan.costmodels.capacity import replica_capacity
from fleetplan.costmodels.demand import TokenMix
from fleetplan.costmodels.slo import SLO
from fleetplan.datasets.catalog.names import get_gpu
from fleetplan.datasets.measured import DEFAULT_FRAMEWORK, GOALS, calibrate, models, observations, steady_state_rates

RATE_GOAL_PCT = 25.0


def rate_check() -> tuple[float, float]:
    """Print the measured vs predicted sustained rates (module docstring); return the median absolute % errors
    (all groups fitted, held out)."""
    rows = steady_state_rates()
    obs = observations()
    full = fit_calibration(obs, anchor=DEFAULT_FRAMEWORK)
    held: dict[str, FitResult] = {}
    ms = models()
    errs: dict[str, list[float]] = {"fitted": [], "held out": []}
    print(f"{'model':<16}{'tp':>3}{'batch':>7}{'ITL p50 ms':>11}{'measured req/s':>16}{'fitted':>9}{'held out':>10}")
    for r in rows.itertuples():
        group = f"{r.model} @ {r.gpu}"
        if group not in held:
            held[group] = fit_calibration([o for o in obs if o.group != group], anchor=DEFAULT_FRAMEWORK,
                                          start=full)
        gpu, model = get_gpu(str(r.gpu)), ms[str(r.model)]
        mix = TokenMix(r.prompt_tokens, r.prompt_tokens, r.output_tokens, r.output_tokens)
        slo = SLO(ttft_s=120.0, tpot_s=float(r.itl_p50_s), tpot_percentile=50)
        out = []
        for name, fit in (("fitted", full), ("held out", held[group])):
            cap = replica_capacity(model, gpu, mix, slo, tp=int(r.tp), weight_dtype=str(r.weight_dtype),
                                   calib=fit.calibration(gpu, DEFAULT_FRAMEWORK))
            errs[name].append(100 * abs(cap.req_per_s - r.rate_req_per_s) / r.rate_req_per_s)
            out.append(cap.req_per_s)
        print(f"{r.model:<16}{r.tp:>3}{r.batch:>7.0f}{r.itl_p50_s * 1e3:>11.1f}{r.rate_req_per_s:>16.2f}"
              f"{out[0]:>9.2f}{out[1]:>10.2f}")
    return float(np.median(errs["fitted"])), float(np.median(errs["held out"]))


def main() -> int:
    t0 = time.perf_counter()
    rep = calibrate(held_out=True)
    print(f"{rep.n_observations} measurements, fitted and held out in {time.perf_counter() - t0:.0f} s")
    for fam, v in sorted(rep.fit.family.items()):
        print(f"  GPU family {fam}: prefill MFU {v['prefill_mfu']:.3f}, decode bandwidth eff. "
              f"{v['decode_bw_efficiency']:.3f}, host overhead scale {v['overhead_scale']:.2f}")
    for fw, v in sorted(rep.fit.framework.items()):
        print(f"  {fw:<22} step {v['decode_overhead_per_step_s'] * 1e3:.2f} ms, layer "
              f"{v['decode_overhead_per_layer_s'] * 1e6:.1f} us, seq {v['decode_overhead_per_seq_s'] * 1e6:.1f} us, "
              f"prefill {v['prefill_overhead_s'] * 1e3:.1f} ms")
    print(f"  all-reduce: bandwidth eff. {rep.fit.allreduce_bw_efficiency:.3f}, step latency "
          f"{rep.fit.allreduce_step_latency_s * 1e6:.2f} us")
    print(f"{'held-out group':<34}{'framework':<22}{'kind':<12}{'n':>4}{'MdAPE %':>9}")
    for g, f, k, n, e in rep.held_out:
        print(f"{g:<34}{f:<22}{k:<12}{n:>4}{e:>9.1f}")
    print("fit MdAPE %:      " + ", ".join(f"{k} {v:.1f}" for k, v in rep.fit_mdape_pct.items()))
    print("held-out MdAPE %: " + ", ".join(f"{k} {v:.1f}" for k, v in rep.held_out_mdape_pct.items()))
    ok = True
    for goal, (kinds, limit) in GOALS.items():
        v = rep.held_out_mdape_pct.get(goal)
        met = v is not None and v <= limit
        ok &= met
        shown = "n/a" if v is None else f"{v:.1f}%"
        print(f"goal {goal} ({', '.join(kinds)}): held-out MdAPE {shown} <= {limit:.0f}%: "
              f"{'met' if met else 'NOT met'}")
    fitted, held = rate_check()
    met = held <= RATE_GOAL_PCT
    ok &= met
    print(f"goal highest rate meeting a TPOT target (ML.ENERGY v3 steady state, vLLM 0.11 on H100): median absolute "
          f"error {fitted:.1f}% with all groups fitted, {held:.1f}% held out <= {RATE_GOAL_PCT:.0f}%: "
          f"{'met' if met else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
