"""The bridge's reads of the projection (PostgreSQL) and its lock: one active bridge per cluster.

Only jobs the bridge submitted are its business: they carry the
``tephra.dev/kube-source`` annotation (``kube.bridge.objects``), so jobs from
``tephra submit`` in the same deployment are never touched.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from typing import Final

import asyncpg

from kube.bridge.door import ProjectedState
from kube.bridge.plan import ProjectedTask
from kube.rest import JsonObject
from projector.connections import DatabaseAccess, connect
from projector.state import TERMINAL_JOB_PHASES

__all__ = ["BridgeLock", "projection_seq", "read_projected_state", "read_tasks"]

log = logging.getLogger(__name__)

_LOCK_SQL: Final = "SELECT pg_try_advisory_lock(hashtextextended('tephra-kube-bridge:' || $1, 0))"

# The tasks of the bridge's jobs (their spec carries the kube-source annotation, a literal here so
# the filter reads it from the job's spec), with the preemptor of a Releasing task's eviction:
# those in transition (Bound, Releasing: what to execute), given ones (pods that changed), and
# every unfinished one (after a start or a relist of pods).
_SELECT: Final = """
SELECT t.id, t.job_id, t.status, t.node, t.seq,
       j.spec -> 'annotations' ->> 'tephra.dev/kube-source' AS kind,
       ev.preemptor_job
"""
_JOIN: Final = """
  JOIN jobs j ON j.id = t.job_id
  LEFT JOIN LATERAL (SELECT e.preemptor_job FROM evictions e
                      WHERE e.task_id = t.id AND t.status = 'Releasing'
                      ORDER BY e.seq DESC LIMIT 1) ev ON true
 WHERE j.spec -> 'annotations' ? 'tephra.dev/kube-source'
"""
TRANSITIONAL_QUERY: Final = (
    _SELECT  # noqa: S608 - constants joined, no input
    + """
  FROM transitional_tasks w
 CROSS JOIN LATERAL (SELECT * FROM tasks
                      WHERE tasks.id = w.id AND tasks.status IN ('Bound', 'Releasing') OFFSET 0) AS t
"""
    + _JOIN
)
# Those that changed after a seq: tasks Bound long ago whose pods show no node yet (a backlog the
# apiserver is working through; no kubelet in a bench) are not read, joined and planned again at
# every new seq.
CHANGED_TRANSITIONAL_QUERY: Final = (
    _SELECT  # noqa: S608 - constants joined, no input
    + """
  FROM transitional_tasks w
 CROSS JOIN LATERAL (SELECT * FROM tasks
                      WHERE tasks.id = w.id AND tasks.status IN ('Bound', 'Releasing') AND tasks.seq > $1
                     OFFSET 0) AS t
"""
    + _JOIN
)
GIVEN_QUERY: Final = _SELECT + "  FROM tasks t" + _JOIN + "   AND t.id = ANY($1::text[])"
UNFINISHED_QUERY: Final = (
    _SELECT + "  FROM tasks t" + _JOIN + "   AND t.status IN ('Pending', 'Bound', 'Running', 'Releasing')"
)


# The task specs' names of the unfinished PodGroups' jobs the bridge submitted (one spec per member
# pod): pods may join them.  (A finished job takes none: the fold would refuse it, job-finished.)
GROUP_ROLES_QUERY: Final = """
SELECT id, ARRAY(SELECT s ->> 'name' FROM jsonb_array_elements(spec -> 'task_specs') AS s) AS roles
  FROM jobs
 WHERE spec -> 'annotations' ->> 'tephra.dev/kube-source' = 'podgroup'
   AND phase <> ALL($1::text[])
"""


def _task(row: asyncpg.Record) -> ProjectedTask:
    return ProjectedTask(
        task_id=row["id"],
        job_id=row["job_id"],
        status=row["status"],
        node=row["node"],
        seq=row["seq"],
        kind=row["kind"] or "",
        preemptor=row["preemptor_job"],
    )


async def projection_seq(pool: asyncpg.Pool) -> int:
    """The seq the projection has applied up to: when it has not moved, no decision is new."""
    seq = await pool.fetchval("SELECT seq FROM projection_meta")
    return int(seq or 0)


async def read_tasks(
    pool: asyncpg.Pool,
    given: Sequence[str] = (),
    *,
    everything: bool = False,
    transitional: bool = True,
    changed_after: int | None = None,
) -> list[ProjectedTask]:
    """The bridge's tasks in transition (unless ``transitional`` is false; only those whose row
    changed after the seq ``changed_after`` when given), plus ``given`` ones; or every unfinished one."""
    if everything:
        rows = list(await pool.fetch(UNFINISHED_QUERY))
    elif transitional and changed_after is not None:
        rows = list(await pool.fetch(CHANGED_TRANSITIONAL_QUERY, changed_after))
    elif transitional:
        rows = list(await pool.fetch(TRANSITIONAL_QUERY))
    else:
        rows = []
    if given and not everything:
        seen = {row["id"] for row in rows}
        rows.extend(r for r in await pool.fetch(GIVEN_QUERY, sorted(given)) if r["id"] not in seen)
    return [_task(row) for row in rows]


def _doc(value: object) -> JsonObject:
    loaded = json.loads(value) if isinstance(value, str) else value
    return loaded if isinstance(loaded, dict) else {}


async def read_projected_state(pool: asyncpg.Pool) -> ProjectedState:
    """Nodes, queues, priority classes and HyperNodes as projected, and every job id."""
    state = ProjectedState()
    for row in await pool.fetch("SELECT name, doc FROM nodes"):
        state.nodes[row["name"]] = _doc(row["doc"])
    for row in await pool.fetch("SELECT name, doc FROM queues"):
        state.queues[row["name"]] = _doc(row["doc"])
    for row in await pool.fetch("SELECT name, doc FROM priority_classes"):
        state.priority_classes[row["name"]] = _doc(row["doc"])
    for row in await pool.fetch("SELECT name, doc FROM hypernodes"):
        state.hypernodes[row["name"]] = _doc(row["doc"])
    state.jobs = {row["id"] for row in await pool.fetch("SELECT id FROM jobs")}
    for row in await pool.fetch(GROUP_ROLES_QUERY, sorted(TERMINAL_JOB_PHASES)):
        state.group_roles[row["id"]] = set(row["roles"] or ())
    return state


class BridgeLock:
    """A PostgreSQL session advisory lock held on a connection of its own while the bridge runs."""

    def __init__(self, database: DatabaseAccess, cluster: str) -> None:
        self.database = database
        self.cluster = cluster
        self._conn: asyncpg.Connection | None = None

    async def acquire(self, retry: float = 1.0) -> None:
        """Wait until this process holds the lock (another bridge of the cluster holds it meanwhile)."""
        waited = False
        while True:
            conn = await connect(self.database)
            if await conn.fetchval(_LOCK_SQL, self.cluster):
                self._conn = conn
                log.info("kube bridge %s: holding the bridge lock", self.cluster)
                return
            await conn.close()
            if not waited:
                log.info("kube bridge %s: another bridge is active; waiting for its lock", self.cluster)
                waited = True
            await asyncio.sleep(retry)

    async def check(self) -> None:
        """Raises when the lock's connection is gone (then the lock is gone too)."""
        if self._conn is None:
            raise RuntimeError("the bridge lock is not held")
        await self._conn.fetchval("SELECT 1")

    async def release(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()
