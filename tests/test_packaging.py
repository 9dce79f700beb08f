"""The folders install as subpackages of `fleetplan` only, every module imports in a fresh interpreter, and a plain
install of the wheel (no extras) runs `fleetplan plan` and `fleetplan serve --help`."""

from __future__ import annotations

import json
import os
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import fleetplan
from fleetplan.cli.main import COMMANDS, main
from fleetplan.outputs.planio import per_day_factor
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.read import load_scenario
from fleetplan.solvers.solve import solve

ROOT = Path(__file__).resolve().parents[1]
GENERIC = ["datasets", "cli", "placement", "solvers", "costmodels"]


def _run(code: str, cwd: Path) -> subprocess.CompletedProcess:
    # A fresh interpreter, started outside the repository so that the current folder is not on sys.path.
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_subpackages_and_no_generic_top_level_modules(tmp_path):
    code = (
        "import importlib, importlib.util, json, fleetplan\n"
        "import fleetplan.datasets, fleetplan.cli, fleetplan.placement, fleetplan.solvers, fleetplan.costmodels\n"
        f"root = {str(ROOT)!r}\n"
        "found = {}\n"
        f"for name in {GENERIC!r}:\n"
        "    spec = importlib.util.find_spec(name)\n"
        "    found[name] = spec.origin if spec else None\n"
        "print(json.dumps(found))\n"
    )
    res = _run(code, tmp_path)
    assert res.returncode == 0, res.stderr
    import json

    found = json.loads(res.stdout)
    for name, origin in found.items():
        # Either no such top-level module at all, or one that does not come from this project.
        assert origin is None or not str(origin).startswith(str(ROOT)), (name, origin)


def _modules() -> list[str]:
    names = ["fleetplan"]
    for info in pkgutil.walk_packages(fleetplan.__path__, prefix="fleetplan."):
        names.append(info.name)
    return sorted(set(names))


# Each module is imported first among fleetplan's modules: one fresh interpreter imports them one by one and drops
# every fleetplan module from sys.modules before the next (third-party libraries stay loaded, so the check costs one
# interpreter instead of one per module), so an import that works only after another module was loaded fails here.
# Each module's source is compiled once: the loader keeps the code objects it made (immutable; each import still
# runs the module's code afresh), so the later imports do not compile it again (a fifth of the test's CPU time).
# (It used to write bytecode to a private folder through sys.pycache_prefix, which moves every module's bytecode,
# so the first import of each third-party library was compiled from source too: 4 of the test's 12.5 CPU-s.)
_IMPORT_EACH_FIRST = """
import importlib, importlib.machinery, sys, traceback
compiled, get_code = {}, importlib.machinery.SourceFileLoader.get_code
def kept_code(loader, fullname):
    if fullname not in compiled:
        compiled[fullname] = get_code(loader, fullname)
    return compiled[fullname]
importlib.machinery.SourceFileLoader.get_code = kept_code
failed = []
package = sys.argv[1]
for name in sys.argv[2:]:
    for loaded in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception:
        failed.append(name + ": " + traceback.format_exc(limit=3))
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


def test_every_module_imports_first_in_a_fresh_interpreter(tmp_path):
    res = subprocess.run([sys.executable, "-c", _IMPORT_EACH_FIRST, "fleetplan", *_modules()],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert len(_modules()) > 80  # the walk found the package's modules


def test_importing_each_module_first_finds_a_cycle_one_pass_would_miss(tmp_path):
    # cyc.a imports cyc.b, which imports cyc.a back: imported first, cyc.a works (cyc.b finds the half-made cyc.a
    # in sys.modules and takes nothing from it), but cyc.b imported first fails (cyc.a asks the half-made cyc.b for
    # X). One pass in sorted order imports cyc.a first and cyc.b with it, and would pass.
    (tmp_path / "cyc").mkdir()
    (tmp_path / "cyc" / "__init__.py").write_text("")
    (tmp_path / "cyc" / "a.py").write_text("from cyc.b import X\n")
    (tmp_path / "cyc" / "b.py").write_text("from cyc import a\nX = 1\n")
    one_pass = subprocess.run([sys.executable, "-c", "import cyc.a, cyc.b"], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120)
    assert one_pass.returncode == 0, one_pass.stderr
    res = subprocess.run([sys.executable, "-c", _IMPORT_EACH_FIRST, "cyc", "cyc", "cyc.a", "cyc.b"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and res.stdout.startswith("cyc.b: "), res.stdout + res.stderr
    assert "partially initialized module 'cyc.b'" in res.stdout, res.stdout


def test_console_script_is_a_click_group(tmp_path):
    exe = Path(sys.executable).parent / "fleetplan"
    res = subprocess.run([str(exe), "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "plan" in res.stdout and "data" in res.stdout


# Building the wheel and installing it with its dependencies into a fresh virtual environment takes ~30-60 s, too
# long for every `make test`: the test runs when FLEETPLAN_PACKAGING_TEST=1 (in its own xdist group).
_PLAIN_INSTALL = os.environ.get("FLEETPLAN_PACKAGING_TEST") == "1"


def _tail(res: subprocess.CompletedProcess) -> str:
    return (res.stdout + res.stderr).strip()[-1500:]


@pytest.mark.xdist_group("packaging")
@pytest.mark.skipif(not _PLAIN_INSTALL, reason="set FLEETPLAN_PACKAGING_TEST=1 to build the wheel and install it "
                    "without extras into a fresh venv (~60 s, needs the package registry or pip's cache)")
def test_plain_install_plans_and_serves(tmp_path):
    # Every import of the installed code must resolve from the declared dependencies alone (no dev extras).
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".venv", ".git", "build", "dist", "*.egg-info",
                                                             "__pycache__", ".*_cache", ".hypothesis", "tests",
                                                             "benchmarks", "*.db"))
    dist = tmp_path / "dist"
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(src)],
                         capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        pytest.skip(f"pip cannot build the wheel here: {_tail(res)}")
    (wheel,) = dist.glob("fleetplan-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py, exe = venv / "bin" / "python", venv / "bin" / "fleetplan"
    res = subprocess.run([str(py), "-m", "pip", "install", "-q", str(wheel)], capture_output=True, text=True,
                         timeout=600)
    if res.returncode != 0:
        pytest.skip(f"pip cannot install the wheel's dependencies here: {_tail(res)}")
    work = tmp_path / "work"
    work.mkdir()
    imports = ("import importlib, pkgutil, fleetplan\n"
               "for i in pkgutil.walk_packages(fleetplan.__path__, prefix='fleetplan.'):\n"
               "    importlib.import_module(i.name)\n")
    res = subprocess.run([str(py), "-c", imports], cwd=work, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    res = subprocess.run([str(exe), "plan", "--time-limit", "20", "--format", "json", "--out", "plan.json"],
                         cwd=work, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    # The plain install plans what the development install plans for the shipped default (an independent run of the
    # same scenario in this process), and its plan is re-checked by validate inside the plain install.
    d = json.loads((work / "plan.json").read_text())
    here = solve(build_problem(load_scenario(None)), time_limit_s=20)
    assert d["status"] == "optimal" and here.status.value == "optimal"
    assert d["cost_usd_per_day"] == pytest.approx(here.objective_usd * per_day_factor(build_problem(
        load_scenario(None))), rel=0.01)  # both proven within the 0.5% default gap of one optimum
    check = ("from fleetplan.outputs.planio import plan_from_dict, problem_from_plan_dict, read_plan_json\n"
             "from fleetplan.placement.validate import validate\n"
             "d = read_plan_json('plan.json')\n"
             "problem, _ = problem_from_plan_dict(d)\n"
             "report = validate(problem, plan_from_dict(d, problem))\n"
             "assert report.ok, report.violations\n")
    res = subprocess.run([str(py), "-c", check], cwd=work, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    res = subprocess.run([str(exe), "serve", "--help"], cwd=work, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "Usage: fleetplan serve" in res.stdout, res.stderr[-2000:]


def test_plan_does_not_import_the_service_stack():
    # issue 28 item 7: `fleetplan plan` imported the service stack it never uses (the simulator it does use:
    # --verify). A fresh interpreter, so the other tests' imports do not count.
    import subprocess
    import sys

    code = ("import sys; from fleetplan.cli.main import main; main.get_command(None, 'plan'); "
            "print(sorted(m for m in sys.modules if m.startswith('fleetplan.service')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_help_lists_every_command_without_importing_them():
    # `fleetplan --help` imported every command's module to print one line each (1.5 CPU-s; 0.1 now): the lines come
    # from cli.main.COMMANDS, and a loaded command shows the same line.
    code = ("import sys; from click.testing import CliRunner; from fleetplan.cli.main import main\n"
            "out = CliRunner().invoke(main, ['--help']).output\n"
            "print(sorted(m for m in sys.modules if m.startswith('fleetplan.cli.') and m not in "
            "('fleetplan.cli.main', 'fleetplan.cli.output')))\n"
            "print(out)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded, _, out = res.partition("\n")
    assert loaded == "[]", loaded
    for name, (_, _, line) in COMMANDS.items():
        assert f"  {name} " in out and line in " ".join(out.split()), name
        command = main.get_command(None, name)
        assert command is not None and command.get_short_help_str(limit=200) == line
    assert CliRunner().invoke(main, ["--help"]).output == out.rstrip("\n") + "\n"
