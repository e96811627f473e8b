"""The projector service against the real broker and the real PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import random
from contextlib import AbstractAsyncContextManager
from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from events.canonical import GENESIS_HASH
from events.models import Event, NodeReported, NodeReportedData
from events.serde import canonical_json, decode, encode
from events.topics import Topics, topic_for
from projector.errors import WaitTimeoutError
from projector.migrate import apply_migrations, available_migrations
from projector.plan import BatchPlan, InboundRecord, id_hint
from projector.progress import wait_for_event, wait_for_seq, wait_for_session
from projector.reconstruct import load_projection, state_at, verify_chain
from projector.service import CHECK_APPLICATION, ProjectorMetrics, _DuplicateCheck
from projector.settings import ProjectorSettings
from projector.state import ClusterState
from projector.writer import BatchWriter
from tests.projector.helpers import produce
from tests.projector.streams import CLUSTER, event_stream
from tests.service.helpers import running_projector as service_projector

pytestmark = pytest.mark.integration


def running_projector(
    kafka_bootstrap: str, database_url: str, topics: Topics, **overrides: object
) -> AbstractAsyncContextManager[ProjectorMetrics]:
    """The projector of the streams' cluster, with the default settings but ``overrides``."""
    settings = ProjectorSettings(**overrides)  # type: ignore[arg-type]
    return service_projector(kafka_bootstrap, database_url, topics, settings, cluster=CLUSTER)


async def wait_until(conn: asyncpg.Connection, query: str, expected: int, limit_s: float = 60) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while (got := await conn.fetchval(query)) != expected:
        if loop.time() > deadline:
            pytest.fail(f"{query!r} is {got}, expected {expected} after {limit_s} s")
        await asyncio.sleep(0.1)


_MALFORMED = (
    b"",
    b"not json at all",
    b"\xff\xfe\x00",
    b"[1, 2, 3]",
    b'{"id": "x"}',
    b'{"type": "tephra.job.submitted.v9", "id": "y"}',
    b'{"type": "tephra.nope.v1", "id": "z"}',
    b'{"type": "tephra.job.submitted.v1", "id": "w", "source": "s", "time": "2026-01-01T00:00:00Z",'
    b' "data": {"namespace": "n", "name": "j", "tasks": []}}',
    # PostgreSQL text cannot hold U+0000: events that could be neither archived nor
    # looked up (projector.storable).
    b'{"type": "tephra.node.removed.v1", "id": "nul\\u0000id", "source": "s", "cluster": "test-cluster",'
    b' "time": "2026-01-01T00:00:00Z", "data": {"name": "n"}}',
    b'{"type": "tephra.node.removed.v1", "id": "nul-data", "source": "s", "cluster": "test-cluster",'
    b' "time": "2026-01-01T00:00:00Z", "data": {"name": "n\\u0000"}}',
)


async def test_malformed_records_are_parked_and_the_projector_never_stops(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    events = event_stream(11, 3000)
    rng = random.Random(5)
    topics_in = (topics.intents, topics.observations, topics.decisions)
    malformed = [(rng.choice(topics_in), rng.choice(_MALFORMED)) for _ in range(1000)]
    mixed: list[Event | tuple[str, bytes]] = [*events]
    for item in malformed:
        mixed.insert(rng.randrange(len(mixed) + 1), item)

    async with running_projector(kafka_bootstrap, database_url, topics, projector_batch_size=500) as metrics:
        await produce(kafka_bootstrap, topics, mixed)
        conn = await asyncpg.connect(database_url)
        try:
            total = len(mixed)
            await wait_until(
                conn, "SELECT coalesce(sum(next_offset), 0)::int FROM consumer_offsets", total, limit_s=90
            )
            archived = await conn.fetchval("SELECT count(*) FROM event_log")
            rejected = await conn.fetch("SELECT error, detail, raw, event_id FROM rejected_events")
            decode_errors = [
                r for r in rejected if r["event_id"] is None or not r["event_id"].startswith("e-")
            ]
            fold_refusals = [r for r in rejected if r not in decode_errors]
            assert len(decode_errors) == 1000
            assert "unstorable-text" in {r["error"] for r in decode_errors}
            assert all(r["error"] and r["detail"] for r in rejected)
            assert {r["error"] for r in decode_errors} <= {
                "not-json", "invalid-utf8", "not-an-object", "missing-type", "unknown-type",
                "unsupported-version", "invalid-field", "unstorable-text",
            }  # fmt: skip
            # Every valid event is archived, or refused by the fold (consumed across three
            # topics, an observation can overtake the job it names) -- never lost.
            ids = {r["event_id"] for r in await conn.fetch("SELECT event_id FROM event_log")}
            refused = {r["event_id"] for r in fold_refusals}
            assert archived + len(fold_refusals) == len(events)
            assert ids | refused == {e.id for e in events}
            assert metrics.events_rejected == len(rejected)
            assert (await verify_chain(conn)).ok
            assert await load_projection(conn) == await state_at(conn, archived)
        finally:
            await conn.close()
    # The dead-letter topic got one message per rejection, with its reason.
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topics.rejected, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        dead: list[dict[str, bytes]] = []
        # Every message is on the topic already (acknowledged before its batch committed); an empty
        # fetch only says none arrived yet, so read until all have, within a deadline.
        deadline = asyncio.get_running_loop().time() + 60
        while len(dead) < len(rejected):
            if asyncio.get_running_loop().time() > deadline:
                pytest.fail(f"{len(dead)} dead letters read, expected {len(rejected)} after 60 s")
            batch = await consumer.getmany(timeout_ms=1000)
            dead.extend(dict(m.headers) for ms in batch.values() for m in ms)
        assert len(dead) >= len(rejected)
        assert all(h["tephra-error"] for h in dead)
    finally:
        await consumer.stop()


async def test_a_redelivered_event_is_a_no_op_and_read_your_writes_waits_work(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    events = event_stream(12, 200)
    session = next(e for e in reversed(events) if e.type == "tephra.session.committed.v1")
    async with running_projector(kafka_bootstrap, database_url, topics):
        await produce(kafka_bootstrap, topics, events)
        await produce(kafka_bootstrap, topics, events[:50])  # a producer retrying
        conn = await asyncpg.connect(database_url)
        try:
            seq = await wait_for_session(conn, session.data.session_id, 30)  # type: ignore[union-attr]
            fate = await wait_for_event(conn, session.id, 5)
            assert fate.archived
            assert fate.seq == seq
            await wait_until(conn, "SELECT coalesce(sum(next_offset), 0)::int FROM consumer_offsets", 250)
            assert await conn.fetchval("SELECT count(*) FROM event_log") == await wait_for_seq(conn, 1, 5)
            ids = [r["event_id"] for r in await conn.fetch("SELECT event_id FROM event_log")]
            assert len(ids) == len(set(ids))
            with pytest.raises(WaitTimeoutError):
                await wait_for_session(conn, "never", 0.3, poll=0.1)
        finally:
            await conn.close()


def _reencoded(event: Event, form: str) -> bytes:
    """``event`` as another encoder might write it (same event, other bytes)."""
    if form == "canonical":  # sorted keys: data before the envelope's id
        return canonical_json(event)
    document = json.loads(encode(event))
    if form == "spaced":  # no compact "id":" member to read the id off
        return json.dumps(document, indent=1).encode()
    # The id's first character as a \u escape: the bytes hold no plain id.
    raw = json.dumps(document, separators=(",", ":")).encode()
    escaped = f"\\u{ord(event.id[0]):04x}{event.id[1:]}"
    return raw.replace(b'"id":"' + event.id.encode() + b'"', b'"id":"' + escaped.encode() + b'"', 1)


async def test_duplicates_are_recognised_whatever_their_encoding(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    # The duplicate check asks about ids read off the records' bytes before they
    # decode (projector.plan.id_hint); every event whose decoded id is not that hint
    # must still be recognised, and one whose hint is an archived id still archived.
    events = event_stream(24, 300)
    first, rest = events[:200], events[200:]
    forms = ("canonical", "spaced", "escaped")
    again = [(topic_for(e, topics), _reencoded(e, forms[i % 3])) for i, e in enumerate(first[::3])]
    for i, ((_, raw), event) in enumerate(zip(again, first[::3], strict=True)):
        assert decode(raw).id == event.id
        assert (id_hint(raw) == event.id) is (forms[i % 3] == "canonical")
    node = NodeReported(
        id="labelled-node-report",
        source="tests",
        cluster=CLUSTER,
        time=events[-1].time,
        data=NodeReportedData(name="labelled", labels={"id": first[0].id}),
    )
    labelled = (topic_for(node, topics), canonical_json(node))
    assert id_hint(labelled[1]) == first[0].id  # the hint is an archived event's id, not its own
    async with running_projector(kafka_bootstrap, database_url, topics, projector_batch_size=64) as metrics:
        await produce(kafka_bootstrap, topics, first)
        conn = await asyncpg.connect(database_url)
        try:
            await wait_until(conn, "SELECT count(*)::int FROM event_log", len(first))
            mixed = [*again[:30], labelled, *rest[:50], *again[30:], *rest[50:]]
            await produce(kafka_bootstrap, topics, mixed)
            await wait_until(
                conn,
                "SELECT coalesce(sum(next_offset), 0)::int FROM consumer_offsets",
                len(events) + len(again) + 1,
            )
            ids = [r["event_id"] for r in await conn.fetch("SELECT event_id FROM event_log ORDER BY seq")]
            assert sorted(ids) == sorted([*(e.id for e in events), node.id])
            assert metrics.duplicates_skipped == len(again)
            assert await conn.fetchval("SELECT count(*) FROM rejected_events") == 0
            assert (await verify_chain(conn)).ok
        finally:
            await conn.close()


async def test_a_second_projector_stands_by_and_migrations_are_idempotent(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    events = event_stream(13, 300)
    async with (
        running_projector(kafka_bootstrap, database_url, topics) as first,
        running_projector(kafka_bootstrap, database_url, topics) as second,
    ):
        await produce(kafka_bootstrap, topics, events)
        conn = await asyncpg.connect(database_url)
        try:
            await wait_until(conn, "SELECT coalesce(sum(next_offset), 0)::int FROM consumer_offsets", 300)
            assert await conn.fetchval("SELECT count(*) FROM schema_migrations") == len(
                available_migrations()
            )
            assert (await verify_chain(conn)).ok
        finally:
            await conn.close()
        assert 0 in (first.batches, second.batches)  # only one of them wrote


async def test_offsets_beyond_the_broker_log_are_reported_and_nothing_is_skipped(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    first, second = event_stream(14, 200)[:100], event_stream(14, 200)[100:]
    async with running_projector(kafka_bootstrap, database_url, topics):
        await produce(kafka_bootstrap, topics, first)
        conn = await asyncpg.connect(database_url)
        try:
            await wait_until(conn, "SELECT coalesce(sum(next_offset), 0)::int FROM consumer_offsets", 100)
        finally:
            await conn.close()
    # As if the broker had lost its log: the stored positions are past its end.
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("UPDATE consumer_offsets SET next_offset = next_offset + 1000")
        async with running_projector(kafka_bootstrap, database_url, topics) as metrics:
            await produce(kafka_bootstrap, topics, second)
            await wait_until(conn, "SELECT count(*)::int FROM event_log", 200)
            assert metrics.offsets_went_backwards >= 1
            assert metrics.duplicates_skipped == 100  # the old records again, recognised by id
        assert (await verify_chain(conn)).ok
    finally:
        await conn.close()


async def test_connections_dropped_with_batches_in_flight_lose_and_duplicate_nothing(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    events = event_stream(15, 30_000)
    parts = [events[start : start + 1_000] for start in range(0, len(events), 1_000)]
    rng = random.Random(15)
    conn = await asyncpg.connect(database_url)
    try:
        # Small batches: several are prepared and waiting for their commits when a drop comes.
        async with running_projector(
            kafka_bootstrap, database_url, topics, projector_batch_size=200
        ) as metrics:
            # Drops at random moments of the runs, until three have ended a run.  The stream goes
            # out a part before each drop, so however fast the projector is, the stream is not all
            # archived while drops come; the statement that drops counts the connections it ended.
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            landed = 0
            while landed < 3 or metrics.reconnects < 3:
                if loop.time() > deadline or not parts:
                    pytest.fail(f"{landed} drops ended {metrics.reconnects} runs (deadline or stream over)")
                await produce(kafka_bootstrap, topics, parts.pop(0))
                await asyncio.sleep(rng.uniform(0.05, 0.3))  # a random moment: no count depends on it
                landed += await conn.fetchval(
                    "SELECT count(*) > 0 FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()) AS dropped"
                )
            for part in parts:
                await produce(kafka_bootstrap, topics, part)
            await wait_until(
                conn, "SELECT coalesce(sum(next_offset), 0)::int FROM consumer_offsets", len(events)
            )
        ids = [r["event_id"] for r in await conn.fetch("SELECT event_id FROM event_log ORDER BY seq")]
        assert sorted(ids) == sorted(e.id for e in events)
        assert await conn.fetchval("SELECT count(*) FROM rejected_events") == 0
        report = await verify_chain(conn)
        assert report.ok, report
        assert await load_projection(conn) == await state_at(conn, len(ids))
    finally:
        await conn.close()


async def test_a_commit_that_fails_while_the_next_batch_waits_is_retried(
    kafka_bootstrap: str, database_url: str, topics: Topics, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first commit fails as a dropped connection makes it fail: it poisons the writer
    # and raises an outage.  It runs as a task while the loop gathers the next batch, so
    # the loop sees the poisoned writer before the commit's error; preparing then raised
    # the writer's refusal, which is not retried, and the projector stopped for good.
    events = event_stream(17, 1_000)
    await produce(kafka_bootstrap, topics, events)
    real_commit = BatchWriter.commit
    failed: list[int] = []

    async def commit_failing_once(self: BatchWriter, conn: asyncpg.Connection, plan: BatchPlan) -> None:
        if not failed:
            failed.append(plan.base_seq)
            self.poisoned = True  # what BatchWriter.commit does when its transaction fails
            raise asyncpg.exceptions.ConnectionDoesNotExistError("injected: a connection dropped mid-commit")
        await real_commit(self, conn, plan)

    monkeypatch.setattr(BatchWriter, "commit", commit_failing_once)
    conn = await asyncpg.connect(database_url)
    try:
        async with running_projector(
            kafka_bootstrap, database_url, topics, projector_batch_size=200
        ) as metrics:
            await wait_until(
                conn, "SELECT coalesce(sum(next_offset), 0)::int FROM consumer_offsets", len(events)
            )
            assert failed == [0]
            assert metrics.reconnects == 1
        ids = [r["event_id"] for r in await conn.fetch("SELECT event_id FROM event_log ORDER BY seq")]
        assert sorted(ids) == sorted(e.id for e in events)
        assert (await verify_chain(conn)).ok
    finally:
        await conn.close()


async def test_a_connection_that_fails_to_close_leaves_no_writer_lock_behind(
    kafka_bootstrap: str, database_url: str, topics: Topics, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A run ends when its duplicate-check connection drops; closing that connection
    # then fails (injected: the real close runs, then raises).  The writer's connection
    # must still be closed, or the writer lock it holds keeps the next run standing by.
    events = event_stream(16, 4_000)
    first, second = events[:2_000], events[2_000:]
    await produce(kafka_bootstrap, topics, first)
    real_close = asyncpg.Connection.close
    injected: list[asyncpg.Connection] = []
    armed = False

    async def close_failing_once(self: asyncpg.Connection, **kwargs: Any) -> None:  # asyncpg's signature
        await real_close(self, **kwargs)
        if armed and not injected:
            injected.append(self)
            raise ConnectionResetError("injected: closing the connection failed")

    monkeypatch.setattr(asyncpg.Connection, "close", close_failing_once)
    conn = await asyncpg.connect(database_url)
    offsets = "SELECT coalesce(sum(next_offset), 0)::int FROM consumer_offsets"
    try:
        async with running_projector(
            kafka_bootstrap, database_url, topics, projector_batch_size=200
        ) as metrics:
            # The first half archived, the check's connection is dropped between batches
            # (found by its application_name); the second half's first batch runs into it.
            await wait_until(conn, offsets, len(first))
            armed = True
            dropped = await conn.fetchval(
                "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND application_name = $1) AS dropped",
                CHECK_APPLICATION,
            )
            assert dropped == 1  # the duplicate check's connection, not the writer's
            await produce(kafka_bootstrap, topics, second)
            await wait_until(conn, offsets, len(events))
            assert injected, "the failing close was not exercised"
            assert metrics.reconnects >= 1
        assert await conn.fetchval("SELECT count(*) FROM event_log") == len(events)
    finally:
        await real_close(conn)


async def test_a_failing_batch_ends_its_duplicate_queries_without_sending_cancel_requests(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Cancelling a running asyncpg statement sends PostgreSQL a CancelRequest over a new
    # connection (a TLS negotiation first, under sslmode=prefer).  With the server going
    # away, asyncpg left that connection's error unread: "Future exception was never
    # retrieved" failed the dropped-connections test's teardown now and then.  A batch
    # that fails with the check's queries running drops their connection instead.
    sent: list[int] = []
    real_cancel = asyncpg.connect_utils._cancel

    async def counting_cancel(**kwargs: Any) -> None:  # asyncpg's keyword-only signature
        sent.append(kwargs["backend_pid"])
        await real_cancel(**kwargs)

    monkeypatch.setattr(asyncpg.connect_utils, "_cancel", counting_cancel)
    locker = await asyncpg.connect(database_url)
    query_conn = await asyncpg.connect(database_url)
    try:
        await apply_migrations(locker)
        writer = BatchWriter(ClusterState(), GENESIS_HASH, consumer="test", cluster=CLUSTER)
        records = [InboundRecord("t", 0, i, encode(e)) for i, e in enumerate(event_stream(17, 300))]
        async with locker.transaction():
            await locker.execute("LOCK TABLE event_log IN ACCESS EXCLUSIVE MODE")
            check = _DuplicateCheck(writer, query_conn, records)
            # The first slice's query is running, blocked on the lock.
            blocked = (
                "SELECT count(*)::int FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            await wait_until(locker, blocked, 1)
            before = asyncio.all_tasks()
            await check.close()
            # A cancel request is sent by a task asyncpg starts as the cancelled query ends, so
            # before close() returns; once every task started meanwhile has ended, any would be counted.
            spawned = asyncio.all_tasks() - before
            if spawned:
                _, running = await asyncio.wait(spawned, timeout=30)
                assert not running, f"tasks started by close() still run: {running}"
        assert sent == []
        assert query_conn.is_closed()
    finally:
        await locker.close()
        await query_conn.close()
