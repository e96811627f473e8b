"""W3C trace context in Kafka headers, never in the event.

Trace ids are per delivery, not part of what happened: keeping them out of
``data`` keeps :func:`events.serde.canonical_json` (and therefore the hash
chain and replay comparisons) independent of tracing.

``events`` imports no OpenTelemetry (design §2), so this module only converts
between the text-map carrier the OpenTelemetry propagators fill and read (a
``dict[str, str]``) and aiokafka's headers (``list[tuple[str, bytes]]``).
Only the W3C keys travel: ``traceparent``, ``tracestate`` and ``baggage``.

Producer::

    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    propagate.inject(carrier)  # inside the span that produces
    await producer.send_and_wait(topic, encode(event), key=kafka_key(event),
                                 headers=headers_from_carrier(carrier))

Consumer::

    ctx = propagate.extract(carrier_from_headers(record.headers))
    with tracer.start_as_current_span("project", context=ctx): ...

Headers are untrusted input: values that are not UTF-8 are dropped rather
than failing the event; the propagator then ignores what it cannot parse.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

__all__ = [
    "TRACE_HEADERS",
    "carrier_from_headers",
    "headers_from_carrier",
    "trace_id_of",
    "traceparent_of",
    "valid_traceparent",
]

#: The carrier keys (and Kafka header names) that hold trace context.
TRACE_HEADERS: tuple[str, ...] = ("traceparent", "tracestate", "baggage")
# Headers whose repeated occurrences combine into one comma-separated list
# (as HTTP does); a repeated ``traceparent`` keeps its first value.
_LIST_HEADERS = frozenset({"tracestate", "baggage"})


def headers_from_carrier(carrier: Mapping[str, str]) -> list[tuple[str, bytes]]:
    """Kafka headers for the trace keys of an OpenTelemetry carrier, in a fixed order."""
    return [(key, carrier[key].encode()) for key in TRACE_HEADERS if carrier.get(key)]


def carrier_from_headers(headers: Iterable[tuple[str, bytes | None]] | None) -> dict[str, str]:
    """An OpenTelemetry carrier from Kafka headers (names matched case-insensitively)."""
    carrier: dict[str, str] = {}
    for name, raw in headers or ():
        key = name.lower()
        if key not in TRACE_HEADERS or raw is None:
            continue
        try:
            value = raw.decode()
        except UnicodeDecodeError:
            continue
        if key not in carrier:
            carrier[key] = value
        elif key in _LIST_HEADERS:
            carrier[key] = f"{carrier[key]},{value}"
    return carrier


#: Header names that carry a record's ``traceparent``: the W3C name, and the CloudEvents Kafka
#: binding's binary-mode name of the distributed-tracing extension.
_TRACEPARENT_HEADERS: Final = frozenset({"traceparent", "ce_traceparent"})
# version-traceid-spanid-flags, lowercase hex; a version above 00 may append "-..." fields.
_TRACEPARENT: Final = re.compile(rb"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}(-.*)?", re.DOTALL)
_ZERO_TRACE: Final = b"0" * 32
_ZERO_SPAN: Final = b"0" * 16


def traceparent_of(headers: Sequence[tuple[str, bytes | None]] | None) -> str | None:
    """The record's valid W3C ``traceparent`` (the first one), or None: what the archive keeps.

    Anything else (malformed, an all-zero id, version ff, version 00 with more
    fields) is not trace context and is dropped; it never fails the record.
    Called for every record the projector reads, so it works on the bytes.
    """
    if not headers:
        return None
    for name, raw in headers:
        if raw is None or (name != "traceparent" and name.lower() not in _TRACEPARENT_HEADERS):
            continue
        found = _valid(raw.strip())
        if found is not None:
            return found
    return None


def valid_traceparent(value: str | None) -> str | None:
    """``value`` (a CloudEvents ``traceparent`` attribute) when it is a valid W3C traceparent, its
    first four fields; else None (as :func:`traceparent_of`)."""
    if value is None:
        return None
    try:
        return _valid(value.strip().encode("ascii"))
    except UnicodeEncodeError:
        return None


def _valid(raw: bytes) -> str | None:
    match = _TRACEPARENT.fullmatch(raw)
    if match is None:
        return None
    version, trace_id, span_id, extra = match.groups()
    if version == b"ff" or (extra is not None and version == b"00"):
        return None  # version 00 has exactly four fields; ff is forbidden
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    return raw[:55].decode("ascii")


def trace_id_of(traceparent: str | None) -> str | None:
    """The 32-hex-digit trace id of a stored ``traceparent`` (None for None)."""
    return None if traceparent is None else traceparent[3:35]
