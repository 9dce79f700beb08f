"""``fleetplan plan``: plan a scenario (the shipped default when none is given) and print the plan."""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from fleetplan.cli.options import (
    backend_option,
    checked_effort,
    checked_solve_options,
    effort_option,
    fanout_options,
    gap_option,
    out_option,
    output_options,
    plot_option,
    refuse_unused,
    refuse_unused_fanout,
    resolve_output,
    threads_option,
    time_limit_option,
    xlsx_option,
)
from fleetplan.cli.output import progress_status, stdout_console, table
from fleetplan.cli.params import FiniteRange
from fleetplan.costmodels.uncertainty import CapacityError
from fleetplan.costmodels.utilization import RATED_LOAD, legend
from fleetplan.errors import FleetplanError, InputError
from fleetplan.fileio import check_destinations, claimed_outputs, output_files
from fleetplan.outputs.planio import plan_to_dict
from fleetplan.outputs.uncertainty import margin_lines, suggest_benchmark, window_margins
from fleetplan.outputs.unused import dropped_profile_warnings, summary_line
from fleetplan.outputs.workbook import build_plan_workbook
from fleetplan.placement.plan import Plan, Status, evaluate
from fleetplan.placement.problem import DeratingKey, Problem
from fleetplan.placement.validate import validate
from fleetplan.scenario.arrival_notes import arrival_assumptions, arrival_lines
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.profiles import with_profiles
from fleetplan.scenario.read import Scenario, load_scenario, scenario_embed, scenario_spec
from fleetplan.scenario.uncertainty import option_errors, robust_derating
from fleetplan.simulator.verify import VerifyResult, verify_plan, verify_text, verify_to_dict
from fleetplan.solvers.baselines import BASELINES
from fleetplan.solvers.common import gap_text
from fleetplan.solvers.disagg import kv_break_even
from fleetplan.solvers.executor import make_executor
from fleetplan.solvers.explain import explain_infeasible, precheck
from fleetplan.solvers.pop import PARTITIONS
from fleetplan.solvers.solve import DEFAULT_THREADS, POP_AUTO_MODELS, solve

if TYPE_CHECKING:  # rich is imported when a table is printed (start-up speed)
    from rich.console import Console
    from rich.table import Table


def _fmt_counts(counts) -> str:
    """Counts per window as one compact string ('0012221100...'), spaced when any count has two digits."""
    return ("" if max(counts, default=0) < 10 else " ").join(str(c) for c in counts)


def _headline(console: Console, problem: Problem, plan: Plan, d: dict) -> None:
    """The plan's name, windows, status (with the requested gap when optimal), backend and solve time; the
    solver's message; a note when the horizon is not a day."""
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


def _replicas_table(problem: Problem, d: dict, wide: bool = False) -> Table:
    """Replicas per model, GPU type, site and window: dedicated replicas, prefill/decode pools, shared GPUs; the
    column 'capacity from' only when ``wide``."""
    t = table("Replicas per window (one digit per window, first to last)",
              ("model", "GPU @ site", "tp×pp", "replicas per window", "GPU-h/day")
              + (("capacity from",) if wide else ()),
              right=lambda c: c == "GPU-h/day", title_justify="left")
    add_row = t.add_row if wide else (lambda *cells: t.add_row(*cells[:-1]))
    f = 24.0 / problem.horizon_hours
    named = {p.id: f" (pool {p.name})" for p in problem.pools if p.name}  # several pools of one site and GPU type
    for r in d["replicas"]:
        gh = sum(r["counts"]) * r["tp"] * r["pp"] * problem.window_hours * f
        classes = r.get("class_capacity_req_per_s") or {}
        served = ("; classes " + ", ".join(f"{c} {v:.3g} req/s" for c, v in classes.items())) if classes else ""
        where = f"{r['gpu']} @ {r['site']}{named.get(r['pool'], '')}"
        add_row(r["model"], where, f"{r['tp']}×{r['pp']}", _fmt_counts(r["counts"]),
                  f"{gh:.0f}", r.get("capacity_source", "") + served)
    for r in d.get("prefill_decode") or []:
        gh = sum(r["counts"]) * r["tp"] * problem.window_hours * f
        to = f" -> decode at {r['decode_site']}" if r["role"] == "prefill" and r["decode_site"] != r["site"] else ""
        add_row(f"{r['model']} [{r['role']}]", f"{r['gpu']} @ {r['site']}{to}", f"{r['tp']}×1",
                  _fmt_counts(r["counts"]), f"{gh:.0f}", r.get("capacity_source", ""))
    for g in d["shared_gpus"]:
        src = g.get("capacity_source") or {}
        where = f"{g['gpu']} @ {g['site']}{named.get(g['pool'], '')}"
        load = g.get("load_share") or []
        busy = f"; load {min(load):.0%}-{max(load):.0%}" if load else ""
        add_row(" + ".join(g["models"]), where, "shared", f"1 GPU, all day{busy}", "24",
                  "; ".join(f"{m}: {s}" for m, s in src.items()) if len(set(src.values())) > 1
                  else next(iter(src.values()), ""))
    return t


def _unserved_row(name: str, priority: str, row: list[float], total: float) -> tuple[str, ...]:
    return (name, priority, " ".join(f"{x:.1f}" for x in row), f"{max(row):.2f}",
            f"{sum(row) / total:.1%}" if total else "")


def _unserved_table(problem: Problem, d: dict) -> Table:
    """Unserved req/s per model (and request class) and window of a best-effort plan, higher priority first."""
    left = ("model", "unserved req/s per window")
    u = table("Unserved demand (best effort: demand exceeds the inventory), req/s per window",
              ("model", "priority", "unserved req/s per window", "peak req/s", "share of demand"),
              right=lambda c: c not in left, title_justify="left")
    prio = {m.name: m.priority for m in problem.models}
    demand = {m.name: m.demand_req_per_s for m in problem.models}
    by_class = d.get("class_unserved_req_per_s") or {}
    for name, row in sorted(d["unserved_req_per_s"].items(), key=lambda kv: (-prio[kv[0]], kv[0])):
        total = sum(demand[name])
        u.add_row(*_unserved_row(name, str(prio[name]), row, total))
        shares = problem.model_by_name[name].classes
        for cls, crow in sorted(by_class.get(name, {}).items()):
            u.add_row(*_unserved_row(f"  class {cls}", "", crow, shares[cls] * total))
    return u


def _summary_table(d: dict) -> Table:
    """Cost and GPU-hours per day of the plan, its proven lower bound and the baselines."""
    s = table("Summary (per day)", ("plan", "cost $/day", "GPU-hours/day", "cost vs this plan", "note"),
              right=lambda c: c not in ("plan", "note"), fold=False, title_justify="left")
    s.add_row("this plan", f"${d['cost_usd_per_day']:,.2f}", f"{d['gpu_hours_per_day']:,.1f}", "1.00",
              f"{RATED_LOAD.name} {d['utilization']['mean']:.0%} (mean), peak {d['utilization']['peak']:.0%}")
    if d.get("lower_bound_usd_per_day") is not None:
        s.add_row("lower bound (proven)", f"${d['lower_bound_usd_per_day']:,.2f}", "", "",
                  f"gap {gap_text(d['gap'])}" if d.get("gap") is not None else "")
    else:
        s.add_row("lower bound", "no bound yet", "", "", "no proven lower bound within the solve's effort")
    for name, b in (d.get("baselines") or {}).items():
        ratio = b["cost_usd_per_day"] / d["cost_usd_per_day"] if d["cost_usd_per_day"] else float("nan")
        s.add_row(name, f"${b['cost_usd_per_day']:,.2f}", f"{b['gpu_hours_per_day']:,.1f}", f"{ratio:.2f}",
                  "" if b["valid"] else "exceeds the problem: " + b["message"][:60])
    return s


def _kv_table(d: dict) -> Table:
    """Prefill -> decode traffic of a disaggregated plan: route, link, req/s per window, KV and prompt GB/day."""
    k = table("Disaggregated traffic (prefill -> decode), per day",
              ("model", "route", "link", "req/s per window", "KV GB/day", "prompt GB/day"),
              right=lambda c: "GB" in c, title_justify="left")
    for r in d["kv_flows"]:
        k.add_row(r["model"], f"{r['prefill_site']} -> {r['decode_site']}"
                  + (f" ({r['route_class']})" if r["route_class"] else " (same site)"), r["link"],
                  " ".join(f"{x:.1f}" for x in r["req_per_s"]), f"{r['kv_gb_per_day']:,.0f}",
                  f"{r['prompt_gb_per_day']:,.1f}")
    return k


def _price_line(pool: dict, wide: bool = True) -> str:
    """'price: POOL RATE USD/GPU-h (PRICING) from SOURCE', the rate left out when the source states it; not
    ``wide``: 'price: POOL RATE USD/GPU-h (PRICING, SNAPSHOT DATE)' without the source."""
    rate = pool.get("committed_usd_per_gpu_hour", pool["usd_per_gpu_hour"])
    per = " per committed GPU-h" if "committed_usd_per_gpu_hour" in pool else ""
    price = f"{rate:.4g} USD/GPU-h"
    warn = f" [bold]WARNING: {pool['price_warning']}[/bold]" if pool.get("price_warning") else ""
    if not wide:
        date = pool.get("price_as_of") or ""
        when = "catalog, undated" if date == "undated" else f"as of {date}" if date else "not from a catalog"
        return f"[dim]price: {pool['id']} {price}{per} ({pool['pricing_model']}, {when})[/dim]" + warn
    src = pool["price_source"]
    # a catalog source states the price itself: print it once
    shown = f"{pool['id']} ({pool['pricing_model']})" if price in src else f"{pool['id']} {price}{per} " \
        f"({pool['pricing_model']})"
    return f"[dim]price: {shown} from {src}[/dim]" + warn


def _snapshot_line(pools: list[dict]) -> str:
    """'price snapshots: ...': the snapshot dates of the catalog-priced pools (one, or several as the scenario's
    ``price_snapshots: mixed`` allows) with their pools; '' when no pool is priced from the catalogs."""
    dates: dict[str, list[str]] = {}
    for p in pools:
        if p.get("price_as_of"):
            dates.setdefault(p["price_as_of"], []).append(p["id"])
    if not dates:
        return ""
    if len(dates) == 1:
        date = next(iter(dates))
        return "price snapshot: every catalog price " + ("from undated snapshots" if date == "undated" else
                                                         f"as of {date}")
    return (f"price snapshots of {len(dates)} dates (options.price_snapshots: mixed): "
            + "; ".join(f"{d}: {', '.join(ids)}" for d, ids in dates.items()))


def _commitment_line(c: dict, wide: bool = True) -> str:
    """A committed pool: its GPUs, the shares deployed and loaded, and the break-even utilization (with the
    on-demand rate's source when ``wide``)."""
    be = c["break_even_utilization"]
    deployed, load = c["deployed_share"], c["load_share"]
    return (f"commitment: {c['pool']} {c['gpus']} GPUs for the whole horizon"
            + (f", deployed {deployed:.0%} of their hours, load {load:.0%} of their capacity"
               if deployed is not None else "")
            + (f"; break-even utilization {be:.1%} = {c['committed_usd_per_gpu_hour']:.4g} / "
               f"{c['on_demand_usd_per_gpu_hour']:.4g} USD/GPU-h"
               + (f" (on demand from {c['on_demand_price_source']})" if wide else "") if be is not None else
               "; break-even utilization unknown (no on-demand price)"))


def _footer(console: Console, d: dict, wide: bool) -> None:
    """The lines under the tables: KV break-even price, cost per day by kind, prices, commitments, notes."""
    if d.get("kv_break_even"):
        be = d["kv_break_even"]
        price = f"${be['usd_per_gb']:.3g}/GB" if be["usd_per_gb"] is not None else "none"
        console.print(f"break-even cross-site KV egress price: {price} ({be['note']})", markup=False)
    bd = d["cost_breakdown_usd_per_day"]
    console.print(f"cost/day: GPUs ${bd['gpu']:,.2f} + replica starts ${bd['starts']:,.2f} + egress "
                  f"${bd['egress']:,.2f}")
    for pool in d.get("pools", []):
        console.print(_price_line(pool, wide), markup=True, highlight=False)
    if line := _snapshot_line(d.get("pools", [])):
        console.print(line, markup=False, highlight=False)
    for c in d.get("commitments", []):
        console.print(_commitment_line(c, wide), highlight=False)
    for n in d.get("notes", []):
        console.print(f"[dim]demand: {n}[/dim]")
    if line := summary_line(d.get("options_not_used") or []):
        console.print(line, markup=False, highlight=False)


def _unused_table(d: dict) -> Table:
    """Every option the plan does not use: model, option, category, reason, fix (plan --wide)."""
    t = table("Options not used", ("model", "option", "category", "reason", "fix"), title_justify="left")
    for e in d.get("options_not_used") or []:
        t.add_row(e["model"], e["option"], e["category"], e["reason"], e["fix"])
    return t


def _render_table(problem: Problem, plan: Plan, d: dict, wide: bool = False) -> None:
    """The plan ``d`` (:func:`~fleetplan.outputs.planio.plan_to_dict` of ``plan``) as rich tables on stdout: short,
    or with the capacity and price sources when ``wide``."""
    console = stdout_console(200 if wide else 120)
    _headline(console, problem, plan, d)
    console.print(_replicas_table(problem, d, wide))
    if d.get("unserved_req_per_s"):
        console.print(_unserved_table(problem, d))
    console.print(_summary_table(d))
    console.print(legend(RATED_LOAD))
    if d.get("kv_flows"):
        console.print(_kv_table(d))
    _footer(console, d, wide)


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


#: --gap of ``plan``: 0.2%. On the default scenario HiGHS then goes on past 0.5% (where its dual bound still
#: showed 0.33%) to a proof at gap 0.00% ($898.58/day) for about 10% more CPU time (6.9 against 6.3 CPU seconds).
PLAN_GAP = 0.002


@click.command("plan")
@click.argument("scenario", required=False)
@backend_option()
@time_limit_option(60.0, "the whole solve, a safety stop only (the solve ends at --gap or when its --effort is "
                         "used up; a plan this limit cuts says so)")
@effort_option()
@threads_option(DEFAULT_THREADS, " (a fixed number: the solvers' search, hence the plan, depends on it)")
@gap_option(default=PLAN_GAP)
@click.option("--window", "window_s", type=FiniteRange(min=60, max=86400), default=None,
              help="Window length in seconds (overrides the scenario's).")
@out_option("the plan as JSON (the plan file `fleetplan simulate`, `export` and `serve --plan` read)")
@output_options()
@plot_option("demand against provisioned capacity per model over the day")
@xlsx_option("the plan")
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
@click.option("--verify-slice", "verify_slice_s", type=FiniteRange(min=60, max=86400), default=None,
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
@click.option("--partition", type=click.Choice(PARTITIONS), default=None,
              help="How --decompose splits the models: by demand-curve shape (every part gets every peak hour) or "
                   "at random. [default: shape; needs --decompose]")
@click.option("--robust", is_flag=True,
              help="Plan so that every model-window holds at the pessimistic end of its capacities' stated errors "
                   "(each capacity × (1 − its error), docs/uncertainty.md); prints the plain plan's cost beside it.")
@click.option("--suggest-benchmark", is_flag=True,
              help="Also say which one benchmark run (model, GPU, tp, request rates, the vllm bench serve command "
                   "lines) would most reduce the plan's cost uncertainty.")
@fanout_options("the sub-fleets of --decompose", workers=None, workers_default_text="this machine's CPUs, at most 4")
def plan(scenario: str | None, output: str | None, fmt: str | None, wide: bool, **kw) -> None:
    """Plan SCENARIO (a YAML file or a shipped scenario's name; the shipped default when omitted): replicas per
    model, GPU type, site and window at the lowest cost that meets every SLO. Every plan is re-checked by the
    independent validator before it is printed: a short table by default, -o wide for every detail, -o json|yaml
    for the plan file's content. With -o json an error is also printed on stdout as a JSON object {"error":
    {"message", "field", "value", "explanation", ...}} (exit code 2)."""
    shown = resolve_output(output, fmt, wide)
    _plan(scenario, shown, _PlanArgs(wide=shown == "wide", **kw))


class NoPlanError(FleetplanError):
    """The solver gave no plan; ``explanation``: the reasons, one per entry (for the JSON error object)."""

    def __init__(self, message: str, explanation: list[str]):
        super().__init__(message)
        self.explanation = explanation


@dataclass(frozen=True)
class _PlanArgs:
    """The options of ``fleetplan plan`` besides the scenario and --format (click's keyword arguments)."""

    backend: str
    time_limit_s: float
    effort: float
    threads: int | None
    gap: float
    window_s: float | None
    out: str | None
    plot: str | None
    xlsx: str | None
    no_baselines: bool
    verify: bool
    verify_rounds: int
    verify_slice_s: float | None
    profiles: tuple[str, ...]
    best_effort: bool
    decompose: int | None
    partition: str | None
    wide: bool
    robust: bool
    suggest_benchmark: bool
    workers: int | None
    executor: str
    ray_address: str | None

    @property
    def outputs(self) -> dict[str, str | None]:
        """{option: file} of the files to write (None: not asked for)."""
        return {"--out": self.out, "--plot": self.plot, "--xlsx": self.xlsx}


#: The fan-out options (keyword: flag): they choose where the sub-fleets of a decomposed plan run.
_FANOUT = {"executor": "--executor", "workers": "--workers", "ray_address": "--ray-address"}


def _check_options(a: _PlanArgs) -> _PlanArgs:
    """``a`` with the time limit and gap checked (NaN, infinities and out-of-range values refused) and no two
    options that contradict each other; raises InputError naming the option."""
    time_limit_s, gap = checked_solve_options(a.time_limit_s, a.gap)
    effort = checked_effort(a.effort)
    if a.best_effort and a.verify:
        raise InputError("--best-effort with --verify: the replay sends every request, the unserved ones too, to "
                         "the plan; use one of the two", field="--best-effort")
    if a.robust and (a.verify or a.best_effort):
        raise InputError("--robust with --verify or --best-effort: plan at the pessimistic end of the stated "
                         "errors (--robust) or correct capacities by the replay (--verify); use one",
                         field="--robust")
    if a.verify_slice_s is not None and not a.verify:
        raise InputError("--verify-slice without --verify: add --verify, or drop --verify-slice",
                         field="--verify-slice", value=a.verify_slice_s)
    if a.partition is not None and a.decompose is None:
        raise InputError("--partition without --decompose: add --decompose N (the number of sub-fleets), or drop "
                         "--partition", field="--partition", value=a.partition)
    refuse_unused({"verify_rounds": "--verify-rounds"}, applies=a.verify, why="without --verify: there are no "
                  "replay rounds", fix="add --verify, or drop --verify-rounds")
    refuse_unused({"decompose": "--decompose", **_FANOUT}, applies=not a.verify,
                  why="with --verify: each --verify round plans the whole fleet in one solve (no sub-fleets)",
                  fix="drop it, or plan without --verify")
    refuse_unused(_FANOUT, applies=a.decompose != 1, why="with --decompose 1: the fleet is planned in one piece, "
                  "nothing runs on an executor", fix="give --decompose 2 or more, or drop it")
    refuse_unused_fanout(a.executor, a.ray_address)
    return replace(a, time_limit_s=time_limit_s, gap=gap, effort=effort, partition=a.partition or "shape")


def _solve(sc: Scenario, a: _PlanArgs, say: Callable[[str], None]) -> tuple[Problem, Plan, VerifyResult | None]:
    """(problem, plan, the --verify rounds or None) of the scenario ``sc``."""
    if a.verify:
        vr = verify_plan(sc, backend=a.backend, max_rounds=a.verify_rounds, progress=say, slice_s=a.verify_slice_s,
                         solve_options=dict(time_limit_s=a.time_limit_s, threads=a.threads, gap=a.gap,
                                            effort=a.effort))
        return vr.problem, vr.plan, vr
    problem = build_problem(sc, progress=say)
    refuse_unused(_FANOUT, applies=a.decompose is not None or len(problem.models) >= POP_AUTO_MODELS,
                  why=f"without --decompose: a fleet of {len(problem.models)} models (fewer than "
                      f"{POP_AUTO_MODELS:,}) is planned in one piece, and only the sub-fleets of --decompose run on "
                      "the executor", fix="add --decompose N (the number of sub-fleets), or drop it")
    with make_executor(a.executor, workers=a.workers, address=a.ray_address) as ex:
        result = solve(problem, a.backend, time_limit_s=a.time_limit_s, threads=a.threads, gap=a.gap,
                       effort=a.effort, progress=say,
                       best_effort=a.best_effort, decompose=a.decompose, partition=a.partition or "shape", executor=ex)
    return problem, result, None


@dataclass
class _Uncertainty:
    """The capacity errors of a plan's options, its --robust derating and the plain plan's cost (None without)."""

    errors: dict[DeratingKey, CapacityError]
    derating: dict[DeratingKey, float]
    plain_cost_usd_per_day: float | None = None


def _robust(sc: Scenario, a: _PlanArgs, problem: Problem, result: Plan,
            say: Callable[[str], None]) -> tuple[Problem, Plan, _Uncertainty]:
    """The options' capacity errors; with --robust the problem rebuilt at the pessimistic end of every option's
    error e (its step times 1 / (1 − e) longer: latency targets and capacity × (1 − e)) and its plan, beside the
    plain plan's cost."""
    errors = option_errors(sc, problem)
    if not a.robust or not result.has_solution:
        return problem, result, _Uncertainty(errors, {})
    plain = evaluate(problem, result).total_usd * 24.0 / problem.horizon_hours
    derating = robust_derating(errors)
    say("planning at the pessimistic end of the capacity errors")
    # every step 1 / (1 − e) times longer: targets × (1 − e) and capacity × (1 − e) (SizingContext.step_scale)
    robust = build_problem(sc, derating=derating, step_scale=derating, progress=say)
    with make_executor(a.executor, workers=a.workers, address=a.ray_address) as ex:
        plan = solve(robust, a.backend, time_limit_s=a.time_limit_s, threads=a.threads, gap=a.gap,
                     effort=a.effort, progress=say,
                     decompose=a.decompose, partition=a.partition or "shape", executor=ex)
    return robust, plan, _Uncertainty(errors, derating, plain)


def _no_plan_error(problem: Problem, result: Plan, best_effort: bool) -> NoPlanError:
    """The error for a solve without a plan: its status and message, with a hint (--best-effort; lower the replica
    floors when even no demand is infeasible, which --best-effort cannot help; or what keeps a
    model from being served at all), and as explanation the reasons solve() gave."""
    # the same reasons solve() gave, as a list (the prechecks, else the elastic relaxation's shortfalls)
    why = explain_infeasible(problem) if result.status is Status.INFEASIBLE else [result.message]
    # --best-effort serves what the inventory can: a model with no usable option at all stays unserved
    unservable = [m.name for m in problem.models
                  if not any(o.model == m.name for o in problem.options)
                  and not any(s.model == m.name for s in problem.share_options)]
    # --best-effort drops demand, never a replica floor: what the prechecks still find with no demand at all (only
    # their replica-floor check can fire then: the others need demand) it cannot fix
    no_demand = replace(problem, models=tuple(replace(m, demand_req_per_s=(0.0,) * len(m.demand_req_per_s))
                                              for m in problem.models))
    floors = (result.status is Status.INFEASIBLE and not unservable
              and bool(precheck(no_demand)))
    if floors:
        hint = ("; --best-effort cannot help (it serves less demand but keeps every min_replicas floor): "
                "lower min_replicas or add inventory")
    elif result.status is not Status.INFEASIBLE or best_effort:
        hint = ""
    elif unservable:
        hint = (f"; --best-effort cannot serve {', '.join(unservable)} (no GPU type, tp and site meets its SLO "
                "and token mix): change that model's token mix, SLO, tp list or the sites' GPUs")
    else:
        hint = "; rerun with --best-effort to serve the most demand by priority"
    return NoPlanError(f"no plan ({result.status.value}): {result.message}{hint}", why)


def _plan_dict(sc: Scenario, problem: Problem, result: Plan, a: _PlanArgs, baselines: dict[str, Plan],
               vr: VerifyResult | None, errors: dict[DeratingKey, CapacityError]) -> dict:
    """The plan file's dict, with the break-even KV egress price of a disaggregated problem and the --verify
    rounds."""
    d = plan_to_dict(problem, result, scenario=scenario_embed(sc), baselines=baselines, capacity_errors=errors)
    if problem.has_disaggregation:
        d["kv_break_even"] = kv_break_even(problem, result, backend=a.backend if a.backend in ("highs", "cbc")
                                           else "highs", time_limit_s=a.time_limit_s, threads=a.threads).to_dict()
    if vr is not None:
        d["verify"] = verify_to_dict(vr)
    return d


def _add_uncertainty(d: dict, sc: Scenario, problem: Problem, plan: Plan, unc: _Uncertainty,
                     suggest: bool) -> None:
    """Into the plan dict ``d`` (its rows carry their capacity_error): the model-windows' margins against them, the
    --robust derating with the plain plan's cost, the suggested benchmark run."""
    d["capacity_margins"] = window_margins(problem, plan, unc.errors, unc.derating)
    if unc.plain_cost_usd_per_day is not None:
        d["robust"] = {"derating": [{"key": list(k), "factor": f} for k, f in sorted(unc.derating.items(), key=str)],
                       "plain_cost_usd_per_day": unc.plain_cost_usd_per_day, "step_scale": True}
    if suggest:
        mixes = {pm.name: sc.token_mixes[m.name] for m, pm in zip(scenario_spec(sc).models, problem.models,
                                                                  strict=True)}
        d["suggested_benchmark"] = suggest_benchmark(problem, plan, unc.errors, mixes)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _margins_summary(margins: list[dict], n_models: int) -> str:
    """One line: which models have model-windows whose margin is below their capacity error (-o wide: each);
    ``margins`` has entries only for the model-windows with demand, of ``n_models`` models in all."""
    models = list(dict.fromkeys(m["model"] for m in margins))
    short = list(dict.fromkeys(m["model"] for m in margins if not m["holds_at_pessimistic_end"]))
    idle = n_models - len(models)
    if not models:  # it said "every model-window of the 0 models holds" of a scenario with 1 model and no demand
        return (f"capacity margins: none to check: no window of the {_count(n_models, 'model')} has demand")
    if not short:
        return (f"capacity margins: every model-window with demand ({_count(len(models), 'model')}"
                + (f"; {idle} more without demand" if idle else "")
                + ") holds at the pessimistic end of its stated capacity error (-o wide: per model)")
    return (f"capacity margins: {len(short)} of {len(models)} models have windows whose margin is below the stated "
            f"capacity error, so they may miss if capacity is that much lower: {', '.join(short)} (-o wide: per "
            "model; `fleetplan simulate PLAN --pessimistic` replays it; --robust plans for it)")


def _arrivals_text(entries: list[dict], wide: bool) -> str:
    """The arrival process each model's capacity assumes: one line per model when ``wide``, else one line."""
    if wide:
        return "\n".join(["arrivals (the capacity model's queueing assumption):"]
                         + ["  " + line for line in arrival_lines(entries)])
    traced = [e for e in entries if e["trace"] and (e["peak_factor_60s_p95"] or 0) > 1]
    worst = max((e["peak_factor_60s_p95"] for e in traced), default=None)
    return ("arrivals: capacities assume Poisson arrivals at each window's planned rate"
            + (f"; the traces of {len(traced)} of {len(entries)} models are burstier (p95 60-s rate up to "
               f"{worst:.2f} × the mean)" if traced else "")
            + " (-o wide: per model, with the fix)")


def _uncertainty_text(d: dict, wide: bool = True) -> str:
    """The margins against the capacity errors (per model when ``wide``, else one line), the --robust cost beside
    the plain plan's, the suggested run."""
    if wide:
        lines = ["capacity margin against its stated error (capacity_error per replica row in -o json):"]
        lines += ["  " + line for line in margin_lines(d.get("capacity_margins") or [])] or [
            "  none to check: no window of any model has demand"]
    else:
        lines = [_margins_summary(d.get("capacity_margins") or [], len(d["windows"][0]["demand_req_per_s"])
                                  if d.get("windows") else 0)]
    if rb := d.get("robust"):
        cost, plain = d["cost_usd_per_day"], rb["plain_cost_usd_per_day"]
        lines.append(f"robust plan (every option's steps 1 / (1 − its error) times longer): ${cost:,.2f}/day against "
                     f"the plain plan's ${plain:,.2f}/day ({cost / plain - 1:+.1%})")
    if "suggested_benchmark" in d:
        sb = d["suggested_benchmark"]
        if sb is None:
            lines.append("suggested benchmark: none (every option the plan uses is measured)")
        else:
            lines.append(f"suggested benchmark: {sb['model']} on {sb['gpu']} tp {sb['tp']} (capacity "
                         f"{sb['capacity_req_per_s']:.3g} req/s ± {sb['capacity_error']:.1%}, {sb['basis']}; "
                         f"${sb['usd_per_day_at_risk']:,.2f}/day of the plan's cost rests on that error, "
                         f"${sb['usd_per_day_at_risk_other_options']:,.2f}/day on all other options'), rates "
                         + ", ".join(f"{r:g}" for r in sb["rates_req_per_s"]) + " req/s:")
            lines += ["  " + sb["serve_command"]] + ["  " + c for c in sb["bench_commands"]]
            lines.append("  then: " + sb["then"])
    return "\n".join(lines)


def _plan(scenario: str | None, fmt: str, a: _PlanArgs) -> None:
    a = _check_options(a)
    check_destinations(a.outputs, inputs=[scenario])  # fail before a long solve, not after it
    with claimed_outputs(a.outputs):  # a second run writing the same file is refused, not silently overwritten
        _plan_locked(scenario, fmt, a)


def _plan_locked(scenario: str | None, fmt: str, a: _PlanArgs) -> None:
    with progress_status(enabled=sys.stderr.isatty()) as say:
        say("reading the scenario and its demand")
        sc = with_profiles(load_scenario(scenario, window_length_s=a.window_s), list(a.profiles))
        say("evaluating the capacity model")
        problem, result, vr = _solve(sc, a, say)
        problem, result, unc = _robust(sc, a, problem, result, say)
        baselines = {} if a.no_baselines else {name: fn(problem) for name, fn in BASELINES.items()}
    if not result.has_solution:
        raise _no_plan_error(problem, result, a.best_effort)
    report = validate(problem, result)
    if not report.ok:
        raise FleetplanError("the solver's plan fails the independent check (please report this): "
                             + "; ".join(report.violations[:5]))
    d = _plan_dict(sc, problem, result, a, baselines, vr, unc.errors)
    _add_uncertainty(d, sc, problem, result, unc, a.suggest_benchmark)
    d["arrival_process"] = arrival_assumptions(sc, problem)
    for w in dropped_profile_warnings(d["options_not_used"]):  # a measured profile that removed an option
        click.echo(w, err=True)
    for pool in d["pools"]:  # a price 100 × the catalog's (a monthly price typed per hour) is planned as given
        if pool.get("price_warning"):
            click.echo(f"warning: price of {pool['id']}: {pool['price_warning']}", err=True)
    with output_files(a.outputs) as tmp:  # all of them or none
        if a.out:
            tmp["--out"].write_text(json.dumps(d, indent=1))
        if a.plot:
            _plot(tmp["--plot"], problem, result)
        if a.xlsx:
            build_plan_workbook(problem, result).save(tmp["--xlsx"])
    if fmt == "json":
        click.echo(json.dumps(d, indent=1))
    elif fmt == "yaml":
        import yaml  # only for -o yaml (start-up speed)

        click.echo(yaml.safe_dump(d, sort_keys=False, allow_unicode=True), nl=False)
    elif fmt == "csv":
        click.echo(_csv(d), nl=False)
    else:
        _render_table(problem, result, d, a.wide)
        if a.wide:
            stdout_console(200).print(_unused_table(d))
        click.echo(_uncertainty_text(d, a.wide))
        click.echo(_arrivals_text(d["arrival_process"], a.wide))
        if vr is not None:
            click.echo(verify_text(vr))
