"""The fleet of one window of a plan as the engine runs it (:class:`Fleet`, built by :class:`FleetBuilder`): an engine
per replica with its step times (the cost models, or a measured profile where the scenario names one), the devices
they run on (shared GPUs time-sliced between their models), and the prefill and decode pools of a disaggregated
plan.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fleetplan.costmodels.capacity import speculative_latency
from fleetplan.costmodels.engine import DEFAULT_ENGINE, PREFILL_FIRST, EngineConfig, engine_or_default
from fleetplan.costmodels.hardware import Model
from fleetplan.costmodels.latency import decode_step_time_s, prefill_time_s
from fleetplan.costmodels.network import Link
from fleetplan.costmodels.split import kv_transfer_s
from fleetplan.datasets.calibration import calibration_for_engine
from fleetplan.datasets.catalog.names import get_gpu, get_model
from fleetplan.datasets.network import inter_node_link, load_network_graph
from fleetplan.errors import InputError
from fleetplan.placement.plan import Plan
from fleetplan.placement.problem import DeratingKey, Problem
from fleetplan.scenario.profiles import scenario_profiles
from fleetplan.scenario.read import Scenario, scenario_catalog_file, scenario_models
from fleetplan.simulator.disagg import (
    PdFleet,
    RouteKey,
    decode_group,
    prefill_group,
)
from fleetplan.simulator.engine import DeviceSpec, EngineSpec, StepModel


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
    (:func:`fleetplan.scenario.profiles.scenario_profiles`): a measured profile's step times where it has them (a
    step-time CSV, Splitwise; extended linearly beyond the measured range, as :attr:`notes` says), else the
    calibrated roofline
    (:func:`fleetplan.costmodels.latency.prefill_time_s`, :func:`~fleetplan.costmodels.latency.decode_step_time_s`)
    with the scenario's dtypes and inter-node link: rate-only profiles (vllm bench serve, guidellm, throughput
    tables) have no step times, so the replay uses the roofline for them and :attr:`notes` says so. The KV
    budget is memory_utilization × GPUs × GPU memory − weights for a dedicated replica (as in
    :func:`fleetplan.costmodels.capacity.replica_capacity`) and the share option's footprint − weights on a shared GPU.

    ``step_time_factors``: {option key ((model, pool, tp, pp); (model, pool, 'shared', 1) for a shared-GPU option):
    factor > 0} multiplying that option's prefill and decode step times (e.g. 1 / (1 − its capacity error): the
    pessimistic end of the plan's stated error, :func:`fleetplan.scenario.uncertainty.pessimistic_step_factors`);
    options not named run at factor 1. Raises ValueError for a factor that is not finite and positive.
    """

    def __init__(self, problem: Problem, plan: Plan, scenario: Scenario, *, max_tokens: float = 32768,
                 step_models: dict[str, StepModel] | None = None,
                 step_time_factors: dict[DeratingKey, float] | None = None):
        self.problem, self.plan, self.scenario = problem, plan, scenario
        self.max_tokens = max_tokens
        self.step_time_factors = dict(step_time_factors or {})
        bad = {k: f for k, f in self.step_time_factors.items() if not (np.isfinite(f) and f > 0)}
        if bad:
            raise ValueError(f"step-time factors must be finite and positive: {bad}")
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
        dtypes: :func:`fleetplan.scenario.read.scenario_models`); the catalog row and bf16 without one."""
        if self.scenario is not None and self.scenario.spec is not None:
            if self._models is None:
                self._models = scenario_models(self.scenario)
            if model_name in self._models:
                return self._models[model_name]
        opts = self.scenario.options if self.scenario is not None else {}
        return (get_model(model_name, self.scenario_file("models")), opts.get("weight_dtype", "bf16"),
                opts.get("kv_dtype", "bf16"))

    def step_model(self, model_name: str, pool_id: str, tp: int, pp: int, kv_budget_bytes: float | None,
                   role: str = "colocated", engine: EngineConfig | None = None, factor: float = 1.0) -> StepModel:
        """The (cached) step model of ``model_name`` on ``tp × pp`` GPUs of ``pool_id``. ``role`` 'decode': a decode
        replica of a disaggregated plan, whose "prefill" of a request is its first iteration on it: one decode step of
        one sequence at the prompt's context (:mod:`fleetplan.simulator.disagg`); 'colocated' and 'prefill' replicas
        prefill as the engine does. ``engine``: the option's engine; with speculative decoding the steps are
        :func:`fleetplan.costmodels.capacity.speculative_latency`'s (per-token step, draft prefill added) and the
        draft's weights and KV bytes per token come out of the KV budget, as the capacity model counts them.
        ``factor``: every prefill and decode step takes ``factor`` × its time (the class docstring's
        ``step_time_factors``)."""
        if model_name in self._override:
            return self._override[model_name]
        spec = engine.speculative if engine is not None else None
        key = (model_name, pool_id, tp, pp, kv_budget_bytes, role, spec, (engine or DEFAULT_ENGINE).framework,
               engine.kv_read_fraction if engine is not None else 1.0, factor)
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
        # the row of the engine's version, as the plan's capacity was sized (scenario.options.engine_calibration)
        calib = calibration_for_engine(gpu, calib_file, (engine or DEFAULT_ENGINE).framework)[0]
        link = inter_node_link(opts.get("inter_node_link")) if pp > 1 else None
        kw: dict[str, Any] = dict(tp=tp, pp=pp, weight_dtype=wd, link=link, calib=calib)
        budget = mu * tp * pp * gpu.memory_bytes - model.weight_bytes(wd) if kv_budget_bytes is None \
            else kv_budget_bytes
        pcie = gpu.pcie_bytes_per_s / 2 * tp * pp if gpu.pcie_bytes_per_s else None
        kvpt = model.kv_bytes_per_token(kd)

        def roofline_prefill(i: float) -> float:
            return prefill_time_s(model, gpu, i, **kw)

        kv_f = engine.kv_read_fraction if engine is not None else 1.0

        def roofline_decode(b: float, c: float) -> float:
            return decode_step_time_s(model, gpu, b, c, kv_dtype=kd, kv_read_fraction=kv_f, **kw)

        prefill: Callable[[float], float] = roofline_prefill
        decode: Callable[[float, float], float] = roofline_decode
        if spec is not None and role == "colocated":
            draft = spec.draft if spec.method == "draft_model" else None
            if spec.method == "draft_model" and draft is None:
                raise InputError(f"{model_name}: the speculative draft model {spec.draft_model} is not resolved",
                                 field="engine.speculative.draft_model", value=spec.draft_model)
            prefill, decode = speculative_latency(model, gpu, spec, draft, tp=tp, pp=pp, weight_dtype=wd,
                                                  kv_dtype=kd, link=link, calib=calib, kv_read_fraction=kv_f)
            if draft is not None:
                budget -= draft.weight_bytes(wd)
                kvpt += draft.kv_bytes_per_token(kd)

        prof = self.profiles.get(model.name, {}).get((gpu.name, tp)) if pp == 1 else None
        where = f"{model.name} on {gpu.name} tp{tp}"
        if prof is not None and prof.step is not None:
            st = prof.step
            bounds = (("prompts up to", getattr(st, "max_prompt_tokens", None)),
                      ("batch up to", getattr(st, "max_batch", None)),
                      ("context up to", getattr(st, "max_context_tokens", None)))
            rng = ", ".join(f"{what} {v:g}" for what, v in bounds if v is not None)
            st = st.for_replay() if hasattr(st, "for_replay") else st
            prefill, decode = st.prefill_time_s, st.decode_step_time_s
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

            def first_iteration(i: float) -> float:  # the decode replica's first iteration: the prompt's last token
                return step(1.0, i)

            prefill = first_iteration
        if factor != 1.0:
            unscaled_prefill, unscaled_decode = prefill, decode

            def scaled_prefill(i: float) -> float:
                return factor * unscaled_prefill(i)

            def scaled_decode(b: float, c: float) -> float:
                return factor * unscaled_decode(b, c)

            prefill, decode = scaled_prefill, scaled_decode
        sm = StepModel(prefill, decode,
                       kv_bytes_per_token=kvpt, kv_budget_bytes=budget,
                       max_tokens=min(self.max_tokens, model.max_context_tokens),
                       sliding_window_tokens=model.sliding_window_tokens, pcie_bytes_per_s=pcie,
                       label=(f"{role} " if role != "colocated" else "") + f"{model_name} on {pool_id} tp{tp}"
                       + (f"xpp{pp}" if pp > 1 else ""))
        self._cache[key] = sm
        return sm

    def engine_of(self, model: str, pool_id: str, tp: int, pp: int) -> EngineConfig:
        """The engine a dedicated option was sized with (its capacity's, :attr:`ReplicaOption.engine`), else the
        default engine with vLLM's defaults for the pool's GPU (options built without the record, e.g. by hand:
        :func:`~fleetplan.costmodels.engine.engine_or_default`)."""
        return self.engine_on(self.problem.option_by_key[(model, pool_id, tp, pp)].engine, pool_id)

    def engine_on(self, engine: EngineConfig | None, pool_id: str) -> EngineConfig:
        """``engine`` (an option's record, None when it has none) as run on a GPU of ``pool_id``
        (:func:`~fleetplan.costmodels.engine.engine_or_default`)."""
        gpu = get_gpu(self.problem.pool_by_id[pool_id].gpu, self.scenario_file("gpus"))
        return engine_or_default(engine, gpu.memory_bytes / 2**30, gpu.name)

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
            sm = self.step_model(m, pool_id, tp, pp, None, engine=self.engine_of(m, pool_id, tp, pp),
                                 factor=self.step_time_factors.get((m, pool_id, tp, pp), 1.0))
            served = self.problem.option_by_key[(m, pool_id, tp, pp)].class_capacity
            for r in range(n):
                devices.append(DeviceSpec(f"{m} {pool.label} tp{tp}x{pp} #{r + 1}", tp * pp,
                                          pool.usd_per_busy_gpu_hour, gpu.tdp_w or 0.0, gpu=pool.gpu))
                engines.append(EngineSpec(m, len(devices) - 1, sm, classes=frozenset(served) if served else None,
                                          engine=self.engine_of(m, pool_id, tp, pp)))
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
                eng = self.engine_on(opt.engine, g.pool)
                f = self.step_time_factors.get((m, g.pool, "shared", 1), 1.0)
                engines.append(EngineSpec(m, len(devices) - 1,
                                          self.step_model(m, g.pool, 1, 1, budget, engine=eng, factor=f), engine=eng))
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
                # The planner sizes a prefill pool as one whole prompt at a time (an M/M/1 server,
                # costmodels.split.prefill_replica_capacity) and a decode pool by its batch alone: the prefill-first
                # scheduler replays exactly that, so it is named here rather than the colocated default engine.
                out.engines.append(EngineSpec(m, len(out.devices) - 1, sm, engine=PREFILL_FIRST))
                out.groups.append(group)
                out.tp.append(tp)
        return out

    def kv_link(self, prefill_site: str, decode_site: str) -> Link:
        """The link a KV cache takes from ``prefill_site`` to ``decode_site``, as the planner's prefill options
        (:func:`fleetplan.scenario.build.build_problem`) take it: the scenario's inter-node link inside a site,
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
