"""Leader election across processes: SIGKILL the leader, the standby takes over, the dead leader is fenced."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg
import pytest

from events.topics import Topics
from tests.service.helpers import job, node, produce, queue, running_projector, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


class SchedulerProcess:
    def __init__(self, process: asyncio.subprocess.Process, log: Path) -> None:
        self.process = process
        self.log = log

    async def becomes_leader(self, within: float) -> int:
        """The epoch this process announces when it takes the lead."""
        assert self.process.stdout is not None
        try:
            line = await asyncio.wait_for(self.process.stdout.readline(), timeout=within)
        except TimeoutError:
            pytest.fail(f"no leadership within {within} s; log:\n{self.log.read_text()[-3000:]}")
        text = line.decode().strip()
        assert text.startswith("leader epoch="), (text, self.log.read_text()[-3000:])
        return int(text.removeprefix("leader epoch="))


@asynccontextmanager
async def scheduler_process(
    name: str, kafka_bootstrap: str, database_url: str, topics: Topics, tmp_path: Path
) -> AsyncIterator[SchedulerProcess]:
    log = tmp_path / f"scheduler-{name}.log"
    with log.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "api.cli",
            "scheduler",
            "--kafka-bootstrap",
            kafka_bootstrap,
            "--database-url",
            database_url,
            "--topics-prefix",
            topics.prefix,
            "--schedule-period",
            "0.2",
            "--scheduler-holder",
            name,
            "--log-level",
            "DEBUG",
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "OTEL_SDK_DISABLED": "true"},
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
        )
    try:
        yield SchedulerProcess(process, log)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), timeout=15)
            except TimeoutError:
                process.kill()
                await process.wait()


async def _leader_of_cluster_b_standing_by(b: SchedulerProcess) -> None:
    """Wait until the second process has said it stands by (so it is a warm standby when the leader dies)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while "standing by" not in b.log.read_text():
        if loop.time() > deadline:
            pytest.fail(f"b never stood by; log:\n{b.log.read_text()[-3000:]}")
        await asyncio.sleep(0.05)


async def _at_least(conn: asyncpg.Connection, query: str, count: int, within: float = 60) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while (got := await conn.fetchval(query)) < count:
        if loop.time() > deadline:
            pytest.fail(f"{query!r} is {got}, expected at least {count} after {within} s")
        await asyncio.sleep(0.02)


async def test_sigkill_the_leader_and_the_standby_takes_over_fenced(
    kafka_bootstrap: str, database_url: str, topics: Topics, tmp_path: Path
) -> None:
    await produce(kafka_bootstrap, topics, [queue(), node("n1", cpu="512", memory="1Ti", pods=1000)])
    async with running_projector(kafka_bootstrap, database_url, topics):
        conn = await asyncpg.connect(database_url)
        try:
            async with scheduler_process("a", kafka_bootstrap, database_url, topics, tmp_path) as a:
                assert await a.becomes_leader(within=30) == 1
                async with scheduler_process("b", kafka_bootstrap, database_url, topics, tmp_path) as b:
                    await _leader_of_cluster_b_standing_by(b)
                    await produce(kafka_bootstrap, topics, [job(f"before-{i}") for i in range(5)])
                    await wait_for(conn, "SELECT count(*) FROM bindings", 5)

                    # Keep submitting while the leader dies, so sessions are in flight around the kill.
                    async def submit_steadily() -> None:
                        for i in range(40):
                            await produce(kafka_bootstrap, topics, [job(f"during-{i}")])
                            await asyncio.sleep(0.05)

                    submitting = asyncio.create_task(submit_steadily())
                    # The leader is placing the submissions when it dies: one of them is bound already.
                    await _at_least(conn, "SELECT count(*) FROM bindings", 6)
                    a.process.send_signal(signal.SIGKILL)
                    loop = asyncio.get_running_loop()
                    killed_at = loop.time()
                    # Generous: the lock is freed when PostgreSQL sees the connection close, and the
                    # standby polls for it every half second; the time taken is printed, not asserted.
                    assert await b.becomes_leader(within=60) == 2
                    takeover = loop.time() - killed_at
                    await submitting
                    await wait_for(conn, "SELECT count(*) FROM bindings", 45, within=30)
                    assert await a.process.wait() == -signal.SIGKILL

            leaders = await conn.fetch("SELECT epoch, holder FROM scheduler_leaders ORDER BY epoch")
            sessions = await conn.fetch("SELECT seq, leader_epoch, accepted FROM sessions ORDER BY seq")
            late = await conn.fetchval(
                "SELECT count(*) FROM bindings b JOIN sessions s USING (session_id)"
                " WHERE s.leader_epoch = 1"
                " AND b.seq > (SELECT min(seq) FROM sessions WHERE leader_epoch = 2)"
            )
            twice = await conn.fetchval(
                "SELECT count(*) FROM (SELECT task_id FROM bindings GROUP BY task_id HAVING count(*) > 1) t"
            )
        finally:
            await conn.close()

    print(f"standby took over {takeover:.2f} s after the leader's SIGKILL")  # a figure, not an assert
    # One holder per epoch, epochs strictly increasing: no two leaders ever shared an epoch.
    assert [(r["epoch"], r["holder"]) for r in leaders] == [(1, "a"), (2, "b")]
    epochs = [r["leader_epoch"] for r in sessions]
    assert set(epochs) == {1, 2}
    first_new = epochs.index(2)
    # Once epoch 2 has committed, whatever epoch 1 still had in flight is voided whole.
    for stale in sessions[first_new:]:
        if stale["leader_epoch"] == 1:
            assert stale["accepted"] == 0
    assert late == 0
    assert twice == 0
