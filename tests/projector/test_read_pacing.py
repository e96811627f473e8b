"""The runner reads the three topics in step by event time (projector.read_pacing)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from aiokafka import TopicPartition

from events.topics import Topics
from projector.fold import BUFFER_WINDOW, apply
from projector.read_pacing import ahead
from projector.reconstruct import archived_events
from projector.state import CLOCK_START, ClusterState
from tests.projector.helpers import produce
from tests.projector.streams import event_stream
from tests.projector.test_service import running_projector, wait_until

_T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_only_partitions_past_the_earliest_by_more_than_the_skew_are_held_back() -> None:
    a, b, c = (TopicPartition(t, 0) for t in "abc")
    skew = timedelta(minutes=5)
    at = {a: _T0, b: _T0 + skew, c: _T0 + skew + timedelta(seconds=1)}
    assert ahead(at, skew) == {c}
    assert ahead({c: at[c]}, skew) == set()  # the one that sets the pace is never held back
    assert ahead({}, skew) == set()
    assert ahead({a: CLOCK_START, b: _T0}, skew) == {b}  # a topic not read yet comes first


@pytest.mark.integration
@pytest.mark.parametrize("max_read_skew", [300.0, 1e11], ids=["paced", "unpaced"])
async def test_a_skewed_backlog_is_read_in_step_and_no_observation_expires(
    kafka_bootstrap: str, database_url: str, topics: Topics, max_read_skew: float
) -> None:
    """A backlog of 3.3 h of event time (an event a second, the default TTL of 1 h) on the
    three topics before the projector starts, read 100 records a batch.  Paced, the
    archive's order keeps the topics minutes apart, so few observations wait for their job
    and none expires; unpaced (a bound nothing reaches, from year 1 on), one topic is read
    hours ahead of another, and a thousand observations wait at once or expire."""
    events = event_stream(21, 12_000, live_jobs=30, step_ms=1_000, ttl_seconds=3_600)
    await produce(kafka_bootstrap, topics, events)
    async with running_projector(
        kafka_bootstrap, database_url, topics, projector_batch_size=100, projector_max_read_skew=max_read_skew
    ) as metrics:
        conn = await asyncpg.connect(database_url)
        try:
            await wait_until(
                conn, "SELECT coalesce(sum(next_offset), 0)::int FROM consumer_offsets", len(events), 120
            )
            expired = await conn.fetchval("SELECT count(*) FROM expired_buffers")
            state = ClusterState()
            most_early, most_skew = 0, timedelta(0)
            async for seq, event in archived_events(conn):
                apply(state, seq, event)
                most_early = max(most_early, len(state.early_observations))
                if min(state.role_clocks) > CLOCK_START:
                    most_skew = max(most_skew, max(state.role_clocks) - min(state.role_clocks))
        finally:
            await conn.close()
    if max_read_skew == 300:
        assert metrics.partitions_held_back > 0
        assert expired == 0
        # The bound and one batch's event time of the sparsest topic (intents: ~8 min).
        assert most_skew < timedelta(minutes=30)
        assert most_early <= 100
    else:
        assert metrics.partitions_held_back == 0
        assert most_skew > BUFFER_WINDOW
        # Which topic a fetch brings first varies: observations wait by the thousand, or expire.
        assert most_early > 500 or expired > 500
