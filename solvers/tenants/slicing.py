"""The second level of tenant allocation: the split inside one node into MIG slices or MPS shares, with OR-Tools CP-SAT.

Second level (:func:`split_mig`, :func:`split_mps`): given the tenants' needs on one node, choose MIG instances
(profiles and start slots from ``datasets/data/mig/profiles.csv``: an instance spans memory slots
[start, start + memory_slices) of 8, instances on a GPU do not overlap and use at most 7 compute slices) or MPS
active-thread percentages per GPU (with interference headroom where tenants share a GPU).
:func:`split_allocation` runs it for every node-window an allocation shares (``fleetplan allocate --split``):
by default ('auto') MIG where the GPU type has MIG profiles in the table, MPS on the others.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from fleetplan.datasets.sharing import load_mig_profiles
from fleetplan.errors import InputError, SolverError, UnknownNameError
from fleetplan.placement.status import Status
from fleetplan.placement.tenants import Allocation, TenantProblem
from fleetplan.solvers.cpsat import CPSAT_SEED
from fleetplan.solvers.tenants.allocate import wall_clock
from fleetplan.solvers.tenants.cpsat import cpsat_status, cut_by_clock

if TYPE_CHECKING:  # OR-Tools is imported when a model is built (start-up speed); its types are for mypy only
    from ortools.sat.python.cp_model import IntVar


@dataclass(frozen=True)
class NodeSplit:
    """The split of one node between tenants.

    Attributes:
        kind: 'mig' or 'mps'.
        parts: MIG: (gpu index, profile, start slot, tenant); MPS: (gpu index, tenant, active-thread percent).
        granted: {tenant: compute granted (MIG: slices of 7; MPS: percent of a GPU, summed over GPUs)}.
        unmet: {tenant: compute asked but not granted, same units}.
        shared_gpus: GPUs holding two or more tenants.
        status: solver status.
        needs: {tenant: compute asked, same units as granted (MPS: the GPUs asked × 100, rounded up)}.
        used_gpus: GPUs holding at least one instance or share.
        cut_by_clock: the wall-clock safety stop ended the search before its effort budget (the split may then
            differ on another machine).
        whole: {tenant: whole GPUs of the node it keeps out of the split}, for its replicas at tp ≥ 2: a replica
            spans tp whole GPUs, and a MIG instance or an MPS share is a part of one GPU
            (:func:`whole_gpus`). The split's parts cover the node's other GPUs.
    """

    kind: str
    parts: tuple[tuple, ...]
    granted: dict[str, int]
    unmet: dict[str, int]
    shared_gpus: int
    status: Status
    needs: Mapping[str, int] = field(default_factory=dict)
    used_gpus: int = 0
    cut_by_clock: bool = False
    whole: Mapping[str, int] = field(default_factory=dict)


#: Effort budget of one in-node split (one MIG or MPS case), CP-SAT deterministic time units. Measured on the
#: shipped tenants_default.yaml (CP-SAT allocation at the default effort): its 28 distinct MIG cases (40 shared
#: node-windows) are each proven optimal within 0.07 units, 0.9 CPU s in all.
SPLIT_UNITS_PER_CASE = 2.0


def _solver(cp_model, time_limit_s: float, threads: int, deterministic_time: float | None):
    """A CpSolver with the effort budget ``deterministic_time`` (None: none), CPSAT_SEED, ``threads`` workers
    searching interleaved, and ``time_limit_s`` wall-clock seconds as a safety stop."""
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, float(time_limit_s))
    solver.parameters.num_workers = max(1, threads)
    solver.parameters.random_seed = CPSAT_SEED
    if deterministic_time is not None:
        solver.parameters.max_deterministic_time = float(deterministic_time)
        solver.parameters.interleave_search = solver.parameters.num_workers > 1
    return solver


def _renumber(parts: Sequence[tuple]) -> tuple[tuple, ...]:
    """The GPUs of a node are interchangeable: renumber the used GPUs 0, 1, ... in their order (parts start with
    the GPU index)."""
    order = {g: i for i, g in enumerate(sorted({p[0] for p in parts}))}
    return tuple(sorted((order[p[0]], *p[1:]) for p in parts))


class _MigModel:
    """The CP-SAT model of :func:`split_mig`: b[g, profile, start, tenant] (an instance of that profile at that start
    slot of GPU g for the tenant), on[g, t] (t has an instance on g), unmet[t] (compute slices short) and
    shared[g] (g holds two or more tenants)."""

    def __init__(self, cp_model, profiles: Sequence, gpus: int, needs: Mapping[str, int],
                 memory_gb: Mapping[str, float] | None) -> None:
        self.tenants = tenants = sorted(needs)
        self.prof = {p.name: p for p in profiles}
        md = self.md = cp_model.CpModel()
        self.b: dict[tuple[int, str, int, str], IntVar] = {}
        for g in range(gpus):
            for pr in profiles:
                for st in pr.placements:
                    for t in tenants:
                        self.b[g, pr.name, st, t] = md.new_bool_var(f"b_{g}_{pr.name}_{st}_{t}")
        self.on: dict[tuple[int, str], IntVar] = {}
        for g in range(gpus):
            self._gpu(g, profiles)
        self.unmet: dict[str, IntVar] = {}
        for t in tenants:
            self._need(t, needs[t], (memory_gb or {}).get(t))
        self.shared = []
        for g in range(gpus):
            sh = md.new_bool_var(f"shared_{g}")
            md.add(sum(self.on[g, t] for t in tenants) <= 1 + len(tenants) * sh)
            self.shared.append(sh)
        big = 10_000
        md.minimize(big * big * sum(self.unmet.values()) + big * sum(self.shared) + sum(self.b.values()))

    def _gpu(self, g: int, profiles: Sequence) -> None:
        """Instances on GPU g do not overlap in memory slots, use at most 7 compute slices and at most each
        profile's number of instances; on[g, t] for every tenant."""
        md, prof = self.md, self.prof
        mine = {k: v for k, v in self.b.items() if k[0] == g}
        for slot in range(8):
            md.add(sum(v for k, v in mine.items() if k[2] <= slot < k[2] + prof[k[1]].memory_slices) <= 1)
        md.add(sum(prof[k[1]].compute_slices * v for k, v in mine.items()) <= 7)
        for pr in profiles:
            md.add(sum(v for k, v in mine.items() if k[1] == pr.name) <= pr.max_instances)
        for t in self.tenants:
            self.on[g, t] = md.new_bool_var(f"on_{g}_{t}")
            md.add_max_equality(self.on[g, t], [v for k, v in mine.items() if k[3] == t])

    def _need(self, t: str, need: int, memory_gb: float | None) -> None:
        """Tenant t's compute need is met, or the shortfall unmet[t] is counted; its instances hold at least
        ``memory_gb`` GB when given."""
        md, prof = self.md, self.prof
        got = sum(prof[k[1]].compute_slices * v for k, v in self.b.items() if k[3] == t)
        self.unmet[t] = md.new_int_var(0, need, f"unmet_{t}")
        md.add(got + self.unmet[t] >= need)
        if memory_gb:
            md.add(sum(int(prof[k[1]].memory_gb) * v for k, v in self.b.items() if k[3] == t) >= math.ceil(memory_gb))

    def split(self, solver, status: Status, needs: Mapping[str, int]) -> NodeSplit:
        """The NodeSplit of a solved model."""
        tenants, prof = self.tenants, self.prof
        parts = _renumber([k for k, v in self.b.items() if solver.value(v)])
        granted = {t: sum(prof[p].compute_slices for (_, p, _, tt) in parts if tt == t) for t in tenants}
        return NodeSplit("mig", parts, granted, {t: int(solver.value(self.unmet[t])) for t in tenants},
                         int(sum(solver.value(s) for s in self.shared)), status,
                         needs={t: int(needs[t]) for t in tenants}, used_gpus=len({p[0] for p in parts}))


def split_mig(gpu: str, gpus: int, needs: Mapping[str, int], *, memory_gb: Mapping[str, float] | None = None,
              time_limit_s: float = 60.0, threads: int = 1,
              deterministic_time: float | None = SPLIT_UNITS_PER_CASE) -> NodeSplit:
    """Cut ``gpus`` GPUs of type ``gpu`` into MIG instances for tenants needing ``needs[t]`` compute slices
    (of 7 per GPU) and at least ``memory_gb[t]`` GB in total.

    Objective (lexicographic by weights): least unmet compute, then fewest GPUs shared by two or more tenants,
    then fewest instances. Effort: ``deterministic_time`` CP-SAT units (the same split on any machine);
    ``time_limit_s``: a wall-clock safety stop (``cut_by_clock`` says when it fired). Raises InputError for a
    negative need, UnknownNameError for a GPU without MIG, SolverError when no split is found.
    """
    from ortools.sat.python import cp_model

    profiles = load_mig_profiles(gpu)
    for t, n in needs.items():
        if not isinstance(n, int) or n < 0:
            raise InputError(f"need of {t} must be a whole number of compute slices ≥ 0, got {n!r}", field="needs")
    mig = _MigModel(cp_model, profiles, gpus, needs, memory_gb)
    solver = _solver(cp_model, time_limit_s, threads, deterministic_time)
    code = solver.solve(mig.md)
    cut = cut_by_clock(cp_model, code, solver, max(0.01, float(time_limit_s)), deterministic_time)
    status = cpsat_status(cp_model, code)
    if status is Status.INFEASIBLE:
        raise SolverError(f"MIG split of {gpus}× {gpu}: the tenants' memory needs exceed what MIG instances on "
                          f"{gpus} GPUs hold; use --split mps or --split none")
    if status is not Status.OPTIMAL and status is not Status.FEASIBLE:
        why = (f"the wall-clock safety stop ({time_limit_s:.1f} s left of --time-limit) came first" if cut
               else f"its effort budget ({deterministic_time:g} CP-SAT units) ran out")
        raise SolverError(f"MIG split of {gpus}× {gpu}: no split found: {why}; raise --time-limit or --effort")
    return replace(mig.split(solver, status, needs), cut_by_clock=cut)


def split_mps(gpus: int, needs: Mapping[str, float], coefficient: Mapping[tuple[str, str], float], *,
              step_pct: int = 5, time_limit_s: float = 60.0, threads: int = 1,
              deterministic_time: float | None = SPLIT_UNITS_PER_CASE) -> NodeSplit:
    """Give tenants MPS active-thread percentages on ``gpus`` GPUs for needs ``needs[t]`` in GPUs (e.g. 1.3).

    On a GPU holding two or more tenants, the percentages sum to at most 100 − 100·c, c the largest pair
    coefficient there (``coefficient[(a, b)]``, either order): the interference headroom. Shares move in steps of
    ``step_pct``. Objective: least unmet percent, then fewest shared GPUs. Effort and safety stop as in
    :func:`split_mig`. Raises InputError for bad needs, SolverError when no split is found.
    """
    from ortools.sat.python import cp_model

    for t, n in needs.items():
        if not isinstance(n, int | float) or n < 0 or n > gpus:
            raise InputError(f"need of {t} must be 0..{gpus} GPUs, got {n!r}", field="needs")
    tenants = sorted(needs)

    def coef(a: str, b: str) -> int:
        c = coefficient.get((a, b), coefficient.get((b, a)))
        if c is None:
            raise InputError(f"no interference coefficient for ({a}, {b})", field="coefficient")
        return math.ceil(100 * c - 1e-9)

    md = cp_model.CpModel()
    steps = 100 // step_pct
    share = {(g, t): md.new_int_var(0, steps, f"share_{g}_{t}") for g in range(gpus) for t in tenants}
    on = {(g, t): md.new_bool_var(f"on_{g}_{t}") for g in range(gpus) for t in tenants}
    shared = []
    for g in range(gpus):
        head = md.new_int_var(0, 100, f"head_{g}")
        for t in tenants:
            md.add(share[g, t] <= steps * on[g, t])
        for i, a in enumerate(tenants):
            for bb in tenants[i + 1:]:
                # A GPU shared by a and b keeps 100·c(a, b) percent free.
                z = md.new_bool_var(f"z_{g}_{a}_{bb}")
                md.add_bool_or([on[g, a].Not(), on[g, bb].Not(), z])
                md.add(head >= coef(a, bb) * z)
        md.add(step_pct * sum(share[g, t] for t in tenants) + head <= 100)
        sh = md.new_bool_var(f"shared_{g}")
        md.add(sum(on[g, t] for t in tenants) <= 1 + len(tenants) * sh)
        shared.append(sh)
    unmet = {}
    for t in tenants:
        want = math.ceil(100 * needs[t] - 1e-9)
        unmet[t] = md.new_int_var(0, want, f"unmet_{t}")
        md.add(step_pct * sum(share[g, t] for g in range(gpus)) + unmet[t] >= want)
    md.minimize(1000 * sum(unmet.values()) + sum(shared))
    solver = _solver(cp_model, time_limit_s, threads, deterministic_time)
    code = solver.solve(md)
    cut = cut_by_clock(cp_model, code, solver, max(0.01, float(time_limit_s)), deterministic_time)
    status = cpsat_status(cp_model, code)
    if status is not Status.OPTIMAL and status is not Status.FEASIBLE:
        # Every share may stay unmet, so the model always has an answer: only a limit can stop it empty.
        why = (f"the wall-clock safety stop ({time_limit_s:.1f} s left of --time-limit) came first" if cut
               else f"its effort budget ({deterministic_time:g} CP-SAT units) ran out")
        raise SolverError(f"MPS split of {gpus} GPUs: no split found: {why}; raise --time-limit or --effort")
    parts = _renumber([(g, t, step_pct * solver.value(share[g, t])) for g in range(gpus) for t in tenants
                       if solver.value(share[g, t])])
    granted = {t: sum(p for (_, tt, p) in parts if tt == t) for t in tenants}
    return NodeSplit("mps", parts, granted, {t: int(solver.value(unmet[t])) for t in tenants},
                     int(sum(solver.value(s) for s in shared)), status,
                     needs={t: math.ceil(100 * needs[t] - 1e-9) for t in tenants}, used_gpus=len({p[0] for p in parts}),
                     cut_by_clock=cut)


#: Choices of the in-node split (``fleetplan allocate --split``); 'auto' is the default.
SPLIT_KINDS = ("auto", "mig", "mps", "none")


def mig_capable(gpu: str) -> bool:
    """True if ``datasets/data/mig/profiles.csv`` has MIG profiles for GPU type ``gpu``."""
    try:
        load_mig_profiles(gpu)
    except UnknownNameError:
        return False
    return True


def split_kind(kind: str, gpu: str) -> str:
    """The split used on nodes of type ``gpu`` for the choice ``kind`` (one of :data:`SPLIT_KINDS`).

    'auto' is MIG where the GPU type has MIG profiles in the shipped table (A100, H100, H200: hardware-isolated
    slices, the isolation the tenants ask for), MPS elsewhere (e.g. L4, A10G: no MIG). 'mig' on a GPU type without
    profiles raises InputError naming it and the fix.
    """
    if kind not in SPLIT_KINDS:
        raise InputError(f"split must be one of {', '.join(SPLIT_KINDS)}, got {kind!r}", field="split", value=kind)
    if kind == "auto":
        return "mig" if mig_capable(gpu) else "mps"
    if kind == "mig" and not mig_capable(gpu):
        raise InputError(f"GPU type {gpu} has no MIG profiles in the shipped table (datasets/data/mig/profiles.csv);"
                         " use split 'auto' (MPS there) or 'mps'", field="split", value=kind)
    return kind


def whole_gpus(problem: TenantProblem, allocation: Allocation, w: int, node: str, need: Mapping[str, float]
               ) -> dict[str, int]:
    """{tenant: whole GPUs it keeps out of ``node``'s split in window ``w``} for tenants whose demand was derived from
    models (``Tenant.models``) with some at tp ≥ 2, or given in GPUs for a replica at tp ≥ 2 (``Tenant.replica_tp``:
    all its need); ``need`` is :func:`node_needs`' {tenant: GPUs needed there}.

    A tenant's need on the node is cut in the proportion of its tp ≥ 2 models' GPUs (whole replicas,
    ``ModelDemand.gpus``) to all its models' GPUs in the window; that part is rounded up to whole replicas of its
    smallest tp ≥ 2 and capped at the largest multiple of that tp the tenant holds on the node. Example (the shipped
    tenants file, copilot in window 14): a tp-2 Qwen2.5-7B needing 4 GPUs and a tp-1 Llama-3.1-8B needing 0.59,
    holding 5 GPUs on one node: 4.59 × 4 / 4.59 = 4 whole GPUs (two tp-2 replicas); 0.59 GPUs left to slice.
    Before this, the split sliced the whole need and slices serve tp-1 models only, so the tp-2 model had no replica
    on a split node (copilot met its SLO for 89.8% of requests in ``allocate --verify``, 99.9% with ``--split none``).
    """
    held = allocation.by_node(w).get(node, {})
    out: dict[str, int] = {}
    for t, v in sorted(need.items()):
        tenant = problem.tenant(t)
        multi = [m for m in tenant.models if m.tp >= 2]
        if multi:
            tp = min(m.tp for m in multi)
            big = sum(m.gpus[w] for m in multi)
            total = sum(m.gpus[w] for m in tenant.models)
        elif not tenant.models and tenant.replica_tp >= 2:  # demand in GPUs, served at tp >= 2: all of it whole
            tp, big, total = tenant.replica_tp, 1.0, 1.0
        else:
            continue
        if v <= 0 or big <= 0 or total <= 0:
            continue
        want = math.ceil(v * big / total / tp - 1e-9) * tp
        keep = min(want, held.get(t, 0) // tp * tp)
        if keep > 0:
            out[t] = keep
    return out


def node_needs(problem: TenantProblem, allocation: Allocation, w: int, node: str) -> dict[str, float]:
    """GPUs each tenant needs on ``node`` in window ``w``: its GPUs there × min(1, demand / GPUs it holds in the
    window), i.e. its demand spread over its GPUs in proportion (a tenant holding 3 GPUs for a demand of 2.5 needs
    2.5 × 3/3 on one node holding all 3, or 0.833 × k on a node holding k of them)."""
    held: dict[str, int] = {}
    for (t, ww, _n), g in allocation.gpus.items():
        if ww == w:
            held[t] = held.get(t, 0) + g
    out: dict[str, float] = {}
    for t, g in allocation.by_node(w).get(node, {}).items():
        d = float(problem.tenant(t).demand_gpus[w])
        out[t] = g * min(1.0, d / held[t]) if held[t] else 0.0
    return out


@dataclass(frozen=True)
class _MigCase:
    """One distinct MIG split: GPU type, GPUs on the node, (tenant, compute slices needed) sorted by tenant."""

    gpu: str
    gpus: int
    slices: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class _MpsCase:
    """One distinct MPS split: GPU type, GPUs on the node, (tenant, GPUs needed), ((tenant, tenant), coefficient)."""

    gpu: str
    gpus: int
    needs: tuple[tuple[str, float], ...]
    coefficients: tuple[tuple[tuple[str, str], float], ...]


def split_allocation(problem: TenantProblem, allocation: Allocation, *, kind: str = "auto", time_limit_s: float = 60.0,
                     threads: int = 1, effort: float = 1.0) -> dict[tuple[int, str], NodeSplit]:
    """The second level for every shared node-window of ``allocation`` (an :class:`~fleetplan.placement.tenants.
    Allocation`): {(window, node): NodeSplit} for nodes held by two or more tenants in that window (a node held
    by one tenant gives it whole GPUs: nothing to split). Empty for ``kind`` 'none'.

    Needs come from :func:`node_needs` (GPUs, fractional); a tenant's tp ≥ 2 replicas keep whole GPUs out of the split
    (:func:`whole_gpus`, ``NodeSplit.whole``), and the rest of its need is split on the node's other GPUs. MIG
    (:func:`split_mig`): ceil(7 × need) compute slices of 7 per GPU. MPS (:func:`split_mps`): the need in GPUs, shares
    in 5% steps, with the pair's interference coefficient kept free on a GPU two tenants share. Identical cases are
    solved once, each within the effort budget ``effort`` × SPLIT_UNITS_PER_CASE CP-SAT units (the same splits on any
    machine and load); ``time_limit_s`` is a wall-clock safety stop for them all (a split it cuts has ``cut_by_clock``;
    a case it leaves without a split raises SolverError naming it). Raises InputError for a bad ``kind``, 'mig' on a GPU
    type without MIG profiles, or an ``effort`` that is not > 0.
    """
    if not (isinstance(effort, int | float) and math.isfinite(effort) and effort > 0):
        raise InputError(f"effort must be a number > 0 (× the default budgets), got {effort!r}", field="effort",
                         value=effort)
    if kind == "none":
        return {}
    nodes = {n.name: n for n in problem.nodes}
    kinds = {g: split_kind(kind, g) for g in {n.gpu for n in problem.nodes}}
    todo: dict[tuple[int, str], _MigCase | _MpsCase] = {}
    whole: dict[tuple[int, str], dict[str, int]] = {}
    for w in range(problem.n_windows):
        for n, held in allocation.by_node(w).items():
            if len(held) < 2:
                continue
            node = nodes[n]
            need = node_needs(problem, allocation, w, n)
            whole[(w, n)] = keep = whole_gpus(problem, allocation, w, n, need)
            rest = {t: max(0.0, v - keep.get(t, 0)) for t, v in need.items()}
            sliced = node.gpus - sum(keep.values())
            k = kinds[node.gpu]
            if k == "mig":
                todo[(w, n)] = _MigCase(node.gpu, sliced,
                                        tuple(sorted((t, math.ceil(7 * v - 1e-9)) for t, v in rest.items())))
            else:
                ts = sorted(rest)
                coef = tuple(((a, b), problem.pair_coefficient(problem.tenant(a), problem.tenant(b)))
                             for i, a in enumerate(ts) for b in ts[i + 1:])
                todo[(w, n)] = _MpsCase(node.gpu, sliced, tuple(sorted((t, round(v, 6)) for t, v in rest.items())),
                                        coef)
    distinct = sorted(set(todo.values()), key=repr)
    units = effort * SPLIT_UNITS_PER_CASE
    end = wall_clock() + float(time_limit_s)
    solved: dict[_MigCase | _MpsCase, NodeSplit] = {}
    for i, key in enumerate(distinct):
        left = end - wall_clock()
        if left <= 0:
            raise SolverError(f"the wall-clock safety stop ({time_limit_s:.1f} s left of --time-limit) came before "
                              f"{len(distinct) - i} of {len(distinct)} distinct in-node splits; raise --time-limit")
        if isinstance(key, _MigCase):
            solved[key] = split_mig(key.gpu, key.gpus, dict(key.slices), time_limit_s=left, threads=threads,
                                    deterministic_time=units)
        else:
            solved[key] = split_mps(key.gpus, dict(key.needs), dict(key.coefficients), time_limit_s=left,
                                    threads=threads, deterministic_time=units)
    return {wn: replace(solved[key], whole=whole[wn]) for wn, key in sorted(todo.items())}
