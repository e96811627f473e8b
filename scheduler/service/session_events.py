"""One session as events: a single SessionCommitted, or parts plus the commit marker.

Pure: the publisher hands these to Kafka.  A session is applied whole or not
at all (design §3), so it normally travels as one SessionCommitted.  Only when
that message would exceed the broker's limit are its decisions spread over
:class:`SessionPart` events, published before a marker with ``parts = N``;
the fold applies the session when the marker arrives, and never before.  The
pending reasons stay in the marker while it fits; when they alone would make
it too large they travel in further parts too (after the decisions' parts,
in job order), and the fold reassembles them in part order.

A big backlog leaves the same jobs pending with the same reasons session
after session, so the reasons normally travel as the change from the newest
session the input held (:func:`pending_change`): the jobs whose reasons are
new or different, and the ids of the jobs no longer pending.  Each change also
restates one slice of the list (:func:`pending_slice_of`): every pending job of
that slice, changed or not.  The ``n``-th session of a term restates slice
``n mod PENDING_SLICES``, so any :data:`PENDING_SLICES` consecutive sessions
together restate every job: a reader of one session walks at most that many
back to rebuild its list, and no session carries more than a slice of it
besides its change.  The whole list travels on a term's first session, when
there is no base, and when the change would be no smaller.

Sizes are exact, not estimated: :func:`events.serde.encode` writes compact
JSON, so a part's size is the size of the empty part plus each decision's
JSON and the commas between them.
"""

from __future__ import annotations

import hashlib
import json
import uuid
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Protocol, TypeVar

from events.jsonform import LastForms
from events.models import (
    MAX_SESSION_PARTS,
    Decision,
    PendingJob,
    PendingReason,
    SessionCommitted,
    SessionCommittedData,
    SessionPart,
    SessionPartData,
)
from events.serde import encode
from projector.state import ClusterState
from scheduler.service.errors import SessionTooLarge

__all__ = [
    "PENDING_SLICES",
    "SCHEDULER_SOURCE",
    "PendingChange",
    "PendingTexts",
    "SessionHeader",
    "SessionPending",
    "digest_pending",
    "pending_change",
    "pending_jobs",
    "pending_slice_of",
    "session_events",
    "session_id_for",
    "session_pending",
]

SCHEDULER_SOURCE: Final = "tephra://scheduler"
# The namespace of session ids (a fixed, arbitrary UUID owned by this module).
_SESSION_NAMESPACE: Final = uuid.UUID("0b6c2f9e-4a51-4d7e-8f3a-2c9d5e1a7b60")
#: The slices a pending list is cut into: a change restates one of them (see the module).
PENDING_SLICES: Final = 64


class _HasCodeAndMessage(Protocol):
    @property
    def code(self) -> str: ...

    @property
    def message(self) -> str: ...


@dataclass(frozen=True, slots=True)
class SessionHeader:
    """Everything a SessionCommitted carries besides its decisions."""

    session_id: str
    cluster: str
    leader_epoch: int
    input_seq: int
    config_version: int
    now: datetime
    input_digest: str
    logic_flags: tuple[str, ...]
    pending: tuple[PendingJob, ...]
    pending_digest: str
    #: With a base: ``pending`` is the change from session ``pending_base``'s list (see the module).
    pending_base: str = ""
    pending_cleared: tuple[str, ...] = ()
    #: With a base and ``pending_slices`` > 0: ``pending`` also restates slice ``pending_slice``.
    pending_slice: int = 0
    pending_slices: int = 0


@dataclass(frozen=True, slots=True)
class PendingChange:
    """What a session carries of its pending list: the whole list (``base`` empty) or the change,
    restating every entry of slice ``slice`` of ``slices`` (none when ``slices`` is 0)."""

    base: str
    pending: tuple[PendingJob, ...]
    cleared: tuple[str, ...]
    slice: int = 0
    slices: int = 0


def pending_slice_of(job: str, slices: int) -> int:
    """The slice of a pending list that ``job``'s entry belongs to: a stable hash (CRC-32 of the id's
    UTF-8, the same in every process and release) modulo ``slices``."""
    return zlib.crc32(job.encode()) % slices


def session_id_for(cluster: str, epoch: int, counter: int) -> str:
    """The id of the ``counter``-th session of leadership ``epoch``: unique, and the same on a retry."""
    return str(uuid.uuid5(_SESSION_NAMESPACE, f"{cluster}|{epoch}|{counter}"))


def pending_jobs(
    pending: Mapping[str, Sequence[_HasCodeAndMessage]], reuse: Mapping[str, PendingJob] | None = None
) -> tuple[PendingJob, ...]:
    """The core's pending reasons (job -> ranked reasons) as event models, by job id.

    ``reuse``: entries of an earlier list (the newest session's), taken as they are where the
    reasons did not change: a backlog keeps most of them, and an entry that is the same object
    is found unchanged (and its JSON in :class:`PendingTexts`) without comparing it.
    """
    reuse = reuse or {}
    out: list[PendingJob] = []
    for job in sorted(pending):
        reasons = pending[job]
        known = reuse.get(job)
        if (
            known is None
            or len(known.reasons) != len(reasons)
            or any(
                k.code != r.code or k.message != r.message
                for k, r in zip(known.reasons, reasons, strict=True)
            )
        ):
            known = PendingJob(
                job=job, reasons=[PendingReason(code=r.code, message=r.message) for r in reasons]
            )
        out.append(known)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class SessionPending:
    """A session's pending reasons as it publishes them."""

    #: The whole list, by job id.
    whole: tuple[PendingJob, ...]
    #: Of the whole list.
    digest: str
    change: PendingChange


def session_pending(
    state: ClusterState,
    reasons: Mapping[str, Sequence[_HasCodeAndMessage]],
    texts: PendingTexts,
    *,
    restate: int | None,
    max_cleared_bytes: int,
    slices: int = PENDING_SLICES,
) -> SessionPending:
    """The core's pending ``reasons`` for a session on ``state``: the whole list (reusing the newest
    session's unchanged entries, see :func:`pending_jobs`), its digest, and what travels: the change
    from the newest session's list restating slice ``restate`` of ``slices``, or the whole list when
    ``restate`` is None or no change applies."""
    newest = next(reversed(state.sessions.values()), None)
    before = newest.pending if newest is not None and newest.pending is not None else ()
    whole = pending_jobs(reasons, reuse={p.job: p for p in before})
    change = pending_change(
        whole,
        "" if newest is None or restate is None else newest.session_id,
        None if newest is None or restate is None else newest.pending,
        restate=restate or 0,
        slices=slices,
        max_cleared_bytes=max_cleared_bytes,
    )
    return SessionPending(whole=whole, digest=texts.digest(whole), change=change)


def pending_change(
    pending: tuple[PendingJob, ...],
    base_id: str,
    base: Sequence[PendingJob] | None,
    *,
    restate: int,
    slices: int,
    max_cleared_bytes: int,
) -> PendingChange:
    """The change from ``base`` (session ``base_id``'s whole list, None when unknown) to ``pending``,
    with every entry of slice ``restate`` of ``slices`` (:func:`pending_slice_of`) whether it
    changed or not; ``slices`` 0: the change alone.

    The whole list instead when there is no base, when the change holds as many entries, or when
    its cleared ids would take more than ``max_cleared_bytes`` of the marker (they travel in it).
    """
    whole = PendingChange(base="", pending=pending, cleared=())
    if base is None or not base_id:
        return whole
    if slices and not 0 <= restate < slices:
        raise ValueError(f"slice {restate} is not one of {slices}")
    before = {p.job: p for p in base}
    changed = tuple(
        p
        for p in pending
        if ((b := before.get(p.job)) is not p and b != p)
        or (slices and pending_slice_of(p.job, slices) == restate)
    )
    now = {p.job for p in pending}
    cleared = tuple(sorted(job for job in before if job not in now))
    if len(changed) + len(cleared) >= len(pending):
        return whole
    if sum(len(json.dumps(job)) + 1 for job in cleared) > max_cleared_bytes:
        return whole
    return PendingChange(base=base_id, pending=changed, cleared=cleared, slice=restate, slices=slices)


def digest_pending(pending: Sequence[PendingJob]) -> str:
    """``sha256:<hex>`` of the canonical JSON of the pending list (what replay compares)."""
    return PendingTexts().digest(pending)


def _entry_text(entry: PendingJob) -> str:
    return json.dumps(entry.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=True)


class PendingTexts:
    """The digest of a pending list, re-encoding only the entries that are not the same objects as
    in the last list digested (:class:`~events.jsonform.LastForms`): a backlog's digest encodes only
    the entries that changed.  The list's JSON is its entries' joined (compact separators), so the
    digest is the same."""

    def __init__(self) -> None:
        self._texts: LastForms[PendingJob, str] = LastForms(_entry_text, _job_of)

    def digest(self, pending: Sequence[PendingJob]) -> str:
        """``sha256:<hex>`` of the canonical JSON of the pending list (what replay compares)."""
        body = "[" + ",".join(self._texts.of(pending)) + "]"
        return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


def _job_of(entry: PendingJob) -> str:
    return entry.job


def session_events(
    header: SessionHeader,
    decisions: Sequence[Decision],
    *,
    time: datetime,
    max_message_bytes: int,
) -> list[SessionPart | SessionCommitted]:
    """The events that publish one session, in publishing order (parts first, the marker last).

    Raises:
        SessionTooLarge: a single decision or pending job does not fit in a
            message, or the marker without any of them.
    """
    whole = _marker(header, list(decisions), header.pending, parts=0, time=time)
    size = len(encode(whole))
    if size <= max_message_bytes:
        return [whole]

    limit = max_message_bytes
    chunks: list[tuple[list[Decision], list[PendingJob]]] = [
        (chunk, []) for chunk in _chunk(header, decisions, time=time, max_message_bytes=limit)
    ]
    pending: Sequence[PendingJob] = header.pending
    if len(encode(_marker(header, [], pending, parts=len(chunks), time=time))) > limit:
        first = len(chunks)
        pending_chunks = _chunk(header, header.pending, time=time, max_message_bytes=limit, first_index=first)
        chunks.extend(([], chunk) for chunk in pending_chunks)
        pending = ()
    parts: list[SessionPart | SessionCommitted] = [
        _part(header, index, decisions=chunk, pending=pending_chunk, time=time)
        for index, (chunk, pending_chunk) in enumerate(chunks)
    ]
    marker = _marker(header, [], pending, parts=len(chunks), time=time)
    marker_size = len(encode(marker))
    if marker_size > limit:
        raise SessionTooLarge(
            header.session_id, "the commit marker without its pending reasons", marker_size, limit
        )
    parts.append(marker)
    return parts


def _part(
    header: SessionHeader,
    index: int,
    *,
    decisions: Sequence[Decision],
    pending: Sequence[PendingJob],
    time: datetime,
) -> SessionPart:
    return SessionPart(
        id=f"{header.session_id}/part-{index}",
        source=SCHEDULER_SOURCE,
        time=time,
        subject=f"session/{header.session_id}",
        cluster=header.cluster,
        data=SessionPartData(
            session_id=header.session_id, index=index, decisions=list(decisions), pending=list(pending)
        ),
    )


def _marker(
    header: SessionHeader,
    decisions: list[Decision],
    pending: Sequence[PendingJob],
    *,
    parts: int,
    time: datetime,
) -> SessionCommitted:
    return SessionCommitted(
        id=f"{header.session_id}/commit",
        source=SCHEDULER_SOURCE,
        time=time,
        subject=f"session/{header.session_id}",
        cluster=header.cluster,
        data=SessionCommittedData(
            session_id=header.session_id,
            leader_epoch=header.leader_epoch,
            input_seq=header.input_seq,
            config_version=header.config_version,
            now=header.now,
            input_digest=header.input_digest,
            logic_flags=list(header.logic_flags),
            decisions=decisions,
            parts=parts,
            pending=list(pending),
            pending_digest=header.pending_digest,
            pending_base=header.pending_base,
            pending_cleared=list(header.pending_cleared),
            pending_slice=header.pending_slice,
            pending_slices=header.pending_slices,
        ),
    )


Item = TypeVar("Item", Decision, PendingJob)


def _chunk(
    header: SessionHeader,
    items: Sequence[Item],
    *,
    time: datetime,
    max_message_bytes: int,
    first_index: int = 0,
) -> list[list[Item]]:
    """Greedy split of decisions (or pending jobs) into parts that each encode within the limit, in order."""
    # The empty part with the widest index it could get (no wider than a part's index may be):
    # an upper bound on every part's overhead.
    widest_index = min(first_index + len(items), MAX_SESSION_PARTS - 1)
    widest = _part(header, widest_index, decisions=[], pending=[], time=time)
    overhead = len(encode(widest))
    budget = max_message_bytes - overhead
    chunks: list[list[Item]] = []
    current: list[Item] = []
    used = 0
    for item in items:
        size = len(item.model_dump_json())
        cost = size if not current else size + 1  # the comma before it
        if size > budget:
            raise SessionTooLarge(header.session_id, f"{item!r}", size + overhead, max_message_bytes)
        if used + cost > budget:
            chunks.append(current)
            current, used, cost = [], 0, size
        current.append(item)
        used += cost
    if current:
        chunks.append(current)
    return chunks
