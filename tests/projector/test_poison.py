"""No single record stops the projector: issue 22's seed corpus on the real broker and PostgreSQL.

Each hostile record is one that stopped a service before its bound existed (a
time whose UTC overflows, an epoch PostgreSQL cannot store or the scheduler
cannot top, quantities past int64, a 200-byte job with two million replicas, a
record over the dead-letter producer's limit, a value PostgreSQL refuses at
storage).  Mixed into a plausible stream, each is rejected with its code, the
dead-letter topic has its reference, and everything else is archived.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from pydantic import ValidationError

from events.canonical import GENESIS_HASH
from events.models import (
    MAX_SEQ,
    Event,
    JobCancelled,
    JobCancelledData,
    JobSubmitted,
    JobSubmittedData,
    NodeReported,
    NodeReportedData,
    SchedulerConfigSpec,
    SchedulerConfigured,
    SchedulerConfiguredData,
    SessionCommitted,
    SessionCommittedData,
    TaskSpec,
)
from events.serde import encode
from events.topics import Topics, topic_for
from projector.connections import DatabaseAccess
from projector.door import Door
from projector.errors import RecordFailedError
from projector.migrate import apply_migrations
from projector.reconstruct import load_projection, state_at, verify_chain
from projector.service import DEAD_LETTER_BODY_BYTES
from projector.settings import ProjectorSettings, parse_positions
from projector.state import CLOCK_START, ClusterState
from projector.writer import BatchWriter, decode_batch
from scheduler.service.leader import campaign
from tests.events.hostile import set_member
from tests.projector.helpers import produce, produce_raw, records
from tests.projector.streams import CLUSTER, event_stream
from tests.projector.test_service import running_projector, wait_until

T0 = datetime(2026, 1, 1, tzinfo=UTC)
_ENVELOPE = {"source": "tests://poison", "cluster": CLUSTER, "time": T0}


def _job(event_id: str, **task: Any) -> JobSubmitted:
    spec = {"name": "worker", "replicas": 1, "resources": {"cpu": "1"}, **task}
    return JobSubmitted(
        id=event_id,
        data=JobSubmittedData(namespace="poison", name=event_id, tasks=[TaskSpec(**spec)]),
        **_ENVELOPE,
    )


def _node(event_id: str, name: str | None = None) -> NodeReported:
    data = NodeReportedData(name=name or event_id, allocatable={"cpu": "8"})
    return NodeReported(id=event_id, data=data, **_ENVELOPE)


def _configured(event_id: str) -> SchedulerConfigured:
    spec = SchedulerConfigSpec(actions=["enqueue", "allocate"])
    return SchedulerConfigured(id=event_id, data=SchedulerConfiguredData(config=spec), **_ENVELOPE)


def _session(event_id: str) -> SessionCommitted:
    data = SessionCommittedData(
        session_id=event_id, leader_epoch=1, input_seq=MAX_SEQ, config_version=0, now=T0, input_digest="d"
    )
    return SessionCommitted(id=event_id, data=data, **_ENVELOPE)


def _edited(event: Event, edits: list[Callable[[dict[str, Any]], None]]) -> tuple[Event, bytes]:
    """``event`` and its JSON edited past what the model lets one build."""
    document = json.loads(encode(event))
    for edit in edits:
        edit(document)
    return (event, json.dumps(document, separators=(",", ":")).encode())


_BIG = "x" * (1024 * 1024 + 512 * 1024)
#: (event id, what it is built from, member path, hostile value, the code it is rejected with)
_SEED_CORPUS: list[tuple[str, Callable[[str], Event], str, object, str]] = [
    ("far-past", _job, "time", "0001-01-01T00:00:00+14:00", "invalid-field"),
    ("far-future", _job, "time", "9999-12-31T23:59:59-14:00", "invalid-field"),
    ("epoch-2-63", _session, "data.leader_epoch", 2**63, "invalid-field"),
    ("epoch-2-63-less-1", _session, "data.leader_epoch", 2**63 - 1, "invalid-field"),
    ("cpu-100E", _node, "data.allocatable.cpu", "100E", "invalid-field"),
    ("memory-1e30", _job, "data.tasks.0.resources.memory", "1e30", "invalid-field"),
    ("ttl-2-40", _job, "data.ttl_seconds_after_finished", 2**40, "invalid-field"),
    ("replicas-2m", _job, "data.tasks.0.replicas", 2_000_000, "too-many-replicas"),
    # Valid as an event, but no session could run with it: in force, it failed every session.
    ("unknown-action", _configured, "data.config.actions", ["enqueue", "bogus"], "invalid-config"),
    # Over 1 MB and rejected (its time): its dead-letter message must be cut to fit the producer's limit.
    ("oversized-rejected", _job, "data.annotations", {"big": _BIG}, "invalid-field"),
    # Over the projector's record limit: refused unread, its head kept.
    ("too-large", _job, "data.annotations", {"big": _BIG * 2}, "record-too-large"),
]


def _hostile() -> dict[str, tuple[tuple[Event, bytes], str]]:
    """Event id -> ((the event it was, its record), the code it is rejected with)."""
    hostile = {}
    for event_id, build, path, value, code in _SEED_CORPUS:
        edits = [set_member(path, value)]
        if event_id == "oversized-rejected":
            edits.append(set_member("time", "bad"))
        hostile[event_id] = (_edited(build(event_id), edits), code)
    return hostile


async def _dead_letters(bootstrap: str, topic: str) -> list[tuple[int, dict[str, bytes]]]:
    """(body size, headers) of every message of the dead-letter topic."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        max_partition_fetch_bytes=8 * 1024 * 1024,
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        out: list[tuple[int, dict[str, bytes]]] = []
        while batch := await consumer.getmany(tp, timeout_ms=2000):
            out += [(len(m.value or b""), dict(m.headers)) for m in batch[tp]]
        return out
    finally:
        await consumer.stop()


@pytest.mark.integration
async def test_the_seed_corpus_is_rejected_with_codes_and_nothing_else_is_lost(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    hostile = _hostile()
    # An id no btree index holds (PostgreSQL refuses the row at storage, whatever the door
    # let through): the batch is redone a record at a time and only that record rejected.
    unindexable_id = secrets.token_urlsafe(12_000)
    unindexable = _node(unindexable_id, name="node-unindexable")  # a valid name: only the id is too big
    stream = event_stream(31, 400)
    before, after = stream[:200], stream[200:]
    records = [(topic_for(event, topics), value) for (event, value), _ in hostile.values()]
    small = [(topic, value) for topic, value in records if len(value) < 1_000_000]
    large = [(topic, value) for topic, value in records if len(value) >= 1_000_000]
    sent = len(before) + len(small) + len(large) + 1 + len(after)

    async with running_projector(kafka_bootstrap, database_url, topics, projector_batch_size=64) as metrics:
        await produce(kafka_bootstrap, topics, [*before, *small, unindexable])
        await produce_raw(kafka_bootstrap, large)
        await produce(kafka_bootstrap, topics, after)
        conn = await asyncpg.connect(database_url)
        try:
            await wait_until(
                conn, "SELECT coalesce(sum(next_offset), 0)::int FROM consumer_offsets", sent, 120
            )
            archived = await conn.fetchval("SELECT count(*) FROM event_log")
            rejected = await conn.fetch(
                "SELECT topic, partition, kafka_offset, error, detail, event_id, length(raw) AS size"
                " FROM rejected_events"
            )
            assert archived + len(rejected) == sent
            codes = {r["event_id"]: r["error"] for r in rejected if r["event_id"] in hostile}
            assert codes == {event_id: code for event_id, (_, code) in hostile.items()}
            (unstorable,) = [r for r in rejected if r["error"] == "unstorable"]
            assert unstorable["event_id"] is None  # too long to be kept as an id: the raw record holds it
            assert "index row" in unstorable["detail"]
            too_large = next(r for r in rejected if r["event_id"] == "too-large")
            assert too_large["size"] == 64 * 1024
            assert metrics.records_isolated == 1
            # Every stream event is archived or refused by the fold, never lost.
            ids = {r["event_id"] for r in await conn.fetch("SELECT event_id FROM event_log")}
            assert {e.id for e in [*before, *after]} <= ids | {r["event_id"] for r in rejected}
            assert (await verify_chain(conn)).ok
            assert await load_projection(conn) == await state_at(conn, archived)
            # The epochs refused at the door leave the scheduler its next epoch.
            assert await conn.fetchval("SELECT leader_epoch FROM projection_meta") < 2**53
        finally:
            await conn.close()
    leadership = await campaign(DatabaseAccess(database_url), CLUSTER, "poison-test")
    try:
        assert leadership.epoch < 2**53
    finally:
        await leadership.release()

    dead = await _dead_letters(kafka_bootstrap, topics.rejected)
    sources = {headers["tephra-source"].decode() for _, headers in dead}
    assert sources == {f"{r['topic']}/{r['partition']}/{r['kafka_offset']}" for r in rejected}
    assert all(size <= DEAD_LETTER_BODY_BYTES for size, _ in dead)
    oversized = [h for _, h in dead if h.get("tephra-event-id") == b"oversized-rejected"]
    assert oversized
    assert all(h["tephra-truncated"] == str(DEAD_LETTER_BODY_BYTES).encode() for h in oversized)


@pytest.mark.integration
async def test_the_operator_skips_a_record_by_its_position_and_it_is_recorded(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    events = event_stream(32, 30)
    await produce(kafka_bootstrap, topics, events)
    skipped = events[0]
    topic = topic_for(skipped, topics)
    position = f"{topic}:0:0"
    async with running_projector(kafka_bootstrap, database_url, topics, skip_record=position):
        conn = await asyncpg.connect(database_url)
        try:
            await wait_until(
                conn, "SELECT coalesce(sum(next_offset), 0)::int FROM consumer_offsets", len(events), 60
            )
            row = await conn.fetchrow(
                "SELECT error, event_id, raw FROM rejected_events WHERE topic = $1 AND kafka_offset = 0",
                topic,
            )
            assert row is not None
            assert (row["error"], row["event_id"], bytes(row["raw"])) == (
                "skipped-by-operator",
                skipped.id,
                encode(skipped),
            )
            assert await conn.fetchval("SELECT count(*) FROM event_log WHERE event_id = $1", skipped.id) == 0
        finally:
            await conn.close()


def test_a_record_the_fold_raises_on_poisons_the_batch_and_is_refused_by_position_on_the_redo() -> None:
    # A fold that raises (here: a job naming a task the state lost, as a bug could leave
    # it) must not stop the projector: the record is named, and the redone batch refuses it.
    def corrupted() -> ClusterState:
        state = ClusterState()
        writer = BatchWriter(state, GENESIS_HASH, consumer="c", cluster=CLUSTER)
        writer.prepare(decode_batch(records([_job("victim")], topic="i")), set())
        state.jobs["poison/victim"].tasks.append("poison/ghost")
        return state

    cancel = JobCancelled(id="cancel", data=JobCancelledData(job_id="poison/victim"), **_ENVELOPE)
    batch = records([_node("before"), cancel, _node("after")], topic="i", start=10)

    writer = BatchWriter(corrupted(), GENESIS_HASH, consumer="c", cluster=CLUSTER)
    with pytest.raises(RecordFailedError) as caught:
        writer.prepare(decode_batch(batch), set())
    assert (caught.value.position, caught.value.code) == (("i", 0, 11), "fold-failed")
    assert "KeyError" in caught.value.detail
    assert writer.poisoned

    door = Door(refused={caught.value.position: (caught.value.code, caught.value.detail)})
    redo = BatchWriter(corrupted(), GENESIS_HASH, consumer="c", cluster=CLUSTER, door=door)
    plan = redo.prepare(decode_batch(batch, door), set())
    assert [(r.offset, r.error, r.event_id) for r in plan.rejections] == [(11, "fold-failed", "cancel")]
    assert plan.archived == 2


@pytest.mark.integration
async def test_a_projection_that_folded_nothing_loads_with_an_aware_clock_and_folds_on(
    database_url: str,
) -> None:
    # Its stored clock (year 1) reads back as asyncpg's -infinity, a naive datetime: the
    # fold and the projection rows raised TypeError at every batch after such a restart.
    conn = await asyncpg.connect(database_url)
    try:
        await apply_migrations(conn)
        assert (await load_projection(conn)).clock == CLOCK_START
        assert await load_projection(conn) == await state_at(conn, 0)
        writer = await BatchWriter.load(conn, consumer="c", cluster=CLUSTER)
        refused = JobCancelled(id="nothing", data=JobCancelledData(job_id="poison/none"), **_ENVELOPE)
        assert (await writer.write(conn, records([refused], topic="i"))).archived == 0
        writer = await BatchWriter.load(conn, consumer="c", cluster=CLUSTER)
        assert (await writer.write(conn, records([_node("first")], topic="o"))).archived == 1
    finally:
        await conn.close()


def test_skip_record_takes_positions_and_names_a_bad_one() -> None:
    settings = ProjectorSettings(skip_record="tephra.intents:0:12, tephra.decisions:3:0")
    assert parse_positions(settings.skip_record) == [("tephra.intents", 0, 12), ("tephra.decisions", 3, 0)]
    with pytest.raises(ValidationError, match=r"'tephra\.intents:x:1' is not TOPIC:PARTITION:OFFSET"):
        ProjectorSettings(skip_record="tephra.intents:x:1")
