"""The newest session's pending list as the rows of ``newest_pending``, written as a change
(projector.newest_pending): after every batch, and after a restart, the rows are that list
exactly, the state loaded from the database equals the writer's, and readers see the reasons."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import asyncpg
import pytest

from api.views import list_sessions
from events.models import PendingJob, SessionCommitted
from projector import migrate
from projector.fold import apply
from projector.migrate import apply_migrations
from projector.projection_rows import StagedRows
from projector.reconstruct import load_projection, state_at
from projector.state import ClusterState
from projector.state_json import session_to_json
from projector.writer import BatchWriter
from tests.projector.helpers import create_database, drop_database, records, reset_schema
from tests.projector.pending_sessions import T0
from tests.projector.pending_sessions import pending_entry as _entry
from tests.projector.pending_sessions import session_committed as _session
from tests.projector.streams import CLUSTER

pytestmark = pytest.mark.integration

_STAGE = "tephra_stage_pending"


@pytest.fixture(scope="module")
def scratch_dsn(postgres_admin_dsn: str) -> Iterator[str]:
    dsn = asyncio.run(create_database(postgres_admin_dsn))
    yield dsn
    asyncio.run(drop_database(postgres_admin_dsn, dsn))


async def _rows(conn: asyncpg.Connection) -> dict[str, PendingJob]:
    rows = await conn.fetch("SELECT job, entry FROM newest_pending")
    return {r["job"]: PendingJob.model_validate(json.loads(r["entry"])) for r in rows}


async def _check(conn: asyncpg.Connection, writer: BatchWriter) -> None:
    newest = next(reversed(writer.state.sessions.values()))
    assert await _rows(conn) == {p.job: p for p in newest.pending or ()}
    loaded = await load_projection(conn)
    assert loaded == writer.state
    assert await state_at(conn, loaded.seq) == loaded


def test_the_rows_follow_the_newest_list_across_changes_terms_and_restarts(scratch_dsn: str) -> None:
    async def check() -> None:
        conn = await asyncpg.connect(scratch_dsn)
        try:
            await reset_schema(conn)
            writer = await BatchWriter.load(conn, consumer="c", cluster=CLUSTER)
            offset = 0

            async def write(*events: SessionCommitted) -> list[str]:
                """The jobs whose rows the batch wrote."""
                nonlocal offset
                plan = await writer.write(conn, records(events, start=offset))
                assert not plan.rejections, plan.rejections
                offset += len(events)
                await _check(conn, writer)
                staged = [w for w in plan.projection if isinstance(w, StagedRows) and w.stage == _STAGE]
                return [row[0] for w in staged for row in w.records]

            await write(_session("s1", [_entry("ns/a"), _entry("ns/b"), _entry("ns/c")]))
            # b's reasons change, c leaves the list, d joins it.
            written = await write(
                _session("s2", [_entry("ns/b", 4), _entry("ns/d")], base="s1", cleared=("ns/c",))
            )
            assert written == ["ns/b", "ns/d"]  # only what changed
            # Two sessions in one batch, the second unchanged.
            written = await write(
                _session("s3", [_entry("ns/e")], base="s2", cleared=("ns/a",)), _session("s4", [], base="s3")
            )
            assert written == ["ns/e"]
            # A term's first session: a whole list.
            await write(_session("s5", [_entry("ns/b", 5), _entry("ns/f")], epoch=2))
            assert await _rows(conn) == {"ns/b": _entry("ns/b", 5), "ns/f": _entry("ns/f")}

            # A restart: the state comes back from the database, rows included.
            writer = await BatchWriter.load(conn, consumer="c", cluster=CLUSTER)
            await _check(conn, writer)
            await write(_session("s6", [_entry("ns/g")], base="s5", cleared=("ns/f",), epoch=2))
            assert await _rows(conn) == {"ns/b": _entry("ns/b", 5), "ns/g": _entry("ns/g")}
            # A change against another base: no list, no rows.
            await write(_session("s7", [_entry("ns/h")], base="s5", epoch=2))
            assert await _rows(conn) == {}
            await write(_session("s8", [_entry("ns/h")], epoch=2))

            # `tephra get sessions`: the newest session's list, in job order, from the rows.
            listed = await list_sessions(conn)
            assert listed[-1]["id"] == "s8"
            assert listed[-1]["pending"] == [_entry("ns/h").model_dump(mode="json")]
            assert [s["pending"] for s in listed[:-1]] == [None] * (len(listed) - 1)
        finally:
            await conn.close()

    asyncio.run(check())


def test_an_upgraded_database_finds_the_list_its_newest_row_held_and_carries_on(
    scratch_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0018 fills the table from the newest row's list (before it, the row held the list whole)."""

    async def check() -> None:
        conn = await asyncpg.connect(scratch_dsn)
        try:
            await conn.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
            shipped = migrate.available_migrations()
            monkeypatch.setattr(
                migrate, "available_migrations", lambda: [m for m in shipped if m.version < 18]
            )
            await apply_migrations(conn)
            monkeypatch.undo()
            folded = ClusterState()
            whole = [_entry("ns/a"), _entry("ns/b")]
            assert apply(folded, 0, _session("s0", whole)).applied
            record = folded.sessions["s0"]
            # The row as a release before 0018 wrote it (seq 0: the stream below starts at 1).
            await conn.execute(
                "INSERT INTO sessions (session_id, seq, leader_epoch, input_seq, config_version, now,"
                " accepted, voided, doc) VALUES ($1, 0, 1, 0, 0, $2, 0, 0, $3::json)",
                record.session_id,
                T0,
                json.dumps(session_to_json(record)),
            )
            assert await apply_migrations(conn) == [m.version for m in shipped if m.version >= 18]
            assert await _rows(conn) == {p.job: p for p in whole}

            writer = await BatchWriter.load(conn, consumer="c", cluster=CLUSTER)
            assert next(reversed(writer.state.sessions.values())).pending == tuple(whole)
            plan = await writer.write(conn, records([_session("s1", [_entry("ns/c")], base="s0")]))
            assert not plan.rejections, plan.rejections
            assert await _rows(conn) == {p.job: p for p in (*whole, _entry("ns/c"))}
            assert await load_projection(conn) == writer.state
        finally:
            await conn.close()

    asyncio.run(check())
