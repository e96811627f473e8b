"""Issue 6's acceptance on an archive produced by the live stack (real broker, real PostgreSQL).

Projector, scheduler and simulated cluster run as ``tephra up`` runs them; a
gang that cannot fit stays Pending.  Replay then explains it with the right
reasons and numbers, its counterfactual is produced as events through the
broker and the next session binds the gang, and the audit lists exactly the
evictions in ``event_log``; ``replay verify`` passes before and after.  A
second archive holds a real preemption (a high-priority job evicting a gang
task): ``replay audit preemptions --format json`` lists exactly that evict
decision (session, seq, position, victim, preemptor, action, rule), verified,
and the console script's ``verify`` and ``audit`` print the same bytes under
two PYTHONHASHSEEDs.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from api.endpoints import Endpoints
from events.topics import Topics
from projector.migrate import apply_migrations
from replay.queries import audit_preemptions, explain_job, verify_archive
from replay.store import open_archive
from tests.api.test_live_scheduling import NODE, PHASE, SETUP, live_stack, submit, vcjob, wait_left_pending
from tests.replay.helpers import SEEDS, run_replay
from tests.service.helpers import first_session_that_saw, produce, wait_for

pytestmark = pytest.mark.integration

_LOG_EVICTIONS = """
    SELECT e.seq, (d.n - 1)::int AS position, d.value->>'task' AS task
    FROM event_log e, json_array_elements(e.data->'decisions') WITH ORDINALITY AS d(value, n)
    WHERE e.type IN ('tephra.session.committed.v1', 'tephra.session.part.v1') AND d.value->>'kind' = 'evict'
    ORDER BY e.seq, d.n
"""


# Every evict decision the live scheduler recorded, in seq then decision order.  Positions are
# the marker's own: the test asserts these sessions were not split into parts.
_LOG_EVICT_DECISIONS = """
    SELECT e.seq, e.data->>'session_id' AS session, (d.n - 1)::int AS position, d.value->>'action' AS action,
           d.value->>'node' AS node, d.value->>'task' AS victim_task, d.value->>'job' AS victim_job,
           d.value->>'preemptor_task' AS preemptor_task, d.value->>'preemptor_job' AS preemptor_job,
           d.value->>'rule' AS rule
    FROM event_log e, json_array_elements(e.data->'decisions') WITH ORDINALITY AS d(value, n)
    WHERE e.type = 'tephra.session.committed.v1' AND d.value->>'kind' = 'evict'
    ORDER BY e.seq, d.n
"""


def _audit_key(row: dict[str, Any]) -> tuple[Any, ...]:
    """An audit JSON row in the shape of an evict decision in event_log."""
    victim, preemptor = row["victim"], row["preemptor"]
    return (
        row["seq"],
        row["session"],
        row["position"],
        row["action"],
        row["node"],
        victim["task"],
        victim["job"],
        preemptor["task"],
        preemptor["job"],
        row["rule"],
    )


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
            await wait_left_pending(conn, "default/gang", 1)

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
            node_seq = await conn.fetchval(
                "SELECT max(seq) FROM event_log WHERE type = 'tephra.node.reported.v1' AND seq > $1",
                node_seq_before,
            )
            first_after = await first_session_that_saw(conn, node_seq)
            bound_at = await conn.fetch("SELECT DISTINCT seq FROM bindings WHERE job_id = 'default/gang'")
            assert [r["seq"] for r in bound_at] == [first_after]

            in_log = [tuple(r) for r in await conn.fetch(_LOG_EVICTIONS)]
        finally:
            await conn.close()

    await _verified(database_url)
    async with open_archive(database_url) as reader:
        rows = await audit_preemptions(reader)
    # This archive has no eviction (the gang fills every GPU, and Volcano's enqueue rules keep a
    # later high-priority job from being admitted at all), and the audit must say so; the next
    # test makes a live archive with a real preemption.
    assert [(r.seq, r.position, r.victim_task) for r in rows] == in_log
    assert all(r.verified for r in rows)


async def test_a_live_preemption_is_audited_exactly_as_event_log_records_it(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    """A higher-priority job preempts on the live stack; the audit lists that eviction and only it."""
    endpoints = Endpoints(kafka_bootstrap, database_url, topics, "default")
    async with live_stack(endpoints):
        conn = await asyncpg.connect(database_url)
        try:
            nodes = "".join("---\n" + NODE.format(name=f"n{i}") for i in (1, 2, 3))
            await submit(endpoints, SETUP + nodes)
            await wait_for(conn, "SELECT count(*) FROM nodes", 3)
            await wait_for(conn, "SELECT config_version FROM projection_meta", 1)
            # 3 x 3 GPU, one task per 4-GPU node: one GPU is left on each node.
            await submit(endpoints, vcjob("gang", replicas=3, gpu=3, priority="low"))
            await wait_for(conn, PHASE, "Running", "default/gang", within=60)
            # A high-priority job that needs two GPUs on one node preempts a low-priority gang task.
            await submit(endpoints, vcjob("urgent", replicas=1, gpu=2, priority="high"))
            await wait_for(conn, PHASE, "Running", "default/urgent", within=60)
            accepted = [
                tuple(r) for r in await conn.fetch("SELECT seq, decision FROM evictions ORDER BY seq")
            ]
            records = await conn.fetch(_LOG_EVICT_DECISIONS)
            assert (
                await conn.fetchval("SELECT count(*) FROM event_log WHERE type = 'tephra.session.part.v1'")
                == 0
            )
        finally:
            await conn.close()

    # A real preemption happened: the fold accepted it, and it is the one in the log.
    in_log = [tuple(r) for r in records]
    assert len(in_log) == 1, in_log
    (evict,) = records
    assert accepted == [(evict["seq"], evict["position"])]
    assert (evict["action"], evict["victim_job"], evict["preemptor_job"]) == (
        "preempt",
        "default/gang",
        "default/urgent",
    )
    assert evict["victim_task"].startswith("default/gang-worker-")
    assert evict["preemptor_task"] == "default/urgent-worker-0"
    assert evict["rule"]

    audits, verifies = [], []
    for seed in SEEDS:
        audit = run_replay(database_url, "audit", "preemptions", "--format", "json", seed=seed)
        assert audit.returncode == 0, audit.stderr
        audits.append(audit.stdout)
        verify = run_replay(database_url, "verify", "--format", "json", seed=seed)
        assert verify.returncode == 0, verify.stdout + verify.stderr
        verifies.append(verify.stdout)
    assert audits[0] == audits[1]
    assert verifies[0] == verifies[1]
    report = json.loads(verifies[0])
    assert report["ok"] is True
    assert report["sessions"] > 0

    rows = json.loads(audits[0])["items"]
    assert [_audit_key(r) for r in rows] == in_log
    assert all(r["verified"] for r in rows)
    assert all(r["voided"] is None for r in rows)
    (row,) = rows
    assert (row["victim"]["priority"], row["preemptor"]["priority"]) == (10, 1000)
    assert row["victim"]["queue"] == row["preemptor"]["queue"] == "default"
