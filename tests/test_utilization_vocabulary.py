"""One vocabulary for utilization (fleetplan.costmodels.utilization)."""

from __future__ import annotations

from fleetplan.costmodels.utilization import BUSY_TIME, KINDS, RATED_LOAD, SERVED_SHARE, legend


def test_each_kind_has_a_distinct_name_and_a_definition_with_a_ratio():
    names = {k.name for k in KINDS.values()}
    assert len(names) == len(KINDS) == 3
    for k in KINDS.values():
        assert " / " in k.definition  # numerator / denominator
    assert RATED_LOAD.label(0.66, 0) == "rated-capacity load 66%"
    assert BUSY_TIME.label(0.999) == "busy time 99.9%"


def test_legend_prints_the_definitions_asked_for():
    assert legend(SERVED_SHARE) == f"served share of the pool: {SERVED_SHARE.definition}"
    assert legend().count("\n") == 2
