"""The response bodies: the OpenAPI schemas, and the check that each answer matches its schema.

The read models are the items of ``tephra get -o json`` (:mod:`api.views`) and
of ``replay ... --format json`` (:mod:`replay.queries`), field for field; the
nested documents the replay engines produce (an explanation's facts and
counterfactual, a session's trace) are typed as JSON values.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

__all__ = [
    "AcceptedObject",
    "AuditPage",
    "Explanation",
    "Incarnation",
    "Job",
    "JobDetail",
    "JobPage",
    "Node",
    "NodeList",
    "Queue",
    "QueueList",
    "SessionDetail",
    "SessionList",
    "Submission",
    "TaskRow",
]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class PendingReason(_Body):
    code: str
    message: str


class Job(_Body):
    id: str = Field(
        description="<namespace>/<name>; <namespace>/<name>#<uid> for an earlier incarnation of a reused name"
    )
    namespace: str
    name: str
    uid: int = Field(
        description="the incarnation: the archive seq of its JobSubmitted (a name is reused once its job"
        " finished, as a new incarnation); 0 for a job projected before incarnations existed"
    )
    queue: str
    phase: str
    min_available: int | None = Field(alias="minAvailable")
    tasks: dict[str, int] = Field(description="task count per status")
    created: str | None
    reason: str | None = Field(default=None, description="why the job is in its phase")
    pending_reasons: list[PendingReason] | None = Field(
        default=None, alias="pendingReasons", description="the newest session's reasons it stayed Pending"
    )
    pending_session: str | None = Field(default=None, alias="pendingSession")


class JobPage(_Body):
    items: list[Job]
    next_cursor: str | None = Field(
        alias="nextCursor", description="pass as ?cursor= for the next page; null on the last page"
    )
    seq: int = Field(description="the seq the projection reflected when this page was read")


class TaskRow(_Body):
    id: str
    role: str
    index: int
    status: str
    node: str | None


class Incarnation(_Body):
    """An earlier incarnation of a reused job name, kept until its own retention deadline."""

    id: str = Field(description="<namespace>/<name>#<uid>")
    uid: int
    phase: str
    reason: str | None
    created: str | None
    finished_at: str | None = Field(alias="finishedAt")


class JobDetail(Job):
    task_list: list[TaskRow] = Field(alias="taskList")
    earlier_incarnations: list[Incarnation] = Field(
        alias="earlierIncarnations",
        description="the name's earlier incarnations still projected, oldest first",
    )
    seq: int = Field(description="the seq the projection reflected when this job was read")


class Queue(_Body):
    name: str
    weight: int | None
    state: str | None
    priority: int | None
    reclaimable: bool | None
    capability: dict[str, str]
    deserved: dict[str, str]
    guarantee: dict[str, str]
    allocated: dict[str, str]
    jobs: dict[str, int] = Field(description="job count per phase")


class QueueList(_Body):
    items: list[Queue]
    seq: int


class Node(_Body):
    name: str
    ready: bool
    unschedulable: bool
    labels: dict[str, str]
    allocatable: dict[str, str]
    used: dict[str, str]
    tasks: int


class NodeList(_Body):
    items: list[Node]
    seq: int


class SessionDurations(_Body):
    read: float | None
    compute: float | None
    publish: float | None
    apply: float | None


class Session(_Body):
    id: str
    seq: int
    leader_epoch: int = Field(alias="leaderEpoch")
    input_seq: int = Field(alias="inputSeq")
    config_version: int = Field(alias="configVersion")
    now: str | None
    accepted: int
    voided: list[JsonValue]
    pending: list[JsonValue] | None = Field(
        description="the newest session's pending jobs and reasons; null for older sessions (replay has them)"
    )
    durations: SessionDurations | None


class SessionList(_Body):
    items: list[Session]
    seq: int


class SessionDetail(_Body):
    """``replay session --format json``: the reconstructed input, the decisions, the re-run's trace."""

    model_config = ConfigDict(extra="allow")

    session: str
    seq: int
    input_seq: int = Field(alias="inputSeq")
    now: str
    verified: bool
    divergence: str | None
    decisions: list[JsonValue]
    trace: list[JsonValue]


class Explanation(_Body):
    """``replay explain --format json``: timeline, verdict, ranked reasons, counterfactual."""

    model_config = ConfigDict(extra="allow")

    job: str
    timeline: list[JsonValue]
    session: dict[str, JsonValue] | None
    verdict: str
    reasons: list[JsonValue]
    counterfactual: JsonValue


class AuditPage(_Body):
    """``replay audit preemptions --format json``: every eviction, re-derived."""

    items: list[dict[str, JsonValue]]


class EventRejection(_Body):
    error: str
    detail: str


class AcceptedObject(_Body):
    ref: str = Field(description="job/<namespace>/<name>, queue/<name> ... (what tephra submit prints)")
    event_id: str = Field(alias="eventId")
    event_type: str = Field(alias="eventType")
    seq: int | None = Field(default=None, description="its seq in the archive, once waited for")
    rejected: EventRejection | None = Field(default=None, description="the projector refused the event")
    session: str | None = Field(default=None, description="?wait=decided: the session that considered it")
    phase: str | None = Field(default=None, description="?wait=decided: the job's phase after that session")


class Submission(_Body):
    objects: list[AcceptedObject]
    warnings: list[str]
    wait: Literal["none", "archived", "decided"]
    waited: bool = Field(description="false when the wait ran out before every object got there")
    seq: int | None = Field(
        description="read with ?min_seq= this to see the objects (known once archived; else null)"
    )
