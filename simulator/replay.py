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
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fleetplan.costmodels.capacity import SLO
from fleetplan.costmodels.energy import energy_kwh
from fleetplan.costmodels.hardware import Model
from fleetplan.costmodels.latency import decode_step_time_s, prefill_time_s
from fleetplan.costmodels.network import Link
from fleetplan.costmodels.queueing import normal_quantile
from fleetplan.costmodels.split import kv_transfer_s
from fleetplan.datasets.calibration import idle_fraction, load_calibration
from fleetplan.datasets.catalog import get_gpu, get_model
from fleetplan.datasets.network import inter_node_link, load_network_graph
from fleetplan.datasets.servegen import servegen_client_mix, servegen_day_curve
from fleetplan.datasets.traces import Trace, load_trace
from fleetplan.errors import InputError, UnknownNameError
from fleetplan.placement.plan import Plan
from fleetplan.placement.problem import Problem
from fleetplan.placement.scenario import (
    Scenario,
    scenario_catalog_file,
    scenario_models,
    scenario_profiles,
    scenario_slos,
)
from fleetplan.simulator.disagg import (
    PdFleet,
    RouteKey,
    choose_routes,
    decode_group,
    prefill_group,
    run_disaggregated,
)
from fleetplan.simulator.engine import FCFS, DeviceSpec, EngineSpec, Policy, RunResult, StepModel, run

#: ServeGen slot length, seconds.
_SLOT_S = 600.0


# ----------------------------------------------------------------------------------------------------------------
# The fleet of one window


@dataclass
class Fleet:
    """Engines and devices of one window, plus the model each engine serves.

    Attributes:
        engines, devices: as :func:`fleetplan.simulator.engine.run` takes them.
        device_models: per device, the models resident on it.
    """

    engines: list[EngineSpec]
    devices: list[DeviceSpec]
    device_models: list[tuple[str, ...]] = field(default_factory=list)


class FleetBuilder:
    """Builds :class:`Fleet` objects for a plan's windows, caching one :class:`StepModel` per replica type.

    Step times come from the same source as the plan's capacity
    (:func:`fleetplan.placement.scenario.scenario_profiles`): a measured profile's step times where it has them (a
    step-time CSV, Splitwise; extended linearly beyond the measured range, as :attr:`notes` says), else the
    calibrated roofline
    (:func:`fleetplan.costmodels.latency.prefill_time_s`, :func:`~fleetplan.costmodels.latency.decode_step_time_s`)
    with the scenario's dtypes and inter-node link: rate-only profiles (vllm bench serve, guidellm, throughput
    tables) have no step times, so the replay uses the roofline for them and :attr:`notes` says so. The KV
    budget is memory_utilization × GPUs × GPU memory − weights for a dedicated replica (as in
    :func:`fleetplan.costmodels.capacity.replica_capacity`) and the share option's footprint − weights on a shared GPU.
    """

    def __init__(self, problem: Problem, plan: Plan, scenario: Scenario, *, max_tokens: float = 32768,
                 step_models: dict[str, StepModel] | None = None):
        self.problem, self.plan, self.scenario = problem, plan, scenario
        self.max_tokens = max_tokens
        self._cache: dict[tuple, StepModel] = {}
        self._models: dict[str, tuple[Model, str, str]] | None = None
        self._override = step_models or {}
        self.profiles = scenario_profiles(scenario) if scenario is not None else {}
        #: Where each replica type's step times come from, when not from the roofline alone (for reports).
        self.notes: list[str] = []

    def scenario_file(self, key: str) -> str | None:
        """The scenario's ``files: {key: path}`` entry resolved against its folder, or None (the shipped table)."""
        return scenario_catalog_file(self.scenario, key) if self.scenario is not None else None

    def model_spec(self, model_name: str) -> tuple[Model, str, str]:
        """(Model, weight dtype, KV dtype) as the plan's scenario gives them (config.json, base_model, per-model
        dtypes: :func:`fleetplan.placement.scenario.scenario_models`); the catalog row and bf16 without one."""
        if self.scenario is not None and self.scenario.spec is not None:
            if self._models is None:
                self._models = scenario_models(self.scenario)
            if model_name in self._models:
                return self._models[model_name]
        opts = self.scenario.options if self.scenario is not None else {}
        return (get_model(model_name, self.scenario_file("models")), opts.get("weight_dtype", "bf16"),
                opts.get("kv_dtype", "bf16"))

    def step_model(self, model_name: str, pool_id: str, tp: int, pp: int, kv_budget_bytes: float | None,
                   role: str = "colocated") -> StepModel:
        """The (cached) step model of ``model_name`` on ``tp × pp`` GPUs of ``pool_id``. ``role`` 'decode': a decode
        replica of a disaggregated plan, whose "prefill" of a request is its first iteration on it: one decode step of
        one sequence at the prompt's context (:mod:`fleetplan.simulator.disagg`); 'colocated' and 'prefill' replicas
        prefill as the engine does."""
        if model_name in self._override:
            return self._override[model_name]
        key = (model_name, pool_id, tp, pp, kv_budget_bytes, role)
        if key in self._cache:
            return self._cache[key]

        opts = self.scenario.options if self.scenario is not None else {}
        model, wd, kd = self.model_spec(model_name)
        mu = opts.get("memory_utilization", 0.9)
        pool = self.problem.pool_by_id[pool_id]
        gpu = get_gpu(pool.gpu, self.scenario_file("gpus"))
        calib_file = opts.get("calibration")
        base = self.scenario.base_dir if self.scenario is not None else None
        if calib_file is not None and base and not os.path.isabs(calib_file):
            calib_file = os.path.join(base, calib_file)
        calib = load_calibration(gpu, calib_file)
        link = inter_node_link(opts.get("inter_node_link")) if pp > 1 else None
        kw: dict[str, Any] = dict(tp=tp, pp=pp, weight_dtype=wd, link=link, calib=calib)
        budget = mu * tp * pp * gpu.memory_bytes - model.weight_bytes(wd) if kv_budget_bytes is None \
            else kv_budget_bytes
        pcie = gpu.pcie_bytes_per_s / 2 * tp * pp if gpu.pcie_bytes_per_s else None

        def prefill(i: float) -> float:
            return prefill_time_s(model, gpu, i, **kw)

        def decode(b: float, c: float) -> float:
            return decode_step_time_s(model, gpu, b, c, kv_dtype=kd, **kw)

        prof = self.profiles.get(model.name, {}).get((gpu.name, tp)) if pp == 1 else None
        where = f"{model.name} on {gpu.name} tp{tp}"
        if prof is not None and prof.step is not None:
            st = prof.step
            bounds = (("prompts up to", getattr(st, "max_prompt_tokens", None)),
                      ("batch up to", getattr(st, "max_batch", None)),
                      ("context up to", getattr(st, "max_context_tokens", None)))
            rng = ", ".join(f"{what} {v:g}" for what, v in bounds if v is not None)
            st = st.for_replay() if hasattr(st, "for_replay") else st
            prefill, decode = st.prefill_time_s, st.decode_step_time_s  # type: ignore[assignment]
            note = (f"{where}: step times from {prof.label}; beyond the measured range ({rng}) the replay extends "
                    "them linearly")
        elif prof is not None:
            note = (f"{where}: the plan's capacity comes from {prof.label}, which has no step times; the replay "
                    f"uses the roofline ({calib.gpu} calibration row) for it")
        else:
            note = ""
        if note and note not in self.notes:
            self.notes.append(note)
        if role == "decode":
            step = decode

            def prefill(i: float) -> float:  # the decode replica's first iteration: the prompt's last token
                return step(1.0, i)
        sm = StepModel(prefill, decode,
                       kv_bytes_per_token=model.kv_bytes_per_token(kd), kv_budget_bytes=budget,
                       max_tokens=min(self.max_tokens, model.max_context_tokens),
                       sliding_window_tokens=model.sliding_window_tokens, pcie_bytes_per_s=pcie,
                       label=(f"{role} " if role != "colocated" else "") + f"{model_name} on {pool_id} tp{tp}"
                       + (f"xpp{pp}" if pp > 1 else ""))
        self._cache[key] = sm
        return sm

    def fleet(self, w: int) -> Fleet:
        """The devices and engines of window ``w``: every dedicated replica of the plan in that window, and every
        shared GPU (on all day)."""

        pools = self.problem.pool_by_id
        shares = self.problem.share_by_key
        engines: list[EngineSpec] = []
        devices: list[DeviceSpec] = []
        dm: list[tuple[str, ...]] = []
        for (m, pool_id, tp, pp), counts in sorted(self.plan.replicas.items()):
            n = counts[w]
            if not n:
                continue
            pool = pools[pool_id]
            gpu = get_gpu(pool.gpu, self.scenario_file("gpus"))
            sm = self.step_model(m, pool_id, tp, pp, None)
            served = self.problem.option_by_key[(m, pool_id, tp, pp)].class_capacity
            for r in range(n):
                devices.append(DeviceSpec(f"{m} {pool.label} tp{tp}x{pp} #{r + 1}", tp * pp,
                                          pool.usd_per_busy_gpu_hour, gpu.tdp_w or 0.0, gpu=pool.gpu))
                engines.append(EngineSpec(m, len(devices) - 1, sm, classes=frozenset(served) if served else None))
                dm.append((m,))
        for g_i, g in enumerate(self.plan.shared):
            pool = pools[g.pool]
            gpu = get_gpu(pool.gpu, self.scenario_file("gpus"))
            devices.append(DeviceSpec(f"shared {pool.label} #{g_i + 1} ({' + '.join(g.models)})", 1,
                                      pool.usd_per_busy_gpu_hour, gpu.tdp_w or 0.0, gpu=pool.gpu))
            for m in g.models:
                opt = shares[(m, g.pool)]

                model, wd, _ = self.model_spec(m)
                budget = opt.memory_bytes - model.weight_bytes(wd)
                engines.append(EngineSpec(m, len(devices) - 1, self.step_model(m, g.pool, 1, 1, budget)))
            dm.append(tuple(g.models))
        return Fleet(engines, devices, dm)

    def pd_fleet(self, w: int) -> PdFleet:
        """The prefill and decode replicas of window ``w`` (:class:`fleetplan.simulator.disagg.PdFleet`): one device
        and engine per replica; a prefill replica in the router group of its route (model, its pool's site, the
        decode site it ships to), a decode replica in the group of its model and site."""
        pools = self.problem.pool_by_id
        out = PdFleet([], [], [], [])
        for (m, role, pool_id, tp, dsite), counts in sorted(self.plan.pd_replicas.items()):
            n = counts[w]
            if not n:
                continue
            pool = pools[pool_id]
            gpu = get_gpu(pool.gpu, self.scenario_file("gpus"))
            sm = self.step_model(m, pool_id, tp, 1, None, role=role)
            group = prefill_group((m, pool.site, dsite)) if role == "prefill" else decode_group(m, pool.site)
            to = f" -> {dsite}" if role == "prefill" else ""
            for r in range(n):
                out.devices.append(DeviceSpec(f"{m} {role} {pool.gpu}@{pool.site} tp{tp}{to} #{r + 1}", tp,
                                              pool.usd_per_gpu_hour, gpu.tdp_w or 0.0, gpu=pool.gpu))
                out.engines.append(EngineSpec(m, len(out.devices) - 1, sm))
                out.groups.append(group)
                out.tp.append(tp)
        return out

    def kv_link(self, prefill_site: str, decode_site: str) -> Link:
        """The link a KV cache takes from ``prefill_site`` to ``decode_site``, as the planner's prefill options
        (:func:`fleetplan.placement.scenario.build_problem`) take it: the scenario's inter-node link inside a site,
        the shipped network graph's link between two sites."""
        if prefill_site == decode_site:
            opts = self.scenario.options if self.scenario is not None else {}
            return inter_node_link(opts.get("inter_node_link"))
        return load_network_graph().link(prefill_site, decode_site)

    def kv_transfer_s(self, route: RouteKey, prompt_tokens: np.ndarray, streams: np.ndarray) -> np.ndarray:
        """Seconds each prompt's KV cache takes over ``route``'s link (:func:`fleetplan.costmodels.split.
        kv_transfer_s`: KV-cached prompt tokens × KV bytes per token, one stream per prefill tp rank)."""
        model, _, kd = self.model_spec(route[0])
        link = self.kv_link(route[1], route[2])
        kvpt = model.kv_bytes_per_token(kd)
        return np.asarray([kv_transfer_s(model.kv_tokens_cached(float(t)) * kvpt, link, int(s))
                           for t, s in zip(prompt_tokens, streams, strict=True)], dtype=np.float64)


# ----------------------------------------------------------------------------------------------------------------
# Workloads


@dataclass(frozen=True, eq=False)
class Workload:
    """Requests to replay, sorted by arrival (numpy arrays of length n) and the measured interval.

    Attributes:
        arrival_s, input_tokens, output_tokens, model: per request.
        measure_from_s, measure_to_s: requests arriving in [from, to) are measured (earlier ones warm the fleet up).
        source: where the requests come from.
    """

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    model: np.ndarray
    measure_from_s: float
    measure_to_s: float
    source: str = ""

    @staticmethod
    def concat(parts: list[Workload], measure_from_s: float, measure_to_s: float, source: str) -> Workload:
        """Merge workloads into one sorted by arrival."""
        if not parts:
            z = np.zeros(0)
            return Workload(z, z.astype(np.int64), z.astype(np.int64), np.zeros(0, dtype=object), measure_from_s,
                            measure_to_s, source)
        a = np.concatenate([p.arrival_s for p in parts])
        order = np.argsort(a, kind="stable")
        return Workload(a[order], np.concatenate([p.input_tokens for p in parts])[order],
                        np.concatenate([p.output_tokens for p in parts])[order],
                        np.concatenate([p.model for p in parts])[order], measure_from_s, measure_to_s, source)


def _tokens(model_raw: dict, scenario: Scenario, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` requests' token lengths for a scenario model: its trace's requests, or the lognormals of its given
    statistics (:meth:`~fleetplan.costmodels.demand.TokenMix.draw`, what the capacity model samples too)."""
    return scenario.token_mixes[model_raw["name"]].draw(rng, n)


def gamma_renewal(rng: np.random.Generator, rate_req_per_s: float, cv: float, start_s: float,
                  end_s: float) -> np.ndarray:
    """Arrival times of a Gamma renewal process on [start_s, end_s): inter-arrivals Gamma(shape 1/cv², scale
    cv²/rate) (mean 1/rate, coefficient of variation cv; cv = 1 is Poisson). The first arrival is a uniform fraction
    of a first gap (an approximation of the stationary start). Empty for a zero rate."""
    span = end_s - start_s
    if rate_req_per_s <= 0 or span <= 0:
        return np.zeros(0)
    cv = cv if (cv and math.isfinite(cv) and cv > 0) else 1.0
    shape, scale = 1.0 / cv ** 2, cv ** 2 / rate_req_per_s
    expected = rate_req_per_s * span
    chunks, total = [], 0.0
    first = True
    while total < span:
        m = int(expected + 6 * math.sqrt(expected * max(cv * cv, 1.0)) + 16)
        g = rng.gamma(shape, scale, size=m)
        if first:
            g[0] *= rng.uniform()
            first = False
        c = total + np.cumsum(g)
        chunks.append(c)
        total = float(c[-1])
    t = np.concatenate(chunks)
    return start_s + t[t < span]


#: Per slot, either one CV (an array over the slots) or the clients' (share of the rate, CV) pairs.
_SlotCvs = np.ndarray | tuple[tuple[tuple[float, float], ...], ...]


def _day_rate_profile(model_raw: dict, scenario: Scenario, arrivals: str) -> tuple[np.ndarray, _SlotCvs, float, str]:
    """(rates per slot req/s, cv per slot or client mix per slot, slot length s, description) over the day for one
    model's demand."""
    dem = model_raw["demand"]
    L = float(scenario.options["window_length_s"])
    if "servegen" in dem:

        body = dem["servegen"]
        series, day, gaps = body["series"], body.get("day", "mean"), body.get("gaps", "interpolate")
        factor = float(body["mean_rate_req_per_s"]) / float(servegen_day_curve(series, day, L, gaps).mean())
        rates = servegen_day_curve(series, day, _SLOT_S, gaps) * factor
        cv: _SlotCvs
        if arrivals == "servegen":
            # One Gamma renewal process per ServeGen client, each with its share of the slot's rate and its own
            # fitted CV, superposed (servegen_client_mix): the total stream's burstiness as production had it.
            cv = servegen_client_mix(series, day)
            what = (f"ServeGen {series} 10-min rates × {factor:.4g}, one Gamma renewal process per ServeGen client "
                    "(its share of the rate, its fitted CV), superposed")
        else:
            cv = np.ones_like(rates)
            what = f"ServeGen {series} 10-min rates × {factor:.4g}, Poisson arrivals"
        return rates, cv, _SLOT_S, what
    rates = np.asarray(scenario.demands[model_raw["name"]].rates_req_per_s, dtype=np.float64)
    return rates, np.ones_like(rates), L, "window mean rates, Poisson arrivals"


def scenario_workload(scenario: Scenario, w: int, start_s: float, end_s: float, seed: int, *, arrivals: str = "poisson",
                      measure_from_s: float | None = None, models: list[str] | None = None,
                      names: list[str] | None = None) -> Workload:
    """Requests of every model of ``scenario`` arriving in [start_s, end_s) of window ``w`` (seconds from the
    window's start), drawn as the module docstring says. Deterministic for a given seed.

    ``names`` gives the catalog name of each scenario model in order (``[m.name for m in problem.models]``; the
    scenario may use an alias); ``models`` restricts the replay to those catalog names."""
    if arrivals not in ("servegen", "poisson"):
        raise InputError("arrivals must be 'servegen' or 'poisson'", field="arrivals", value=arrivals)
    L = float(scenario.options["window_length_s"])
    parts, what = [], []
    for i, m in enumerate(scenario.raw["models"]):
        name = names[i] if names is not None else m["name"]
        if models is not None and name not in models:
            continue
        rng = np.random.default_rng([seed, w, i])
        dem = m["demand"]
        if "trace" in dem:
            tr = _scenario_trace(dem, scenario)
            lo, hi = np.searchsorted(tr.arrival_s, [w * L + start_s, w * L + end_s])
            a = tr.arrival_s[lo:hi] - w * L
            inp, out = tr.input_tokens[lo:hi], tr.output_tokens[lo:hi]
            what.append(f"{name}: trace {tr.name} replayed")
        else:
            rates, cv, slot, desc = _day_rate_profile(m, scenario, arrivals)
            t0, t1 = w * L + start_s, w * L + end_s
            chunks = []
            k0, k1 = int(t0 // slot), int(math.ceil(t1 / slot))
            for k in range(k0, k1):
                a0, a1 = max(t0, k * slot), min(t1, (k + 1) * slot)
                r = float(rates[k % len(rates)])
                c = cv[k % len(cv)]
                if isinstance(c, tuple) and c:  # per-client superposition
                    chunks += [gamma_renewal(rng, r * share, ccv, a0, a1) for share, ccv in c]
                else:
                    chunks.append(gamma_renewal(rng, r, float(c) if not isinstance(c, tuple) else 1.0, a0, a1))
            a = np.sort(np.concatenate(chunks)) - w * L if chunks else np.zeros(0)
            inp, out = _tokens(m, scenario, rng, len(a))
            what.append(f"{name}: {desc}")
        parts.append(Workload(np.asarray(a, dtype=np.float64), np.asarray(inp, dtype=np.int64),
                              np.asarray(out, dtype=np.int64), np.full(len(a), name, dtype=object), 0, 0))
    return Workload.concat(parts, start_s if measure_from_s is None else measure_from_s, end_s,
                           "; ".join(what) + f"; seed {seed}")


def _scenario_trace(dem: dict, scenario: Scenario) -> Trace:
    from pathlib import Path


    body = dem["trace"]
    ref = body.get("file") or body.get("name")
    if body.get("file") and scenario.base_dir and not Path(ref).is_absolute():
        ref = str(Path(scenario.base_dir) / ref)
    tr = load_trace(ref)
    scale = float(body.get("rate_scale", 1.0) or 1.0)
    return tr.time_scaled(scale) if scale != 1.0 else tr


def peak_slot_start_s(scenario: Scenario, w: int) -> float:
    """Start (seconds from the window's start) of window ``w``'s busiest 10-minute slot, all models summed (0 when
    the window is not longer than a slot or the curves have no finer detail than the window)."""
    L = float(scenario.options["window_length_s"])
    if L <= _SLOT_S:
        return 0.0
    n = int(L // _SLOT_S)
    total = np.zeros(n)
    for m in scenario.raw["models"]:
        if "servegen" not in m["demand"]:
            continue
        rates, _, slot, _ = _day_rate_profile(m, scenario, "poisson")
        k0 = int(w * L // slot)
        total += np.resize(np.roll(rates, -k0)[:n], n)
    return float(np.argmax(total) * _SLOT_S)


# ----------------------------------------------------------------------------------------------------------------
# Metrics


#: Relative tolerance of a replayed percentile against its target before it counts as a miss (2%: the sampling
#: noise of a P95 over a few thousand requests).
SLO_TOLERANCE = 0.02


@dataclass(frozen=True)
class ModelWindowMetrics:
    """What one model got in one window (module docstring for the definitions).

    Times in seconds; utilization 0..1; energy kWh and cost USD per 1M tokens over the whole window.
    """

    model: str
    window: int
    requests: int
    dropped: int
    ttft_p50_s: float
    ttft_p95_s: float
    ttft_p99_s: float
    tpot_p50_s: float
    tpot_p95_s: float
    tpot_p99_s: float
    slo_attainment: float
    goodput_req_per_s: float
    queue_delay_p99_s: float
    utilization: float
    energy_kwh: float
    usd_per_1m_tokens: float
    ttft_slo_s: float
    tpot_slo_s: float
    preemptions: int = 0
    slo: SLO | None = None
    ttft_at_target_s: float = math.nan
    tpot_at_target_s: float = math.nan
    e2e_at_target_s: float = math.nan

    def as_dict(self) -> dict:
        d = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in self.__dict__.items()
             if k != "slo"}
        d["misses"] = self.misses()
        return d

    def misses(self, tolerance: float = SLO_TOLERANCE) -> list[str]:
        """The SLO targets this row misses: a latency at its target's percentile above target × (1 + tolerance),
        or an attainment below the SLO's attainment target; e.g. ['TPOT p95 125.3 ms > 100 ms']. Empty without an
        SLO or requests."""
        slo = self.slo
        if slo is None or not self.requests:
            return []
        out = []
        measured = {"ttft": self.ttft_at_target_s, "tpot": self.tpot_at_target_s, "e2e": self.e2e_at_target_s}
        for metric, pct, target in slo.targets():
            v = measured[metric]
            if math.isfinite(v) and v > target * (1.0 + tolerance):
                unit, k = ("ms", 1e3) if metric == "tpot" else ("s", 1.0)
                out.append(f"{metric.upper()} p{pct:g} {v * k:.4g} {unit} > {target * k:g} {unit}")
        if slo.attainment is not None and math.isfinite(self.slo_attainment) \
                and self.slo_attainment < slo.attainment - tolerance * (1.0 - slo.attainment):
            out.append(f"attainment {self.slo_attainment:.2%} < {slo.attainment:.2%}")
        return out


def _q(x: np.ndarray, q: float) -> float:
    return float(np.quantile(x, q)) if len(x) else math.nan


def model_slos(problem: Problem, scenario: Scenario | None) -> dict[str, SLO]:
    """Each model's :class:`SLO` (percentiles, end-to-end and attainment targets) from the scenario, by catalog
    name; p95 targets from the problem's model specs when there is no scenario."""
    if scenario is not None:
        return scenario_slos(scenario, problem)
    return {m.name: SLO(m.ttft_p95_s, m.tpot_p95_s) for m in problem.models}


def meets_slo(slo: SLO, ttft: np.ndarray, tpot: np.ndarray, e2e: np.ndarray, dropped: np.ndarray) -> np.ndarray:
    """Per request: meets every target of ``slo`` (and was not dropped)."""
    ok = (ttft <= slo.ttft_s) & (tpot <= slo.tpot_s) & ~dropped
    if slo.e2e_s is not None:
        ok &= e2e <= slo.e2e_s
    return ok


def _at_targets(slo: SLO, tt: np.ndarray, tp: np.ndarray, e2e: np.ndarray) -> dict[str, float]:
    """The replayed latency at each target's percentile (finite values only)."""
    return {"ttft_at_target_s": _q(tt[np.isfinite(tt)], slo.ttft_percentile / 100),
            "tpot_at_target_s": _q(tp[np.isfinite(tp)], slo.tpot_percentile / 100),
            "e2e_at_target_s": _q(e2e[np.isfinite(e2e)], slo.e2e_percentile / 100)}


def p95_confidence_interval(x: np.ndarray, q: float = 0.95, level: float = 0.95) -> tuple[float, float]:
    """Distribution-free confidence interval of the ``q`` quantile of ``x`` (order statistics at the binomial
    bounds: ranks n·q ∓ z·sqrt(n·q·(1−q)), z = the normal quantile of 0.5 + level/2, 1.96 for 95%). (nan, nan) with
    fewer than 20 values."""
    n = len(x)
    if n < 20:
        return math.nan, math.nan
    z = normal_quantile(0.5 + level / 2)
    s = np.sort(x)
    half = z * math.sqrt(n * q * (1 - q))
    lo = int(max(0, math.floor(n * q - half) - 1))
    hi = int(min(n - 1, math.ceil(n * q + half) - 1))
    return float(s[lo]), float(s[hi])


def request_latencies(wl: Workload, res: RunResult) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ttft_s, tpot_s, queue_s) per request; tpot is 0 for one-token outputs, NaN where not reached."""
    ttft = res.first_token_s - wl.arrival_s
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(wl.output_tokens > 1, (res.done_s - res.first_token_s) / (wl.output_tokens - 1), 0.0)
    queue = res.prefill_start_s - wl.arrival_s
    return ttft, tpot, queue


def window_metrics(problem: Problem, fleet: Fleet, wl: Workload, res: RunResult, w: int,
                   window_length_s: float, slos: dict[str, SLO] | None = None) -> list[ModelWindowMetrics]:
    """Per-model metrics of one simulated window (the measured interval of ``wl``; energy and cost extrapolated
    from the measured interval to ``window_length_s``). ``slos``: each model's targets (default: p95 targets of
    the problem's model specs)."""
    slos = slos or model_slos(problem, None)

    dur = max(wl.measure_to_s - wl.measure_from_s, 1e-9)
    span = max(res.end_s - 0.0, dur)
    ttft, tpot, queue = request_latencies(wl, res)
    measured = (wl.arrival_s >= wl.measure_from_s) & (wl.arrival_s < wl.measure_to_s)
    specs = problem.model_by_name
    # Device utilization over the simulated span (warm-up included: busy time is not attributable to requests).
    dev_u = np.minimum(res.device_busy_s / span, 1.0)
    eng_dev = np.asarray([e.device for e in fleet.engines])
    eng_model = np.asarray([e.model for e in fleet.engines], dtype=object)
    hours = window_length_s / 3600.0
    out = []
    for m in specs:
        sel = measured & (wl.model == m)
        n = int(sel.sum())
        mine = np.flatnonzero(eng_model == m)
        if n == 0 and len(mine) == 0:
            continue
        # Each of the model's engines owns a share of its device: busy share, or 1/k when the device was idle.
        cost = energy = dev_equiv = busy = 0.0
        for ei in mine:
            di = eng_dev[ei]
            on_dev = np.flatnonzero(eng_dev == di)
            tot = res.engine_busy_s[on_dev].sum()
            frac = res.engine_busy_s[ei] / tot if tot > 0 else 1.0 / len(on_dev)
            d = fleet.devices[di]
            cost += frac * d.gpus * d.usd_per_gpu_hour * hours
            if d.tdp_w:
                energy += frac * d.gpus * energy_kwh(d.tdp_w, float(dev_u[di]), hours, idle_fraction(d.gpu))
            dev_equiv += 1.0 / len(on_dev)
            busy += res.engine_busy_s[ei] / span
        spec, slo = specs[m], slos[m]
        dropped = res.dropped[sel]
        e2e = res.done_s[sel] - wl.arrival_s[sel]
        meets = meets_slo(slo, ttft[sel], tpot[sel], e2e, dropped)
        tt = ttft[sel][~dropped]
        tp = tpot[sel][(~dropped) & (wl.output_tokens[sel] > 1)]
        tokens = float((wl.input_tokens[sel] + wl.output_tokens[sel]).sum()) * window_length_s / dur
        out.append(ModelWindowMetrics(
            model=m, window=w, requests=n, dropped=int(dropped.sum()),
            ttft_p50_s=_q(tt, .5), ttft_p95_s=_q(tt, .95), ttft_p99_s=_q(tt, .99),
            tpot_p50_s=_q(tp, .5), tpot_p95_s=_q(tp, .95), tpot_p99_s=_q(tp, .99),
            slo_attainment=float(meets.mean()) if n else math.nan,
            goodput_req_per_s=float(meets.sum()) / dur,
            queue_delay_p99_s=_q(queue[sel][~dropped], .99),
            utilization=min(1.0, busy / dev_equiv) if dev_equiv else math.nan,
            energy_kwh=energy, usd_per_1m_tokens=cost / tokens * 1e6 if tokens else math.nan,
            ttft_slo_s=spec.ttft_p95_s, tpot_slo_s=spec.tpot_p95_s,
            preemptions=int(res.preemptions[sel].sum()), slo=slo, **_at_targets(slo, tt, tp, e2e[~dropped])))
    return out


# ----------------------------------------------------------------------------------------------------------------
# Replays


@dataclass
class SimReport:
    """Result of a replay.

    Attributes:
        rows: per (model, window) metrics.
        overall: per model metrics over every measured request (window = -1; energy and cost summed over windows).
        notes: how the replay was made (sources, slices, steady-state checks, confidence intervals).
        latencies: per model, (ttft_s, tpot_s) arrays of the measured requests (for plots).
        wall_s: wall time of the replay, seconds.
        requests: requests simulated (warm-up included).
    """

    rows: list[ModelWindowMetrics]
    overall: list[ModelWindowMetrics]
    notes: list[str]
    latencies: dict[str, tuple[np.ndarray, np.ndarray]]
    wall_s: float = 0.0
    requests: int = 0
    title: str = ""

    def attainment(self) -> float:
        """Share of all measured requests (all models) meeting both SLO targets."""
        n = sum(r.requests for r in self.overall)
        return sum(r.slo_attainment * r.requests for r in self.overall if r.requests) / n if n else math.nan

    def misses(self, tolerance: float = SLO_TOLERANCE) -> list[tuple[str, int, list[str]]]:
        """[(model, window, missed targets)] for every model-window row that misses a target
        (:meth:`ModelWindowMetrics.misses`), in row order."""
        return [(r.model, r.window, m) for r in self.rows if (m := r.misses(tolerance))]

    def to_dict(self) -> dict:
        keys = ("ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "tpot_p50_s", "tpot_p95_s", "tpot_p99_s", "slo_attainment",
                "goodput_req_per_s", "queue_delay_p99_s", "utilization", "energy_kwh", "usd_per_1m_tokens",
                "requests", "dropped", "preemptions", "ttft_at_target_s", "tpot_at_target_s", "e2e_at_target_s",
                "misses")

        def pick(r: ModelWindowMetrics) -> dict:
            d = r.as_dict()
            return {k: d[k] for k in keys}

        per_model: dict[str, dict] = {}
        for r in self.overall:
            per_model[r.model] = {"overall": pick(r), "windows": {}}
        for r in self.rows:
            per_model.setdefault(r.model, {"overall": None, "windows": {}})["windows"][str(r.window)] = pick(r)
        return {"title": self.title, "slo_attainment": _none(self.attainment()), "models": per_model,
                "misses": [{"model": m, "window": w, "targets": t} for m, w, t in self.misses()],
                "notes": self.notes, "wall_s": self.wall_s, "requests_simulated": self.requests}


def _none(x: float):
    return None if isinstance(x, float) and not math.isfinite(x) else x


def _overall(problem: Problem, rows: list[ModelWindowMetrics], lat: dict[str, list],
             slos: dict[str, SLO]) -> list[ModelWindowMetrics]:
    out = []
    for m in problem.model_by_name:
        rs = [r for r in rows if r.model == m]
        if not rs:
            continue
        n = sum(r.requests for r in rs)
        parts = lat.get(m, [])
        tt = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0)
        tp = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0)
        qq = np.concatenate([p[2] for p in parts]) if parts else np.zeros(0)
        ok = np.concatenate([p[3] for p in parts]) if parts else np.zeros(0, dtype=bool)
        e2e = np.concatenate([p[4] for p in parts]) if parts else np.zeros(0)
        tokens_cost = [(r.usd_per_1m_tokens, r.energy_kwh) for r in rs]
        costs = [c for c, _ in tokens_cost if math.isfinite(c)]
        spec = problem.model_by_name[m]
        out.append(ModelWindowMetrics(
            model=m, window=-1, requests=n, dropped=sum(r.dropped for r in rs),
            ttft_p50_s=_q(tt[np.isfinite(tt)], .5), ttft_p95_s=_q(tt[np.isfinite(tt)], .95),
            ttft_p99_s=_q(tt[np.isfinite(tt)], .99),
            tpot_p50_s=_q(tp[np.isfinite(tp)], .5), tpot_p95_s=_q(tp[np.isfinite(tp)], .95),
            tpot_p99_s=_q(tp[np.isfinite(tp)], .99),
            slo_attainment=float(ok.mean()) if len(ok) else math.nan,
            goodput_req_per_s=float(np.mean([r.goodput_req_per_s for r in rs])),
            queue_delay_p99_s=_q(qq[np.isfinite(qq)], .99),
            utilization=float(np.mean([r.utilization for r in rs if math.isfinite(r.utilization)] or [math.nan])),
            energy_kwh=sum(e for _, e in tokens_cost),
            usd_per_1m_tokens=float(np.mean(costs)) if costs else math.nan,
            ttft_slo_s=spec.ttft_p95_s, tpot_slo_s=spec.tpot_p95_s,
            preemptions=sum(r.preemptions for r in rs), slo=slos[m], **_at_targets(slos[m], tt, tp, e2e)))
    return out


def _collect(problem: Problem, wl: Workload, res: RunResult, lat: dict[str, list], slos: dict[str, SLO]) -> None:
    ttft, tpot, queue = request_latencies(wl, res)
    measured = (wl.arrival_s >= wl.measure_from_s) & (wl.arrival_s < wl.measure_to_s)
    e2e_all = res.done_s - wl.arrival_s
    for m in problem.model_by_name:
        sel = measured & (wl.model == m)
        if not sel.any():
            continue
        ok = meets_slo(slos[m], ttft[sel], tpot[sel], e2e_all[sel], res.dropped[sel])
        tp = np.where(wl.output_tokens[sel] > 1, tpot[sel], np.nan)
        lat.setdefault(m, []).append((ttft[sel], tp, queue[sel], ok, e2e_all[sel]))


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
    centre = peak_slot_start_s(scenario, w) + min(_SLOT_S, L) / 2
    a = min(max(0.0, centre - slice_s / 2), L - slice_s)
    return a - warmup_s, a, a + slice_s


def simulate_day(problem: Problem, plan: Plan, scenario: Scenario, *, seed: int = 0, slice_s: float | None = None,
                 warmup_s: float = 120.0, arrivals: str = "poisson", policy: Policy = FCFS,
                 windows: list[int] | None = None, models: list[str] | None = None,
                 progress: Callable[[str], None] | None = None) -> SimReport:
    """Replay the plan's own scenario, window by window (module docstring).

    Args:
        problem, plan, scenario: as :func:`fleetplan.placement.planio.problem_from_plan_dict` and
            :func:`~fleetplan.placement.planio.plan_from_dict` return them.
        seed: random seed (the same seed gives the same requests).
        slice_s: simulate this many seconds of each window (its busiest 10-minute slot widened), or None for the
            whole window.
        warmup_s: seconds simulated before a slice but not measured (ignored for whole windows).
        arrivals: 'servegen' (Gamma with ServeGen's fitted CV where the curve is ServeGen's) or 'poisson'.
        windows: window indices to run (default all); models: models to replay (default all).
        progress: called with a short status text before each window.
    """
    import time

    t0 = time.perf_counter()
    L = problem.window_length_s
    builder = FleetBuilder(problem, plan, scenario)
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
        _collect(problem, wl, res, lat, slos)
        if slice_s is not None and slice_s < L:
            ttft, _, _ = request_latencies(wl, res)
            mid = (mf + b) / 2
            h1 = ttft[(wl.arrival_s >= mf) & (wl.arrival_s < mid)]
            h2 = ttft[(wl.arrival_s >= mid) & (wl.arrival_s < b)]
            halves.append((_q(h1[np.isfinite(h1)], .95), _q(h2[np.isfinite(h2)], .95)))
    overall = _overall(problem, rows, lat, slos)
    notes.append(f"requests: {src}")
    notes += builder.notes
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
    try:
        if ":" in s:
            hh, mm = (int(x) for x in s.split(":", 1))
            if not (0 <= hh <= 23 and 0 <= mm <= 59):  # '12:60' is not 13:00
                raise ValueError
            t = hh * 3600 + mm * 60
            w = int(t // problem.window_length_s)
        else:
            w = int(s)
    except ValueError:
        raise InputError(f"window {text!r} is not HH:MM or a window index", field="window", value=text) from None
    if not 0 <= w < problem.n_windows:
        raise InputError(f"window {text!r} is outside the plan's {problem.n_windows} windows", field="window",
                         value=text)
    return w


def trace_workload(trace: Trace, problem: Problem, w: int, *, model: str | None = None, rate_scale: bool = False,
                   time_scale: float | None = None, seed: int = 0) -> Workload:
    """The requests of ``trace`` mapped onto the plan's models for window ``w`` (module docstring).

    Raises UnknownNameError for a model (in the trace or given) that the plan does not serve.
    """
    names = list(problem.model_by_name)
    specs = problem.model_by_name
    if model is not None and model not in specs:
        raise UnknownNameError("model", model, names, field="model")
    if time_scale is not None:
        trace = trace.time_scaled(time_scale)
    n = len(trace)
    rng = np.random.default_rng([seed, w])
    if trace.model is not None and model is None:
        mods = np.asarray(trace.model, dtype=object)
        for m in sorted(set(mods.tolist())):
            if m not in specs:
                raise UnknownNameError("model", str(m), names, field="model")
        what = "the trace's model column"
    elif model is not None:
        mods = np.full(n, model, dtype=object)
        what = f"every request to {model}"
    else:
        d = np.asarray([specs[m].demand_req_per_s[w] for m in names], dtype=np.float64)
        if d.sum() <= 0:
            raise InputError(f"no model has demand in window {w}; give --model", field="window", value=w)
        mods = np.asarray(names, dtype=object)[rng.choice(len(names), size=n, p=d / d.sum())]
        what = "split over the plan's models in proportion to their demand in the window (" + ", ".join(
            f"{m} {x / d.sum():.0%}" for m, x in zip(names, d, strict=True)) + ")"
    arr = trace.arrival_s - trace.arrival_s[0]
    factor = 1.0
    if rate_scale:
        want = sum(specs[m].demand_req_per_s[w] for m in set(mods.tolist()))
        have = n / max(trace.span_s, 1e-9)
        factor = want / have if have > 0 else 1.0
        arr = arr / factor
    end = float(arr[-1]) + 1e-9
    src = f"trace {trace.name} ({n} requests), {what}" + (
        f", rate-scaled x{factor:.3g} to the window's demand" if rate_scale else "")
    return Workload(arr.astype(np.float64), np.asarray(trace.input_tokens, dtype=np.int64),
                    np.asarray(trace.output_tokens, dtype=np.int64), mods, 0.0, end, src)


def simulate_trace(problem: Problem, plan: Plan, scenario: Scenario, trace: Trace, *,
                   window: str | int | None = None,
                   model: str | None = None, rate_scale: bool = False, time_scale: float | None = None,
                   seed: int = 0, policy: Policy = FCFS, bucket_s: float | None = None) -> SimReport:
    """Replay ``trace`` against one window's replicas (module docstring). ``window`` is 'HH:MM', an index or None
    (the peak window of the models the trace goes to). With ``bucket_s``, the per-window rows are per
    ``bucket_s``-second interval of the trace instead (their ``window`` field is the interval's index), e.g. to see
    TTFT grow during a burst."""
    import time

    t0 = time.perf_counter()
    w = window if isinstance(window, int) else parse_window(window, problem, [model] if model else None)
    wl = trace_workload(trace, problem, w, model=model, rate_scale=rate_scale, time_scale=time_scale, seed=seed)
    builder = FleetBuilder(problem, plan, scenario, max_tokens=float((wl.input_tokens + wl.output_tokens).max()))
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
    _collect(problem, wl, res, lat, slos)
    overall = _overall(problem, rows, lat, slos)
    notes = [f"requests: {wl.source}", f"replicas of window {w} ({w * problem.window_length_s / 3600:05.2f} h); "
             f"energy and cost over the trace's {dur:.0f} s"] + builder.notes
    for r in overall:
        tt = np.concatenate([p[0] for p in lat.get(r.model, [])]) if lat.get(r.model) else np.zeros(0)
        lo, hi = p95_confidence_interval(tt[np.isfinite(tt)])
        if math.isfinite(lo):
            notes.append(f"{r.model}: P95 TTFT {r.ttft_p95_s:.3f} s, 95% confidence interval [{lo:.3f}, {hi:.3f}] s")
    latencies = {m: (np.concatenate([p[0] for p in v]), np.concatenate([p[1] for p in v])) for m, v in lat.items()}
    return SimReport(rows, overall, notes, latencies, wall_s=time.perf_counter() - t0, requests=len(wl.arrival_s),
                     title=f"{problem.name}: trace {trace.name} on window {w}")


