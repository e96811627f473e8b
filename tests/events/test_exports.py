"""The public surface of ``events`` is deliberate: adding to it is a reviewed change."""

from __future__ import annotations

import events


def test_all_is_pinned() -> None:
    assert events.__all__ == [
        "EVENT_TYPES",
        "Event",
        "EventDecodeError",
        "HyperNodeDeleted",
        "HyperNodeUpserted",
        "JobCancelled",
        "JobRejected",
        "JobSubmitted",
        "LeaderElected",
        "NodeRemoved",
        "NodeReported",
        "PriorityClassUpserted",
        "QueueDeleted",
        "QueueUpserted",
        "SchedulerConfigured",
        "SessionCommitted",
        "SessionPart",
        "TaskFinished",
        "TaskStarted",
        "TasksAdded",
        "Topics",
        "canonical_json",
        "compiled",  # whether events.quantity runs as its mypyc extension (setup.py)
        "decode",
        "encode",
        "kafka_key",
        "topic_for",
    ]


def test_every_export_exists() -> None:
    for name in events.__all__:
        assert getattr(events, name) is not None, name


def test_every_event_class_is_exported() -> None:
    assert {cls.__name__ for cls in events.EVENT_TYPES.values()} <= set(events.__all__)
