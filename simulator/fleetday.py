"""Replay a fleet that changes during the day: a sequence of plans with times (``fleetplan simulate --fleet``).

A :class:`FleetStep` says which replicas (per option) and shared GPUs run from ``at_s`` on (seconds from the day's
start). Between two steps the difference is a migration: a started replica is billed from its step and serves after
its load time (``load_time_s``, e.g. :func:`fleetplan.solvers.online.state.load_times`; a shared GPU after the sum
of its residents' tp-1 load times, :func:`fleetplan.solvers.online.state.shared_load_s`); a stopped replica takes no
new requests after its stop and finishes its queue (billed until its last request is done); loading replicas are
stopped before ready ones, and the newest first (as :class:`fleetplan.solvers.online.replanner.Replanner` does).
Make-before-break (the default): a serving replica a step removes while the same step starts replicas of its model
serves until those are ready (the actuator and a Kubernetes rolling update do the same), and is billed until then.

Requests are the scenario's (:func:`day_requests`: :func:`fleetplan.simulator.workload.scenario_workload` window
by window, optionally scaled per model and window), Poisson or bursty (ServeGen clients). By default the day is one
engine run, so queues carry over from one window to the next; ``carry_queues=False`` replays each window on its own
starting empty (as ``simulate_day`` does). The router (:mod:`fleetplan.simulator.engine`) sends a request only to
replicas serving at its arrival; a request whose model has no serving replica then is dropped (counted as missing
its SLO).

Outages (:class:`Outage`): pools unavailable for a while. Their replicas stop serving when it starts (the requests
they hold and have not finished by then are lost: they count as missing their SLO), nothing serves there until it
ends, and a replica a step still lists then starts again (billed from the end, serving after its load time). A
replica is not billed while its pool is down.

Reported (:class:`FleetDayReport`): GPU cost (billed GPU-hours × the pool's price; egress not included), GPU-hours,
mean utilization (busy GPU-seconds / billed GPU-seconds; busy = the engine is running a prefill or decode step, which
continuous batching keeps near 100% at any load), capacity utilization (the rated GPU-seconds of the requests served
/ billed GPU-seconds: a request served by a replica of option o uses o.gpus / o.capacity_req_per_s GPU-seconds of
rated capacity, one served on a shared GPU 1 / the share option's capacity_req_per_s, the planner's ratings, so a
fleet billed exactly for its load at rated capacity is at 100%), SLO attainment (share of requests meeting every
TTFT and TPOT target of their model, :func:`fleetplan.simulator.metrics.model_slos`), per model, per minute of
arrival (:meth:`FleetDayReport.between`) and overall, and migrations (replica starts + stops, shared GPUs one each).
Prefill/decode pools are not replayed as a changing fleet (a step naming one is refused); ``fleetplan simulate``
replays a disaggregated plan window by window.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from fleetplan import fileio
from fleetplan.datasets.catalog.names import get_gpu
from fleetplan.errors import InputError, UnknownNameError
from fleetplan.placement.problem import OptionKey, Problem
from fleetplan.scenario.read import Scenario, scenario_models
from fleetplan.simulator.engine import FCFS, DeviceSpec, EngineSpec, Policy, run
from fleetplan.simulator.fleet import FleetBuilder
from fleetplan.simulator.metrics import meets_slo, model_slos, request_latencies
from fleetplan.simulator.workload import Workload, scenario_workload
from fleetplan.solvers.online.state import shared_load_s

#: Resolution of the per-arrival-time tallies (:meth:`FleetDayReport.between`), seconds.
TALLY_SLOT_S = 60.0


@dataclass(frozen=True)
class FleetStep:
    """From ``at_s`` (seconds from the day's start) on, ``replicas`` {option key: count} and ``shared`` GPUs
    ((pool, resident models), one entry per GPU) run."""

    at_s: float
    replicas: Mapping[OptionKey, int]
    shared: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class Outage:
    """The pools ``pools`` (ids) are unavailable from ``from_s`` to ``to_s``, seconds from the day's start (module
    docstring)."""

    pools: tuple[str, ...]
    from_s: float
    to_s: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.from_s) and math.isfinite(self.to_s) and 0 <= self.from_s < self.to_s):
            raise InputError("an outage needs 0 <= from_s < to_s (seconds from the day's start)", field="outages",
                             value=(self.from_s, self.to_s))

    def overlaps(self, start_s: float, stop_s: float) -> bool:
        return start_s < self.to_s and stop_s > self.from_s


@dataclass
class _Life:
    key: OptionKey | None  # None: a shared GPU
    pool: str
    models: tuple[str, ...]
    start_s: float
    ready_s: float
    stop_s: float = math.inf
    killed: bool = False  # stopped by an outage at stop_s: what it holds then is lost


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
    #: (requests, met) by minute of arrival ({minute of the day: (requests, met)}).
    by_minute: dict[int, tuple[int, int]] = field(default_factory=dict)

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

    def between(self, from_s: float, to_s: float) -> tuple[int, int]:
        """(requests, met) of the requests arriving in [from_s, to_s), seconds from the day's start, to the minute
        (the minutes that start in the range)."""
        lo, hi = math.ceil(from_s / TALLY_SLOT_S), math.ceil(to_s / TALLY_SLOT_S)
        req = met = 0
        for k in range(lo, hi):
            r, m = self.by_minute.get(k, (0, 0))
            req += r
            met += m
        return req, met

    def _tally(self, models: np.ndarray, arrival_s: np.ndarray, ok: np.ndarray) -> None:
        for m in np.unique(models):
            sel = models == m
            r, met = self.by_model.get(str(m), (0, 0))
            self.by_model[str(m)] = (r + int(sel.sum()), met + int(ok[sel].sum()))
        self.requests += len(models)
        self.met += int(ok.sum())
        slot = (arrival_s // TALLY_SLOT_S).astype(int)
        for k, n, n_ok in zip(*np.unique(slot, return_counts=True), np.bincount(slot, weights=ok)[np.unique(slot)],
                              strict=True):
            r, met = self.by_minute.get(int(k), (0, 0))
            self.by_minute[int(k)] = (r + int(n), met + int(n_ok))


def steps_from_dict(d: dict, problem: Problem) -> list[FleetStep]:
    """Steps from a fleet-history JSON dict: ``{"steps": [{"at_s": s, "replicas": [{"model", "pool", "tp", "pp",
    "count"}], "shared": [{"pool", "models"}]}]}`` with ``at_s`` in seconds from the day's start, increasing. Raises
    InputError naming the step and field when the shape is wrong or an option is not one of ``problem``'s."""
    steps = d.get("steps") if isinstance(d, dict) else None
    if not isinstance(steps, list) or not steps:
        raise InputError("a fleet history needs a non-empty list 'steps'", field="steps")
    out: list[FleetStep] = []
    for i, s in enumerate(steps):
        at, reps, shared = _step_from_dict(s, i, problem)
        if not (math.isfinite(at) and 0 <= at < problem.n_windows * problem.window_length_s):
            raise InputError(f"steps[{i}].at_s must be within the day (0 .. "
                             f"{problem.n_windows * problem.window_length_s:g} s)", field=f"steps[{i}].at_s", value=at)
        if out and at < out[-1].at_s:
            raise InputError("steps must be in time order", field=f"steps[{i}].at_s", value=at)
        if out and at == out[-1].at_s:
            raise InputError(f"steps[{i - 1}] and steps[{i}] are both at {at:g} s; one step holds the whole fleet "
                             "from its time on: merge them", field=f"steps[{i}].at_s", value=at)
        _check_inventory(reps, i, problem)
        out.append(FleetStep(at, reps, shared))
    return out


def _check_inventory(reps: dict[OptionKey, int], i: int, problem: Problem) -> None:
    """InputError when step ``i``'s replicas (``reps``: {option key: count}) need more GPUs in a pool than its
    inventory holds (nodes × GPUs per node less the reserved ones), as a plan file with those counts is refused."""
    used: dict[str, int] = {}
    for key, n in reps.items():
        used[key[1]] = used.get(key[1], 0) + n * problem.option_by_key[key].gpus
    for pid, g in sorted(used.items()):
        have = problem.pool_by_id[pid].gpus
        if g > have:
            raise InputError(f"steps[{i}]: the replicas on pool {pid} need {g:,} GPUs but its inventory holds "
                             f"{have:,}; lower the counts (or plan a larger inventory in the scenario)",
                             field=f"steps[{i}].replicas", value=g)


def _check_option(key: OptionKey, problem: Problem, field: str) -> None:
    """Raise InputError naming ``field`` when ``key`` (model, pool, tp, pp) is not a replica option of ``problem``:
    an unknown model or pool (with "did you mean"), or the shapes the model does have on that pool."""
    if key in problem.option_by_key:
        return
    model, pool, tp, pp = key
    if model not in problem.model_by_name:
        raise UnknownNameError("model", model, problem.model_by_name, field=f"{field}.model")
    if pool not in problem.pool_by_id:
        raise UnknownNameError("pool", pool, problem.pool_by_id, field=f"{field}.pool")
    shapes = sorted(f"tp {o.tp} pp {o.pp}" for o in problem.options if o.model == model and o.pool == pool)
    raise InputError(f"{model} has no tp {tp} pp {pp} option on {pool} in the scenario; "
                     + (f"its options there: {', '.join(shapes)}" if shapes else "it has no option on that pool"),
                     field=field, value=list(key))


def _step_from_dict(s: dict, i: int, problem: Problem) -> tuple[float, dict[OptionKey, int], tuple]:
    pools = problem.pool_by_id
    try:
        at = float(s["at_s"])
        reps: dict[OptionKey, int] = {}
        first: dict[OptionKey, int] = {}
        for k, r in enumerate(s.get("replicas", [])):
            key = (str(r["model"]), str(r["pool"]), int(r["tp"]), int(r["pp"]))
            _check_option(key, problem, f"steps[{i}].replicas[{k}]")
            if key in first:  # the two counts were added up without a word
                raise InputError(f"steps[{i}].replicas[{k}] repeats the option of replicas[{first[key]}] ({key[0]} "
                                 f"on {key[1]}, tp {key[2]}, pp {key[3]}); give each option once, with its whole "
                                 "count", field=f"steps[{i}].replicas[{k}]", value=list(key))
            first[key] = k
            n = int(r["count"])
            if n < 0:
                raise InputError(f"steps[{i}]: a count must be >= 0", field=f"steps[{i}].replicas[{k}].count",
                                 value=n)
            reps[key] = n
        shared = tuple((str(g["pool"]), tuple(str(m) for m in g["models"])) for g in s.get("shared", []))
    except InputError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"steps[{i}] is malformed: {type(exc).__name__} {exc}", field=f"steps[{i}]") from None
    for j, (pool, models) in enumerate(shared):
        if pool not in pools:
            raise UnknownNameError("pool", pool, pools, field=f"steps[{i}].shared[{j}].pool")
        twice = sorted({m for m in models if models.count(m) > 1})
        if twice:
            raise InputError(f"steps[{i}].shared[{j}] lists {', '.join(twice)} twice; a shared GPU holds each model "
                             "once", field=f"steps[{i}].shared[{j}].models", value=twice[0])
        for m in models:
            if (m, pool) not in problem.share_by_key:
                raise InputError(f"steps[{i}].shared[{j}]: {m} has no shared-GPU option on {pool} in the scenario",
                                 field=f"steps[{i}].shared[{j}].models", value=m)
    return at, reps, shared


def read_json(path: str) -> dict:
    """A JSON file as a dict; InputError naming the file when it is missing or not JSON."""
    return fileio.read_json(path, what="fleet file (JSON: {\"steps\": [...]})")


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


def lifetimes(steps: Sequence[FleetStep], load_time_s: Mapping[OptionKey, float], *,
              make_before_break: bool = True, outages: Sequence[Outage] = ()) -> list[_Life]:
    """Every replica and shared GPU the steps run, with start, ready and stop times (module docstring). The
    replicas and shared GPUs of the first step are ready at its time (the fleet is already up)."""
    lives: list[_Life] = []
    alive: dict[OptionKey, list[_Life]] = {}
    alive_sh: list[_Life] = []
    for i, st in enumerate(steps):
        t = st.at_s
        started: list[_Life] = []
        stopping: list[_Life] = []
        for k in sorted(set(alive) | set(st.replicas)):
            cur = alive.setdefault(k, [])
            want = st.replicas.get(k, 0)
            while len(cur) < want:
                life = _Life(k, k[1], (k[0],), t, t + (load_time_s.get(k, 0.0) if i else 0.0))
                cur.append(life)
                started.append(life)
            while len(cur) > want:
                cur.sort(key=lambda x: (x.ready_s > t, x.start_s))
                stopping.append(cur.pop())
        keep = list(st.shared)
        for life in list(alive_sh):
            g = (life.pool, life.models)
            if g in keep:
                keep.remove(g)
            else:
                alive_sh.remove(life)
                stopping.append(life)
        for pool, models in keep:
            life = _Life(None, pool, models, t, t + (shared_load_s(pool, models, load_time_s) if i else 0.0))
            alive_sh.append(life)
            started.append(life)
        lives += started
        for life in stopping:
            life.stop_s = _stop_time(life, started, t, make_before_break)
    return _apply_outages(lives, outages, load_time_s)


def _stop_time(life: _Life, started: list[_Life], t: float, make_before_break: bool) -> float:
    """When a replica a step at ``t`` removes stops: at ``t`` if it does not serve yet (a cancelled load) or nothing
    of its models starts in that step; else, make-before-break, once those new replicas are ready."""
    if not make_before_break or life.ready_s > t:
        return t
    ready = [x.ready_s for x in started if set(x.models) & set(life.models)]
    return max([t, *ready])


def _apply_outages(lives: list[_Life], outages: Sequence[Outage], load_time_s: Mapping[OptionKey, float]
                   ) -> list[_Life]:
    """Cut every life at the outages of its pool (module docstring): killed at the outage's start, restarted at its
    end when it would still run then; a life that starts during one starts at its end instead."""
    for o in outages:
        pools = set(o.pools)
        out: list[_Life] = []
        for x in lives:
            if x.pool not in pools or not o.overlaps(x.start_s, x.stop_s):
                out.append(x)
                continue
            load = load_time_s.get(x.key, 0.0) if x.key is not None else shared_load_s(x.pool, x.models, load_time_s)
            if x.start_s < o.from_s:
                out.append(_Life(x.key, x.pool, x.models, x.start_s, x.ready_s, o.from_s, killed=True))
            if x.stop_s > o.to_s:
                out.append(_Life(x.key, x.pool, x.models, o.to_s, o.to_s + load, x.stop_s))
        lives = out
    return lives


def day_requests(problem: Problem, scenario: Scenario, seed: int, *, arrivals: str = "poisson",
                 demand_factors: Mapping[tuple[str, int], float] | None = None,
                 windows: Sequence[int] | None = None) -> Workload:
    """The scenario's requests of the day (or of ``windows``), arrival times in seconds from the day's start:
    :func:`scenario_workload` window by window (``arrivals`` 'poisson' or 'servegen'). ``demand_factors``
    {(model, window): f}: the model's requests of that window kept with probability f when f < 1; when f > 1, the
    requests of ⌊f − 1⌋ independent draws of the window are added, and of one more kept with probability the
    fraction left (so the expected rate is f × the scenario's, with the scenario's own burstiness). Deterministic for
    a seed. Raises InputError for a factor < 0 or an unknown model."""
    L = problem.window_length_s
    names = [m.name for m in problem.models]
    factors = dict(demand_factors or {})
    for (m, _w), f in factors.items():
        if m not in names:
            raise InputError(f"demand factor for unknown model {m!r}", field="demand_factors", value=m)
        if not (math.isfinite(f) and f >= 0):
            raise InputError(f"demand factor {f!r} for {m} must be a finite number >= 0", field="demand_factors",
                             value=f)
    parts = []
    for w in (windows if windows is not None else range(problem.n_windows)):
        wl = scenario_workload(scenario, w, 0.0, L, seed, arrivals=arrivals, names=names)
        parts.append(_shifted(_scaled(wl, scenario, w, seed, arrivals, names, factors), w * L))
    span = (0.0, problem.n_windows * L)
    return Workload.concat(parts, *span, source=parts[0].source if parts else "")


def _scaled(wl: Workload, scenario: Scenario, w: int, seed: int, arrivals: str, names: list[str],
            factors: Mapping[tuple[str, int], float]) -> Workload:
    L = float(scenario.options["window_length_s"])
    keep = np.ones(len(wl.arrival_s), dtype=bool)
    extra = []
    for i, m in enumerate(names):
        f = factors.get((m, w), 1.0)
        if f == 1.0:
            continue
        rng = np.random.default_rng([seed, w, i, 7919])
        sel = wl.model == m
        if f < 1.0:
            keep[sel] = rng.uniform(size=int(sel.sum())) < f
            continue
        whole, frac = int(f - 1.0), f - 1.0 - int(f - 1.0)
        for j in range(whole + (frac > 0)):
            more = scenario_workload(scenario, w, 0.0, L, seed + 104729 * (j + 1), arrivals=arrivals, names=names,
                                     models=[m])
            if j == whole:
                more = _subset(more, rng.uniform(size=len(more.arrival_s)) < frac)
            extra.append(more)
    base = _subset(wl, keep)
    return Workload.concat([base, *extra], wl.measure_from_s, wl.measure_to_s, wl.source) if extra else base


def _subset(wl: Workload, sel: np.ndarray) -> Workload:
    return Workload(wl.arrival_s[sel], wl.input_tokens[sel], wl.output_tokens[sel], wl.model[sel], wl.measure_from_s,
                    wl.measure_to_s, wl.source)


def _shifted(wl: Workload, by_s: float) -> Workload:
    return Workload(wl.arrival_s + by_s, wl.input_tokens, wl.output_tokens, wl.model, wl.measure_from_s + by_s,
                    wl.measure_to_s + by_s, wl.source)


@dataclass
class _Span:
    """One engine run: the lives alive in [start_s, end_s) as devices and engines, and the requests arriving then."""

    start_s: float
    end_s: float
    lives: list[_Life]
    devices: list[DeviceSpec]
    engines: list[EngineSpec]
    rated_s: list[float]  # per engine: GPU-seconds of rated capacity one request uses
    device_life: list[int]  # per device: index into lives


def _span(problem: Problem, builder: FleetBuilder, lives: list[_Life], start_s: float, end_s: float) -> _Span:
    pools = problem.pool_by_id
    shares = problem.share_by_key
    options = problem.option_by_key
    sp = _Span(start_s, end_s, [], [], [], [], [])
    for x in lives:
        if not (x.start_s < end_s and x.stop_s > start_s):
            continue
        pool = pools[x.pool]
        gpu = get_gpu(pool.gpu, builder.scenario_file("gpus"))
        sp.lives.append(x)
        d = len(sp.devices)
        sp.device_life.append(len(sp.lives) - 1)
        if x.key is not None:
            m, _, tp, pp = x.key
            sp.devices.append(DeviceSpec(f"{m} {x.pool} tp{tp}x{pp}", tp * pp, pool.usd_per_busy_gpu_hour,
                                         gpu.tdp_w or 0.0, gpu=pool.gpu))
            eng = builder.engine_of(m, x.pool, tp, pp)
            sp.engines.append(EngineSpec(m, d, builder.step_model(m, x.pool, tp, pp, None, engine=eng), x.ready_s,
                                         x.stop_s, engine=eng))
            sp.rated_s.append(tp * pp / options[x.key].capacity_req_per_s)
            continue
        sp.devices.append(DeviceSpec(f"shared {x.pool}", 1, pool.usd_per_busy_gpu_hour, gpu.tdp_w or 0.0,
                                     gpu=pool.gpu))
        for m in x.models:
            model, mwd, _ = builder.model_spec(m)
            budget = shares[(m, x.pool)].memory_bytes - model.weight_bytes(mwd)
            eng = builder.engine_on(shares[(m, x.pool)].engine, x.pool)
            sp.engines.append(EngineSpec(m, d, builder.step_model(m, x.pool, 1, 1, budget, engine=eng), x.ready_s,
                                         x.stop_s, engine=eng))
            sp.rated_s.append(1.0 / shares[(m, x.pool)].capacity_req_per_s)
    return sp


def _replay_span(sp: _Span, wl: Workload, slos: dict, names: list[str], policy: Policy, rep: FleetDayReport) -> None:
    """Run the span's requests on its fleet and add its requests, outcomes, busy time and billing to ``rep``."""
    served = {e.model for e in sp.engines}
    keep = np.isin(wl.model, list(served)) if len(wl.arrival_s) else np.zeros(0, dtype=bool)
    unserved = ~keep
    rep._tally(wl.model[unserved], wl.arrival_s[unserved], np.zeros(int(unserved.sum()), dtype=bool))
    done_by_dev = np.zeros(len(sp.devices))
    busy = np.zeros(len(sp.devices))
    if keep.any():
        idx = np.flatnonzero(keep)
        sub = _subset(wl, keep)
        res = run(sub.arrival_s, sub.input_tokens, sub.output_tokens, sub.model, sp.engines, sp.devices, policy)
        tt, tp_, e2e = request_latencies(sub, res)
        ok = np.zeros(len(idx), dtype=bool)
        for m in served:
            sel = sub.model == m
            ok[sel] = meets_slo(slos[m], tt[sel], tp_[sel], e2e[sel], res.dropped[sel])
        dev_of_eng = np.array([e.device for e in sp.engines])
        done = (res.engine >= 0) & ~res.dropped
        fin = np.where(np.isfinite(res.done_s), res.done_s, 0.0)
        # a replica an outage stopped loses what it had not finished by then
        lives_of_eng = [sp.lives[sp.device_life[d]] for d in dev_of_eng]
        kill = np.array([x.stop_s if x.killed else math.inf for x in lives_of_eng])
        lost = done & (fin > kill[np.maximum(res.engine, 0)])
        ok &= ~lost
        done &= ~lost
        rep._tally(sub.model, sub.arrival_s, ok)
        rep.rated_gpu_hours += float(np.asarray(sp.rated_s)[res.engine[done]].sum()) / 3600.0
        for ei in range(len(sp.engines)):
            on = (res.engine == ei) & done
            if on.any():
                d = dev_of_eng[ei]
                done_by_dev[d] = max(done_by_dev[d], float(fin[on].max()))
        busy = res.device_busy_s
    _bill(sp, done_by_dev, busy, rep)


def _bill(sp: _Span, done_by_dev: np.ndarray, busy: np.ndarray, rep: FleetDayReport) -> None:
    """Billed GPU-hours and cost of each device over the span: from its start to its stop, or its last request
    done after a stop (not after an outage stopped it)."""
    for d, dev in enumerate(sp.devices):
        x = sp.lives[sp.device_life[d]]
        start = max(x.start_s, sp.start_s)
        finish = x.stop_s if x.killed else max(x.stop_s, float(done_by_dev[d]))
        end = min(finish, sp.end_s) if math.isfinite(x.stop_s) else sp.end_s
        billed_h = max(0.0, end - start) / 3600.0 * dev.gpus
        rep.gpu_hours += billed_h
        who = x.models[0] if x.key is not None else "shared GPUs"
        rep.gpu_hours_by_model[who] = rep.gpu_hours_by_model.get(who, 0.0) + billed_h
        rep.cost_usd += billed_h * dev.usd_per_gpu_hour
        rep.busy_gpu_hours += min(float(busy[d]), max(0.0, end - start)) / 3600.0 * dev.gpus


def replay_fleet_day(problem: Problem, scenario: Scenario, steps: Sequence[FleetStep],
                     load_time_s: Mapping[OptionKey, float], *, seed: int = 0, windows: Sequence[int] | None = None,
                     policy: Policy = FCFS, progress: Callable[[str], None] | None = None, arrivals: str = "poisson",
                     carry_queues: bool = True, make_before_break: bool = True, outages: Sequence[Outage] = (),
                     demand_factors: Mapping[tuple[str, int], float] | None = None) -> FleetDayReport:
    """Replay the scenario's requests against the changing fleet of ``steps`` (module docstring), over the day or
    the ``windows`` given (indices; with ``carry_queues``, their span from the first to the last as one run).
    Raises InputError when ``steps`` is empty or names a prefill/decode replica, or an outage names an unknown
    pool."""
    if not steps:
        raise InputError("no fleet steps to replay", field="steps")
    pools = problem.pool_by_id
    for o in outages:
        for p in o.pools:
            if p not in pools:
                raise InputError(f"outage of unknown pool {p!r}", field="outages", value=p)
    for i, st in enumerate(steps):
        bad = [k for k in st.replicas if len(k) != 4 or k not in problem.option_by_key]
        if bad:
            raise InputError(f"steps[{i}]: {bad[0]} is not a colocated option of the scenario (prefill/decode pools "
                             "are not replayed as a changing fleet)", field=f"steps[{i}].replicas", value=bad[0])
    L = problem.window_length_s
    lives = lifetimes(steps, load_time_s, make_before_break=make_before_break, outages=outages)
    builder = FleetBuilder(problem, None, scenario)  # type: ignore[arg-type]  # only step models are used
    slos = model_slos(problem, scenario)
    names = [m.name for m in problem.models]
    ws = sorted(windows) if windows is not None else list(range(problem.n_windows))
    rep = FleetDayReport(0.0, 0.0, 0.0, 0, 0, count_migrations(steps), {m: (0, 0) for m in names})
    groups = [ws] if carry_queues else [[w] for w in ws]
    for g in groups:
        if progress:
            progress(f"windows {g[0] + 1}-{g[-1] + 1} of {problem.n_windows}")
        span = _span(problem, builder, lives, g[0] * L, (g[-1] + 1) * L)
        wl = day_requests(problem, scenario, seed, arrivals=arrivals, demand_factors=demand_factors,
                          windows=range(g[0], g[-1] + 1))
        _replay_span(span, wl, slos, names, policy, rep)
    rep.windows = ws
    return rep


def plan_steps(problem: Problem, replicas: Mapping[OptionKey, Sequence[int]],
               shared: Sequence[tuple[str, tuple[str, ...]]] = ()) -> list[FleetStep]:
    """The steps of an offline (per-window) plan: one step at each window's start."""
    return [FleetStep(w * problem.window_length_s, {k: c[w] for k, c in replicas.items() if c[w]}, tuple(shared))
            for w in range(problem.n_windows)]
