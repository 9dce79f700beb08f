"""``fleetplan simulate``: replay a plan's scenario (or a trace) against its replicas and report what it delivers."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable

import click

from fleetplan.cli.options import format_option, refuse_unused
from fleetplan.cli.output import claim_outputs, progress_status, stdout_console
from fleetplan.cli.params import FiniteRange
from fleetplan.costmodels.utilization import BUSY_TIME, RATED_LOAD, legend
from fleetplan.datasets.traces import load_trace
from fleetplan.errors import InputError
from fleetplan.fileio import atomic_path, check_destinations, check_output_folder, write_text_atomic
from fleetplan.outputs.planio import load_plan_file
from fleetplan.outputs.uncertainty import stated_step_time_factors
from fleetplan.placement.plan import Plan
from fleetplan.placement.problem import DeratingKey, Problem
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.read import Scenario
from fleetplan.scenario.uncertainty import option_errors, step_time_factors
from fleetplan.simulator.engine import Policy
from fleetplan.simulator.fleet import FleetBuilder
from fleetplan.simulator.fleetday import read_json, replay_fleet_day, scenario_weight_bytes, steps_from_dict
from fleetplan.simulator.metrics import ModelWindowMetrics, SimReport
from fleetplan.simulator.replay import parse_window, simulate_day, simulate_trace
from fleetplan.simulator.whatif import preemption_whatif, two_tier_whatif
from fleetplan.simulator.workload import Workload, scenario_workload, trace_workload
from fleetplan.solvers.online.state import load_times


def _f(x: float | None, fmt: str = ".3f") -> str:
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


_COLS = (("model", None), ("requests", "d"), ("SLO attain.", ".1%"), ("TTFT p50/p95/p99 s", None),
         ("TPOT p50/p95/p99 ms", None), ("queue p99 s", ".2f"), ("goodput req/s", ".2f"), ("busy time", ".0%"),
         ("energy kWh", ".1f"), ("$/1M tok", ".3f"))


def _row(r: ModelWindowMetrics) -> list[str]:
    return [r.model, str(r.requests), _f(r.slo_attainment, ".1%"),
            "/".join(_f(x, ".2f") for x in (r.ttft_p50_s, r.ttft_p95_s, r.ttft_p99_s)),
            "/".join(_f(x * 1e3 if x is not None and math.isfinite(x) else x, ".0f")
                     for x in (r.tpot_p50_s, r.tpot_p95_s, r.tpot_p99_s)),
            _f(r.queue_delay_p99_s, ".2f"), _f(r.goodput_req_per_s, ".2f"), _f(r.utilization, ".0%"),
            _f(r.energy_kwh, ".1f"), _f(r.usd_per_1m_tokens, ".3f")]


_WINDOW_TITLE = ("SLO attainment (TTFT s, TPOT ms, each at its target's percentile; MISS: a target missed by more "
                 "than 2%)")


def _misses_text(rep: SimReport) -> str:
    """One line per missed model-window target, e.g. 'Qwen2.5-7B window 3: TPOT p95 125 ms > 100 ms'."""
    return "\n".join(f"{m} window {w}: {'; '.join(t)}" for m, w, t in rep.misses())


def _window_table(rep: SimReport) -> tuple[list[str], list[list[str]]]:
    windows = sorted({r.window for r in rep.rows})
    models = [r.model for r in rep.overall]
    head = ["window"] + models
    by = {(r.model, r.window): r for r in rep.rows}
    body = []
    for w in windows:
        cells = [str(w)]
        for m in models:
            r = by.get((m, w))
            tpot_ms = r.tpot_at_target_s * 1e3 if r is not None and math.isfinite(r.tpot_at_target_s) else math.nan
            cells.append("" if r is None else f"{_f(r.slo_attainment, '.0%')} ({_f(r.ttft_at_target_s, '.2f')} s, "
                         f"{_f(tpot_ms, '.0f')} ms)" + (" MISS" if r.misses() else ""))
        body.append(cells)
    return head, body


def _md_table(head: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines)


def render_markdown(rep: SimReport, whatif: dict | None = None) -> str:
    """A markdown report: summary per model, SLO attainment (and P95 TTFT) per window, notes, what-ifs."""
    out = [f"# {rep.title}", "", f"Overall SLO attainment: **{_f(rep.attainment(), '.1%')}** of measured requests "
           f"meet both TTFT and TPOT targets ({rep.requests} requests simulated in {rep.wall_s:.1f} s).", "",
           "## Per model", "", _md_table([c for c, _ in _COLS], [_row(r) for r in rep.overall]), "",
           f"## Per window: {_WINDOW_TITLE}", ""]
    head, body = _window_table(rep)
    out += [_md_table(head, body), "", "## How this was measured", ""]
    out += [f"- {n}" for n in rep.notes]
    out += [f"- {legend(BUSY_TIME)}; energy is an estimate (board power linear in busy time)"]
    if whatif:
        out += ["", "## What-if policies", ""]
        p = whatif.get("preemption")
        if p:
            out += [f"FCFS vs progress-aware preemption (threshold {p.threshold_s:g} s, resume by {p.resume}):", "",
                    _md_table(["policy", "P95 TTFT short requests s", "P95 TTFT all s"],
                              [["FCFS", _f(p.short_ttft_p95_fcfs_s), _f(p.ttft_p95_fcfs_s)],
                               ["preemption", _f(p.short_ttft_p95_preempt_s), _f(p.ttft_p95_preempt_s)]]), "",
                    f"{p.preempted_requests} requests preempted ({p.preemptions} pauses); their end-to-end slowdown "
                    f"vs FCFS: median {_f(p.slowdown_median, '.2f')}×, P95 {_f(p.slowdown_p95, '.2f')}×; swap traffic "
                    f"{_f(p.swap_gb, '.2f')} GB.", ""]
        t = whatif.get("two_tier")
        if t:
            out += ["Two-tier KV cache (HBM + host DRAM over PCIe):", "",
                    _md_table(["host share", "KV capacity ×", "swap traffic GB", "P95 TTFT s", "P95 TPOT ms",
                               "SLO attain."],
                              [[f"{r.host_kv_share:.0%}", f"{r.kv_capacity_factor:.2f}", _f(r.swap_gb, ".1f"),
                                _f(r.ttft_p95_s), _f(r.tpot_p95_s * 1e3, ".1f"), _f(r.slo_attainment, ".1%")]
                               for r in t])]
    return "\n".join(out) + "\n"


def _print_table(rep: SimReport) -> None:
    from rich.table import Table

    console = stdout_console(140)
    console.print(f"[bold]{rep.title}[/bold]")
    t = Table(title="Per model (all measured requests)", title_justify="left")
    for c, _ in _COLS:
        t.add_column(c, justify="left" if c == "model" else "right")
    for r in rep.overall:
        t.add_row(*_row(r))
    console.print(t)
    head, body = _window_table(rep)
    if len(body) > 1:
        wt = Table(title=f"Per window: {_WINDOW_TITLE}", title_justify="left")
        for c in head:
            wt.add_column(c, justify="right")
        for row in body:
            wt.add_row(*row)
        console.print(wt)
    console.print(f"overall SLO attainment: [bold]{_f(rep.attainment(), '.1%')}[/bold]; {rep.requests} requests "
                  f"simulated in {rep.wall_s:.1f} s")
    for n in rep.notes:
        console.print(f"[dim]{n}[/dim]")


def _plots(folder: str, rep: SimReport) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    d = check_output_folder(folder, field="--plots")
    d.mkdir(exist_ok=True)
    written = []
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    overall = {r.model: r for r in rep.overall}
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    unserved = 0
    percentiles: set[float] = set()
    targets: tuple[set[float], set[float]] = (set(), set())
    for i, (m, (ttft, tpot)) in enumerate(rep.latencies.items()):
        color = colors[i % len(colors)]
        o = overall.get(m)
        for k, (ax, x) in enumerate(((axes[0], ttft), (axes[1], tpot))):
            finite = np.sort(x[np.isfinite(x)])
            if k == 0:
                unserved += int(len(x) - len(finite))
            if len(finite):
                ax.plot(finite, np.arange(1, len(finite) + 1) / len(x), label=m, lw=1.2, color=color)
            if o is not None:  # the model's target: a dashed vertical in its colour, at its SLO percentile
                target = o.ttft_slo_s if k == 0 else o.tpot_slo_s
                ax.axvline(target, color=color, lw=0.9, ls="--")
                targets[k].add(target)
                if o.slo is not None:
                    percentiles.add(o.slo.ttft_percentile if k == 0 else o.slo.tpot_percentile)
    for ax, name, ts in ((axes[0], "TTFT (s)", targets[0]), (axes[1], "TPOT (s)", targets[1])):
        ax.set_xscale("log")
        ax.set_xlabel(name)
        for target in sorted(ts):
            ax.text(target, 0.02, f" target {target:g} s", rotation=90, fontsize=7, color="dimgrey", va="bottom")
        ax.set_ylabel("share of requests")
        for q in sorted(percentiles or {95.0}):
            ax.axhline(q / 100, color="grey", lw=0.6, ls=":")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    shown = ", ".join(f"p{q:g}" for q in sorted(percentiles or {95.0}))
    fig.suptitle(f"{rep.title}: latency CDF; dashed: each model's SLO target, dotted: {shown}", fontsize=9)
    fig.text(0.5, 0.01, (f"not drawn: {unserved:,} requests never served (each curve's share counts them, so it "
                         "ends below 1)" if unserved else "every measured request is drawn (warm-up excluded)"),
             ha="center", fontsize=7.5, color="dimgrey")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    with atomic_path(d / "latency_cdf.png") as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    written.append(str(d / "latency_cdf.png"))
    fig, ax = plt.subplots(figsize=(9, 3.5))
    windows = sorted({r.window for r in rep.rows})
    models = [r.model for r in rep.overall]
    if len(windows) == 1:  # one window: a bar per model (a line through one point is a lone dot)
        att = {r.model: r.slo_attainment for r in rep.rows}
        bars = ax.bar(range(len(models)), [att.get(m, 0.0) for m in models], color=colors[:len(models)] or None)
        ax.bar_label(bars, labels=[f"{att.get(m, 0.0):.1%}" for m in models], fontsize=7)
        ax.set_xticks(range(len(models)), models, fontsize=7, rotation=15)
        ax.set_xlabel(f"model (window {windows[0]} only)")
    else:
        for m in models:
            rows = sorted((r.window, r.slo_attainment) for r in rep.rows if r.model == m)
            ax.plot([w for w, _ in rows], [a for _, a in rows], marker="o", ms=3, label=m)
        ax.set_xlabel("window")
        ax.legend(fontsize=7)
    ax.axhline(0.95, color="grey", lw=0.8, ls="--")
    ax.set_ylabel("SLO attainment")
    ax.set_ylim(0, 1.1 if len(windows) == 1 else 1.02)  # room for the bars' labels
    ax.set_title("SLO attainment per window (dashed: 95%; a request never served counts as a miss)", fontsize=9)
    fig.tight_layout()
    with atomic_path(d / "attainment_per_window.png") as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    written.append(str(d / "attainment_per_window.png"))
    return written


def _simulate_fleet(plan_file: str, fleet_file: str, seed: int, policy: Policy, fmt: str) -> None:
    """``simulate PLAN --fleet FILE``: the plan file gives the scenario; FILE the changing fleet."""
    problem, _, scenario, _ = load_plan_file(plan_file)
    steps = steps_from_dict(read_json(fleet_file), problem)
    lt = load_times(problem, scenario.options["load_bandwidth_bytes_per_s"], scenario_weight_bytes(problem, scenario))
    rep = replay_fleet_day(problem, scenario, steps, lt, seed=seed, policy=policy)
    d = {"cost_usd": rep.cost_usd, "gpu_hours": rep.gpu_hours, "utilization": rep.utilization,
         "utilization_kind": BUSY_TIME.key, "rated_load": rep.capacity_utilization,
         "slo_attainment": rep.attainment, "requests": rep.requests, "migrations": rep.migrations,
         "by_model": {m: {"requests": n, "met": k} for m, (n, k) in rep.by_model.items()},
         "first_step_at_s": steps[0].at_s}
    if fmt == "json":
        click.echo(json.dumps(d, indent=1))
    else:
        click.echo(f"fleet of {len(steps)} steps over {len(rep.windows)} windows: ${rep.cost_usd:,.2f} GPU cost, "
                   f"{rep.gpu_hours:.1f} GPU-hours, {BUSY_TIME.label(rep.utilization)}, "
                   f"{RATED_LOAD.label(rep.capacity_utilization)}, SLO attainment "
                   f"{rep.attainment:.2%} of {rep.requests:,} requests, {rep.migrations} migrations")
        for m, (n, k) in rep.by_model.items():
            click.echo(f"  {m}: {k:,} of {n:,} requests met the SLO ({k / n:.1%})" if n else f"  {m}: no requests")
        if steps[0].at_s > 0:
            # A fresh user replayed a service's history of 19:12-24:00 and read 23% attainment without a word
            # that the day's first 19 hours had no fleet.
            first = steps[0].at_s
            click.echo(f"no fleet before {int(first // 3600):02d}:{int(first % 3600 // 60):02d} (the first step, "
                       f"at_s {first:g}): requests before it had no replica and count as misses")
        click.echo(legend(BUSY_TIME, RATED_LOAD))


#: simulate's options that set one kind of replay: {keyword: flag}.
_TRACE_ONLY = {"window": "--window", "model": "--model", "rate_scale": "--rate-scale", "time_scale": "--time-scale",
               "bucket_s": "--bucket"}
_DAY_ONLY = {"slice_s": "--slice", "arrivals": "--arrivals"}
_WHAT_IF_ONLY = {"preempt_after": "--preempt-after", "resume": "--resume"}
_NOT_FLEET = {"trace_ref": "--trace", **_TRACE_ONLY, **_DAY_ONLY, "what_if": "--what-if", **_WHAT_IF_ONLY,
              "report_path": "--report", "plots_dir": "--plots", "check": "--check", "pessimistic": "--pessimistic"}


def _refuse_unused_options(*, fleet: bool, trace: bool, what_if: bool, rate_scale: bool) -> None:
    """Raise InputError naming the first option given that the replay asked for would ignore (before any work):
    with --fleet only the fleet's totals are replayed; --trace replays its own arrivals; the what-if settings need
    --what-if; the trace settings need --trace; --rate-scale undoes a --time-scale."""
    refuse_unused(_NOT_FLEET, applies=not fleet, why="with --fleet: the fleet replay prints its totals only (cost, "
                  "GPU-hours, utilization, attainment, migrations), with no trace, per-window report, plots, SLO "
                  "check, what-ifs or pessimistic step times", fix="drop it, or replay the plan's own windows "
                  "without --fleet")
    refuse_unused(_DAY_ONLY, applies=not trace, why="with --trace: the trace gives the arrivals and its window is "
                  "replayed whole", fix="drop it, or replay the plan's day without --trace")
    refuse_unused(_WHAT_IF_ONLY, applies=what_if, why="without --what-if: no what-if policy is replayed",
                  fix="add --what-if, or drop it")
    refuse_unused(_TRACE_ONLY, applies=trace, why="without --trace: it sets the trace replay",
                  fix="add --trace NAME (a shipped trace or a CSV/JSONL file), or drop it")
    refuse_unused({"time_scale": "--time-scale"}, applies=not rate_scale,
                  why="with --rate-scale: the trace's rate is set to the window's demand, whatever its time scale",
                  fix="drop one")


@click.command("simulate")
@click.argument("plan_file", type=click.Path(dir_okay=False))
@click.option("--trace", "trace_ref", default=None,
              help="Replay this trace (shipped name such as azure-conv, or a CSV/JSONL path) against one window.")
@click.option("--window", default=None, help="Window of the trace replay: HH:MM or an index (default: peak).")
@click.option("--model", default=None, help="Send every trace request to this model.")
@click.option("--rate-scale", is_flag=True, help="Rescale the trace's arrival rate to the window's demand.")
@click.option("--time-scale", type=FiniteRange(min=1e-6, max=1e6, min_open=True), default=None,
              help="Multiply the trace's request rate by this factor.")
@click.option("--bucket", "bucket_s", type=FiniteRange(min=1), default=None,
              help="Trace replay: report per BUCKET-second interval of the trace instead of per window.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Random seed (>= 0).")
@click.option("--router", type=click.Choice(["least-work", "round-robin"]), default="least-work", show_default=True)
@click.option("--arrivals", type=click.Choice(["poisson", "servegen"]), default="poisson", show_default=True,
              help="Day replay: Poisson arrivals at the day curve's 10-minute rates (what the plan was sized for), "
                   "or 'servegen': one renewal process per ServeGen client with its fitted CV, a stress test "
                   "(ServeGen's per-client CVs of 3-12 at rescaled rates give near-simultaneous bursts).")
@click.option("--slice", "slice_s", type=FiniteRange(min=60), default=None,
              help="Day replay: simulate this many seconds of each window (around its busiest 10 minutes).")
@click.option("--what-if", "what_if", is_flag=True,
              help="Also run the what-if policies (preemption, two-tier KV) on the replayed (or peak) window.")
@click.option("--preempt-after", type=FiniteRange(min=0), default=1.0, show_default=True,
              help="What-if: seconds a KV-blocked request waits before it preempts a decode.")
@click.option("--resume", type=click.Choice(["recompute", "swap"]), default="recompute", show_default=True)
@click.option("--report", "report_path", type=click.Path(dir_okay=False), default=None, help="Write a markdown report.")
@click.option("--plots", "plots_dir", type=click.Path(file_okay=False), default=None,
              help="Folder for latency-CDF and per-window attainment plots.")
@format_option(("table", "json"))
@click.option("--fleet", "fleet_file", type=click.Path(dir_okay=False), default=None,
              help="Replay a fleet that changes during the day instead of the plan's windows: a JSON file "
                   '{"steps": [{"at_s": s from the day\'s start, "replicas": [{"model", "pool", "tp", "pp", "count"}], '
                   '"shared": [{"pool", "models"}]}]} (new replicas billed from their step and serving after their '
                   "load time, stopped ones finishing their queues); prints cost, GPU-hours, utilization, attainment "
                   "and migrations.")
@click.option("--pessimistic", is_flag=True,
              help="Replay at the pessimistic end of the plan's stated capacity errors: every option's step times "
                   "× 1 / (1 − its capacity_error), so each replica serves (1 − error) × its planned rate (a plan "
                   "made with `plan --robust` should still hold). Not with --fleet.")
@click.option("--check", is_flag=True,
              help="Exit with status 1 when any model-window misses an SLO target (a percentile more than 2% above "
                   "its target, or attainment below its target); the message lists the misses. For CI gates.")
def simulate(plan_file, trace_ref, window, model, rate_scale, time_scale, bucket_s, seed, router, arrivals, slice_s,
             what_if, preempt_after, resume, report_path, plots_dir, fmt, fleet_file, pessimistic, check) -> None:
    """Replay PLAN_FILE (written by `fleetplan plan --out`): its own scenario over the whole day, or --trace against
    one window's replicas; report TTFT/TPOT percentiles, SLO attainment, goodput, utilization, energy and cost
    per million tokens (the plan's day cost is `fleetplan plan`'s; --fleet replays a changing fleet and bills it).
    With --check, exit 1 when any target is missed."""

    _refuse_unused_options(fleet=fleet_file is not None, trace=trace_ref is not None, what_if=what_if,
                           rate_scale=rate_scale)
    # The report must not replace a file the replay reads (plan, trace file, fleet steps); checked before the work.
    check_destinations({"--report": report_path}, inputs=[plan_file, fleet_file, trace_ref])
    claim_outputs({"--report": report_path})  # a second run writing the same report is refused
    if plots_dir:
        check_output_folder(plots_dir, field="--plots")  # before the replay
    policy = Policy(router=router)
    if fleet_file is not None:
        _simulate_fleet(plan_file, fleet_file, seed, policy, fmt)
        return
    whatif: dict = {}
    with progress_status(enabled=sys.stderr.isatty()) as say:
        say("reading the plan and rebuilding its problem")
        problem, plan, scenario, d = load_plan_file(plan_file)
        factors = _stated_factors(plan_file, d, scenario, problem) if pessimistic else None
        if trace_ref is not None:
            rep, w, wl = _replay_trace(problem, plan, scenario, trace_ref, say, window=window, model=model,
                                       rate_scale=rate_scale, time_scale=time_scale, seed=seed, policy=policy,
                                       bucket_s=bucket_s, what_if=what_if, step_time_factors=factors)
        else:
            rep = simulate_day(problem, plan, scenario, seed=seed, slice_s=slice_s, arrivals=arrivals, policy=policy,
                               progress=say, step_time_factors=factors)
            w = parse_window(None, problem) if what_if else -1
            wl = scenario_workload(scenario, w, 0.0, problem.window_length_s, seed, arrivals=arrivals,
                                   names=[m.name for m in problem.models]) if what_if else None
        if pessimistic and not factors:
            rep.notes.append("--pessimistic: the plan states no capacity error above 0 (measured capacities): "
                             "replayed at its nominal step times")
        if wl is not None:
            whatif = _what_ifs(problem, plan, scenario, wl, w, say, preempt_after=preempt_after, resume=resume,
                               router=router)
            rep.notes.append(f"what-ifs replayed on window {w}")
    if report_path:
        write_text_atomic(report_path, render_markdown(rep, whatif))
    if plots_dir:
        _plots(plots_dir, rep)
    _print(rep, whatif, fmt)
    if check:
        _check(rep)


def _stated_factors(plan_file: str, d: dict, scenario: Scenario, problem: Problem) -> dict[DeratingKey, float]:
    """--pessimistic: the step-time factors of the plan file's stated capacity errors, each re-checked against the
    error its scenario gives (:func:`fleetplan.scenario.uncertainty.option_errors`, on the problem before any
    --robust or --verify derating). InputError for a plan file that states none (written before capacity errors
    were recorded), or one whose stated error differs from its scenario's (hand-edited)."""
    rows = [r for r in d.get("replicas") or []] + [g for g in d.get("shared_gpus") or []]
    if rows and not any("capacity_error" in r for r in rows):
        raise InputError("--pessimistic needs the capacity errors a plan states (replicas[].capacity_error); this "
                         "plan file has none: write it again with `fleetplan plan --out`", source=plan_file,
                         field="replicas[].capacity_error")
    try:
        stated = stated_step_time_factors(d)
    except InputError as exc:
        raise InputError(exc.message, source=plan_file, field=exc.field, value=exc.value) from None
    plain = problem if not (d.get("robust") or d.get("verify")) else build_problem(scenario, new_plan=False)
    expected = step_time_factors(option_errors(scenario, plain))
    keys = [(r["model"], r["pool"], r["tp"], r["pp"]) for r in d.get("replicas") or []]
    keys += [(m, g["pool"], "shared", 1) for g in d.get("shared_gpus") or [] for m in g["models"]]
    for k in keys:
        a, b = stated.get(k, 1.0), expected.get(k, 1.0)
        if abs(a - b) > 1e-9 * b:
            raise InputError(f"the capacity error of {k} reads {1 - 1 / a:.4g} but its scenario gives "
                             f"{1 - 1 / b:.4g}; a plan file records one solve and cannot be hand-edited: write it "
                             "again with `fleetplan plan --out`", source=plan_file, field="capacity_error",
                             value=round(1 - 1 / a, 6))
    return stated


def _replay_trace(problem: Problem, plan: Plan, scenario: Scenario, trace_ref: str, say: Callable[[str], None], *,
                  window: str | None, model: str | None, rate_scale: bool, time_scale: float | None, seed: int,
                  policy: Policy, bucket_s: float | None, what_if: bool,
                  step_time_factors: dict[DeratingKey, float] | None = None) -> tuple[SimReport, int, Workload | None]:
    """(report, window, the window's workload for the what-ifs, or None without them) of a --trace replay."""
    say(f"reading trace {trace_ref}")
    trace = load_trace(trace_ref)
    say("replaying the trace")
    rep = simulate_trace(problem, plan, scenario, trace, window=window, model=model, rate_scale=rate_scale,
                         time_scale=time_scale, seed=seed, policy=policy, bucket_s=bucket_s,
                         step_time_factors=step_time_factors)
    if not what_if:
        return rep, -1, None
    w = parse_window(window, problem, [model] if model else None)
    return rep, w, trace_workload(trace, problem, w, model=model, rate_scale=rate_scale, time_scale=time_scale,
                                  seed=seed)


def _what_ifs(problem: Problem, plan: Plan, scenario: Scenario, wl: Workload, w: int, say: Callable[[str], None],
              *, preempt_after: float, resume: str, router: str) -> dict:
    """{'preemption': ..., 'two_tier': [...]}: the what-if policies replayed on window ``w``'s workload ``wl``."""
    builder = FleetBuilder(problem, plan, scenario, max_tokens=float((wl.input_tokens + wl.output_tokens).max()))
    say("what-if: preemption")
    preemption = preemption_whatif(builder, wl, w, threshold_s=preempt_after, resume=resume, router=router)
    say("what-if: two-tier KV cache")
    return {"preemption": preemption, "two_tier": two_tier_whatif(builder, wl, w, router=router)}


def _print(rep: SimReport, whatif: dict, fmt: str) -> None:
    """The report (and the what-ifs) on stdout, as JSON or as tables."""
    if fmt == "json":
        d = rep.to_dict()
        if whatif:
            d["what_if"] = {"preemption": whatif["preemption"].__dict__,
                            "two_tier": [r.__dict__ for r in whatif["two_tier"]]}
        click.echo(json.dumps(d, indent=1, default=lambda x: None))
        return
    _print_table(rep)
    if whatif:
        from rich.console import Console

        Console(width=140).print(render_markdown(rep, whatif).split("## What-if policies", 1)[1])


def _check(rep: SimReport) -> None:
    """--check: exit 1 with the misses on stderr when a model-window misses a target, else say it passed."""
    misses = rep.misses()
    if misses:
        click.echo(f"SLO check failed: {len(misses)} of {len(rep.rows)} model-windows miss a target:\n"
                   + _misses_text(rep), err=True)
        sys.exit(1)
    click.echo(f"SLO check passed: every target met in all {len(rep.rows)} model-windows (2% tolerance)",
               err=True)
