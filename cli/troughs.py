"""`fleetplan troughs`: inference borrowing a training job's GPUs in its troughs, and the saving in a ledger."""

from __future__ import annotations

from pathlib import Path

import click

from fleetplan.cli.options import checked_time_limit, time_limit_option
from fleetplan.cli.output import table
from fleetplan.scenario.troughs import load_troughs
from fleetplan.solvers.troughs import plan_troughs


@click.command("troughs")
@click.argument("scenario", required=False, type=click.Path(dir_okay=False, path_type=Path))
@time_limit_option(30.0, "the HiGHS solve")
def troughs(scenario: Path | None, time_limit_s: float) -> None:
    """Lend a training job's GPUs to inference in its troughs (a small MILP: the job still finishes its GPU-hours,
    each preemption loses half a checkpoint interval plus the restart) and print the borrowing per window and the
    ledger: on-demand rent avoided, lost training work, saving. SCENARIO: a troughs YAML (default the shipped
    troughs_default.yaml)."""
    from rich.console import Console

    time_limit_s = checked_time_limit(time_limit_s)  # the one check of --time-limit (NaN was handed to HiGHS)
    p = load_troughs(scenario)
    r = plan_troughs(p, time_limit_s=time_limit_s)
    con = Console()
    con.print(f"[bold]{p.name or 'scenario'}[/]: training {p.training_gpus} GPUs, {p.training_gpu_hours:g} GPU-hours "
              f"to finish, {p.lost_gpu_hours_per_preemption:.3f} GPU-h lost per preempted GPU, priority "
              f"{p.priority:g}; inference owns {p.own_gpus} GPUs; {r.status.value}")
    tab = table("Per window (GPUs)", ("window", "inference need beyond own", "borrowed", "rented", "preempted"),
                right=True)
    for w in range(p.n_windows):
        tab.add_row(str(w), str(p.need_gpus[w]), str(r.borrowed_gpus[w]), str(r.rented_gpus[w]),
                    str(r.preempted_gpus[w]))
    con.print(tab)
    h = p.window_h
    span_h = p.n_windows * h
    # The ledger covers the scenario's windows: a day only when they make one (a 3-window file's totals were
    # titled "USD per day").
    span = "USD per day" if abs(span_h - 24) < 1e-9 else f"USD over the scenario's {span_h:g} h, not scaled to a day"
    led = table(f"Ledger ({span})", ("line", "GPU-hours", "USD"), right=lambda c: c != "line")
    led.add_row("baseline: rent every overflow GPU on demand", f"{sum(p.need_gpus) * h:g}", f"{r.baseline_usd:,.2f}")
    led.add_row("rent what is not borrowed", f"{sum(r.rented_gpus) * h:g}", f"{r.rent_usd:,.2f}")
    led.add_row(f"training work lost to preemption (× priority {p.priority:g})", f"{r.lost_gpu_hours:.2f}",
                f"{r.lost_work_usd:,.2f}")
    led.add_row("[bold]saving[/]", f"{sum(r.borrowed_gpus) * h:g} borrowed", f"[bold]{r.saving_usd:,.2f}[/]")
    con.print(led)
    con.print(f"training still does {r.training_gpu_hours:.1f} GPU-hours net of losses (needs "
              f"{p.training_gpu_hours:g})")
