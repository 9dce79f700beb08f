"""The live placement of the online re-planner: one-window problems (:func:`window_problem`), replica load times
(:func:`load_times`), GPUs free per node, and the records of a round (:class:`Action`, :class:`OnlineResult`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from fleetplan.errors import InputError
from fleetplan.placement.plan import Plan
from fleetplan.placement.problem import OptionKey, Problem
from fleetplan.placement.validate import ValidationReport


# ---- one-window problems ----------------------------------------------------------------------------------------
def window_problem(problem: Problem, demand_req_per_s: Mapping[str, float], *, name: str | None = None) -> Problem:
    """A one-window copy of ``problem`` whose demand is ``demand_req_per_s`` ({model: req/s}; 0 for models not
    given): the online plan is checked against it by ``validate``. Pools, options, margin, floors and ceilings
    are the same; the window keeps the original length."""
    models = tuple(replace(m, demand_req_per_s=(float(demand_req_per_s.get(m.name, 0.0)),)) for m in problem.models)
    return replace(problem, n_windows=1, models=models, name=name or f"{problem.name} (online window)")


def load_times(problem: Problem, load_bandwidth_bytes_per_s: float,
               weight_bytes: Mapping[str, float] | None = None) -> dict[OptionKey, float]:
    """Seconds a new replica of each option needs before it serves: its weights per GPU / load bandwidth per GPU
    (every GPU of the replica loads its shard in parallel). ``weight_bytes`` {model: bytes}; a model missing
    there is charged its whole per-GPU memory footprint (weights + KV reservation, an upper bound).
    Raises InputError for a bandwidth <= 0."""
    if not load_bandwidth_bytes_per_s > 0:
        raise InputError("load bandwidth must be > 0 bytes/s", field="load_bandwidth_bytes_per_s",
                         value=load_bandwidth_bytes_per_s)
    out = {}
    for o in problem.options:
        if weight_bytes and o.model in weight_bytes:
            per_gpu = weight_bytes[o.model] / (o.tp * o.pp)
        else:
            per_gpu = o.memory_bytes_per_gpu
        out[o.key] = per_gpu / load_bandwidth_bytes_per_s
    return out


# ---- live placement ---------------------------------------------------------------------------------------------
@dataclass
class LiveReplica:
    nodes: tuple[int, ...]
    ready_at_s: float


@dataclass
class LiveShared:
    pool: str
    models: tuple[str, ...]
    node: int


class FreeGpus:
    """Free GPUs per node of every pool; tensor-parallel groups stay inside a node, pipeline stages take whole
    nodes."""

    def __init__(self, problem: Problem) -> None:
        self.size = {p.id: p.gpus_per_node for p in problem.pools}
        self.free = {p.id: [p.gpus_per_node] * p.nodes for p in problem.pools}

    def place(self, pool: str, tp: int, pp: int) -> tuple[int, ...] | None:
        """Best fit: the node(s) with the fewest free GPUs that still hold the group; None when none does."""
        free = self.free[pool]
        if pp > 1:
            whole = [i for i, f in enumerate(free) if f == self.size[pool]][:pp]
            if len(whole) < pp:
                return None
            for i in whole:
                free[i] = 0
            return tuple(whole)
        best = -1
        for i, f in enumerate(free):
            if f >= tp and (best < 0 or f < free[best]):
                best = i
                if f == tp:
                    break
        if best < 0:
            return None
        free[best] -= tp
        return (best,)

    def can_place(self, pool: str, tp: int, pp: int) -> bool:
        free = self.free[pool]
        if pp > 1:
            return sum(1 for f in free if f == self.size[pool]) >= pp
        return any(f >= tp for f in free)

    def release(self, pool: str, nodes: tuple[int, ...], tp: int, pp: int) -> None:
        for i in nodes:
            self.free[pool][i] += self.size[pool] if pp > 1 else tp


@dataclass(frozen=True)
class Action:
    """One change between two consecutive plans: ``count`` replicas of an option started or stopped, or a shared GPU
    (``tp`` = 0, ``models`` its residents) started or stopped. ``ready_at_s``: when started replicas serve."""

    action: str  # 'start' | 'stop'
    model: str
    pool: str
    tp: int
    pp: int
    count: int
    ready_at_s: float | None = None
    models: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        d = {"action": self.action, "model": self.model, "pool": self.pool, "tp": self.tp, "pp": self.pp,
             "count": self.count}
        if self.ready_at_s is not None:
            d["ready_at_s"] = self.ready_at_s
        if self.models:
            d["shared_models"] = list(self.models)
        return d


@dataclass(frozen=True)
class OnlineResult:
    """A plan the Replanner adopted (or the outcome of a round).

    Attributes:
        at_s: unix time of the round.
        window: window index of the day curve the plan is for.
        reason: 'initial', 'round', 'resolve' or 'restored'.
        problem: the one-window Problem (demand = the demand the plan commits to: forecast minus ``unmet``).
        plan: the one-window Plan (target state: loading replicas included).
        report: ``validate(problem, plan)``.
        forecast_req_per_s: {model: forecast}.
        unmet_req_per_s: {model: forecast the plan cannot cover (migration budget or inventory exhausted)}.
        loading: {option key: ready times (unix s) of replicas still loading}.
        actions: changes against the previous plan.
        migrations: replica starts + stops (shared GPUs count one each).
        cost_usd_per_hour: GPU + egress cost of the plan per hour.
        round_time_s: wall time of the computation, seconds.
        message: notes (why a re-solve was or was not adopted, ...).
    """

    at_s: float
    window: int
    reason: str
    problem: Problem
    plan: Plan
    report: ValidationReport
    forecast_req_per_s: dict[str, float]
    unmet_req_per_s: dict[str, float]
    loading: dict[OptionKey, tuple[float, ...]]
    actions: tuple[Action, ...]
    migrations: int
    cost_usd_per_hour: float
    round_time_s: float
    message: str = ""
    extra: dict = field(default_factory=dict)
