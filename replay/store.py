"""The archive reader: ``event_log`` and ``state_snapshots`` rows, read-only.

The only module of replay that talks to PostgreSQL.  Everything runs in one
``REPEATABLE READ READ ONLY`` transaction, so a reader sees one consistent
archive while the projector keeps appending, and cannot write by mistake.

An event is reassembled from its columns into its canonical JSON
(:func:`projector.archive.row_canonical`, :mod:`events.canonical`) and decoded from those
bytes, upcasting old versions.  The chain is checked on :meth:`ArchiveReader.links`,
which hash every column of a row by its chain format and decode nothing, so a
row that does not decode still gets its chain verdict.
"""

from __future__ import annotations

import gc
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Final

import asyncpg

from events.canonical import GENESIS_HASH
from events.display import redact
from events.models import SessionCommitted, SessionPart
from events.serde import EventDecodeError, decode
from events.tracing import trace_id_of
from projector.archive import JOB_EVENT_TYPES, JOB_SUBMITTED, row_canonical, row_hash, with_signature
from projector.connections import DatabaseAccess, connect
from projector.snapshots import read_snapshot
from projector.state import ClusterState, SessionRecord
from projector.state_json import session_from_json
from replay.archive import ArchivedEvent
from replay.chain import ChainLink
from replay.errors import ArchiveUnavailable, UndecodableRow, UnknownSession
from replay.reconstruct import fold_archived

__all__ = ["ArchiveReader", "open_archive"]

_COLUMNS: Final = (
    "seq, event_id, type, cluster, subject, source, time, data::text AS data, prev_hash, hash,"
    " principal, signature"
)
#: Every column a row's hash may cover (projector.archive.row_hash).
_LINK_COLUMNS: Final = (
    f"{_COLUMNS}, topic, partition, kafka_offset, recorded_at, job, traceparent, chain_format"
)
_SESSION: Final = SessionCommitted.model_fields["type"].default
_PART: Final = SessionPart.model_fields["type"].default


def _type_literal(event_type: str) -> str:
    """An event type as an SQL literal (a fixed name of the catalogue, never input).

    Where rows are found by session type the types are literals: only then can
    the planner use the partial index ``event_log_sessions`` (migration 0006),
    whose predicate names them; with a parameter, a generic plan scans the archive.
    """
    if not event_type.replace(".", "").isalnum():
        raise ValueError(f"event type {event_type!r} is not safe to write into SQL")
    return f"'{event_type}'"


_SESSION_SQL: Final = _type_literal(_SESSION)
_PART_SQL: Final = _type_literal(_PART)
# $1, $2: a seq range.
_SESSION_MARKERS: Final = (
    f"SELECT {_COLUMNS} FROM event_log WHERE type = {_SESSION_SQL} AND seq >= $1 AND seq <= $2 ORDER BY seq"  # noqa: S608
)
# $1: a session id (its marker; its parts).
_SESSION_MARKER: Final = (
    f"SELECT {_COLUMNS} FROM event_log WHERE type = {_SESSION_SQL} AND data::jsonb->>'session_id' = $1"  # noqa: S608
)
_SESSION_PARTS: Final = (
    f"SELECT {_COLUMNS} FROM event_log WHERE type = {_PART_SQL} AND data::jsonb->>'session_id' = $1"  # noqa: S608
    " ORDER BY seq"
)
_JOB_EVENTS: Final = sorted(JOB_EVENT_TYPES)
_BATCH: Final = 5_000
# $1 job id, $2 SessionCommitted, $3 {"job": id}, $4 {"preemptor_job": id}, $5 SessionPart.
# The submission and the job's own events are found through event_log.job and its partial index
# (migration 0004; the types are literals, so the planner sees only those rows carry a job).
# Sessions and parts are cast to jsonb once (OFFSET 0 keeps a subquery from being inlined, which
# would repeat the cast) and, in the same pass, trimmed to the job (see ArchiveReader.job_history)
# when they name it: its pending entry (in a marker, or in a part when the reasons did not fit the
# marker) or a decision.  Every marker that records a change of pending reasons (``pending_base``)
# comes back, trimmed to the job (its entry, and the job's id if it left the pending list): the job
# keeps its base session's entry where the change does not name it (replay.explain.mentions).
# A split session's marker is trimmed too, as a candidate: it comes back
# when one of its parts names the job, since the marker is what makes the parts a session.  Only
# (seq, session id, the trimmed view) is kept per session row.  The other rows come back as archived.
_JOB_HISTORY: Final = (
    """
    WITH sessions AS MATERIALIZED (
        SELECT seq, event_id, type, cluster, subject, source, time, prev_hash, hash, principal, signature,
               session_id, names, split,
               CASE WHEN names OR split THEN (doc || jsonb_build_object(
                   'decisions', coalesce(
                       (SELECT jsonb_agg(d.value ORDER BY d.n)
                          FROM jsonb_array_elements(doc->'decisions') WITH ORDINALITY AS d(value, n)
                         WHERE d.value->>'job' = $1 OR d.value->>'preemptor_job' = $1),
                       '[]'::jsonb),
                   'pending', coalesce(
                       (SELECT jsonb_agg(p.value ORDER BY p.n)
                          FROM jsonb_array_elements(doc->'pending') WITH ORDINALITY AS p(value, n)
                         WHERE p.value->>'job' = $1),
                       '[]'::jsonb))
                   || CASE WHEN doc ? 'pending_cleared' THEN jsonb_build_object('pending_cleared',
                          CASE WHEN doc->'pending_cleared' ? $1 THEN jsonb_build_array($1::text)
                               ELSE '[]'::jsonb END)
                      ELSE '{}'::jsonb END)::text
               END AS data
          FROM (SELECT s.*, doc->>'session_id' AS session_id,
                       coalesce(doc->'pending' @> jsonb_build_array($3::jsonb), false)
                         OR doc ? 'pending_base'
                         OR coalesce(doc->'decisions' @> jsonb_build_array($3::jsonb), false)
                         OR coalesce(doc->'decisions' @> jsonb_build_array($4::jsonb), false) AS names,
                       type = $2 AND coalesce((doc->>'parts')::int, 0) > 0 AS split
                  FROM (SELECT seq, event_id, type, cluster, subject, source, time, prev_hash, hash,
                               principal, signature, data::jsonb AS doc
                          FROM event_log WHERE type IN ({session}, {part}) OFFSET 0) AS s
                OFFSET 0) AS m
    )
    SELECT seq, event_id, type, cluster, subject, source, time, prev_hash, hash, principal, signature,
           data::text AS data, false AS trimmed
      FROM event_log
     WHERE job = $1 AND type IN ({job_events})
    UNION ALL
    SELECT seq, event_id, type, cluster, subject, source, time, prev_hash, hash, principal, signature,
           data, true
      FROM sessions
     WHERE names OR (split AND session_id IN (SELECT session_id FROM sessions WHERE names AND type = $5))
    ORDER BY seq
""".replace("{job_events}", ", ".join(f"'{t}'" for t in _JOB_EVENTS))
    .replace("{session}", _SESSION_SQL)
    .replace("{part}", _PART_SQL)
)


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector around one synchronous bulk decode.

    Rebuilding a stored state creates a few hundred thousand objects in one
    go, and every burst of allocations sets off a collection that traverses
    what was built so far, though none of it is garbage yet: about 40% of a
    stored state's load at 1M events.  Only around synchronous code, so no
    other task runs while the collector is off; the previous setting is
    restored, and collection resumes normally afterwards.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def row_to_event(row: asyncpg.Record | dict[str, Any], *, view: bool = False) -> ArchivedEvent:
    """One ``event_log`` row as an archived event (decoded, canonical bytes kept).

    ``view``: the row's ``data`` was reshaped by the query (a trimmed
    session), so there are no canonical bytes to keep.

    Raises:
        UndecodableRow: the row's columns do not decode as an event.
    """
    canonical = row_canonical(row)
    try:
        event = with_signature(decode(canonical), row.get("signature"))
    except EventDecodeError as exc:
        raise UndecodableRow(row["seq"], f"[{exc.code}] {exc}") from None
    return ArchivedEvent(
        seq=row["seq"],
        event=event,
        prev_hash=bytes(row["prev_hash"]),
        hash=bytes(row["hash"]),
        canonical=b"" if view else canonical,
    )


def _link(row: asyncpg.Record) -> ChainLink:
    chain_format = row["chain_format"]
    canonical = row_canonical(row)
    try:
        computed = row_hash(row, canonical)
    except ValueError:
        computed = b""  # a format this release does not know: the checker names it
    undecodable = None
    try:
        decode(canonical)
    except EventDecodeError as exc:
        undecodable = f"[{exc.code}] {exc}"
    return ChainLink(
        row["seq"], bytes(row["prev_hash"]), bytes(row["hash"]), computed, chain_format, undecodable
    )


class ArchiveReader:
    """Queries over one read-only snapshot of the archive (see :func:`open_archive`)."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn

    async def trace_id(self, job: str) -> str | None:
        """The trace id of ``job``'s newest submission, as its producer sent it (None: sent without
        trace context, or archived before ``event_log`` kept it)."""
        has_column = await self._conn.fetchval(
            "SELECT EXISTS (SELECT FROM information_schema.columns"
            " WHERE table_name = 'event_log' AND column_name = 'traceparent'"
            " AND table_schema = ANY(current_schemas(false)))"
        )
        if not has_column:
            return None
        traceparent = await self._conn.fetchval(
            "SELECT traceparent FROM event_log WHERE type = $1 AND job = $2 AND traceparent IS NOT NULL"
            " ORDER BY seq DESC LIMIT 1",
            JOB_SUBMITTED,
            job,
        )
        return trace_id_of(traceparent)

    async def last_seq(self) -> int:
        value = await self._conn.fetchval("SELECT coalesce(max(seq), 0) FROM event_log")
        return int(value)

    async def rows(self, first: int = 1, last: int | None = None) -> AsyncIterator[ArchivedEvent]:
        """Every event with ``first <= seq <= last``, in seq order, fetched in batches."""
        async for row in self._pages(_COLUMNS, first, last):
            yield row_to_event(row)

    async def links(self, first: int = 1, last: int | None = None) -> AsyncIterator[ChainLink]:
        """The chain's view of every row with ``first <= seq <= last`` (seq order): hashed from the
        columns, whether or not the event decodes (which each link says)."""
        async for row in self._pages(_LINK_COLUMNS, first, last):
            yield _link(row)

    async def _pages(self, columns: str, first: int, last: int | None) -> AsyncIterator[asyncpg.Record]:
        """``columns`` of the rows with ``first <= seq <= last``, in seq order, fetched in batches."""
        upper = await self.last_seq() if last is None else last
        after = first - 1
        while after < upper:
            batch = await self._conn.fetch(
                f"SELECT {columns} FROM event_log WHERE seq > $1 AND seq <= $2 ORDER BY seq LIMIT $3",  # noqa: S608
                after,
                upper,
                _BATCH,
            )
            if not batch:
                return
            for row in batch:
                yield row
            after = batch[-1]["seq"]

    async def hash_before(self, seq: int) -> bytes | None:
        """The hash the row at ``seq`` must link to; None when that row is missing."""
        if seq <= 1:
            return GENESIS_HASH
        value = await self._conn.fetchval("SELECT hash FROM event_log WHERE seq = $1", seq - 1)
        return None if value is None else bytes(value)

    async def session_markers(self, first: int = 1, last: int | None = None) -> list[ArchivedEvent]:
        """The SessionCommitted events with ``first <= seq <= last``, in seq order."""
        upper = await self.last_seq() if last is None else last
        rows = await self._conn.fetch(
            _SESSION_MARKERS,
            first,
            upper,
        )
        return [row_to_event(r) for r in rows]

    async def session_parts(self, session_id: str) -> list[ArchivedEvent]:
        rows = await self._conn.fetch(
            _SESSION_PARTS,
            session_id,
        )
        return [row_to_event(r) for r in rows]

    async def session(self, session_id: str) -> ArchivedEvent:
        """The SessionCommitted of ``session_id``.

        Raises:
            UnknownSession: no such session in the archive.
        """
        row = await self._conn.fetchrow(
            _SESSION_MARKER,
            session_id,
        )
        if row is None:
            raise UnknownSession(session_id)
        return row_to_event(row)

    async def event_at(self, seq: int) -> ArchivedEvent:
        """The archived event at ``seq`` (by primary key).

        Raises:
            LookupError: no row at ``seq``.
        """
        row = await self._conn.fetchrow(f"SELECT {_COLUMNS} FROM event_log WHERE seq = $1", seq)  # noqa: S608
        if row is None:
            raise LookupError(f"event_log has no row at seq {seq}")
        return row_to_event(row)

    async def jobs_named(self, name: str) -> list[str]:
        """The ids (``namespace/name``) of every submitted job called ``name``, in id order."""
        rows = await self._conn.fetch(
            "SELECT DISTINCT job FROM event_log WHERE job IS NOT NULL AND job LIKE '%/' || $1"
            " AND split_part(job, '/', 2) = $1 ORDER BY job",
            name,
        )
        return [r["job"] for r in rows]

    async def job_ids(self, limit: int = 100_000) -> list[str]:
        """The ids of the archive's jobs (at most ``limit``), in id order: for "did you mean"."""
        rows = await self._conn.fetch(
            "SELECT DISTINCT job FROM event_log WHERE job IS NOT NULL ORDER BY job LIMIT $1", limit
        )
        return [r["job"] for r in rows]

    async def job_history(self, job: str) -> list[ArchivedEvent]:
        """Every event about ``job``: its submission, task events, and sessions that mention it.

        A session mentions a job when the job is pending in it (its entry in
        the marker, or in a part when the reasons did not fit the marker), or
        one of its decisions names the job as subject or preemptor.  A split
        session comes back as the parts that name the job and its marker.
        Sessions (and session parts) come back *trimmed to the job*, in the
        server: only the job's own ``pending`` entry and the decisions that
        name it, in their order, so a busy cluster's large sessions are
        neither sent nor decoded whole.  Those events are views, not archive rows: their ``canonical``
        is empty and they are not for chain checks (:meth:`rows` is).
        """
        mention = json.dumps({"job": job})
        preemptor = json.dumps({"preemptor_job": job})
        rows = await self._conn.fetch(
            _JOB_HISTORY,
            job,
            _SESSION,
            mention,
            preemptor,
            _PART,
        )
        with paused_gc():
            return [row_to_event(r, view=r["trimmed"]) for r in rows]

    async def snapshot_at_or_before(self, seq: int) -> ClusterState | None:
        """The newest stored folded state at or before ``seq``, if any."""
        with paused_gc():
            return await read_snapshot(self._conn, seq)

    async def snapshot_seq_at_or_before(self, seq: int) -> int | None:
        """The seq of the newest stored folded state at or before ``seq`` (cheap: no state is read)."""
        value = await self._conn.fetchval("SELECT max(seq) FROM state_snapshots WHERE seq <= $1", seq)
        return None if value is None else int(value)

    async def stored_session(self, session_id: str, seq: int) -> SessionRecord | None:
        """The fold's record of the session committed at ``seq``, from the first stored state after it.

        A stored state keeps the newest sessions' records (accepted count, the
        voided decisions with their reasons), so the first state stored at or
        after the marker usually holds it: read in the server, without loading
        the state.  None when no stored state holds it (none stored since, or
        the record already dropped out): then fold up to the marker instead.
        """
        text = await self._conn.fetchval(
            """
            SELECT s.value::text
              FROM (SELECT seq FROM state_snapshots WHERE seq >= $1 ORDER BY seq LIMIT 1) AS t
              JOIN state_snapshot_chunks AS c ON c.seq = t.seq AND c.section = 'sessions',
                   json_array_elements(c.items) AS s(value)
             WHERE s.value->>'session_id' = $2 AND (s.value->>'seq')::bigint = $1
            """,
            seq,
            session_id,
        )
        return None if text is None else session_from_json(json.loads(text))

    async def state_at(self, seq: int) -> ClusterState:
        """The folded state right after ``seq``: the newest stored state at or before it, plus the tail.

        What :func:`projector.reconstruct.state_at` computes (a test holds
        them equal), with the stored state decoded with the collector paused.

        Raises:
            FoldRejected: an archived event the fold refuses.
            LookupError: the archive ends before ``seq``.
        """
        state = await self.snapshot_at_or_before(seq) or ClusterState()
        async for row in self.rows(state.seq + 1, seq):
            fold_archived(state, row)
        if state.seq != seq:
            raise LookupError(f"no state at seq {seq}: the archive ends at seq {state.seq}")
        return state


@asynccontextmanager
async def open_archive(url: str | DatabaseAccess) -> AsyncIterator[ArchiveReader]:
    """Connect and open one read-only, repeatable-read transaction for the whole use.

    Raises:
        ArchiveUnavailable: the server does not answer or the schema is missing.
    """
    try:
        conn = await connect(url)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise ArchiveUnavailable(f"cannot connect to the archive database: {redact(str(exc))}") from None
    except ValueError:
        # The driver's own message may quote a piece of a password it split in the wrong place.
        shown = url if isinstance(url, str) else url.url
        raise ArchiveUnavailable(
            f"the archive database URL is malformed: {redact(shown)} (expected"
            " postgresql://user:password@host:port/db, with '/', '?', '#' and '@' in the password"
            " percent-encoded)"
        ) from None
    try:
        exists = await conn.fetchval("SELECT to_regclass('event_log') IS NOT NULL")
        if not exists:
            raise ArchiveUnavailable("the database has no event_log table: no projector has run against it")
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            yield ArchiveReader(conn)
    finally:
        await conn.close()
