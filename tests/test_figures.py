"""The figures README.md and docs/*.md quote hold: docs/figures.py recomputes them from the commands that give them.

Here only its fast sources run (a few seconds); CI's `make figures` checks every source. A failure names the
figure, the file and line, both values and the command that regenerates it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

FIGURES = Path(__file__).resolve().parent.parent / "docs" / "figures.py"


@pytest.fixture(scope="module")
def figures():
    spec = importlib.util.spec_from_file_location("fleetplan_docs_figures", FIGURES)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_fast_figures_hold(figures):
    fast = [n for n, s in figures.SOURCES.items() if s.fast]
    values = figures.compute(fast)
    problems = figures.drifts(figures.documents(), values, set(fast))
    assert not problems, "\n".join(["figures that drifted from their commands:", *problems])


def test_every_tag_names_a_known_source_and_a_number(figures):
    # A tag whose source is unknown, or with no number right before it, would never be checked.
    for path, text in figures.documents().items():
        for t in figures.tags(text, path):
            assert t.name.split(".", 1)[0] in figures.SOURCES, t
            assert t.value is not None, t


def test_a_drifted_figure_is_named_with_its_command(figures, tmp_path):
    # A copy of a README line with the troughs saving changed from its computed value: the check names the figure,
    # the line, both values and the regeneration command; --write's rewrite restores the computed value.
    doc = tmp_path / "page.md"
    text = "intro\nsaves $1.00<!--fig troughs.saving--> a day\n"
    values = {"troughs.saving": "713.23"}
    (msg,) = figures.drifts({doc: text}, values, {"troughs"})
    assert f"{doc}:2: figure troughs.saving reads 1.00" in msg and "gives 713.23" in msg
    assert "docs/figures.py --write --only troughs" in msg
    assert figures.rewrite(text, values) == "intro\nsaves $713.23<!--fig troughs.saving--> a day\n"
    # a figure of a source not run is left alone; an unknown source is reported
    assert figures.drifts({doc: text}, {}, {"ledger"}) == []
    (msg,) = figures.drifts({doc: "3<!--fig nosuch.x-->"}, {}, {"ledger"})
    assert "unknown source 'nosuch'" in msg
