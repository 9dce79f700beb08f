"""Storage of the re-planner service (SQLAlchemy Core): every observation, every adopted plan and its diff.

An SQLite file by default (embedded; WAL journal with synchronous=FULL, so a committed row survives a crash of
the process or the machine), PostgreSQL by URL (``postgresql://user@host/db``; the psycopg 3 driver is used).
Each write is one transaction that is committed before the service answers, so an observation acknowledged
with a 2xx is on disk.

Tables: ``observations`` (one row per model, tenant and interval), ``plans`` (the plan JSON with the live state
needed to resume), ``diffs`` (start/stop actions against the previous plan), ``idempotency_keys`` (the ids a
keyed POST stored, so a retry stores nothing twice), ``probes`` (one row rewritten by the readiness check),
``leases`` (the leader's lease: :mod:`fleetplan.service.leader`), ``service_meta`` (small facts such as how far
retention folded observations). The schema is versioned by Alembic (``fleetplan/service/migrations``):
:meth:`Store.migrate` upgrades a database in place when the service starts, a database made before migrations
existed included.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
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
    delete,
    event,
    func,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.engine import Connection, Engine, make_url

from fleetplan.errors import FleetplanError, InputError

metadata = MetaData()

observations = Table(
    "observations", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("received_at_s", Float, nullable=False),
    Column("at_s", Float, nullable=False, index=True),
    Column("model", String(200), nullable=False, index=True),
    Column("tenant", String(200), nullable=False),
    Column("interval_s", Float, nullable=False),
    Column("demand_req_per_s", Float, nullable=False),
    Column("source", String(40), nullable=False),
    Column("body", Text, nullable=False),
    sqlite_autoincrement=True,  # ids never reused (migration 0002)
)

plans = Table(
    "plans", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("created_at_s", Float, nullable=False, index=True),
    Column("at_s", Float, nullable=False, index=True),
    Column("window", Integer, nullable=False),
    Column("reason", String(40), nullable=False),
    Column("cost_usd_per_hour", Float, nullable=False),
    Column("migrations", Integer, nullable=False),
    Column("valid", Integer, nullable=False),
    Column("last_observation_id", Integer, nullable=False, index=True),
    Column("summary", Text, nullable=False),
    Column("body", Text, nullable=False),
    Column("epoch", Integer, nullable=False, server_default="0"),  # the lease epoch of the leader that committed it
)

diffs = Table(
    "diffs", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("plan_id", Integer, ForeignKey("plans.id"), nullable=False, index=True),
    Column("previous_plan_id", Integer, nullable=True),
    Column("created_at_s", Float, nullable=False),
    Column("body", Text, nullable=False),
)


idempotency_keys = Table(
    "idempotency_keys", metadata,
    Column("key", String(200), primary_key=True),
    Column("body_sha256", String(64), nullable=False),
    Column("ids", Text, nullable=False),
    Column("created_at_s", Float, nullable=False, index=True),
)

probes = Table(
    "probes", metadata,
    Column("id", Integer, primary_key=True),
    Column("at_s", Float, nullable=False),
)

leases = Table(
    "leases", metadata,
    Column("name", String(40), primary_key=True),
    Column("holder", String(200), nullable=False),
    Column("epoch", Integer, nullable=False),
    Column("expires_at_s", Float, nullable=False),
    Column("renewed_at_s", Float, nullable=False),
)

service_meta = Table(
    "service_meta", metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

#: the revision a database made before migrations existed is stamped with
LEGACY_REVISION = "0001"
#: keys of the advisory locks that serialize migrations and observation inserts on PostgreSQL (any constants)
_MIGRATION_LOCK = 0x666C656574706C61
_OBSERVATION_LOCK = 0x666C656574706C62


def alembic_config():
    """Alembic's configuration for the migrations shipped in ``fleetplan.service.migrations``."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", "fleetplan.service:migrations")
    return cfg

#: keyed POSTs are remembered this long, seconds (a retry after a dropped connection comes within minutes)
IDEMPOTENCY_KEEP_S = 86400.0


class IdempotencyConflict(FleetplanError):
    """An ``Idempotency-Key`` reused with a different request body (HTTP 409)."""


def body_digest(items: list[dict]) -> str:
    """SHA-256 (hex) of a request's observations in canonical JSON: the same body gives the same digest."""
    return hashlib.sha256(json.dumps(items, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def shown_url(url: str) -> str:
    """The URL as it may be printed or logged: the password replaced by ***."""
    try:
        return make_url(normalize_url(url)).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - an unparsable URL is shown as its scheme only
        return url.split("://", 1)[0] + "://***"


def normalize_url(url: str) -> str:
    """SQLAlchemy URL with the driver this project installs: 'postgresql://' -> 'postgresql+psycopg://'; a bare
    path of a database file (ending .db, .sqlite or .sqlite3) becomes 'sqlite:///path'. Raises InputError for other
    schemes and for anything else that is not a URL (a typo must not silently create a SQLite file of that name)."""
    if "://" not in url:
        if url.endswith((".db", ".sqlite", ".sqlite3")):
            return f"sqlite:///{url}"
        raise InputError(f"{url!r} is not a database URL; give sqlite:///{url}.db for a SQLite file or "
                         "postgresql://user@host/db", field="db", value=url)
    scheme = url.split("://", 1)[0]
    if scheme in ("postgresql", "postgres"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    if scheme.startswith(("sqlite", "postgresql+")):
        return url
    raise InputError(f"database URL scheme {scheme!r} is not supported; use sqlite:///file.db or "
                     "postgresql://user@host/db", field="db", value=url)


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite database URL (``sqlite:///fleetplan.db`` -> ``fleetplan.db``), None for an in-memory
    database or another database. Raises InputError for a URL :func:`normalize_url` refuses."""
    u = make_url(normalize_url(url))
    if not u.drivername.startswith("sqlite") or not u.database or u.database == ":memory:":
        return None
    return Path(u.database)


def stored_action(d: dict) -> dict:
    """A stored diff action in today's form (the fields of :class:`fleetplan.solvers.online.state.Action`): diffs
    written before version 2 of the schema name a shared GPU's residents ``shared_models`` and leave out empty
    fields."""
    out = {k: v for k, v in d.items() if k != "shared_models"}
    out["models"] = list(d.get("models", d.get("shared_models")) or [])
    out.setdefault("ready_at_s", None)
    return out


class Store:
    """The service's database.

    Args:
        url: SQLAlchemy URL ('sqlite:///fleetplan.db', 'postgresql://user@127.0.0.1/fleetplan') or a file path.
        timeout_s: longest wait for a lock (SQLite) or a connection (PostgreSQL) before a write fails, seconds.

    Raises InputError for an unsupported URL or a database that cannot be opened. Later, any method may raise
    SQLAlchemy's errors (unreachable server, locked or read-only database): the service answers those with 503.
    """

    def __init__(self, url: str, timeout_s: float = 30.0) -> None:
        self.url = normalize_url(url)
        self.timeout_s = float(timeout_s)
        self.sqlite = self.url.startswith("sqlite")
        kwargs: dict[str, Any] = {"future": True}
        if self.sqlite:
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": self.timeout_s}
        else:
            kwargs["pool_pre_ping"] = True
            kwargs["connect_args"] = {"connect_timeout": max(1, round(self.timeout_s))}
        self.engine: Engine = create_engine(self.url, **kwargs)
        if self.sqlite:
            @event.listens_for(self.engine, "connect")
            def _pragmas(dbapi_conn, _record):  # durable commits, readers do not block the writer
                cur = dbapi_conn.cursor()
                try:
                    cur.execute("PRAGMA journal_mode=WAL")
                except Exception:  # noqa: BLE001 - a read-only file keeps its journal mode; writes fail later
                    pass
                cur.execute("PRAGMA synchronous=FULL")
                cur.close()
        self._keyed_inserts = 0
        #: (unix s, reason) of the newest failed write while no write succeeded since, else None: readiness reports
        #: it (a full disk fails inserts while the readiness probe's one-row rewrite may still fit)
        self.write_error: tuple[float, str] | None = None
        self._probing = threading.local()
        event.listen(self.engine, "handle_error", self._on_error)
        event.listen(self.engine, "commit", self._on_commit)
        #: called first inside every transaction that writes plans or deletes rows (the leader's lease fence,
        #: :meth:`fleetplan.service.leader.Lease.fence`); None: no check
        self.fence: Callable[[Connection], None] | None = None
        try:
            self.revision = self.migrate()
        except InputError:
            self.engine.dispose()
            raise
        except Exception as exc:  # noqa: BLE001 - any driver error becomes one clear line for the user
            self.engine.dispose()
            shown = make_url(self.url).render_as_string(hide_password=True)
            reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            raise InputError(f"cannot open the database {shown}: {reason}; check the URL, that the folder exists "
                             "and that the server is running", field="db", value=shown) from None

    def migrate(self) -> str:
        """Upgrade the schema to the newest revision shipped (Alembic), in one transaction that also holds a lock
        (PostgreSQL: an advisory lock; SQLite: BEGIN IMMEDIATE), so two services starting at once migrate once. A
        database made before migrations existed is stamped revision 0001 first (its rows kept). A database already
        at the newest revision is only read (a read-only file opens). Returns the revision. Raises InputError for
        a database at a revision this fleetplan does not know (made by a newer one)."""
        from alembic import command
        from alembic.runtime.migration import MigrationContext
        from alembic.script import ScriptDirectory
        from sqlalchemy import inspect

        cfg = alembic_config()
        script = ScriptDirectory.from_config(cfg)
        head = script.get_current_head()
        assert head is not None  # the package ships its revisions
        known = {rev.revision for rev in script.walk_revisions()}
        with self.engine.connect() as c:
            current = MigrationContext.configure(c).get_current_revision()
        if current == head:
            return head
        if current is not None and current not in known:
            raise InputError(f"the database's schema is at revision {current!r}, which this fleetplan does not know "
                             f"(its newest is {head!r}): a newer fleetplan wrote it; run that version, or upgrade",
                             field="db", value=current)
        engine = self._migration_engine()
        try:
            with engine.begin() as c:
                if not self.sqlite:
                    c.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})")
                cfg.attributes["connection"] = c
                if MigrationContext.configure(c).get_current_revision() is None and inspect(c).has_table(
                        "observations"):
                    command.stamp(cfg, LEGACY_REVISION)
                command.upgrade(cfg, "head")
        finally:
            if engine is not self.engine:
                engine.dispose()
        return head

    def _migration_engine(self) -> Engine:
        """The engine migrations run on: on SQLite one whose transactions start with BEGIN IMMEDIATE (the write lock
        first, and DDL inside the transaction: the driver would otherwise commit before each CREATE or ALTER)."""
        if not self.sqlite:
            return self.engine
        eng = create_engine(self.url, connect_args={"check_same_thread": False, "timeout": self.timeout_s})

        @event.listens_for(eng, "connect")
        def _manual(dbapi_conn, _record):
            dbapi_conn.isolation_level = None

        @event.listens_for(eng, "begin")
        def _begin(conn):
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return eng

    def _on_error(self, ctx) -> None:
        if getattr(self._probing, "on", False):
            return
        stmt = (ctx.statement or "").lstrip().upper()
        if ctx.is_disconnect or stmt.startswith(("INSERT", "UPDATE", "DELETE", "COMMIT")) or not stmt:
            exc = ctx.original_exception
            self.write_error = (time.time(), str(exc).strip().splitlines()[0][:300] if str(exc) else type(exc).__name__)

    def _on_commit(self, _conn) -> None:
        if not getattr(self._probing, "on", False):
            self.write_error = None

    def ping(self) -> bool:
        """True when the database answers a read."""
        try:
            with self.engine.connect() as c:
                c.execute(text("SELECT 1"))
            return True
        except Exception:  # noqa: BLE001 - health check reports any failure
            return False

    def probe_write(self, timeout_s: float = 1.0) -> str | None:
        """Commit a write to the ``probes`` table, waiting at most ``timeout_s`` for a lock; None when it was
        committed, else the reason in one line (read-only, locked, unreachable, disk full, ...). A write of the
        service that failed since the last one that succeeded is the reason too (:attr:`write_error`)."""
        self._probing.on = True
        try:
            with self.engine.begin() as c:
                if self.sqlite:
                    c.exec_driver_sql(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
                else:
                    ms = int(timeout_s * 1000)
                    c.exec_driver_sql(f"SET LOCAL lock_timeout = {ms}")
                    c.exec_driver_sql(f"SET LOCAL statement_timeout = {ms}")
                try:
                    c.execute(delete(probes))
                    c.execute(insert(probes).values(id=1, at_s=time.time()))
                finally:
                    if self.sqlite:
                        c.exec_driver_sql(f"PRAGMA busy_timeout = {int(self.timeout_s * 1000)}")
        except Exception as exc:  # noqa: BLE001 - readiness reports any failure
            return str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:300]
        finally:
            self._probing.on = False
        if self.write_error is not None:
            return f"the last write failed ({self.write_error[1]}) and none succeeded since"
        return None

    # ---- observations --------------------------------------------------------------------------------------
    def _fenced(self, c: Connection) -> None:
        if self.fence is not None:
            self.fence(c)

    def _ordered(self, c: Connection) -> None:
        """PostgreSQL: serialize observation inserts across processes (a transaction-scoped advisory lock), so ids
        commit in order and a reader that has seen id N has seen every id below it (SQLite has one writer)."""
        if not self.sqlite:
            c.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_OBSERVATION_LOCK})")

    def _insert_observations(self, c, rows: list[dict], now: float) -> list[int]:
        """Insert ``rows`` in one statement (executemany with RETURNING, ids in the rows' order where the driver
        supports it, else one INSERT per row); returns their ids in order."""
        self._ordered(c)
        if not rows:
            return []
        values = [{"received_at_s": r.get("received_at_s", now), "at_s": r["at_s"], "model": r["model"],
                   "tenant": r["tenant"], "interval_s": r["interval_s"], "demand_req_per_s": r["demand_req_per_s"],
                   "source": r["source"], "body": json.dumps(r["body"])} for r in rows]
        if self.engine.dialect.insert_executemany_returning_sort_by_parameter_order:
            res = c.execute(insert(observations).returning(observations.c.id, sort_by_parameter_order=True), values)
            return [int(i) for i in res.scalars()]
        return [int(c.execute(insert(observations).values(**v)).inserted_primary_key[0]) for v in values]

    def add_observations(self, rows: list[dict]) -> list[int]:
        """Insert observation rows (keys: at_s, model, tenant, interval_s, demand_req_per_s, source, body dict, and
        received_at_s: the service's clock at receipt, default the wall clock) in one committed transaction; returns
        their ids in order."""
        with self.engine.begin() as c:
            return self._insert_observations(c, rows, time.time())

    def add_observations_once(self, rows: list[dict], idempotency_key: str, body_sha256: str
                              ) -> tuple[list[int], bool]:
        """:meth:`add_observations` under an idempotency key: when the key was stored (within IDEMPOTENCY_KEEP_S)
        with the same ``body_sha256``, nothing is inserted and (the ids it stored, True) is returned; with another
        digest, IdempotencyConflict. Else the rows and the key are stored in one transaction: (ids, False).
        Callers serialize writes (the service holds its write lock)."""
        now = time.time()
        with self.engine.begin() as c:
            self._ordered(c)  # first: two replicas given the same key look it up one after the other
            got = c.execute(select(idempotency_keys).where(idempotency_keys.c.key == idempotency_key)
                            ).mappings().first()
            if got is not None and got["created_at_s"] >= now - IDEMPOTENCY_KEEP_S:
                if got["body_sha256"] != body_sha256:
                    raise IdempotencyConflict("this Idempotency-Key was used with a different body; use a new key "
                                              "for a new request")
                return [int(i) for i in json.loads(got["ids"])], True
            if got is not None:
                c.execute(delete(idempotency_keys).where(idempotency_keys.c.key == idempotency_key))
            ids = self._insert_observations(c, rows, now)
            c.execute(insert(idempotency_keys).values(key=idempotency_key, body_sha256=body_sha256,
                                                      ids=json.dumps(ids), created_at_s=now))
            self._keyed_inserts += 1
            if self._keyed_inserts % 1000 == 1:  # forget old keys now and then, not on every request
                c.execute(delete(idempotency_keys).where(idempotency_keys.c.created_at_s < now - IDEMPOTENCY_KEEP_S))
        return ids, False

    def observation_ids_where(self, *, ids: list[int] | None = None, from_s: float | None = None,
                              to_s: float | None = None) -> list[int]:
        """Ids of stored observations among ``ids`` and/or with ``from_s`` <= at_s <= ``to_s`` (unix s)."""
        q = select(observations.c.id)
        if ids is not None:
            q = q.where(observations.c.id.in_(ids))
        if from_s is not None:
            q = q.where(observations.c.at_s >= from_s)
        if to_s is not None:
            q = q.where(observations.c.at_s <= to_s)
        with self.engine.connect() as c:
            return sorted(int(r[0]) for r in c.execute(q))

    def iter_observations(self, page: int = 10_000, *, after: int = 0, skip: set[int] | frozenset = frozenset()):
        """Every stored observation with id > ``after``, oldest id first, read in pages (ids in ``skip`` left
        out)."""
        last = after
        while True:
            rows = self.observations_after(last, page)
            if not rows:
                return
            for r in rows:
                if r["id"] not in skip:
                    yield r
            last = rows[-1]["id"]

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
                 previous_plan_id: int | None, delete_observation_ids: list[int] | None = None,
                 created_at_s: float | None = None, epoch: int = 0) -> int:
        """Store a plan and its diff in one committed transaction; returns the plan id. Observations with ids in
        ``delete_observation_ids`` are deleted in the same transaction (the plan holds the state rebuilt
        without them, so a restart never replays them). ``created_at_s``: the service's clock (default: the wall
        clock); ``epoch``: the committing leader's lease epoch."""
        now = time.time() if created_at_s is None else float(created_at_s)
        with self.engine.begin() as c:
            self._fenced(c)
            if delete_observation_ids:
                for k in range(0, len(delete_observation_ids), 500):
                    c.execute(delete(observations).where(observations.c.id.in_(delete_observation_ids[k:k + 500])))
            res = c.execute(insert(plans).values(
                created_at_s=now, at_s=at_s, window=window, reason=reason, cost_usd_per_hour=cost_usd_per_hour,
                migrations=migrations, valid=int(valid), last_observation_id=last_observation_id,
                summary=json.dumps(summary), body=json.dumps(body), epoch=epoch))
            key = res.inserted_primary_key
            if key is None:  # every SQLAlchemy dialect fleetplan supports returns it for a single-row insert
                raise RuntimeError("the database returned no id for the new plan row")
            pid = int(key[0])
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

    def newest_plan_id(self) -> int | None:
        """The id of the newest stored plan, or None (a cheap look: no body)."""
        with self.engine.connect() as c:
            return c.execute(select(func.max(plans.c.id))).scalar()

    def last_plan(self) -> dict | None:
        """The newest stored plan (with its body), or None."""
        with self.engine.connect() as c:
            r = c.execute(select(plans).order_by(plans.c.id.desc()).limit(1)).mappings().first()
        return self._plan_row(r) if r else None

    def plan(self, plan_id: int) -> dict | None:
        """The stored plan ``plan_id`` (with its body), or None when there is none (retention may have removed it)."""
        with self.engine.connect() as c:
            r = c.execute(select(plans).where(plans.c.id == plan_id)).mappings().first()
        return self._plan_row(r) if r else None

    def plans_since(self, since_s: float, limit: int = 1000) -> list[dict]:
        """Plan rows (without body) created at or after ``since_s`` (unix s), oldest first."""
        cols = [c for c in plans.c if c.name != "body"]
        with self.engine.connect() as c:
            rows = c.execute(select(*cols).where(plans.c.created_at_s >= since_s).order_by(plans.c.id)
                             .limit(limit)).mappings().all()
        return [self._plan_row(r) for r in rows]

    def plans_at(self, from_s: float, to_s: float) -> list[dict]:
        """Plan rows with their bodies whose round time ``at_s`` is in [from_s, to_s), plus the newest one before
        ``from_s`` (the plan in force at ``from_s``) first; oldest first by id."""
        with self.engine.connect() as c:
            before = c.execute(select(plans).where(plans.c.at_s < from_s).order_by(plans.c.id.desc())
                               .limit(1)).mappings().all()
            rows = c.execute(select(plans).where(plans.c.at_s >= from_s, plans.c.at_s < to_s)
                             .order_by(plans.c.id)).mappings().all()
        return [self._plan_row(r) for r in [*before, *rows]]

    def plan_before_observation(self, obs_id: int) -> dict | None:
        """The newest stored plan (with its body) whose state holds no observation from ``obs_id`` on (its
        ``last_observation_id`` is below it), or None."""
        with self.engine.connect() as c:
            r = c.execute(select(plans).where(plans.c.last_observation_id < obs_id).order_by(plans.c.id.desc())
                          .limit(1)).mappings().first()
        return self._plan_row(r) if r else None

    def plan_marks(self, since_at_s: float) -> list[tuple[float, int]]:
        """(at_s, last_observation_id) of the plans whose round time is after ``since_at_s`` (unix s)."""
        with self.engine.connect() as c:
            rows = c.execute(select(plans.c.at_s, plans.c.last_observation_id).where(plans.c.at_s > since_at_s))
            return [(float(a), int(b)) for a, b in rows]

    def meta(self, key: str) -> str | None:
        """The value stored under ``key`` in ``service_meta``, or None."""
        with self.engine.connect() as c:
            return c.execute(select(service_meta.c.value).where(service_meta.c.key == key)).scalar()

    def folded_through_id(self) -> int:
        """Observations with ids up to this were folded into the stored forecaster state by retention and removed
        (0: none)."""
        return int(self.meta("folded_through_id") or 0)

    def retain(self, now_s: float, *, observation_keep_s: float, plan_keep_s: float, max_plans: int,
               chunk: int = 5000) -> dict:
        """Apply retention at ``now_s`` (unix s); returns {observations_deleted, plans_deleted, folded_through_id}.

        Plans: the newest one always stays; the others stay while younger than ``plan_keep_s`` and among the
        newest ``max_plans``; older ones go with their diffs. Observations are folded: the newest kept plan made
        ``observation_keep_s`` or more ago (else the oldest kept plan, when the cap removed it) holds in its stored
        forecaster state every observation up to its ``last_observation_id`` F, so those rows are deleted and F is
        remembered (``folded_through_id``). Every observation left then has a kept plan whose state predates it, so
        a DELETE can still rebuild without it. Deletes run in transactions of at most ``chunk`` rows, so writes
        wait for one chunk at a time."""
        with self.engine.connect() as c:
            rows = c.execute(select(plans.c.id, plans.c.created_at_s, plans.c.last_observation_id)
                             .order_by(plans.c.id.desc())).all()
        if not rows:
            return {"observations_deleted": 0, "plans_deleted": 0, "folded_through_id": self.folded_through_id()}
        kept = [r for i, r in enumerate(rows) if i == 0 or (i < max_plans and r[1] >= now_s - plan_keep_s)]
        oldest_kept = kept[-1]
        base = next((r for r in rows if r[1] <= now_s - observation_keep_s), None)
        if base is not None and base[0] < oldest_kept[0]:
            base = oldest_kept
        folded = max(self.folded_through_id(), int(base[2]) if base is not None else 0)
        n_obs = 0
        while True:
            with self.engine.begin() as c:
                self._fenced(c)
                doomed = select(observations.c.id).where(observations.c.id <= folded).limit(chunk)
                n = c.execute(delete(observations).where(observations.c.id.in_(doomed))).rowcount or 0
                if n == 0:
                    self._set_meta(c, "folded_through_id", str(folded))
                    break
            n_obs += n
        n_plans = 0
        cut = oldest_kept[0]
        while True:
            with self.engine.begin() as c:
                self._fenced(c)
                ids = [int(r[0]) for r in c.execute(select(plans.c.id).where(plans.c.id < cut).limit(chunk))]
                if not ids:
                    break
                c.execute(delete(diffs).where(diffs.c.plan_id.in_(ids)))
                c.execute(delete(plans).where(plans.c.id.in_(ids)))
            n_plans += len(ids)
        return {"observations_deleted": n_obs, "plans_deleted": n_plans, "folded_through_id": folded}

    @staticmethod
    def _set_meta(c, key: str, value: str) -> None:
        if c.execute(update(service_meta).where(service_meta.c.key == key).values(value=value)).rowcount == 0:
            c.execute(insert(service_meta).values(key=key, value=value))

    def size_bytes(self) -> int | None:
        """Bytes the database takes on disk (SQLite: the file and its WAL; PostgreSQL: pg_database_size), or None
        when it cannot be told."""
        try:
            if self.sqlite:
                path = sqlite_path(self.url)
                if path is None:
                    return None
                return sum(p.stat().st_size for p in (path, path.with_name(path.name + "-wal")) if p.exists())
            with self.engine.connect() as c:
                return int(c.execute(text("SELECT pg_database_size(current_database())")).scalar_one())
        except Exception:  # noqa: BLE001 - a size is a figure for metrics, never a reason to fail
            return None

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
                "actions": [stored_action(a) for a in json.loads(r["body"])]}

    def close(self) -> None:
        self.engine.dispose()
