"""Baseline plans, to measure what time-windowed packing adds, and the greedy plan that warm-starts the solvers.

(a) ``dedicated_peak``: each model on its own GPUs, sized for its own peak window, on the cheapest option that
    meets its SLO, all day.
(b) ``ffd_peak``: time-agnostic packing: models small enough to share a GPU are packed by first-fit decreasing
    on their peak compute share (and memory), all day; the others get dedicated replicas sized for their peak,
    all day.
(c) ``autoscale_dedicated``: each window, each model sized on its own on dedicated GPUs (what a per-model
    autoscaler does): no sharing, so (c) against the optimum isolates what packing complementary models adds.
``greedy``: first-fit decreasing of the small models by their per-window vector of compute shares (models with
    complementary curves land together), plus per-window autoscaling of the rest (models with request classes:
    each class routed to the options serving it, :func:`_class_split`): the solvers' warm start.

Every baseline respects the inventory where it can: it picks the cheapest option whose pool still has room in
every window it needs, and falls back to the cheapest option otherwise (then ``validate`` reports the overflow).
"""

from __future__ import annotations

import math

from fleetplan.placement.plan import Plan, SharedGPU, Status, evaluate, starts
from fleetplan.placement.problem import Problem, ReplicaOption, ShareOption
from fleetplan.placement.validate import validate
from fleetplan.solvers.common import shared_bins_per_pool


class _Inventory:
    """GPUs used per pool and window while a heuristic builds a plan. A spot pool offers at most the GPUs its
    fallback pool can cover (interruption rate × spot GPUs <= the fallback's GPUs), and the fallback pool keeps back,
    all day, the interruption rate × those GPUs (rounded up): the fallback rule then holds whatever the heuristic puts
    on spot."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.free = {p.id: [p.gpus] * problem.n_windows for p in problem.pools}
        pools = problem.pool_by_id
        for p in problem.pools:
            if p.fallback_pool is not None and p.interruption_rate:
                # Spot GPUs the fallback pool can cover at all (rate × spot <= its GPUs), then the headroom kept for
                # them: the rule holds by construction, nothing is cut to fit.
                usable = min(p.gpus, math.floor(pools[p.fallback_pool].gpus / p.interruption_rate + 1e-9))
                keep = math.ceil(p.interruption_rate * usable - 1e-9)
                self.free[p.id] = [min(f, usable) for f in self.free[p.id]]
                self.free[p.fallback_pool] = [f - keep for f in self.free[p.fallback_pool]]

    def fits(self, pool: str, gpus_per_window: list[int]) -> bool:
        return all(g <= f for g, f in zip(gpus_per_window, self.free[pool], strict=True))

    def take(self, pool: str, gpus_per_window: list[int]) -> None:
        self.free[pool] = [f - g for f, g in zip(self.free[pool], gpus_per_window, strict=True)]


def _replicas_needed(demand: float, o: ReplicaOption, margin: float) -> int:
    return math.ceil(demand / (o.capacity_req_per_s * (1 - margin)) - 1e-9) if demand > 0 else 0


def _option_cost(problem: Problem, o: ReplicaOption, counts: list[int], demand: list[float]) -> float:
    pool = problem.pool_by_id[o.pool]
    model = problem.model_by_name[o.model]
    gpu = sum(counts) * o.gpus * pool.usd_per_gpu_hour * problem.window_hours
    egress = sum(demand) * problem.egress_usd_per_req_per_s_window(model, pool.site)
    return gpu + egress + starts(counts) * o.start_cost_usd


def _dedicated(problem: Problem, inv: _Inventory, model: str, demand: list[float], floor: int,
               per_window: bool) -> dict:
    """Cheapest single option for ``model`` serving ``demand`` (per window, or its peak all day)."""
    margin = problem.margin
    best = None
    fallback = None
    for o in problem.options_by_model[model]:
        if not problem.serves_whole_mix(o):
            continue
        if per_window:
            counts = [max(floor, _replicas_needed(d, o, margin)) for d in demand]
        else:
            counts = [max(floor, _replicas_needed(max(demand), o, margin))] * len(demand)
        spec = problem.model_by_name[model]
        if spec.max_replicas is not None and max(counts) > spec.max_replicas:
            continue
        cost = _option_cost(problem, o, counts, demand)
        gpus = [c * o.gpus for c in counts]
        cand = (cost, o.key, counts, gpus, o)
        if fallback is None or cand[:2] < fallback[:2]:
            fallback = cand
        if inv.fits(o.pool, gpus) and (best is None or cand[:2] < best[:2]):
            best = cand
    if best is None and fallback is not None:
        split = _split_dedicated(problem, inv, model, demand, floor, per_window)
        if split:
            return split
    choice = best or fallback
    if choice is None or not any(choice[2]):
        return {}
    inv.take(choice[4].pool, choice[3])
    return {choice[1]: tuple(choice[2])}


def _unit_cost(problem: Problem, o: ReplicaOption) -> float:
    """USD per usable req/s of ``o`` for one window: GPU-hours (after the margin) plus egress from the origin."""
    pool = problem.pool_by_id[o.pool]
    gpu = o.gpus * pool.usd_per_gpu_hour * problem.window_hours / (o.capacity_req_per_s * (1 - problem.margin))
    return gpu + problem.egress_usd_per_req_per_s_window(problem.model_by_name[o.model], pool.site)


def _split_dedicated(problem: Problem, inv: _Inventory, model: str, demand: list[float], floor: int,
                     per_window: bool, partial: bool = False) -> dict:
    """``model``'s demand over several options: in each window (or for the peak, all day), replicas of the option
    with the lowest cost per usable req/s (:func:`_unit_cost`) that still has room, as many as fit, then the
    next option. If the options with room cannot serve it: {} (nothing taken), or with ``partial`` what fits
    (the plan then falls short in those windows only, for a window-by-window repair)."""
    spec = problem.model_by_name[model]
    mu = 1 - problem.margin
    W = len(demand)
    opts = sorted((o for o in problem.options_by_model[model]
                   if o.capacity_req_per_s > 0 and problem.serves_whole_mix(o)),
                  key=lambda o: (_unit_cost(problem, o), o.key))
    groups = [list(range(W))] if not per_window else [[w] for w in range(W)]
    counts = {o.key: [0] * W for o in opts}
    free = {pid: list(f) for pid, f in inv.free.items()}
    for ws in groups:
        need = max(demand[w] for w in ws)
        reps = 0
        for o in opts:
            if need <= 1e-12 and reps >= floor:
                break
            room = min(free[o.pool][w] for w in ws) // o.gpus
            if spec.max_replicas is not None:
                room = min(room, spec.max_replicas - reps)
            k = min(room, max(_replicas_needed(need, o, problem.margin), floor - reps))
            if k <= 0:
                continue
            for w in ws:
                counts[o.key][w] += k
                free[o.pool][w] -= k * o.gpus
            reps += k
            need -= k * o.capacity_req_per_s * mu
        if (need > 1e-9 * max(1.0, max(demand)) or reps < floor) and not partial:
            return {}
    inv.free = free
    return {k: tuple(c) for k, c in counts.items() if any(c)}


def _class_split(problem: Problem, inv: _Inventory, model: str, demand: list[float], floor: int) -> dict:
    """Replicas per window for a model with request classes (constraint (12)'s additive load): in each window the
    classes, largest demand first, fill first the room left on replicas already opened for earlier classes (free),
    then new replicas of the option with the lowest cost per usable req/s of that class that still has room
    (whole replicas: ceil of the load); then the floor with the cheapest replica that has room. A class nothing
    with room serves stays short (the plan is then invalid in that window only, for the window-by-window repair).
    The routing used here is one ``validate``'s LP accepts, so a plan it completes is valid."""
    spec = problem.model_by_name[model]
    mu = 1 - problem.margin
    pools = problem.pool_by_id
    opts = [o for o in problem.options if o.model == model and o.class_capacity]
    counts = {o.key: [0] * len(demand) for o in opts}
    for w, d in enumerate(demand):
        load = {o.key: 0.0 for o in opts}  # replicas' worth of usable capacity in use
        n = {o.key: 0 for o in opts}
        for cls, share in sorted(spec.class_shares, key=lambda cs: (-cs[1], cs[0])):
            need = share * d
            serving = [o for o in opts if cls in o.class_capacity]
            for o in sorted(serving, key=lambda o: -o.class_capacity[cls]):  # spare room on open replicas
                take = min(need, (n[o.key] - load[o.key]) * mu * o.class_capacity[cls])
                if take > 0:
                    load[o.key] += take / (mu * o.class_capacity[cls])
                    need -= take
            by_cost = sorted(serving, key=lambda o: (o.gpus * pools[o.pool].usd_per_gpu_hour
                                                     / o.class_capacity[cls], o.key))
            for o in by_cost:
                if need <= 1e-12:
                    break
                room = inv.free[o.pool][w] // o.gpus
                if spec.max_replicas is not None:
                    room = min(room, spec.max_replicas - sum(n.values()))
                k = min(room, math.ceil(load[o.key] + need / (mu * o.class_capacity[cls]) - 1e-9) - n[o.key])
                if k <= 0:
                    continue
                take = min(need, (n[o.key] + k - load[o.key]) * mu * o.class_capacity[cls])
                n[o.key] += k
                inv.free[o.pool][w] -= k * o.gpus
                load[o.key] += take / (mu * o.class_capacity[cls])
                need -= take
        for o in sorted(opts, key=lambda o: (o.gpus * pools[o.pool].usd_per_gpu_hour, o.key)):
            short = floor - sum(n.values())
            if short <= 0:
                break
            k = min(short, inv.free[o.pool][w] // o.gpus)
            n[o.key] += k
            inv.free[o.pool][w] -= k * o.gpus
        for key, c in n.items():
            counts[key][w] = c
    return {k: tuple(c) for k, c in counts.items() if any(c)}


def whole_model_share_options(problem: Problem) -> dict[str, list[ShareOption]]:
    """{pool id: share options} the packing baselines place whole models with: the model's all-day peak fits in
    (1 - margin) of one shared GPU, and at least two models qualify in the pool. A rule of these heuristics only
    (they put a model's whole demand on one shared GPU); the exact models admit every share option
    (:func:`fleetplan.solvers.common.shared_candidates`)."""
    models = problem.model_by_name
    out: dict[str, list[ShareOption]] = {}
    for s in problem.share_options:
        if max(models[s.model].demand_req_per_s) <= (1 - problem.margin) * s.capacity_req_per_s:
            out.setdefault(s.pool, []).append(s)
    return {p: v for p, v in out.items() if len(v) >= 2}


def _pack_shared(problem: Problem, inv: _Inventory, time_aware: bool) -> tuple[list[SharedGPU], set[str]]:
    """First-fit decreasing of share-eligible models onto shared GPUs; returns the GPUs and the packed models.

    time_aware=False packs by each model's peak share (one number); True by its share in every window.
    """
    cands = whole_model_share_options(problem)
    models = problem.model_by_name
    pools = problem.pool_by_id
    mu = 1 - problem.margin
    W = problem.n_windows
    lim = {pid: pools[pid].memory_bytes_per_gpu * problem.shared_memory_utilization for pid in cands}
    eligible: dict[str, list] = {}
    for lst in cands.values():
        for s in lst:
            eligible.setdefault(s.model, []).append(s)
    # Items: larger peak share first (the share on its cheapest eligible pool).
    def peak_share(m: str) -> float:
        s = min(eligible[m], key=lambda s: pools[s.pool].usd_per_gpu_hour)
        return max(models[m].demand_req_per_s) / s.capacity_req_per_s

    bins: list[dict] = []  # {pool, models, load per window, mem}
    packed = set()
    for m in sorted(eligible, key=lambda m: (-peak_share(m), m)):
        d = models[m].demand_req_per_s
        placed = False
        for b in bins:
            so = next((s for s in eligible[m] if s.pool == b["pool"]), None)
            if so is None or b["mem"] + so.memory_bytes > lim[b["pool"]]:
                continue
            if problem.max_models_per_shared_gpu is not None and len(b["models"]) >= problem.max_models_per_shared_gpu:
                continue
            share = [x / so.capacity_req_per_s for x in d]
            if time_aware:
                ok = all(b["load"][w] + share[w] <= mu + 1e-12 for w in range(W))
            else:
                ok = b["peak"] + max(share) <= mu + 1e-12
            if ok:
                b["models"].append(m)
                b["mem"] += so.memory_bytes
                b["load"] = [b["load"][w] + share[w] for w in range(W)]
                b["peak"] += max(share)
                placed = True
                break
        if not placed:
            for s in sorted(eligible[m], key=lambda s: (pools[s.pool].usd_per_gpu_hour, s.pool)):
                opened = sum(1 for b in bins if b["pool"] == s.pool)
                if opened >= shared_bins_per_pool(problem, s.pool, len(cands[s.pool])):
                    continue  # the exact models have no more candidate shared GPUs in this pool
                if inv.fits(s.pool, [1] * W) and s.memory_bytes <= lim[s.pool]:
                    inv.take(s.pool, [1] * W)
                    share = [x / s.capacity_req_per_s for x in d]
                    bins.append({"pool": s.pool, "models": [m], "mem": s.memory_bytes, "load": share,
                                 "peak": max(share)})
                    placed = True
                    break
        if placed:
            packed.add(m)
    shared = [SharedGPU(pool=b["pool"], models=tuple(b["models"]),
                        served_req_per_s={m: tuple(models[m].demand_req_per_s) for m in b["models"]}) for b in bins]
    # A bin holding one model only is a dedicated replica in disguise: keep it (it is still a valid plan).
    return shared, packed


def _finish(problem: Problem, replicas: dict, shared: list[SharedGPU], name: str) -> Plan:
    plan = Plan(replicas=replicas, shared=tuple(shared), status=Status.HEURISTIC, backend=name)
    ev = evaluate(problem, plan)
    report = validate(problem, plan, check_objective=False)
    msg = "" if report.ok else "does not fit the problem: " + "; ".join(report.violations[:3])
    return Plan(replicas=replicas, shared=tuple(shared), status=Status.HEURISTIC, backend=name,
                objective_usd=ev.total_usd, message=msg)


def _all_dedicated(problem: Problem, *, per_window: bool, name: str) -> Plan:
    """Every model on its own dedicated GPUs (cheapest option with room), largest peak first."""
    inv = _Inventory(problem)
    replicas: dict = {}
    for m in sorted(problem.models, key=lambda m: -max(m.demand_req_per_s)):
        replicas.update(_dedicated(problem, inv, m.name, list(m.demand_req_per_s), m.min_replicas,
                                   per_window=per_window))
    return _finish(problem, replicas, [], name)


def dedicated_peak(problem: Problem) -> Plan:
    """Baseline (a): every model on dedicated GPUs sized for its peak window, all day."""
    return _all_dedicated(problem, per_window=False, name="dedicated_peak")


def autoscale_dedicated(problem: Problem) -> Plan:
    """Baseline (c): every model on dedicated GPUs sized for each window's demand (no sharing)."""
    return _all_dedicated(problem, per_window=True, name="autoscale_dedicated")


def _split_plan(problem: Problem) -> Plan:
    """Time-aware packing, then each other model's demand split per window over the options with room (cheapest
    per usable req/s first, models in order of their cheapest option): fits tight inventories where one option
    per model does not; where it still falls short, only the windows short are invalid."""
    inv = _Inventory(problem)
    shared, packed = _pack_shared(problem, inv, time_aware=True)
    best = {m.name: math.inf for m in problem.models}
    for o in problem.options:
        if o.capacity_req_per_s > 0 and problem.serves_whole_mix(o):
            best[o.model] = min(best[o.model], _unit_cost(problem, o))
    replicas: dict = {}
    W = problem.n_windows
    for m in sorted(problem.models, key=lambda m: (best[m.name], m.name)):
        demand = [0.0] * W if m.name in packed else list(m.demand_req_per_s)
        floor = max(0, m.min_replicas - 1) if m.name in packed else m.min_replicas
        if m.class_shares:  # one capacity per class: route the classes (a class model never shares a GPU)
            replicas.update(_class_split(problem, inv, m.name, demand, floor))
        elif any(demand) or floor:
            replicas.update(_split_dedicated(problem, inv, m.name, demand, floor, per_window=True, partial=True))
    return _finish(problem, replicas, shared, "greedy")


def _packed_plan(problem: Problem, time_aware: bool, name: str) -> Plan:
    inv = _Inventory(problem)
    shared, packed = _pack_shared(problem, inv, time_aware=time_aware)
    replicas: dict = {}
    for m in sorted(problem.models, key=lambda m: -max(m.demand_req_per_s)):
        if m.name in packed:
            extra = max(0, m.min_replicas - 1)
            if extra:
                replicas.update(_dedicated(problem, inv, m.name, [0.0] * problem.n_windows, extra,
                                           per_window=time_aware))
            continue
        replicas.update(_dedicated(problem, inv, m.name, list(m.demand_req_per_s), m.min_replicas,
                                   per_window=time_aware))
    return _finish(problem, replicas, shared, name)


def ffd_peak(problem: Problem) -> Plan:
    """Baseline (b): time-agnostic first-fit-decreasing packing on peak demand, all day."""
    return _packed_plan(problem, time_aware=False, name="ffd_peak")


def greedy(problem: Problem) -> Plan:
    """The solvers' warm start: the cheapest plan that passes ``validate`` among the time-aware packing
    heuristic (one option per model, and split over options per window), and the three baselines (so the exact
    answer is never worse than any baseline that fits); if none passes, the split heuristic (invalid, with its
    message; short only in the windows it could not fit, which ``solve`` repairs window by window). With a spread
    (constraint (18)) each candidate that does not fit first gets replicas elsewhere (:func:`_spread_out`)."""
    split = _split_plan(problem)
    cands = [_packed_plan(problem, time_aware=True, name="greedy"), split, ffd_peak(problem),
             autoscale_dedicated(problem), dedicated_peak(problem)]
    if any(m.spread_bounds for m in problem.models):
        cands = [_spread_out(problem, c) if c.message else c for c in cands]
        split = cands[1]
    valid = [p for p in cands if not p.message]
    return min(valid, key=lambda p: math.inf if p.objective_usd is None else p.objective_usd) if valid else split


def _spread_excess(problem: Problem, mname: str, per_pool: dict[str, float]) -> float:
    """The largest share of model ``mname``'s capacity at one site or pool less its bound (<= 0: its spread
    holds; a model without capacity holds it), of ``per_pool`` {pool: usable req/s}. A share, not req/s: a
    replica larger than the breach still lowers it when it goes where the model has least."""
    pools = problem.pool_by_id
    worst = -math.inf
    for level, share in problem.model_by_name[mname].spread_bounds.items():
        places: dict[str, float] = {}
        for pid, c in per_pool.items():
            place = pools[pid].site if level == "site" else pid
            places[place] = places.get(place, 0.0) + c
        total = sum(places.values())
        worst = max(worst, (max(places.values()) / total if total > 0 else 0.0) - share)
    return worst


def _spread_out(problem: Problem, plan: Plan) -> Plan:
    """``plan`` with, for each model and window whose spread (constraint (18)) does not hold, dedicated replicas
    added one at a time (among the options with free GPUs in that window, the cheapest per usable req/s of those
    that lower the largest share, :func:`_spread_excess`) until it holds or none lowers it; re-checked by
    ``validate`` (:func:`_finish`): the heuristics pack for cost and inventory and know no spread."""
    W, mu = problem.n_windows, 1 - problem.margin
    pools = problem.pool_by_id
    reps = {k: list(v) for k, v in plan.replicas.items()}
    used = {p.id: [0] * W for p in problem.pools}
    for key, counts in reps.items():
        for w, n in enumerate(counts):
            used[key[1]][w] += n * problem.option_by_key[key].gpus
    for g in plan.shared:
        for w in range(W):
            used[g.pool][w] += 1
    for m in problem.models:
        if not m.spread_bounds:
            continue
        opts = sorted(problem.options_by_model[m.name],
                      key=lambda o: (o.gpus * pools[o.pool].usd_per_gpu_hour / o.capacity_req_per_s, o.key))
        for w in range(W):
            per_pool: dict[str, float] = {}
            for g in plan.shared:
                if m.name in g.models:
                    per_pool[g.pool] = (per_pool.get(g.pool, 0.0)
                                        + mu * problem.share_by_key[(m.name, g.pool)].capacity_req_per_s)
            for o in opts:
                n = reps.get(o.key, [0] * W)[w]
                per_pool[o.pool] = per_pool.get(o.pool, 0.0) + n * mu * o.capacity_req_per_s
            for _ in range(10_000):  # each step lowers the excess; the bound only stops a float loop
                now = _spread_excess(problem, m.name, per_pool)
                if now <= 1e-9:
                    break
                pick = None
                for o in opts:
                    if used[o.pool][w] + o.gpus > pools[o.pool].gpus:
                        continue
                    trial = dict(per_pool)
                    trial[o.pool] = trial.get(o.pool, 0.0) + mu * o.capacity_req_per_s
                    if _spread_excess(problem, m.name, trial) < now - 1e-9:
                        pick = o
                        break
                if pick is None:
                    break
                reps.setdefault(pick.key, [0] * W)[w] += 1
                used[pick.pool][w] += pick.gpus
                per_pool[pick.pool] = per_pool.get(pick.pool, 0.0) + mu * pick.capacity_req_per_s
    return _finish(problem, {k: tuple(v) for k, v in reps.items()}, list(plan.shared), plan.backend)


BASELINES = {"dedicated_peak": dedicated_peak, "ffd_peak": ffd_peak, "autoscale_dedicated": autoscale_dedicated}
