"""``tephra submit`` is all or nothing: every object sized before the first is produced, and a failure
part way names what was produced (issue 23 item 7), on the real broker."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from typer.testing import CliRunner

from api.cli import app
from api.endpoints import Endpoints
from api.manifests import ANNOTATIONS_MAX_BYTES, InvalidManifests, parse_manifests
from api.submit import DEFAULT_MAX_MESSAGE_BYTES, PartlyProducedError, message_limit, produce_manifests
from events.serde import decode
from events.topics import Topics
from projector.connections import KafkaAccess
from tests.api.helpers import read_topic
from tests.api.test_submit import JOB, NODE, QUEUE, fresh_topics

pytestmark = pytest.mark.integration

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def big_job(name: str, megabytes: float) -> str:
    """A job whose event is about ``megabytes`` MB: eight tasks with a long node selector each."""
    value = "x" * int(megabytes * 1_000_000 / 8)
    tasks = "\n".join(
        f"    - {{name: t{i}, replicas: 1, template: {{spec: {{nodeSelector: {{zone: '{value}'}},"
        " containers: [{name: c}]}}}"
        for i in range(8)
    )
    head = f"apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {{name: {name}}}\n"
    return f"{head}spec:\n  tasks:\n{tasks}\n"


def env_for(bootstrap: str, prefix: str) -> dict[str, str]:
    return {
        "TEPHRA_KAFKA_BOOTSTRAP": bootstrap,
        "TEPHRA_DATABASE_URL": "postgresql://unused@127.0.0.1:1/x",
        "TEPHRA_TOPICS_PREFIX": prefix,
    }


async def test_the_limit_is_the_brokers_or_kafkas_default_when_it_does_not_say(
    kafka_bootstrap: str, topics: Topics
) -> None:
    # Tansu answers DescribeConfigs with no entries: Kafka's default stands.
    assert await message_limit(KafkaAccess(kafka_bootstrap), [topics.intents]) == DEFAULT_MAX_MESSAGE_BYTES
    # No broker at all: the same default, no error.
    assert await message_limit(KafkaAccess("127.0.0.1:9"), [topics.intents]) == DEFAULT_MAX_MESSAGE_BYTES


def test_a_too_large_object_means_nothing_is_produced_and_the_error_says_too_large(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topics = fresh_topics(kafka_bootstrap)
    path = tmp_path / "jobs.yaml"
    path.write_text(JOB + "---\n" + big_job("huge", 1.2))

    # No projection here to confirm the queue and the jobs' names.
    args = ["submit", "--allow-missing-queue", "--skip-live-check", str(path)]
    result = CliRunner().invoke(app, args, env=env_for(kafka_bootstrap, topics.prefix))

    assert result.exit_code == 1
    assert f"{path}, document 2 (job/default/huge): too large: " in result.stderr
    assert f"{topics.intents} takes at most {DEFAULT_MAX_MESSAGE_BYTES}" in result.stderr
    assert "cannot reach Kafka" not in result.stderr
    assert "nothing was submitted" in result.stderr
    assert asyncio.run(read_topic(kafka_bootstrap, topics.intents)) == []


def test_annotations_over_kubernetes_limit_are_too_large() -> None:
    value = "a" * ANNOTATIONS_MAX_BYTES
    doc = JOB.replace(
        "metadata: {name: demo-training}", f"metadata: {{name: demo-training, annotations: {{k: {value}}}}}"
    )
    with pytest.raises(InvalidManifests) as caught:
        parse_manifests([("job.yaml", doc)], cluster="default", source="test", now=NOW)
    (error,) = caught.value.errors
    assert error.field == "metadata.annotations"
    assert error.expected.startswith(f"too large: {ANNOTATIONS_MAX_BYTES + 1} bytes of keys and values")


async def test_a_failure_part_way_names_what_was_produced(kafka_bootstrap: str, topics: Topics) -> None:
    """A producer whose limit is below the middle object's: the first is on the broker, the rest not."""
    text = "---\n".join([QUEUE, big_job("middle", 0.05), NODE])
    manifests = parse_manifests([("all.yaml", text)], cluster="lab", source="test", now=NOW)
    endpoints = Endpoints(kafka_bootstrap, "postgresql://unused@127.0.0.1:1/x", topics, "lab")
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all", max_request_size=10_000)
    await producer.start()
    try:
        with pytest.raises(PartlyProducedError) as caught:
            await produce_manifests(manifests, endpoints, producer=producer)
    finally:
        await producer.stop()

    error = caught.value
    assert [o.ref for o in error.produced] == ["queue/training"]
    assert error.failed.ref == "job/default/middle"
    assert [o.ref for o in error.unsent] == ["node/gpu-1"]
    intents = await read_topic(kafka_bootstrap, topics.intents)
    assert [decode(value).id for value, _, _ in intents] == [error.produced[0].event.id]
    assert await read_topic(kafka_bootstrap, topics.observations) == []


def test_on_a_terminal_a_progress_bar_then_one_summary_line(kafka_bootstrap: str, tmp_path: Path) -> None:
    topics = fresh_topics(kafka_bootstrap)
    path = tmp_path / "queues.yaml"
    path.write_text("---\n".join(QUEUE.replace("training", f"q{i}") for i in range(200)))
    env = env_for(kafka_bootstrap, topics.prefix) | {"TTY_COMPATIBLE": "1"}  # rich: stderr is a terminal

    result = CliRunner().invoke(app, ["submit", str(path)], env=env)

    assert result.exit_code == 0, result.stderr
    assert "producing" in result.stderr
    assert result.stdout.splitlines() == ["submitted 200 objects (200 queues)"]
