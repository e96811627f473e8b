"""``tephra up``: the embedded servers (when needed) plus projector, scheduler, simulated cluster and API.

One process, one :class:`asyncio.TaskGroup`: if any service fails, the group
cancels the others and the process exits non-zero (its supervisor restarts
it).  SIGINT and SIGTERM cancel the group; every service stops at its next
await (a session under way is abandoned, nothing of it published), the Kafka
clients and pools close, and only then are the embedded servers stopped,
side by side (PostgreSQL with a fast shutdown, hurried to an immediate one
after 0.3 s: committed data is kept either way).  The whole stop takes
under 2 s.  The servers run in their own process groups and are also stopped by
an ``atexit`` hook, so no server outlives ``tephra up`` unless it is killed
with SIGKILL.

Tansu keeps topics in memory, so a restarted embedded broker is empty while
PostgreSQL still holds the event log, the projection and the projector's
offsets.  The topics keep their names (``TEPHRA_TOPICS_PREFIX``), so a
producer configured once keeps working; the projector sees that the new logs
are not the ones it read (projector.broker_identity) and reads them from
their start, skipping the ids it archived.  ``<data dir>/broker-epoch``
counts the embedded broker's starts (shown at start-up and in
``stack.json``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import traceback
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from api.access import service_access
from api.embedded import EmbeddedBroker, EmbeddedPostgres, create_topics
from api.endpoints import (
    Endpoints,
    StackRecord,
    read_stack_record,
    remove_stack_record,
    write_stack_record,
)
from api.identity import (
    API_PRODUCER,
    development_defaults,
    enrol_development_keys,
    producer_signer,
    scheduler_signer,
)
from api.settings import CommonSettings, TephraSettings
from api.telemetry import observability
from events.display import redact
from events.topics import Topics
from projector.connections import DatabaseAccess, KafkaAccess, connect
from projector.roles import Login, Role

__all__ = [
    "EmbeddedStack",
    "StackAlreadyRunningError",
    "Terminated",
    "api_service",
    "embedded_stack",
    "ensure_topics",
    "migrate",
    "migrate_command",
    "projector_command",
    "role_logins",
    "run_services",
    "run_until_signalled",
    "scheduler_command",
    "settings_for",
    "sigterm_unwinds",
    "sim_cluster_command",
    "up_command",
]

log = logging.getLogger(__name__)

EPOCH_FILE = "broker-epoch"


class StackAlreadyRunningError(RuntimeError):
    """Another ``tephra up`` owns this data dir."""


@dataclass(frozen=True)
class EmbeddedStack:
    endpoints: Endpoints
    data_dir: Path
    epoch: int


def _next_epoch(data_dir: Path) -> int:
    path = data_dir / EPOCH_FILE
    try:
        previous = int(path.read_text(encoding="utf-8").strip())
    except FileNotFoundError:
        previous = 0
    except ValueError as exc:
        raise RuntimeError(f"{path} does not hold an integer; delete it to start over") from exc
    epoch = previous + 1
    path.write_text(f"{epoch}\n", encoding="utf-8")
    return epoch


@contextlib.contextmanager
def embedded_stack(settings: CommonSettings, *, durable: bool = True) -> Iterator[EmbeddedStack]:
    """Start the embedded broker and PostgreSQL under ``settings.data_dir``; publish ``stack.json``."""
    data_dir = settings.data_dir.absolute()
    data_dir.mkdir(parents=True, exist_ok=True)
    record = read_stack_record(data_dir)
    if record is not None and record.alive() and record.pid != os.getpid():
        raise StackAlreadyRunningError(
            f"a Tephra stack is already running for {data_dir} (pid {record.pid}); "
            "stop it first or use another TEPHRA_DATA_DIR"
        )
    epoch = _next_epoch(data_dir)
    topics = Topics(settings.topics_prefix)
    with (
        EmbeddedPostgres(data_dir / "postgres", durable=durable) as postgres,
        EmbeddedBroker(log_path=data_dir / "tansu.log") as broker,
    ):
        # Ours: created whatever TEPHRA_CREATE_TOPICS says (an external broker's topics may be provisioned).
        asyncio.run(create_topics(broker.bootstrap, topics.all(), partitions=settings.topic_partitions))
        endpoints = Endpoints(broker.bootstrap, postgres.dsn, topics, settings.cluster)
        write_stack_record(
            data_dir,
            StackRecord(
                pid=os.getpid(),
                kafka_bootstrap=broker.bootstrap,
                database_url=postgres.dsn,
                topics_prefix=topics.prefix,
                epoch=epoch,
            ),
        )
        try:
            yield EmbeddedStack(endpoints, data_dir, epoch)
        finally:
            remove_stack_record(data_dir, os.getpid())
            # Both shut down side by side (PostgreSQL's shutdown checkpoint takes a while):
            # SIGTERM must stop `tephra up` within 2 s.  The `with` then waits for each.
            broker.begin_stop()
            postgres.begin_stop()


# --------------------------------------------------------------------------- the services


ServiceFactory = Callable[[TephraSettings, Endpoints], Coroutine[Any, Any, None]]


async def _projector_service(settings: TephraSettings, endpoints: Endpoints) -> None:
    from events.signing import load_or_create_signing_key  # noqa: PLC0415
    from projector.service import run_projector  # noqa: PLC0415 - the service is composed here, once
    from scheduler.core.config import config_problem  # noqa: PLC0415

    key_file = settings.projector_key_file or settings.data_dir / "projector.key"
    key = load_or_create_signing_key(key_file)
    log.info("the projector signs checkpoints with the public key %s (%s)", key.public_key, key_file)
    access = service_access(settings, endpoints, settings.projector_credentials())
    await run_projector(
        settings,
        kafka=access.kafka,
        database=access.database,
        topics=endpoints.topics,
        cluster=endpoints.cluster,
        config_check=config_problem,
        checkpoint_key=key,
    )


async def _scheduler_service(
    settings: TephraSettings, endpoints: Endpoints, on_leader: Callable[[int], None] | None = None
) -> None:
    from scheduler.service import run_scheduler  # noqa: PLC0415 - the service is composed here, once

    access = service_access(settings, endpoints, settings.scheduler_credentials())
    await run_scheduler(
        settings,
        kafka=access.kafka,
        database=access.database,
        topics=endpoints.topics,
        cluster=endpoints.cluster,
        on_leader=on_leader,
        signer=scheduler_signer(settings, settings),
        enrol=settings.scheduler_enrol or settings.embedded,
    )


async def _sim_service(settings: TephraSettings, endpoints: Endpoints) -> None:
    from kube.sim_service import run_sim_service  # noqa: PLC0415 - the service is composed here, once

    access = service_access(settings, endpoints, settings.sim_credentials())
    await run_sim_service(
        settings,
        kafka=access.kafka,
        database=access.database,
        topics=endpoints.topics,
        cluster=endpoints.cluster,
    )


async def migrate(database: DatabaseAccess, logins: Mapping[Role, Login] | None = None) -> list[int]:
    """``tephra migrate``'s work: the migrations (and, given ``logins``, the roles and grants), waiting
    out a database that is not up yet (compose starts it alongside us).  Returns the versions applied."""
    import asyncpg  # noqa: PLC0415 - keep `tephra --help` light

    from projector.migrate import migrate_database  # noqa: PLC0415

    delay = 0.2
    while True:
        try:
            con = await connect(database)
        except (OSError, asyncpg.CannotConnectNowError, asyncpg.TooManyConnectionsError) as exc:
            log.warning("database not reachable (%s); retrying in %.1f s", redact(str(exc)), delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
            continue
        try:
            applied = await migrate_database(con, logins)
        finally:
            await con.close()
        if applied:
            log.info("database migrated to version %d", applied[-1])
        return applied


async def ensure_topics(settings: CommonSettings, kafka: KafkaAccess, topics: Topics) -> None:
    """Create the deployment's topics that do not exist yet, as ``settings`` say (existing ones untouched).

    A fresh broker has none.  With ``TEPHRA_CREATE_TOPICS=false`` nothing is
    created: the services wait for the topics and read them once they appear
    (projector.topic_watch).  Where the broker refuses to create topics (ACLs),
    they must be provisioned: say so and go on, as with the setting off.
    """
    from aiokafka.errors import KafkaError  # noqa: PLC0415 - keep `tephra --help` light

    if not settings.create_topics:
        return
    try:
        await create_topics(
            kafka,
            topics.all(),
            partitions=settings.topic_partitions,
            replication_factor=settings.topic_replication_factor,
        )
    except KafkaError as exc:
        log.warning(
            "could not create the topics %s (%s); the services wait until they exist",
            ", ".join(topics.all()),
            exc,
        )


SERVICES: dict[str, ServiceFactory] = {
    "projector": _projector_service,
    "scheduler": _scheduler_service,
    "sim-cluster": _sim_service,
}


def settings_for(settings: TephraSettings, names: tuple[str, ...]) -> TephraSettings:
    """The settings a process running the named services uses: as given, but for the collector."""
    if len(names) == 1:
        return settings
    # The projector's freezing (projector.heap) is process-wide: beside other services it would
    # freeze their heaps too, and the scheduler's per-session thaws would undo it.  So a shared
    # process (`tephra up`, the demo) keeps the collector on, with tune_gc's thresholds.
    return settings.model_copy(update={"projector_freeze": False})


def api_service(out: TextIO) -> ServiceFactory:
    """The HTTP API as one of ``tephra up``'s services; its URL is printed to ``out`` once it listens."""

    async def run(settings: TephraSettings, endpoints: Endpoints) -> None:
        from api.http.server import serve_api  # noqa: PLC0415 - the service is composed here, once

        await serve_api(
            settings,
            endpoints,
            on_ready=lambda url: print(f"tephra: API at {url}", file=out, flush=True),
            access=service_access(settings, endpoints, settings.api_credentials()),
            signer=producer_signer(settings, API_PRODUCER),
        )

    return run


async def run_services(
    settings: TephraSettings,
    endpoints: Endpoints,
    names: tuple[str, ...],
    *,
    also: dict[str, ServiceFactory] | None = None,
    migrate_first: bool = False,
) -> None:
    """Run the named services until one fails or the caller cancels.

    ``migrate_first``: bring the schema up to date first, as ``tephra migrate``
    would (the embedded stack, whose PostgreSQL is ours); otherwise each
    service checks the schema's version and stops, naming ``tephra migrate``,
    when it is older than it needs.  The topics are created when missing
    (unless ``TEPHRA_CREATE_TOPICS`` is off: then the services wait for them).
    ``also``: services beside the named ones (``tephra up``'s API).
    """
    settings = development_defaults(settings_for(settings, names))
    if migrate_first:
        await migrate(endpoints.database())
    if settings.embedded:
        await enrol_development_keys(settings, settings, endpoints.database())
    await ensure_topics(settings, endpoints.kafka(), endpoints.topics)
    async with asyncio.TaskGroup() as group:
        for name in names:
            group.create_task(SERVICES[name](settings, endpoints), name=name)
        for name, service in (also or {}).items():
            group.create_task(service(settings, endpoints), name=name)


def run_until_signalled(main: Callable[[], Awaitable[None]]) -> int:
    """Run ``main`` on a fresh loop; SIGINT/SIGTERM cancel it cleanly. Returns the exit code."""

    async def guarded() -> int:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("run_until_signalled needs to run inside a task")
        stop = signal.SIGINT, signal.SIGTERM
        for sig in stop:
            loop.add_signal_handler(sig, task.cancel)
        try:
            await main()
        except asyncio.CancelledError:
            return 0
        finally:
            for sig in stop:
                loop.remove_signal_handler(sig)
        return 0

    try:
        return asyncio.run(guarded())
    except Exception as failure:  # noqa: BLE001 - the process edge reports every failure
        # Show what failed and exit non-zero, so a supervisor restarts us.
        for exc in _leaves(failure):
            print(redact("".join(traceback.format_exception(exc))), end="", file=sys.stderr)
            print(f"error: a service failed: {type(exc).__name__}: {redact(str(exc))}", file=sys.stderr)
        return 1


def _leaves(exc: BaseException) -> list[BaseException]:
    """The individual failures inside (nested) exception groups, as a TaskGroup raises them."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


# --------------------------------------------------------------------------- commands


class Terminated(SystemExit):
    """SIGTERM arrived outside the event loop (while servers start or stop)."""


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """Turn SIGTERM into an exception while servers start, so ``with`` blocks stop them.

    Python's default SIGTERM ends the process without unwinding (and without
    ``atexit``); inside :func:`run_until_signalled` the loop's own handler takes over.
    """

    def raise_terminated(signum: int, frame: object) -> None:
        raise Terminated(128 + signum)

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _print_connection(stack: EmbeddedStack, out: TextIO) -> None:
    e = stack.endpoints
    # The embedded PostgreSQL has no password (trust on loopback); redact() keeps it so if it ever has.
    kafka, postgres = redact(e.kafka_bootstrap), redact(e.database_url)
    print(f"tephra: embedded stack up (data dir {stack.data_dir}, broker start {stack.epoch})", file=out)
    print(f"  kafka     {kafka}   topics {e.topics.prefix}.*", file=out)
    print(f"  postgres  {postgres}", file=out)
    print("  in another shell: tephra submit FILE...; tephra get jobs", file=out)
    print(
        f"  other clients: TEPHRA_KAFKA_BOOTSTRAP={kafka} TEPHRA_DATABASE_URL={postgres} "
        f"TEPHRA_TOPICS_PREFIX={e.topics.prefix}",
        file=out,
    )
    print("  Ctrl-C stops everything", file=out, flush=True)


def up_command(settings: TephraSettings, out: TextIO | None = None) -> int:
    out = out or sys.stdout  # read at call time: tests and embedding apps swap sys.stdout
    names = tuple(SERVICES)
    also = {"api": api_service(out)}
    if not settings.embedded:
        from api.endpoints import resolve_endpoints  # noqa: PLC0415

        endpoints = resolve_endpoints(settings)
        with observability(settings, "tephra", names, out):
            return run_until_signalled(lambda: run_services(settings, endpoints, names, also=also))
    try:
        with (
            sigterm_unwinds(),
            embedded_stack(settings) as stack,
            observability(settings, "tephra", names, out),
        ):
            _print_connection(stack, out)
            code = run_until_signalled(
                lambda: run_services(settings, stack.endpoints, names, also=also, migrate_first=True)
            )
    except StackAlreadyRunningError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("tephra: stopped", file=out)
    return code


def projector_command(settings: TephraSettings, endpoints: Endpoints) -> int:
    with observability(settings, "tephra-projector", ("projector",), sys.stdout):
        return run_until_signalled(lambda: run_services(settings, endpoints, ("projector",)))


def scheduler_command(settings: TephraSettings, endpoints: Endpoints) -> int:
    """Run the scheduler; print ``leader epoch=<n>`` each time it leads (for supervisors and tests)."""

    def announce(epoch: int) -> None:
        print(f"leader epoch={epoch}", flush=True)

    async def main() -> None:
        if settings.embedded:  # our own PostgreSQL: its schema and development keyring are ours
            await migrate(endpoints.database())
            await enrol_development_keys(settings, settings, endpoints.database())
        await ensure_topics(settings, endpoints.kafka(), endpoints.topics)
        await _scheduler_service(settings, endpoints, on_leader=announce)

    with observability(settings, "tephra-scheduler", ("scheduler",), sys.stdout):
        return run_until_signalled(main)


def sim_cluster_command(settings: TephraSettings, endpoints: Endpoints) -> int:
    with observability(settings, "tephra-sim-cluster", ("sim-cluster",), sys.stdout):
        return run_until_signalled(lambda: run_services(settings, endpoints, ("sim-cluster",)))


def role_logins(settings: TephraSettings) -> dict[Role, Login]:
    """Each component's role: its ``TEPHRA_<SERVICE>_DATABASE_USER`` (else ``tephra_<service>``), and the
    password its ``..._PASSWORD_FILE`` holds (none given: the role's password is left as it is)."""
    from projector.connections import read_secret  # noqa: PLC0415

    own = {
        Role.PROJECTOR: settings.projector_credentials(),
        Role.SCHEDULER: settings.scheduler_credentials(),
        Role.API: settings.api_credentials(),
        Role.SIM_CLUSTER: settings.sim_credentials(),
    }
    logins: dict[Role, Login] = {}
    for role in Role:
        if role is Role.AUDITOR:
            user, password_file = settings.auditor_database_user, settings.auditor_database_password_file
        else:
            user, password_file = own[role].database_user, own[role].database_password_file
        setting = f"TEPHRA_{role.value.upper()}_DATABASE_PASSWORD_FILE"
        password = read_secret(password_file, setting) if password_file is not None else None
        logins[role] = Login(user or role.default_name, password)
    return logins


def migrate_command(settings: TephraSettings, endpoints: Endpoints) -> int:
    """``tephra migrate``: the migrations, then the roles and grants; prints what it did."""
    from projector.connection_settings import ServiceCredentials  # noqa: PLC0415
    from projector.connections import database_access  # noqa: PLC0415

    owner = ServiceCredentials(
        "migrate",
        "migrate_command",
        database_user=settings.migrate_database_user,
        database_password_file=settings.migrate_database_password_file,
    )
    database = database_access(settings, endpoints.database_url, owner)
    logins = role_logins(settings) if settings.migrate_roles else None

    async def main() -> None:
        applied = await migrate(database, logins)
        done = f"applied {', '.join(f'{v:04d}' for v in applied)}" if applied else "nothing to apply"
        print(f"tephra: database migrated ({done})", flush=True)
        if logins is not None:
            names = ", ".join(f"{login.name} ({role.value})" for role, login in logins.items())
            print(f"tephra: roles and grants set: {names}", flush=True)

    return run_until_signalled(main)
