"""Shared helpers for the api tests (and the kube tests that read topics)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from api.endpoints import Endpoints
from api.settings import TephraSettings
from api.stack import SERVICES, run_services
from projector.migrate import apply_migrations
from tests.service.helpers import stopped

__all__ = ["live_stack", "read_topic"]

_END_MARKER = "tests.api.helpers.read_topic: end "


async def read_topic(
    bootstrap: str, topic: str, within: float = 60
) -> list[tuple[bytes, list[tuple[str, bytes]], bytes]]:
    """Every record ``topic`` holds now, from the start (call it once nothing consumes the topic).

    An end marker is appended to each partition and the topic is read up to the markers: not up to
    the end offsets (Tansu reports them wrong, docs/development.md), nor until a quiet second (a
    slow fetch under load is not the end of the topic).
    """
    marker = f"{_END_MARKER}{uuid.uuid4()}".encode()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        partitions = sorted(await producer.partitions_for(topic))
        await asyncio.gather(*[await producer.send(topic, marker, partition=p) for p in partitions])
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        reading = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(reading)
        await consumer.seek_to_beginning(*reading)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        out = []
        while reading:
            if loop.time() > deadline:
                pytest.fail(f"{topic}: no end marker on {reading} after {within} s ({len(out)} records read)")
            batch = await consumer.getmany(*reading, timeout_ms=500)
            for partition, records in batch.items():
                for r in records:
                    if r.value == marker:
                        reading.remove(partition)
                        break
                    if not (r.value or b"").startswith(_END_MARKER.encode()):  # an earlier call's marker
                        out.append((r.value, list(r.headers), r.key))
        return out
    finally:
        await consumer.stop()


@asynccontextmanager
async def live_stack(endpoints: Endpoints) -> AsyncIterator[None]:
    """Projector, scheduler and simulated cluster as ``tephra up`` runs them, with short periods.

    The schema is migrated before the services start, so a test's own queries can run at once.
    """
    conn = await asyncpg.connect(endpoints.database_url)
    try:
        await apply_migrations(conn)
    finally:
        await conn.close()
    settings = TephraSettings(schedule_period=0.2, sim_bind_delay=0.1, sim_evict_delay=0.1)
    services = asyncio.create_task(run_services(settings, endpoints, tuple(SERVICES)))
    try:
        yield
    finally:
        services.cancel()
        await stopped(services)
