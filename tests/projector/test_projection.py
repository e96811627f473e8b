"""The acceptance property: the projection tables and the archive's fold agree at every seq.

Random event streams (tests.projector.streams) are written through the
projector's own batch writer into a real PostgreSQL, in random batch sizes,
with snapshots every few events.  After every batch the state loaded from
the projection tables equals ``state_at`` of the same seq (snapshot + fold of
the archive), equals the writer's in-memory state, and survives a JSON round
trip; afterwards ``state_at`` of earlier seqs equals what the projection held
then.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from itertools import pairwise
from typing import Final

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projector.reconstruct import load_projection, state_at, verify_chain
from projector.state import MAX_SESSIONS, ClusterState
from projector.state_json import state_from_jsonable, state_to_jsonable
from projector.writer import BatchWriter
from tests.projector.helpers import create_database, drop_database, records, reset_schema
from tests.projector.streams import CLUSTER, event_stream

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def scratch_dsn(postgres_admin_dsn: str) -> Iterator[str]:
    dsn = asyncio.run(create_database(postgres_admin_dsn))
    yield dsn
    asyncio.run(drop_database(postgres_admin_dsn, dsn))


async def _transitional_tasks(conn: asyncpg.Connection) -> set[str]:
    return {r["id"] for r in await conn.fetch("SELECT id FROM transitional_tasks")}


#: Stream options under which finished jobs retire all along (projector.fold, retention):
#: 1.5 s of event time an event, a TTL of 30 s, at most 15 live jobs.
RETIRING: Final[dict[str, object]] = {"live_jobs": 15, "step_ms": 1500, "ttl_seconds": 30}


async def _check_stream(
    dsn: str,
    seed: int,
    count: int,
    cuts: list[int],
    spacing: tuple[int, float],
    *,
    options: dict[str, object] | None = None,
) -> None:
    """``spacing``: the writer's (snapshot_every, snapshot_scale); ``options``: the stream's."""
    snapshot_every, snapshot_scale = spacing
    conn = await asyncpg.connect(dsn)
    try:
        await reset_schema(conn)
        events = event_stream(seed, count, invalid_rate=0.03, **(options or {}))
        writer = await BatchWriter.load(
            conn, consumer="c", cluster=CLUSTER, snapshot_every=snapshot_every, snapshot_scale=snapshot_scale
        )
        seen: dict[int, ClusterState] = {}
        bounds = sorted({0, count, *(c % (count + 1) for c in cuts)})
        batch_records = records(events)
        for lo, hi in pairwise(bounds):
            await writer.write(conn, batch_records[lo:hi])
            projected = await load_projection(conn)
            assert projected == writer.state
            assert state_from_jsonable(state_to_jsonable(projected)) == projected
            assert await state_at(conn, projected.seq) == projected
            assert await _transitional_tasks(conn) == {
                task_id for task_id, task in projected.tasks.items() if task.status in ("Bound", "Releasing")
            }
            seen[projected.seq] = projected
        for seq, projected in seen.items():
            assert await state_at(conn, seq) == projected, f"state_at({seq}) differs from the projection then"
        assert (await verify_chain(conn)).ok
    finally:
        await conn.close()


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**32 - 1),
    count=st.integers(1, 400),
    cuts=st.lists(st.integers(0, 400), max_size=12),
    # Scale 0: a stored state every snapshot_every events; 0.05 and 1: spaced out as the state grows.
    spacing=st.tuples(st.sampled_from([7, 50, 1000]), st.sampled_from([0.0, 0.05, 1.0])),
    retiring=st.booleans(),
)
def test_projection_equals_state_at_the_same_seq(  # noqa: PLR0917 - hypothesis' arguments
    scratch_dsn: str, seed: int, count: int, cuts: list[int], spacing: tuple[int, float], retiring: bool
) -> None:
    options = RETIRING if retiring else None
    asyncio.run(_check_stream(scratch_dsn, seed, count, cuts, spacing, options=options))


def test_retired_jobs_leave_the_projection_in_the_batch_that_retires_them(scratch_dsn: str) -> None:
    asyncio.run(_check_stream(scratch_dsn, 9, 3000, list(range(0, 3000, 89)), (500, 1.0), options=RETIRING))


def test_reused_names_project_as_they_fold(scratch_dsn: str) -> None:
    """Finished jobs' names submitted again: the earlier incarnations' rows move aside and retire."""
    options = {**RETIRING, "ttl_seconds": 300, "reuse_rate": 0.5}
    asyncio.run(_check_stream(scratch_dsn, 13, 3000, list(range(0, 3000, 83)), (500, 1.0), options=options))


@pytest.mark.parametrize("snapshot_scale", [0.0, 1.0])
def test_a_long_stream_agrees_at_many_seqs(scratch_dsn: str, snapshot_scale: float) -> None:
    asyncio.run(_check_stream(scratch_dsn, 7, 3000, list(range(0, 3000, 97)), (500, snapshot_scale)))


def test_every_session_has_its_row_when_one_batch_commits_more_than_the_window(scratch_dsn: str) -> None:
    async def check() -> None:
        conn = await asyncpg.connect(scratch_dsn)
        try:
            await reset_schema(conn)
            writer = await BatchWriter.load(conn, consumer="c", cluster=CLUSTER)
            await writer.write(conn, records(event_stream(11, 2_500)))
            archived = {
                r["id"]
                for r in await conn.fetch(
                    "SELECT data ->> 'session_id' AS id FROM event_log"
                    " WHERE type = 'tephra.session.committed.v1'"
                )
            }
            rows = {r["session_id"] for r in await conn.fetch("SELECT session_id FROM sessions")}
        finally:
            await conn.close()
        assert len(archived) > MAX_SESSIONS  # more than the state keeps, in one batch
        assert rows == archived

    asyncio.run(check())
