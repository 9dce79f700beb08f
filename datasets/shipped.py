"""The scenario files shipped with fleetplan (``fleetplan/datasets/scenarios/``): the default planning scenario, the
default tenants file and the default split/what-if design. Only this module knows where they live."""

from __future__ import annotations

from importlib import resources

from fleetplan.errors import UnknownNameError


def shipped_scenarios() -> list[str]:
    """File names of the shipped scenario files (``.yaml``/``.yml``), sorted."""
    root = resources.files("fleetplan.datasets") / "scenarios"
    return sorted(p.name for p in root.iterdir() if p.name.endswith((".yaml", ".yml")))


def shipped_scenario_text(name: str) -> str:
    """The text of shipped scenario file ``name`` (e.g. 'default.yaml'). Raises UnknownNameError (with the closest
    shipped names) when there is no such file."""
    names = shipped_scenarios()
    if name not in names:
        raise UnknownNameError("shipped scenario", name, names)
    return (resources.files("fleetplan.datasets") / "scenarios" / name).read_text(encoding="utf-8")
