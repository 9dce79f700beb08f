"""Plans to and from JSON: the file ``fleetplan plan --out plan.json`` writes and ``fleetplan simulate`` and the
service read. The scenario is embedded, so a plan file can be replayed without the scenario file.

Format (version 1): status, backend, cost_usd_per_day, gpu_hours_per_day, lower_bound_usd_per_day, gap,
solve_time_s, message, cost_breakdown_usd_per_day {gpu, starts, egress, of_which_commitments (the commitments' part
of gpu, when any)}, utilization {mean, peak}, window_length_s, n_windows, pools [{id, site, gpu, nodes,
gpus_per_node, usd_per_gpu_hour, pricing_model, price_source, and when set: price_as_of, name,
committed_usd_per_gpu_hour, interruption_rate, fallback, price_warning}] (the price each pool used and where it came
from: the user's row, the scenario, or the catalog snapshot, whose date is price_as_of: YYYY-MM-DD or 'undated';
price_warning: why a price given in the scenario looks like a mistake next to the catalog's),
commitments [{pool, gpus, deployed_share, load_share, committed_usd_per_gpu_hour,
committed_price_source, on_demand_usd_per_gpu_hour, on_demand_price_source, break_even_utilization}] (only for a
problem with committed pools: the GPUs committed for the whole horizon, the share of their GPU-hours with a replica
deployed, the share busy with load, and committed rate / on-demand rate), replicas [{model, pool, site, gpu, tp, pp,
capacity_req_per_s, capacity_source, counts[], class_capacity_req_per_s {class: req/s} (only for a model with
request classes)}], shared_gpus [{pool, site, gpu, models[], served_req_per_s {model: []} (the load the plan
allocates to the GPU), capacity_req_per_s {model} (what the GPU serves of that model alone within its SLO, before the
margin), load_share [] (per window: the share of the GPU's compute its load takes, Σ served / capacity, at most
1 − margin), capacity_source {model}}], windows [{index, start_s, gpus, utilization, demand_req_per_s {model},
capacity_req_per_s {model} (the dedicated replicas' usable capacity, after the margin, plus the load allocated to
the model's shared GPUs: for a shared GPU its load, not what it could serve), replicas {model: {"gpu@site tpN":
n}}}] (a named pool's label is "gpu@site [name]"), baselines {name:
{cost_usd_per_day, gpu_hours_per_day, valid, message}}, validation {ok, violations}, scenario {name, source, raw},
best_effort (true when demand is left unserved), unserved_req_per_s {model: [req/s per window]} (best-effort plans;
empty otherwise; each window's served_req_per_s = demand - unserved, under windows[].served_req_per_s), arrivals
{model: {peak_factor, source}} (models whose capacity is sized for peak_factor × each window's rate: their options'
capacities are already divided by it), options_not_used [{model, option, category, reason, fix}] (every option the
plan does not use and why: :func:`fleetplan.outputs.unused.options_not_used`; not re-checked), capacity_error
{relative, basis} on each replica row and {model: {relative, basis}} on each shared GPU (``fleetplan plan``: the
capacity's expected error, :mod:`fleetplan.scenario.uncertainty`; not re-checked), capacity_margins [{model, window,
margin, capacity_error, holds_at_pessimistic_end}], robust {derating [{key, factor}], plain_cost_usd_per_day,
step_scale} (``plan --robust``: the capacities were planned at the pessimistic end, and with ``step_scale`` true the
latency targets too, as if every step were 1 / factor longer; the reader rebuilds the problem with that derating),
suggested_benchmark (``plan --suggest-benchmark``), arrival_process [{model, assumes, trace, trace_role,
interarrival_cv, index_of_dispersion_60s, peak_factor_60s_p95, advice}] (``fleetplan plan``: the arrival process
each capacity assumes, :mod:`fleetplan.scenario.arrival_notes`; not re-checked),
class_unserved_req_per_s {model: {class: [req/s per window]}} (best-effort plans of models with request classes:
the classes left short; they sum to the model's unserved_req_per_s),
disaggregated plans only: prefill_decode [{model, role (prefill | decode), pool, site, gpu, tp, decode_site,
capacity_req_per_s, kv_transfer_s, capacity_source, counts[]}] and kv_flows [{model, prefill_site, decode_site,
route_class, link, req_per_s[], kv_gb_per_day, prompt_gb_per_day}] (windows[].replicas label them
'prefill'/'decode'). capacity_source says where an option's capacity came from: 'roofline (<GPU> row of <calibration
file>)' or 'measured <format> <file> (...)'. "per day" figures scale the horizon's totals to 24 h (the horizon is a
day for 24 one-hour windows; a shorter horizon is taken to repeat).

Reading (:func:`load_plan_file`): the file is checked against :class:`~fleetplan.outputs.planfile.PlanFile` (wrong
types such as 1.5 or "2" replicas and unknown keys are refused, naming the field path). The plan is the replicas,
shared GPUs and unserved demand on the embedded scenario; every figure derived from them (cost, GPU-hours, cost
breakdown, utilization, pools and prices, each replica's site/GPU/capacity, windows, notes, validation) is
recomputed and must agree with the file, so an edit the reader would otherwise ignore (a lowered cost, a changed
window table) is refused. The solver's report is checked against that cost (:func:`check_report`: the lower bound
at most the cost, the gap (cost - bound) / cost, status optimal only within ``requested_gap``, valid baselines at
least the bound); the bound and the baselines' own costs need a re-solve and are not recomputed. Edited replica
counts are refused too (:data:`EDIT_ADVICE` says why and what to do instead). A file written before the default
engine became vLLM V1 is rebuilt with the prefill-first engine it was planned for (:func:`_pin_prefill_first`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from fleetplan.costmodels.uncertainty import CapacityError
from fleetplan.errors import InputError
from fleetplan.fileio import parse_json, read_text_file, validate_input, yaml12_numbers
from fleetplan.outputs.planfile import PlanFile
from fleetplan.outputs.unused import options_not_used
from fleetplan.placement.plan import (
    Evaluation,
    Plan,
    SharedGPU,
    Status,
    commitments,
    evaluate,
    kv_traffic,
    pool_gpus_per_window,
)
from fleetplan.placement.problem import DeratingKey, Pool, Problem
from fleetplan.placement.validate import validate
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.read import Scenario, scenario_from_raw

FORMAT_VERSION = 1

#: The one advice for a hand-edited plan file. Edited replica counts are not accepted even with the derived figures
#: recomputed: the file's status, lower bound and gap describe the replicas the solver returned, and would be false
#: for any other counts.
EDIT_ADVICE = ("a plan file records one solve and cannot be hand-edited (its status, bound and gap hold only for "
               "the solved replicas): to force replica counts, set min_replicas/max_replicas in the scenario and "
               "re-plan with `fleetplan plan --out`, or replay a fleet of your own with `fleetplan simulate PLAN "
               "--fleet FILE`")


def per_day_factor(problem: Problem) -> float:
    """Multiplier from the horizon's totals to a day's (1 for a 24-hour horizon)."""
    return 24.0 / problem.horizon_hours


def plan_to_dict(problem: Problem, plan: Plan, *, scenario: dict | None = None,
                 baselines: dict[str, Plan] | None = None,
                 capacity_errors: dict[DeratingKey, CapacityError] | None = None) -> dict[str, Any]:
    """A JSON-ready dict of ``plan`` on ``problem`` (see the module docstring); with ``capacity_errors``
    (:func:`fleetplan.scenario.uncertainty.option_errors`) each replica row and shared GPU carries its capacity's
    error ``capacity_error`` {relative, basis} (a shared GPU: per model)."""
    f = per_day_factor(problem)
    ev = evaluate(problem, plan) if plan.has_solution else None
    report = validate(problem, plan) if plan.has_solution else None
    out: dict[str, Any] = {
        "fleetplan_plan_version": FORMAT_VERSION,
        "name": problem.name,
        "status": plan.status.value,
        "backend": plan.backend,
        "cost_usd_per_day": ev.total_usd * f if ev else None,
        "gpu_hours_per_day": ev.gpu_hours * f if ev else None,
        "lower_bound_usd_per_day": plan.bound_usd * f if plan.bound_usd is not None else None,
        "gap": plan.gap,
        **({"requested_gap": plan.requested_gap} if plan.requested_gap is not None else {}),
        "solve_time_s": plan.solve_time_s,
        "message": plan.message,
        "cost_breakdown_usd_per_day": _cost_breakdown(ev, f) if ev else None,
        "utilization": {"mean": ev.mean_utilization, "peak": ev.peak_utilization} if ev else None,
        "window_length_s": problem.window_length_s,
        "n_windows": problem.n_windows,
        "pools": [_pool_entry(p) for p in problem.pools],
        "replicas": _replica_entries(problem, plan),
        "shared_gpus": _shared_entries(problem, plan),
        "windows": _window_entries(problem, plan, ev) if ev else [],
        "notes": list(problem.notes),
        "best_effort": plan.best_effort,
        "unserved_req_per_s": {m: list(v) for m, v in plan.unserved_req_per_s.items()},
        "arrivals": {m.name: {"peak_factor": m.peak_factor, "source": m.peak_factor_source}
                     for m in problem.models if m.peak_factor != 1.0},
        "options_not_used": options_not_used(problem, plan),
    }
    if any(p.committed for p in problem.pools):
        out["commitments"] = _commitment_entries(problem, plan, ev) if plan.has_solution and ev else []
    if plan.class_unserved_req_per_s:
        by_class: dict[str, dict[str, list[float]]] = {}
        for (m, c), v in plan.class_unserved_req_per_s.items():
            by_class.setdefault(m, {})[c] = list(v)
        out["class_unserved_req_per_s"] = by_class
    if plan.pd_replicas or plan.kv_flows_req_per_s:
        out["prefill_decode"] = _pd_entries(problem, plan)
        out["kv_flows"] = _kv_flow_entries(problem, plan, f)
    if baselines:
        out["baselines"] = {name: _baseline_entry(problem, b, f) for name, b in baselines.items()}
    out["validation"] = {"ok": report.ok, "violations": list(report.violations)} if report else None
    if scenario is not None:
        out["scenario"] = scenario
    if capacity_errors:
        for r in out["replicas"]:
            e = capacity_errors.get((r["model"], r["pool"], r["tp"], r["pp"]))
            if e is not None:
                r["capacity_error"] = e.to_dict()
        for g in out["shared_gpus"]:
            g["capacity_error"] = {m: capacity_errors[(m, g["pool"], "shared", 1)].to_dict() for m in g["models"]
                                   if (m, g["pool"], "shared", 1) in capacity_errors}
    return out


def _cost_breakdown(ev: Evaluation, f: float) -> dict[str, float]:
    """GPU, start and egress USD per day (``f``: days per horizon⁻¹), and the commitments' part of the GPU cost
    when there is one."""
    out = {"gpu": ev.gpu_usd * f, "starts": ev.start_usd * f, "egress": ev.egress_usd * f}
    if ev.committed_usd:
        out["of_which_commitments"] = ev.committed_usd * f
    return out


def _replica_entries(problem: Problem, plan: Plan) -> list[dict[str, Any]]:
    """The dedicated replicas: option (model, pool, site, GPU, tp, pp), capacity and its source, counts per
    window; per request class the capacity of a model with classes."""
    pools, opts = problem.pool_by_id, problem.option_by_key
    out = []
    for key, counts in sorted(plan.replicas.items()):
        o = opts[key]
        p = pools[o.pool]
        entry = {"model": o.model, "pool": o.pool, "site": p.site, "gpu": p.gpu, "tp": o.tp, "pp": o.pp,
                 "capacity_req_per_s": o.capacity_req_per_s, "capacity_source": o.capacity_source,
                 "counts": list(counts)}
        if o.class_capacity:  # request classes: the classes this option serves and its capacity for each
            entry["class_capacity_req_per_s"] = o.class_capacity
        if o.engine is not None:  # the engine the capacity assumes (export passes its flags)
            entry["engine"] = o.engine.as_dict()
        out.append(entry)
    return out


def _pd_entries(problem: Problem, plan: Plan) -> list[dict[str, Any]]:
    """The prefill and decode replicas of a disaggregated plan, with their role, decode site and KV transfer."""
    pools, pd_opts = problem.pool_by_id, problem.pd_option_by_key
    out = []
    for pkey, counts in sorted(plan.pd_replicas.items()):
        o = pd_opts[pkey]
        p = pools[o.pool]
        out.append({"model": o.model, "role": o.role, "pool": o.pool, "site": p.site, "gpu": p.gpu, "tp": o.tp,
                    "decode_site": o.decode_site, "capacity_req_per_s": o.capacity_req_per_s,
                    "kv_transfer_s": o.kv_transfer_s, "capacity_source": o.capacity_source, "counts": list(counts)})
    return out


def _kv_flow_entries(problem: Problem, plan: Plan, f: float) -> list[dict[str, Any]]:
    """Per KV route: req/s per window and the KV and prompt GB per day it moves."""
    traffic = kv_traffic(problem, plan)
    routes = problem.kv_route_by_key
    return [{"model": k[0], "prefill_site": k[1], "decode_site": k[2], "route_class": routes[k].route_class,
             "link": routes[k].link, "req_per_s": list(v), "kv_gb_per_day": traffic.gb.get((k, "kv"), 0.0) * f,
             "prompt_gb_per_day": traffic.gb.get((k, "prompt"), 0.0) * f}
            for k, v in sorted(plan.kv_flows_req_per_s.items())]


def _shared_entries(problem: Problem, plan: Plan) -> list[dict[str, Any]]:
    """The shared GPUs: pool, site, GPU, the models on it, what it serves of each (its load, allocated by the plan),
    what it could serve of each alone (its capacity), the share of its compute that load takes per window, and the
    capacity sources."""
    pools, shares = problem.pool_by_id, problem.share_by_key
    out = []
    for g in plan.shared:
        cap = {m: shares[(m, g.pool)].capacity_req_per_s for m in g.models if (m, g.pool) in shares}
        load = [sum(v[w] / cap[m] for m, v in g.served_req_per_s.items() if cap.get(m)) for w in
                range(problem.n_windows)]
        out.append({"pool": g.pool, "site": pools[g.pool].site, "gpu": pools[g.pool].gpu, "models": list(g.models),
                    "served_req_per_s": {m: list(v) for m, v in g.served_req_per_s.items()},
                    "capacity_req_per_s": cap, "load_share": load,
                    "capacity_source": {m: shares[(m, g.pool)].capacity_source for m in g.models
                                        if (m, g.pool) in shares}})
    return out


def _window_replicas(problem: Problem, plan: Plan, w: int) -> dict[str, dict[str, int]]:
    """{model: {replica label: count}} in window ``w``: 'gpu@site tpN[xppM]', 'ROLE gpu@site tpN[->decode site]'
    and 'gpu@site shared' (one per shared GPU the model is on)."""
    pools, opts, pd_opts = problem.pool_by_id, problem.option_by_key, problem.pd_option_by_key
    reps: dict[str, dict[str, int]] = {}
    for key, counts in plan.replicas.items():
        if counts[w]:
            o = opts[key]
            label = f"{pools[o.pool].label} tp{o.tp}" + (f"xpp{o.pp}" if o.pp > 1 else "")
            reps.setdefault(o.model, {})[label] = counts[w]
    for pkey, counts in plan.pd_replicas.items():
        if counts[w]:
            o = pd_opts[pkey]
            p = pools[o.pool]
            to = f"->{o.decode_site}" if o.role == "prefill" and o.decode_site != p.site else ""
            reps.setdefault(o.model, {})[f"{o.role} {p.label} tp{o.tp}{to}"] = counts[w]
    for g in plan.shared:
        label = f"{pools[g.pool].label} shared"
        for m in g.models:
            reps.setdefault(m, {})[label] = reps.get(m, {}).get(label, 0) + 1
    return reps


def _window_entries(problem: Problem, plan: Plan, ev: Evaluation) -> list[dict[str, Any]]:
    """Per window: start, GPUs, utilization, demand, served and capacity per model, and the replicas."""
    served = plan.served_req_per_s(problem)
    return [{"index": w, "start_s": w * problem.window_length_s, "gpus": ev.gpus_per_window[w],
             "utilization": ev.utilization_per_window[w],
             "demand_req_per_s": {m.name: m.demand_req_per_s[w] for m in problem.models},
             "served_req_per_s": {m: v[w] for m, v in served.items()},
             "capacity_req_per_s": {m: c[w] for m, c in ev.capacity_req_per_s.items()},
             "replicas": _window_replicas(problem, plan, w)} for w in range(problem.n_windows)]


def _baseline_entry(problem: Problem, b: Plan, f: float) -> dict[str, Any]:
    """A baseline's cost and GPU-hours per day, and whether it is a valid plan (no message) or why not."""
    be = evaluate(problem, b)
    return {"cost_usd_per_day": be.total_usd * f, "gpu_hours_per_day": be.gpu_hours * f, "valid": not b.message,
            "message": b.message}


def _pool_entry(p: Pool) -> dict[str, Any]:
    """A pool in a plan file: id, site, GPU, inventory, price and pricing model, and the purchase fields of
    committed and spot pools (only when set, so plans of on-demand pools read as before)."""
    out: dict[str, Any] = {"id": p.id, "site": p.site, "gpu": p.gpu, "nodes": p.nodes,
                           "gpus_per_node": p.gpus_per_node, "usd_per_gpu_hour": p.usd_per_gpu_hour,
                           "pricing_model": p.pricing_model, "price_source": p.price_source}
    if p.price_as_of:
        out["price_as_of"] = p.price_as_of
    if p.price_warning:
        out["price_warning"] = p.price_warning
    if p.name:
        out["name"] = p.name
    if p.committed:
        out["committed_usd_per_gpu_hour"] = p.committed_usd_per_gpu_hour
    if p.interruption_rate or p.fallback_pool:
        out["interruption_rate"] = p.interruption_rate
        out["fallback"] = p.fallback_pool
    return out


def _commitment_entries(problem: Problem, plan: Plan, ev: Evaluation) -> list[dict[str, Any]]:
    """Per committed pool: GPUs committed; ``deployed_share``, the share of their GPU-hours with a replica deployed
    (idle committed GPUs cost nothing more and starts cost money, so a plan may keep replicas up all day: this
    share can be 1 at low load); ``load_share``, the share of their GPU-hours busy with load (the evaluation's busy
    GPUs of the pool, :attr:`Evaluation.busy_gpus_by_pool`: the figure to set against the break-even); the rates
    and the break-even utilization (committed rate / on-demand rate) with the sources of both rates."""
    pools = problem.pool_by_id
    use = pool_gpus_per_window(problem, plan)
    out = []
    for pid, c in commitments(problem, plan).items():
        p = pools[pid]
        deployed = sum(use[pid]) / (c * problem.n_windows) if c else None
        load = sum(ev.busy_gpus_by_pool.get(pid, ())) / (c * problem.n_windows) if c else None
        out.append({"pool": pid, "gpus": c, "deployed_share": deployed, "load_share": load,
                    "committed_usd_per_gpu_hour": p.committed_usd_per_gpu_hour,
                    "committed_price_source": p.price_source,
                    "on_demand_usd_per_gpu_hour": p.on_demand_usd_per_gpu_hour,
                    "on_demand_price_source": p.on_demand_price_source or "unknown (no on-demand price found)",
                    "break_even_utilization": p.break_even_utilization})
    return out


def plan_from_dict(d: dict, problem: Problem | None = None) -> Plan:
    """The :class:`Plan` stored in a plan dict (as written by :func:`plan_to_dict`).

    Raises InputError when the dict is not a fleetplan plan or its replicas do not match ``problem`` (if given).
    """
    if not isinstance(d, dict) or d.get("fleetplan_plan_version") != FORMAT_VERSION:
        raise InputError("not a fleetplan plan file (missing fleetplan_plan_version 1); write one with "
                         "`fleetplan plan --out plan.json`", field="fleetplan_plan_version")
    try:
        fields = _plan_fields(d)
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"plan file is malformed: {exc}; re-create it with `fleetplan plan --out`",
                         field="status" if "status" in str(exc) else "replicas") from None
    if problem is not None:
        _check_plan_keys(problem, fields)
    f = per_day_factor(problem) if problem is not None else 1.0
    cost = d.get("cost_usd_per_day")
    bound = d.get("lower_bound_usd_per_day")
    return Plan(**fields, backend=d.get("backend", ""), objective_usd=cost / f if cost is not None else None,
                bound_usd=bound / f if bound is not None else None, gap=d.get("gap"),
                requested_gap=d.get("requested_gap"), solve_time_s=float(d.get("solve_time_s", 0.0)),
                message=d.get("message", ""))


def _counts(values: Any) -> tuple[int, ...]:
    return tuple(int(c) for c in values)


def _rates(values: Any) -> tuple[float, ...]:
    return tuple(float(x) for x in values)


def _plan_fields(d: dict) -> dict[str, Any]:
    """The :class:`Plan` fields a plan dict stores (replicas, shared GPUs, status, unserved demand, prefill/decode
    replicas, KV flows, commitments), as Plan's keyword arguments. Raises KeyError, TypeError or ValueError for a
    malformed dict."""
    replicas = {(r["model"], r["pool"], int(r["tp"]), int(r["pp"])): _counts(r["counts"]) for r in d["replicas"]}
    shared = tuple(SharedGPU(pool=g["pool"], models=tuple(g["models"]),
                             served_req_per_s={m: _rates(v) for m, v in g["served_req_per_s"].items()})
                   for g in d["shared_gpus"])
    if d["status"] not in {x.value for x in Status}:
        raise ValueError(f"status {d['status']!r} is not one of {', '.join(x.value for x in Status)}")
    return {
        "replicas": replicas,
        "shared": shared,
        "status": Status(d["status"]),
        "unserved_req_per_s": {str(m): _rates(v) for m, v in (d.get("unserved_req_per_s") or {}).items()},
        "class_unserved_req_per_s": {(str(m), str(c)): _rates(v)
                                     for m, row in (d.get("class_unserved_req_per_s") or {}).items()
                                     for c, v in row.items()},
        "pd_replicas": {(r["model"], r["role"], r["pool"], int(r["tp"]), r["decode_site"]): _counts(r["counts"])
                        for r in d.get("prefill_decode") or []},
        "kv_flows_req_per_s": {(r["model"], r["prefill_site"], r["decode_site"]): _rates(r["req_per_s"])
                               for r in d.get("kv_flows") or []},
        "commitments": {str(c["pool"]): int(c["gpus"]) for c in (d.get("commitments") or [])},
    }


def _check_plan_keys(problem: Problem, fields: dict[str, Any]) -> None:
    """Raise InputError when the plan's counts do not have one whole number >= 0 per window of ``problem``, or a
    replica, prefill/decode replica or KV flow names no option or route of it."""
    W = problem.n_windows
    for k, counts in fields["replicas"].items():
        if len(counts) != W or any(c < 0 for c in counts):
            raise InputError(f"plan replica {k} has {len(counts)} counts {list(counts)}; the scenario has {W} "
                             "windows and counts are whole numbers >= 0 (was the file edited?)",
                             field="replicas.counts", value=list(counts))
    for g in fields["shared"]:
        for m, v in g.served_req_per_s.items():
            if len(v) != W:
                raise InputError(f"shared GPU {g.pool} serves {m} in {len(v)} windows; the scenario has {W}",
                                 field="shared_gpus.served_req_per_s", value=list(v))
    opts = problem.option_by_key
    for k in fields["replicas"]:
        if k not in opts:
            raise InputError(f"plan replica {k} is not an option of the scenario (the scenario changed since "
                             "the plan was made?)", field="replicas", value=k)
    for pk in fields["pd_replicas"]:
        if pk not in problem.pd_option_by_key:
            raise InputError(f"plan {pk[1]} replica {pk} is not an option of the scenario (the scenario changed "
                             "since the plan was made?)", field="prefill_decode", value=pk)
    for rk in fields["kv_flows_req_per_s"]:
        if rk not in problem.kv_route_by_key:
            raise InputError(f"plan KV flow {rk} is not a route of the scenario", field="kv_flows", value=rk)


def read_plan_json(path: str | Path) -> dict:
    """Read a plan file; raises InputError when it is missing or not JSON."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"no such plan file {p}; write one with `fleetplan plan --out {p.name}`", source=str(p))
    d = parse_json(read_text_file(p, what="plan file"), source=str(p),
                   what="plan file written by `fleetplan plan --out`")
    if not isinstance(d, dict) or d.get("fleetplan_plan_version") != FORMAT_VERSION:
        raise InputError("not a fleetplan plan file (no fleetplan_plan_version 1); write one with "
                         "`fleetplan plan --out plan.json`", source=str(p), field="fleetplan_plan_version")
    validate_input(PlanFile, d, source=str(p))
    return d


#: Plan-file keys recomputed from the replicas and the embedded scenario, which must agree with the file.
DERIVED_KEYS = ("name", "cost_usd_per_day", "gpu_hours_per_day", "cost_breakdown_usd_per_day", "utilization",
                "window_length_s", "n_windows", "pools", "replicas", "shared_gpus", "windows", "notes", "best_effort",
                "validation", "commitments", "prefill_decode", "kv_flows", "arrivals")


def _first_difference(a: Any, b: Any, path: str) -> tuple[str, Any, Any] | None:
    """(path, value in ``a``, value in ``b``) of the first place two JSON values differ (floats within 1e-9
    relative; a key of ``b`` that ``a`` lacks is no difference), or None."""
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, int | float) or not isinstance(b, int | float):
        if isinstance(a, dict) and isinstance(b, dict):
            for k in a:  # a figure newer versions add may be absent from an older file
                if k not in b:
                    return f"{path}.{k}", a[k], "(absent)"
                diff = _first_difference(a[k], b[k], f"{path}.{k}")
                if diff:
                    return diff
            return None
        if isinstance(a, list) and isinstance(b, list):
            if len(a) != len(b):
                return f"{path} (length)", len(a), len(b)
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                diff = _first_difference(x, y, f"{path}[{i}]")
                if diff:
                    return diff
            return None
        return None if a == b else (path, a, b)
    return None if math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) else (path, a, b)


def check_derived(d: dict, problem: Problem, plan: Plan) -> None:
    """Raise InputError when a derived figure of the plan dict ``d`` (:data:`DERIVED_KEYS`) differs from its
    recomputation from ``plan`` on ``problem``, naming the field path, both values and the fix."""
    again = plan_to_dict(problem, plan)
    for key in DERIVED_KEYS:
        if key not in d:
            continue
        given = d[key]
        if key in ("replicas", "shared_gpus") and isinstance(given, list):  # capacity_error is not re-checked
            given = [{k: v for k, v in r.items() if k != "capacity_error"} if isinstance(r, dict) else r
                     for r in given]
        diff = _first_difference(given, again.get(key), key)
        if diff:
            where, given, computed = diff
            raise InputError(f"says {given!r} but the plan's replicas on its scenario give {computed!r} (it is "
                             "recomputed from them); " + EDIT_ADVICE, field=where.removeprefix("."), value=given)


def check_report(d: dict) -> None:
    """Raise InputError when the solver's report in the plan dict ``d`` contradicts its (already re-checked) cost:
    a lower bound above the cost (unless the file reports that defect itself), a gap other than (cost - bound) /
    cost, a gap without a bound, status optimal without a bound or with a gap above the requested one, or a valid
    baseline cheaper than the proven lower bound (every valid plan costs at least the bound). The bound itself
    needs a re-solve and is not recomputed."""
    cost, bound, gap = d.get("cost_usd_per_day"), d.get("lower_bound_usd_per_day"), d.get("gap")
    status, wanted = d.get("status"), d.get("requested_gap")
    if cost is None:
        return
    tol = 1e-7 * max(1.0, abs(cost))
    if bound is not None and bound > cost + tol and "DEFECT" not in (d.get("message") or ""):
        raise InputError(f"the lower bound {bound!r} is above the plan's cost {cost!r}; " + EDIT_ADVICE,
                         field="lower_bound_usd_per_day", value=bound)
    if bound is None and gap is not None:
        raise InputError(f"a gap {gap!r} without a lower bound; " + EDIT_ADVICE, field="gap", value=gap)
    if bound is not None:
        expected = (cost - bound) / abs(cost) if cost else (0.0 if abs(bound) <= 1e-9 else -math.inf)
        if gap is None or not math.isclose(gap, expected, rel_tol=1e-6, abs_tol=1e-9):
            raise InputError(f"says {gap!r} but (cost - lower bound) / cost is {expected!r}; " + EDIT_ADVICE,
                             field="gap", value=gap)
    if status == Status.OPTIMAL.value:
        if bound is None:
            raise InputError("status optimal without a lower bound; " + EDIT_ADVICE, field="status", value=status)
        if wanted is not None and gap is not None and gap > wanted + 1e-9:
            raise InputError(f"status optimal with a gap of {gap:.2%}, above the requested {wanted:.2%}; "
                             + EDIT_ADVICE, field="status", value=status)
    for name, b in (d.get("baselines") or {}).items():
        bc = b.get("cost_usd_per_day") if isinstance(b, dict) else None
        if bound is not None and b.get("valid") and isinstance(bc, int | float) and bc < bound - tol:
            raise InputError(f"the valid baseline costs {bc!r}, below the proven lower bound {bound!r}; "
                             + EDIT_ADVICE, field=f"baselines.{name}.cost_usd_per_day", value=bc)


def problem_from_plan_dict(d: dict) -> tuple[Problem, Scenario]:
    """Rebuild (Problem, Scenario) from the scenario embedded in a plan dict."""

    sc = d.get("scenario")
    if not isinstance(sc, dict) or "raw" not in sc:
        raise InputError("plan file has no embedded scenario; re-create it with `fleetplan plan --out`",
                         field="scenario")
    src = sc.get("source", "plan file")
    try:
        # Plan files written before YAML 1.2 floats were read as numbers hold e.g. "1.0e9" as text.
        scenario = scenario_from_raw(_pin_prefill_first(yaml12_numbers(sc["raw"]), d), source=src,
                                     base=sc.get("base"), window_length_s=_window_length_s(d, sc))
        # the file's pools (prices and snapshot dates) are re-checked against the rebuilt ones (check_derived)
        return build_problem(scenario, derating=_verify_derating(d), step_scale=_robust_step_scale(d),
                             new_plan=False), scenario
    except InputError as exc:  # the error is in the plan file's copy of the scenario, not in the scenario file
        where = exc.source or ""
        if not where.startswith(src):
            raise
        entry = where[len(src):].lstrip(": ")
        path = ".".join(x for x in ("scenario.raw", entry, exc.field) if x)
        raise InputError(f"{exc.message} (in the plan file's copy of {src}; re-plan the fixed scenario)",
                         field=path, value=exc.value) from None


def _pin_prefill_first(raw: Any, d: dict) -> Any:
    """The embedded scenario ``raw`` of the plan dict ``d``, with ``options.engine: {mode: prefill-first}`` added
    when the plan was made before the default engine became vLLM V1: no ``engine`` key anywhere in the scenario
    (then every model ran the default engine) and an ``engine`` object on the replica rows saying prefill-first
    (the default of that time), so the rebuilt options are the ones the plan was sized with; ``raw`` unchanged
    otherwise (and for a malformed mapping, which the scenario reader reports)."""
    if not isinstance(raw, dict):
        return raw
    opts = raw.get("options")
    models = raw.get("models")
    if not isinstance(models, list) or (isinstance(opts, dict) and opts.get("engine") is not None) \
            or any(isinstance(m, dict) and m.get("engine") is not None for m in models):
        return raw
    rows = [r.get("engine") for r in (d.get("replicas") or []) if isinstance(r, dict)]
    modes = {e.get("mode") for e in rows if isinstance(e, dict)}
    if modes != {"prefill-first"}:
        return raw
    return {**raw, "options": {**(opts if isinstance(opts, dict) else {}), "engine": {"mode": "prefill-first"}}}


def _window_length_s(d: dict, sc: dict) -> float | None:
    """The window length the plan was made with: the file's ``window_length_s``, which the embedded scenario's
    ``window_length_s`` (when given) must equal (the plan's counts are per window of that length)."""
    top, embedded = d.get("window_length_s"), sc.get("window_length_s")
    if embedded is not None and top is not None and not math.isclose(embedded, top, rel_tol=1e-9):
        raise InputError(f"says {embedded:g} s but the plan's window_length_s is {top:g} s; both are the window "
                         "length the plan was made with: re-plan with the window length you want "
                         "(`fleetplan plan --window`)", field="scenario.window_length_s", value=embedded)
    return top


def _verify_derating(d: dict) -> dict:
    """The capacity derating a ``plan --verify`` or ``plan --robust`` run planned with ({option key: factor}, from
    the file's ``verify.derating[].key/factor`` and ``robust.derating[]``, multiplied), so the rebuilt problem is
    the one the plan was made for; {} otherwise."""
    out: dict[tuple, float] = {}
    for part in ("verify", "robust"):
        for i, e in enumerate(((d.get(part) or {}).get("derating")) or []):
            if not (isinstance(e, dict) and isinstance(e.get("key"), list)
                    and isinstance(e.get("factor"), float | int)):
                raise InputError(f"each {part}.derating entry needs its option key (a list) and factor (a number); "
                                 f"re-create the file with `fleetplan plan --{part} --out`",
                                 field=f"{part}.derating[{i}]")
            out[tuple(e["key"])] = out.get(tuple(e["key"]), 1.0) * float(e["factor"])
    return out


def _robust_step_scale(d: dict) -> dict:
    """The step scale a ``plan --robust`` run sized its options with ({option key: 1 − error}: the file's
    ``robust.derating`` when ``robust.step_scale`` is true); {} otherwise, and for robust plans written before
    (``step_scale`` absent), which derated the capacities only."""
    rb = d.get("robust") or {}
    flag = rb.get("step_scale", False)
    if not isinstance(flag, bool):
        raise InputError(f"robust.step_scale must be true or false, got {flag!r}; re-create the file with "
                         "`fleetplan plan --robust --out`", field="robust.step_scale", value=flag)
    if not flag:
        return {}
    return {tuple(e["key"]): float(e["factor"]) for e in rb.get("derating") or []}  # checked by _verify_derating


def load_plan_file(path: str | Path) -> tuple[Problem, Plan, Any, dict]:
    """(problem, plan, scenario, plan dict) from a plan JSON written by ``fleetplan plan --out``, re-checked.

    The problem is rebuilt from the scenario the file embeds, and the plan is re-validated against it by the
    independent :func:`~fleetplan.placement.validate.validate` (inventory, capacity, SLOs, shapes, and the stated
    cost against an independent recomputation), so a hand-edited plan (150 GPUs on an 8-GPU inventory, a changed
    cost) is refused instead of replayed. Raises InputError naming the file and what is wrong.
    """
    d = read_plan_json(path)
    try:
        problem, scenario = problem_from_plan_dict(d)
        plan = plan_from_dict(d, problem)
    except InputError as exc:
        raise InputError(str(exc), source=str(path)) from None
    if not plan.has_solution:
        raise InputError(f"the plan file has no plan (status {plan.status.value})", source=str(path),
                         field="status")
    report = validate(problem, plan)
    if not report.ok:
        more = f" (and {len(report.violations) - 3} more)" if len(report.violations) > 3 else ""
        raise InputError("the plan does not hold for its own scenario: " + "; ".join(report.violations[:3]) + more
                         + "; " + EDIT_ADVICE, source=str(path))
    try:
        check_derived(d, problem, plan)
        check_report(d)
    except InputError as exc:
        raise InputError(str(exc), source=str(path)) from None
    return problem, plan, scenario, d
