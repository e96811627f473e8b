"""Shared fixtures: a real Kafka-protocol broker and a real PostgreSQL, started on demand.

Session scope (sync fixtures that own processes):

* ``kafka_bootstrap`` — ``TEPHRA_TEST_KAFKA`` if set, else an embedded Tansu broker;
* ``postgres_admin_dsn`` — ``TEPHRA_TEST_DATABASE_URL`` if set, else an embedded
  PostgreSQL in a temporary directory (deleted afterwards).

Function scope:

* ``database_url`` — a fresh database per test, dropped afterwards;
* ``topics`` — :class:`events.topics.Topics` under a unique prefix, created.

Nothing starts unless a test asks for it, so a unit-test run stays
server-free.  Every async test also fails when its event loop reported an
unhandled exception (a task that died with nobody awaiting it).
"""

from __future__ import annotations

import asyncio
import gc
import os
import secrets
import shutil
import tempfile
import time
import traceback
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
import pytest_asyncio
from hypothesis import settings

from api.embedded import EmbeddedBroker, EmbeddedPostgres, create_topics
from events.topics import Topics

# Hypothesis' per-example deadline is a timed assert; speed is measured in bench/.
settings.register_profile("tephra", deadline=None, print_blob=True)
settings.load_profile("tephra")

# pytester: the rig's own tests run small pytest sessions in a subprocess.
# tests.compiled_forms: the source_copy fixture of the compiled modules' tests.
pytest_plugins = ["pytester", "tests.compiled_forms"]

KAFKA_ENV = "TEPHRA_TEST_KAFKA"
DATABASE_ENV = "TEPHRA_TEST_DATABASE_URL"


# ---------------------------------------------------------------------------
# start-up figures, printed at the end of the run
# ---------------------------------------------------------------------------


@dataclass
class _Timings:
    lines: list[str] = field(default_factory=list)
    database_seconds: list[float] = field(default_factory=list)


_TIMINGS = pytest.StashKey[_Timings]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_TIMINGS] = _Timings()
    # Python loads an extension before the source beside it: after an edit, an
    # in-place build's extensions would run old code (setup.py, tests/compiled_forms.py,
    # imported here: pytest_plugins loads it after this module).
    from tests.compiled_forms import stale_extensions

    stale = stale_extensions()
    if stale:
        raise pytest.UsageError(
            "compiled extensions are older than their sources: re-run pip install -e . "
            f"(or TEPHRA_COMPILE=0 pip install -e . to run the sources); {'; '.join(stale)}"
        )


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    timings = config.stash[_TIMINGS]
    created = timings.database_seconds
    if not timings.lines and not created:
        return
    terminalreporter.section("test servers")
    for line in timings.lines:
        terminalreporter.write_line(line)
    if created:
        mean_ms = 1000 * sum(created) / len(created)
        max_ms = 1000 * max(created)
        terminalreporter.write_line(
            f"per-test database: {len(created)} created, mean {mean_ms:.1f} ms, max {max_ms:.1f} ms"
        )


# ---------------------------------------------------------------------------
# Kafka
# ---------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _state_home_in_a_temporary_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The default TEPHRA_DATA_DIR is the user's state directory: no test may use the real one,
    nor one an earlier test left keys in (a `keys/cli.pem` made by one test's stack would sign the
    next test's `tephra submit` as a principal that test's projector does not know)."""
    saved = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("xdg-state"))
    yield
    if saved is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = saved


@pytest.fixture(scope="session", autouse=True)
def _unsigned_development_producers() -> Iterator[None]:
    """Tests produce as a development deployment does: unsigned intents and observations are taken
    (the embedded stack's default), and the test streams' sessions, which predate leadership
    events, while no leader is in the log; a scheduler started as a process puts its own key in
    the keyring.  The tests of signing (tests/integration/test_trust.py, test_producers_doc.py)
    turn the first three off."""
    names = (
        "TEPHRA_ALLOW_UNSIGNED_INTENTS",
        "TEPHRA_ALLOW_UNSIGNED_OBSERVATIONS",
        "TEPHRA_ALLOW_LEADERLESS_SESSIONS",
        "TEPHRA_SCHEDULER_ENROL",
    )
    saved = {name: os.environ.get(name) for name in names}
    for name in names:
        os.environ.setdefault(name, "true")
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="session")
def kafka_bootstrap(pytestconfig: pytest.Config) -> Iterator[str]:
    """Bootstrap servers of a Kafka-protocol broker for the whole run."""
    timings = pytestconfig.stash[_TIMINGS]
    external = os.environ.get(KAFKA_ENV)
    if external:
        timings.lines.append(f"kafka: {external} (from {KAFKA_ENV})")
        yield external
        return
    with EmbeddedBroker() as broker:
        timings.lines.append(
            f"kafka: embedded tansu at {broker.bootstrap}, answered in {broker.startup_seconds:.3f} s"
        )
        yield broker.bootstrap


@pytest.fixture
async def topics(kafka_bootstrap: str) -> Topics:
    """The deployment's topics under a prefix no other test uses, one partition each."""
    topics = Topics(prefix=f"test-{secrets.token_hex(6)}")
    await create_topics(kafka_bootstrap, topics.all(), partitions=1)
    return topics


# ---------------------------------------------------------------------------
# PostgreSQL
# ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def postgres_admin_dsn(pytestconfig: pytest.Config) -> Iterator[str]:
    """DSN of a PostgreSQL role allowed to create databases."""
    timings = pytestconfig.stash[_TIMINGS]
    external = os.environ.get(DATABASE_ENV)
    if external:
        timings.lines.append(f"postgres: {_redact(external)} (from {DATABASE_ENV})")
        yield external
        return
    base = Path(tempfile.mkdtemp(prefix="tephra-test-pg-"))
    try:
        # When tests run as root the server runs as an unprivileged account
        # (see api.embedded), which must be able to enter this directory.
        base.chmod(0o711)
        with EmbeddedPostgres(base / "data", durable=False) as server:
            timings.lines.append(
                f"postgres: embedded at {server.dsn}, initdb {server.initdb_seconds or 0:.3f} s, "
                f"answered {server.startup_seconds:.3f} s after launch"
            )
            yield server.dsn
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _redact(dsn: str) -> str:
    parts = urlsplit(dsn)
    if parts.password is None:
        return dsn
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


def _with_database(dsn: str, database: str) -> str:
    return urlunsplit(urlsplit(dsn)._replace(path=f"/{database}"))


@pytest.fixture
async def database_url(postgres_admin_dsn: str, pytestconfig: pytest.Config) -> AsyncIterator[str]:
    """URL of an empty database that exists only for this test."""
    name = f"t_{secrets.token_hex(8)}"  # [0-9a-f] only: safe to quote as an identifier
    began = time.perf_counter()
    admin = await asyncpg.connect(postgres_admin_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    pytestconfig.stash[_TIMINGS].database_seconds.append(time.perf_counter() - began)
    try:
        yield _with_database(postgres_admin_dsn, name)
    finally:
        admin = await asyncpg.connect(postgres_admin_dsn)
        try:
            # FORCE: a test that leaked a connection must not leak the database too.
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


# ---------------------------------------------------------------------------
# unhandled exceptions in event-loop callbacks and tasks
# ---------------------------------------------------------------------------

_LOOP_GUARD = "_fail_on_loop_exceptions"


_SERVER_FIXTURES = frozenset({"kafka_bootstrap", "postgres_admin_dsn"})


@pytest.hookimpl(tryfirst=True)  # before `-m` selection looks at the markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names = getattr(item, "fixturenames", ())
        # Whatever needs a server is an integration test, marked or not, so
        # `-m "not integration"` reliably runs without servers.
        if _SERVER_FIXTURES.intersection(names):
            item.add_marker(pytest.mark.integration)
        # First in line: set up before the test's other fixtures and torn down
        # after them, so failures in their teardown are caught as well.
        if pytest_asyncio.is_async_test(item):
            item.fixturenames.insert(0, _LOOP_GUARD)  # type: ignore[attr-defined]


#: asyncpg's COPY entry points.  asyncpg (0.29-0.32) creates a COPY's waiter future
#: before checking the protocol's state; when the server's FATAL (a dropped connection)
#: is read between two statements, the next COPY raises InternalClientError and leaves
#: that waiter behind, and closing the connection sets ConnectionDoesNotExistError on
#: it with nobody to retrieve it.  The caller saw the COPY fail and recovered; the
#: leftover future is asyncpg's, so only that exact report is passed over.
_ASYNCPG_COPY_CALLS = frozenset({"copy_records_to_table", "copy_to_table", "copy_from_table", "_copy_in"})


def _asyncpg_copy_waiter(context: dict[str, Any]) -> bool:
    """Whether ``context`` is the unretrieved waiter a failed COPY leaves in asyncpg (above)."""
    if context.get("message") != "Future exception was never retrieved":
        return False
    if not isinstance(context.get("exception"), asyncpg.ConnectionDoesNotExistError):
        return False
    created = context.get("source_traceback") or ()
    module = os.path.join("asyncpg", "connection.py")
    return any(frame.name in _ASYNCPG_COPY_CALLS and frame.filename.endswith(module) for frame in created)


def _describe(context: dict[str, Any]) -> str:
    exc = context.get("exception")
    message = context.get("message", "unhandled exception in event loop")
    text = f"{message}: {exc!r}" if exc is not None else message
    # The tests run the loop in debug mode, which records where each future was
    # made: for a future nobody awaited, that names the code that left it.
    created = context.get("source_traceback")
    if created:
        text += "\n  created at:\n" + "".join(traceback.format_list(created[-25:]))
    return text


@pytest.fixture(name=_LOOP_GUARD)
async def fail_on_loop_exceptions() -> AsyncIterator[None]:
    """Fail the test if the loop's exception handler was called during it.

    That is where asyncio reports a task that died with nobody awaiting it
    ("Task exception was never retrieved") and exceptions in callbacks.
    """
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        yield
        # Unretrieved task exceptions are reported when the task is collected.
        gc.collect()
    finally:
        loop.set_exception_handler(previous)
    reported = [context for context in reported if not _asyncpg_copy_waiter(context)]
    if reported:
        pytest.fail(
            "unhandled exceptions in asynchronous code:\n" + "\n".join(_describe(c) for c in reported),
            pytrace=False,
        )
