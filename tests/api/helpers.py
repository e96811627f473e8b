"""Shared helpers for the api tests (and the kube tests that read topics)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from aiokafka import AIOKafkaConsumer

from api.endpoints import Endpoints
from api.settings import TephraSettings
from api.stack import SERVICES, run_services
from projector.migrate import apply_migrations
from tests.service.helpers import stopped

__all__ = ["live_stack", "read_topic"]


async def read_topic(
    bootstrap: str, topic: str, expect: int
) -> list[tuple[bytes, list[tuple[str, bytes]], bytes]]:
    """Records of ``topic`` from the start; stops at ``expect`` records or after a quiet second."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None
    )
    await consumer.start()
    try:
        out = []
        while len(out) < expect or expect == 0:
            batch = await consumer.getmany(timeout_ms=1000)
            if not batch:
                break
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
