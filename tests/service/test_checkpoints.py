"""The anchored chain on the real broker and PostgreSQL: the projector publishes signed checkpoints,
and ``replay verify`` checks the archive against them, so deleting the newest rows, and editing a
row then recomputing the chain after it, are detected; an undecodable row still gets a chain verdict."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

from events.canonical import GENESIS_HASH
from events.signing import SigningKey
from events.topics import Topics
from projector.archive import row_canonical, row_hash
from projector.settings import ProjectorSettings
from tests.replay.helpers import run_replay
from tests.service.helpers import job, node, produce, queue, running_projector, wait_for

pytestmark = pytest.mark.integration

_EVENTS = 25


async def _rehash_from(conn: asyncpg.Connection, seq: int) -> None:
    """What an attacker with write access does after editing row ``seq``: recompute every hash from it."""
    prev = await conn.fetchval("SELECT hash FROM event_log WHERE seq = $1", seq - 1)
    prev_hash = GENESIS_HASH if prev is None else bytes(prev)
    async with conn.transaction():
        for row in await conn.fetch("SELECT * FROM event_log WHERE seq >= $1 ORDER BY seq", seq):
            columns = {**dict(row), "prev_hash": prev_hash}  # (asyncpg reads json as its text)
            digest = row_hash(columns, row_canonical(columns))
            await conn.execute(
                "UPDATE event_log SET prev_hash = $2, hash = $3 WHERE seq = $1", row["seq"], prev_hash, digest
            )
            prev_hash = digest


def _verify(database_url: str, *args: str) -> tuple[int, str]:
    done = run_replay(database_url, "verify", *args)
    return done.returncode, done.stdout + done.stderr


async def _archive_with_checkpoints(
    kafka_bootstrap: str, database_url: str, topics: Topics, key: SigningKey
) -> None:
    settings = ProjectorSettings(
        projector_linger_ms=5, checkpoint_every_events=7, checkpoint_every_seconds=0.2
    )
    events = [queue(), *(node(f"n{i}") for i in range(5)), *(job(f"j{i}") for i in range(_EVENTS - 6))]
    async with running_projector(kafka_bootstrap, database_url, topics, settings, checkpoint_key=key):
        conn = await asyncpg.connect(database_url)
        try:
            for start, end in ((0, 8), (8, 16), (16, _EVENTS)):  # rounds: a checkpoint after each at least
                await produce(kafka_bootstrap, topics, events[start:end])
                await wait_for(conn, "SELECT seq FROM projection_meta", end)
                # The round's last checkpoint comes checkpoint_every_seconds after its last batch.
                await wait_for(conn, "SELECT max(seq) FROM checkpoints", end)
        finally:
            await conn.close()


def _untouched_archive_verifies(database_url: str, source: str, key: SigningKey, kept: Path) -> None:
    """Against the topic, against a file an auditor kept, and not against another key's word."""
    code, out = _verify(database_url, "--checkpoints", source, "--public-key", key.public_key)
    assert code == 0, out
    assert f"chain: OK: seqs 1-{_EVENTS} link ({_EVENTS} rows, chain format 2)" in out
    assert "checkpoints: OK:" in out
    assert f"the newest at seq {_EVENTS}" in out
    exported = run_replay(database_url, "checkpoints", "export", source)
    assert exported.returncode == 0, exported.stderr
    kept.write_text(exported.stdout, encoding="utf-8")
    assert len(exported.stdout.splitlines()) >= 3
    code, out = _verify(database_url, "--checkpoints", str(kept), "--public-key", key.public_key)
    assert code == 0, out
    stranger = SigningKey.generate().public_key
    code, out = _verify(database_url, "--checkpoints", str(kept), "--public-key", stranger)
    assert code == 1, out
    assert "[REPLAY-CHECKPOINT-UNSIGNED]" in out


async def _truncation_is_detected(
    conn: asyncpg.Connection, database_url: str, trusted: tuple[str, ...]
) -> None:
    """The newest rows deleted: the rest still links; the checkpoints say the archive is short."""
    tail = await conn.fetch("SELECT * FROM event_log WHERE seq > $1 ORDER BY seq", _EVENTS - 3)
    await conn.execute("DELETE FROM event_log WHERE seq > $1", _EVENTS - 3)
    code, out = _verify(database_url, *trusted)
    assert code == 1, out
    assert f"chain: OK: seqs 1-{_EVENTS - 3} link" in out
    assert f"[REPLAY-TRUNCATED] the archive ends at seq {_EVENTS - 3}" in out
    columns = list(tail[0].keys())
    await conn.copy_records_to_table("event_log", records=[tuple(r.values()) for r in tail], columns=columns)
    assert _verify(database_url, *trusted)[0] == 0


async def _rehash_is_detected(conn: asyncpg.Connection, database_url: str, trusted: tuple[str, ...]) -> None:
    """An edited row and every hash after it recomputed: the chain links, the signed head differs."""
    await conn.execute("UPDATE event_log SET source = 'tephra://forged' WHERE seq = 10")
    code, out = _verify(database_url)
    assert code == 1, out
    assert "chain: BROKEN at seq 10: hash does not match" in out
    await _rehash_from(conn, 10)
    code, out = _verify(database_url)
    assert code == 0, out  # without checkpoints, a rehashed chain cannot be told from the real one
    code, out = _verify(database_url, *trusted)
    assert code == 1, out
    assert f"chain: OK: seqs 1-{_EVENTS} link" in out
    mismatch = next(line for line in out.splitlines() if "[REPLAY-CHECKPOINT-MISMATCH]" in line)
    assert int(mismatch.split("at seq ")[1].split(" ")[0]) in range(10, 17), mismatch


async def _undecodable_row_has_a_verdict(conn: asyncpg.Connection, database_url: str) -> None:
    """A row that does not decode: the chain's verdict (broken, then rehashed), then its own code."""
    await conn.execute("""UPDATE event_log SET data = '{"nothing":1}' WHERE seq = 20""")
    code, out = _verify(database_url)
    assert code == 1, out
    assert "chain: BROKEN at seq 20: hash does not match" in out
    await _rehash_from(conn, 20)
    code, out = _verify(database_url)
    assert code == 1, out
    assert f"chain: OK: seqs 1-{_EVENTS} link" in out
    assert "[REPLAY-UNDECODABLE] event_log seq 20 does not decode" in out


async def test_checkpoints_anchor_the_chain(
    kafka_bootstrap: str, database_url: str, topics: Topics, tmp_path: Path
) -> None:
    key = SigningKey.generate()
    await _archive_with_checkpoints(kafka_bootstrap, database_url, topics, key)
    source = f"kafka://{kafka_bootstrap}/{topics.checkpoints}"
    _untouched_archive_verifies(database_url, source, key, tmp_path / "checkpoints.jsonl")
    trusted = ("--checkpoints", source, "--public-key", key.public_key)
    conn = await asyncpg.connect(database_url)
    try:
        await _truncation_is_detected(conn, database_url, trusted)
        await _rehash_is_detected(conn, database_url, trusted)
        await _undecodable_row_has_a_verdict(conn, database_url)
    finally:
        await conn.close()
