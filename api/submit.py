"""``tephra submit``: validate manifests, then produce their events.

Every file is parsed and checked before the first connection is made, so an
invalid file produces nothing.  Each event is produced inside its own
OpenTelemetry span, whose context travels in the W3C ``traceparent`` header:
the scheduler links the session that places a job to that span.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from opentelemetry import propagate, trace
from opentelemetry.trace import Tracer

from api.endpoints import Endpoints
from api.manifests import ManifestObject, Manifests, load_manifest_files
from events.models import JobCancelled, JobCancelledData, QueueDeleted, QueueDeletedData
from events.serde import encode
from events.topics import kafka_key, topic_for
from events.tracing import headers_from_carrier

__all__ = [
    "CANCEL_SOURCE",
    "DELETE_SOURCE",
    "SUBMIT_SOURCE",
    "job_cancellation",
    "load_submission",
    "produce_manifests",
    "queue_deletion",
]

SUBMIT_SOURCE = "tephra://cli/submit"
CANCEL_SOURCE = "tephra://cli/cancel"
DELETE_SOURCE = "tephra://cli/delete"


def job_cancellation(job_id: str, *, cluster: str, source: str, reason: str = "") -> Manifests:
    """The JobCancelled of ``job_id``, ready for :func:`produce_manifests` (as a submission is)."""
    ref = f"job/{job_id}"
    envelope = _envelope(ref, cluster=cluster, source=source)
    return Manifests(
        (
            ManifestObject(
                ref, JobCancelled(**envelope, data=JobCancelledData(job_id=job_id, reason=reason)), "", 0
            ),
        )
    )


def queue_deletion(name: str, *, cluster: str, source: str) -> Manifests:
    """The QueueDeleted of queue ``name``, ready for :func:`produce_manifests`."""
    ref = f"queue/{name}"
    envelope = _envelope(ref, cluster=cluster, source=source)
    return Manifests(
        (ManifestObject(ref, QueueDeleted(**envelope, data=QueueDeletedData(name=name)), "", 0),)
    )


def _envelope(subject: str, *, cluster: str, source: str) -> dict[str, Any]:
    return {
        "id": str(uuid.uuid4()),
        "source": source,
        "time": datetime.now(UTC),
        "subject": subject,
        "cluster": cluster,
    }


def load_submission(paths: Sequence[Path], *, cluster: str, source: str = SUBMIT_SOURCE) -> Manifests:
    """Parse and validate every file; raises :class:`api.manifests.InvalidManifests`."""
    return load_manifest_files(paths, cluster=cluster, source=source, now=datetime.now(UTC))


async def produce_manifests(
    manifests: Manifests,
    endpoints: Endpoints,
    *,
    tracer: Tracer | None = None,
    producer: AIOKafkaProducer | None = None,
) -> list[ManifestObject]:
    """Produce every object's event (document order) and wait until the broker has them all."""
    tracer = tracer or trace.get_tracer("tephra.api.submit")
    owned = producer is None
    if producer is None:
        # acks=all: an acknowledged submission survives a broker failover.
        producer = AIOKafkaProducer(bootstrap_servers=endpoints.kafka_bootstrap, acks="all")
        try:
            await producer.start()
        except BaseException:
            await producer.stop()  # a failed start still holds a client that must be closed
            raise
    try:
        pending = []
        for obj in manifests.objects:
            event = obj.event
            with tracer.start_as_current_span(
                "tephra.submit", attributes={"tephra.ref": obj.ref, "tephra.event.id": event.id}
            ):
                carrier: dict[str, str] = {}
                propagate.inject(carrier)
                pending.append(
                    await producer.send(
                        topic_for(event, endpoints.topics),
                        encode(event),
                        key=kafka_key(event),
                        headers=headers_from_carrier(carrier),
                    )
                )
        await asyncio.gather(*pending)
    finally:
        if owned:
            await producer.stop()
    return list(manifests.objects)
