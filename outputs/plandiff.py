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


def _rows(problem: Problem, plan: Plan) -> dict[tuple[str, str, str], tuple[int, ...]]:
    W = problem.n_windows
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
    """Plan B against plan A. Raises InputError when their windows differ (number or length): a window-by-window
    difference of plans on other clocks would compare unlike hours."""
    if (problem_a.n_windows, problem_a.window_length_s) != (problem_b.n_windows, problem_b.window_length_s):
        raise InputError(f"the plans have different windows ({problem_a.n_windows} x {problem_a.window_length_s:g} s "
                         f"vs {problem_b.n_windows} x {problem_b.window_length_s:g} s); plan both with the same "
                         "options.window_length_s to compare them", field="window_length_s",
                         value=problem_b.window_length_s)
    W = problem_a.n_windows
    ra, rb = _rows(problem_a, plan_a), _rows(problem_b, plan_b)
    zero = (0,) * W
    rows = tuple(RowChange(*k, ra.get(k, zero), rb.get(k, zero)) for k in sorted(ra.keys() | rb.keys())
                 if ra.get(k, zero) != rb.get(k, zero))
    # A shared GPU carries several residents: count it once per GPU, not once per resident.
    moves = sum(r.added + r.removed for r in rows if not r.shape.startswith("shared"))
    sa = Counter((g.pool, tuple(sorted(g.models))) for g in plan_a.shared)
    sb = Counter((g.pool, tuple(sorted(g.models))) for g in plan_b.shared)
    moves += W * sum(((sa - sb) + (sb - sa)).values())
    return PlanDiff(rows, _per_day_usd(problem_a, plan_a), _per_day_usd(problem_b, plan_b), problem_a.window_length_s,
                    moves)


def diff_to_dict(d: PlanDiff) -> dict:
    """The JSON form of a :class:`PlanDiff` (``fleetplan diff --format json``)."""
    return {"cost_before_usd_per_day": round(d.cost_before_usd_per_day, 2),
            "cost_after_usd_per_day": round(d.cost_after_usd_per_day, 2),
            "cost_delta_usd_per_day": round(d.cost_delta_usd_per_day, 2),
            "migrations": d.migrations, "window_length_s": d.window_length_s,
            "rows": [{"model": r.model, "pool": r.pool, "shape": r.shape, "before": list(r.before),
                      "after": list(r.after), "replica_windows_added": r.added,
                      "replica_windows_removed": r.removed, "windows_changed": r.windows()} for r in d.rows]}
