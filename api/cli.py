"""The ``tephra`` console script.

Each command is a thin shell: parse arguments, call one function of the
package that owns the capability, map its errors to an exit code.  Heavy
imports happen inside the commands so ``tephra --help`` stays fast; only the
settings models load up front, as every command's setting flags are made
from them (:func:`settings_flags`).
"""

from __future__ import annotations

import functools
import inspect
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
from projector.heap import tune_gc

if TYPE_CHECKING:
    from api.endpoints import Endpoints

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

    try:
        produced = asyncio.run(produce_manifests(manifests, endpoints))
    except KafkaError as exc:
        typer.echo(f"error: cannot reach Kafka at {endpoints.kafka_bootstrap}: {exc}", err=True)
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
    """Run projector + scheduler + simulated cluster in one process (embedded servers when none are set)."""
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


def main() -> None:
    tune_gc()  # the collector policy of every Tephra process (projector.heap)
    app()


if __name__ == "__main__":
    main()
