"""A plan against its capacities' stated errors (:mod:`fleetplan.scenario.uncertainty`): each model-window's
margin beside the error of the capacity that holds it, whether it holds at the pessimistic end, and the one
benchmark run that would most reduce the plan's cost uncertainty.

Margin of a model-window: 1 − load / capacity of the replicas that serve it (dedicated replicas: the demand they
carry over their summed capacity; a shared GPU: the sum over its residents of served / capacity), the binding part
being the one with the highest load at the pessimistic end (each capacity × (1 − its error)). It holds at the
pessimistic end when that load is at most 1. Plans made with a derating (``--robust``) are judged against the
derated capacities ÷ the factor. For a robust plan sized with the step scale (its targets × (1 − e) too) that is the
capacity at the tightened targets, at most the nominal one: its margins are understated, never overstated.
"""

from __future__ import annotations

import shlex
from typing import Any

from fleetplan.costmodels.demand import TokenMix
from fleetplan.costmodels.uncertainty import CapacityError
from fleetplan.datasets.catalog.models import model_hf_repo
from fleetplan.errors import InputError
from fleetplan.placement.plan import Plan
from fleetplan.placement.problem import DeratingKey, Problem
from fleetplan.scenario.uncertainty import step_time_factors

_EPS = 1e-9


def window_margins(problem: Problem, plan: Plan, errors: dict[DeratingKey, CapacityError],
                   derating: dict[DeratingKey, float] | None = None) -> list[dict[str, Any]]:
    """One entry per model and window with demand and capacity (module docstring): {model, window, margin
    (1 − load, as a fraction of nominal capacity), capacity_error (the relative error of the binding part: 1 −
    pessimistic capacity / nominal), holds_at_pessimistic_end}. ``derating``: the factors the problem's capacities
    were multiplied by (absent: 1). Prefill/decode options are not counted (their load is per KV route)."""
    derating = derating or {}
    opts, shares, W = problem.option_by_key, problem.share_by_key, problem.n_windows
    out = []
    for m in problem.models:
        unserved = plan.unserved_req_per_s.get(m.name, (0.0,) * W)
        mine = [(k, c) for k, c in plan.replicas.items() if k[0] == m.name]
        gpus = [g for g in plan.shared if m.name in g.models]
        for w in range(W):
            if m.demand_req_per_s[w] <= 0:
                continue
            parts: list[tuple[float, float]] = []  # (load at nominal capacity, load at the pessimistic end)
            nominal = pess = 0.0
            for k, counts in mine:
                dk = (k[0], k[1], k[2], k[3])
                cap = counts[w] * opts[k].capacity_req_per_s / derating.get(dk, 1.0)
                nominal += cap
                pess += cap * (1 - _rel(errors, dk))
            carried = m.demand_req_per_s[w] - unserved[w] - sum(g.served_req_per_s[m.name][w] for g in gpus)
            if nominal > 0:
                parts.append((max(carried, 0.0) / nominal, max(carried, 0.0) / pess if pess > 0 else float("inf")))
            for g in gpus:
                u = up = 0.0
                for name, served in g.served_req_per_s.items():
                    sk = (name, g.pool, "shared", 1)
                    cap = shares[(name, g.pool)].capacity_req_per_s / derating.get(sk, 1.0)
                    u += served[w] / cap
                    up += served[w] / (cap * (1 - _rel(errors, sk)))
                parts.append((u, up))
            if not parts:
                continue
            u, up = max(parts, key=lambda p: p[1])
            out.append({"model": m.name, "window": w, "margin": 1 - u,
                        "capacity_error": 1 - u / up if up > 0 else 0.0,
                        "holds_at_pessimistic_end": up <= 1 + _EPS})
    return out


def _rel(errors: dict[DeratingKey, CapacityError], key: DeratingKey) -> float:
    e = errors.get(key)
    return e.relative if e is not None else 0.0


def margin_lines(margins: list[dict[str, Any]]) -> list[str]:
    """Per model one line: its margins' range against its capacity errors, and the windows whose margin is
    smaller than the error (they hold only if the capacity is not below its stated error)."""
    by: dict[str, list[dict[str, Any]]] = {}
    for e in margins:
        by.setdefault(e["model"], []).append(e)
    lines = []
    for model, rows in by.items():
        short = [r["window"] for r in rows if not r["holds_at_pessimistic_end"]]
        lo, hi = min(r["margin"] for r in rows), max(r["margin"] for r in rows)
        err = sorted({round(r["capacity_error"], 3) for r in rows})
        err_text = f"{err[0]:.1%}" if len(err) == 1 else f"{err[0]:.1%}-{err[-1]:.1%}"
        lines.append(f"{model}: margin {lo:.1%}-{hi:.1%} against capacity error {err_text}: "
                     + (f"margin smaller than the error in {len(short)} of {len(rows)} windows "
                        f"({', '.join(map(str, short))}): they miss at the pessimistic end" if short
                        else f"holds at the pessimistic end in all {len(rows)} windows"))
    return lines


def cost_at_risk(problem: Problem, plan: Plan, errors: dict[DeratingKey, CapacityError]) -> list[dict[str, Any]]:
    """Per option the plan uses, the first-order cost its capacity error puts at risk, USD per day: its GPU cost
    × (1 / (1 − e) − 1), the replicas it would need more if its capacity were e lower (shared GPUs: the GPU's cost
    × the largest resident error's factor). Sorted by that cost, highest first; entries {key, usd_per_day,
    relative, basis}."""
    f = 24.0 / problem.horizon_hours
    pools, opts, hours = problem.pool_by_id, problem.option_by_key, problem.window_hours
    out = []
    for k, counts in plan.replicas.items():
        o = opts[k]
        usd = sum(counts) * o.gpus * pools[o.pool].usd_per_gpu_hour * hours * f
        e = errors.get((k[0], k[1], k[2], k[3]))
        if e is not None and usd > 0:
            out.append({"key": (k[0], k[1], k[2], k[3]), "usd_per_day": usd * (1 / (1 - e.relative) - 1),
                        "relative": e.relative, "basis": e.basis})
    for g in plan.shared:
        usd = pools[g.pool].usd_per_gpu_hour * hours * problem.n_windows * f
        for name in g.models:
            e = errors.get((name, g.pool, "shared", 1))
            if e is not None:
                out.append({"key": (name, g.pool, "shared", 1), "usd_per_day": usd * (1 / (1 - e.relative) - 1)
                            / len(g.models), "relative": e.relative, "basis": e.basis})
    return sorted(out, key=lambda r: -r["usd_per_day"])


def suggest_benchmark(problem: Problem, plan: Plan, errors: dict[DeratingKey, CapacityError],
                      mixes: dict[str, TokenMix], *, minutes_per_rate: float = 5.0) -> dict[str, Any] | None:
    """The one benchmark run that would most reduce the plan's cost uncertainty: the used option, not already
    measured, with the largest :func:`cost_at_risk`; its model, GPU, tp, the request rates to sweep (its nominal
    capacity × (1 − e), 1, (1 + e), the rate where the targets stop holding lies there by the stated error) and the
    ``vllm serve`` / ``vllm bench serve`` command lines (random prompts of the mix's mean lengths, p95 TTFT and
    TPOT reported, ``minutes_per_rate`` of requests per rate). None when every used option is measured."""
    risk = [r for r in cost_at_risk(problem, plan, errors) if r["basis"] != "measured"]
    if not risk:
        return None
    top = risk[0]
    model, pool_id, tp, _pp = top["key"]
    pool = problem.pool_by_id[pool_id]
    spec = problem.model_by_name[model]
    o = problem.option_by_key.get((model, pool_id, tp, _pp)) if tp != "shared" else None
    cap = (o.capacity_req_per_s if o is not None else problem.share_by_key[(model, pool_id)].capacity_req_per_s)
    nominal = cap * spec.peak_factor / (1 - pool.interruption_rate)
    e = top["relative"]
    rates = [round(nominal * x, 2) for x in (1 - e, 1.0, 1 + e)]
    mix = mixes[model]
    repo = model_hf_repo(model) or model
    tp_n = 1 if tp == "shared" else int(tp)
    serve = f"vllm serve {shlex.quote(repo)} --tensor-parallel-size {tp_n}"
    bench = [f"vllm bench serve --model {shlex.quote(repo)} --dataset-name random "
             f"--random-input-len {round(mix.input_tokens_mean)} --random-output-len {round(mix.output_tokens_mean)} "
             f"--request-rate {r:g} --num-prompts {max(100, round(r * minutes_per_rate * 60))} "
             "--percentile-metrics ttft,tpot,e2el --metric-percentiles 50,95,99 --save-result "
             f"--result-filename {shlex.quote(f'bench-{model}-{pool.gpu}-tp{tp_n}-{r:g}qps.json')}" for r in rates]
    others = sum(r["usd_per_day"] for r in risk[1:])
    return {"model": model, "gpu": pool.gpu, "tp": tp_n, "pool": pool_id, "rates_req_per_s": rates,
            "capacity_req_per_s": nominal, "capacity_error": e, "basis": top["basis"],
            "usd_per_day_at_risk": top["usd_per_day"], "usd_per_day_at_risk_other_options": others,
            "serve_command": serve, "bench_commands": bench,
            "then": f"fleetplan plan --profile {model}@{pool.gpu}:tp{tp_n}=bench-{model}-{pool.gpu}-tp{tp_n}-*.json"}


def stated_step_time_factors(plan_dict: dict[str, Any]) -> dict[DeratingKey, float]:
    """{option key ((model, pool, tp, pp); (model, pool, 'shared', 1) for a shared GPU's resident): 1 / (1 − e)}
    for every capacity error ``e`` a plan file states (``replicas[].capacity_error.relative`` and
    ``shared_gpus[].capacity_error[model].relative``, written by ``fleetplan plan``): the factor that stretches the
    option's step times so its capacity is at the pessimistic end of that error (a replica ``1 / (1 − e)`` times
    slower serves ``(1 − e)`` times the rate). Options without a stated error, or with 0, are left out (factor 1).

    Raises InputError naming the row and field for an error that is not a number in [0, 1)."""
    stated: dict[DeratingKey, CapacityError] = {}

    def error(where: str, e: Any) -> CapacityError:
        rel = e.get("relative") if isinstance(e, dict) else None
        if isinstance(rel, bool) or not isinstance(rel, (int, float)) or not 0 <= rel < 1:
            raise InputError(f"{where}.capacity_error.relative must be a number in [0, 1), got {rel!r}; "
                             "write the plan again with `fleetplan plan --out`", field=f"{where}.capacity_error",
                             value=rel)
        return CapacityError(float(rel), str(e.get("basis", "")), "stated in the plan file")

    for i, r in enumerate(plan_dict.get("replicas") or []):
        if r.get("capacity_error") is not None:
            stated[(r["model"], r["pool"], r["tp"], r["pp"])] = error(f"replicas[{i}]", r["capacity_error"])
    for i, g in enumerate(plan_dict.get("shared_gpus") or []):
        for m, e in (g.get("capacity_error") or {}).items():
            stated[(m, g["pool"], "shared", 1)] = error(f"shared_gpus[{i}][{m}]", e)
    return step_time_factors(stated)  # the one home of 1 / (1 − e)
