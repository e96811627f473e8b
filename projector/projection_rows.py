"""The projection's rows as of a state: the statements that bring the projection tables to it.

Pure: every value is read from the state when the statements are built, so
they stay right after the state moves on (the writer folds the next batch
while one commits).  :mod:`projector.projection` runs them in a transaction
and reads the tables back.

Separate from :mod:`projector.projection`, and free of coroutines, so that
``pip install`` compiles it with the rest of the per-event path (setup.py):
mypyc's coroutines are kept out of the compiled unit (docs/projector.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from events.pending_lists import in_job_order
from projector.archive import stdlib_utc
from projector.state import CLOCK_START, ClusterState, JobState, SessionRecord, without_pending
from projector.state_json import (
    document_json,
    hypernode_to_json,
    job_to_json,
    node_to_json,
    observations_to_json,
    part_to_json,
    priority_class_to_json,
    queue_to_json,
    session_to_json,
)

__all__ = [
    "META_COLUMNS",
    "PENDING_ROWS",
    "STAGING_TABLES",
    "ProjectionWrite",
    "StagedRows",
    "Statement",
    "TouchedRows",
    "document_json",
    "meta_arguments",
    "projection_statements",
    "session_statement",
]

#: kind -> key -> seq of the last event in the batch that changed it.
TouchedRows = dict[str, dict[str, int]]
#: One SQL statement with its arguments, ready to execute.
Statement = tuple[str, tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class StagedRows:
    """Rows COPYed into a temporary staging table, then upserted from it in one statement.

    For the many-row upserts (thousands of tasks per batch): asyncpg checks
    every element of an array parameter against collections.abc, which cost
    more than the rows themselves; COPY encodes rows without that.
    """

    stage: str  # the staging table (see STAGING_TABLES; emptied at commit)
    columns: tuple[str, ...]
    records: list[tuple[Any, ...]]
    upsert: str


#: What :func:`projection_statements` returns, in order.
ProjectionWrite = Statement | StagedRows

_dumps: Final = document_json
#: The projection_meta columns :func:`meta_arguments` gives values for, in order.
META_COLUMNS: Final = (
    "config", "config_version", "leader_epoch", "clock", "intents_clock", "observations_clock",
    "decisions_clock", "leader_key",
)  # fmt: skip
_MUTABLE_JOB_FIELDS: Final = ("phase", "phase_reason", "finished_at")
_UPSERT_NODES: Final = (
    "INSERT INTO nodes (name, seq, ready, unschedulable, doc)"
    " SELECT * FROM unnest($1::text[], $2::bigint[], $3::boolean[], $4::boolean[], $5::jsonb[])"
    " ON CONFLICT (name) DO UPDATE SET seq = EXCLUDED.seq, ready = EXCLUDED.ready,"
    " unschedulable = EXCLUDED.unschedulable, doc = EXCLUDED.doc"
)
_TASK_COLUMNS: Final = ("id", "job_id", "role", "idx", "status", "node", "seq")
# The staging tables' keys have the collation of the tables they are joined with (migration 0006).
_STAGE_TASKS: Final = (
    'CREATE TEMP TABLE IF NOT EXISTS tephra_stage_tasks (id text COLLATE "C", job_id text COLLATE "C",'
    " role text, idx integer, status text, node text, seq bigint) ON COMMIT DELETE ROWS"
)
# One simple-protocol round trip: the upsert, then transitional_tasks (migration 0005) brought
# in line with the new statuses.  That table, not an index on tasks, is what the simulated
# cluster polls, so that no index of tasks covers status and most task updates are HOT.
_UPSERT_TASKS: Final = (
    "INSERT INTO tasks (id, job_id, role, idx, status, node, seq)"
    " SELECT id, job_id, role, idx, status, node, seq FROM tephra_stage_tasks"
    " ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, node = EXCLUDED.node,"
    " seq = EXCLUDED.seq;"
    " DELETE FROM transitional_tasks w USING tephra_stage_tasks s"
    " WHERE w.id = s.id AND s.status NOT IN ('Bound', 'Releasing');"
    " INSERT INTO transitional_tasks (id) SELECT s.id FROM tephra_stage_tasks s"
    " WHERE s.status IN ('Bound', 'Releasing')"
    " AND NOT EXISTS (SELECT FROM transitional_tasks w WHERE w.id = s.id)"
)
_DELETE_TASKS: Final = (
    "WITH transitional AS (DELETE FROM transitional_tasks WHERE id = ANY($1::text[]))"
    " DELETE FROM tasks WHERE id = ANY($1::text[])"
)
_SESSION_COLUMNS: Final = (
    "session_id", "seq", "leader_epoch", "input_seq", "config_version", "now", "accepted", "voided", "doc",
)  # fmt: skip
_STAGE_SESSIONS: Final = (
    'CREATE TEMP TABLE IF NOT EXISTS tephra_stage_sessions (session_id text COLLATE "C", seq bigint,'
    " leader_epoch bigint, input_seq bigint, config_version integer, now timestamptz,"
    " accepted integer, voided integer, doc json) ON COMMIT DELETE ROWS"
)
_UPSERT_SESSIONS: Final = (
    "INSERT INTO sessions (session_id, seq, leader_epoch, input_seq, config_version, now,"
    " accepted, voided, doc)"
    " SELECT session_id, seq, leader_epoch, input_seq, config_version, now, accepted, voided, doc"
    " FROM tephra_stage_sessions"
    " ON CONFLICT (session_id) DO UPDATE SET seq = EXCLUDED.seq,"
    " leader_epoch = EXCLUDED.leader_epoch, input_seq = EXCLUDED.input_seq,"
    " config_version = EXCLUDED.config_version, now = EXCLUDED.now,"
    " accepted = EXCLUDED.accepted, voided = EXCLUDED.voided, doc = EXCLUDED.doc"
)
_JOB_COLUMNS: Final = (
    "id", "namespace", "name", "queue", "phase", "phase_reason", "created", "seq", "spec", "finished_at",
)  # fmt: skip
_STAGE_JOBS: Final = (
    'CREATE TEMP TABLE IF NOT EXISTS tephra_stage_jobs (id text COLLATE "C", namespace text, name text,'
    " queue text, phase text, phase_reason text, created timestamptz, seq bigint, spec jsonb,"
    " finished_at timestamptz)"
    " ON COMMIT DELETE ROWS"
)
_INSERT_JOBS: Final = (
    "INSERT INTO jobs (id, namespace, name, queue, phase, phase_reason, created, seq, spec, finished_at)"
    " SELECT id, namespace, name, queue, phase, phase_reason, created, seq, spec, finished_at"
    " FROM tephra_stage_jobs"
    " ON CONFLICT (id) DO UPDATE SET namespace = EXCLUDED.namespace, name = EXCLUDED.name,"
    " queue = EXCLUDED.queue, phase = EXCLUDED.phase, phase_reason = EXCLUDED.phase_reason,"
    " created = EXCLUDED.created, seq = EXCLUDED.seq, spec = EXCLUDED.spec,"
    " finished_at = EXCLUDED.finished_at"
)
_UPDATE_JOBS: Final = (
    "UPDATE jobs SET phase = u.phase, phase_reason = u.phase_reason, seq = u.seq,"
    " finished_at = u.finished_at"
    " FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::timestamptz[])"
    " AS u(id, phase, phase_reason, seq, finished_at)"
    " WHERE jobs.id = u.id"
)
_INSERT_EARLY: Final = (
    "INSERT INTO early_observations (job_id, since, seq, events)"
    " SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::bigint[], $4::jsonb[])"
)
_INSERT_PARTS: Final = (
    "INSERT INTO session_parts (session_id, idx, since, seq, items)"
    " SELECT * FROM unnest($1::text[], $2::integer[], $3::timestamptz[], $4::bigint[], $5::jsonb[])"
)
#: The newest session's changed pending entries (projector.newest_pending).
_STAGE_PENDING: Final = (
    'CREATE TEMP TABLE IF NOT EXISTS tephra_stage_pending (job text COLLATE "C", entry json)'
    " ON COMMIT DELETE ROWS"
)
#: The temporary tables the StagedRows above are COPYed into, created once per
#: connection by projection.create_staging.
STAGING_TABLES: Final = f"{_STAGE_TASKS}; {_STAGE_SESSIONS}; {_STAGE_JOBS}; {_STAGE_PENDING}"
#: The key of a session's row doc saying its pending list is the rows of ``newest_pending``
#: (its ``pending`` is null there): the newest session's, when the list is in job order.
PENDING_ROWS: Final = "pending_rows"


def _split(rows: dict[str, int], present: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Touched keys, sorted, as (still present, gone)."""
    keep: list[str] = []
    gone: list[str] = []
    for key in sorted(rows):
        (keep if key in present else gone).append(key)
    return keep, gone


def projection_statements(state: ClusterState, touched: TouchedRows) -> list[ProjectionWrite]:
    """The statements that bring the rows behind ``touched`` to ``state``, in order.

    Pure, and every value is read from ``state`` now: the statements stay
    right after the state has moved on (the service folds the next batch
    while this one commits).  Sessions are not among them: the state keeps
    only the newest ``MAX_SESSIONS``, so the writer records each session as
    it folds it and writes them with :func:`session_statement`.
    """
    out: list[ProjectionWrite] = []
    if rows := touched.get("queue"):
        keep, gone = _split(rows, state.queues)
        _upsert_docs(out, "queues", keep, rows, [_dumps(queue_to_json(state.queues[k])) for k in keep])
        _delete(out, "queues", "name", gone)
    if rows := touched.get("priority_class"):
        keep, gone = _split(rows, state.priority_classes)
        docs = [_dumps(priority_class_to_json(state.priority_classes[k])) for k in keep]
        _upsert_docs(out, "priority_classes", keep, rows, docs)
        _delete(out, "priority_classes", "name", gone)
    if rows := touched.get("hypernode"):
        keep, gone = _split(rows, state.hypernodes)
        docs = [_dumps(hypernode_to_json(state.hypernodes[k])) for k in keep]
        _upsert_docs(out, "hypernodes", keep, rows, docs)
        _delete(out, "hypernodes", "name", gone)
    if rows := touched.get("node"):
        keep, gone = _split(rows, state.nodes)
        nodes = [state.nodes[k] for k in keep]
        if keep:
            out.append(
                (
                    _UPSERT_NODES,
                    (
                        keep,
                        [rows[k] for k in keep],
                        [n.ready for n in nodes],
                        [n.unschedulable for n in nodes],
                        [_dumps(node_to_json(n)) for n in nodes],
                    ),
                )
            )
        _delete(out, "nodes", "name", gone)
    _job_statements(out, state, touched.get("new_job", {}), touched.get("job", {}))
    if rows := touched.get("task"):
        keep, gone = _split(rows, state.tasks)
        tasks = [state.tasks[k] for k in keep]
        if keep:
            task_rows = [
                (k, t.job, t.role, t.index, t.status, t.node, rows[k])
                for k, t in zip(keep, tasks, strict=True)
            ]
            out.append(StagedRows("tephra_stage_tasks", _TASK_COLUMNS, task_rows, _UPSERT_TASKS))
        if gone:
            out.append((_DELETE_TASKS, (gone,)))
    _buffer_statements(out, state, touched)
    return out


def _buffer_statements(out: list[ProjectionWrite], state: ClusterState, touched: TouchedRows) -> None:
    """The rows of the buffered entries the batch changed: deleted, then written again if
    still buffered (an entry's rows are small and few; the rest are not written)."""
    if rows := touched.get("early"):
        _delete(out, "early_observations", "job_id", sorted(rows))
        keep = [k for k in sorted(rows) if k in state.early_observations]
        if keep:
            entries = [state.early_observations[k] for k in keep]
            out.append(
                (
                    _INSERT_EARLY,
                    (
                        keep,
                        [stdlib_utc(e.since) for e in entries],
                        [rows[k] for k in keep],
                        [_dumps(observations_to_json(e.events)) for e in entries],
                    ),
                )
            )
    if rows := touched.get("parts"):
        _delete(out, "session_parts", "session_id", sorted(rows))
        parts = [
            (sid, index, buffered.since, part)
            for sid in sorted(rows)
            if (buffered := state.session_parts.get(sid)) is not None
            for index, part in sorted(buffered.parts.items())
        ]
        if parts:
            out.append(
                (
                    _INSERT_PARTS,
                    (
                        [p[0] for p in parts],
                        [p[1] for p in parts],
                        [stdlib_utc(p[2]) for p in parts],
                        [rows[p[0]] for p in parts],
                        [_dumps(part_to_json(p[3])) for p in parts],
                    ),
                )
            )


def session_statement(records: Sequence[SessionRecord]) -> StagedRows | None:
    """The upsert of these sessions' rows (None when there are none).

    Sessions are history: a row stays after its session leaves the state's
    window of the newest ``MAX_SESSIONS``.  A session recorded twice (folded, then
    without its pending list once a newer one was) is written as last recorded.
    """
    if not records:
        return None
    records = list({s.session_id: s for s in records}.values())
    # Times as stdlib UTC: asyncpg's COPY encodes them in a fifth of the time (archive.stdlib_utc).
    rows = [
        (
            s.session_id, s.seq, s.leader_epoch, s.input_seq, s.config_version, stdlib_utc(s.now), s.accepted,
            len(s.voided), _dumps(_session_doc(s)),
        )
        for s in records
    ]  # fmt: skip
    return StagedRows("tephra_stage_sessions", _SESSION_COLUMNS, rows, _UPSERT_SESSIONS)


def _session_doc(s: SessionRecord) -> dict[str, Any]:
    """The row's doc: the record, its pending list left to ``newest_pending`` when the rows give it back.

    Rows come back in job order (load_projection), so a list in strict job order
    (the scheduler's, and every change's) is left out; another (out of order, or
    naming a job twice) stays in the doc, where the load reads it as it was.
    """
    pending = s.pending
    if pending is None or not in_job_order(pending):
        return session_to_json(s)
    return session_to_json(without_pending(s)) | {PENDING_ROWS: True}


def _job_statements(
    out: list[ProjectionWrite], state: ClusterState, new: dict[str, int], changed: dict[str, int]
) -> None:
    if new:
        keep, gone = _split(new, state.jobs)
        jobs = [state.jobs[k] for k in keep]
        specs = []
        for job in jobs:
            spec = job_to_json(job)
            for name in _MUTABLE_JOB_FIELDS:
                del spec[name]
            specs.append(_dumps(spec))
        if keep:
            rows = [
                (j.id, j.namespace, j.name, j.queue, j.phase, j.phase_reason, stdlib_utc(j.created),
                 max(new[j.id], changed.get(j.id, 0)), spec, _finished_at(j))
                for j, spec in zip(jobs, specs, strict=True)
            ]  # fmt: skip
            out.append(StagedRows("tephra_stage_jobs", _JOB_COLUMNS, rows, _INSERT_JOBS))
        _delete(out, "jobs", "id", gone)
    updates = {k: v for k, v in changed.items() if k not in new}
    if updates:
        keep, gone = _split(updates, state.jobs)
        jobs = [state.jobs[k] for k in keep]
        if keep:
            out.append(
                (
                    _UPDATE_JOBS,
                    (
                        keep,
                        [j.phase for j in jobs],
                        [j.phase_reason for j in jobs],
                        [updates[k] for k in keep],
                        [_finished_at(j) for j in jobs],
                    ),
                )
            )
        _delete(out, "jobs", "id", gone)


def _finished_at(job: JobState) -> datetime | None:
    return None if job.finished_at is None else stdlib_utc(job.finished_at)


def _upsert_docs(
    out: list[ProjectionWrite], table: str, keys: list[str], rows: dict[str, int], docs: list[str]
) -> None:
    if keys:
        sql = (
            f"INSERT INTO {table} (name, seq, doc)"  # noqa: S608 - fixed table names
            " SELECT * FROM unnest($1::text[], $2::bigint[], $3::jsonb[])"
            " ON CONFLICT (name) DO UPDATE SET seq = EXCLUDED.seq, doc = EXCLUDED.doc"
        )
        out.append((sql, (keys, [rows[k] for k in keys], docs)))


def _delete(out: list[ProjectionWrite], table: str, column: str, keys: list[str]) -> None:
    if keys:
        out.append((f"DELETE FROM {table} WHERE {column} = ANY($1::text[])", (keys,)))  # noqa: S608


def meta_arguments(state: ClusterState) -> tuple[Any, ...]:
    """The projection_meta columns after seq, in :data:`META_COLUMNS` order."""
    config = None if state.config is None else _dumps(state.config.model_dump(mode="json"))
    # NULL for a role that has sent nothing (asyncpg reads year 1 back without its zone).
    intents, observations, decisions = (
        None if t == CLOCK_START else stdlib_utc(t) for t in state.role_clocks
    )
    return (
        config, state.config_version, state.leader_epoch, stdlib_utc(state.clock), intents, observations,
        decisions, state.leader_key,
    )  # fmt: skip
