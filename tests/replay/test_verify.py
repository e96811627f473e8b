"""``replay verify`` over golden archives loaded into real PostgreSQL."""

from __future__ import annotations

import asyncpg
import pytest

from replay.queries import verify_archive
from replay.store import open_archive
from tests.golden.archive import load_golden

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("name", ["gpu_cluster", "split_sessions"])
async def test_good_golden_archives_verify(database_url: str, name: str) -> None:
    golden = await load_golden(database_url, name)
    async with open_archive(database_url) as reader:
        report = await verify_archive(reader)
    assert report.ok, [str(d) for d in report.divergences]
    assert report.events == golden.expect["events"]
    assert report.sessions == len(golden.expect["sessions"])


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
