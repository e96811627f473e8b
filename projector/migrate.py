"""Versioned SQL migrations, applied by ``tephra migrate``, idempotently, under a lock.

Files are ``projector/migrations/NNNN_name.sql``, applied in version order,
each once.  All pending migrations run in one transaction that first takes a
transaction-scoped advisory lock, so two migrations starting at once are
safe: the second waits, then finds nothing left to do.  The services do not
migrate: they check the schema's version (:func:`require_schema`) and stop,
naming ``tephra migrate``, when it is older than they need.  The embedded
stack (``tephra up``, ``tephra demo``) runs :func:`migrate_database` itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Final

import asyncpg

from projector.errors import MigrationError, SchemaOutdatedError
from projector.roles import Login, Role, apply_grants

__all__ = [
    "MIGRATION_LOCK",
    "Migration",
    "apply_migrations",
    "available_migrations",
    "migrate_database",
    "require_schema",
    "schema_version",
]

#: Advisory lock key for migrations (any constant no other component uses).
MIGRATION_LOCK: Final = 0x7E_9A_0001
_FILE = re.compile(r"(?P<version>\d{4})_(?P<name>[a-z0-9_]+)\.sql")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def available_migrations() -> list[Migration]:
    """Every migration shipped with the package, in version order."""
    found: list[Migration] = []
    for entry in resources.files("projector.migrations").iterdir():
        match = _FILE.fullmatch(entry.name)
        if match is None:
            continue
        found.append(Migration(int(match["version"]), match["name"], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise MigrationError(versions[-1] if versions else 0, "?", f"versions must be 1..N, found {versions}")
    return found


async def apply_migrations(conn: asyncpg.Connection) -> list[int]:
    """Bring the schema up to date; return the versions applied now (empty if none)."""
    migrations = available_migrations()
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}
        applied: list[int] = []
        for migration in migrations:
            if migration.version in done:
                continue
            try:
                await conn.execute(migration.sql)
            except asyncpg.PostgresSyntaxError as exc:
                raise MigrationError(migration.version, migration.name, str(exc)) from exc
            await conn.execute(
                "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                migration.version,
                migration.name,
            )
            applied.append(migration.version)
        return applied


async def migrate_database(conn: asyncpg.Connection, logins: Mapping[Role, Login] | None = None) -> list[int]:
    """``tephra migrate``: the migrations, then (given ``logins``) the roles and their grants.

    One transaction: a failure part way leaves the database as it was.
    """
    async with conn.transaction():
        applied = await apply_migrations(conn)
        if logins is not None:
            await apply_grants(conn, logins)
    return applied


async def schema_version(conn: asyncpg.Connection) -> int:
    """The newest migration applied (0: none, or no schema at all)."""
    if not await conn.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL"):
        return 0
    return int(await conn.fetchval("SELECT coalesce(max(version), 0) FROM schema_migrations"))


async def require_schema(conn: asyncpg.Connection) -> int:
    """The schema's version; :class:`SchemaOutdatedError` when it is older than the shipped migrations."""
    needed = available_migrations()[-1].version
    found = await schema_version(conn)
    if found < needed:
        raise SchemaOutdatedError(found, needed)
    return found
