"""Replay of disaggregated serving: prefill pool -> KV transfer -> decode pool (issue 17).

A request of a model that the plan serves disaggregated in a window goes through three stages, each on the
devices of its own pool (prefill and decode replicas never share a device, so the stages are exact when run one
after the other: the only coupling is the hand-over time):

1. **Prefill** on a prefill replica of the request's route (model, prefill site, decode site), chosen by the
   engine's router among that route's prefill replicas: the engine's prefill timing for that GPU and tp
   (:class:`fleetplan.simulator.engine.StepModel`, the same step times as a colocated replica of that shape), with
   prefill queueing. The prefill replica runs the prompt as a one-token request (vLLM's disaggregated proxy sends
   it with ``max_tokens`` 1), so its KV memory is held during the prefill only.
2. **KV transfer** to the decode site: :func:`fleetplan.costmodels.split.kv_transfer_s` of the request's own KV
   bytes (KV-cached prompt tokens × KV bytes per token) over the route's link (the site's inter-node link, or the
   WAN link between the sites) with one stream per tensor-parallel rank of the prefill replica that served it:
   the same formula the planner sized the prefill options with (for the p95 prompt).
3. **Decode** on a decode replica at the decode site: it arrives when its KV has arrived, waits for KV memory like
   any request (block-wise, :mod:`fleetplan.simulator.engine`), then its first iteration computes the prompt's last
   token and samples the first output token (vLLM recomputes that token on the decode instance to get its
   logits), modelled as one decode step of one sequence at the prompt's context in an iteration of its own (vLLM
   folds it into the running batch's step, so this slightly overstates its cost to the other sequences); then it
   decodes in the batch.

So **TTFT** = arrival -> first token emitted by the decode replica = prefill queueing + prefill + KV transfer +
decode-side wait for KV memory + the decode replica's first iteration: what a client of vLLM's disaggregated
prefill sees (the proxy streams the response from the decode instance). TPOT = (done − first token) / (output − 1)
on the decode replica. Queueing delay = arrival -> prefill start on the prefill replica.

Which requests go disaggregated, and by which route: per window, a share min(1, Σ flows / demand) of a model's
requests (all of them when the model has no colocated replica in the window), each on a route drawn in proportion
to the plan's flows (``Plan.kv_flows_req_per_s``), seeded.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from fleetplan.errors import InputError
from fleetplan.simulator.engine import FCFS, DeviceSpec, EngineSpec, Policy, RunResult, run

RouteKey = tuple[str, str, str]  # (model, prefill site, decode site), as Plan.kv_flows_req_per_s keys


def prefill_group(route: RouteKey) -> str:
    """The router's name of the prefill replicas of ``route`` (requests and engines of one group meet)."""
    return f"{route[0]}\x1fprefill\x1f{route[1]}\x1f{route[2]}"


def decode_group(model: str, site: str) -> str:
    """The router's name of ``model``'s decode replicas at ``site``."""
    return f"{model}\x1fdecode\x1f{site}"


@dataclass
class PdFleet:
    """The prefill and decode replicas of one window.

    Attributes:
        devices: one per replica.
        engines: one per replica, ``model`` = the catalog model (for metrics); ``groups[i]`` is the router group
            of engine i (:func:`prefill_group` / :func:`decode_group`).
        groups: per engine, its router group.
        tp: per engine, the replica's tensor-parallel degree (KV streams of a prefill replica).
    """

    devices: list[DeviceSpec]
    engines: list[EngineSpec]
    groups: list[str]
    tp: list[int]

    @property
    def empty(self) -> bool:
        return not self.engines


def choose_routes(model_of: np.ndarray, flows: dict[RouteKey, float], demand_req_per_s: dict[str, float],
                  colocated: set[str], rng: np.random.Generator) -> np.ndarray:
    """Per request, the route it takes (a :data:`RouteKey`) or None (served by colocated replicas).

    ``flows``: the window's req/s per route; ``demand_req_per_s``: the window's demand per model; ``colocated``:
    the models with colocated (dedicated or shared) replicas in the window. A model's requests go disaggregated
    with probability min(1, Σ flows / demand) (1 without colocated replicas or demand), on a route drawn with
    probability flow / Σ flows.
    """
    out = np.full(len(model_of), None, dtype=object)
    by_model: dict[str, list[tuple[RouteKey, float]]] = {}
    for key, f in sorted(flows.items()):
        if f > 0:
            by_model.setdefault(key[0], []).append((key, f))
    for m, rs in by_model.items():
        idx = np.flatnonzero(model_of == m)
        if not len(idx):
            continue
        total = sum(f for _, f in rs)
        d = demand_req_per_s.get(m, 0.0)
        p = 1.0 if (m not in colocated or d <= 0) else min(1.0, total / d)
        go = idx[rng.random(len(idx)) < p]
        pick = rng.choice(len(rs), size=len(go), p=np.asarray([f for _, f in rs]) / total)
        for i, k in zip(go, pick, strict=True):
            out[i] = rs[k][0]
    return out


def _empty_result(n: int, devices: int, engines: int) -> RunResult:
    nan = np.full(n, math.nan)
    return RunResult(prefill_start_s=nan.copy(), first_token_s=nan.copy(), done_s=nan.copy(),
                     engine=np.full(n, -1), preemptions=np.zeros(n, dtype=np.int64), dropped=np.zeros(n, dtype=bool),
                     device_busy_s=np.zeros(devices), engine_busy_s=np.zeros(engines), swap_bytes=np.zeros(engines),
                     end_s=0.0)


def _run_subset(sel: np.ndarray, arrival_s: np.ndarray, input_tokens: np.ndarray, output_tokens: np.ndarray,
                model_of: np.ndarray, engines: Sequence[EngineSpec], devices: Sequence[DeviceSpec], policy: Policy,
                class_of: np.ndarray | None) -> RunResult:
    """Run the requests ``sel`` (indices, in arrival order) on ``engines``; results indexed like ``sel``."""
    if not len(sel) or not engines:
        return _empty_result(len(sel), len(devices), len(engines))
    return run(arrival_s[sel], input_tokens[sel], output_tokens[sel], model_of[sel], engines, devices, policy,
               class_of=class_of[sel] if class_of is not None else None)


def run_disaggregated(arrival_s: np.ndarray, input_tokens: np.ndarray, output_tokens: np.ndarray,
                      model_of: np.ndarray, routes: np.ndarray, colocated_engines: Sequence[EngineSpec],
                      colocated_devices: Sequence[DeviceSpec], pd: PdFleet,
                      transfer_s: Callable[[RouteKey, np.ndarray, np.ndarray], np.ndarray], *,
                      policy: Policy = FCFS,
                      class_of: np.ndarray | None = None) -> tuple[list[EngineSpec], list[DeviceSpec], RunResult]:
    """Replay a window with colocated and disaggregated requests (module docstring).

    Args:
        arrival_s, input_tokens, output_tokens, model_of: (n,) requests sorted by arrival.
        routes: (n,) per request its route (:func:`choose_routes`) or None (colocated).
        colocated_engines, colocated_devices: the window's colocated and shared replicas.
        pd: the window's prefill and decode replicas.
        transfer_s: (route, prompt tokens (k,), prefill tp (k,)) -> KV transfer seconds (k,).
        policy, class_of: as :func:`fleetplan.simulator.engine.run` (classes apply to colocated requests).

    Returns (engines, devices, result) of the whole window: colocated devices first, then the prefill and decode
    replicas (engine device indices shifted accordingly); per request, prefill start on its prefill (or colocated)
    replica, first token and completion on its decode (or colocated) replica. Raises InputError when a route has
    no prefill replica or a decode site no decode replica in the window.
    """
    n = len(arrival_s)
    disagg = np.asarray([r is not None for r in routes], dtype=bool)
    col = np.flatnonzero(~disagg)
    dis = np.flatnonzero(disagg)
    res_c = _run_subset(col, arrival_s, input_tokens, output_tokens, model_of, colocated_engines, colocated_devices,
                        policy, class_of)
    # Stage 1: prefill (a one-token request) on the route's prefill replicas.
    groups = set(pd.groups)
    pre_group = np.asarray([prefill_group(r) for r in routes[dis]], dtype=object)
    dec_group = np.asarray([decode_group(r[0], r[2]) for r in routes[dis]], dtype=object)
    for what, names in (("prefill", pre_group), ("decode", dec_group)):
        missing = sorted(set(names.tolist()) - groups)
        if missing:
            m, _, *where = missing[0].split("\x1f")
            raise InputError(f"the plan sends {m} requests to {what} replicas at {' -> '.join(where)} but has none "
                             "there in this window; re-plan, or pick another window", field="prefill_decode",
                             value=missing[0].replace("\x1f", " "))
    eng_g = [dataclasses.replace(e, model=g) for e, g in zip(pd.engines, pd.groups, strict=True)]
    ones = np.ones(len(dis), dtype=np.int64)
    pre_eng = [i for i, g in enumerate(pd.groups) if "\x1fprefill\x1f" in g]
    dec_eng = [i for i, g in enumerate(pd.groups) if "\x1fdecode\x1f" in g]
    idx = np.arange(len(dis))
    res_p = _run_subset(idx, arrival_s[dis], input_tokens[dis], ones, pre_group, [eng_g[i] for i in pre_eng],
                        pd.devices, policy, None)
    # Stage 2: KV transfer from the prefill replica that served the request.
    ready = np.full(len(dis), math.nan)
    done_p = np.isfinite(res_p.done_s)
    tp_of = np.asarray([pd.tp[pre_eng[e]] if e >= 0 else 1 for e in res_p.engine], dtype=np.int64)
    route_of = routes[dis]
    for key in sorted({r for r in route_of.tolist()}):
        sel = np.flatnonzero(done_p & np.asarray([r == key for r in route_of.tolist()], dtype=bool))
        if len(sel):
            ready[sel] = res_p.done_s[sel] + transfer_s(key, input_tokens[dis][sel], tp_of[sel])
    # Stage 3: decode, arriving when the KV cache has arrived.
    go = np.flatnonzero(np.isfinite(ready))
    order = go[np.argsort(ready[go], kind="stable")]
    res_d = _run_subset(order, ready, input_tokens[dis], output_tokens[dis], dec_group, [eng_g[i] for i in dec_eng],
                        pd.devices, policy, None)
    # Merge: colocated devices first, then the prefill/decode devices; engines in the same order.
    nc_dev, nc_eng = len(colocated_devices), len(colocated_engines)
    engines = list(colocated_engines) + [dataclasses.replace(e, device=e.device + nc_dev) for e in pd.engines]
    devices = list(colocated_devices) + list(pd.devices)
    out = _empty_result(n, len(devices), len(engines))
    for name in ("prefill_start_s", "first_token_s", "done_s", "engine", "preemptions", "dropped"):
        getattr(out, name)[col] = getattr(res_c, name)
    out.prefill_start_s[dis] = res_p.prefill_start_s
    out.preemptions[dis] = res_p.preemptions
    out.dropped[dis] = res_p.dropped
    d_idx = dis[order]
    dec_map = np.asarray(dec_eng + [-1 - nc_eng], dtype=np.int64)  # engine index in pd.engines (-1 stays -1)
    out.first_token_s[d_idx] = res_d.first_token_s
    out.done_s[d_idx] = res_d.done_s
    out.engine[d_idx] = np.where(res_d.engine >= 0, dec_map[res_d.engine] + nc_eng, -1)
    out.preemptions[d_idx] += res_d.preemptions
    out.dropped[d_idx] |= res_d.dropped
    out.device_busy_s[:nc_dev] = res_c.device_busy_s
    out.engine_busy_s[:nc_eng] = res_c.engine_busy_s
    out.swap_bytes[:nc_eng] = res_c.swap_bytes
    out.device_busy_s[nc_dev:] = res_p.device_busy_s + res_d.device_busy_s
    for part, which in ((res_p, pre_eng), (res_d, dec_eng)):
        for j, i in enumerate(which):
            out.engine_busy_s[nc_eng + i] += part.engine_busy_s[j]
            out.swap_bytes[nc_eng + i] += part.swap_bytes[j]
    out.end_s = max(res_c.end_s, res_p.end_s, res_d.end_s)
    return engines, devices, out


__all__ = ["PdFleet", "RouteKey", "choose_routes", "decode_group", "prefill_group", "run_disaggregated"]
