"""Role separation on the real PostgreSQL: what ``tephra migrate`` grants each component, and what it refuses.

The embedded server trusts loopback connections, so a test connects as a role
by naming it; the privileges checked are the server's own.
"""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import asyncpg
import pytest

from api.embedded import EmbeddedPostgres
from events.topics import Topics
from projector.connections import DatabaseAccess, connect
from projector.migrate import migrate_database, require_schema
from projector.reconstruct import verify_chain
from projector.roles import TABLE_GRANTS, Login, Role, default_logins, schema_tables, scram_verifier
from projector.settings import ProjectorSettings
from tests.service.helpers import job, node, produce, queue, running_projector, running_scheduler, wait_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _as(database_url: str, role: Role) -> DatabaseAccess:
    return DatabaseAccess(database_url, user=role.default_name)


@pytest.fixture
async def migrated(database_url: str) -> str:
    """A database migrated by ``tephra migrate``'s code, with every role and its grants."""
    conn = await asyncpg.connect(database_url)
    try:
        await migrate_database(conn, default_logins())
    finally:
        await conn.close()
    return database_url


async def _grants(conn: asyncpg.Connection) -> list[tuple[str, str, str]]:
    rows = await conn.fetch(
        "SELECT grantee, table_name, privilege_type FROM information_schema.role_table_grants"
        " WHERE grantee LIKE 'tephra\\_%' ORDER BY 1, 2, 3"
    )
    return [(r["grantee"], r["table_name"], r["privilege_type"]) for r in rows]


async def test_every_table_of_the_schema_has_its_grants_written_down(migrated: str) -> None:
    conn = await asyncpg.connect(migrated)
    try:
        assert set(await schema_tables(conn)) == set(TABLE_GRANTS)
    finally:
        await conn.close()


async def test_migrate_is_idempotent_and_sets_exactly_the_listed_privileges(migrated: str) -> None:
    conn = await asyncpg.connect(migrated)
    try:
        before = await _grants(conn)
        # A privilege granted by hand is taken back: the table is the whole truth.
        await conn.execute("GRANT DELETE ON event_log TO tephra_scheduler")
        assert await migrate_database(conn, default_logins()) == []
        assert await _grants(conn) == before
        expected = sorted(
            (role.default_name, table, privilege)
            for table, roles in TABLE_GRANTS.items()
            for role, privileges in roles.items()
            for privilege in privileges
        )
        assert before == expected
        # A password given is set (a login role, able to authenticate with it).
        logins = {**default_logins(), Role.AUDITOR: Login("tephra_auditor", "s3cret-audit")}
        assert await migrate_database(conn, logins) == []
        assert await conn.fetchval(
            "SELECT rolpassword IS NOT NULL AND rolcanlogin FROM pg_authid WHERE rolname = 'tephra_auditor'"
        )
    finally:
        await conn.close()


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO event_log (event_id) VALUES ('forged')",
        "UPDATE event_log SET type = 'x'",
        "DELETE FROM event_log",
        "TRUNCATE event_log",
        "UPDATE jobs SET phase = 'Running'",
        "INSERT INTO consumer_offsets (consumer, topic, partition, next_offset) VALUES ('x', 't', 0, 0)",
        "CREATE TABLE mine (id int)",
        "CREATE TEMP TABLE mine (id int)",
    ],
)
async def test_the_schedulers_role_cannot_write_the_archive_or_the_projection(
    migrated: str, statement: str
) -> None:
    conn = await connect(_as(migrated, Role.SCHEDULER))
    try:
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="permission denied"):
            await conn.execute(statement)
        # What it may do: read the projection, record its leadership.
        assert await conn.fetchval("SELECT count(*) FROM jobs") == 0
        await conn.execute("INSERT INTO scheduler_leaders (cluster, epoch, holder) VALUES ('c', 1, 'h')")
    finally:
        await conn.close()


async def test_the_auditors_role_reads_everything_and_writes_nothing(migrated: str) -> None:
    conn = await connect(_as(migrated, Role.AUDITOR))
    try:
        for table in sorted(TABLE_GRANTS):
            await conn.fetchval(f'SELECT count(*) FROM "{table}"')
            for statement in (f'DELETE FROM "{table}"', f'TRUNCATE "{table}"'):
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await conn.execute(statement)
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("INSERT INTO scheduler_leaders (cluster, epoch, holder) VALUES ('c', 1, 'h')")
    finally:
        await conn.close()


async def test_the_projectors_role_appends_to_the_archive_but_cannot_rewrite_it(migrated: str) -> None:
    conn = await connect(_as(migrated, Role.PROJECTOR))
    try:
        for statement in ("UPDATE event_log SET type = 'x'", "DELETE FROM event_log", "TRUNCATE event_log"):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(statement)
    finally:
        await conn.close()


async def test_a_service_refuses_a_schema_older_than_it_needs(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        with pytest.raises(Exception, match=r"version 0, this Tephra needs \d+: run `tephra migrate`"):
            await require_schema(conn)
    finally:
        await conn.close()


async def test_projector_and_scheduler_schedule_end_to_end_as_their_own_roles(
    kafka_bootstrap: str, migrated: str, topics: Topics
) -> None:
    """The real broker, the real database, each service connected as its least-privileged role."""
    async with (
        running_projector(
            kafka_bootstrap,
            migrated,
            topics,
            ProjectorSettings(projector_linger_ms=5),
            database=_as(migrated, Role.PROJECTOR),
        ),
        running_scheduler(
            kafka_bootstrap, migrated, topics, database=_as(migrated, Role.SCHEDULER), schedule_period=0.2
        ),
    ):
        await produce(kafka_bootstrap, topics, [queue(), node("n1"), job("j1", replicas=2)])
        auditor = await connect(_as(migrated, Role.AUDITOR))
        try:
            await wait_for(auditor, "SELECT count(*) FROM tasks WHERE node IS NOT NULL", 2, within=60)
            assert await auditor.fetchval("SELECT count(*) FROM scheduler_leaders") >= 1
            assert (await verify_chain(auditor)).ok
        finally:
            await auditor.close()


def _tephra(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(  # noqa: S603 - our own command, its arguments the test's
        [sys.executable, "-m", "api.cli", *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def test_tephra_migrate_sets_roles_from_password_files_and_services_refuse_an_old_schema(
    database_url: str, tmp_path: Path
) -> None:
    env = {"TEPHRA_KAFKA_BOOTSTRAP": "127.0.0.1:9", "TEPHRA_DATABASE_URL": database_url}
    # Before `tephra migrate`: the projector stops at once, naming it.
    refused = await asyncio.to_thread(_tephra, ["projector", "--create-topics", "false"], env)
    assert refused.returncode == 1
    assert "run `tephra migrate`" in refused.stderr
    secret = tmp_path / "scheduler-pg"
    secret.write_text("sch3duler\n", encoding="utf-8")
    env |= {
        "TEPHRA_SCHEDULER_DATABASE_USER": "tephra_sched_custom",
        "TEPHRA_SCHEDULER_DATABASE_PASSWORD_FILE": str(secret),
    }
    first = await asyncio.to_thread(_tephra, ["migrate"], env)
    assert first.returncode == 0, first.stderr
    assert "applied 0001" in first.stdout
    assert "tephra_sched_custom (scheduler)" in first.stdout
    again = await asyncio.to_thread(_tephra, ["migrate"], env)
    assert again.returncode == 0, again.stderr
    assert "nothing to apply" in again.stdout
    assert "sch3duler" not in first.stdout + first.stderr + again.stdout + again.stderr
    conn = await asyncpg.connect(database_url)
    try:
        assert await conn.fetchval(
            "SELECT has_table_privilege('tephra_sched_custom', 'scheduler_leaders', 'INSERT')"
            " AND NOT has_table_privilege('tephra_sched_custom', 'event_log', 'INSERT')"
        )
        assert await conn.fetchval(
            "SELECT rolpassword IS NOT NULL FROM pg_authid WHERE rolname = 'tephra_sched_custom'"
        )
    finally:
        await conn.close()
    missing = await asyncio.to_thread(
        _tephra, ["migrate"], {**env, "TEPHRA_API_DATABASE_PASSWORD_FILE": str(tmp_path / "absent")}
    )
    assert missing.returncode == 2
    assert "TEPHRA_API_DATABASE_PASSWORD_FILE: cannot read" in missing.stderr


async def test_a_password_set_by_migrate_authenticates_over_scram_and_never_reaches_the_servers_log() -> None:
    # A server of its own: the shared one trusts every loopback login, this one asks the roles
    # for a SCRAM-SHA-256 password and logs every statement it runs.  Its folder is one the
    # server's unprivileged account can enter when the tests run as root.
    base = await asyncio.to_thread(_enterable_scratch)
    server = EmbeddedPostgres(base / "data", durable=False, server_settings=["log_statement=all"])
    await asyncio.to_thread(server.start)
    phrase = "s3cret-audit"
    try:
        await asyncio.to_thread(_ask_passwords_of_roles, server.data_dir / "pg_hba.conf")
        conn = await asyncpg.connect(server.dsn)
        try:
            await conn.execute("SELECT pg_reload_conf()")
            logins = {**default_logins(), Role.AUDITOR: Login("tephra_auditor", phrase)}
            await migrate_database(conn, logins)
            stored = await conn.fetchval("SELECT rolpassword FROM pg_authid WHERE rolname = 'tephra_auditor'")
        finally:
            await conn.close()
        # The verifier stored is the one computed here from the password and the stored salt.
        salt = base64.b64decode(stored.split("$")[1].split(":")[1])
        assert stored == scram_verifier(phrase, salt=salt)
        auditor = await asyncpg.connect(server.dsn, user="tephra_auditor", password=phrase)
        try:
            assert await auditor.fetchval("SELECT current_user") == "tephra_auditor"
        finally:
            await auditor.close()
        with pytest.raises(asyncpg.InvalidPasswordError):
            await asyncpg.connect(server.dsn, user="tephra_auditor", password=phrase + "x")
        log = await asyncio.to_thread(server.log_path.read_text, encoding="utf-8")
        assert "ALTER ROLE" in log  # the statements were logged ...
        assert phrase not in log  # ... without the password in them
    finally:
        await asyncio.to_thread(server.stop)
        shutil.rmtree(base, ignore_errors=True)


def _enterable_scratch() -> Path:
    """A scratch folder the server's unprivileged account can enter (tests may run as root)."""
    base = Path(tempfile.mkdtemp(prefix="tephra-test-scram-"))
    base.chmod(0o711)
    return base


def _ask_passwords_of_roles(hba: Path) -> None:
    hba.write_text(
        "host all postgres 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n", encoding="utf-8"
    )
