"""What replay reads: archived events in seq order and the sessions recorded among them.

These are plain values, already loaded; :mod:`replay.store` is the only module
that talks to PostgreSQL.  A split session (``parts`` > 0) is assembled here
from its :class:`~events.models.SessionPart` events, so everything downstream
sees one :class:`RecordedSession` with its decisions in order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

from events.models import (
    BindDecision,
    Decision,
    EnqueueDecision,
    Event,
    EvictDecision,
    PipelineDecision,
    SessionCommitted,
    SessionCommittedData,
    SessionPart,
    SessionPartData,
)
from replay.errors import PartsMissing

__all__ = [
    "ArchivedEvent",
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
    #: The canonical JSON the chain hashes, reassembled from the row's columns
    #: (so an edit of any column shows); empty means "derive it from ``event``".
    canonical: bytes = b""


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


def recorded_sessions(events: Iterable[ArchivedEvent]) -> Iterator[RecordedSession]:
    """Every session in ``events`` (seq order), parts joined to their marker.

    Raises:
        PartsMissing: a marker announces more parts than precede it.
    """
    parts: dict[str, dict[int, SessionPartData]] = {}
    for archived in events:
        event = archived.event
        if isinstance(event, SessionPart):
            parts.setdefault(event.data.session_id, {})[event.data.index] = event.data
        elif isinstance(event, SessionCommitted):
            yield session_of(archived.seq, event, parts.pop(event.data.session_id, {}))


def session_of(
    seq: int, event: SessionCommitted, parts: dict[int, SessionPartData] | None = None
) -> RecordedSession:
    """The recorded session of one marker; ``parts`` by index when it was split.

    Pending reasons too large for the marker travel in its parts: ``data.pending``
    of the result is the whole list (the parts' in index order, then the marker's),
    as the fold assembles it.
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
