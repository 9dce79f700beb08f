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

from fleetplan.placement.tenants import Allocation, SolveStatus, TenantProblem


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
    return Allocation("static", gpus, margin=True, status=SolveStatus.HEURISTIC)


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
    return Allocation("fair-share", gpus, margin=False, status=SolveStatus.HEURISTIC)
