"""Where a command finds its stack: external services, or the running embedded stack.

``submit``, ``get`` and ``sim-cluster`` all resolve the same way (issue 5):

* ``TEPHRA_KAFKA_BOOTSTRAP`` and ``TEPHRA_DATABASE_URL`` set: those services,
  topics under ``TEPHRA_TOPICS_PREFIX``;
* neither set: the embedded stack that ``tephra up`` runs under
  ``TEPHRA_DATA_DIR``, described by ``<data dir>/stack.json``.

``stack.json`` is written by ``tephra up`` once the servers answer and removed
when it stops.  It records how many times the embedded broker has started
(``epoch``): Tansu keeps topics in memory only, so every start begins with
empty topics under the same names while PostgreSQL keeps the event log and
the projection; the projector notices the new logs and reads them from their
start (projector.broker_identity).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from api.settings import CommonSettings
from events.topics import Topics
from projector.connection_settings import ConnectionSettings
from projector.connections import DatabaseAccess, KafkaAccess, database_access, kafka_access

__all__ = [
    "STACK_FILE",
    "Endpoints",
    "NoStackError",
    "StackRecord",
    "read_stack_record",
    "remove_stack_record",
    "resolve_endpoints",
    "write_stack_record",
]

STACK_FILE = "stack.json"


class NoStackError(RuntimeError):
    """No external services are configured and no embedded stack is running."""


@dataclass(frozen=True)
class Endpoints:
    kafka_bootstrap: str
    database_url: str
    topics: Topics
    cluster: str
    #: The transport settings of the commands without credentials of their own (None: plaintext,
    #: the URL's user).  Services use their own: :func:`api.access.service_access`.
    connection: ConnectionSettings | None = field(default=None, repr=False)

    def kafka(self) -> KafkaAccess:
        """The common Kafka access (ValueError naming a setting that is missing or unreadable)."""
        if self.connection is None:
            return KafkaAccess(self.kafka_bootstrap)
        return kafka_access(self.connection, self.kafka_bootstrap)

    def database(self) -> DatabaseAccess:
        if self.connection is None:
            return DatabaseAccess(self.database_url)
        return database_access(self.connection, self.database_url)


@dataclass(frozen=True)
class StackRecord:
    """What ``tephra up`` publishes about the embedded stack it runs."""

    pid: int
    kafka_bootstrap: str
    database_url: str
    topics_prefix: str
    epoch: int

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # exists, owned by someone else
        return True


def read_stack_record(data_dir: Path) -> StackRecord | None:
    path = data_dir / STACK_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return StackRecord(**raw)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as exc:
        raise NoStackError(f"{path} is unreadable ({exc}); stop any `tephra up` and delete it") from exc


def write_stack_record(data_dir: Path, record: StackRecord) -> Path:
    """Write atomically (rename) so a reader never sees half a file."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / STACK_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(asdict(record), indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def remove_stack_record(data_dir: Path, pid: int) -> None:
    """Remove the record if it is still ours (a newer stack may have replaced it)."""
    record = read_stack_record(data_dir)
    if record is not None and record.pid == pid:
        (data_dir / STACK_FILE).unlink(missing_ok=True)


def resolve_endpoints(settings: CommonSettings) -> Endpoints:
    """The stack, and how the commands reach it (the transport settings, read when used)."""
    if settings.kafka_bootstrap and settings.database_url:
        return Endpoints(
            settings.kafka_bootstrap,
            settings.database_url,
            Topics(settings.topics_prefix),
            settings.cluster,
            settings,
        )
    data_dir = settings.data_dir.absolute()
    record = read_stack_record(data_dir)
    if record is None or not record.alive():
        raise NoStackError(
            f"no Tephra stack is running for {data_dir}: start one with `tephra up` "
            "(or set TEPHRA_DATA_DIR to its data dir), or set TEPHRA_KAFKA_BOOTSTRAP and "
            "TEPHRA_DATABASE_URL to use external services"
        )
    return Endpoints(
        record.kafka_bootstrap, record.database_url, Topics(record.topics_prefix), settings.cluster, settings
    )
