"""The ``replay`` console script as installed: replay's CLI, able to read a stopped embedded stack.

``replay`` only reads the archive, and must not depend on ``api`` (design §2),
so it cannot start a server.  This wrapper gives it one more way to the
archive: when no database is configured (no ``--database-url``, no
``TEPHRA_DATABASE_URL``) and no embedded stack is running for the data dir,
but the data dir holds the embedded stack's PostgreSQL cluster, it starts
*only* that PostgreSQL — on a free loopback port, every transaction
read-only — answers the command, and stops it again.  A running stack is
read where it runs; a data dir without a cluster gets replay's usual
``[REPLAY-NO-ARCHIVE]``.  While the command runs, ``tephra up`` on the same
data dir is refused by PostgreSQL's own lock (``postmaster.pid``).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from api.embedded import EmbeddedError, EmbeddedPostgres
from api.endpoints import NoStackError, read_stack_record
from replay.cli import main as replay_main
from replay.errors import ArchiveUnavailable
from replay.locate import DATA_DIR_ENV, DATABASE_ENV, database_url, default_data_dir

__all__ = ["ReadOnlyPostgres", "main", "stopped_stack_archive"]

#: Where ``tephra up`` keeps the embedded PostgreSQL cluster under the data dir (api.stack).
POSTGRES_DIR = "postgres"


class ReadOnlyPostgres(EmbeddedPostgres):
    """The embedded cluster started for reading only: every transaction defaults to read-only."""

    name = "embedded PostgreSQL (read-only)"

    def _command(self, port: int) -> list[str]:
        return [*super()._command(port), "-c", "default_transaction_read_only=on"]


def _stopped_cluster(explicit: str | None) -> Path | None:
    """The stopped embedded stack's PostgreSQL folder, when that is where the archive must be."""
    if explicit or os.environ.get(DATABASE_ENV):
        return None
    data_dir = Path(os.environ.get(DATA_DIR_ENV) or default_data_dir(os.environ)).absolute()
    try:
        record = read_stack_record(data_dir)
    except NoStackError as exc:
        raise ArchiveUnavailable(str(exc)) from None
    if record is not None and record.alive():
        return None  # running: read it where it runs
    cluster = data_dir / POSTGRES_DIR
    return cluster if (cluster / "PG_VERSION").is_file() else None


@contextlib.contextmanager
def stopped_stack_archive(explicit: str | None) -> Iterator[str]:
    """The archive's URL for one command, starting a stopped embedded stack's PostgreSQL if need be.

    Raises:
        ArchiveUnavailable: no archive is configured, running or on disk, or its PostgreSQL
            does not start (the message says why).
    """
    cluster = _stopped_cluster(explicit)
    if cluster is None:
        yield database_url(os.environ, explicit=explicit)
        return
    print(
        f"replay: the embedded stack is not running; reading its archive by starting only its "
        f"PostgreSQL ({cluster}), read-only, for this command",
        file=sys.stderr,
    )
    postgres = ReadOnlyPostgres(cluster)
    try:
        postgres.start()
    except EmbeddedError as exc:
        raise ArchiveUnavailable(
            f"cannot start the stopped stack's PostgreSQL in {cluster}: {exc} "
            "(is `tephra up` starting on this data dir? then read it while it runs)"
        ) from None
    try:
        yield postgres.dsn
    finally:
        postgres.stop()


def main() -> None:
    replay_main(stopped_stack_archive)


if __name__ == "__main__":
    main()
