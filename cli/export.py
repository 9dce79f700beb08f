"""``fleetplan export k8s|vllm PLAN``: a plan file as Kubernetes manifests or as vLLM launch commands per node."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click

from fleetplan.cli.options import deploy_option, refuse_unused
from fleetplan.cli.output import claim_outputs
from fleetplan.errors import InputError
from fleetplan.export.deployment import read_deploy_file, window_index, workloads
from fleetplan.export.k8s import export_k8s
from fleetplan.export.vllm import export_vllm
from fleetplan.fileio import check_output_folder, write_file_set, write_text_atomic
from fleetplan.outputs.planio import load_plan_file


def _window_option(default: str) -> Callable[[Callable], Callable]:
    """``--window HH:MM`` (keyword ``window``): one window of the plan; ``default`` says what runs without it."""
    return click.option("--window", default=None,
                        help=f"Only the window holding this time of day (HH:MM); default: {default}.")


def _windows(problem, window: str | None, all_windows: bool) -> list[int]:
    if window is not None and all_windows:
        raise InputError("give either --window or --all-windows, not both", field="--window")
    if window is not None:
        return [window_index(problem, window)]
    return list(range(problem.n_windows))


@click.group("export")
def export() -> None:
    """Turn a plan file (`fleetplan plan --out plan.json`) into something a cluster or a node runs."""


@export.command("k8s")
@click.argument("plan_file", type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Folder to write into (created if missing; its parent must exist): one sub-folder per site, and "
                   "fleetplan-files.json, the index by which a later export into the folder replaces this one "
                   "(files it no longer produces are removed with --prune only; other files are never touched).")
@_window_option("every window and a KEDA schedule for the day (--all-windows)")
@click.option("--all-windows", is_flag=True, help="Every window and a KEDA schedule for the day (the default).")
@deploy_option()
@click.option("--lead-minutes", default=None, type=click.IntRange(0, 600),
              help="Start scheduled replicas this many minutes before their window (default: each workload's weight "
                   "load time from the scenario, rounded up).")
@click.option("--prune", is_flag=True,
              help="Remove the files of an earlier export in --out that this export does not produce (e.g. the other "
                   "windows and the schedule when exporting one --window into a whole day's folder); without it such "
                   "an export is refused and nothing is written.")
def k8s(plan_file, out_dir, window, all_windows, deploy_file, lead_minutes, prune) -> None:
    """Kubernetes manifests of PLAN_FILE: per site and window a Deployment (or LeaderWorkerSet for pipeline stages
    on several nodes) per workload running vLLM's OpenAI server, a Service per model, and with every window a KEDA
    ScaledObject per workload that follows the day."""
    check_output_folder(out_dir, field="--out")  # before the work
    refuse_unused({"lead_minutes": "--lead-minutes"}, applies=window is None, why="with --window: one window's "
                  "manifests have no KEDA schedule for the lead to move", fix="drop --window (every window and "
                  "the schedule), or drop --lead-minutes")
    deploy = read_deploy_file(deploy_file)
    problem, plan, scenario, d = load_plan_file(plan_file)
    wins = _windows(problem, window, all_windows)
    ws = workloads(problem, plan, scenario, deploy)
    files = export_k8s(problem, ws, wins, deploy, schedule=window is None, lead_minutes=lead_minutes)
    root = Path(out_dir)
    removed = write_file_set(root, files, field="--out", written_by="fleetplan export k8s", prune=prune)
    n_sites = len({w.site for w in ws})
    click.echo(f"wrote {len(files)} files for {len(ws)} workloads at {n_sites} site{'s' if n_sites != 1 else ''} "
               f"into {root} "
               f"({len(wins)} window{'s' if len(wins) != 1 else ''}); see {root / 'clusters.yaml'}"
               + (f"; removed {len(removed)} file(s) of the earlier export it does not produce: "
                  f"{', '.join(removed)}" if removed else ""), err=True)


@export.command("vllm")
@click.argument("plan_file", type=click.Path(dir_okay=False))
@_window_option("every window")
@deploy_option("; only its checkpoints and image are used here, not its sites")
@click.option("--out", "out_file", default=None, type=click.Path(dir_okay=False),
              help="Write the commands to this file instead of standard output.")
def vllm(plan_file, window, deploy_file, out_file) -> None:
    """Launch commands per node for PLAN_FILE: `vllm serve` with the plan's parallelism and the capacity model's
    limits, GPUs chosen with CUDA_VISIBLE_DEVICES, for each window."""
    claim_outputs({"--out": out_file})
    deploy = read_deploy_file(deploy_file)
    problem, plan, scenario, d = load_plan_file(plan_file)
    wins = _windows(problem, window, False)
    text = export_vllm(problem, workloads(problem, plan, scenario, deploy), wins, plan_name=problem.name)
    if out_file:
        write_text_atomic(out_file, text, field="--out")
    else:
        click.echo(text, nl=False)
