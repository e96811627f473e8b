"""Migrations 0004 to 0011: a database written before each upgrades, and what it changes is used."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Final

import asyncpg
import pytest

from events.models import Event
from projector import migrate
from projector.archive import job_of_data
from projector.fold import apply
from projector.migrate import apply_migrations
from projector.projection import load_projection
from projector.reconstruct import verify_chain
from projector.state import ClusterState
from projector.writer import BatchWriter
from replay.queries import verify_archive
from replay.store import _JOB_HISTORY, _SESSION_MARKER, _SESSION_MARKERS, _SESSION_PARTS, open_archive
from tests.projector.helpers import create_database, drop_database, records
from tests.projector.streams import CLUSTER, event_stream
from tests.service.helpers import node, queue

_FORMAT_1: Final = Path(__file__).resolve().parents[1] / "archive_reference" / "format1_gpu_cluster.jsonl"

pytestmark = pytest.mark.integration

_ARCHIVE_COLUMNS = (
    "seq, event_id, type, cluster, subject, source, time, data, topic, partition, kafka_offset,"
    " recorded_at, prev_hash, hash"
)


@asynccontextmanager
async def _new_and_old(database_url: str, admin_dsn: str) -> AsyncIterator[tuple[asyncpg.Connection, ...]]:
    """Connections to the test's database and to a second, fresh one (dropped afterwards)."""
    new = await asyncpg.connect(database_url)
    old_dsn = await create_database(admin_dsn)
    old = await asyncpg.connect(old_dsn)
    try:
        yield new, old
    finally:
        await old.close()
        await new.close()
        await drop_database(admin_dsn, old_dsn)


async def _migrate_up_to(
    conn: asyncpg.Connection, version: int, monkeypatch: pytest.MonkeyPatch
) -> list[int]:
    """Apply only the shipped migrations up to ``version``, as a release before the next one did."""
    shipped = migrate.available_migrations()
    monkeypatch.setattr(migrate, "available_migrations", lambda: [m for m in shipped if m.version <= version])
    try:
        return await apply_migrations(conn)
    finally:
        monkeypatch.undo()


async def test_an_archive_from_before_0004_gets_the_job_column_the_writer_writes(
    database_url: str, postgres_admin_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _new_and_old(database_url, postgres_admin_dsn) as (new, old):
        await apply_migrations(new)
        writer = await BatchWriter.load(new, consumer="c", cluster=CLUSTER)
        await writer.write(new, records(event_stream(5, 600)))
        written = {r["seq"]: r["job"] for r in await new.fetch("SELECT seq, job FROM event_log")}
        assert sum(job is not None for job in written.values()) > 100

        # The same archive rows in a database migrated only up to 0003.
        assert await _migrate_up_to(old, 3, monkeypatch) == [1, 2, 3]
        rows = await new.fetch(f"SELECT {_ARCHIVE_COLUMNS} FROM event_log ORDER BY seq")
        await old.copy_records_to_table(
            "event_log", records=[tuple(r) for r in rows], columns=_ARCHIVE_COLUMNS.split(", ")
        )
        await old.execute("UPDATE projection_meta SET seq = $1", writer.state.seq)

        shipped = migrate.available_migrations()
        assert await apply_migrations(old) == [m.version for m in shipped if m.version >= 4]
        await _hashed_as_written_now(old)
        upgraded = {r["seq"]: r["job"] for r in await old.fetch("SELECT seq, job FROM event_log")}
        assert upgraded == written
        assert (await verify_chain(old)).ok
        indexes = {
            r[0] for r in await old.fetch("SELECT indexname FROM pg_indexes WHERE tablename = 'event_log'")
        }
        assert "event_log_job" in indexes
        assert not indexes & {"event_log_job_submitted", "event_log_job_events"}


async def test_a_jobs_history_is_read_through_the_job_index(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await apply_migrations(conn)
        writer = await BatchWriter.load(conn, consumer="c", cluster=CLUSTER)
        await writer.write(conn, records(event_stream(5, 600)))
        await conn.execute("ANALYZE event_log")
        job = await conn.fetchval("SELECT job FROM event_log WHERE job IS NOT NULL LIMIT 1")
        # Small tables favour sequential scans; without them the planner must find the index.
        await conn.execute("SET enable_seqscan = off")
        plan = "\n".join(
            r[0]
            for r in await conn.fetch(
                f"EXPLAIN {_JOB_HISTORY}",
                job,
                "tephra.session.committed.v1",
                json.dumps({"job": job}),
                json.dumps({"preemptor_job": job}),
                "tephra.session.part.v1",
            )
        )
    finally:
        await conn.close()
    assert "event_log_job" in plan, plan
    assert "event_log_sessions" in plan, plan  # the sessions that may name the job (0006)


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


async def test_a_new_archive_is_not_analysed_as_empty(database_url: str) -> None:
    """Statistics taken of the empty table would say "empty" for good (reltuples 0; never
    analysed is -1): the duplicate check's generic plan, made in the projector's first
    seconds, was then a sequential scan for as long as the run lasted."""
    conn = await asyncpg.connect(database_url)
    try:
        await apply_migrations(conn)
        assert await conn.fetchval("SELECT reltuples FROM pg_class WHERE relname = 'event_log'") < 0
    finally:
        await conn.close()


# Every table the projector writes, in an order the copies below can follow.
_PROJECTION_TABLES = (
    "event_log", "consumer_offsets", "projection_meta", "queues", "priority_classes", "nodes", "jobs",
    "tasks", "bindings", "evictions", "sessions", "state_snapshots",
)  # fmt: skip


#: Columns a later migration dropped, as the old database gets them (0009 moved the buffers
#: to their own tables and marks the projection for its rebuild, which refills them).
_DROPPED: Final = {
    "session_parts": "'{}'::jsonb AS session_parts",
    "early_observations": "'{}'::jsonb AS early_observations",
}


async def _copy_rows(new: asyncpg.Connection, old: asyncpg.Connection, tables: tuple[str, ...]) -> None:
    """The rows of ``tables`` from ``new`` into ``old`` (projection_meta's singleton replaced),
    in the columns ``old`` has (a later migration's columns are left to that migration)."""
    await old.execute("DELETE FROM projection_meta")
    for table in tables:
        columns = [
            r[0]
            for r in await old.fetch(
                "SELECT column_name::text FROM information_schema.columns"
                " WHERE table_schema = 'public' AND table_name = $1 ORDER BY ordinal_position",
                table,
            )
        ]
        selected = ", ".join(_DROPPED.get(column, column) for column in columns)
        rows = await new.fetch(f"SELECT {selected} FROM {table}")
        if rows:
            await old.copy_records_to_table(table, records=[tuple(r) for r in rows], columns=columns)


async def _hashed_as_written_now(conn: asyncpg.Connection) -> None:
    """Mark the copied rows with the chain format they were hashed in: this release's writer
    wrote them (format 2), though the schema they were copied into predates the column, which
    migration 0011 fills with format 1, as an archive really written before it is."""
    await conn.execute("UPDATE event_log SET chain_format = 2")


async def _indexes(conn: asyncpg.Connection) -> set[str]:
    return {r[0] for r in await conn.fetch("SELECT indexname FROM pg_indexes WHERE schemaname = 'public'")}


async def _projected_stream(conn: asyncpg.Connection, events: list[Event] | None = None) -> BatchWriter:
    """A database at the newest migration with ``events`` (by default a stream's first 600)
    projected, and its writer."""
    await apply_migrations(conn)
    writer = await BatchWriter.load(conn, consumer="c", cluster=CLUSTER, snapshot_every=300)
    await writer.write(conn, records(event_stream(5, 600) if events is None else events))
    return writer


async def _carries_on(new: asyncpg.Connection, old: asyncpg.Connection, writer: BatchWriter) -> None:
    """The upgraded database, brought to the newest migration, loads and takes the rest of
    the stream like the new one."""
    await apply_migrations(old)
    await _hashed_as_written_now(old)
    upgraded = await BatchWriter.load(old, consumer="c", cluster=CLUSTER, snapshot_every=300)
    assert upgraded.state == writer.state
    rest = records(event_stream(5, 1_200))[600:]
    await upgraded.write(old, rest)
    await writer.write(new, rest)
    assert upgraded.state == writer.state
    assert await _transitional(old) == await _bound_or_releasing(old) == await _transitional(new)
    assert (await verify_chain(old)).ok


async def _transitional(conn: asyncpg.Connection) -> set[str]:
    return {r["id"] for r in await conn.fetch("SELECT id FROM transitional_tasks")}


async def _session_docs(conn: asyncpg.Connection) -> dict[str, object]:
    return {
        r["session_id"]: json.loads(r["doc"])
        for r in await conn.fetch("SELECT session_id, doc FROM sessions")
    }


async def _bound_or_releasing(conn: asyncpg.Connection) -> set[str]:
    return {r["id"] for r in await conn.fetch("SELECT id FROM tasks WHERE status IN ('Bound', 'Releasing')")}


async def test_a_projection_from_before_0005_upgrades_and_the_writer_carries_on(
    database_url: str, postgres_admin_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _new_and_old(database_url, postgres_admin_dsn) as (new, old):
        writer = await _projected_stream(new)
        assert await _bound_or_releasing(new)  # the stream leaves some tasks in transition

        # The same rows in a database migrated only up to 0004 (sessions.doc still jsonb).
        assert await _migrate_up_to(old, 4, monkeypatch) == [1, 2, 3, 4]
        await _copy_rows(new, old, _PROJECTION_TABLES)
        assert await old.fetchval("SELECT pg_typeof(doc)::text FROM sessions LIMIT 1") == "jsonb"

        assert await _migrate_up_to(old, 5, monkeypatch) == [5]
        assert await _transitional(old) == await _bound_or_releasing(old) == await _bound_or_releasing(new)
        assert await old.fetchval("SELECT pg_typeof(doc)::text FROM sessions LIMIT 1") == "json"
        assert await _session_docs(old) == await _session_docs(new)
        indexes = await _indexes(old)
        assert not indexes & {"event_log_subject", "bindings_task", "tasks_node", "tasks_sim_work"}
        fillfactor = await old.fetchval("SELECT reloptions FROM pg_class WHERE relname = 'tasks'")
        assert fillfactor == ["fillfactor=80"]

        await _carries_on(new, old, writer)


# The key columns migration 0006 gives the "C" collation.
_C_KEYS = {
    ("event_log", "event_id"), ("event_log", "type"), ("event_log", "job"), ("tasks", "id"),
    ("tasks", "job_id"), ("transitional_tasks", "id"), ("jobs", "id"), ("jobs", "queue"),
    ("jobs", "phase"), ("sessions", "session_id"), ("nodes", "name"),
}  # fmt: skip


async def _c_keys(conn: asyncpg.Connection) -> set[tuple[str, str]]:
    rows = await conn.fetch(
        "SELECT table_name::text, column_name::text FROM information_schema.columns"
        " WHERE table_schema = 'public' AND collation_name = 'C'"
    )
    return {(r[0], r[1]) for r in rows}


async def _generic_plan(conn: asyncpg.Connection, query: str, *args: object) -> str:
    """The plan PostgreSQL keeps for ``query`` once it plans it for any arguments (no sequential scans).

    A prepared statement, not ``EXPLAIN query`` with arguments: that plans for the values given.
    """
    await conn.execute("SET enable_seqscan = off; SET plan_cache_mode = force_generic_plan")
    name = f"probe_{secrets.token_hex(4)}"
    await conn.execute(f"PREPARE {name} AS {query}")
    # EXPLAIN EXECUTE takes no parameters: the arguments as literals.
    literals = ", ".join(
        str(a) if isinstance(a, int) else "'" + str(a).replace("'", "''") + "'" for a in args
    )
    return "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN EXECUTE {name}({literals})"))


async def test_a_database_from_before_0006_upgrades_and_sessions_are_found_through_their_index(
    database_url: str, postgres_admin_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _new_and_old(database_url, postgres_admin_dsn) as (new, old):
        writer = await _projected_stream(new)
        assert await _c_keys(new) == _C_KEYS | {
            ("early_observations", "job_id"),
            ("newest_pending", "job"),
            ("session_parts", "session_id"),
            ("state_snapshot_chunks", "section"),
        }

        # The same rows in a database migrated only up to 0005 (keys in the server's collation).
        assert await _migrate_up_to(old, 5, monkeypatch) == [1, 2, 3, 4, 5]
        assert not await _c_keys(old)
        await _copy_rows(new, old, (*_PROJECTION_TABLES, "transitional_tasks"))

        assert await _migrate_up_to(old, 6, monkeypatch) == [6]
        assert await _c_keys(old) == _C_KEYS
        indexes = await _indexes(old)
        assert "event_log_type_time" not in indexes
        assert "event_log_sessions" in indexes
        # This release's queries read columns later migrations add (event_log.principal, 0011).
        await apply_migrations(old)
        session_id = await old.fetchval("SELECT session_id FROM sessions ORDER BY seq LIMIT 1")
        for query, args in ((_SESSION_MARKERS, (1, 600)), (_SESSION_MARKER, (session_id,)),
                            (_SESSION_PARTS, (session_id,))):  # fmt: skip
            plan = await _generic_plan(old, query, *args)
            assert "event_log_sessions" in plan, plan
        await old.execute("RESET ALL")
        # A key in "C" compared with a column in the default collation: "C" is used, no error.
        joined = await old.fetchval(
            "SELECT count(*) FROM bindings b"
            " JOIN event_log j ON j.job = b.job_id AND j.type = 'tephra.job.submitted.v1'"
        )
        assert joined == await old.fetchval("SELECT count(*) FROM bindings") > 0

        await _carries_on(new, old, writer)


def _folded(events: list[Event], state: ClusterState | None = None) -> ClusterState:
    """``events`` folded with the fold (every one valid) onto ``state``, else the empty state."""
    state = ClusterState() if state is None else state
    for event in events:
        assert apply(state, state.seq + 1, event).applied
    return state


async def test_a_projection_from_before_0007_is_rebuilt_from_its_archive_with_retirement(
    database_url: str, postgres_admin_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 100 ms of event time between events and a TTL of 30 s: jobs finish and retire all along
    # the stream, and at its cut some have finished without having retired yet.  When they
    # finished is known only to the fold (a NodeRemoved, which names no job, can finish one);
    # the schema before 0007 has no column for it.
    events = event_stream(7, 1_200, ttl_seconds=30, step_ms=100)
    head, rest = events[:600], events[600:]
    async with _new_and_old(database_url, postgres_admin_dsn) as (new, old):
        await _projected_stream(new, head)
        assert await _migrate_up_to(old, 6, monkeypatch) == [1, 2, 3, 4, 5, 6]
        await _copy_rows(new, old, (*_PROJECTION_TABLES, "transitional_tasks"))  # without finished_at
        await old.execute("DELETE FROM state_snapshots")  # format 2 cannot predate 0007

        assert await apply_migrations(old) == [
            m.version for m in migrate.available_migrations() if m.version >= 7
        ]
        await _hashed_as_written_now(old)
        with pytest.raises(LookupError, match="rebuild"):
            await load_projection(old)  # the scheduler waits for the projector meanwhile
        upgraded = await BatchWriter.load(old, consumer="c", cluster=CLUSTER, snapshot_every=300)
        expected = _folded(head)
        waiting = {j.id for j in expected.jobs.values() if j.finished_at is not None}
        assert waiting, "the stream's cut should fall while finished jobs wait for their TTL"
        assert upgraded.state == expected
        assert await load_projection(old) == expected  # the rows, not only the writer's state
        assert {r["id"] for r in await old.fetch("SELECT id FROM tasks")} == set(expected.tasks)

        await upgraded.write(old, records(rest, start=600))
        assert upgraded.state == _folded(rest, expected)
        assert await load_projection(old) == upgraded.state
        assert waiting - set(upgraded.state.jobs), "the jobs waiting at the upgrade retire after it"
        assert (await verify_chain(old)).ok


async def test_an_archive_of_chain_format_1_keeps_its_hashes_and_goes_on_in_format_2(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An archive written before 0011 (tests/archive_reference: the gpu_cluster golden of then).
    lines = _FORMAT_1.read_text(encoding="utf-8").splitlines()
    old_rows = [json.loads(line) for line in lines if line]
    conn = await asyncpg.connect(database_url)
    try:
        assert await _migrate_up_to(conn, 9, monkeypatch) == list(range(1, 10))
        await conn.copy_records_to_table(
            "event_log",
            records=[
                (
                    r["seq"],
                    r["event_id"],
                    r["type"],
                    r["cluster"],
                    r["subject"],
                    r["source"],
                    datetime.fromisoformat(r["time"]),
                    r["data"],
                    "golden",
                    0,
                    r["seq"] - 1,
                    bytes.fromhex(r["prev_hash"]),
                    bytes.fromhex(r["hash"]),
                    job_of_data(r["type"], json.loads(r["data"])),
                )
                for r in old_rows
            ],
            columns=[*_ARCHIVE_COLUMNS.replace(" recorded_at,", "").split(", "), "job"],
        )
        last = old_rows[-1]["seq"]
        await conn.execute("UPDATE projection_meta SET seq = $1, rebuild = true", last)

        applied = await apply_migrations(conn)
        assert applied == [m.version for m in migrate.available_migrations() if m.version >= 10]
        formats = await conn.fetch("SELECT DISTINCT chain_format FROM event_log")
        assert [r["chain_format"] for r in formats] == [1]  # their hashes kept, nothing re-chained
        writer = await BatchWriter.load(conn, consumer="c", cluster="default")  # the rebuild folds them
        more = [queue("late").model_copy(update={"cluster": "default"}), node("late-node")]
        await writer.write(conn, records([e.model_copy(update={"cluster": "default"}) for e in more]))
        rows = await conn.fetch("SELECT seq, chain_format, prev_hash FROM event_log WHERE seq > $1", last - 1)
        assert [(r["seq"], r["chain_format"]) for r in rows] == [(last, 1), (last + 1, 2), (last + 2, 2)]
        assert bytes(rows[1]["prev_hash"]).hex() == old_rows[-1]["hash"]
        assert (await verify_chain(conn)).ok
    finally:
        await conn.close()
    async with open_archive(database_url) as reader:
        report = await verify_archive(reader)
    assert report.ok, [str(d) for d in report.divergences]
    assert (
        report.chain
        == f"OK: seqs 1-{last + 2} link ({last + 2} rows, chain format 1, then 2 from seq {last + 1})"
    )
