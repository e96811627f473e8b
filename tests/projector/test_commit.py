"""The commit's first statement: the seq guard, the consumer offsets and the NOTIFY together."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from projector.errors import ProjectionDriftError
from projector.migrate import apply_migrations
from projector.writer import NOTIFY_CHANNEL, BatchWriter
from tests.projector.helpers import records
from tests.projector.streams import CLUSTER, event_stream

pytestmark = pytest.mark.integration


async def _offsets(conn: asyncpg.Connection) -> dict[tuple[str, str, int], int]:
    rows = await conn.fetch("SELECT consumer, topic, partition, next_offset FROM consumer_offsets")
    return {(r[0], r[1], r[2]): r[3] for r in rows}


async def test_a_commit_notifies_its_seq_and_stores_offsets_only_when_events_were_archived(
    database_url: str,
) -> None:
    conn = await asyncpg.connect(database_url)
    listener = await asyncpg.connect(database_url)
    heard: asyncio.Queue[str] = asyncio.Queue()
    try:
        await apply_migrations(conn)
        await listener.add_listener(NOTIFY_CHANNEL, lambda *args: heard.put_nowait(args[3]))
        events = list(event_stream(1, 60))
        writer = await BatchWriter.load(conn, consumer="c", cluster=CLUSTER)
        await writer.write(conn, records(events[:40]))
        assert await asyncio.wait_for(heard.get(), 5) == str(writer.state.seq)
        assert await _offsets(conn) == {("c", "t", 0): 40}

        # Only redeliveries: the offsets move on, nothing is archived, nobody is woken.
        await writer.write(conn, records(events[:40], start=40))
        assert await _offsets(conn) == {("c", "t", 0): 80}
        await writer.write(conn, records(events[40:], start=80))
        assert await asyncio.wait_for(heard.get(), 5) == str(writer.state.seq)
        assert heard.empty()
        assert await _offsets(conn) == {("c", "t", 0): 100}
    finally:
        await listener.close()
        await conn.close()


async def test_a_writer_behind_the_projection_is_refused_and_writes_nothing(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await apply_migrations(conn)
        events = list(event_stream(2, 60))
        stale = await BatchWriter.load(conn, consumer="stale", cluster=CLUSTER)
        current = await BatchWriter.load(conn, consumer="current", cluster=CLUSTER)
        await current.write(conn, records(events[:30]))
        seq = current.state.seq
        with pytest.raises(ProjectionDriftError):
            await stale.write(conn, records(events[30:], topic="other"))
        assert await conn.fetchval("SELECT seq FROM projection_meta") == seq
        assert await conn.fetchval("SELECT max(seq) FROM event_log") == seq
        assert await _offsets(conn) == {("current", "t", 0): 30}
        # The staging tables outlive the failed transaction: the next commit on this connection works.
        await current.write(conn, records(events[30:], start=30))
        assert await conn.fetchval("SELECT count(*) FROM tasks") > 0
    finally:
        await conn.close()
