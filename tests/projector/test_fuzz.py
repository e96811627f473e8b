"""Hostile records fired at the running projector (issue 22, item 2).

Each example is a batch of records drawn from the JSON Schemas with extreme
values and breakage (:mod:`tests.events.hostile`), each after an event of a
plausible stream, produced to fresh topics and consumed by the real projector
on the real broker and PostgreSQL.  The
properties: the projector never stops (its task is alive and consumes every
record), every record is archived or rejected — archived + rejected = sent —,
the archive still verifies and folds to the projection, and the scheduler's
session runs on that projection.  Bounded for CI:
a few examples of a few dozen records (tens of seconds); the seed corpus of
known poison records is tests/projector/test_poison.py.
"""

from __future__ import annotations

import asyncio
import secrets
from datetime import UTC, datetime

import asyncpg
import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from api.embedded import create_topics
from events.serde import encode
from events.topics import Topics, topic_for
from projector.reconstruct import load_projection, state_at, verify_chain
from projector.settings import ProjectorSettings
from scheduler.core.session import run_session
from scheduler.snapshot_builder import build_snapshot, config_in_force
from tests.events.hostile import Records, hostile_records
from tests.projector.helpers import produce_raw, reset_schema
from tests.projector.streams import CLUSTER, event_stream
from tests.projector.test_service import wait_until
from tests.service.helpers import running_projector

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: Records per example and examples per run: ~2-3 s an example on a shared host.
RECORDS = 40
EXAMPLES = 10


def _topic(event_type: str | None, topics: Topics) -> str:
    if event_type is None:
        return topics.intents
    if event_type.startswith(("tephra.node.", "tephra.task.")):
        return topics.observations
    if event_type.startswith("tephra.session."):
        return topics.decisions
    return topics.intents


def _amid_plausible(batch: Records, seed: int, topics: Topics) -> list[tuple[str, bytes]]:
    """The hostile records one by one between the events of a plausible stream (streams.event_stream):
    the fold meets them amid real jobs, nodes and sessions."""
    plausible = [(topic_for(event, topics), encode(event)) for event in event_stream(seed, len(batch))]
    hostile = [(_topic(event_type, topics), raw) for event_type, raw in batch]
    return [record for pair in zip(plausible, hostile, strict=True) for record in pair]


async def _fire(kafka_bootstrap: str, database_url: str, batch: Records, seed: int) -> None:
    topics = Topics(prefix=f"fuzz-{secrets.token_hex(6)}")
    await create_topics(kafka_bootstrap, topics.all(), partitions=1)
    conn = await asyncpg.connect(database_url)
    try:
        await reset_schema(conn)
        # Small batches, so that hostile records share batches with valid ones.
        settings = ProjectorSettings(projector_batch_size=8, projector_linger_ms=5)
        async with running_projector(
            kafka_bootstrap, database_url, topics, settings, cluster=CLUSTER
        ) as metrics:
            sent = _amid_plausible(batch, seed, topics)
            await produce_raw(kafka_bootstrap, sent)
            await wait_until(
                conn, "SELECT coalesce(sum(next_offset), 0)::int FROM consumer_offsets", len(sent), 90
            )
            archived = await conn.fetchval("SELECT count(*) FROM event_log")
            codes = await conn.fetch("SELECT error, count(*) AS n FROM rejected_events GROUP BY error")
            rejected = sum(row["n"] for row in codes)
            assert archived + rejected == len(sent)
            for row in codes:  # what the examples reached (pytest --hypothesis-show-statistics)
                event(f"rejected: {row['error']}")
            if metrics.records_isolated:
                event("a record isolated by a redo")
            assert metrics.duplicates_skipped == 0  # no redelivery here: every id is sent once
            assert (await verify_chain(conn)).ok
            state = await load_projection(conn)
            assert state == await state_at(conn, archived)
            # What the scheduler does with it at every session: it must not raise.
            config, _ = config_in_force(state)
            run_session(build_snapshot(state), config, datetime(2026, 6, 1, tzinfo=UTC))
    finally:
        await conn.close()


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    # Shrinking re-runs the services for each candidate: the failing batch is printed whole instead.
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(batch=hostile_records(CLUSTER, RECORDS), seed=st.integers(0, 2**16))
def test_hostile_records_never_stop_the_projector_and_each_is_archived_or_rejected(
    kafka_bootstrap: str, database_url: str, batch: Records, seed: int
) -> None:
    asyncio.run(_fire(kafka_bootstrap, database_url, batch, seed))
