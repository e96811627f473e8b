"""One active scheduler per cluster: a PostgreSQL advisory lock plus a leader epoch.

The lock is session-level, on a connection used for nothing else: when the
leader dies (even by SIGKILL) its connection closes and PostgreSQL frees the
lock, so a standby polling :func:`campaign` takes over within a poll interval.

Each acquisition appends a row to ``scheduler_leaders`` with the next epoch,
one above both the last recorded epoch and the highest epoch the projection
has applied.  Every SessionCommitted carries its leader's epoch, and the fold
voids a session whose epoch is below the highest it has seen: a leader that
lost its lock but still publishes (a "zombie") is fenced as soon as the new
leader's first session is applied.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Final

import asyncpg

from projector.connections import DatabaseAccess, connect
from projector.migrate import require_schema
from scheduler.service.errors import LeadershipLost

__all__ = ["Leadership", "campaign"]

log = logging.getLogger("tephra.scheduler")

_LOCK_SQL: Final = "SELECT pg_try_advisory_lock(hashtextextended('tephra-scheduler:' || $1, 0))"


@dataclass(slots=True)
class Leadership:
    """The lock connection of the current leader and its epoch."""

    cluster: str
    epoch: int
    holder: str
    conn: asyncpg.Connection

    async def watch(self, interval: float = 1.0, answer_within: float = 2.0) -> None:
        """Return never; raise :class:`LeadershipLost` once the lock connection stops answering."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.conn.fetchval("SELECT 1", timeout=answer_within)
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                raise LeadershipLost(self.cluster, self.epoch, f"lock connection failed: {exc!r}") from exc

    async def release(self) -> None:
        """Close the lock connection (the lock goes with it)."""
        if not self.conn.is_closed():
            try:
                await self.conn.close(timeout=2)
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
                self.conn.terminate()


async def campaign(database: DatabaseAccess, cluster: str, holder: str, *, poll: float = 0.5) -> Leadership:
    """Wait until this process holds the cluster's lock; record and return the new epoch.

    Raises :class:`~projector.errors.SchemaOutdatedError` when the schema is older than this
    scheduler needs: it does not migrate it (``tephra migrate`` does).
    """
    announced = False
    while True:
        conn = await connect(database)
        try:
            await require_schema(conn)
            while not await conn.fetchval(_LOCK_SQL, cluster):
                if not announced:
                    log.info("scheduler %s: another scheduler leads cluster %s; standing by", holder, cluster)
                    announced = True
                await asyncio.sleep(poll)
            epoch = await _next_epoch(conn, cluster, holder)
        except BaseException:
            conn.terminate()
            raise
        log.info("scheduler %s leads cluster %s with epoch %d", holder, cluster, epoch)
        return Leadership(cluster=cluster, epoch=epoch, holder=holder, conn=conn)


async def _next_epoch(conn: asyncpg.Connection, cluster: str, holder: str) -> int:
    async with conn.transaction():
        recorded = await conn.fetchval(
            "SELECT coalesce(max(epoch), 0) FROM scheduler_leaders WHERE cluster = $1", cluster
        )
        applied = 0
        if await conn.fetchval("SELECT to_regclass('projection_meta') IS NOT NULL"):
            applied = await conn.fetchval("SELECT leader_epoch FROM projection_meta")
        epoch = int(max(recorded, applied)) + 1
        await conn.execute(
            "INSERT INTO scheduler_leaders (cluster, epoch, holder) VALUES ($1, $2, $3)",
            cluster,
            epoch,
            holder,
        )
    return epoch
