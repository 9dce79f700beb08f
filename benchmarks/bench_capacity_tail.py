"""Is a replica's rated capacity true per request? One replica of each dedicated option, replayed at its rating.

Run: `.venv/bin/python benchmarks/bench_capacity_tail.py [SCENARIO] [--duration-s 1800] [--load 1.0] [--models ...]`
(~1-2 min on the shipped default scenario).

The capacity model (:mod:`fleetplan.costmodels.capacity`) rates each option at the largest arrival rate at which
its latency targets hold at their percentiles q (p95 by default). This benchmark checks that claim with the
discrete-event engine (:mod:`fleetplan.simulator.engine`, the replay `fleetplan simulate` runs), independently of
the rating's formulas: for every dedicated option of the scenario (model, pool, tp, pp), one replica, Poisson
arrivals at ``--load`` x its rated capacity (``capacity_req_per_s``, before the scenario's margin) for
``--duration-s`` seconds (the first 10% warms the replica up and is not measured), prompt and output lengths drawn
as the replay draws them (:meth:`fleetplan.costmodels.demand.TokenMix.draw`: the model's trace, the Azure LLM
inference traces 2023 for the default scenario; the lognormals of a mix given by numbers).

Prints, per option: the rating, the share of measured requests missing the TTFT target and the TPOT target, each
against the share its percentile allows (1 - q), and the replayed latency at the percentile; then the options whose
rating is optimistic (a target's miss share above 1 - q by more than its 95% binomial margin; requests in one
replay are correlated through the batch, so seeds differ by about a point more than that margin: --seed to see it).
Shared GPUs are not replayed here: their ratings assume co-residents like the model itself (capacity docstring,
point 9).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from fleetplan.errors import FleetplanError
from fleetplan.placement.plan import Plan
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.read import load_scenario
from fleetplan.simulator.fleet import FleetBuilder
from fleetplan.simulator.metrics import model_slos, request_latencies
from fleetplan.simulator.replay import run_window
from fleetplan.simulator.workload import Workload
from fleetplan.solvers.online.state import window_problem


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario", nargs="?", help="scenario YAML or shipped name (default: the shipped default)")
    ap.add_argument("--duration-s", type=float, default=1800.0, help="replayed seconds per option")
    ap.add_argument("--load", type=float, default=1.0, help="arrival rate as a share of the rated capacity")
    ap.add_argument("--models", nargs="+", help="only these models (catalog names)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the arrivals and lengths (>= 0)")
    a = ap.parse_args()
    if not a.duration_s >= 60:
        raise SystemExit(f"--duration-s {a.duration_s:g}: give at least 60 s")
    if not 0 < a.load <= 2:
        raise SystemExit(f"--load {a.load:g}: give a share of the rating in (0, 2], e.g. 0.9")
    if a.seed < 0:
        raise SystemExit(f"--seed {a.seed}: give a seed >= 0")
    try:
        sc = load_scenario(a.scenario)
        problem = build_problem(sc)
    except FleetplanError as e:
        raise SystemExit(f"error: {e}") from None
    slos = model_slos(problem, sc)
    mixes = {pm.name: sc.token_mixes[raw["name"]] for pm, raw in zip(problem.models, sc.raw["models"], strict=True)}
    if a.models:
        unknown = sorted(set(a.models) - set(problem.model_by_name))
        if unknown:
            raise SystemExit(f"--models: {unknown[0]!r} is not a model of the scenario "
                             f"({', '.join(problem.model_by_name)})")
    print(f"{sc.source}: one replica per dedicated option, Poisson arrivals at {a.load:g} x its rating for "
          f"{a.duration_s:g} s (first 10% not measured), lengths from each model's token mix (its trace, or the "
          "lognormals of its statistics)")
    print(f"{'option':58s} {'rated':>7s} {'n':>6s}  {'TTFT miss':>15s}  {'TPOT miss':>15s}  "
          f"{'TTFT@q':>7s} {'TPOT@q':>8s}")
    optimistic = []
    t0 = time.perf_counter()
    for i, o in enumerate(sorted(problem.options, key=lambda o: (o.model, o.pool, o.tp, o.pp))):
        if (a.models and o.model not in a.models) or o.capacity_req_per_s <= 0:
            continue
        label = f"{o.model} {o.pool} tp{o.tp}" + (f" pp{o.pp}" if o.pp > 1 else "")
        slo = slos[o.model]
        rate = a.load * o.capacity_req_per_s
        rng = np.random.default_rng([a.seed, i])
        n = int(rng.poisson(rate * a.duration_s))
        arr = np.sort(rng.uniform(0.0, a.duration_s, n))  # Poisson: n uniform points on the interval
        inp, out = mixes[o.model].draw(rng, n)
        wl = Workload(arr, inp, out, np.full(n, o.model, dtype=object), 0.1 * a.duration_s, a.duration_s, "poisson")
        one = window_problem(problem, {o.model: rate})
        plan = Plan(replicas={o.key: (1,)})
        _, res = run_window(FleetBuilder(one, plan, sc), wl, 0)
        ttft, tpot, _ = request_latencies(wl, res)
        m = (wl.arrival_s >= wl.measure_from_s) & (wl.arrival_s < wl.measure_to_s)
        k = int(m.sum())
        cells = []
        for name, lat, target, pct in (("TTFT", ttft, slo.ttft_s, slo.ttft_percentile),
                                       ("TPOT", tpot, slo.tpot_s, slo.tpot_percentile)):
            miss = float(np.mean(~(lat[m] <= target) | res.dropped[m])) if k else math.nan
            allowed = 1 - pct / 100
            margin = 1.96 * math.sqrt(allowed * (1 - allowed) / max(k, 1))
            cells.append(f"{miss:6.2%} / {allowed:4.1%}")
            if miss > allowed + margin:
                optimistic.append((label, name, miss, allowed, o.capacity_req_per_s, rate))
        at = [float(np.quantile(x[m][np.isfinite(x[m])], p / 100)) if k else math.nan
              for x, p in ((ttft, slo.ttft_percentile), (tpot, slo.tpot_percentile))]
        print(f"{label:58s} {o.capacity_req_per_s:7.2f} {k:6d}  {cells[0]:>15s}  {cells[1]:>15s}  "
              f"{at[0]:6.2f}s {at[1] * 1e3:6.1f}ms", flush=True)
    print(f"({time.perf_counter() - t0:.0f} s)")
    if optimistic:
        print(f"Ratings the replay refutes ({len(optimistic)}): a target missed by more requests than its percentile "
              "allows, beyond the 95% sampling margin:")
        for label, name, miss, allowed, cap, rate in optimistic:
            print(f"  {label}, rated {cap:.2f} req/s, replayed at {rate:.2f}: {name} missed by {miss:.1%} "
                  f"(allowed {allowed:.1%})")
    else:
        print("Every rating holds in the replay: no target missed by more requests than its percentile allows.")


if __name__ == "__main__":
    main()
