"""``tephra key`` and ``tephra producer``: keys on disk, the keyring in PostgreSQL."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest
from typer.testing import CliRunner, Result

from api.cli import app
from events.signing import load_signing_key
from projector.keyring import load_keyring
from projector.migrate import apply_migrations

pytestmark = pytest.mark.integration


async def _tephra(database_url: str, *args: str) -> Result:
    env = {"TEPHRA_KAFKA_BOOTSTRAP": "127.0.0.1:1", "TEPHRA_DATABASE_URL": database_url}
    return await asyncio.to_thread(CliRunner().invoke, app, list(args), env=env)


async def test_keys_are_created_once_and_producers_added_listed_and_removed(
    database_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "keys" / "trainer.pem"
    created = await _tephra(database_url, "key", "create", str(path))
    assert created.exit_code == 0, created.output
    public = created.stdout.strip()
    assert public == load_signing_key(path).public_key
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    again = await _tephra(database_url, "key", "create", str(path))
    assert (again.stdout.strip(), "exists already" in again.stderr) == (public, True)
    shown = await _tephra(database_url, "key", "public", str(path))
    assert shown.stdout.strip() == public
    missing = await _tephra(database_url, "key", "public", str(tmp_path / "none.pem"))
    assert missing.exit_code == 1
    assert "tephra key create" in missing.stderr

    conn = await asyncpg.connect(database_url)
    try:
        await apply_migrations(conn)
        added = await _tephra(
            database_url, "producer", "add", "trainer", "--public-key", public,
            "--may", "tephra.job.submitted.v1", "--queue", "research", "--namespace", "team-a",
        )  # fmt: skip
        assert added.exit_code == 0, added.output
        entry = (await load_keyring(conn))["trainer"]
        assert (entry.public_key, entry.may, entry.queues, entry.namespaces) == (
            public, {"tephra.job.submitted.v1"}, {"research"}, {"team-a"}
        )  # fmt: skip
        listed = await _tephra(database_url, "producer", "list")
        assert (
            listed.stdout
            == f"trainer {public} may=tephra.job.submitted.v1 queues=research namespaces=team-a\n"
        )
        wrong = await _tephra(
            database_url, "producer", "add", "x", "--public-key", public, "--may", "tephra.job.submited.v1"
        )
        assert wrong.exit_code == 2
        assert "unknown event types ['tephra.job.submited.v1']" in wrong.stderr
        bad_key = await _tephra(database_url, "producer", "add", "x", "--public-key", "abc", "--may", "x")
        assert bad_key.exit_code == 2
        assert "an Ed25519 public key has 32" in bad_key.stderr
        removed = await _tephra(database_url, "producer", "remove", "trainer")
        assert removed.exit_code == 0, removed.output
        assert await load_keyring(conn) == {}
        gone = await _tephra(database_url, "producer", "remove", "trainer")
        assert gone.exit_code == 1
    finally:
        await conn.close()
