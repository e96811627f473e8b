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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
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
    from api.endpoints import Endpoints
    from api.manifests import ManifestObject

app = typer.Typer(
    name="tephra",
    help="Tephra: an event-sourced batch scheduler with Volcano's semantics and a replayable audit log.",
    no_args_is_help=True,
    add_completion=False,
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
    format: Annotated[str, typer.Option("--format", "-f", help="table or json")] = "table",
    sessions: Annotated[int | None, typer.Option(help="Override the scenario's session count.")] = None,
) -> None:
    """Run scheduling sessions over a K8s-shaped scenario file and print the decisions."""
    from scheduler.simulate import simulate_command

    raise typer.Exit(simulate_command(files, output_format=format, sessions=sessions))


# --------------------------------------------------------------------------- the live stack


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
                        help=f"{info.description} ({env_name(name)}; default: {default_text(info)})",
                        metavar=type_name(info).upper(),
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

        # Typer reads the command's options from its signature.
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
    except NoStackError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


@app.command()
@settings_flags("submit")
def submit(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="VolcanoJob, Queue, PriorityClass, Node, SchedulerConfiguration "
            "manifests (YAML or JSON, multi-document)."
        ),
    ],
    flags: dict[str, str],
) -> None:
    """Validate every file, then produce the events; prints the ids (job/<ns>/<name>, queue/<name> ...)."""
    import asyncio

    from api.manifests import InvalidManifests
    from api.submit import load_submission, produce_manifests
    from api.telemetry import configure_tracing

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
    from aiokafka.errors import KafkaError

    from api.stack import ensure_topics

    async def create_and_produce() -> list[ManifestObject]:
        # All the topics with the deployment's partition count, not only those produced to (a broker
        # that creates topics on first use would create those alone, with its own count).
        await ensure_topics(settings, endpoints.kafka_bootstrap, endpoints.topics)
        return await produce_manifests(manifests, endpoints)

    try:
        produced = asyncio.run(create_and_produce())
    except KafkaError as exc:
        typer.echo(redact(f"error: cannot reach Kafka at {endpoints.kafka_bootstrap}: {exc}"), err=True)
        raise typer.Exit(1) from None
    finally:
        if provider is not None:
            provider.shutdown()
    for obj in produced:
        typer.echo(obj.ref)


@app.command()
@settings_flags("get")
def get(
    what: Annotated[str, typer.Argument(help="jobs, queues, nodes or sessions")],
    flags: dict[str, str],
    output: Annotated[str, typer.Option("--output", "-o", help="table, json or yaml")] = "table",
    limit: Annotated[int, typer.Option(help="sessions: how many of the newest to show")] = 20,
) -> None:
    """Show the projected state, kubectl-style."""
    from api.views import ViewError, get_command

    settings = _settings(CommonSettings, flags)
    endpoints = _endpoints(settings)
    try:
        raise typer.Exit(get_command(what, output, endpoints, limit=limit))
    except ViewError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


@app.command()
@settings_flags("up")
def up(flags: dict[str, str]) -> None:
    """Run projector, scheduler, simulated cluster and HTTP API in one process (embedded servers if unset)."""
    from api.stack import up_command

    settings = _settings(TephraSettings, flags)
    with _setup_errors():
        code = up_command(settings)
    raise typer.Exit(code)


@app.command("sim-cluster")
@settings_flags("sim-cluster")
def sim_cluster(flags: dict[str, str]) -> None:
    """Run only the simulated cluster: start bound tasks, finish evicted ones, after the configured delays."""
    from api.stack import sim_cluster_command

    settings = _settings(TephraSettings, flags)
    with _setup_errors():
        raise typer.Exit(sim_cluster_command(settings, _endpoints(settings)))


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

    settings = _settings(TephraSettings, flags)
    raise typer.Exit(api_command(settings, _endpoints(settings)))


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
