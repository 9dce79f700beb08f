"""A day of the re-planner against a reactive autoscaler, the static plan and clairvoyant planners, replayed.

Run: `.venv/bin/python benchmarks/bench_replanner.py [--days 3 7 11] [--resolve-time-limit 10] [--variant
cooldown_s=600,floor_on_latest=false] [--no-clairvoyant] [--plot replanner.png]` (about 2 minutes a day, 6 for the
default three; each variant adds about 1 minute a day).

For each ServeGen day (m-large, m-mid and m-small have 14 days; deepseek-r1 and mm-image only day 0, kept), the
shipped default scenario's requests of that day are replayed (:func:`fleetplan.simulator.fleetday.replay_fleet_day`:
new replicas billed from their start and serving after their load time, stopped ones finishing their queues) against
three fleets, all planned on the scenario's mean day (what the planner knows):

* static: the offline plan (`fleetplan plan`, HiGHS), its per-window replicas changing at window starts;
* reactive: the issue's reactive autoscaler, per model every 5 minutes: ceil(observed rate / (capacity x 0.9))
  replicas of ONE option per model, the option the offline plan uses most (most replica-windows; ties: the cheaper
  per req/s; a model the offline plan serves only on shared GPUs: its cheapest option per req/s), scaled down only
  when two readings in a row ask for fewer (to the larger of the two); replicas that do not fit the option's pool
  spill to the model's next option by cost per req/s (never needed on the default scenario's days unless said);
  the same capacity model as the planner (the options' capacity_req_per_s);
* replanner: fleetplan's Replanner (solvers/online/, default OnlineConfig, so forecast_method as measured by
  bench_forecast.py) started from the offline plan, its forecaster warmed with the ``--warm-days`` ServeGen days
  before the replayed one (observed the same way; the service has been running), a round every 5 minutes on the
  observed rates, a HiGHS re-solve every hour and whenever a round drifts above the last re-solve's cost (sized for
  ``Replanner.resolve_demand``: the forecast held over the scale-down cooldown), of which the part that pays for its
  migrations is adopted (``Replanner.consider``);
* each ``--variant``: the same re-planner with some OnlineConfig fields changed (the trade-off of its knobs);
* two clairvoyant references, which know the replayed day (unless ``--no-clairvoyant``): "clairvoyant hourly", the
  offline planner given the day's own curve (each hour sized for its busiest 10 minutes, the scenario's margin), what
  a re-planner with a perfect hourly forecast and free migrations runs; "clairvoyant 5-min", per 5-minute step the
  cheapest one-window plan for that step's and the next step's observed rates, ignoring migrations and stability:
  about the least any policy bound by the scenario's margin pays. They tell whether a cost goal is within reach of
  any forecast, not a policy to deploy.

Observed rate = the replayed requests of the model in the last 5 minutes / 300 s. Prints per day and policy: GPU
cost (billed GPU-hours x pool price; a started replica is billed from its start, a stopped one until its queue is
done), GPU-hours, two utilizations: "busy" = busy GPU-seconds / billed GPU-seconds (busy: a GPU is running a prefill or
decode step of the discrete-event engine; loading and idle time count as not busy; with continuous batching this
saturates near 100% at any load, so it barely tells fleets apart) and "capacity" = the rated GPU-seconds of the
requests served / billed GPU-seconds (a request served by a replica of option o uses o.gpus / o.capacity_req_per_s
GPU-seconds, on a shared GPU 1 / the share option's capacity: the served load over the rated capacity of the billed
GPUs, :attr:`fleetplan.simulator.fleetday.FleetDayReport.capacity_utilization`), SLO attainment (share of requests
meeting their model's TTFT and TPOT targets; dropped requests fail), migrations (replica starts + stops, shared GPUs
one each), and the re-planner's re-solves adopted / offered; then the average per day and the goals (<= 0.85x the
reactive cost at >= its attainment, <= 40 migrations a day, >= 10% higher mean utilization: judged on the capacity
utilization as a relative increase, the busy one printed beside it), each marked met or not; and the billed
GPU-hours per day of each model's dedicated replicas and of the shared GPUs (where the GPU-hours go).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import difflib
import math
import time
from pathlib import Path

import numpy as np

from fleetplan.errors import FleetplanError
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.read import load_scenario, scenario_from_raw
from fleetplan.service.runtime import scenario_problem
from fleetplan.simulator.fleetday import FleetStep, plan_steps, replay_fleet_day
from fleetplan.simulator.workload import scenario_workload
from fleetplan.solvers.online.config import OnlineConfig
from fleetplan.solvers.online.replanner import Replanner
from fleetplan.solvers.online.state import window_problem
from fleetplan.solvers.solve import solve

STEP_S = 300.0
MULTI_DAY = ("m-large", "m-mid", "m-small")


def default_raw(tpot_percentile: int = 95) -> tuple[dict, str | None]:
    """The shipped default scenario's raw dict (and its base folder), every model's TPOT target moved to the
    ``tpot_percentile`` (the same seconds: 95 is the scenario as shipped)."""
    base = load_scenario(None)
    raw = copy.deepcopy(base.raw)
    if tpot_percentile != 95:
        for m in raw["models"]:
            if "tpot_p95_s" in m["slo"]:
                m["slo"][f"tpot_p{tpot_percentile}_s"] = m["slo"].pop("tpot_p95_s")
    return raw, base.base_dir


def day_scenario(day: int, tpot_percentile: int = 95):
    raw, base_dir = default_raw(tpot_percentile)
    for m in raw["models"]:
        sg = m["demand"].get("servegen")
        if sg is not None:
            sg["day"] = day if sg["series"] in MULTI_DAY else 0
    return scenario_from_raw(raw, source=f"default, ServeGen day {day}", base=base_dir)


def mean_day_problem(tpot_percentile: int = 95):
    """(Problem, load time per option) of the default scenario's mean day, as the service builds them."""
    raw, base_dir = default_raw(tpot_percentile)
    return scenario_problem(scenario_from_raw(raw, source="default", base=base_dir))


def observed_rates(scenario, problem, seed: int) -> dict[str, np.ndarray]:
    """{model: req/s in each 5-minute step of the day} from the replayed requests (same seed as the replay)."""
    L = problem.window_length_s
    names = [m.name for m in problem.models]
    steps = int(problem.n_windows * L // STEP_S)
    out = {m: np.zeros(steps) for m in names}
    for w in range(problem.n_windows):
        wl = scenario_workload(scenario, w, 0.0, L, seed, names=names)
        for m in names:
            t = wl.arrival_s[wl.model == m] + w * L
            idx = (t // STEP_S).astype(int)
            np.add.at(out[m], idx[idx < steps], 1.0)
    return {m: v / STEP_S for m, v in out.items()}


def reactive_option_order(problem, offline) -> dict[str, list]:
    """{model: its options, the one the offline plan uses most first (most replica-windows; ties: cheaper per req/s),
    then by cost per req/s}: the autoscaler scales the first; the rest take what its pool cannot hold."""
    pools = problem.pool_by_id

    def per_req(o):
        return o.gpus * pools[o.pool].usd_per_gpu_hour / o.capacity_req_per_s

    out = {}
    for m in problem.models:
        opts = sorted((o for o in problem.options if o.model == m.name), key=lambda o: (per_req(o), o.key))
        used = {o.key: sum(offline.replicas.get(o.key, ())) for o in opts}
        if max(used.values(), default=0) > 0:
            first = max(opts, key=lambda o: (used[o.key], -per_req(o)))
            opts = [first] + [o for o in opts if o is not first]
        out[m.name] = opts
    return out


def reactive_steps(problem, offline, rates: dict[str, np.ndarray]) -> tuple[list[FleetStep], int]:
    """The reactive autoscaler's fleet (module docstring) and how many 5-minute steps had to spill to another
    option."""
    opts = reactive_option_order(problem, offline)
    cur: dict[str, int] = {m.name: max(1, m.min_replicas) for m in problem.models}
    prev_want: dict[str, int] = dict(cur)
    steps = []
    spilled = 0
    n = len(next(iter(rates.values())))
    for k in range(n):
        t = k * STEP_S
        for m in problem.models:
            first = opts[m.name][0]
            r = rates[m.name][k - 1] if k else m.demand_req_per_s[0]
            want = max(m.min_replicas, 1, math.ceil(r / (first.capacity_req_per_s * 0.9) - 1e-9))
            if want >= cur[m.name]:
                cur[m.name] = want
            elif prev_want[m.name] < cur[m.name]:
                cur[m.name] = max(want, prev_want[m.name])
            prev_want[m.name] = want
        free = {p.id: p.gpus for p in problem.pools}
        reps: dict = {}
        spill = False
        for m in problem.models:
            need_req = cur[m.name] * opts[m.name][0].capacity_req_per_s
            for i, o in enumerate(opts[m.name]):
                if need_req <= 1e-9:
                    break
                k_n = min(math.ceil(need_req / o.capacity_req_per_s - 1e-9), free[o.pool] // o.gpus)
                if k_n > 0:
                    spill |= i > 0
                    reps[o.key] = reps.get(o.key, 0) + k_n
                    free[o.pool] -= k_n * o.gpus
                    need_req -= k_n * o.capacity_req_per_s
        spilled += int(spill)
        steps.append(FleetStep(t, reps))
    return steps, spilled


def clairvoyant_hourly_steps(dprob, limit_s: float) -> list[FleetStep]:
    """The offline planner given the replayed day's own curve (each hour sized for its busiest 10 minutes of that
    day, the scenario's margin): what a re-planner with a perfect hourly forecast and free migrations would run."""
    p = solve(dprob, "highs", time_limit_s=limit_s)
    return plan_steps(dprob, p.replicas, [(g.pool, g.models) for g in p.shared])


def clairvoyant_step_steps(problem, rates: dict[str, np.ndarray], limit_s: float) -> list[FleetStep]:
    """Per 5-minute step, the cheapest one-window plan (HiGHS) for the larger of that step's and the next step's
    observed rates (the next one so that replicas start before the load they serve): a policy that knows the day's
    rates 5 minutes ahead and ignores migrations and stability. Its cost is about the least any policy bound by the
    scenario's margin pays; its attainment shows what following the rates that closely costs in SLO."""
    n = len(next(iter(rates.values())))
    steps = []
    for k in range(n):
        d = {m: float(max(v[k:k + 2])) for m, v in rates.items()}
        p = solve(window_problem(problem, d), "highs", time_limit_s=limit_s, threads=1, lp_bound=False)
        reps = {key: c[0] for key, c in p.replicas.items() if c[0]}
        steps.append(FleetStep(k * STEP_S, reps, tuple((g.pool, g.models) for g in p.shared)))
    return steps


def replanner_steps(problem, lt, offline, rates, resolve_limit_s: float,
                    warm: list[dict[str, np.ndarray]] = (), config: OnlineConfig | None = None
                    ) -> tuple[list[FleetStep], int, int]:
    r = Replanner(problem, config or OnlineConfig(), lt)
    day_s = problem.n_windows * problem.window_length_s
    for i, past in enumerate(warm):  # the days before, oldest first, at negative times (the service's history)
        t0 = -(len(warm) - i) * day_s
        for k in range(len(next(iter(past.values())))):
            for m in problem.models:
                r.forecaster.observe(m.name, float(past[m.name][k]), t0 + (k + 1) * STEP_S)
    res = r.start_from(offline, 0.0)
    steps = [FleetStep(0.0, r.counts(), tuple((s.pool, s.models) for s in r.shared))]
    adopted = offered = 0
    n = len(next(iter(rates.values())))
    for k in range(1, n):
        t = k * STEP_S
        for m in problem.models:
            r.forecaster.observe(m.name, float(rates[m.name][k - 1]), t)
        res = r.round(t)
        if k % int(3600 / STEP_S) == 0 or r.drifted:
            cand = solve(window_problem(problem, r.resolve_demand(t)), "highs", time_limit_s=resolve_limit_s, threads=1,
                         lp_bound=False)
            ok, got, _ = r.consider(cand, t)
            offered += 1
            adopted += int(ok)
            res = got or res
        steps.append(FleetStep(t, r.counts(), tuple((s.pool, s.models) for s in r.shared)))
    return steps, adopted, offered


def parse_variant(text: str) -> tuple[str, OnlineConfig]:
    """``FIELD=VALUE,...`` (OnlineConfig fields, each VALUE read as its default's type: true/false, a number or a
    word) -> (label, config); exits with a one-line message naming the part that is wrong."""
    defaults = OnlineConfig()
    names = sorted(f.name for f in dataclasses.fields(OnlineConfig))
    kw: dict[str, object] = {}
    for part in text.split(","):
        key, sep, val = (x.strip() for x in part.partition("="))
        if not sep or key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise SystemExit(f"--variant {text!r}: {part!r} is not FIELD=VALUE with an OnlineConfig field ({hint}"
                             f"fields: {', '.join(names)})")
        if key in kw:
            raise SystemExit(f"--variant {text!r}: {key} is given twice; give each field once")
        kind = type(getattr(defaults, key))
        try:
            if kind is bool:
                kw[key] = {"true": True, "false": False}[val.lower()]
            elif kind in (int, float):
                kw[key] = kind(val)
            else:
                kw[key] = val
        except (KeyError, ValueError):
            raise SystemExit(f"--variant {text!r}: {key} takes {'true or false' if kind is bool else kind.__name__},"
                             f" not {val!r}") from None
    try:
        return f"replanner ({text})", OnlineConfig(**kw)  # type: ignore[arg-type]
    except FleetplanError as e:
        raise SystemExit(f"--variant {text!r}: {e}") from None


def plot(path: str, agg: dict[str, tuple], per_day: dict[str, list], days: list[int]) -> None:
    """Cost per day against SLO attainment, one colour per policy (small marks: each day; large: the average), the
    goal region (<= 0.85x the reactive's cost at >= its attainment) shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 5.5))
    c_r, _, _, a_r, _ = agg["reactive"]
    lo_att = min(min(r.attainment for r in reps) for reps in per_day.values())
    ax.fill_between([a_r * 100, 100.0], 0, 0.85 * c_r, color="tab:green", alpha=0.12,
                    label=f"goal: <= 0.85x reactive (${0.85 * c_r:,.0f}) at >= {a_r:.2%}")
    for i, (name, reps) in enumerate(per_day.items()):
        col = f"C{i}"
        ax.scatter([r.attainment * 100 for r in reps], [r.cost_usd for r in reps], s=14, color=col, alpha=0.5)
        cost, _, _, att, mig = agg[name]
        ax.scatter([att * 100], [cost], s=90, color=col, edgecolor="black", zorder=3,
                   label=f"{name}: ${cost:,.0f}/day ({cost / c_r:.3f}x), {att:.2%}, {mig:.0f} migr/day")
    costs = [r.cost_usd for reps in per_day.values() for r in reps]
    ax.set_ylim(min(costs) * 0.95, max(costs) * 1.03)
    ax.set_xlim(lo_att * 100 - 0.1, 100.0)
    ax.set_xlabel("SLO attainment, % of requests meeting TTFT and TPOT targets")
    ax.set_ylabel("GPU cost, USD per day")
    ax.set_title(f"A day of each policy, default scenario, ServeGen days {' '.join(map(str, days))}\n"
                 "(small marks: each day; large: the average)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=int, nargs="+", default=[3, 7, 11],
                    help="ServeGen days to replay, 0-13 (about 2 minutes each, +1 per --variant)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the replayed requests")
    ap.add_argument("--resolve-time-limit", type=float, default=10.0, help="seconds per re-solve of the re-planner")
    ap.add_argument("--plan-time-limit", type=float, default=60.0, help="seconds for the offline plans")
    ap.add_argument("--warm-days", type=int, default=2, help="days before each replayed one fed to the forecaster")
    ap.add_argument("--no-clairvoyant", action="store_true",
                    help="skip the two clairvoyant references (the planner given the day's own rates)")
    ap.add_argument("--variant", action="append", default=[], metavar="FIELD=VALUE,...",
                    help="also run the re-planner with these OnlineConfig fields changed (repeatable), e.g. "
                         "cooldown_s=600,floor_on_latest=false")
    ap.add_argument("--tpot-percentile", type=int, choices=[90, 95, 99], default=95,
                    help="every model's TPOT target (same seconds) at this percentile instead of the shipped p95: "
                         "what the planners promise when asked for a higher attainment")
    ap.add_argument("--plot", metavar="PNG", help="write cost per day against attainment for every policy here")
    a = ap.parse_args()
    variants = [parse_variant(v) for v in a.variant]
    if a.plot and not Path(a.plot).resolve().parent.is_dir():
        raise SystemExit(f"--plot {a.plot}: its folder does not exist; give a path in an existing folder")
    for day in a.days:
        try:
            day_scenario(day, a.tpot_percentile)
        except FleetplanError as e:
            raise SystemExit(f"--days {day}: {e}") from None
    problem, lt = mean_day_problem(a.tpot_percentile)
    t0 = time.perf_counter()
    offline = solve(problem, "highs", time_limit_s=a.plan_time_limit)
    print(f"offline plan (mean day): ${offline.objective_usd:,.2f}/day, {offline.status.value} "
          f"({time.perf_counter() - t0:.0f} s)")
    static = plan_steps(problem, offline.replicas, [(g.pool, g.models) for g in offline.shared])
    totals: dict[str, list] = {}
    for day in a.days:
        sc = day_scenario(day, a.tpot_percentile)
        dprob = build_problem(sc)
        rates = observed_rates(sc, dprob, a.seed)
        warm = []
        for d in range(max(0, day - a.warm_days), day):
            wsc = day_scenario(d, a.tpot_percentile)
            warm.append(observed_rates(wsc, build_problem(wsc), a.seed))
        t1 = time.perf_counter()
        rp_steps, adopted, offered = replanner_steps(problem, lt, offline, rates, a.resolve_time_limit, warm)
        re_steps, spilled = reactive_steps(problem, offline, rates)
        policies = {"static": static, "reactive": re_steps, "replanner": rp_steps}
        print(f"ServeGen day {day} (re-planner driven in {time.perf_counter() - t1:.0f} s, warmed with {len(warm)} "
              f"days; re-solves adopted {adopted} of {offered}; reactive spilled to a second option in {spilled} of "
              f"{len(re_steps)} steps):")
        for label, cfg in variants:
            policies[label] = replanner_steps(problem, lt, offline, rates, a.resolve_time_limit, warm, cfg)[0]
        if not a.no_clairvoyant:
            policies["clairvoyant hourly"] = clairvoyant_hourly_steps(dprob, a.plan_time_limit)
            policies["clairvoyant 5-min"] = clairvoyant_step_steps(problem, rates, 5.0)
        for name, steps in policies.items():
            rep = replay_fleet_day(dprob, sc, steps, lt, seed=a.seed)
            totals.setdefault(name, []).append(rep)
            worst = min(rep.by_model.items(), key=lambda kv: kv[1][1] / max(kv[1][0], 1))
            print(f"  {name:9s}: ${rep.cost_usd:8,.2f}  {rep.gpu_hours:6.1f} GPU-h  util busy {rep.utilization:5.1%} "
                  f"capacity {rep.capacity_utilization:5.1%}  "
                  f"attainment {rep.attainment:6.2%} (lowest {worst[0]} {worst[1][1] / max(worst[1][0], 1):.1%})  "
                  f"migrations {rep.migrations}", flush=True)
    n = len(a.days)
    print(f"Average per day over days {' '.join(map(str, a.days))}:")
    agg = {}
    for name, reps in totals.items():
        cost = sum(r.cost_usd for r in reps) / n
        gh = sum(r.gpu_hours for r in reps) / n
        util = sum(r.busy_gpu_hours for r in reps) / n / gh if gh else 0.0  # pooled: busy / billed GPU-hours
        cap_u = sum(r.rated_gpu_hours for r in reps) / n / gh if gh else 0.0  # pooled: rated / billed GPU-hours
        att = sum(r.met for r in reps) / max(1, sum(r.requests for r in reps))
        mig = sum(r.migrations for r in reps) / n
        agg[name] = (cost, util, cap_u, att, mig)
        print(f"  {name:9s}: ${cost:9,.2f}  {gh:6.1f} GPU-h  util busy {util:5.1%} capacity {cap_u:5.1%}  "
              f"attainment {att:6.2%}  "
              f"migrations {mig:.0f}")
    print("Billed GPU-hours per day by model (dedicated replicas; shared GPUs apart):")
    for name, reps in totals.items():
        by: dict[str, float] = {}
        for r in reps:
            for m, h in r.gpu_hours_by_model.items():
                by[m] = by.get(m, 0.0) + h / n
        print(f"  {name:9s}: " + ", ".join(f"{m} {h:.1f}" for m, h in sorted(by.items())))
    print("SLO misses per day by model (requests missing a target or dropped):")
    for name, reps in totals.items():
        miss: dict[str, float] = {}
        for r in reps:
            for m, (req, met_n) in r.by_model.items():
                miss[m] = miss.get(m, 0.0) + (req - met_n) / n
        print(f"  {name:9s}: " + ", ".join(f"{m} {v:,.0f}" for m, v in sorted(miss.items())))
    c_r, u_r, k_r, a_r, _ = agg["reactive"]
    c_p, u_p, k_p, a_p, m_p = agg["replanner"]

    def met(ok: bool) -> str:
        return "met" if ok else "NOT met"

    print("Goals (re-planner against the reactive autoscaler, averages per day):")
    print(f"  cost {c_p / c_r:.3f}x (goal <= 0.85: {met(c_p <= 0.85 * c_r)}) at attainment {a_p:.2%} vs {a_r:.2%} "
          f"(goal >=: {met(a_p >= a_r)})")
    print(f"  {m_p:.0f} migrations a day (goal <= 40: {met(m_p <= 40)})")
    print(f"  capacity utilization {k_p:.1%} vs {k_r:.1%}, {k_p / k_r - 1:+.1%} relative (goal >= +10%: "
          f"{met(k_p >= 1.1 * k_r)}); busy utilization {u_p:.1%} vs {u_r:.1%}, {u_p / u_r - 1:+.1%} relative")
    others = [nm for nm in agg if nm not in ("static", "reactive", "replanner")]
    if others:
        print("Every other policy against the reactive autoscaler (cost ratio, attainment, migrations a day):")
        for nm in others:
            c, _, k, at, mg = agg[nm]
            print(f"  {nm}: {c / c_r:.3f}x at {at:.2%} ({'>=' if at >= a_r else '<'} the reactive's), "
                  f"capacity utilization {k / k_r - 1:+.1%}, {mg:.0f} migrations")
    if a.plot:
        plot(a.plot, agg, totals, a.days)
        print(f"plot: {a.plot}")

if __name__ == "__main__":
    main()
