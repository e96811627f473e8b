"""The composition root of the scheduler service: :func:`run_scheduler`.

The service leads: campaign for the cluster's lock, then run *terms*.  A term
starts by creating Volcano's ``default`` queue when the cluster has none
(:mod:`scheduler.service.default_queue`).  A term is one
  leadership: its own connections, producer and session loop, supervised
  together with the watch on the lock connection.  When the lock connection
  fails, or the broker or database fails under the loop, the term ends, its
  resources are closed and the process campaigns again (a new term has a new
  epoch).  A bug (any other exception) ends the group and the process.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg
from aiokafka.errors import KafkaError
from opentelemetry import trace
from opentelemetry.trace import Tracer

from events.signing import EventSigner, SigningKey
from events.topics import Topics
from projector.connections import DatabaseAccess, KafkaAccess, connect, new_producer, start_client
from scheduler.service.default_queue import DEFAULT_QUEUE, ensure_default_queue
from scheduler.service.errors import LeadershipLost
from scheduler.service.leader import Leadership, campaign, take_office
from scheduler.service.loop import SessionLoop
from scheduler.service.metrics import observe_leadership
from scheduler.service.projection import ProjectionReader
from scheduler.service.publisher import SessionPublisher
from scheduler.service.runner import SessionRunner
from scheduler.service.settings import SchedulerSettings
from scheduler.service.telemetry import SchedulerMetrics, SubmissionTraces

__all__ = ["run_scheduler"]

log = logging.getLogger("tephra.scheduler")

#: Failures that end a term (the process stands for leadership again), not the process.
_TERM_ENDING = (
    LeadershipLost,
    KafkaError,
    OSError,
    TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.OperatorInterventionError,
)


async def run_scheduler(
    settings: SchedulerSettings,
    *,
    kafka: KafkaAccess,
    database: DatabaseAccess,
    topics: Topics,
    cluster: str,
    tracer: Tracer | None = None,
    metrics: SchedulerMetrics | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    on_leader: Callable[[int], None] | None = None,
    signer: EventSigner | None = None,
    enrol: bool | None = None,
) -> None:
    """Schedule the cluster while this process leads it; stand by while another does. Runs until cancelled.

    ``signer``: the scheduler's key and principal (``api`` loads them from
    ``TEPHRA_SCHEDULER_KEY_FILE``); the keyring must hold that key for the principal, put
    there at every term when ``enrol`` (default: ``TEPHRA_SCHEDULER_ENROL``) is true.  Without
    a signer (tests, library use), a key is made for this process and enrolled
    (:data:`scheduler.service.leader.LEADER_TYPES`).
    """
    service = _Service(
        kafka=kafka,
        database=database,
        topics=topics,
        cluster=cluster,
        holder=settings.scheduler_holder or f"{socket.gethostname()}:{os.getpid()}",
        settings=settings,
        traces=SubmissionTraces(),
        tracer=tracer or trace.get_tracer("tephra.scheduler"),
        metrics=metrics or SchedulerMetrics(),
        clock=clock,
        on_leader=on_leader,
        signer=signer or EventSigner(SigningKey.generate(), settings.scheduler_principal),
        enrol=signer is None or (settings.scheduler_enrol if enrol is None else enrol),
    )
    await service.lead()


@dataclass(frozen=True, slots=True)
class _Service:
    kafka: KafkaAccess
    database: DatabaseAccess
    topics: Topics
    cluster: str
    holder: str
    settings: SchedulerSettings
    traces: SubmissionTraces
    tracer: Tracer
    metrics: SchedulerMetrics
    clock: Callable[[], datetime]
    on_leader: Callable[[int], None] | None
    signer: EventSigner
    #: Put the signer's key in the keyring at each term (a key made for this process).
    enrol: bool

    async def lead(self) -> None:
        backoff = 0.5
        cluster = self.cluster
        while True:
            try:
                leadership = await campaign(self.database, cluster, self.holder)
            except _TERM_ENDING as exc:
                observe_leadership(None, failing=True)
                log.warning("cannot stand for leadership: %r; retrying in %.1f s", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
                continue
            backoff = 0.5
            observe_leadership(leadership.epoch, failing=False)
            if self.on_leader is not None:
                self.on_leader(leadership.epoch)
            try:
                await self.term(leadership)
            except* _TERM_ENDING as group:
                observe_leadership(None, failing=True)
                for failure in group.exceptions:
                    # Expected outages: the message says what failed; no traceback needed.
                    log.error("leadership term %d of %s ended: %s", leadership.epoch, cluster, failure)  # noqa: TRY400
                await asyncio.sleep(backoff)
            finally:
                await leadership.release()
                observe_leadership(None)

    async def term(self, leadership: Leadership) -> None:
        """One leadership: its own producer and connections, the session loop and the lock watch."""
        settings = self.settings
        producer = new_producer(
            self.kafka, acks="all", max_request_size=settings.scheduler_max_message_bytes + 64 * 1024
        )
        runner = SessionRunner(settings.session_budget)
        reader = await ProjectionReader.connect(self.database)
        records = await connect(self.database)
        try:
            await reader.wait_for_schema()
            await start_client(producer, self.kafka)
            await take_office(
                leadership,
                producer,
                records,
                topics=self.topics,
                signer=self.signer,
                now=self.clock(),
                enrol=self.enrol,
            )
            if await ensure_default_queue(
                await reader.state(), producer, self.topics, self.cluster, self.clock(), self.signer
            ):
                log.info("created Volcano's default queue in %s (weight 1, Open)", self.cluster)
                await _until_default_queue(reader)
            loop = SessionLoop(
                leadership=leadership,
                reader=reader,
                records=records,
                publisher=SessionPublisher(producer, self.topics),
                runner=runner,
                signer=self.signer,
                traces=self.traces,
                tracer=self.tracer,
                metrics=self.metrics,
                settings=settings,
                cluster=self.cluster,
                clock=self.clock,
            )
            async with asyncio.TaskGroup() as group:
                group.create_task(leadership.watch(), name="leader-watch")
                group.create_task(loop.run(), name="sessions")
        finally:
            runner.close()
            await producer.stop()
            await reader.close()
            await records.close(timeout=2)


async def _until_default_queue(reader: ProjectionReader, *, limit: float = 10.0, poll: float = 0.05) -> None:
    """Wait (bounded) until the projection holds the default queue just published, so the
    term's first session sees it, as Volcano's scheduler creates it before it schedules; a
    job of that queue would otherwise read queue-missing for a session."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + limit
    while DEFAULT_QUEUE not in (await reader.state()).queues:
        if loop.time() >= give_up:
            log.warning("the default queue is not in the projection after %.0f s; scheduling anyway", limit)
            return
        await asyncio.sleep(poll)
