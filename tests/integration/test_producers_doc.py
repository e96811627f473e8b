"""docs/producers.md's worked example as another team produces it: a plain Kafka client, the doc's JSON.

The records are read out of the markdown (each ```json block after a ``producers-example: <topic>``
marker), so the doc cannot drift from what the projector and the scheduler accept.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import shutil
import subprocess
from pathlib import Path

import asyncpg
import pytest
from aiokafka import AIOKafkaProducer

from api.embedded import create_topics
from api.endpoints import Endpoints
from events.signing import SigningKey
from events.topics import Topics
from projector.keyring import add_producer
from projector.migrate import apply_migrations
from projector.settings import ProjectorSettings
from projector.trust import KeyringEntry
from tests.api.helpers import live_stack, read_topic
from tests.service.helpers import running_projector, wait_for

pytestmark = pytest.mark.integration

DOC = Path(__file__).resolve().parents[2] / "docs" / "producers.md"
_EXAMPLE = re.compile(r"<!-- producers-example: (\w+) -->\n```json\n(.*?)\n```", re.DOTALL)
# The header the doc's first record carries.
_TRACEPARENT = re.compile(r"`traceparent: (00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2})`")

BOUND = "SELECT count(*) FROM bindings WHERE job_id = $1 AND node = 'gpu-node-1'"
CONFLICT = "SELECT error FROM rejected_events WHERE event_id = $1"


_JS = re.compile(r"<!-- producers-example-js -->\n```js\n(.*?)\n```", re.DOTALL)


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


def _node_signs(script: Path, key: Path, principal: str, record: bytes) -> bytes:
    node = shutil.which("node")
    assert node is not None
    done = subprocess.run(  # noqa: S603 - the doc's own example, run by node
        [node, str(script), str(key), principal], input=record, capture_output=True, check=True, timeout=60
    )
    return done.stdout


@pytest.mark.skipif(shutil.which("node") is None, reason="node (20 or later) is not installed")
async def test_the_docs_javascript_signs_records_a_deployment_accepts(
    kafka_bootstrap: str, database_url: str, tmp_path: Path
) -> None:
    """The doc's Node.js program signs the doc's queue and job; a projector that refuses unsigned
    events archives them with their principal, and refuses one edited after signing."""
    found = _JS.search(DOC.read_text())
    assert found is not None
    script = tmp_path / "sign.mjs"
    script.write_text(found[1])
    key = SigningKey.generate()
    key_file = tmp_path / "acme-trainer.pem"
    key_file.write_bytes(key.pem())
    topics = Topics(f"js-{secrets.token_hex(4)}")
    await create_topics(kafka_bootstrap, topics.all(), partitions=1)
    conn = await asyncpg.connect(database_url)
    try:
        await apply_migrations(conn)
        may = frozenset({"tephra.queue.upserted.v1", "tephra.job.submitted.v1"})
        await add_producer(conn, KeyringEntry("acme-trainer", key.public_key, may, frozenset({"research"})))
        _, queue, job = doc_records()
        signed = [
            await asyncio.to_thread(_node_signs, script, key_file, "acme-trainer:ci", value)
            for _, value in (queue, job)
        ]
        edited = dict(json.loads(signed[1]), id="edited-after-signing")
        unsigned = dict(json.loads(queue[1]), id="unsigned-queue")
        production = ProjectorSettings(
            projector_linger_ms=5,
            allow_unsigned_intents=False,
            allow_unsigned_observations=False,
            allow_leaderless_sessions=False,
        )
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
        await producer.start()
        try:
            async with running_projector(kafka_bootstrap, database_url, topics, production):
                for value in (*signed, json.dumps(edited).encode(), json.dumps(unsigned).encode()):
                    await producer.send_and_wait(topics.intents, value, key=b"default")
                await wait_for(conn, "SELECT count(*) FROM rejected_events", 2, within=60)
        finally:
            await producer.stop()
        archived = await conn.fetch("SELECT event_id, principal, signature FROM event_log ORDER BY seq")
        assert [(r["event_id"], r["principal"]) for r in archived] == [
            (json.loads(value)["id"], "acme-trainer:ci") for value in signed
        ]
        assert all(
            r["signature"] == json.loads(v)["signature"] for r, v in zip(archived, signed, strict=True)
        )
        refused = await conn.fetch("SELECT event_id, error FROM rejected_events ORDER BY id")
        assert [(r["event_id"], r["error"]) for r in refused] == [
            ("edited-after-signing", "bad-signature"),
            ("unsigned-queue", "unsigned"),
        ]
    finally:
        await conn.close()
