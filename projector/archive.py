"""The archive's rows (``event_log``): what is stored beside the canonical pieces, and what is hashed.

An archived event is stored as columns, not as a blob: its envelope's
attributes, ``data`` as the canonical text of the event's data (verbatim,
``json``), ``time`` as timestamptz, where it came from (topic, partition,
offset, trace context), when it was archived, and its place in the hash chain.
The event's canonical bytes are spliced from exactly those columns by
:func:`events.canonical.canonical_bytes`; a row's hash covers them and, in
chain format 2, every other column of the row (:func:`row_members`, the one
list of the hashed columns; ``docs/archive-format.md``).  This module also
holds the ``job`` column replay indexes by, and the conversion of times for
COPY.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime
from json.encoder import encode_basestring
from typing import Any, Final

from events.canonical import canonical_bytes, chain_hash, format_time
from events.jsonform import DECODED_EPOCH, EPOCH
from events.models import (
    Event,
    JobCancelled,
    JobRejected,
    JobSubmitted,
    SessionCommitted,
    TaskFinished,
    TasksAdded,
    TaskStarted,
)

__all__ = [
    "CHAIN_FORMAT",
    "JOB_EVENT_TYPES",
    "JOB_SUBMITTED",
    "SESSION_COMMITTED",
    "columns_canonical",
    "job_of_data",
    "job_of_event",
    "row_canonical",
    "row_digest",
    "row_hash",
    "row_members",
    "stdlib_utc",
    "stored_members",
    "with_signature",
]

#: The chain format the writer archives rows in (``event_log.chain_format``): 1 hashed
#: the event's canonical bytes alone, 2 hashes every column of the row.
CHAIN_FORMAT: Final = 2
_EVENT_MEMBER: Final = b'{"event":'


def row_members(
    *,
    seq: int,
    topic: str,
    partition: int,
    kafka_offset: int,
    recorded_at: str,
    job: str | None,
    traceparent: str | None,
    signature: str | None,
) -> bytes:
    """THE columns a format-2 row's hash covers besides the event: the members after
    ``"event"`` of the row's canonical object, in key order, with its closing brace.

    Every ``event_log`` column but ``prev_hash`` and ``hash`` is either in the
    event's canonical bytes (``principal`` among them) or here (``signature``: it is
    kept beside the bytes it signs).  A new column is one line here, at its key's
    place in code-point order (``docs/archive-format.md``, "Chain format 2").
    ``recorded_at`` is :func:`events.canonical.format_time`'s text.
    """
    return (
        f',"format":2'
        f',"job":{_text_or_null(job)}'
        f',"kafka_offset":{kafka_offset}'
        f',"partition":{partition}'
        f',"recorded_at":"{recorded_at}"'
        f',"seq":{seq}'
        f',"signature":{_text_or_null(signature)}'
        f',"topic":{encode_basestring(topic)}'
        f',"traceparent":{_text_or_null(traceparent)}}}'
    ).encode()


def _text_or_null(value: str | None) -> str:
    return "null" if value is None else encode_basestring(value)


def row_digest(prev_hash: bytes, canonical: bytes, members: bytes) -> bytes:
    """A format-2 row's hash: ``sha256(prev_hash || '{"event":' || canonical || members)``.

    Fed to the hash piece by piece: the event's bytes (up to a megabyte for a
    session) are not copied into one row text first.
    """
    digest = hashlib.sha256(prev_hash)
    digest.update(_EVENT_MEMBER)
    digest.update(canonical)
    digest.update(members)
    return digest.digest()


def stored_members(row: Mapping[str, Any]) -> bytes:
    """:func:`row_members` of an ``event_log`` row as read back (``recorded_at`` a datetime)."""
    return row_members(
        seq=row["seq"],
        topic=row["topic"],
        partition=row["partition"],
        kafka_offset=row["kafka_offset"],
        recorded_at=format_time(row["recorded_at"]),
        job=row["job"],
        traceparent=row["traceparent"],
        signature=row["signature"],
    )


def row_hash(row: Mapping[str, Any], canonical: bytes) -> bytes:
    """The hash an ``event_log`` row (as read back) must have, by its ``chain_format``;
    ``canonical`` is its event's canonical bytes (:func:`row_canonical`).

    Raises:
        ValueError: a chain format this release does not know.
    """
    chain_format = row["chain_format"]
    prev_hash = bytes(row["prev_hash"])
    if chain_format == 2:
        return row_digest(prev_hash, canonical, stored_members(row))
    if chain_format == 1:
        return chain_hash(prev_hash, canonical)
    raise ValueError(f"event_log seq {row['seq']} has chain format {chain_format!r}, not 1 or 2")


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
    for model in (JobSubmitted, JobCancelled, JobRejected, TaskStarted, TaskFinished, TasksAdded)
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
        case JobSubmitted() | JobCancelled() | JobRejected() | TaskStarted() | TaskFinished() | TasksAdded():
            return event.data.job_id
        case _:
            return None
