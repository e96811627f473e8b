"""Issue 6's acceptance on an archive produced by the live stack (real broker, real PostgreSQL).

Projector, scheduler and simulated cluster run as ``tephra up`` runs them; a
gang that cannot fit stays Pending.  Replay then explains it with the right
reasons and numbers, its counterfactual is produced as events through the
broker and the next session binds the gang, and the audit lists exactly the
evictions in ``event_log``; ``replay verify`` passes before and after.
"""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg
import pytest

from api.endpoints import Endpoints
from events.topics import Topics
from projector.migrate import apply_migrations
from replay.queries import audit_preemptions, explain_job, verify_archive
from replay.store import open_archive
from tests.api.test_live_scheduling import NODE, PENDING_IN_SESSIONS, PHASE, SETUP, live_stack, submit, vcjob
from tests.service.helpers import produce, wait_for

pytestmark = pytest.mark.integration

_LOG_EVICTIONS = """
    SELECT e.seq, (d.n - 1)::int AS position, d.value->>'task' AS task
    FROM event_log e, json_array_elements(e.data->'decisions') WITH ORDINALITY AS d(value, n)
    WHERE e.type IN ('tephra.session.committed.v1', 'tephra.session.part.v1') AND d.value->>'kind' = 'evict'
    ORDER BY e.seq, d.n
"""


async def _verified(database_url: str) -> None:
    async with open_archive(database_url) as reader:
        report = await verify_archive(reader)
    assert report.ok, [str(d) for d in report.divergences]
    assert report.sessions > 0


async def test_explain_counterfactual_audit_and_verify_on_a_live_archive(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    endpoints = Endpoints(kafka_bootstrap, database_url, topics, "default")
    conn = await asyncpg.connect(database_url)
    await apply_migrations(conn)
    await conn.close()
    async with live_stack(endpoints):
        conn = await asyncpg.connect(database_url)
        try:
            await submit(
                endpoints, SETUP + "---\n" + NODE.format(name="n1") + "---\n" + NODE.format(name="n2")
            )
            await wait_for(conn, "SELECT count(*) FROM nodes", 2)
            await wait_for(conn, "SELECT config_version FROM projection_meta", 1)
            # 3 x 4 GPU as one gang on 2 x 4 GPU nodes: it cannot fit.
            await submit(endpoints, vcjob("gang", replicas=3, gpu=4, priority="low"))
            await wait_for(conn, PENDING_IN_SESSIONS, True, "default/gang", 1)

            await _verified(database_url)
            async with open_archive(database_url) as reader:
                explanation = await explain_job(reader, "default/gang")
            # The job controller's minResources (3 x 4 GPU) exceed overcommit's 1.2 x 8 GPU: the gang is
            # never admitted, which is what Volcano says too.
            (reason,) = explanation.reasons
            assert reason["code"] == "enqueue-rejected"
            assert reason["message"] == (
                "resource in cluster is overused: overused nvidia.com/gpu "
                "(nvidia.com/gpu: inqueue 0 + request 12 > total 8 x 1.2 - used 0)"
            )
            assert reason["detail"]["plugin"] == "overcommit"
            assert reason["detail"]["resources"]["nvidia.com/gpu"]["request"] == 12
            assert explanation.reasons_rederived
            assert explanation.timeline[0].kind == "submitted"

            cf = explanation.counterfactual
            assert cf is not None
            assert cf.found, cf.note
            (change,) = cf.changes
            assert change.kind == "add-nodes"
            assert len(change.nodes) == 1
            assert change.nodes[0].allocatable["nvidia.com/gpu"] == 4

            # Apply it as events, through the broker: the next session binds the whole gang.
            events = change.to_events(
                cluster="default", time=datetime.now(UTC), source="tephra://test", id_prefix="counterfactual"
            )
            node_seq_before = await conn.fetchval("SELECT coalesce(max(seq), 0) FROM event_log")
            await produce(kafka_bootstrap, topics, events)
            await wait_for(conn, "SELECT count(*) FROM nodes", 3)
            await wait_for(conn, PHASE, "Running", "default/gang", within=60)
            first_after = await conn.fetchval(
                "SELECT min(seq) FROM sessions WHERE seq > (SELECT max(seq) FROM event_log"
                " WHERE type = 'tephra.node.reported.v1' AND seq > $1)",
                node_seq_before,
            )
            bound_at = await conn.fetch("SELECT DISTINCT seq FROM bindings WHERE job_id = 'default/gang'")
            assert [r["seq"] for r in bound_at] == [first_after]

            in_log = [tuple(r) for r in await conn.fetch(_LOG_EVICTIONS)]
        finally:
            await conn.close()

    await _verified(database_url)
    async with open_archive(database_url) as reader:
        rows = await audit_preemptions(reader)
    # Preemption rows, with victims and queue shares, are exercised on LiveRun archives in
    # test_audit.py: on this small cluster Volcano's enqueue rules keep a later high-priority job
    # from being admitted at all, so this archive has no eviction and the audit must say so.
    assert [(r.seq, r.position, r.victim_task) for r in rows] == in_log
    assert all(r.verified for r in rows)
