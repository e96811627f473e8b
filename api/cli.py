"""The ``tephra`` console script.

Each command is a thin shell: parse arguments, call one function of the
package that owns the capability, map its errors to an exit code.  Heavy
imports happen inside the commands so ``tephra --help`` stays fast; only the
settings models load up front, as every command's setting flags are made
from them (:func:`settings_flags`).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import inspect
import logging
import os
import signal
import sys
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn, TypeVar

import typer
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from api.settings import (
    COMMAND_SETTINGS,
    CommonSettings,
    SettingsError,
    TephraSettings,
    default_text,
    env_name,
    flag_name,
    load_settings,
    type_name,
)
from events.display import redact
from projector.heap import tune_gc

if TYPE_CHECKING:
    import asyncpg

    from api.endpoints import Endpoints
    from api.manifests import ManifestObject, Manifests
    from api.views import Item
    from events.signing import EventSigner
    from projector.connections import DatabaseAccess

app = typer.Typer(
    name="tephra",
    help="Tephra: an event-sourced batch scheduler with Volcano's semantics and a replayable audit log.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion, --show-completion
    pretty_exceptions_enable=False,
)


@app.command()
def schemas(
    out: Annotated[Path, typer.Option(help="Folder to write the JSON Schemas into.")] = Path(
        "events/schemas"
    ),
    check: Annotated[
        bool, typer.Option(help="Only check that the folder is up to date; exit 1 if not.")
    ] = False,
) -> None:
    """Write (or check) the JSON Schema of every event type."""
    from events.schemas import check_schemas, write_schemas

    if check:
        stale = check_schemas(out)
        for name in stale:
            typer.echo(f"stale or missing schema: {out / name}", err=True)
        raise typer.Exit(1 if stale else 0)
    for path in write_schemas(out):
        typer.echo(str(path))


@app.command()
def simulate(
    files: Annotated[list[Path], typer.Argument(help="Scenario files (multi-document YAML).")],
    output: Annotated[str, typer.Option("--output", "-o", help="table or json", metavar="FORMAT")] = "table",
    format_alias: Annotated[str | None, typer.Option("--format", "-f", hidden=True)] = None,
    sessions: Annotated[int | None, typer.Option(help="Override the scenario's session count.")] = None,
) -> None:
    """Run scheduling sessions over a K8s-shaped scenario file and print the decisions."""
    from scheduler.simulate import simulate_command

    # -f/--format: the spelling before -o, kept working.
    raise typer.Exit(simulate_command(files, output_format=format_alias or output, sessions=sessions))


# --------------------------------------------------------------------------- the live stack


_SETTINGS_NOTE = (
    "\n\nEach setting --x-y below is also the environment variable TEPHRA_X_Y (named first in its help);"
    " a flag wins over the variable.  docs/configuration.md lists them all."
)


def _metavar(info: FieldInfo) -> str:
    """The value's kind, short (a list of choices goes to the help: the help column keeps its width)."""
    kind = type_name(info)
    return "CHOICE" if "|" in kind and kind != "true|false" else kind.upper()


def _flag_help(name: str, info: FieldInfo) -> str:
    kind = type_name(info)
    choices = f"; one of {kind}" if _metavar(info) == "CHOICE" else ""
    return f"{env_name(name)}: {info.description} (default: {default_text(info)}{choices})"


def settings_flags(command: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Give a command a ``--flag`` for every field of its settings models (``COMMAND_SETTINGS``).

    The command keeps its own parameters and receives the flags given, by field name, as
    ``flags``.  Each flag is taken as text and validated by the model, as its variable is.
    """
    fields = {name: info for model in COMMAND_SETTINGS[command] for name, info in model.model_fields.items()}

    def decorate(function: Callable[..., None]) -> Callable[..., None]:
        own = inspect.signature(function, eval_str=True).parameters.values()
        options = [
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation=Annotated[
                    str | None,
                    typer.Option(
                        f"--{flag_name(name)}",
                        help=_flag_help(name, info),
                        metavar=_metavar(info),
                        show_default=False,
                        rich_help_panel="Settings",
                    ),
                ],
            )
            for name, info in fields.items()
        ]

        @functools.wraps(function)
        def run(**values: object) -> None:
            flags = {name: str(value) for name in fields if (value := values.pop(name)) is not None}
            function(**values, flags=flags)

        # Typer reads the command's options from its signature, its help from the docstring.
        run.__doc__ = (function.__doc__ or "").rstrip() + _SETTINGS_NOTE
        signature = inspect.Signature([p for p in own if p.name != "flags"] + options)
        run.__signature__ = signature  # type: ignore[attr-defined]
        return run

    return decorate


S = TypeVar("S", bound=BaseSettings)


def _settings(model: type[S], flags: dict[str, str], *, log: bool = True) -> S:
    """The settings, validated once (a bad value: its message, exit 2); logging set up at their level."""
    try:
        settings = load_settings(model, flags)
    except SettingsError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    if log and isinstance(settings, CommonSettings):
        from api.logs import configure_logging

        configure_logging(settings.log_level, settings.log_format)
    return settings


@contextmanager
def _setup_errors() -> Iterator[None]:
    """An embedded server that cannot start, or an OTEL_* setting that cannot be honoured, is a
    setup problem: its message, exit 2, no traceback."""
    from api.embedded import EmbeddedError
    from api.telemetry import TracingError

    try:
        yield
    except EmbeddedError as exc:
        typer.echo(f"error: the embedded stack could not start: {exc}", err=True)
        raise typer.Exit(2) from None
    except TracingError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def _endpoints(settings: CommonSettings) -> Endpoints:
    from api.endpoints import NoStackError, resolve_endpoints

    try:
        return resolve_endpoints(settings)
    except (NoStackError, ValueError) as exc:  # ValueError: a credential that cannot be read
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


@app.command()
@settings_flags("submit")
def submit(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="VolcanoJob, PodGroup (with its Pods), Pod, Queue, PriorityClass, Node, "
            "HyperNode, SchedulerConfiguration manifests (YAML or JSON, multi-document)."
        ),
    ],
    *,
    flags: dict[str, str],
    output: Annotated[
        str,
        typer.Option(
            "--output", "-o", help="summary (one line) or name (one line per object)", metavar="FORMAT"
        ),
    ] = "summary",
    allow_missing_queue: Annotated[
        bool,
        typer.Option(
            "--allow-missing-queue",
            help="Submit jobs for queues that do not exist yet (they wait, Pending with queue-missing).",
        ),
    ] = False,
    skip_live_check: Annotated[
        bool,
        typer.Option(
            "--skip-live-check",
            help="Submit jobs whose name an unfinished job holds in the projection (the projector"
            " rejects each one still unfinished when it comes to it: duplicate-job; --wait says so).",
        ),
    ] = False,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Wait until the projector has taken or rejected each object; one line per object"
            " (exit 1 if any was rejected, or not folded within --timeout).",
        ),
    ] = False,
    timeout: Annotated[
        float | None,
        typer.Option(min=0.1, help="--wait: seconds to wait for the projector in all (default: 30)"),
    ] = None,
) -> None:
    """Validate, check queues and job names, size every object, produce all or none; one summary line."""
    import asyncio

    from api.manifests import InvalidManifests
    from api.submit import load_submission
    from api.telemetry import configure_tracing

    if output not in ("summary", "name"):
        typer.echo(f"error: -o {output}: expected summary or name", err=True)
        raise typer.Exit(2)
    if timeout is not None and not wait:
        typer.echo("error: --timeout is how long --wait waits: give --wait too", err=True)
        raise typer.Exit(2)
    settings = _settings(CommonSettings, flags)
    try:
        manifests = load_submission(files, cluster=settings.cluster)
    except InvalidManifests as exc:
        for error in exc.errors:
            typer.echo(f"error: {error}", err=True)
        typer.echo("nothing was submitted", err=True)
        raise typer.Exit(1) from None
    for warning in manifests.warnings:
        typer.echo(f"warning: {warning}", err=True)
    endpoints = _endpoints(settings)
    with _setup_errors():
        provider = configure_tracing("tephra-submit", without_exporter=True)
    try:
        _check_on_projection(endpoints, manifests, queues=not allow_missing_queue, names=not skip_live_check)
        produced = asyncio.run(_size_and_produce(settings, endpoints, manifests))
    finally:
        if provider is not None:
            provider.shutdown()
    if wait:
        from api.submit_wait import DEFAULT_WAIT_TIMEOUT

        _report_fates(endpoints, produced, output, DEFAULT_WAIT_TIMEOUT if timeout is None else timeout)
    else:
        _report_produced(produced, output)


def _report_produced(produced: list[ManifestObject], output: str) -> None:
    if output == "name":
        for obj in produced:
            typer.echo(obj.ref)
    else:
        typer.echo(f"submitted {_counted(obj.ref for obj in produced)}")


def _check_on_projection(endpoints: Endpoints, manifests: Manifests, *, queues: bool, names: bool) -> None:
    """The checks of every door on the projection (api.submit): every job's queue exists
    (``queues``), no job's name is held by an unfinished job (``names``); exit 1 when one fails."""
    import asyncio

    from api.submit import check_live_jobs, check_queues, projection_live_jobs, projection_queues
    from api.views import read_projection

    database = endpoints.database()

    async def known() -> set[str]:
        return await read_projection(database, projection_queues)

    async def live(job_ids: list[str]) -> dict[str, str]:
        return await read_projection(database, lambda conn: projection_live_jobs(conn, job_ids))

    if queues:
        refused = "nothing was submitted (--allow-missing-queue submits jobs for missing queues)"
        asyncio.run(
            _refuse_unless(
                check_queues(manifests, known), "the jobs' queues exist", "--allow-missing-queue", refused
            )
        )
    if names:
        check = check_live_jobs(manifests, live, how_to_cancel=lambda job_id: f"`tephra cancel job {job_id}`")
        asyncio.run(
            _refuse_unless(check, "the jobs' names are free", "--skip-live-check", "nothing was submitted")
        )


async def _refuse_unless(check: Awaitable[None], what: str, skip: str, refused: str) -> None:
    """Run one check: each problem on stderr then ``refused``, exit 1; a projection that cannot be
    read says so, naming the flag that ``skip``s the check."""
    from api.manifests import InvalidManifests
    from api.submit import LiveJobsError
    from api.views import ViewError

    try:
        await check
    except (InvalidManifests, LiveJobsError) as exc:
        for error in exc.errors:
            typer.echo(f"error: {error}", err=True)
        _fail(refused)
    except ViewError as exc:
        unchecked = f"{skip} submits without the check"
        _fail(f"error: cannot check that {what}: {exc}; nothing was submitted ({unchecked})")


def _report_fates(endpoints: Endpoints, produced: list[ManifestObject], output: str, timeout: float) -> None:
    """``--wait``: one line per object, accepted (stdout) or rejected (stderr); exit 1 unless all
    were accepted."""
    import asyncio

    from api.submit_wait import ProjectionUnreachable, fates_of, rejection_text

    try:
        fates = asyncio.run(fates_of(endpoints.database(), produced, timeout))
    except ProjectionUnreachable as exc:
        _fail(
            f"error: submitted {_counted(obj.ref for obj in produced)}, but cannot wait for the"
            f" projector: {exc}"
        )
    accepted = rejected = unknown = 0
    for obj in produced:
        fate = fates.get(obj.event.id)
        if fate is None:
            unknown += 1
            typer.echo(
                f"error: {obj.ref}: not taken by the projector within {timeout:g} s (is it running?"
                " `tephra get` shows the object once it is taken)",
                err=True,
            )
        elif fate.seq is None:
            rejected += 1
            typer.echo(f"error: {obj.ref} rejected: {rejection_text(obj, fate)}", err=True)
        else:
            accepted += 1
            typer.echo(obj.ref if output == "name" else f"{obj.ref} accepted (seq {fate.seq})")
    if output != "name":
        outcome = f"{accepted} accepted, {rejected} rejected" + (f", {unknown} unknown" if unknown else "")
        typer.echo(f"submitted {_counted(obj.ref for obj in produced)}: {outcome}")
    if rejected or unknown:
        raise typer.Exit(1)


async def _size_and_produce(
    settings: CommonSettings, endpoints: Endpoints, manifests: Manifests
) -> list[ManifestObject]:
    """Create the topics, size every object against the broker's limit, produce them (exit 1 on failure)."""
    from aiokafka.errors import KafkaError, MessageSizeTooLargeError
    from rich.console import Console
    from rich.progress import Progress

    from api.stack import ensure_topics
    from api.submit import PartlyProducedError, message_limit, produce_manifests, too_large

    where = f"Kafka at {endpoints.kafka_bootstrap}"
    # All the topics with the deployment's partition count, not only those produced to (a broker
    # that creates topics on first use would create those alone, with its own count).
    try:
        kafka = endpoints.kafka()
    except ValueError as exc:  # a credential missing or unreadable: its message names the setting
        _fail(f"error: {exc}; nothing was submitted")
    try:
        await ensure_topics(settings, kafka, endpoints.topics)
    except KafkaError as exc:
        _fail(f"error: cannot reach {where}: {exc}; nothing was submitted")
    topics = endpoints.topics
    limit = await message_limit(kafka, [topics.intents, topics.observations])
    problems = too_large(manifests, topics, limit)
    if problems:
        for problem in problems:
            typer.echo(f"error: {problem}", err=True)
        typer.echo("nothing was submitted", err=True)
        raise typer.Exit(1)
    console = Console(stderr=True)
    with Progress(console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task("producing", total=len(manifests.objects))
        try:
            return await produce_manifests(
                manifests,
                endpoints,
                max_request_size=limit,
                on_produced=lambda: progress.advance(task),
                signer=_signer(settings),
            )
        except PartlyProducedError as exc:
            for obj in exc.produced:
                typer.echo(obj.ref)
            _fail(
                f"error: producing {exc.failed.ref} failed: {_kafka_error(exc.cause, where)}; the"
                f" {len(exc.produced)} objects listed on stdout were produced, the other"
                f" {len(exc.unsent) + 1} were not: submit those again"
            )
        except MessageSizeTooLargeError as exc:
            _fail(f"error: {_kafka_error(exc, where)}; nothing was submitted")
        except KafkaError as exc:
            _fail(f"error: cannot reach {where}: {exc}; nothing was submitted")


def _fail(message: str) -> NoReturn:
    typer.echo(redact(message), err=True)
    raise typer.Exit(1)


def _kafka_error(exc: BaseException, where: str) -> str:
    from aiokafka.errors import MessageSizeTooLargeError

    if isinstance(exc, MessageSizeTooLargeError):
        return f"too large for {where}: {exc}"
    return f"{exc!r}"


def _counted(refs: Iterable[str]) -> str:
    """``3 objects (1 queue, 2 jobs)``: how many of each kind, in first-seen order."""
    kinds = Counter(ref.split("/", 1)[0] for ref in refs)
    total = sum(kinds.values())
    each = ", ".join(f"{n} {kind}{'s' if n != 1 else ''}" for kind, n in kinds.items())
    return f"{total} object{'s' if total != 1 else ''}" + (f" ({each})" if each else "")


OutputOption = Annotated[
    str, typer.Option("--output", "-o", help="table, wide, json, yaml or name", metavar="FORMAT")
]
NamespaceOption = Annotated[
    str, typer.Option("--namespace", "-n", help="The jobs' namespace.", metavar="NAMESPACE")
]
AllNamespacesOption = Annotated[
    bool, typer.Option("--all-namespaces", "-A", help="Jobs of every namespace (a NAMESPACE column).")
]


@app.command()
@settings_flags("get")
def get(
    what: Annotated[
        str,
        typer.Argument(
            help="jobs, queues, nodes or sessions",
            autocompletion=lambda: ["jobs", "queues", "nodes", "sessions"],
        ),
    ],
    name: Annotated[
        str | None, typer.Argument(help="Only this one (a job: NAME in the namespace, or NAMESPACE/NAME).")
    ] = None,
    *,
    flags: dict[str, str],
    output: OutputOption = "table",
    namespace: NamespaceOption = "default",
    all_namespaces: AllNamespacesOption = False,
    limit: Annotated[int, typer.Option(help="sessions: how many of the newest to show")] = 20,
    selector: Annotated[
        str | None,
        typer.Option("--selector", "-l", help="nodes: only those with these labels (key=value[,key=value])"),
    ] = None,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="Keep watching: print each row again when it changes.")
    ] = False,
    watch_interval: Annotated[float, typer.Option(help="-w: seconds between reads", min=0.1)] = 2.0,
) -> None:
    """Show the projected state, kubectl-style (exit 1: the named object does not exist)."""
    from api.views import get_command

    settings = _settings(CommonSettings, flags)
    endpoints = _endpoints(settings)
    with _view_errors():
        code = get_command(
            what,
            output,
            endpoints,
            name=name,
            namespace=None if all_namespaces else namespace,
            limit=limit,
            labels=selector,
            watch_interval=watch_interval if watch else None,
        )
    raise typer.Exit(code)


JobName = Annotated[str, typer.Argument(help="The job: NAME in the namespace, or NAMESPACE/NAME.")]


@contextmanager
def _view_errors() -> Iterator[None]:
    """A projection that cannot be read (or a wrong kind or format): its message, exit 2."""
    from api.views import ViewError

    try:
        yield
    except ViewError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def _job_id(name: str, namespace: str) -> str:
    return name if "/" in name else f"{namespace}/{name}"


describe_app = typer.Typer(help="One object in full, kubectl describe-style.", no_args_is_help=True)
app.add_typer(describe_app, name="describe")
cancel_app = typer.Typer(
    help="Cancel a job: JobCancelled, produced as submit produces.", no_args_is_help=True
)
app.add_typer(cancel_app, name="cancel")


DescribeOutput = Annotated[str, typer.Option("--output", "-o", help="text, json or yaml", metavar="FORMAT")]


def _describe(
    output: str,
    flags: dict[str, str],
    what: str,
    read: Callable[[DatabaseAccess], Coroutine[object, object, Item | None]],
    text: Callable[[Item], str],
) -> None:
    """Read one object (``read`` gets the database access) and print it; exit 1 when it does not exist."""
    import asyncio
    import json

    import yaml

    if output not in ("text", "json", "yaml"):
        typer.echo(f"error: unknown output format {output!r}; expected text, json or yaml", err=True)
        raise typer.Exit(2)
    endpoints = _endpoints(_settings(CommonSettings, flags, log=False))
    with _view_errors():
        item = asyncio.run(read(endpoints.database()))
    if item is None:
        typer.echo(f"error: {what} not found", err=True)
        raise typer.Exit(1)
    if output == "json":
        typer.echo(json.dumps(item, indent=2))
    elif output == "yaml":
        typer.echo(yaml.safe_dump(item, sort_keys=False), nl=False)
    else:
        typer.echo(text(item), nl=False)


@describe_app.command("job")
@settings_flags("get")
def describe_job(
    name: JobName,
    *,
    flags: dict[str, str],
    namespace: NamespaceOption = "default",
    output: DescribeOutput = "text",
) -> None:
    """A job's facts, tasks, the newest pending reasons and its events (exit 1: no such job)."""
    from api.views import describe_text, fetch_job

    job_id = _job_id(name, namespace)
    _describe(output, flags, f"job {job_id!r}", lambda url: fetch_job(url, job_id), describe_text)


def _describe_object(kind: str, name: str, flags: dict[str, str], output: str) -> None:
    from api.views import describe_object_text, fetch_object

    what = f"{kind.removesuffix('s')} {name!r}"
    _describe(
        output,
        flags,
        what,
        lambda url: fetch_object(url, kind, name),
        lambda item: describe_object_text(kind, item),
    )


ObjectName = Annotated[str, typer.Argument(help="Its name.")]


def _describe_command(kind: str, doc: str) -> None:
    """Register ``tephra describe <kind without s> NAME`` for a queue or a node."""

    def command(name: ObjectName, *, flags: dict[str, str], output: DescribeOutput = "text") -> None:
        _describe_object(kind, name, flags, output)

    command.__doc__ = doc
    describe_app.command(kind.removesuffix("s"))(settings_flags("get")(command))


_describe_command("queues", "A queue's settings, what it holds, its jobs by phase (exit 1: no such queue).")
_describe_command(
    "nodes", "A node's status, labels, what it has and holds, and the tasks on it (exit 1: no such node)."
)


@cancel_app.command("job")
@settings_flags("submit")
def cancel_job(
    name: JobName,
    *,
    flags: dict[str, str],
    namespace: NamespaceOption = "default",
    reason: Annotated[str, typer.Option(help="Why, recorded in the event.")] = "",
) -> None:
    """Cancel a job: its tasks are released and it ends Cancelled; prints job/<ns>/<name> cancelled."""
    import asyncio

    from api.submit import CANCEL_SOURCE, job_cancellation
    from api.views import JobQuery, fetch_items

    settings = _settings(CommonSettings, flags, log=False)
    endpoints = _endpoints(settings)
    job_id = _job_id(name, namespace)
    query = JobQuery(job_id=job_id, reasons=False)
    with _view_errors():
        found = asyncio.run(fetch_items(endpoints.database(), "jobs", query=query))
    if not found:
        typer.echo(f"error: no job {job_id} in the projection: nothing to cancel", err=True)
        raise typer.Exit(1)
    _produce(
        job_cancellation(job_id, cluster=settings.cluster, source=CANCEL_SOURCE, reason=reason),
        settings,
        endpoints,
    )
    typer.echo(f"job/{job_id} cancelled")


def _signer(settings: CommonSettings) -> EventSigner | None:
    """The commands' signer: ``cli:<user>`` (api.identity), or None (unsigned)."""
    from api.identity import CLI_PRODUCER, local_user, producer_signer
    from events.signing import SigningKeyError

    try:
        signer = producer_signer(settings, CLI_PRODUCER)
    except SigningKeyError as exc:
        _fail(f"error: {exc}; nothing was submitted")
    if signer is None:
        if not settings.embedded:  # the embedded stack takes unsigned intents; a deployment refuses them
            typer.echo(
                "warning: no producer key (TEPHRA_PRODUCER_KEY_FILE, or keys/cli.pem in the data dir):"
                " these events go unsigned, and a deployment that refuses unsigned intents rejects"
                " them (`unsigned`; docs/producers.md, Signing)",
                err=True,
            )
        return None
    return signer.on_behalf_of(local_user())


def _produce(manifests: Manifests, settings: CommonSettings, endpoints: Endpoints) -> None:
    """Produce the events as ``tephra submit`` does (Kafka unreachable: its message, exit 1)."""
    import asyncio

    from aiokafka.errors import KafkaError

    from api.submit import produce_manifests

    try:
        asyncio.run(produce_manifests(manifests, endpoints, signer=_signer(settings)))
    except KafkaError as exc:
        typer.echo(f"error: cannot reach Kafka at {endpoints.kafka_bootstrap}: {exc}", err=True)
        raise typer.Exit(1) from None


delete_app = typer.Typer(help="Delete a queue (QueueDeleted, produced as submit does).", no_args_is_help=True)
app.add_typer(delete_app, name="delete")


@delete_app.command("queue")
@settings_flags("submit")
def delete_queue(name: Annotated[str, typer.Argument(help="The queue.")], *, flags: dict[str, str]) -> None:
    """Delete a queue that holds no unfinished job (as Volcano refuses to); prints queue/<name> deleted."""
    import asyncio

    from api.submit import DELETE_SOURCE, queue_deletion
    from api.views import fetch_items

    settings = _settings(CommonSettings, flags, log=False)
    endpoints = _endpoints(settings)
    with _view_errors():
        queues = asyncio.run(fetch_items(endpoints.database(), "queues"))
    queue = next((q for q in queues if q["name"] == name), None)
    if queue is None:
        typer.echo(f"error: no queue {name} in the projection: nothing to delete", err=True)
        raise typer.Exit(1)
    live = {phase: n for phase, n in queue["jobs"].items() if phase in ("Pending", "Inqueue", "Running")}
    if live:
        held = ", ".join(f"{n} {phase}" for phase, n in live.items())
        typer.echo(
            f"error: queue {name} still holds jobs ({held}); cancel them first (tephra cancel job)", err=True
        )
        raise typer.Exit(1)
    _produce(queue_deletion(name, cluster=settings.cluster, source=DELETE_SOURCE), settings, endpoints)
    typer.echo(f"queue/{name} deleted")


@app.command()
@settings_flags("up")
def up(flags: dict[str, str]) -> None:
    """Run projector, scheduler, simulated cluster and HTTP API in one process (embedded servers if unset)."""
    from api.stack import up_command

    settings = _settings(TephraSettings, flags)
    with _setup_errors():
        code = up_command(settings)
    raise typer.Exit(code)


@app.command()
@settings_flags("migrate")
def migrate(flags: dict[str, str]) -> None:
    """Bring the database schema up to date and set each component's role and grants (once, before the
    services: they do not migrate).  Idempotent.  The roles' passwords come from the services'
    TEPHRA_<SERVICE>_DATABASE_PASSWORD_FILE (and TEPHRA_AUDITOR_DATABASE_PASSWORD_FILE)."""
    from api.stack import migrate_command

    settings = _settings(TephraSettings, flags)
    try:
        code = migrate_command(settings, _endpoints(settings))
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    raise typer.Exit(code)


@app.command("sim-cluster")
@settings_flags("sim-cluster")
def sim_cluster(flags: dict[str, str]) -> None:
    """Run only the simulated cluster: start bound tasks, finish evicted ones, after the configured delays."""
    from api.stack import sim_cluster_command

    settings = _settings(TephraSettings, flags)
    with _setup_errors():
        raise typer.Exit(sim_cluster_command(settings, _endpoints(settings)))


@app.command("kube-bridge")
@settings_flags("kube-bridge")
def kube_bridge(
    flags: dict[str, str],
    install_crds: Annotated[
        bool,
        typer.Option(
            "--install-crds", help="Create or update Tephra's Volcano CRDs (Job, Queue, PodGroup) first."
        ),
    ] = False,
) -> None:
    """Run the Kubernetes bridge: cluster objects in as events, accepted bindings and evictions out."""
    from api.kube_bridge import kube_bridge_command
    from api.settings import KubeBridgeCommandSettings

    settings = _settings(KubeBridgeCommandSettings, flags)
    with _setup_errors():
        raise typer.Exit(kube_bridge_command(settings, _endpoints(settings), install_crds=install_crds))


@app.command()
@settings_flags("projector")
def projector(flags: dict[str, str]) -> None:
    """Run only the projector (Kafka -> PostgreSQL)."""
    from api.stack import projector_command

    settings = _settings(TephraSettings, flags)
    with _setup_errors():
        raise typer.Exit(projector_command(settings, _endpoints(settings)))


@app.command()
@settings_flags("scheduler")
def scheduler(flags: dict[str, str]) -> None:
    """Run only the scheduler service (one leader per cluster); prints `leader epoch=<n>` when it leads."""
    from api.stack import scheduler_command

    settings = _settings(TephraSettings, flags)
    with _setup_errors():
        raise typer.Exit(scheduler_command(settings, _endpoints(settings)))


@app.command("api")
@settings_flags("api")
def api_server(flags: dict[str, str]) -> None:
    """Run only the HTTP API (TEPHRA_API_ADDR); prints `tephra: API at <url>` once it listens."""
    from api.http.server import api_command
    from api.identity import API_PRODUCER, producer_signer
    from events.signing import SigningKeyError

    settings = _settings(TephraSettings, flags)
    try:
        signer = producer_signer(settings, API_PRODUCER)
    except SigningKeyError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    raise typer.Exit(api_command(settings, _endpoints(settings), signer))


@app.command("kube-dev-cluster")
def kube_dev_cluster(
    directory: Annotated[
        Path | None,
        typer.Option("--dir", help="Data directory (kept); default: a temporary one, deleted on exit."),
    ] = None,
    kubeconfig: Annotated[Path | None, typer.Option(help="Also write the admin kubeconfig here.")] = None,
) -> None:
    """Run etcd + kube-apiserver v1.20.2 on loopback (RBAC on) until Ctrl-C; prints the kubeconfig path."""
    from kube.dev.commands import dev_cluster_command

    raise typer.Exit(dev_cluster_command(directory, kubeconfig))


@app.command("kube-sim-kubelet")
def kube_sim_kubelet(
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            envvar="KUBECONFIG", help="The cluster's kubeconfig; in-cluster service account if unset."
        ),
    ] = None,
    node: Annotated[
        list[str] | None,
        typer.Option(
            help="A node to create: NAME or NAME:RESOURCE=QTY,... (repeat); default cpu=8,memory=32Gi."
        ),
    ] = None,
    heartbeat: Annotated[float, typer.Option(min=0.1, help="Seconds between two Ready heartbeats.")] = 30.0,
) -> None:
    """A fake kubelet: keeps its nodes (and those labelled tephra.dev/sim-kubelet) Ready, runs bound pods."""
    from kube.sim_kubelet import sim_kubelet_command

    raise typer.Exit(sim_kubelet_command(kubeconfig, node or [], heartbeat))


token_app = typer.Typer(
    help="The HTTP API's bearer tokens (stored hashed in TEPHRA_API_TOKENS_FILE).", no_args_is_help=True
)
app.add_typer(token_app, name="token")
TokensFile = Annotated[
    str | None,
    typer.Option(
        "--api-tokens-file", help="the tokens file (TEPHRA_API_TOKENS_FILE; default .tephra/api-tokens.json)"
    ),
]


def _tokens_file(value: str | None) -> Path:
    from api.http.settings import ApiSettings

    return _settings(ApiSettings, {"api_tokens_file": value} if value else {}, log=False).api_tokens_file


@token_app.command("create")
def token_create(
    subject: Annotated[str, typer.Option(help="Who the token is for (recorded with what it does).")],
    role: Annotated[str, typer.Option(help="viewer, submitter, auditor or admin")],
    queue: Annotated[list[str] | None, typer.Option(help="A submitter's queue (repeat; none: any).")] = None,
    namespace: Annotated[
        list[str] | None, typer.Option(help="A submitter's namespace (repeat; none: any).")
    ] = None,
    tokens_file: TokensFile = None,
) -> None:
    """Make a token; prints it once (only its hash is kept)."""
    from api.http.tokens import Role, TokenError, create_token

    try:
        token, stored = create_token(
            _tokens_file(tokens_file),
            subject=subject,
            role=Role(role),
            queues=tuple(queue or ()),
            namespaces=tuple(namespace or ()),
        )
    except ValueError as exc:  # TokenError, or a role that is not one
        message = str(exc) if isinstance(exc, TokenError) else f"--role: expected one of {', '.join(Role)}"
        typer.echo(f"error: {message}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"token {stored.id} for {stored.subject} ({stored.role}); it is not shown again:", err=True)
    typer.echo(token)


@token_app.command("revoke")
def token_revoke(
    token_id: Annotated[str, typer.Argument(help="The token's id (tephra token list).")],
    tokens_file: TokensFile = None,
) -> None:
    """Revoke a token: the API refuses it from its next request."""
    from api.http.tokens import TokenError, revoke_token

    try:
        revoked = revoke_token(_tokens_file(tokens_file), token_id)
    except TokenError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"revoked {revoked.id} ({revoked.subject})")


@token_app.command("list")
def token_list(tokens_file: TokensFile = None) -> None:
    """Every token: id, subject, role, scope, created, revoked (never a secret)."""
    from api.http.tokens import TokenError, TokenStore

    try:
        tokens = TokenStore(_tokens_file(tokens_file)).all()
    except TokenError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    for t in tokens:
        scope = f" queues={','.join(t.queues) or '*'} namespaces={','.join(t.namespaces) or '*'}"
        state = " revoked" if t.revoked else ""
        typer.echo(f"{t.id} {t.subject} {t.role}{scope if t.role == 'submitter' else ''} {t.created}{state}")


key_app = typer.Typer(
    help="Ed25519 signing keys (PKCS#8 PEM files) for producers and the scheduler.", no_args_is_help=True
)
app.add_typer(key_app, name="key")
KeyPath = Annotated[Path, typer.Argument(help="The private key file.")]


@key_app.command("create")
def key_create(path: KeyPath) -> None:
    """Create a private key file (mode 0600; an existing file is left alone); prints its public key."""
    from events.signing import SigningKeyError, load_or_create_signing_key

    existed = path.exists()
    try:
        key = load_or_create_signing_key(path)
    except (SigningKeyError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    if existed:
        typer.echo(f"{path} exists already; its public key:", err=True)
    typer.echo(key.public_key)


@key_app.command("public")
def key_public(path: KeyPath) -> None:
    """Print the public key of a private key file (for `tephra producer add --public-key`)."""
    from events.signing import SigningKeyError, load_signing_key

    try:
        typer.echo(load_signing_key(path).public_key)
    except SigningKeyError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


producer_app = typer.Typer(
    help="The keyring: who may produce which event types, for which queues and namespaces.",
    no_args_is_help=True,
)
app.add_typer(producer_app, name="producer")


T = TypeVar("T")


def _keyring(flags: dict[str, str], action: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
    """Run ``action`` on a connection to the deployment's database (exit 1 when the keyring is missing)."""
    import asyncio

    import asyncpg

    settings = _settings(CommonSettings, flags, log=False)
    endpoints = _endpoints(settings)

    async def run() -> T:
        from projector.connections import connect

        conn = await connect(endpoints.database())
        try:
            return await action(conn)
        finally:
            await conn.close()

    try:
        return asyncio.run(run())
    except asyncpg.UndefinedTableError:
        _fail("error: the database has no keyring table yet: run `tephra migrate` first")
    except (OSError, asyncpg.PostgresError) as exc:
        _fail(f"error: {exc}")


@producer_app.command("add")
@settings_flags("submit")
def producer_add(
    name: Annotated[
        str, typer.Argument(help="The producer's name: the NAME of its principal NAME[:SUBJECT].")
    ],
    *,
    flags: dict[str, str],
    public_key: Annotated[str, typer.Option(help="Its Ed25519 public key (tephra key public FILE).")],
    may: Annotated[list[str], typer.Option(help="An event type it may produce (repeat).")],
    queue: Annotated[
        list[str] | None, typer.Option(help="A queue its events may touch (repeat; none: any).")
    ] = None,
    namespace: Annotated[
        list[str] | None, typer.Option(help="A namespace its events may touch (repeat; none: any).")
    ] = None,
) -> None:
    """Add a producer to the keyring (or replace the one of that name): the projector trusts its
    signed events from its next batch on."""
    from projector.keyring import add_producer, keyring_problem
    from projector.trust import KeyringEntry

    entry = KeyringEntry(
        name=name,
        public_key=public_key.strip(),
        may=frozenset(may),
        queues=frozenset(queue or ()),
        namespaces=frozenset(namespace or ()),
    )
    problem = keyring_problem(entry)
    if problem is not None:
        typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(2)
    _keyring(flags, lambda conn: add_producer(conn, entry))
    typer.echo(f"producer {name} may produce {', '.join(sorted(entry.may))}")


@producer_app.command("remove")
@settings_flags("submit")
def producer_remove(
    name: Annotated[str, typer.Argument(help="The producer's name.")], *, flags: dict[str, str]
) -> None:
    """Remove a producer from the keyring: its events are rejected (unknown-principal) from the next batch."""
    from projector.keyring import remove_producer

    if not _keyring(flags, lambda conn: remove_producer(conn, name)):
        typer.echo(f"error: no producer {name} in the keyring", err=True)
        raise typer.Exit(1)
    typer.echo(f"removed {name}")


@producer_app.command("list")
@settings_flags("submit")
def producer_list(*, flags: dict[str, str]) -> None:
    """Every producer: name, public key, the types it may produce, its queues and namespaces."""
    from projector.keyring import load_keyring

    for entry in _keyring(flags, load_keyring).values():
        scope = "".join(
            f" {label}={','.join(sorted(values))}"
            for label, values in (("queues", entry.queues), ("namespaces", entry.namespaces))
            if values
        )
        typer.echo(f"{entry.name} {entry.public_key} may={','.join(sorted(entry.may))}{scope}")


@app.command()
def demo(
    keep: Annotated[bool, typer.Option(help="Keep the demo's data dir instead of deleting it.")] = False,
) -> None:
    """Run a small GPU cluster end to end: gang scheduling, a gang that cannot fit, a preemption."""
    from api.demo import demo_command

    settings = _settings(TephraSettings, {}, log=False)  # the demo prints its own account
    with _setup_errors():
        code = demo_command(settings, keep=keep)
    raise typer.Exit(code)


class _Exit:
    """Ends the process once the exit handlers have run, without the interpreter's teardown.

    The teardown frees every object one by one: seconds for a service holding
    a large state (2.4 s measured for a scheduler with 40k pending jobs), and
    SIGTERM must stop a service within 2 s.  Registered first, so the exit
    handlers registered later (the embedded servers' stop, the span exporter's
    flush) run before it; Python has joined its non-daemon threads by then.
    """

    def __init__(self) -> None:
        self.code = 0

    def __call__(self) -> None:
        logging.shutdown()  # registered before us at import: it would run after us, so never
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(self.code)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"tephra {version('tephra')}")
        except PackageNotFoundError:
            typer.echo("tephra (not installed: no version)")
        raise typer.Exit


@app.callback()
def _options(
    show_version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Tephra: an event-sourced batch scheduler with Volcano's semantics and a replayable audit log."""


def main() -> None:
    tune_gc()  # the collector policy of every Tephra process (projector.heap)
    ending = _Exit()
    atexit.register(ending)
    try:
        app()
    except SystemExit as exc:
        # What the interpreter would exit with (a message was already printed by then).
        ending.code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        raise
    except KeyboardInterrupt:
        ending.code = 128 + signal.SIGINT
        raise
    except BaseException:
        ending.code = 1
        raise


if __name__ == "__main__":
    main()
