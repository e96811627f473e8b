"""Kafka topic names and the message key rule.

Five topics per deployment (design §1), all under one prefix:

* ``<prefix>.intents`` — what users and admission ask or decide: queue,
  priority-class, scheduler-config and job events, including JobRejected;
* ``<prefix>.observations`` — what the cluster reports: node and task events;
* ``<prefix>.decisions`` — what the scheduler decided: SessionCommitted and
  its SessionPart pieces, and LeaderElected (a scheduler took the leadership);
* ``<prefix>.rejected`` — the dead-letter topic: raw messages the projector
  could not decode, with the error in the headers;
* ``<prefix>.checkpoints`` — the projector's signed checkpoints of the
  archive's hash chain (:mod:`events.checkpoints`), which auditors keep.

The key of every message is its cluster id, so Kafka keeps a total order per
cluster within each topic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import assert_never

from events.models import (
    Event,
    HyperNodeDeleted,
    HyperNodeUpserted,
    JobCancelled,
    JobRejected,
    JobSubmitted,
    LeaderElected,
    NodeRemoved,
    NodeReported,
    PriorityClassUpserted,
    QueueDeleted,
    QueueUpserted,
    SchedulerConfigured,
    SessionCommitted,
    SessionPart,
    TaskFinished,
    TasksAdded,
    TaskStarted,
)

__all__ = ["Topics", "kafka_key", "topic_for"]

# Kafka's legal topic characters; the longest suffix is ".observations".
_TOPIC_PREFIX = re.compile(r"[A-Za-z0-9._-]{1,236}", re.ASCII)


@dataclass(frozen=True, slots=True)
class Topics:
    """The topic names of one deployment; tests pass a unique prefix each."""

    prefix: str = "tephra"

    def __post_init__(self) -> None:
        if not _TOPIC_PREFIX.fullmatch(self.prefix):
            raise ValueError(f"invalid topic prefix {self.prefix!r}: use 1-236 of [A-Za-z0-9._-]")

    @property
    def intents(self) -> str:
        return f"{self.prefix}.intents"

    @property
    def observations(self) -> str:
        return f"{self.prefix}.observations"

    @property
    def decisions(self) -> str:
        return f"{self.prefix}.decisions"

    @property
    def rejected(self) -> str:
        return f"{self.prefix}.rejected"

    @property
    def checkpoints(self) -> str:
        return f"{self.prefix}.checkpoints"

    def all(self) -> tuple[str, ...]:
        """Every topic, in flow order (for creating them)."""
        return (self.intents, self.observations, self.decisions, self.rejected, self.checkpoints)


def topic_for(event: Event, topics: Topics) -> str:
    """The topic an event is produced to."""
    match event:
        case (
            QueueUpserted()
            | QueueDeleted()
            | PriorityClassUpserted()
            | SchedulerConfigured()
            | JobSubmitted()
            | TasksAdded()
            | JobCancelled()
            | JobRejected()
        ):
            return topics.intents
        case (
            NodeReported()
            | NodeRemoved()
            | TaskStarted()
            | TaskFinished()
            | HyperNodeUpserted()
            | HyperNodeDeleted()
        ):
            return topics.observations
        case SessionCommitted() | SessionPart() | LeaderElected():
            return topics.decisions
        case _:
            # mypy proves every catalogue type is routed above.
            assert_never(event)


def kafka_key(event: Event) -> bytes:
    """The message key: the cluster id, UTF-8."""
    return event.cluster.encode()
