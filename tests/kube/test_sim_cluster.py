"""The simulated cluster on the real broker, the real PostgreSQL and the real projector.

Sessions are produced by hand here (no scheduler), so each test controls
exactly which decisions exist: accepted ones must be executed once, voided
ones never.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from events.models import (
    MAX_SEQ,
    BindDecision,
    Decision,
    EvictDecision,
    JobSubmitted,
    JobSubmittedData,
    NodeReported,
    NodeReportedData,
    QueueUpserted,
    QueueUpsertedData,
    SessionCommitted,
    SessionCommittedData,
    TaskSpec,
    TaskStarted,
)
from events.serde import decode
from events.topics import Topics
from kube.settings import SimClusterSettings
from kube.sim_runtime import SIM_RUNTIME_ANNOTATION
from kube.sim_service import SIM_WORK_QUERY, run_sim_service
from projector.connections import DatabaseAccess, KafkaAccess
from projector.migrate import apply_migrations
from tests.api.helpers import read_topic
from tests.service.helpers import CLUSTER, produce, running_projector, stopped_all, wait_for

pytestmark = pytest.mark.integration

STATUS = "SELECT status FROM tasks WHERE id = $1"
STARTED = "SELECT count(*) FROM event_log WHERE type = 'tephra.task.started.v1' AND subject = 'task/' || $1"
FINISHED = "SELECT count(*) FROM event_log WHERE type = 'tephra.task.finished.v1' AND subject = 'task/' || $1"


def _envelope(subject: str) -> dict[str, Any]:
    return {"id": str(uuid.uuid4()), "source": "tests://kube", "time": datetime.now(UTC), "subject": subject}


def cluster_events(annotations: dict[str, str] | None = None) -> list[Any]:
    return [
        QueueUpserted(data=QueueUpsertedData(name="default"), **_envelope("default")),
        NodeReported(
            data=NodeReportedData(name="n1", allocatable={"cpu": "8", "memory": "32Gi", "pods": 110}),
            **_envelope("n1"),
        ),
        JobSubmitted(
            data=JobSubmittedData(
                namespace="ns",
                name="train",
                tasks=[TaskSpec(name="worker", replicas=2, resources={"cpu": "1"})],
                annotations=annotations or {},
            ),
            **_envelope("ns/train"),
        ),
    ]


def session(*decisions: Decision, epoch: int = 1) -> SessionCommitted:
    session_id = str(uuid.uuid4())
    return SessionCommitted(
        data=SessionCommittedData(
            session_id=session_id,
            leader_epoch=epoch,
            input_seq=MAX_SEQ,  # after every job it names (the fold voids a decision about a later one)
            config_version=0,
            now=datetime.now(UTC),
            input_digest="0" * 64,
            decisions=list(decisions),
        ),
        **_envelope(session_id),
    )


def bind(task: str, node: str = "n1") -> BindDecision:
    return BindDecision(task=f"ns/train-worker-{task}", job="ns/train", node=node)


@asynccontextmanager
async def running_sim(
    kafka_bootstrap: str, database_url: str, topics: Topics, *, copies: int = 1
) -> AsyncIterator[None]:
    tasks = [
        asyncio.create_task(
            run_sim_service(
                SimClusterSettings(sim_bind_delay=0.2, sim_evict_delay=0.2, sim_poll_interval=0.05),
                kafka=KafkaAccess(kafka_bootstrap),
                database=DatabaseAccess(database_url),
                topics=topics,
                cluster=CLUSTER,
            )
        )
        for _ in range(copies)
    ]
    try:
        yield
    finally:
        await stopped_all(tasks)


async def submit(kafka_bootstrap: str, topics: Topics, events: Sequence[Any]) -> None:
    await produce(kafka_bootstrap, topics, list(events))


async def projected_cluster(
    kafka_bootstrap: str, topics: Topics, conn: asyncpg.Connection, annotations: dict[str, str] | None = None
) -> None:
    """Submit the job and its node and wait until both are projected: topics are ordered one by one,
    so a session produced earlier could be folded before the job exists."""
    await submit(kafka_bootstrap, topics, cluster_events(annotations))
    await wait_for(conn, "SELECT count(*) FROM tasks", 2)
    await wait_for(conn, "SELECT count(*) FROM nodes", 1)


async def test_accepted_bindings_start_and_voided_ones_are_never_executed(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    async with (
        running_projector(kafka_bootstrap, database_url, topics),
        running_sim(kafka_bootstrap, database_url, topics),
    ):
        conn = await asyncpg.connect(database_url)
        try:
            await projected_cluster(kafka_bootstrap, topics, conn)
            # worker-1's binding names a node that does not exist: the fold voids it.
            await submit(kafka_bootstrap, topics, [session(bind("0"), bind("1", node="ghost"))])
            await wait_for(conn, STATUS, "Running", "ns/train-worker-0")
            voided = await conn.fetchval("SELECT voided FROM sessions")
            # The voided task stays Pending and nothing was ever reported for it.
            assert await conn.fetchval(STATUS, "ns/train-worker-1") == "Pending"
            assert await conn.fetchval(STARTED, "ns/train-worker-1") == 0
            assert await conn.fetchval(STARTED, "ns/train-worker-0") == 1
        finally:
            await conn.close()
    assert voided == 1


async def test_an_eviction_finishes_the_task_as_evicted_and_it_returns_to_pending(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    async with (
        running_projector(kafka_bootstrap, database_url, topics),
        running_sim(kafka_bootstrap, database_url, topics),
    ):
        conn = await asyncpg.connect(database_url)
        try:
            await projected_cluster(kafka_bootstrap, topics, conn)
            await submit(kafka_bootstrap, topics, [session(bind("0"), bind("1"))])
            await wait_for(conn, "SELECT count(*) FROM tasks WHERE status = 'Running'", 2)
            evict = EvictDecision(
                task="ns/train-worker-1", job="ns/train", node="n1", action="preempt",
                preemptor_job="ns/other", preemptor_task="ns/other-worker-0", rule="priority",
            )  # fmt: skip
            await submit(kafka_bootstrap, topics, [session(evict)])
            await wait_for(conn, FINISHED, 1, "ns/train-worker-1")
            await wait_for(conn, STATUS, "Pending", "ns/train-worker-1")
            row = await conn.fetchrow(
                "SELECT data::jsonb ->> 'outcome' AS outcome, data::jsonb ->> 'node' AS node FROM event_log"
                " WHERE type = 'tephra.task.finished.v1' AND subject = 'task/ns/train-worker-1'"
            )
            assert await conn.fetchval(STATUS, "ns/train-worker-0") == "Running"
        finally:
            await conn.close()
    assert (row["outcome"], row["node"]) == ("evicted", "n1")


async def test_a_job_with_a_sim_runtime_succeeds_after_it(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    async with (
        running_projector(kafka_bootstrap, database_url, topics),
        running_sim(kafka_bootstrap, database_url, topics),
    ):
        conn = await asyncpg.connect(database_url)
        try:
            await projected_cluster(kafka_bootstrap, topics, conn, {"tephra.dev/sim-runtime": "300ms"})
            await submit(kafka_bootstrap, topics, [session(bind("0"), bind("1"))])
            await wait_for(conn, "SELECT phase FROM jobs WHERE id = 'ns/train'", "Completed")
            outcomes = await conn.fetch(
                "SELECT data::jsonb ->> 'outcome' AS outcome FROM event_log"
                " WHERE type = 'tephra.task.finished.v1'"
            )
        finally:
            await conn.close()
    assert [r["outcome"] for r in outcomes] == ["succeeded", "succeeded"]


async def test_two_simulators_racing_on_the_same_projection_execute_each_decision_once(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    # Both derive the same event ids from the projection, so the archive keeps one of each:
    # the same holds for one simulator restarted before its observations were projected.
    async with (
        running_projector(kafka_bootstrap, database_url, topics),
        running_sim(kafka_bootstrap, database_url, topics, copies=2),
    ):
        conn = await asyncpg.connect(database_url)
        try:
            await projected_cluster(kafka_bootstrap, topics, conn)
            await submit(kafka_bootstrap, topics, [session(bind("0"), bind("1"))])
            await wait_for(conn, "SELECT count(*) FROM tasks WHERE status = 'Running'", 2)
            await wait_for(conn, "SELECT count(*) FROM event_log WHERE type = 'tephra.task.started.v1'", 2)
            archived = {
                r["event_id"]
                for r in await conn.fetch(
                    "SELECT event_id FROM event_log WHERE type = 'tephra.task.started.v1'"
                )
            }
        finally:
            await conn.close()
    published = [decode(value) for value, _, _ in await read_topic(kafka_bootstrap, topics.observations)]
    started = [e for e in published if isinstance(e, TaskStarted)]
    assert len(started) >= 2
    assert {e.id for e in started} == archived


async def test_the_poll_reads_only_rows_with_work(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await apply_migrations(conn)
        # Tiny tables favour sequential scans; without them the planner must find an index that
        # matches each branch's predicate, or fall back to one anyway.
        await conn.execute("SET enable_seqscan = off")
        plan = "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN {SIM_WORK_QUERY}"))
    finally:
        await conn.close()
    assert "transitional_tasks" in plan
    assert "jobs_sim_runtime" in plan
    assert "Seq Scan on tasks" not in plan
    assert "Seq Scan on jobs" not in plan
    assert SIM_RUNTIME_ANNOTATION in SIM_WORK_QUERY
