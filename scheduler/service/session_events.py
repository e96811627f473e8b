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
there is no base, and when the change would be no smaller.  The scheduler
computes a session's list, digest and change with :class:`PendingCache`,
which keeps the last list's entries: its cost is one comparison per pending
job and the work of the jobs that changed.

Sizes are exact, not estimated: :func:`events.serde.encode` writes compact
JSON, so a part's size is the size of the empty part plus each decision's
JSON and the commas between them.
"""

from __future__ import annotations

import hashlib
import json
import operator
import uuid
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Protocol, TypeVar

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
    "PendingCache",
    "PendingChange",
    "SessionHeader",
    "SessionPending",
    "digest_pending",
    "pending_change",
    "pending_slice_of",
    "session_events",
    "session_id_for",
]

SCHEDULER_SOURCE: Final = "tephra://scheduler"
# The namespace of session ids (a fixed, arbitrary UUID owned by this module).
_SESSION_NAMESPACE: Final = uuid.UUID("0b6c2f9e-4a51-4d7e-8f3a-2c9d5e1a7b60")
#: The slices a pending list is cut into: a change restates one of them (see the module).
#: At 92,000 pending jobs a slice is ~360 entries (~0.1 MB): what the projector writes and the
#: scheduler reads back for every session besides its change.
PENDING_SLICES: Final = 256


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


@dataclass(frozen=True, slots=True)
class SessionPending:
    """A session's pending reasons as it publishes them."""

    #: The whole list, by job id.
    whole: tuple[PendingJob, ...]
    #: Of the whole list.
    digest: str
    change: PendingChange


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
    return _digest_of_texts(map(_entry_text, pending))


def _entry_text(entry: PendingJob) -> bytes:
    """The entry's canonical JSON (ASCII): the list's is its entries' joined."""
    return json.dumps(
        entry.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=True
    ).encode()


def _digest_of_texts(texts: Iterable[bytes]) -> str:
    return "sha256:" + hashlib.sha256(b"[" + b",".join(texts) + b"]").hexdigest()


#: A job's reasons as compared from one session to the next: their codes, then their messages, in
#: rank order (flat: the cheapest tuple to build, and as exact as pairs).
_Key = tuple[str, ...]
_code: Final = operator.attrgetter("code")
_message: Final = operator.attrgetter("message")
_job_model: Final = operator.itemgetter(1)
_job_text: Final = operator.itemgetter(2)


def _key_of(reasons: Sequence[_HasCodeAndMessage]) -> _Key:
    return (*map(_code, reasons), *map(_message, reasons))


def _entry_of(job: str, key: _Key) -> PendingJob:
    half = len(key) // 2
    return PendingJob(
        job=job,
        reasons=[PendingReason(code=c, message=m) for c, m in zip(key[:half], key[half:], strict=True)],
    )


class PendingCache:
    """The pending list the scheduler computed last, entry by entry, so the next session's list, its
    digest and its change cost one comparison per job and the work of the jobs that changed.

    A big backlog keeps most jobs pending with the same reasons from one session to the next.
    Each job's entry is kept with its reasons' codes and messages, its canonical JSON and its
    id's CRC-32 (:func:`pending_slice_of`): an unchanged job reuses all of them, so the change
    is the jobs whose reasons differ (found while the list is built, not by comparing two
    lists of models) and the digest hashes kept texts.  The cache stands for the newest
    session's list only while that session is the one it computed last (the fold applied it:
    its list is this one); otherwise (a term's first session, a session abandoned or another
    leader's in between) it starts again from the newest session's list as the state holds it.
    Bounded by the last list.  The result is exactly :func:`pending_change` of the whole list
    against the newest session's, and :func:`digest_pending` (the tests compare them).
    """

    def __init__(self) -> None:
        #: job -> (reasons key, entry, canonical JSON, CRC-32 of the id): the last list computed.
        self._entries: dict[str, tuple[_Key, PendingJob, bytes, int]] = {}
        #: The session whose whole list ``_entries`` is ("": none yet).
        self._session = ""
        #: (position in that list, job) of each entry that session carried.
        self._carried: list[tuple[int, str]] = []

    def session(
        self,
        state: ClusterState,
        reasons: Mapping[str, Sequence[_HasCodeAndMessage]],
        *,
        session_id: str,
        restate: int | None,
        max_cleared_bytes: int,
        slices: int = PENDING_SLICES,
    ) -> SessionPending:
        """The core's pending ``reasons`` for session ``session_id`` on ``state``: the whole list,
        its digest, and what travels: the change from the newest session's list restating slice
        ``restate`` of ``slices`` (0: none), or the whole list when ``restate`` is None or no
        change applies (see :func:`pending_change`)."""
        if slices and restate is not None and not 0 <= restate < slices:
            raise ValueError(f"slice {restate} is not one of {slices}")
        newest = next(reversed(state.sessions.values()), None)
        base = None if newest is None else newest.pending
        if newest is None or base is None or newest.session_id != self._session or not self._adopt(base):
            self._start_from(base or ())
        self._session = session_id
        entries = self._entries
        restated = restate if slices and restate is not None else -1
        ordered: list[tuple[_Key, PendingJob, bytes, int]] = []
        carried: list[PendingJob] = []  # new or different, and the restated slice's
        self._carried = []
        jobs = sorted(reasons)
        last: Sequence[_HasCodeAndMessage] = ()
        key: _Key = ()
        for job, ranked in zip(jobs, map(reasons.__getitem__, jobs), strict=True):
            # Jobs of a refused backlog hold the same reasons (the same objects: the tuples
            # compare item by item, by identity first): their key is made once.
            if ranked != last:
                key = (*map(_code, ranked), *map(_message, ranked))  # _key_of, inlined
                last = ranked
            entry = entries.get(job)
            if entry is None or entry[0] != key:
                model = _entry_of(job, key)
                entry = (key, model, _entry_text(model), zlib.crc32(job.encode()))
                entries[job] = entry
                carried.append(model)
                self._carried.append((len(ordered), job))
            elif restated >= 0 and entry[3] % slices == restated:
                carried.append(entry[1])
                self._carried.append((len(ordered), job))
            ordered.append(entry)
        cleared = tuple(sorted(entries.keys() - reasons.keys()))
        for job in cleared:
            del entries[job]
        whole = tuple(map(_job_model, ordered))
        digest = _digest_of_texts(map(_job_text, ordered))
        change = PendingChange(base="", pending=whole, cleared=())
        if (
            newest is not None
            and base is not None
            and restate is not None
            and len(carried) + len(cleared) < len(whole)
            and sum(len(json.dumps(job)) + 1 for job in cleared) <= max_cleared_bytes
        ):
            change = PendingChange(
                base=newest.session_id,
                pending=tuple(carried),
                cleared=cleared,
                slice=restate if slices else 0,
                slices=slices,
            )
        else:
            self._carried = list(enumerate(jobs))  # the whole list travels
        return SessionPending(whole=whole, digest=digest, change=change)

    def _adopt(self, base: Sequence[PendingJob]) -> bool:
        """Take the state's entries (``base``, the newest session's list: this cache's last list)
        of the jobs the last session carried, so the state and the cache hold one model of each
        job, not two (the scheduler's state reads them back from the archive: 92k pending jobs'
        models are ~150 MiB).  False when ``base`` is not the list this cache computed last."""
        if len(base) != len(self._entries):
            return False
        entries = self._entries
        for index, job in self._carried:
            model = base[index]
            if model.job != job:
                return False
            key, _, text, crc = entries[job]
            entries[job] = (key, model, text, crc)
        return True

    def _start_from(self, base: Sequence[PendingJob]) -> None:
        """Stand for ``base`` (the newest session's list as the state holds it)."""
        self._entries = {
            p.job: (_key_of(p.reasons), p, _entry_text(p), zlib.crc32(p.job.encode())) for p in base
        }
        self._carried = []


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
