"""The scheduler service against the real broker, the real PostgreSQL and the real projector."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TypeVar

import asyncpg
import pytest
from aiokafka import AIOKafkaProducer
from opentelemetry import trace

from events.signing import EventSigner, SigningKey
from events.topics import Topics
from projector.connections import DatabaseAccess
from projector.progress import wait_for_event
from scheduler.service.leader import campaign, take_office
from scheduler.service.loop import SessionLoop
from scheduler.service.projection import ProjectionReader
from scheduler.service.publisher import SessionPublisher
from scheduler.service.runner import SessionRunner
from scheduler.service.settings import SchedulerSettings
from scheduler.service.telemetry import SchedulerMetrics, SubmissionTraces
from tests.service.helpers import (
    CLUSTER,
    job,
    node,
    produce,
    queue,
    running_projector,
    running_scheduler,
    until,
    wait_for,
)

T = TypeVar("T")

pytestmark = pytest.mark.integration

BOUND = "SELECT count(*) FROM tasks WHERE status = 'Bound'"


async def test_a_session_publishes_decisions_the_projector_applies(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    await produce(
        kafka_bootstrap,
        topics,
        [
            queue(),
            node("n1"),
            node("n2"),
            job("train", replicas=3, cpu="3"),
            job("huge", replicas=3, cpu="9"),
        ],
    )
    async with (
        running_projector(kafka_bootstrap, database_url, topics),
        running_scheduler(kafka_bootstrap, database_url, topics, schedule_period=0.2),
    ):
        conn = await asyncpg.connect(database_url)
        try:
            await wait_for(conn, BOUND, 3)
            await wait_for(conn, "SELECT count(*) FROM bindings", 3)
            row = await conn.fetchrow(
                "SELECT data::jsonb AS data FROM event_log WHERE type = 'tephra.session.committed.v1'"
                " AND jsonb_array_length(data::jsonb -> 'decisions') > 0 ORDER BY seq LIMIT 1"
            )
            # Recorded once the scheduler has seen its session applied (after the projection has).
            await wait_for(conn, "SELECT count(*) > 0 FROM scheduler_session_timings", True)
            timing = await conn.fetchrow(
                "SELECT * FROM scheduler_session_timings ORDER BY applied_seq LIMIT 1"
            )
        finally:
            await conn.close()
    data = json.loads(row["data"])
    assert data["leader_epoch"] == 1
    assert len(data["input_digest"]) == 64
    assert data["pending_digest"].startswith("sha256:")
    kinds = [d["kind"] for d in data["decisions"]]
    assert kinds[0] == "enqueue"
    assert kinds.count("bind") == 3
    assert {d["job"] for d in data["decisions"] if d["kind"] == "bind"} == {"ns/train"}
    # The gang that cannot fit (9 cpu per task, 8-cpu nodes) is recorded with its reasons.
    (pending,) = [p for p in data["pending"] if p["job"] == "ns/huge"]
    assert pending["reasons"]
    assert all(r["code"] and r["message"] for r in pending["reasons"])
    assert timing is not None
    assert timing["leader_epoch"] == 1
    assert timing["compute_seconds"] > 0


async def test_sessions_wait_for_their_own_writes_and_skip_when_nothing_changed(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    await produce(kafka_bootstrap, topics, [queue(), node("n1"), job("a", replicas=2, cpu="2")])
    async with (
        running_projector(kafka_bootstrap, database_url, topics),
        running_scheduler(kafka_bootstrap, database_url, topics, schedule_period=0.1) as metrics,
    ):
        conn = await asyncpg.connect(database_url)
        try:
            await wait_for(conn, BOUND, 2)
            # One more session runs on the state the binding session left, finds nothing to do, and from
            # then on every period is skipped: no new SessionCommitted while nothing arrives.  The first
            # skip says the loop has settled (it skips only once its last session was applied).
            await until(lambda: metrics.skipped > 0, "the loop never skipped a period")
            settled = await conn.fetchval("SELECT count(*) FROM sessions")
            ran, skipped = metrics.sessions, metrics.skipped
            await until(lambda: metrics.skipped >= skipped + 5, "five more periods were not all skipped")
            assert metrics.sessions == ran
            assert await conn.fetchval("SELECT count(*) FROM sessions") == settled

            # New capacity and a new job: the next session places it.
            await produce(kafka_bootstrap, topics, [job("b", replicas=1, cpu="7"), node("n2")])
            await wait_for(conn, BOUND, 3)
            rows = await conn.fetch("SELECT seq, input_seq, leader_epoch FROM sessions ORDER BY seq")
        finally:
            await conn.close()
    # Read-your-writes: every session saw the state its predecessor produced.
    for previous, current in itertools.pairwise(rows):
        assert current["input_seq"] >= previous["seq"]
    assert {r["leader_epoch"] for r in rows} == {1}


async def test_a_session_over_budget_is_abandoned_and_nothing_is_published(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    # Thousands of tasks: a session takes far longer than a GIL switch interval, so it cannot finish
    # before the loop notices the microsecond budget has passed.
    await produce(
        kafka_bootstrap, topics, [queue(), node("n1"), *(job(f"a{i}", replicas=50) for i in range(40))]
    )
    async with running_projector(kafka_bootstrap, database_url, topics):
        conn = await asyncpg.connect(database_url)
        try:
            await wait_for(conn, "SELECT count(*) FROM tasks", 2000)
            async with running_scheduler(
                kafka_bootstrap, database_url, topics, schedule_period=0.1, session_budget=1e-6
            ) as metrics:
                await until(lambda: metrics.overruns >= 3, "fewer than three sessions overran")
                assert metrics.sessions == 0
            assert (
                await conn.fetchval("SELECT count(*) FROM event_log WHERE type LIKE 'tephra.session.%'") == 0
            )
        finally:
            await conn.close()


class _SlowFirstSession(SessionRunner):
    """Holds the first session until ``before_first`` has run: input that arrives while a session computes."""

    def __init__(self, before_first: Callable[[], Awaitable[None]]) -> None:
        super().__init__(budget=30.0)
        self._before_first: Callable[[], Awaitable[None]] | None = before_first

    async def run(self, session_id: str, compute: Callable[[], T]) -> T:
        hook, self._before_first = self._before_first, None
        if hook is not None:
            await hook()
        return await super().run(session_id, compute)


async def test_input_archived_while_a_session_ran_gets_the_next_session_at_once(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    # The period is far longer than the test may take: only an immediate next session can place "late".
    await produce(kafka_bootstrap, topics, [queue(), node("n1"), job("early", replicas=1, cpu="1")])
    late = job("late", replicas=1, cpu="1")

    async def submit_late() -> None:
        # Its own connection: this runs inside the loop's session while the test body polls on `probe`.
        await produce(kafka_bootstrap, topics, [late])
        conn = await asyncpg.connect(database_url)
        try:
            await wait_for_event(conn, late.id, 30)
        finally:
            await conn.close()

    async with running_projector(kafka_bootstrap, database_url, topics):
        probe = await asyncpg.connect(database_url)
        leadership = await campaign(DatabaseAccess(database_url), CLUSTER, "test")
        reader = await ProjectionReader.connect(DatabaseAccess(database_url))
        records = await asyncpg.connect(database_url)
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
        runner = _SlowFirstSession(submit_late)
        try:
            await reader.wait_for_schema()
            await wait_for(probe, "SELECT count(*) FROM tasks", 1)
            await producer.start()
            signer = EventSigner(SigningKey.generate(), "scheduler")
            await take_office(
                leadership, producer, records, topics=topics, signer=signer, now=datetime.now(UTC), enrol=True
            )
            loop = SessionLoop(
                leadership=leadership,
                reader=reader,
                records=records,
                publisher=SessionPublisher(producer, topics),
                runner=runner,
                signer=signer,
                traces=SubmissionTraces(),
                tracer=trace.get_tracer("test"),
                metrics=SchedulerMetrics(),
                settings=SchedulerSettings(schedule_period=300.0),
                cluster=CLUSTER,
            )
            sessions = asyncio.create_task(loop.run())
            try:
                await wait_for(probe, "SELECT count(*) FROM bindings WHERE job_id = 'ns/late'", 1, within=60)
            finally:
                sessions.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sessions
            rows = await probe.fetch(
                "SELECT s.input_seq, s.seq, (SELECT count(*) FROM bindings b WHERE b.seq = s.seq) AS bound"
                " FROM sessions s ORDER BY s.seq"
            )
            late_seq = await probe.fetchval("SELECT seq FROM event_log WHERE event_id = $1", late.id)
        finally:
            runner.close()
            await producer.stop()
            await reader.close()
            await records.close()
            await leadership.release()
            await probe.close()
    first, second = rows[0], rows[1]
    # The first session read its input before "late" was archived, and committed after it ...
    assert first["input_seq"] < late_seq < first["seq"]
    assert first["bound"] == 1
    # ... and the second one, run without waiting for the period or for anything newer, placed it.
    assert second["input_seq"] == first["seq"]
    assert second["bound"] == 1


async def test_pending_reasons_larger_than_a_message_reach_the_projection_through_parts(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    # 40 jobs that cannot fit (9 cpu per task on 8-cpu nodes): their reasons alone exceed 4 kB messages.
    stuck = [job(f"stuck{i:02d}", replicas=1, cpu="9") for i in range(40)]
    await produce(kafka_bootstrap, topics, [queue(), node("n1"), *stuck])
    async with running_projector(kafka_bootstrap, database_url, topics):
        conn = await asyncpg.connect(database_url)
        try:
            await wait_for(conn, "SELECT count(*) FROM tasks", 40)
            async with running_scheduler(
                kafka_bootstrap, database_url, topics, schedule_period=0.2, scheduler_max_message_bytes=4_000
            ):
                await wait_for(conn, "SELECT count(*) FROM sessions", 1)
            row = await conn.fetchrow("SELECT seq FROM sessions ORDER BY seq LIMIT 1")
            marker = await conn.fetchval("SELECT data::jsonb FROM event_log WHERE seq = $1", row["seq"])
            parts = await conn.fetch(
                "SELECT data::jsonb AS data FROM event_log WHERE type = 'tephra.session.part.v1'"
                " AND seq < $1 ORDER BY seq",
                row["seq"],
            )
            largest = await conn.fetchval("SELECT max(octet_length(data::text)) FROM event_log")
            # The newest session's list (the same jobs stay stuck with the same reasons).
            rows = await conn.fetch("SELECT entry FROM newest_pending ORDER BY job")
        finally:
            await conn.close()
    marker = json.loads(marker)
    assert marker["parts"] == len(parts) > 1
    assert marker["pending"] == []
    carried = [p["job"] for part in parts for p in json.loads(part["data"]).get("pending", [])]
    assert carried == sorted(j.data.job_id for j in stuck)
    # The projection holds the whole list, as one marker would have carried it.
    pending = [json.loads(r["entry"]) for r in rows]
    assert [p["job"] for p in pending] == carried
    assert all(p["reasons"] for p in pending)
    assert largest < 4_000
