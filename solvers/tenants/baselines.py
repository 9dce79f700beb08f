"""Two rule-based policies to compare the optimizer against (no solver; both are :class:`Allocation` makers).

- :func:`static_partition`: each tenant owns whole nodes covering its quota (ceil(quota / GPUs per node) nodes of a
  type it runs on, highest weight first), all day; it uses only its own nodes, up to min(burst, ceil(demand)).
  Nodes nobody owns stay idle. Never shares a node, so it needs no interference margin.
- :func:`fair_share`: quota with borrowing, the Kubernetes queue style (e.g. Kueue ClusterQueue nominal quota with
  borrowing, https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/): in every window each tenant first gets its
  guarantee min(quota, demand); the idle GPUs are then lent to tenants that want more, in proportion to weight
  (water-filling, capped at min(burst, ceil(demand))); lent GPUs are reclaimed the next window the owner needs
  them (each window is recomputed). GPUs are placed first-fit over the nodes in pool order (no isolation objective
  and no interference headroom), so shared nodes deliver less than they hold (see ``tenants.evaluate``).
"""

from __future__ import annotations

import math

from fleetplan.placement.status import Status
from fleetplan.placement.tenants import Allocation, TenantProblem


def static_partition(problem: TenantProblem) -> Allocation:
    """Dedicated nodes per tenant equal to its quota (rounded up to whole nodes), fixed over the day.

    A tenant whose quota does not fit on the nodes left gets what is left (its shortfall shows in the
    objectives). Returns an Allocation with ``margin=True`` (no node is shared).
    """
    owner: dict[str, str] = {}
    free = list(problem.nodes)
    for t in sorted(problem.tenants, key=lambda t: (-t.weight, t.name)):
        got = 0
        for n in [n for n in free if t.runs_on(n.gpu)]:
            if got >= t.quota_gpus:
                break
            owner[n.name] = t.name
            free.remove(n)
            got += n.gpus
    gpus: dict[tuple[str, int, str], int] = {}
    for t in problem.tenants:
        mine = [n for n in problem.nodes if owner.get(n.name) == t.name]
        for w in range(problem.n_windows):
            want = t.wanted(w)
            for n in mine:
                g = min(want, n.gpus)
                if g <= 0:
                    break
                gpus[(t.name, w, n.name)] = g
                want -= g
    return Allocation("static", gpus, margin=True, status=Status.HEURISTIC)


def _water_fill(extra: dict[str, int], weights: dict[str, float], idle: int) -> dict[str, int]:
    """Split ``idle`` whole GPUs among tenants wanting ``extra`` more, proportionally to weight, capped by want."""
    lent = {t: 0 for t in extra}
    active = {t for t, e in extra.items() if e > 0}
    while idle > 0 and active:
        wsum = sum(weights[t] for t in active)
        shares = {t: idle * weights[t] / wsum for t in active}
        granted = 0
        for t in sorted(active, key=lambda t: (-shares[t], t)):
            g = min(math.floor(shares[t]), extra[t] - lent[t])
            lent[t] += g
            granted += g
        if granted == 0:  # fractional shares only: hand out single GPUs by weight
            for t in sorted(active, key=lambda t: (-weights[t], t)):
                if idle - granted <= 0:
                    break
                lent[t] += 1
                granted += 1
        idle -= granted
        active = {t for t in active if lent[t] < extra[t]}
    return lent


def fair_share(problem: TenantProblem) -> Allocation:
    """Quota with borrowing: guarantee first, idle GPUs lent by weight, reclaimed each window; first-fit placement.

    Tenants restricted to GPU types borrow only where a node of their type has room. Returns an Allocation with
    ``margin=False`` (it reserves no interference headroom).
    """
    weights = {t.name: t.weight for t in problem.tenants}
    gpus: dict[tuple[str, int, str], int] = {}
    order = sorted(problem.tenants, key=lambda t: (-t.weight, t.name))
    for w in range(problem.n_windows):
        free = {n.name: n.gpus for n in problem.nodes}

        def place(t, count: int, w: int = w, free: dict = free) -> int:
            for n in problem.nodes:
                if count <= 0:
                    break
                if t.runs_on(n.gpu) and free[n.name] > 0:
                    g = min(count, free[n.name])
                    free[n.name] -= g
                    key = (t.name, w, n.name)
                    gpus[key] = gpus.get(key, 0) + g
                    count -= g
            return count

        placed = {}
        for t in order:  # 1. guarantees
            need = math.ceil(t.guaranteed(w) - 1e-9)
            placed[t.name] = need - place(t, need)
        # 2. lend idle GPUs by weight (repeat while some tenant could not use its share on its GPU types)
        for _ in range(len(problem.tenants) + 1):
            idle = sum(free.values())
            extra = {t.name: max(0, t.wanted(w) - placed[t.name]) for t in problem.tenants
                     if any(t.runs_on(n.gpu) and free[n.name] for n in problem.nodes)}
            if idle <= 0 or not any(extra.values()):
                break
            lent = _water_fill(extra, weights, idle)
            moved = 0
            for t in order:
                if lent.get(t.name):
                    got = lent[t.name] - place(t, lent[t.name])
                    placed[t.name] += got
                    moved += got
            if moved == 0:
                break
    return Allocation("fair-share", gpus, margin=False, status=Status.HEURISTIC)



class _Packer:
    """Margin-aware packing state of one window (see :func:`packed_greedy`)."""

    def __init__(self, problem: TenantProblem, w: int, gpus: dict) -> None:
        self.problem, self.w, self.gpus = problem, w, gpus
        self.load = {n.name: 0 for n in problem.nodes}
        self.holders: dict[str, list] = {n.name: [] for n in problem.nodes}
        self.held = {t.name: 0 for t in problem.tenants}

    def room(self, n, t) -> int:
        hs = self.holders[n.name]
        ts = hs if t in hs else hs + [t]
        cap = n.gpus if len(ts) < 2 else math.floor(n.gpus * (1 - self.problem.node_coefficient(ts)) + 1e-9)
        return max(0, cap - self.load[n.name])

    def take(self, n, t, g: int) -> None:
        self.load[n.name] += g
        if t not in self.holders[n.name]:
            self.holders[n.name].append(t)
        self.held[t.name] += g
        key = (t.name, self.w, n.name)
        self.gpus[key] = self.gpus.get(key, 0) + g

    def place(self, t, count: int) -> None:
        mine = [n for n in self.problem.nodes if t.runs_on(n.gpu)]
        for n in mine:  # whole empty nodes first
            if count >= n.gpus and self.load[n.name] == 0:
                self.take(n, t, n.gpus)
                count -= n.gpus
        own = [n for n in mine if t in self.holders[n.name]]
        empty = [n for n in mine if self.load[n.name] == 0]
        for group in (own, empty, mine):  # top up own nodes, then empty ones, then share
            for n in sorted(group, key=lambda n: -self.load[n.name]):
                if count <= 0:
                    return
                g = min(count, self.room(n, t))
                if g > 0:
                    self.take(n, t, g)
                    count -= g


def packed_greedy(problem: TenantProblem) -> Allocation:
    """Margin-aware greedy packing (a quick feasible answer, used as the CP-SAT hint): per window, guarantees
    first and then burst demand, tenants by weight (highest first); each tenant takes whole empty nodes first, then
    tops up nodes it already holds, then empty nodes, and only then shares a node, never past the node's
    interference-adjusted capacity floor(G (1 − s)). Returns an Allocation with ``margin=True``.
    """
    gpus: dict[tuple[str, int, str], int] = {}
    order = sorted(problem.tenants, key=lambda t: (-t.weight, t.name))
    for w in range(problem.n_windows):
        pk = _Packer(problem, w, gpus)
        for t in order:
            pk.place(t, math.ceil(t.guaranteed(w) - 1e-9))
        for t in order:
            pk.place(t, t.wanted(w) - pk.held[t.name])
    return Allocation("packed-greedy", gpus, margin=True, status=Status.HEURISTIC)
