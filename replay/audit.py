"""The preemption audit: every eviction, who caused it, under which rule, and what it did to the queues.

One :class:`EvictionRow` per ``evict`` decision recorded in a SessionCommitted
(parts included), in seq then decision order — exactly the evictions in
``event_log``.  Each row carries:

* where: session id, the marker's seq, the decision's position, ``now``;
* what: action (preempt | reclaim), the victim task/job/queue/priority and
  node, the preemptor task/job/queue/priority, the rule that fired;
* the victim's and the preemptor's queue share *before* the session (at
  session open) and *after* it: allocated minus this session's accepted
  evictions, plus its accepted bindings and pipelined placements, against the
  deserved share the session computed (proportion's water-filling, or
  capacity's ``deserved``; the queue's own ``deserved`` when neither plugin
  is configured), all read from the re-run's result (``SessionResult.shares``).
  ``share`` is Volcano's: the largest allocated/deserved ratio over the
  dimensions that have a deserved amount;
* ``verified``: the re-run of the session produced this very decision at this
  very position; ``voided``: the fold's reason when it refused the decision.

Priorities are the job priorities the priority plugin compares (the
PriorityClass value, else the global default, else 0; ``SessionResult.priorities``).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from events.display import printable
from events.models import Decision, EvictDecision
from replay import engine
from replay.archive import RecordedSession
from scheduler.core.config import SchedulerConfig
from scheduler.core.session import SessionResult
from scheduler.core.snapshot import ClusterSnapshot

__all__ = ["CSV_COLUMNS", "EvictionRow", "QueueShare", "audit_session", "rows_to_csv"]


@dataclass(frozen=True, slots=True)
class QueueShare:
    allocated: Mapping[str, int]
    deserved: Mapping[str, float]

    @property
    def share(self) -> float:
        ratios = [self.allocated.get(d, 0) / v for d, v in self.deserved.items() if v >= 0.1]
        return max(ratios, default=0.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "allocated": dict(sorted(self.allocated.items())),
            "deserved": dict(sorted(self.deserved.items())),
            "share": round(self.share, 6),
        }


@dataclass(frozen=True, slots=True)
class EvictionRow:
    time: datetime
    session_id: str
    seq: int
    position: int
    action: str
    node: str
    victim_task: str
    victim_job: str
    victim_queue: str
    victim_priority: int
    preemptor_task: str
    preemptor_job: str
    preemptor_queue: str
    preemptor_priority: int
    rule: str
    victim_share_before: QueueShare
    victim_share_after: QueueShare
    preemptor_share_before: QueueShare
    preemptor_share_after: QueueShare
    verified: bool
    voided: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "time": self.time.isoformat(),
            "session": self.session_id,
            "seq": self.seq,
            "position": self.position,
            "action": self.action,
            "node": self.node,
            "victim": {
                "task": self.victim_task,
                "job": self.victim_job,
                "queue": self.victim_queue,
                "priority": self.victim_priority,
                "shareBefore": self.victim_share_before.to_json(),
                "shareAfter": self.victim_share_after.to_json(),
            },
            "preemptor": {
                "task": self.preemptor_task,
                "job": self.preemptor_job,
                "queue": self.preemptor_queue,
                "priority": self.preemptor_priority,
                "shareBefore": self.preemptor_share_before.to_json(),
                "shareAfter": self.preemptor_share_after.to_json(),
            },
            "rule": self.rule,
            "verified": self.verified,
            "voided": self.voided,
        }


CSV_COLUMNS = (
    "time", "session", "seq", "position", "action", "node",
    "victim_task", "victim_job", "victim_queue", "victim_priority",
    "preemptor_task", "preemptor_job", "preemptor_queue", "preemptor_priority", "rule",
    "victim_share_before", "victim_share_after", "preemptor_share_before", "preemptor_share_after",
    "verified", "voided",
)  # fmt: skip


def rows_to_csv(rows: Sequence[EvictionRow]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for r in rows:
        writer.writerow(
            # The names and texts come from the archive: shown with control characters escaped.
            printable(cell) if isinstance(cell, str) else cell
            for cell in (
                r.time.isoformat(), r.session_id, r.seq, r.position, r.action, r.node,
                r.victim_task, r.victim_job, r.victim_queue, r.victim_priority,
                r.preemptor_task, r.preemptor_job, r.preemptor_queue, r.preemptor_priority, r.rule,
                f"{r.victim_share_before.share:.4f}", f"{r.victim_share_after.share:.4f}",
                f"{r.preemptor_share_before.share:.4f}", f"{r.preemptor_share_after.share:.4f}",
                "yes" if r.verified else "no", r.voided or "",
            )
        )  # fmt: skip
    return out.getvalue()


@dataclass(frozen=True, slots=True)
class _Opened:
    """The session as opened: job priorities, queues, and the queue accounting at open."""

    priority: dict[str, int]
    queue_of: dict[str, str]
    requests: dict[str, dict[str, int]]
    allocated: dict[str, dict[str, int]]
    deserved: dict[str, dict[str, float]]


def _open(snapshot: ClusterSnapshot, result: SessionResult) -> _Opened:
    """The queue accounting the session reported (``SessionResult.shares``), with the
    snapshot's jobs and task requests."""
    shares = result.shares
    return _Opened(
        priority=result.priorities,
        queue_of={job.uid: job.queue for job in snapshot.jobs},
        requests={task.uid: task.request for job in snapshot.jobs for task in job.tasks},
        allocated=shares.allocated,
        deserved={
            q: {d: float(v) for d, v in sorted(amounts.items())} for q, amounts in shares.deserved.items()
        },
    )


def _after(
    opened: _Opened, decisions: Sequence[Decision], voided: Mapping[int, str]
) -> dict[str, dict[str, int]]:
    after = {q: dict(v) for q, v in opened.allocated.items()}
    for index, d in enumerate(decisions):
        if index in voided or d.kind == "enqueue":
            continue
        sign = -1 if d.kind == "evict" else 1
        queue = opened.queue_of.get(d.job)
        request = opened.requests.get(d.task)
        if queue is None or request is None:
            continue
        bucket = after.setdefault(queue, {})
        for dim, amount in request.items():
            bucket[dim] = bucket.get(dim, 0) + sign * amount
    return after


def audit_session(
    session: RecordedSession,
    snapshot: ClusterSnapshot,
    config: SchedulerConfig,
    rerun: SessionResult | None,
    voided: Mapping[int, str],
) -> list[EvictionRow]:
    """The eviction rows of one session; ``rerun`` is its re-run (None: not re-run, as
    its input or configuration diverged: the shares are then taken from a run of
    ``snapshot`` that verifies nothing)."""
    evictions = [(i, d) for i, d in enumerate(session.decisions) if isinstance(d, EvictDecision)]
    if not evictions:
        return []
    rederived = engine.decisions_of(rerun) if rerun is not None else None
    result = rerun if rerun is not None else engine.run(snapshot, config, session.now, ())
    opened = _open(snapshot, result)
    after = _after(opened, session.decisions, voided)

    def share(queue: str, allocated: Mapping[str, dict[str, int]]) -> QueueShare:
        return QueueShare(dict(allocated.get(queue, {})), dict(opened.deserved.get(queue, {})))

    rows = []
    for position, d in evictions:
        victim_queue = opened.queue_of.get(d.job, "")
        preemptor_queue = opened.queue_of.get(d.preemptor_job, "")
        verified = rederived is not None and position < len(rederived) and rederived[position] == d
        rows.append(
            EvictionRow(
                time=session.now,
                session_id=session.session_id,
                seq=session.seq,
                position=position,
                action=d.action,
                node=d.node,
                victim_task=d.task,
                victim_job=d.job,
                victim_queue=victim_queue,
                victim_priority=opened.priority.get(d.job, 0),
                preemptor_task=d.preemptor_task,
                preemptor_job=d.preemptor_job,
                preemptor_queue=preemptor_queue,
                preemptor_priority=opened.priority.get(d.preemptor_job, 0),
                rule=d.rule,
                victim_share_before=share(victim_queue, opened.allocated),
                victim_share_after=share(victim_queue, after),
                preemptor_share_before=share(preemptor_queue, opened.allocated),
                preemptor_share_after=share(preemptor_queue, after),
                verified=verified,
                voided=voided.get(position),
            )
        )
    return rows
