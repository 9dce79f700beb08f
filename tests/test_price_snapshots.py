"""One price snapshot date per plan unless the scenario says `price_snapshots: mixed` (issue 28, item 4).

The shipped catalogs date AWS's us-east-1 H100 row 2026-11-09 and its A10G row 2026-06-17 (datasets/data/pricing);
a scenario pricing both from the catalogs mixes two snapshot dates. No test here solves: the policy acts when the
problem is built.
"""

from __future__ import annotations

import pytest

from fleetplan.errors import InputError
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.pools import snapshot_dates
from fleetplan.scenario.read import load_scenario, scenario_from_raw


def raw(options: dict | None = None, a10g_price: float | None = None) -> dict:
    a10g = {"gpu": "A10G", "nodes": 2, "gpus_per_node": 1}
    if a10g_price is not None:
        a10g["usd_per_gpu_hour"] = a10g_price
    return {"name": "snap", "options": {"window_length_s": 3600, **(options or {})},
            "sites": [{"name": "aws:us-east-1", "inventory": [{"gpu": "H100", "nodes": 1, "gpus_per_node": 8},
                                                               a10g]}],
            "models": [{"name": "Llama-3.1-8B", "tp": [1], "slo": {"ttft_p95_s": 1.5, "tpot_p95_s": 0.1},
                        "token_mix": {"trace": "azure-conv"}, "demand": {"rates": [1.0, 2.0]}}]}


def test_mixed_snapshot_dates_are_refused_naming_the_pools_and_dates():
    with pytest.raises(InputError) as e:
        build_problem(scenario_from_raw(raw(), source="snap.yaml"))
    msg = str(e.value)
    assert e.value.field == "options.price_snapshots"
    assert "2026-11-09: aws:us-east-1/H100-SXM-80GB" in msg and "2026-06-17: aws:us-east-1/A10G" in msg
    assert "price_snapshots: mixed" in msg and "price_date" in msg


def test_mixed_dates_allowed_when_the_scenario_says_so_and_each_pool_says_its_date():
    problem = build_problem(scenario_from_raw(raw({"price_snapshots": "mixed"}), source="snap.yaml"))
    assert snapshot_dates(list(problem.pools)) == {"2026-11-09": ["aws:us-east-1/H100-SXM-80GB"],
                                                   "2026-06-17": ["aws:us-east-1/A10G"]}


def test_a_price_given_in_the_scenario_is_no_snapshot():
    # The A10G priced by the row itself: only the H100 comes from a catalog snapshot, so one date.
    problem = build_problem(scenario_from_raw(raw(a10g_price=1.0), source="snap.yaml"))
    assert {p.id: p.price_as_of for p in problem.pools} == {"aws:us-east-1/H100-SXM-80GB": "2026-11-09",
                                                            "aws:us-east-1/A10G": ""}


def test_an_unknown_policy_is_refused():
    with pytest.raises(InputError, match="price_snapshots"):
        scenario_from_raw(raw({"price_snapshots": "newest"}), source="snap.yaml")


@pytest.mark.parametrize("name", ["default", "purchase_example", "disagg_wins", "disagg_egress_loses",
                                  "melange_example"])
def test_shipped_scenarios_follow_the_policy(name):
    # default and purchase_example declare their mix (price_snapshots: mixed, with the dates in a comment); the
    # disagg examples pin price_date 2025-05-31, which leaves AWS's undated snapshot for every pool.
    problem = build_problem(load_scenario(name))
    dates = snapshot_dates(list(problem.pools))
    assert len(dates) <= 1 or load_scenario(name).options["price_snapshots"] == "mixed", dates
