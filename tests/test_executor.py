"""Executors (fleetplan.solvers.executor), scenario sweeps (placement/solvers/cli sweep) and the equality of results
between the process pool, this process and a local Ray instance.

Ray tests share one local Ray instance (2 CPUs, 127.0.0.1, no dashboard) started once for this module, in one xdist
group; where Ray cannot start, they are skipped with Ray's reason.
"""

from __future__ import annotations

import dataclasses
import sys

import pytest
from click.testing import CliRunner

from fleetplan.cli.main import main
from fleetplan.cli.whatif import run_cells
from fleetplan.costmodels.split import grid
from fleetplan.datasets.sharing import load_interference
from fleetplan.datasets.shipped import shipped_scenario_text
from fleetplan.errors import InputError, UnknownNameError
from fleetplan.fileio import parse_yaml
from fleetplan.outputs.planio import per_day_factor
from fleetplan.placement.generators import planted_instance
from fleetplan.placement.plan import evaluate
from fleetplan.placement.tenants import Node, Tenant, TenantProblem, validate_allocation
from fleetplan.placement.validate import validate
from fleetplan.scenario.build import build_problem
from fleetplan.scenario.read import scenario_from_raw
from fleetplan.scenario.split import SplitOptions, make_spec
from fleetplan.scenario.sweep import apply_sweep, base_prices, sweep_variables
from fleetplan.solvers.executor import Executor, LocalExecutor, make_executor, spawn_seeds
from fleetplan.solvers.solve import solve
from fleetplan.solvers.sweep import SweepSettings, run_sweep
from fleetplan.solvers.tenants.allocate import solve_allocation

H100 = "H100-SXM-80GB"
A10G = "A10G"


def _double(x: int) -> int:
    return 2 * x


def _add(common: int, x: int) -> int:
    return common + x


def _fail_on_three(x: int) -> int:
    if x == 3:
        raise InputError("three is refused", field="x", value=x)
    return x


def _tiny_raw() -> dict:
    """One AWS site with one H100 node (catalog price) and four A10G (price given, $1.20/GPU-h); one 8B model over
    three one-hour windows at 2, 6 and 4 req/s."""
    return {
        "name": "tiny",
        "options": {"window_length_s": 3600, "max_shared_gpus_per_pool": 0},
        "sites": [{"name": "aws:us-east-1", "inventory": [
            {"gpu": "H100", "nodes": 1, "gpus_per_node": 8},
            {"gpu": "A10G", "nodes": 4, "gpus_per_node": 1, "usd_per_gpu_hour": 1.2}]}],
        "models": [{"name": "Llama-3.1-8B", "tp": [1], "min_replicas": 1,
                    "slo": {"ttft_p95_s": 1.5, "tpot_p95_s": 0.1}, "token_mix": {"trace": "azure-conv"},
                    "demand": {"rates": [2.0, 6.0, 4.0]}}],
    }


@pytest.fixture(scope="module")
def tiny():
    return scenario_from_raw(_tiny_raw(), source="tiny test scenario")


# ------------------------------------------------------------------------------------------------- executors


def test_local_executor_keeps_item_order_and_counts_progress():
    done = []
    with LocalExecutor(2) as ex:
        assert ex.map(_double, [5, 1, 4, 2]) == [10, 2, 8, 4]
        assert ex.map(_add, [1, 2], common=10, with_common=True, progress=done.append) == [11, 12]
    assert sorted(done) == [1, 2]
    assert Executor().map(_double, [3]) == [6]  # in this process


def test_task_errors_reach_the_caller_as_themselves():
    for ex in (LocalExecutor(1), LocalExecutor(2)):
        with ex, pytest.raises(InputError, match="three is refused"):
            ex.map(_fail_on_three, [1, 2, 3, 4])


def test_make_executor_refuses_bad_requests(monkeypatch):
    with pytest.raises(InputError, match="unknown executor 'dask'"):
        make_executor("dask")
    with pytest.raises(InputError, match="needs --executor ray"):
        make_executor("process", address="auto")
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    with pytest.raises(InputError, match=r"pip install 'fleetplan\[ray\]'"):
        make_executor("ray")


def test_cli_names_the_extra_when_ray_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    r = CliRunner().invoke(main, ["sweep", "--vary", "demand_factor=1", "--executor", "ray"])
    assert r.exit_code == 2
    assert r.output.strip().count("\n") == 0 and "fleetplan[ray]" in r.output


def test_spawn_seeds_are_reproducible_and_distinct():
    a, b = spawn_seeds(7, 4), spawn_seeds(7, 4)
    assert a == b and len(set(a)) == 4
    assert spawn_seeds(8, 4) != a


# --------------------------------------------------------------------------------------- scenario changes


def test_sweep_variables_name_each_gpu_type(tiny):
    names = sweep_variables(tiny)
    assert f"gpu_price_factor.{H100}" in names and f"gpu_price_factor.{A10G}" in names


def test_apply_sweep_changes_demand_prices_slo_and_window(tiny):
    base = build_problem(tiny)
    prices = base_prices(base)
    p = build_problem(apply_sweep(tiny, {"demand_factor": 1.5}, prices))
    # 1.5 × (2, 6, 4) req/s = (3, 9, 6) req/s (rates are planned as given: peak = mean for given rates).
    assert p.models[0].demand_req_per_s == pytest.approx((3.0, 9.0, 6.0))
    p = build_problem(apply_sweep(tiny, {f"gpu_price_factor.{H100}": 2.0, "gpu_price_factor": 0.5}, prices))
    by_gpu = {q.gpu: q.usd_per_gpu_hour for q in p.pools}
    h100 = {q.gpu: q.usd_per_gpu_hour for q in base.pools}[H100]
    assert by_gpu[H100] == pytest.approx(h100 * 2.0 * 0.5)  # both factors apply to H100
    assert by_gpu[A10G] == pytest.approx(1.2 * 0.5)  # the given price × the all-GPU factor
    sc = apply_sweep(tiny, {"ttft_s": 0.8, "tpot_factor": 0.5}, prices)
    assert sc.raw["models"][0]["slo"] == {"ttft_p95_s": 0.8, "tpot_p95_s": 0.05}
    # tiny gives its demand as hourly rates: another window length would re-read them per half hour (issue 28)
    with pytest.raises(InputError, match="--vary window_length_s 1800 s does not fit the rates: list"):
        apply_sweep(tiny, {"window_length_s": 1800}, prices)
    assert apply_sweep(tiny, {"window_length_s": 3600}, prices).options["window_length_s"] == 3600
    assert tiny.raw == _tiny_raw()  # the base scenario is never changed


def test_apply_sweep_refuses_bad_values(tiny):
    with pytest.raises(UnknownNameError, match="sweep variable"):
        apply_sweep(tiny, {"demand_growth": 1.2}, {})
    with pytest.raises(InputError, match="demand_factor"):
        apply_sweep(tiny, {"demand_factor": -1.0}, {})
    with pytest.raises(InputError, match="window_length_s"):
        apply_sweep(tiny, {"window_length_s": 10.0}, {})
    with pytest.raises(InputError, match="base scenario's prices"):
        apply_sweep(tiny, {"gpu_price_factor": 2.0}, None)


SETTINGS = SweepSettings(time_limit_s=20, threads=1, gap=1e-4)
VARIABLES = {"demand_factor": [1.0, 2.0], f"gpu_price_factor.{A10G}": [1.0, 3.0]}


def _comparable(rows: list[dict]) -> list[dict]:
    """The rows without solve_s (wall time differs between runs)."""
    return [{k: v for k, v in r.items() if k != "solve_s"} for r in rows]


@pytest.fixture(scope="module")
def serial_rows(tiny):
    return run_sweep(tiny, VARIABLES, Executor(), SETTINGS)


def test_sweep_rows_are_checked_plans(tiny, serial_rows):
    assert [{k: r[k] for k in VARIABLES} for r in serial_rows] == grid(VARIABLES)
    prices = base_prices(build_problem(tiny))
    for r in serial_rows:
        assert r["status"] == "optimal" and r["valid"] is True
        # An independent path: plan the changed scenario directly and re-check the plan.
        cell = {k: r[k] for k in VARIABLES}
        problem = build_problem(apply_sweep(tiny, cell, prices))
        plan = solve(problem, time_limit_s=20, threads=1, gap=1e-4)
        assert validate(problem, plan).ok
        assert r["cost_usd_per_day"] == pytest.approx(evaluate(problem, plan).total_usd * per_day_factor(problem))
    # More demand never costs less: the plan for 2× demand serves 1× demand too.
    cost = {(r["demand_factor"], r[f"gpu_price_factor.{A10G}"]): r["cost_usd_per_day"] for r in serial_rows}
    for f in (1.0, 3.0):
        assert cost[(2.0, f)] >= cost[(1.0, f)] - 1e-6


def test_sweep_on_the_process_pool_equals_this_process(tiny, serial_rows):
    with LocalExecutor(2) as ex:
        rows = run_sweep(tiny, VARIABLES, ex, SETTINGS)
    assert _comparable(rows) == _comparable(serial_rows)


def test_sweep_cli_writes_table_csv_and_plot(tmp_path):
    sc = tmp_path / "tiny.yaml"
    import yaml

    sc.write_text(yaml.safe_dump(_tiny_raw()))
    out, png = tmp_path / "s.csv", tmp_path / "s.png"
    r = CliRunner().invoke(main, ["sweep", str(sc), "--vary", "demand_factor=1,2", "--workers", "1",
                                  "--time-limit", "20", "--out", str(out), "--plot", str(png)])
    assert r.exit_code == 0, r.output
    assert "tiny: sweep of demand_factor" in r.output
    lines = out.read_text().splitlines()
    assert lines[0].startswith("demand_factor,status,cost_usd_per_day") and len(lines) == 3
    assert png.read_bytes()[:4] == b"\x89PNG"
    r = CliRunner().invoke(main, ["sweep", str(sc), "--vary", "demand_factor=1:2:40", "--max-cells", "10"])
    assert r.exit_code == 2 and "40 cells" in r.output


# ---------------------------------------------------------------------------------------------------- Ray

ray_group = pytest.mark.xdist_group("ray")


@pytest.fixture(scope="module")
def ray_instance():
    """A local Ray instance for this module: 2 CPUs, loopback only, no dashboard; skipped with Ray's reason when it
    cannot start."""
    try:
        import ray
    except ImportError:
        pytest.skip("Ray is not installed (pip install 'fleetplan[ray]')")
    import logging

    try:
        ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
                 logging_level=logging.ERROR)
    except Exception as exc:  # noqa: BLE001 - any failure to start is a reason to skip, shown
        pytest.skip(f"a local Ray instance could not start: {type(exc).__name__}: {exc}")
    yield ray
    ray.shutdown()


@ray_group
def test_ray_sweep_equals_the_process_pool(ray_instance, tiny, serial_rows):
    with make_executor("ray") as ex:  # uses the running instance; leaves it running
        assert ex.map(_double, [3, 1, 2]) == [6, 2, 4]
        with pytest.raises(InputError, match="three is refused"):
            ex.map(_fail_on_three, [3])
        rows = run_sweep(tiny, VARIABLES, ex, SETTINGS)
    assert ray_instance.is_initialized()
    assert _comparable(rows) == _comparable(serial_rows)


@ray_group
def test_ray_whatif_grid_equals_the_process_pool(ray_instance):
    split = "split_default.yaml"  # the shipped split design of `fleetplan whatif`
    spec = make_spec(SplitOptions.from_mapping(parse_yaml(shipped_scenario_text(split), source=split), source=split))
    variables = {"egress_usd_per_gb": [0.0, 0.02], "prompt_tokens": [500.0, 4000.0]}
    with LocalExecutor(2) as ex:
        local = run_cells(spec, variables, ex, quiet=True)
    with make_executor("ray") as ex:
        on_ray = run_cells(spec, variables, ex, quiet=True)
    assert len(local) == 4 and [r["egress_usd_per_gb"] for r in local] == [0.0, 0.0, 0.02, 0.02]
    assert on_ray == local


@ray_group
def test_ray_pareto_front_equals_this_process(ray_instance):
    # Instance E of test_tenants (two 8-GPU nodes; a wants 10, b wants 6) in both of two windows: per window the
    # anchors are (utilization 0.875, isolation 0) and (0.9375, 0.075); isolation sums over the windows (0.15),
    # utilization is the share of GPU-windows used (0.9375).
    table = load_interference()
    nodes = tuple(Node(f"n{i}", H100, 8) for i in range(2))
    tenants = (Tenant("a", 4, 64, 1.0, (10, 10), 1.0, "interactive", ()),
               Tenant("b", 2, 64, 1.0, (6, 6), 1.0, "interactive", ()))
    problem = TenantProblem(nodes, tenants, table)
    serial = solve_allocation(problem, mode="pareto", points=3, time_limit_s=20)
    with make_executor("ray") as ex:
        fanned = solve_allocation(problem, mode="pareto", points=3, time_limit_s=20, executor=ex)
    def key(res):
        return [(dataclasses.replace(a, solve_s=0.0), o) for a, o in res.pareto]
    assert key(fanned) == key(serial)
    for alloc, _ in fanned.pareto:
        validate_allocation(problem, alloc)
    pts = {(round(o.utilization, 6), round(o.isolation, 6)) for _, o in fanned.pareto}
    assert (0.875, 0.0) in pts and (0.9375, 0.15) in pts


@ray_group
def test_ray_pop_decomposition_equals_the_process_pool(ray_instance):
    # POP into 2 parts (solvers/pop.py): every task closes by its gap well within its budget on this tiny planted
    # instance, so the plan, its cost and the whole problem's bound are the same to the cent on every executor
    problem, optimum = planted_instance(3, models_per_gpu=2, n_windows=3, seed=1)
    with LocalExecutor(2) as ex:
        local = solve(problem, time_limit_s=20, gap=1e-4, decompose=2, executor=ex)
    with make_executor("ray") as ex:
        on_ray = solve(problem, time_limit_s=20, gap=1e-4, decompose=2, executor=ex)
    assert validate(problem, on_ray).ok and on_ray.bound_usd <= optimum + 1e-6
    assert (on_ray.replicas, on_ray.shared) == (local.replicas, local.shared)
    assert round(on_ray.objective_usd, 2) == round(local.objective_usd, 2)
    assert round(on_ray.bound_usd, 2) == round(local.bound_usd, 2)
    assert "on local Ray" in on_ray.message or "on Ray" in on_ray.message
