"""The canonical bytes of an event: what the archive's hash chain covers.

``docs/archive-format.md`` specifies the form and the chain; this module is
its one implementation.  Every producer and checker of those bytes — the
projector's writer, the archive's readers and verifiers, replay's chain
check, the golden archives — goes through :func:`canonical_bytes`, from an
event (:func:`canonical_form`) or from an archived row's columns; the
``event_log`` row stores exactly the pieces it splices (the ``data`` text
verbatim, the envelope's attributes as columns), so hashing and archiving
cannot disagree.

In short: the CloudEvents envelope as one JSON object with its members in
sorted key order, no whitespace, UTF-8 with non-ASCII characters as they are,
``time`` in UTC (``...Z``), an absent ``subject`` or ``principal`` left out;
``data`` is the event data's JSON value written the same way.  The
``signature`` attribute is never part of them: it is the principal's signature
*of* them (:mod:`events.signing`).  ``hash = sha256(prev_hash ||
canonical bytes)``, the first ``prev_hash`` being 32 zero bytes.

The fast paths live here and nowhere else: the data's JSON value comes from
:func:`events.jsonform.json_form` (``model_dump(mode="json")``'s values for
less), its text from orjson where orjson writes the json module's bytes (every
type whose data cannot hold a float, and any data that holds none), and the
envelope is spliced around that text.  Tests hold all of it to the plain
definition (``json.dumps`` of ``model_dump``) and to a reference verifier
written from the document alone.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from json.encoder import encode_basestring
from typing import Any, Final

import orjson

from events.jsonform import DECODED_UTC, json_form, time_text
from events.models import EVENT_TYPES, Event

__all__ = [
    "GENESIS_HASH",
    "CanonicalForm",
    "canonical_bytes",
    "canonical_form",
    "canonical_json",
    "chain_hash",
    "format_time",
    "signed_bytes",
]

#: ``prev_hash`` of the first archived event.
GENESIS_HASH: Final = bytes(32)

#: The definition of the canonical text of a JSON value (the json module's C encoder).
_dumps: Final = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
).encode
# The quoted text of the envelope's repeated values (cluster, source, type): a dict
# read costs a fifth of quoting (callgrind).  Bounded: sources are many only on a
# misconfigured fleet, and then the ones past the bound are quoted each time.
_quoted: Final[dict[str, str]] = {}
_QUOTED_MAX: Final = 1_024
_SCHEMA_MAPS: Final = ("properties", "$defs", "patternProperties")
_SCHEMA_LISTS: Final = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_KINDS: Final = ("type", "$ref", "anyOf", "oneOf", "allOf", "enum", "const")


# Not frozen, nor a NamedTuple: one is built per archived event, and a frozen
# dataclass's __init__ (object.__setattr__ per field) or a NamedTuple's __new__ cost
# several times a plain one (timeit: 1.1 us for the NamedTuple, 0.2 for this).
@dataclass(slots=True)
class CanonicalForm:
    """An event as archived (read-only): the event in UTC, the pieces its canonical
    bytes are spliced from (what the archive's row stores), and the bytes."""

    event: Event
    cluster: str
    data: str
    event_id: str
    source: str
    subject: str | None
    #: The producer's principal (a member of the bytes) and its signature of the bytes (beside them).
    principal: str | None
    signature: str | None
    #: ``time``'s text (:func:`format_time`) and the instant itself (UTC).
    time: str
    instant: datetime
    type: str
    bytes: bytes


def canonical_bytes(
    *,
    cluster: str,
    data: str,
    event_id: str,
    source: str,
    subject: str | None,
    time: str,
    event_type: str,
    principal: str | None = None,
) -> bytes:
    """THE canonical bytes, from an event's archived attributes (keys in sorted order).

    ``data`` is the canonical text of the event's data (:func:`canonical_form`
    makes it; the archive stores it verbatim); ``time`` is :func:`format_time`'s
    text: digits and ISO 8601's separators, which JSON writes as they are.
    """
    # An absent subject is left out (as the wire form does).
    subject_member = "" if subject is None else ',"subject":' + encode_basestring(subject)
    principal_member = "" if principal is None else ',"principal":' + encode_basestring(principal)
    # One f-string: a chain of + would copy the growing text (data included) a dozen times.
    return (
        f'{{"cluster":{_repeated(cluster)},"data":{data},"datacontenttype":"application/json",'
        f'"id":{encode_basestring(event_id)}{principal_member},"source":{_repeated(source)},"specversion":"1.0"'
        f'{subject_member},"time":"{time}","type":{_repeated(event_type)}}}'
    ).encode()


def canonical_form(event: Event) -> CanonicalForm:
    """The event as the archive keeps it, with the pieces of its canonical bytes.

    An event whose ``time`` is not in UTC is normalised to UTC first (the same
    instant): the archive stores times without their offset.  Its trace context
    (``traceparent``, ``tracestate``) is left out: the archive keeps it in a
    column of its own, outside the hashed bytes.
    """
    time = event.time
    # A time decoded in UTC has the tzinfo all such times share: known to be UTC
    # without utcoffset(), which costs 2.1k instructions on pydantic's TzInfo.
    if time.tzinfo is not DECODED_UTC and time.utcoffset():  # not UTC (a zero offset is falsy)
        time = time.astimezone(UTC)
        event = event.model_copy(update={"time": time})
    if event.traceparent is not None or event.tracestate is not None:
        # Trace context is kept beside the event (event_log.traceparent), not in it: the fold
        # must see the event as replay rebuilds it from the archive.
        event = event.model_copy(update={"traceparent": None, "tracestate": None})
    event_type, cluster, event_id = event.type, event.cluster, event.id
    source, subject, time_string = event.source, event.subject, time_text(time)
    principal = event.principal
    data = _data_text(event_type, json_form(event.data))
    encoded = canonical_bytes(
        cluster=cluster,
        data=data,
        event_id=event_id,
        source=source,
        subject=subject,
        time=time_string,
        event_type=event_type,
        principal=principal,
    )
    return CanonicalForm(
        event,
        cluster,
        data,
        event_id,
        source,
        subject,
        principal,
        event.signature,
        time_string,
        time,
        event_type,
        encoded,
    )


def canonical_json(event: Event) -> bytes:
    """The canonical bytes of ``event`` (:func:`canonical_form`'s)."""
    return canonical_form(event).bytes


#: The members of a record its signature does not cover: itself, and the trace context (delivery
#: metadata, which a record header may replace).
UNSIGNED_MEMBERS: Final = ("signature", "traceparent", "tracestate")


def signed_bytes(record: bytes) -> bytes:
    """What a record's ``signature`` signs: the canonical text of the record's JSON object
    without :data:`UNSIGNED_MEMBERS` (docs/producers.md, "Signing").

    A record that writes every member of its event in UTC (Tephra's own producers do) signs
    exactly its event's canonical bytes, so the archive's rows verify too.  Raises
    ``ValueError`` when the record is not JSON, ``TypeError`` when not an object.
    """
    value = json.loads(record)
    if not isinstance(value, dict):
        raise TypeError("a record is a JSON object")
    for member in UNSIGNED_MEMBERS:
        value.pop(member, None)
    return _dumps(value).encode()


def chain_hash(prev_hash: bytes, canonical: bytes) -> bytes:
    """``sha256(prev_hash || canonical bytes)``."""
    return hashlib.sha256(prev_hash + canonical).digest()


def format_time(value: datetime) -> str:
    """An archived timestamp's text in the canonical form (ISO 8601, UTC, ``Z``)."""
    offset = value.utcoffset()
    if offset is None or offset:
        # (pydantic writes an offset under a second as "Z": checked here, not by the text)
        raise ValueError(f"archived timestamps are UTC, got {value!r}")
    return time_text(value)


# ---------------------------------------------------------------------------- the data's text


def _data_text(event_type: str, data: Any) -> str:
    """The canonical text of an event's data (its JSON value)."""
    # orjson writes the json module's bytes for everything but floats (1e-7 against
    # 1e-07): used for the types that cannot carry one, and for data that holds none
    # (a walk of the values: ~1 us, the json module ~20 us for a configuration).
    if event_type in _ORJSON_EXACT or not _holds_float(data):
        try:
            # About five times faster than the json module for these documents.
            return orjson.dumps(data, option=orjson.OPT_SORT_KEYS).decode()
        except orjson.JSONEncodeError:
            pass  # beyond what orjson encodes (an integer over 64 bits): json decides
    return _dumps(data)


def _repeated(value: str) -> str:
    """``encode_basestring(value)`` for a value many events share."""
    text = _quoted.get(value)
    if text is None:
        text = encode_basestring(value)
        if len(_quoted) < _QUOTED_MAX:
            _quoted[value] = text
    return text


def _holds_float(value: Any) -> bool:
    """Whether a float is anywhere in ``value`` (JSON values: dicts, lists, scalars)."""
    if isinstance(value, dict):
        return any(_holds_float(item) for item in value.values())
    if isinstance(value, list):
        return any(_holds_float(item) for item in value)
    return isinstance(value, float)


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


#: Event types whose data cannot hold a float (orjson's text is the json module's).
_ORJSON_EXACT: Final = frozenset(
    event_type
    for event_type, model in EVENT_TYPES.items()
    if _without_floats(model.model_json_schema(mode="serialization"))
)
