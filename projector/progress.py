"""Read-your-writes: wait until the projection has applied an event or a session.

The writer NOTIFYs ``tephra_projection`` with the new seq after every batch
commit; the waiters here LISTEN on it and re-check the tables on every
notification (and every ``poll`` seconds, in case a notification was missed
while not listening).  The scheduler publishes its SessionCommitted and calls
:func:`wait_for_session` (or :func:`wait_for_event` with the CloudEvents id)
before it opens the next session; ``projection_meta.seq`` is the seq the
whole projection reflects (:func:`projected_seq`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import asyncpg

from projector.errors import WaitTimeoutError
from projector.writer import NOTIFY_CHANNEL

__all__ = [
    "EventFate",
    "projected_seq",
    "wait_for_event",
    "wait_for_events",
    "wait_for_seq",
    "wait_for_session",
    "wait_for_session_after",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class EventFate:
    """What the projector did with one event: archived at ``seq``, or rejected with ``error``."""

    event_id: str
    seq: int | None
    error: str | None = None
    detail: str = ""

    @property
    def archived(self) -> bool:
        return self.seq is not None


async def projected_seq(conn: asyncpg.Connection) -> int:
    """The seq the projection tables reflect."""
    return int(await conn.fetchval("SELECT seq FROM projection_meta"))


async def _wait(
    conn: asyncpg.Connection,
    check: Callable[[], Awaitable[T | None]],
    what: str,
    timeout_s: float,
    poll: float,
) -> T:
    woken = asyncio.Event()

    def on_notify(*_: Any) -> None:
        woken.set()

    await conn.add_listener(NOTIFY_CHANNEL, on_notify)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            woken.clear()
            found = await check()
            if found is not None:
                return found
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeoutError(what, timeout_s)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(poll, left)):
                    await woken.wait()
    finally:
        await conn.remove_listener(NOTIFY_CHANNEL, on_notify)


async def wait_for_seq(
    conn: asyncpg.Connection,
    seq: int,
    timeout_s: float,
    *,
    poll: float = 0.5,
) -> int:
    """Wait until the projection reflects at least ``seq``; return the seq it reflects."""

    async def check() -> int | None:
        current = await projected_seq(conn)
        return current if current >= seq else None

    return await _wait(conn, check, f"seq {seq}", timeout_s, poll)


async def wait_for_session(
    conn: asyncpg.Connection,
    session_id: str,
    timeout_s: float,
    *,
    poll: float = 0.5,
) -> int:
    """Wait until session ``session_id`` is applied; return the seq of its SessionCommitted.

    Raises :class:`~projector.errors.WaitTimeoutError` if it is not applied in
    time (use :func:`wait_for_event` to also learn about a rejected commit).
    """

    async def check() -> int | None:
        value = await conn.fetchval("SELECT seq FROM sessions WHERE session_id = $1", session_id)
        return None if value is None else int(value)

    return await _wait(conn, check, f"session {session_id}", timeout_s, poll)


async def wait_for_event(
    conn: asyncpg.Connection,
    event_id: str,
    timeout_s: float,
    *,
    poll: float = 0.5,
) -> EventFate:
    """Wait until the event with CloudEvents id ``event_id`` is archived or rejected."""

    async def check() -> EventFate | None:
        seq = await conn.fetchval("SELECT seq FROM event_log WHERE event_id = $1", event_id)
        if seq is not None:
            return EventFate(event_id, int(seq))
        row = await conn.fetchrow(
            "SELECT error, detail FROM rejected_events WHERE event_id = $1 ORDER BY id DESC LIMIT 1", event_id
        )
        return None if row is None else EventFate(event_id, None, row["error"], row["detail"])

    return await _wait(conn, check, f"event {event_id}", timeout_s, poll)


async def wait_for_session_after(
    conn: asyncpg.Connection,
    seq: int,
    timeout_s: float,
    *,
    poll: float = 0.5,
) -> tuple[str, int]:
    """Wait until a session whose input includes ``seq`` is applied; return its id and seq.

    The first such session is the first to have decided about what was
    archived at ``seq`` (placed it, or recorded why it stayed pending).
    """

    async def check() -> tuple[str, int] | None:
        row = await conn.fetchrow(
            "SELECT session_id, seq FROM sessions WHERE input_seq >= $1 ORDER BY seq LIMIT 1", seq
        )
        return None if row is None else (row["session_id"], int(row["seq"]))

    return await _wait(conn, check, f"a session after seq {seq}", timeout_s, poll)


async def wait_for_events(
    conn: asyncpg.Connection,
    event_ids: list[str],
    timeout_s: float,
    *,
    poll: float = 0.5,
    fates: dict[str, EventFate] | None = None,
) -> dict[str, EventFate]:
    """Wait until every event of ``event_ids`` is archived or rejected; their fates by id.

    Two queries per wake-up whatever the number of events (a submission of
    hundreds), where :func:`wait_for_event` per event would take two each.
    ``fates``, when given, is filled in as they are learnt: what was known when
    a :class:`~projector.errors.WaitTimeoutError` is raised stays in it.
    """
    learnt: dict[str, EventFate] = {} if fates is None else fates

    async def check() -> dict[str, EventFate] | None:
        left = [i for i in event_ids if i not in learnt]
        for row in await conn.fetch(
            "SELECT event_id, seq FROM event_log WHERE event_id = ANY($1::text[])", left
        ):
            learnt[row["event_id"]] = EventFate(row["event_id"], int(row["seq"]))
        left = [i for i in left if i not in learnt]
        if left:
            for row in await conn.fetch(
                "SELECT DISTINCT ON (event_id) event_id, error, detail FROM rejected_events"
                " WHERE event_id = ANY($1::text[]) ORDER BY event_id, id DESC",
                left,
            ):
                learnt[row["event_id"]] = EventFate(row["event_id"], None, row["error"], row["detail"])
        return learnt if len(learnt) == len(set(event_ids)) else None

    return await _wait(conn, check, f"{len(event_ids)} events", timeout_s, poll)
