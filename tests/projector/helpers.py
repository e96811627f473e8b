"""Shared helpers for the projector tests: throw-away databases and encoded records."""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from events.models import Event
from events.serde import encode
from projector.migrate import apply_migrations
from projector.writer import InboundRecord

__all__ = ["create_database", "drop_database", "records", "reset_schema"]


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
