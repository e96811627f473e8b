"""The projection tables: written from the fold's results, read back as a ClusterState.

The writer only touches rows the batch changed (the fold reports them as
``touched`` keys); a key whose entity is gone from the state is deleted.
:mod:`projector.projection_rows` builds those statements (pure CPU, compiled);
this module runs them, and :func:`load_projection` rebuilds the whole state
from the rows, deriving what is not stored (task specs from the job, node
usage from the tasks) with the same code as the snapshots' reader (:mod:`projector.state_json`).
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import Callable
from datetime import datetime
from typing import Final, TypeVar

import asyncpg

from events.models import SchedulerConfigSpec
from projector.projection_rows import (
    PENDING_ROWS,
    STAGING_TABLES,
    ProjectionWrite,
    StagedRows,
    Statement,
    TouchedRows,
    document_json,
    projection_statements,
    session_statement,
)
from projector.state import (
    CLOCK_START,
    MAX_SESSIONS,
    ROLES,
    BufferedSession,
    ClusterState,
    EarlyObservations,
    JobState,
    TaskRow,
    assemble,
)
from projector.state_json import (
    hypernode_from_json,
    job_from_json,
    node_from_json,
    observations_from_json,
    part_from_json,
    priority_class_from_json,
    queue_from_json,
    session_from_json,
    task_status,
)

# The statement builders moved to projector.projection_rows; their names stay importable here.
__all__ = [
    "ProjectionWrite",
    "StagedRows",
    "Statement",
    "TouchedRows",
    "create_staging",
    "document_json",
    "execute_writes",
    "load_projection",
    "projection_statements",
    "session_statement",
]

#: Rows :func:`load_projection` decodes between two hand-backs of the event loop (a few ms).
_DECODE_CHUNK: Final = 1_000
T = TypeVar("T")

#: Connections known to hold the staging tables (see :func:`create_staging`).
_staging_ready: Final[weakref.WeakSet[asyncpg.Connection]] = weakref.WeakSet()


async def create_staging(conn: asyncpg.Connection) -> None:
    """Create the temporary staging tables once per connection, outside any transaction.

    Outside: a table created in the batch's transaction would go with a
    rollback.  Once, not in every commit: each round trip of a commit waits
    for the event loop, which folds the next batch meanwhile.
    """
    if conn not in _staging_ready:
        await conn.execute(STAGING_TABLES)
        _staging_ready.add(conn)


async def execute_writes(conn: asyncpg.Connection, writes: list[ProjectionWrite]) -> None:
    """Run what :func:`projection_statements` built (inside the caller's transaction,
    after :func:`create_staging`)."""
    for write in writes:
        if isinstance(write, StagedRows):
            await conn.copy_records_to_table(write.stage, records=write.records, columns=write.columns)
            await conn.execute(write.upsert)
        else:
            sql, args = write
            await conn.execute(sql, *args)


async def load_projection(conn: asyncpg.Connection) -> ClusterState:
    """The state the projection tables hold, at ``projection_meta.seq``.

    Reads in one REPEATABLE READ transaction, so the tables are seen at one
    commit even while the projector writes.
    """
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        meta = await conn.fetchrow(
            "SELECT seq, config, config_version, leader_epoch, clock, intents_clock, observations_clock,"
            " decisions_clock, leader_key, rebuild FROM projection_meta"
        )
        if meta is None:
            raise LookupError("projection_meta is empty: run the migrations first")
        if meta["rebuild"]:
            raise LookupError(
                "the projection awaits its rebuild from the archive after an upgrade: start the projector"
            )
        queues = [queue_from_json(json.loads(r["doc"])) for r in await conn.fetch("SELECT doc FROM queues")]
        classes = [
            priority_class_from_json(json.loads(r["doc"]))
            for r in await conn.fetch("SELECT doc FROM priority_classes")
        ]
        nodes = await _decoded(
            await conn.fetch("SELECT doc FROM nodes"), lambda r: node_from_json(json.loads(r["doc"]))
        )
        hypernodes = [
            hypernode_from_json(json.loads(r["doc"])) for r in await conn.fetch("SELECT doc FROM hypernodes")
        ]
        jobs = await _decoded(
            await conn.fetch("SELECT spec, phase, phase_reason, finished_at FROM jobs"),
            lambda r: _job(r["spec"], r["phase"], r["phase_reason"], r["finished_at"]),
        )
        task_rows: list[TaskRow] = await _decoded(
            await conn.fetch("SELECT id, job_id, role, idx, status, node FROM tasks"),
            lambda r: (r[0], r[1], r[2], r[3], task_status(r[4]), r[5]),
        )
        early = {
            r["job_id"]: EarlyObservations(
                since=r["since"], events=observations_from_json(json.loads(r["events"]))
            )
            for r in await conn.fetch("SELECT job_id, since, events FROM early_observations")
        }
        parts: dict[str, BufferedSession] = {}
        for r in await conn.fetch("SELECT session_id, idx, since, items FROM session_parts"):
            session_id = r["session_id"]
            buffered = parts.setdefault(session_id, BufferedSession(since=r["since"], parts={}))
            buffered.parts[r["idx"]] = part_from_json(session_id, r["idx"], json.loads(r["items"]))
        docs = [
            json.loads(r["doc"])
            for r in reversed(
                await conn.fetch("SELECT doc FROM sessions ORDER BY seq DESC LIMIT $1", MAX_SESSIONS)
            )
        ]
        if docs and docs[-1].get(PENDING_ROWS):
            # The newest session's list, in job order as it was folded (projection_rows._session_doc).
            docs[-1]["pending"] = await _decoded(
                await conn.fetch("SELECT entry FROM newest_pending ORDER BY job"),
                lambda r: json.loads(r["entry"]),
            )
        sessions = [session_from_json(doc) for doc in docs]
    config = meta["config"]
    return assemble(
        seq=meta["seq"],
        queues=queues,
        priority_classes=classes,
        hypernodes=hypernodes,
        config=None if config is None else SchedulerConfigSpec.model_validate(json.loads(config)),
        config_version=meta["config_version"],
        leader_epoch=meta["leader_epoch"],
        leader_key=meta["leader_key"],
        nodes=nodes,
        jobs=jobs,
        task_rows=task_rows,
        sessions=sessions,
        session_parts=parts,
        early_observations=early,
        clock=_clock(meta["clock"]),
        role_clocks=[CLOCK_START if (t := meta[f"{role}_clock"]) is None else _clock(t) for role in ROLES],
    )


async def _decoded(rows: list[asyncpg.Record], decode: Callable[[asyncpg.Record], T]) -> list[T]:
    """``decode`` of every row, handing the event loop back every ``_DECODE_CHUNK`` rows.

    A big projection takes seconds to decode (40k jobs: ~1 s); in one piece it
    would hold up everything else on the loop, a service told to stop included.
    """
    decoded: list[T] = []
    for start in range(0, len(rows), _DECODE_CHUNK):
        decoded.extend(decode(row) for row in rows[start : start + _DECODE_CHUNK])
        await asyncio.sleep(0)
    return decoded


def _clock(value: datetime) -> datetime:
    """The stored clock; the start of time when it is that.

    The clock of a state that folded nothing is 0001-01-01T00:00:00Z, which asyncpg
    writes as PostgreSQL's -infinity and reads back as a naive ``datetime.min``:
    compared with an event's aware time it raised TypeError in the fold and the
    projection rows at every batch after a restart (a batch of rejections only is
    enough to write it).
    """
    return CLOCK_START if value.tzinfo is None else value


def _job(spec: str, phase: str, phase_reason: str, finished_at: datetime | None) -> JobState:
    """A job from its row: the spec document plus the columns that change."""
    job = job_from_json(
        {**json.loads(spec), "phase": phase, "phase_reason": phase_reason, "finished_at": None}
    )
    job.finished_at = finished_at
    return job
