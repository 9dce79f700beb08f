"""Every option a plan does not use, and why: left out when the problem was built (a measured profile that does
not vouch for the SLO, the SLO out of reach, the memory, the node size) or built but not chosen by the solver.

The build-time reasons are the scenario builder's notes (``Problem.option_notes``: '<option>: <reason>'); this
module sorts each into a category with the fix, so that no option disappears from a plan without a word (issue 26,
item 7: an AIBrix profile at the mean percentile dropped the A100 tp1 option and the plan said nothing).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from fleetplan.placement.plan import Plan
from fleetplan.placement.problem import Problem

#: Why an option is not in the plan.
Category = Literal["dropped_profile", "slo_infeasible", "memory", "node_size", "not_chosen", "other"]

#: The fix per category of a build-time drop (the reason itself may carry a more specific one).
FIXES: dict[str, str] = {
    "dropped_profile_slo": ("re-measure the profile so that it vouches for the scenario's targets (TTFT and TPOT at "
                        "a percentile >= the SLO's, e.g. an AIBrix profile with slos {percentile: 95, ttft: ..., "
                        "tpot: ...}, or vllm bench serve --metric-percentiles 95), or drop the profile for this GPU "
                        "and tp so that the calibrated roofline sizes the option"),
    "dropped_profile": ("give a profile that covers this case (a step-time CSV covers shared GPUs and other token "
                        "mixes), or drop the profile for this GPU and tp so that the calibrated roofline sizes it"),
    "slo_infeasible": "relax the target, or list a larger tp or a faster GPU type",
    "memory": "list a larger tp, a smaller weight_dtype / kv_dtype, or a GPU type with more memory",
    "node_size": "list a tp that divides the node size",
    "other": "see the reason",
}

_PROFILE = re.compile(r"profile|throughput table|the table's SLO|measured", re.IGNORECASE)
_MEMORY = re.compile(r"weights|KV|memory|context|min_batch", re.IGNORECASE)
_SLO = re.compile(r"TTFT|TPOT|exceeds the target|SLO", re.IGNORECASE)


def categorize(reason: str) -> str:
    """The :data:`Category` of a build-time note's reason (a profile first: its reason may name an SLO)."""
    if _PROFILE.search(reason):
        return "dropped_profile"
    if "does not fit its" in reason:
        return "node_size"
    if _MEMORY.search(reason):
        return "memory"
    if _SLO.search(reason):
        return "slo_infeasible"
    return "other"


def _split_note(note: str) -> tuple[str, str]:
    """(option label, reason) of a builder note '<label>: <reason>' (pool ids hold ':' but not ': ')."""
    label, sep, reason = note.partition(": ")
    return (label, reason) if sep else ("", note)


def options_not_used(problem: Problem, plan: Plan) -> list[dict[str, Any]]:
    """Every option of ``problem`` without a replica in ``plan`` and every option left out at build time.

    Returns a list of {model, option, category (:data:`Category`), reason, fix}: first each model's build-time
    drops in the builder's order, then the built options the solver did not choose, with their cost per req/s of
    capacity (USD/h per req/s: GPUs × the pool's busy price / capacity) beside the cheapest the plan uses for that
    model, so that 'not chosen' can be checked.
    """
    out: list[dict[str, Any]] = []
    for m in problem.models:
        for note in problem.option_notes.get(m.name, ()):
            label, reason = _split_note(note)
            cat = categorize(reason if label else note)
            slo_case = cat == "dropped_profile" and re.search(r"SLO|percentile", reason)
            out.append({"model": m.name, "option": label, "category": cat, "reason": reason,
                        "fix": FIXES["dropped_profile_slo" if slo_case else cat]})
    pools = problem.pool_by_id
    used = {k for k, v in plan.replicas.items() if any(v)}
    shared_used = {(name, g.pool) for g in plan.shared for name in g.models}
    per_req: dict[str, list[float]] = {}
    for o in problem.options:
        if (o.model, o.pool, o.tp, o.pp) in used:
            per_req.setdefault(o.model, []).append(o.gpus * pools[o.pool].usd_per_busy_gpu_hour
                                                   / o.capacity_req_per_s)
    for s in problem.share_options:
        if (s.model, s.pool) in shared_used:
            per_req.setdefault(s.model, []).append(pools[s.pool].usd_per_busy_gpu_hour / s.capacity_req_per_s)
    for o in problem.options:
        if (o.model, o.pool, o.tp, o.pp) in used:
            continue
        cost = o.gpus * pools[o.pool].usd_per_busy_gpu_hour / o.capacity_req_per_s
        out.append(_not_chosen(o.model, f"{o.pool} tp {o.tp}" + (f" pp {o.pp}" if o.pp > 1 else ""), cost,
                               per_req.get(o.model)))
    for s in problem.share_options:
        if (s.model, s.pool) not in shared_used:
            out.append(_not_chosen(s.model, f"{s.pool} shared", pools[s.pool].usd_per_busy_gpu_hour
                                   / s.capacity_req_per_s, per_req.get(s.model)))
    return out


def _not_chosen(model: str, label: str, usd_per_req_s: float, used: list[float] | None) -> dict[str, Any]:
    """The entry of a built option the solver did not choose."""
    best = f"; the cheapest the plan uses for {model}: {min(used):.3g}" if used else ""
    return {"model": model, "option": label, "category": "not_chosen",
            "reason": f"not chosen by the solver: {usd_per_req_s:.3g} USD/h per req/s of capacity{best} (whole "
                      "replicas per window, the margin and the inventory decide the mix)",
            "fix": ""}


def summary_line(entries: list[dict[str, Any]]) -> str:
    """One line counting the entries of :func:`options_not_used` per category, e.g. 'options not used: 2
    dropped_profile, 5 not_chosen' ('' when there are none)."""
    counts: dict[str, int] = {}
    for e in entries:
        counts[e["category"]] = counts.get(e["category"], 0) + 1
    if not counts:
        return ""
    return ("options not used: " + ", ".join(f"{n} {c}" for c, n in counts.items())
            + " (options_not_used in -o json; each with its reason in -o wide)")


def dropped_profile_warnings(entries: list[dict[str, Any]]) -> list[str]:
    """One warning per option a measured profile left out: model, option, reason and fix."""
    return [f"warning: {e['model']} {e['option']} is not planned: {e['reason']}; fix: {e['fix']}"
            for e in entries if e["category"] == "dropped_profile"]
