"""The ``keyring`` table (migration 0014): read by the projector, written by ``tephra producer``.

Each row names a producer, its Ed25519 public key, the event types it may
produce and, optionally, the queues and namespaces its events may touch
(projector.trust applies them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

import asyncpg

from events.models import EVENT_TYPES
from events.signing import SigningKeyError, parse_public_key
from projector.trust import KeyringEntry

__all__ = ["NAME", "add_producer", "keyring_problem", "load_keyring", "remove_producer"]

#: A keyring name (the ``NAME`` of a principal ``NAME`` or ``NAME:SUBJECT``).
NAME: Final = re.compile(r"[A-Za-z0-9._@-]{1,128}", re.ASCII)
_SELECT: Final = "SELECT name, public_key, may, queues, namespaces FROM keyring ORDER BY name"


async def load_keyring(conn: asyncpg.Connection) -> dict[str, KeyringEntry]:
    """Every producer of the keyring, by name."""
    return {
        row["name"]: KeyringEntry(
            name=row["name"],
            public_key=row["public_key"],
            may=frozenset(row["may"]),
            queues=frozenset(row["queues"]),
            namespaces=frozenset(row["namespaces"]),
        )
        for row in await conn.fetch(_SELECT)
    }


def keyring_problem(entry: KeyringEntry) -> str | None:
    """What makes ``entry`` unusable, with how to fix it; None when it is fine."""
    if not NAME.fullmatch(entry.name):
        return f"producer name {entry.name!r}: use 1-128 of [A-Za-z0-9._@-] (no ':')"
    try:
        parse_public_key(entry.public_key)
    except SigningKeyError as err:
        return f"{err} (print one with `tephra key public KEY_FILE`)"
    if not entry.may:
        return "name at least one event type with --may"
    unknown = sorted(entry.may - EVENT_TYPES.keys())
    if unknown:
        return f"unknown event types {unknown}: the types are {list(EVENT_TYPES)}"
    return None


async def add_producer(conn: asyncpg.Connection, entry: KeyringEntry) -> None:
    """Add ``entry`` to the keyring, replacing a producer of the same name."""
    problem = keyring_problem(entry)
    if problem is not None:
        raise ValueError(problem)
    await conn.execute(
        "INSERT INTO keyring (name, public_key, may, queues, namespaces) VALUES ($1, $2, $3, $4, $5)"
        " ON CONFLICT (name) DO UPDATE SET public_key = EXCLUDED.public_key, may = EXCLUDED.may,"
        " queues = EXCLUDED.queues, namespaces = EXCLUDED.namespaces, added_at = now()",
        entry.name,
        entry.public_key,
        _sorted(entry.may),
        _sorted(entry.queues),
        _sorted(entry.namespaces),
    )


async def remove_producer(conn: asyncpg.Connection, name: str) -> bool:
    """Remove ``name`` from the keyring; False when it was not there."""
    status: str = await conn.execute("DELETE FROM keyring WHERE name = $1", name)
    return status != "DELETE 0"


def _sorted(values: Iterable[str]) -> list[str]:
    return sorted(values)
