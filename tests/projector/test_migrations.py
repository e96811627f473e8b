"""Migration 0004: what it changes is used, on servers with and without lz4."""

from __future__ import annotations

import json

import asyncpg
import pytest

from projector.migrate import apply_migrations

pytestmark = pytest.mark.integration


async def test_snapshots_are_compressed_with_lz4_where_the_server_has_it(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await apply_migrations(conn)
        has_lz4 = await conn.fetchval(
            "SELECT 'lz4' = ANY (enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
        )
        method = await conn.fetchval(
            "SELECT attcompression::text FROM pg_attribute"
            " WHERE attrelid = 'state_snapshots'::regclass AND attname = 'state'"
        )
        assert method == ("l" if has_lz4 else "")  # "": the server default (pglz)
        # A large document (compressed either way) reads back as written.
        state = json.dumps({"sessions": [{"session_id": f"s-{i}", "seq": i} for i in range(20_000)]})
        await conn.execute("INSERT INTO state_snapshots (seq, state) VALUES (1, $1::json)", state)
        assert await conn.fetchval("SELECT state::text FROM state_snapshots WHERE seq = 1") == state
        assert await conn.fetchval(
            "SELECT pg_column_size(state) < octet_length(state::text) FROM state_snapshots"
        )
    finally:
        await conn.close()
