"""Tamper evidence: editing or deleting any one archived row (any column) is reported with that row's seq."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.canonical import GENESIS_HASH
from events.serde import canonical_json
from projector.archive import row_digest, stored_members
from projector.reconstruct import archived_events, verify_chain
from projector.writer import BatchWriter
from tests.projector.helpers import create_database, drop_database, records, reset_schema
from tests.projector.streams import CLUSTER, event_stream

pytestmark = pytest.mark.integration

_COUNT = 120
_EDITS = {
    "data": "UPDATE event_log SET data = (data::jsonb || '{\"x\": 1}')::json WHERE seq = $1",
    "data-whitespace": "UPDATE event_log SET data = (' ' || data::text)::json WHERE seq = $1",
    "type": "UPDATE event_log SET type = type || 'x' WHERE seq = $1",
    "time": "UPDATE event_log SET time = time + interval '1 millisecond' WHERE seq = $1",
    "subject": "UPDATE event_log SET subject = coalesce(subject, '') || 's' WHERE seq = $1",
    "source": "UPDATE event_log SET source = 'tephra://forged' WHERE seq = $1",
    "event_id": "UPDATE event_log SET event_id = event_id || '-forged' WHERE seq = $1",
    "cluster": "UPDATE event_log SET cluster = 'other' WHERE seq = $1",
    "hash": "UPDATE event_log SET hash = sha256(hash) WHERE seq = $1",
    "prev_hash": "UPDATE event_log SET prev_hash = sha256(prev_hash) WHERE seq = $1",
    # Hashed in chain format 2, and checked against the data besides: `replay explain` finds a
    # job's events by it.
    "job": "UPDATE event_log SET job = coalesce(job, 'ns/job') || '-x' WHERE seq = $1",
    # Where and when the row arrived: hashed in chain format 2.
    "topic": "UPDATE event_log SET topic = topic || 'x' WHERE seq = $1",
    "partition": "UPDATE event_log SET partition = partition + 1 WHERE seq = $1",
    "kafka_offset": "UPDATE event_log SET kafka_offset = kafka_offset + 1 WHERE seq = $1",
    "recorded_at": "UPDATE event_log SET recorded_at = recorded_at + interval '1 microsecond' WHERE seq = $1",
    "traceparent": "UPDATE event_log SET traceparent = '00-' || repeat('1', 32) || '-' || repeat('2', 16)"
    " || '-01' WHERE seq = $1",
    # Claiming format 1 for a row of format 2 would take its other columns out of the hash.
    "chain_format": "UPDATE event_log SET chain_format = 1 WHERE seq = $1",
}


@pytest.fixture(scope="module")
def archive_dsn(postgres_admin_dsn: str) -> Iterator[str]:
    dsn = asyncio.run(create_database(postgres_admin_dsn))
    yield dsn
    asyncio.run(drop_database(postgres_admin_dsn, dsn))


async def _fresh_archive(conn: asyncpg.Connection) -> int:
    await reset_schema(conn)
    writer = await BatchWriter.load(conn, consumer="c", cluster=CLUSTER)
    await writer.write(conn, records(event_stream(3, _COUNT)))
    return writer.state.seq


async def _tamper(dsn: str, edit: str, pick: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        last = await _fresh_archive(conn)
        seq = 1 + pick % last
        async with conn.transaction():
            if edit == "delete":
                await conn.execute("DELETE FROM event_log WHERE seq = $1", seq)
            else:
                await conn.execute(_EDITS[edit], seq)
        report = await verify_chain(conn)
        assert not report.ok, f"{edit} of seq {seq} went unnoticed"
        assert report.broken_seq == seq, report
        if edit == "delete":
            assert report.problem == ("tail-missing" if seq == last else "row-missing")
        # A range that ends before the tampered row still verifies.
        assert (await verify_chain(conn, 1, seq - 1)).ok
    finally:
        await conn.close()


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edit=st.sampled_from(["delete", *_EDITS]), pick=st.integers(0, 10_000))
def test_editing_or_deleting_any_row_names_its_seq(archive_dsn: str, edit: str, pick: int) -> None:
    asyncio.run(_tamper(archive_dsn, edit, pick))


async def test_an_untouched_archive_verifies_and_hashes_the_canonical_json(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        last = await _fresh_archive(conn)
        report = await verify_chain(conn)
        assert report.ok
        assert report.checked == last
        assert (report.first_seq, report.last_seq) == (1, last)
        assert (await verify_chain(conn, 10, 20)).checked == 11
        # The stored hash is sha256(prev_hash || '{"event":' || canonical_json(event) || the other
        # columns), chain format 2.
        prev = GENESIS_HASH
        async for seq, event in archived_events(conn):
            row = await conn.fetchrow("SELECT * FROM event_log WHERE seq = $1", seq)
            assert row["chain_format"] == 2
            assert bytes(row["hash"]) == row_digest(prev, canonical_json(event), stored_members(row))
            prev = bytes(row["hash"])
    finally:
        await conn.close()
