"""The discrete-event core of ``fleetplan simulate``: continuous batching on GPU devices, one event heap.

Model (what a vLLM-style engine does, reduced to what sets latency):

* A **device** is one replica's GPUs (tp × pp of one type) or one shared GPU. It runs one *iteration* at a time:
  either a prefill of one prompt (which also samples the request's first token) or a run of decode steps of its
  running batch. Prefill has priority over decode (vLLM's default scheduler; the capacity model's point 1): when a
  request arrives while the device decodes, the decode run stops at the end of the current step.
* An **engine** is one model resident on a device, with its own waiting queue (FCFS), its own running batch and its
  own KV-memory budget. A dedicated replica is a device with one engine; a shared GPU has one engine per resident
  model. **Shared GPUs share time, not batches**: the device interleaves the engines' iterations. Prefills go in
  arrival order across engines (oldest waiting head first); decode runs alternate between the engines with running
  sequences, at most :data:`SHARED_DECODE_RUN_STEPS` steps per turn, so each model's TPOT includes the other models'
  steps. Memory is partitioned: each engine has the KV budget the plan gave it.
* **KV memory**: a request is admitted to prefill only when its whole sequence (prompt + output tokens, capped by a
  sliding window) fits in the engine's free KV budget: the reservation a scheduler with known output lengths would
  make; without preemption, the running batch never overflows. A request larger than the whole budget is dropped
  (counted as missing its SLO).
* **Decode runs are events, not steps**: between two events the batch is fixed, so a run of k steps (k = steps until
  the next completion) is one event of duration k × step time, with the step time read at the run's mean context
  (contexts grow by one token per step). A prefill arriving mid-run truncates it at the current step's end. Events are
  therefore O(requests), not O(tokens).
* **Router** (per model, over the engines the plan gives it): ``least-work`` (default) sends a request to the engine
  where it would start soonest: queued prefill seconds on the device + the rest of a running prefill + remaining
  decode tokens × the engine's per-token decode share + its own prefill time there (heterogeneous replicas are
  compared in seconds). With exact work and output length 1 this is the join-the-least-workload rule, whose waits
  equal those of an FCFS multi-server queue (Kiefer & Wolfowitz 1955), hence the M/M/c test. ``round-robin`` cycles.
* **Preemption** (what-if): with ``preempt_after_s`` set, when a waiting request cannot be admitted for lack of KV and
  has waited at least that long, the running sequence that has produced the most tokens is paused, its KV freed, and
  it resumes later (before newer arrivals) at a cost: ``recompute`` re-prefills its prompt plus the tokens produced;
  ``swap`` copies its KV out and back over PCIe (both copies charged to the device).
* **Two-tier KV** (what-if): with ``host_kv_share`` s > 0, the KV budget becomes HBM budget / (1 − s) and a share s of
  every running sequence's KV lives in host DRAM and is read over PCIe at every decode step (added to the step time;
  the traffic is reported).

Times are seconds; sizes are tokens (KV) or bytes. Step times come from a :class:`StepModel` (tabulated from
:mod:`fleetplan.costmodels.latency` or from a measured profile).
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from fleetplan.errors import InputError

#: Longest decode run (steps) a shared device gives one engine before switching to the next engine with work.
SHARED_DECODE_RUN_STEPS = 4
#: Routers known to :func:`run`.
ROUTERS = ("least-work", "round-robin")
#: Resume costs known to the preemption policy.
RESUME_MODES = ("recompute", "swap")


def _grid(low: float, high: float, n: int) -> list[float]:
    high = max(high, low + 1.0)
    pts = {float(round(x)) for x in np.geomspace(low, high, n)} | {float(low), float(high)}
    return sorted(pts)


class StepModel:
    """Prefill and decode step times of one (model, device) pair, tabulated for fast lookups.

    Args:
        prefill_s: seconds to prefill one prompt of the given length (tokens).
        decode_step_s: seconds of one decode step for (batch sequences, mean context tokens).
        kv_bytes_per_token: KV bytes one cached token takes (all layers, whole replica).
        kv_budget_bytes: KV bytes the engine may fill.
        max_tokens: longest prompt + output the tables must cover (tokens).
        sliding_window_tokens: per-sequence KV cap (tokens), or None.
        pcie_bytes_per_s: host-link bandwidth of the whole replica, one direction, bytes/s (for swaps), or None.
        label: shown in reports.

    Prefill is tabulated at ~120 log-spaced prompt lengths and decode at a log-spaced (batch, context) grid, then
    interpolated linearly (prefill is a quadratic in the prompt and decode piecewise linear in batch and context
    in the roofline model, so the interpolation error is far below the model's own). Raises InputError when the KV
    budget is not positive.
    """

    def __init__(self, prefill_s: Callable[[float], float], decode_step_s: Callable[[float, float], float], *,
                 kv_bytes_per_token: float, kv_budget_bytes: float, max_tokens: float,
                 sliding_window_tokens: int | None = None, pcie_bytes_per_s: float | None = None, label: str = ""):
        if not (kv_budget_bytes > 0 and kv_bytes_per_token > 0):
            raise InputError(f"{label or 'engine'}: KV budget {kv_budget_bytes:g} bytes leaves no room for a "
                             "sequence", field="kv_budget_bytes", value=kv_budget_bytes)
        self.label = label
        self.kv_bytes_per_token = float(kv_bytes_per_token)
        self.kv_budget_bytes = float(kv_budget_bytes)
        self.sliding_window_tokens = sliding_window_tokens
        self.pcie_bytes_per_s = pcie_bytes_per_s
        self.max_tokens = float(max(max_tokens, 2))
        self.pre_x = np.asarray(_grid(1, self.max_tokens * 2, 120))
        self.pre_y = np.asarray([prefill_s(x) for x in self.pre_x])
        max_batch = max(2.0, self.kv_budget_tokens)
        self.b_grid = sorted(set(_grid(1, 16, 16)) | set(_grid(16, min(max_batch, 1e6), 24)))
        self.c_grid = _grid(1, self.max_tokens, 20)
        self.table = [[decode_step_s(b, c) for c in self.c_grid] for b in self.b_grid]
        self.token_share_s = self.decode(8, 512) / 8.0

    @property
    def kv_budget_tokens(self) -> float:
        """Tokens the KV budget holds."""
        return self.kv_budget_bytes / self.kv_bytes_per_token

    def cached_tokens(self, tokens: np.ndarray) -> np.ndarray:
        """Tokens a sequence of ``tokens`` keeps in the KV cache (sliding window cap)."""
        t = np.asarray(tokens, dtype=np.float64)
        return np.minimum(t, self.sliding_window_tokens) if self.sliding_window_tokens else t

    def prefill(self, tokens: np.ndarray | float) -> np.ndarray | float:
        """Prefill seconds for prompt lengths ``tokens`` (array or scalar)."""
        return np.interp(tokens, self.pre_x, self.pre_y)

    def decode(self, batch: float, context: float) -> float:
        """Seconds of one decode step with ``batch`` sequences of mean context ``context`` tokens."""
        bg, cg = self.b_grid, self.c_grid
        i = min(max(bisect.bisect_right(bg, batch) - 1, 0), len(bg) - 2)
        j = min(max(bisect.bisect_right(cg, context) - 1, 0), len(cg) - 2)
        fb = (batch - bg[i]) / (bg[i + 1] - bg[i])
        fc = min(max((context - cg[j]) / (cg[j + 1] - cg[j]), 0.0), 1.0)
        r0, r1 = self.table[i], self.table[i + 1]
        v0 = r0[j] + (r0[j + 1] - r0[j]) * fc
        v1 = r1[j] + (r1[j + 1] - r1[j]) * fc
        return v0 + (v1 - v0) * fb


@dataclass(frozen=True)
class Policy:
    """Scheduling what-ifs (defaults: FCFS, one KV tier).

    Attributes:
        router: 'least-work' or 'round-robin'.
        preempt_after_s: waiting time after which a KV-blocked request preempts the longest-running decode, seconds,
            or None for plain FCFS.
        resume: 'recompute' or 'swap' (cost of resuming a preempted sequence).
        host_kv_share: share of every sequence's KV kept in host DRAM and read over PCIe each step (0 ≤ s < 1).
        max_decode_run_steps: cap on the steps of one decode run (None: until the next completion). 1 turns the
            simulator into a step-by-step one (slow; a reference for benchmarks and checks).
    """

    router: str = "least-work"
    preempt_after_s: float | None = None
    resume: str = "recompute"
    host_kv_share: float = 0.0
    max_decode_run_steps: int | None = None

    def __post_init__(self) -> None:
        if self.router not in ROUTERS:
            raise InputError(f"unknown router {self.router!r}; use {' or '.join(ROUTERS)}", field="router",
                             value=self.router)
        if self.resume not in RESUME_MODES:
            raise InputError(f"unknown resume mode {self.resume!r}; use {' or '.join(RESUME_MODES)}",
                             field="resume", value=self.resume)
        if self.preempt_after_s is not None and not (self.preempt_after_s >= 0):
            raise InputError("preempt_after_s must be >= 0 seconds", field="preempt_after_s",
                             value=self.preempt_after_s)
        if self.max_decode_run_steps is not None and not (isinstance(self.max_decode_run_steps, int)
                                                          and self.max_decode_run_steps >= 1):
            raise InputError("max_decode_run_steps must be a whole number >= 1 or None", field="max_decode_run_steps",
                             value=self.max_decode_run_steps)
        if not (0.0 <= self.host_kv_share < 1.0):
            raise InputError("host_kv_share must be in [0, 1)", field="host_kv_share", value=self.host_kv_share)


#: The default policy: FCFS, least-work router, one KV tier.
FCFS = Policy()


@dataclass(frozen=True)
class EngineSpec:
    """One model resident on one device. ``device`` indexes the device list given to :func:`run`."""

    model: str
    device: int
    step: StepModel


@dataclass(frozen=True)
class DeviceSpec:
    """One device: ``gpus`` GPUs billed at ``usd_per_gpu_hour`` each, drawing up to ``tdp_w`` each."""

    label: str
    gpus: int
    usd_per_gpu_hour: float
    tdp_w: float
    gpu: str = ""


@dataclass
class RunResult:
    """Per-request outcome arrays (length n, NaN where not reached) and per-device/engine accounting.

    Attributes:
        prefill_start_s, first_token_s, done_s: times, seconds (same clock as the arrivals).
        engine: engine index that served each request (-1 when dropped).
        preemptions: times each request was preempted.
        dropped: True when no engine's KV budget could ever hold the request.
        device_busy_s: busy seconds per device; engine_busy_s: busy seconds per engine.
        swap_bytes: bytes moved over PCIe (preemption swaps and host-tier reads), per engine.
        end_s: time of the last event.
    """

    prefill_start_s: np.ndarray
    first_token_s: np.ndarray
    done_s: np.ndarray
    engine: np.ndarray
    preemptions: np.ndarray
    dropped: np.ndarray
    device_busy_s: np.ndarray
    engine_busy_s: np.ndarray
    swap_bytes: np.ndarray
    end_s: float


class _Eng:
    __slots__ = ("i", "dev", "sm", "waiting", "resume", "heap", "counter", "B", "s_base", "s_fin", "kv_used",
                 "kv_cap", "tok_s", "pcie_s_per_token")


class _Dev:
    __slots__ = ("i", "engines", "op", "op_eng", "op_rid", "start", "step", "k", "end", "version", "rr", "backlog")


_IDLE, _PREFILL, _DECODE = 0, 1, 2


def run(arrival_s: Sequence[float] | np.ndarray, input_tokens: np.ndarray, output_tokens: np.ndarray,
        model_of: np.ndarray, engines: Sequence[EngineSpec], devices: Sequence[DeviceSpec],
        policy: Policy = FCFS) -> RunResult:
    """Simulate requests (sorted by arrival) on ``engines`` placed on ``devices`` (module docstring for the model).

    Args:
        arrival_s: (n,) arrival times, seconds, non-decreasing.
        input_tokens, output_tokens: (n,) token counts (>= 1).
        model_of: (n,) model name of each request; every name must have at least one engine.
        engines, devices: the fleet.
        policy: router and what-ifs.

    Returns a :class:`RunResult`. Raises InputError when a request's model has no engine.
    """
    n = len(arrival_s)
    arr = np.asarray(arrival_s, dtype=np.float64).tolist()
    inp_np = np.asarray(input_tokens, dtype=np.int64)
    out_np = np.asarray(output_tokens, dtype=np.int64)
    inp, out = inp_np.tolist(), out_np.tolist()
    models = np.asarray(model_of, dtype=object)
    share = policy.host_kv_share
    # Engines and devices.
    devs: list[_Dev] = []
    for i, _ in enumerate(devices):
        d = _Dev()
        d.i, d.engines, d.op, d.op_eng, d.op_rid = i, [], _IDLE, None, -1
        d.start = d.step = d.end = 0.0
        d.k, d.version, d.rr, d.backlog = 0, 0, 0, 0.0
        devs.append(d)
    engs: list[_Eng] = []
    cands: dict[str, list[int]] = {}
    for i, spec in enumerate(engines):
        e = _Eng()
        e.i, e.dev, e.sm = i, devs[spec.device], spec.step
        e.waiting, e.resume, e.heap = deque(), deque(), []
        e.counter, e.B, e.s_base, e.s_fin, e.kv_used = 0, 0, 0.0, 0, 0.0
        e.kv_cap = spec.step.kv_budget_tokens / (1.0 - share)
        e.tok_s = spec.step.token_share_s
        pcie = spec.step.pcie_bytes_per_s
        if share > 0 and not pcie:
            raise InputError(f"{spec.step.label}: the GPU record has no PCIe bandwidth; a host KV tier needs it",
                             field="pcie_bytes_per_s")
        e.pcie_s_per_token = share * spec.step.kv_bytes_per_token / pcie if share > 0 else 0.0
        e.dev.engines.append(e)
        engs.append(e)
        cands.setdefault(spec.model, []).append(i)
    # Per-request, per-engine prefill seconds and KV reservations (vectorized per (model, engine)).
    idx_of_model = {m: np.flatnonzero(models == m) for m in set(models.tolist())}
    for m in idx_of_model:
        if m not in cands:
            raise InputError(f"requests for model {m!r} but the plan serves it on no replica in this window",
                             field="model", value=m)
    pre = [None] * len(engs)
    resv = [None] * len(engs)
    for i, e in enumerate(engs):
        m = engines[i].model
        ids = idx_of_model.get(m, np.zeros(0, dtype=np.int64))
        p = np.zeros(n)
        r = np.zeros(n)
        if len(ids):
            p[ids] = e.sm.prefill(inp_np[ids])
            r[ids] = e.sm.cached_tokens(inp_np[ids] + out_np[ids])
        pre[i], resv[i] = p.tolist(), r.tolist()
    nan = math.nan
    t_pre = [nan] * n
    t_first = [nan] * n
    t_done = [nan] * n
    eng_of = [-1] * n
    n_pre = [0] * n
    dropped = [False] * n
    base = [0.0] * n  # context of a running sequence = base + engine counter
    fin = [0] * n
    produced0 = [0] * n  # tokens produced when the sequence (re)joined
    join = [0] * n
    resume_cost = [0.0] * n
    dev_busy = [0.0] * len(devs)
    eng_busy = [0.0] * len(engs)
    swap_bytes = [0.0] * len(engs)
    heap: list = []
    seq = 0
    rr_model: dict[str, int] = {}
    preempt_after = policy.preempt_after_s
    resume_swap = policy.resume == "swap"
    least_work = policy.router == "least-work"
    max_run = policy.max_decode_run_steps

    def push(dev: _Dev, t: float) -> None:
        nonlocal seq
        dev.version += 1
        seq += 1
        heapq.heappush(heap, (t, seq, dev.i, dev.version))

    def admissible(e: _Eng, rid: int) -> bool:
        return e.kv_used + resv[e.i][rid] <= e.kv_cap

    def preempt_one(e: _Eng, now: float) -> bool:
        """Pause the running sequence of ``e`` that produced the most tokens; False when none runs."""
        if not e.heap:
            return False
        c = e.counter
        best_pos, best = -1, -1
        for pos, (_, rid) in enumerate(e.heap):
            made = produced0[rid] + c - join[rid]
            if made > best:
                best, best_pos = made, pos
        _, rid = e.heap[best_pos]
        e.heap[best_pos] = e.heap[-1]
        e.heap.pop()
        heapq.heapify(e.heap)
        e.B -= 1
        e.s_base -= base[rid]
        e.s_fin -= fin[rid]
        e.kv_used -= resv[e.i][rid]
        produced0[rid] = best
        n_pre[rid] += 1
        ctx = inp[rid] + best
        sm = e.sm
        if resume_swap:
            nbytes = float(sm.cached_tokens(ctx)) * sm.kv_bytes_per_token
            swap_bytes[e.i] += 2 * nbytes
            resume_cost[rid] = 2 * nbytes / sm.pcie_bytes_per_s if sm.pcie_bytes_per_s else math.inf
        else:
            resume_cost[rid] = float(sm.prefill(ctx))
        e.resume.append(rid)
        return True

    def start_prefill(dev: _Dev, e: _Eng, rid: int, dur: float, now: float) -> None:
        dev.op, dev.op_eng, dev.op_rid = _PREFILL, e, rid
        dev.start, dev.end = now, now + dur
        e.kv_used += resv[e.i][rid]
        push(dev, dev.end)

    def schedule(dev: _Dev, now: float) -> None:
        # 1. A prefill (or a resume): each engine offers its head (paused sequences before new ones, unless a new
        # one is overdue under the preemption policy); the oldest admissible head across the engines goes first.
        offers = []
        for e in dev.engines:
            if e.resume and not (e.waiting and preempt_after is not None
                                 and now - arr[e.waiting[0]] >= preempt_after):
                offers.append((arr[e.resume[0]], e.i, True))
            elif e.waiting:
                offers.append((arr[e.waiting[0]], e.i, False))
        if len(offers) > 1:
            offers.sort()
        for _, ei, from_resume in offers:
            e = engs[ei]
            rid = e.resume[0] if from_resume else e.waiting[0]
            if not from_resume and preempt_after is not None and now - arr[rid] >= preempt_after:
                while not admissible(e, rid) and preempt_one(e, now):
                    pass
            if admissible(e, rid):
                if from_resume:
                    e.resume.popleft()
                    dur = resume_cost[rid]
                else:
                    e.waiting.popleft()
                    dur = pre[e.i][rid]
                    dev.backlog -= dur
                    t_pre[rid] = now
                start_prefill(dev, e, rid, dur, now)
                return
        # 2. A decode run, engines in turn.
        active = [e for e in dev.engines if e.B > 0]
        if not active:
            dev.op = _IDLE
            return
        dev.rr = (dev.rr + 1) % len(active)
        e = active[dev.rr]
        k = e.heap[0][0] - e.counter
        if len(active) > 1:
            k = min(k, SHARED_DECODE_RUN_STEPS)
        if max_run:
            k = min(k, max_run)
        B = e.B
        ctx_sum = e.s_base + B * e.counter
        step = e.sm.decode(B, ctx_sum / B + k / 2.0) + e.pcie_s_per_token * (ctx_sum + B * k / 2.0)
        if preempt_after is not None:
            for x in dev.engines:
                if x.waiting and not admissible(x, x.waiting[0]):
                    due = arr[x.waiting[0]] + preempt_after
                    if due > now:
                        k = max(1, min(k, math.ceil((due - now) / step)))
        dev.op, dev.op_eng, dev.k, dev.step = _DECODE, e, k, step
        dev.start, dev.end = now, now + k * step
        push(dev, dev.end)

    def finish(dev: _Dev, now: float) -> None:
        e = dev.op_eng
        dur = now - dev.start
        dev_busy[dev.i] += dur
        eng_busy[e.i] += dur
        if dev.op == _PREFILL:
            rid = dev.op_rid
            if math.isnan(t_first[rid]):
                t_first[rid] = now
                eng_of[rid] = e.i
                produced0[rid] = 1
            rem = out[rid] - produced0[rid]
            if rem <= 0:
                t_done[rid] = now
                e.kv_used -= resv[e.i][rid]
            else:
                f = e.counter + rem
                fin[rid] = f
                join[rid] = e.counter
                b = inp[rid] + produced0[rid] - e.counter
                base[rid] = b
                e.B += 1
                e.s_base += b
                e.s_fin += f
                heapq.heappush(e.heap, (f, rid))
        else:
            e.counter += dev.k
            if e.pcie_s_per_token:
                B = e.B
                swap_bytes[e.i] += e.pcie_s_per_token * (e.s_base * dev.k + B * (e.counter - dev.k) * dev.k
                                                         + B * dev.k * dev.k / 2.0) * e.sm.pcie_bytes_per_s
            h = e.heap
            c = e.counter
            while h and h[0][0] <= c:
                f, rid = heapq.heappop(h)
                t_done[rid] = now
                e.B -= 1
                e.s_base -= base[rid]
                e.s_fin -= f
                e.kv_used -= resv[e.i][rid]
        dev.op = _IDLE
        schedule(dev, now)

    def arrive(rid: int, now: float) -> None:
        m = models[rid]
        cs = cands[m]
        chosen = None
        if least_work:
            best = math.inf
            for ei in cs:
                e = engs[ei]
                r = resv[ei][rid]
                if r > e.kv_cap:
                    continue
                d = e.dev
                w = d.backlog + pre[ei][rid]
                if d.op == _PREFILL:
                    w += d.end - now
                for x in d.engines:
                    if x.B:
                        c = x.counter
                        if d.op == _DECODE and d.op_eng is x and d.step > 0:
                            c += min(d.k, int((now - d.start) / d.step))  # steps of the current run done by now
                        w += (x.s_fin - x.B * c) * x.tok_s
                if w < best:
                    best, chosen = w, e
        else:
            j = rr_model.get(m, 0)
            for t in range(len(cs)):
                ei = cs[(j + t) % len(cs)]
                if resv[ei][rid] <= engs[ei].kv_cap:
                    chosen = engs[ei]
                    rr_model[m] = (j + t + 1) % len(cs)
                    break
        if chosen is None:
            dropped[rid] = True
            return
        e = chosen
        d = e.dev
        e.waiting.append(rid)
        d.backlog += pre[e.i][rid]
        if d.op == _IDLE:
            schedule(d, now)
        elif d.op == _DECODE and len(e.waiting) == 1 and not e.resume and admissible(e, rid):
            done = max(0, math.ceil((now - d.start) / d.step - 1e-9))
            if done < d.k:
                # The run stops after ``done`` steps: re-read its step time at those steps' mean context.
                x = d.op_eng
                cs = x.s_base + x.B * x.counter
                st = x.sm.decode(x.B, cs / x.B + done / 2.0) + x.pcie_s_per_token * (cs + x.B * done / 2.0)
                while d.start + done * st < now - 1e-12:
                    done += 1
                if done < d.k:
                    d.k, d.step = done, st
                    d.end = d.start + done * st
                    push(d, d.end)

    ai = 0
    now = 0.0
    while True:
        if heap and (ai >= n or heap[0][0] <= arr[ai]):
            t, _, di, ver = heapq.heappop(heap)
            d = devs[di]
            if ver != d.version:
                continue
            now = t
            finish(d, t)
        elif ai < n:
            now = arr[ai]
            arrive(ai, now)
            ai += 1
        else:
            break
    return RunResult(prefill_start_s=np.asarray(t_pre), first_token_s=np.asarray(t_first),
                     done_s=np.asarray(t_done), engine=np.asarray(eng_of), preemptions=np.asarray(n_pre),
                     dropped=np.asarray(dropped), device_busy_s=np.asarray(dev_busy),
                     engine_busy_s=np.asarray(eng_busy), swap_bytes=np.asarray(swap_bytes), end_s=now)
