"""Replay requests against a plan's replicas and measure what the plan delivers: ``fleetplan simulate``.

The discrete-event model is in :mod:`fleetplan.simulator.engine` (continuous batching, prefill priority, KV
limit per replica, shared GPUs time-sliced between their models, least-work or round-robin router). This module
builds the fleet of one window from a plan, draws or reads the requests, runs the engine and computes the metrics
people judge serving by, per model and per window.

Two replays:

* :func:`simulate_day` (no trace): the plan's own scenario over the whole day. For each window, arrivals follow the
  scenario's day curve. Where the curve comes from ServeGen, each 10-minute slot superposes one Gamma renewal
  process per ServeGen client active in that slot, with the client's share of the slot's rate and its own fitted
  inter-arrival CV (``servegen_client_mix``); ``arrivals='poisson'`` keeps the rate and drops the burstiness, i.e.
  the capacity model's own assumption. Token lengths are drawn jointly (prompt,
  output) from the token-mix trace, or lognormal from the four statistics. A model whose demand is a trace replays
  that trace's requests. Windows are independent: each starts empty (queues do not carry over window boundaries).
* :func:`simulate_trace`: a trace's requests against one window's replicas (the peak window by default), optionally
  rate-scaled to the window's demand. A trace with no model column is split over the plan's models in proportion to
  their demand in that window (seeded), or sent to one model.

Disaggregated plans (prefill and decode pools, ``Plan.pd_replicas``): the share of a model's requests the plan's KV
flows carry goes prefill replica -> KV transfer -> decode replica on a route drawn by the flows; TTFT counts the
prefill queue and prefill, the transfer, and the decode replica's first iteration, which emits the first token
(:mod:`fleetplan.simulator.disagg` says exactly what is modelled).

Slices: a window may be simulated for ``slice_s`` seconds instead of all of it (``simulate_day(slice_s=...)``). The
slice is the window's busiest 10-minute slot (the one the plan is sized for, ``demand_rate: peak``) widened
symmetrically to ``slice_s``, preceded by ``warmup_s`` seconds whose requests are simulated but not measured. Each
report states the slice, the steady-state check (P95 TTFT of the slice's first and second halves) and a
distribution-free 95% confidence interval of the P95 TTFT (binomial order statistics).

Metrics (per model and window): TTFT and TPOT P50/P95/P99 (TPOT = (done − first token) / (output − 1), requests with
one output token have none), SLO attainment = share of requests with TTFT ≤ the TTFT target and TPOT ≤ the TPOT
target (a dropped request misses), goodput = such requests per second, queueing delay P99 (arrival → prefill start),
utilization (busy share of the model's devices; a shared GPU counts 1/k per resident model), energy kWh (board power
linear in utilization, :func:`fleetplan.costmodels.energy.energy_kwh`, per GPU, extrapolated to the whole window),
cost per 1M tokens (GPU-hours × price of the model's devices over the window / prompt + output tokens of the window).
A shared GPU's cost and energy are split between its models by busy time (equally when idle).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from fleetplan.datasets.traces import Trace
from fleetplan.errors import InputError, UnknownNameError
from fleetplan.placement.plan import Plan
from fleetplan.placement.problem import DeratingKey, Problem, time_of_day_s
from fleetplan.scenario.read import Scenario
from fleetplan.simulator.disagg import (
    choose_routes,
    run_disaggregated,
)
from fleetplan.simulator.engine import FCFS, Policy, RunResult, run
from fleetplan.simulator.fleet import Fleet, FleetBuilder
from fleetplan.simulator.metrics import (
    ModelWindowMetrics,
    SimReport,
    collect_latencies,
    model_slos,
    overall_metrics,
    p95_confidence_interval,
    quantile_or_nan,
    request_latencies,
    window_metrics,
)
from fleetplan.simulator.workload import SLOT_S, Workload, peak_slot_start_s, scenario_workload, trace_workload


def run_window(builder: FleetBuilder, wl: Workload, w: int, policy: Policy = FCFS,
               seed: int = 0) -> tuple[Fleet, RunResult]:
    """Run ``wl`` on window ``w``'s fleet. A disaggregated plan's requests go prefill replica -> KV transfer ->
    decode replica on the routes of the plan's flows (:mod:`fleetplan.simulator.disagg`; ``seed`` draws the
    routes). Raises InputError when a request's model has no replica there."""
    fleet = builder.fleet(w)
    pd = builder.pd_fleet(w)
    served = {e.model for e in fleet.engines} | {e.model for e in pd.engines}
    missing = sorted(set(wl.model.tolist()) - served)
    if missing:
        known = sorted(builder.problem.model_by_name)
        unknown = [m for m in missing if m not in known]
        if unknown:
            raise UnknownNameError("model", unknown[0], known, field="model")
        raise InputError(f"the plan has no replica of {missing[0]} in window {w}, but requests for it arrive; "
                         "plan with min_replicas >= 1 or pick another window", field="model", value=missing[0])
    classes = request_classes(builder.problem, wl)
    flows = {k: f[w] for k, f in builder.plan.kv_flows_req_per_s.items() if f[w] > 0}
    if pd.empty and not flows:
        return fleet, run(wl.arrival_s, wl.input_tokens, wl.output_tokens, wl.model, fleet.engines, fleet.devices,
                          policy, class_of=classes)
    demand = {m.name: m.demand_req_per_s[w] for m in builder.problem.models}
    routes = choose_routes(wl.model, flows, demand, {e.model for e in fleet.engines},
                           np.random.default_rng([seed, w, 17]))
    engines, devices, res = run_disaggregated(wl.arrival_s, wl.input_tokens, wl.output_tokens, wl.model, routes,
                                              fleet.engines, fleet.devices, pd, builder.kv_transfer_s,
                                              policy=policy, class_of=classes)
    dm = fleet.device_models + [(e.model,) for e in pd.engines]
    return Fleet(engines, devices, dm), res


def request_classes(problem: Problem, wl: Workload) -> np.ndarray | None:
    """Request class of each request of ``wl`` (:meth:`ModelSpec.request_classes`; None entries route to any
    replica of the model), or None when no model has class bounds."""
    models = [m for m in problem.models if m.class_max_tokens]
    if not models:
        return None
    out = np.full(len(wl.model), None, dtype=object)
    for m in models:
        sel = wl.model == m.name
        out[sel] = m.request_classes(wl.input_tokens[sel], wl.output_tokens[sel])
    return out


def _slice_bounds_s(scenario: Scenario, w: int, window_length_s: float, slice_s: float | None,
                    warmup_s: float) -> tuple[float, float, float]:
    """(start, measure from, end) of window ``w``'s replay, seconds from the window's start: the whole window, or a
    ``slice_s`` slice centred on its busiest 10-minute slot (kept inside the window) after ``warmup_s`` of warm-up,
    which may start before the window."""
    L = window_length_s
    if slice_s is None or slice_s >= L:
        return 0.0, 0.0, L
    centre = peak_slot_start_s(scenario, w) + min(SLOT_S, L) / 2
    a = min(max(0.0, centre - slice_s / 2), L - slice_s)
    return a - warmup_s, a, a + slice_s


def pessimistic_note(step_time_factors: dict[DeratingKey, float]) -> str:
    """The report note of a replay whose step times were stretched (:class:`FleetBuilder`'s
    ``step_time_factors``): how many options, and the range of factors."""
    fs = sorted(step_time_factors.values())
    return (f"step times stretched at the pessimistic end of the plan's stated capacity errors: {len(fs)} option(s), "
            f"x{fs[0]:.3f}" + (f" to x{fs[-1]:.3f}" if fs[-1] != fs[0] else "")
            + " (1 / (1 - error)); options without an error at x1")


def simulate_day(problem: Problem, plan: Plan, scenario: Scenario, *, seed: int = 0, slice_s: float | None = None,
                 warmup_s: float = 120.0, arrivals: str = "poisson", policy: Policy = FCFS,
                 windows: list[int] | None = None, models: list[str] | None = None,
                 progress: Callable[[str], None] | None = None,
                 step_time_factors: dict[DeratingKey, float] | None = None) -> SimReport:
    """Replay the plan's own scenario, window by window (module docstring).

    Args:
        problem, plan, scenario: as :func:`fleetplan.outputs.planio.problem_from_plan_dict` and
            :func:`~fleetplan.outputs.planio.plan_from_dict` return them.
        seed: random seed (the same seed gives the same requests).
        slice_s: simulate this many seconds of each window (its busiest 10-minute slot widened), or None for the
            whole window.
        warmup_s: seconds simulated before a slice but not measured (ignored for whole windows).
        arrivals: 'servegen' (Gamma with ServeGen's fitted CV where the curve is ServeGen's) or 'poisson'.
        windows: window indices to run (default all); models: models to replay (default all).
        progress: called with a short status text before each window.
        step_time_factors: {option key: factor} stretching those options' step times (:class:`FleetBuilder`), e.g.
            :func:`fleetplan.outputs.uncertainty.stated_step_time_factors` for the pessimistic end of the plan's
            stated capacity errors; the report's notes say so.
    """
    import time

    t0 = time.perf_counter()
    L = problem.window_length_s
    builder = FleetBuilder(problem, plan, scenario, step_time_factors=step_time_factors)
    slos = model_slos(problem, scenario)
    rows: list[ModelWindowMetrics] = []
    lat: dict[str, list] = {}
    notes: list[str] = []
    total = 0
    halves: list[tuple[float, float]] = []
    src = ""
    for w in (windows if windows is not None else range(problem.n_windows)):
        if progress:
            progress(f"window {w + 1}/{problem.n_windows}")
        a, mf, b = _slice_bounds_s(scenario, w, L, slice_s, warmup_s)
        wl = scenario_workload(scenario, w, a, b, seed, arrivals=arrivals, measure_from_s=mf, models=models,
                               names=[m.name for m in problem.models])
        src = wl.source
        total += len(wl.arrival_s)
        if len(wl.arrival_s) == 0:
            continue
        fleet, res = run_window(builder, wl, w, policy, seed=seed)
        rows += window_metrics(problem, fleet, wl, res, w, L, slos)
        collect_latencies(problem, wl, res, lat, slos)
        if slice_s is not None and slice_s < L:
            ttft, _, _ = request_latencies(wl, res)
            mid = (mf + b) / 2
            h1 = ttft[(wl.arrival_s >= mf) & (wl.arrival_s < mid)]
            h2 = ttft[(wl.arrival_s >= mid) & (wl.arrival_s < b)]
            halves.append((quantile_or_nan(h1[np.isfinite(h1)], .95), quantile_or_nan(h2[np.isfinite(h2)], .95)))
    overall = overall_metrics(problem, rows, lat, slos)
    notes.append(f"requests: {src}")
    notes += builder.notes
    if step_time_factors:
        notes.append(pessimistic_note(step_time_factors))
    if slice_s is not None and slice_s < L:
        notes.append(f"each {L:g}-s window is simulated for a {slice_s:g}-s slice around its busiest 10-minute slot "
                     f"(the one the plan is sized for), after a {warmup_s:g}-s warm-up that is not measured; energy "
                     "and cost are extrapolated to the whole window")
        diffs = [abs(x - y) / max(x, y) for x, y in halves if math.isfinite(x) and math.isfinite(y) and max(x, y) > 0]
        if diffs:
            notes.append(f"steady state: P95 TTFT of a slice's first and second halves differ by a median of "
                         f"{np.median(diffs):.0%} (max {max(diffs):.0%}) over the windows")
    else:
        notes.append(f"every window simulated whole ({L:g} s), starting empty")
    for r in overall:
        parts = lat.get(r.model, [])
        tt = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0)
        lo, hi = p95_confidence_interval(tt[np.isfinite(tt)])
        if math.isfinite(lo):
            notes.append(f"{r.model}: P95 TTFT {r.ttft_p95_s:.3f} s, 95% confidence interval [{lo:.3f}, {hi:.3f}] s "
                         f"over {r.requests} requests")
    latencies = {m: (np.concatenate([p[0] for p in v]), np.concatenate([p[1] for p in v])) for m, v in lat.items()}
    return SimReport(rows, overall, notes, latencies, wall_s=time.perf_counter() - t0, requests=total,
                     title=f"{problem.name}: the scenario's day replayed (seed {seed}, arrivals {arrivals})")


def peak_window(problem: Problem, models: list[str] | None = None) -> int:
    """Index of the window with the highest total demand of ``models`` (all by default)."""
    names = set(models) if models else set(problem.model_by_name)
    tot = [sum(m.demand_req_per_s[w] for m in problem.models if m.name in names) for w in range(problem.n_windows)]
    return int(np.argmax(tot))


def parse_window(text: str | None, problem: Problem, models: list[str] | None = None) -> int:
    """A window index from 'HH:MM' (time of day), a plain index, or None (the peak window)."""
    if text is None:
        return peak_window(problem, models)
    s = str(text).strip()
    if ":" in s:
        w = int(time_of_day_s(s, field="--window") // problem.window_length_s)
    elif s.isdigit():
        w = int(s)
    else:
        raise InputError(f"--window {text!r} is not a time of day HH:MM or a window index; give e.g. 14:00 or 14",
                         field="--window", value=text)
    if not 0 <= w < problem.n_windows:
        raise InputError(f"window {text!r} is outside the plan's {problem.n_windows} windows", field="window",
                         value=text)
    return w


def simulate_trace(problem: Problem, plan: Plan, scenario: Scenario, trace: Trace, *,
                   window: str | int | None = None,
                   model: str | None = None, rate_scale: bool = False, time_scale: float | None = None,
                   seed: int = 0, policy: Policy = FCFS, bucket_s: float | None = None,
                   step_time_factors: dict[DeratingKey, float] | None = None) -> SimReport:
    """Replay ``trace`` against one window's replicas (module docstring). ``window`` is 'HH:MM', an index or None
    (the peak window of the models the trace goes to). With ``bucket_s``, the per-window rows are per
    ``bucket_s``-second interval of the trace instead (their ``window`` field is the interval's index), e.g. to see
    TTFT grow during a burst. ``step_time_factors``: as :func:`simulate_day`'s."""
    import time

    t0 = time.perf_counter()
    w = window if isinstance(window, int) else parse_window(window, problem, [model] if model else None)
    wl = trace_workload(trace, problem, w, model=model, rate_scale=rate_scale, time_scale=time_scale, seed=seed)
    builder = FleetBuilder(problem, plan, scenario, max_tokens=float((wl.input_tokens + wl.output_tokens).max()),
                           step_time_factors=step_time_factors)
    slos = model_slos(problem, scenario)
    fleet, res = run_window(builder, wl, w, policy, seed=seed)
    dur = wl.measure_to_s - wl.measure_from_s
    if bucket_s:
        rows = []
        for k in range(int(math.ceil(dur / bucket_s))):
            part = Workload(wl.arrival_s, wl.input_tokens, wl.output_tokens, wl.model, k * bucket_s,
                            min((k + 1) * bucket_s, wl.measure_to_s), wl.source)
            rows += window_metrics(problem, fleet, part, res, k, part.measure_to_s - part.measure_from_s, slos)
    else:
        rows = window_metrics(problem, fleet, wl, res, w, dur, slos)
    lat: dict[str, list] = {}
    collect_latencies(problem, wl, res, lat, slos)
    overall = overall_metrics(problem, rows, lat, slos)
    notes = [f"requests: {wl.source}", f"replicas of window {w} ({w * problem.window_length_s / 3600:05.2f} h); "
             f"energy and cost over the trace's {dur:.0f} s"] + builder.notes
    if step_time_factors:
        notes.append(pessimistic_note(step_time_factors))
    for r in overall:
        tt = np.concatenate([p[0] for p in lat.get(r.model, [])]) if lat.get(r.model) else np.zeros(0)
        lo, hi = p95_confidence_interval(tt[np.isfinite(tt)])
        if math.isfinite(lo):
            notes.append(f"{r.model}: P95 TTFT {r.ttft_p95_s:.3f} s, 95% confidence interval [{lo:.3f}, {hi:.3f}] s")
    latencies = {m: (np.concatenate([p[0] for p in v]), np.concatenate([p[1] for p in v])) for m, v in lat.items()}
    return SimReport(rows, overall, notes, latencies, wall_s=time.perf_counter() - t0, requests=len(wl.arrival_s),
                     title=f"{problem.name}: trace {trace.name} on window {w}")
