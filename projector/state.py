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
incrementally and one rebuilt from JSON agree only if the incremental
accounting is right.

Identities: a queue, priority class and node are their names, a job is
``<namespace>/<name>``, a task is ``<namespace>/<job>-<task>-<index>``.
Resources are integer dicts in Tephra units (:mod:`events.quantity`);
a task's ``resources`` never include the ``pods: 1`` every task consumes,
while ``NodeState.used`` does count it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, Final, Literal, TypeAlias

import orjson

from events.models import (
    NodeSelectorTerm,
    PendingJob,
    SchedulerConfigSpec,
    Taint,
    TaskSpec,
    Toleration,
)
from projector.archive import isoformat
from projector.jsonform import json_form

__all__ = [
    "JOB_PHASES",
    "MAX_SESSIONS",
    "OCCUPYING",
    "PODS",
    "TASK_STATUSES",
    "TERMINAL_JOB_PHASES",
    "ClusterState",
    "JobPhase",
    "JobState",
    "NodeState",
    "PriorityClassState",
    "QueueState",
    "SessionRecord",
    "TaskState",
    "TaskStatus",
    "VoidedDecision",
    "reduce_through_init",
    "state_from_text",
    "task_id_of",
]

JobPhase: TypeAlias = Literal["Pending", "Inqueue", "Running", "Completed", "Failed", "Cancelled"]
TaskStatus: TypeAlias = Literal["Pending", "Bound", "Running", "Releasing", "Succeeded", "Failed"]

JOB_PHASES: Final = ("Pending", "Inqueue", "Running", "Completed", "Failed", "Cancelled")
TASK_STATUSES: Final = ("Pending", "Bound", "Running", "Releasing", "Succeeded", "Failed")
TERMINAL_JOB_PHASES: Final = frozenset({"Completed", "Failed", "Cancelled"})
#: Task statuses that hold resources on their node.
OCCUPYING: Final = frozenset({"Bound", "Running", "Releasing"})
PODS: Final = "pods"
#: How many of the newest session records the state keeps (the ``sessions``
#: table keeps them all).  Enough for read-your-writes and recent history;
#: bounded so snapshots do not grow with uptime.
MAX_SESSIONS: Final = 256
_FORMAT_VERSION: Final = 1


def reduce_through_init(obj: Any) -> tuple[type[Any], tuple[Any, ...]]:
    """``__reduce__`` of a dataclass that spells out its ``__init__``: copy and pickle
    rebuild the object by calling it with the field values.

    Compiled, mypyc's ``__new__`` of such a class calls its ``__init__``, so the
    default reduction (``__new__`` without arguments, then the slots) would raise.
    """
    return type(obj), tuple(getattr(obj, f.name) for f in fields(obj))


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
    state: str
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
    #: Why the job reached Cancelled or Failed ("" otherwise).
    phase_reason: str = ""
    #: Cache of ``task_specs`` as JSON values (they never change once submitted);
    #: every snapshot and the job's projection row need them.
    task_specs_json: list[dict[str, Any]] | None = field(default=None, compare=False, repr=False)
    #: Cache of ``created``'s text: every snapshot writes every job's, and isoformat()
    #: of a decoded time costs ~12k instructions (measured: a snapshot at 60k events
    #: 333M -> 223M instructions).
    created_json: str | None = field(default=None, compare=False, repr=False)

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
        phase_reason: str = "",
        task_specs_json: list[dict[str, Any]] | None = None,
        created_json: str | None = None,
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
        self.phase_reason = phase_reason
        self.task_specs_json = task_specs_json
        self.created_json = created_json

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
    pending: tuple[PendingJob, ...]
    pending_digest: str
    input_digest: str
    logic_flags: tuple[str, ...]
    #: Cache of ``pending`` as JSON values (never changes once committed); the sessions'
    #: rows and every snapshot need them.  An unsplit session's are its archived data's.
    pending_json: list[dict[str, Any]] | None = field(default=None, compare=False, repr=False)

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
        pending: tuple[PendingJob, ...],
        pending_digest: str,
        input_digest: str,
        logic_flags: tuple[str, ...],
        pending_json: list[dict[str, Any]] | None = None,
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
        self.pending_json = pending_json

    def __reduce__(self) -> tuple[type[Any], tuple[Any, ...]]:
        return reduce_through_init(self)


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
    jobs: dict[str, JobState] = field(default_factory=dict)
    tasks: dict[str, TaskState] = field(default_factory=dict)
    #: The highest leader epoch of any applied session.
    leader_epoch: int = 0
    #: The newest ``MAX_SESSIONS`` sessions, oldest first.
    sessions: dict[str, SessionRecord] = field(default_factory=dict)
    #: SessionPart decisions waiting for their SessionCommitted marker:
    #: session id -> part index -> the part's decisions (as JSON objects), then
    #: its pending jobs as JSON objects with ``"kind": "pending"`` (fold.PENDING_ITEM).
    session_parts: dict[str, dict[int, list[dict[str, Any]]]] = field(default_factory=dict)
    #: TaskStarted/TaskFinished events (as JSON objects, in arrival order) that
    #: named a job not submitted yet, by job id; applied when the job arrives.
    early_observations: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    # ------------------------------------------------------------------ JSON

    def to_jsonable(self) -> dict[str, Any]:
        """A JSON-able dict (for ``state_snapshots``); :meth:`from_jsonable` inverts it."""
        return {
            "format": _FORMAT_VERSION,
            "seq": self.seq,
            "queues": [queue_to_json(q) for q in self.queues.values()],
            "priority_classes": [priority_class_to_json(p) for p in self.priority_classes.values()],
            "config": None if self.config is None else self.config.model_dump(mode="json"),
            "config_version": self.config_version,
            "leader_epoch": self.leader_epoch,
            "nodes": [node_to_json(n) for n in self.nodes.values()],
            "jobs": [job_to_json(j) for j in self.jobs.values()],
            # Tasks as rows: everything else about a task comes from its job's spec.
            "tasks": [[t.id, t.job, t.role, t.index, t.status, t.node] for t in self.tasks.values()],
            "sessions": [session_to_json(s) for s in self.sessions.values()],
            "session_parts": parts_to_json(self.session_parts),
            "early_observations": self.early_observations,
        }

    @classmethod
    def from_jsonable(cls, doc: dict[str, Any]) -> ClusterState:
        if doc.get("format") != _FORMAT_VERSION:
            raise ValueError(f"cannot read cluster state format {doc.get('format')!r}")
        config = doc["config"]
        specs: dict[bytes, TaskSpec] = {}  # jobs often share task specs: validate each once
        return assemble(
            seq=doc["seq"],
            queues=[queue_from_json(q) for q in doc["queues"]],
            priority_classes=[priority_class_from_json(p) for p in doc["priority_classes"]],
            config=None if config is None else SchedulerConfigSpec.model_validate(config),
            config_version=doc["config_version"],
            leader_epoch=doc["leader_epoch"],
            nodes=[node_from_json(n) for n in doc["nodes"]],
            jobs=[job_from_json(j, specs) for j in doc["jobs"]],
            task_rows=[(r[0], r[1], r[2], r[3], r[4], r[5]) for r in doc["tasks"]],
            sessions=[session_from_json(s) for s in doc["sessions"]],
            session_parts=parts_from_json(doc["session_parts"]),
            early_observations=doc["early_observations"],
        )


def state_from_text(text: str | bytes) -> ClusterState:
    """A stored state (``state_snapshots.state``) from its JSON text.

    orjson parses it several times faster than the json module; a document it
    refuses (an integer beyond 64 bits, which the writer's json fallback may
    store) is read with the json module.
    """
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError:
        doc = json.loads(text)
    return ClusterState.from_jsonable(doc)


# ---------------------------------------------------------------------------- rebuilding a state

TaskRow: TypeAlias = tuple[str, str, str, int, str, str | None]


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
    session_parts: dict[str, dict[int, list[dict[str, Any]]]],
    early_observations: dict[str, list[dict[str, Any]]],
) -> ClusterState:
    """Build a state from its persisted parts, deriving what is not stored.

    Shared by :meth:`ClusterState.from_jsonable` and the projection loader, so
    both derive task specs, job task order and node usage the same way.
    ``jobs`` come with empty ``tasks`` lists; ``sessions`` in seq order.
    """
    state = ClusterState(
        seq=seq,
        queues={q.name: q for q in queues},
        priority_classes={p.name: p for p in priority_classes},
        config=config,
        config_version=config_version,
        leader_epoch=leader_epoch,
        nodes={n.name: n for n in nodes},
        jobs={j.id: j for j in jobs},
        sessions={s.session_id: s for s in sessions},
        session_parts=session_parts,
        early_observations=early_observations,
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
        task = new_task(job, specs[(job_id, role)], index, task_id)
        task.status = status  # type: ignore[assignment]  # validated by the writer
        task.node = node
        state.tasks[task_id] = task
        job.tasks.append(task_id)
        if status in OCCUPYING and node is not None:
            place(state.nodes[node], task)
    return state


def new_task(job: JobState, spec: TaskSpec, index: int, task_id: str) -> TaskState:
    """A Pending task of ``job`` built from its spec (the fold and the loaders share this)."""
    # Hot (every task of every submitted job): the spec's fields are read from its
    # __dict__ (a pydantic attribute read is slow) and the task is built positionally
    # (a keyword call builds a dict first).
    s = spec.__dict__  # not vars(): compiled, a lookup among the builtins by name each call
    priority_class = s["priority_class"]
    return TaskState(
        task_id,  # id
        job.id,  # job
        s["name"],  # role
        index,
        s["resources"],
        "Pending",  # status
        None,  # node
        priority_class if priority_class is not None else job.priority_class,
        s["preemptable"],
        s["node_selector"],
        tuple(s["tolerations"]),
        tuple(s["required_node_affinity"]),
        s["preemption_policy"],
    )


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


# ---------------------------------------------------------------------------- per-entity JSON


def _time(value: datetime) -> str:
    return isoformat(value)


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text)


def queue_to_json(q: QueueState) -> dict[str, Any]:
    return {
        "name": q.name,
        "weight": q.weight,
        "capability": q.capability,
        "deserved": q.deserved,
        "guarantee": q.guarantee,
        "reclaimable": q.reclaimable,
        "priority": q.priority,
        "state": q.state,
        "parent": q.parent,
        "created": _time(q.created),
    }


def queue_from_json(d: dict[str, Any]) -> QueueState:
    return QueueState(**{**d, "created": _parse_time(d["created"])})


def priority_class_to_json(p: PriorityClassState) -> dict[str, Any]:
    return {
        "name": p.name,
        "value": p.value,
        "global_default": p.global_default,
        "preemption_policy": p.preemption_policy,
    }


def priority_class_from_json(d: dict[str, Any]) -> PriorityClassState:
    return PriorityClassState(**d)


def node_to_json(n: NodeState) -> dict[str, Any]:
    return {
        "name": n.name,
        "allocatable": n.allocatable,
        "labels": n.labels,
        "taints": [json_form(t) for t in n.taints],
        "unschedulable": n.unschedulable,
        "ready": n.ready,
        "created": _time(n.created),
    }


def node_from_json(d: dict[str, Any]) -> NodeState:
    return NodeState(
        name=d["name"],
        allocatable=d["allocatable"],
        labels=d["labels"],
        taints=tuple(Taint.model_validate(t) for t in d["taints"]),
        unschedulable=d["unschedulable"],
        ready=d["ready"],
        created=_parse_time(d["created"]),
    )


def job_to_json(j: JobState) -> dict[str, Any]:
    return {
        "id": j.id,
        "namespace": j.namespace,
        "name": j.name,
        "queue": j.queue,
        "priority_class": j.priority_class,
        "min_available": j.min_available,
        "min_resources": j.min_resources,
        "phase": j.phase,
        "phase_reason": j.phase_reason,
        "created": _created_json(j),
        "annotations": j.annotations,
        "labels": j.labels,
        "task_specs": _task_specs_json(j),
    }


def _created_json(j: JobState) -> str:
    cached = j.created_json
    if cached is None:
        cached = j.created_json = _time(j.created)
    return cached


def _task_specs_json(j: JobState) -> list[dict[str, Any]]:
    cached = j.task_specs_json
    if cached is None:
        cached = j.task_specs_json = [json_form(s) for s in j.task_specs]
    return cached


def job_from_json(d: dict[str, Any], specs: dict[bytes, TaskSpec] | None = None) -> JobState:
    """A job from its JSON form; ``specs`` caches validated task specs by their text
    (TaskSpec is frozen, so jobs with equal specs can share one)."""
    return JobState(
        id=d["id"],
        namespace=d["namespace"],
        name=d["name"],
        queue=d["queue"],
        priority_class=d["priority_class"],
        min_available=d["min_available"],
        min_resources=d["min_resources"],
        phase=d["phase"],
        phase_reason=d["phase_reason"],
        created=_parse_time(d["created"]),
        annotations=d["annotations"],
        labels=d["labels"],
        task_specs=tuple(_task_spec(s, specs) for s in d["task_specs"]),
        tasks=[],
    )


def _task_spec(doc: dict[str, Any], specs: dict[bytes, TaskSpec] | None) -> TaskSpec:
    if specs is None:
        return TaskSpec.model_validate(doc)
    key = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
    spec = specs.get(key)
    if spec is None:
        spec = specs[key] = TaskSpec.model_validate(doc)
    return spec


def session_to_json(s: SessionRecord) -> dict[str, Any]:
    return {
        "session_id": s.session_id,
        "seq": s.seq,
        "leader_epoch": s.leader_epoch,
        "input_seq": s.input_seq,
        "config_version": s.config_version,
        "now": _time(s.now),
        "accepted": s.accepted,
        "voided": [
            {
                "index": v.index,
                "kind": v.kind,
                "job": v.job,
                "task": v.task,
                "node": v.node,
                "reason": v.reason,
            }
            for v in s.voided
        ],
        "pending": _pending_json(s),
        "pending_digest": s.pending_digest,
        "input_digest": s.input_digest,
        "logic_flags": list(s.logic_flags),
    }


def _pending_json(s: SessionRecord) -> list[dict[str, Any]]:
    cached = s.pending_json
    if cached is None:
        cached = s.pending_json = [json_form(p) for p in s.pending]
    return cached


def session_from_json(d: dict[str, Any]) -> SessionRecord:
    return SessionRecord(
        session_id=d["session_id"],
        seq=d["seq"],
        leader_epoch=d["leader_epoch"],
        input_seq=d["input_seq"],
        config_version=d["config_version"],
        now=_parse_time(d["now"]),
        accepted=d["accepted"],
        voided=tuple(VoidedDecision(**v) for v in d["voided"]),
        pending=tuple(PendingJob.model_validate(p) for p in d["pending"]),
        pending_digest=d["pending_digest"],
        input_digest=d["input_digest"],
        logic_flags=tuple(d["logic_flags"]),
    )


def parts_to_json(parts: dict[str, dict[int, list[dict[str, Any]]]]) -> dict[str, Any]:
    # JSON object keys are strings; the part index is restored on load.
    return {sid: {str(i): ds for i, ds in by_index.items()} for sid, by_index in parts.items()}


def parts_from_json(d: dict[str, Any]) -> dict[str, dict[int, list[dict[str, Any]]]]:
    return {sid: {int(i): ds for i, ds in by_index.items()} for sid, by_index in d.items()}
