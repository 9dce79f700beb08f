"""Explain why a placement problem has no answer: which model, window or site cannot be served, and by how much."""

from __future__ import annotations

import math
from dataclasses import replace

from fleetplan.placement.problem import ModelSpec, Problem, ReplicaOption, ShareOption
from fleetplan.solvers.highs import HiGHS
from fleetplan.solvers.milp import build_milp


def precheck(problem: Problem) -> list[str]:
    """Reasons, in words, why ``problem`` is certainly infeasible (empty list when none is found).

    Checks, each a necessary condition: (a) a model with demand has no option that meets its SLO anywhere;
    (b) in some window a model's demand exceeds what the whole inventory could give it alone (or its replica
    ceiling allows); (c) in some window the GPUs all models need at their most GPU-efficient option exceed the
    inventory; (d) replica floors need more GPUs than the inventory has. The reasons of (a) and (b) come model by
    model, then (c), then (d).
    """
    out: list[str] = []
    for m in problem.models:
        opts = [o for o in problem.options if o.model == m.name]
        shares = [s for s in problem.share_options if s.model == m.name]
        if not opts and not shares:
            out += _no_option(problem, m)
        elif not m.class_shares:  # (b) and (c) read one capacity per option; a model with classes has one per class
            out += _beyond_inventory(problem, m, opts, shares)
    return out + _window_gpus(problem) + _floor_gpus(problem)


def _no_option(problem: Problem, m: ModelSpec) -> list[str]:
    """(a) of :func:`precheck` for model ``m``, which has no option: the reason when it has demand or a floor."""
    if max(m.demand_req_per_s) > 0 or m.min_replicas:
        why = problem.option_notes.get(m.name)
        detail = f": {'; '.join(why)}" if why else ""
        return [f"model {m.name} has no usable GPU type, tp and site (SLO: TTFT {m.ttft_p95_s:g} s, "
                f"TPOT {m.tpot_p95_s * 1e3:g} ms){detail}"]
    return []


def _beyond_inventory(problem: Problem, m: ModelSpec, opts: list[ReplicaOption],
                      shares: list[ShareOption]) -> list[str]:
    """(b) of :func:`precheck` for model ``m`` with options ``opts`` and ``shares``: the first window whose demand
    exceeds its replica ceiling's capacity (when the inventory would give more) or the whole inventory's (per
    pool, its best option with the pool to itself)."""
    mu = 1 - problem.margin
    best = 0.0
    for pid, pool in problem.pool_by_id.items():
        caps = [pool.gpus // o.gpus * o.capacity_req_per_s * mu for o in opts if o.pool == pid]
        caps += [pool.gpus * s.capacity_req_per_s * mu for s in shares if s.pool == pid]
        best += max(caps, default=0.0)
    ceiling = None
    if m.max_replicas is not None:
        per_rep = max([o.capacity_req_per_s * mu for o in opts] + [s.capacity_req_per_s * mu for s in shares])
        ceiling = m.max_replicas * per_rep
    for w, d in enumerate(m.demand_req_per_s):
        if ceiling is not None and d > ceiling * (1 + 1e-9) and ceiling < best:
            return [f"model {m.name} in window {w} needs {d:.2f} req/s but its max_replicas "
                    f"{m.max_replicas} serve at most {ceiling:.2f} req/s (short by {d - ceiling:.2f} req/s); "
                    f"raise max_replicas (the inventory alone would give it {best:.2f} req/s)"]
        if d > best * (1 + 1e-9):
            return [f"model {m.name} in window {w} needs {d:.2f} req/s but the whole inventory gives it at "
                    f"most {best:.2f} req/s (short by {d - best:.2f} req/s)"]
    return []


def _window_gpus(problem: Problem) -> list[str]:
    """(c) of :func:`precheck`: the first window in which the models without classes need more GPUs at their most
    GPU-efficient option than the inventory has."""
    mu = 1 - problem.margin
    total_gpus = sum(p.gpus for p in problem.pools)
    best_gpu_per_req: dict[str, float] = {}
    for m in problem.models:
        opts = [o for o in problem.options if o.model == m.name]
        shares = [s for s in problem.share_options if s.model == m.name]
        if (opts or shares) and not m.class_shares:
            best_gpu_per_req[m.name] = min([o.gpus / (o.capacity_req_per_s * mu) for o in opts]
                                           + [1 / (s.capacity_req_per_s * mu) for s in shares])
    for w in range(problem.n_windows):
        need = sum(m.demand_req_per_s[w] * best_gpu_per_req[m.name] for m in problem.models
                   if m.name in best_gpu_per_req)
        if need > total_gpus * (1 + 1e-9):
            return [f"window {w} needs at least {math.ceil(need - 1e-9)} GPUs at the most GPU-efficient options "
                    f"but the inventory has {total_gpus}"]
    return []


def _floor_gpus(problem: Problem) -> list[str]:
    """(d) of :func:`precheck`: the replica floors at each model's fewest GPUs per replica against the inventory."""
    total_gpus = sum(p.gpus for p in problem.pools)
    floors = 0
    for m in problem.models:
        if m.min_replicas:
            g = min([o.gpus for o in problem.options if o.model == m.name] + [1] * bool(
                [s for s in problem.share_options if s.model == m.name]), default=0)
            floors += m.min_replicas * g if g else 0
    if floors > total_gpus:
        return [f"replica floors need at least {floors} GPUs but the inventory has {total_gpus}"]
    return []


def explain_infeasible(problem: Problem, *, time_limit_s: float = 30) -> list[str]:
    """Reasons why ``problem`` is infeasible: the prechecks, else the shortfalls of the elastic LP relaxation
    (demand or replica floors that cannot be met even fractionally, per model and window, with the amount), and,
    when the problem has a spread (constraint (18)) and the relaxation without it has no shortfall, a line saying
    the spread is the cause."""
    reasons = precheck(problem)
    if reasons:
        return reasons
    out = _elastic_shortfalls(problem, time_limit_s)
    if not out:
        return ["no single model or window is short even with fractional replicas; the conflict is in the whole "
                "numbers: tensor-parallel groups, shared-GPU memory or replica ceilings together with the inventory"]
    spread = {m.name: m.spread_bounds for m in problem.models if m.spread_bounds}
    if spread:
        # the same relaxation without the spread (18): shortfalls that vanish are the spread's
        free = replace(problem, models=tuple(replace(m, max_share_per_site=None, max_share_per_pool=None)
                                             for m in problem.models))
        if not _elastic_shortfalls(free, time_limit_s):
            bounds = "; ".join(f"{m}: " + ", ".join(f"max_share_per_{lv} {v:g}" for lv, v in b.items())
                               for m, b in spread.items())
            out.append(f"without the spread ({bounds}) every model is served: the inventory left at the other "
                       "sites or pools cannot hold the share the spread asks for; raise the bound "
                       "(options.spread / models[].spread) or add GPUs where the model has least")
    return out


def _elastic_shortfalls(problem: Problem, time_limit_s: float) -> list[str]:
    """The shortfalls of the elastic LP relaxation, per model and window (empty: none)."""
    model = build_milp(problem, relax=True, elastic=True)
    model.lp.solve(HiGHS(msg=False, timeLimit=time_limit_s))
    out = []
    by_class: dict[tuple[str, int], list[str]] = {}
    for (m, cls, w), var in (model.short_class or {}).items():
        v = var.value() or 0.0
        if v > 1e-6:
            by_class.setdefault((m, w), []).append(f"{cls} {v:.2f}")
    for (m, w), var in model.short.items():
        v = var.value() or 0.0
        if v > 1e-6:
            split = by_class.get((m, w))
            classes = f" (by request class, one least split: {', '.join(split)} req/s)" if split else ""
            out.append(f"model {m} in window {w}: {v:.2f} req/s cannot be served within the inventory, "
                       f"even with fractional replicas{classes}")
    for (m, w), var in model.floor_short.items():
        v = var.value() or 0.0
        if v > 1e-6:
            out.append(f"model {m} in window {w}: its replica floor is short by {v:.2f} replicas")
    return out
