"""What the scheduler reads from the projection: its seq, its state, and our own sessions.

* :meth:`ProjectionReader.seq` — the seq the projection reflects (cheap: one row);
* :meth:`ProjectionReader.state` — the whole folded state at one seq: first
  read in one REPEATABLE READ transaction
  (:func:`projector.projection.load_projection`), then kept current by
  folding the archived events after it with THE fold, so a session reads only
  what changed (the projector proves ``projection == fold(event_log)``);
* :meth:`ProjectionReader.wait_for_session` — read-your-writes: the seq at
  which the projector applied a session, and its accepted-decision count;
* :meth:`ProjectionReader.wait_for_change` — wakes when the projector
  NOTIFYs a new seq (it does after every batch), or after a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

import asyncpg

from projector.connections import DatabaseAccess, connect
from projector.errors import WaitTimeoutError
from projector.fold import apply
from projector.progress import projected_seq, wait_for_session
from projector.projection import load_projection
from projector.reconstruct import archived_events
from projector.state import ClusterState
from projector.writer import NOTIFY_CHANNEL
from scheduler.service.snapshot_cache import SnapshotCache

__all__ = ["AppliedSession", "ProjectionReader"]

log = logging.getLogger("tephra.scheduler")


@dataclass(frozen=True, slots=True)
class AppliedSession:
    seq: int
    accepted: int
    voided: int


class ProjectionReader:
    """Two connections: one for queries, one that only LISTENs."""

    def __init__(self, conn: asyncpg.Connection, listener: asyncpg.Connection) -> None:
        #: Told what every fold touched, so the next snapshot rebuilds only that.
        self.snapshots = SnapshotCache()
        self._conn = conn
        self._listener = listener
        self._changed = asyncio.Event()
        self._state: ClusterState | None = None

    @classmethod
    async def connect(cls, database: DatabaseAccess) -> ProjectionReader:
        conn = await connect(database)
        try:
            listener = await connect(database)
        except BaseException:
            conn.terminate()
            raise
        reader = cls(conn, listener)
        await listener.add_listener(NOTIFY_CHANNEL, reader._on_notify)
        return reader

    def _on_notify(self, *_: Any) -> None:
        self._changed.set()

    async def close(self) -> None:
        for conn in (self._listener, self._conn):
            with contextlib.suppress(OSError, asyncpg.InterfaceError, asyncpg.PostgresError, TimeoutError):
                await conn.close(timeout=2)

    async def wait_for_schema(self, poll: float = 0.5) -> None:
        """Return once the projector has created the projection (``tephra migrate`` created its tables) and
        rebuilt it if an upgrade asked it to (:func:`projector.reconstruct.rebuild_projection`)."""
        announced = False
        while not await self._projection_ready():
            if not announced:
                log.info("waiting for the projector to create (or rebuild) the projection tables")
                announced = True
            await asyncio.sleep(poll)

    async def _projection_ready(self) -> bool:
        if not await self._conn.fetchval("SELECT to_regclass('projection_meta') IS NOT NULL"):
            return False
        try:
            return bool(await self._conn.fetchval("SELECT NOT rebuild FROM projection_meta"))
        except asyncpg.UndefinedColumnError:  # the projector has not applied migration 0007 yet
            return False

    async def seq(self) -> int:
        return await projected_seq(self._conn)

    async def state(self) -> ClusterState:
        """The state at the projection's current seq: one object, advanced in place; read-only to callers."""
        state = self._state
        if state is None:
            self._state = state = await load_projection(self._conn)
            self.snapshots.invalidate()
            return state
        upto = await self.seq()
        async for seq, event in archived_events(self._conn, state.seq, upto):
            outcome = apply(state, seq, event)
            if not outcome.applied:
                # Cannot happen while the projector folds the same archive; recover by reading it whole.
                log.error(
                    "archived event %d does not fold onto the cached state (%s: %s); reloading",
                    seq,
                    outcome.invalid,
                    outcome.detail,
                )
                self._state = state = await load_projection(self._conn)
                self.snapshots.invalidate()
                return state
            self.snapshots.touched(state, outcome.touched)
        return state

    async def wait_for_change(self, after_seq: int, within: float) -> int:
        """The projection's seq once it is above ``after_seq``, or whatever it is after ``within`` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while True:
            self._changed.clear()
            current = await self.seq()
            left = deadline - loop.time()
            if current > after_seq or left <= 0:
                return current
            with contextlib.suppress(TimeoutError):
                # A notification missed between the query and here costs at most `left`.
                async with asyncio.timeout(left):
                    await self._changed.wait()

    async def others_between(self, after_seq: int, up_to_seq: int, own_event_ids: list[str]) -> int:
        """How many archived events in ``(after_seq, up_to_seq]`` are not ours."""
        return int(
            await self._conn.fetchval(
                "SELECT count(*) FROM event_log WHERE seq > $1 AND seq <= $2 AND event_id <> ALL($3::text[])",
                after_seq,
                up_to_seq,
                own_event_ids,
            )
        )

    async def wait_for_session(self, session_id: str, within: float) -> AppliedSession | None:
        """The session's record once applied; None if it was not applied ``within`` seconds."""
        try:
            await wait_for_session(self._conn, session_id, within, poll=0.05)
        except WaitTimeoutError:
            return None
        row = await self._conn.fetchrow(
            "SELECT seq, accepted, voided FROM sessions WHERE session_id = $1", session_id
        )
        return AppliedSession(seq=int(row["seq"]), accepted=int(row["accepted"]), voided=int(row["voided"]))
