"""Speed and quality figures of ``fleetplan simulate``.

1. The Azure LLM conv trace hour (19,366 requests) on a 4-model plan (the shipped default scenario without its last
   model), split over the models by their demand in the peak window. Target: <= 10 s on 2 cores.
2. The default scenario's whole day (5 models × 24 one-hour windows, ~0.7 M requests), every window simulated
   whole, with Poisson arrivals and with ServeGen's fitted burstiness. Target: <= 60 s.
3. Baselines in the same process: the same engine stepping decode one step per event (an iteration-level simulator)
   on the conv hour: its wall time and its P95 TTFT/TPOT against the event-run engine; round-robin routing against
   least-work.

Run: ``.venv/bin/python benchmarks/bench_simulate.py`` (add ``--quick`` to skip the whole-day ServeGen replay).
"""

from __future__ import annotations

import copy
import sys
import time

from fleetplan.datasets.traces import load_trace
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.read import load_scenario, scenario_from_raw
from fleetplan.simulator.engine import Policy
from fleetplan.simulator.replay import simulate_day, simulate_trace
from fleetplan.solvers.solve import solve


def _plan(sc):
    problem = build_problem(sc)
    plan = solve(problem, "highs", time_limit_s=60, threads=2)
    assert plan.has_solution, plan.message
    return problem, plan


def _line(label: str, rep) -> str:
    return (f"{label:<40} {rep.wall_s:6.2f} s {rep.requests:>7} req  attainment {rep.attainment():6.1%}  "
            + " ".join(f"{r.model.split('-')[0]}:{r.ttft_p95_s:.2f}s/{r.tpot_p95_s * 1e3:.0f}ms" for r in rep.overall))


def main() -> None:
    quick = "--quick" in sys.argv
    default = load_scenario()
    raw4 = copy.deepcopy(default.raw)
    raw4["models"] = raw4["models"][:4]
    sc4 = scenario_from_raw(raw4, source="default scenario, first 4 models")
    print("planning the 4-model and 5-model scenarios (not timed) ...")
    p4, plan4 = _plan(sc4)
    p5, plan5 = _plan(default)
    conv = load_trace("azure-conv")

    print("\n1. Azure conv hour on the 4-model plan (target <= 10 s)")
    a = simulate_trace(p4, plan4, sc4, conv, seed=0)
    print(_line("event runs, least-work router", a))
    b = simulate_trace(p4, plan4, sc4, conv, seed=0, policy=Policy(router="round-robin"))
    print(_line("event runs, round-robin router", b))
    c = simulate_trace(p4, plan4, sc4, conv, seed=0, policy=Policy(max_decode_run_steps=1))
    print(_line("baseline: one decode step per event", c))
    print(f"   speed-up of event runs over step-by-step: {c.wall_s / a.wall_s:.1f}x; "
          f"requests/s simulated: {a.requests / a.wall_s:,.0f}")
    for ra, rc in zip(a.overall, c.overall, strict=True):
        print(f"   {ra.model:<20} P95 TTFT {ra.ttft_p95_s:.3f} vs {rc.ttft_p95_s:.3f} s "
              f"(ratio {ra.ttft_p95_s / rc.ttft_p95_s:.3f}); P95 TPOT {ra.tpot_p95_s * 1e3:.1f} vs "
              f"{rc.tpot_p95_s * 1e3:.1f} ms (ratio {ra.tpot_p95_s / rc.tpot_p95_s:.3f})")
    print(f"   round-robin / least-work attainment: {b.attainment() / a.attainment():.3f}")

    print("\n2. Default scenario, whole day, every window whole (target <= 60 s)")
    t0 = time.perf_counter()
    d = simulate_day(p5, plan5, default, seed=0, arrivals="poisson")
    print(_line("Poisson arrivals (the capacity model's)", d) + f"  [{time.perf_counter() - t0:.1f} s with setup]")
    if not quick:
        e = simulate_day(p5, plan5, default, seed=0, arrivals="servegen")
        print(_line("ServeGen fitted Gamma burstiness", e))
        for r in e.overall:
            print(f"   servegen {r.model:<20} attainment {r.slo_attainment:6.1%}  dropped {r.dropped}")
    for r in d.overall:
        print(f"   poisson {r.model:<20} attainment {r.slo_attainment:6.1%}  dropped {r.dropped}  "
              f"util {r.utilization:.0%}  ${r.usd_per_1m_tokens:.3f}/1M tok  {r.energy_kwh:.0f} kWh/day")


if __name__ == "__main__":
    main()
