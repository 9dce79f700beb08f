"""The live placement of the online re-planner and the records of a round.

* :func:`online_problem`: the daily problem as the fleet stands now: the nodes reported unavailable taken out of
  their pools, and each committed pool reduced to the GPUs its commitment bought, at no marginal cost (the
  commitment is paid whether they run or not; :func:`sunk_usd_per_hour` is that price).
* :func:`window_problem`: a one-window copy of a problem for a demand: what an online plan is checked against.
* :func:`load_times`: seconds a new replica (colocated, prefill or decode) loads its weights before it serves.
* :class:`LiveReplica` / :class:`LiveShared`: one running replica or shared GPU, with the node(s) it occupies, when
  it serves (``ready_at_s``) and, while it is being replaced, when it stops (``stop_at_s``: make-before-break, it
  serves until its replacement does).
* :class:`FreeGpus`: free GPUs per node of every pool, nodes that are down, best-fit placement.
* :class:`Action`, :class:`OnlineResult`: the changes of a round and the plan it adopted.

Units: seconds (unix time for instants), req/s, bytes, USD.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace

from fleetplan.errors import InputError
from fleetplan.placement.plan import Plan
from fleetplan.placement.problem import OptionKey, PdKey, Problem, spread_where_possible
from fleetplan.placement.validate import ValidationReport

#: Pricing model an online problem gives a committed pool: its GPUs are bought for the day (sunk), so using one costs
#: nothing more within the commitment.
SUNK_PRICING_MODEL = "owned"


# ---- problems ---------------------------------------------------------------------------------------------------
def online_problem(problem: Problem, down: Mapping[str, Collection[int]] | None = None,
                   commitments: Mapping[str, int] | None = None) -> Problem:
    """``problem`` as the fleet stands now.

    Args:
        problem: the daily problem.
        down: {pool id: indices of its nodes that are unavailable} (outages, drained nodes); each leaves its pool.
        commitments: {committed pool id: GPUs committed for the day}: the pool keeps only those GPUs (the rest are
            reserved, from its last node backwards) at a marginal price of 0 (pricing model 'owned'), so an online
            plan uses the GPUs already bought before paying for others. A committed pool missing here keeps its
            full size at 0 marginal price only if it is also given; callers pass every committed pool
            (:meth:`Replanner` refuses to start without them).

    A model's spread (constraint (18)) is kept over the sites (pools) that still have GPUs: with k of them left,
    a bound below 1/k (which k places cannot meet) becomes 1/k, and with one left it no longer binds, so an outage
    never makes the fleet infeasible through the spread
    (:func:`~fleetplan.placement.problem.spread_where_possible`).

    Raises InputError for an unknown pool, a node index out of range or a commitment above the pool's GPUs.
    """
    down = down or {}
    commitments = commitments or {}
    pools = problem.pool_by_id
    for pid in set(down) | set(commitments):
        if pid not in pools:
            raise InputError(f"unknown pool {pid!r}; known pools: {', '.join(sorted(pools))}", field="pool",
                             value=pid)
    out = []
    for p in problem.pools:
        nodes_down = set(down.get(p.id, ()))
        bad = [i for i in nodes_down if not (isinstance(i, int) and 0 <= i < p.nodes)]
        if bad:
            raise InputError(f"pool {p.id} has nodes 0..{p.nodes - 1}; node {bad[0]!r} is not one of them",
                             field="nodes", value=bad[0])
        q = replace(p, nodes=p.nodes - len(nodes_down)) if nodes_down else p
        if p.committed and p.id in commitments:
            c = int(commitments[p.id])
            if not 0 <= c <= p.gpus:
                raise InputError(f"commitment of {c} GPUs for pool {p.id} is outside 0..{p.gpus}",
                                 field="commitments", value=c)
            kept = min(c, q.nodes * q.gpus_per_node)
            q = replace(q, pricing_model=SUNK_PRICING_MODEL, usd_per_gpu_hour=0.0, committed_usd_per_gpu_hour=0.0,
                        reserved_gpus=q.nodes * q.gpus_per_node - kept,
                        price_source=f"committed for the day: {c} GPUs at {p.committed_usd_per_gpu_hour:g} USD/GPU-h "
                                     "(sunk)")
        elif q.reserved_gpus > q.nodes * q.gpus_per_node:
            q = replace(q, reserved_gpus=q.nodes * q.gpus_per_node)
        out.append(q)
    models = spread_where_possible(problem.models, tuple(out), problem.options, problem.share_options)
    return replace(problem, pools=tuple(out), models=models)


def sunk_usd_per_hour(problem: Problem, commitments: Mapping[str, int]) -> float:
    """USD per hour the day's commitments cost whatever runs: Σ committed GPUs × the pool's committed rate."""
    pools = problem.pool_by_id
    return sum(n * pools[p].committed_usd_per_gpu_hour for p, n in commitments.items() if p in pools)


#: What :func:`window_problem` appends to its problem's name: a stored online plan's name is its scenario's plus this.
ONLINE_WINDOW_SUFFIX = " (online window)"


def window_problem(problem: Problem, demand_req_per_s: Mapping[str, float], *, name: str | None = None) -> Problem:
    """A one-window copy of ``problem`` whose demand is ``demand_req_per_s`` ({model: req/s}; 0 for models not
    given): the online plan is checked against it by ``validate``. Pools, options, margin, floors and ceilings
    are the same; the window keeps the original length."""
    models = tuple(replace(m, demand_req_per_s=(float(demand_req_per_s.get(m.name, 0.0)),)) for m in problem.models)
    return replace(problem, n_windows=1, models=models, name=name or problem.name + ONLINE_WINDOW_SUFFIX)


def load_times(problem: Problem, load_bandwidth_bytes_per_s: float,
               weight_bytes: Mapping[str, float] | None = None) -> dict:
    """Seconds a new replica of each option needs before it serves: its weights per GPU / load bandwidth per GPU
    (every GPU of the replica loads its shard in parallel). Keys: every dedicated option's key (model, pool, tp,
    pp) and every prefill or decode option's pd key (model, role, pool, tp, decode site). ``weight_bytes``
    {model: bytes}; a model missing there is charged its whole per-GPU memory footprint (weights + KV reservation,
    an upper bound). Raises InputError for a bandwidth <= 0."""
    if not (isinstance(load_bandwidth_bytes_per_s, int | float) and load_bandwidth_bytes_per_s > 0
            and math.isfinite(load_bandwidth_bytes_per_s)):
        raise InputError("load bandwidth must be a finite number > 0 bytes/s", field="load_bandwidth_bytes_per_s",
                         value=load_bandwidth_bytes_per_s)
    out: dict = {}
    for o in (*problem.options, *problem.pd_options):
        if weight_bytes and o.model in weight_bytes:
            per_gpu = weight_bytes[o.model] / (o.tp * o.pp)
        else:
            per_gpu = o.memory_bytes_per_gpu
        out[o.key if o.role == "colocated" else o.pd_key] = per_gpu / load_bandwidth_bytes_per_s
    return out


def shared_load_s(pool: str, models: Iterable[str], load_time_s: Mapping) -> float:
    """Seconds a new shared GPU of ``models`` in ``pool`` loads before it serves: the sum of its models' tp-1 load
    times in ``load_time_s`` ({option key: s}, :func:`load_times`): one GPU's load bandwidth carries every model's
    weights, and the exported pod starts its servers one after the other. (It was the longest one.)"""
    return sum(load_time_s.get((m, pool, 1, 1), 0.0) for m in models)


# ---- live placement ---------------------------------------------------------------------------------------------
@dataclass
class LiveReplica:
    """One dedicated replica (colocated, prefill or decode): the nodes it occupies (one, or ``pp`` whole nodes),
    when it serves (unix s) and, while it is replaced, when it stops (None: it keeps running)."""

    nodes: tuple[int, ...]
    ready_at_s: float
    stop_at_s: float | None = None

    def serving(self, at_s: float) -> bool:
        """Ready and not yet stopped at ``at_s``."""
        return self.ready_at_s <= at_s and (self.stop_at_s is None or self.stop_at_s > at_s)


@dataclass
class LiveShared:
    """One GPU shared by ``models`` all day, on node ``node`` of ``pool``; ``ready_at_s`` / ``stop_at_s`` as for
    :class:`LiveReplica`."""

    pool: str
    models: tuple[str, ...]
    node: int
    ready_at_s: float = 0.0
    stop_at_s: float | None = None

    @property
    def signature(self) -> tuple[str, tuple[str, ...]]:
        return (self.pool, self.models)


class FreeGpus:
    """Free GPUs per node of every pool; tensor-parallel groups stay inside a node, pipeline stages take whole
    nodes. Nodes that are down hold no free GPUs; ``reserved`` GPUs (a committed pool beyond its commitment) are
    taken from the last nodes backwards. Placement is best fit (the node with the fewest free GPUs that holds the
    group, the lowest index among those), in O(log nodes) per call through one heap per (pool, free count)."""

    def __init__(self, problem: Problem, down: Mapping[str, Collection[int]] | None = None,
                 reserved: Mapping[str, int] | None = None) -> None:
        down = down or {}
        reserved = reserved or {}
        self.size = {p.id: p.gpus_per_node for p in problem.pools}
        self.free: dict[str, list[int]] = {}
        self.down: dict[str, set[int]] = {}
        self._heaps: dict[str, list[list[int]]] = {}
        for p in problem.pools:
            gone = set(down.get(p.id, ()))
            free = [0 if i in gone else p.gpus_per_node for i in range(p.nodes)]
            left = reserved.get(p.id, 0)
            for i in range(p.nodes - 1, -1, -1):
                if left <= 0:
                    break
                take = min(left, free[i])
                free[i] -= take
                left -= take
            self.free[p.id] = free
            self.down[p.id] = gone
            heaps: list[list[int]] = [[] for _ in range(p.gpus_per_node + 1)]
            for i, f in enumerate(free):
                if i not in gone:
                    heaps[f].append(i)
            for h in heaps:
                heapq.heapify(h)
            self._heaps[p.id] = heaps

    def _set(self, pool: str, i: int, f: int) -> None:
        self.free[pool][i] = f
        if i not in self.down[pool]:
            heapq.heappush(self._heaps[pool][f], i)

    def _first(self, pool: str, f: int) -> int | None:
        """The lowest-index up node of ``pool`` with exactly ``f`` free GPUs (stale heap entries dropped)."""
        h = self._heaps[pool][f]
        free, down = self.free[pool], self.down[pool]
        while h and (free[h[0]] != f or h[0] in down):
            heapq.heappop(h)
        return h[0] if h else None

    def place(self, pool: str, tp: int, pp: int) -> tuple[int, ...] | None:
        """Take a group of ``tp`` GPUs in one node (``pp`` whole nodes when pp > 1); returns the node indices, or
        None when no node holds it (nothing is taken then)."""
        size = self.size[pool]
        if pp > 1:
            whole: list[int] = []
            while len(whole) < pp:
                i = self._first(pool, size)
                if i is None:
                    for j in whole:
                        self._set(pool, j, size)
                    return None
                heapq.heappop(self._heaps[pool][size])
                self.free[pool][i] = 0
                whole.append(i)
            for j in whole:
                self._set(pool, j, 0)
            return tuple(sorted(whole))
        for f in range(tp, size + 1):
            i = self._first(pool, f)
            if i is not None:
                self._set(pool, i, f - tp)
                return (i,)
        return None

    def fits_at(self, pool: str, nodes: tuple[int, ...], tp: int, pp: int) -> bool:
        """Whether a group of ``tp`` GPUs (``pp`` whole nodes when pp > 1) fits on exactly these up nodes now."""
        free = self.free[pool]
        need = self.size[pool] if pp > 1 else tp
        return len(nodes) == pp and all(0 <= i < len(free) and i not in self.down[pool] and free[i] >= need
                                        for i in nodes)

    def occupy(self, pool: str, nodes: tuple[int, ...], tp: int, pp: int) -> None:
        """Take a group on these nodes (a placement kept from before). Raises InputError when it does not fit
        there (:meth:`fits_at`)."""
        if not self.fits_at(pool, nodes, tp, pp):
            raise InputError(f"a group of {tp * pp} GPUs on pool {pool} nodes {list(nodes)} does not fit their free "
                             "GPUs", field="nodes", value=list(nodes))
        need = self.size[pool] if pp > 1 else tp
        for i in nodes:
            self._set(pool, i, self.free[pool][i] - need)

    def can_place(self, pool: str, tp: int, pp: int) -> bool:
        """Whether :meth:`place` would succeed now."""
        if pp > 1:
            return sum(1 for i, f in enumerate(self.free[pool]) if f == self.size[pool]
                       and i not in self.down[pool]) >= pp
        return any(self._first(pool, f) is not None for f in range(tp, self.size[pool] + 1))

    def release(self, pool: str, nodes: tuple[int, ...], tp: int, pp: int) -> None:
        """Give back a group's GPUs (nothing for a node that is down: its GPUs are gone)."""
        for i in nodes:
            if i in self.down[pool]:
                continue
            self._set(pool, i, self.free[pool][i] + (self.size[pool] if pp > 1 else tp))

    def used(self, pool: str) -> int:
        """GPUs of ``pool`` taken by placed groups on nodes that are up (reserved GPUs not counted)."""
        return sum(self.size[pool] - f for i, f in enumerate(self.free[pool]) if i not in self.down[pool])


@dataclass(frozen=True)
class Action:
    """One change between two consecutive plans: ``count`` replicas of an option started or stopped, or a shared GPU
    (``tp`` = 0, ``models`` its residents) started or stopped.

    Attributes:
        action: 'start' or 'stop'.
        model, pool, tp, pp: the option (a shared GPU: its residents joined by '+', tp 0, pp 1).
        count: replicas (a shared GPU: 1).
        ready_at_s: when started replicas serve, unix s (None for a stop).
        models: a shared GPU's resident models (empty otherwise).
        role: 'colocated', 'prefill' or 'decode'.
        decode_site: a prefill replica's decode site ('' otherwise).
        reason: why: 'plan' (a round or re-solve chose it), 'lost' (its node went down: it stopped serving
            already) or 'replaced' (make-before-break: it stops now that its replacement serves).
    """

    action: str
    model: str
    pool: str
    tp: int
    pp: int
    count: int
    ready_at_s: float | None = None
    models: tuple[str, ...] = ()
    role: str = "colocated"
    decode_site: str = ""
    reason: str = "plan"

    def to_dict(self) -> dict:
        """JSON-ready: every field but the defaults of ``models``, ``role``, ``decode_site`` and ``ready_at_s``."""
        d: dict = {"action": self.action, "model": self.model, "pool": self.pool, "tp": self.tp, "pp": self.pp,
                   "count": self.count, "reason": self.reason}
        if self.ready_at_s is not None:
            d["ready_at_s"] = self.ready_at_s
        if self.models:
            d["models"] = list(self.models)
        if self.role != "colocated":
            d["role"] = self.role
            if self.decode_site:
                d["decode_site"] = self.decode_site
        return d


@dataclass(frozen=True)
class OnlineResult:
    """A plan the Replanner adopted (or the outcome of a round).

    Attributes:
        at_s: unix time of the round.
        window: window index of the day curve the plan is for.
        reason: 'initial', 'round', 'resolve', 'restored', 'inventory', 'settle', 'offline-plan' or 'rebuild'.
        problem: the one-window Problem (demand = the demand the plan commits to: forecast minus ``unmet``), on the
            fleet as it stands (:func:`online_problem`).
        plan: the one-window Plan: every replica that runs or loads, those being replaced included.
        report: ``validate(problem, plan)``.
        forecast_req_per_s: {model: forecast}.
        unmet_req_per_s: {model: forecast the plan cannot cover once its replacements are done (migration budget or
            inventory exhausted)}.
        loading: {option key or pd key: ready times (unix s) of replicas still loading}.
        retiring: {option key or pd key: stop times (unix s) of replicas that serve until their replacements do}.
        actions: changes against the previous plan.
        migrations: replica starts + stops (shared GPUs count one each), replicas lost to an outage not counted.
        lost: replicas (shared GPUs one each) that stopped because their nodes went down.
        cost_usd_per_hour: GPU + egress cost of the plan per hour, the day's commitments included.
        round_time_s: wall time of the computation, seconds.
        message: notes (why a re-solve was or was not adopted, a repair, ...).
    """

    at_s: float
    window: int
    reason: str
    problem: Problem
    plan: Plan
    report: ValidationReport
    forecast_req_per_s: dict[str, float]
    unmet_req_per_s: dict[str, float]
    loading: dict[OptionKey | PdKey, tuple[float, ...]]
    actions: tuple[Action, ...]
    migrations: int
    cost_usd_per_hour: float
    round_time_s: float
    message: str = ""
    retiring: dict[OptionKey | PdKey, tuple[float, ...]] = field(default_factory=dict)
    lost: int = 0
    extra: dict = field(default_factory=dict)

