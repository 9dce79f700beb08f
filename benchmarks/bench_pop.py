"""Fleet-scale planning by POP decomposition: cost, proven bound and gap of the whole problem, validity, peak memory,
ratios to the baselines (computed in the same process), and the wall time of the same decomposed solve on the
local process pool and on a local Ray cluster with the same number of worker processes (same answers?).

Goal (2 cores): 2,000 models × 24 windows × 20,000 GPUs (``fleet_instance``) planned with a proven gap <= 5%
within 10 minutes (the time limit kept: + max(2 s, 5%)), peak memory < 4 GiB in every process. Measured
(process pool, 2 workers, load 3.0-3.3 on 2 cores, 8 parts): $732,613.08, bound $702,757.73, gap 4.08% in 576.3 s,
peak 0.38 GiB (greedy warm start alone: about $790k, 12% above the bound). Again 2026-12-03 after POP's one-window
models got node budgets (the time shares only safety stops), `nice -n 5 ... --executors process` at load 8.0-8.8:
$732,783.85, bound $695,114.71 (the per-model bound: all 24 per-window LP bounds cut at this load), gap 5.14% in
600.2 s, peak 0.36 GiB, goal NOT met; the safety stop cut every part's pass in its first one-window MILP (named in
the message), so at this size the plan still depends on the machine (docs/optimizer.md).

    python benchmarks/bench_pop.py                                  # 2,000 models, process pool then Ray
    python benchmarks/bench_pop.py --models 200 --gpus 2000 --time-limit 60 --executors process ray
    python benchmarks/bench_pop.py --executors process              # skip Ray

Peak memory is the largest resident set of this process and of its finished child processes (getrusage; Ray's
workers are not children of this process and are not counted). On a shared machine the wall times move with the
other load: say how loaded it was (``uptime``) when you report them.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

from fleetplan.placement.generators import fleet_instance
from fleetplan.placement.plan import evaluate
from fleetplan.placement.validate import validate
from fleetplan.solvers.baselines import BASELINES
from fleetplan.solvers.executor import make_executor
from fleetplan.solvers.solve import solve

MEMORY_GOAL_GIB = 4.0


def _peak_gib() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, kids) / 2**20  # Linux reports KiB


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=2000)
    ap.add_argument("--windows", type=int, default=24)
    ap.add_argument("--gpus", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=2000)
    ap.add_argument("--time-limit", type=float, default=600.0)
    ap.add_argument("--gap-goal", type=float, default=0.05)
    ap.add_argument("--parts", type=int, default=None, help="default: the automatic path's number")
    ap.add_argument("--partition", default="shape")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--executors", nargs="*", default=["process", "ray"])
    args = ap.parse_args()
    print(f"load: {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f} {os.getloadavg()[2]:.1f} (1, 5, 15 min) on "
          f"{os.cpu_count()} CPUs", flush=True)
    t = time.perf_counter()
    problem = fleet_instance(args.models, args.windows, n_gpus=args.gpus, seed=args.seed)
    print(f"instance: {problem.name}: {len(problem.models)} models, {problem.n_windows} windows, "
          f"{sum(p.gpus for p in problem.pools):,} GPUs in {len(problem.pools)} pools, {len(problem.options):,} "
          f"options ({time.perf_counter() - t:.1f} s to build)", flush=True)
    t = time.perf_counter()
    base = {b: evaluate(problem, fn(problem)) for b, fn in BASELINES.items()}
    print(f"baselines ({time.perf_counter() - t:.1f} s): "
          + "; ".join(f"{b} ${e.total_usd:,.2f}" for b, e in base.items()), flush=True)
    runs = {}
    for kind in args.executors:
        t = time.perf_counter()
        with make_executor(kind, workers=args.workers) as ex:
            started = time.perf_counter() - t
            t = time.perf_counter()
            plan = solve(problem, "highs", time_limit_s=args.time_limit, threads=1, gap=args.gap_goal,
                         decompose=args.parts, partition=args.partition, executor=ex)
            dt = time.perf_counter() - t
            label = ex.describe()
        kept = dt <= args.time_limit + max(2.0, 0.05 * args.time_limit)
        ok = plan.has_solution and validate(problem, plan).ok
        mem = _peak_gib()
        met = ok and kept and mem < MEMORY_GOAL_GIB and plan.gap is not None and plan.gap <= args.gap_goal + 1e-9
        runs[kind] = (plan, dt)
        if not plan.has_solution:
            print(f"{label}: {plan.status.value} after {dt:.1f} s: {plan.message}", flush=True)
            continue
        ev = evaluate(problem, plan)
        ratios = "  ".join(f"{b}: {ev.total_usd / e.total_usd:.3f}" for b, e in base.items())
        bound = f"${plan.bound_usd:,.2f}" if plan.bound_usd is not None else "none"
        gap = f"{plan.gap:.2%}" if plan.gap is not None else "unknown"
        print(f"{label} (started in {started:.1f} s): {plan.status.value} {dt:.1f} s  ${ev.total_usd:,.2f}  bound "
              f"{bound}  gap {gap}  {ev.gpu_hours:,.0f} GPU-h  valid={ok}  "
              f"limit kept={kept}  peak {mem:.2f} GiB  goal {'met' if met else 'NOT met'}", flush=True)
        print(f"   cost vs baselines: {ratios}")
        print(f"   {plan.message}", flush=True)
    if "process" in runs and "ray" in runs:
        (a, ta), (b, tb) = runs["process"], runs["ray"]
        same = a.replicas == b.replicas and a.shared == b.shared
        cents = (round(a.objective_usd * 100) == round(b.objective_usd * 100)
                 if a.objective_usd is not None and b.objective_usd is not None else False)
        print(f"Ray vs process pool: wall time {tb:.1f} s vs {ta:.1f} s (speed-up {ta / tb:.2f}x); same plan: "
              f"{same}; same cost to the cent: {cents}")
    print(f"load at the end: {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f} {os.getloadavg()[2]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
