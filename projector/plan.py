"""A batch's plan: Kafka records -> every value one commit writes (pure CPU, no I/O).

Steps 1 and 2 of :mod:`projector.writer`, which owns the state and runs them:

1. :func:`decode_batch` — bytes to events; what does not decode becomes a
   :class:`Rejection` with the decoder's stable code.
2. :func:`fold_records`, then :func:`finish_plan` — fold the events into the
   state (assigning seqs and chaining hashes) and read back what the commit
   writes: archive rows, projection statements, meta columns, the snapshot.

Separate from the writer, and free of coroutines, so that ``pip install``
compiles it with the rest of the per-event path (setup.py): mypyc's coroutines
are kept out of the compiled unit (docs/projector.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, NamedTuple

from events.canonical import CanonicalForm, canonical_form, format_time
from events.jsonform import EPOCH
from events.models import (
    BindDecision,
    Decision,
    Event,
    EvictDecision,
    SessionCommitted,
)
from events.names import invalid_name
from events.serde import EventDecodeError, decode
from events.topics import Topics, topic_for
from events.tracing import valid_traceparent
from projector.archive import (
    CHAIN_FORMAT,
    JOB_EVENT_TYPES,
    job_of_event,
    row_digest,
    row_members,
    stdlib_utc,
)
from projector.door import KEPT_BYTES, Door, refusal, short
from projector.errors import RecordFailedError
from projector.fold import apply
from projector.newest_pending import NewestPendingRows
from projector.projection_rows import (
    ProjectionWrite,
    TouchedRows,
    meta_arguments,
    projection_statements,
    session_statement,
)
from projector.state import ClusterState, SessionRecord
from projector.state_json import StoredState, state_to_stored
from projector.storable import nul_path
from projector.trust import Trust, distrust

__all__ = [
    "BatchPlan",
    "Decoded",
    "InboundRecord",
    "Rejection",
    "Repeat",
    "decode_batch",
    "finish_plan",
    "fold_records",
    "id_hint",
    "session_marker_hint",
    "snapshot_due",
]


class InboundRecord(NamedTuple):
    """One Kafka record as the writer needs it (a tuple: one is made per record, and a
    frozen dataclass costs twice as much to build)."""

    topic: str
    partition: int
    offset: int
    value: bytes | None
    #: The W3C ``traceparent`` the producer sent with the record (``events.tracing``), archived
    #: beside the event, outside the bytes the chain hashes; else the event's own (the
    #: CloudEvents extension attribute), when valid.
    traceparent: str | None = None


@dataclass(frozen=True, slots=True)
class Rejection:
    """A record parked in ``rejected_events`` (and the dead-letter topic)."""

    topic: str
    partition: int
    offset: int
    raw: bytes | None
    #: Stable code: a DecodeErrorCode, an invalid-event reason (projector.fold), empty-record,
    #: unstorable-text, decode-failed, invalid-name, unknown-cluster, wrong-topic, id-conflict,
    #: a trust code (projector.trust): unsigned, unknown-principal, bad-signature, not-permitted, not-leader,
    #: or a door's (projector.door): record-too-large, too-many-replicas, too-many-tasks,
    #: invalid-config, skipped-by-operator, fold-failed, unstorable.
    error: str
    detail: str
    event_id: str | None
    event_type: str | None


Decoded = tuple[InboundRecord, Event | Rejection]

_ID_MEMBER: Final = b'"id":"'


def id_hint(value: bytes | None) -> str | None:
    """The event id a record most likely holds, read off its bytes without decoding it.

    The first ``"id":"`` member, when its string has no escape; None when there
    is none.  Encoders that put the envelope's ``id`` before ``data`` (ours) or
    that write no ``"id"`` key inside ``data`` (the catalogue's models have
    none) are read right.  A hint is only a guess: the duplicate check asks
    about hints before the batch decodes and asks again about any event whose
    decoded id is not its hint, so a wrong hint costs a query, never a lost or
    duplicated event.
    """
    if value is None:
        return None
    start = value.find(_ID_MEMBER)
    if start < 0:
        return None
    start += len(_ID_MEMBER)
    end = value.find(b'"', start)
    if end < 0:
        return None
    text = value[start:end]
    if b"\\" in text:
        return None  # an escape: the decoded id is another string
    try:
        return text.decode()
    except UnicodeDecodeError:
        return None


#: A SessionCommitted's type member, as our encoder writes it (events.serde), ahead of its data.
_SESSION_MARKER: Final = b'"type":"tephra.session.committed.v1"'
#: How far into a record :func:`session_marker_hint` looks: the envelope's members come first.
_ENVELOPE_HEAD: Final = 1_024


def session_marker_hint(value: bytes | None) -> bool:
    """Whether a record most likely holds a SessionCommitted, read off its envelope without decoding it.

    Only a guess, for batching: the service stops waiting for more records once a
    fetch brought a session's marker, for which a scheduler waits (projector.service).
    An encoder that writes ``type`` elsewhere only loses that shortcut.
    """
    return value is not None and value.find(_SESSION_MARKER, 0, _ENVELOPE_HEAD) >= 0


_DEFAULT_DOOR: Final = Door()


def decode_batch(records: Iterable[InboundRecord], door: Door = _DEFAULT_DOOR) -> list[Decoded]:
    """Each record with its event, or the rejection saying why it is not one (or may not pass ``door``)."""
    out: list[Decoded] = []
    refused = door.refused
    for record in records:
        value = record.value
        if refused and (held := refused.get((record.topic, record.partition, record.offset))) is not None:
            out.append((record, _held(record, door, *held)))
            continue
        if value is None:
            out.append((record, _rejection(record, "empty-record", "the record has no value", None, None)))
            continue
        if len(value) > door.max_record_bytes:
            detail = (
                f"the record has {len(value)} bytes, over the {door.max_record_bytes} accepted"
                f" (TEPHRA_MAX_RECORD_BYTES); its first {KEPT_BYTES} bytes are kept"
            )
            rejection = _rejection(record, "record-too-large", detail, id_hint(value[:KEPT_BYTES]), None)
            out.append((record, _truncated(rejection)))
            continue
        try:
            event = decode(value)
        except EventDecodeError as exc:
            out.append((record, _rejection(record, exc.code, str(exc), exc.event_id, exc.event_type)))
            continue
        except Exception as exc:  # noqa: BLE001 - whatever a record makes the decoder raise rejects that record
            detail = f"the decoder failed on this record: {exc!r}"
            out.append((record, _rejection(record, "decode-failed", detail, id_hint(value), None)))
            continue
        if (where := nul_path(value)) is not None:
            detail = f"field {where}: contains U+0000 (NUL), which PostgreSQL text cannot store"
            out.append((record, _rejection(record, "unstorable-text", detail, event.id, event.type)))
            continue
        if (refused_here := refusal(door, event)) is not None:
            out.append((record, _rejection(record, *refused_here, event.id, event.type)))
            continue
        if (problem := invalid_name(event)) is not None:
            out.append((record, _rejection(record, "invalid-name", problem, event.id, event.type)))
            continue
        out.append((record, event))
    return out


def _held(record: InboundRecord, door: Door, code: str, detail: str) -> Rejection:
    """The rejection of a record the door refuses by its position."""
    value = record.value
    rejection = _rejection(record, code, detail, None if value is None else id_hint(value[:KEPT_BYTES]), None)
    return _truncated(rejection) if value is not None and len(value) > door.max_record_bytes else rejection


def _truncated(r: Rejection) -> Rejection:
    """``r`` keeping only the head of its record (``KEPT_BYTES``)."""
    raw = None if r.raw is None else r.raw[:KEPT_BYTES]
    return Rejection(r.topic, r.partition, r.offset, raw, r.error, r.detail, r.event_id, r.event_type)


#: The longest event id or type a rejection keeps: 256 characters are at most 1 KiB
#: of UTF-8, well within a btree index row (``rejected_events_event_id``; 2,704
#: bytes).  An id longer than this is no id a producer meant; the raw record holds it.
_MAX_NAME: Final = 256


def _rejection(
    record: InboundRecord, error: str, detail: str, event_id: str | None, event_type: str | None
) -> Rejection:
    # Everything stored must be storable whatever the record held: no NUL in text,
    # nothing over an index's row limit.
    return Rejection(
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        raw=record.value,
        error=error,
        detail=short(detail),
        event_id=_storable_name(event_id),
        event_type=_storable_name(event_type),
    )


def _storable_name(name: str | None) -> str | None:
    if name is None or len(name) > _MAX_NAME or "\x00" in name:
        return None
    return name


class Repeat(NamedTuple):
    """A record whose event id is archived already (or earlier in the batch): a redelivery,
    unless its content differs (:meth:`projector.writer.BatchWriter.settle` tells)."""

    record: InboundRecord
    event_id: str
    event_type: str
    #: The event's canonical bytes (events.canonical), compared with the archived event's.
    canonical: bytes


@dataclass(slots=True)
class BatchPlan:
    """Everything one batch will write, computed by :meth:`BatchWriter.prepare`."""

    base_seq: int
    last_seq: int
    #: When the batch's events are archived (``event_log.recorded_at``, hashed with them):
    #: the time the writer began preparing the batch, UTC.
    recorded_at: datetime = EPOCH
    archive_rows: list[tuple[Any, ...]] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    touched: TouchedRows = field(default_factory=dict)
    bindings: list[tuple[Any, ...]] = field(default_factory=list)
    evictions: list[tuple[Any, ...]] = field(default_factory=list)
    #: (topic, partition) -> next offset to read.
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    duplicates: int = 0
    #: The batch's records with an archived id, until the writer settles them.
    repeats: list[Repeat] = field(default_factory=list)
    #: Ids of the archived events (duplicate detection while the plan is in flight).
    event_ids: set[str] = field(default_factory=set)
    #: The projection_meta columns other than seq, as of the end of the batch.
    meta: tuple[Any, ...] = ()
    #: The projection rows as of the end of the batch.
    projection: list[ProjectionWrite] = field(default_factory=list)
    #: The sessions the batch committed, recorded as folded: a batch may commit
    #: more than the state's window of sessions holds at its end.
    sessions: list[SessionRecord] = field(default_factory=list)
    #: The ``expired_buffers`` rows of the buffered entries the batch's events expired.
    expired: list[tuple[Any, ...]] = field(default_factory=list)
    #: The state as of the end of the batch (head and chunks), when a snapshot is due.
    snapshot: StoredState | None = None
    #: The chain head after this batch.
    last_hash: bytes = b""

    @property
    def archived(self) -> int:
        return len(self.archive_rows)


def _misrouted(record: InboundRecord, item: Event, cluster: str, topics: Topics | None) -> Rejection | None:
    """The rejection of an event of another cluster (``unknown-cluster``) or on another topic than
    its type's (``wrong-topic``, when ``topics`` is given); None when it came where it belongs."""
    if item.cluster != cluster:
        detail = (
            f"the event is for cluster {item.cluster!r}; this deployment archives cluster {cluster!r}"
            " (TEPHRA_CLUSTER): produce it to its own cluster's topics"
        )
        return _rejection(record, "unknown-cluster", detail, item.id, item.type)
    if topics is not None and (expected := topic_for(item, topics)) != record.topic:
        detail = f"a {item.type} event belongs on the topic {expected}, not {record.topic}"
        return _rejection(record, "wrong-topic", detail, item.id, item.type)
    return None


def _refused(
    state: ClusterState,
    record: InboundRecord,
    item: Event,
    *,
    cluster: str,
    topics: Topics | None,
    trust: Trust | None,
) -> Rejection | None:
    """The rejection of an event that came where it does not belong (:func:`_misrouted`) or from a
    producer ``trust`` refuses (projector.trust); None when it may be folded."""
    if (misrouted := _misrouted(record, item, cluster, topics)) is not None:
        return misrouted
    if trust is not None and record.value is not None:
        distrusted = distrust(trust, state, item, record.value)
        if distrusted is not None:
            return _rejection(record, *distrusted, item.id, item.type)
    return None


def fold_records(
    state: ClusterState,
    plan: BatchPlan,
    decoded: Sequence[Decoded],
    archived_ids: set[str],
    *,
    cluster: str,
    topics: Topics | None = None,
    trust: Trust | None = None,
) -> None:
    """Fold ``decoded`` into ``state`` and the plan (continuing where the plan stands).

    Sets aside events already archived (same id: a producer retry or a
    redelivery, unless the content differs: see :class:`Repeat`).  Events of
    another cluster (``unknown-cluster``), on another topic than their type's
    (``wrong-topic``, when ``topics`` is given), those whose producer
    ``trust`` refuses (projector.trust, when given) and those the fold refuses
    become rejections: nothing consumed is dropped without a row.
    """
    seq = plan.last_seq
    seen = plan.event_ids
    touched = plan.touched
    prev_hash = plan.last_hash
    offsets = plan.offsets
    archive_rows = plan.archive_rows
    recorded_at = plan.recorded_at
    recorded_text = format_time(recorded_at)
    for record, item in decoded:
        topic, partition, offset, _, traceparent = record
        offsets[(topic, partition)] = offset + 1
        if isinstance(item, Rejection):
            plan.rejections.append(item)
            continue
        event_id = item.id
        if event_id in seen or event_id in archived_ids:
            plan.duplicates += 1
            plan.repeats.append(Repeat(record, event_id, item.type, canonical_form(item).bytes))
            continue
        refused = _refused(state, record, item, cluster=cluster, topics=topics, trust=trust)
        if refused is not None:
            plan.rejections.append(refused)
            continue
        try:
            # What the archive keeps (the event in UTC) and the bytes the chain hashes, with
            # the pieces they are spliced from: the row's own columns (events.canonical).
            form = canonical_form(item)
            event = form.event
            if traceparent is None and item.traceparent is not None:  # the CloudEvents extension
                traceparent = valid_traceparent(item.traceparent)
            outcome = apply(state, seq + 1, event)
            if outcome.invalid is not None:
                rejection = _rejection(record, outcome.invalid, outcome.detail, event_id, form.type)
                plan.rejections.append(rejection)
                continue
            seq += 1
            seen.add(event_id)
            row = _archive_row(
                seq, form, record=record, traceparent=traceparent, prev_hash=prev_hash,
                recorded_at=recorded_at, recorded_text=recorded_text,
            )  # fmt: skip
            digest = row[12]
            archive_rows.append(row)
            prev_hash = digest
            for kind, key in outcome.touched:
                if kind == "session":
                    plan.sessions.append(state.sessions[key])
                else:
                    touched.setdefault(kind, {})[key] = seq
            if outcome.decisions and isinstance(event, SessionCommitted):
                _record_decisions(plan, seq, event.data.session_id, outcome.decisions)
            for expired in outcome.expired:
                plan.expired.append(
                    (
                        seq,
                        expired.code,
                        expired.key,
                        stdlib_utc(expired.since),
                        list(expired.event_ids),
                        expired.detail,
                    )
                )
        except Exception as exc:
            # The fold may have changed the state part way: the writer is poisoned (its
            # caller rebuilds it from the database) and the record is refused on the redo.
            raise RecordFailedError((topic, partition, offset), "fold-failed", repr(exc)) from exc
    plan.last_seq = seq
    plan.last_hash = prev_hash


def _archive_row(
    seq: int,
    form: CanonicalForm,
    *,
    record: InboundRecord,
    traceparent: str | None,
    prev_hash: bytes,
    recorded_at: datetime,
    recorded_text: str,
) -> tuple[Any, ...]:
    """The ``event_log`` row of an event, hashed (the columns of ``projector.writer._EVENT_LOG_COLUMNS``)."""
    topic, partition, offset = record.topic, record.partition, record.offset
    job = job_of_event(form.event) if form.type in JOB_EVENT_TYPES else None
    members = row_members(
        seq=seq, topic=topic, partition=partition, kafka_offset=offset, recorded_at=recorded_text, job=job,
        traceparent=traceparent, signature=form.signature,
    )  # fmt: skip
    digest = row_digest(prev_hash, form.bytes, members)
    return (
        seq, form.event_id, form.type, form.cluster, form.subject, form.source, stdlib_utc(form.instant),
        form.data, topic, partition, offset, prev_hash, digest, job, traceparent, recorded_at, CHAIN_FORMAT,
        form.principal, form.signature,
    )  # fmt: skip


def _record_decisions(
    plan: BatchPlan, seq: int, session_id: str, decisions: Sequence[tuple[int, Decision]]
) -> None:
    """The bindings and evictions rows of a session's accepted decisions."""
    for index, d in decisions:
        if isinstance(d, BindDecision):
            plan.bindings.append((seq, index, session_id, d.task, d.job, d.node))
        elif isinstance(d, EvictDecision):
            row = (
                seq, index, session_id, d.task, d.job, d.node, d.action, d.preemptor_job, d.preemptor_task,
                d.rule,
            )  # fmt: skip
            plan.evictions.append(row)


def snapshot_due(
    state: ClusterState,
    plan: BatchPlan,
    *,
    snapshot_every: int,
    snapshot_scale: float,
    last_snapshot_seq: int,
) -> bool:
    """Whether the batch ends with a snapshot of the state.

    When it crosses a multiple of ``snapshot_every``, and the newest snapshot
    (at ``last_snapshot_seq``) is at least ``snapshot_scale`` events per job,
    task and node of the state behind.  A snapshot writes the whole state,
    which grows with history, so at a fixed interval the cost per event grows
    without bound: at 10,000 (``python -m projector``'s default), the bench's
    stream paid ~26 us per event over its first 200k events (PostgreSQL 10.7,
    the projector ~15), twice that by the end, where a snapshot is 102k jobs,
    tasks and nodes (25 MB of JSON, ~0.2 s to build, ~0.4 s for PostgreSQL
    to store).  At a scale of 1.0 each event pays for writing about one object
    of snapshot whatever the history, and ``state_at`` folds at most about one
    event per object of the snapshot it loads.  At 0, a snapshot at every
    multiple of ``snapshot_every``.
    """
    if plan.last_seq // snapshot_every <= plan.base_seq // snapshot_every:
        return False
    objects = len(state.jobs) + len(state.tasks) + len(state.nodes)
    return plan.last_seq - last_snapshot_seq >= objects * snapshot_scale


def finish_plan(
    state: ClusterState,
    plan: BatchPlan,
    *,
    snapshot_every: int,
    snapshot_scale: float,
    last_snapshot_seq: int,
    pending_rows: NewestPendingRows | None = None,
) -> None:
    """Read the rows the batch touched, and a snapshot when due (:func:`snapshot_due`), out of the state.

    ``pending_rows``: what ``newest_pending`` holds before the batch (the writer's, carried from
    batch to batch); None rewrites it whole when the batch records a session.
    """
    plan.meta = meta_arguments(state)
    plan.projection = projection_statements(state, plan.touched)
    sessions = session_statement(plan.sessions)
    if sessions is not None:
        plan.projection.append(sessions)
        rows = NewestPendingRows() if pending_rows is None else pending_rows
        plan.projection.extend(rows.writes(state))
    due = snapshot_due(
        state,
        plan,
        snapshot_every=snapshot_every,
        snapshot_scale=snapshot_scale,
        last_snapshot_seq=last_snapshot_seq,
    )
    if due:
        plan.snapshot = state_to_stored(state)
