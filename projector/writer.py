"""The batch writer: one batch of Kafka records -> one PostgreSQL transaction.

For each batch, in this order:

1. :func:`~projector.plan.decode_batch` — bytes to events; what does not
   decode becomes a :class:`~projector.plan.Rejection` with the decoder's
   stable code.
2. :meth:`BatchWriter.prepare` — set aside events already archived (same id:
   a producer retry or a redelivery); reject events of other clusters
   (``unknown-cluster``) and on another topic than their type's
   (``wrong-topic``); fold the rest into the in-memory state with the pure
   fold, assigning seqs and chaining hashes; events the fold refuses become
   Rejections.  Then build every value
   the commit will write (archive rows, projection statements, meta columns,
   the snapshot document).  Pure CPU, no I/O: :mod:`projector.plan` does the
   work, compiled; this module owns the state and the I/O.
3. :meth:`BatchWriter.settle` — once the batches before it have committed:
   an event set aside whose content differs from the archived one with its id
   becomes an ``id-conflict`` rejection (the first stays).  Then the service
   produces the rejections to the dead-letter topic, never inside the
   transaction.
4. :meth:`BatchWriter.commit` — one transaction: guard the projection's seq
   (a second writer would be caught here), COPY into ``event_log``, the
   rejections, the projection rows, the consumer offsets, a snapshot every
   ``snapshot_every`` events or more (:func:`~projector.plan.snapshot_due`),
   and a NOTIFY for read-your-writes waiters.
   Only I/O: it reads nothing from the state.

The service decodes and folds a batch a chunk at a time
(:meth:`BatchWriter.prepare_streaming`): each chunk is folded as soon as it
is decoded and dropped after, so a batch's events are never all alive at
once (see the method).

Because a plan carries its values, batches can be pipelined: the service
prepares batch N+1 (the state runs ahead) while batch N commits.  Plans must
be committed in the order they were prepared, and batches that are prepared
but not committed count as archived for duplicate detection
(:meth:`BatchWriter.archived_ids`).  If ``prepare`` or ``commit`` raises,
the writer is *poisoned* and must be rebuilt from the database
(:meth:`BatchWriter.load`); the service does so on every reconnect.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Final

import asyncpg
import orjson

from events.canonical import GENESIS_HASH, format_time
from events.topics import Topics
from projector.archive import columns_canonical, row_canonical
from projector.door import Door
from projector.errors import BatchFailedError, ProjectionDriftError
from projector.newest_pending import NewestPendingRows
from projector.plan import (
    BatchPlan,
    Decoded,
    InboundRecord,
    Rejection,
    Repeat,
    decode_batch,
    finish_plan,
    fold_records,
)
from projector.projection import create_staging, execute_writes, load_projection
from projector.reconstruct import rebuild_projection
from projector.snapshots import write_snapshot
from projector.state import ClusterState

# BatchPlan, Decoded, InboundRecord, Rejection and decode_batch live in projector.plan
# (compiled); they stay importable here, where the service and the tests import them.
__all__ = [
    "NOTIFY_CHANNEL",
    "ArchivedCheck",
    "BatchPlan",
    "BatchWriter",
    "Decoded",
    "InboundRecord",
    "Rejection",
    "check_snapshot_spacing",
    "decode_batch",
]

log = logging.getLogger(__name__)

#: ``check(start, decoded)``: the ids among ``decoded`` (the batch's records from
#: index ``start`` on, decoded) that are archived or in flight; it may return more
#: archived ids than those.
ArchivedCheck = Callable[[int, list[Decoded]], Awaitable[set[str]]]

#: Channel notified with the new seq after every committed batch.
NOTIFY_CHANNEL: Final = "tephra_projection"
_EVENT_LOG_COLUMNS: Final = (
    "seq", "event_id", "type", "cluster", "subject", "source", "time", "data",
    "topic", "partition", "kafka_offset", "prev_hash", "hash", "job", "traceparent", "recorded_at",
    "chain_format", "principal", "signature",
)  # fmt: skip
_REJECTED_COLUMNS: Final = (
    "topic", "partition", "kafka_offset", "raw", "error", "detail", "event_id", "event_type",
)  # fmt: skip
# The batch's first statement: the guard (no row when another writer moved the projection's
# seq), the consumer offsets and the NOTIFY (sent at commit) in one round trip instead of three;
# each round trip of a commit waits for the event loop, which folds the next batch meanwhile.
_BEGIN_BATCH: Final = (
    "WITH meta AS (UPDATE projection_meta SET seq = $2, config = $3::json, config_version = $4,"
    " leader_epoch = $5, clock = $6, intents_clock = $7, observations_clock = $8, decisions_clock = $9,"
    " leader_key = $10, updated_at = now() WHERE seq = $1 RETURNING seq),"
    " offsets AS (INSERT INTO consumer_offsets (consumer, topic, partition, next_offset)"
    " SELECT $11, * FROM unnest($12::text[], $13::integer[], $14::bigint[])"
    " ON CONFLICT (consumer, topic, partition) DO UPDATE"
    " SET next_offset = EXCLUDED.next_offset, updated_at = now())"
    " SELECT seq, CASE WHEN $2 <> $1 THEN pg_notify($15, $2::text) END FROM meta"
)
_ARCHIVED_IDS: Final = (
    "SELECT event_id FROM event_log WHERE event_id = ANY(ARRAY(SELECT json_array_elements_text($1::json)))"
)
_ARCHIVED_EVENTS: Final = (
    "SELECT event_id, seq, type, cluster, subject, source, time, data::text AS data FROM event_log"
    " WHERE event_id = ANY(ARRAY(SELECT json_array_elements_text($1::json)))"
)
_EXPIRED_COLUMNS: Final = ("seq", "code", "key", "since", "event_ids", "detail")
_BINDING_COLUMNS: Final = ("seq", "decision", "session_id", "task_id", "job_id", "node")
_EVICTION_COLUMNS: Final = (
    "seq", "decision", "session_id", "task_id", "job_id", "node", "action", "preemptor_job",
    "preemptor_task", "rule",
)  # fmt: skip


class BatchWriter:
    """Owns the folded state and the chain head of one projector (the single writer)."""

    def __init__(
        self,
        state: ClusterState,
        last_hash: bytes,
        *,
        consumer: str,
        cluster: str,
        snapshot_every: int = 10_000,
        snapshot_scale: float = 1.0,
        last_snapshot_seq: int = 0,
        topics: Topics | None = None,
        door: Door | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        check_snapshot_spacing(snapshot_every, snapshot_scale)
        self.state = state
        #: When a batch is archived (``event_log.recorded_at``, which the chain hashes): read
        #: once per batch, as the writer begins it.  Tools replaying a stored archive pass theirs.
        self.clock = clock or _utc_now
        #: The deployment's topics: an event read from another topic than its type's is
        #: rejected (``wrong-topic``).  None (tools reading files): not checked.
        self.topics = topics
        #: The bounds records must keep and the positions refused (projector.door).
        self.door = door or Door()
        self.last_hash = last_hash
        self.consumer = consumer
        self.cluster = cluster
        self.snapshot_every = snapshot_every
        self.snapshot_scale = snapshot_scale
        #: The seq of the newest snapshot, stored or in a plan in flight.
        self.last_snapshot_seq = last_snapshot_seq
        self.poisoned = False
        #: The chain head and seq after the newest prepared batch (ahead of last_hash while in flight).
        self._head_hash = last_hash
        self._committed_seq = state.seq
        #: Plans prepared and not committed yet, oldest first.
        self._in_flight: list[BatchPlan] = []
        #: What newest_pending holds after the newest prepared batch (its first session rewrites it whole).
        self._pending_rows = NewestPendingRows()

    @classmethod
    async def load(
        cls,
        conn: asyncpg.Connection,
        *,
        consumer: str,
        cluster: str,
        snapshot_every: int = 10_000,
        snapshot_scale: float = 1.0,
        topics: Topics | None = None,
        door: Door | None = None,
    ) -> BatchWriter:
        """A writer positioned at what the database holds (rebuilt first if an upgrade marked it)."""
        await rebuild_projection(conn)
        state = await load_projection(conn)
        head = await conn.fetchrow("SELECT seq, hash FROM event_log ORDER BY seq DESC LIMIT 1")
        head_seq, head_hash = (0, GENESIS_HASH) if head is None else (head["seq"], bytes(head["hash"]))
        if head_seq != state.seq:
            raise ProjectionDriftError(expected_seq=head_seq, found_seq=state.seq)
        last_snapshot = await conn.fetchval("SELECT coalesce(max(seq), 0) FROM state_snapshots")
        return cls(
            state,
            head_hash,
            consumer=consumer,
            cluster=cluster,
            snapshot_every=snapshot_every,
            snapshot_scale=snapshot_scale,
            last_snapshot_seq=last_snapshot,
            topics=topics,
            door=door,
        )

    # ------------------------------------------------------------------ step 2

    async def archived_ids(self, conn: asyncpg.Connection, decoded: Sequence[Decoded]) -> set[str]:
        """The ids of the events among ``decoded`` that are archived (:meth:`archived_among`)."""
        ids = [item.id for _, item in decoded if not isinstance(item, Rejection)]
        return await self.archived_among(conn, ids)

    async def archived_among(self, conn: asyncpg.Connection, ids: Sequence[str]) -> set[str]:
        """The ids among ``ids`` that ``event_log`` holds, or a batch in flight will.

        ``conn`` may be another connection than the committing one.  The
        in-flight ids are taken before the query: a batch that commits while
        the query runs is in them, one that committed before is seen by it.
        """
        if not ids:
            return set()
        in_flight = [plan.event_ids for plan in self._in_flight]
        # The ids as one JSON array, not a text[]: asyncpg checks every element of an
        # array argument in Python (measured per id: 0.76 us of client CPU against 0.29,
        # and no more for the server).
        rows = await conn.fetch(_ARCHIVED_IDS, orjson.dumps(ids).decode())
        found = {r["event_id"] for r in rows}
        for pending in in_flight:
            found.update(pending.intersection(ids))
        return found

    def prepare(self, decoded: Sequence[Decoded], archived_ids: set[str]) -> BatchPlan:
        """Fold the batch into the state and build everything it writes (mutates the state)."""
        plan = self._begin()
        with self._poison_on_error():
            self._fold(plan, decoded, archived_ids)
            self._finish_naming(plan, [record for record, _ in decoded])
        self._in_flight.append(plan)
        return plan

    async def prepare_streaming(
        self, records: Sequence[InboundRecord], check: ArchivedCheck, *, chunk: int = 32
    ) -> BatchPlan:
        """:meth:`prepare` from the records: decode a chunk, fold it, drop it, and so on.

        Each chunk is folded while its events are still in the CPU's caches and
        freed right after, so a batch's decoded events are never all alive at
        once.  Decoding all of a batch first (~15 MB of models for 5,000
        events) and folding it after made the fold, and the freeing one batch
        later, miss the caches (callgrind with a 4 MB last-level cache: a third
        fewer misses a chunk at a time; the service's figures are in
        docs/projector.md).  ``check`` says which of a chunk's events are
        archived already (the service asks PostgreSQL about the batch's ids
        before it decodes).  The event loop is handed back after every chunk:
        the commits in flight go on meanwhile (the fold is CPU-bound).
        """
        plan = self._begin()
        with self._poison_on_error():
            for start in range(0, len(records), chunk):
                decoded = decode_batch(records[start : start + chunk], self.door)
                archived = await check(start, decoded)
                self._fold(plan, decoded, archived)
                del decoded  # now, while the events are in the caches
                await asyncio.sleep(0)
            self._finish_naming(plan, records)
        self._in_flight.append(plan)
        return plan

    @contextmanager
    def _poison_on_error(self) -> Iterator[None]:
        try:
            yield
        except BaseException:
            self.poisoned = True
            raise

    def _begin(self) -> BatchPlan:
        self._check_usable()
        seq = self.state.seq
        return BatchPlan(base_seq=seq, last_seq=seq, recorded_at=self.clock(), last_hash=self._head_hash)

    def _fold(self, plan: BatchPlan, decoded: Sequence[Decoded], archived_ids: set[str]) -> None:
        """Fold ``decoded`` into the state and the plan (continuing where the plan stands)."""
        fold_records(
            self.state,
            plan,
            decoded,
            archived_ids,
            cluster=self.cluster,
            topics=self.topics,
            trust=self.door.trust,
        )

    def _finish_naming(self, plan: BatchPlan, records: Sequence[InboundRecord]) -> None:
        """:meth:`_finish`; a failure names the batch's records (no one record is to blame)."""
        try:
            self._finish(plan)
        except Exception as exc:
            raise BatchFailedError(
                [(r.topic, r.partition, r.offset) for r in records],
                "unstorable",
                f"projecting failed: {exc!r}",
            ) from exc

    def _finish(self, plan: BatchPlan) -> None:
        """Read the rows the batch touched, and a snapshot when due, out of the state."""
        finish_plan(
            self.state,
            plan,
            snapshot_every=self.snapshot_every,
            snapshot_scale=self.snapshot_scale,
            last_snapshot_seq=self.last_snapshot_seq,
            pending_rows=self._pending_rows,
        )
        if plan.snapshot is not None:
            self.last_snapshot_seq = plan.last_seq
        self._head_hash = plan.last_hash

    # ------------------------------------------------------------------ step 3

    async def settle(self, conn: asyncpg.Connection, plan: BatchPlan) -> None:
        """Reject the plan's repeated ids whose content differs from the first event with the id.

        Call it once the plans before ``plan`` have committed (:meth:`commit`
        does, if the caller has not): every first event is then in
        ``event_log`` or in ``plan`` itself.  The content is compared through
        the events' canonical bytes (their SHA-256 digests name them in the
        rejection): the chain hash also covers where and when a row arrived.
        """
        repeats, plan.repeats = plan.repeats, []
        if not repeats:
            return
        wanted = {repeat.event_id for repeat in repeats}
        first = {row[1]: (row[0], _row_event_bytes(row)) for row in plan.archive_rows if row[1] in wanted}
        if missing := sorted(wanted - first.keys()):
            rows = await conn.fetch(_ARCHIVED_EVENTS, orjson.dumps(missing).decode())
            first.update({r["event_id"]: (r["seq"], row_canonical(r)) for r in rows})
        for repeat in repeats:
            archived = first.get(repeat.event_id)
            if archived is None:
                continue  # not archived any more (retention): nothing to compare with
            seq, canonical = archived
            if canonical != repeat.canonical:
                digest, own = hashlib.sha256(canonical).digest(), hashlib.sha256(repeat.canonical).digest()
                plan.duplicates -= 1
                plan.rejections.append(_id_conflict(repeat, seq, digest, own))

    # ------------------------------------------------------------------ step 4

    async def commit(self, conn: asyncpg.Connection, plan: BatchPlan) -> None:
        """Write the plan in one transaction (plans in the order they were prepared)."""
        self._check_usable()
        if not self._in_flight or self._in_flight[0] is not plan:
            raise RuntimeError("commit the batch plans in the order they were prepared, each once")
        try:
            await self.settle(conn, plan)
            await self._commit(conn, plan)
        except BaseException:
            self.poisoned = True
            raise
        self._in_flight.pop(0)
        if plan.expired:
            # Visible to the operator: archived events that will never apply.
            log.warning(
                "[PROJ-EXPIRED] %d buffered entries expired (expired_buffers at seq %d-%d), first: %s",
                len(plan.expired),
                plan.expired[0][0],
                plan.expired[-1][0],
                plan.expired[0][5],
            )
        self.last_hash = plan.last_hash
        self._committed_seq = plan.last_seq

    async def _commit(self, conn: asyncpg.Connection, plan: BatchPlan) -> None:
        await create_staging(conn)
        keys = sorted(plan.offsets)
        async with conn.transaction():
            moved = await conn.fetchval(
                _BEGIN_BATCH,
                plan.base_seq,
                plan.last_seq,
                *plan.meta,
                self.consumer,
                [k[0] for k in keys],
                [k[1] for k in keys],
                [plan.offsets[k] for k in keys],
                NOTIFY_CHANNEL,
            )
            if moved is None:
                found = await conn.fetchval("SELECT seq FROM projection_meta")
                raise ProjectionDriftError(expected_seq=plan.base_seq, found_seq=found)
            if plan.archive_rows:
                await conn.copy_records_to_table(
                    "event_log", records=plan.archive_rows, columns=_EVENT_LOG_COLUMNS
                )
            if plan.rejections:
                await conn.copy_records_to_table(
                    "rejected_events",
                    records=[
                        (r.topic, r.partition, r.offset, r.raw, r.error, r.detail, r.event_id, r.event_type)
                        for r in plan.rejections
                    ],
                    columns=_REJECTED_COLUMNS,
                )
            await execute_writes(conn, plan.projection)
            if plan.bindings:
                await conn.copy_records_to_table("bindings", records=plan.bindings, columns=_BINDING_COLUMNS)
            if plan.evictions:
                await conn.copy_records_to_table(
                    "evictions", records=plan.evictions, columns=_EVICTION_COLUMNS
                )
            if plan.expired:
                await conn.copy_records_to_table(
                    "expired_buffers", records=plan.expired, columns=_EXPIRED_COLUMNS
                )
            if plan.snapshot is not None:
                await write_snapshot(conn, plan.last_seq, plan.snapshot)

    async def write(self, conn: asyncpg.Connection, records: Sequence[InboundRecord]) -> BatchPlan:
        """Steps 1, 2 and 4 without a dead-letter topic (tests, tools, the bench)."""
        decoded = decode_batch(records, self.door)
        plan = self.prepare(decoded, await self.archived_ids(conn, decoded))
        await self.commit(conn, plan)
        return plan

    def _check_usable(self) -> None:
        if self.poisoned:
            raise RuntimeError("the batch writer failed mid-batch; rebuild it with BatchWriter.load()")

    @property
    def committed_seq(self) -> int:
        """The seq of the newest committed batch (``state.seq`` runs ahead while plans are in flight)."""
        return self._committed_seq


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _row_event_bytes(row: tuple[Any, ...]) -> bytes:
    """The event's canonical bytes of an archive row of a plan (``_EVENT_LOG_COLUMNS``)."""
    return columns_canonical(dict(zip(_EVENT_LOG_COLUMNS, row, strict=True)), format_time(row[6]))


def _id_conflict(repeat: Repeat, seq: int, archived: bytes, own: bytes) -> Rejection:
    record = repeat.record
    detail = (
        f"event id {repeat.event_id!r} is archived already (seq {seq}) with other content; the first"
        f" stays: archived digest {archived.hex()}, this record's {own.hex()} (SHA-256 of the events'"
        " canonical bytes); give a new event a new id"
    )
    return Rejection(
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        raw=record.value,
        error="id-conflict",
        detail=detail,
        event_id=repeat.event_id,
        event_type=repeat.event_type,
    )


def check_snapshot_spacing(snapshot_every: int, snapshot_scale: float) -> None:
    """Raise ValueError unless the spacing is valid (see :func:`~projector.plan.snapshot_due`)."""
    if snapshot_every <= 0:
        raise ValueError(f"snapshot_every must be positive, got {snapshot_every}")
    if not snapshot_scale >= 0:  # also refuses NaN
        raise ValueError(f"snapshot_scale must be zero or more, got {snapshot_scale}")


async def stored_offsets(conn: asyncpg.Connection, consumer: str) -> dict[tuple[str, int], int]:
    """Where ``consumer`` resumes: (topic, partition) -> next offset."""
    rows = await conn.fetch(
        "SELECT topic, partition, next_offset FROM consumer_offsets WHERE consumer = $1", consumer
    )
    return {(r["topic"], r["partition"]): r["next_offset"] for r in rows}
