"""The Tephra event contract: what other services produce and every Tephra service reads.

The catalogue (:mod:`events.models`), the wire format (:func:`encode`,
:func:`decode`, :func:`canonical_json`) and where events go on Kafka
(:class:`Topics`, :func:`topic_for`, :func:`kafka_key`).  Payload models
(``JobSubmittedData`` ...), upcasters (:mod:`events.upcast`), trace headers
(:mod:`events.tracing`) and JSON Schemas (:mod:`events.schemas`) are imported
from their modules.

``pip install`` may compile :mod:`events.quantity` with mypyc (setup.py);
:func:`compiled` says whether the extension is what runs.
"""

from importlib.machinery import EXTENSION_SUFFIXES

from events import quantity
from events.models import (
    EVENT_TYPES,
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
from events.serde import EventDecodeError, canonical_json, decode, encode
from events.topics import Topics, kafka_key, topic_for


def compiled() -> bool:
    """Whether :mod:`events.quantity` runs as its mypyc extension rather than its source."""
    return quantity.__file__.endswith(tuple(EXTENSION_SUFFIXES))


__all__ = [
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
    "compiled",
    "decode",
    "encode",
    "kafka_key",
    "topic_for",
]
