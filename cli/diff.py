"""``fleetplan diff A B``: what changes from plan A to plan B, per model, pool and window, with the cost delta."""

from __future__ import annotations

import json

import click

from fleetplan.cli.options import format_option
from fleetplan.cli.output import stdout_console, table
from fleetplan.outputs.plandiff import RowChange, diff_plans, diff_to_dict
from fleetplan.outputs.planio import load_plan_file


def _hhmm(w: int, window_length_s: float) -> str:
    s = int(w * window_length_s)
    return f"{s // 3600 % 24:02d}:{s // 60 % 60:02d}"


def _spans(r: RowChange, window_length_s: float) -> str:
    """Runs of consecutive windows with the same before -> after, as 'HH:MM-HH:MM a->b'."""
    out: list[str] = []
    ws = r.windows()
    i = 0
    while i < len(ws):
        j = i
        while (j + 1 < len(ws) and ws[j + 1] == ws[j] + 1
               and (r.before[ws[j + 1]], r.after[ws[j + 1]]) == (r.before[ws[i]], r.after[ws[i]])):
            j += 1
        w0, w1 = ws[i], ws[j] + 1
        out.append(f"{_hhmm(w0, window_length_s)}-{_hhmm(w1, window_length_s)} "
                   f"{r.before[ws[i]]}->{r.after[ws[i]]}")
        i = j + 1
    return ", ".join(out)


@click.command("diff")
@click.argument("plan_a", type=click.Path(exists=True, dir_okay=False))
@click.argument("plan_b", type=click.Path(exists=True, dir_okay=False))
@format_option(("table", "json"))
def diff(plan_a: str, plan_b: str, fmt: str) -> None:
    """What changes from PLAN_A to PLAN_B (plan files of `fleetplan plan --out`, each re-checked against the
    scenario it embeds): per model, pool and shape the windows whose replicas differ (before -> after), the
    replica-windows added and removed, the migrations, and each plan's cost per day with the delta."""
    pa, a, _sa, _da = load_plan_file(plan_a)
    pb, b, _sb, _db = load_plan_file(plan_b)
    d = diff_plans(pa, a, pb, b)
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
