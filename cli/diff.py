"""``fleetplan diff``: what changes from plan A to plan B, per model, pool and window, with the cost delta; or from
what runs now (the service's stored plan, ``--db``; the cluster, ``--cluster``) to one window of a plan."""

from __future__ import annotations

import datetime as dt
import json
import time

import click

from fleetplan.cli.database import db_options, open_store
from fleetplan.cli.database import db_url as db_url_of
from fleetplan.cli.options import deploy_option, format_option, refuse_unused
from fleetplan.cli.output import stdout_console, table
from fleetplan.errors import InputError, UnknownNameError
from fleetplan.export.cluster import KUBECTL_GET, cluster_replicas
from fleetplan.export.deployment import check_targets, read_deploy_file, site_target, window_index, window_label
from fleetplan.fileio import read_json
from fleetplan.outputs.plandiff import (
    RowChange,
    WindowDiff,
    diff_plans,
    diff_to_dict,
    diff_window,
    window_diff_to_dict,
)
from fleetplan.outputs.planio import load_plan_file, plan_from_dict
from fleetplan.placement.plan import Plan
from fleetplan.placement.problem import Problem, time_of_day_s
from fleetplan.service.actuate import cluster_lists, kube_clients
from fleetplan.solvers.online.state import ONLINE_WINDOW_SUFFIX

#: What a cluster's objects do not tell, said under every diff against the cluster.
CLUSTER_UNKNOWN = ("not known from the cluster: what it is billed (commitments, spot, start costs, egress), the "
                   "demand it serves, and whether it matches any other window of the plan; the dollar figures are "
                   "the plan's per-GPU-hour prices times the GPUs")


def _hhmm(w: int, window_length_s: float) -> str:
    s = int(w * window_length_s)
    return f"{s // 3600 % 24:02d}:{s // 60 % 60:02d}"


def _end_hhmm(w: int, window_length_s: float, days: bool = False) -> str:
    """The end of window ``w`` - 1 as HH:MM, midnight at the end of a day as 24:00 (a span to it read
    '00:00-00:00'); with ``days``, prefixed by its day of the horizon ('d2 24:00')."""
    s = int(w * window_length_s)
    if s > 0 and s % 86400 == 0:
        return (f"d{s // 86400} " if days else "") + "24:00"
    return (f"d{s // 86400 + 1} " if days else "") + _hhmm(w, window_length_s)


def _spans(r: RowChange, window_length_s: float) -> str:
    """Runs of consecutive windows with the same before -> after, as 'HH:MM-HH:MM a->b' ('all day a->b' for every
    window of a one-day plan; 'dN HH:MM' on a horizon of several days)."""
    out: list[str] = []
    ws = r.windows()
    i = 0
    while i < len(ws):
        j = i
        while (j + 1 < len(ws) and ws[j + 1] == ws[j] + 1
               and (r.before[ws[j + 1]], r.after[ws[j + 1]]) == (r.before[ws[i]], r.after[ws[i]])):
            j += 1
        w0, w1 = ws[i], ws[j] + 1
        days = len(r.before) * window_length_s > 86400  # a horizon of several days: each time names its day
        start = (f"d{int(w0 * window_length_s) // 86400 + 1} " if days else "") + _hhmm(w0, window_length_s)
        span = ("all day" if w0 == 0 and w1 == len(r.before) and w1 * window_length_s == 86400 else
                f"{start}-{_end_hhmm(w1, window_length_s, days)}")
        out.append(f"{span} {r.before[ws[i]]}->{r.after[ws[i]]}")
        i = j + 1
    return ", ".join(out)


def _stored(db_url: str | None, db_file: str | None, plan_id: int | None) -> tuple[dict, Plan]:
    """(row, one-window plan) of the stored plan ``plan_id`` (None: the newest). InputError when there is none."""
    store = open_store(db_url_of(db_url, db_file))
    try:
        row = store.last_plan() if plan_id is None else store.plan(plan_id)
        newest = store.newest_plan_id()
    finally:
        store.close()
    if row is None:
        raise InputError("the database holds no stored plan" if plan_id is None else
                         f"no stored plan {plan_id} (the newest is {newest}; retention removes old ones)",
                         field="--plan-id" if plan_id is not None else "--db", value=plan_id)
    plan = plan_from_dict(row["body"])
    if row["body"].get("n_windows") != 1:
        raise InputError(f"stored plan {row['id']} is not a one-window service plan", field="--plan-id",
                         value=row["id"])
    return row, plan


def _same_scenario(plan_a: str, scenario: str, row: dict) -> None:
    """Raise InputError (naming --db) when the stored plan ``row`` is not of the scenario ``scenario`` that PLAN_A
    (``plan_a``) embeds: its name is not the scenario's online-window name
    (:data:`~fleetplan.solvers.online.state.ONLINE_WINDOW_SUFFIX`). Such a diff compared unrelated fleets with exit 0
    and no word."""
    stored = str(row["body"].get("name", ""))
    if stored != scenario + ONLINE_WINDOW_SUFFIX:
        theirs = stored.removesuffix(ONLINE_WINDOW_SUFFIX)
        raise InputError(f"stored plan {row['id']} is a plan of the scenario {theirs!r}, {plan_a} of {scenario!r}: "
                         "a diff of two scenarios' fleets compares unrelated replicas; give the database of the "
                         f"service that runs {scenario!r}, or a plan of {theirs!r}", field="--db",
                         value=theirs)


def _utc(at_s: float) -> str:
    return dt.datetime.fromtimestamp(at_s, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _window_of_time(problem: Problem, at_s: float, what: str) -> int:
    """The plan's window that holds the UTC time of day of ``at_s`` (unix s)."""
    t = at_s % 86400.0
    w = int(t // problem.window_length_s)
    if w >= problem.n_windows:
        raise InputError(f"{what} ({_utc(at_s)}) is past the plan's {problem.horizon_hours:g} h horizon; give the "
                         "window to compare with --at HH:MM", field="--at", value=_utc(at_s))
    return w


@click.command("diff")
@click.argument("plan_a", type=click.Path(exists=True, dir_okay=False))
@click.argument("plan_b", type=click.Path(exists=True, dir_okay=False), required=False)
@db_options(": compare one window of PLAN_A with the plan the service stored (the newest, or --plan-id).")
@click.option("--plan-id", type=click.IntRange(min=1), default=None,
              help="With --db/--db-file: the stored plan to compare with (default: the newest).")
@click.option("--cluster", "cluster_files", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help=f"Compare one window of PLAN_A with the replicas a cluster runs: the output of `{KUBECTL_GET}` "
                   "(repeat for several sites' clusters).")
@click.option("--covers", "covered", multiple=True, metavar="SITE",
              help="With --cluster: a site the given lists cover though they hold no fleetplan workload there (its "
                   "cluster runs none; repeat). Default: the sites of the workloads read; the other sites are left "
                   "out of the comparison.")
@click.option("--live", is_flag=True,
              help="Compare one window of PLAN_A with the replicas the clusters run now, read through the Kubernetes "
                   "API (each site's kubectl context and namespace from --deploy; pip install 'fleetplan[k8s]').")
@deploy_option("; with --live: its sites' contexts and namespaces")
@click.option("--kubeconfig", default=None, type=click.Path(dir_okay=False),
              help="With --live: the kubeconfig (default: $KUBECONFIG, else ~/.kube/config).")
@click.option("--at", "at_hhmm", default=None,
              help="With --db, --cluster or --live: the plan's window to compare, HH:MM (UTC time of day; default: "
                   "the stored plan's round time, or now for a cluster).")
@format_option(("table", "json"))
def diff(plan_a: str, plan_b: str | None, db_url: str | None, db_file: str | None, plan_id: int | None,
         cluster_files: tuple[str, ...], covered: tuple[str, ...], live: bool, deploy_file: str | None,
         kubeconfig: str | None, at_hhmm: str | None, fmt: str) -> None:
    """What changes from PLAN_A to PLAN_B (plan files of `fleetplan plan --out`, each re-checked against the
    scenario it embeds): per model, pool and shape the windows whose replicas differ (before -> after), the
    replica-windows added and removed, the migrations, and each plan's cost per day with the delta.

    With --db (or --db-file) instead of PLAN_B: from the plan the re-planner service stored to PLAN_A's window at
    its round time; with --cluster: from the replicas the cluster runs to PLAN_A's window now (or --at). Both show
    the replicas added and removed per model, pool and shape, and the GPUs and their cost at the plan's prices."""
    given = [n for n, v in (("PLAN_B", plan_b), ("--db/--db-file", db_url or db_file),
                            ("--cluster", cluster_files), ("--live", live)) if v]
    if len(given) != 1:
        raise InputError(("compare PLAN_A with one thing, not " + " and ".join(given) if given else
                          "nothing to compare PLAN_A with") + ": give PLAN_B, --db (or --db-file), --cluster or "
                         "--live", field=given[-1] if given else "PLAN_B")
    refuse_unused({"deploy_file": "--deploy", "kubeconfig": "--kubeconfig"}, applies=live,
                  why="without --live: it says where the live clusters are", fix="add --live, or drop it")
    if covered and not cluster_files:
        raise InputError("--covers names a site a --cluster list covers: give it with --cluster (--live reads every "
                         "site)", field="--covers", value=covered[0])
    if plan_id is not None and not (db_url or db_file):
        raise InputError("--plan-id picks a stored plan: give it with --db or --db-file", field="--plan-id",
                         value=plan_id)
    if at_hhmm is not None and plan_b:
        raise InputError("--at picks the window compared with a stored plan or the cluster; two plans are compared "
                         "in every window: drop --at", field="--at", value=at_hhmm)
    if at_hhmm is not None:
        time_of_day_s(at_hhmm, field="--at")  # its form, before any file or database is read
    pa, a, _sa, _da = load_plan_file(plan_a)
    if plan_b:
        pb, b, _sb, _db = load_plan_file(plan_b)
        _print_plans(plan_a, plan_b, diff_plans(pa, a, pb, b), fmt)
        return
    notes: list[str] = []
    extra: dict = {}
    compared: frozenset[str] | None = None
    if cluster_files or live:
        if live:
            deploy = read_deploy_file(deploy_file)
            sites = sorted({p.site for p in pa.pools})
            check_targets(sites, deploy)
            clients = kube_clients(sorted({site_target(s, deploy)[0] for s in sites}), kubeconfig,
                                   needed_by=("diff --live", "--live"))
            docs = cluster_lists(sites, deploy, clients)
        else:
            docs = [(f, read_json(f, what=f"kubectl JSON list (`{KUBECTL_GET}`)")) for f in cluster_files]
        cl = cluster_replicas(docs, pa)
        all_sites = sorted({p.site for p in pa.pools})
        for site in covered:
            if site not in all_sites:
                raise UnknownNameError("site", site, all_sites, field="--covers")
        compared = frozenset(all_sites) if live else cl.sites | frozenset(covered)
        uncovered = [s for s in all_sites if s not in compared]
        if uncovered:
            notes.append(f"not covered, left out of the comparison: {', '.join(uncovered)} (no fleetplan workload "
                         "there in the given lists; if its cluster runs none, say so with --covers SITE)")
        running, source = cl.plan, "; ".join(where for where, _ in docs)
        w = window_index(pa, at_hhmm, "--at") if at_hhmm else _window_of_time(pa, time.time(), "now")
        what = f"the cluster ({cl.workloads} workloads in {source})"
        if cl.not_ready:
            notes.append(f"{cl.not_ready} of the cluster's replicas are asked for (spec.replicas) but not ready")
        if cl.left_out:
            notes.append("left out of the list (no replicas of a plan): "
                         + ", ".join(f"{n} {k}" for k, n in sorted(cl.left_out.items())))
        notes.append(CLUSTER_UNKNOWN)
        extra = {"running": "cluster", "sites_covered": sorted(compared), "sites_not_covered": uncovered,
                 "workloads": cl.workloads, "not_ready": cl.not_ready,
                 "left_out": cl.left_out, "unknown": CLUSTER_UNKNOWN}
    else:
        row, running = _stored(db_url, db_file, plan_id)
        _same_scenario(plan_a, pa.name, row)
        source = f"stored plan {row['id']}"
        w = (window_index(pa, at_hhmm, "--at") if at_hhmm
             else _window_of_time(pa, float(row["at_s"]), f"stored plan {row['id']}'s round time"))
        what = f"stored plan {row['id']} (round at {_utc(float(row['at_s']))}, {row['reason']})"
        notes.append(f"stored plan {row['id']} costs ${row['cost_usd_per_hour']:,.2f}/h at the service's prices "
                     "(starts and egress included)")
        extra = {"running": "stored plan", "plan_id": row["id"], "round_at_s": row["at_s"],
                 "stored_cost_usd_per_hour": row["cost_usd_per_hour"]}
    d = diff_window(pa, a, w, running, source=source, sites=compared)
    span = f"{window_label(pa, w)}-{_hhmm(w + 1, pa.window_length_s)} UTC"
    if fmt == "json":
        click.echo(json.dumps({**window_diff_to_dict(d), "window_utc": span, **extra}, indent=2))
        return
    _print_window(plan_a, what, span, d, notes)


def _print_plans(plan_a: str, plan_b: str, d, fmt: str) -> None:
    if fmt == "json":
        click.echo(json.dumps(diff_to_dict(d), indent=2))
        return
    con = stdout_console(140)
    if not d.rows:
        con.print(f"no change: the two plans run the same replicas in every window "
                  f"(${d.cost_before_usd_per_day:,.2f}/day and ${d.cost_after_usd_per_day:,.2f}/day)")
        return
    t = table(f"{plan_b} against {plan_a}", ["model", "pool", "shape", "windows (before->after)", "added",
                                              "removed"], right=lambda c: c in ("added", "removed"))
    for r in d.rows:
        t.add_row(r.model, r.pool, r.shape, _spans(r, d.window_length_s), f"+{r.added}", f"-{r.removed}")
    con.print(t)
    con.print(f"cost ${d.cost_before_usd_per_day:,.2f}/day -> ${d.cost_after_usd_per_day:,.2f}/day "
              f"({d.cost_delta_usd_per_day:+,.2f} USD/day); {d.migrations:,} migrations (replica starts + stops "
              f"summed over windows, a shared GPU counted once per window)")


def _print_window(plan_a: str, what: str, span: str, d: WindowDiff, notes: list[str]) -> None:
    con = stdout_console(140)
    head = f"{plan_a}, window {span} (window {d.window}), against {what}"
    if not d.rows:
        con.print(f"no change: {head} runs the same replicas")
    else:
        t = table(head, ["model", "pool", "shape", "running", "plan", "change"],
                  right=lambda c: c in ("running", "plan", "change"))
        for r in d.rows:
            t.add_row(r.model, r.pool, r.shape, str(r.before[0]), str(r.after[0]), f"{r.after[0] - r.before[0]:+d}")
        con.print(t)
    con.print(f"GPUs {d.gpus_before:,} running -> {d.gpus_after:,} in the plan's window "
              f"({d.gpus_after - d.gpus_before:+,}); "
              f"at the plan's per-GPU-hour prices ${d.list_usd_per_hour_before:,.2f}/h -> "
              f"${d.list_usd_per_hour_after:,.2f}/h ({d.list_delta_usd_per_hour:+,.2f} USD/h; commitments, starts and "
              f"egress not included); {d.migrations:,} replica starts + stops (a shared GPU counted once)")
    for n in notes:
        con.print(n)
