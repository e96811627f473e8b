"""W3C trace context through Kafka headers, with the real OpenTelemetry SDK."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import baggage, trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from events.models import JobSubmitted
from events.serde import canonical_json, decode, encode
from events.tracing import (
    carrier_from_headers,
    headers_from_carrier,
    trace_id_of,
    traceparent_of,
    valid_traceparent,
)
from tests.events.samples import job_submitted

PROPAGATOR = CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])


@pytest.fixture
def tracer() -> Iterator[trace.Tracer]:
    provider = TracerProvider()
    yield provider.get_tracer("tests.events")
    provider.shutdown()


def test_trace_context_survives_the_headers(tracer: trace.Tracer) -> None:
    with tracer.start_as_current_span("produce") as span:
        ctx = baggage.set_baggage("tenant", "research")
        carrier: dict[str, str] = {}
        PROPAGATOR.inject(carrier, context=ctx)
        sent = span.get_span_context()

    headers = headers_from_carrier(carrier)
    extracted = PROPAGATOR.extract(carrier_from_headers(headers))

    received = trace.get_current_span(extracted).get_span_context()
    assert received.is_remote
    assert (received.trace_id, received.span_id) == (sent.trace_id, sent.span_id)
    assert received.trace_flags.sampled
    assert baggage.get_baggage("tenant", extracted) == "research"
    assert [name for name, _ in headers] == ["traceparent", "baggage"]
    assert all(isinstance(value, bytes) for _, value in headers)


def test_trace_context_stays_out_of_the_event(tracer: trace.Tracer) -> None:
    event = job_submitted()
    outside = encode(event)

    with tracer.start_as_current_span("produce") as span:
        carrier: dict[str, str] = {}
        PROPAGATOR.inject(carrier)
        inside = encode(event)

    assert inside == outside
    assert format(span.get_span_context().trace_id, "032x").encode() not in inside


def test_only_trace_keys_become_headers() -> None:
    carrier = {"tracestate": "vendor=1", "x-custom": "no", "traceparent": "00-ab-cd-01", "baggage": ""}

    assert headers_from_carrier(carrier) == [("traceparent", b"00-ab-cd-01"), ("tracestate", b"vendor=1")]


def test_carrier_from_untrusted_headers() -> None:
    headers = [
        ("content-type", b"application/json"),
        ("TraceParent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        ("traceparent", b"00-ffffffffffffffffffffffffffffffff-ffffffffffffffff-01"),
        ("tracestate", b"a=1"),
        ("tracestate", b"b=2"),
        ("baggage", b"\xff\xfe"),
        ("baggage", None),
    ]

    assert carrier_from_headers(headers) == {
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "tracestate": "a=1,b=2",
    }
    assert carrier_from_headers(None) == {}
    assert carrier_from_headers([]) == {}


def test_no_headers_means_a_fresh_root(tracer: trace.Tracer) -> None:
    extracted = PROPAGATOR.extract(carrier_from_headers(None))

    with tracer.start_as_current_span("project", context=extracted) as span:
        assert span.parent is None


VALID = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ([("traceparent", VALID.encode())], VALID),
        ([("ce_traceparent", VALID.encode())], VALID),  # the CloudEvents Kafka binding's binary mode
        ([("TraceParent", VALID.encode())], VALID),
        ([("x", b"1"), ("traceparent", b"junk"), ("traceparent", VALID.encode())], VALID),
        ([("traceparent", f"01{VALID[2:]}-future".encode())], f"01{VALID[2:]}"),
        ([("traceparent", f"{VALID}-more".encode())], None),  # version 00 has exactly four fields
        ([("traceparent", f"ff{VALID[2:]}".encode())], None),
        ([("traceparent", VALID.replace("0af7651916cd43dd8448eb211c80319c", "0" * 32).encode())], None),
        ([("traceparent", VALID.replace("b7ad6b7169203331", "0" * 16).encode())], None),
        ([("traceparent", VALID.upper().encode())], None),
        ([("traceparent", b"\xff\xfe")], None),
        ([("traceparent", None)], None),
        ([], None),
        (None, None),
    ],
)
def test_the_archived_traceparent_is_a_valid_w3c_one_or_none(
    headers: list[tuple[str, bytes | None]] | None, expected: str | None
) -> None:
    assert traceparent_of(headers) == expected
    assert trace_id_of(expected) == (None if expected is None else expected[3:35])


def test_the_cloudevents_tracing_extension_decodes_and_stays_out_of_the_canonical_bytes() -> None:
    event = JobSubmitted.model_validate(_submitted_json())
    traced = JobSubmitted.model_validate({**_submitted_json(), "traceparent": VALID, "tracestate": "v=1"})
    assert decode(encode(traced)) == traced
    assert b'"traceparent"' not in encode(event)  # absent attributes are left out, as subject is
    assert canonical_json(traced) == canonical_json(event)  # delivery metadata, not what happened
    assert valid_traceparent(traced.traceparent) == VALID
    assert valid_traceparent("00-junk") is None
    assert valid_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333é-01") is None


def _submitted_json() -> dict[str, object]:
    return {
        "id": "e1",
        "source": "test",
        "time": "2026-01-01T00:00:00Z",
        "type": "tephra.job.submitted.v1",
        "data": {"namespace": "ns", "name": "j", "queue": "default", "tasks": [{"name": "w", "replicas": 1}]},
    }
