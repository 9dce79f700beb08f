"""`fleetplan allocate`: split a shared GPU pool between tenants (optimizer vs static partitioning vs fair share)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from fleetplan.cli.options import (
    backend_option,
    checked_effort,
    checked_time_limit,
    fanout_options,
    format_option,
    plot_option,
    refuse_unused,
    refuse_unused_fanout,
    threads_option,
    time_limit_option,
)
from fleetplan.cli.output import claim_outputs, table
from fleetplan.cli.params import FiniteRange
from fleetplan.costmodels.engine import PREFILL_FIRST
from fleetplan.costmodels.utilization import BUSY_TIME, SERVED_SHARE, legend
from fleetplan.errors import InputError, SolverError
from fleetplan.fileio import atomic_path
from fleetplan.placement.tenants import Objectives, Tenant, TenantProblem, quota_warning, validate_allocation
from fleetplan.scenario.tenants import TenantWorkload, load_tenants_with_workloads
from fleetplan.simulator.tenants import (
    IN_NODE_POLICIES,
    BurstReplay,
    TenantReplay,
    burst_replay,
    default_windows,
    geometric_mean,
    isolation_ratio,
    replay_allocation,
)
from fleetplan.solvers.executor import make_executor
from fleetplan.solvers.tenants.allocate import BACKENDS as ALLOCATION_BACKENDS
from fleetplan.solvers.tenants.allocate import AllocationResult, dominates, solve_allocation, wall_clock
from fleetplan.solvers.tenants.baselines import fair_share, static_partition
from fleetplan.solvers.tenants.slicing import NodeSplit, split_allocation, split_kind

if TYPE_CHECKING:  # rich is imported when a table is printed (start-up speed)
    from rich.table import Table


def _objectives_json(obj: Objectives) -> dict:
    d = obj.as_dict()
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in d.items()}


def _write_atomic(path: Path, write: Callable[[str], object]) -> None:

    with atomic_path(path) as tmp:
        write(str(tmp))


def _plot(path: Path, result: AllocationResult, policies: dict[str, Objectives]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2))
    if result.pareto:
        xs = [o.isolation for _, o in result.pareto]
        ys = [100 * o.utilization for _, o in result.pareto]
        ax.plot(xs, ys, "o-", label="Pareto front (optimizer)")
    marks = {"optimizer": "*", "static": "s", "fair-share": "^"}
    for name, obj in policies.items():
        ax.scatter([obj.isolation], [100 * obj.utilization], marker=marks.get(name, "x"), s=90, label=name, zorder=3)
    ax.set_xlabel("isolation (shared node-windows × interference coefficient)")
    ax.set_ylabel(f"{SERVED_SHARE.name} (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    _write_atomic(path, lambda tmp: fig.savefig(tmp, format="png", dpi=120))
    plt.close(fig)


def _tenant_json(t: Tenant) -> dict:
    """A tenant's demand, and how it was derived when it came from models and request rates."""
    out: dict = {"demand_gpus": list(t.demand_gpus)}
    if t.demand_note:
        out["demand_note"] = t.demand_note
    if t.models:
        out["derived_from"] = [{"model": m.model, "gpu": m.gpu, "tp": m.tp,
                                "replica_req_per_s": round(m.replica_req_per_s, 6),
                                "rates_req_per_s": list(m.rates_req_per_s),
                                "gpus": [round(g, 6) for g in m.gpus]} for m in t.models]
    return out


def _splits_json(problem: TenantProblem, splits: dict[tuple[int, str], NodeSplit]) -> dict:
    """{window: {node: split}} for the shared nodes: MIG instances (compute slices, 7 per GPU) or MPS shares
    (percent of one GPU), with each tenant's need, grant and shortfall in those units, and the whole GPUs a tenant
    keeps out of the split for its tp ≥ 2 replicas (``whole_gpus``)."""
    gpu = {n.name: n.gpu for n in problem.nodes}
    out: dict = {}
    for (w, n), s in splits.items():
        d: dict[str, object] = {
            "kind": s.kind, "gpu": gpu[n], "status": s.status.value,
            "unit": "compute slices (7 per GPU)" if s.kind == "mig" else "percent of one GPU",
            "needs": dict(s.needs), "granted": dict(s.granted), "unmet": dict(s.unmet),
            "used_gpus": s.used_gpus, "shared_gpus": s.shared_gpus, "whole_gpus": dict(s.whole)}
        if s.kind == "mig":
            d["instances"] = [{"gpu_index": g, "profile": p, "start_slot": st, "tenant": t} for g, p, st, t in s.parts]
        else:
            d["shares"] = [{"gpu_index": g, "tenant": t, "active_thread_pct": pct} for g, t, pct in s.parts]
        out.setdefault(str(w), {})[n] = d
    return out


def _split_table(problem: TenantProblem, splits: dict[tuple[int, str], NodeSplit], split: str) -> Table:
    """One row per (split kind, GPU type): shared node-windows, MIG instances or MPS shares, GPUs used and shared
    by two or more tenants, GPUs kept whole for tp ≥ 2 replicas, unmet compute (MIG slices or percent of a GPU);
    solver statuses in the title."""
    from rich.table import Table

    gpu = {n.name: n.gpu for n in problem.nodes}
    rows: dict[tuple[str, str], list[int]] = {}
    statuses = set()
    for (_w, n), s in splits.items():
        r = rows.setdefault((s.kind, gpu[n]), [0, 0, 0, 0, 0, 0])
        for i, v in enumerate((1, len(s.parts), s.used_gpus, s.shared_gpus, sum(s.whole.values()),
                               sum(s.unmet.values()))):
            r[i] += v
        statuses.add(s.status.value)
    st = f"; {', '.join(sorted(statuses))}" if statuses else ""
    tab = Table(title=f"In-node split, --split {split}{st} (whole: GPUs kept whole for tp ≥ 2 replicas; per node and "
                      "window in JSON)")
    for c in ("split", "GPU type", "node-windows", "parts", "GPUs used", "shared", "whole", "unmet"):
        tab.add_column(c, justify="right", overflow="fold")
    for (kind, g), (nw, parts, used, shared, whole, unmet) in sorted(rows.items()):
        tab.add_row(kind.upper(), g, str(nw), str(parts), str(used), str(shared), str(whole),
                    f"{unmet} {'slices' if kind == 'mig' else '%'}")
    if not rows:
        tab.add_row("-", "no node is shared", "0", "0", "0", "0", "0", "0")
    return tab


def _solve(problem: TenantProblem, opts: dict, *, mode: str, backend: str, time_limit_s: float, threads: int,
           points: int, margin: bool, split: str, executor: str, workers: int, ray_address: str | None,
           effort: float, deadline: float) -> tuple[AllocationResult, dict[tuple[int, str], NodeSplit], list[str]]:
    """The allocation, then the in-node split of its shared nodes, every solve within its effort budget (× ``effort``)
    and the wall-clock safety stop ``deadline`` (a :func:`wall_clock` value: the command's start plus
    ``time_limit_s``), with a spinner on stderr; and the warnings: what the stop cut, and why the split is missing
    if it is. A split that fails (the stop came first, or MIG instances that cannot hold the needs) never loses
    the allocation: it is returned without the split."""
    from rich.console import Console

    with make_executor(executor, workers=workers, address=ray_address) as ex, \
            Console(stderr=True).status("allocating ...") as status:
        result = solve_allocation(problem, mode=mode, backend=backend, weights=opts.get("weights"),
                                  order=opts.get("order"), tolerance=float(opts.get("tolerance", 0.01)),
                                  points=points, time_limit_s=time_limit_s, threads=threads, margin=margin,
                                  progress=lambda m: status.update(m), executor=ex, effort=effort,
                                  deadline=deadline)
        notes = list(result.notes)
        if split == "none":
            return result, {}, notes
        status.update("splitting shared nodes ...")
        left_s = deadline - wall_clock()
        if left_s <= 0:
            return result, {}, [*notes, "the allocation is given without its in-node split: the wall-clock safety "
                                f"stop (--time-limit {time_limit_s:g} s) fired before the split; raise --time-limit"]
        try:
            splits = split_allocation(problem, result.allocation, kind=split, threads=threads, time_limit_s=left_s,
                                      effort=effort)
        except SolverError as exc:
            return result, {}, [*notes, f"the allocation is given without its in-node split: {exc}"]
    cut = sorted(f"window {w} node {n}" for (w, n), s in splits.items() if s.cut_by_clock)
    if cut:
        notes.append(f"the wall-clock safety stop (--time-limit {time_limit_s:g} s) cut the in-node split of "
                     f"{', '.join(cut[:6])}{' and more' if len(cut) > 6 else ''} before its effort budget (status "
                     "feasible there); the split may differ on another machine")
    return result, splits, notes


def _policies(problem: TenantProblem, result: AllocationResult) -> dict[str, Objectives]:
    """The objectives of the optimizer's allocation and of the static and fair-share policies, each re-checked by
    the independent checker (the optimizer's with its guarantees)."""
    policies = {"optimizer": validate_allocation(problem, result.allocation)}
    for name, make in (("static", static_partition), ("fair-share", fair_share)):
        policies[name] = validate_allocation(problem, make(problem), check_guarantees=False)
    return policies


def _baselines_ahead(policies: dict[str, Objectives], *, margin: bool) -> list[str]:
    """A note for each baseline that scores better than the optimizer on every objective. With the margin the
    optimizer keeps the interference headroom of a shared node idle, while the baselines hand every GPU out and are
    charged the interference instead: the two are scored on different footings (a new user's 4-GPU node: fair
    share 80.0% served against the "optimal" 75.0%, same isolation, a smaller SLA shortfall). Without the margin a
    dominating baseline means the optimizer's answer is not optimal, which is said as such."""
    out = []
    for name in ("static", "fair-share"):
        if dominates(policies[name], policies["optimizer"]):
            out.append(f"{name} scores better than the optimizer on every objective: " + (
                "the optimizer keeps each shared node's interference headroom idle (the margin), which the "
                "baselines hand out and lose to interference instead; --no-margin compares them on one footing"
                if margin else "the optimizer's answer is not optimal for the objectives it reports (a defect)"))
    return out


def _allocation_json(problem: TenantProblem, result: AllocationResult, splits: dict[tuple[int, str], NodeSplit],
                     policies: dict[str, Objectives], *, mode: str, backend: str, split: str, kinds: dict[str, str],
                     warnings: list[str]) -> dict:
    """The run as one JSON object: the allocation per tenant, window and node, the tenants' demand, the split,
    the policies' objectives, the Pareto front, the lexicographic stages and the warnings."""
    alloc = result.allocation
    per_tenant: dict = {t.name: {} for t in problem.tenants}
    for (t, w, n), g in sorted(alloc.gpus.items()):
        per_tenant[t].setdefault(str(w), {})[n] = g
    return {
        "scenario": problem.name, "mode": mode, "backend": backend, "status": alloc.status.value,
        "gap": alloc.gap, "solve_s": round(alloc.solve_s, 3), "margin": alloc.margin,
        "windows": problem.n_windows, "pool_gpus": sum(n.gpus for n in problem.nodes),
        "allocation": per_tenant,
        "tenants": {t.name: _tenant_json(t) for t in problem.tenants},
        "split": {"mode": split, "kinds": kinds, "nodes": _splits_json(problem, splits)},
        "policies": {k: _objectives_json(v) for k, v in policies.items()},
        "pareto": [_objectives_json(o) for _, o in result.pareto],
        "lexicographic_stages": [{"objective": n, "optimum": b, "kept": k} for n, b, k in result.stages],
        "warnings": warnings,
    }


def _policies_table(policies: dict[str, Objectives]) -> Table:
    # The SLA shortfall is Σ tenant weight × GPU-windows short of the tenant's target (placement.tenants): weighted.
    tab = table("Policies", ("policy", "served share", "isolation", "shared node-windows",
                             "SLA shortfall (weight × GPU-w)", "unmet guarantee (GPU-w)", "adjusted capacity (GPU-w)",
                             "SLA met"), right=True)
    for name, o in policies.items():
        tab.add_row(name, f"{100 * o.utilization:.1f}%", f"{o.isolation:.2f}", str(o.shared_node_windows),
                    f"{o.sla:.1f}", f"{o.unmet_guaranteed_gpu_windows:.1f}",
                    f"{o.interference_adjusted_capacity_gpu_windows:.0f}",
                    f"{sum(o.sla_met.values())}/{len(o.sla_met)}")
    return tab


def _attainment_table(problem: TenantProblem, policies: dict[str, Objectives]) -> Table:
    att = table("SLA attainment per tenant (served / demand)", ("tenant", "target", *policies),
                right=lambda c: c != "tenant")
    for tenant in problem.tenants:
        att.add_row(tenant.name, f"{100 * tenant.sla_target:.0f}%",
                    *[f"{100 * o.attainment[tenant.name]:.1f}%" for o in policies.values()])
    return att


def _stages_table(result: AllocationResult) -> Table:
    st = table("Lexicographic stages", ("objective", "optimum", "kept within"), right=True)
    for n, b, k in result.stages:
        st.add_row(n, f"{b:.4f}", f"{k:.4f}")
    return st


def _pareto_table(result: AllocationResult) -> Table:
    pt = table("Pareto front (non-dominated)", ("point", "served share", "isolation", "SLA shortfall (weight × GPU-w)",
               "shared node-windows"), right=True)
    for i, (_, o) in enumerate(result.pareto):
        pt.add_row(str(i), f"{100 * o.utilization:.2f}%", f"{o.isolation:.2f}", f"{o.sla:.1f}",
                   str(o.shared_node_windows))
    return pt


def _gpus_table(problem: TenantProblem, result: AllocationResult) -> Table:
    """GPUs held per tenant and window against its demand ('held/demand')."""
    gt = table("Optimizer: GPUs per tenant and window (nodes in JSON)",
               ("window", *(t.name for t in problem.tenants)), right=True)
    for w in range(problem.n_windows):
        held = {t.name: 0 for t in problem.tenants}
        for (t, ww, _n), g in result.allocation.gpus.items():
            if ww == w:
                held[t] += g
        gt.add_row(str(w), *[f"{held[t.name]}/{t.demand_gpus[w]:g}" for t in problem.tenants])
    return gt


def _print_tables(problem: TenantProblem, result: AllocationResult, splits: dict[tuple[int, str], NodeSplit],
                  policies: dict[str, Objectives], *, mode: str, backend: str, split: str,
                  plot: Path | None) -> None:
    from rich.console import Console

    con = Console()
    alloc = result.allocation
    gap = f", gap {100 * alloc.gap:.2f}%" if alloc.gap is not None else ""
    con.print(f"[bold]{problem.name or 'scenario'}[/]: {len(problem.tenants)} tenants, {len(problem.nodes)} nodes "
              f"({sum(n.gpus for n in problem.nodes)} GPUs), {problem.n_windows} windows; mode {mode}, backend "
              f"{backend}: {alloc.status.value}{gap} in {alloc.solve_s:.1f} s")
    con.print(_policies_table(policies))
    con.print(legend(SERVED_SHARE))
    con.print(_attainment_table(problem, policies))
    if result.stages:
        con.print(_stages_table(result))
    if result.pareto:
        con.print(_pareto_table(result))
    for tenant in problem.tenants:
        if tenant.models:
            how = "; ".join(f"{m.model} tp {m.tp} ({m.replica_req_per_s:.2f} req/s per replica on {m.gpu})"
                            for m in tenant.models)
            con.print(f"{tenant.name}: demand from its models ({how}), rounded up to whole GPUs per window")
        if tenant.demand_note:
            con.print(f"{tenant.name}: {tenant.demand_note}")
    if split != "none":
        con.print(_split_table(problem, splits, split))
    con.print(_gpus_table(problem, result))
    if plot is not None:
        con.print(f"plot written to {plot}")


def _ms(x: float) -> str:
    return "-" if math.isnan(x) else ("never" if math.isinf(x) else f"{1000 * x:.0f}")


def _replay_table(title: str, replays: dict[str, TenantReplay], workloads: dict[str, tuple[TenantWorkload, ...]]
                  ) -> Table:
    """Per tenant and policy: requests, TTFT and TPOT P50/P95/P99 (ms), SLO attainment, replicas (on shared
    nodes)."""
    tab = table(title, ("tenant", "policy", "requests", "TTFT P50/P95/P99 ms", "TPOT P50/P95/P99 ms", "SLO met",
                        "replicas (shared)"), right=lambda c: c not in ("tenant", "policy"))
    for t in workloads:
        for pol, rep in replays.items():
            r = rep.tenants[t]
            tab.add_row(t, pol, str(r.requests), "/".join(_ms(r.ttft_s[q]) for q in (50, 95, 99)),
                        "/".join(_ms(r.tpot_s[q]) for q in (50, 95, 99)), f"{100 * r.attainment:.1f}%",
                        f"{r.replicas} ({r.slowed})")
    return tab


def _verify(problem: TenantProblem, result: AllocationResult, splits: dict[tuple[int, str], NodeSplit],
            policies: dict[str, Objectives], workloads: dict[str, tuple[TenantWorkload, ...]], *,
            windows: list[int] | None, slice_s: float, burst: tuple[str, float] | None, seed: int, threads: int,
            split: str, backend: str, effort: float, in_node: str = "one-level") -> None:
    """``--verify``: each tenant's requests replayed on the optimizer's allocation and on static partitions in
    ``windows``, a burst of one tenant, and the papers' answer (utilization and P99 isolation vs static); with
    ``in_node`` 'two-level', the optimizer's allocation replayed again under the two-level in-node policy and
    compared with the one-level replay, nominal and in the burst."""
    from rich.console import Console

    con = Console()
    if not workloads:
        raise InputError("--verify: no tenant says what it serves; give a tenant models or replay: {name, "
                         "token_mix, slo}", field="replay")
    static = static_partition(problem)
    ws = windows if windows is not None else default_windows(problem, result.allocation)
    warm = min(20.0, slice_s / 3)
    reps = {pol: replay_allocation(problem, alloc, workloads, windows=ws, slice_s=slice_s, warmup_s=warm, seed=seed,
                                   splits=spl)
            for pol, alloc, spl in (("optimizer", result.allocation, splits), ("static", static, {}))}
    con.print(_replay_table(f"Replay on the allocation: windows {', '.join(map(str, ws))}, {slice_s:g} s each after "
                            f"{warm:.3g} s warm-up, seed {seed}; shared nodes "
                            + ("slowed by their coefficient" if split == "none" else f"split (--split {split})"),
                            reps, workloads))
    not_replayed = [t.name for t in problem.tenants if t.name not in workloads]
    if not_replayed:
        con.print(f"not replayed (no models, no replay entry: they hold GPUs and interfere only): "
                  f"{', '.join(not_replayed)}")
    ratios = {t: isolation_ratio(reps["optimizer"].tenants[t], reps["static"].tenants[t]) for t in workloads}
    b: BurstReplay | None = None
    if burst is not None:
        bt, factor = burst
        bw = ws[-1] if windows is not None else max(ws, key=lambda w: sum(t.demand_gpus[w] for t in problem.tenants))
        b = burst_replay(problem, workloads, tenant=bt, window=bw, factor=factor, slice_s=slice_s, warmup_s=warm,
                         seed=seed, threads=threads, split=split, backend=backend, effort=effort,
                         two_level=in_node == "two-level")
        tab = table(f"Burst: {bt} × {factor:g} in window {bw} (optimizer re-solved for it; static keeps its nodes): "
                    "P99 TTFT ms, nominal -> burst, and SLO met", ("tenant", "optimizer", "static"),
                    right=lambda c: c != "tenant")
        for t in workloads:
            cells = []
            for pol in ("optimizer", "static"):
                n, h = b.nominal[pol].tenants[t], b.burst[pol].tenants[t]
                cells.append(f"{_ms(n.ttft_s[99])} -> {_ms(h.ttft_s[99])} ({100 * n.attainment:.0f}% -> "
                             f"{100 * h.attainment:.0f}%)")
            tab.add_row(t + (" (bursting)" if t == bt else ""), *cells)
        con.print(tab)
    o, s = policies["optimizer"], policies["static"]
    con.print("[bold]Answer[/] (the papers: ~90% utilization, ~40% better P99 isolation than static partitions):")
    con.print(f"  {SERVED_SHARE.name} over the day (the allocation's own model): optimizer "
              f"{100 * o.utilization:.1f}%, static {100 * s.utilization:.1f}%")
    con.print(f"  {BUSY_TIME.name} of the pool in the replayed windows (busy GPU-seconds / pool GPU-seconds): "
              f"optimizer {100 * reps['optimizer'].busy_share:.1f}%, static {100 * reps['static'].busy_share:.1f}%")
    finite = {t: r for t, r in ratios.items() if math.isfinite(r)}
    ratio_text = ", ".join(f"{t} {r:.2f}" for t, r in finite.items())
    missing = sorted(set(ratios) - set(finite))
    con.print(f"  P99 TTFT optimizer / static per tenant (< 1: shorter tail than static): {ratio_text or 'none'}"
              + (f"; no finite ratio for {', '.join(missing)}" if missing else ""))
    g = geometric_mean(list(finite.values()))
    if math.isfinite(g):
        con.print(f"  geometric mean {g:.2f}: the optimizer's P99 TTFT is {100 * abs(1 - g):.0f}% "
                  f"{'shorter' if g < 1 else 'longer'} than static partitions' on the same requests")
    if b is not None:
        others = [t for t in workloads if t != b.tenant]
        for pol in ("optimizer", "static"):
            gr = geometric_mean([b.burst[pol].tenants[t].ttft_s[99] / b.nominal[pol].tenants[t].ttft_s[99]
                                 for t in others if b.nominal[pol].tenants[t].ttft_s[99] > 0])
            if math.isfinite(gr):
                con.print(f"  during the burst the other tenants' P99 TTFT moves × {gr:.2f} under {pol} "
                          "(geometric mean of burst / nominal)")
    if in_node == "two-level":  # both policies on the prefill-first engine, the one two-level is modelled for
        one, two = (replay_allocation(problem, result.allocation, workloads, windows=ws, slice_s=slice_s,
                                      warmup_s=warm, seed=seed, in_node=pol, engine=PREFILL_FIRST,
                                      splits=splits if pol == "one-level" else None)
                    for pol in ("one-level", "two-level"))
        con.print(_in_node_table(problem, one, two, b, workloads, split=split))
    con.print(legend(SERVED_SHARE, BUSY_TIME))


def _in_node_table(problem: TenantProblem, one: TenantReplay, two: TenantReplay, b: BurstReplay | None,
                   workloads: dict[str, tuple[TenantWorkload, ...]], *, split: str) -> Table:
    """Per tenant: P99 TTFT (ms) and SLO attainment of the optimizer's allocation under the one-level replay (as
    in the replay table) and the two-level one, in the replayed windows and, with a burst, nominal -> burst."""
    cols = ["tenant", "weight", "one-level", "two-level"]
    if b is not None:
        cols += ["burst one-level", "burst two-level"]
    burst = f"; burst: {b.tenant} × {b.factor:g} in window {b.window}, nominal -> burst" if b is not None else ""
    tab = table("In-node policy on the optimizer's allocation: P99 TTFT ms (SLO met), both policies on the "
                "prefill-first engine (request priorities are modelled for it only; the replay above runs vLLM V1, "
                "the engine the demand was sized for). One-level: each tenant's replicas serve it FCFS"
                + ("" if split == "none" else f", shared nodes split (--split {split})")
                + "; two-level: a shared node's replicas of one model serve its tenants by weight, preempting "
                f"lower weights (whole GPUs, no split; {two.pooled_replicas} replicas pooled across tenants in "
                "the replayed windows)" + burst, tuple(cols), right=lambda c: c != "tenant")
    for t in workloads:
        cells = [f"{problem.tenant(t).weight:g}"]
        cells += [f"{_ms(r.tenants[t].ttft_s[99])} ({100 * r.tenants[t].attainment:.0f}%)" for r in (one, two)]
        if b is not None:
            for pol in ("optimizer prefill-first", "optimizer two-level"):
                n, h = b.nominal[pol].tenants[t], b.burst[pol].tenants[t]
                cells.append(f"{_ms(n.ttft_s[99])} -> {_ms(h.ttft_s[99])} ({100 * n.attainment:.0f}% -> "
                             f"{100 * h.attainment:.0f}%)")
        tab.add_row(t + (" (bursting)" if b is not None and t == b.tenant else ""), *cells)
    return tab


def _parse_burst(text: str | None, problem: TenantProblem) -> tuple[str, float] | None:
    """'TENANT' or 'TENANT:FACTOR' (default factor 2); None for 'none'; default (None): the highest-weight tenant."""
    if text is None:
        top = max(problem.tenants, key=lambda t: (t.weight, t.name))
        return top.name, 2.0
    if text == "none":
        return None
    name, _, f = text.partition(":")
    problem.tenant(name)
    try:
        factor = float(f) if f else 2.0
    except ValueError:
        raise InputError(f"--burst {text!r}: the factor after ':' must be a number, e.g. chat:2", field="burst",
                         value=text) from None
    if not (factor > 0 and math.isfinite(factor)):
        raise InputError(f"--burst {text!r}: the factor must be > 0", field="burst", value=text)
    return name, factor


def _parse_windows(text: str | None, problem: TenantProblem) -> list[int] | None:
    if text is None:
        return None
    try:
        ws = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise InputError(f"--verify-windows {text!r}: give window indices separated by commas, e.g. 5,15",
                         field="verify-windows", value=text) from None
    for w in ws:
        if not 0 <= w < problem.n_windows:
            raise InputError(f"--verify-windows: window {w} is outside 0..{problem.n_windows - 1}",
                             field="verify-windows", value=w)
    if not ws:
        raise InputError("--verify-windows is empty; give window indices, e.g. 5,15", field="verify-windows")
    return ws


@click.command("allocate")
@click.argument("scenario", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--mode", type=click.Choice(["weighted", "lexicographic", "pareto"]), default="weighted",
              show_default=True, help="Weighted sum, lexicographic order, or Pareto front (epsilon-constraint).")
@backend_option(ALLOCATION_BACKENDS, default="cpsat")
@time_limit_option(300.0, "the whole run (allocation, then the in-node split): a safety stop; the work is set by "
                   "--effort")
@click.option("--effort", type=float, default=1.0, show_default=True,
              help="Effort budget of every solve, × the defaults (CP-SAT deterministic time, HiGHS "
                   "branch-and-bound nodes): the same input and effort give the same allocation on any machine.")
@threads_option(1)
@click.option("--points", type=click.IntRange(2, 50), default=5, show_default=True,
              help="Pareto points (mode pareto): this many epsilon-constraint solves; the front also keeps the "
                   "weighted answer when none of them dominates it, so it can hold one point more.")
@fanout_options("the Pareto solves (mode pareto)", workers=1)
@format_option(("table", "json"))
@plot_option("utilization vs isolation (Pareto front and the policies)")
@click.option("--no-margin", is_flag=True, help="Do not reserve interference headroom on shared nodes.")
@click.option("--split", "split", type=click.Choice(["auto", "mig", "mps", "none"]), default="auto",
              show_default=True,
              help="Split inside each shared node (second level): auto = MIG slices where the GPU type has MIG "
                   "profiles (A100, H100, H200), MPS shares elsewhere; mig or mps for every node; none to skip.")
@click.option("--verify", is_flag=True,
              help="Replay each tenant's requests on the optimizer's allocation and on static partitions (per-tenant "
                   "TTFT/TPOT P50/P95/P99, SLO attainment), a burst of one tenant, and the P99 isolation ratio.")
@click.option("--verify-windows", default=None, metavar="W[,W...]",
              help="Windows to replay (default: the peak-demand window and the one sharing the most nodes).")
@click.option("--slice", "slice_s", type=FiniteRange(1.0, 3600.0), default=60.0, show_default=True,
              help="Seconds replayed per window (after a warm-up of min(20, slice/3) s).")
@click.option("--burst", default=None, metavar="TENANT[:FACTOR]",
              help="Tenant whose rate is multiplied (default factor 2) in the last replayed window; default the "
                   "highest-weight tenant; 'none' to skip.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the replayed requests.")
@click.option("--in-node", "in_node", type=click.Choice(IN_NODE_POLICIES), default="one-level", show_default=True,
              help="With --verify: two-level also replays the optimizer's allocation with an in-node scheduler "
                   "(a shared node's replicas of one model serve its tenants by weight, preempting lower weights) "
                   "and prints it beside the one-level replay.")
def allocate(scenario: Path | None, mode: str, backend: str, time_limit_s: float, effort: float, threads: int,
             points: int,
             workers: int, executor: str, ray_address: str | None, fmt: str, plot: str | None, no_margin: bool,
             split: str, verify: bool, verify_windows: str | None, slice_s: float, burst: str | None,
             seed: int, in_node: str) -> None:
    """Allocate a shared GPU pool to tenants per time window and compare the optimizer with static partitioning
    and quota-with-borrowing fair share, then split every node the optimizer shares into MIG slices or MPS shares.
    SCENARIO is a YAML file (default: the shipped tenants_default.yaml).

    Every solve has a fixed effort budget (--effort), so the same input gives the same allocation on an idle or
    a loaded machine; --time-limit is a safety stop for the whole run: when it fires, the best answer so far is
    printed with a warning naming what it cut. Nodes held by one tenant are not split: that tenant has whole
    GPUs."""
    time_limit_s = checked_time_limit(time_limit_s)
    effort = checked_effort(effort)  # the same range and message as plan's --effort
    refuse_unused({"points": "--points", "executor": "--executor", "workers": "--workers",
                   "ray_address": "--ray-address"}, applies=mode == "pareto",
                  why=f"applies to --mode pareto only (its Pareto points); --mode {mode} is one solve",
                  fix="add --mode pareto, or drop it")
    refuse_unused_fanout(executor, ray_address)
    refuse_unused({"verify_windows": "--verify-windows", "slice_s": "--slice", "burst": "--burst", "seed": "--seed"},
                  applies=verify, why="is a setting of the replay", fix="add --verify, or drop it")
    deadline = wall_clock() + time_limit_s
    plot_path = Path(plot) if plot is not None else None
    claim_outputs({"--plot": plot_path})  # checked and locked before the solve
    problem, opts, workloads = load_tenants_with_workloads(scenario)
    verify_ws = _parse_windows(verify_windows, problem) if verify else None
    burst_spec = _parse_burst(burst, problem) if verify else None
    if in_node != "one-level" and not verify:
        raise InputError(f"--in-node {in_node} is a replay policy; add --verify", field="in-node", value=in_node)
    if verify and fmt == "json":
        raise InputError("--verify prints tables; drop --format json", field="format", value=fmt)
    if verify and not workloads:  # before the solve (it was said after the whole allocation had been printed)
        raise InputError("--verify: no tenant says what it serves; give a tenant models or replay: {name, "
                         "token_mix, slo}", field="replay")
    warning = quota_warning(problem)
    if warning:
        click.echo(f"Warning: {warning}", err=True)
    kinds = {} if split == "none" else {g: split_kind(split, g) for g in sorted({n.gpu for n in problem.nodes})}
    result, splits, notes = _solve(problem, opts, mode=mode, backend=backend, time_limit_s=time_limit_s,
                                   threads=threads, points=points, margin=not no_margin, split=split,
                                   executor=executor, workers=workers, ray_address=ray_address, effort=effort,
                                   deadline=deadline)
    for note in notes:
        click.echo(f"Warning: {note}", err=True)
    warnings = [w for w in (warning, *notes) if w]
    policies = _policies(problem, result)  # every allocation re-checked by the independent checker
    for note in _baselines_ahead(policies, margin=result.allocation.margin):
        click.echo(f"Warning: {note}", err=True)
        warnings.append(note)
    if plot_path is not None:
        _plot(plot_path, result, policies)
    if fmt == "json":
        click.echo(json.dumps(_allocation_json(problem, result, splits, policies, mode=mode, backend=backend,
                                               split=split, kinds=kinds, warnings=warnings), indent=2))
        return
    _print_tables(problem, result, splits, policies, mode=mode, backend=backend, split=split, plot=plot_path)
    if verify:
        _verify(problem, result, splits, policies, workloads, windows=verify_ws, slice_s=slice_s, burst=burst_spec,
                seed=seed, threads=threads, split=split, backend=backend, effort=effort, in_node=in_node)
