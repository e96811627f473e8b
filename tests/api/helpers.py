"""Shared helpers for the api tests (and the kube tests that read topics)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from api.endpoints import Endpoints
from api.settings import TephraSettings
from api.stack import SERVICES, run_services
from projector.migrate import apply_migrations
from tests.service.helpers import stopped

__all__ = ["live_stack", "read_topic"]


async def read_topic(
    bootstrap: str, topic: str, within: float = 60
) -> list[tuple[bytes, list[tuple[str, bytes]], bytes]]:
    """Every record ``topic`` holds now, from the start: read up to its end offsets, within ``within`` s."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        await consumer.topics()  # fetches the metadata
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        if not partitions:
            return []
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        out = []
        while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
            if loop.time() > deadline:
                pytest.fail(
                    f"{topic}: {len(out)} records read, the end offsets {ends} not reached in {within} s"
                )
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                out.extend((r.value, list(r.headers), r.key) for r in records)
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
