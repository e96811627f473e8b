"""The ``tephra`` console script.

Each command is a thin shell: parse arguments, call one function of the
package that owns the capability, map its errors to an exit code.  Heavy
imports happen inside the commands so ``tephra --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    name="tephra",
    help="Tephra: an event-sourced batch scheduler with Volcano's semantics and a replayable audit log.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.command()
def schemas(
    out: Annotated[Path, typer.Option(help="Folder to write the JSON Schemas into.")] = Path("events/schemas"),
    check: Annotated[bool, typer.Option(help="Only check that the folder is up to date; exit 1 if not.")] = False,
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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
