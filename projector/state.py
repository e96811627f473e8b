"""The folded cluster state: what every Tephra reader derives from the event log.

:class:`ClusterState` is what :func:`projector.fold.apply` folds events into.
The projector persists it (projection tables, ``state_snapshots``), the
scheduler builds its session snapshot from it and replay reconstructs it at
any seq, so it holds everything a Volcano session needs.

**Mutable on purpose.**  The fold mutates one state in place, because copying
a cluster of thousands of tasks per event would cost more than the fold
itself.  Callers that need a frozen view (the scheduler's snapshot) copy out
of it; nobody else may mutate it.  Nested specs that never change after an
event was applied (task specs, tolerations, affinity terms, taints, the
scheduler config) are the frozen pydantic models from :mod:`events.models`
and are shared, never copied.

Equality is by value (dataclass ``__eq__``; dict equality ignores insertion
order).  The derived ``NodeState.used`` takes part in it, so a state folded
incrementally and one rebuilt from a snapshot agree only if the incremental
accounting is right.

**Domain only.**  Statuses and phases are enums whose text is what the rows,
snapshots and replay show; no serialised form is kept here.
:mod:`projector.state_json` writes and reads a state's JSON (snapshots, the
projection's documents), :mod:`projector.projection_rows` its rows.

Identities: a queue, priority class and node are their names, a job is
``<namespace>/<name>``, a task is ``<namespace>/<job>-<task>-<index>``.  A name
is reused once its job has finished: the live incarnation keeps the plain id,
and an earlier one that is still within its retention window stays under
``<namespace>/<name>#<submitted_seq>`` (:func:`superseded_id_of`), without its
tasks (their ids are the new incarnation's).
Resources are integer dicts in Tephra units (:mod:`events.quantity`);
a task's ``resources`` never include the ``pods: 1`` every task consumes,
while ``NodeState.used`` does count it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Final, TypeAlias

from events.models import (
    HyperNodeUpsertedData,
    NetworkTopologySpec,
    NodeSelectorTerm,
    PendingJob,
    SchedulerConfigSpec,
    SessionPartData,
    Taint,
    TaskFinished,
    TaskSpec,
    TaskStarted,
    Toleration,
)

__all__ = [
    "CLOCK_START",
    "DECISIONS",
    "INTENTS",
    "JOB_PHASES",
    "MAX_ROLE_LAG",
    "MAX_SESSIONS",
    "OBSERVATIONS",
    "OCCUPYING",
    "PODS",
    "ROLES",
    "TASK_STATUSES",
    "TERMINAL_JOB_PHASES",
    "BufferedSession",
    "ClusterState",
    "EarlyObservation",
    "EarlyObservations",
    "JobPhase",
    "JobState",
    "NodeState",
    "PriorityClassState",
    "QueueState",
    "QueueStatus",
    "SessionRecord",
    "TaskRow",
    "TaskState",
    "TaskStatus",
    "VoidedDecision",
    "assemble",
    "expiry_heap",
    "new_tasks",
    "place",
    "reduce_through_init",
    "retirement_heap",
    "superseded_id_of",
    "task_id_of",
    "unplace",
    "watermark_of",
    "without_pending",
]


class TaskStatus(StrEnum):
    """A task's lifecycle status; the text is what projection rows, snapshots and replay show."""

    PENDING = "Pending"
    BOUND = "Bound"
    RUNNING = "Running"
    RELEASING = "Releasing"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class JobPhase(StrEnum):
    """A job's phase (Volcano's PodGroup phases, plus the terminal ones of a VolcanoJob)."""

    PENDING = "Pending"
    INQUEUE = "Inqueue"
    RUNNING = "Running"
    COMPLETED = "Completed"
    FAILED = "Failed"
    CANCELLED = "Cancelled"


class QueueStatus(StrEnum):
    """A Volcano queue's state."""

    OPEN = "Open"
    CLOSED = "Closed"
    CLOSING = "Closing"


#: The text of every phase and status, in lifecycle order (for readers of the rows).
JOB_PHASES: Final = tuple(phase.value for phase in JobPhase)
TASK_STATUSES: Final = tuple(status.value for status in TaskStatus)
TERMINAL_JOB_PHASES: Final = frozenset({JobPhase.COMPLETED, JobPhase.FAILED, JobPhase.CANCELLED})
#: Task statuses that hold resources on their node.
OCCUPYING: Final = frozenset({TaskStatus.BOUND, TaskStatus.RUNNING, TaskStatus.RELEASING})
#: Task statuses after which a task never changes again.
FINISHED: Final = frozenset({TaskStatus.SUCCEEDED, TaskStatus.FAILED})
PODS: Final = "pods"
#: How many of the newest session records the state keeps (the ``sessions``
#: table keeps them all).  Enough for read-your-writes and recent history;
#: bounded so snapshots do not grow with uptime.
MAX_SESSIONS: Final = 256

#: The event-time clock of a state that has folded nothing yet (below any event's time).
CLOCK_START: Final = datetime(1, 1, 1, tzinfo=UTC)

#: An observation of a task that arrived before the JobSubmitted it names.
EarlyObservation: TypeAlias = TaskStarted | TaskFinished

#: How far the retention clock may stay behind the latest event time (projector.fold's
#: watermark): a role further behind holds retention back no more.  Part of the archive's
#: contract, like the default TTL: replay retires by the same rule.
MAX_ROLE_LAG: Final = timedelta(hours=1)

#: The topic roles an event comes from (events.topics.topic_for), in the order of
#: ``ClusterState.role_clocks``.
ROLES: Final = ("intents", "observations", "decisions")
INTENTS: Final = 0
OBSERVATIONS: Final = 1
DECISIONS: Final = 2


@dataclass(slots=True)
class EarlyObservations:
    """The observations (in arrival order) of one job not in the state, buffered since
    ``since`` (the first one's event time) until the job is submitted or the entry
    expires (projector.fold)."""

    since: datetime
    events: list[EarlyObservation]


@dataclass(slots=True)
class BufferedSession:
    """The SessionPart data of one session waiting for its SessionCommitted marker, by
    part index, buffered since ``since`` (its first part's event time)."""

    since: datetime
    parts: dict[int, SessionPartData]


def reduce_through_init(obj: Any) -> tuple[type[Any], tuple[Any, ...]]:
    """``__reduce__`` of a dataclass that spells out its ``__init__``: copy and pickle
    rebuild the object by calling it with the field values.

    Compiled, mypyc's ``__new__`` of such a class calls its ``__init__``, so the
    default reduction (``__new__`` without arguments, then the slots) would raise.
    """
    return type(obj), tuple(getattr(obj, f.name) for f in fields(obj))


def superseded_id_of(job_id: str, submitted_seq: int) -> str:
    """The key an earlier incarnation of ``job_id`` stays under once its name is reused."""
    return f"{job_id}#{submitted_seq}"


def task_id_of(namespace: str, job_name: str, role: str, index: int) -> str:
    """The task id Volcano's job controller gives pod ``index`` of task ``role``."""
    return f"{namespace}/{job_name}-{role}-{index}"


@dataclass(slots=True)
class QueueState:
    name: str
    weight: int
    capability: dict[str, int]
    deserved: dict[str, int]
    guarantee: dict[str, int]
    reclaimable: bool
    priority: int
    state: QueueStatus
    parent: str | None
    created: datetime


@dataclass(slots=True)
class PriorityClassState:
    name: str
    value: int
    global_default: bool
    preemption_policy: str


# The classes the fold builds per event (a task, job, node report, session, refused
# decision) spell out their __init__: compiled, it sets the slots directly, while the
# one @dataclass generates stays interpreted bytecode in the compiled projector, as in
# scheduler/core (see scheduler/core/trace.py).  @dataclass keeps an __init__ written
# in the class; eq, repr and hash stay its own.  The spelled-out __init__ takes the
# fields in order with the same defaults, and __reduce__ goes through it
# (tests/projector/test_state_classes.py).
@dataclass(slots=True)
class NodeState:
    name: str
    allocatable: dict[str, int]
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool
    ready: bool
    created: datetime
    #: Derived: the sum of the requests (plus one ``pods`` each) of the tasks
    #: that occupy this node; zero entries are dropped.
    used: dict[str, int] = field(default_factory=dict)
    #: Derived: the ids of the tasks that occupy this node (never iterated unsorted).
    tasks: set[str] = field(default_factory=set)

    # Spelled out (see above).
    def __init__(  # noqa: PLR0917 - the dataclass fields, in order
        self,
        name: str,
        allocatable: dict[str, int],
        labels: dict[str, str],
        taints: tuple[Taint, ...],
        unschedulable: bool,
        ready: bool,
        created: datetime,
        used: dict[str, int] | None = None,  # None: a new empty dict, as the default_factory
        tasks: set[str] | None = None,
    ) -> None:
        self.name = name
        self.allocatable = allocatable
        self.labels = labels
        self.taints = taints
        self.unschedulable = unschedulable
        self.ready = ready
        self.created = created
        self.used = {} if used is None else used
        self.tasks = set() if tasks is None else tasks

    def __reduce__(self) -> tuple[type[Any], tuple[Any, ...]]:
        return reduce_through_init(self)

    def free(self, resource: str) -> int:
        return self.allocatable.get(resource, 0) - self.used.get(resource, 0)


@dataclass(slots=True)
class TaskState:
    """One pod of a job.  Every field but ``status`` and ``node`` comes from the job's spec."""

    id: str
    job: str
    role: str
    index: int
    resources: dict[str, int]
    status: TaskStatus
    node: str | None
    priority_class: str | None
    preemptable: bool
    node_selector: dict[str, str]
    tolerations: tuple[Toleration, ...]
    required_node_affinity: tuple[NodeSelectorTerm, ...]
    preemption_policy: str | None

    # Spelled out: built per event (see above NodeState).
    def __init__(  # noqa: PLR0917 - the dataclass fields, in order
        self,
        id: str,
        job: str,
        role: str,
        index: int,
        resources: dict[str, int],
        status: TaskStatus,
        node: str | None,
        priority_class: str | None,
        preemptable: bool,
        node_selector: dict[str, str],
        tolerations: tuple[Toleration, ...],
        required_node_affinity: tuple[NodeSelectorTerm, ...],
        preemption_policy: str | None,
    ) -> None:
        self.id = id
        self.job = job
        self.role = role
        self.index = index
        self.resources = resources
        self.status = status
        self.node = node
        self.priority_class = priority_class
        self.preemptable = preemptable
        self.node_selector = node_selector
        self.tolerations = tolerations
        self.required_node_affinity = required_node_affinity
        self.preemption_policy = preemption_policy

    def __reduce__(self) -> tuple[type[Any], tuple[Any, ...]]:
        return reduce_through_init(self)


@dataclass(slots=True)
class JobState:
    id: str
    namespace: str
    name: str
    queue: str
    priority_class: str | None
    #: The gang minimum: the job's own, else the sum of its tasks' minimums
    #: (a task's minimum defaults to its replicas), as Volcano's controller sets it.
    min_available: int
    min_resources: dict[str, int] | None
    phase: JobPhase
    created: datetime
    annotations: dict[str, str]
    labels: dict[str, str]
    task_specs: tuple[TaskSpec, ...]
    #: Ids of the job's tasks still in ``ClusterState.tasks``, in creation
    #: order (spec order, then index).
    tasks: list[str]
    #: Seconds of event time the job stays once finished (its own, else the fold's default).
    ttl_seconds: int
    #: Why the job reached Cancelled or Failed ("" otherwise).
    phase_reason: str = ""
    #: The time of the event that finished the job (terminal phase, every task left
    #: Succeeded or Failed); None while it has not.
    finished_at: datetime | None = None
    #: The incarnation's identity (Kubernetes' uid): the archive seq of the JobSubmitted
    #: that created it.  A name is reused once its job finished (projector.fold), and each
    #: submission is a new incarnation.  0 in states persisted before incarnations existed.
    submitted_seq: int = 0
    #: The job's ``networkTopology`` (None: the job has none).
    network_topology: NetworkTopologySpec | None = None
    #: A PodGroup's ``minTaskMember`` as submitted; None: derived from ``task_specs``.
    min_task_member: dict[str, int] | None = None

    # Spelled out: built per event (see above NodeState).
    def __init__(  # noqa: PLR0917 - the dataclass fields, in order
        self,
        id: str,
        namespace: str,
        name: str,
        queue: str,
        priority_class: str | None,
        min_available: int,
        min_resources: dict[str, int] | None,
        phase: JobPhase,
        created: datetime,
        annotations: dict[str, str],
        labels: dict[str, str],
        task_specs: tuple[TaskSpec, ...],
        tasks: list[str],
        ttl_seconds: int,
        phase_reason: str = "",
        finished_at: datetime | None = None,
        submitted_seq: int = 0,
        network_topology: NetworkTopologySpec | None = None,
        min_task_member: dict[str, int] | None = None,
    ) -> None:
        self.id = id
        self.namespace = namespace
        self.name = name
        self.queue = queue
        self.priority_class = priority_class
        self.min_available = min_available
        self.min_resources = min_resources
        self.phase = phase
        self.created = created
        self.annotations = annotations
        self.labels = labels
        self.task_specs = task_specs
        self.tasks = tasks
        self.ttl_seconds = ttl_seconds
        self.phase_reason = phase_reason
        self.finished_at = finished_at
        self.submitted_seq = submitted_seq
        self.network_topology = network_topology
        self.min_task_member = min_task_member

    def __reduce__(self) -> tuple[type[Any], tuple[Any, ...]]:
        return reduce_through_init(self)


# Not frozen (like the rest of the state): the fold builds one per refused decision,
# most binds are refused, and a frozen dataclass's __init__ (object.__setattr__ per
# field) cost ~10% of the fold.  Never mutated; unsafe_hash keeps the frozen hash.
@dataclass(slots=True, unsafe_hash=True)
class VoidedDecision:
    """A decision of a session that the fold refused, with the reason code."""

    index: int
    kind: str
    job: str
    task: str | None
    node: str | None
    reason: str

    # Spelled out: built per event (see above NodeState).
    def __init__(  # noqa: PLR0917 - the dataclass fields, in order
        self, index: int, kind: str, job: str, task: str | None, node: str | None, reason: str
    ) -> None:
        self.index = index
        self.kind = kind
        self.job = job
        self.task = task
        self.node = node
        self.reason = reason

    def __reduce__(self) -> tuple[type[Any], tuple[Any, ...]]:
        return reduce_through_init(self)


@dataclass(slots=True)
class SessionRecord:
    session_id: str
    seq: int
    leader_epoch: int
    input_seq: int
    config_version: int
    now: datetime
    accepted: int
    voided: tuple[VoidedDecision, ...]
    #: The whole pending list, kept for the newest session only (the base the next
    #: session's change is read against, and what readers show as the current
    #: reasons); None for older sessions, and when a session's change named a base
    #: that was not the newest (the archive still holds its reasons exactly).
    pending: tuple[PendingJob, ...] | None
    pending_digest: str
    input_digest: str
    logic_flags: tuple[str, ...]

    # Spelled out: built per event (see above NodeState).
    def __init__(  # noqa: PLR0917 - the dataclass fields, in order
        self,
        session_id: str,
        seq: int,
        leader_epoch: int,
        input_seq: int,
        config_version: int,
        now: datetime,
        accepted: int,
        voided: tuple[VoidedDecision, ...],
        pending: tuple[PendingJob, ...] | None,
        pending_digest: str,
        input_digest: str,
        logic_flags: tuple[str, ...],
    ) -> None:
        self.session_id = session_id
        self.seq = seq
        self.leader_epoch = leader_epoch
        self.input_seq = input_seq
        self.config_version = config_version
        self.now = now
        self.accepted = accepted
        self.voided = voided
        self.pending = pending
        self.pending_digest = pending_digest
        self.input_digest = input_digest
        self.logic_flags = logic_flags

    def __reduce__(self) -> tuple[type[Any], tuple[Any, ...]]:
        return reduce_through_init(self)


def without_pending(record: SessionRecord) -> SessionRecord:
    """The record as it stays once a newer session is recorded: without its pending list."""
    return SessionRecord(
        session_id=record.session_id,
        seq=record.seq,
        leader_epoch=record.leader_epoch,
        input_seq=record.input_seq,
        config_version=record.config_version,
        now=record.now,
        accepted=record.accepted,
        voided=record.voided,
        pending=None,
        pending_digest=record.pending_digest,
        input_digest=record.input_digest,
        logic_flags=record.logic_flags,
    )


@dataclass(slots=True)
class ClusterState:
    """The whole folded state at ``seq`` (see the module docstring)."""

    seq: int = 0
    queues: dict[str, QueueState] = field(default_factory=dict)
    priority_classes: dict[str, PriorityClassState] = field(default_factory=dict)
    config: SchedulerConfigSpec | None = None
    #: 0 before the first SchedulerConfigured; +1 per SchedulerConfigured.
    config_version: int = 0
    nodes: dict[str, NodeState] = field(default_factory=dict)
    #: HyperNodes by name (HyperNodeUpserted's data, kept whole: nothing derived from them
    #: is stored; the scheduler resolves their members against the nodes of each session).
    hypernodes: dict[str, HyperNodeUpsertedData] = field(default_factory=dict)
    jobs: dict[str, JobState] = field(default_factory=dict)
    tasks: dict[str, TaskState] = field(default_factory=dict)
    #: The current leadership's epoch (LeaderElected; in archives older than it, the highest
    #: epoch of any applied session).
    leader_epoch: int = 0
    #: The current leader's public key (LeaderElected's; "" before the first one).
    leader_key: str = ""
    #: The newest ``MAX_SESSIONS`` sessions, oldest first (only the newest keeps its pending list).
    sessions: dict[str, SessionRecord] = field(default_factory=dict)
    #: SessionPart data waiting for their SessionCommitted marker, by session id.
    session_parts: dict[str, BufferedSession] = field(default_factory=dict)
    #: TaskStarted/TaskFinished events that named a job not in the state, by job id;
    #: applied when the job arrives, dropped when they expire.
    early_observations: dict[str, EarlyObservations] = field(default_factory=dict)
    #: Event time: the latest envelope ``time`` of the events folded so far
    #: (producers' clocks may go backwards; this never does).
    clock: datetime = CLOCK_START
    #: The latest envelope ``time`` folded so far per topic role (:data:`ROLES`);
    #: ``CLOCK_START`` for a role that has sent nothing yet.
    role_clocks: list[datetime] = field(default_factory=lambda: [CLOCK_START] * len(ROLES))
    #: Derived: the retention clock (projector.fold's watermark of ``role_clocks``
    #: and ``clock``): jobs retire and buffers expire by it.
    watermark: datetime = field(default=CLOCK_START, compare=False)
    #: Derived: a heap of (retirement deadline, job id) of the finished jobs, the
    #: next to leave first.  Left out of equality: its layout depends on the order
    #: of pushes, its content is the jobs' ``finished_at`` + ``ttl_seconds``.
    retiring: list[tuple[datetime, str]] = field(default_factory=list, compare=False)
    #: Derived: heaps of (since, key) of the entries of ``early_observations`` and of
    #: ``session_parts``, the next to expire first.  An item whose entry has gone (or
    #: was buffered again since) is skipped when popped.
    early_expiring: list[tuple[datetime, str]] = field(default_factory=list, compare=False)
    parts_expiring: list[tuple[datetime, str]] = field(default_factory=list, compare=False)


# ---------------------------------------------------------------------------- rebuilding a state

#: A task as persisted: (id, job id, role, index, status, node); the rest comes from its job's spec.
TaskRow: TypeAlias = tuple[str, str, str, int, TaskStatus, str | None]


def assemble(
    *,
    seq: int,
    queues: list[QueueState],
    priority_classes: list[PriorityClassState],
    config: SchedulerConfigSpec | None,
    config_version: int,
    leader_epoch: int,
    nodes: list[NodeState],
    jobs: list[JobState],
    task_rows: list[TaskRow],
    sessions: list[SessionRecord],
    session_parts: dict[str, BufferedSession],
    early_observations: dict[str, EarlyObservations],
    clock: datetime,
    role_clocks: list[datetime],
    leader_key: str = "",
    hypernodes: list[HyperNodeUpsertedData] | None = None,
) -> ClusterState:
    """Build a state from its persisted parts, deriving what is not stored.

    Shared by the snapshot reader (:mod:`projector.state_json`) and the projection
    loader, so both derive task specs, job task order and node usage the same way.
    ``jobs`` come with empty ``tasks`` lists; ``sessions`` in seq order (a pending
    list persisted on any but the newest, as older projections kept them, is dropped
    as the fold drops it).
    """
    sessions = [without_pending(s) if s.pending is not None else s for s in sessions[:-1]] + sessions[-1:]
    state = ClusterState(
        seq=seq,
        queues={q.name: q for q in queues},
        priority_classes={p.name: p for p in priority_classes},
        config=config,
        config_version=config_version,
        leader_epoch=leader_epoch,
        leader_key=leader_key,
        nodes={n.name: n for n in nodes},
        hypernodes={h.name: h for h in sorted(hypernodes or (), key=lambda h: h.name)},
        jobs={j.id: j for j in jobs},
        sessions={s.session_id: s for s in sessions},
        session_parts=session_parts,
        early_observations=early_observations,
        clock=clock,
        role_clocks=role_clocks,
        watermark=watermark_of(role_clocks, clock),
        retiring=retirement_heap(jobs),
        early_expiring=expiry_heap(early_observations),
        parts_expiring=expiry_heap(session_parts),
    )
    role_order: dict[str, dict[str, int]] = {
        job.id: {spec.name: i for i, spec in enumerate(job.task_specs)} for job in jobs
    }
    specs: dict[tuple[str, str], TaskSpec] = {
        (job.id, spec.name): spec for job in jobs for spec in job.task_specs
    }

    def creation_order(row: TaskRow) -> tuple[str, int, int]:
        return (row[1], role_order[row[1]][row[2]], row[3])

    for task_id, job_id, role, index, status, node in sorted(task_rows, key=creation_order):
        job = state.jobs[job_id]
        (task,) = new_tasks(job, specs[(job_id, role)], ((index, task_id),))
        task.status = status
        task.node = node
        state.tasks[task_id] = task
        job.tasks.append(task_id)
        if status in OCCUPYING and node is not None:
            place(state.nodes[node], task)
    return state


def expiry_heap(
    buffer: dict[str, EarlyObservations] | dict[str, BufferedSession],
) -> list[tuple[datetime, str]]:
    """The ``ClusterState.early_expiring`` or ``parts_expiring`` heap of ``buffer``."""
    heap = [(entry.since, key) for key, entry in buffer.items()]
    heapq.heapify(heap)
    return heap


def watermark_of(role_clocks: list[datetime], clock: datetime) -> datetime:
    """The retention clock (see projector.fold): the earliest of the roles' latest times
    (a role that has sent nothing is at :data:`CLOCK_START`), but never more than
    :data:`MAX_ROLE_LAG` behind ``clock``."""
    earliest = min(role_clocks)
    if clock - earliest <= MAX_ROLE_LAG:
        return earliest
    return clock - MAX_ROLE_LAG


def retirement_heap(jobs: Iterable[JobState]) -> list[tuple[datetime, str]]:
    """The ``ClusterState.retiring`` heap of ``jobs``: (deadline, id) of each finished one."""
    heap = [
        (job.finished_at + timedelta(seconds=job.ttl_seconds), job.id)
        for job in jobs
        if job.finished_at is not None
    ]
    heapq.heapify(heap)
    return heap


def new_tasks(job: JobState, spec: TaskSpec, pods: Iterable[tuple[int, str]]) -> list[TaskState]:
    """Pending tasks of ``job`` built from one of its specs, one per (index, task id) of ``pods``.

    The spec's fields are read once for all its pods (the fold builds every replica of a
    submitted job here, and the loaders one task at a time).
    """
    priority_class = spec.priority_class
    if priority_class is None and spec.inherits_job_priority_class:
        priority_class = job.priority_class
    role, resources, preemptable = spec.name, spec.resources, spec.preemptable
    node_selector, preemption_policy = spec.node_selector, spec.preemption_policy
    tolerations, affinity = tuple(spec.tolerations), tuple(spec.required_node_affinity)
    return [
        TaskState(
            id=task_id,
            job=job.id,
            role=role,
            index=index,
            resources=resources,
            status=TaskStatus.PENDING,
            node=None,
            priority_class=priority_class,
            preemptable=preemptable,
            node_selector=node_selector,
            tolerations=tolerations,
            required_node_affinity=affinity,
            preemption_policy=preemption_policy,
        )
        for index, task_id in pods
    ]


def place(node: NodeState, task: TaskState) -> None:
    """``task`` now occupies ``node``."""
    occupy(node.used, task.resources)
    node.tasks.add(task.id)


def unplace(node: NodeState, task: TaskState) -> None:
    """``task`` no longer occupies ``node``."""
    release(node.used, task.resources)
    node.tasks.discard(task.id)


def occupy(used: dict[str, int], resources: dict[str, int]) -> None:
    """Add one task's requests, plus its pod, to a node's usage."""
    for name, amount in resources.items():
        if amount:
            used[name] = used.get(name, 0) + amount
    used[PODS] = used.get(PODS, 0) + 1


def release(used: dict[str, int], resources: dict[str, int]) -> None:
    """The inverse of :func:`occupy`; entries that reach zero are dropped."""
    for name, amount in resources.items():
        if amount:
            left = used[name] - amount
            if left:
                used[name] = left
            else:
                del used[name]
    pods = used[PODS] - 1
    if pods:
        used[PODS] = pods
    else:
        del used[PODS]
