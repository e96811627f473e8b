"""``replay audit preemptions``: exactly the evictions in event_log, re-derived."""

from __future__ import annotations

import asyncpg
import pytest

from replay.queries import audit_preemptions
from replay.store import open_archive
from tests.golden.archive import load_golden, load_rows
from tests.golden.history import LiveRun, gpu_node, job

pytestmark = pytest.mark.integration

_EVICTIONS_IN_LOG = """
    SELECT e.seq, (d.n - 1)::int AS position, d.value->>'task' AS task, d.value->>'action' AS action
    FROM event_log e, json_array_elements(e.data->'decisions') WITH ORDINALITY AS d(value, n)
    WHERE e.type IN ('tephra.session.committed.v1', 'tephra.session.part.v1') AND d.value->>'kind' = 'evict'
    ORDER BY e.seq, d.n
"""


def _reclaim_and_preempt() -> LiveRun:
    """Research fills the cluster while training is idle; training then reclaims its share."""
    run = LiveRun()
    run.configure_actions(["enqueue", "allocate", "preempt", "reclaim", "backfill"])
    run.priority_class("low", 10)
    run.priority_class("high", 1000)
    run.queue("research")
    run.queue("training")
    for i in range(1, 5):
        run.node(gpu_node(f"n{i}", 8))
    run.submit(job("fill", queue="research", replicas=4, gpu=8, min_available=1, priority_class="low"))
    run.cycle()
    run.submit(job("claim", queue="training", replicas=1, gpu=8))
    run.cycle()
    run.cycle()
    run.submit(job("urgent", queue="research", replicas=1, gpu=8, priority_class="high"))
    run.cycle()
    run.cycle()
    return run


async def _log_evictions(database_url: str) -> list[tuple[int, int, str, str]]:
    conn = await asyncpg.connect(database_url)
    try:
        return [
            (r["seq"], r["position"], r["task"], r["action"]) for r in await conn.fetch(_EVICTIONS_IN_LOG)
        ]
    finally:
        await conn.close()


async def test_audit_lists_exactly_the_evictions_in_event_log(database_url: str) -> None:
    run = _reclaim_and_preempt()
    await load_rows(database_url, [r.to_json() for r in run.rows])
    async with open_archive(database_url) as reader:
        rows = await audit_preemptions(reader)
    in_log = await _log_evictions(database_url)
    assert {a for *_, a in in_log} == {"preempt", "reclaim"}
    assert [(r.seq, r.position, r.victim_task, r.action) for r in rows] == in_log
    assert all(r.verified for r in rows)

    reclaim = next(r for r in rows if r.action == "reclaim")
    assert (reclaim.victim_queue, reclaim.preemptor_queue) == ("research", "training")
    assert reclaim.preemptor_job == "ml/claim"
    # Research held the whole cluster (32 GPUs); proportion's water-filling gives training its
    # request (8) and research the rest (24), so research is over its share until the eviction.
    assert reclaim.victim_share_before.allocated["nvidia.com/gpu"] == 32
    assert reclaim.victim_share_before.deserved["nvidia.com/gpu"] == 24
    assert reclaim.victim_share_after.allocated["nvidia.com/gpu"] == 24
    assert reclaim.victim_share_before.share > reclaim.victim_share_after.share
    assert reclaim.preemptor_share_after.share > reclaim.preemptor_share_before.share

    preempt = next(r for r in rows if r.action == "preempt")
    assert preempt.victim_queue == preempt.preemptor_queue == "research"
    assert (preempt.victim_priority, preempt.preemptor_priority) == (10, 1000)
    assert preempt.rule


async def test_audit_filters_by_queue_job_and_time(database_url: str) -> None:
    run = _reclaim_and_preempt()
    await load_rows(database_url, [r.to_json() for r in run.rows])
    async with open_archive(database_url) as reader:
        everything = await audit_preemptions(reader)
        by_job = await audit_preemptions(reader, job="ml/claim")
        by_queue = await audit_preemptions(reader, queue="training")
        late = await audit_preemptions(reader, since=max(r.time for r in everything))
    assert [r.action for r in by_job] == ["reclaim"]
    assert by_queue == by_job
    assert late == [r for r in everything if r.time == max(x.time for x in everything)]


async def test_golden_audit_is_verified(database_url: str) -> None:
    await load_golden(database_url, "gpu_cluster")
    async with open_archive(database_url) as reader:
        rows = await audit_preemptions(reader)
    assert [(r.seq, r.position, r.victim_task, r.action) for r in rows] == await _log_evictions(database_url)
    assert rows
    assert all(r.verified for r in rows)
