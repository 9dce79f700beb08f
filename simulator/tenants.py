"""Tenant requests replayed on a pool allocation (``fleetplan allocate --verify``): the latency half of the
multi-tenant question, with the discrete-event engine of :mod:`fleetplan.simulator.engine`.

What is replayed, per policy (an :class:`~fleetplan.placement.tenants.Allocation`) and window:

* **Replicas.** Each tenant's GPUs on each node are carved into replicas of its models (tp GPUs each; a tenant with
  several models fills each node with the model whose GPU need, rate / replica req/s × tp, is furthest from met).
  GPUs left over (fewer than tp) idle. A model with no replica in the window has its requests unserved: they count
  as dropped (they miss the SLO). Each replica runs the engine its capacity was sized for
  (:func:`~fleetplan.scenario.tenants.tenant_engine`: vLLM V1 with vLLM's defaults for the GPU), unless the caller
  names one. Two-level (below) needs the prefill-first engine named: request priorities are modelled for that
  engine's scheduler only, so two-level latencies are that engine's, not those of the engine the demand was sized
  for (``fleetplan allocate --verify --in-node two-level`` compares it with one-level on the same engine).
* **Interference.** On a node held by two or more tenants, every replica's prefill and decode steps take
  1 / (1 − s) longer, s being the node coefficient of :meth:`TenantProblem.node_coefficient` (the largest pair
  coefficient among the node's tenants; the shipped table's coefficients are throughput-loss fractions). The
  planner's interference margin (GPUs left idle on a shared node) does not remove this slowdown here: the replay
  charges it to the latency of the tenants that share the node.
* **Requests.** Poisson arrivals at each tenant model's rate in the window (:class:`TenantWorkload`), over a slice
  of ``slice_s`` seconds after ``warmup_s`` of warm-up that is not measured; prompt and output lengths drawn from
  the model's token mix. A tenant without a workload (training) sends none: it only holds GPUs and interferes.
* **Metrics** per tenant: TTFT and TPOT P50/P95/P99 by nearest rank (TPOT = (done − first token) / (output − 1))
  over its measured requests, and SLO attainment (share meeting each model's TTFT and TPOT targets; dropped
  requests miss).

**In-node policy** (``in_node``). ``one-level`` (the default, as above): each tenant's replicas serve only its own
requests, FCFS; the allocation is the only scheduler. ``two-level``: the allocation decides each tenant's share of
a node (its GPUs, carved into replicas as above); on a node held by two or more tenants, the node's replicas of one
model (same tp) form one pool serving every tenant on the node that sends that model, and the engine schedules by
tenant priority (the tenant's ``weight``): higher-priority requests join the waiting queue first, and a waiting
request that does not fit (KV full) preempts running sequences of lower-priority tenants, which resume later with
their KV recomputed (the engine's ``priority_of`` hook, :mod:`fleetplan.simulator.engine`). The router sends a
tenant's request to the least-loaded replica among its own and the pools of its shared nodes. Under two-level the
shared nodes run as whole GPUs slowed by the node coefficient: the node scheduler replaces a MIG or MPS split
(``splits`` is not used).

A window whose load exceeds its replicas' capacity has queues that grow for the whole slice, so its P99 grows with
``slice_s``: the slice is printed with the results. Seeded: the same seed gives the same requests for every policy
(common random numbers), so policies are compared on the same load.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from fleetplan.costmodels.engine import PREFILL_FIRST, EngineConfig
from fleetplan.costmodels.latency import decode_step_time_s, prefill_time_s
from fleetplan.datasets.calibration import load_calibration
from fleetplan.datasets.catalog.names import get_gpu, get_model
from fleetplan.datasets.sharing import load_mig_profiles
from fleetplan.errors import InputError
from fleetplan.placement.tenants import Allocation, TenantProblem, validate_allocation
from fleetplan.scenario.tenants import TenantWorkload, tenant_engine
from fleetplan.simulator.engine import DeviceSpec, EngineSpec, StepModel, run
from fleetplan.simulator.metrics import meets_slo
from fleetplan.solvers.tenants.allocate import solve_allocation
from fleetplan.solvers.tenants.baselines import static_partition
from fleetplan.solvers.tenants.slicing import NodeSplit, split_allocation

#: In-node policies of :func:`replay_allocation` (module docstring).
IN_NODE_POLICIES = ("one-level", "two-level")

#: Share of GPU memory usable for weights and KV (the capacity model's default, ``replica_capacity``).
MEMORY_UTILIZATION = 0.9
#: Longest prompt + output the step tables cover, tokens.
MAX_TOKENS = 32768


@dataclass(frozen=True)
class TenantLatency:
    """One tenant's replayed latencies under one policy.

    Attributes:
        tenant: name; requests: measured requests; dropped: those with no replica to go to or no KV room.
        ttft_s, tpot_s: {50, 95, 99: seconds} (NaN without requests; inf when P-quantile requests were dropped).
        attainment: share of measured requests meeting their model's TTFT and TPOT targets.
        replicas: replicas the tenant had (summed over replayed windows); slowed: of them, on shared nodes (slowed
            by the node coefficient, or on a MIG instance or MPS share of a split).
    """

    tenant: str
    requests: int
    dropped: int
    ttft_s: dict[int, float]
    tpot_s: dict[int, float]
    attainment: float
    replicas: int
    slowed: int


@dataclass
class TenantReplay:
    """The replay of one policy: per-tenant latencies, the replayed windows and the pool's busy time.

    Attributes:
        policy: the allocation's policy name; windows: windows replayed; slice_s, warmup_s: as replayed.
        tenants: {tenant: TenantLatency} for the tenants with a workload.
        busy_gpu_s: Σ over devices of busy seconds × GPUs; pool_gpu_s: pool GPUs × replayed seconds (warm-up
            included, and the drain of the queues past the slice, whose busy seconds are counted too), so
            busy_gpu_s / pool_gpu_s is the replay's busy time of the pool, at most 1.
        idle_gpus: GPUs allocated but left without a replica (fewer than tp left on a node), summed over windows.
        pooled_replicas: under the two-level policy, replicas that serve two or more tenants (a shared node where
            they send the same model at the same tp), summed over windows; 0 under one-level.
    """

    policy: str
    windows: list[int]
    slice_s: float
    warmup_s: float
    tenants: dict[str, TenantLatency] = field(default_factory=dict)
    busy_gpu_s: float = 0.0
    pool_gpu_s: float = 0.0
    idle_gpus: int = 0
    pooled_replicas: int = 0

    @property
    def busy_share(self) -> float:
        """busy_gpu_s / pool_gpu_s (0 when nothing was replayed)."""
        return self.busy_gpu_s / self.pool_gpu_s if self.pool_gpu_s > 0 else 0.0


def _replay_engine(engine: EngineConfig | None, gpu_name: str) -> EngineConfig:
    """The engine a tenant replica on ``gpu_name`` runs in the replay: ``engine`` resolved for the GPU, or for None
    the one its capacity was sized for (:func:`~fleetplan.scenario.tenants.tenant_engine`, vLLM V1)."""
    gpu = get_gpu(gpu_name)
    return tenant_engine(gpu) if engine is None else engine.resolved(gpu.memory_bytes / 2**30, gpu.name)


class _Steps:
    """Step models per (model, GPU type, tp, prefill factor, decode factor, memory), cached."""

    def __init__(self) -> None:
        self._cache: dict[tuple, StepModel | None] = {}

    def get(self, model_name: str, gpu_name: str, tp: int, *, prefill_x: float = 1.0, decode_x: float = 1.0,
            memory_bytes: float | None = None) -> StepModel | None:
        """The step model of ``model_name`` on ``tp`` GPUs of ``gpu_name`` with prefill and decode times multiplied
        by ``prefill_x`` and ``decode_x``; ``memory_bytes``: the device's memory (default tp × the GPU's).
        None when the weights leave no KV room in MEMORY_UTILIZATION of that memory."""
        key = (model_name, gpu_name, tp, round(prefill_x, 9), round(decode_x, 9), memory_bytes)
        if key not in self._cache:
            model, gpu = get_model(model_name), get_gpu(gpu_name)
            calib = load_calibration(gpu)
            mem = tp * gpu.memory_bytes if memory_bytes is None else memory_bytes
            budget = MEMORY_UTILIZATION * mem - model.weight_bytes("bf16")

            def prefill(i: float) -> float:
                return prefill_x * prefill_time_s(model, gpu, i, tp=tp, calib=calib)

            def decode(b: float, c: float) -> float:
                return decode_x * decode_step_time_s(model, gpu, b, c, tp=tp, calib=calib)

            self._cache[key] = None if budget <= 0 else StepModel(
                prefill, decode, kv_bytes_per_token=model.kv_bytes_per_token("bf16"), kv_budget_bytes=budget,
                max_tokens=min(MAX_TOKENS, model.max_context_tokens),
                sliding_window_tokens=model.sliding_window_tokens, label=f"{model_name} on {gpu_name} tp{tp}")
        return self._cache[key]


@dataclass(frozen=True)
class Slice:
    """A part of one GPU a split gives a tenant (:class:`~fleetplan.solvers.tenants.slicing.NodeSplit`), as a
    device.

    Attributes:
        label: for reports; gpus_fraction: its share of a GPU's compute (MIG: compute slices / 7; MPS: percent /
            100), which is how much of a GPU's need it meets.
        prefill_x, decode_x: its step-time factors. MIG (hardware-isolated): prefill × 7 / compute slices
            (compute-bound), decode × 8 / memory slices (bandwidth-bound: a slice has its share of the memory
            system), no interference. MPS: both × 100 / percent, and × 1 / (1 − s) on a GPU holding two or more
            tenants (s their largest pair coefficient).
        memory_bytes: MIG: the profile's memory; MPS: the GPU's memory × percent / 100 (an even split by share:
            MPS itself does not partition memory).
    """

    label: str
    gpus_fraction: float
    prefill_x: float
    decode_x: float
    memory_bytes: float


def split_slices(problem: TenantProblem, node: str, split: NodeSplit) -> dict[str, list[Slice]]:
    """{tenant: its slices} of a node's split (module docstring of :class:`Slice` for the factors)."""
    gpu_name = next(n.gpu for n in problem.nodes if n.name == node)
    gpu = get_gpu(gpu_name)
    out: dict[str, list[Slice]] = {}
    if split.kind == "mig":
        prof = {p.name: p for p in load_mig_profiles(gpu_name)}
        for g, pname, start, t in split.parts:
            p = prof[pname]
            out.setdefault(t, []).append(Slice(f"{t} MIG {pname} on {node} GPU {g} slot {start}",
                                               p.compute_slices / 7, 7 / p.compute_slices, 8 / p.memory_slices,
                                               p.memory_gb * 1e9))
        return out
    tenants = {t.name: t for t in problem.tenants}
    on_gpu: dict[int, list[str]] = {}
    for g, t, _pct in split.parts:
        on_gpu.setdefault(g, []).append(t)
    for g, t, pct in split.parts:
        s = problem.node_coefficient(tenants[x] for x in on_gpu[g]) if len(on_gpu[g]) >= 2 else 0.0
        f = 100 / pct / (1 - s)
        out.setdefault(t, []).append(Slice(f"{t} MPS {pct}% on {node} GPU {g}", pct / 100, f, f,
                                           gpu.memory_bytes * pct / 100))
    return out


def carve_replicas(gpus_by_node: Sequence[tuple[str, int]], needs_gpus: Mapping[str, tuple[int, float]],
                   given: dict[str, float] | None = None) -> tuple[list[tuple[str, str]], int]:
    """Replicas of a tenant's models on its GPUs.

    Args:
        gpus_by_node: [(node, GPUs the tenant holds there)], in the order to fill.
        needs_gpus: {model key: (tp, GPUs the model needs in the window, rate / replica req/s × tp)}.

        given: GPUs each model already has (updated in place); default none.

    Returns ([(node, model key)] one entry per replica, GPUs left idle). On each node, replicas are added while one
    fits, each time to the fitting model with the largest unmet need (need − GPUs given; ties: the key's order).
    """
    given = {k: 0.0 for k in needs_gpus} if given is None else given
    for k in needs_gpus:
        given.setdefault(k, 0.0)
    out: list[tuple[str, str]] = []
    idle = 0
    for node, g in gpus_by_node:
        free = g
        while True:
            fit = [k for k, (tp, _) in needs_gpus.items() if tp <= free]
            if not fit:
                break
            k = max(sorted(fit), key=lambda k: needs_gpus[k][1] - given[k])
            out.append((node, k))
            given[k] += needs_gpus[k][0]
            free -= needs_gpus[k][0]
        idle += free
    return out, idle


def assign_slices(slices: Sequence[Slice], needs_gpus: Mapping[str, tuple[int, float]], given: dict[str, float]
                  ) -> list[tuple[Slice, str]]:
    """Each slice to the tp-1 model with the largest unmet need (need − given, in GPUs; a slice counts its
    ``gpus_fraction``; ``given`` updated in place). Slices of a tenant with no tp-1 model stay unassigned."""
    out = []
    one = sorted(k for k, (tp, _) in needs_gpus.items() if tp == 1)
    for sl in slices:
        if not one:
            break
        k = max(one, key=lambda k: needs_gpus[k][1] - given.get(k, 0.0))
        given[k] = given.get(k, 0.0) + sl.gpus_fraction
        out.append((sl, k))
    return out


def _key(w: TenantWorkload) -> str:
    return f"{w.tenant}/{w.model}"


def _pool(w: TenantWorkload) -> str:
    """The two-level pool key: replicas of one model at one tp on one node serve every tenant that sends it."""
    return f"{w.model}/tp{w.tp}"


def with_burst(problem: TenantProblem, tenant: str, window: int, factor: float) -> TenantProblem:
    """``problem`` with ``tenant``'s demand in ``window`` multiplied by ``factor`` (> 0). Raises InputError for an
    unknown tenant, a window outside the day or a factor ≤ 0."""
    if not factor > 0 or not math.isfinite(factor):
        raise InputError(f"burst factor must be a number > 0, got {factor!r}", field="burst", value=factor)
    if not 0 <= window < problem.n_windows:
        raise InputError(f"burst window {window} is outside 0..{problem.n_windows - 1}", field="window",
                         value=window)
    problem.tenant(tenant)  # UnknownNameError with the known names
    tenants = tuple(replace(t, demand_gpus=tuple(d * factor if i == window else d
                                                 for i, d in enumerate(t.demand_gpus)))
                    if t.name == tenant else t for t in problem.tenants)
    return replace(problem, tenants=tenants)


def replay_allocation(problem: TenantProblem, allocation: Allocation,
                      workloads: Mapping[str, Sequence[TenantWorkload]], *, windows: Sequence[int],
                      slice_s: float = 60.0, warmup_s: float = 20.0, seed: int = 0,
                      rate_scale: Mapping[tuple[str, int], float] | None = None,
                      splits: Mapping[tuple[int, str], NodeSplit] | None = None,
                      in_node: str = "one-level", engine: EngineConfig | None = None) -> TenantReplay:
    """Replay each tenant's requests on ``allocation`` in ``windows`` (module docstring for the model).

    Args:
        problem: the pool and tenants; allocation: GPUs per (tenant, window, node).
        workloads: {tenant: its models} (:func:`fleetplan.scenario.tenants.tenant_workloads`).
        windows: window indices to replay.
        slice_s, warmup_s: measured seconds per window and unmeasured warm-up before them.
        seed: request seed (the same for every policy: the same requests).
        rate_scale: {(tenant, window): factor} on the tenant's rates there (a burst); default 1.
        splits: {(window, node): NodeSplit} (:func:`~fleetplan.solvers.tenants.slicing.split_allocation`): on those
            node-windows the tenants run on their MIG instances or MPS shares (:class:`Slice`), and on the whole
            GPUs the split leaves a tenant for its tp ≥ 2 replicas (``NodeSplit.whole``, not slowed), instead of
            whole GPUs slowed by the node coefficient (one-level only).
        in_node: 'one-level' (each tenant's replicas serve it FCFS) or 'two-level' (on shared nodes, pools per
            model scheduled by tenant weight, with preemption; module docstring).
        engine: the engine every replica runs (resolved for its GPU); None: the one its capacity was sized for
            (:func:`~fleetplan.scenario.tenants.tenant_engine`, vLLM V1). Two-level needs the prefill-first engine
            given (``costmodels.engine.PREFILL_FIRST``): request priorities are modelled for that engine only.

    Returns a :class:`TenantReplay`. Raises InputError for slice_s ≤ 0, warmup_s < 0, a window outside the day,
    an unknown ``in_node``, or two-level without the prefill-first engine.
    """
    if in_node not in IN_NODE_POLICIES:
        raise InputError(f"unknown in-node policy {in_node!r}; use {' or '.join(IN_NODE_POLICIES)}",
                         field="in_node", value=in_node)
    two = in_node == "two-level"
    if two:
        splits = None
        if engine is None or engine.chunked:
            raise InputError("the two-level policy replays request priorities, which the replay models for the "
                             "prefill-first engine only; give engine PREFILL_FIRST (the latencies are then that "
                             "engine's, not those of the vLLM V1 engine the demand was sized for)", field="engine",
                             value=None if engine is None else engine.mode)
    if not slice_s > 0 or not warmup_s >= 0:
        raise InputError(f"slice_s must be > 0 and warmup_s >= 0 seconds, got {slice_s!r}, {warmup_s!r}",
                         field="slice_s", value=slice_s)
    for w in windows:
        if not 0 <= w < problem.n_windows:
            raise InputError(f"window {w} is outside 0..{problem.n_windows - 1}", field="window", value=w)
    scale = dict(rate_scale or {})
    steps = _Steps()
    nodes = {n.name: n for n in problem.nodes}
    tenants = {t.name: t for t in problem.tenants}
    out = TenantReplay(allocation.policy, list(windows), slice_s, warmup_s)
    per: dict[str, dict[str, list]] = {t: {"ttft": [], "tpot": [], "ok": [], "drop": [], "rep": [0], "slow": [0]}
                                       for t in workloads}
    for w in windows:
        by_node = allocation.by_node(w)
        coef = {n: (problem.node_coefficient(tenants[t] for t in held) if len(held) >= 2 else 0.0)
                for n, held in by_node.items()}
        engines: list[EngineSpec] = []
        devices: list[DeviceSpec] = []
        fractions: list[float] = []  # of a GPU per device GPU: 1 for whole GPUs, the slice's share for a slice
        # two-level: the tenants on each shared node that send each pooled model ('model/tp')
        pool_of = {(n, _pool(x)): frozenset(t for t in held if any(_pool(y) == _pool(x) for y in workloads.get(t, ())))
                   for n, held in by_node.items() if len(held) >= 2 for tn in held for x in workloads.get(tn, ())}
        splits_wn = {n: sp for (ww, n), sp in (splits or {}).items() if ww == w and n in by_node}
        split_here = {n: split_slices(problem, n, sp) for n, sp in splits_wn.items()}
        for tname, wls in workloads.items():
            # Whole GPUs: the tenant's on unsplit nodes, and those a split leaves it whole for tp >= 2 replicas.
            mine = sorted((n, held[tname] if n not in split_here else splits_wn[n].whole.get(tname, 0))
                          for n, held in by_node.items() if held.get(tname))
            needs = {_key(x): (x.tp, x.rates_req_per_s[w] * scale.get((tname, w), 1.0) / x.replica_req_per_s * x.tp)
                     for x in wls}
            given: dict[str, float] = {}
            reps, idle = carve_replicas(mine, needs, given)
            out.idle_gpus += idle
            by_key = {_key(x): x for x in wls}
            for node, k in reps:
                # A split node's whole GPUs hold one tenant each, isolated like its MIG instances: no slowdown.
                x, s = by_key[k], (0.0 if node in split_here else coef.get(node, 0.0))
                gpu = nodes[node].gpu
                sm = steps.get(x.model, gpu, x.tp, prefill_x=1 / (1 - s), decode_x=1 / (1 - s))
                if sm is None:
                    continue
                devices.append(DeviceSpec(f"{k} on {node}", x.tp, 0.0, 0.0, gpu))
                fractions.append(1.0)
                if two:  # served by model; the class (tenant) says whose requests it takes
                    serves = pool_of.get((node, _pool(x)), frozenset({tname}))
                    engines.append(EngineSpec(_pool(x), len(devices) - 1, sm, classes=serves,
                                              engine=_replay_engine(engine, gpu)))
                    out.pooled_replicas += len(serves) >= 2
                else:
                    engines.append(EngineSpec(k, len(devices) - 1, sm, engine=_replay_engine(engine, gpu)))
                per[tname]["rep"][0] += 1
                per[tname]["slow"][0] += s > 0
            for node in sorted(split_here):
                for sl, k in assign_slices(split_here[node].get(tname, []), needs, given):
                    x = by_key[k]
                    sm = steps.get(x.model, nodes[node].gpu, 1, prefill_x=sl.prefill_x, decode_x=sl.decode_x,
                                   memory_bytes=sl.memory_bytes)
                    if sm is None:  # the weights do not fit the slice
                        continue
                    devices.append(DeviceSpec(sl.label, 1, 0.0, 0.0, nodes[node].gpu))
                    fractions.append(sl.gpus_fraction)
                    engines.append(EngineSpec(k, len(devices) - 1, sm, engine=_replay_engine(engine, nodes[node].gpu)))
                    per[tname]["rep"][0] += 1
                    per[tname]["slow"][0] += 1
        # Idle allocated GPUs and tenants without workloads are part of the pool, not of the devices.
        rng = np.random.default_rng([seed, w])
        arr, inp, outp, key, mkey, cls, prio = [], [], [], [], [], [], []
        for tname, wls in sorted(workloads.items()):
            for x in wls:
                rate = x.rates_req_per_s[w] * scale.get((tname, w), 1.0)
                n = int(rng.poisson(rate * (slice_s + warmup_s)))
                a = np.sort(rng.uniform(-warmup_s, slice_s, n))
                i, o = x.mix.draw(rng, n)
                arr.append(a)
                inp.append(i)
                outp.append(o)
                key.append(np.full(n, _key(x), dtype=object))
                mkey.append(np.full(n, _pool(x), dtype=object))
                cls.append(np.full(n, tname, dtype=object))
                prio.append(np.full(n, tenants[tname].weight))
        a = np.concatenate(arr) if arr else np.zeros(0)
        order = np.argsort(a, kind="stable")
        a = a[order]
        inp_a = np.concatenate(inp)[order] if inp else np.zeros(0, dtype=np.int64)
        out_a = np.concatenate(outp)[order] if outp else np.zeros(0, dtype=np.int64)
        key_a = np.concatenate(key)[order] if key else np.zeros(0, dtype=object)
        if two:
            mkey_a = np.concatenate(mkey)[order] if mkey else np.zeros(0, dtype=object)
            cls_a = np.concatenate(cls)[order] if cls else np.zeros(0, dtype=object)
            prio_a = np.concatenate(prio)[order] if prio else np.zeros(0)
            served = {(e.model, c) for e in engines for c in (e.classes or ())}
            has = np.array([(m, c) in served for m, c in zip(mkey_a, cls_a, strict=True)], dtype=bool)
        else:
            served_keys = {e.model for e in engines}
            has = np.array([k in served_keys for k in key_a], dtype=bool)
        n = len(a)
        ttft = np.full(n, np.inf)
        tpot = np.full(n, np.inf)
        dropped = ~has
        if has.any():
            if two:
                res = run(a[has], inp_a[has], out_a[has], mkey_a[has], engines, devices, class_of=cls_a[has],
                          priority_of=prio_a[has])
            else:
                res = run(a[has], inp_a[has], out_a[has], key_a[has], engines, devices)
            ttft[has] = res.first_token_s - a[has]
            with np.errstate(invalid="ignore", divide="ignore"):
                tp = np.where(out_a[has] > 1, (res.done_s - res.first_token_s) / (out_a[has] - 1), 0.0)
            tpot[has] = tp
            dropped[has] = res.dropped
            ttft[dropped] = np.inf
            tpot[dropped] = np.inf
            out.busy_gpu_s += float(sum(b * d.gpus for b, d in zip(res.device_busy_s, devices, strict=True)))
            # A slice device counts 1 GPU; its busy time is charged at its fraction below.
            out.busy_gpu_s -= float(sum(b * (1 - f) for b, f in zip(res.device_busy_s, fractions, strict=True)))
        # The pool's seconds run until the last request is done: an overloaded window's queue drains past the
        # slice, and its devices' busy seconds with it (counted over the slice alone, the busy time of the pool
        # read 298% on a window three times over capacity).
        done = res.done_s[np.isfinite(res.done_s)] if has.any() else np.zeros(0)
        span_end = max(slice_s, float(done.max())) if len(done) else slice_s
        out.pool_gpu_s += sum(nd.gpus for nd in problem.nodes) * (span_end + warmup_s)
        measured = a >= 0
        for tname, wls in workloads.items():
            for x in wls:
                sel = measured & (key_a == _key(x))
                ok = meets_slo(x.slo, ttft[sel], tpot[sel], np.zeros(int(sel.sum())), dropped[sel])
                per[tname]["ttft"].append(ttft[sel])
                per[tname]["tpot"].append(tpot[sel])
                per[tname]["ok"].append(ok)
                per[tname]["drop"].append(dropped[sel])
    for tname, d in per.items():
        tt = np.concatenate(d["ttft"]) if d["ttft"] else np.zeros(0)
        tp = np.concatenate(d["tpot"]) if d["tpot"] else np.zeros(0)
        ok = np.concatenate(d["ok"]) if d["ok"] else np.zeros(0, dtype=bool)
        dr = np.concatenate(d["drop"]) if d["drop"] else np.zeros(0, dtype=bool)
        out.tenants[tname] = TenantLatency(
            tname, len(tt), int(dr.sum()), {q: _quantile(tt, q) for q in (50, 95, 99)},
            {q: _quantile(tp, q) for q in (50, 95, 99)}, float(ok.mean()) if len(ok) else math.nan,
            d["rep"][0], d["slow"][0])
    return out


def _quantile(x: np.ndarray, q: int) -> float:
    """The q-th percentile of ``x`` by nearest rank (the ceil(q/100 · n)-th smallest), unserved requests (inf)
    counting as the largest: inf when the rank falls on one; NaN without requests."""
    if len(x) == 0:
        return math.nan
    s = np.sort(x)
    return float(s[max(0, math.ceil(q / 100 * len(s)) - 1)])


def isolation_ratio(optimizer: TenantLatency, static: TenantLatency) -> float:
    """P99 TTFT under the optimizer / P99 TTFT under static partitions (< 1: the optimizer's tail is shorter;
    NaN when either is missing or infinite)."""
    a, b = optimizer.ttft_s[99], static.ttft_s[99]
    if not (math.isfinite(a) and math.isfinite(b)) or b <= 0:
        return math.nan
    return a / b


def one_window(problem: TenantProblem, w: int) -> TenantProblem:
    """``problem`` reduced to window ``w`` (its window 0): each tenant's demand in that window only."""
    return replace(problem, tenants=tuple(replace(t, demand_gpus=(t.demand_gpus[w],)) for t in problem.tenants))


def default_windows(problem: TenantProblem, allocation: Allocation) -> list[int]:
    """The windows ``allocate --verify`` replays by default: the one with the largest total demand (the pool at its
    fullest) and the one where ``allocation`` shares the most nodes (interference at its worst; the earliest on
    ties), sorted, without repeats."""
    W = range(problem.n_windows)
    peak = max(W, key=lambda w: (sum(t.demand_gpus[w] for t in problem.tenants), -w))
    shared = max(W, key=lambda w: (sum(len(h) >= 2 for h in allocation.by_node(w).values()), -w))
    return sorted({peak, shared})


@dataclass
class BurstReplay:
    """One tenant's burst (its rate × factor in one window) replayed under each policy.

    Attributes:
        tenant, window, factor: the burst.
        nominal, burst: {policy: TenantReplay} of that window without and with the burst. Under 'optimizer' the
            burst replay runs on the allocation re-solved for the burst demand (the planner's windows are its unit
            of reaction); 'static' keeps its nodes. With ``two_level``, 'optimizer two-level' is the optimizer's
            allocation replayed with the two-level in-node policy (:func:`replay_allocation`).
    """

    tenant: str
    window: int
    factor: float
    nominal: dict[str, TenantReplay]
    burst: dict[str, TenantReplay]


def geometric_mean(xs: Sequence[float]) -> float:
    """Geometric mean of the finite positive values of ``xs`` (NaN when none)."""
    v = [x for x in xs if math.isfinite(x) and x > 0]
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else math.nan


def burst_replay(problem: TenantProblem, workloads: Mapping[str, Sequence[TenantWorkload]], *, tenant: str,
                 window: int, factor: float = 2.0, slice_s: float = 60.0, warmup_s: float = 20.0, seed: int = 0,
                 time_limit_s: float = 300.0, threads: int = 1, split: str = "none", backend: str = "cpsat",
                 effort: float = 1.0, two_level: bool = False) -> BurstReplay:
    """Replay ``tenant``'s burst (rate × ``factor`` for window ``window``) under the optimizer (weighted mode,
    re-solved for that window with the burst demand on ``backend`` at ``effort`` × the default budgets, the same
    answer on any machine; ``time_limit_s`` a wall-clock safety stop per solve) and static partitions, against the
    same window without the burst; ``split`` ('auto', 'mig', 'mps', 'none') splits the optimizer's shared nodes as
    ``allocate --split`` does, and the replay runs on the slices; ``two_level`` adds the optimizer's allocation
    replayed with the two-level in-node policy (whole GPUs on shared nodes, no split) and, to compare it with, with
    one-level, both on the prefill-first engine (``optimizer two-level``, ``optimizer prefill-first``). Both
    allocations are
    re-checked by :func:`~fleetplan.placement.tenants.validate_allocation`. Raises InputError (bad tenant, window,
    factor), InfeasibleError / SolverError from the solve."""
    base = one_window(problem, window)
    hot = with_burst(base, tenant, 0, factor)
    wl1 = {t: tuple(replace(x, rates_req_per_s=(x.rates_req_per_s[window],)) for x in xs)
           for t, xs in workloads.items()}
    nominal: dict[str, TenantReplay] = {}
    burst: dict[str, TenantReplay] = {}
    for prob, out, scale in ((base, nominal, 1.0), (hot, burst, factor)):
        opt = solve_allocation(prob, backend=backend, time_limit_s=time_limit_s, threads=threads,
                               effort=effort).allocation
        st = static_partition(prob)
        validate_allocation(prob, st, check_guarantees=False)
        rs = {(tenant, 0): scale}
        sp = split_allocation(prob, opt, kind=split, time_limit_s=time_limit_s, threads=threads, effort=effort)
        for pol, alloc, spl in (("optimizer", opt, sp), ("static", st, {})):
            out[pol] = replay_allocation(prob, alloc, wl1, windows=[0], slice_s=slice_s, warmup_s=warmup_s,
                                         seed=seed, rate_scale=rs, splits=spl)
        if two_level:  # both in-node policies on the prefill-first engine, the one two-level is modelled for
            out["optimizer prefill-first"] = replay_allocation(prob, opt, wl1, windows=[0], slice_s=slice_s,
                                                               warmup_s=warmup_s, seed=seed, rate_scale=rs,
                                                               splits=sp, engine=PREFILL_FIRST)
            out["optimizer two-level"] = replay_allocation(prob, opt, wl1, windows=[0], slice_s=slice_s,
                                                           warmup_s=warmup_s, seed=seed, rate_scale=rs,
                                                           in_node="two-level", engine=PREFILL_FIRST)
    return BurstReplay(tenant, window, factor, nominal, burst)
