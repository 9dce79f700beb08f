"""Inference in training troughs (scenario.troughs, solvers.troughs)."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

from fleetplan.cli.main import main
from fleetplan.errors import InputError
from fleetplan.scenario.troughs import load_troughs, troughs_from_dict
from fleetplan.solvers.troughs import plan_troughs


def _data(**training) -> dict:
    t = {"gpus": 8, "gpu_hours": 24, "priority": 1, "checkpoint_interval_s": 1800, "restart_s": 900,
         "usd_per_gpu_hour": 1.0} | training
    return {"window_s": 3600, "training": t,
            "inference": {"own_gpus": 0, "demand_gpus": [0, 4, 4, 0], "on_demand_usd_per_gpu_hour": 2.0}}


def test_hand_case():
    """G = 8 GPUs × 4 h = 32 GPU-h, the job needs 24; L = (900 + 900) / 3600 = 0.5 GPU-h per preemption.
    Finishing: 32 − Σb − 0.5 Σu ≥ 24, i.e. Σb + 0.5 Σu ≤ 8. Borrowing k in windows 1-2 (one preemption each of k
    GPUs): 2k + 0.5k ≤ 8 -> k = 3 (k = 4 gives 10). Other splits with Σb = 7 (4+3, 3+4) need Σu = 4: 7 + 2 = 9 > 8.
    So b = [0, 3, 3, 0]: rent (1 + 1) GPU-h × $2 = $4, lost work 3 × 0.5 × $1 = $1.5; baseline 8 GPU-h × $2 = $16;
    saving 16 − 4 − 1.5 = $10.5."""
    r = plan_troughs(troughs_from_dict(_data()))
    assert r.borrowed_gpus == (0, 3, 3, 0)
    assert r.rented_gpus == (0, 1, 1, 0)
    assert (r.rent_usd, r.lost_work_usd, r.baseline_usd, r.saving_usd) == pytest.approx((4.0, 1.5, 16.0, 10.5))
    assert r.training_gpu_hours >= 24 - 1e-9


def test_high_priority_training_lends_less():
    # priority 10: a preempted GPU costs 10 × 0.5 × $1 = $5 > the $4 of renting it for 2 h: nothing is borrowed.
    r = plan_troughs(troughs_from_dict(_data(priority=10)))
    assert r.borrowed_gpus == (0, 0, 0, 0) and r.saving_usd == pytest.approx(0.0)


def test_bad_input_and_shipped():
    with pytest.raises(InputError, match="gpu_hours"):
        troughs_from_dict(_data(gpu_hours=40))  # 8 GPUs × 4 h = 32 < 40
    with pytest.raises(InputError, match="checkpoint_interval_s"):
        troughs_from_dict(_data(checkpoint_interval_s=-1))
    r = plan_troughs(load_troughs())
    assert r.saving_usd > 0 and r.training_gpu_hours >= load_troughs().training_gpu_hours - 1e-6


def test_cli_prints_the_ledger():
    r = CliRunner().invoke(main, ["troughs"])
    assert r.exit_code == 0, r.output
    assert "saving" in r.output and "Ledger (USD per day)" in r.output  # the shipped file: 24 one-hour windows


def test_cli_ledger_of_a_scenario_shorter_than_a_day_says_its_span(tmp_path):
    # The hand case's 4 one-hour windows: its $10.50 saving is over 4 h (a 3-window file's totals were titled "USD
    # per day").
    f = tmp_path / "t.yaml"
    f.write_text(yaml.safe_dump(_data()))
    r = CliRunner().invoke(main, ["troughs", str(f)])
    assert r.exit_code == 0, r.output
    assert "Ledger (USD over the scenario's 4 h, not scaled to a day)" in r.output and "10.50" in r.output
