"""A broker that lost its data is caught, even when its new logs reach past the stored offsets."""

from __future__ import annotations

import asyncpg
import pytest

from api.embedded import EmbeddedBroker, create_topics
from events.serde import encode
from events.topics import Topics
from projector.broker_identity import IdentityCheck, Verdict
from projector.reconstruct import verify_chain
from tests.projector.helpers import produce
from tests.projector.streams import event_stream
from tests.projector.test_service import running_projector, wait_until

pytestmark = pytest.mark.integration

_OFFSETS = "SELECT coalesce(sum(next_offset), 0)::int FROM consumer_offsets"


def test_the_verdict_compares_the_first_record_read_with_the_archived_one() -> None:
    first, other = event_stream(3, 2)
    check = IdentityCheck(offset=7, event_id=first.id, resume=12)
    assert check.verdict(7, encode(first)) is Verdict.SAME_LOG
    assert check.verdict(7, encode(other)) is Verdict.LOST
    assert check.verdict(7, None) is Verdict.LOST
    assert check.verdict(7, b"not json") is Verdict.LOST
    assert check.verdict(9, encode(other)) is Verdict.UNKNOWN  # retention: the log starts past it
    assert check.ended_before(7)
    assert not check.ended_before(8)


async def test_a_new_broker_under_the_same_topic_names_is_read_from_its_start(database_url: str) -> None:
    events = event_stream(21, 520)
    before, resumed, after = events[:100], events[100:120], events[120:]
    topics = Topics("identity")
    conn = await asyncpg.connect(database_url)
    try:
        with EmbeddedBroker() as old:
            await create_topics(old.bootstrap, topics.all())
            async with running_projector(old.bootstrap, database_url, topics):
                await produce(old.bootstrap, topics, before)
                await wait_until(conn, _OFFSETS, len(before))
            # Restarted against the same broker: it resumes where it was, nothing read twice.
            async with running_projector(old.bootstrap, database_url, topics) as metrics:
                await produce(old.bootstrap, topics, resumed)
                await wait_until(conn, "SELECT count(*)::int FROM event_log", len(before) + len(resumed))
            assert metrics.offsets_went_backwards == 0
            assert metrics.duplicates_skipped == 0
        # A new broker, the same names: its logs hold more records than the stored offsets count,
        # so resuming there would skip the first of them.
        with EmbeddedBroker() as new:
            await create_topics(new.bootstrap, topics.all())
            await produce(new.bootstrap, topics, after)
            async with running_projector(new.bootstrap, database_url, topics) as metrics:
                await wait_until(conn, "SELECT count(*)::int FROM event_log", len(events))
            assert metrics.offsets_went_backwards >= 1
        ids = {r["event_id"] for r in await conn.fetch("SELECT event_id FROM event_log")}
        assert ids == {e.id for e in events}
        assert await conn.fetchval("SELECT count(*) FROM rejected_events") == 0
        assert (await verify_chain(conn)).ok
    finally:
        await conn.close()
