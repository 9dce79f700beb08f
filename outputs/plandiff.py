"""The difference between two plans (``fleetplan diff``): per model, pool and window the replicas added and removed,
the shared GPUs added and removed, and the cost per day of each side.

A plan's rows are keyed as in :class:`~fleetplan.placement.plan.Plan`: dedicated replicas by (model, pool, tp,
pp), prefill/decode replicas by (model, role, pool, tp, decode site), shared GPUs by (pool, residents). Both plans
must have the same windows (number and length); the cost of each side is its own
:func:`~fleetplan.placement.plan.evaluate` per day, so plans of different scenarios (other prices) compare as
what each would cost.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from fleetplan.errors import InputError
from fleetplan.outputs.planio import per_day_factor
from fleetplan.placement.plan import Plan, evaluate
from fleetplan.placement.problem import Problem


@dataclass(frozen=True)
class RowChange:
    """One plan row whose replicas differ: ``before``/``after`` replicas per window (0 where the row is absent)."""

    model: str
    pool: str
    shape: str  # 'tp4', 'tp2 pp2', 'prefill tp4 -> gcp:us-central1', 'shared with A, B'
    before: tuple[int, ...]
    after: tuple[int, ...]

    @property
    def added(self) -> int:
        """Replica-windows added (sum over windows of the rises), replicas × windows."""
        return sum(max(0, b - a) for a, b in zip(self.before, self.after, strict=True))

    @property
    def removed(self) -> int:
        """Replica-windows removed, replicas × windows."""
        return sum(max(0, a - b) for a, b in zip(self.before, self.after, strict=True))

    def windows(self) -> list[int]:
        """Indices of the windows where the two differ."""
        return [w for w, (a, b) in enumerate(zip(self.before, self.after, strict=True)) if a != b]


@dataclass(frozen=True)
class PlanDiff:
    """The difference of plan B against plan A.

    Attributes:
        rows: the rows that differ, sorted by model, pool, shape.
        cost_before_usd_per_day / cost_after_usd_per_day: each plan's cost per day (its own evaluate), USD.
        window_length_s: seconds per window of both plans.
        migrations: replica starts + stops needed to turn A's fleet into B's in each window, summed over windows
            (a replica kept is no migration).
    """

    rows: tuple[RowChange, ...]
    cost_before_usd_per_day: float
    cost_after_usd_per_day: float
    window_length_s: float
    migrations: int = field(default=0)

    @property
    def cost_delta_usd_per_day(self) -> float:
        """B's cost per day minus A's, USD."""
        return self.cost_after_usd_per_day - self.cost_before_usd_per_day


def _shape(key: tuple) -> tuple[str, str, str]:
    if len(key) == 4:  # (model, pool, tp, pp)
        model, pool, tp, pp = key
        return model, pool, f"tp{tp}" + (f" pp{pp}" if pp > 1 else "")
    model, role, pool, tp, decode_site = key  # (model, role, pool, tp, decode site)
    return model, pool, f"{role} tp{tp} -> {decode_site}"


def _rows(plan: Plan, W: int) -> dict[tuple[str, str, str], tuple[int, ...]]:
    """{(model, pool, shape): replicas in each of the ``W`` windows} of ``plan`` (shared GPUs: W equal counts)."""
    out: dict[tuple[str, str, str], tuple[int, ...]] = {}
    for key, counts in (*plan.replicas.items(), *plan.pd_replicas.items()):
        out[_shape(key)] = tuple(int(n) for n in counts)
    shared = Counter((g.pool, tuple(sorted(g.models))) for g in plan.shared)
    for (pool, models), n in shared.items():
        for m in models:
            others = [o for o in models if o != m]
            label = "shared GPU" + (f" with {', '.join(others)}" if others else "")
            out[(m, pool, label)] = (n,) * W
    return out


def _per_day_usd(problem: Problem, plan: Plan) -> float:
    """``plan``'s cost per day, USD (its evaluate over the horizon, scaled to a day as plan files are)."""
    return evaluate(problem, plan).total_usd * per_day_factor(problem)


def diff_plans(problem_a: Problem, plan_a: Plan, problem_b: Problem, plan_b: Plan) -> PlanDiff:
    """Plan B against plan A. Raises InputError when their windows differ, naming the difference (the window
    length, or the number of windows, i.e. the horizon): a window-by-window difference of plans on other clocks
    would compare unlike hours."""
    la, lb = problem_a.window_length_s, problem_b.window_length_s
    if la != lb:
        raise InputError(f"the plans have different windows ({problem_a.n_windows} x {la:g} s vs "
                         f"{problem_b.n_windows} x {lb:g} s); plan both with the same options.window_length_s to "
                         "compare them", field="window_length_s", value=lb)
    if problem_a.n_windows != problem_b.n_windows:
        raise InputError(f"the plans cover different horizons (different windows: {problem_a.n_windows} x {la:g} s "
                         f"= {problem_a.horizon_hours:g} h vs {problem_b.n_windows} x {lb:g} s = "
                         f"{problem_b.horizon_hours:g} h); plan both over the same horizon (demand given for the same "
                         "number of windows) to compare them", field="n_windows", value=problem_b.n_windows)
    rows, moves = _changes(plan_a, plan_b, problem_a.n_windows)
    return PlanDiff(rows, _per_day_usd(problem_a, plan_a), _per_day_usd(problem_b, plan_b), problem_a.window_length_s,
                    moves)


def _changes(plan_a: Plan, plan_b: Plan, W: int) -> tuple[tuple[RowChange, ...], int]:
    """The rows that differ from ``plan_a`` to ``plan_b`` (both of ``W`` windows) and the migrations: replica
    starts + stops summed over windows, a shared GPU counted once per window (not once per resident)."""
    ra, rb = _rows(plan_a, W), _rows(plan_b, W)
    zero = (0,) * W
    rows = tuple(RowChange(*k, ra.get(k, zero), rb.get(k, zero)) for k in sorted(ra.keys() | rb.keys())
                 if ra.get(k, zero) != rb.get(k, zero))
    moves = sum(r.added + r.removed for r in rows if not r.shape.startswith("shared"))
    sa = Counter((g.pool, tuple(sorted(g.models))) for g in plan_a.shared)
    sb = Counter((g.pool, tuple(sorted(g.models))) for g in plan_b.shared)
    moves += W * sum(((sa - sb) + (sb - sa)).values())
    return rows, moves


def window_slice(plan: Plan, w: int) -> Plan:
    """``plan``'s replicas in window ``w`` as a one-window plan (counts of one element; the shared GPUs, on all
    day, as they are)."""
    return Plan(replicas={k: (c[w],) for k, c in plan.replicas.items() if c[w]},
                pd_replicas={k: (c[w],) for k, c in plan.pd_replicas.items() if c[w]}, shared=plan.shared)


def gpus_and_list_usd_per_hour(problem: Problem, plan: Plan, *, source: str = "") -> tuple[int, float]:
    """(GPUs, USD per hour) of a one-window ``plan`` at ``problem``'s prices: a replica of (model, pool, tp, pp)
    takes tp x pp GPUs, a prefill/decode replica tp, a shared GPU one; each GPU-hour at its pool's
    ``usd_per_gpu_hour`` (the list price the plan uses for a used GPU-hour; commitments, starts and egress are not
    in it). Raises InputError when a row names a pool ``problem`` does not have (``source`` names its origin)."""
    gpus = 0
    usd = 0.0
    rows = ([(k[1], k[2] * k[3], c[0]) for k, c in plan.replicas.items()]
            + [(k[2], k[3], c[0]) for k, c in plan.pd_replicas.items()] + [(g.pool, 1, 1) for g in plan.shared])
    for pool_id, per_replica, n in rows:
        pool = problem.pool_by_id.get(pool_id)
        if pool is None:
            raise InputError(f"pool {pool_id!r} is not a pool of the plan's scenario (its pools: "
                             f"{', '.join(problem.pool_by_id)}); compare with a plan of the same scenario",
                             source=source or None, field="pool", value=pool_id)
        gpus += per_replica * n
        usd += per_replica * n * pool.usd_per_gpu_hour
    return gpus, usd


@dataclass(frozen=True)
class WindowDiff:
    """One window of a plan against the replicas running at one point in time (a stored service plan, the
    cluster): what applying the plan's window would change.

    Attributes:
        rows: rows that differ, one window each (``before`` = running, ``after`` = the plan's window).
        window: the plan's window compared; window_start_s / window_length_s: its start in the day and length, s.
        gpus_before / gpus_after: GPUs running / in the plan's window.
        list_usd_per_hour_before / list_usd_per_hour_after: those GPUs at the plan's per-GPU-hour prices
            (:func:`gpus_and_list_usd_per_hour`), USD/h.
        migrations: replica starts + stops (a shared GPU counted once).
    """

    rows: tuple[RowChange, ...]
    window: int
    window_start_s: float
    window_length_s: float
    gpus_before: int
    gpus_after: int
    list_usd_per_hour_before: float
    list_usd_per_hour_after: float
    migrations: int

    @property
    def list_delta_usd_per_hour(self) -> float:
        """The plan's window minus what runs, at the plan's per-GPU-hour prices, USD/h."""
        return self.list_usd_per_hour_after - self.list_usd_per_hour_before


def only_sites(problem: Problem, plan: Plan, sites: frozenset[str]) -> Plan:
    """``plan``'s rows (replicas, prefill/decode replicas, shared GPUs) on pools of ``sites`` only (pools looked up
    in ``problem``; a pool it lacks is kept, for :func:`gpus_and_list_usd_per_hour` to refuse)."""
    def keep(pool_id: str) -> bool:
        pool = problem.pool_by_id.get(pool_id)
        return pool is None or pool.site in sites
    return Plan(replicas={k: c for k, c in plan.replicas.items() if keep(k[1])},
                pd_replicas={k: c for k, c in plan.pd_replicas.items() if keep(k[2])},
                shared=tuple(g for g in plan.shared if keep(g.pool)))


def diff_window(problem: Problem, plan: Plan, w: int, running: Plan, *, source: str = "",
                sites: frozenset[str] | None = None) -> WindowDiff:
    """Window ``w`` of ``plan`` (on ``problem``) against ``running``, a one-window plan of what runs now
    (:func:`fleetplan.export.cluster.cluster_replicas`, a stored service plan); with ``sites``, both restricted to
    the pools of those sites (what ``running`` is known to cover). Raises InputError when ``w`` is not a window of
    the plan or ``running`` names a pool the plan's scenario lacks."""
    if not 0 <= w < problem.n_windows:
        raise InputError(f"window {w} is not one of the plan's {problem.n_windows} windows", field="--at", value=w)
    after = window_slice(plan, w)
    if sites is not None:
        after, running = only_sites(problem, after, sites), only_sites(problem, running, sites)
    rows, moves = _changes(running, after, 1)
    gb, ub = gpus_and_list_usd_per_hour(problem, running, source=source)
    ga, ua = gpus_and_list_usd_per_hour(problem, after)
    return WindowDiff(rows, w, w * problem.window_length_s, problem.window_length_s, gb, ga, ub, ua, moves)


def window_diff_to_dict(d: WindowDiff) -> dict:
    """The JSON form of a :class:`WindowDiff` (``fleetplan diff PLAN --cluster/--db --format json``)."""
    return {"window": d.window, "window_start_s": d.window_start_s, "window_length_s": d.window_length_s,
            "gpus_running": d.gpus_before, "gpus_plan": d.gpus_after,
            "list_usd_per_hour_running": round(d.list_usd_per_hour_before, 2),
            "list_usd_per_hour_plan": round(d.list_usd_per_hour_after, 2),
            "list_delta_usd_per_hour": round(d.list_delta_usd_per_hour, 2), "migrations": d.migrations,
            "rows": [{"model": r.model, "pool": r.pool, "shape": r.shape, "running": r.before[0],
                      "plan": r.after[0], "added": r.added, "removed": r.removed} for r in d.rows]}


def diff_to_dict(d: PlanDiff) -> dict:
    """The JSON form of a :class:`PlanDiff` (``fleetplan diff --format json``)."""
    return {"cost_before_usd_per_day": round(d.cost_before_usd_per_day, 2),
            "cost_after_usd_per_day": round(d.cost_after_usd_per_day, 2),
            "cost_delta_usd_per_day": round(d.cost_delta_usd_per_day, 2),
            "migrations": d.migrations, "window_length_s": d.window_length_s,
            "rows": [{"model": r.model, "pool": r.pool, "shape": r.shape, "before": list(r.before),
                      "after": list(r.after), "replica_windows_added": r.added,
                      "replica_windows_removed": r.removed, "windows_changed": r.windows()} for r in d.rows]}
