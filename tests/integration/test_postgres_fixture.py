"""The ``database_url`` fixture: a real, empty database of its own for every test."""

from __future__ import annotations

import asyncpg
import pytest

pytestmark = pytest.mark.integration

_SEEN = pytest.StashKey[list[str]]()


@pytest.mark.parametrize("run", ["first", "second"])
async def test_each_test_gets_its_own_empty_database(
    run: str, database_url: str, postgres_admin_dsn: str, pytestconfig: pytest.Config
) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        mine = await conn.fetchval("SELECT current_database()")
        tables = await conn.fetchval(
            "SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
        )
        assert tables == 0, f"{run}: database {mine} is not empty"
        # The same name in every run: a shared database would fail here on the second run.
        await conn.execute("CREATE TABLE probe (id bigint PRIMARY KEY)")
        await conn.execute("INSERT INTO probe VALUES (1)")
    finally:
        await conn.close()

    admin = await asyncpg.connect(postgres_admin_dsn)
    try:
        assert mine != await admin.fetchval("SELECT current_database()")
        assert await admin.fetchval("SELECT to_regclass('public.probe')") is None
        # Databases of earlier tests in this run were dropped when they ended.
        earlier = pytestconfig.stash.setdefault(_SEEN, [])
        leftover = await admin.fetch(
            "SELECT datname FROM pg_database WHERE datname = any($1::text[])", earlier
        )
        assert leftover == []
        earlier.append(mine)
    finally:
        await admin.close()
