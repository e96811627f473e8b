"""``tephra submit`` on the real broker: all files validated first, events produced with trace context."""

from __future__ import annotations

import asyncio
import os
import secrets
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from typer.testing import CliRunner

from api.cli import app
from api.embedded import create_topics
from api.endpoints import Endpoints, NoStackError, StackRecord, resolve_endpoints, write_stack_record
from api.settings import TephraSettings
from api.submit import load_submission, produce_manifests
from events.serde import decode
from events.topics import Topics
from events.tracing import carrier_from_headers
from tests.api.helpers import read_topic

pytestmark = pytest.mark.integration

JOB = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: demo-training}
spec:
  minAvailable: 2
  tasks:
    - replicas: 2
      name: worker
      template: {spec: {containers: [{name: c, resources: {limits: {nvidia.com/gpu: 1}}}]}}
"""
QUEUE = (
    "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: training}\nspec: {weight: 3}\n"
)
NODE = "apiVersion: v1\nkind: Node\nmetadata: {name: gpu-1}\nstatus: {allocatable: {nvidia.com/gpu: 8}}\n"


def fresh_topics(bootstrap: str) -> Topics:
    topics = Topics(prefix=f"test-{secrets.token_hex(6)}")
    asyncio.run(create_topics(bootstrap, topics.all(), partitions=1))
    return topics


async def test_submitted_events_reach_their_topics_with_the_cluster_key_and_trace_context(
    kafka_bootstrap: str, topics: Topics, tmp_path: Path
) -> None:
    path = tmp_path / "all.yaml"
    path.write_text("---\n".join([QUEUE, NODE, JOB]))
    manifests = load_submission([path], cluster="lab")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    endpoints = Endpoints(kafka_bootstrap, "postgresql://unused@127.0.0.1:1/x", topics, "lab")

    produced = await produce_manifests(manifests, endpoints, tracer=provider.get_tracer("test"))

    assert [o.ref for o in produced] == ["queue/training", "node/gpu-1", "job/default/demo-training"]
    intents = await read_topic(kafka_bootstrap, topics.intents)
    observations = await read_topic(kafka_bootstrap, topics.observations)
    assert [decode(value).id for value, _, _ in intents] == [produced[0].event.id, produced[2].event.id]
    assert [decode(value).id for value, _, _ in observations] == [produced[1].event.id]
    spans = {span.attributes["tephra.ref"]: span for span in exporter.get_finished_spans()}
    for value, headers, key in intents + observations:
        event = decode(value)
        assert key == b"lab"
        ref = next(o.ref for o in produced if o.event.id == event.id)
        traceparent = carrier_from_headers(headers)["traceparent"]
        span_context = spans[ref].context
        assert traceparent.startswith(f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-")


def test_an_invalid_file_means_nothing_is_produced(kafka_bootstrap: str, tmp_path: Path) -> None:
    topics = fresh_topics(kafka_bootstrap)
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(JOB)
    bad.write_text(QUEUE + "---\n" + JOB.replace("replicas: 2", "replicas: -1"))
    env = {
        "TEPHRA_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "TEPHRA_DATABASE_URL": "postgresql://unused@127.0.0.1:1/x",
        "TEPHRA_TOPICS_PREFIX": topics.prefix,
    }

    result = CliRunner().invoke(app, ["submit", str(good), str(bad)], env=env)

    assert result.exit_code == 1
    assert f"{bad}, document 2 (Job default/demo-training): spec.tasks[0].replicas: " in result.stderr
    assert "nothing was submitted" in result.stderr
    assert asyncio.run(read_topic(kafka_bootstrap, topics.intents)) == []


def test_the_cli_prints_the_ids_it_submitted(kafka_bootstrap: str, tmp_path: Path) -> None:
    topics = fresh_topics(kafka_bootstrap)
    path = tmp_path / "job.yaml"
    path.write_text(QUEUE + "---\n" + JOB)
    env = {
        "TEPHRA_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "TEPHRA_DATABASE_URL": "postgresql://unused@127.0.0.1:1/x",
        "TEPHRA_TOPICS_PREFIX": topics.prefix,
        "TEPHRA_DATA_DIR": str(tmp_path / "data"),  # no producer key there: the events go unsigned
    }

    # The job's queue is "default", and its name free, which this test's projection (none) cannot confirm.
    unchecked = ["--allow-missing-queue", "--skip-live-check", str(path)]
    named = CliRunner().invoke(app, ["submit", "-o", "name", *unchecked], env=env)
    summed = CliRunner().invoke(app, ["submit", *unchecked], env=env)

    assert named.exit_code == 0, named.stderr
    assert named.stdout.splitlines() == ["queue/training", "job/default/demo-training"]
    assert summed.exit_code == 0, summed.stderr
    assert summed.stdout.splitlines() == ["submitted 2 objects (1 queue, 1 job)"]
    # Not a terminal: no progress bar; only the warning that, with no key, the events go unsigned.
    assert summed.stderr.startswith("warning: no producer key"), summed.stderr
    assert summed.stderr.count("\n") == 1, summed.stderr
    assert len(asyncio.run(read_topic(kafka_bootstrap, topics.intents))) == 4


def test_without_settings_the_embedded_stack_of_the_data_dir_is_used(tmp_path: Path) -> None:
    settings = TephraSettings(data_dir=tmp_path)
    with pytest.raises(NoStackError, match=r"no Tephra stack is running for .*: start one with `tephra up`"):
        resolve_endpoints(settings)
    record = StackRecord(
        pid=os.getpid(),
        kafka_bootstrap="127.0.0.1:9",
        database_url="postgresql://postgres@127.0.0.1:5/postgres",
        topics_prefix="tephra-e3",
        epoch=3,
    )
    write_stack_record(tmp_path, record)
    endpoints = resolve_endpoints(settings)
    assert (endpoints.kafka_bootstrap, endpoints.database_url, endpoints.topics.prefix) == (
        "127.0.0.1:9",
        "postgresql://postgres@127.0.0.1:5/postgres",
        "tephra-e3",
    )


def test_a_stack_record_of_a_dead_process_is_no_stack(tmp_path: Path) -> None:
    dead = StackRecord(pid=2**22 + 12345, kafka_bootstrap="127.0.0.1:9", database_url="postgresql://x@h:1/d",
                       topics_prefix="tephra-e1", epoch=1)  # fmt: skip
    write_stack_record(tmp_path, dead)
    with pytest.raises(NoStackError):
        resolve_endpoints(TephraSettings(data_dir=tmp_path))
