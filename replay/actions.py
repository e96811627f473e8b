"""The actions audit: who submitted, cancelled, rejected, configured, closed, led or evicted what.

One :class:`ActionRow` per archived act of a principal, in seq order: every
intent (a job submitted, cancelled or rejected; a queue upserted, closed or
deleted; a priority class; a scheduler configuration), every leadership
(LeaderElected) and every ``evict`` decision of a session (the scheduler's
act, by the principal that signed the session).  ``principal`` is the event's
(``NAME`` or ``NAME:SUBJECT``: the HTTP API records ``api:<token subject>``,
``tephra submit`` ``cli:<user>``), ``None`` for an event produced unsigned
(development deployments, archives older than signing); ``signed`` says
whether the archive holds its signature.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from events.models import (
    Event,
    EvictDecision,
    JobCancelled,
    JobRejected,
    JobSubmitted,
    LeaderElected,
    PriorityClassUpserted,
    QueueDeleted,
    QueueUpserted,
    SchedulerConfigured,
    SessionCommitted,
    SessionPart,
    TasksAdded,
)
from replay.archive import ArchivedEvent

__all__ = ["ACTION_COLUMNS", "ActionRow", "actions_of", "actions_to_csv"]

ACTION_COLUMNS: Final = ("seq", "time", "principal", "signed", "action", "object", "detail")


@dataclass(frozen=True, slots=True)
class ActionRow:
    seq: int
    time: datetime
    principal: str | None
    signed: bool
    #: submit, cancel, reject, upsert, close, delete, configure, lead, evict.
    action: str
    #: ``job/<ns>/<name>``, ``queue/<name>``, ``priorityclass/<name>``, ``scheduler``,
    #: ``leader/<epoch>``, ``task/<task id>``.
    object: str
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "time": self.time.isoformat(),
            "principal": self.principal,
            "signed": self.signed,
            "action": self.action,
            "object": self.object,
            "detail": self.detail,
        }


def actions_of(
    rows: Iterable[ArchivedEvent], *, principal: str | None = None, job: str | None = None
) -> Iterator[ActionRow]:
    """The actions in ``rows`` (seq order), those of ``principal`` (its NAME or exact principal) and
    about ``job`` (a job id: its submission, cancellation, rejection, and evictions of its tasks)."""
    for row in rows:
        event = row.event
        who = event.principal
        if principal is not None and who != principal and (who or "").partition(":")[0] != principal:
            continue
        for action, obj, detail in _acts(event):
            if job is not None and not _about(obj, detail, job):
                continue
            yield ActionRow(row.seq, event.time, who, event.signature is not None, action, obj, detail)


def _about(obj: str, detail: str, job: str) -> bool:
    return obj == f"job/{job}" or f"job {job} " in f"{detail} " or obj.startswith(f"task/{job}-")


def _acts(event: Event) -> Iterator[tuple[str, str, str]]:  # noqa: PLR0912 - one case per event type
    match event:
        case JobSubmitted(data=d):
            yield "submit", f"job/{d.job_id}", f"queue {d.queue}"
        case TasksAdded(data=d):
            yield "add-tasks", f"job/{d.job_id}", ", ".join(f"{t.name} x{t.replicas}" for t in d.tasks)
        case JobCancelled(data=d):
            yield "cancel", f"job/{d.job_id}", d.reason
        case JobRejected(data=d):
            yield "reject", f"job/{d.job_id}", f"{d.code}: {d.reason}" if d.reason else d.code
        case QueueUpserted(data=d):
            action = "close" if d.state == "Closed" else "upsert"
            yield action, f"queue/{d.name}", f"state {d.state}, weight {d.weight}"
        case QueueDeleted(data=d):
            yield "delete", f"queue/{d.name}", ""
        case PriorityClassUpserted(data=d):
            yield "upsert", f"priorityclass/{d.name}", f"value {d.value}"
        case SchedulerConfigured():
            yield "configure", "scheduler", ""
        case LeaderElected(data=d):
            yield "lead", f"leader/{d.epoch}", f"holder {d.holder}, key {d.public_key}"
        case SessionCommitted(data=d) | SessionPart(data=d):
            for decision in d.decisions:
                if isinstance(decision, EvictDecision):
                    yield (
                        "evict",
                        f"task/{decision.task}",
                        f"{decision.action} of job {decision.job} on {decision.node} for job"
                        f" {decision.preemptor_job} (session {d.session_id})",
                    )
        case _:
            return


def actions_to_csv(rows: Sequence[ActionRow]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(ACTION_COLUMNS)
    for row in rows:
        signed = str(row.signed).lower()
        principal = row.principal or ""
        writer.writerow(
            [row.seq, row.time.isoformat(), principal, signed, row.action, row.object, row.detail]
        )
    return out.getvalue()
