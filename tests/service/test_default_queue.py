"""Volcano's ``default`` queue: created by the scheduler when the cluster has none, else left alone."""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg
import pytest

from events.topics import Topics
from projector.fold import apply
from projector.state import ClusterState
from scheduler.service.default_queue import default_queue_event
from tests.service.helpers import job, node, produce, queue, running_projector, running_scheduler, wait_for

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_the_event_creates_an_open_weight_one_queue_with_a_fixed_id() -> None:
    first, again = default_queue_event("c1", NOW), default_queue_event("c1", datetime(2027, 1, 1, tzinfo=UTC))
    assert first.id == again.id  # published by two terms, archived once
    assert first.id != default_queue_event("c2", NOW).id
    state = ClusterState()
    assert apply(state, 1, first).invalid is None
    default = state.queues["default"]
    assert (default.weight, default.state, default.reclaimable) == (1, "Open", True)


def test_it_is_create_only_a_default_queue_folded_first_is_kept() -> None:
    state = ClusterState()
    assert apply(state, 1, queue(weight=3)).invalid is None
    outcome = apply(state, 2, default_queue_event("c1", NOW))
    assert outcome.invalid is None  # archived, changes nothing
    assert outcome.touched == ()
    assert state.queues["default"].weight == 3


@pytest.mark.integration
async def test_a_job_with_no_queue_of_its_own_runs_without_anyone_creating_one(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    await produce(kafka_bootstrap, topics, [node("n1"), job("train", replicas=2)])
    async with (
        running_projector(kafka_bootstrap, database_url, topics),
        running_scheduler(kafka_bootstrap, database_url, topics, schedule_period=0.2),
    ):
        conn = await asyncpg.connect(database_url)
        try:
            await wait_for(conn, "SELECT count(*) FROM tasks WHERE status = 'Bound'", 2)
            created = await conn.fetch("SELECT source FROM event_log WHERE type = 'tephra.queue.upserted.v1'")
        finally:
            await conn.close()
    assert [r["source"] for r in created] == ["tephra://scheduler"]


@pytest.mark.integration
async def test_an_existing_default_queue_is_left_alone(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    async with running_projector(kafka_bootstrap, database_url, topics):
        await produce(kafka_bootstrap, topics, [queue(weight=3), node("n1"), job("train")])
        conn = await asyncpg.connect(database_url)
        try:
            await wait_for(conn, "SELECT count(*) FROM jobs", 1)
            async with running_scheduler(kafka_bootstrap, database_url, topics, schedule_period=0.2):
                await wait_for(conn, "SELECT count(*) FROM tasks WHERE status = 'Bound'", 1)
            sources = await conn.fetch("SELECT source FROM event_log WHERE type = 'tephra.queue.upserted.v1'")
            weight = await conn.fetchval("SELECT (doc->>'weight')::int FROM queues WHERE name = 'default'")
        finally:
            await conn.close()
    assert [r["source"] for r in sources] == ["tests://service"]
    assert weight == 3
