"""The archive's row format and its hash chain.

An archived event is stored as columns (``event_log``), not as a blob.  Its
canonical JSON — what the chain hashes, byte-identical to
:func:`events.serde.canonical_json` — is reassembled from those columns, so
the writer and :func:`projector.reconstruct.verify_chain` compute it the same
way and any edit of any column breaks the chain.

``data`` is kept as the canonical (sorted, compact) JSON text of the event's
``data``; the canonical envelope is that text spliced between the other
attributes in sorted key order, which is exactly what ``json.dumps`` with
sorted keys produces for the whole document.

The archive stores ``time`` as timestamptz, which keeps the instant but not
the UTC offset, so an event whose ``time`` is not in UTC is normalised to UTC
before it is hashed and archived (the same instant; replay reads it back
exactly).
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from json.encoder import encode_basestring
from typing import Any, Final

import orjson

from events.models import (
    EVENT_TYPES,
    Event,
    JobCancelled,
    JobRejected,
    JobSubmitted,
    SessionCommitted,
    TaskFinished,
    TaskStarted,
)
from projector.jsonform import DECODED_EPOCH, DECODED_UTC, EPOCH, json_form, time_text

__all__ = [
    "GENESIS_HASH",
    "JOB_EVENT_TYPES",
    "JOB_SUBMITTED",
    "SESSION_COMMITTED",
    "archived_form",
    "canonical_data",
    "canonical_envelope",
    "chain_hash",
    "format_time",
    "isoformat",
    "job_of_data",
    "stdlib_utc",
]

#: ``prev_hash`` of the first archived event.
GENESIS_HASH: Final = bytes(32)

_dumps: Final = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
).encode
# What _dumps does for a str, without its per-call dispatch (the envelope has seven).
_string: Final = encode_basestring
# The quoted text of the envelope's repeated values (cluster, source, type): a dict
# read costs a fifth of a call of _string (callgrind).  Bounded: sources are many
# only on a misconfigured fleet, and then the ones past the bound are quoted each time.
_quoted: Final[dict[str, str]] = {}
_QUOTED_MAX: Final = 1_024
# Bound once: compiled code looks a module's attribute up by name at every use
# (callgrind: ~270 instructions each, two per event here).
_orjson_dumps: Final = orjson.dumps
_SORT_KEYS: Final = orjson.OPT_SORT_KEYS
_sha256: Final = hashlib.sha256
_SCHEMA_MAPS: Final = ("properties", "$defs", "patternProperties")
_SCHEMA_LISTS: Final = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_KINDS: Final = ("type", "$ref", "anyOf", "oneOf", "allOf", "enum", "const")


def _without_floats(schema: dict[str, Any]) -> bool:
    """True when JSON valid for ``schema`` can hold no floats (no numbers, no free-form values)."""
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if not any(key in schema for key in _SCHEMA_KINDS) or "number" in kinds:
        return False
    if "object" in kinds and "additionalProperties" not in schema and "properties" not in schema:
        return False  # any keys, any values
    for key, value in schema.items():
        if key in _SCHEMA_MAPS:
            if not all(_without_floats(sub) for sub in value.values()):
                return False
        elif key in _SCHEMA_LISTS:
            if not all(_without_floats(sub) for sub in value):
                return False
        elif key in ("items", "additionalProperties") and not (
            value is False or (isinstance(value, dict) and _without_floats(value))
        ):
            return False
    return True


# Event types whose data orjson encodes byte for byte as _dumps does: the two
# agree on everything but the text of floats (orjson writes 1e-7, json 1e-07),
# so types that may carry a float (free-form plugin arguments) keep _dumps.
_ORJSON_EXACT: Final = frozenset(
    event_type
    for event_type, model in EVENT_TYPES.items()
    if _without_floats(model.model_json_schema(mode="serialization"))
)


def _holds_float(value: Any) -> bool:
    """Whether a float is anywhere in ``value`` (JSON-able values: dicts, lists, scalars)."""
    if isinstance(value, dict):
        return any(_holds_float(item) for item in value.values())
    if isinstance(value, list):
        return any(_holds_float(item) for item in value)
    return isinstance(value, float)


def canonical_data(event_type: str, data: Any) -> str:
    """The canonical JSON text of an event's ``data`` (as JSON-able values)."""
    # The types that may carry a float look for one first: most configurations have none,
    # and the json module took ~20 us for one (a walk of its values: ~1 us).
    if event_type in _ORJSON_EXACT or not _holds_float(data):
        try:
            # About five times faster than the json module for these documents.
            return _orjson_dumps(data, option=_SORT_KEYS).decode()
        except orjson.JSONEncodeError:
            pass  # beyond what orjson encodes (an integer over 64 bits): json decides
    return _dumps(data)


def format_time(value: datetime) -> str:
    """A UTC timestamp exactly as the event models serialise it (ISO 8601, ``Z``)."""
    offset = value.utcoffset()
    if offset is None or offset:
        # (pydantic writes an offset under a second as "Z": checked here, not by the text)
        raise ValueError(f"archived timestamps are UTC, got {value!r}")
    return time_text(value)


def stdlib_utc(value: datetime) -> datetime:
    """The same instant with the standard library's UTC as its tzinfo (for COPY).

    asyncpg converts every aware datetime with ``astimezone`` (and compares it
    with infinity) before COPY: on pydantic's ``TzInfo`` that took 0.83 us a
    value, on ``datetime.UTC`` 0.15.  This costs 0.17 (the subtraction of two
    datetimes sharing a tzinfo reads no offset); ``replace(tzinfo=UTC)`` 0.76.
    Exact for any aware ``value``.
    """
    return EPOCH + (value - DECODED_EPOCH)


def isoformat(value: datetime) -> str:
    """``value.isoformat()``, the same text, for less on a UTC time (state documents).

    ``isoformat`` formats with ``PyUnicode_FromFormat`` and asks the tzinfo for
    its offset (callgrind: ~9k instructions).  For a UTC time it is pydantic's
    text (:func:`format_time`, ~4.5k) with ``+00:00`` for its ``Z``: the two
    agree on everything else (``test_format_time_writes_the_text_it_always_wrote...``).
    """
    zone = value.tzinfo
    if zone is DECODED_UTC or zone is UTC:
        return time_text(value)[:-1] + "+00:00"
    return value.isoformat()


def archived_form(event: Event) -> tuple[Event, str, str, Any]:
    """The event as archived (time in UTC), the canonical JSON text of its ``data``,
    its time's text (:func:`format_time`) and the JSON value that text encodes (read
    it, never mutate it: it may share lists and dicts with the event, see jsonform)."""
    # The fields from __dict__ (cheaper than attribute reads; not vars(), a lookup by name).
    fields = event.__dict__
    time = fields["time"]
    # A time decoded in UTC has the tzinfo all such times share: known to be UTC without
    # utcoffset(), a call that costs 2.1k instructions on pydantic's TzInfo.  Any other
    # time asks once, for both the normalisation and the text.
    if time.tzinfo is not DECODED_UTC and time.utcoffset():  # not UTC (a zero offset is falsy)
        time = time.astimezone(UTC)
        event = event.model_copy(update={"time": time})
    # json_form, not model_dump (measured on the bench stream: 15k instructions an
    # event, model_dump 32k).
    data = json_form(fields["data"])
    return event, canonical_data(fields["type"], data), time_text(time), data


#: Types whose rows carry ``event_log.job``, the job the event is about (its id
#: as the fold names it; migration 0004 and ``replay explain`` use the same types).
JOB_EVENT_TYPES: Final = frozenset(
    model.model_fields["type"].default
    for model in (JobSubmitted, JobCancelled, JobRejected, TaskStarted, TaskFinished)
)
#: The type of a job's submission (its job id is a property of the data, not a field).
JOB_SUBMITTED: Final = JobSubmitted.model_fields["type"].default
#: The type of a session's commit (its data's pending jobs are the session record's).
SESSION_COMMITTED: Final = SessionCommitted.model_fields["type"].default


def job_of_data(event_type: str, data: Any) -> str | None:
    """``event_log.job`` of a row, from its ``data`` as parsed JSON (None for other types).

    The writer reads the same from the event model (``data.job_id``); this is
    the check's independent reading of the archived text.
    """
    if event_type not in JOB_EVENT_TYPES or not isinstance(data, dict):
        return None
    if event_type == JOB_SUBMITTED:
        namespace, name = data.get("namespace"), data.get("name")
        return f"{namespace}/{name}" if isinstance(namespace, str) and isinstance(name, str) else None
    job = data.get("job_id")
    return job if isinstance(job, str) else None


def canonical_envelope(
    *,
    cluster: str,
    data: str,
    event_id: str,
    source: str,
    subject: str | None,
    time: str,
    event_type: str,
) -> bytes:
    """The canonical JSON of an event from its archived columns (keys in sorted order).

    ``time`` is :func:`format_time`'s text: digits and ISO 8601's separators,
    which JSON writes as they are, so it is not escaped again.
    """
    # An absent subject is left out, as events.serde does.
    subject_member = "" if subject is None else ',"subject":' + _string(subject)
    # One f-string: a chain of + would copy the growing text (data included) a dozen times.
    return (
        f'{{"cluster":{_repeated(cluster)},"data":{data},"datacontenttype":"application/json",'
        f'"id":{_string(event_id)},"source":{_repeated(source)},"specversion":"1.0"{subject_member},'
        f'"time":"{time}","type":{_repeated(event_type)}}}'
    ).encode()


def _repeated(value: str) -> str:
    """``_string(value)`` for a value many events share."""
    text = _quoted.get(value)
    if text is None:
        text = _string(value)
        if len(_quoted) < _QUOTED_MAX:
            _quoted[value] = text
    return text


def chain_hash(prev_hash: bytes, canonical: bytes) -> bytes:
    """``sha256(prev_hash || canonical JSON)``."""
    return _sha256(prev_hash + canonical).digest()
