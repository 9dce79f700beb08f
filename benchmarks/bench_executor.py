"""Wall time of the same small scenario sweep on the process pool (2 workers) and on a local Ray cluster with 2
worker processes (CPUs), with the same answers.

Run: .venv/bin/python benchmarks/bench_executor.py [--cells 4] [--time-limit 20]

The sweep: the shipped default scenario, demand_factor over --cells values from 1.0 to 1.6, HiGHS with 1 thread
per cell. Ray's start-up is timed apart from the sweep. On a shared machine the figures move with the other load:
run it more than once and say so when you report them.
"""

from __future__ import annotations

import argparse
import logging
import time

import numpy as np

from fleetplan.scenario.read import load_scenario
from fleetplan.solvers.executor import LocalExecutor, RayExecutor
from fleetplan.solvers.sweep import SweepSettings, run_sweep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=4)
    ap.add_argument("--time-limit", type=float, default=20.0)
    args = ap.parse_args()
    sc = load_scenario(None)
    variables = {"demand_factor": [round(float(x), 6) for x in np.linspace(1.0, 1.6, args.cells)]}
    settings = SweepSettings(time_limit_s=args.time_limit, threads=1, gap=0.005)

    t0 = time.perf_counter()
    with LocalExecutor(2) as ex:
        local = run_sweep(sc, variables, ex, settings)
    t_local = time.perf_counter() - t0

    import ray

    t0 = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
             logging_level=logging.ERROR)
    t_start = time.perf_counter() - t0
    try:
        t0 = time.perf_counter()
        with RayExecutor() as ex:
            on_ray = run_sweep(sc, variables, ex, settings)
        t_ray = time.perf_counter() - t0
    finally:
        ray.shutdown()

    def strip(rows):
        return [{k: v for k, v in r.items() if k != "solve_s"} for r in rows]

    same = strip(local) == strip(on_ray)
    print(f"sweep: default scenario, demand_factor {variables['demand_factor']}, highs 1 thread, "
          f"≤ {args.time_limit:g} s per cell")
    for r in local:
        print(f"  demand ×{r['demand_factor']:g}: {r['status']}, {r['cost_usd_per_day']:,.2f} USD/day, "
              f"{r['gpu_hours_per_day']:.0f} GPU-h/day, solve {r['solve_s']:.1f} s")
    print(f"process pool, 2 workers: {t_local:.1f} s")
    print(f"Ray, 2 CPUs (local): {t_ray:.1f} s (+ {t_start:.1f} s to start Ray)")
    print(f"same rows (solve_s aside): {same}")
    if not same:
        unproven = [r["demand_factor"] for r in local if r["status"] != "optimal"]
        print(f"  cells stopped by their time limit (answers may depend on load): {unproven}")


if __name__ == "__main__":
    main()
