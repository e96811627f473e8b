"""The bridge's reads of the projection on a real PostgreSQL: which tasks it looks at after a new seq."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import asyncpg
import pytest

from kube.bridge.store import read_tasks
from projector.migrate import apply_migrations

pytestmark = pytest.mark.integration

# (task, status, node, seq); every one in transition is in transitional_tasks, as the projector keeps it.
TASKS = (
    ("ns/old-bound", "Bound", "n1", 5),
    ("ns/new-bound", "Bound", "n2", 9),
    ("ns/pending", "Pending", None, 9),
    ("ns/releasing", "Releasing", "n1", 12),
)


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    async with asyncpg.create_pool(database_url, min_size=1, max_size=2) as pool:
        async with pool.acquire() as conn:
            await apply_migrations(conn)
            spec = json.dumps({"annotations": {"tephra.dev/kube-source": "pod"}})
            for task, status, node, seq in TASKS:
                job = f"{task}-job"
                await conn.execute(
                    "INSERT INTO jobs (id, namespace, name, queue, phase, phase_reason, created, seq, spec)"
                    " VALUES ($1, 'ns', $2, 'default', 'Running', '', $3, $4, $5::jsonb)",
                    job,
                    job.removeprefix("ns/"),
                    datetime(2026, 12, 5, tzinfo=UTC),
                    seq,
                    spec,
                )
                await conn.execute(
                    "INSERT INTO tasks (id, job_id, role, idx, status, node, seq)"
                    " VALUES ($1, $2, 'main', 0, $3, $4, $5)",
                    task,
                    job,
                    status,
                    node,
                    seq,
                )
                if status in ("Bound", "Releasing"):
                    await conn.execute("INSERT INTO transitional_tasks (id) VALUES ($1)", task)
        yield pool


async def _ids(
    pool: asyncpg.Pool,
    given: list[str] | None = None,
    *,
    changed_after: int | None = None,
    transitional: bool = True,
) -> list[str]:
    tasks = await read_tasks(pool, given or [], changed_after=changed_after, transitional=transitional)
    return sorted(t.task_id for t in tasks)


async def test_after_a_seq_only_the_tasks_in_transition_changed_since_are_read(pool: asyncpg.Pool) -> None:
    assert await _ids(pool) == ["ns/new-bound", "ns/old-bound", "ns/releasing"]
    assert await _ids(pool, changed_after=5) == ["ns/new-bound", "ns/releasing"]
    assert await _ids(pool, changed_after=9) == ["ns/releasing"]
    assert await _ids(pool, changed_after=12) == []


async def test_given_tasks_are_read_whatever_their_seq(pool: asyncpg.Pool) -> None:
    assert await _ids(pool, ["ns/old-bound"], changed_after=12) == ["ns/old-bound"]
    assert await _ids(pool, ["ns/old-bound", "ns/releasing"], changed_after=9) == [
        "ns/old-bound",
        "ns/releasing",
    ]
    assert await _ids(pool, ["ns/pending"], transitional=False) == ["ns/pending"]
