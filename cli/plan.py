"""``fleetplan plan``: plan a scenario (the shipped default when none is given) and print the plan."""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

import click

from fleetplan.cli.executor import executor_options
from fleetplan.cli.output import progress_status
from fleetplan.errors import FleetplanError, InputError
from fleetplan.fileio import check_destinations, output_files
from fleetplan.outputs.planio import plan_to_dict
from fleetplan.outputs.workbook import build_plan_workbook
from fleetplan.placement.plan import Plan, Status, evaluate
from fleetplan.placement.problem import Problem
from fleetplan.placement.validate import validate
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.profiles import with_profiles
from fleetplan.scenario.read import load_scenario, scenario_embed
from fleetplan.simulator.verify import verify_plan, verify_text, verify_to_dict
from fleetplan.solvers.baselines import BASELINES
from fleetplan.solvers.common import gap_text
from fleetplan.solvers.disagg import kv_break_even
from fleetplan.solvers.executor import make_executor
from fleetplan.solvers.explain import explain_infeasible
from fleetplan.solvers.pop import PARTITIONS
from fleetplan.solvers.solve import BACKENDS, MIN_TIME_LIMIT_S, POP_AUTO_MODELS, check_solve_options, solve


def _fmt_counts(counts) -> str:
    """Counts per window as one compact string ('0012221100...'), spaced when any count has two digits."""
    return ("" if max(counts, default=0) < 10 else " ").join(str(c) for c in counts)


def _render_table(problem, plan, d: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 120)
    console.print(f"[bold]{d['name']}[/bold]: {problem.n_windows} windows of {problem.window_length_s / 60:g} min; "
                  f"status [bold]{d['status']}[/bold]"
                  + (f" within the requested {plan.requested_gap:.2%} gap" if d["status"] == "optimal"
                     and plan.requested_gap is not None else "")
                  + f" ({d['backend']}, {d['solve_time_s']:.1f} s)")
    if plan.message:
        console.print(plan.message, markup=False)
    if abs(problem.horizon_hours - 24) > 1e-9:
        console.print(f"[yellow]The scenario covers {problem.horizon_hours:g} h; figures 'per day' repeat it "
                      f"{24 / problem.horizon_hours:g} times.[/yellow]")
    t = Table(title="Replicas per window (one digit per window, first to last)", title_justify="left")
    for col in ("model", "GPU @ site", "tp×pp", "replicas per window", "GPU-h/day", "capacity from"):
        t.add_column(col, justify="right" if col == "GPU-h/day" else "left", overflow="fold")
    f = 24.0 / problem.horizon_hours
    named = {p.id: f" (pool {p.name})" for p in problem.pools if p.name}  # several pools of one site and GPU type
    for r in d["replicas"]:
        gh = sum(r["counts"]) * r["tp"] * r["pp"] * problem.window_hours * f
        classes = r.get("class_capacity_req_per_s") or {}
        served = ("; classes " + ", ".join(f"{c} {v:.3g} req/s" for c, v in classes.items())) if classes else ""
        where = f"{r['gpu']} @ {r['site']}{named.get(r['pool'], '')}"
        t.add_row(r["model"], where, f"{r['tp']}×{r['pp']}", _fmt_counts(r["counts"]),
                  f"{gh:.0f}", r.get("capacity_source", "") + served)
    for r in d.get("prefill_decode") or []:
        gh = sum(r["counts"]) * r["tp"] * problem.window_hours * f
        to = f" -> decode at {r['decode_site']}" if r["role"] == "prefill" and r["decode_site"] != r["site"] else ""
        t.add_row(f"{r['model']} [{r['role']}]", f"{r['gpu']} @ {r['site']}{to}", f"{r['tp']}×1",
                  _fmt_counts(r["counts"]), f"{gh:.0f}", r.get("capacity_source", ""))
    for g in d["shared_gpus"]:
        src = g.get("capacity_source") or {}
        where = f"{g['gpu']} @ {g['site']}{named.get(g['pool'], '')}"
        t.add_row(" + ".join(g["models"]), where, "shared", "1 GPU, all day", "24",
                  "; ".join(f"{m}: {s}" for m, s in src.items()) if len(set(src.values())) > 1
                  else next(iter(src.values()), ""))
    console.print(t)
    if d.get("unserved_req_per_s"):
        prio = {m.name: m.priority for m in problem.models}
        u = Table(title="Unserved demand (best effort: demand exceeds the inventory), req/s per window",
                  title_justify="left")
        for col in ("model", "priority", "unserved req/s per window", "peak req/s", "share of demand"):
            u.add_column(col, justify="left" if col in ("model", "unserved req/s per window") else "right",
                         overflow="fold")
        demand = {m.name: m.demand_req_per_s for m in problem.models}
        for name, row in sorted(d["unserved_req_per_s"].items(), key=lambda kv: (-prio[kv[0]], kv[0])):
            total = sum(demand[name])
            u.add_row(name, str(prio[name]), " ".join(f"{x:.1f}" for x in row), f"{max(row):.2f}",
                      f"{sum(row) / total:.1%}" if total else "")
            shares = problem.model_by_name[name].classes
            for cls, crow in sorted((d.get("class_unserved_req_per_s") or {}).get(name, {}).items()):
                ctotal = shares[cls] * total
                u.add_row(f"  class {cls}", "", " ".join(f"{x:.1f}" for x in crow), f"{max(crow):.2f}",
                          f"{sum(crow) / ctotal:.1%}" if ctotal else "")
        console.print(u)
    s = Table(title="Summary (per day)", title_justify="left")
    s.add_column("plan")
    for col in ("cost $/day", "GPU-hours/day", "cost vs this plan", "note"):
        s.add_column(col, justify="right" if col != "note" else "left")
    s.add_row("this plan", f"{d['cost_usd_per_day']:,.2f}", f"{d['gpu_hours_per_day']:,.1f}", "1.00",
              f"load {d['utilization']['mean']:.0%} of rated capacity (mean), peak {d['utilization']['peak']:.0%}")
    if d.get("lower_bound_usd_per_day") is not None:
        s.add_row("lower bound (proven)", f"{d['lower_bound_usd_per_day']:,.2f}", "", "",
                  f"gap {gap_text(d['gap'])}" if d.get("gap") is not None else "")
    for name, b in (d.get("baselines") or {}).items():
        ratio = b["cost_usd_per_day"] / d["cost_usd_per_day"] if d["cost_usd_per_day"] else float("nan")
        s.add_row(name, f"{b['cost_usd_per_day']:,.2f}", f"{b['gpu_hours_per_day']:,.1f}", f"{ratio:.2f}",
                  "" if b["valid"] else "exceeds the problem: " + b["message"][:60])
    console.print(s)
    if d.get("kv_flows"):
        k = Table(title="Disaggregated traffic (prefill -> decode), per day", title_justify="left")
        for col in ("model", "route", "link", "req/s per window", "KV GB/day", "prompt GB/day"):
            k.add_column(col, justify="right" if "GB" in col else "left", overflow="fold")
        for r in d["kv_flows"]:
            k.add_row(r["model"], f"{r['prefill_site']} -> {r['decode_site']}"
                      + (f" ({r['route_class']})" if r["route_class"] else " (same site)"), r["link"],
                      " ".join(f"{x:.1f}" for x in r["req_per_s"]), f"{r['kv_gb_per_day']:,.0f}",
                      f"{r['prompt_gb_per_day']:,.1f}")
        console.print(k)
    if d.get("kv_break_even"):
        be = d["kv_break_even"]
        price = f"${be['usd_per_gb']:.3g}/GB" if be["usd_per_gb"] is not None else "none"
        console.print(f"break-even cross-site KV egress price: {price} ({be['note']})", markup=False)
    bd = d["cost_breakdown_usd_per_day"]
    console.print(f"cost/day: GPUs ${bd['gpu']:,.2f} + replica starts ${bd['starts']:,.2f} + egress "
                  f"${bd['egress']:,.2f}")
    for pool in d.get("pools", []):
        rate = pool.get("committed_usd_per_gpu_hour", pool["usd_per_gpu_hour"])
        per = " per committed GPU-h" if "committed_usd_per_gpu_hour" in pool else ""
        price = f"{rate:.4g} USD/GPU-h"
        src = pool["price_source"]
        # a catalog source states the price itself: print it once
        shown = f"{pool['id']} ({pool['pricing_model']})" if price in src else f"{pool['id']} {price}{per} " \
            f"({pool['pricing_model']})"
        console.print(f"[dim]price: {shown} from {src}[/dim]", markup=True, highlight=False)
    for c in d.get("commitments", []):
        be = c["break_even_utilization"]
        deployed, load = c["deployed_share"], c["load_share"]
        console.print(f"commitment: {c['pool']} {c['gpus']} GPUs for the whole horizon"
                      + (f", deployed {deployed:.0%} of their hours, load {load:.0%} of their capacity"
                         if deployed is not None else "")
                      + (f"; break-even utilization {be:.1%} = {c['committed_usd_per_gpu_hour']:.4g} / "
                         f"{c['on_demand_usd_per_gpu_hour']:.4g} USD/GPU-h (on demand from "
                         f"{c['on_demand_price_source']})" if be is not None else
                         "; break-even utilization unknown (no on-demand price)"), highlight=False)
    for n in d.get("notes", []):
        console.print(f"[dim]demand: {n}[/dim]")


def _csv(d: dict) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["model", "pool", "site", "gpu", "tp", "pp", "window", "start_s", "replicas", "kind"])
    for r in d["replicas"]:
        for i, c in enumerate(r["counts"]):
            w.writerow([r["model"], r["pool"], r["site"], r["gpu"], r["tp"], r["pp"], i,
                        i * d["window_length_s"], c, "dedicated"])
    for g in d["shared_gpus"]:
        for m in g["models"]:
            for i in range(d["n_windows"]):
                w.writerow([m, g["pool"], g["site"], g["gpu"], 1, 1, i, i * d["window_length_s"], 1, "shared"])
    return buf.getvalue()


def _plot(path: Path, problem: Problem, plan: Plan) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ev = evaluate(problem, plan)
    # Usable capacity per model: dedicated replicas after the margin, plus on each shared GPU what it serves and
    # the compute headroom its co-residents leave.
    avail = {m.name: list(ev.capacity_req_per_s[m.name]) for m in problem.models}
    shares = problem.share_by_key
    for g in plan.shared:
        for w in range(problem.n_windows):
            used = sum(v[w] / shares[(name, g.pool)].capacity_req_per_s for name, v in g.served_req_per_s.items())
            free = max(0.0, 1 - problem.margin - used)
            for name in g.models:
                avail[name][w] += free * shares[(name, g.pool)].capacity_req_per_s
    n = len(problem.models)
    cols = 2 if n > 1 else 1
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 2.6 * rows), squeeze=False, sharex=True)
    # Step plots need one point past the last window so that the last window shows its full width.
    hours = [w * problem.window_hours for w in range(problem.n_windows + 1)]
    for ax, m in zip(axes.flat, problem.models, strict=False):
        ax.step(hours, avail[m.name] + avail[m.name][-1:], where="post", label="usable capacity", color="tab:blue",
                lw=1.5)
        ax.step(hours, list(m.demand_req_per_s) + list(m.demand_req_per_s[-1:]), where="post",
                label="demand (planned rate)", color="tab:red", lw=1.2, ls="--")
        ax.set_title(m.name, fontsize=9)
        ax.set_ylabel("req/s")
        ax.set_ylim(bottom=0)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("hour of day")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(f"{problem.name}: demand vs provisioned capacity (after the {problem.margin:.0%} margin)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)


@click.command("plan")
@click.argument("scenario", required=False)
@click.option("--backend", type=click.Choice(BACKENDS), default="highs", show_default=True,
              help="MILP with HiGHS or CBC (PuLP), or CP-SAT (OR-Tools).")
@click.option("--time-limit", "time_limit_s", type=float, default=60.0, show_default=True,
              help=f"Time limit of the whole solve, seconds ({MIN_TIME_LIMIT_S:g} to 86400).")
@click.option("--threads", type=click.IntRange(min=1, max=256), default=None, help="Solver threads (default: all).")
@click.option("--gap", type=float, default=0.005, show_default=True,
              help="Relative optimality gap at which the solver may stop.")
@click.option("--window", "window_s", type=click.FloatRange(min=60, max=86400), default=None,
              help="Window length in seconds (overrides the scenario's).")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None, help="Write the plan as JSON.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="PNG of demand against provisioned capacity per model over the day.")
@click.option("--xlsx", "xlsx_path", type=click.Path(dir_okay=False), default=None,
              help="What-if workbook of the plan with live formulas.")
@click.option("--no-baselines", is_flag=True, help="Skip the baselines.")
@click.option("--verify", is_flag=True,
              help="Replay the plan over its day (as `fleetplan simulate` does); for every model-window that misses "
                   "a target, tighten the capacity of the options it uses and plan again, until every target holds "
                   "in the replay or the rounds run out. Reports the derating per option.")
@click.option("--profile", "profiles", multiple=True, metavar="MODEL@GPU[:tpN][:FORMAT]=FILE",
              help="A measured performance profile replacing the roofline for one model on one GPU type and tp "
                   "(repeatable): vllm bench serve result JSON (a glob for several runs), a guidellm report, an "
                   "AIBrix/Mélange throughput table or a step-time CSV; the format is detected when not given. "
                   "E.g. Llama-3.1-8B@H100:tp1=bench/*.json. The plan file keeps it, so its replay uses it too.")
@click.option("--verify-rounds", type=click.IntRange(min=0, max=20), default=6, show_default=True,
              help="Most re-plans of --verify.")
@click.option("--verify-slice", "verify_slice_s", type=click.FloatRange(min=60, max=86400), default=None,
              metavar="SECONDS",
              help="--verify replays this many seconds of each window, around its busiest slot (as `fleetplan "
                   "simulate --slice`), instead of whole windows: faster, and the stricter test for long windows.")
@click.option("--best-effort", is_flag=True,
              help="When demand exceeds the inventory, plan the most demand served in order of the models' "
                   "priority (higher first), then the lowest cost, and list the unserved req/s per model and window "
                   "(without it such a scenario is an error).")
@click.option("--decompose", "decompose", type=click.IntRange(min=1), default=None,
              help="Plan by POP decomposition into this many sub-fleets solved in parallel, then recombined and "
                   f"repaired, with the whole problem's bound (default: {POP_AUTO_MODELS:,}+ models only; 1: "
                   "never).")
@click.option("--partition", type=click.Choice(PARTITIONS), default="shape", show_default=True,
              help="How --decompose splits the models: by demand-curve shape (every part gets every peak hour) or "
                   "at random.")
@click.option("--workers", type=click.IntRange(1, 64), default=None,
              help="Processes (or Ray CPUs) for the sub-fleets of --decompose (default: this machine's CPUs, at "
                   "most 4).")
@executor_options
def plan(scenario, backend, time_limit_s, threads, gap, window_s, out_path, fmt, plot_path, xlsx_path,
         no_baselines, verify, verify_rounds, verify_slice_s, profiles, best_effort, decompose, partition, workers,
         executor, ray_address) -> None:
    """Plan SCENARIO (a YAML file or a shipped scenario's name; the shipped default when omitted): replicas per
    model, GPU type, site and window at the lowest cost that meets every SLO. Every plan is re-checked by the
    independent validator before it is printed. With --format json an error is also printed on stdout as a JSON
    object {"error": ..., "explanation": [...]} (exit code 2)."""
    try:
        pop = dict(decompose=decompose, partition=partition, workers=workers, executor=executor,
                   ray_address=ray_address)
        _plan(scenario, backend, time_limit_s, threads, gap, window_s, out_path, fmt, plot_path, xlsx_path,
              no_baselines, verify, verify_rounds, verify_slice_s, profiles, best_effort, pop)
    except FleetplanError as exc:
        if fmt == "json":
            click.echo(json.dumps({"error": str(exc), "explanation": list(getattr(exc, "explanation", []))},
                                  indent=1))
        raise


class NoPlanError(FleetplanError):
    """The solver gave no plan; ``explanation``: the reasons, one per entry (for the JSON error object)."""

    def __init__(self, message: str, explanation: list[str]):
        super().__init__(message)
        self.explanation = explanation


def _plan(scenario, backend, time_limit_s, threads, gap, window_s, out_path, fmt, plot_path, xlsx_path,
          no_baselines, verify, verify_rounds, verify_slice_s, profiles, best_effort, pop=None) -> None:
    pop = pop or {}
    time_limit_s, gap = check_solve_options(time_limit_s, gap)  # NaN, infinities and out-of-range values refused
    if best_effort and verify:
        raise InputError("--best-effort with --verify: the replay sends every request, the unserved ones too, to "
                         "the plan; use one of the two", field="--best-effort")
    if verify_slice_s is not None and not verify:
        raise InputError("--verify-slice without --verify: add --verify, or drop --verify-slice",
                         field="--verify-slice", value=verify_slice_s)
    outputs = {"--out": out_path, "--plot": plot_path, "--xlsx": xlsx_path}
    check_destinations(outputs, inputs=[scenario])  # fail before a long solve, not after it
    with progress_status(enabled=sys.stderr.isatty()) as say:
        say("reading the scenario and its demand")
        sc = with_profiles(load_scenario(scenario, window_length_s=window_s), list(profiles))
        say("evaluating the capacity model")
        vr = None
        if verify:
            vr = verify_plan(sc, backend=backend, max_rounds=verify_rounds, progress=say, slice_s=verify_slice_s,
                             solve_options=dict(time_limit_s=time_limit_s, threads=threads, gap=gap))
            problem, result = vr.problem, vr.plan
        else:
            problem = build_problem(sc, progress=say)
            with make_executor(pop.get("executor", "process"), workers=pop.get("workers"),
                               address=pop.get("ray_address")) as ex:
                result = solve(problem, backend, time_limit_s=time_limit_s, threads=threads, gap=gap, progress=say,
                               best_effort=best_effort, decompose=pop.get("decompose"),
                               partition=pop.get("partition", "shape"), executor=ex)
        baselines = {} if no_baselines else {name: fn(problem) for name, fn in BASELINES.items()}
    if not result.has_solution:
        # the same reasons solve() gave, as a list (the prechecks, else the elastic relaxation's shortfalls)
        why = explain_infeasible(problem) if result.status is Status.INFEASIBLE else [result.message]
        # --best-effort serves what the inventory can: a model with no usable option at all stays unserved
        unservable = [m.name for m in problem.models
                      if not any(o.model == m.name for o in problem.options)
                      and not any(s.model == m.name for s in problem.share_options)]
        if result.status is not Status.INFEASIBLE or best_effort:
            hint = ""
        elif unservable:
            hint = (f"; --best-effort cannot serve {', '.join(unservable)} (no GPU type, tp and site meets its SLO "
                    "and token mix): change that model's token mix, SLO, tp list or the sites' GPUs")
        else:
            hint = "; rerun with --best-effort to serve the most demand by priority"
        raise NoPlanError(f"no plan ({result.status.value}): {result.message}{hint}", why)
    report = validate(problem, result)
    if not report.ok:
        raise FleetplanError("the solver's plan fails the independent check (please report this): "
                             + "; ".join(report.violations[:5]))
    d = plan_to_dict(problem, result, scenario=scenario_embed(sc), baselines=baselines)
    if problem.has_disaggregation:
        d["kv_break_even"] = kv_break_even(problem, result, backend=backend if backend in ("highs", "cbc")
                                           else "highs", time_limit_s=time_limit_s, threads=threads).to_dict()
    if vr is not None:
        d["verify"] = verify_to_dict(vr)
    with output_files(outputs) as tmp:  # all of them or none
        if out_path:
            tmp["--out"].write_text(json.dumps(d, indent=1))
        if plot_path:
            _plot(tmp["--plot"], problem, result)
        if xlsx_path:
            build_plan_workbook(problem, result).save(tmp["--xlsx"])
    if fmt == "json":
        click.echo(json.dumps(d, indent=1))
    elif fmt == "csv":
        click.echo(_csv(d), nl=False)
    else:
        _render_table(problem, result, d)
        if vr is not None:
            click.echo(verify_text(vr))
