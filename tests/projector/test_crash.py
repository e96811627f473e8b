"""Crash safety: SIGKILL the projector process at random moments; nothing is lost or doubled.

50,000 mixed events go to the real broker while a ``tephra projector``
subprocess is killed with SIGKILL at random moments (at least five times)
and restarted.  Afterwards every produced event was consumed exactly once
(archived, or refused by the fold and parked with its reason), the archive
has no duplicate, the chain verifies, the stored offsets are exactly the
number of records per partition, and the projection equals the fold of the
archive.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import BinaryIO

import asyncpg
import pytest

from events.topics import Topics, topic_for
from projector.migrate import apply_migrations
from projector.reconstruct import load_projection, state_at, verify_chain
from tests.projector.helpers import produce
from tests.projector.streams import CLUSTER, event_stream

pytestmark = [pytest.mark.integration, pytest.mark.slow]

_EVENTS = 50_000
_KILLS = 6
_REPO = Path(__file__).resolve().parents[2]


async def _start(
    kafka_bootstrap: str, database_url: str, topics: Topics, log: BinaryIO
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "api.cli", "projector",
        "--kafka-bootstrap", kafka_bootstrap, "--database-url", database_url,
        "--topics-prefix", topics.prefix, "--cluster", CLUSTER,
        "--projector-batch-size", "2000", "--snapshot-every", "5000", "--log-level", "WARNING",
        stdout=log, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(_REPO)}, cwd=_REPO,
    )  # fmt: skip


async def _consumed(conn: asyncpg.Connection) -> int:
    return int(await conn.fetchval("SELECT coalesce(sum(next_offset), 0) FROM consumer_offsets"))


async def _progressed(conn: asyncpg.Connection, records: int, process: asyncio.subprocess.Process) -> None:
    """Return once ``records`` records are consumed, or the process has exited; fail after 120 s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120
    while (consumed := await _consumed(conn)) < records and process.returncode is None:
        if loop.time() > deadline:
            pytest.fail(f"stuck at {consumed} records, waiting for {records}")
        await asyncio.sleep(0.02)


@pytest.mark.timeout(240)
async def test_sigkill_at_random_moments_loses_and_duplicates_nothing(
    kafka_bootstrap: str, database_url: str, topics: Topics, tmp_path: Path
) -> None:
    events = event_stream(2026, _EVENTS)
    rng = random.Random(99)
    log_path = tmp_path / "projector.log"
    log = log_path.open("ab")
    conn = await asyncpg.connect(database_url)
    await apply_migrations(conn)
    try:
        producing = asyncio.create_task(
            produce(kafka_bootstrap, topics, events)  # while the projector is being killed
        )
        kills: list[int] = []  # how far the projector had got at each kill
        # Each kill waits for the restarted process to have made progress (however slowly it starts),
        # up to a random point in the first half of the stream, then lands a random moment later.
        targets = sorted(rng.randrange(1, _EVENTS // 2) for _ in range(_KILLS))
        process = await _start(kafka_bootstrap, database_url, topics, log)
        for target in targets:
            await _progressed(conn, max(target, (kills[-1] if kills else 0) + 1), process)
            assert process.returncode is None, log_path.read_text()[-3000:]
            await asyncio.sleep(rng.uniform(0, 0.2))
            process.send_signal(signal.SIGKILL)
            await process.wait()
            kills.append(await _consumed(conn))
            process = await _start(kafka_bootstrap, database_url, topics, log)
        await producing
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 150
        while await _consumed(conn) < _EVENTS:
            assert process.returncode is None, log_path.read_text()[-3000:]
            assert loop.time() < deadline, f"stuck at {await _consumed(conn)} records; kills at {kills}"
            await asyncio.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 30) == 0, log_path.read_text()[-3000:]
        assert len(kills) >= 5, kills
        assert any(0 < k < _EVENTS for k in kills), kills

        # Offsets: exactly the records of each partition (one partition per topic).
        produced_per_topic = Counter(topic_for(e, topics) for e in events)
        offsets = {r["topic"]: r["next_offset"] for r in await conn.fetch("SELECT * FROM consumer_offsets")}
        assert offsets == dict(produced_per_topic)

        # Every event exactly once: archived, or parked by the fold; never both, never neither.
        archived = [r["event_id"] for r in await conn.fetch("SELECT event_id FROM event_log ORDER BY seq")]
        parked = await conn.fetch("SELECT event_id, error FROM rejected_events")
        parked_ids = [r["event_id"] for r in parked]
        assert len(archived) == len(set(archived))
        assert len(parked_ids) == len(set(parked_ids))
        assert not set(archived) & set(parked_ids)
        assert set(archived) | set(parked_ids) == {e.id for e in events}
        # The stream is valid and the fold tolerates cross-topic overtaking: all archived.
        assert parked_ids == [], Counter(r["error"] for r in parked)
        assert len(archived) == _EVENTS

        report = await verify_chain(conn)
        assert report.ok, report
        assert report.checked == len(archived), report
        last = await conn.fetchval("SELECT max(seq) FROM event_log")
        assert await load_projection(conn) == await state_at(conn, last)
    finally:
        log.close()
        await conn.close()
