"""Storage of the re-planner service (SQLAlchemy Core): every observation, every adopted plan and its diff.

An SQLite file by default (embedded; WAL journal with synchronous=FULL, so a committed row survives a crash of
the process or the machine), PostgreSQL by URL (``postgresql://user@host/db``; the psycopg 3 driver is used).
Each write is one transaction that is committed before the service answers, so an observation acknowledged
with a 2xx is on disk.

Tables: ``observations`` (one row per model, tenant and interval), ``plans`` (the plan JSON with the live state
needed to resume), ``diffs`` (start/stop actions against the previous plan).
"""

from __future__ import annotations

import json
import time
from typing import Any

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
    event,
    func,
    insert,
    select,
    text,
)
from sqlalchemy.engine import Engine

from fleetplan.errors import InputError

metadata = MetaData()

observations = Table(
    "observations", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("received_at_s", Float, nullable=False),
    Column("at_s", Float, nullable=False),
    Column("model", String(200), nullable=False, index=True),
    Column("tenant", String(200), nullable=False),
    Column("interval_s", Float, nullable=False),
    Column("demand_req_per_s", Float, nullable=False),
    Column("source", String(40), nullable=False),
    Column("body", Text, nullable=False),
)

plans = Table(
    "plans", metadata,
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
    Column("body", Text, nullable=False),
)

diffs = Table(
    "diffs", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("plan_id", Integer, ForeignKey("plans.id"), nullable=False, index=True),
    Column("previous_plan_id", Integer, nullable=True),
    Column("created_at_s", Float, nullable=False),
    Column("body", Text, nullable=False),
)


def normalize_url(url: str) -> str:
    """SQLAlchemy URL with the driver this project installs: 'postgresql://' -> 'postgresql+psycopg://'; a bare
    file path becomes 'sqlite:///path'. Raises InputError for other schemes."""
    if "://" not in url:
        return f"sqlite:///{url}"
    scheme = url.split("://", 1)[0]
    if scheme in ("postgresql", "postgres"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    if scheme.startswith(("sqlite", "postgresql+")):
        return url
    raise InputError(f"database URL scheme {scheme!r} is not supported; use sqlite:///file.db or "
                     "postgresql://user@host/db", field="db", value=url)


class Store:
    """The service's database.

    Args:
        url: SQLAlchemy URL ('sqlite:///fleetplan.db', 'postgresql://user@127.0.0.1/fleetplan') or a file path.

    Raises InputError for an unsupported URL; SQLAlchemy's OperationalError when the database is unreachable.
    """

    def __init__(self, url: str) -> None:
        self.url = normalize_url(url)
        kwargs: dict[str, Any] = {"future": True}
        if self.url.startswith("sqlite"):
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
        else:
            kwargs["pool_pre_ping"] = True
        self.engine: Engine = create_engine(self.url, **kwargs)
        if self.url.startswith("sqlite"):
            @event.listens_for(self.engine, "connect")
            def _pragmas(dbapi_conn, _record):  # durable commits, readers do not block the writer
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute("PRAGMA synchronous=FULL")
                cur.close()
        try:
            metadata.create_all(self.engine)
        except Exception as exc:  # noqa: BLE001 - any driver error becomes one clear line for the user
            from sqlalchemy.engine import make_url

            shown = make_url(self.url).render_as_string(hide_password=True)
            reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            raise InputError(f"cannot open the database {shown}: {reason}; check the URL, that the folder exists "
                             "and that the server is running", field="db", value=shown) from None

    def ping(self) -> bool:
        """True when the database answers."""
        try:
            with self.engine.connect() as c:
                c.execute(text("SELECT 1"))
            return True
        except Exception:  # noqa: BLE001 - health check reports any failure
            return False

    # ---- observations --------------------------------------------------------------------------------------
    def add_observations(self, rows: list[dict]) -> list[int]:
        """Insert observation rows (keys: at_s, model, tenant, interval_s, demand_req_per_s, source, body dict) in
        one committed transaction; returns their ids in order."""
        now = time.time()
        ids = []
        with self.engine.begin() as c:
            for r in rows:
                res = c.execute(insert(observations).values(
                    received_at_s=now, at_s=r["at_s"], model=r["model"], tenant=r["tenant"],
                    interval_s=r["interval_s"], demand_req_per_s=r["demand_req_per_s"], source=r["source"],
                    body=json.dumps(r["body"])))
                ids.append(int(res.inserted_primary_key[0]))
        return ids

    def observations_after(self, obs_id: int, limit: int = 100_000) -> list[dict]:
        """Observations with id > ``obs_id``, oldest first (at most ``limit``)."""
        with self.engine.connect() as c:
            rows = c.execute(select(observations).where(observations.c.id > obs_id).order_by(observations.c.id)
                             .limit(limit)).mappings().all()
        return [dict(r) for r in rows]

    def observation_ids(self) -> set[int]:
        with self.engine.connect() as c:
            return {int(r[0]) for r in c.execute(select(observations.c.id))}

    def count_observations(self) -> int:
        with self.engine.connect() as c:
            return int(c.execute(select(func.count()).select_from(observations)).scalar_one())

    # ---- plans and diffs -----------------------------------------------------------------------------------
    def add_plan(self, *, at_s: float, window: int, reason: str, cost_usd_per_hour: float, migrations: int,
                 valid: bool, last_observation_id: int, summary: dict, body: dict, actions: list[dict],
                 previous_plan_id: int | None) -> int:
        """Store a plan and its diff in one committed transaction; returns the plan id."""
        now = time.time()
        with self.engine.begin() as c:
            res = c.execute(insert(plans).values(
                created_at_s=now, at_s=at_s, window=window, reason=reason, cost_usd_per_hour=cost_usd_per_hour,
                migrations=migrations, valid=int(valid), last_observation_id=last_observation_id,
                summary=json.dumps(summary), body=json.dumps(body)))
            pid = int(res.inserted_primary_key[0])
            c.execute(insert(diffs).values(plan_id=pid, previous_plan_id=previous_plan_id, created_at_s=now,
                                           body=json.dumps(actions)))
        return pid

    @staticmethod
    def _plan_row(r) -> dict:
        d = dict(r)
        d["summary"] = json.loads(d["summary"])
        if "body" in d:
            d["body"] = json.loads(d["body"])
        d["valid"] = bool(d["valid"])
        return d

    def last_plan(self) -> dict | None:
        """The newest stored plan (with its body), or None."""
        with self.engine.connect() as c:
            r = c.execute(select(plans).order_by(plans.c.id.desc()).limit(1)).mappings().first()
        return self._plan_row(r) if r else None

    def plans_since(self, since_s: float, limit: int = 1000) -> list[dict]:
        """Plan rows (without body) created at or after ``since_s`` (unix s), oldest first."""
        cols = [c for c in plans.c if c.name != "body"]
        with self.engine.connect() as c:
            rows = c.execute(select(*cols).where(plans.c.created_at_s >= since_s).order_by(plans.c.id)
                             .limit(limit)).mappings().all()
        return [self._plan_row(r) for r in rows]

    def count_plans(self) -> int:
        with self.engine.connect() as c:
            return int(c.execute(select(func.count()).select_from(plans)).scalar_one())

    def diff_for(self, plan_id: int) -> dict | None:
        """The diff stored with plan ``plan_id``: {plan_id, previous_plan_id, created_at_s, actions}."""
        with self.engine.connect() as c:
            r = c.execute(select(diffs).where(diffs.c.plan_id == plan_id)).mappings().first()
        if r is None:
            return None
        return {"plan_id": r["plan_id"], "previous_plan_id": r["previous_plan_id"], "created_at_s": r["created_at_s"],
                "actions": json.loads(r["body"])}

    def close(self) -> None:
        self.engine.dispose()
