"""Issue 5's acceptance, end to end: ``tephra up``'s composition on the real broker and real PostgreSQL.

Projector, scheduler and simulated cluster run as :func:`api.stack.run_services`
runs them; everything enters through the same path as ``tephra submit``.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import asyncpg
import pytest

from api.endpoints import Endpoints
from api.manifests import parse_manifests
from api.submit import produce_manifests
from events.topics import Topics
from replay.archive import recorded_sessions
from replay.store import ArchiveReader
from tests.api.helpers import live_stack
from tests.service.helpers import first_session_that_saw, wait_for

pytestmark = pytest.mark.integration

SETUP = """\
apiVersion: tephra.dev/v1alpha1
kind: SchedulerConfiguration
metadata: {name: with-preempt}
spec:
  actions: "enqueue, allocate, preempt, backfill"
  tiers:
    - plugins: [{name: priority}, {name: gang, enablePreemptable: false}, {name: conformance}]
    - plugins: [{name: overcommit}, {name: drf, enablePreemptable: false}, {name: predicates},
                {name: proportion}, {name: nodeorder}, {name: binpack}]
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: default}
spec: {weight: 1}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: low}
value: 10
"""

NODE = """\
apiVersion: v1
kind: Node
metadata: {{name: {name}}}
status: {{allocatable: {{cpu: "16", memory: 64Gi, nvidia.com/gpu: "4", pods: "110"}}}}
"""


def vcjob(name: str, replicas: int, gpu: int, priority: str, cpu: str = "1") -> str:
    resources = f"{{cpu: '{cpu}', nvidia.com/gpu: {gpu}}}" if gpu else f"{{cpu: '{cpu}'}}"
    return f"""\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {{name: {name}}}
spec:
  minAvailable: {replicas}
  priorityClassName: {priority}
  tasks:
    - name: worker
      replicas: {replicas}
      template:
        spec:
          priorityClassName: {priority}
          containers: [{{name: c, resources: {{requests: {resources}}}}}]
"""


async def submit(endpoints: Endpoints, text: str) -> None:
    manifests = parse_manifests([("test.yaml", text)], cluster=endpoints.cluster, now=datetime.now(UTC))
    await produce_manifests(manifests, endpoints)


PHASE = "SELECT phase FROM jobs WHERE id = $1"


async def set_up(endpoints: Endpoints, conn: asyncpg.Connection, *nodes: str) -> None:
    """SETUP and ``nodes``, submitted and projected (the configuration too)."""
    await submit(endpoints, "---\n".join([SETUP, *(NODE.format(name=n) for n in nodes)]))
    await wait_for(conn, "SELECT count(*) FROM nodes", len(nodes))
    await wait_for(conn, "SELECT config_version FROM projection_meta", 1)


async def wait_left_pending(conn: asyncpg.Connection, job: str, sessions: int, within: float = 30) -> None:
    """Until at least ``sessions`` archived sessions left ``job`` pending with a reason: their whole
    pending lists as replay reads them (a session may record only the change from the one before)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        archived = [row async for row in ArchiveReader(conn).rows()]
        left = sum(
            any(p.job == job and p.reasons for p in s.data.pending) for s in recorded_sessions(archived)
        )
        if left >= sessions:
            return
        if loop.time() > deadline:
            pytest.fail(f"{left} archived sessions left {job} pending, not {sessions}, after {within} s")
        await asyncio.sleep(0.1)


async def test_gang_waits_with_a_reason_binds_after_new_capacity_and_a_higher_priority_job_preempts(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    endpoints = Endpoints(kafka_bootstrap, database_url, topics, "default")
    async with live_stack(endpoints):
        conn = await asyncpg.connect(database_url)
        try:
            await set_up(endpoints, conn, "n1", "n2")

            # 3 x 3 GPU as one gang on 2 x 4 GPU: it cannot fit, and stays Pending with a reason...
            await submit(endpoints, vcjob("gang", replicas=3, gpu=3, priority="low"))
            await wait_left_pending(conn, "default/gang", 1)
            # ... across sessions: a small job makes the scheduler run again.
            await submit(endpoints, vcjob("filler", replicas=1, gpu=0, priority="low"))
            await wait_for(conn, PHASE, "Running", "default/filler")
            await wait_left_pending(conn, "default/gang", 2)
            assert await conn.fetchval(PHASE, "default/gang") == "Pending"
            assert await conn.fetchval("SELECT count(*) FROM bindings WHERE job_id = 'default/gang'") == 0

            # A third node: the next session places the whole gang.
            await submit(endpoints, NODE.format(name="n3"))
            await wait_for(conn, "SELECT count(*) FROM nodes", 3)
            node_seq = await conn.fetchval(
                "SELECT max(seq) FROM event_log WHERE type = 'tephra.node.reported.v1'"
            )
            await wait_for(conn, PHASE, "Running", "default/gang")
            first_after = await first_session_that_saw(conn, node_seq)
            gang_binding_seqs = await conn.fetch(
                "SELECT DISTINCT seq FROM bindings WHERE job_id = 'default/gang'"
            )
            assert [r["seq"] for r in gang_binding_seqs] == [first_after]

            # One GPU is left on each node; a high-priority job that needs two preempts a low-priority pod.
            # (With less headroom overcommit and proportion would not even enqueue it, as in Volcano.)
            await submit(endpoints, vcjob("urgent", replicas=1, gpu=2, priority="high"))
            await wait_for(conn, PHASE, "Running", "default/urgent", within=60)
            evictions = await conn.fetch("SELECT job_id, action, preemptor_job FROM evictions")
            assert [tuple(r) for r in evictions] == [("default/gang", "preempt", "default/urgent")]

            await _assert_every_decision_is_archived_and_executed_once(conn)
        finally:
            await conn.close()


async def _assert_every_decision_is_archived_and_executed_once(conn: asyncpg.Connection) -> None:
    # Every accepted decision comes from a SessionCommitted in the archive, with the same session id.
    orphans = await conn.fetchval(
        """
        SELECT count(*) FROM (
            SELECT seq, session_id FROM bindings UNION ALL SELECT seq, session_id FROM evictions
        ) d
        LEFT JOIN event_log e ON e.seq = d.seq AND e.type = 'tephra.session.committed.v1'
         WHERE e.seq IS NULL OR (e.data::jsonb ->> 'session_id') <> d.session_id
        """
    )
    assert orphans == 0
    # Every bind/evict in the archive is either accepted (in bindings/evictions) or recorded as voided.
    archived = await conn.fetchval(
        """
        SELECT count(*) FROM event_log, jsonb_array_elements(data::jsonb -> 'decisions') AS d
         WHERE type = 'tephra.session.committed.v1' AND d ->> 'kind' IN ('bind', 'evict')
        """
    )
    accepted = await conn.fetchval(
        "SELECT (SELECT count(*) FROM bindings) + (SELECT count(*) FROM evictions)"
    )
    voided = await conn.fetchval(
        """
        SELECT count(*) FROM sessions, json_array_elements(doc -> 'voided') AS v
         WHERE v ->> 'kind' IN ('bind', 'evict')
        """
    )
    assert archived == accepted + voided
    # Executed once: one TaskStarted per accepted binding, one evicted TaskFinished per eviction.
    per_task = await conn.fetch(
        """
        SELECT t.task_id,
               (SELECT count(*) FROM bindings b WHERE b.task_id = t.task_id) AS bound,
               (SELECT count(*) FROM event_log e WHERE e.type = 'tephra.task.started.v1'
                                                   AND e.subject = 'task/' || t.task_id) AS started,
               (SELECT count(*) FROM evictions v WHERE v.task_id = t.task_id) AS evicted,
               (SELECT count(*) FROM event_log e WHERE e.type = 'tephra.task.finished.v1'
                                                   AND e.subject = 'task/' || t.task_id
                                                   AND e.data::jsonb ->> 'outcome' = 'evicted') AS stopped
          FROM (SELECT DISTINCT task_id FROM bindings) t
        """
    )
    for row in per_task:
        assert row["started"] <= row["bound"], dict(row)
        assert row["stopped"] <= row["evicted"], dict(row)
    assert await conn.fetchval("SELECT count(*) FROM rejected_events") == 0


GATED = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: gated}
spec:
  minAvailable: 1
  tasks:
    - name: worker
      replicas: 1
      template:
        spec:
          schedulingGates: [{name: example.com/quota-check}]
          containers: [{name: c, resources: {requests: {cpu: "1"}}}]
"""


async def test_a_submitted_gated_job_stays_pending_with_scheduling_gated(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    endpoints = Endpoints(kafka_bootstrap, database_url, topics, "default")
    async with live_stack(endpoints):
        conn = await asyncpg.connect(database_url)
        try:
            await set_up(endpoints, conn, "n1")
            await submit(endpoints, GATED)
            # An ungated job submitted after it runs: the scheduler has seen the gated one.
            await submit(endpoints, vcjob("open", replicas=1, gpu=0, priority="low"))
            await wait_for(conn, PHASE, "Running", "default/open")
            await wait_left_pending(conn, "default/gated", 1)
            archived = [row async for row in ArchiveReader(conn).rows()]
            codes = {
                r.code
                for s in recorded_sessions(archived)
                for p in s.data.pending
                if p.job == "default/gated"
                for r in p.reasons
            }
            assert "scheduling-gated" in codes, codes
            # Admitted by enqueue as Volcano admits it (Inqueue), but its pod is not placed.
            assert await conn.fetchval(PHASE, "default/gated") in ("Pending", "Inqueue")
            statuses = await conn.fetch("SELECT status FROM tasks WHERE job_id = 'default/gated'")
            assert [r["status"] for r in statuses] == ["Pending"]
            assert await conn.fetchval("SELECT count(*) FROM bindings WHERE job_id = 'default/gated'") == 0
        finally:
            await conn.close()
