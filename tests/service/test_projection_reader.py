"""The scheduler's projection reader: one consistent read, then the archive folded on top of it."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from events.topics import Topics
from projector.connections import DatabaseAccess
from projector.migrate import apply_migrations
from projector.projection import load_projection
from scheduler.service.projection import ProjectionReader
from tests.service.helpers import job, node, produce, queue, running_projector, wait_for

pytestmark = pytest.mark.integration


async def test_the_incrementally_folded_state_equals_the_projection(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    async with running_projector(kafka_bootstrap, database_url, topics):
        conn = await asyncpg.connect(database_url)
        reader = await ProjectionReader.connect(DatabaseAccess(database_url))
        try:
            await produce(kafka_bootstrap, topics, [queue(), node("n1"), job("a", replicas=3)])
            await wait_for(conn, "SELECT count(*) FROM tasks", 3)
            first_seq = (await reader.state()).seq
            assert first_seq == await reader.seq()

            await produce(kafka_bootstrap, topics, [node("n2"), job("b", replicas=2), node("n1", cpu="4")])
            await wait_for(conn, "SELECT count(*) FROM tasks", 5)
            await wait_for(conn, "SELECT seq FROM projection_meta", first_seq + 3)
            folded = await reader.state()
            assert folded.seq == first_seq + 3
            assert folded == await load_projection(conn)
        finally:
            await reader.close()
            await conn.close()


class _SeqObserved(ProjectionReader):
    """Sets ``read`` each time the projection's seq has been read."""

    def __init__(self, conn: asyncpg.Connection, listener: asyncpg.Connection) -> None:
        super().__init__(conn, listener)
        self.read = asyncio.Event()

    async def seq(self) -> int:
        value = await super().seq()
        self.read.set()
        return value


async def test_a_cancellation_arriving_with_a_notification_stops_the_wait(database_url: str) -> None:
    """The scheduler loop must stop when cancelled, even as a NOTIFY wakes it in the same instant.

    Python 3.11's ``asyncio.wait_for`` returns normally when its inner wait completes
    together with the cancellation, and the service then runs on: ``tephra up`` ignored
    SIGTERM and a test's TaskGroup never finished.
    """
    conn = await asyncpg.connect(database_url)
    listener = await asyncpg.connect(database_url)
    await apply_migrations(conn)
    reader = _SeqObserved(conn, listener)
    try:
        for attempt in range(30):
            reader.read.clear()
            waiting = asyncio.create_task(reader.wait_for_change(after_seq=10**9, within=30))
            # Once its seq query has returned, the wait parks on the notification event in the same step.
            await reader.read.wait()
            reader._on_notify()
            for _ in range(attempt % 3):
                await asyncio.sleep(0)
            waiting.cancel()
            done, _ = await asyncio.wait({waiting}, timeout=5)
            assert done, f"attempt {attempt}: the wait outlived its cancellation"
            assert waiting.cancelled(), f"attempt {attempt}: the wait returned instead of being cancelled"
    finally:
        await reader.close()
