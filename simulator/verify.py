"""Replay-verified planning (``fleetplan plan --verify``): plan, replay the plan's own day, tighten, plan again.

Loop (at most ``max_rounds`` re-plans):

1. Build the problem (with the derating so far) and solve it; the plan is re-checked by
   :func:`fleetplan.placement.validate.validate`.
2. Replay it with :func:`fleetplan.simulator.replay.simulate_day` (the same replay ``fleetplan simulate`` runs).
3. For every model-window that misses a target (:meth:`~fleetplan.simulator.metrics.ModelWindowMetrics.misses`:
   a latency at its percentile more than 2% above target, or attainment below target), every option that model uses
   in that window (its dedicated replica types and its shared-GPU residences) is derated: its capacity is multiplied
   by min(target / replayed) over its missed latency targets (the attainment target counts as 0.95), clamped to
   [MIN_STEP, MAX_STEP] so each round tightens by a bounded amount. Factors multiply across rounds.
4. Stop when the replay meets every target, or when an option's cumulative factor would fall below
   MIN_FACTOR or the rounds run out: the report then lists the model-windows that still miss.

The derating is a correction learned from the replay, not physics: the report says, per option, the factor and the
misses that caused it. The replay is seeded, so the verification is deterministic for a seed; a different seed is a
fresh sample of the same day.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from fleetplan.errors import FleetplanError, InputError
from fleetplan.outputs.planio import per_day_factor
from fleetplan.placement.plan import Plan, evaluate
from fleetplan.placement.problem import DeratingKey, Problem
from fleetplan.placement.validate import validate
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.read import Scenario
from fleetplan.simulator.metrics import SimReport
from fleetplan.simulator.replay import simulate_day
from fleetplan.solvers.solve import solve

#: Smallest and largest factor one round applies to an option's capacity.
MIN_STEP, MAX_STEP = 0.7, 0.97
#: An option derated below this cumulative factor is reported as unable to meet its targets.
MIN_FACTOR = 0.3


@dataclass(frozen=True)
class VerifyRound:
    """One plan-and-replay round: its cost, the replay's attainment and misses [(model, window, targets)]."""

    round: int
    cost_usd_per_day: float
    attainment: float
    misses: list[tuple[str, int, list[str]]]


@dataclass
class VerifyResult:
    """Outcome of :func:`verify_plan`.

    Attributes:
        problem, plan, report: the last round's problem (derated), plan and replay.
        derating: per option key (:data:`~fleetplan.placement.problem.DeratingKey`), (cumulative factor, reasons).
        rounds: every round, first (the plain plan) to last.
        ok: True when the last replay meets every target.
        unmet: the last replay's misses when not ok, [(model, window, targets)].
        message: one line on how it ended.
    """

    problem: Problem
    plan: Plan
    report: SimReport
    derating: dict[DeratingKey, tuple[float, list[str]]] = field(default_factory=dict)
    rounds: list[VerifyRound] = field(default_factory=list)
    ok: bool = False
    unmet: list[tuple[str, int, list[str]]] = field(default_factory=list)
    message: str = ""


def _options_used(plan: Plan, model: str, w: int) -> list[DeratingKey]:
    """Option keys ``model`` uses in window ``w`` of ``plan``: dedicated replica types, shared residences, and
    prefill and decode options ((model, pool, role, tp): one factor per role and shape, whatever the decode site)."""
    keys: list[DeratingKey] = [k for k, counts in plan.replicas.items() if k[0] == model and counts[w] > 0]
    keys += sorted({(model, g.pool, "shared", 1) for g in plan.shared if model in g.models})
    keys += sorted({(model, k[2], k[1], k[3]) for k, counts in plan.pd_replicas.items()
                    if k[0] == model and counts[w] > 0})
    return keys


def _step_factor(row_misses: list[str], row) -> float:
    """The factor one round applies for one missed model-window row (module docstring, point 3)."""
    slo = row.slo
    measured = {"ttft": row.ttft_at_target_s, "tpot": row.tpot_at_target_s, "e2e": row.e2e_at_target_s}
    f = 1.0
    for metric, _, target in slo.targets():
        v = measured[metric]
        if math.isfinite(v) and v > target:
            f = min(f, target / v)
    if any(m.startswith("attainment") for m in row_misses):
        f = min(f, 0.95)
    return min(MAX_STEP, max(MIN_STEP, f))


def verify_plan(scenario: Scenario, *, backend: str = "highs", solve_options: dict | None = None,
                max_rounds: int = 6, seed: int = 0, slice_s: float | None = None,
                progress: Callable[[str], None] | None = None) -> VerifyResult:
    """Plan ``scenario`` and tighten it until its own replay meets every target (module docstring).

    Args:
        scenario: as :func:`fleetplan.scenario.read.load_scenario` returns it.
        backend, solve_options: passed to :func:`fleetplan.solvers.solve.solve` (time_limit_s, threads, gap).
        max_rounds: re-plans after the first plan (0: replay and report only).
        seed, slice_s: of the replay (:func:`fleetplan.simulator.replay.simulate_day`; whole windows by default).
        progress: called with short status texts.

    Raises FleetplanError when a round finds no plan or a plan fails the independent check; InputError for a
    scenario with options.host_tier (the replay has no host KV tier: it would derate the tier's capacity away).
    """
    if scenario.options.get("host_tier"):
        raise InputError("--verify replays without a host KV tier (the replay does not model options.host_tier), "
                         "so it would take the tier's capacity back; drop --verify, or drop host_tier to verify the "
                         "HBM-only plan", source=scenario.source, field="options.host_tier")
    say = progress or (lambda _s: None)
    derating: dict[DeratingKey, tuple[float, list[str]]] = {}
    rounds: list[VerifyRound] = []
    for r in range(max_rounds + 1):
        say(f"verify round {r}: planning")
        problem = build_problem(scenario, derating={k: f for k, (f, _) in derating.items()})
        plan = solve(problem, backend, **(solve_options or {}))
        if not plan.has_solution:
            raise FleetplanError(f"verify round {r}: no plan ({plan.status.value}): {plan.message}")
        check = validate(problem, plan)
        if not check.ok:
            raise FleetplanError(f"verify round {r}: the plan fails the independent check: "
                                 + "; ".join(check.violations[:5]))
        say(f"verify round {r}: replaying the day")
        def replay_progress(text: str, r: int = r) -> None:
            say(f"verify round {r}: replay {text}")

        rep = simulate_day(problem, plan, scenario, seed=seed, slice_s=slice_s, progress=replay_progress)
        misses = rep.misses()
        cost = evaluate(problem, plan).total_usd * per_day_factor(problem)
        rounds.append(VerifyRound(r, cost, rep.attainment(), misses))
        if not misses:
            return VerifyResult(problem, plan, rep, derating, rounds, ok=True,
                                message=f"every target met in the replay after {r} re-plan(s)")
        if r == max_rounds:
            break
        rows = {(x.model, x.window): x for x in rep.rows}
        step: dict[DeratingKey, tuple[float, list[str]]] = {}
        for model, w, targets in misses:
            f = _step_factor(targets, rows[(model, w)])
            for key in _options_used(plan, model, w):
                old_f, why = step.get(key, (1.0, []))
                step[key] = (min(old_f, f), why + [f"round {r} window {w}: {'; '.join(targets)}"])
        floor_hit = []
        for key, (f, why) in step.items():
            old_f, old_why = derating.get(key, (1.0, []))
            new_f = old_f * f
            if new_f < MIN_FACTOR:
                floor_hit.append(key)
                continue
            derating[key] = (new_f, old_why + why)
        if floor_hit and len(floor_hit) == len(step):
            break
    return VerifyResult(problem, plan, rep, derating, rounds, ok=False, unmet=misses,
                        message=f"{len(misses)} model-window(s) still miss a target after {len(rounds) - 1} "
                                f"re-plan(s)" + (" (derating floor reached)" if len(rounds) - 1 < max_rounds else ""))


def _key_text(key: DeratingKey) -> str:
    model, pool, tp, pp = key
    if tp in ("prefill", "decode"):
        return f"{model} {tp} on {pool} tp{pp}"
    return f"{model} on {pool} " + ("shared" if tp == "shared" else f"tp{tp}" + (f"xpp{pp}" if pp > 1 else ""))


def verify_to_dict(vr: VerifyResult) -> dict:
    """JSON-ready summary of a :class:`VerifyResult`: ok, message, rounds, derating per option, unmet misses."""
    return {"ok": vr.ok, "message": vr.message,
            "rounds": [{"round": r.round, "cost_usd_per_day": r.cost_usd_per_day, "attainment": r.attainment,
                        "misses": [{"model": m, "window": w, "targets": t} for m, w, t in r.misses]}
                       for r in vr.rounds],
            "derating": [{"option": _key_text(k), "key": list(k), "factor": f, "why": why}
                         for k, (f, why) in vr.derating.items()],
            "unmet": [{"model": m, "window": w, "targets": t} for m, w, t in vr.unmet]}


def verify_text(vr: VerifyResult) -> str:
    """The --verify report as plain text: rounds (cost, attainment, misses), derating per option and why."""
    lines = [f"replay verification: {vr.message}"]
    for r in vr.rounds:
        lines.append(f"  round {r.round}: ${r.cost_usd_per_day:,.2f}/day, replay attainment {r.attainment:.1%}, "
                     f"{len(r.misses)} model-window(s) missing a target")
    if vr.derating:
        lines.append("derating (capacity × factor, from the replay's misses):")
        for k, (f, why) in sorted(vr.derating.items(), key=lambda kv: kv[1][0]):
            shown = why[:3] + ([f"... {len(why) - 3} more"] if len(why) > 3 else [])
            lines.append(f"  {_key_text(k)}: × {f:.3f} because " + "; ".join(shown))
    for m, w, t in vr.unmet:
        lines.append(f"  still missed: {m} window {w}: {'; '.join(t)}")
    return "\n".join(lines)
