"""Shared helpers for the projector tests and benches: throw-away databases, encoded records, producing.

Light on purpose: the benches import it (no pytest, no scheduler, no numpy).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit, urlunsplit

import asyncpg
from aiokafka import AIOKafkaProducer

from events.models import Event
from events.serde import encode
from events.topics import Topics, kafka_key, topic_for
from projector.migrate import apply_migrations
from projector.writer import InboundRecord
from tests.projector.streams import CLUSTER

__all__ = ["create_database", "drop_database", "produce", "produce_raw", "records", "reset_schema"]


def _with_database(dsn: str, database: str) -> str:
    return urlunsplit(urlsplit(dsn)._replace(path=f"/{database}"))


async def create_database(admin_dsn: str) -> str:
    name = f"p_{secrets.token_hex(8)}"
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    return _with_database(admin_dsn, name)


async def drop_database(admin_dsn: str, dsn: str) -> None:
    name = urlsplit(dsn).path.lstrip("/")
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def reset_schema(conn: asyncpg.Connection) -> None:
    """An empty, migrated schema (cheaper than a new database per example)."""
    await conn.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    await apply_migrations(conn)


def records(
    events: Iterable[Event], topic: str = "t", partition: int = 0, start: int = 0
) -> list[InboundRecord]:
    return [InboundRecord(topic, partition, start + i, encode(e)) for i, e in enumerate(events)]


async def produce(bootstrap: str, topics: Topics, items: Sequence[Event | tuple[str, bytes]]) -> None:
    """Events to their topics; (topic, raw bytes) pairs as they are."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        futures = []
        for item in items:
            if isinstance(item, tuple):
                futures.append(await producer.send(item[0], value=item[1], key=CLUSTER.encode()))
            else:
                futures.append(
                    await producer.send(topic_for(item, topics), value=encode(item), key=kafka_key(item))
                )
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def produce_raw(bootstrap: str, items: Sequence[tuple[str, bytes]]) -> None:
    """(topic, raw bytes) pairs as they are, in order, of any size up to 8 MiB."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", max_request_size=8 * 1024 * 1024)
    await producer.start()
    try:
        futures = [await producer.send(topic, value=value, key=CLUSTER.encode()) for topic, value in items]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
