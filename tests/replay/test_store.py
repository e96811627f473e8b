"""The archive reader against the projector's own reconstruction."""

from __future__ import annotations

import asyncpg
import pytest

from projector.reconstruct import state_at as projector_state_at
from projector.state_json import state_to_jsonable
from replay.store import open_archive
from tests.golden.archive import load_rows
from tests.golden.history import LiveRun
from tests.golden.scenarios import gpu_cluster

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("snapshot_every", [10_000, 7])
async def test_state_at_is_the_projectors_reconstruction_at_every_seq(
    database_url: str, snapshot_every: int
) -> None:
    run = LiveRun()
    gpu_cluster(run)
    await load_rows(database_url, [r.to_json() for r in run.rows], snapshot_every=snapshot_every, batch=5)
    conn = await asyncpg.connect(database_url)
    try:
        async with open_archive(database_url) as reader:
            for seq in range(len(run.rows) + 1):
                ours = await reader.state_at(seq)
                theirs = await projector_state_at(conn, seq)
                assert state_to_jsonable(ours) == state_to_jsonable(theirs), seq
            with pytest.raises(LookupError, match=rf"the archive ends at seq {len(run.rows)}"):
                await reader.state_at(len(run.rows) + 1)
    finally:
        await conn.close()
