"""Why did this job stay Pending?  The timeline, the ranked reasons, the counterfactual.

Pure: the caller loads the job's history (every archived event about it),
rebuilds the chosen session's input and re-runs it; this module turns that
into an :class:`Explanation` with a stable JSON form.

* The **timeline** lists the submissions (a name reused after its job finished
  is submitted again: each submission is an incarnation, its seq the uid), every session that considered the
  job (it was pending in it, or a decision named it) with its verdict —
  consecutive sessions with the same verdict are one entry, so a verdict
  *change* is a new entry — the decisions about the job that the fold voided
  (with the fold's reason code, right after their session), and the task
  events (started, finished, evicted), cancellation and rejection, each with
  seq, time and session id.
* The **facts** are the job as the chosen session saw it, with ``uid``: the
  incarnation live at its input seq.
* The **reasons** are the re-run's ranked reasons for the chosen session,
  with their numbers (``detail``), checked against the recorded ones.
* The **counterfactual** is :func:`replay.counterfactual.find_counterfactual`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from events.models import (
    Decision,
    JobCancelled,
    JobRejected,
    JobSubmitted,
    PendingJob,
    PendingReason,
    SessionCommitted,
    SessionPart,
    SessionPartData,
    TaskFinished,
    TasksAdded,
    TaskStarted,
)
from projector.state import VoidedDecision
from replay import engine
from replay.archive import ArchivedEvent, RecordedSession
from replay.blockers import Blocker
from replay.counterfactual import Counterfactual
from replay.errors import UnknownJob
from replay.quantities import detail_quantities, resource_quantities
from scheduler.core.session import SessionResult
from scheduler.core.snapshot import ClusterSnapshot

__all__ = [
    "Explanation",
    "Search",
    "SessionMention",
    "TimelineEntry",
    "choose_session",
    "decision_sessions",
    "explain",
    "incarnation_at",
    "mentions",
    "timeline",
]


@dataclass(frozen=True, slots=True)
class SessionMention:
    """A session as far as one job is concerned: its verdict for the job."""

    seq: int
    time: datetime
    session_id: str
    now: datetime
    verdict: str
    pending_codes: tuple[str, ...]
    decisions: tuple[Decision, ...]
    recorded_reasons: tuple[PendingReason, ...]


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    kind: str  # submitted | sessions | voided | task-started | task-finished | cancelled | rejected
    seq: int
    time: datetime
    text: str
    session_id: str | None = None
    #: For ``sessions``: the last session of the run and how many there were.
    last_seq: int | None = None
    last_session_id: str | None = None
    count: int = 1
    #: For ``voided``: the decision the fold refused and its reason code.
    voided: VoidedDecision | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "seq": self.seq,
            "time": self.time.isoformat(),
            "text": self.text,
        }
        if self.session_id is not None:
            out["session"] = self.session_id
        if self.kind == "sessions":
            out["lastSeq"] = self.last_seq
            out["lastSession"] = self.last_session_id
            out["count"] = self.count
        if self.voided is not None:
            v = self.voided
            out["voided"] = {
                "position": v.index,
                "decision": v.kind,
                "job": v.job,
                "task": v.task,
                "node": v.node,
                "reason": v.reason,
            }
        return out


def _verdict(job: str, decisions: Sequence[Decision], codes: Sequence[str]) -> str:
    parts: list[str] = []
    counts: dict[str, int] = {}
    for d in decisions:
        if d.job == job:
            key = f"{d.action}ed" if d.kind == "evict" else d.kind
            counts[key] = counts.get(key, 0) + 1
        elif d.kind == "evict" and d.preemptor_job == job:
            counts[f"{d.action}ing"] = counts.get(f"{d.action}ing", 0) + 1
    labels = {
        "enqueue": "enqueued",
        "bind": "{n} task(s) bound",
        "pipeline": "{n} task(s) pipelined",
        "preempted": "{n} task(s) preempted",
        "reclaimed": "{n} task(s) reclaimed",
        "preempting": "evicting {n} task(s) to make room (preempt)",
        "reclaiming": "evicting {n} task(s) to make room (reclaim)",
    }
    for key in ("enqueue", "bind", "pipeline", "preempted", "reclaimed", "preempting", "reclaiming"):
        if key in counts:
            parts.append(labels[key].format(n=counts[key]))
    if codes:
        parts.append("pending: " + ", ".join(codes))
    return "; ".join(parts) or "considered"


def mentions(job: str, history: Iterable[ArchivedEvent]) -> list[SessionMention]:
    """The sessions of ``history`` that considered ``job``, in seq order.

    Split sessions are joined from whichever of their parts are in the
    history (the parts that do not name the job do not matter to it): their
    decisions, and their pending entries (reasons too large for the marker
    travel in the parts), which come before the marker's as the fold
    assembles them (:func:`replay.archive.session_of`).  A session that
    recorded the change from its base session's list (``pending_base``; the
    history holds every such session) names the job only when its entry
    changed: otherwise the job's entry is its base's.
    """
    parts: dict[str, dict[int, SessionPartData]] = {}
    out: list[SessionMention] = []
    #: The job's pending entry in each session of the history (None: not pending).
    entries: dict[str, PendingJob | None] = {}
    for archived in history:
        event = archived.event
        if isinstance(event, SessionPart):
            parts.setdefault(event.data.session_id, {})[event.data.index] = event.data
            continue
        if not isinstance(event, SessionCommitted):
            continue
        data = event.data
        split = [part for _, part in sorted(parts.pop(data.session_id, {}).items())]
        decisions = tuple(
            d
            for d in (*data.decisions, *(d for part in split for d in part.decisions))
            if d.job == job or (d.kind == "evict" and d.preemptor_job == job)
        )
        pending = next(
            (p for p in (*(p for part in split for p in part.pending), *data.pending) if p.job == job), None
        )
        if data.pending_base and pending is None and job not in data.pending_cleared:
            pending = entries.get(data.pending_base)
        entries[data.session_id] = pending
        codes = tuple(r.code for r in pending.reasons) if pending is not None else ()
        if pending is None and not decisions:
            continue
        out.append(
            SessionMention(
                seq=archived.seq,
                time=event.time,
                session_id=data.session_id,
                now=data.now,
                verdict=_verdict(job, decisions, codes),
                pending_codes=codes,
                decisions=decisions,
                recorded_reasons=tuple(pending.reasons) if pending is not None else (),
            )
        )
    return out


def decision_sessions(found: Iterable[SessionMention]) -> list[SessionMention]:
    """The mentions (see :func:`mentions`) with a decision about the job: those whose voided list matters."""
    return [m for m in found if m.decisions]


def _concerns(mention: SessionMention, voided: VoidedDecision) -> bool:
    """Whether a voided decision is one of the mention's (the job's own, or one it preempts for)."""
    return any(
        d.kind == voided.kind
        and d.job == voided.job
        and getattr(d, "task", None) == voided.task
        and getattr(d, "node", None) == voided.node
        for d in mention.decisions
    )


def _voided_text(v: VoidedDecision) -> str:
    what = v.job if v.task is None else v.task
    where = f" on {v.node}" if v.node else ""
    return f"{v.kind} of {what}{where} voided by the fold: {v.reason}"


def timeline(  # noqa: PLR0912 - one branch per event type of a job
    job: str,
    history: Sequence[ArchivedEvent],
    voided: Mapping[str, Sequence[VoidedDecision]] | None = None,
    *,
    found: Sequence[SessionMention] | None = None,
) -> tuple[TimelineEntry, ...]:
    """The job's life as the archive tells it (see the module docstring).

    ``voided`` maps a session id to the decisions the fold voided in it (the
    fold's :class:`~projector.state.VoidedDecision` records, from folding
    the archive up to that session's marker); those about the job follow
    their session's entry.  Sessions missing from it show no voided entry.
    ``found``: :func:`mentions` of the same history, when the caller has it.

    Raises:
        UnknownJob: nothing in ``history`` is about the job.
    """
    entries: list[TimelineEntry] = []
    sessions = {m.seq: m for m in (mentions(job, history) if found is None else found)}
    refused = voided or {}
    incarnations = 0
    for archived in history:
        event = archived.event
        seq = archived.seq
        if isinstance(event, JobSubmitted) and event.data.job_id == job:
            d = event.data
            tasks = sum(t.replicas for t in d.tasks)
            gang = f", minAvailable {d.min_available}" if d.min_available is not None else ""
            # Each archived JobSubmitted of the name is an incarnation (the fold refuses one
            # while the earlier job has not finished); its seq is the incarnation's uid.
            again = f"submitted again (incarnation {seq})" if incarnations else "submitted"
            incarnations += 1
            text = f"{again} to queue {d.queue}: {tasks} task(s){gang}"
            entries.append(TimelineEntry("submitted", seq, event.time, text))
        elif isinstance(event, TasksAdded) and event.data.job_id == job:
            added = ", ".join(f"{t.name} x{t.replicas}" for t in event.data.tasks)
            entries.append(TimelineEntry("tasks-added", seq, event.time, f"tasks added: {added}"))
        elif seq in sessions:
            m = sessions[seq]
            last = entries[-1] if entries else None
            if last is not None and last.kind == "sessions" and last.text == m.verdict:
                entries[-1] = TimelineEntry(
                    "sessions",
                    last.seq,
                    last.time,
                    last.text,
                    last.session_id,
                    seq,
                    m.session_id,
                    last.count + 1,
                )
            else:
                entries.append(
                    TimelineEntry("sessions", seq, event.time, m.verdict, m.session_id, seq, m.session_id)
                )
            for v in sorted(refused.get(m.session_id, ()), key=lambda v: v.index):
                if _concerns(m, v):
                    entries.append(
                        TimelineEntry("voided", seq, event.time, _voided_text(v), m.session_id, voided=v)
                    )
        elif isinstance(event, TaskStarted) and event.data.job_id == job:
            entries.append(
                TimelineEntry(
                    "task-started", seq, event.time, f"{event.data.task_id} started on {event.data.node}"
                )
            )
        elif isinstance(event, TaskFinished) and event.data.job_id == job:
            done = event.data
            where = f" on {done.node}" if done.node else ""
            why = f" ({done.reason})" if done.reason else ""
            entries.append(
                TimelineEntry("task-finished", seq, event.time, f"{done.task_id} {done.outcome}{where}{why}")
            )
        elif isinstance(event, JobCancelled) and event.data.job_id == job:
            entries.append(
                TimelineEntry(
                    "cancelled", seq, event.time, f"cancelled: {event.data.reason or 'no reason given'}"
                )
            )
        elif isinstance(event, JobRejected) and event.data.job_id == job:
            entries.append(
                TimelineEntry(
                    "rejected", seq, event.time, f"rejected [{event.data.code}] {event.data.reason}"
                )
            )
    if not entries:
        raise UnknownJob(job)
    return tuple(entries)


def choose_session(
    job: str,
    history: Sequence[ArchivedEvent],
    *,
    session_id: str | None = None,
    at: datetime | None = None,
    found: Sequence[SessionMention] | None = None,
) -> SessionMention | None:
    """The session to explain: ``session_id``, else the latest at or before ``at``, else the latest.

    None when no session considered the job (under those constraints).  ``found``:
    :func:`mentions` of the same history, when the caller has it.
    """
    found = mentions(job, history) if found is None else found
    if session_id is not None:
        return next((m for m in found if m.session_id == session_id), None)
    if at is not None:
        found = [m for m in found if m.now <= at]
    return found[-1] if found else None


@dataclass(frozen=True, slots=True)
class Search:
    """What explain's searches found for a pending job: every blocker, and what would have let it fit."""

    blockers: tuple[Blocker, ...]
    #: False when the time budget cut the blocker search.
    blockers_complete: bool
    counterfactual: Counterfactual | None


@dataclass(frozen=True, slots=True)
class Explanation:
    job: str
    timeline: tuple[TimelineEntry, ...]
    session: RecordedSession | None
    facts: dict[str, Any] = field(default_factory=dict)
    #: The re-run's ranked reasons: code, message, detail.
    reasons: tuple[dict[str, Any], ...] = ()
    #: True when the re-run's reasons (codes and messages) are the recorded ones.
    reasons_rederived: bool = True
    recorded_reasons: tuple[PendingReason, ...] = ()
    verdict: str = ""
    counterfactual: Counterfactual | None = None
    #: Every reason that blocks the job, ranked: the re-run's, then those hidden behind them
    #: (:mod:`replay.blockers`); empty when the job was not pending.
    blockers: tuple[Blocker, ...] = ()
    #: False when the time budget cut the blocker search short.
    blockers_complete: bool = True
    #: The trace id of the job's submission (its story in a tracing backend), when it had one.
    trace_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        session: dict[str, Any] | None = None
        if self.session is not None:
            s = self.session
            session = {"id": s.session_id, "seq": s.seq, "inputSeq": s.input_seq, "now": s.now.isoformat()}
        return {
            "job": self.job,
            "traceId": self.trace_id,
            "timeline": [e.to_json() for e in self.timeline],
            "session": session,
            "verdict": self.verdict,
            "facts": self.facts,
            "reasons": [{**r, "detail": detail_quantities(r["detail"])} for r in self.reasons],
            "reasonsRederived": self.reasons_rederived,
            "blockers": [b.to_json() for b in self.blockers],
            "blockersComplete": self.blockers_complete,
            "recordedReasons": [r.model_dump(mode="json") for r in self.recorded_reasons],
            "counterfactual": None if self.counterfactual is None else self.counterfactual.to_json(),
        }


def job_facts(snapshot: ClusterSnapshot, result: SessionResult, job: str) -> dict[str, Any]:
    """The job as the session left it: queue, phase (and at the session's start), gang size,
    tasks by status after this session's decisions, and their request as quantities."""
    found = next((j for j in snapshot.jobs if j.uid == job), None)
    if found is None:
        return {}
    # This session's decisions move tasks on: a bind is Binding, a pipeline Pipelined, an eviction Releasing.
    moved: dict[str, str] = {}
    for d in engine.decisions_of(result):
        if d.job == job and d.kind in _MOVED:
            moved[d.task] = _MOVED[d.kind]  # type: ignore[union-attr]
    statuses: dict[str, int] = {}
    for t in found.tasks:
        status = moved.get(t.uid, t.status.value)
        statuses[status] = statuses.get(status, 0) + 1
    requests = sorted({tuple(sorted(t.request.items())) for t in found.tasks})
    return {
        "queue": found.queue,
        "phase": result.phases.get(job, found.phase.value),
        "phaseAtStart": found.phase.value,
        "minAvailable": found.min_member,
        "tasks": dict(sorted(statuses.items())),
        "taskRequests": [resource_quantities(dict(r)) for r in requests],
        "minResources": None if found.min_resources is None else resource_quantities(found.min_resources),
        "priorityClass": found.priority_class,
    }


_MOVED = {"bind": "Binding", "pipeline": "Pipelined", "evict": "Releasing"}


def incarnation_at(job: str, history: Iterable[ArchivedEvent], seq: int) -> int | None:
    """The uid of ``job``'s incarnation live at ``seq`` (a session's input): the seq of its
    latest JobSubmitted at or before it (a name is reused once its job finished); None: none."""
    found = None
    for archived in history:
        if archived.seq > seq:
            break
        event = archived.event
        if isinstance(event, JobSubmitted) and event.data.job_id == job:
            found = archived.seq
    return found


def explain(
    job: str,
    history: Sequence[ArchivedEvent],
    *,
    mention: SessionMention | None,
    session: RecordedSession | None,
    snapshot: ClusterSnapshot | None,
    result: SessionResult | None,
    search: Search | None,
    voided: Mapping[str, Sequence[VoidedDecision]] | None = None,
    found: Sequence[SessionMention] | None = None,
) -> Explanation:
    """Assemble the explanation of ``job`` for the chosen, re-run session (``voided``: :func:`timeline`)."""
    entries = timeline(job, history, voided, found=found)
    if session is None or snapshot is None or result is None:
        submitted = next((e for e in entries if e.kind == "submitted"), None)
        when = f" at {submitted.time.isoformat()}" if submitted is not None else ""
        return Explanation(job, entries, None, verdict=f"submitted{when}, not yet considered by a session")
    reasons = tuple(r.to_json() for r in result.pending.get(job, ()))
    recorded = mention.recorded_reasons if mention is not None else ()
    facts = job_facts(snapshot, result, job)
    if facts:
        facts["uid"] = incarnation_at(job, history, session.input_seq)
    rederived = [(r["code"], r["message"]) for r in reasons] == [(r.code, r.message) for r in recorded]
    return Explanation(
        job=job,
        timeline=entries,
        session=session,
        facts=facts,
        reasons=reasons,
        reasons_rederived=rederived,
        recorded_reasons=recorded,
        verdict=mention.verdict if mention is not None else "not considered in this session",
        counterfactual=None if search is None else search.counterfactual,
        blockers=() if search is None else search.blockers,
        blockers_complete=True if search is None else search.blockers_complete,
    )
