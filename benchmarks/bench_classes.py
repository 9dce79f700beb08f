"""Request-class benchmark: Llama-3.1-8B of the default scenario at 10× its default rate, planned with one token
mix and with prompt-length classes (Mélange's idea), each plan validated; cost per day of each.

Classes split the azure-conv trace (the 8B's token mix) at prompt-length quantiles (the scenario key
``classes: {prompt_quantiles: [...]}``; ``classes: auto`` is 0.5 and 0.8); each class gets its share of the
requests and its own token mix (mean and p95 of its requests). The model keeps its SLO, demand curve and
pools; its origin_site is dropped (request classes with egress are not supported yet), in both rows.
Replay: every window's plan replayed (simulate_day, Poisson arrivals, a slice of each window around its busiest
10 minutes); with classes the router sends a request only to replicas serving its class (least work among them).

    python benchmarks/bench_classes.py
    python benchmarks/bench_classes.py --edges 0.5 0.8 --scale 10

Measured (2026-12-01, 2 shared cores, `--time-limit 30 --slice 300`; both plans proven optimal and valid):
    one token mix                         $211.27/day   replay SLO attainment 99.98%  (H100 + A100s, no A10G)
    classes at prompt quantiles 0.5, 0.8  $176.21/day   replay SLO attainment 99.91%  (2 A10G take the two
                                                        shorter classes; -16.6% cost)
"""

from __future__ import annotations

import argparse
import copy

from fleetplan.placement.validate import validate
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.read import read_scenario, scenario_from_raw
from fleetplan.simulator.replay import simulate_day
from fleetplan.solvers.solve import solve

MODEL = "Llama-3.1-8B"


def _raw(scale: float, edges_q: list[float]) -> dict:
    raw, _src, _base = read_scenario("default")
    raw = copy.deepcopy(raw)
    (m,) = [x for x in raw["models"] if x["name"] == MODEL]
    raw["models"] = [m]
    m.pop("origin_site", None)
    m["demand"]["servegen"]["mean_rate_req_per_s"] *= scale
    if edges_q:
        m["classes"] = {"prompt_quantiles": edges_q}  # cut from the token-mix trace (scenario.classes)
    return raw


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=10.0, help="multiplier of the 8B's default rate")
    ap.add_argument("--edges", type=float, nargs="*", default=[0.5, 0.8], help="prompt-length quantiles of the "
                    "class edges")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--slice", type=float, default=600.0, help="seconds replayed per window")
    a = ap.parse_args()
    print(f"{'plan':<40} {'cost $/day':>11} {'status':>9} {'valid':>6} {'replay SLO attainment':>22}")
    base = None
    for label, q in (("one token mix", []), (f"classes at prompt quantiles {a.edges}", a.edges)):
        scenario = scenario_from_raw(_raw(a.scale, q), source=f"default ({MODEL} × {a.scale:g})")
        problem = build_problem(scenario)
        plan = solve(problem, "highs", time_limit_s=a.time_limit)
        ok = validate(problem, plan).ok
        opts = problem.option_by_key
        used = "; ".join(f"{k[1].split('/')[1]} tp{k[2]} max {max(c)}"
                         + (f" ({', '.join(opts[k].class_capacity)})" if opts[k].class_capacity else "")
                         for k, c in plan.replicas.items() if any(c))
        cost = plan.objective_usd or float("nan")
        base = base if base is not None else cost
        att = simulate_day(problem, plan, scenario, seed=0, slice_s=a.slice).attainment()
        print(f"{label:<40} {cost:>11,.2f} {plan.status.value:>9} {ok!s:>6} {att:>22.2%}")
        print(f"    {used}")
    print(f"saving with classes: {1 - cost / base:.1%}")


if __name__ == "__main__":
    main()
