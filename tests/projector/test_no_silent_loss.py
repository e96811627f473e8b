"""No silent loss: each consumed record is archived, rejected with a code, or redelivers an archived event.

The cases that used to be acked and dropped with no trace: an event of another
cluster (``unknown-cluster``), an event on another topic than its type's
(``wrong-topic``: an observation or a forged session on the intents topic), a
reused id with other content (``id-conflict``: the first stays), and a name
Kubernetes would refuse (``invalid-name``).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.models import Event, JobSubmitted
from events.serde import encode
from events.topics import Topics, topic_for
from projector.plan import InboundRecord
from projector.writer import BatchWriter
from tests.api.helpers import read_topic
from tests.events.samples import job_submitted, node_reported, session_committed
from tests.projector.helpers import create_database, drop_database, produce, reset_schema
from tests.projector.streams import CLUSTER, event_stream
from tests.service.helpers import running_projector, wait_for

pytestmark = pytest.mark.integration

TOPICS = Topics("nsl")
_KINDS = ("valid", "redelivery", "id-reuse", "other-cluster", "wrong-topic", "bad-name", "garbage", "empty")


def _other_topic(event: Event) -> str:
    right = topic_for(event, TOPICS)
    return TOPICS.intents if right != TOPICS.intents else TOPICS.observations


def _bad_name(event: Event) -> JobSubmitted:
    return job_submitted("ok").model_copy(
        update={
            "id": f"{event.id}-bad-name",
            "cluster": CLUSTER,
            "data": job_submitted("ok").data.model_copy(update={"name": "My Job!!"}),
        }
    )


@dataclass(frozen=True)
class _Sent:
    record: InboundRecord
    kind: str
    event_id: str | None


def _records(kinds: list[str], seed: int) -> list[_Sent]:
    """One record per kind, built on the events of a plausible stream, at offsets 0, 1, ..."""
    stream = iter(event_stream(seed, len(kinds)))
    sent: list[_Sent] = []
    events: list[Event] = []  # the events sent so far, in order

    def add(topic: str, value: bytes | None, kind: str, event_id: str | None) -> None:
        sent.append(_Sent(InboundRecord(topic, 0, len(sent), value), kind, event_id))

    for kind in kinds:
        event = next(stream)
        if kind == "redelivery" and sent and sent[-1].record.value is not None:
            earlier = sent[len(sent) // 2]
            add(earlier.record.topic, earlier.record.value, kind, earlier.event_id)
        elif kind == "id-reuse" and events:
            reused = event.model_copy(update={"id": events[len(events) // 2].id})
            add(topic_for(reused, TOPICS), encode(reused), kind, reused.id)
        elif kind == "other-cluster":
            foreign = event.model_copy(update={"cluster": "elsewhere"})
            add(topic_for(foreign, TOPICS), encode(foreign), kind, foreign.id)
        elif kind == "wrong-topic":
            add(_other_topic(event), encode(event), kind, event.id)
        elif kind == "bad-name":
            bad = _bad_name(event)
            add(TOPICS.intents, encode(bad), kind, bad.id)
        elif kind == "garbage":
            add(
                TOPICS.intents,
                b'{"type": "tephra.job.submitted.v1", "id": "' + event.id.encode() + b'"',
                kind,
                None,
            )
        elif kind == "empty":
            add(TOPICS.observations, None, kind, None)
        else:
            add(topic_for(event, TOPICS), encode(event), "valid", event.id)
            events.append(event)
    return sent


@pytest.fixture(scope="module")
def archive_dsn(postgres_admin_dsn: str) -> Iterator[str]:
    dsn = asyncio.run(create_database(postgres_admin_dsn))
    yield dsn
    asyncio.run(drop_database(postgres_admin_dsn, dsn))


async def _consume(dsn: str, sent: list[_Sent], cuts: list[int]) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await reset_schema(conn)
        writer = await BatchWriter.load(conn, consumer="c", cluster=CLUSTER, topics=TOPICS)
        bounds = sorted({0, len(sent), *(c % (len(sent) + 1) for c in cuts)})
        for start, end in itertools.pairwise(bounds):
            await writer.write(conn, [s.record for s in sent[start:end]])
        archived = {
            r["kafka_offset"]: r["event_id"]
            for r in await conn.fetch("SELECT kafka_offset, event_id FROM event_log")
        }
        rejected = {
            r["kafka_offset"]: (r["error"], r["event_id"], r["detail"])
            for r in await conn.fetch("SELECT kafka_offset, error, event_id, detail FROM rejected_events")
        }
    finally:
        await conn.close()

    # By record: archived, rejected or a redelivery of an archived id, exactly one of them.
    for s in sent:
        offset = s.record.offset
        assert (offset in archived) + (offset in rejected) <= 1, s
        if offset not in archived and offset not in rejected:
            assert s.event_id in archived.values(), f"{s} was consumed and is neither archived nor rejected"
    # By id: archived + rejected = consumed.
    consumed_ids = {s.event_id for s in sent if s.event_id is not None}
    kept_ids = set(archived.values()) | {event_id for _, event_id, _ in rejected.values() if event_id}
    assert kept_ids == consumed_ids
    # The cases named by the issue land with their codes.
    expected = {
        "other-cluster": "unknown-cluster",
        "wrong-topic": "wrong-topic",
        "bad-name": "invalid-name",
        "empty": "empty-record",
    }
    for s in sent:
        if s.kind in expected:
            assert rejected[s.record.offset][0] == expected[s.kind], s
        elif s.kind == "id-reuse" and s.record.offset not in archived:
            error, _, detail = rejected[s.record.offset]
            first = [o for o, event_id in archived.items() if event_id == s.event_id]
            if first:  # the id's first event was archived: this one is the conflicting second
                assert first[0] < s.record.offset
                assert error == "id-conflict", s
                assert detail.count("digest") == 1
                assert "archived digest" in detail
                assert "this record's" in detail


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kinds=st.lists(st.sampled_from(_KINDS), min_size=1, max_size=60),
    seed=st.integers(0, 50),
    cuts=st.lists(st.integers(0, 60), max_size=4),
)
def test_every_consumed_record_is_archived_or_rejected(
    archive_dsn: str, kinds: list[str], seed: int, cuts: list[int]
) -> None:
    asyncio.run(_consume(archive_dsn, _records(kinds, seed), cuts))


async def test_the_silent_drops_are_rejected_with_their_codes_and_dead_lettered(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    """Through the service on the real broker: each case is a row in rejected_events and a dead letter."""
    first = job_submitted("first")
    conflicting = job_submitted("second").model_copy(update={"id": first.id})
    foreign = job_submitted("foreign").model_copy(update={"id": "evt-foreign", "cluster": "elsewhere"})
    bad_name = job_submitted("ok").model_copy(
        update={"id": "evt-bad-name", "data": first.data.model_copy(update={"name": "My Job!!"})}
    )
    observation = node_reported("n1", event_id="evt-node-on-intents")
    forged = session_committed()
    sent: list[Event | tuple[str, bytes]] = [
        first,
        (topics.intents, encode(conflicting)),
        foreign,
        bad_name,
        (topics.intents, encode(observation)),
        (topics.intents, encode(forged)),
        first,  # a redelivery: the same content, skipped as a duplicate
    ]
    expected = {
        conflicting.id: "id-conflict",
        foreign.id: "unknown-cluster",
        bad_name.id: "invalid-name",
        observation.id: "wrong-topic",
        forged.id: "wrong-topic",
    }
    async with running_projector(kafka_bootstrap, database_url, topics, cluster=first.cluster):
        await produce(kafka_bootstrap, topics, sent)
        conn = await asyncpg.connect(database_url)
        try:
            await wait_for(conn, "SELECT count(*) FROM rejected_events", len(expected))
            rows = await conn.fetch(
                "SELECT event_id, error, detail FROM rejected_events ORDER BY kafka_offset"
            )
            assert await conn.fetchval("SELECT array_agg(event_id) FROM event_log") == [first.id]
        finally:
            await conn.close()
    assert {(r["event_id"], r["error"]) for r in rows} == set(expected.items())
    details = {r["error"]: r["detail"] for r in rows}
    assert "'elsewhere'" in details["unknown-cluster"]
    assert "'My Job!!'" in details["invalid-name"]
    assert "archived digest" in details["id-conflict"]

    dead = await read_topic(kafka_bootstrap, topics.rejected)
    errors = [dict(headers)["tephra-error"] for _, headers, _ in dead]
    assert sorted(errors) == sorted(code.encode() for code in expected.values())
