"""One active re-planner per database on the PostgreSQL the tests use: two real `fleetplan serve` processes, the
leader killed with SIGKILL (tests/leader_support.py; the SQLite case is test_service_leader)."""

from __future__ import annotations

import pytest
from leader_support import two_replicas_one_leader


@pytest.mark.xdist_group("postgres")
def test_two_replicas_on_postgres_elect_one_leader_and_survive_its_kill(pg_schema, tmp_path):
    two_replicas_one_leader(pg_schema, tmp_path)
