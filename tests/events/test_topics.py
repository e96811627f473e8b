"""Topic routing (design §1) and the Kafka key rule."""

from __future__ import annotations

import pytest

from events.models import Event
from events.topics import Topics, kafka_key, topic_for
from tests.events.samples import sample_events

# type -> topic role, written out so a new event type must be routed on purpose.
ROUTES = {
    "tephra.queue.upserted.v1": "intents",
    "tephra.queue.deleted.v1": "intents",
    "tephra.priorityclass.upserted.v1": "intents",
    "tephra.scheduler.configured.v1": "intents",
    "tephra.job.submitted.v1": "intents",
    "tephra.job.cancelled.v1": "intents",
    "tephra.job.rejected.v1": "intents",
    "tephra.node.reported.v1": "observations",
    "tephra.node.removed.v1": "observations",
    "tephra.task.started.v1": "observations",
    "tephra.task.finished.v1": "observations",
    "tephra.hypernode.upserted.v1": "observations",
    "tephra.hypernode.deleted.v1": "observations",
    "tephra.session.committed.v1": "decisions",
    "tephra.session.part.v1": "decisions",
    "tephra.leader.elected.v1": "decisions",
    "tephra.job.tasks-added.v1": "intents",
}


def test_default_topic_names() -> None:
    topics = Topics()

    assert (topics.intents, topics.observations, topics.decisions, topics.rejected) == (
        "tephra.intents",
        "tephra.observations",
        "tephra.decisions",
        "tephra.rejected",
    )
    assert topics.checkpoints == "tephra.checkpoints"
    assert topics.all() == (
        "tephra.intents",
        "tephra.observations",
        "tephra.decisions",
        "tephra.rejected",
        "tephra.checkpoints",
    )


def test_prefix_isolates_deployments() -> None:
    assert Topics("t-test_42").all() == (
        "t-test_42.intents",
        "t-test_42.observations",
        "t-test_42.decisions",
        "t-test_42.rejected",
        "t-test_42.checkpoints",
    )


@pytest.mark.parametrize("prefix", ["", "has space", "slash/y", "ü", "x" * 237])
def test_prefix_must_make_legal_kafka_topics(prefix: str) -> None:
    with pytest.raises(ValueError, match="invalid topic prefix"):
        Topics(prefix)


@pytest.mark.parametrize("event", sample_events(), ids=lambda event: event.type)
def test_every_type_has_its_topic(event: Event) -> None:
    topics = Topics("route")

    assert topic_for(event, topics) == f"route.{ROUTES[event.type]}"


def test_routes_cover_the_samples() -> None:
    assert sorted(ROUTES) == sorted(event.type for event in sample_events())


@pytest.mark.parametrize("event", sample_events(), ids=lambda event: event.type)
def test_key_is_the_cluster_id(event: Event) -> None:
    assert kafka_key(event) == b"gpu-east-1"
    assert kafka_key(event.model_copy(update={"cluster": "eu-west"})) == b"eu-west"
