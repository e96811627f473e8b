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
   in ``consumer_offsets`` — 0 when there is none;
4. loop: gather a batch (by count, or after ``projector_linger_ms``), decode and fold
   it, produce its rejections to the dead-letter topic, then commit it to
   PostgreSQL in one transaction.  Two stages overlap: while batches
   commit (up to ``COMMITS_IN_FLIGHT``, a task each on the writer's
   connection), the next batch is gathered, then decoded and folded a chunk
   at a time (handing the event loop back every ``COOPERATIVE_CHUNK``
   records, so the commits' round trips go on; the duplicate check asks
   about the batch's ids on a second connection meanwhile).  Each commit
   starts only after the one before it has ended, so commits stay in order
   and one failure ends the run before anything later is written.

Connection failures of either side end the run; the supervisor logs them,
counts a reconnect, waits with capped backoff and starts a new run.  Nothing
is lost or duplicated because progress is only what PostgreSQL committed.

A broker that lost data shows up as a fetch position out of range, a high
watermark below the stored position, or records below it: all are logged
at ERROR and counted in
``offsets_went_backwards``, and consumption restarts from the broker's
earliest offset (already archived event ids are skipped), never silently
from the stale position.  Dead-letter messages are produced before the
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
from typing import Final

import asyncpg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError, OffsetOutOfRangeError

from events.topics import Topics
from events.tracing import traceparent_of
from projector.errors import ProjectorError
from projector.heap import BatchHeap
from projector.migrate import apply_migrations
from projector.plan import id_hint
from projector.settings import ProjectorSettings
from projector.telemetry import observe_batch, observe_lag, set_connected
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


STAGES: Final = ("gather", "prepare", "check_wait", "heap", "commit_wait")


@dataclass(slots=True)
class ProjectorMetrics:
    """Counters since start-up (a metrics exporter reads these)."""

    batches: int = 0
    events_archived: int = 0
    events_rejected: int = 0
    duplicates_skipped: int = 0
    other_cluster_skipped: int = 0
    offsets_went_backwards: int = 0
    #: Full collections of the frozen heap (projector.heap), at idle moments or in batches.
    heap_thaws: int = 0
    reconnects: int = 0
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

    kafka_bootstrap: str
    database_url: str
    topics: Topics
    cluster: str


async def run_projector(
    settings: ProjectorSettings,
    *,
    kafka_bootstrap: str,
    database_url: str,
    topics: Topics,
    cluster: str,
    stop: asyncio.Event | None = None,
    metrics: ProjectorMetrics | None = None,
) -> None:
    """Run until ``stop`` is set, reconnecting after broker or database outages."""
    stop = stop or asyncio.Event()
    metrics = metrics if metrics is not None else ProjectorMetrics()
    target = _Target(kafka_bootstrap, database_url, topics, cluster)
    try:
        await _supervise(settings, target, metrics, stop)
    finally:
        _log_metrics("projector stopped; metrics", metrics)


async def _supervise(
    settings: ProjectorSettings, target: _Target, metrics: ProjectorMetrics, stop: asyncio.Event
) -> None:
    backoff = 0.2
    while not stop.is_set():
        began = time.monotonic()
        try:
            await _Run(settings, target, metrics, stop).run()
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
        self, settings: ProjectorSettings, target: _Target, metrics: ProjectorMetrics, stop: asyncio.Event
    ) -> None:
        self.settings = settings
        self.target = target
        self.consumer_name = settings.consumer_name(target.cluster)
        self.metrics = metrics
        self.stop = stop
        #: (topic, partition) -> the next offset this run expects to read.
        self.positions: dict[tuple[str, int], int] = {}
        self._last_report = time.monotonic()
        self.heap = BatchHeap(
            enabled=settings.projector_freeze,
            thaw_growth=settings.projector_thaw_growth,
            busy_thaw_growth=settings.projector_busy_thaw_growth,
        )

    async def run(self) -> None:
        settings, target = self.settings, self.target
        conn = await asyncpg.connect(target.database_url)
        query_conn: asyncpg.Connection | None = None
        try:
            await apply_migrations(conn)
            if not await self._take_writer_lock(conn):
                return
            writer = await BatchWriter.load(
                conn,
                consumer=self.consumer_name,
                cluster=target.cluster,
                snapshot_every=settings.snapshot_every,
                snapshot_scale=settings.snapshot_scale,
            )
            self.metrics.last_seq = writer.state.seq
            self.heap.loaded()
            consumer = AIOKafkaConsumer(
                bootstrap_servers=target.kafka_bootstrap,
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="none",  # an out-of-range position is reported, not skipped
                max_partition_fetch_bytes=8 * 1024 * 1024,
                fetch_max_wait_ms=settings.projector_fetch_max_wait_ms,
            )
            producer = AIOKafkaProducer(bootstrap_servers=target.kafka_bootstrap, acks="all")
            # Duplicate checks of the next batch run while the writer's connection commits.
            # Planned for its ids every time: a generic plan made while event_log was
            # small stayed a sequential scan, comparing every row with 1,000 ids
            # (seconds a query at 100k events; measured 1.1k events/s).
            query_conn = await asyncpg.connect(
                target.database_url, server_settings={"plan_cache_mode": "force_custom_plan"}
            )
            await consumer.start()
            try:
                await producer.start()
                try:
                    await self._assign(conn, consumer)
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

    async def _assign(self, conn: asyncpg.Connection, consumer: AIOKafkaConsumer) -> None:
        topics = self.target.topics
        wanted = (topics.intents, topics.observations, topics.decisions)
        await consumer.topics()  # fetch metadata
        partitions: list[TopicPartition] = []
        for topic in wanted:
            for number in sorted(consumer.partitions_for_topic(topic) or ()):
                partitions.append(TopicPartition(topic, number))
        consumer.assign(partitions)
        stored = await stored_offsets(conn, self.consumer_name)
        for tp in partitions:
            position = stored.get((tp.topic, tp.partition), 0)
            consumer.seek(tp, position)
            self.positions[(tp.topic, tp.partition)] = position
        log.info(
            "projector %s assigned %d partitions: %s",
            self.consumer_name,
            len(partitions),
            ", ".join(
                f"{tp.topic}[{tp.partition}]@{self.positions[(tp.topic, tp.partition)]}" for tp in partitions
            ),
        )

    async def _gather(self, consumer: AIOKafkaConsumer) -> list[InboundRecord]:
        batch_size, linger_ms = self.settings.projector_batch_size, self.settings.projector_linger_ms
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
                fetched = await consumer.getmany(timeout_ms=timeout_ms, max_records=batch_size - len(records))
            except OffsetOutOfRangeError as exc:
                await self._went_backwards(consumer, exc)
                continue
            for tp in sorted(fetched, key=lambda p: (p.topic, p.partition)):
                messages = fetched[tp]
                if not messages:
                    continue
                topic, partition = key = (tp.topic, tp.partition)
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
            if not fetched:
                await self._check_high_watermarks(consumer)
                if not records:
                    break  # idle: the caller finishes the commit in flight meanwhile
            if records and deadline is None:
                deadline = time.monotonic() + linger_ms / 1000
        observe_lag(consumer, self.positions)
        return records

    async def _check_high_watermarks(self, consumer: AIOKafkaConsumer) -> None:
        """A position past the partition's end means the broker lost records we consumed.

        Brokers that do not answer such a fetch with OFFSET_OUT_OF_RANGE (the
        embedded Tansu returns nothing) still report their high watermark in
        every fetch response, so compare with that.
        """
        for tp in consumer.assignment():
            highwater = consumer.highwater(tp)
            position = self.positions.get((tp.topic, tp.partition), 0)
            if highwater is not None and highwater < position:
                self.metrics.offsets_went_backwards += 1
                log.error(
                    "[PROJ-OFFSETS] %s[%d] stored position %d is beyond the broker's end %d: the broker"
                    " lost data; restarting from its earliest offset (archived event ids are skipped)",
                    tp.topic, tp.partition, position, highwater,
                )  # fmt: skip
                await consumer.seek_to_beginning(tp)
                self.positions[(tp.topic, tp.partition)] = 0

    async def _went_backwards(self, consumer: AIOKafkaConsumer, exc: OffsetOutOfRangeError) -> None:
        positions = exc.args[0] if exc.args and isinstance(exc.args[0], dict) else {}
        for tp, offset in positions.items():
            self.metrics.offsets_went_backwards += 1
            log.error(
                "[PROJ-OFFSETS] %s[%d] stored position %s is beyond the broker's log: the broker lost data;"
                " restarting from its earliest offset (archived event ids are skipped)",
                tp.topic, tp.partition, offset,
            )  # fmt: skip
            await consumer.seek_to_beginning(tp)
            self.positions[(tp.topic, tp.partition)] = 0

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
                records = await self._gather(consumer)
                if not records:
                    while commits:  # idle: let the batches in flight land (and surface a failure)
                        await commits.popleft()
                    idle = clock()
                    # A due thaw, now that nothing waits for the loop (not when stopping: the
                    # run's end thaws everything anyway).
                    if not self.stop.is_set() and self.heap.idle():
                        self.metrics.heap_thaws = self.heap.thaws
                        stages["heap"] += clock() - idle
                    continue
                gathered = clock()
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
                    conn, producer, writer, plan, began=gathered, after=commits[-1] if commits else None
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

    async def _commit(
        self,
        conn: asyncpg.Connection,
        producer: AIOKafkaProducer,
        writer: BatchWriter,
        plan: BatchPlan,
        *,
        began: float,
        after: asyncio.Task[None] | None,
    ) -> None:
        metrics = self.metrics
        if after is not None:
            await after  # raises if it failed: nothing later is written
        if plan.rejections:
            await self._dead_letter(producer, plan.rejections)
        await writer.commit(conn, plan)
        metrics.batches += 1
        metrics.events_archived += plan.archived
        metrics.events_rejected += len(plan.rejections)
        metrics.duplicates_skipped += plan.duplicates
        metrics.other_cluster_skipped += plan.foreign
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
        topic = self.target.topics.rejected
        futures = []
        for r in rejections:
            headers = [
                ("tephra-error", r.error.encode()),
                ("tephra-detail", r.detail.encode()),
                ("tephra-source", f"{r.topic}/{r.partition}/{r.offset}".encode()),
            ]
            futures.append(await producer.send(topic, value=r.raw or b"", headers=headers))
        await asyncio.gather(*futures)
