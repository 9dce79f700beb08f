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
* **KV memory, in blocks as tokens are produced** (vLLM's paged attention; the default, ``Policy.kv_block_tokens``
  16): a request is admitted to prefill when its prompt and first token fit in the free KV budget; every running
  sequence then holds its context (prompt + tokens produced so far) rounded up to whole blocks, counted as context
  + block − 1 tokens (an upper bound on the rounding that keeps runs events, not steps; sliding windows are not
  credited here). A decode run stops where the next step would overflow the budget; when even one step does not
  fit, the most recently arrived running sequence is preempted (vLLM's rule) and later resumed at the resume cost
  (``recompute`` by default: a prefill of its prompt and the tokens produced). ``kv_block_tokens=None`` restores
  the reservation model: the whole sequence (prompt + output, capped by a sliding window) is reserved at
  admission, which a scheduler with known output lengths would do, and the running batch never overflows. A request
  whose whole sequence exceeds the budget is dropped (counted as missing its SLO) in both models.
* **Decode runs are events, not steps**: between two events the batch is fixed, so a run of k steps (k = steps until
  the next completion) is one event of duration k × step time, with the step time read at the run's mean context
  (contexts grow by one token per step). With speculative decoding (the engine's ``speculative``) a step is one
  output token's share of a speculative step (:mod:`fleetplan.costmodels.speculative`: the StepModel's decode is
  the per-token step), so tokens advance at the expected rate; under chunked prefill a decoding sequence takes
  k + 1 tokens of the budget and a mixed step carries 1 / tau of a speculative step's chunk. A prefill arriving
  mid-run truncates it at the current step's end. Events are
  therefore O(requests), not O(tokens).
* **Router** (per model, over the engines the plan gives it): ``least-work`` (default) sends a request to the engine
  where it would start soonest: queued prefill seconds on the device + the rest of a running prefill + remaining
  decode tokens × the engine's per-token decode share + its own prefill time there (heterogeneous replicas are
  compared in seconds). With exact work and output length 1 this is the join-the-least-workload rule, whose waits
  equal those of an FCFS multi-server queue (Kiefer & Wolfowitz 1955), hence the M/M/c test. ``round-robin`` cycles.
  With request classes (``class_of``), only the engines serving a request's class are candidates.
* **Preemption** (what-if): with ``preempt_after_s`` set, when a waiting request cannot be admitted for lack of KV and
  has waited at least that long, the running sequence that has produced the most tokens is paused, its KV freed, and
  it resumes later (before newer arrivals) at a cost: ``recompute`` re-prefills its prompt plus the tokens produced;
  ``swap`` copies its KV out and back over PCIe (both copies charged to the device).
* **Priority** (hook for an in-node scheduler, ``priority_of`` in :func:`run`; higher first): a request joins its
  engine's waiting queue ahead of every request of lower priority (FCFS within a priority), paused sequences are
  resumed in the same order, a waiting request goes before a paused one of lower priority, and when a request
  cannot be admitted (KV or ``max_num_seqs`` full) while sequences of lower priority run, the lowest-priority one
  (the newest among equals) is preempted until it fits; it resumes later at the resume cost. KV shortfalls of a
  decode step also preempt the lowest priority first. Prefill-first engines only, without ``preempt_after_s``.
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
from dataclasses import dataclass, field

import numpy as np

from fleetplan.costmodels.engine import EngineConfig
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

    def cached_tokens(self, tokens: np.ndarray | float) -> np.ndarray:
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
        kv_block_tokens: KV block size, tokens (vLLM's default 16): KV is allocated block-wise as tokens are
            produced, with preemption when memory runs short; None reserves each request's whole sequence at
            admission (module docstring).
    """

    router: str = "least-work"
    preempt_after_s: float | None = None
    resume: str = "recompute"
    host_kv_share: float = 0.0
    max_decode_run_steps: int | None = None
    kv_block_tokens: int | None = 16

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
        if self.kv_block_tokens is not None and not (isinstance(self.kv_block_tokens, int)
                                                     and 1 <= self.kv_block_tokens <= 4096):
            raise InputError("kv_block_tokens must be a whole number in 1..4096 (vLLM's default is 16) or None",
                             field="kv_block_tokens", value=self.kv_block_tokens)


#: The default policy: FCFS, least-work router, one KV tier.
FCFS = Policy()


@dataclass(frozen=True)
class EngineSpec:
    """One model resident on one device. ``device`` indexes the device list given to :func:`run`.

    ``serve_from_s`` / ``serve_until_s``: the router sends it requests arriving in [from, until) only (a replica that
    is still loading its weights, or one that was stopped and finishes its queue); the defaults serve always.
    ``classes``: the request classes of its model it serves (an option of a model with request classes serves
    those it has capacity for); None serves every request of its model. The router sends a request only to engines
    serving its class (``class_of`` in :func:`run`). ``engine``: the resolved serving engine it runs (required,
    by keyword: the caller knows which engine its capacity was sized for;
    :func:`~fleetplan.costmodels.engine.engine_or_default` gives the default engine resolved for a GPU)."""

    model: str
    device: int
    step: StepModel
    serve_from_s: float = -math.inf
    serve_until_s: float = math.inf
    classes: frozenset[str] | None = None
    engine: EngineConfig = field(kw_only=True)


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


_IDLE, _PREFILL, _DECODE, _MIXED = 0, 1, 2, 3


@dataclass(eq=False, slots=True)
class _EngineState:
    """One engine while it runs: its queues, its running batch and its KV reservations.

    ``pre`` and ``resv`` hold, per request index, the prefill seconds and the KV tokens of its whole sequence on this
    engine (0 for other models' requests). With block-wise KV (``blk`` > 0), ``need`` holds the tokens a request needs
    free to start its prefill or resume (its context + one token + a block), ``kv_pref`` the tokens of the prefill in
    progress, and the running batch holds context + blk − 1 tokens per sequence (:meth:`used`); with ``blk`` 0,
    ``kv_used`` counts whole-sequence reservations. A running sequence's context is ``base[rid] + counter``:
    ``counter`` counts the decode steps the engine has run, so one decode run advances every running sequence at once.
    ``heap`` holds
    (counter value at which the sequence finishes, rid); ``s_base`` and ``s_fin`` are the sums of ``base`` and of
    the finish counters over the running batch (for the mean context and the remaining decode tokens).
    """

    i: int
    dev: _DeviceState
    sm: StepModel
    kv_cap: float  # tokens, host tier included
    tok_s: float  # per-token decode share, seconds (least-work router)
    pcie_s_per_token: float  # host-tier read seconds per cached token per step
    pre: list[float]
    resv: list[float]
    need: list[float]
    blk: int = 0
    chunked: bool = False
    budget: int = 0  # max_num_batched_tokens (chunked)
    max_seqs: int = 0  # max_num_seqs (0: no cap)
    spec_tokens: int = 1  # budget tokens a decoding sequence takes per step (k + 1 with speculation)
    tau: float = 1.0  # expected tokens per speculative step (1 without speculation)
    hit: list[int] = field(default_factory=list)  # prompt tokens found in the prefix cache, per request
    pref: list[list[int]] = field(default_factory=list)  # prefills in progress: [rid, tokens done, tokens total]
    serve_from_s: float = -math.inf
    serve_until_s: float = math.inf
    kv_pref: float = 0.0
    waiting: deque[int] = field(default_factory=deque)
    resume: deque[int] = field(default_factory=deque)
    heap: list[tuple[int, int]] = field(default_factory=list)
    counter: int = 0
    B: int = 0
    s_base: float = 0.0
    s_fin: int = 0
    kv_used: float = 0.0

    def used(self) -> float:
        """KV tokens in use now: the prefill in progress plus the running batch (block-wise), or the reservations."""
        if self.blk:
            return self.kv_pref + self.s_base + self.B * (self.counter + self.blk - 1)
        return self.kv_used

    def admissible(self, rid: int) -> bool:
        """True when request ``rid`` may start its prefill (or resume) now: its prompt blocks (block-wise) or its
        whole-sequence reservation fit in the free budget, and the running set is below ``max_num_seqs``."""
        if self.max_seqs and self.B + len(self.pref) >= self.max_seqs:
            return False
        if self.blk:
            return self.used() + self.need[rid] <= self.kv_cap
        return self.kv_used + self.resv[rid] <= self.kv_cap

    def steps_that_fit(self) -> int:
        """Decode steps the running batch can take before the block-wise KV budget overflows (large when not
        block-wise)."""
        if not self.blk or not self.B:
            return 1 << 60
        return int((self.kv_cap - self.used()) // self.B)

    def step_s(self, steps: int | float) -> float:
        """Seconds per step of a decode run of ``steps`` steps starting now (step time at the run's mean context,
        plus the host-tier reads)."""
        B = self.B
        ctx_sum = self.s_base + B * self.counter
        return self.sm.decode(B, ctx_sum / B + steps / 2.0) + self.pcie_s_per_token * (ctx_sum + B * steps / 2.0)


@dataclass(eq=False, slots=True)
class _DeviceState:
    """One device while it runs: the iteration in progress (``op``: idle, a prefill of ``op_rid`` or a decode run of
    ``k`` steps of ``step`` seconds, on ``op_eng``, from ``start`` to ``end``), the event version that is current,
    the decode turn ``rr`` and the queued prefill seconds ``backlog``."""

    i: int
    engines: list[_EngineState] = field(default_factory=list)
    op: int = _IDLE
    op_eng: _EngineState | None = None
    op_rid: int = -1
    start: float = 0.0
    step: float = 0.0
    k: int = 0
    end: float = 0.0
    version: int = 0
    rr: int = 0
    backlog: float = 0.0
    chunks: list[tuple[list[int], int]] = field(default_factory=list)  # a mixed step's prefill chunks


@dataclass(eq=False)
class _Requests:
    """Per-request inputs (lists, for speed) and what happened to each request so far."""

    arrival_s: list[float]
    inp: list[int]
    out: list[int]
    model: np.ndarray
    t_pre: list[float]
    t_first: list[float]
    t_done: list[float]
    eng_of: list[int]
    n_pre: list[int]
    dropped: list[bool]
    base: list[float]  # context of a running sequence = base + engine counter
    fin: list[int]  # engine counter at which the sequence finishes
    produced0: list[int]  # tokens produced when the sequence (re)joined the batch
    join: list[int]  # engine counter when it joined
    resume_cost: list[float]  # seconds its resume takes (recompute or swap), set when it is preempted

    @classmethod
    def new(cls, arrival_s, inp: list[int], out: list[int], model: np.ndarray) -> _Requests:
        n = len(inp)
        nan = math.nan
        return cls(arrival_s, inp, out, model, [nan] * n, [nan] * n, [nan] * n, [-1] * n, [0] * n, [False] * n,
                   [0.0] * n, [0] * n, [0] * n, [0] * n, [0.0] * n)


class Engine:
    """The discrete-event simulation of one fleet over one request stream (the module docstring's model).

    Build it with the requests and the fleet, call :meth:`run` once. State: one :class:`_DeviceState` per device,
    one :class:`_EngineState` per engine, the per-request :class:`_Requests`, and one heap of device events
    (time, sequence, device, version); an event whose version is not the device's current one was superseded (a
    decode run truncated by an arrival) and is skipped.
    """

    def __init__(self, arrival_s: Sequence[float] | np.ndarray, input_tokens: np.ndarray, output_tokens: np.ndarray,
                 model_of: np.ndarray, engines: Sequence[EngineSpec], devices: Sequence[DeviceSpec],
                 policy: Policy = FCFS, class_of: np.ndarray | None = None,
                 priority_of: np.ndarray | None = None):
        self._prio: list[float] | None = (None if priority_of is None
                                          else np.asarray(priority_of, dtype=np.float64).tolist())
        if self._prio is not None and any(spec.engine.chunked for spec in engines):
            raise InputError("request priorities are modelled for the prefill-first engine only; drop them or use "
                             "engine mode prefill-first", field="priority_of")
        if self._prio is not None and policy.preempt_after_s is not None:
            raise InputError("request priorities set their own preemption; drop preempt_after_s or the priorities",
                             field="preempt_after_s", value=policy.preempt_after_s)
        self._class_of = None if class_of is None else np.asarray(class_of, dtype=object).tolist()
        self._eng_classes = [spec.classes for spec in engines]
        inp_np = np.asarray(input_tokens, dtype=np.int64)
        out_np = np.asarray(output_tokens, dtype=np.int64)
        models = np.asarray(model_of, dtype=object)
        self.req = _Requests.new(np.asarray(arrival_s, dtype=np.float64).tolist(), inp_np.tolist(), out_np.tolist(),
                                 models)
        self.policy = policy
        # Policy fields read at every event, kept as plain attributes.
        self._least_work = policy.router == "least-work"
        self._preempt_after_s = policy.preempt_after_s
        self._max_run = policy.max_decode_run_steps
        self.devs = [_DeviceState(i) for i in range(len(devices))]
        self.cands: dict[str, list[int]] = {}
        for i, spec in enumerate(engines):
            self.cands.setdefault(spec.model, []).append(i)
        idx_of_model = {m: np.flatnonzero(models == m) for m in set(models.tolist())}
        self._tables: dict[tuple[int, str, float], tuple[list[float], list[float], list[float], list[int]]] = {}
        for m in idx_of_model:
            if m not in self.cands:
                raise InputError(f"requests for model {m!r} but the plan serves it on no replica in this window",
                                 field="model", value=m)
        self.engs = [self._engine_state(i, spec, idx_of_model.get(spec.model, np.zeros(0, dtype=np.int64)), inp_np,
                                        out_np) for i, spec in enumerate(engines)]
        self.dev_busy = [0.0] * len(self.devs)
        self.eng_busy = [0.0] * len(self.engs)
        self.swap_bytes = [0.0] * len(self.engs)
        self.heap: list[tuple[float, int, int, int]] = []
        self.seq = 0
        self.rr_model: dict[str, int] = {}

    def _engine_state(self, i: int, spec: EngineSpec, ids: np.ndarray, inp: np.ndarray,
                      out: np.ndarray) -> _EngineState:
        """Engine ``i``'s state, with its requests' prefill seconds and KV reservations (vectorized)."""
        share = self.policy.host_kv_share
        sm = spec.step
        pcie = sm.pcie_bytes_per_s
        if share > 0 and not pcie:
            raise InputError(f"{sm.label}: the GPU record has no PCIe bandwidth; a host KV tier needs it",
                             field="pcie_bytes_per_s")
        blk = self.policy.kv_block_tokens or 0
        cfg = spec.engine
        if cfg.chunked and (cfg.max_num_batched_tokens is None or cfg.max_num_seqs is None):
            raise InputError(f"{sm.label}: a chunked-prefill engine needs max_num_batched_tokens and max_num_seqs "
                             "(EngineConfig.resolved fills vLLM's defaults)", field="engine.max_num_batched_tokens")
        if cfg.chunked and self.policy.preempt_after_s is not None:
            raise InputError("preempt_after_s is modelled for the prefill-first engine only; drop it or use "
                             "engine mode prefill-first", field="preempt_after_s", value=self.policy.preempt_after_s)
        h = cfg.effective_hit_rate
        # engines of one replica type (one StepModel) share the per-request tables: a day's replay of a fleet
        # that changes every minute has hundreds of engines, and a table per engine is engines x requests
        key = (id(sm), spec.model, h)
        if key not in self._tables:
            n = len(inp)
            p = np.zeros(n)
            r = np.zeros(n)
            nd = np.zeros(n)
            hit = np.zeros(n, dtype=np.int64)
            if len(ids):
                # prefix-cache hits: the first floor(h x prompt) tokens (at most prompt - 1) are not recomputed;
                # the rest costs prefill(prompt) - prefill(hit) plus one step's fixed cost prefill(1)
                hit[ids] = np.minimum(np.floor(h * inp[ids]), inp[ids] - 1).astype(np.int64)
                p[ids] = sm.prefill(inp[ids])
                has = ids[hit[ids] > 0]
                if len(has):
                    p[has] = (np.asarray(sm.prefill(inp[has])) - np.asarray(sm.prefill(hit[has]))
                              + float(sm.prefill(1)))
                r[ids] = sm.cached_tokens(inp[ids] + out[ids])
                if blk:
                    r[ids] = inp[ids] + out[ids] + blk - 1
                    nd[ids] = inp[ids] + blk
            self._tables[key] = (p.tolist(), r.tolist(), nd.tolist(), hit.tolist())
        pre, resv, need, hits = self._tables[key]
        e = _EngineState(i, self.devs[spec.device], sm, kv_cap=sm.kv_budget_tokens / (1.0 - share),
                         tok_s=sm.token_share_s,
                         pcie_s_per_token=share * sm.kv_bytes_per_token / pcie if share > 0 and pcie else 0.0,
                         pre=pre, resv=resv, need=need, blk=blk, chunked=cfg.chunked,
                         budget=cfg.max_num_batched_tokens or 0, max_seqs=cfg.max_num_seqs or 0, hit=hits,
                         spec_tokens=cfg.speculative.num_speculative_tokens + 1 if cfg.speculative else 1,
                         tau=cfg.speculative.tokens_per_step if cfg.speculative else 1.0,
                         serve_from_s=spec.serve_from_s, serve_until_s=spec.serve_until_s)
        e.dev.engines.append(e)
        return e

    # -- the event loop ----------------------------------------------------------------------------------------

    def run(self) -> RunResult:
        """Replay every request; returns the :class:`RunResult`."""
        heap, devs, arr = self.heap, self.devs, self.req.arrival_s
        n = len(arr)
        ai = 0
        now = 0.0
        while True:
            if heap and (ai >= n or heap[0][0] <= arr[ai]):
                t, _, di, ver = heapq.heappop(heap)
                d = devs[di]
                if ver != d.version:
                    continue
                now = t
                self._finish(d, t)
            elif ai < n:
                now = arr[ai]
                self._arrive(ai, now)
                ai += 1
            else:
                break
        q = self.req
        return RunResult(prefill_start_s=np.asarray(q.t_pre), first_token_s=np.asarray(q.t_first),
                         done_s=np.asarray(q.t_done), engine=np.asarray(q.eng_of), preemptions=np.asarray(q.n_pre),
                         dropped=np.asarray(q.dropped), device_busy_s=np.asarray(self.dev_busy),
                         engine_busy_s=np.asarray(self.eng_busy), swap_bytes=np.asarray(self.swap_bytes), end_s=now)

    def _push(self, dev: _DeviceState, t: float) -> None:
        """Schedule ``dev``'s next event at ``t``, superseding its pending one."""
        dev.version += 1
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, dev.i, dev.version))

    # -- arrivals and routing ----------------------------------------------------------------------------------

    def _arrive(self, rid: int, now: float) -> None:
        """Route request ``rid`` and queue it (dropped when no engine's KV budget could ever hold it, or no engine
        of its model serves at ``now``)."""
        e = self._least_work_engine(rid, now) if self._least_work else self._round_robin(rid)
        if e is None:
            self.req.dropped[rid] = True
            return
        d = e.dev
        prio = self._prio
        if prio is None:
            e.waiting.append(rid)
        else:
            _insert_by_priority(e.waiting, rid, prio)
        d.backlog += e.pre[rid]
        if d.op == _IDLE:
            self._schedule(d, now)
        elif prio is not None:
            # a new head that may start now, or may preempt a lower-priority sequence, stops the run at its step
            if d.op == _DECODE and e.waiting[0] == rid and (not e.resume or prio[e.resume[0]] < prio[rid]) \
                    and (e.admissible(rid) or self._lower_running(e, prio[rid])):
                self._truncate_decode_run(d, now)
        elif d.op == _DECODE and len(e.waiting) == 1 and not e.resume and e.admissible(rid):
            self._truncate_decode_run(d, now)

    def _least_work_engine(self, rid: int, now: float) -> _EngineState | None:
        """The engine where ``rid`` would start soonest (module docstring), or None when none can hold it."""
        best, chosen = math.inf, None
        cls = self._class_of[rid] if self._class_of is not None else None
        for ei in self.cands[self.req.model[rid]]:
            e = self.engs[ei]
            if e.resv[rid] > e.kv_cap or not e.serve_from_s <= now < e.serve_until_s:
                continue
            served = self._eng_classes[ei]
            if cls is not None and served is not None and cls not in served:
                continue
            w = self._start_delay_s(e.dev, now, e.pre[rid])
            if w < best:
                best, chosen = w, e
        return chosen

    @staticmethod
    def _start_delay_s(d: _DeviceState, now: float, own_prefill_s: float) -> float:
        """Seconds until a new request's prefill would end on device ``d`` at ``now``: queued prefills + its own
        prefill + the rest of a running prefill + the remaining decode tokens of every engine × its per-token share
        (summed in this order: a different order changes ties between replicas in the last bit)."""
        w = d.backlog + own_prefill_s
        if d.op == _PREFILL or d.op == _MIXED:
            w += d.end - now
        for x in d.engines:
            if x.B:
                c = x.counter
                if d.op == _DECODE and d.op_eng is x and d.step > 0:
                    c += min(d.k, int((now - d.start) / d.step))  # steps of the current run done by now
                w += (x.s_fin - x.B * c) * x.tok_s
        return w

    def _round_robin(self, rid: int) -> _EngineState | None:
        """The next engine of ``rid``'s model in turn that serves now and can hold it, or None."""
        m = self.req.model[rid]
        cs = self.cands[m]
        j = self.rr_model.get(m, 0)
        now = self.req.arrival_s[rid]
        cls = self._class_of[rid] if self._class_of is not None else None
        for t in range(len(cs)):
            ei = cs[(j + t) % len(cs)]
            e = self.engs[ei]
            served = self._eng_classes[ei]
            if cls is not None and served is not None and cls not in served:
                continue
            if e.resv[rid] <= e.kv_cap and e.serve_from_s <= now < e.serve_until_s:
                self.rr_model[m] = (j + t + 1) % len(cs)
                return self.engs[ei]
        return None

    def _truncate_decode_run(self, d: _DeviceState, now: float) -> None:
        """A prefill arrived while ``d`` decodes: stop the run at the end of the current step."""
        done = max(0, math.ceil((now - d.start) / d.step - 1e-9))
        if done >= d.k:
            return
        # The run stops after ``done`` steps: re-read its step time at those steps' mean context.
        if d.op_eng is None:
            raise RuntimeError(f"device {d.i} decodes with no engine")
        st = d.op_eng.step_s(done)
        while d.start + done * st < now - 1e-12:
            done += 1
        if done < d.k:
            d.k, d.step = done, st
            d.end = d.start + done * st
            self._push(d, d.end)

    # -- scheduling a device's next iteration ------------------------------------------------------------------

    def _schedule(self, dev: _DeviceState, now: float) -> None:
        """Start ``dev``'s next iteration: a prefill or resume if one is admissible, else a decode run, else idle.
        Chunked-prefill engines run a mixed step instead whenever they have prefill work (:meth:`_start_mixed_step`)."""
        if dev.engines[0].chunked:
            if self._start_mixed_step(dev, now):
                return
            if self.policy.resume == "swap" and any(e.resume for e in dev.engines) and self._start_prefill(dev, now):
                return
        elif self._start_prefill(dev, now):
            return
        self._start_decode_run(dev, now)

    def _start_mixed_step(self, dev: _DeviceState, now: float) -> bool:
        """One step of vLLM V1's scheduler on the engine of ``dev`` whose oldest prefill work arrived first: the
        running decodes (one token each), then prefill chunks, oldest first (prefills in progress, recompute-resumes,
        then new requests while admissible), each ``min(tokens left, budget left)``, the budget being
        ``max_num_batched_tokens`` minus the decode tokens. Step time: the decode step of the running batch (or,
        with none, the fixed step cost ``prefill(1)``) plus each chunk's prefill(done + chunk) − prefill(done)
        (prefill(1) for a chunk from 0), so a whole prompt alone costs exactly ``prefill(prompt)``. False when no
        engine has a chunk to run (then a decode run goes, as in prefill-first)."""
        arr = self.req.arrival_s
        offers = []
        for e in dev.engines:
            if e.pref:
                offers.append((arr[e.pref[0][0]], e.i))
            elif e.resume:  # preempted sequences go first; swap-resumes run as whole iterations
                if self.policy.resume == "recompute" and e.admissible(e.resume[0]):
                    offers.append((arr[e.resume[0]], e.i))
            elif e.waiting and e.admissible(e.waiting[0]):
                offers.append((arr[e.waiting[0]], e.i))
        if not offers:
            return False
        e = self.engs[min(offers)[1]]
        if e.blk and e.B and e.steps_that_fit() < 1:
            while e.B and e.steps_that_fit() < 1:
                self._preempt_one(e, newest=True)
        q, sm = self.req, e.sm
        fixed = float(sm.prefill(1))
        left = e.budget - e.B * e.spec_tokens
        if e.B and e.tau != 1.0 and left > 0:  # a speculative step lasts tau per-token steps: its chunk is
            left = max(1, int(left / e.tau))  # spread over them
        t = e.step_s(1) if e.B else fixed
        chunks: list[tuple[list[int], int]] = []

        def add(entry: list[int]) -> None:
            nonlocal left, t
            c = min(entry[2] - entry[1], left)
            done = entry[1]
            t += float(sm.prefill(done + c)) - (float(sm.prefill(done)) if done > 0 else fixed)
            left -= c
            chunks.append((entry, c))

        for entry in e.pref:
            if left <= 0:
                break
            add(entry)
        recompute = self.policy.resume == "recompute"
        while left > 0 and recompute and e.resume and e.admissible(e.resume[0]):
            rid = e.resume.popleft()
            e.kv_pref += e.need[rid] if e.blk else 0.0
            if not e.blk:
                e.kv_used += e.resv[rid]
            entry = [rid, 0, q.inp[rid] + q.produced0[rid]]
            e.pref.append(entry)
            add(entry)
        while left > 0 and not e.resume and e.waiting and e.admissible(e.waiting[0]):
            rid = e.waiting.popleft()
            dev.backlog -= e.pre[rid]
            q.t_pre[rid] = now
            if e.blk:
                e.kv_pref += e.need[rid]
            else:
                e.kv_used += e.resv[rid]
            entry = [rid, e.hit[rid], q.inp[rid]]
            e.pref.append(entry)
            add(entry)
        if not chunks:
            return False
        dev.op, dev.op_eng, dev.chunks = _MIXED, e, chunks
        dev.k = 1 if e.B else 0
        dev.start, dev.step, dev.end = now, t, now + t
        self._push(dev, dev.end)
        return True

    def _finish_mixed_step(self, e: _EngineState, dev: _DeviceState, now: float) -> None:
        """A mixed step ended: the decodes advance one token, then each chunk's request advances; a request whose
        prompt is done gets its first token and joins the running batch (it did not decode in this step)."""
        if dev.k:
            self._finish_decode_run(e, 1, now)
        for entry, c in dev.chunks:
            entry[1] += c
            if entry[1] >= entry[2]:
                e.pref.remove(entry)
                self._finish_prefill(e, entry[0], now)
        dev.chunks = []

    def _start_prefill(self, dev: _DeviceState, now: float) -> bool:
        """Each engine offers its head (paused sequences before new ones, unless a new one is overdue under the
        preemption policy); the oldest admissible head across the engines starts. False when none can."""
        arr = self.req.arrival_s
        after = self._preempt_after_s  # a new request waiting this long may preempt (None: never)
        prio = self._prio
        offers: list[tuple[float, float, int, bool]] = []
        for e in dev.engines:
            if prio is not None:  # the higher-priority head of the two queues (a paused one on ties)
                if e.resume and not (e.waiting and prio[e.waiting[0]] > prio[e.resume[0]]):
                    offers.append((-prio[e.resume[0]], arr[e.resume[0]], e.i, True))
                elif e.waiting:
                    offers.append((-prio[e.waiting[0]], arr[e.waiting[0]], e.i, False))
            elif e.resume and not (e.waiting and after is not None and now - arr[e.waiting[0]] >= after):
                offers.append((0.0, arr[e.resume[0]], e.i, True))
            elif e.waiting:
                offers.append((0.0, arr[e.waiting[0]], e.i, False))
        if len(offers) > 1:
            offers.sort()
        for _, _, ei, from_resume in offers:
            e = self.engs[ei]
            rid = e.resume[0] if from_resume else e.waiting[0]
            if not from_resume and after is not None and now - arr[rid] >= after:
                while not e.admissible(rid) and self._preempt_one(e):
                    pass
            if prio is not None:
                while not e.admissible(rid) and self._preempt_one(e, newest=True, below=prio[rid]):
                    pass
            if e.admissible(rid):
                if from_resume:
                    e.resume.popleft()
                    dur = self.req.resume_cost[rid]
                else:
                    e.waiting.popleft()
                    dur = e.pre[rid]
                    dev.backlog -= dur
                    self.req.t_pre[rid] = now
                dev.op, dev.op_eng, dev.op_rid = _PREFILL, e, rid
                dev.start, dev.end = now, now + dur
                if e.blk:
                    e.kv_pref += e.need[rid]
                else:
                    e.kv_used += e.resv[rid]
                self._push(dev, dev.end)
                return True
        return False

    def _start_decode_run(self, dev: _DeviceState, now: float) -> None:
        """A decode run of the next engine in turn with running sequences: until its next completion, at most
        :data:`SHARED_DECODE_RUN_STEPS` on a shared device, and cut short where a KV-blocked request falls due for
        preemption."""
        active = [e for e in dev.engines if e.B > 0]
        if not active:
            dev.op = _IDLE
            return
        dev.rr = (dev.rr + 1) % len(active)
        e = active[dev.rr]
        if e.blk and e.steps_that_fit() < 1:
            # Block-wise KV: the next step does not fit; preempt the newest running sequences until it does.
            while e.B and e.steps_that_fit() < 1:
                self._preempt_one(e, newest=True)
            if not e.B:
                self._schedule(dev, now)
                return
        k = e.heap[0][0] - e.counter
        k = min(k, e.steps_that_fit())
        if len(active) > 1:
            k = min(k, SHARED_DECODE_RUN_STEPS)
        max_run = self._max_run
        if max_run:
            k = min(k, max_run)
        step = e.step_s(k)
        after = self._preempt_after_s
        if after is not None:
            for x in dev.engines:
                if x.waiting and not x.admissible(x.waiting[0]):
                    due = self.req.arrival_s[x.waiting[0]] + after
                    if due > now:
                        k = max(1, min(k, math.ceil((due - now) / step)))
        dev.op, dev.op_eng, dev.k, dev.step = _DECODE, e, k, step
        dev.start, dev.end = now, now + k * step
        self._push(dev, dev.end)

    # -- completions and preemption ----------------------------------------------------------------------------

    def _finish(self, dev: _DeviceState, now: float) -> None:
        """``dev``'s iteration ended at ``now``: account its busy time, apply it, schedule the next one."""
        e = dev.op_eng
        if e is None:
            raise RuntimeError(f"device {dev.i} finished an iteration it did not run")
        dur = now - dev.start
        self.dev_busy[dev.i] += dur
        self.eng_busy[e.i] += dur
        if dev.op == _PREFILL:
            self._finish_prefill(e, dev.op_rid, now)
        elif dev.op == _MIXED:
            self._finish_mixed_step(e, dev, now)
        else:
            self._finish_decode_run(e, dev.k, now)
        dev.op = _IDLE
        self._schedule(dev, now)

    def _finish_prefill(self, e: _EngineState, rid: int, now: float) -> None:
        """Prefill (or resume) of ``rid`` done: its first token, then it joins the running batch (or is done)."""
        q = self.req
        if e.blk:
            e.kv_pref -= e.need[rid]
        if math.isnan(q.t_first[rid]):
            q.t_first[rid] = now
            q.eng_of[rid] = e.i
            q.produced0[rid] = 1
        rem = q.out[rid] - q.produced0[rid]
        if rem <= 0:
            q.t_done[rid] = now
            if not e.blk:
                e.kv_used -= e.resv[rid]
            return
        f = e.counter + rem
        q.fin[rid] = f
        q.join[rid] = e.counter
        b = q.inp[rid] + q.produced0[rid] - e.counter
        q.base[rid] = b
        e.B += 1
        e.s_base += b
        e.s_fin += f
        heapq.heappush(e.heap, (f, rid))

    def _finish_decode_run(self, e: _EngineState, k: int, now: float) -> None:
        """A decode run of ``k`` steps ended: advance the engine's counter, count host-tier reads, retire the
        sequences that produced their last token."""
        e.counter += k
        if e.pcie_s_per_token and e.sm.pcie_bytes_per_s:  # a host KV tier implies a PCIe bandwidth
            B = e.B
            self.swap_bytes[e.i] += e.pcie_s_per_token * (e.s_base * k + B * (e.counter - k) * k
                                                          + B * k * k / 2.0) * e.sm.pcie_bytes_per_s
        h = e.heap
        c = e.counter
        while h and h[0][0] <= c:
            _, rid = heapq.heappop(h)
            self.req.t_done[rid] = now
            self._leave_batch(e, rid)

    def _leave_batch(self, e: _EngineState, rid: int) -> None:
        """Take ``rid`` out of ``e``'s running sums and free its KV (its heap entry is already gone)."""
        e.B -= 1
        e.s_base -= self.req.base[rid]
        e.s_fin -= self.req.fin[rid]
        if not e.blk:
            e.kv_used -= e.resv[rid]

    def _lower_running(self, e: _EngineState, priority: float) -> bool:
        """True when a sequence of priority below ``priority`` runs on ``e`` (priorities set)."""
        prio = self._prio
        return prio is not None and any(prio[rid] < priority for _, rid in e.heap)

    def _preempt_one(self, e: _EngineState, newest: bool = False, below: float | None = None) -> bool:
        """Pause a running sequence of ``e``: the one that produced the most tokens, or with ``newest`` the most
        recently arrived (vLLM's choice when block-wise KV runs short); with priorities (``priority_of``) and
        ``newest``, the lowest-priority one first (the newest among equals), and with ``below`` only one of priority
        below it. False when none runs (or none is below)."""
        if not e.heap:
            return False
        q = self.req
        c = e.counter
        prio = self._prio
        best_pos, best_key = -1, (-math.inf, -math.inf)
        for pos, (_, rid) in enumerate(e.heap):
            if below is not None and prio is not None and not prio[rid] < below:
                continue
            key = ((-prio[rid] if prio is not None else 0.0, q.arrival_s[rid]) if newest
                   else (0.0, q.produced0[rid] + c - q.join[rid]))
            if key > best_key:
                best_key, best_pos = key, pos
        if best_pos < 0:
            return False
        _, rid = e.heap[best_pos]
        best = q.produced0[rid] + c - q.join[rid]
        e.heap[best_pos] = e.heap[-1]
        e.heap.pop()
        heapq.heapify(e.heap)
        self._leave_batch(e, rid)
        q.produced0[rid] = best
        q.n_pre[rid] += 1
        ctx = q.inp[rid] + best
        if e.blk:
            e.need[rid] = ctx + e.blk
        sm = e.sm
        if self.policy.resume == "swap":
            nbytes = float(sm.cached_tokens(ctx)) * sm.kv_bytes_per_token
            self.swap_bytes[e.i] += 2 * nbytes
            q.resume_cost[rid] = 2 * nbytes / sm.pcie_bytes_per_s if sm.pcie_bytes_per_s else math.inf
        else:
            q.resume_cost[rid] = float(sm.prefill(ctx))
        if prio is None:
            e.resume.append(rid)
        else:
            _insert_by_priority(e.resume, rid, prio)
        return True


def _insert_by_priority(queue: deque[int], rid: int, prio: list[float]) -> None:
    """Put ``rid`` into ``queue`` (highest priority first) after every request of its priority or higher."""
    p = prio[rid]
    for pos, other in enumerate(queue):
        if prio[other] < p:
            queue.insert(pos, rid)
            return
    queue.append(rid)


def run(arrival_s: Sequence[float] | np.ndarray, input_tokens: np.ndarray, output_tokens: np.ndarray,
        model_of: np.ndarray, engines: Sequence[EngineSpec], devices: Sequence[DeviceSpec],
        policy: Policy = FCFS, class_of: np.ndarray | None = None,
        priority_of: np.ndarray | None = None) -> RunResult:
    """Simulate requests (sorted by arrival) on ``engines`` placed on ``devices`` (module docstring for the model).

    Args:
        arrival_s: (n,) arrival times, seconds, non-decreasing.
        input_tokens, output_tokens: (n,) token counts (>= 1).
        model_of: (n,) model name of each request; every name must have at least one engine.
        engines, devices: the fleet.
        policy: router and what-ifs.
        class_of: (n,) request class of each request (None entries, or None: any engine of its model); a request
            goes only to engines whose ``classes`` include its class (least work among those), and is dropped
            when none does.
        priority_of: (n,) priority of each request, higher first (None: FCFS): queue order, resume order and
            preemption of lower-priority running sequences on the engine the request was routed to (module
            docstring); prefill-first engines only.

    Returns a :class:`RunResult`. Raises InputError when a request's model has no engine (or a host KV tier is
    asked of a GPU without a PCIe bandwidth).
    """
    return Engine(arrival_s, input_tokens, output_tokens, model_of, engines, devices, policy, class_of,
                  priority_of).run()
