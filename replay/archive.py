"""What replay reads: archived events in seq order and the sessions recorded among them.

These are plain values, already loaded; :mod:`replay.store` is the only module
that talks to PostgreSQL.  A split session (``parts`` > 0) is assembled here
from its :class:`~events.models.SessionPart` events, so everything downstream
sees one :class:`RecordedSession` with its decisions in order, and with its
whole pending list: a session that recorded only the change from an earlier
session's list (``pending_base``) is read against that list
(:class:`PendingLists` keeps the recent ones).  A reader that starts in the
middle rebuilds a base list from the sessions before it, newest first
(:class:`ListFromNewest`): back to a whole list, or to where the slices those
changes restate cover every job.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from events.models import (
    BindDecision,
    Decision,
    EnqueueDecision,
    Event,
    EvictDecision,
    PendingJob,
    PipelineDecision,
    SessionCommitted,
    SessionCommittedData,
    SessionPart,
    SessionPartData,
    changed_pending,
)
from replay.errors import PartsMissing, PendingBaseMissing

__all__ = [
    "ArchivedEvent",
    "ListFromNewest",
    "PendingLists",
    "RecordedSession",
    "describe_decision",
    "recorded_sessions",
]


@dataclass(frozen=True, slots=True)
class ArchivedEvent:
    """One ``event_log`` row: the event and its place in the hash chain."""

    seq: int
    event: Event
    prev_hash: bytes = b""
    hash: bytes = b""
    #: The event's canonical JSON, reassembled from the row's columns (so an edit
    #: of any column shows); empty means "derive it from ``event``".
    canonical: bytes = b""
    #: Which columns the row's hash covers (docs/archive-format.md): 1 the event's
    #: bytes alone, 2 also ``members`` (projector.archive.row_members); 0 not read
    #: (the archive reader's rows: it checks the chain on ArchiveReader.links).
    chain_format: int = 0
    members: bytes = b""


@dataclass(frozen=True, slots=True)
class RecordedSession:
    """A SessionCommitted as archived, with its decisions assembled."""

    seq: int
    time: datetime
    data: SessionCommittedData
    decisions: tuple[Decision, ...]

    @property
    def session_id(self) -> str:
        return self.data.session_id

    @property
    def input_seq(self) -> int:
        return self.data.input_seq

    @property
    def now(self) -> datetime:
        return self.data.now


@dataclass(slots=True)
class PendingLists:
    """The whole pending lists of the sessions assembled last, by session id: the bases that
    later sessions' changes are read against.  A scheduler's change names the newest session
    of its input, so a few suffice; the oldest is forgotten first."""

    keep: int = 16
    lists: dict[str, tuple[PendingJob, ...]] = field(default_factory=dict)

    def base_of(self, seq: int, data: SessionCommittedData) -> tuple[PendingJob, ...] | None:
        """The list ``data``'s change is read against (None: it records its whole list).

        Raises:
            PendingBaseMissing: the base is not among the sessions assembled last.
        """
        if not data.pending_base:
            return None
        base = self.lists.get(data.pending_base)
        if base is None:
            raise PendingBaseMissing(data.session_id, seq, data.pending_base)
        return base

    def remember(self, session: RecordedSession) -> None:
        self.keep_list(session.session_id, tuple(session.data.pending))

    def keep_list(self, session_id: str, pending: tuple[PendingJob, ...]) -> None:
        """Remember session ``session_id``'s whole list (rebuilt by :class:`ListFromNewest`, say)."""
        self.lists[session_id] = pending
        if len(self.lists) > self.keep:
            del self.lists[next(iter(self.lists))]


@dataclass(slots=True)
class ListFromNewest:
    """One session's whole pending list, rebuilt from it and the sessions before it, given newest
    first along their ``pending_base`` links (:meth:`add`, until it returns True).

    A job's entry is the newest any of them carries; a job cleared before any newer entry is
    not pending.  The walk ends at a whole list, or once the changes met restate every slice of
    one count (``pending_slices``): each restates every job of its slice that was pending then,
    so a job pending in the newest session that no newer session names was restated (or
    listed whole) in one of them, and a job none of them carries was not pending.
    """

    #: Job -> its newest entry; None: cleared first.
    entries: dict[str, PendingJob | None] = field(default_factory=dict)
    #: Slice count -> the slices of it restated so far.
    restated: dict[int, set[int]] = field(default_factory=dict)
    complete: bool = False

    def add(self, data: SessionCommittedData, carried: Sequence[PendingJob]) -> bool:
        """Take the next older session: ``carried``, its pending entries (the parts', then the
        marker's).  Returns whether the list is complete (read it with :meth:`whole`)."""
        if self.complete:
            raise ValueError(f"the list is complete: session {data.session_id} is one too many")
        for entry in carried:
            self.entries.setdefault(entry.job, entry)
        if not data.pending_base:
            self.complete = True
            return True
        # Within one session an entry wins over the job's id among the cleared (changed_pending).
        for job in data.pending_cleared:
            self.entries.setdefault(job, None)
        if data.pending_slices:
            met = self.restated.setdefault(data.pending_slices, set())
            met.add(data.pending_slice)
            self.complete = len(met) == data.pending_slices
        return self.complete

    def whole(self) -> tuple[PendingJob, ...]:
        """The rebuilt list, in job order.

        Raises:
            ValueError: the walk is not complete.
        """
        if not self.complete:
            raise ValueError("the walk has not reached a whole list or every slice yet")
        return tuple(entry for job in sorted(self.entries) if (entry := self.entries[job]) is not None)


def recorded_sessions(events: Iterable[ArchivedEvent]) -> Iterator[RecordedSession]:
    """Every session in ``events`` (seq order), parts joined to their marker, changes to their base.

    Raises:
        PartsMissing: a marker announces more parts than precede it.
        PendingBaseMissing: a change's base session is not among the recent ones before it.
    """
    parts: dict[str, dict[int, SessionPartData]] = {}
    lists = PendingLists()
    for archived in events:
        event = archived.event
        if isinstance(event, SessionPart):
            parts.setdefault(event.data.session_id, {})[event.data.index] = event.data
        elif isinstance(event, SessionCommitted):
            base = lists.base_of(archived.seq, event.data)
            session = session_of(archived.seq, event, parts.pop(event.data.session_id, {}), base)
            lists.remember(session)
            yield session


def session_of(
    seq: int,
    event: SessionCommitted,
    parts: dict[int, SessionPartData] | None = None,
    base: Iterable[PendingJob] | None = None,
) -> RecordedSession:
    """The recorded session of one marker; ``parts`` by index when it was split; ``base``:
    the whole pending list of session ``pending_base`` when the marker names one.

    Pending reasons too large for the marker travel in its parts: ``data.pending``
    of the result is the whole list (the parts' in index order, then the marker's,
    read against the base when they are a change), as the fold assembles it.

    Raises:
        PendingBaseMissing: the marker records a change and ``base`` is None.
    """
    data = event.data
    if data.parts == 0:
        decisions = tuple(data.decisions)
    else:
        found = parts or {}
        if sorted(found) != list(range(data.parts)):
            raise PartsMissing(data.session_id, seq, data.parts, tuple(sorted(found)))
        decisions = tuple(d for index in range(data.parts) for d in found[index].decisions)
        carried = [p for index in range(data.parts) for p in found[index].pending]
        if carried:
            data = data.model_copy(update={"pending": [*carried, *data.pending]})
    if data.pending_base:
        if base is None:
            raise PendingBaseMissing(data.session_id, seq, data.pending_base)
        whole = changed_pending(base, data.pending, data.pending_cleared)
        data = data.model_copy(update={"pending": list(whole), "pending_base": "", "pending_cleared": []})
    return RecordedSession(seq=seq, time=event.time, data=data, decisions=decisions)


def describe_decision(decision: Decision) -> str:
    """One line naming the decision's identity, for divergence reports and tables."""
    if isinstance(decision, EnqueueDecision):
        return f"enqueue {decision.job}"
    if isinstance(decision, BindDecision):
        return f"bind {decision.task} -> {decision.node}"
    if isinstance(decision, PipelineDecision):
        return f"pipeline {decision.task} -> {decision.node}"
    if not isinstance(decision, EvictDecision):
        raise TypeError(f"not a decision: {decision!r}")
    rule = f", rule {decision.rule}" if decision.rule else ""
    return f"evict {decision.task} on {decision.node} ({decision.action} for {decision.preemptor_task}{rule})"
