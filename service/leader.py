"""One active re-planner per database: a lease row with a fencing token.

Every service started on a database competes for the row ``leases.name = 'replanner'``. The holder (the *leader*)
runs rounds, re-solves, retention and the actuator, and renews the lease every ``ttl_s / 3`` seconds; the others
(*standbys*) serve reads from the database, store the observations they are sent, and take the lease over once it
has expired (the leader died or lost the database for ``ttl_s``). Each takeover increments the lease's ``epoch``,
the fencing token: every write of the leader (a plan, its diff, a deletion, retention) first updates the lease row
on the condition that it still holds that epoch (:meth:`Lease.fence`), inside the write's own transaction. A
leader that lost the lease (paused past its expiry, cut off from the database) therefore cannot commit after its
successor took over: the fence finds another epoch and the write is rolled back (:class:`NotLeader`). On PostgreSQL
the fence's UPDATE locks the row until commit, so a takeover waits for a commit under way and then sees it; on SQLite
the UPDATE takes the database's write lock with the same effect.

Expiry is judged by each process's own clock (``time.time``): clocks that disagree shift when a takeover happens,
never whether two leaders can both commit (the epoch decides that).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable

from sqlalchemy import insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from fleetplan.errors import FleetplanError
from fleetplan.service.store import Store, leases

log = logging.getLogger("fleetplan.service")

#: the lease row's name
LEASE_NAME = "replanner"


class NotLeader(FleetplanError):
    """A write of a service that does not hold the lease (or no longer holds it): nothing was committed."""


def holder_name() -> str:
    """A name for this process in the lease row: host, process id and a random suffix (a restarted process on the
    same host and pid is another holder)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"[:200]


class Lease:
    """The lease of ``store`` for this process.

    Args:
        store: the database.
        ttl_s: seconds a lease lasts without renewal; a standby takes over that long after the leader's last
            renewal.
        holder: this process's name in the row (default :func:`holder_name`).
        clock: unix seconds (the wall clock; the service's own clock may be a test's fake one).

    Attributes: ``epoch`` (the fencing token while held, else None), ``leader`` (the holder named by the row at
    the last look, or None).
    """

    def __init__(self, store: Store, ttl_s: float, *, holder: str | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.ttl_s = float(ttl_s)
        self.holder = holder or holder_name()
        self.clock = clock
        self.epoch: int | None = None
        self.leader: str | None = None
        self.renewed_s = 0.0

    @property
    def held(self) -> bool:
        return self.epoch is not None

    def try_acquire(self) -> bool:
        """Take the lease if nobody holds it, it expired, or this process holds it; True when held afterwards."""
        now = self.clock()
        try:
            with self.store.engine.begin() as c:
                q = select(leases).where(leases.c.name == LEASE_NAME)
                if not self.store.sqlite:
                    q = q.with_for_update()
                row = c.execute(q).mappings().first()
                if row is None:
                    c.execute(insert(leases).values(name=LEASE_NAME, holder=self.holder, epoch=1,
                                                    expires_at_s=now + self.ttl_s, renewed_at_s=now))
                    epoch = 1
                elif row["holder"] == self.holder and row["epoch"] == self.epoch or row["expires_at_s"] < now:
                    epoch = int(row["epoch"]) if row["holder"] == self.holder and row["epoch"] == self.epoch else \
                        int(row["epoch"]) + 1
                    done = c.execute(update(leases).where(leases.c.name == LEASE_NAME,
                                                          leases.c.epoch == row["epoch"])
                                     .values(holder=self.holder, epoch=epoch, expires_at_s=now + self.ttl_s,
                                             renewed_at_s=now)).rowcount
                    if done != 1:  # another standby was faster
                        self.epoch, self.leader = None, None
                        return False
                else:
                    self.epoch, self.leader = None, str(row["holder"])
                    return False
        except IntegrityError:  # two first inserts at once: the other won
            self.epoch = None
            return False
        if self.epoch != epoch:
            log.info("lease %s taken: epoch %d (holder %s)", LEASE_NAME, epoch, self.holder)
        self.epoch, self.leader, self.renewed_s = epoch, self.holder, now
        return True

    def renew(self) -> bool:
        """Extend the held lease by ``ttl_s`` from now; False (and ``epoch`` None) when it is no longer ours."""
        if self.epoch is None:
            return False
        now = self.clock()
        with self.store.engine.begin() as c:
            done = c.execute(update(leases).where(leases.c.name == LEASE_NAME, leases.c.holder == self.holder,
                                                  leases.c.epoch == self.epoch)
                             .values(expires_at_s=now + self.ttl_s, renewed_at_s=now)).rowcount
        if done != 1:
            log.warning("lease %s lost (epoch %s): another replica took over", LEASE_NAME, self.epoch)
            self.epoch = None
            return False
        self.renewed_s = now
        return True

    def expired(self) -> bool:
        """True when the held lease ran out by this process's clock: ``ttl_s`` since its last renewal (another
        replica may have taken it since)."""
        return self.epoch is not None and self.clock() >= self.renewed_s + self.ttl_s

    def due(self) -> bool:
        """True when the held lease should be renewed now (a third of ``ttl_s`` since the last renewal)."""
        return self.epoch is not None and self.clock() >= self.renewed_s + self.ttl_s / 3

    def fence(self, c: Connection) -> None:
        """Inside a write transaction ``c``: raise :class:`NotLeader` unless this process still holds the lease at
        its epoch (the UPDATE also locks the row, so a takeover waits for this transaction)."""
        if self.epoch is None:
            raise NotLeader("this replica is a standby: only the leader writes plans")
        done = c.execute(update(leases).where(leases.c.name == LEASE_NAME, leases.c.holder == self.holder,
                                              leases.c.epoch == self.epoch)
                         .values(renewed_at_s=leases.c.renewed_at_s)).rowcount
        if done != 1:
            lost = self.epoch
            self.epoch = None
            raise NotLeader(f"the lease (epoch {lost}) was taken over by another replica: nothing was committed")

    def look(self) -> dict:
        """The lease row as stored: {leader, epoch, expires_in_s} (None for each when no service took it yet)."""
        with self.store.engine.connect() as c:
            row = c.execute(select(leases).where(leases.c.name == LEASE_NAME)).mappings().first()
        if row is None:
            return {"leader": None, "epoch": None, "expires_in_s": None}
        return {"leader": row["holder"], "epoch": int(row["epoch"]),
                "expires_in_s": float(row["expires_at_s"]) - self.clock()}

    def release(self) -> None:
        """Give the lease up (expired at once, so a standby takes over at its next look); never raises."""
        if self.epoch is None:
            return
        try:
            with self.store.engine.begin() as c:
                c.execute(update(leases).where(leases.c.name == LEASE_NAME, leases.c.holder == self.holder,
                                               leases.c.epoch == self.epoch).values(expires_at_s=0.0))
        except Exception as exc:  # noqa: BLE001 - the lease then expires by itself after ttl_s
            log.warning("could not release the lease: %s", exc)
        self.epoch = None
