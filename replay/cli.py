"""The ``replay`` console script: explain, session, verify, audit preemptions, checkpoints.

Every command only reads the archive (one read-only transaction).  The
archive is ``--database-url``, else ``TEPHRA_DATABASE_URL``, else the embedded
stack recorded in ``$TEPHRA_DATA_DIR/stack.json``.

Output: ``-o/--output``, as ``tephra``'s: ``table`` (the default, text for
people, whether or not stdout is a terminal), ``json`` (stable, sorted) or
``yaml``; ``audit`` also ``wide`` (one row per eviction) and ``csv``.  The
former ``-f/--format`` is still accepted (hidden; its ``auto`` and ``text``
mean ``table``).  Exit codes: 0 fine,
1 the answer is negative (unknown job or session, a divergence), 2 the
archive cannot be read or an argument is wrong.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
import yaml
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from events.display import printable
from events.signing import SigningKeyError, load_signing_key
from projector.connection_settings import ConnectionSettings
from projector.connections import DatabaseAccess, database_access
from replay.actions import ActionRow, actions_of
from replay.chain import CheckpointAnchor
from replay.checkpoints import load_checkpoints
from replay.errors import ArchiveError, ArchiveUnavailable, NotFound, ReplayError
from replay.explain import Explanation
from replay.locate import database_url
from replay.probe import DEFAULT_BUDGET_SECONDS
from replay.probe import Progress as SearchProgress
from replay.queries import audit_preemptions, explain_job, show_session, verify_archive
from replay.render import (
    dump_json,
    print_actions,
    print_audit,
    print_explanation,
    print_session,
    print_verify,
)
from replay.store import ArchiveReader, open_archive

__all__ = ["ArchiveUrl", "app", "located_archive", "main"]

T = TypeVar("T")

app = typer.Typer(
    name="replay",
    help="Rebuild past scheduling sessions from the archive: explain, verify, audit. Read-only.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion, --show-completion
    pretty_exceptions_enable=False,
)
audit_app = typer.Typer(help="Compliance views over the archive.", no_args_is_help=True)
app.add_typer(audit_app, name="audit")
checkpoints_app = typer.Typer(
    help="The projector's signed checkpoints of the chain: keep them where the database cannot rewrite them.",
    no_args_is_help=True,
)
app.add_typer(checkpoints_app, name="checkpoints")

DatabaseOption = Annotated[
    str | None,
    typer.Option("--database-url", help="PostgreSQL URL of the archive (default: env / stack.json)."),
]
OutputOption = Annotated[
    str | None,
    typer.Option("--output", "-o", help="table, json or yaml", metavar="FORMAT", show_default=False),
]
#: The spelling before ``-o``, kept working: ``auto`` and ``text`` were the table.
FormatAlias = Annotated[str | None, typer.Option("--format", "-f", hidden=True)]
_LEGACY = {"auto": "table", "text": "table"}
#: The explain searches' time budget, in seconds (``--budget``).
BUDGET_ENV = "TEPHRA_EXPLAIN_BUDGET"


def _console(err: bool = False) -> Console:
    # Piped: wide enough for the tables, unless COLUMNS says how wide (rich reads it itself).
    wide = sys.stdout.isatty() or "COLUMNS" in os.environ
    return Console(stderr=err, soft_wrap=False, width=None if wide else 200)


def _output(
    output: str | None, alias: str | None, allowed: tuple[str, ...] = ("table", "json", "yaml")
) -> str:
    """The output format asked for by ``-o`` (or the hidden ``-f``), checked against ``allowed``."""
    chosen = output or _LEGACY.get(alias or "", alias) or "table"
    if chosen not in allowed:
        raise typer.BadParameter(
            f"expected one of {', '.join(allowed)}, got {chosen!r}", param_hint="--output"
        )
    return chosen


def _print_data(value: Any, output: str) -> None:
    """A to_json() answer as ``-o json`` or ``-o yaml`` (the same data: YAML is made from the JSON)."""
    text = dump_json(value)
    typer.echo(
        text if output == "json" else yaml.safe_dump(json.loads(text), sort_keys=True), nl=output == "json"
    )


def _parse_time(value: str | None, option: str) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(f"expected an ISO 8601 time, got {value!r}", param_hint=option) from None
    # A time without an offset is read as UTC, the archive's clock.
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


#: Gives one command the archive's URL, as a context: the process that composes the stack
#: (``api``) may start a stopped embedded stack's PostgreSQL for the command and stop it after.
ArchiveUrl = Callable[[str | None], contextlib.AbstractContextManager[str]]


@contextlib.contextmanager
def located_archive(explicit: str | None) -> Iterator[str]:
    """``--database-url``, else ``TEPHRA_DATABASE_URL``, else the running embedded stack's."""
    yield database_url(os.environ, explicit=explicit)


_archive_url: ArchiveUrl = located_archive


def _archive_access(url: str) -> DatabaseAccess:
    """The URL with the deployment's PostgreSQL TLS settings and password file (``TEPHRA_DATABASE_*``)."""
    try:
        return database_access(ConnectionSettings(), url)
    except ValueError as exc:  # pydantic's ValidationError is one
        raise ArchiveUnavailable(f"the TEPHRA_DATABASE_* settings cannot be used: {exc}") from None


def _run(url: str | None, work: Callable[[ArchiveReader], Awaitable[T]]) -> T:
    """Open the archive, run ``work`` on it, map replay's errors to exit codes."""

    async def go(resolved: str) -> T:
        async with open_archive(_archive_access(resolved)) as reader:
            return await work(reader)

    try:
        with _archive_url(url) as resolved:
            return asyncio.run(go(resolved))
    except ArchiveError as exc:
        _console(err=True).print(printable(exc), markup=False, highlight=False)
        raise typer.Exit(2) from None
    except (NotFound, ReplayError) as exc:
        _console(err=True).print(printable(exc), markup=False, highlight=False)
        raise typer.Exit(1) from None


def _progress_bar(label: str) -> tuple[Progress | None, Callable[[int, int], None] | None]:
    """A progress bar on stderr when it is a terminal (long verify and audit passes)."""
    if not sys.stderr.isatty():
        return None, None
    bar = Progress(
        TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
        console=_console(err=True), transient=True,
    )  # fmt: skip
    task = bar.add_task(label, total=None)

    def update(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)

    return bar, update


@contextlib.contextmanager
def _search_status() -> Iterator[SearchProgress | None]:
    """A one-line status on stderr while explain searches, when stderr is a terminal."""
    if not sys.stderr.isatty():
        yield None
        return
    with _console(err=True).status("explain: re-running the session...") as status:

        def update(runs: int, seconds: float, budget: float | None) -> None:
            of = "" if budget is None else f" of {budget:g} s"
            status.update(
                f"explain: searching what blocks and what would fit: {runs} re-runs, {seconds:.1f} s{of}"
            )

        yield update


@app.command()
def explain(
    job: Annotated[str, typer.Argument(help="The job id, <namespace>/<name> (or a bare name when unique).")],
    *,
    session: Annotated[
        str | None,
        typer.Option("--session", help="Explain this session (default: the latest that considered the job)."),
    ] = None,
    at: Annotated[
        str | None, typer.Option("--at", help="Explain the latest session at or before this ISO 8601 time.")
    ] = None,
    output: OutputOption = None,
    format_alias: FormatAlias = None,
    no_counterfactual: Annotated[
        bool, typer.Option("--no-counterfactual", help="Skip the counterfactual search.")
    ] = False,
    budget: Annotated[
        float,
        typer.Option(
            "--budget",
            envvar=BUDGET_ENV,
            min=0,
            metavar="SECONDS",
            help="Seconds the searches may take (hidden reasons, what would fit).",
        ),
    ] = DEFAULT_BUDGET_SECONDS,
    url: DatabaseOption = None,
) -> None:
    """Why did JOB stay Pending? Timeline, every blocking reason with numbers, what would have let it fit."""
    if session is not None and at is not None:
        raise typer.BadParameter("give --session or --at, not both")
    chosen = _output(output, format_alias)
    when = _parse_time(at, "--at")

    async def work(reader: ArchiveReader) -> Explanation:
        with _search_status() as progress:
            return await explain_job(
                reader,
                job,
                session_id=session,
                at=when,
                counterfactual=not no_counterfactual,
                budget=budget,
                progress=progress,
            )

    explanation = _run(url, work)
    if chosen != "table":
        _print_data(explanation.to_json(), chosen)
    else:
        print_explanation(_console(), explanation)


@app.command("session")
def session_command(
    session_id: Annotated[str, typer.Argument(help="The session id.")],
    *,
    output: OutputOption = None,
    format_alias: FormatAlias = None,
    url: DatabaseOption = None,
) -> None:
    """The reconstructed input of a session, every decision in order, and the re-run's full trace."""
    chosen = _output(output, format_alias)
    view = _run(url, lambda r: show_session(r, session_id))
    if chosen != "table":
        _print_data(view.to_json(), chosen)
    else:
        print_session(_console(), view)


@app.command()
def verify(
    *,
    first: Annotated[int, typer.Option("--from", min=1, help="First seq to check.")] = 1,
    last: Annotated[
        int | None, typer.Option("--to", min=1, help="Last seq to check (default: the end).")
    ] = None,
    strict_reasons: Annotated[
        bool, typer.Option("--strict-reasons", help="Also fail when pending reasons differ.")
    ] = False,
    keep_going: Annotated[
        bool, typer.Option("--keep-going", help="Report every divergence, not only the first.")
    ] = False,
    checkpoints: Annotated[
        str | None,
        typer.Option(
            "--checkpoints",
            help="Signed checkpoints to check the chain against: a JSON-lines file kept out of the"
            " database's reach, or kafka://HOST:PORT/TOPIC (the checkpoint topic).",
            metavar="SOURCE",
        ),
    ] = None,
    public_key: Annotated[
        str | None,
        typer.Option(
            "--public-key",
            envvar="TEPHRA_PROJECTOR_PUBLIC_KEY",
            help="The projector's public key (URL-safe base64), obtained out of band;"
            " needed with --checkpoints.",
        ),
    ] = None,
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster", help="Only the checkpoints of this cluster (a topic or file shared by several)."
        ),
    ] = None,
    output: OutputOption = None,
    format_alias: FormatAlias = None,
    url: DatabaseOption = None,
) -> None:
    """Check the hash chain (against signed checkpoints, with --checkpoints), then re-derive every
    recorded session; exit 1 at a divergence, truncation or rewrite."""
    chosen = _output(output, format_alias)
    if checkpoints is not None and not public_key:
        raise typer.BadParameter(
            "give the projector's public key (from its operator, not from the database) to trust checkpoints",
            param_hint="--public-key",
        )
    bar, update = _progress_bar("verifying")

    async def work(reader: ArchiveReader) -> Any:
        anchor = None
        if checkpoints is not None and public_key:
            anchor = CheckpointAnchor(await load_checkpoints(checkpoints), public_key.strip(), cluster)
        if bar is None:
            return await verify_archive(
                reader,
                first=first,
                last=last,
                keep_going=keep_going,
                strict_reasons=strict_reasons,
                checkpoints=anchor,
            )
        with bar:
            return await verify_archive(
                reader,
                first=first,
                last=last,
                keep_going=keep_going,
                strict_reasons=strict_reasons,
                progress=update,
                checkpoints=anchor,
            )

    report = _run(url, work)
    if chosen != "table":
        _print_data(report.to_json(), chosen)
    else:
        print_verify(_console(), report)
    raise typer.Exit(0 if report.ok else 1)


@audit_app.command()
def preemptions(
    *,
    since: Annotated[
        str | None, typer.Option("--since", help="Only sessions at or after this ISO 8601 time.")
    ] = None,
    until: Annotated[
        str | None, typer.Option("--until", help="Only sessions at or before this ISO 8601 time.")
    ] = None,
    queue: Annotated[
        str | None,
        typer.Option("--queue", help="Only evictions where the victim or preemptor is in this queue."),
    ] = None,
    job: Annotated[
        str | None, typer.Option("--job", help="Only evictions where the victim or preemptor is this job.")
    ] = None,
    output: Annotated[
        str | None,
        typer.Option(
            "--output", "-o", help="table, wide, json, yaml or csv", metavar="FORMAT", show_default=False
        ),
    ] = None,
    format_alias: FormatAlias = None,
    url: DatabaseOption = None,
) -> None:
    """Every eviction: victim, preemptor, rule, queue shares before and after, each re-derived.

    The table shows each eviction as a short block (fits 120 columns); -o wide one row each.
    """
    chosen = _output(output, format_alias, ("table", "wide", "json", "yaml", "csv"))
    start, end = _parse_time(since, "--since"), _parse_time(until, "--until")
    bar, update = _progress_bar("auditing")

    async def work(reader: ArchiveReader) -> Any:
        if bar is None:
            return await audit_preemptions(reader, since=start, until=end, queue=queue, job=job)
        with bar:
            return await audit_preemptions(
                reader, since=start, until=end, queue=queue, job=job, progress=update
            )

    rows = _run(url, work)
    if chosen == "yaml":
        _print_data({"items": [r.to_json() for r in rows]}, chosen)
    else:
        print_audit(_console(), rows, chosen)


@checkpoints_app.command("export")
def export_checkpoints(
    source: Annotated[
        str, typer.Argument(help="kafka://HOST:PORT/TOPIC (the checkpoint topic), or a file of records.")
    ],
) -> None:
    """Print every checkpoint record of SOURCE, one JSON line each: append them to a file you keep."""
    try:
        found = asyncio.run(load_checkpoints(source))
    except ArchiveError as exc:
        _console(err=True).print(printable(exc), markup=False, highlight=False)
        raise typer.Exit(2) from None
    for checkpoint in found:
        typer.echo(checkpoint.record().decode())


@checkpoints_app.command("public-key")
def public_key_of(
    key_file: Annotated[Path, typer.Argument(help="The projector's key file (TEPHRA_PROJECTOR_KEY_FILE).")],
) -> None:
    """Print the public key of a projector key file: give it to auditors (--public-key)."""
    try:
        typer.echo(load_signing_key(key_file).public_key)
    except SigningKeyError as exc:
        _console(err=True).print(str(exc), markup=False, highlight=False)
        raise typer.Exit(2) from None


@audit_app.command()
def actions(
    *,
    principal: Annotated[
        str | None,
        typer.Option("--principal", help="Only this principal's actions (NAME: every NAME:SUBJECT too)."),
    ] = None,
    job: Annotated[str | None, typer.Option("--job", help="Only actions about this job (ns/name).")] = None,
    output: Annotated[
        str | None,
        typer.Option("--output", "-o", help="table, json, yaml or csv", metavar="FORMAT", show_default=False),
    ] = None,
    format_alias: FormatAlias = None,
    url: DatabaseOption = None,
) -> None:
    """Who submitted, cancelled, rejected, configured, closed, led or evicted what (one archive pass)."""
    chosen = _output(output, format_alias, ("table", "json", "yaml", "csv"))

    async def work(reader: ArchiveReader) -> list[ActionRow]:
        rows = [row async for row in reader.rows()]
        return list(actions_of(rows, principal=principal, job=job))

    rows = _run(url, work)
    if chosen in {"json", "yaml"}:
        _print_data({"items": [r.to_json() for r in rows]}, chosen)
    else:
        print_actions(_console(), rows, chosen)


def main(archive_url: ArchiveUrl = located_archive) -> None:
    """The console script; ``archive_url`` finds (or brings up) the archive for each command."""
    from projector.heap import tune_gc  # noqa: PLC0415 - only for the console script

    global _archive_url  # noqa: PLW0603 - one console-script run, one way to the archive
    _archive_url = archive_url

    # Replay folds the archive and re-runs sessions: large, long-lived object graphs.
    tune_gc()
    app()


if __name__ == "__main__":
    main()
