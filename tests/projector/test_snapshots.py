"""Snapshots stored in chunks (projector.snapshots) read back as the state they were written from."""

from __future__ import annotations

import asyncpg
import pytest

from events.serde import decode, encode
from projector.fold import apply
from projector.reconstruct import state_at
from projector.snapshots import read_snapshot, write_snapshot
from projector.state import ClusterState
from projector.state_json import state_to_stored
from projector.writer import BatchWriter
from tests.projector.helpers import records, reset_schema
from tests.projector.streams import CLUSTER, event_stream

pytestmark = pytest.mark.integration


def _folded(seed: int, count: int) -> ClusterState:
    state = ClusterState()
    for seq, event in enumerate(event_stream(seed, count), start=1):
        apply(state, seq, decode(encode(event)))
    return state


async def test_a_snapshot_of_many_pages_of_chunks_reads_back_equal(database_url: str) -> None:
    state = _folded(4, 6_000)
    stored = state_to_stored(state)
    assert len(stored.chunks) > 16  # more than one page of the reader
    conn = await asyncpg.connect(database_url)
    try:
        await reset_schema(conn)
        await write_snapshot(conn, state.seq, stored)
        assert await conn.fetchval("SELECT count(*) FROM state_snapshot_chunks") == len(stored.chunks)
        assert await read_snapshot(conn, state.seq) == state
        assert await read_snapshot(conn, state.seq - 1) is None
        # Written again at the same seq (a rebuilt writer): the stored one stays, whole.
        await write_snapshot(conn, state.seq, state_to_stored(_folded(5, 200)))
        assert await read_snapshot(conn, state.seq + 10) == state
    finally:
        await conn.close()


async def test_the_writers_chunked_snapshots_give_the_fold_at_every_seq(database_url: str) -> None:
    events = event_stream(7, 3_000)
    conn = await asyncpg.connect(database_url)
    try:
        await reset_schema(conn)
        writer = await BatchWriter.load(
            conn, consumer="c", cluster=CLUSTER, snapshot_every=500, snapshot_scale=0
        )
        batch = records(events)
        for lo in range(0, len(batch), 250):
            await writer.write(conn, batch[lo : lo + 250])
        snapshots = [r["seq"] for r in await conn.fetch("SELECT seq FROM state_snapshots ORDER BY seq")]
        assert len(snapshots) >= 4
        assert await conn.fetchval(
            "SELECT bool_and(n > 1) FROM (SELECT count(*) AS n FROM state_snapshot_chunks GROUP BY seq) AS c"
        )
        folded = ClusterState()
        seq = 0
        checked = []
        for event in events:
            outcome = apply(folded, seq + 1, decode(encode(event)))
            if outcome.invalid is None:
                seq += 1
            if seq in snapshots:
                assert await read_snapshot(conn, seq) == folded, seq
                assert await state_at(conn, seq) == folded, seq
                checked.append(seq)
        assert checked == snapshots
        assert await state_at(conn, writer.state.seq) == writer.state
    finally:
        await conn.close()
