"""The folders install as subpackages of `fleetplan` only, and every module imports in a fresh interpreter."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import fleetplan

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


@pytest.mark.parametrize("module", _modules())
def test_every_module_imports_in_a_fresh_interpreter(module, tmp_path):
    res = _run(f"import {module}", tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]


def test_console_script_is_a_click_group(tmp_path):
    exe = Path(sys.executable).parent / "fleetplan"
    res = subprocess.run([str(exe), "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "plan" in res.stdout and "data" in res.stdout
