"""``replay verify`` over golden archives loaded into real PostgreSQL."""

from __future__ import annotations

import asyncpg
import pytest

from replay.queries import verify_archive
from replay.store import open_archive
from tests.golden.archive import load_golden, load_rows
from tests.golden.history import LiveRun, gpu_node, job
from tests.replay.helpers import run_replay

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("name", ["gpu_cluster", "split_sessions"])
async def test_good_golden_archives_verify(database_url: str, name: str) -> None:
    golden = await load_golden(database_url, name)
    async with open_archive(database_url) as reader:
        report = await verify_archive(reader)
    assert report.ok, [str(d) for d in report.divergences]
    assert report.events == golden.expect["events"]
    assert report.sessions == len(golden.expect["sessions"])


@pytest.mark.parametrize("snapshot_every", [10_000, 3])
async def test_a_stream_with_retirements_verifies(database_url: str, snapshot_every: int) -> None:
    """Jobs retire after their TTL (event time) and their ids are submitted again: valid only
    once the first job has retired, so replay must retire exactly when the projector did.

    With a stored state every 3 events, replay also starts from stored states that hold
    finished jobs waiting for their deadline.
    """
    run = LiveRun()
    run.queue("research")
    run.node(gpu_node("n1", 8))
    run.node(gpu_node("n2", 8))
    retired = 0
    for round_ in range(3):
        names = [f"ml/r{i}" for i in range(4)]
        for i, name in enumerate(names):
            run.submit(
                job(name[3:], queue="research", gpu=4).model_copy(
                    update={"ttl_seconds_after_finished": i * 5}
                )
            )
        run.cycle()  # all four fit: 2 nodes of 8 GPUs
        for i, name in enumerate(names):
            run.finish(f"{name}-worker-0", name, outcome="failed" if i % 2 else "succeeded")
        assert all(n not in run.state.jobs or run.state.jobs[n].finished_at for n in names), round_
        for _ in range(4):  # past the longest TTL (15 s): every job of the round retires
            run.tick(5)
            # Every topic moves on (retention runs on the earliest of their latest times).
            run.queue("research")
            run.node(gpu_node("n1", 8))
            run.cycle()
        retired += sum(n not in run.state.jobs for n in names)
    assert retired == 12
    await load_rows(database_url, [r.to_json() for r in run.rows], snapshot_every=snapshot_every, batch=1)

    async with open_archive(database_url) as reader:
        report = await verify_archive(reader)
    assert report.ok, [str(d) for d in report.divergences]
    assert report.events == len(run.rows)
    assert report.sessions == len(run.sessions)
    shown = run_replay(database_url, "verify")
    assert shown.returncode == 0, shown.stdout + shown.stderr


async def test_divergent_golden_is_rejected_at_the_recorded_position(database_url: str) -> None:
    golden = await load_golden(database_url, "divergent")
    expected = golden.expect["verify"]
    async with open_archive(database_url) as reader:
        report = await verify_archive(reader)
    assert not report.ok
    first = report.divergences[0]
    assert first.code == expected["code"] == "REPLAY-DIVERGED"
    assert first.session_id == expected["session"]
    assert first.seq == expected["seq"]
    assert first.position == expected["position"]  # type: ignore[attr-defined]
    assert str(first).startswith("[REPLAY-DIVERGED] ")


async def test_an_edited_row_breaks_the_chain_at_that_row(database_url: str) -> None:
    await load_golden(database_url, "gpu_cluster")
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "UPDATE event_log SET data = replace(data::text, '\"a100-2\"', '\"a100-9\"')::json WHERE seq = 14"
        )
    finally:
        await conn.close()
    async with open_archive(database_url) as reader:
        report = await verify_archive(reader)
    assert [(d.code, d.seq) for d in report.divergences] == [("REPLAY-CHAIN-BROKEN", 14)]


async def test_a_range_is_linked_to_the_row_before_it(database_url: str) -> None:
    golden = await load_golden(database_url, "gpu_cluster")
    inside = [s for s in golden.expect["sessions"] if 20 <= s["seq"] <= 35]
    async with open_archive(database_url) as reader:
        report = await verify_archive(reader, first=20, last=35)
    assert report.ok, [str(d) for d in report.divergences]
    assert (report.events, report.sessions) == (16, len(inside))

    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("DELETE FROM event_log WHERE seq = 19")
    finally:
        await conn.close()
    async with open_archive(database_url) as reader:
        report = await verify_archive(reader, first=20, last=35)
    assert [(d.code, d.seq) for d in report.divergences] == [("REPLAY-CHAIN-BROKEN", 19)]
