"""What the on-disk capacity cache (fleetplan.costmodels.capacity_cache) saves a `fleetplan plan` process.

Runs `fleetplan plan SCENARIO --out plan.json` as a new process, as a user does, three ways: with the cache off
(FLEETPLAN_CACHE_DIR= empty), with an empty cache folder (the first plan after a change of the cost models' code),
and again with that folder filled (every later plan). Prints each run's CPU seconds (the child process's user +
system time) and wall seconds, the ratios against the cache-off run measured beside them, and whether the three plan
files are identical (replicas, cost and bound; the solver's time left out).

    python benchmarks/bench_capacity_cache.py [--scenario default] [--repeat 3]

The machine may be shared: CPU seconds move less with other load than wall seconds; the median of --repeat runs of
each kind is printed.

Measured 2026-12-04 00:20 UTC on 2 cores (load average 3.6, just after a test run), `--repeat 3`:
    cache off       5.18 CPU-s ( 1.00 x cache off)    4.69 s wall
    empty cache     5.28 CPU-s ( 1.02 x cache off)    4.82 s wall
    filled cache    2.28 CPU-s ( 0.44 x cache off)    1.79 s wall
    plan files identical in all 9 runs (timing fields aside): yes
(2026-12-03 22:58 UTC, load 1.0: 5.27, 5.39 and 2.42 CPU-s.) What is left with a filled cache is importing the
stack (~1.1 CPU-s) and the solve (~1 CPU-s).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fleetplan.costmodels.capacity_cache import CACHE_DIR_ENV

#: Plan-file fields that differ between identical plans: how long the solver ran.
_TIMING = {"solve_time_s"}


def _strip(obj: object) -> object:
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in _TIMING}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def _run(scenario: str, cache: str, out: Path) -> tuple[float, float, object]:
    """(CPU s, wall s, the plan file without timing fields) of one `fleetplan plan` process."""
    exe = Path(sys.executable).parent / "fleetplan"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run([str(exe), "plan", scenario, "--out", str(out)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, env={**os.environ, CACHE_DIR_ENV: cache})
    if res.returncode != 0:
        sys.exit(f"fleetplan plan {scenario} failed (exit {res.returncode}): {res.stderr.strip()[-500:]}")
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, _strip(json.loads(out.read_text()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="default")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each kind (>= 1)")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error(f"--repeat {args.repeat}: give at least 1 run of each kind")
    print(f"fleetplan plan {args.scenario}: CPU and wall seconds of a new process (median of {args.repeat}); load "
          f"average {os.getloadavg()[0]:.2f}")
    rows: dict[str, list[tuple[float, float]]] = {"off": [], "cold": [], "warm": []}
    plans = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            folder = Path(tmp) / f"cache{i}"
            for kind, cache in (("off", ""), ("cold", str(folder)), ("warm", str(folder))):
                cpu, wall, plan = _run(args.scenario, cache, Path(tmp) / f"{kind}{i}.json")
                rows[kind].append((cpu, wall))
                plans.append(plan)
    base = statistics.median(c for c, _ in rows["off"])
    for kind, label in (("off", "cache off"), ("cold", "empty cache"), ("warm", "filled cache")):
        cpu = statistics.median(c for c, _ in rows[kind])
        wall = statistics.median(w for _, w in rows[kind])
        print(f"  {label:<13} {cpu:6.2f} CPU-s ({cpu / base:5.2f} x cache off)  {wall:6.2f} s wall")
    same = all(p == plans[0] for p in plans)
    print(f"  plan files identical in all {len(plans)} runs (timing fields aside): {'yes' if same else 'NO'}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
