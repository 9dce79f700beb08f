"""Replay a fleet that changes during the day: a sequence of plans with times (``fleetplan simulate --fleet``).

A :class:`FleetStep` says which replicas (per option) and shared GPUs run from ``at_s`` on (seconds from the day's
start). Between two steps the difference is a migration: a started replica is billed from its step and serves after
its load time (``load_time_s``, e.g. :func:`fleetplan.solvers.online.load_times`); a stopped replica takes no new
requests after its step and finishes its queue (billed until its last request is done); loading replicas are stopped
before ready ones, and the newest first (as :class:`fleetplan.solvers.online.Replanner` does). Shared GPUs serve at
once. Requests are the scenario's (:func:`fleetplan.simulator.workload.scenario_workload`), window by window; each
window starts empty (queues do not carry over window boundaries, as in ``simulate_day``) and sees every replica alive
in it, with the router (:mod:`fleetplan.simulator.engine`) sending a request only to replicas serving at its arrival.
A request whose model has no serving replica at its arrival is dropped (counted as missing its SLO).

Reported (:class:`FleetDayReport`): GPU cost (billed GPU-hours × the pool's price; egress not included), GPU-hours,
mean utilization (busy GPU-seconds / billed GPU-seconds; busy = the engine is running a prefill or decode step, which
continuous batching keeps near 100% at any load), capacity utilization (the rated GPU-seconds of the requests served
/ billed GPU-seconds: a request served by a replica of option o uses o.gpus / o.capacity_req_per_s GPU-seconds of
rated capacity, one served on a shared GPU 1 / the share option's capacity_req_per_s, the planner's ratings, so a
fleet billed exactly for its load at rated capacity is at 100%), SLO attainment (share of requests meeting every
TTFT and TPOT target of their model, :func:`fleetplan.simulator.metrics.model_slos`), per model and overall, and
migrations (replica starts + stops, shared GPUs one each).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fleetplan.datasets.catalog.names import get_gpu
from fleetplan.errors import InputError
from fleetplan.placement.problem import OptionKey, Problem
from fleetplan.scenario.read import Scenario, scenario_models
from fleetplan.simulator.engine import FCFS, DeviceSpec, EngineSpec, Policy, run
from fleetplan.simulator.fleet import FleetBuilder
from fleetplan.simulator.metrics import meets_slo, model_slos, request_latencies
from fleetplan.simulator.workload import scenario_workload


@dataclass(frozen=True)
class FleetStep:
    """From ``at_s`` (seconds from the day's start) on, ``replicas`` {option key: count} and ``shared`` GPUs
    ((pool, resident models), one entry per GPU) run."""

    at_s: float
    replicas: Mapping[OptionKey, int]
    shared: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass
class _Life:
    key: OptionKey | None  # None: a shared GPU
    pool: str
    models: tuple[str, ...]
    start_s: float
    ready_s: float
    stop_s: float = math.inf


@dataclass
class FleetDayReport:
    """What a changing fleet delivered over the replayed windows (module docstring for the definitions)."""

    cost_usd: float
    gpu_hours: float
    busy_gpu_hours: float
    requests: int
    met: int
    migrations: int
    by_model: dict[str, tuple[int, int]] = field(default_factory=dict)  # {model: (requests, met)}
    windows: list[int] = field(default_factory=list)
    #: GPU-hours of rated capacity the served requests used (module docstring: capacity utilization).
    rated_gpu_hours: float = 0.0
    #: Billed GPU-hours per model's dedicated replicas; shared GPUs under 'shared GPUs' (they sum to gpu_hours).
    gpu_hours_by_model: dict[str, float] = field(default_factory=dict)

    @property
    def utilization(self) -> float:
        """Busy GPU-hours / billed GPU-hours (0 when nothing was billed)."""
        return self.busy_gpu_hours / self.gpu_hours if self.gpu_hours else 0.0

    @property
    def capacity_utilization(self) -> float:
        """Rated GPU-hours of the served requests / billed GPU-hours (0 when nothing was billed): the served load
        over the rated capacity of the billed GPUs (module docstring)."""
        return self.rated_gpu_hours / self.gpu_hours if self.gpu_hours else 0.0

    @property
    def attainment(self) -> float:
        """Share of requests that met their model's SLO targets (1 when there were none)."""
        return self.met / self.requests if self.requests else 1.0


def steps_from_dict(d: dict, problem: Problem) -> list[FleetStep]:
    """Steps from a fleet-history JSON dict: ``{"steps": [{"at_s": s, "replicas": [{"model", "pool", "tp", "pp",
    "count"}], "shared": [{"pool", "models"}]}]}`` with ``at_s`` in seconds from the day's start, increasing. Raises
    InputError naming the step and field when the shape is wrong or an option is not one of ``problem``'s."""
    steps = d.get("steps") if isinstance(d, dict) else None
    if not isinstance(steps, list) or not steps:
        raise InputError("a fleet history needs a non-empty list 'steps'", field="steps")
    opts = problem.option_by_key
    pools = problem.pool_by_id
    out: list[FleetStep] = []
    for i, s in enumerate(steps):
        try:
            at = float(s["at_s"])
            reps: dict[OptionKey, int] = {}
            for r in s.get("replicas", []):
                key = (str(r["model"]), str(r["pool"]), int(r["tp"]), int(r["pp"]))
                if key not in opts:
                    raise InputError(f"steps[{i}]: {key} is not an option of the scenario",
                                     field=f"steps[{i}].replicas", value=list(key))
                n = int(r["count"])
                if n < 0:
                    raise InputError(f"steps[{i}]: a count must be >= 0", field=f"steps[{i}].replicas", value=n)
                reps[key] = reps.get(key, 0) + n
            shared = tuple((str(g["pool"]), tuple(str(m) for m in g["models"])) for g in s.get("shared", []))
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"steps[{i}] is malformed: {exc!r}", field=f"steps[{i}]") from None
        for pool, _ in shared:
            if pool not in pools:
                raise InputError(f"steps[{i}]: unknown pool {pool!r}", field=f"steps[{i}].shared", value=pool)
        if not (math.isfinite(at) and 0 <= at < problem.n_windows * problem.window_length_s):
            raise InputError(f"steps[{i}].at_s must be within the day (0 .. "
                             f"{problem.n_windows * problem.window_length_s:g} s)", field=f"steps[{i}].at_s", value=at)
        if out and at < out[-1].at_s:
            raise InputError("steps must be in time order", field=f"steps[{i}].at_s", value=at)
        out.append(FleetStep(at, reps, shared))
    return out


def read_json(path: str) -> dict:
    """A JSON file as a dict; InputError naming the file when it is missing or not JSON."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"no such file {p}", source=str(p))
    try:
        return json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"not JSON: {exc}", source=str(p)) from None


def scenario_weight_bytes(problem: Problem, scenario: Scenario) -> dict[str, float]:
    """{model: weight bytes} of the plan's models at their weight dtypes (for load times): the scenario's own models
    (config.json, base_model, files.models, per-model dtypes) as the planner saw them."""
    planned = {m.name for m in problem.models}
    return {name: model.weight_bytes(wd) for name, (model, wd, _kvd) in scenario_models(scenario).items()
            if name in planned}


def count_migrations(steps: Sequence[FleetStep]) -> int:
    """Replica starts + stops between consecutive steps (shared GPUs one each); the first step is the start."""
    n = 0
    for a, b in zip(steps, steps[1:], strict=False):
        for k in set(a.replicas) | set(b.replicas):
            n += abs(b.replicas.get(k, 0) - a.replicas.get(k, 0))
        old = list(a.shared)
        for g in b.shared:
            if g in old:
                old.remove(g)
            else:
                n += 1
        n += len(old)
    return n


def lifetimes(steps: Sequence[FleetStep], load_time_s: Mapping[OptionKey, float]) -> list[_Life]:
    """Every replica and shared GPU the steps run, with start, ready and stop times (module docstring). The
    replicas of the first step are ready at its time (the fleet is already up)."""
    lives: list[_Life] = []
    alive: dict[OptionKey, list[_Life]] = {}
    alive_sh: list[_Life] = []
    for i, st in enumerate(steps):
        t = st.at_s
        for k in sorted(set(alive) | set(st.replicas)):
            cur = alive.setdefault(k, [])
            want = st.replicas.get(k, 0)
            while len(cur) < want:
                life = _Life(k, k[1], (k[0],), t, t + (load_time_s.get(k, 0.0) if i else 0.0))
                cur.append(life)
                lives.append(life)
            while len(cur) > want:
                cur.sort(key=lambda x: (x.ready_s > t, x.start_s))
                cur.pop().stop_s = t
        keep = list(st.shared)
        for life in list(alive_sh):
            g = (life.pool, life.models)
            if g in keep:
                keep.remove(g)
            else:
                life.stop_s = t
                alive_sh.remove(life)
        for pool, models in keep:
            life = _Life(None, pool, models, t, t)
            alive_sh.append(life)
            lives.append(life)
    return lives


def replay_fleet_day(problem: Problem, scenario: Scenario, steps: Sequence[FleetStep],
                     load_time_s: Mapping[OptionKey, float], *, seed: int = 0, windows: Sequence[int] | None = None,
                     policy: Policy = FCFS, progress: Callable[[str], None] | None = None) -> FleetDayReport:
    """Replay the scenario's requests against the changing fleet of ``steps`` (module docstring), window by window
    (``windows``: indices, default all). Raises InputError when ``steps`` is empty."""
    if not steps:
        raise InputError("no fleet steps to replay", field="steps")
    L = problem.window_length_s
    lives = lifetimes(steps, load_time_s)
    pools = problem.pool_by_id
    shares = problem.share_by_key
    options = problem.option_by_key
    builder = FleetBuilder(problem, None, scenario)  # type: ignore[arg-type]  # only step models are used
    slos = model_slos(problem, scenario)
    names = [m.name for m in problem.models]
    rep = FleetDayReport(0.0, 0.0, 0.0, 0, 0, count_migrations(steps), {m: (0, 0) for m in names})
    for w in (windows if windows is not None else range(problem.n_windows)):
        a, b = w * L, (w + 1) * L
        if progress:
            progress(f"window {w + 1}/{problem.n_windows}")
        live = [x for x in lives if x.start_s < b and x.stop_s > a]
        engines: list[EngineSpec] = []
        devices: list[DeviceSpec] = []
        rated_s: list[float] = []  # per engine: GPU-seconds of rated capacity one request uses
        for x in live:
            pool = pools[x.pool]
            gpu = get_gpu(pool.gpu, builder.scenario_file("gpus"))
            frm, until = x.ready_s - a, x.stop_s - a
            if x.key is not None:
                m, _, tp, pp = x.key
                devices.append(DeviceSpec(f"{m} {x.pool} tp{tp}x{pp}", tp * pp, pool.usd_per_busy_gpu_hour,
                                          gpu.tdp_w or 0.0, gpu=pool.gpu))
                engines.append(EngineSpec(m, len(devices) - 1, builder.step_model(m, x.pool, tp, pp, None), frm,
                                          until))
                rated_s.append(tp * pp / options[x.key].capacity_req_per_s)
            else:
                devices.append(DeviceSpec(f"shared {x.pool}", 1, pool.usd_per_busy_gpu_hour, gpu.tdp_w or 0.0,
                                          gpu=pool.gpu))
                for m in x.models:
                    model, mwd, _ = builder.model_spec(m)
                    weights = model.weight_bytes(mwd)
                    budget = shares[(m, x.pool)].memory_bytes - weights
                    engines.append(EngineSpec(m, len(devices) - 1, builder.step_model(m, x.pool, 1, 1, budget), frm,
                                              until))
                    rated_s.append(1.0 / shares[(m, x.pool)].capacity_req_per_s)
        wl = scenario_workload(scenario, w, 0.0, L, seed, names=names)
        served = {e.model for e in engines}
        keep = np.isin(wl.model, list(served)) if len(wl.arrival_s) else np.zeros(0, dtype=bool)
        unserved = ~keep
        for m in names:  # requests of a model with no replica alive in the window at all: dropped
            n_un = int((unserved & (wl.model == m)).sum())
            if n_un:
                r, met = rep.by_model[m]
                rep.by_model[m] = (r + n_un, met)
                rep.requests += n_un
        done_by_dev = np.zeros(len(devices))
        if keep.any():
            idx = np.flatnonzero(keep)
            res = run(wl.arrival_s[idx], wl.input_tokens[idx], wl.output_tokens[idx], wl.model[idx], engines,
                      devices, policy)
            sub = type(wl)(wl.arrival_s[idx], wl.input_tokens[idx], wl.output_tokens[idx], wl.model[idx], 0.0, L,
                           wl.source)
            tt, tp_, e2e = request_latencies(sub, res)
            for m in served:
                sel = sub.model == m
                ok = meets_slo(slos[m], tt[sel], tp_[sel], e2e[sel], res.dropped[sel])
                r, met = rep.by_model[m]
                rep.by_model[m] = (r + int(sel.sum()), met + int(ok.sum()))
                rep.requests += int(sel.sum())
                rep.met += int(ok.sum())
            dev_of_eng = np.array([e.device for e in engines])
            served_by = res.engine
            done = (served_by >= 0) & ~res.dropped
            rep.rated_gpu_hours += float(np.asarray(rated_s)[served_by[done]].sum()) / 3600.0
            fin = np.where(np.isfinite(res.done_s), res.done_s, 0.0)
            for ei in range(len(engines)):
                on = served_by == ei
                if on.any():
                    d = dev_of_eng[ei]
                    done_by_dev[d] = max(done_by_dev[d], float(fin[on].max()))
            busy = res.device_busy_s
        else:
            busy = np.zeros(len(devices))
        for d, (x, dev) in enumerate(zip(live, devices, strict=True)):
            start = max(x.start_s - a, 0.0)
            end = min(max(x.stop_s - a, done_by_dev[d]), L) if math.isfinite(x.stop_s) else L
            billed_h = max(0.0, end - start) / 3600.0 * dev.gpus
            rep.gpu_hours += billed_h
            who = x.models[0] if x.key is not None else "shared GPUs"
            rep.gpu_hours_by_model[who] = rep.gpu_hours_by_model.get(who, 0.0) + billed_h
            rep.cost_usd += billed_h * dev.usd_per_gpu_hour
            rep.busy_gpu_hours += min(float(busy[d]), max(0.0, end - start)) / 3600.0 * dev.gpus
        rep.windows.append(w)
    return rep


def plan_steps(problem: Problem, replicas: Mapping[OptionKey, Sequence[int]],
               shared: Sequence[tuple[str, tuple[str, ...]]] = ()) -> list[FleetStep]:
    """The steps of an offline (per-window) plan: one step at each window's start."""
    return [FleetStep(w * problem.window_length_s, {k: c[w] for k, c in replicas.items() if c[w]}, tuple(shared))
            for w in range(problem.n_windows)]


__all__ = ["FleetDayReport", "FleetStep", "count_migrations", "lifetimes", "plan_steps", "read_json",
           "replay_fleet_day", "scenario_weight_bytes", "steps_from_dict"]
