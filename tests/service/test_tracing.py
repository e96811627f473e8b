"""Session spans from the core's trace, linked to the submissions they placed (in-memory exporter)."""

from __future__ import annotations

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from opentelemetry import propagate
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import format_trace_id

from events.models import SessionCommitted
from events.serde import decode
from events.topics import Topics
from events.tracing import carrier_from_headers, headers_from_carrier
from tests.service.helpers import job, node, produce, queue, running_projector, running_scheduler, wait_for

pytestmark = pytest.mark.integration


async def test_the_session_span_links_the_submission_and_its_context_travels_with_the_commit(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests")

    await produce(kafka_bootstrap, topics, [queue(), node("n1")])
    with tracer.start_as_current_span("tephra.submit") as submit_span:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        await produce(
            kafka_bootstrap, topics, [job("traced", replicas=2)], headers=headers_from_carrier(carrier)
        )
    submitted = submit_span.get_span_context()

    async with (
        running_projector(kafka_bootstrap, database_url, topics),
        running_scheduler(kafka_bootstrap, database_url, topics, schedule_period=0.2, tracer=tracer),
    ):
        conn = await asyncpg.connect(database_url)
        try:
            await wait_for(conn, "SELECT count(*) FROM bindings", 2)
            placing_id = await conn.fetchval("SELECT DISTINCT session_id FROM bindings")
        finally:
            await conn.close()

    spans = exporter.get_finished_spans()
    (session,) = [
        s for s in spans if s.name == "tephra.session" and s.attributes["tephra.session.id"] == placing_id
    ]
    assert session.attributes["tephra.session.decisions"] == 3  # enqueue + 2 binds
    assert [link.context.span_id for link in session.links] == [submitted.span_id]
    assert session.links[0].attributes == {"tephra.job": "ns/traced"}
    actions = [s for s in spans if s.parent is not None and s.parent.span_id == session.context.span_id]
    assert [s.attributes["tephra.action"] for s in actions] == ["enqueue", "allocate", "backfill"]
    (allocate,) = [s for s in actions if s.name == "tephra.action allocate"]
    assert allocate.attributes["tephra.tasks_placed"] == 2

    # The commit carries the session span's context in its headers.
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        partition = TopicPartition(topics.decisions, 0)
        consumer.assign([partition])
        await consumer.seek_to_beginning(partition)
        headers = None
        while headers is None:
            for record in (await consumer.getmany(timeout_ms=1000)).get(partition, []):
                event = decode(record.value)  # the term's LeaderElected comes first
                if isinstance(event, SessionCommitted) and event.data.session_id == placing_id:
                    headers = record.headers
    finally:
        await consumer.stop()
    traceparent = carrier_from_headers(headers)["traceparent"]
    assert traceparent.split("-")[1] == format_trace_id(session.context.trace_id)
    assert traceparent.split("-")[2] == f"{session.context.span_id:016x}"
