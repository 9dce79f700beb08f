"""One active re-planner per database: two real `fleetplan serve` processes on one SQLite file (PostgreSQL:
test_service_leader_postgres), the leader killed with SIGKILL (tests/leader_support.py)."""

from __future__ import annotations

from leader_support import two_replicas_one_leader


def test_two_replicas_on_sqlite_elect_one_leader_and_survive_its_kill(tmp_path):
    two_replicas_one_leader(f"sqlite:///{tmp_path / 'shared.db'}", tmp_path)
