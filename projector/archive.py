"""The archive's rows (``event_log``): what is stored beside the canonical pieces.

An archived event is stored as columns, not as a blob: its envelope's
attributes, ``data`` as the canonical text of the event's data (verbatim,
``json``), ``time`` as timestamptz, and its place in the hash chain.  The
canonical bytes the chain hashes are spliced from exactly those columns by
:func:`events.canonical.canonical_bytes` (``docs/archive-format.md``).  This
module holds the rest of the row: the ``job`` column replay indexes by, and
the conversion of times for COPY.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from events.canonical import canonical_bytes, format_time
from events.jsonform import DECODED_EPOCH, EPOCH
from events.models import (
    Event,
    JobCancelled,
    JobRejected,
    JobSubmitted,
    SessionCommitted,
    TaskFinished,
    TaskStarted,
)

__all__ = [
    "JOB_EVENT_TYPES",
    "JOB_SUBMITTED",
    "SESSION_COMMITTED",
    "columns_canonical",
    "job_of_data",
    "job_of_event",
    "row_canonical",
    "stdlib_utc",
    "with_signature",
]


def row_canonical(row: Mapping[str, Any]) -> bytes:
    """The canonical bytes of an ``event_log`` row as read back (``time`` a datetime), from its columns."""
    return columns_canonical(row, format_time(row["time"]))


def with_signature(event: Event, signature: str | None) -> Event:
    """An event decoded from a row's canonical bytes, with the row's ``signature`` column (kept
    beside the bytes it signs): the fold checks a session's signature (projector.fold)."""
    if signature is None:
        return event
    return event.model_copy(update={"signature": signature})


def columns_canonical(row: Mapping[str, Any], time: str) -> bytes:
    """The canonical bytes spliced from a row's columns (named as in ``event_log``), with
    ``time`` already the canonical text (:func:`events.canonical.format_time`'s)."""
    return canonical_bytes(
        cluster=row["cluster"],
        data=row["data"],
        event_id=row["event_id"],
        source=row["source"],
        subject=row["subject"],
        time=time,
        event_type=row["type"],
        principal=row.get("principal"),
    )


def stdlib_utc(value: datetime) -> datetime:
    """The same instant with the standard library's UTC as its tzinfo (for COPY).

    asyncpg converts every aware datetime with ``astimezone`` (and compares it
    with infinity) before COPY: on pydantic's ``TzInfo`` that took 0.83 us a
    value, on ``datetime.UTC`` 0.15.  This costs 0.17 (the subtraction of two
    datetimes sharing a tzinfo reads no offset); ``replace(tzinfo=UTC)`` 0.76.
    Exact for any aware ``value``.
    """
    return EPOCH + (value - DECODED_EPOCH)


#: Types whose rows carry ``event_log.job``, the job the event is about (its id
#: as the fold names it; migration 0004 and ``replay explain`` use the same types).
JOB_EVENT_TYPES: Final = frozenset(
    model.model_fields["type"].default
    for model in (JobSubmitted, JobCancelled, JobRejected, TaskStarted, TaskFinished)
)
#: The type of a job's submission (its job id is a property of the data, not a field).
JOB_SUBMITTED: Final = JobSubmitted.model_fields["type"].default
#: The type of a session's commit.
SESSION_COMMITTED: Final = SessionCommitted.model_fields["type"].default


def job_of_data(event_type: str, data: Any) -> str | None:
    """``event_log.job`` of a row, from its ``data`` as parsed JSON (None for other types).

    The writer reads the same from the event model (:func:`job_of_event`); this
    is the check's independent reading of the archived text.
    """
    if event_type not in JOB_EVENT_TYPES or not isinstance(data, dict):
        return None
    if event_type == JOB_SUBMITTED:
        namespace, name = data.get("namespace"), data.get("name")
        return f"{namespace}/{name}" if isinstance(namespace, str) and isinstance(name, str) else None
    job = data.get("job_id")
    return job if isinstance(job, str) else None


def job_of_event(event: Event) -> str | None:
    """``event_log.job`` of an event the writer archives: the job it is about (the model's
    ``data.job_id``), None for other types.

    The writer asks only for the types of :data:`JOB_EVENT_TYPES` (a set lookup on the
    type: the class patterns below cost an isinstance each).
    """
    match event:
        case JobSubmitted() | JobCancelled() | JobRejected() | TaskStarted() | TaskFinished():
            return event.data.job_id
        case _:
            return None
