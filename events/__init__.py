"""The Tephra event contract: what other services produce and every Tephra service reads.

The catalogue (:mod:`events.models`), the wire format (:func:`encode`,
:func:`decode`, :func:`canonical_json`) and where events go on Kafka
(:class:`Topics`, :func:`topic_for`, :func:`kafka_key`).  Payload models
(``JobSubmittedData`` ...), upcasters (:mod:`events.upcast`), trace headers
(:mod:`events.tracing`) and JSON Schemas (:mod:`events.schemas`) are imported
from their modules.

Importing the package first decides whether :mod:`events.quantity`, compiled
by ``pip install``, runs compiled or from its source (:mod:`events.native`);
:data:`EVENTS_FORM` says which and why.
"""

from pathlib import Path

from events.native import CompiledUnit, choose_form

EVENTS = CompiledUnit("events", Path(__file__).resolve().parent, every_module=False)
"""The compiled unit: ``events.quantity`` (setup.py's ``EVENTS_MODULES``)."""

EVENTS_FORM = choose_form(EVENTS)

# After the choice: the models load the chosen form of events.quantity.
from events.models import (  # noqa: E402
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
from events.serde import EventDecodeError, canonical_json, decode, encode  # noqa: E402
from events.topics import Topics, kafka_key, topic_for  # noqa: E402

__all__ = [
    "EVENTS_FORM",
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
