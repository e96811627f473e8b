"""The projector service: Kafka topics -> the PostgreSQL archive and projection.

One process, one writer.  :func:`run_projector` supervises *runs*; a run is
one life of the connections:

1. connect to PostgreSQL, apply the migrations (under their lock), and take
   the session-level *writer lock*: a second projector on the same database
   waits here as a hot standby;
2. rebuild the :class:`~projector.writer.BatchWriter` from the projection
   tables (so a crash or a failed batch costs nothing but the redo);
3. assign every partition of the intents, observations and decisions topics
   (no consumer group, no Kafka commits) and seek each to the offset stored
   in ``consumer_offsets`` — 0 when there is none; topics and partitions
   that appear later are found every ``projector_topics_refresh`` seconds
   (:mod:`projector.topic_watch`) and assigned the same way;
4. loop: gather a batch (by count, after ``projector_linger_ms``, or once a fetch
   brought a session's marker, which a scheduler waits for), decode and fold
   it, produce its rejections to the dead-letter topic, then commit it to
   PostgreSQL in one transaction.  Two stages overlap: while batches
   commit (up to ``COMMITS_IN_FLIGHT``, a task each on the writer's
   connection), the next batch is gathered, then decoded and folded a chunk
   at a time (handing the event loop back every ``COOPERATIVE_CHUNK``
   records, so the commits' round trips go on; the duplicate check asks
   about the batch's ids on a second connection meanwhile).  Each commit
   starts only after the one before it has ended, so commits stay in order
   and one failure ends the run before anything later is written.  After a
   commit (or while idle), a signed checkpoint of the committed chain head
   is published when one is due (:mod:`projector.checkpoints`).

Connection failures of either side end the run; the supervisor logs them,
counts a reconnect, waits with capped backoff and starts a new run.  Nothing
is lost or duplicated because progress is only what PostgreSQL committed.

A broker that lost data shows up as a fetch position out of range, a high
watermark below the stored position, records below it, or, before a
partition resumes at its stored position, another record than the one
archived from it (projector.broker_identity: a broker restarted empty whose
new log already reaches past the stored position): all are logged at ERROR
and counted in ``offsets_went_backwards``, and consumption restarts from the
broker's earliest offset (already archived event ids are skipped), never
silently from the stale position.  Dead-letter messages are produced before the
batch commits, so after a crash they may be produced twice; ``rejected_events``
holds each rejection exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Final

import asyncpg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError, MessageSizeTooLargeError, OffsetOutOfRangeError

from events.signing import SigningKey
from events.topics import Topics
from events.tracing import traceparent_of
from projector.broker_identity import IdentityCheck, Verdict, identity_check
from projector.checkpoints import CheckpointPublisher
from projector.connections import (
    DatabaseAccess,
    KafkaAccess,
    connect,
    new_consumer,
    new_producer,
    start_client,
)
from projector.door import ConfigCheck, Door, Position, short
from projector.errors import BatchFailedError, ProjectorError, RecordFailedError
from projector.heap import BatchHeap
from projector.keyring import load_keyring
from projector.migrate import require_schema
from projector.plan import id_hint, session_marker_hint
from projector.read_pacing import ReadPacer
from projector.settings import ProjectorSettings, parse_positions
from projector.telemetry import observe_batch, observe_lag, set_connected
from projector.topic_watch import TopicWatch
from projector.trust import Trust
from projector.writer import (
    BatchPlan,
    BatchWriter,
    Decoded,
    InboundRecord,
    Rejection,
    stored_offsets,
)

__all__ = ["WRITER_LOCK", "ProjectorMetrics", "run_projector"]

log = logging.getLogger("projector")

#: Session-level advisory lock held by the active projector of a database.
WRITER_LOCK: Final = 0x7E_9A_0002
#: Records decoded and folded between two hand-backs of the event loop (~1-1.5 ms
#: of CPU).  Every round trip of the commit in flight (about twenty: a COPY takes
#: two) waits for the next hand-back to go on: with 500 records per chunk (~40 ms)
#: the commit outlasted the fold and the loop waited for it for a quarter of the
#: run (100k events: 10.1k events/s; 64 records: 12.8-13.1k).  Once the fold got
#: faster, commits at 64 records took about as long as folds (150-270 ms a batch);
#: 32 cut the loop's wait for them from 0.30-0.36 s to 0.07-0.17 s per 100k
#: events (alternated, docs/projector.md).
COOPERATIVE_CHUNK: Final = 32
#: Batches prepared and waiting for (or in) their commit.  The fold of the next
#: batch waits only when this many are.  Two absorb a slow commit (a snapshot,
#: PostgreSQL sharing the cores) with the next fast one.
COMMITS_IN_FLIGHT: Final = 2
_RETRIABLE_DB: Final = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.OperatorInterventionError,  # admin shutdown, crash shutdown
    # A connection lost mid-statement can leave asyncpg's protocol consuming the error
    # when the transaction's ROLLBACK starts ("cannot switch to state 15; another
    # operation (2) is in progress"): that error replaced the outage's own, was not
    # retried, and ended the projector (seen under load in the dropped-connections test).
    asyncpg.exceptions.InternalClientError,
)


#: PostgreSQL errors one record's values cause (the same bytes fail the same way):
#: class 22 (data: a value out of range, untranslatable text), 23 (integrity), 54
#: (program limit: an index row too large).  A batch that fails with one is redone a
#: record at a time and the record that fails alone is rejected (``unstorable``).
_RECORD_STORAGE_ERRORS: Final = (
    asyncpg.exceptions.DataError,
    asyncpg.exceptions.IntegrityConstraintViolationError,
    asyncpg.exceptions.ProgramLimitExceededError,
    OverflowError,
)
#: The dead-letter producer's request limit, set deliberately (aiokafka's default, and
#: within the default message.max.bytes of Kafka brokers): a rejected record's body is
#: cut to :data:`DEAD_LETTER_BODY_BYTES` so that any record fits with its headers.
DEAD_LETTER_MAX_BYTES: Final = 1_048_576
DEAD_LETTER_BODY_BYTES: Final = 900 * 1024

STAGES: Final = ("gather", "prepare", "check_wait", "heap", "commit_wait")


@dataclass(slots=True)
class ProjectorMetrics:
    """Counters since start-up (a metrics exporter reads these)."""

    batches: int = 0
    events_archived: int = 0
    events_rejected: int = 0
    duplicates_skipped: int = 0
    offsets_went_backwards: int = 0
    #: Partitions held back for being read too far ahead of the others (projector.read_pacing).
    partitions_held_back: int = 0
    #: Full collections of the frozen heap (projector.heap), at idle moments or in batches.
    heap_thaws: int = 0
    reconnects: int = 0
    #: Signed checkpoints of the chain published (projector.checkpoints).
    checkpoints_published: int = 0
    #: Records refused by their position after they failed the fold or storage (a redo each).
    records_isolated: int = 0
    last_seq: int = 0
    last_batch_seconds: float = 0.0
    #: The newest batch latencies (decode, fold, dead-letter, commit), seconds.
    batch_seconds: deque[float] = field(default_factory=lambda: deque(maxlen=10_000))
    #: Wall seconds of the batch loop by stage: gather (Kafka), prepare (decode,
    #: fold and plan, with the commits in flight running in its hand-backs),
    #: check_wait (the part of prepare spent waiting for the duplicate check's
    #: event_log queries), heap (freezing the batch's survivors, and the thaws: see
    #: projector.heap), and commit_wait (waiting for the previous batch's commit to end).
    stage_seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))


@dataclass(frozen=True, slots=True)
class _Target:
    """Where the projector reads and writes (resolved by ``api``: an external stack or the embedded one)."""

    kafka: KafkaAccess
    database: DatabaseAccess
    topics: Topics
    cluster: str
    #: The scheduler's configuration check (projector.door), given by api.
    config_check: ConfigCheck | None = None
    #: The key that signs the chain's checkpoints (projector.checkpoints); None: none are published.
    checkpoint_key: SigningKey | None = None


async def run_projector(
    settings: ProjectorSettings,
    *,
    kafka: KafkaAccess,
    database: DatabaseAccess,
    topics: Topics,
    cluster: str,
    stop: asyncio.Event | None = None,
    metrics: ProjectorMetrics | None = None,
    config_check: ConfigCheck | None = None,
    checkpoint_key: SigningKey | None = None,
) -> None:
    """Run until ``stop`` is set, reconnecting after broker or database outages.

    ``config_check`` says what makes a scheduler configuration unusable (the
    scheduler's ``config_problem``): such a SchedulerConfigured is rejected.
    ``checkpoint_key`` signs the checkpoints of the chain published to the
    checkpoint topic (projector.checkpoints); without one none are published.
    """
    stop = stop or asyncio.Event()
    metrics = metrics if metrics is not None else ProjectorMetrics()
    target = _Target(kafka, database, topics, cluster, config_check, checkpoint_key)
    if checkpoint_key is None:
        log.warning("no projector key: no checkpoints of the chain are published (TEPHRA_PROJECTOR_KEY_FILE)")
    try:
        await _supervise(settings, target, metrics, stop)
    finally:
        _log_metrics("projector stopped; metrics", metrics)


async def _supervise(
    settings: ProjectorSettings, target: _Target, metrics: ProjectorMetrics, stop: asyncio.Event
) -> None:
    backoff = 0.2
    # Records refused by position (projector.door), and the batch being redone a record at a
    # time: both outlive a run, as the failures they answer end the run.
    refused: dict[Position, tuple[str, str]] = {}
    for position in parse_positions(settings.skip_record):
        refused[position] = ("skipped-by-operator", "skipped by the operator (TEPHRA_SKIP_RECORD)")
        log.warning(
            "[PROJ-SKIP] the record at %s[%d]@%d will be rejected unread (skipped-by-operator)", *position
        )
    isolating: dict[tuple[str, int], int] = {}
    while not stop.is_set():
        began = time.monotonic()
        try:
            await _Run(settings, target, metrics, stop, refused=refused, isolating=isolating).run()
        except RecordFailedError as exc:
            # One record failed: redo at once without it (the writer reloads from the database).
            metrics.records_isolated += 1
            refused[exc.position] = (exc.code, short(exc.detail))
            log.exception("rejecting that record and redoing its batch")
        except BatchFailedError as exc:
            if len(exc.positions) == 1:
                metrics.records_isolated += 1
                refused[exc.positions[0]] = (exc.code, short(exc.detail))
                log.exception("rejecting that record and redoing its batch")
            else:
                for topic, partition, offset in exc.positions:
                    key = (topic, partition)
                    isolating[key] = max(isolating.get(key, 0), offset + 1)
                log.exception("redoing those records one per batch to find the one to reject")
        except (*_RETRIABLE_DB, KafkaError, ProjectorError) as exc:
            if isinstance(exc, ProjectorError) and not exc.retriable:
                raise
            if isinstance(exc, KafkaError) and not exc.retriable and not isinstance(exc, OSError):
                log.warning("kafka error %r treated as an outage", exc)
            metrics.reconnects += 1
            if time.monotonic() - began > 30:
                backoff = 0.2  # the last run was healthy: retry quickly
            log.warning("projector run ended: %r; reconnecting in %.1f s", exc, backoff)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(
                    backoff
                ):  # not wait_for, which on 3.11 can swallow our cancellation
                    await stop.wait()
            backoff = min(backoff * 2, settings.projector_max_backoff)


def _log_metrics(what: str, metrics: ProjectorMetrics) -> None:
    """One log line of the counters, as JSON (the newest batch latencies as p50, p99 and max)."""
    summary: dict[str, object] = {k: v for k, v in asdict(metrics).items() if k != "batch_seconds"}
    if metrics.batch_seconds:
        ordered = sorted(metrics.batch_seconds)
        summary["batch_seconds_p50_p99_max"] = [ordered[int(q * (len(ordered) - 1))] for q in (0.5, 0.99, 1)]
    log.info("%s %s", what, json.dumps(summary))


#: The ``application_name`` of the projector's two connections (``pg_stat_activity`` tells
#: them apart): the writer's, which commits the batches, and the one that asks ahead of it
#: (duplicate checks, keyring, stored offsets).
WRITER_APPLICATION: Final = "tephra-projector"
CHECK_APPLICATION: Final = "tephra-projector-check"

#: Records whose ids the duplicate check asks about in one query: the first
#: query is small, so the batch's first chunk folds soon after it arrives.
_CHECK_FIRST: Final = 256
_CHECK_EVERY: Final = 1_000


class _DuplicateCheck:
    """Which of a batch's events are archived already, asked before the batch decodes.

    The batch is folded a chunk at a time as it decodes
    (``BatchWriter.prepare_streaming``), so the ids must be known before the
    events are: each record's id is read off its bytes (``plan.id_hint``) and
    the hinted ids go to ``event_log`` in slices (``_CHECK_FIRST`` records,
    then ``_CHECK_EVERY``), one query at a time on the duplicate check's own
    connection, while the batch folds.  A chunk waits only for the slice that
    covers it: after the first, the queries run ahead of the fold.  An event
    whose decoded id is not its hint (an encoder with other key order or
    escapes) is asked about on its own, once the slices are done (a
    connection runs one query at a time).  Call :meth:`close` when the batch
    is over, also when it failed.
    """

    def __init__(
        self, writer: BatchWriter, conn: asyncpg.Connection, records: Sequence[InboundRecord]
    ) -> None:
        self._writer = writer
        self._conn = conn
        self._hints = [id_hint(record.value) for record in records]
        #: Archived ids among the batch's (more may be added; never one that is not archived).
        self.found: set[str] = set()
        #: Seconds the fold waited for queries.
        self.waited = 0.0
        # (end of the slice, its query): each query awaits the one before it.
        self._slices: list[tuple[int, asyncio.Task[None]]] = []
        previous: asyncio.Task[None] | None = None
        start, size = 0, _CHECK_FIRST
        while start < len(records):
            end = min(start + size, len(records))
            previous = asyncio.create_task(self._ask(previous, self._hints[start:end]))
            self._slices.append((end, previous))
            start, size = end, _CHECK_EVERY

    async def _ask(self, previous: asyncio.Task[None] | None, hints: list[str | None]) -> None:
        if previous is not None:
            await previous
        ids = [hint for hint in hints if hint is not None]
        if ids:
            self.found |= await self._writer.archived_among(self._conn, ids)

    async def __call__(self, start: int, decoded: list[Decoded]) -> set[str]:
        """The archived ids among ``decoded`` (the batch's records from ``start`` on)."""
        began = time.perf_counter()
        end = start + len(decoded)
        for slice_end, query in self._slices:
            if slice_end >= end:  # the queries run in order: this one's end means all before it ended
                await query
                break
        hints = self._hints
        unhinted = [
            item.id
            for index, (_, item) in enumerate(decoded, start)
            if not isinstance(item, Rejection) and item.id != hints[index]
        ]
        if unhinted:
            if self._slices:
                await self._slices[-1][1]
            self.found |= await self._writer.archived_among(self._conn, unhinted)
        self.waited += time.perf_counter() - began
        return self.found

    async def close(self) -> None:
        """End the queries still running (a failing batch); retrieve every query's error."""
        queries = [query for _, query in self._slices]
        if any(not query.done() for query in queries):
            # The run is failing (a batch that folded whole has awaited every slice).
            _drop_before_cancelling(self._conn)
        for query in queries:
            query.cancel()
        if queries:
            await asyncio.wait(queries)
        for query in queries:
            if not query.cancelled():
                query.exception()  # retrieved (not logged as lost): the batch's own error is what counts


def _drop_before_cancelling(conn: asyncpg.Connection) -> None:
    """Drop ``conn`` so that cancelling the tasks running its statements sends no cancel request.

    Cancelling an asyncpg statement in progress sends PostgreSQL a CancelRequest
    over a new connection, under ``sslmode=prefer`` after a TLS negotiation.  When
    the server is going away (an outage: the case where a run ends with statements
    in flight) that connection is lost mid-negotiation, and asyncpg leaves the
    error in a future nobody reads: "Future exception was never retrieved:
    ConnectionError('unexpected connection_lost() call')", from
    ``connect_utils.TLSUpgradeProto``.  Dropped first, the statements fail at once
    with the connection's error and nothing is sent; the server rolls back what a
    dropped connection had begun, as a cancel would have.
    """
    conn.terminate()


async def _close(conn: asyncpg.Connection | None) -> None:
    """Close one of a run's connections; drop it when closing fails.

    Each independently and never raising: a failed close of the duplicate
    check's connection used to skip closing the writer's.  Nothing closed that
    one then but the garbage collector (a connection and its protocol refer to
    each other; frozen, in ``tephra projector``, it is never collected), and
    meanwhile it held the writer lock: the next run stood by
    (``test_a_connection_that_fails_to_close_leaves_no_writer_lock_behind``
    waited in vain for 60 s).
    """
    if conn is None:
        return
    try:
        await conn.close(timeout=5)
    except _RETRIABLE_DB as exc:  # a timeout included (an OSError)
        log.warning("closing a connection of the ended run failed (%r): dropping it", exc)
        conn.terminate()


class _Run:
    """One life of the database connection, the consumer and the producer."""

    def __init__(
        self,
        settings: ProjectorSettings,
        target: _Target,
        metrics: ProjectorMetrics,
        stop: asyncio.Event,
        *,
        refused: dict[Position, tuple[str, str]] | None = None,
        isolating: dict[tuple[str, int], int] | None = None,
    ) -> None:
        self.settings = settings
        self.door = Door(
            max_record_bytes=settings.max_record_bytes,
            max_replicas_per_task=settings.max_replicas_per_task,
            max_tasks_per_job=settings.max_tasks_per_job,
            refused=refused if refused is not None else {},
            config_check=target.config_check,
            trust=Trust(
                unsigned_intents=bool(settings.allow_unsigned_intents),
                unsigned_observations=bool(settings.allow_unsigned_observations),
                leaderless_sessions=settings.allow_leaderless_sessions,
            ),
        )
        #: (topic, partition) -> the offset below which records are committed one per batch.
        self.isolating = isolating if isolating is not None else {}
        self.target = target
        self.consumer_name = settings.consumer_name(target.cluster)
        self.metrics = metrics
        self.stop = stop
        #: (topic, partition) -> the next offset this run expects to read.
        self.positions: dict[tuple[str, int], int] = {}
        #: Partitions resumed at a stored position whose first record read must be the one archived
        #: from it (projector.broker_identity): (topic, partition) -> the check.
        self.identity: dict[tuple[str, int], IdentityCheck] = {}
        self._assigned = False
        self.watch = TopicWatch(
            target.kafka,
            (target.topics.intents, target.topics.observations, target.topics.decisions),
            who=f"projector {self.consumer_name}",
            every=settings.projector_topics_refresh,
        )
        topics = target.topics
        in_role_order = (topics.intents, topics.observations, topics.decisions)  # projector.state.ROLES
        self.pacer = ReadPacer(
            {topic: role for role, topic in enumerate(in_role_order)},
            timedelta(seconds=settings.projector_max_read_skew),
        )
        self._last_report = time.monotonic()
        self.checkpoints: CheckpointPublisher | None = None
        self.heap = BatchHeap(
            enabled=settings.projector_freeze,
            thaw_growth=settings.projector_thaw_growth,
            busy_thaw_growth=settings.projector_busy_thaw_growth,
        )

    async def run(self) -> None:
        settings, target = self.settings, self.target
        conn = await connect(target.database, server_settings={"application_name": WRITER_APPLICATION})
        query_conn: asyncpg.Connection | None = None
        try:
            await require_schema(conn)
            if not await self._take_writer_lock(conn):
                return
            writer = await BatchWriter.load(
                conn,
                consumer=self.consumer_name,
                cluster=target.cluster,
                snapshot_every=settings.snapshot_every,
                snapshot_scale=settings.snapshot_scale,
                topics=target.topics,
                door=self.door,
            )
            self.metrics.last_seq = writer.state.seq
            self.checkpoints = await self._checkpoint_publisher(conn)
            self.heap.loaded()
            consumer = new_consumer(
                target.kafka,
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="none",  # an out-of-range position is reported, not skipped
                max_partition_fetch_bytes=8 * 1024 * 1024,
                fetch_max_wait_ms=settings.projector_fetch_max_wait_ms,
            )
            producer = new_producer(target.kafka, acks="all", max_request_size=DEAD_LETTER_MAX_BYTES)
            # Duplicate checks of the next batch run while the writer's connection commits.
            # Planned for its ids every time: a generic plan made while event_log was
            # small stayed a sequential scan, comparing every row with 1,000 ids
            # (seconds a query at 100k events; measured 1.1k events/s).
            query_conn = await connect(
                target.database,
                server_settings={
                    "plan_cache_mode": "force_custom_plan",
                    "application_name": CHECK_APPLICATION,
                },
            )
            await start_client(consumer, target.kafka)
            try:
                await start_client(producer, target.kafka)
                try:
                    async with self.watch:
                        await self._assign(conn, consumer, await self.watch.partitions())
                        set_connected(True)
                        await self._consume(conn, query_conn, consumer, producer, writer)
                finally:
                    set_connected(False)
                    await producer.stop()
            finally:
                await consumer.stop()
        finally:
            try:
                await _close(query_conn)
                await _close(conn)
            finally:
                self.heap.thaw()  # what this run froze (its state, once the run is over) is collectable again

    async def _checkpoint_publisher(self, conn: asyncpg.Connection) -> CheckpointPublisher | None:
        key = self.target.checkpoint_key
        if key is None:
            return None
        return await CheckpointPublisher.load(
            conn,
            key,
            cluster=self.target.cluster,
            topic=self.target.topics.checkpoints,
            every_events=self.settings.checkpoint_every_events,
            every_seconds=self.settings.checkpoint_every_seconds,
        )

    async def _checkpoint(
        self, conn: asyncpg.Connection, producer: AIOKafkaProducer, writer: BatchWriter
    ) -> None:
        """Publish a checkpoint of what is committed, when one is due (never of a batch in flight)."""
        publisher = self.checkpoints
        if publisher is not None and publisher.due(writer.committed_seq):
            await publisher.publish(conn, producer, writer.committed_seq, writer.last_hash)
            self.metrics.checkpoints_published += 1

    async def _take_writer_lock(self, conn: asyncpg.Connection) -> bool:
        waiting_logged = False
        while not self.stop.is_set():
            if await conn.fetchval("SELECT pg_try_advisory_lock($1)", WRITER_LOCK):
                return True
            if not waiting_logged:
                log.info("another projector holds the writer lock; standing by")
                waiting_logged = True
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self.stop.wait()
        return False

    async def _assign(
        self, conn: asyncpg.Connection, consumer: AIOKafkaConsumer, found: Sequence[TopicPartition]
    ) -> None:
        """Assign ``found`` besides the partitions assigned already; the new ones from their stored offsets.

        Assigning anew resets every position in the client, so each partition
        is sought again: the assigned ones to the next offset this run expects.
        The first call assigns even when nothing is found: a consumer never
        assigned waits in ``getmany`` for an assignment, past its timeout.
        """
        if not found and self._assigned:
            return
        self._assigned = True
        stored = await stored_offsets(conn, self.consumer_name)
        for tp in found:
            key = (tp.topic, tp.partition)
            if key in self.positions:
                continue
            position = stored.get(key, 0)
            check = await identity_check(conn, tp.topic, tp.partition, position)
            if check is not None:  # read the newest archived record first: is it still there?
                self.identity[key] = check
                position = check.offset
            self.positions[key] = position
        partitions = [TopicPartition(topic, partition) for topic, partition in sorted(self.positions)]
        consumer.assign(partitions)
        for tp in partitions:
            consumer.seek(tp, self.positions[(tp.topic, tp.partition)])
        if found:
            log.info(
                "projector %s assigned %d partitions: %s",
                self.consumer_name,
                len(partitions),
                ", ".join(
                    f"{tp.topic}[{tp.partition}]@{self.positions[tp.topic, tp.partition]}" for tp in found
                ),
            )

    def _isolating(self) -> bool:
        """Whether a failed batch is being redone a record at a time (until its records are past)."""
        isolating = self.isolating
        for key in [key for key, end in isolating.items() if self.positions.get(key, 0) >= end]:
            del isolating[key]
        return bool(isolating)

    async def _gather(
        self, offsets: asyncpg.Connection, consumer: AIOKafkaConsumer, writer: BatchWriter
    ) -> list[InboundRecord]:
        batch_size, linger_ms = self.settings.projector_batch_size, self.settings.projector_linger_ms
        if self._isolating():
            batch_size, linger_ms = 1, 0
        # Topics or partitions that appeared (the writer's connection may be committing: ask on the other).
        await self._assign(offsets, consumer, await self.watch.new_partitions(consumer.assignment()))
        # The topics in step (the fold's role clocks include the batches still committing).
        readable = self.pacer.readable(consumer, self.positions, writer.state.role_clocks)
        self.metrics.partitions_held_back = self.pacer.held_back
        decisions = self.target.topics.decisions
        records: list[InboundRecord] = []
        deadline: float | None = None
        while len(records) < batch_size and not self.stop.is_set():
            if deadline is None:
                timeout_ms = 200
            else:
                timeout_ms = int((deadline - time.monotonic()) * 1000)
                if timeout_ms <= 0:
                    break
            try:
                fetched = await consumer.getmany(
                    *readable, timeout_ms=timeout_ms, max_records=batch_size - len(records)
                )
            except OffsetOutOfRangeError as exc:
                await self._went_backwards(consumer, exc)
                continue
            taken = await self._take(consumer, fetched)
            records += taken
            if not fetched:
                await self._check_high_watermarks(consumer)
                if not records:
                    break  # idle: the caller finishes the commit in flight meanwhile
            if any(r.topic == decisions and session_marker_hint(r.value) for r in taken):
                # A scheduler waits for this session to be applied before its next one, and
                # its parts came before it: lingering for more records would only delay it.
                break
            if records and deadline is None:
                deadline = time.monotonic() + linger_ms / 1000
        observe_lag(consumer, self.positions)
        return records

    async def _take(
        self, consumer: AIOKafkaConsumer, fetched: dict[TopicPartition, list[ConsumerRecord]]
    ) -> list[InboundRecord]:
        """The records of one fetch to project, positions moved past them, in partition order."""
        records: list[InboundRecord] = []
        for tp in sorted(fetched, key=lambda p: (p.topic, p.partition)):
            messages = fetched[tp]
            if not messages:
                continue
            topic, partition = key = (tp.topic, tp.partition)
            if key in self.identity:
                await self._check_identity(consumer, tp, self.identity.pop(key), messages[0])
                continue  # what this fetch read was consumed already, or is read again
            expected = self.positions.get(key, 0)
            # A partition's offsets only increase: checking the first message checks them all.
            if messages[0].offset < expected:
                self.metrics.offsets_went_backwards += 1
                log.error(
                    "[PROJ-OFFSETS] %s[%d] delivered offset %d below the stored position %d:"
                    " the broker lost data; consuming what it has now",
                    topic, partition, messages[0].offset, expected,
                )  # fmt: skip
            self.positions[key] = messages[-1].offset + 1
            records += [
                InboundRecord(topic, partition, m.offset, m.value, traceparent_of(m.headers))
                for m in messages
            ]
        return records

    async def _check_high_watermarks(self, consumer: AIOKafkaConsumer) -> None:
        """A position past the partition's end means the broker lost records we consumed.

        Brokers that do not answer such a fetch with OFFSET_OUT_OF_RANGE (the
        embedded Tansu returns nothing) still report their high watermark in
        every fetch response, so compare with that.
        """
        for tp in consumer.assignment():
            highwater = consumer.highwater(tp)
            key = (tp.topic, tp.partition)
            position = self.positions.get(key, 0)
            check = self.identity.get(key)
            if highwater is None:
                continue
            if check is not None and check.ended_before(highwater):
                del self.identity[key]
                await self._lost(consumer, tp, f"no longer holds offset {check.offset} ({check.event_id})")
            elif highwater < position:
                await self._lost(
                    consumer, tp, f"stored position {position} is beyond the broker's end {highwater}"
                )

    async def _check_identity(
        self, consumer: AIOKafkaConsumer, tp: TopicPartition, check: IdentityCheck, first: ConsumerRecord
    ) -> None:
        """Resume at the stored position if the partition is the log it was; else read it from its start."""
        verdict = check.verdict(first.offset, first.value)
        if verdict is Verdict.LOST:
            await self._lost(
                consumer, tp, f"holds another record at offset {check.offset} than {check.event_id}"
            )
            return
        if verdict is Verdict.UNKNOWN:
            log.info(
                "%s[%d] starts past offset %d (retention): resuming at the stored position %d unchecked",
                tp.topic, tp.partition, check.offset, check.resume,
            )  # fmt: skip
        consumer.seek(tp, check.resume)
        self.positions[(tp.topic, tp.partition)] = check.resume

    async def _lost(self, consumer: AIOKafkaConsumer, tp: TopicPartition, what: str) -> None:
        self.metrics.offsets_went_backwards += 1
        log.error(
            "[PROJ-OFFSETS] %s[%d] %s: the broker lost its data (a new log under the same name);"
            " restarting from its earliest offset (archived event ids are skipped)",
            tp.topic, tp.partition, what,
        )  # fmt: skip
        await consumer.seek_to_beginning(tp)
        self.positions[(tp.topic, tp.partition)] = 0

    async def _went_backwards(self, consumer: AIOKafkaConsumer, exc: OffsetOutOfRangeError) -> None:
        positions = exc.args[0] if exc.args and isinstance(exc.args[0], dict) else {}
        for tp, offset in positions.items():
            self.identity.pop((tp.topic, tp.partition), None)
            await self._lost(consumer, tp, f"stored position {offset} is beyond the broker's log")

    async def _consume(
        self,
        conn: asyncpg.Connection,
        query_conn: asyncpg.Connection,
        consumer: AIOKafkaConsumer,
        producer: AIOKafkaProducer,
        writer: BatchWriter,
    ) -> None:
        # Commit tasks, oldest first; each awaits the one before it, so commits stay
        # in order and a failure ends the run before anything later is written.
        commits: deque[asyncio.Task[None]] = deque()
        stages = self.metrics.stage_seconds
        clock = time.perf_counter
        try:
            while not self.stop.is_set():
                began = clock()
                records = await self._gather(query_conn, consumer, writer)
                if not records:
                    while commits:  # idle: let the batches in flight land (and surface a failure)
                        await commits.popleft()
                    await self._checkpoint(conn, producer, writer)  # every commit has landed
                    idle = clock()
                    # A due thaw, now that nothing waits for the loop (not when stopping: the
                    # run's end thaws everything anyway).
                    if not self.stop.is_set() and self.heap.idle():
                        self.metrics.heap_thaws = self.heap.thaws
                        stages["heap"] += clock() - idle
                    continue
                gathered = clock()
                # Before the poisoned check: from there to prepare, nothing may await (a commit in
                # flight that fails meanwhile would poison the writer under prepare).
                await self._read_keyring(query_conn)
                if writer.poisoned:
                    # A commit in flight failed, which poisons the writer: end the run with
                    # that commit's error (an outage, retried).  Preparing would end it with
                    # the writer's refusal, which is not retried: the projector stopped for
                    # good (seen in the dropped-connections test).
                    while commits:
                        await commits.popleft()
                with self.heap.batch():
                    check = _DuplicateCheck(writer, query_conn, records)
                    try:
                        plan = await writer.prepare_streaming(records, check, chunk=COOPERATIVE_CHUNK)
                    finally:
                        await check.close()
                    prepared = clock()
                frozen = clock()
                self.metrics.heap_thaws = self.heap.thaws
                while len(commits) >= COMMITS_IN_FLIGHT:
                    await commits.popleft()
                stages["gather"] += gathered - began
                stages["prepare"] += prepared - gathered
                stages["check_wait"] += check.waited
                stages["heap"] += frozen - prepared
                stages["commit_wait"] += clock() - frozen
                commit = self._commit(
                    conn,
                    producer,
                    writer,
                    plan,
                    records,
                    began=gathered,
                    after=commits[-1] if commits else None,
                )
                commits.append(asyncio.create_task(commit))
            while commits:
                await commits.popleft()
        finally:
            if commits:  # the run is failing: drop the batches in flight, they are redone
                _drop_before_cancelling(conn)
                for task in commits:
                    task.cancel()
                await asyncio.gather(*commits, return_exceptions=True)

    async def _read_keyring(self, conn: asyncpg.Connection) -> None:
        """Read the keyring before each batch: a producer added is trusted from the next record on."""
        trust = self.door.trust
        if trust is not None:
            trust.keyring = await load_keyring(conn)

    async def _commit(
        self,
        conn: asyncpg.Connection,
        producer: AIOKafkaProducer,
        writer: BatchWriter,
        plan: BatchPlan,
        records: Sequence[InboundRecord],
        *,
        began: float,
        after: asyncio.Task[None] | None,
    ) -> None:
        metrics = self.metrics
        if after is not None:
            await after  # raises if it failed: nothing later is written
        await writer.settle(conn, plan)  # its id conflicts join the rejections to dead-letter
        if plan.rejections:
            await self._dead_letter(producer, plan.rejections)
        try:
            await writer.commit(conn, plan)
        except _RETRIABLE_DB:
            raise  # an outage (some are DataError's kin in asyncpg's tree: checked first)
        except _RECORD_STORAGE_ERRORS as exc:
            positions = [(r.topic, r.partition, r.offset) for r in records]
            raise BatchFailedError(positions, "unstorable", f"PostgreSQL refused the batch: {exc!r}") from exc
        await self._checkpoint(conn, producer, writer)  # the batch is committed; the next waits for us
        metrics.batches += 1
        metrics.events_archived += plan.archived
        metrics.events_rejected += len(plan.rejections)
        metrics.duplicates_skipped += plan.duplicates
        metrics.last_seq = plan.last_seq
        metrics.last_batch_seconds = time.perf_counter() - began
        metrics.batch_seconds.append(metrics.last_batch_seconds)
        observe_batch(plan, metrics.last_batch_seconds, [r.error for r in plan.rejections])
        for rejection in plan.rejections:
            log.warning(
                "rejected %s[%d]@%d: %s: %s",
                rejection.topic, rejection.partition, rejection.offset, rejection.error, rejection.detail,
            )  # fmt: skip
        if time.monotonic() - self._last_report >= self.settings.projector_metrics_period:
            self._last_report = time.monotonic()
            _log_metrics("projector metrics", metrics)

    async def _dead_letter(self, producer: AIOKafkaProducer, rejections: Sequence[Rejection]) -> None:
        """Produce the rejections to the dead-letter topic: the reference and the body, cut to fit.

        A message the broker refuses for its size is sent again with the reference
        alone, never treated as an outage (``rejected_events`` keeps what the record
        held either way).
        """
        topic = self.target.topics.rejected
        sent = []
        for r in rejections:
            body = r.raw or b""
            headers = _dead_letter_headers(r, len(body))
            if len(body) > DEAD_LETTER_BODY_BYTES:
                body = body[:DEAD_LETTER_BODY_BYTES]
            sent.append((r, await self._send_or_reference(producer, topic, r, body, headers)))
        for r, future in sent:
            if future is None:
                continue
            try:
                await future
            except MessageSizeTooLargeError:
                await self._send_reference(producer, topic, r)

    async def _send_or_reference(
        self,
        producer: AIOKafkaProducer,
        topic: str,
        r: Rejection,
        body: bytes,
        headers: list[tuple[str, bytes]],
    ) -> asyncio.Future[object] | None:
        try:
            future: asyncio.Future[object] = await producer.send(topic, value=body, headers=headers)
        except MessageSizeTooLargeError:
            await self._send_reference(producer, topic, r)
            return None
        return future

    async def _send_reference(self, producer: AIOKafkaProducer, topic: str, r: Rejection) -> None:
        """The rejection's reference alone (no body), for a broker whose limit is below ours."""
        log.warning(
            "dead-letter message for %s[%d]@%d is over the broker's limit: sending its reference alone",
            r.topic, r.partition, r.offset,
        )  # fmt: skip
        headers = _dead_letter_headers(r, len(r.raw or b""))
        try:
            await (await producer.send(topic, value=b"", headers=headers))
        except MessageSizeTooLargeError:
            log.exception(
                "dead-letter reference for %s[%d]@%d refused for its size: kept in rejected_events only",
                r.topic, r.partition, r.offset,
            )  # fmt: skip


def _dead_letter_headers(r: Rejection, size: int) -> list[tuple[str, bytes]]:
    """Where the rejected record is (topic/partition/offset), its id, why, and its size in bytes."""
    headers = [
        ("tephra-error", r.error.encode()),
        ("tephra-detail", short(r.detail, 1_000).encode()),
        ("tephra-source", f"{r.topic}/{r.partition}/{r.offset}".encode()),
        ("tephra-size", str(size).encode()),
    ]
    if r.event_id is not None:
        headers.append(("tephra-event-id", r.event_id.encode()))
    if size > DEAD_LETTER_BODY_BYTES:
        headers.append(("tephra-truncated", str(DEAD_LETTER_BODY_BYTES).encode()))
    return headers
