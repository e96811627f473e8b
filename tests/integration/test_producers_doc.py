"""docs/producers.md's worked example as another team produces it: a plain Kafka client, the doc's JSON.

The records are read out of the markdown (each ```json block after a ``producers-example: <topic>``
marker), so the doc cannot drift from what the projector and the scheduler accept.
"""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path

import asyncpg
import pytest
from aiokafka import AIOKafkaProducer

from api.embedded import create_topics
from api.endpoints import Endpoints
from events.topics import Topics
from tests.api.helpers import live_stack, read_topic
from tests.service.helpers import wait_for

pytestmark = pytest.mark.integration

DOC = Path(__file__).resolve().parents[2] / "docs" / "producers.md"
_EXAMPLE = re.compile(r"<!-- producers-example: (\w+) -->\n```json\n(.*?)\n```", re.DOTALL)
# The header the doc's first record carries.
_TRACEPARENT = re.compile(r"`traceparent: (00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2})`")

BOUND = "SELECT count(*) FROM bindings WHERE job_id = $1 AND node = 'gpu-node-1'"
CONFLICT = "SELECT error FROM rejected_events WHERE event_id = $1"


def doc_records() -> list[tuple[str, bytes]]:
    """(topic suffix, value) of each example record, in the doc's order, byte for byte."""
    text = DOC.read_text()
    return [(match[1], match[2].encode()) for match in _EXAMPLE.finditer(text)]


def test_the_doc_has_its_three_records() -> None:
    assert [suffix for suffix, _ in doc_records()] == ["observations", "intents", "intents"]
    assert _TRACEPARENT.search(DOC.read_text()) is not None


async def test_the_docs_example_produced_by_hand_gets_scheduled_and_a_conflict_is_reported(
    kafka_bootstrap: str, database_url: str
) -> None:
    topics = Topics(f"doc-{secrets.token_hex(4)}")  # the doc's "tephra", unique on the shared broker
    await create_topics(kafka_bootstrap, topics.all(), partitions=1)
    endpoints = Endpoints(kafka_bootstrap, database_url, topics, "default")
    traceparent = _TRACEPARENT.search(DOC.read_text())
    assert traceparent is not None
    records = doc_records()
    job = json.loads(records[-1][1])
    conflicting = dict(job, source="urn:acme:another-service")
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        async with live_stack(endpoints):
            for suffix, value in records:
                headers = [("traceparent", traceparent[1].encode())] if suffix == "observations" else []
                await producer.send_and_wait(
                    f"{topics.prefix}.{suffix}", value, key=b"default", headers=headers
                )
            conn = await asyncpg.connect(database_url)
            try:
                await wait_for(conn, BOUND, 2, "team-a/train-7", within=60)
                # The same id with other content: the first stays, the second is reported.
                sent = await producer.send_and_wait(
                    topics.intents, json.dumps(conflicting).encode(), key=b"default"
                )
                await wait_for(conn, CONFLICT, "id-conflict", job["id"], within=60)
            finally:
                await conn.close()
    finally:
        await producer.stop()
    (value, headers, _), *rest = await read_topic(kafka_bootstrap, topics.rejected)
    assert rest == []
    got = dict(headers)
    assert got["tephra-error"] == b"id-conflict"
    assert got["tephra-event-id"] == job["id"].encode()
    assert got["tephra-source"] == f"{topics.intents}/{sent.partition}/{sent.offset}".encode()
    assert json.loads(value) == conflicting
