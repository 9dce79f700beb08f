"""POP-style decomposition of a fleet into k sub-fleets, for problems far beyond the window-by-window path.

POP (Narayanan et al., "Solving Large-Scale Granular Resource Allocation Problems Efficiently with POP", SOSP 2021):
split the clients (here: models) into k parts and the resources (here: each pool's nodes and its candidate shared
GPUs) in proportion to each part's demand, solve the k smaller problems independently and in parallel, and
recombine. Here:

1. Partition (:func:`partition_models`): ``random`` (a seeded shuffle dealt round-robin) or ``shape`` (models
   sorted by the window of their peak and dealt round-robin, so every part holds peaks at every hour and its
   aggregate curve is as flat as the fleet's: complementary peaks stay together in each part).
2. Split (:func:`split_problem`): part j's weight is the peak over windows of its summed GPU-equivalent demand
   (:func:`gpu_demand`); every pool's nodes, reserved GPUs and candidate shared GPUs are split by largest
   remainder in proportion to the weights, so the parts' inventories sum to the fleet's and any combination of the
   parts' valid plans is a valid plan of the whole (tp groups of divisible sizes pack onto the union of the nodes).
3. Solve the parts (:func:`_solve_part`: the greedy plan, improved or repaired window by window by
   :func:`fleetplan.solvers.decompose.solve_by_windows`, first by the fast covering of
   :func:`~fleetplan.solvers.decompose.cover_window`, then by one-window MILPs in the time left; at 250 models a
   one-window MILP does not beat the greedy window in its time share, the covering cuts 7-9% off it in a tenth
   of a second) and, in the same fan-out, the whole problem's per-window
   bound (:func:`_window_bound_task`), through an :class:`~fleetplan.solvers.executor.Executor` (local processes
   or Ray). Every task's budget is fixed before the fan-out, so the answers do not depend on which executor ran
   them (up to windows stopped by their time share rather than their gap).
4. Recombine and repair the seams (:func:`_seams`): each part in turn (parts without a valid plan first) is solved
   again window by window against the whole pools less what every other part uses in its busiest window: the
   leftover inventory of the other parts serves models its own share could not, and the pass improves the parts
   it reaches in time. Each step keeps the plan valid for the whole problem, and a step that does not lower the
   cost is dropped. If the recombined plan still does not fit (a part's models fit only where another part's
   sit), it is repaired window by window on the whole fleet (exact one-window models over every model).
5. The bound is the WHOLE problem's (not the sum of the parts' bounds, which bounds a problem with less
   inventory): the larger of Σ_w of the LP relaxation, with the covering inequalities (11), of window w's own
   problem (:func:`fleetplan.solvers.decompose.window_problem`) on the whole fleet (a window without an answer in
   time adds 0, so the sum stays a valid lower bound), the closed-form :func:`separable_bound`, and Σ_w of the
   larger of the two in window w (each bounds window w's own optimum).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from fleetplan.errors import InputError
from fleetplan.placement.plan import Plan, Status, evaluate
from fleetplan.placement.problem import Problem
from fleetplan.placement.validate import validate
from fleetplan.solvers.baselines import greedy
from fleetplan.solvers.common import SafetyStop, cover_cost_floor, finish_plan, gpus_in_use
from fleetplan.solvers.decompose import solve_by_windows, window_problem
from fleetplan.solvers.executor import Executor
from fleetplan.solvers.milp import solve_lp_bound

#: Ways to partition the models (``--partition``).
PARTITIONS = ("shape", "random")
#: Share of the time limit the parallel fan-out (parts and per-window bounds) may use; the rest goes to the
#: seam repair and the final improvement pass on the whole fleet.
FANOUT_SHARE = 0.65
#: Share of the time limit kept back at the end for recombining, validating and evaluating the whole plan (at
#: 2,000 models one ``validate`` takes 6-10 s on a busy machine).
FINISH_SHARE = 0.05
#: Share of the fan-out's worker-seconds given to the parts (the rest to the per-window bounds).
PART_SHARE = 0.35
#: Share of the time left after the fan-out kept for the last-resort repair on the whole fleet when some part has
#: no valid plan after the fan-out.
LAST_RESORT_SHARE = 0.4
#: Relative gap of the one-window models inside the parts and the seam pass.
WINDOW_GAP = 0.005
#: Seconds kept back per task for its model building and hand-over, and for the recombination.
TASK_OVERHEAD_S = 1.0


def gpu_demand(problem: Problem) -> dict[str, np.ndarray]:
    """{model: GPU-equivalents it needs in each window}, shape (n_windows,): demand / the most req/s one GPU of
    its options sustains after the margin, and at least its replica floor × the fewest GPUs of a replica. A
    model without options counts 0 (it cannot be served anyway). Used to weigh parts and split the pools."""
    mu = 1 - problem.margin
    out = {}
    for m in problem.models:
        opts = problem.options_by_model[m.name]
        if not opts:
            out[m.name] = np.zeros(problem.n_windows)
            continue
        per_gpu = max(o.capacity_req_per_s / o.gpus for o in opts) * mu
        floor = m.min_replicas * min(o.gpus for o in opts)
        out[m.name] = np.maximum(np.asarray(m.demand_req_per_s, dtype=float) / per_gpu, floor)
    return out


def partition_models(problem: Problem, k: int, *, method: str = "shape", seed: int = 0) -> list[list[str]]:
    """The models' names in ``k`` parts of sizes differing by at most one (see the module docstring for the
    methods); deterministic in (problem, k, method, seed). Raises InputError for k < 1 or k > the models, or an
    unknown method."""
    names = [m.name for m in problem.models]
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= max(1, len(names)):
        raise InputError(f"--decompose must be a whole number from 1 to the number of models ({len(names)}), "
                         f"got {k!r}", field="decompose", value=k)
    if method == "random":
        order = [names[i] for i in np.random.default_rng(seed).permutation(len(names))]
    elif method == "shape":
        dem = gpu_demand(problem)
        # by peak window, then heaviest first: dealt round-robin, each part gets every peak hour and every size
        order = sorted(names, key=lambda n: (int(np.argmax(dem[n])), -float(dem[n].max()), n))
    else:
        raise InputError(f"unknown partition {method!r}; use one of {', '.join(PARTITIONS)}", field="partition",
                         value=method)
    parts: list[list[str]] = [[] for _ in range(k)]
    for i, n in enumerate(order):
        parts[i % k].append(n)
    return parts


def _largest_remainder(total: int, weights: list[float]) -> list[int]:
    """``total`` split into whole numbers in proportion to ``weights`` (sum = total; equal split if all 0)."""
    w = np.asarray(weights, dtype=float)
    w = w / w.sum() if w.sum() > 0 else np.full(len(w), 1 / len(w))
    raw = w * total
    base = np.floor(raw).astype(int)
    for i in np.argsort(-(raw - base), kind="stable")[: total - int(base.sum())]:
        base[i] += 1
    return [int(x) for x in base]


def split_problem(problem: Problem, parts: list[list[str]]) -> list[Problem]:
    """One sub-problem per part: its models, their options and share options, and each pool's nodes, reserved
    GPUs and candidate shared GPUs split by largest remainder in proportion to the parts' peak GPU-equivalent
    demand (:func:`gpu_demand`). The sub-problems' inventories sum to the whole's. Returns the sub-problems in
    the order of ``parts``."""
    dem = gpu_demand(problem)
    weights = [float(np.sum([dem[n] for n in part], axis=0).max()) if part else 0.0 for part in parts]
    pools_of: list[list] = [[] for _ in parts]
    shared_of = _largest_remainder(problem.max_shared_gpus_per_pool, weights)
    for p in problem.pools:
        nodes = _largest_remainder(p.nodes, weights)
        left = p.reserved_gpus
        for j, nj in enumerate(nodes):
            r = min(left, nj * p.gpus_per_node)
            left -= r
            pools_of[j].append(replace(p, nodes=nj, reserved_gpus=r))
    subs = []
    for j, part in enumerate(parts):
        mine = set(part)
        subs.append(replace(
            problem, pools=tuple(pools_of[j]), models=tuple(m for m in problem.models if m.name in mine),
            options=tuple(o for o in problem.options if o.model in mine),
            share_options=tuple(s for s in problem.share_options if s.model in mine),
            max_shared_gpus_per_pool=shared_of[j],
            option_notes={k: v for k, v in problem.option_notes.items() if k in mine},
            name=f"{problem.name} (part {j + 1}/{len(parts)})"))
    return subs


def separable_bound(problem: Problem) -> float | None:
    """A lower bound on the optimum, USD, in closed form: Σ over windows w and models m of the least cost of m alone
    in w with the inventory, the start and egress costs (>= 0) and the memory and resident limits of shared GPUs
    dropped, a shared GPU charged by the share of its compute m uses. Valid: within a window a shared GPU of pool
    p costs c_p·h and carries Σ_m f[m]/(μ·cs[m,p]) <= 1 of compute ((3) of :mod:`fleetplan.solvers.milp`), so its
    cost is at least Σ_m c_p·h·f[m]/(μ·cs[m,p]), which splits by model; without the inventory the models are
    independent, and the windows are (:func:`fleetplan.solvers.decompose.window_problem`). Per model and window:
    for a model that cannot share a GPU, the least whole-replica covering of its demand and replica floor
    (:func:`fleetplan.solvers.common.cover_cost_floor`); for one that can, its demand × the lowest cost per usable
    req/s over its dedicated and shared options (floors dropped: a residency may meet them). Seconds at 2,000
    models, where the per-window LP may not finish; weaker than the LP where the inventory binds. None when a
    model with demand has no option (the prechecks report it)."""
    per_window = separable_bound_by_window(problem)
    return None if per_window is None else float(sum(per_window))


def separable_bound_by_window(problem: Problem) -> list[float] | None:
    """The terms of :func:`separable_bound` window by window, USD (window w's term is a lower bound on the
    optimum of window w alone, :func:`fleetplan.solvers.decompose.window_problem`); None as there."""
    mu = 1 - problem.margin
    h = problem.window_hours
    pools = problem.pool_by_id
    shares_of: dict[str, list] = {}
    for sh in problem.share_options:
        shares_of.setdefault(sh.model, []).append(sh)
    total = [0.0] * problem.n_windows
    for m in problem.models:
        opts = problem.options_by_model[m.name]
        cost = [o.gpus * pools[o.pool].usd_per_gpu_hour * h for o in opts]
        if m.name in shares_of:
            unit = min([c / (mu * o.capacity_req_per_s) for c, o in zip(cost, opts, strict=True)]
                       + [pools[sh.pool].usd_per_gpu_hour * h / (mu * sh.capacity_req_per_s)
                          for sh in shares_of[m.name]])
            total = [t + unit * d for t, d in zip(total, m.demand_req_per_s, strict=True)]
            continue
        spec = [(c, mu * o.capacity_req_per_s, pools[o.pool].gpus // o.gpus) for c, o in zip(cost, opts, strict=True)]
        for w, d in enumerate(m.demand_req_per_s):
            floor_usd = cover_cost_floor(spec, d, m.min_replicas)
            if floor_usd == math.inf:
                return None
            total[w] += floor_usd
    return total


def _improve(problem: Problem, start: Plan, *, backend: str, threads: int | None, deadline: float,
             max_nodes: int | None = None, stop: SafetyStop | None = None) -> Plan:
    """``start`` (the greedy plan of ``problem``, valid or not) improved or repaired window by window: in shares
    of the time until ``deadline``, or, with ``max_nodes`` and ``stop``, each one-window model bounded by
    ``max_nodes`` nodes and ``stop`` (replacing ``deadline``) only the safety stop, which records what it cut."""
    if stop is not None:
        return solve_by_windows(problem, start, backend=backend, threads=threads, gap=WINDOW_GAP, cover=True,
                                max_nodes=max_nodes, stop=stop)
    return solve_by_windows(problem, start, backend=backend, threads=threads, gap=WINDOW_GAP, deadline=deadline,
                            cover=True)


@dataclass(frozen=True)
class _PartTask:
    sub: Problem
    backend: str
    budget_s: float
    threads: int | None
    max_nodes: int | None = None


@dataclass(frozen=True)
class _BoundTask:
    window: int
    budget_s: float
    threads: int | None


def _task(problem: Problem, item: _PartTask | _BoundTask) -> tuple[Plan, tuple[str, ...]] | float | None:
    """One task of the fan-out (module-level, so every executor can run it): a part's plan (with what the safety
    stop cut in it) or a window's bound."""
    if isinstance(item, _PartTask):
        return _solve_part(item)
    return _window_bound_task(problem, item)


def _solve_part(t: _PartTask) -> tuple[Plan, tuple[str, ...]]:
    """Part ``t.sub``'s plan: the greedy plan improved (or repaired) window by window within ``t.budget_s``
    (from the task's own start), or with ``t.max_nodes`` within that node budget per one-window model and
    ``t.budget_s`` only as its safety stop; the plan may not fit when the repair ran out of time (the seam pass
    repairs). Returns the plan and what the safety stop cut (empty without ``max_nodes``)."""
    end = time.perf_counter() + t.budget_s
    g = greedy(t.sub)
    if t.max_nodes is None:
        return _improve(t.sub, g, backend=t.backend, threads=t.threads, deadline=end), ()
    stop = SafetyStop(deadline=end, time_limit_s=t.budget_s)
    plan = _improve(t.sub, g, backend=t.backend, threads=t.threads, deadline=end, max_nodes=t.max_nodes, stop=stop)
    return plan, tuple(stop.cuts)


def _window_bound_task(problem: Problem, t: _BoundTask) -> float | None:
    """The LP bound (with covering cuts) of window ``t.window`` of the whole problem, USD, or None in time."""
    end = time.perf_counter() + t.budget_s
    return solve_lp_bound(window_problem(problem, t.window), time_limit_s=t.budget_s, threads=t.threads,
                          deadline=end)


def _restrict(plan: Plan, models: set[str]) -> Plan:
    """``plan``'s replicas and shared GPUs of ``models`` (shared GPUs whose residents are all among them)."""
    return Plan(replicas={k: v for k, v in plan.replicas.items() if k[0] in models},
                shared=tuple(s for s in plan.shared if set(s.models) <= models), backend=plan.backend)


def _combine(plans: list[Plan]) -> Plan:
    replicas: dict = {}
    shared: list = []
    for p in plans:
        replicas.update(p.replicas)
        shared.extend(p.shared)
    return Plan(replicas=replicas, shared=tuple(shared), status=Status.HEURISTIC, backend="pop")


def _seams(problem: Problem, parts: list[Problem], plans: list[Plan], *, backend: str, threads: int | None,
           deadline: float, say: Callable[[str], None], max_nodes: int | None = None,
           stop: SafetyStop | None = None) -> tuple[list[Plan], list[str]]:
    """The seam pass (module docstring, step 4): returns the parts' plans after it and notes for the message.
    Each part gets a share of the time until ``deadline``, or, with ``max_nodes`` and ``stop``, the node budget
    per one-window model and ``deadline`` only as the safety stop (``stop`` records what it cut)."""
    plans = list(plans)
    names = [{m.name for m in sub.models} for sub in parts]
    valid = [validate(sub, p, check_objective=False).ok for sub, p in zip(parts, plans, strict=True)]
    cost = [evaluate(sub, p).total_usd for sub, p in zip(parts, plans, strict=True)]
    order = sorted(range(len(parts)), key=lambda j: (valid[j], -cost[j], j))
    notes = []
    repaired = improved = 0
    for i, j in enumerate(order):
        left = deadline - time.perf_counter()
        if left <= 0.5:
            if stop is not None:
                stop.cut(f"the seam pass before its part {i + 1} of {len(parts)}")
            break
        say(f"seam pass: part {j + 1}/{len(parts)}" + ("" if valid[j] else " (repair)"))
        others = gpus_in_use(problem, _combine([p for q, p in enumerate(plans) if q != j]),
                             set().union(*(names[q] for q in range(len(parts)) if q != j)))
        pools = []
        for p in problem.pools:
            taken = p.reserved_gpus + max(others[p.id])
            pools.append(replace(p, reserved_gpus=min(p.nodes * p.gpus_per_node, taken)))
        wide = replace(parts[j], pools=tuple(pools), max_shared_gpus_per_pool=problem.max_shared_gpus_per_pool)
        start = _restrict(plans[j], names[j])
        if stop is not None:
            part_stop = SafetyStop(deadline=deadline, time_limit_s=stop.time_limit_s)
            new = _improve(wide, start, backend=backend, threads=threads, deadline=deadline, max_nodes=max_nodes,
                           stop=part_stop)
            for cut in part_stop.cuts:
                stop.cut(f"{cut} (seam pass, part {i + 1} of {len(parts)})")
        else:
            new = _improve(wide, start, backend=backend, threads=threads,
                           deadline=time.perf_counter() + left / (len(order) - i))
        if not validate(wide, new, check_objective=False).ok:
            continue
        new_cost = evaluate(wide, new).total_usd
        if not valid[j] or new_cost < cost[j] - 1e-6:
            repaired += not valid[j]
            improved += valid[j]
            plans[j], valid[j], cost[j] = new, True, new_cost
    notes.append(f"seam pass on the whole pools: {repaired} part(s) repaired, {improved} improved")
    if not all(valid):
        notes.append(f"{sum(not v for v in valid)} part(s) still without a valid plan")
    return plans, notes


def solve_pop(problem: Problem, k: int, executor: Executor, *, backend: str = "highs", time_limit_s: float = 600,
              threads: int | None = None, gap: float = 0.05, partition: str = "shape", seed: int = 0,
              deadline: float | None = None, progress: Callable[[str], None] | None = None,
              max_nodes: int | None = None) -> Plan:
    """Plan ``problem`` by POP decomposition into ``k`` sub-fleets (module docstring) on ``executor``.

    Args:
        k: parts (1 <= k <= models). backend: 'highs' or 'cbc' for the one-window models (CP-SAT: 'highs' is
            used; its one-window models are far slower at this size). threads: solver threads per task.
        gap: the requested relative gap (the status is OPTIMAL only within it).
        partition, seed: see :func:`partition_models`.
        deadline: a time.perf_counter() value for the whole call (default: now + time_limit_s).
        max_nodes: a deterministic budget of branch-and-bound nodes for every one-window model (the parts, the
            seam pass, the last-resort repair; None: their shares of the time decide): then the time shares are
            only safety stops, so the same problem and budget give the same plan on an idle or a busy machine
            unless the message says what the wall-clock safety stop cut (a window's LP bound cut by its share
            changes only the bound). The per-window LP bounds run to their end within their share either way.

    Returns a Plan from :func:`fleetplan.solvers.common.finish_plan` (status from the whole problem's per-window
    bound; HEURISTIC without one), or NO_SOLUTION with the reason when the recombined plan is not valid.
    Raises InputError for a bad k or partition.
    """
    t0 = time.perf_counter()
    say = progress or (lambda s: None)
    deadline = deadline if deadline is not None else t0 + time_limit_s
    milp = backend if backend in ("highs", "cbc") else "highs"
    parts_names = partition_models(problem, k, method=partition, seed=seed)
    parts = split_problem(problem, parts_names)
    W = problem.n_windows
    workers = max(1, executor.workers or 1)
    fan = max(0.0, FANOUT_SHARE * (deadline - time.perf_counter()))
    # worker-seconds of the fan-out, PART_SHARE to the parts: each part's budget (a fixed number, the same on
    # every executor) so that k parts and W windows finish within ``fan`` on ``workers`` workers
    part_s = max(1.0, PART_SHARE * fan * workers / k - TASK_OVERHEAD_S)
    bound_s = max(1.0, (1 - PART_SHARE) * fan * workers / W - TASK_OVERHEAD_S)
    items: list[_PartTask | _BoundTask] = [_PartTask(sub, milp, part_s, threads, max_nodes) for sub in parts]
    items += [_BoundTask(w, bound_s, threads) for w in range(W)]
    say(f"solving {k} parts ({part_s:.0f} s each) and {W} window bounds ({bound_s:.0f} s each) on "
        f"{executor.describe()}")
    out = executor.map(_task, items, common=problem, with_common=True,
                       progress=lambda n: say(f"{n}/{len(items)} tasks done"))
    stop = SafetyStop(deadline=deadline, time_limit_s=time_limit_s)
    plans = []
    for j, res in enumerate(out[:k]):
        if isinstance(res, tuple):  # a part task's answer: (plan, what the safety stop cut)
            plans.append(res[0])
            for cut in res[1]:
                stop.cut(f"{cut} (part {j + 1} of {k})")
    wb = out[k:]
    if max_nodes is not None and any(b is None for b in wb):
        stop.cut(f"the per-window LP bound in {sum(b is None for b in wb)} of its {W} windows (each stopped by its "
                 "share of the time)", bound_only=True)
    sep_w = separable_bound_by_window(problem)
    lp_w = [max(0.0, float(b)) if isinstance(b, (int, float)) else 0.0 for b in wb]  # a window without an answer adds 0
    bounds = {"per-window LP": sum(lp_w) if any(b is not None for b in wb) else None,
              "per-model": None if sep_w is None else float(sum(sep_w)),
              # each window's optimum is at least the larger of its own two bounds
              "per-window best of LP and per-model": None if sep_w is None else float(
                  sum(max(a, b) for a, b in zip(lp_w, sep_w, strict=True)))}
    notes = [f"POP decomposition into {k} parts ({partition} partition, seed {seed}) on {executor.describe()}; "
             f"bounds of the whole fleet: Σ over windows of each window's LP bound "
             f"({sum(b is not None for b in wb)}/{W} windows solved in time), the per-model bound, and Σ over "
             f"windows of the larger of the two"]
    some_invalid = not all(validate(sub, p, check_objective=False).ok for sub, p in zip(parts, plans, strict=True))
    deadline_work = deadline - FINISH_SHARE * time_limit_s
    seam_end = deadline_work - (LAST_RESORT_SHARE * (deadline_work - time.perf_counter()) if some_invalid else 0.0)
    plans, seam_notes = _seams(problem, parts, plans, backend=milp, threads=threads, deadline=seam_end, say=say,
                               max_nodes=max_nodes, stop=stop if max_nodes is not None else None)
    notes += seam_notes
    plan = _combine(plans)
    report = validate(problem, plan, check_objective=False)
    if not report.ok:
        # last resort: the whole fleet window by window (exact one-window models over every model), from the
        # recombined plan's shared GPUs; e.g. a part whose models fit only where another part's models sit
        say("repairing the recombined plan window by window on the whole fleet")
        last = SafetyStop(deadline=deadline_work, time_limit_s=time_limit_s) if max_nodes is not None else None
        plan = _improve(problem, plan, backend=milp, threads=threads, deadline=deadline_work, max_nodes=max_nodes,
                        stop=last)
        for cut in last.cuts if last is not None else ():
            stop.cut(f"{cut} (the last-resort repair on the whole fleet)")
        report = validate(problem, plan, check_objective=False)
        notes.append("the recombined plan was repaired window by window on the whole fleet" if report.ok else
                     "the window-by-window repair of the recombined plan on the whole fleet failed")
    note = stop.note()
    if note:
        notes.append(note)
    if not report.ok:
        known = [b for b in bounds.values() if b is not None]
        return Plan(status=Status.NO_SOLUTION, backend="pop", bound_usd=max(known) if known else None,
                    solve_time_s=time.perf_counter() - t0,
                    message="; ".join([*notes, "the recombined plan does not fit: "
                                       + "; ".join(report.violations[:3])]))
    reached = bool(stop.cuts) if max_nodes is not None else time.perf_counter() >= deadline - 0.5
    return finish_plan(problem, backend=f"{backend}-pop", gap=gap, bounds=bounds, start=plan,
                       time_limit_reached=reached, time_limit_s=time_limit_s,
                       solve_time_s=time.perf_counter() - t0, notes=tuple(notes), backend_ran=False)


def default_parts(problem: Problem) -> int:
    """Parts for the automatic path: one per MODELS_PER_PART models (at least 2)."""
    return max(2, math.ceil(len(problem.models) / MODELS_PER_PART))


#: Models per part of the automatic decomposition (a part then solves like the 200-model instance of the
#: planner benchmark, within a minute per part).
MODELS_PER_PART = 250
