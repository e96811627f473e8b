"""The scheduler service against the real broker, the real PostgreSQL and the real projector."""

from __future__ import annotations

import asyncio
import itertools
import json

import asyncpg
import pytest

from events.topics import Topics
from tests.service.helpers import job, node, produce, queue, running_projector, running_scheduler, wait_for

pytestmark = pytest.mark.integration

BOUND = "SELECT count(*) FROM tasks WHERE status = 'Bound'"


async def test_a_session_publishes_decisions_the_projector_applies(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    await produce(
        kafka_bootstrap,
        topics,
        [
            queue(),
            node("n1"),
            node("n2"),
            job("train", replicas=3, cpu="3"),
            job("huge", replicas=3, cpu="9"),
        ],
    )
    async with (
        running_projector(kafka_bootstrap, database_url, topics),
        running_scheduler(kafka_bootstrap, database_url, topics, schedule_period=0.2),
    ):
        conn = await asyncpg.connect(database_url)
        try:
            await wait_for(conn, BOUND, 3)
            await wait_for(conn, "SELECT count(*) FROM bindings", 3)
            row = await conn.fetchrow(
                "SELECT data::jsonb AS data FROM event_log WHERE type = 'tephra.session.committed.v1'"
                " AND jsonb_array_length(data::jsonb -> 'decisions') > 0 ORDER BY seq LIMIT 1"
            )
            timing = await conn.fetchrow(
                "SELECT * FROM scheduler_session_timings ORDER BY applied_seq LIMIT 1"
            )
        finally:
            await conn.close()
    data = json.loads(row["data"])
    assert data["leader_epoch"] == 1
    assert len(data["input_digest"]) == 64
    assert data["pending_digest"].startswith("sha256:")
    kinds = [d["kind"] for d in data["decisions"]]
    assert kinds[0] == "enqueue"
    assert kinds.count("bind") == 3
    assert {d["job"] for d in data["decisions"] if d["kind"] == "bind"} == {"ns/train"}
    # The gang that cannot fit (9 cpu per task, 8-cpu nodes) is recorded with its reasons.
    (pending,) = [p for p in data["pending"] if p["job"] == "ns/huge"]
    assert pending["reasons"]
    assert all(r["code"] and r["message"] for r in pending["reasons"])
    assert timing is not None
    assert timing["leader_epoch"] == 1
    assert timing["compute_seconds"] > 0


async def test_sessions_wait_for_their_own_writes_and_skip_when_nothing_changed(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    await produce(kafka_bootstrap, topics, [queue(), node("n1"), job("a", replicas=2, cpu="2")])
    async with (
        running_projector(kafka_bootstrap, database_url, topics),
        running_scheduler(kafka_bootstrap, database_url, topics, schedule_period=0.1) as metrics,
    ):
        conn = await asyncpg.connect(database_url)
        try:
            await wait_for(conn, BOUND, 2)
            # One more session runs on the state the binding session left, finds nothing to do, and from
            # then on every period is skipped: no new SessionCommitted while nothing arrives.
            await asyncio.sleep(0.5)
            settled = await conn.fetchval("SELECT count(*) FROM sessions")
            skipped = metrics.skipped
            await asyncio.sleep(1.0)
            assert await conn.fetchval("SELECT count(*) FROM sessions") == settled
            assert metrics.skipped >= skipped + 5

            # New capacity and a new job: the next session places it.
            await produce(kafka_bootstrap, topics, [job("b", replicas=1, cpu="7"), node("n2")])
            await wait_for(conn, BOUND, 3)
            rows = await conn.fetch("SELECT seq, input_seq, leader_epoch FROM sessions ORDER BY seq")
        finally:
            await conn.close()
    # Read-your-writes: every session saw the state its predecessor produced.
    for previous, current in itertools.pairwise(rows):
        assert current["input_seq"] >= previous["seq"]
    assert {r["leader_epoch"] for r in rows} == {1}


async def test_a_session_over_budget_is_abandoned_and_nothing_is_published(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    # Thousands of tasks: a session takes far longer than a GIL switch interval, so it cannot finish
    # before the loop notices the microsecond budget has passed.
    await produce(
        kafka_bootstrap, topics, [queue(), node("n1"), *(job(f"a{i}", replicas=50) for i in range(40))]
    )
    async with running_projector(kafka_bootstrap, database_url, topics):
        conn = await asyncpg.connect(database_url)
        try:
            await wait_for(conn, "SELECT count(*) FROM tasks", 2000)
            async with running_scheduler(
                kafka_bootstrap, database_url, topics, schedule_period=0.1, session_budget=1e-6
            ) as metrics:
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 20
                while metrics.overruns < 3 and loop.time() < deadline:  # noqa: ASYNC110 - polling a counter
                    await asyncio.sleep(0.05)
                assert metrics.overruns >= 3
                assert metrics.sessions == 0
            assert (
                await conn.fetchval("SELECT count(*) FROM event_log WHERE type LIKE 'tephra.session.%'") == 0
            )
        finally:
            await conn.close()
