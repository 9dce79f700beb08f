"""Every command's file outputs are locked while it runs (issue 28 item 3: two runs writing one file both exited 0
and the last writer won). With the destination held, as by another run, each command is refused at once, before
its work, naming the option; the file and its folder are left as they were."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from fleetplan.cli.main import main
from fleetplan.fileio import claimed_outputs

PLAN = Path(__file__).parent / "golden" / "export" / "default_plan.json"


@pytest.mark.parametrize(("option", "name", "args"), [
    ("--out", "cmds.sh", ["export", "vllm", str(PLAN)]),
    ("--report", "report.md", ["simulate", str(PLAN)]),
    ("--out", "calib.csv", ["calibrate", "--no-held-out"]),
    ("--out", "sweep.csv", ["sweep", "--vary", "demand_factor=1"]),
    ("--out", "whatif.csv", ["whatif", "--vary", "egress_usd_per_gb=0.01"]),
    ("--plot", "tenants.png", ["allocate"]),
    ("--out", "steps.json", ["export-history", "--day", "2026-01-01", "--db", "sqlite:///DB"]),
])
def test_a_held_destination_refuses_the_command(tmp_path, option, name, args):
    target = tmp_path / name
    target.write_text("first")
    args = [a.replace("DB", str(tmp_path / "none.db")) for a in args]
    with claimed_outputs({option: target}):
        r = CliRunner().invoke(main, [*args, option, str(target)])
    assert r.exit_code == 2, r.output
    assert "being written by another run" in r.output and option in r.output, r.output
    assert target.read_text() == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no lock file left, no database made
