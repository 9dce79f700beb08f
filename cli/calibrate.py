"""``fleetplan calibrate``: fit the roofline latency model to measurements and write a calibration file."""

from __future__ import annotations

import click

from fleetplan.cli.output import claim_outputs
from fleetplan.datasets.calibration import write_calibration_table
from fleetplan.datasets.held_out import write_held_out_table
from fleetplan.datasets.measured import DEFAULT_FRAMEWORK
from fleetplan.datasets.measured import calibrate as run_calibration
from fleetplan.errors import InputError


@click.command()
@click.option("--measurements", "extra", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="CSV of your own measurements (columns as datasets/measured.py COLUMNS); repeatable")
@click.option("--no-shipped", is_flag=True, help="fit only your files, not the shipped public measurements")
@click.option("--anchor", default=DEFAULT_FRAMEWORK, show_default=True,
              help="framework the rows represent by default; its GPU family is the reference of the host overhead "
                   "scale")
@click.option("--framework", default=None, help="framework whose rows are written (default: the anchor)")
@click.option("--held-out/--no-held-out", default=True, show_default=True,
              help="refit without each (model, GPU) group and report its error (slower: one fit per group)")
@click.option("--held-out-table", "held_out_table", default=None, type=click.Path(dir_okay=False),
              help="also write the held-out error per (model, GPU) group, framework and kind as CSV (the shipped "
                   "one, datasets/data/calibration/held_out_errors.csv, gives each plan's capacity error)")
@click.option("--frameworks-out", "frameworks_out", default=None, type=click.Path(dir_okay=False),
              help="also write the rows of every fitted framework and version (the shipped one, datasets/data/"
                   "calibration/roofline_frameworks.csv, sizes a scenario whose engine version is not the anchor)")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False),
              help="calibration CSV to write; name it in a scenario as options.calibration")
def calibrate(extra: tuple[str, ...], no_shipped: bool, anchor: str, framework: str | None, held_out: bool,
              held_out_table: str | None, frameworks_out: str | None, out: str) -> None:
    """Fit the roofline's constants (efficiencies and host overhead scale per GPU family, overheads per framework and
    version) to measured prefill, decode-step, steady-state and static-batch times, report the fit error and the
    held-out error, and write a calibration file."""
    # checked and locked before the fit, which takes a while
    claim_outputs({"--out": out, "--held-out-table": held_out_table, "--frameworks-out": frameworks_out})
    if held_out_table and not held_out:
        raise InputError("--held-out-table needs the held-out refits: drop --no-held-out", field="--held-out-table")
    rep = run_calibration(extra, shipped=not no_shipped, anchor=anchor, framework=framework, held_out=held_out)
    click.echo(f"fitted {rep.n_observations} measurements; rows written for {rep.framework}")
    for fam, v in sorted(rep.fit.family.items()):
        click.echo(f"  GPU family {fam}: prefill MFU {v['prefill_mfu']:.3f}, decode bandwidth efficiency "
                   f"{v['decode_bw_efficiency']:.3f}, host overhead scale {v['overhead_scale']:.2f}")
    for fw, v in sorted(rep.fit.framework.items()):
        click.echo(f"  {fw}: overheads on the {rep.fit.reference_family} host: prefill "
                   f"{v['prefill_overhead_s'] * 1e3:.2f} ms, step {v['decode_overhead_per_step_s'] * 1e3:.2f} ms, "
                   f"layer {v['decode_overhead_per_layer_s'] * 1e6:.1f} us, sequence "
                   f"{v['decode_overhead_per_seq_s'] * 1e6:.1f} us")
    click.echo("fit error (median absolute %): " + ", ".join(f"{k} {v:.1f}" for k, v in rep.fit_mdape_pct.items()))
    if held_out:
        click.echo("held-out error, one (model, GPU) group left out at a time (median absolute %): "
                   + ", ".join(f"{k} {v:.1f}" for k, v in rep.held_out_mdape_pct.items()))
    def col(k: str) -> str:
        return k.replace(" ", "_")

    extra_cols = {r.gpu: {"fit_mdape_" + col(k) + "_pct": f"{v:.1f}" for k, v in rep.fit_mdape_pct.items()}
                  for r in rep.rows}
    for r in rep.rows:
        extra_cols[r.gpu].update({"held_out_mdape_" + col(k) + "_pct": f"{v:.1f}"
                                  for k, v in rep.held_out_mdape_pct.items()})
    write_calibration_table(rep.rows, out, extra_cols)
    click.echo(f"wrote {out}")
    if frameworks_out:
        write_calibration_table(rep.framework_rows, frameworks_out)
        click.echo(f"wrote {frameworks_out} ({', '.join(sorted({r.framework for r in rep.framework_rows}))})")
    if held_out_table:
        write_held_out_table(rep.held_out, held_out_table,
                             f"fleetplan calibrate --held-out: {rep.n_observations} measurements, one (model, GPU) "
                             "group left out at a time, the constants refitted on the others")
        click.echo(f"wrote {held_out_table}")
