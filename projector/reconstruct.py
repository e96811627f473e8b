"""Reading the archive back: state at any seq, the projection, and the chain check.

* :func:`state_at` — the folded state after event ``seq``: the nearest
  ``state_snapshots`` row at or below ``seq`` plus the fold of the archived
  events after it (decoded, so old versions are upcast).
* :func:`load_projection` — the state the projection tables hold.
* :func:`rebuild_projection` — bring a projection that an upgrade of the fold
  marked (``projection_meta.rebuild``) to the fold of its archive.
* :func:`verify_chain` — recompute the hash chain and name the first broken link.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

import asyncpg
import orjson

from events.canonical import GENESIS_HASH
from events.models import Event
from events.serde import decode
from projector.archive import JOB_EVENT_TYPES, job_of_data, row_canonical, row_hash, with_signature
from projector.errors import ArchiveFoldMismatchError, ProjectionDriftError
from projector.fold import apply
from projector.newest_pending import NewestPendingRows
from projector.projection import create_staging, execute_writes, load_projection
from projector.projection_rows import (
    TouchedRows,
    meta_arguments,
    projection_statements,
    session_statement,
)
from projector.snapshots import read_snapshot
from projector.state import ClusterState, SessionRecord

__all__ = [
    "ChainProblem",
    "ChainReport",
    "archived_events",
    "load_projection",
    "rebuild_projection",
    "state_at",
    "verify_chain",
]

_CHUNK: Final = 5_000
_COLUMNS: Final = (
    "seq, event_id, type, cluster, subject, source, time, data, prev_hash, hash, principal, signature"
)
_CHECKED_COLUMNS: Final = (
    f"{_COLUMNS}, job, topic, partition, kafka_offset, recorded_at, traceparent, chain_format"
)

Connectable: TypeAlias = asyncpg.Connection | asyncpg.Pool


async def _rows(
    conn: asyncpg.Connection, after: int, upto: int | None, columns: str = _COLUMNS
) -> AsyncIterator[asyncpg.Record]:
    """event_log rows with after < seq <= upto, in seq order, fetched in chunks (keyset paging)."""
    while True:
        rows = await conn.fetch(
            f"SELECT {columns} FROM event_log WHERE seq > $1 AND ($2::bigint IS NULL OR seq <= $2)"  # noqa: S608
            " ORDER BY seq LIMIT $3",
            after,
            upto,
            _CHUNK,
        )
        for row in rows:
            yield row
        if len(rows) < _CHUNK:
            return
        after = rows[-1]["seq"]


async def archived_events(
    conn: asyncpg.Connection, after: int = 0, upto: int | None = None
) -> AsyncIterator[tuple[int, Event]]:
    """(seq, event) for the archived events after ``after`` up to ``upto``, decoded from the archive."""
    async for row in _rows(conn, after, upto):
        yield row["seq"], with_signature(decode(row_canonical(row)), row["signature"])


async def state_at(conn_or_pool: Connectable, seq: int) -> ClusterState:
    """The folded state right after event ``seq`` (0: the empty state)."""
    if isinstance(conn_or_pool, asyncpg.Pool):
        async with conn_or_pool.acquire() as conn:
            return await state_at(conn, seq)
    conn = conn_or_pool
    stored = await read_snapshot(conn, seq)
    state = ClusterState() if stored is None else stored
    async for event_seq, event in archived_events(conn, state.seq, seq):
        outcome = apply(state, event_seq, event)
        if outcome.invalid is not None:
            raise ArchiveFoldMismatchError(event_seq, outcome.invalid, outcome.detail)
    if state.seq != seq:
        raise LookupError(f"no state at seq {seq}: the archive ends at seq {state.seq}")
    return state


async def rebuild_projection(conn: asyncpg.Connection) -> bool:
    """Rewrite a projection marked for rebuilding as the fold of its archive; True if it was.

    A migration that changes what the fold derives from archived events (0007:
    retention) marks the projection instead of guessing in SQL.  This folds
    the archive from the start, as one batch of the writer would: every row
    the fold touched is written as of the end (rows of jobs and tasks that
    retired are deleted), the sessions' rows with their records as folded,
    and projection_meta.  One transaction, run by the projector before it
    loads its writer; the marked projection is not loaded meanwhile
    (:func:`~projector.projection.load_projection` refuses it).  Its cost is
    one fold of the archive, once.
    """
    seq = await conn.fetchval("SELECT seq FROM projection_meta WHERE rebuild")
    if seq is None:
        return False
    await create_staging(conn)
    async with conn.transaction():
        state = ClusterState()
        touched: TouchedRows = {}
        sessions: list[SessionRecord] = []
        async for event_seq, event in archived_events(conn, 0, seq):
            outcome = apply(state, event_seq, event)
            if outcome.invalid is not None:
                raise ArchiveFoldMismatchError(event_seq, outcome.invalid, outcome.detail)
            for kind, key in outcome.touched:
                if kind == "session":
                    sessions.append(state.sessions[key])
                else:
                    touched.setdefault(kind, {})[key] = event_seq
        if state.seq != seq:
            raise ProjectionDriftError(expected_seq=seq, found_seq=state.seq)
        writes = projection_statements(state, touched)
        if (rows := session_statement(sessions)) is not None:
            writes.append(rows)
            writes.extend(NewestPendingRows().writes(state))
        await execute_writes(conn, writes)
        await conn.execute(
            "UPDATE projection_meta SET config = $1::json, config_version = $2, leader_epoch = $3,"
            " clock = $4, intents_clock = $5, observations_clock = $6, decisions_clock = $7,"
            " leader_key = $8, rebuild = false, updated_at = now()",
            *meta_arguments(state),
        )
    return True


def _row_problem(
    row: asyncpg.Record, prev_hash: bytes | None, newest_format: int
) -> tuple[ChainProblem, str] | None:
    """What is wrong with one row of the chain (``prev_hash``: the previous row's hash, if read)."""
    seq, chain_format = row["seq"], row["chain_format"]
    if chain_format < newest_format or chain_format not in (1, 2):
        detail = f"seq {seq} has chain format {chain_format} after rows of format {newest_format}"
        return "format-downgraded", detail
    stored_prev = bytes(row["prev_hash"])
    if row_hash(row, row_canonical(row)) != bytes(row["hash"]):
        return "row-edited", f"seq {seq} does not hash to its stored hash"
    if prev_hash is not None and stored_prev != prev_hash:
        return "broken-link", f"seq {seq} does not chain to seq {seq - 1}"
    event_type = row["type"]
    job = job_of_data(event_type, orjson.loads(row["data"])) if event_type in JOB_EVENT_TYPES else None
    if row["job"] != job:
        return "job-mismatch", f"seq {seq} has job {row['job']!r}, its data names {job!r}"
    return None


ChainProblem: TypeAlias = Literal[
    "row-edited",  # the row's content does not hash to its stored hash
    "broken-link",  # the row's prev_hash is not the previous row's hash (rows rewritten)
    "row-missing",  # a seq is missing (the row was deleted)
    "tail-missing",  # the archive ends before the seq the projection reflects
    # a row of chain format 1 after one of format 2 (or of a format this release does not know):
    # format 1 hashes fewer columns, and only rows archived before the switch may use it
    "format-downgraded",
    # the row's job column (not hashed: it indexes the row for `replay explain`)
    # is not the job its data names, which would hide the event from the job's history
    "job-mismatch",
]


@dataclass(frozen=True, slots=True)
class ChainReport:
    """The outcome of :func:`verify_chain`; ``broken_seq`` is None when the chain holds."""

    checked: int
    first_seq: int | None
    last_seq: int | None
    broken_seq: int | None = None
    problem: ChainProblem | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.broken_seq is None


async def verify_chain(
    conn: asyncpg.Connection, from_seq: int | None = None, to_seq: int | None = None
) -> ChainReport:
    """Recompute every hash from ``from_seq`` (default 1) to ``to_seq`` (default the end).

    The first problem found is reported with the seq of the row it concerns:
    an edited row by its own seq (also an edit of its ``job`` column, which
    format 1 does not hash), a deleted row by the missing seq, a row of
    chain format 1 after format 2 (``format-downgraded``).  A range that
    starts mid-archive does not see the formats before it.  Checking
    the whole archive also compares its end with ``projection_meta.seq``, so
    deleting the newest rows is caught too.
    """
    start = 1 if from_seq is None else max(from_seq, 1)
    expected_seq = start
    prev_hash: bytes | None = GENESIS_HASH
    if start > 1:
        before = await conn.fetchval("SELECT hash FROM event_log WHERE seq = $1", start - 1)
        prev_hash = None if before is None else bytes(before)
    checked = 0
    first: int | None = None
    last: int | None = None
    newest_format = 0

    def broken(seq: int, problem: ChainProblem, detail: str) -> ChainReport:
        return ChainReport(checked, first, last, broken_seq=seq, problem=problem, detail=detail)

    async for row in _rows(conn, start - 1, to_seq, _CHECKED_COLUMNS):
        seq = row["seq"]
        if first is None:
            first = seq
        if seq != expected_seq:
            return broken(expected_seq, "row-missing", f"seq {expected_seq} is missing (next row is {seq})")
        stored_hash = bytes(row["hash"])
        if (found := _row_problem(row, prev_hash, newest_format)) is not None:
            return broken(seq, *found)
        newest_format = row["chain_format"]
        prev_hash = stored_hash
        expected_seq = seq + 1
        checked += 1
        last = seq
    applied = await conn.fetchval("SELECT seq FROM projection_meta")
    end = applied if to_seq is None or applied is None else min(to_seq, applied)
    if end is not None and end >= expected_seq:
        return broken(
            expected_seq,
            "tail-missing" if last is None or end == applied else "row-missing",
            f"the archive ends at seq {expected_seq - 1}, the projection reflects seq {applied}",
        )
    return ChainReport(checked, first, last)
