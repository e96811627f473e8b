"""The projector's exception tree.

::

    ProjectorError                 root; ``retriable`` says whether trying again can help
     +-- MigrationError            a migration file is malformed or failed to apply
 +-- SchemaOutdatedError       the database's schema is older than this code: run ``tephra migrate``
     +-- ArchiveFoldMismatchError  an archived event that the fold refuses (archive or fold is corrupt)
     +-- ProjectionDriftError      the in-memory state and the database disagree (another writer?)
     +-- WaitTimeoutError          read-your-writes: the projection did not reach the wanted point in time
     +-- RecordFailedError         one record failed the fold: the run is redone without it
     +-- BatchFailedError          a batch failed where no record is named (projection, storage): isolate it

Driver errors (asyncpg, aiokafka) are translated at the service boundary:
connection-level ones are retried there, everything else is a bug and stops
the service.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

__all__ = [
    "ArchiveFoldMismatchError",
    "BatchFailedError",
    "MigrationError",
    "ProjectionDriftError",
    "ProjectorError",
    "RecordFailedError",
    "SchemaOutdatedError",
    "WaitTimeoutError",
]


class ProjectorError(Exception):
    """Root of the projector's errors."""

    retriable: ClassVar[bool] = False


class MigrationError(ProjectorError):
    def __init__(self, version: int, name: str, detail: str) -> None:
        self.version = version
        self.name = name
        self.detail = detail
        super().__init__(f"cannot apply migration {version:04d} {name}: {detail}")


class SchemaOutdatedError(ProjectorError):
    """[PROJ-SCHEMA] The schema is older than the code: the services do not migrate it themselves."""

    def __init__(self, found: int, needed: int) -> None:
        self.found = found
        self.needed = needed
        super().__init__(
            f"[PROJ-SCHEMA] the database schema is at version {found}, this Tephra needs {needed}:"
            " run `tephra migrate` (as the database's owner) before starting the services"
        )


class ArchiveFoldMismatchError(ProjectorError):
    """[PROJ-ARCHIVE] The fold rejects an event the archive holds."""

    def __init__(self, seq: int, reason: str, detail: str) -> None:
        self.seq = seq
        self.reason = reason
        self.detail = detail
        super().__init__(f"[PROJ-ARCHIVE] cannot fold archived event seq {seq}: {reason}: {detail}")


class ProjectionDriftError(ProjectorError):
    """[PROJ-DRIFT] The database moved under the writer: its state must be reloaded."""

    retriable = True

    def __init__(self, expected_seq: int, found_seq: int) -> None:
        self.expected_seq = expected_seq
        self.found_seq = found_seq
        super().__init__(
            f"[PROJ-DRIFT] projection is at seq {found_seq}, the writer expected {expected_seq}; reloading"
        )


class WaitTimeoutError(ProjectorError):
    retriable = True

    def __init__(self, what: str, timeout: float) -> None:
        self.what = what
        self.timeout = timeout
        super().__init__(f"projection did not apply {what} within {timeout:g} s")


class RecordFailedError(ProjectorError):
    """[PROJ-POISON] The record at ``position`` (topic, partition, offset) failed; ``code`` says where.

    The writer is poisoned: the service rebuilds it and refuses the record by its
    position (``projector.door``), so the redone batch goes on without it.
    """

    retriable = True

    def __init__(self, position: tuple[str, int, int], code: str, detail: str) -> None:
        self.position = position
        self.code = code
        self.detail = detail
        topic, partition, offset = position
        super().__init__(f"[PROJ-POISON] {topic}[{partition}]@{offset}: {code}: {detail}")


class BatchFailedError(ProjectorError):
    """[PROJ-POISON] A batch failed in a way that names no record (PostgreSQL refused a value).

    ``positions`` are the batch's records; the service redoes them one record per
    batch, so that the one that fails alone is refused (a :class:`RecordFailedError`).
    """

    retriable = True

    def __init__(self, positions: Sequence[tuple[str, int, int]], code: str, detail: str) -> None:
        self.positions = tuple(positions)
        self.code = code
        self.detail = detail
        super().__init__(f"[PROJ-POISON] a batch of {len(self.positions)} records failed: {code}: {detail}")
