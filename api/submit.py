"""``tephra submit``: validate manifests, then produce their events.

Every file is parsed and checked before the first connection is made, so an
invalid file produces nothing; then the projection is asked whether every
job's queue exists (:func:`check_queues`) and no job's name is held by an
unfinished job (:func:`check_live_jobs`), as Kubernetes' admission would;
then every event is sized against the broker's ``max.message.bytes``
(:func:`message_limit`, :func:`too_large`) before the first is produced.
Should producing still fail part way (the broker gone),
:class:`PartlyProducedError` names what was produced.  Each event is produced
inside its own OpenTelemetry span, whose context travels in the W3C
``traceparent`` header: the scheduler links the session that places a job
to that span.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import asyncpg
from aiokafka import AIOKafkaProducer
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError
from opentelemetry import propagate, trace
from opentelemetry.trace import Tracer

from api.endpoints import Endpoints
from api.manifests import InvalidManifests, ManifestError, ManifestObject, Manifests, load_manifest_files
from events.models import (
    JobCancelled,
    JobCancelledData,
    JobSubmitted,
    QueueDeleted,
    QueueDeletedData,
    QueueUpserted,
)
from events.serde import encode
from events.signing import EventSigner
from events.topics import Topics, kafka_key, topic_for
from events.tracing import headers_from_carrier
from projector.connections import KafkaAccess, new_admin, new_producer, start_client
from projector.state import TERMINAL_JOB_PHASES

__all__ = [
    "CANCEL_SOURCE",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DELETE_SOURCE",
    "SUBMIT_SOURCE",
    "LiveJobsError",
    "PartlyProducedError",
    "check_live_jobs",
    "check_queues",
    "job_cancellation",
    "load_submission",
    "message_limit",
    "produce_manifests",
    "projection_live_jobs",
    "projection_queues",
    "queue_deletion",
    "too_large",
]

log = logging.getLogger(__name__)

SUBMIT_SOURCE = "tephra://cli/submit"
CANCEL_SOURCE = "tephra://cli/cancel"
DELETE_SOURCE = "tephra://cli/delete"

#: Kafka's default ``message.max.bytes``, which a topic's ``max.message.bytes`` inherits: the limit
#: assumed when the broker does not say (Tansu answers DescribeConfigs with no entries).
DEFAULT_MAX_MESSAGE_BYTES: Final = 1_048_588
#: What a record costs beside its value and key: the batch header and the trace headers, with room.
RECORD_OVERHEAD: Final = 512
_MAX_MESSAGE_BYTES: Final = "max.message.bytes"
_DESCRIBE_TIMEOUT: Final = 10.0


class PartlyProducedError(Exception):
    """Producing stopped part way: ``produced`` are on the broker; ``failed`` and ``unsent`` are not."""

    def __init__(
        self,
        produced: Sequence[ManifestObject],
        failed: ManifestObject,
        cause: BaseException,
        unsent: Sequence[ManifestObject],
    ) -> None:
        self.produced = list(produced)
        self.failed = failed
        self.cause = cause
        self.unsent = list(unsent)
        super().__init__(
            f"producing {failed.ref} failed: {cause!r}; {len(self.produced)} objects were produced before"
        )


async def check_queues(manifests: Manifests, known_queues: Callable[[], Awaitable[Collection[str]]]) -> None:
    """Every job's queue exists or comes in the submission, as Volcano's admission webhook requires.

    Raises :class:`InvalidManifests` naming each job whose queue does not: nothing is to be
    produced.  ``known_queues`` (the projection's, :func:`projection_queues`) is asked only when
    some job's queue is not in the submission.  The check of every door that takes manifests
    (``tephra submit``, the HTTP API); a raw event for a missing queue is archived and waits
    (``queue-missing``).
    """
    submitted = {o.event.data.name for o in manifests.objects if isinstance(o.event, QueueUpserted)}
    jobs = [(o, o.event) for o in manifests.objects if isinstance(o.event, JobSubmitted)]
    if all(job.data.queue in submitted for _, job in jobs):
        return
    known = set(await known_queues())
    choices = ", ".join(sorted(known)) or "none exists yet"
    errors = [
        ManifestError(
            obj.file,
            obj.document,
            "spec.queue",
            f"queue {job.data.queue!r} does not exist; submit its Queue first (or with this job),"
            f" or use one of: {choices}",
            "Job",
            job.data.name,
        )
        for obj, job in jobs
        if job.data.queue not in known and job.data.queue not in submitted
    ]
    if errors:
        raise InvalidManifests(errors)


async def projection_queues(conn: asyncpg.Connection) -> set[str]:
    """The queues the projection holds."""
    return {r["name"] for r in await conn.fetch("SELECT name FROM queues")}


class LiveJobsError(Exception):
    """Jobs whose name a live (unfinished) job holds: nothing of the submission is to be produced.

    A conflict, not an invalid document (the HTTP API answers 409, not 422); ``errors`` are
    :class:`ManifestError` all the same, so each door prints them as it prints those.
    """

    def __init__(self, errors: Sequence[ManifestError]) -> None:
        self.errors = tuple(errors)
        super().__init__("\n".join(str(e) for e in self.errors))


async def check_live_jobs(
    manifests: Manifests,
    live_jobs: Callable[[list[str]], Awaitable[Mapping[str, str]]],
    *,
    how_to_cancel: Callable[[str], str],
) -> None:
    """No job's name is held by a live job, as Kubernetes refuses a create (AlreadyExists).

    The projector would reject such a JobSubmitted (``duplicate-job``) after it was produced, and
    the submitter would learn it from ``rejected_events`` only; this check refuses the whole
    submission first with :class:`LiveJobsError`, one error per such job naming its phase and the
    way out.  ``live_jobs`` maps the ids asked about (sorted) to the phase of those live in the
    projection (:func:`projection_live_jobs`); ``how_to_cancel`` says how this door cancels a job.
    A job submitted since the projection last folded escapes the check: ``tephra submit --wait``
    (``?wait=archived``) reports the projector's verdict.
    """
    jobs = [(o, o.event) for o in manifests.objects if isinstance(o.event, JobSubmitted)]
    if not jobs:
        return
    live = await live_jobs(sorted({job.data.job_id for _, job in jobs}))
    errors = [
        ManifestError(
            obj.file,
            obj.document,
            "metadata.name",
            _still_live(job.data.job_id, live[job.data.job_id], how_to_cancel),
            "Job",
            job.data.name,
        )
        for obj, job in jobs
        if job.data.job_id in live
    ]
    if errors:
        raise LiveJobsError(errors)


def _still_live(job_id: str, phase: str, how_to_cancel: Callable[[str], str]) -> str:
    """Why ``job_id``'s name is taken and what frees it (a name is free once its job has finished)."""
    if phase in TERMINAL_JOB_PHASES:
        # Cancelled (or failed) while some of its tasks still hold their nodes: it finishes when
        # they have been released, with nothing more to do.
        return (
            f"job {job_id} is {phase} but has not finished (its tasks are still releasing their"
            " nodes): wait until it has, then submit again, or pick another name"
        )
    return (
        f"job {job_id} is {phase}: its name is taken until it finishes; cancel it with"
        f" {how_to_cancel(job_id)} and submit again once it has finished, wait for it to finish,"
        " or pick another name"
    )


async def projection_live_jobs(conn: asyncpg.Connection, job_ids: list[str]) -> dict[str, str]:
    """The phase of each job of ``job_ids`` that the projection holds unfinished (its name is taken)."""
    rows = await conn.fetch(
        "SELECT id, phase FROM jobs WHERE id = ANY($1::text[]) AND finished_at IS NULL", job_ids
    )
    return {r["id"]: r["phase"] for r in rows}


async def message_limit(kafka: KafkaAccess, topics: Sequence[str]) -> int:
    """The smallest ``max.message.bytes`` of ``topics`` as the broker reports it.

    :data:`DEFAULT_MAX_MESSAGE_BYTES` for a topic the broker reports no value for, and for all of
    them when it does not answer DescribeConfigs (a broker without it, or an ACL): the submission is
    then checked against Kafka's default, and a broker with a lower limit refuses at produce time.
    """
    admin = new_admin(kafka)
    try:
        await start_client(admin, kafka)
        resources = [ConfigResource(ConfigResourceType.TOPIC, topic) for topic in topics]
        async with asyncio.timeout(_DESCRIBE_TIMEOUT):
            responses = await admin.describe_configs(resources)
    except (KafkaError, TimeoutError, OSError) as exc:
        log.info("the broker did not say its max.message.bytes (%r): assuming Kafka's default", exc)
        return DEFAULT_MAX_MESSAGE_BYTES
    finally:
        await admin.close()
    limits = dict.fromkeys(topics, DEFAULT_MAX_MESSAGE_BYTES)
    for response in responses:
        for resource in response.to_object()["resources"]:
            for entry in resource["config_entries"]:
                if entry["config_names"] == _MAX_MESSAGE_BYTES and str(entry["config_value"]).isdigit():
                    limits[resource["resource_name"]] = int(entry["config_value"])
    return min(limits.values())


def too_large(manifests: Manifests, topics: Topics, limit: int) -> list[str]:
    """One line for each object whose record would be over ``limit`` bytes (none: all fit)."""
    problems = []
    for obj in manifests.objects:
        event = obj.event
        size = len(encode(event)) + len(kafka_key(event)) + RECORD_OVERHEAD
        if size > limit:
            problems.append(
                f"{obj.file}, document {obj.document} ({obj.ref}): too large: its event is about {size}"
                f" bytes, and {topic_for(event, topics)} takes at most {limit} (the broker's"
                f" {_MAX_MESSAGE_BYTES}): make the object smaller (fewer annotations, labels or tasks)"
            )
    return problems


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
    max_request_size: int = DEFAULT_MAX_MESSAGE_BYTES,
    on_produced: Callable[[], None] | None = None,
    signer: EventSigner | None = None,
) -> list[ManifestObject]:
    """Produce every object's event (document order) and wait until the broker has them all.

    ``signer``: who produces them (``principal`` and ``signature``, docs/producers.md); None:
    unsigned (a development deployment takes them, others reject them: ``unsigned``).

    ``on_produced`` is called as each is acknowledged (a progress bar).  Raises
    :class:`PartlyProducedError` when some were produced and one then failed; the error
    itself (a :class:`KafkaError`) when none was.
    """
    tracer = tracer or trace.get_tracer("tephra.api.submit")
    owned = producer is None
    if producer is None:
        # acks=all: an acknowledged submission survives a broker failover.
        kafka = endpoints.kafka()
        producer = new_producer(kafka, acks="all", max_request_size=max_request_size)
        try:
            await start_client(producer, kafka)
        except BaseException:
            await producer.stop()  # a failed start still holds a client that must be closed
            raise
    objects = manifests.objects
    pending: list[asyncio.Future[object]] = []
    stopped: tuple[int, BaseException] | None = None
    try:
        for index, obj in enumerate(objects):
            try:
                pending.append(
                    await _send(
                        producer, obj, endpoints.topics, tracer, on_produced=on_produced, signer=signer
                    )
                )
            except KafkaError as exc:
                stopped = (index, exc)
                break
        outcomes = await asyncio.gather(*pending, return_exceptions=True)
    finally:
        if owned:
            await producer.stop()
    failures = [(i, o) for i, o in enumerate(outcomes) if isinstance(o, BaseException)]
    if failures and (stopped is None or failures[0][0] < stopped[0]):
        stopped = failures[0]
    if stopped is None:
        return list(objects)
    index, cause = stopped
    produced = [obj for obj, o in zip(objects, outcomes, strict=False) if not isinstance(o, BaseException)]
    if not produced:
        raise cause
    unsent = [
        obj
        for i, obj in enumerate(objects)
        if i != index and (i >= len(outcomes) or isinstance(outcomes[i], BaseException))
    ]
    raise PartlyProducedError(produced, objects[index], cause, unsent)


async def _send(
    producer: AIOKafkaProducer,
    obj: ManifestObject,
    topics: Topics,
    tracer: Tracer,
    *,
    on_produced: Callable[[], None] | None,
    signer: EventSigner | None,
) -> asyncio.Future[object]:
    """Send one object's event in its span; the future the broker's acknowledgement completes."""
    event = obj.event if signer is None else signer.sign(obj.event)
    with tracer.start_as_current_span(
        "tephra.submit", attributes={"tephra.ref": obj.ref, "tephra.event.id": event.id}
    ):
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        future: asyncio.Future[object] = await producer.send(
            topic_for(event, topics),
            encode(event),
            key=kafka_key(event),
            headers=headers_from_carrier(carrier),
        )
    if on_produced is not None:
        future.add_done_callback(lambda done: _count(done, on_produced))
    return future


def _count(done: asyncio.Future[object], on_produced: Callable[[], None]) -> None:
    if not done.cancelled() and done.exception() is None:
        on_produced()
