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
constants refitted without the row's (model, GPU) group (held out). The capacity model sizes the default engine
(vLLM V1, the engine of these runs); until 2026-12-03 it sized prefill-first (replica_capacity's own default then):
16.0% fitted, 20.7% held out.

Issue 26's goals for the default engine: "vLLM 0.11 measurements held out by GPU (fit on one, predict the other
where data exists): decode step error <= 10%, no family's median bias beyond +/-8%". Printed: the median signed error
(bias; > 0: predicted slower than measured) and MdAPE per engine version and model family (the catalog name up to
its parameter count, costmodels.calibration_fit.model_family) of the leave-one-(model, GPU)-group-out predictions;
then the GPU hold-out (costmodels.calibration_fit.held_out_gpu_predictions: fit without the version's rows on one
GPU, predict them). The shipped vLLM 0.11 rows (ML.ENERGY v3) are all on H100, so that goal is reported as not
measurable, and the other versions' GPU hold-out is printed beside it. The issue measured the vLLM ~0.5 batch runs
on H100 biased +12% to +22% per family before per-version calibration existed.

Measured 2026-12-03 (`nice -n 5 .venv/bin/python benchmarks/bench_calibration.py`, 27 s wall on a loaded 2-core
machine; 540 measurements):
  held-out MdAPE: prefill time 13.2% (goal <= 15%: met), decode step time 10.2% (<= 15%: met);
  held out by (model, GPU) group, bias / MdAPE per version and family: vLLM 0.11 Llama-3.1 +3.6% / 7.7% (42 rows,
  all decode-step kinds); vLLM 0.5.4 Llama-3.1 -2.0% / 10.6%; vLLM 0.5.x (Argonne) Llama-2 +1.0% / 5.2%, Llama-3
  -0.7% / 5.5%; TensorRT-LLM 0.9 Llama-2 +6.4% / 6.8%, Mistral -12.9% / 14.3%; Splitwise Llama-2 -3.1% / 11.1%;
  vLLM 0.11 held out by GPU: not measurable (no second GPU with vLLM 0.11 data: all 42 rows on H100-SXM-80GB);
  the other versions held out by GPU: vLLM 0.5.4 Llama-3.1 -1.4% / 8.6% (decode steps), Argonne Llama-2 -1.3% /
  6.3%, Llama-3 -1.8% / 6.2%, TensorRT-LLM 0.9 Llama-2 +12.5% / 12.5%, Mistral -4.2% / 14.5%, Splitwise Llama-2
  -2.9% / 10.6% (decode steps +4.2% / 10.2%);
  highest rate meeting a TPOT target: 13.6% fitted, 19.7% held out (goal <= 25%: met).
"""

from __future__ import annotations

import math
import sys
import time

import numpy as np

from fleetplan.costmodels.calibration_fit import (
    FitResult,
    Observation,
    absolute_percentage_errors,
    fit_calibration,
    held_out_gpu_predictions,
    model_family,
)
from fleetplan.costmodels.capacity import replica_capacity
from fleetplan.costmodels.demand import TokenMix
from fleetplan.costmodels.slo import SLO
from fleetplan.datasets.catalog.names import get_gpu
from fleetplan.datasets.measured import (
    DEFAULT_FRAMEWORK,
    GOALS,
    CalibrationReport,
    calibrate,
    models,
    observations,
    steady_state_rates,
)

RATE_GOAL_PCT = 25.0
#: The issue's goals for the default engine's measurements held out by GPU: decode step MdAPE and the largest
#: median signed bias of a model family, %.
GPU_HELD_OUT_DECODE_GOAL_PCT = 10.0
FAMILY_BIAS_GOAL_PCT = 8.0


def _signed_pct(pairs: list[tuple[Observation, float]]) -> list[float]:
    return [100.0 * (p - o.measured_s) / o.measured_s for o, p in pairs]


def family_bias(pairs: list[tuple[Observation, float]], title: str) -> dict[tuple[str, str], float]:
    """Print, per engine version and model family, the held-out rows' count, median signed error (bias: > 0 the
    model predicts longer times than measured) and MdAPE, over every kind and over the decode-step kinds; return
    {(framework, family): median signed error % over every kind}."""
    decode_kinds = GOALS["decode step time"][0]
    by: dict[tuple[str, str], list[tuple[Observation, float]]] = {}
    for o, pred in pairs:
        by.setdefault((o.framework, model_family(o.model)), []).append((o, pred))
    print(title)
    print(f"{'engine version':<22}{'family':<12}{'n':>5}{'bias %':>9}{'MdAPE %':>9}{'decode n':>10}"
          f"{'decode bias %':>15}{'decode MdAPE %':>16}")
    out = {}
    for (fw, fam), rows in sorted(by.items()):
        dec = [(o, pr) for o, pr in rows if o.kind in decode_kinds]
        bias = float(np.median(_signed_pct(rows)))
        out[(fw, fam)] = bias
        mdape = float(np.median([e for _, e in absolute_percentage_errors(rows)]))
        dcells = f"{0:>10}{'-':>15}{'-':>16}"
        if dec:
            dcells = (f"{len(dec):>10}{np.median(_signed_pct(dec)):>+15.1f}"
                      f"{np.median([e for _, e in absolute_percentage_errors(dec)]):>16.1f}")
        print(f"{fw:<22}{fam:<12}{len(rows):>5}{bias:>+9.1f}{mdape:>9.1f}{dcells}")
    return out


def gpu_held_out_check(rep: CalibrationReport) -> bool | None:
    """The issue's goal for the default engine's (vLLM 0.11) measurements held out by GPU (module docstring): fit
    without that version's rows on one GPU, predict them. True / False when it could be measured, None when the
    version has rows on one GPU only (then the other engine versions' GPU hold-out is printed for comparison)."""
    obs = observations()
    fw = DEFAULT_FRAMEWORK
    pairs, alone = held_out_gpu_predictions(obs, fw, anchor=DEFAULT_FRAMEWORK, start=rep.fit)
    if alone and not pairs:
        n = sum(1 for o in obs if o.framework == fw)
        print(f"goal {fw} held out by GPU (decode step MdAPE <= {GPU_HELD_OUT_DECODE_GOAL_PCT:.0f}%, no family's "
              f"median bias beyond +/-{FAMILY_BIAS_GOAL_PCT:.0f}%): not measurable: no second GPU with {fw} data "
              f"(all {n} rows on {', '.join(alone)})")
        others = sorted({o.framework for o in obs} - {fw})
        more: list[tuple[Observation, float]] = []
        for other in others:
            more += held_out_gpu_predictions(obs, other, anchor=DEFAULT_FRAMEWORK, start=rep.fit)[0]
        family_bias(more, "the other engine versions held out by GPU (fit without the version's rows on that GPU):")
        return None
    decode = [e for o, e in absolute_percentage_errors(pairs) if o.kind in GOALS["decode step time"][0]]
    biases = family_bias(pairs, f"{fw} held out by GPU:")
    mdape = float(np.median(decode)) if decode else math.nan
    met = bool(decode) and mdape <= GPU_HELD_OUT_DECODE_GOAL_PCT and all(
        abs(b) <= FAMILY_BIAS_GOAL_PCT for b in biases.values())
    print(f"goal {fw} held out by GPU: decode step MdAPE {mdape:.1f}% <= {GPU_HELD_OUT_DECODE_GOAL_PCT:.0f}%, "
          f"family biases {', '.join(f'{f} {b:+.1f}%' for (_, f), b in biases.items())} within "
          f"+/-{FAMILY_BIAS_GOAL_PCT:.0f}%: {'met' if met else 'NOT met'}")
    return met


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
    family_bias(list(rep.held_out_predictions), "held out by (model, GPU) group: median signed error per engine "
                "version and model family (> 0: predicted slower than measured)")
    gpu_held_out_check(rep)
    fitted, held = rate_check()
    met = held <= RATE_GOAL_PCT
    ok &= met
    print(f"goal highest rate meeting a TPOT target (ML.ENERGY v3 steady state, vLLM 0.11 on H100): median absolute "
          f"error {fitted:.1f}% with all groups fitted, {held:.1f}% held out <= {RATE_GOAL_PCT:.0f}%: "
          f"{'met' if met else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
