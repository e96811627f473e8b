"""The Tephra event contract: what other services produce and every Tephra service reads.

The catalogue (:mod:`events.models`), the wire format (:func:`encode`,
:func:`decode`, :func:`canonical_json`) and where events go on Kafka
(:class:`Topics`, :func:`topic_for`, :func:`kafka_key`).  Payload models
(``JobSubmittedData`` ...), upcasters (:mod:`events.upcast`), trace headers
(:mod:`events.tracing`) and JSON Schemas (:mod:`events.schemas`) are imported
from their modules.
"""

from events.models import (
    EVENT_TYPES,
    Event,
    JobCancelled,
    JobRejected,
    JobSubmitted,
    NodeRemoved,
    NodeReported,
    PriorityClassUpserted,
    QueueDeleted,
    QueueUpserted,
    SchedulerConfigured,
    SessionCommitted,
    SessionPart,
    TaskFinished,
    TaskStarted,
)
from events.serde import EventDecodeError, canonical_json, decode, encode
from events.topics import Topics, kafka_key, topic_for

__all__ = [
    "EVENT_TYPES",
    "Event",
    "EventDecodeError",
    "JobCancelled",
    "JobRejected",
    "JobSubmitted",
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
    "Topics",
    "canonical_json",
    "decode",
    "encode",
    "kafka_key",
    "topic_for",
]
