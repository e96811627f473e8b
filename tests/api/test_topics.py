"""Topics that take care of themselves: created at start (TEPHRA_CREATE_TOPICS), or waited for and picked up.

Every test uses a prefix no topic has yet, so the broker starts without the
deployment's topics, as a fresh Kafka does.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import asyncpg
import pytest
from aiokafka.admin import AIOKafkaAdminClient

from api.embedded import create_topics
from api.endpoints import Endpoints
from api.settings import TephraSettings
from api.stack import SERVICES, ensure_topics, run_services
from events.topics import Topics
from projector.connections import KafkaAccess
from projector.migrate import apply_migrations
from tests.api.test_live_scheduling import NODE, SETUP, submit, vcjob
from tests.service.helpers import stopped, stopped_all, until, wait_for

pytestmark = pytest.mark.integration

PHASE = "SELECT phase FROM jobs WHERE id = $1"


def _fresh() -> Topics:
    return Topics(f"fresh-{secrets.token_hex(4)}")


async def _partitions(bootstrap: str, topics: Topics) -> dict[str, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        present = set(await admin.list_topics()) & set(topics.all())
        described = await admin.describe_topics(sorted(present)) if present else []
    finally:
        await admin.close()
    return {d["topic"]: len(d["partitions"]) for d in described if d["error_code"] == 0}


async def test_missing_topics_are_created_and_existing_ones_left_alone(kafka_bootstrap: str) -> None:
    topics = _fresh()
    # One of them exists already, with a partition count of its operator's choosing.
    await create_topics(kafka_bootstrap, [topics.decisions], partitions=3)
    settings = TephraSettings(topic_partitions=2)

    await ensure_topics(settings, KafkaAccess(kafka_bootstrap), topics)
    await ensure_topics(settings, KafkaAccess(kafka_bootstrap), topics)  # again: nothing to do, no error

    assert await _partitions(kafka_bootstrap, topics) == {
        topics.intents: 2,
        topics.observations: 2,
        topics.decisions: 3,
        topics.rejected: 2,
        topics.checkpoints: 2,
    }


async def test_with_create_topics_off_nothing_is_created(kafka_bootstrap: str) -> None:
    topics = _fresh()
    await ensure_topics(TephraSettings(create_topics=False), KafkaAccess(kafka_bootstrap), topics)
    assert await _partitions(kafka_bootstrap, topics) == {}


class _Waiting(logging.Handler):
    """The services' "waits for the topics" lines, as they are logged."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.who: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "waits for the topics" in record.getMessage():
            self.who.append(str(record.args[0]) if isinstance(record.args, tuple) else "")


@contextmanager
def _waiting_lines() -> Iterator[_Waiting]:
    handler = _Waiting()
    logger = logging.getLogger("projector.topic_watch")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


@asynccontextmanager
async def _services(
    settings: TephraSettings, endpoints: Endpoints, order: tuple[str, ...], waiting: _Waiting
) -> AsyncIterator[None]:
    """Start each service on its own, in ``order``; each one that reads waits for its topics first."""
    conn = await asyncpg.connect(endpoints.database_url)
    try:
        await apply_migrations(conn)
    finally:
        await conn.close()
    tasks: list[asyncio.Task[None]] = []
    try:
        for name in order:
            tasks.append(asyncio.create_task(run_services(settings, endpoints, (name,)), name=name))
            if name == "projector":  # the one that reads topics (the scheduler reads the archive)
                await until(
                    lambda: any("projector" in who for who in waiting.who),
                    "the projector logging that it waits for its topics",
                )
        yield
    finally:
        await stopped_all(tasks)


@pytest.mark.parametrize("order", list(itertools.permutations(SERVICES)), ids="-then-".join)
async def test_services_started_in_any_order_wait_for_topics_that_appear_later(
    kafka_bootstrap: str, database_url: str, order: tuple[str, ...]
) -> None:
    """TEPHRA_CREATE_TOPICS=false on a broker without the topics: nobody fails, and once they appear,
    in two steps (the decisions topic after a job was submitted), the job runs."""
    topics = _fresh()
    endpoints = Endpoints(kafka_bootstrap, database_url, topics, "default")
    settings = TephraSettings(
        create_topics=False,
        projector_topics_refresh=0.2,
        schedule_period=0.2,
        sim_bind_delay=0.1,
        sim_evict_delay=0.1,
    )
    with _waiting_lines() as waiting:
        async with _services(settings, endpoints, order, waiting):
            await create_topics(kafka_bootstrap, [topics.intents, topics.observations])
            await submit(endpoints, SETUP + "---\n" + NODE.format(name="n1"))
            await submit(endpoints, vcjob("late", replicas=1, gpu=0, priority="low"))
            await create_topics(kafka_bootstrap, [topics.decisions, topics.rejected])
            conn = await asyncpg.connect(database_url)
            try:
                await wait_for(conn, PHASE, "Running", "default/late", within=60)
            finally:
                await conn.close()


async def test_with_create_topics_on_the_services_create_them_with_the_set_partitions(
    kafka_bootstrap: str, database_url: str
) -> None:
    topics = _fresh()
    endpoints = Endpoints(kafka_bootstrap, database_url, topics, "default")
    settings = TephraSettings(topic_partitions=2, schedule_period=0.2, sim_bind_delay=0.1)
    with _waiting_lines() as waiting:
        # migrate_first: as `tephra up` does with its own database (the services do not migrate).
        services = asyncio.create_task(run_services(settings, endpoints, tuple(SERVICES), migrate_first=True))
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while len(await _partitions(kafka_bootstrap, topics)) < len(topics.all()):
                if loop.time() > deadline:
                    pytest.fail("the services did not create their topics within 30 s")
                await asyncio.sleep(0.05)
            conn = await asyncpg.connect(database_url)
            try:
                await submit(endpoints, SETUP + "---\n" + NODE.format(name="n1"))
                await submit(endpoints, vcjob("created", replicas=1, gpu=0, priority="low"))
                await wait_for(conn, PHASE, "Running", "default/created", within=60)
            finally:
                await conn.close()
        finally:
            services.cancel()
            await stopped(services)
    assert waiting.who == []
    assert await _partitions(kafka_bootstrap, topics) == dict.fromkeys(topics.all(), 2)
