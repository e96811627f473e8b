"""Builders and running services for the scheduler-service tests."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaProducer
from opentelemetry.trace import Tracer

from events.models import (
    Event,
    JobSubmitted,
    JobSubmittedData,
    NodeReported,
    NodeReportedData,
    QueueUpserted,
    QueueUpsertedData,
    TaskSpec,
)
from events.serde import encode
from events.signing import EventSigner, SigningKey
from events.topics import Topics, kafka_key, topic_for
from projector.connections import DatabaseAccess, KafkaAccess
from projector.migrate import apply_migrations
from projector.service import ProjectorMetrics, run_projector
from projector.settings import ProjectorSettings
from scheduler.core.config import config_problem
from scheduler.service.main import run_scheduler
from scheduler.service.settings import SchedulerSettings
from scheduler.service.telemetry import SchedulerMetrics

CLUSTER = "default"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _common(subject: str) -> dict[str, Any]:
    return {
        "id": str(uuid.uuid4()),
        "source": "tests://service",
        "time": datetime.now(UTC),
        "subject": subject,
    }


def queue(name: str = "default", **fields: Any) -> QueueUpserted:
    return QueueUpserted(data=QueueUpsertedData(name=name, **fields), **_common(f"queue/{name}"))


def node(name: str, cpu: str = "8", memory: str = "32Gi", pods: int = 110, **fields: Any) -> NodeReported:
    return NodeReported(
        data=NodeReportedData(name=name, allocatable={"cpu": cpu, "memory": memory, "pods": pods}, **fields),
        **_common(f"node/{name}"),
    )


def job(
    name: str,
    replicas: int = 1,
    cpu: str = "1",
    *,
    queue_name: str = "default",
    namespace: str = "ns",
    **fields: Any,
) -> JobSubmitted:
    return JobSubmitted(
        data=JobSubmittedData(
            namespace=namespace,
            name=name,
            queue=queue_name,
            tasks=[TaskSpec(name="worker", replicas=replicas, resources={"cpu": cpu, "memory": "1Gi"})],
            **fields,
        ),
        **_common(f"job/{namespace}/{name}"),
    )


async def produce(
    bootstrap: str, topics: Topics, events: Sequence[Event], headers: list[tuple[str, bytes]] | None = None
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        sent = [
            await producer.send(topic_for(e, topics), encode(e), key=kafka_key(e), headers=headers or [])
            for e in events
        ]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


async def stopped(task: asyncio.Task[Any], within: float = 30) -> None:
    """Wait for a task told to stop (cancelled or signalled); fail clearly if it outlives ``within``.

    Not ``asyncio.wait_for``: on a timeout it cancels again and waits without bound.
    """
    done, _ = await asyncio.wait({task}, timeout=within)
    if not done:
        pytest.fail(f"task {task.get_name()} still runs {within} s after it was told to stop")
    if not task.cancelled():
        task.result()  # re-raise what the service failed with


async def stopped_all(tasks: Sequence[asyncio.Task[Any]]) -> None:
    """Cancel every task, then wait for each to stop (re-raising what one failed with)."""
    for task in tasks:
        task.cancel()
    for task in tasks:
        await stopped(task)


@asynccontextmanager
async def running_projector(
    kafka_bootstrap: str,
    database_url: str,
    topics: Topics,
    settings: ProjectorSettings | None = None,
    *,
    cluster: str = CLUSTER,
    checkpoint_key: SigningKey | None = None,
    database: DatabaseAccess | None = None,
) -> AsyncIterator[ProjectorMetrics]:
    """The projector service of ``cluster`` (``settings`` default: a 5 ms linger), stopped on exit;
    it publishes signed checkpoints when given a ``checkpoint_key``.

    ``database``: how the service connects (default: as the URL says); the test's migration uses the URL.
    """
    conn = await asyncpg.connect(database_url)
    try:
        await apply_migrations(conn)  # so the test can read the tables at once; the service's run is a no-op
    finally:
        await conn.close()
    metrics = ProjectorMetrics()
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_projector(
            ProjectorSettings(projector_linger_ms=5) if settings is None else settings,
            kafka=KafkaAccess(kafka_bootstrap),
            database=database or DatabaseAccess(database_url),
            topics=topics,
            cluster=cluster,
            stop=stop,
            metrics=metrics,
            config_check=config_problem,  # as api composes it
            checkpoint_key=checkpoint_key,
        )
    )
    try:
        yield metrics
    finally:
        stop.set()
        await stopped(task)


@asynccontextmanager
async def running_scheduler(
    kafka_bootstrap: str,
    database_url: str,
    topics: Topics,
    *,
    tracer: Tracer | None = None,
    database: DatabaseAccess | None = None,
    signer: EventSigner | None = None,
    enrol: bool | None = None,
    **settings: Any,
) -> AsyncIterator[SchedulerMetrics]:
    """The scheduler service of ``CLUSTER``; without ``signer`` it makes a key and enrols it."""
    metrics = SchedulerMetrics()
    task = asyncio.create_task(
        run_scheduler(
            SchedulerSettings(**settings),
            kafka=KafkaAccess(kafka_bootstrap),
            database=database or DatabaseAccess(database_url),
            topics=topics,
            cluster=CLUSTER,
            metrics=metrics,
            tracer=tracer,
            signer=signer,
            enrol=enrol,
        )
    )
    try:
        yield metrics
    finally:
        task.cancel()
        await stopped(task)


async def wait_for(
    conn: asyncpg.Connection, query: str, expected: Any, *args: Any, within: float = 30
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while (got := await conn.fetchval(query, *args)) != expected:
        if loop.time() > deadline:
            pytest.fail(f"{query!r} is {got!r}, expected {expected!r} after {within} s")
        await asyncio.sleep(0.05)


async def until(condition: Callable[[], bool], what: str, within: float = 30) -> None:
    """Poll an in-process condition (a metrics counter, a flag) until it holds; fail naming ``what``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not condition():
        if loop.time() > deadline:
            pytest.fail(f"{what}: still not so after {within} s")
        await asyncio.sleep(0.01)


async def first_session_that_saw(conn: asyncpg.Connection, seq: int) -> int | None:
    """The seq of the first session whose input holds the event at ``seq``.

    Not the first session committed after it: one already running when the
    event was archived commits after it without having seen it.
    """
    value = await conn.fetchval("SELECT min(seq) FROM sessions WHERE input_seq >= $1", seq)
    return None if value is None else int(value)
