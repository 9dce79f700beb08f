"""Shared test fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from service_support import postgres_schema, postgres_server_url

from fleetplan.costmodels.capacity_cache import CACHE_DIR_ENV

# The tests keep sized replicas in build/cache (and the `fleetplan` processes they start inherit it), never in the
# user's cache folder; a test of the cache itself points it elsewhere. FLEETPLAN_CACHE_DIR= (empty) runs them without.
os.environ.setdefault(CACHE_DIR_ENV, str(Path(__file__).resolve().parents[1] / "build" / "cache"))

from fleetplan.placement.plan import Plan
from fleetplan.placement.problem import ModelSpec, Pool, Problem, ReplicaOption
from fleetplan.service.runtime import load_problem


@pytest.fixture(scope="session")
def shipped():
    """(problem, loads) of the shipped default scenario as the re-planner service loads it (once per worker)."""
    return load_problem(None)


@pytest.fixture(scope="module")
def pg_url():
    """A PostgreSQL server's URL (.ci/run's, else a private one this module starts; the test is skipped with the
    reason when neither can run): service_support.postgres_server_url."""
    yield from postgres_server_url()


@pytest.fixture()
def pg_schema(pg_url):
    """A database URL on a schema of its own in ``pg_url``'s server, dropped afterwards (runs never see each other's
    rows): service_support.postgres_schema."""
    yield from postgres_schema(pg_url)


@pytest.fixture
def tiny_ledger_problem():
    """(problem, plan): one model in two H100 sites over two 1-hour windows, traffic from us-east-1, for ledger
    tests (prices $2 and $1 per GPU-hour, $0.02/GB between the sites, 1 MB per request, $0.5 per start)."""
    pools = (Pool("aws:us-east-1", "H100-SXM-80GB", 1, 8, 2.0, 80e9, price_source="test price"),
             Pool("aws:us-west-2", "H100-SXM-80GB", 1, 8, 1.0, 80e9))
    models = (ModelSpec("m", (1.0, 2.0), 2.0, 0.1, origin_site="aws:us-east-1", request_bytes=1e6),)
    opts = (ReplicaOption("m", "aws:us-east-1/H100-SXM-80GB", 1, 1, 1.5, 70e9, start_cost_usd=0.5),
            ReplicaOption("m", "aws:us-west-2/H100-SXM-80GB", 1, 1, 1.5, 70e9))
    prob = Problem(3600.0, 2, pools, models, opts, egress_usd_per_gb={("aws:us-east-1", "aws:us-west-2"): 0.02})
    plan = Plan({("m", "aws:us-east-1/H100-SXM-80GB", 1, 1): (1, 1),
                 ("m", "aws:us-west-2/H100-SXM-80GB", 1, 1): (0, 1)})
    return prob, plan


#: Test files that wait on real processes or hold the longest tests, longest first (seconds each took on one of
#: `make test`'s 4 workers, 2 idle cores, 2026-12-03: executor 48 with Ray starting, packaging 22, service_faults 17,
#: determinism 15, planner_properties 12, schemathesis 12, tenants 12, actuate 11, ledger_xlsx 11, leader_postgres 10,
#: service_restart 10, prometheus 9, speculative 9, classes 8, planner_honesty 8, service_leader 7): collected first,
#: so the workers start them at once and the short files fill in behind them, instead of a long file starting last
#: (test files are collected in name order, and most of the service's come late). The Makefile keeps this order
#: (--no-loadscope-reorder).
FIRST = ("test_executor.py", "test_packaging.py", "test_service_faults.py", "test_determinism.py",
         "test_planner_properties.py", "test_service_schemathesis.py", "test_tenants.py", "test_actuate.py",
         "test_ledger_xlsx.py", "test_service_leader_postgres.py", "test_service_restart.py",
         "test_service_prometheus.py", "test_speculative.py", "test_classes.py", "test_planner_honesty.py",
         "test_service_leader.py")


def pytest_collection_modifyitems(items):
    order = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: order.get(item.path.name, len(FIRST)))
