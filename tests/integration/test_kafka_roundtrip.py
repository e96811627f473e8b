"""The event contract over a real Kafka-protocol broker (foundation acceptance).

Every event type goes through aiokafka with its key and W3C trace headers
and comes back as an equal model; a consumer loop meets malformed records
between valid ones, reports each with its documented error code, and keeps
going.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from events.models import EVENT_TYPES, Event
from events.serde import DecodeErrorCode, EventDecodeError, decode, encode
from events.topics import Topics, kafka_key, topic_for
from events.tracing import carrier_from_headers, headers_from_carrier
from tests.events.samples import job_submitted, node_reported, sample_events, task_started

pytestmark = pytest.mark.integration

# A deadline for waiting on records that should already be there; reaching it
# fails the test with what did arrive instead of hanging until the timeout.
_FETCH_DEADLINE_MS = 20_000


async def _read(consumer: AIOKafkaConsumer, count: int) -> list[ConsumerRecord[bytes, bytes]]:
    """Exactly ``count`` records from the assigned partitions, in offset order per partition.

    Counts records instead of comparing with end offsets: the embedded broker
    reports wrong end offsets for multi-record batches.
    """
    records: list[ConsumerRecord[bytes, bytes]] = []
    waited_ms = 0
    while len(records) < count:
        if waited_ms >= _FETCH_DEADLINE_MS:
            pytest.fail(f"only {len(records)} of {count} records arrived within {_FETCH_DEADLINE_MS} ms")
        batch = await consumer.getmany(timeout_ms=500)
        waited_ms += 500
        for partition in sorted(batch, key=lambda tp: (tp.topic, tp.partition)):
            records.extend(batch[partition])
    assert len(records) == count, f"expected {count} records, got {len(records)}"
    return records


async def _manual_consumer(bootstrap: str, partitions: Sequence[TopicPartition]) -> AIOKafkaConsumer:
    """No group, no auto-commit: positions come from the caller (the projector's pattern)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    await consumer.start()
    consumer.assign(list(partitions))
    for partition in partitions:
        consumer.seek(partition, 0)
    return consumer


async def test_every_event_type_round_trips_with_its_key_and_trace_context(
    kafka_bootstrap: str, topics: Topics
) -> None:
    events = sample_events()
    assert {event.type for event in events} == set(EVENT_TYPES), "samples must cover the whole catalogue"

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests.integration")
    propagator = TraceContextTextMapPropagator()

    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    span_of: dict[str, trace.SpanContext] = {}
    try:
        with tracer.start_as_current_span("submit all") as root:
            for event in events:
                with tracer.start_as_current_span(f"produce {event.type}") as span:
                    carrier: dict[str, str] = {}
                    propagator.inject(carrier)
                    await producer.send_and_wait(
                        topic_for(event, topics),
                        encode(event),
                        key=kafka_key(event),
                        headers=headers_from_carrier(carrier),
                    )
                    span_of[event.id] = span.get_span_context()
    finally:
        await producer.stop()
    trace_id = root.get_span_context().trace_id
    assert {s.context.span_id for s in exporter.get_finished_spans() if s.context is not None} >= {
        c.span_id for c in span_of.values()
    }

    used = sorted({topic_for(event, topics) for event in events})
    consumer = await _manual_consumer(kafka_bootstrap, [TopicPartition(topic, 0) for topic in used])
    try:
        records = await _read(consumer, len(events))
    finally:
        await consumer.stop()

    sent = {event.id: event for event in events}
    received: dict[str, Event] = {}
    for record in records:
        decoded = decode(record.value)
        original = sent[decoded.id]
        assert decoded == original
        assert type(decoded) is type(original)
        assert record.topic == topic_for(original, topics)
        assert record.key == kafka_key(original)
        assert b"traceparent" not in record.value, "trace context must travel in headers only"

        context = propagator.extract(carrier_from_headers(record.headers))
        remote = trace.get_current_span(context).get_span_context()
        assert remote.is_valid
        assert remote.is_remote
        assert remote.trace_id == trace_id
        assert remote.span_id == span_of[original.id].span_id
        received[decoded.id] = decoded
    assert received.keys() == sent.keys()

    # Within a topic, records come back in the order they were produced.
    for topic in used:
        produced = [e.id for e in events if topic_for(e, topics) == topic]
        consumed = [decode(r.value).id for r in records if r.topic == topic]
        assert consumed == produced


# ---------------------------------------------------------------------------
# a consumer loop that meets malformed records
# ---------------------------------------------------------------------------


def _edited(event: Event, edit: Callable[[dict[str, Any]], None]) -> bytes:
    payload = json.loads(encode(event))
    edit(payload)
    return json.dumps(payload).encode()


def _set_cpu(payload: dict[str, Any]) -> None:
    payload["data"]["tasks"][1]["resources"]["cpu"] = "8 cores"


@dataclass(frozen=True)
class _Bad:
    """A malformed record and what decoding it must report."""

    value: bytes
    code: DecodeErrorCode
    field: str | None = None


_MALFORMED: dict[str, _Bad] = {
    "invalid UTF-8": _Bad(b'{"type": "\xff\xfe"}', "invalid-utf8"),
    "not JSON": _Bad(b"{'type': 'tephra.job.submitted.v1'", "not-json"),
    "not an object": _Bad(b'["tephra.job.submitted.v1"]', "not-an-object"),
    "missing type": _Bad(_edited(job_submitted(), lambda p: p.pop("type")), "missing-type"),
    "unknown type": _Bad(
        _edited(job_submitted(), lambda p: p.update(type="tephra.job.exploded.v1")), "unknown-type"
    ),
    "unsupported version": _Bad(
        _edited(job_submitted(), lambda p: p.update(type="tephra.job.submitted.v99")), "unsupported-version"
    ),
    "extra field": _Bad(
        _edited(node_reported(), lambda p: p["data"].update(colour="red")), "invalid-field", "data.colour"
    ),
    "wrong field type": _Bad(
        _edited(job_submitted(), lambda p: p["data"].update(min_available="five")),
        "invalid-field",
        "data.min_available",
    ),
    "bad quantity": _Bad(_edited(job_submitted(), _set_cpu), "invalid-field", "data.tasks.1.resources.cpu"),
}


async def _consume_loop(consumer: AIOKafkaConsumer, count: int) -> list[tuple[int, Event | EventDecodeError]]:
    """Decode every record; a malformed one is recorded with its error and the loop goes on.

    Only :class:`EventDecodeError` is handled: anything else is a bug and must
    crash the loop rather than be parked.
    """
    outcomes: list[tuple[int, Event | EventDecodeError]] = []
    for record in await _read(consumer, count):
        try:
            outcomes.append((record.offset, decode(record.value)))
        except EventDecodeError as exc:
            outcomes.append((record.offset, exc))
    return outcomes


async def test_consumer_loop_reports_each_malformed_record_and_keeps_going(
    kafka_bootstrap: str, topics: Topics
) -> None:
    valid = [job_submitted(f"job-{i}", event_id=f"evt-valid-{i}") for i in range(len(_MALFORMED) + 1)]
    # valid, bad, valid, bad, ..., valid: every malformed record sits between two good ones.
    expected: list[Event | _Bad] = [valid[0]]
    for event, bad in zip(valid[1:], _MALFORMED.values(), strict=True):
        expected += [bad, event]

    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        for item in expected:
            value = item.value if isinstance(item, _Bad) else encode(item)
            await producer.send_and_wait(topics.intents, value, key=b"cluster-a")
    finally:
        await producer.stop()

    consumer = await _manual_consumer(kafka_bootstrap, [TopicPartition(topics.intents, 0)])
    try:
        outcomes = await _consume_loop(consumer, len(expected))
    finally:
        await consumer.stop()

    assert [offset for offset, _ in outcomes] == list(range(len(expected)))
    for (offset, outcome), (name, want) in zip(outcomes, _labelled(expected), strict=True):
        if isinstance(want, _Bad):
            assert isinstance(outcome, EventDecodeError), f"offset {offset} ({name}) decoded"
            assert (outcome.code, outcome.field) == (want.code, want.field), f"offset {offset} ({name})"
            assert not outcome.retriable
        else:
            assert outcome == want, f"offset {offset}: valid event decoded differently"


def _labelled(expected: list[Event | _Bad]) -> list[tuple[str, Event | _Bad]]:
    names = {id(bad): name for name, bad in _MALFORMED.items()}
    return [(names.get(id(item), "valid"), item) for item in expected]


async def test_batched_sends_come_back_complete_and_in_order(kafka_bootstrap: str, topics: Topics) -> None:
    """Several records per produce batch: the case where the embedded broker's end offsets are wrong."""
    events: list[Event] = [task_started(i, event_id=f"evt-task-{i}") for i in range(20)]
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all", linger_ms=20)
    await producer.start()
    try:
        # Unawaited sends batch several records together: the multi-record case.
        futures = [await producer.send(topic_for(e, topics), encode(e), key=kafka_key(e)) for e in events]
        offsets = [(await f).offset for f in futures]
    finally:
        await producer.stop()
    assert offsets == list(range(len(events)))

    consumer = await _manual_consumer(kafka_bootstrap, [TopicPartition(topics.observations, 0)])
    try:
        records = await _read(consumer, len(events))
    finally:
        await consumer.stop()
    assert [decode(r.value) for r in records] == events
