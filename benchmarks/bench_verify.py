"""Replay-verified planning on the shipped default scenario: misses, attainment and cost of the plain plan (round 0)
and of the verified plan (last round). Run: ``.venv/bin/python benchmarks/bench_verify.py`` (about 1-2 minutes).

Goal (issue 12, item 6): every P95 TTFT and TPOT target met in every model-window of the plan's own replay (2%
tolerance) and overall attainment >= 95%."""

from __future__ import annotations

from fleetplan.scenario.read import load_scenario
from fleetplan.simulator.verify import verify_plan, verify_text


def main() -> None:
    sc = load_scenario(None)
    vr = verify_plan(sc, solve_options={"time_limit_s": 60}, max_rounds=6, seed=0)
    first, last = vr.rounds[0], vr.rounds[-1]
    n = len(vr.report.rows)
    print(f"before: {len(first.misses)}/{n} model-windows miss a target, attainment {first.attainment:.1%}, "
          f"${first.cost_usd_per_day:,.2f}/day")
    print(f"after:  {len(last.misses)}/{n} model-windows miss a target, attainment {last.attainment:.1%}, "
          f"${last.cost_usd_per_day:,.2f}/day")
    print(verify_text(vr))
    print("GOAL MET" if vr.ok and last.attainment >= 0.95 else "GOAL NOT MET")


if __name__ == "__main__":
    main()
