"""Planner benchmark: solve time, objective, LP bound, gap, and cost / GPU-hours as ratios to each baseline.

Instances: the shipped default scenario, and seeded synthetic ones (labeled synthetic) of 10, 50 and 200 models
× 24 windows with up to 1,000 GPUs. Baselines are computed in the same process. Peak memory is the process's
maximum resident set size.

    python benchmarks/bench_planner.py                 # everything (several minutes)
    python benchmarks/bench_planner.py --quick         # default scenario and 10 models only
    python benchmarks/bench_planner.py --sizes 200 --backends highs --time-limit 120
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

from fleetplan.placement.generators import random_instance
from fleetplan.placement.plan import evaluate
from fleetplan.placement.scenario import build_problem, load_scenario
from fleetplan.placement.validate import validate
from fleetplan.solvers.baselines import BASELINES
from fleetplan.solvers.solve import solve


def _peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux reports KiB


def run(name: str, problem, backends: list[str], time_limit_s: float, threads: int) -> list[dict]:
    rows = []
    t = time.perf_counter()
    base = {b: fn(problem) for b, fn in BASELINES.items()}
    base_ev = {b: evaluate(problem, p) for b, p in base.items()}
    t_base = time.perf_counter() - t
    print(f"\n== {name}: {len(problem.models)} models, {problem.n_windows} windows, "
          f"{sum(p.gpus for p in problem.pools)} GPUs in {len(problem.pools)} pools, {len(problem.options)} options, "
          f"{len(problem.share_options)} share options (baselines {t_base:.1f} s)")
    for b, ev in base_ev.items():
        flag = "" if not base[b].message else "  [does not fit the inventory]"
        print(f"   baseline {b:20s} ${ev.total_usd:12,.2f}  {ev.gpu_hours:10,.1f} GPU-h{flag}")
    for backend in backends:
        t = time.perf_counter()
        plan = solve(problem, backend, time_limit_s=time_limit_s, threads=threads, gap=0.005)
        dt = time.perf_counter() - t
        if not plan.has_solution:
            print(f"   {backend:6s} {plan.status.value} after {dt:.1f} s: {plan.message}")
            continue
        ev = evaluate(problem, plan)
        ok = validate(problem, plan).ok
        ratios = "  ".join(f"{b}: cost {ev.total_usd / base_ev[b].total_usd:.3f} GPU-h "
                           f"{ev.gpu_hours / base_ev[b].gpu_hours:.3f}" for b in base_ev)
        bound = f"${plan.bound_usd:12,.2f}" if plan.bound_usd is not None else "        none"
        gap = f"{plan.gap:7.2%}" if plan.gap is not None else "unknown"
        print(f"   {backend:6s} {plan.status.value:9s} {dt:7.1f} s  ${ev.total_usd:12,.2f}  bound {bound}  gap {gap}"
              f"  {ev.gpu_hours:10,.1f} GPU-h  valid={ok}")
        print(f"          vs baselines: {ratios}")
        rows.append({"instance": name, "backend": backend, "time_s": dt, "gap": plan.gap, "valid": ok})
    print(f"   peak memory so far: {_peak_rss_gib():.2f} GiB")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sizes", type=int, nargs="*", default=[10, 50, 200])
    ap.add_argument("--backends", nargs="*", default=["highs", "cpsat", "cbc"])
    ap.add_argument("--time-limit", type=float, default=None, help="per solve (default 60 s; 120 s for >= 200)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    sizes = [10] if args.quick else args.sizes
    run("default scenario", build_problem(load_scenario()), args.backends, args.time_limit or 60, args.threads)
    for n in sizes:
        limit = args.time_limit or (120 if n >= 200 else 60)
        # CBC overran its time limit by minutes at 50 models (in preprocessing): only the small instances.
        backends = args.backends if n <= 10 else [b for b in args.backends if b != "cbc"]
        run(f"synthetic {n} models x 24 windows", random_instance(n, 24, seed=n, max_gpus=1000), backends, limit,
            args.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
