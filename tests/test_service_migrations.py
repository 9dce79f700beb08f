"""Schema migrations (Alembic, shipped in fleetplan/service/migrations): a database made by the service before
migrations existed (main's ``metadata.create_all``, no version table), with its rows, is upgraded in place by the
service's start without losing a row, on SQLite and on PostgreSQL; the migrated schema is the store's tables; a
database of a newer schema is refused naming its revision.

The rows are those main's service wrote (tests/data/service_db_0001.json, made by driving that version), loaded into
tables created from main's table definitions, copied below as they were.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from service_support import T0, Clock
from sqlalchemy import (
    Column,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    insert,
    select,
    text,
)

from fleetplan.errors import InputError
from fleetplan.service.runtime import ReplanService, ServiceSettings
from fleetplan.service.store import Store, metadata, normalize_url

FIXTURE = Path(__file__).parent / "data" / "service_db_0001.json"


def legacy_metadata() -> MetaData:
    """main's tables (fleetplan 0.1, service/store.py), unchanged."""
    md = MetaData()
    Table("observations", md,
          Column("id", Integer, primary_key=True, autoincrement=True),
          Column("received_at_s", Float, nullable=False),
          Column("at_s", Float, nullable=False),
          Column("model", String(200), nullable=False, index=True),
          Column("tenant", String(200), nullable=False),
          Column("interval_s", Float, nullable=False),
          Column("demand_req_per_s", Float, nullable=False),
          Column("source", String(40), nullable=False),
          Column("body", Text, nullable=False))
    Table("plans", md,
          Column("id", Integer, primary_key=True, autoincrement=True),
          Column("created_at_s", Float, nullable=False, index=True),
          Column("at_s", Float, nullable=False),
          Column("window", Integer, nullable=False),
          Column("reason", String(40), nullable=False),
          Column("cost_usd_per_hour", Float, nullable=False),
          Column("migrations", Integer, nullable=False),
          Column("valid", Integer, nullable=False),
          Column("last_observation_id", Integer, nullable=False),
          Column("summary", Text, nullable=False),
          Column("body", Text, nullable=False))
    Table("diffs", md,
          Column("id", Integer, primary_key=True, autoincrement=True),
          Column("plan_id", Integer, ForeignKey("plans.id"), nullable=False, index=True),
          Column("previous_plan_id", Integer, nullable=True),
          Column("created_at_s", Float, nullable=False),
          Column("body", Text, nullable=False))
    Table("idempotency_keys", md,
          Column("key", String(200), primary_key=True),
          Column("body_sha256", String(64), nullable=False),
          Column("ids", Text, nullable=False),
          Column("created_at_s", Float, nullable=False, index=True))
    Table("probes", md,
          Column("id", Integer, primary_key=True),
          Column("at_s", Float, nullable=False))
    return md


def legacy_database(url: str) -> dict:
    """Create main's tables at ``url`` and fill them with the fixture's rows; returns the rows by table."""
    rows = json.loads(FIXTURE.read_text())["tables"]
    md = legacy_metadata()
    engine = create_engine(normalize_url(url))
    md.create_all(engine)
    with engine.begin() as c:
        for name in ("observations", "plans", "diffs", "idempotency_keys", "probes"):
            if rows[name]:
                c.execute(insert(md.tables[name]), rows[name])
        if engine.dialect.name == "postgresql":  # rows inserted with their ids: move the sequences past them
            for name in ("observations", "plans", "diffs"):
                c.execute(text(f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), (SELECT max(id) FROM {name}))"))
    engine.dispose()
    return rows


def _upgrade_keeps_every_row(shipped, url: str) -> None:
    rows = legacy_database(url)
    problem, loads = shipped
    settings = ServiceSettings(db_url=url, token="migrate-token", interval_s=0, resolve_every_s=0,
                               max_observation_age_s=1e10)
    clock = Clock(T0 + 3600)
    svc = ReplanService(settings, problem, loads, clock=clock)
    try:
        assert svc.store.revision == "0002"
        # every row kept, column by column (the new columns come with their defaults)
        with svc.store.engine.connect() as c:
            for name, old in rows.items():
                table = metadata.tables[name]
                got = [dict(r) for r in c.execute(select(table).order_by(*table.primary_key.columns)).mappings()]
                assert len(got) == len(old), name
                for g, o in zip(got, old, strict=True):
                    assert {k: g[k] for k in o} == o, name
                if name == "plans":
                    assert all(g["epoch"] == 0 for g in got)
        # the service resumed from main's newest plan, and its stored diff (shared_models) reads as models
        newest = max(rows["plans"], key=lambda r: r["id"])
        assert svc.resumed and svc.plan_row["id"] == newest["id"]
        shared = [a for a in svc.published.diff["actions"] if a["tp"] == 0]
        assert shared and shared[0]["models"] == ["Llama-3.1-8B", "Qwen2.5-7B"]
        # main deleted its newest observation (id 14) after plan 7 claimed it: a new one must not get id 14, or a
        # restart would not replay it (plan 7's last_observation_id is 14)
        assert newest["last_observation_id"] == 14 and max(r["id"] for r in rows["observations"]) == 13
        (new_id,) = svc.observe([{"model": "Llama-3.1-8B", "tenant": "after", "interval_s": 60, "arrivals": 60}])
        assert new_id > 14
        state = svc.replanner.forecaster.to_dict()
    finally:
        svc.close()
    again = ReplanService(settings, problem, loads, clock=clock)
    try:
        assert again.resumed and again.replanner.forecaster.to_dict() == state  # the new row was replayed
        assert again.store.revision == "0002"
    finally:
        again.close()
    # the migrated schema is the store's: nothing for autogenerate to add, drop or alter
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    engine = create_engine(normalize_url(url))
    with engine.connect() as c:
        assert compare_metadata(MigrationContext.configure(c), metadata) == []
    engine.dispose()


def test_a_database_of_main_is_upgraded_in_place_on_sqlite(shipped, tmp_path):
    _upgrade_keeps_every_row(shipped, f"sqlite:///{tmp_path / 'main.db'}")


@pytest.mark.xdist_group("postgres")
def test_a_database_of_main_is_upgraded_in_place_on_postgres(shipped, pg_schema):
    _upgrade_keeps_every_row(shipped, pg_schema)


def test_a_new_database_is_made_at_the_newest_revision_and_a_newer_one_is_refused(tmp_path):
    url = f"sqlite:///{tmp_path / 'new.db'}"
    store = Store(url)
    assert store.revision == "0002"
    with store.engine.begin() as c:
        c.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    store.close()
    with pytest.raises(InputError, match="revision '0099'.*newer fleetplan"):
        Store(url)
