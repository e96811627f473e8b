"""THE fold: ``apply(state, seq, event)`` — pure, deterministic, one handler per event type.

The projector, the scheduler's snapshot and replay all fold with this
function, so they cannot disagree about what the log means.  No I/O, no
clock, no randomness: the result depends only on the state and the event.

An event either applies (the state moves to ``seq``) or is *invalid*: it
contradicts the state (a second JobSubmitted for the same job, a TaskStarted
for a task that does not exist ...).  An invalid event leaves the state
untouched — every handler validates before it mutates — and the outcome
carries a stable reason code; the projector parks such events in
``rejected_events`` instead of archiving them, so the archive folds cleanly.

A *decision* inside a valid SessionCommitted is a different matter: the
session is archived whole and each decision is accepted or voided with a
reason, in decision order, against the state as the earlier decisions left
it.  Voided decisions are recorded in the session record and never executed.

Lifecycle rules (Volcano's, simplified where noted):

* JobSubmitted creates the job (Pending) and one Pending task per replica.
* SessionCommitted: ``enqueue`` Pending -> Inqueue; ``bind`` Pending task ->
  Bound on a node with enough free allocatable (Bound, Running and Releasing
  tasks occupy, each plus one ``pods``); ``evict`` Bound/Running -> Releasing
  (still occupying until its TaskFinished); ``pipeline`` is recorded only.
  A leader epoch below the highest seen voids the whole session
  (``stale-epoch``).
* TaskStarted -> Running; the job is Running once running + succeeded tasks
  reach its gang minimum.  Observations come on another topic than jobs, so
  one can overtake the JobSubmitted it names: it is archived, held in
  ``early_observations`` and applied right after that job is created.  An
  observation of a task its (cancelled or rejected) job withdrew is moot:
  archived, no effect.
* TaskFinished succeeded/failed -> Succeeded/Failed, freeing the node (also
  from Pending: a finish that overtook its binding; an evicted one then is moot).  When
  every task of a job has finished the job is Completed if at least
  min_available succeeded, else Failed (no restart policies).
* TaskFinished evicted -> the task is Pending again, node freed (Volcano's
  controller recreates evicted pods).  A Running job that drops below its
  minimum goes back to Inqueue: it keeps its admission.
* NodeRemoved: the node's occupying tasks go back to Pending (their pods die
  with the node and the controller recreates them), same job rule as evicted.
* JobCancelled / JobRejected: the job is Cancelled / Failed with the reason;
  its Pending tasks are withdrawn (removed); Bound and Running tasks become
  Releasing and keep their resources until their TaskFinished, after which
  they are removed when evicted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from events.models import (
    BindDecision,
    Decision,
    EnqueueDecision,
    Event,
    EvictDecision,
    JobCancelled,
    JobRejected,
    JobSubmitted,
    NodeRemoved,
    NodeReported,
    PendingJob,
    PipelineDecision,
    PriorityClassUpserted,
    QueueDeleted,
    QueueUpserted,
    SchedulerConfigured,
    SessionCommitted,
    SessionPart,
    TaskFinished,
    TaskStarted,
)
from projector.jsonform import json_form
from projector.state import (
    MAX_SESSIONS,
    OCCUPYING,
    PODS,
    TERMINAL_JOB_PHASES,
    ClusterState,
    JobState,
    NodeState,
    PriorityClassState,
    QueueState,
    SessionRecord,
    TaskState,
    VoidedDecision,
    new_task,
    place,
    reduce_through_init,
    task_id_of,
    unplace,
)

__all__ = [
    "DECISION_VOID_REASONS",
    "INVALID_EVENT_REASONS",
    "PENDING_ITEM",
    "FoldOutcome",
    "Touched",
    "apply",
]

#: What an applied event changed, for the projection writer: (kind, key) with
#: kind in queue, priority_class, node, new_job (created), job (phase changed),
#: task, session, meta (config, leader epoch, buffered session parts).
Touched: TypeAlias = tuple[tuple[str, str], ...]

INVALID_EVENT_REASONS: Final = (
    "duplicate-job",  # JobSubmitted for a job id that exists
    "duplicate-task",  # JobSubmitted whose task ids collide (with each other or existing tasks)
    "job-missing",  # the event names a job that does not exist
    "job-finished",  # JobCancelled for a job already Completed, Failed or Cancelled
    "job-not-pending",  # JobRejected for a job already admitted
    "task-missing",  # TaskStarted/TaskFinished naming a live job's task that does not exist
    "task-job-mismatch",  # the task does not belong to the named job
    "task-finished",  # TaskStarted or TaskFinished for a task that already finished
    "node-missing",  # NodeRemoved / TaskStarted naming an unknown node
    "queue-missing",  # QueueDeleted for an unknown queue
    "duplicate-session",  # a second SessionCommitted with the same session id
    "duplicate-part",  # a SessionPart index seen before for that session
    "session-incomplete",  # the marker announces parts that never arrived
)

DECISION_VOID_REASONS: Final = (
    "stale-epoch",  # the whole session: a newer leader has already committed
    "job-missing",
    "job-cancelled",
    "job-finished",  # the job is Completed or Failed
    "job-not-pending",  # enqueue of a job that is not Pending
    "task-missing",
    "task-not-pending",  # bind of a task that is not Pending
    "task-not-running",  # evict of a task that is not Bound or Running
    "task-not-on-node",  # evict naming another node than the task's
    "node-missing",
    "insufficient-resources",
)

# Buffered decisions and observations are kept as JSON (the state is JSON-able);
# these read them back.
_DECISION_MODELS: Final[dict[str, type[Decision]]] = {
    "enqueue": EnqueueDecision,
    "bind": BindDecision,
    "pipeline": PipelineDecision,
    "evict": EvictDecision,
}
# Their validators, called directly: model_validate is a Python method that passes
# five keyword arguments on (measured: a third of a buffered decision's revalidation).
_DECISION_VALIDATORS: Final[dict[str, Any]] = {
    kind: model.__pydantic_validator__.validate_python for kind, model in _DECISION_MODELS.items()
}
_PENDING_VALIDATOR: Final = PendingJob.__pydantic_validator__.validate_python
_META: Final = ("meta", "")
#: The ``kind`` of a pending job buffered with a part's decisions in ``ClusterState.session_parts``
#: (not a decision kind; parts archived before SessionPart had ``pending`` have none).
PENDING_ITEM: Final = "pending"


# Not frozen: a frozen dataclass's __init__ sets each field with object.__setattr__,
# which cost ~7% of the fold (one outcome per event).  Read-only by convention;
# unsafe_hash keeps the hash a frozen one had.  __init__ spelled out, as in the state's
# classes built per event (projector/state.py).
@dataclass(slots=True, unsafe_hash=True)
class FoldOutcome:
    """What one ``apply`` did (read-only).

    ``invalid`` is None when the event applied, else the reason code (from
    :data:`INVALID_EVENT_REASONS`) and the state is unchanged.  ``decisions``
    are the accepted decisions of a session with their index in the
    session, in order (for the bindings and evictions tables).
    """

    invalid: str | None = None
    detail: str = ""
    touched: Touched = ()
    decisions: tuple[tuple[int, Decision], ...] = ()

    def __init__(
        self,
        invalid: str | None = None,
        detail: str = "",
        touched: Touched = (),
        decisions: tuple[tuple[int, Decision], ...] = (),
    ) -> None:
        self.invalid = invalid
        self.detail = detail
        self.touched = touched
        self.decisions = decisions

    def __reduce__(self) -> tuple[type[Any], tuple[Any, ...]]:
        return reduce_through_init(self)

    @property
    def applied(self) -> bool:
        return self.invalid is None


def _invalid(reason: str, detail: str) -> FoldOutcome:
    return FoldOutcome(invalid=reason, detail=detail)


def apply(state: ClusterState, seq: int, event: Event) -> FoldOutcome:
    """Fold ``event``, the archive's event number ``seq``, into ``state`` (in place)."""
    handler = _HANDLERS[event.type]
    outcome: FoldOutcome = handler(state, seq, event)
    if outcome.invalid is None:
        state.seq = seq
    return outcome


# ---------------------------------------------------------------------------- queues, classes, config


def _queue_upserted(state: ClusterState, seq: int, event: QueueUpserted) -> FoldOutcome:
    d = event.data
    previous = state.queues.get(d.name)
    state.queues[d.name] = QueueState(
        name=d.name,
        weight=d.weight,
        capability=d.capability,
        deserved=d.deserved,
        guarantee=d.guarantee,
        reclaimable=d.reclaimable,
        priority=d.priority,
        state=d.state,
        parent=d.parent,
        created=event.time if previous is None else previous.created,
    )
    return FoldOutcome(touched=(("queue", d.name),))


def _queue_deleted(state: ClusterState, seq: int, event: QueueDeleted) -> FoldOutcome:
    name = event.data.name
    if name not in state.queues:
        return _invalid("queue-missing", f"cannot delete queue {name!r}: it does not exist")
    del state.queues[name]
    return FoldOutcome(touched=(("queue", name),))


def _priority_class_upserted(state: ClusterState, seq: int, event: PriorityClassUpserted) -> FoldOutcome:
    d = event.data
    state.priority_classes[d.name] = PriorityClassState(
        name=d.name, value=d.value, global_default=d.global_default, preemption_policy=d.preemption_policy
    )
    return FoldOutcome(touched=(("priority_class", d.name),))


def _scheduler_configured(state: ClusterState, seq: int, event: SchedulerConfigured) -> FoldOutcome:
    state.config = event.data.config
    state.config_version += 1
    return FoldOutcome(touched=(_META,))


# ---------------------------------------------------------------------------- jobs


def _job_submitted(state: ClusterState, seq: int, event: JobSubmitted) -> FoldOutcome:
    envelope = event.__dict__  # the fields (see _session_committed)
    d = envelope["data"].__dict__
    namespace, name, specs = d["namespace"], d["name"], d["tasks"]
    job_id = f"{namespace}/{name}"
    if job_id in state.jobs:
        return _invalid("duplicate-job", f"job {job_id} was already submitted")
    spec_fields = [spec.__dict__ for spec in specs]
    ids = [
        task_id_of(namespace, name, f["name"], index) for f in spec_fields for index in range(f["replicas"])
    ]
    if len(set(ids)) != len(ids):
        return _invalid("duplicate-task", f"job {job_id} names the same task twice")
    clash = next((tid for tid in ids if tid in state.tasks), None)
    if clash is not None:
        return _invalid("duplicate-task", f"job {job_id} would create task {clash}, which exists")

    min_available = d["min_available"]
    if min_available is None:
        min_available = sum(
            f["replicas"] if f["min_available"] is None else f["min_available"] for f in spec_fields
        )
    job = JobState(
        id=job_id,
        namespace=namespace,
        name=name,
        queue=d["queue"],
        priority_class=d["priority_class"],
        min_available=min_available,
        min_resources=d["min_resources"],
        phase="Pending",
        created=envelope["time"],
        annotations=d["annotations"],
        labels=d["labels"],
        task_specs=tuple(specs),
        tasks=ids,
    )
    state.jobs[job_id] = job
    touched: list[tuple[str, str]] = [("new_job", job_id)]
    ids_iter = iter(ids)
    tasks = state.tasks
    for spec, f in zip(specs, spec_fields, strict=True):
        for index in range(f["replicas"]):
            task_id = next(ids_iter)
            tasks[task_id] = new_task(job, spec, index, task_id)
            touched.append(("task", task_id))
    _replay_early(state, seq, job_id, touched)
    return FoldOutcome(touched=tuple(touched))


def _job_cancelled(state: ClusterState, seq: int, event: JobCancelled) -> FoldOutcome:
    job = state.jobs.get(event.data.job_id)
    if job is None:
        return _invalid("job-missing", f"cannot cancel job {event.data.job_id}: it does not exist")
    if job.phase in TERMINAL_JOB_PHASES:
        return _invalid("job-finished", f"cannot cancel job {job.id}: it is already {job.phase}")
    job.phase = "Cancelled"
    job.phase_reason = event.data.reason
    return FoldOutcome(touched=(("job", job.id), *_withdraw(state, job)))


def _job_rejected(state: ClusterState, seq: int, event: JobRejected) -> FoldOutcome:
    job = state.jobs.get(event.data.job_id)
    if job is None:
        return _invalid("job-missing", f"cannot reject job {event.data.job_id}: it does not exist")
    if job.phase != "Pending":
        return _invalid("job-not-pending", f"cannot reject job {job.id}: it is already {job.phase}")
    job.phase = "Failed"
    reason = event.data.reason
    job.phase_reason = f"{event.data.code}: {reason}" if reason else event.data.code
    return FoldOutcome(touched=(("job", job.id), *_withdraw(state, job)))


def _withdraw(state: ClusterState, job: JobState) -> list[tuple[str, str]]:
    """A job that will not run any more: drop its Pending tasks, release the rest."""
    touched: list[tuple[str, str]] = []
    kept: list[str] = []
    for task_id in job.tasks:
        task = state.tasks[task_id]
        if task.status == "Pending":
            del state.tasks[task_id]
            touched.append(("task", task_id))
            continue
        if task.status in ("Bound", "Running"):
            task.status = "Releasing"
            touched.append(("task", task_id))
        kept.append(task_id)
    job.tasks = kept
    return touched


# ---------------------------------------------------------------------------- nodes


def _node_reported(state: ClusterState, seq: int, event: NodeReported) -> FoldOutcome:
    envelope = event.__dict__  # the fields (see _session_committed)
    d = envelope["data"].__dict__
    name = d["name"]
    previous = state.nodes.get(name)
    state.nodes[name] = NodeState(
        name=name,
        allocatable=d["allocatable"],
        labels=d["labels"],
        taints=tuple(d["taints"]),
        unschedulable=d["unschedulable"],
        ready=d["ready"],
        created=envelope["time"] if previous is None else previous.created,
        used={} if previous is None else previous.used,
        tasks=set() if previous is None else previous.tasks,
    )
    return FoldOutcome(touched=(("node", name),))


def _node_removed(state: ClusterState, seq: int, event: NodeRemoved) -> FoldOutcome:
    name = event.data.name
    if name not in state.nodes:
        return _invalid("node-missing", f"cannot remove node {name!r}: it does not exist")
    touched: list[tuple[str, str]] = [("node", name)]
    affected: list[str] = []
    for task in [state.tasks[task_id] for task_id in sorted(state.nodes[name].tasks)]:
        touched.append(("task", task.id))
        if task.job not in affected:
            affected.append(task.job)
        _reset_or_drop(state, task)
    del state.nodes[name]
    for job_id in affected:
        if _refresh_phase(state, state.jobs[job_id]):
            touched.append(("job", job_id))
    return FoldOutcome(touched=tuple(touched))


# ---------------------------------------------------------------------------- tasks


def _task_of(state: ClusterState, job_id: str, task_id: str) -> TaskState | FoldOutcome | None:
    """The task an observation names; None when it is an observation to buffer or ignore."""
    task = state.tasks.get(task_id)
    if task is None:
        job = state.jobs.get(job_id)
        if job is None or job.phase in TERMINAL_JOB_PHASES:
            # Before its job (buffered by the caller), or of a task its job withdrew.
            return None
        return _invalid("task-missing", f"task {task_id} does not exist")
    if task.job != job_id:
        return _invalid("task-job-mismatch", f"task {task_id} belongs to job {task.job}, not {job_id}")
    return task


def _early_or_ignored(state: ClusterState, event: TaskStarted | TaskFinished) -> FoldOutcome:
    """An observation that overtook its job (another topic) waits for it; one of a withdrawn task is moot."""
    job_id = event.data.job_id
    if job_id in state.jobs:
        return FoldOutcome()
    state.early_observations.setdefault(job_id, []).append(event.model_dump(mode="json"))
    return FoldOutcome(touched=(_META,))


def _task_started(state: ClusterState, seq: int, event: TaskStarted) -> FoldOutcome:
    d = event.data.__dict__  # the fields (see _session_committed: cheaper than attribute reads)
    task = _task_of(state, d["job_id"], d["task_id"])
    if task is None:
        return _early_or_ignored(state, event)
    if isinstance(task, FoldOutcome):
        return task
    if task.status in ("Succeeded", "Failed"):
        return _invalid("task-finished", f"task {task.id} started after it finished ({task.status})")
    node_name = d["node"]
    node = state.nodes.get(node_name)
    if node is None:
        return _invalid("node-missing", f"task {task.id} started on unknown node {node_name!r}")
    # The observation is the truth: the pod runs where the cluster says.
    if task.node != node_name:
        if task.status in OCCUPYING and task.node is not None:
            unplace(state.nodes[task.node], task)
        place(node, task)
        task.node = node_name
    if task.status != "Releasing":
        task.status = "Running"
    job = state.jobs[task.job]
    if _refresh_phase(state, job):
        return FoldOutcome(touched=(("task", task.id), ("job", job.id)))
    return FoldOutcome(touched=(("task", task.id),))


def _task_finished(state: ClusterState, seq: int, event: TaskFinished) -> FoldOutcome:
    d = event.data.__dict__  # the fields (see _session_committed)
    task = _task_of(state, d["job_id"], d["task_id"])
    if task is None:
        return _early_or_ignored(state, event)
    if isinstance(task, FoldOutcome):
        return task
    if task.status in ("Succeeded", "Failed"):
        return _invalid("task-finished", f"task {task.id} finished twice (it is {task.status})")
    job = state.jobs[task.job]
    touched: list[tuple[str, str]] = [("task", task.id)]
    occupying = task.status in OCCUPYING
    outcome = d["outcome"]
    if outcome == "evicted":
        if not occupying:
            # It overtook the binding it ends: the task is Pending already.
            return FoldOutcome()
        _reset_or_drop(state, task)
    else:
        # A Pending task that finished overtook its binding: the cluster's word wins.
        if occupying and task.node is not None:
            unplace(state.nodes[task.node], task)
        task.status = "Succeeded" if outcome == "succeeded" else "Failed"
    if _refresh_phase(state, job):
        touched.append(("job", job.id))
    return FoldOutcome(touched=tuple(touched))


def _replay_early(state: ClusterState, seq: int, job_id: str, touched: list[tuple[str, str]]) -> None:
    """Apply the observations that waited for ``job_id``, in arrival order.

    Each is judged now, as if it had arrived right after the job; one that
    no longer fits (it names a task the job does not have) has no effect —
    it is archived already, as the event that was buffered.
    """
    early = state.early_observations.pop(job_id, None)
    if early is None:
        return
    touched.append(_META)
    for doc in early:
        if doc["type"] == TaskStarted.model_fields["type"].default:
            touched.extend(_task_started(state, seq, TaskStarted.model_validate(doc)).touched)
        else:
            touched.extend(_task_finished(state, seq, TaskFinished.model_validate(doc)).touched)


def _reset_or_drop(state: ClusterState, task: TaskState) -> None:
    """A pod that is gone from its node: recreated Pending, unless its job is over."""
    if task.node is not None:
        unplace(state.nodes[task.node], task)
    job = state.jobs[task.job]
    if job.phase in TERMINAL_JOB_PHASES:
        del state.tasks[task.id]
        job.tasks.remove(task.id)
        return
    task.status = "Pending"
    task.node = None


def _refresh_phase(state: ClusterState, job: JobState) -> bool:
    """Derive a live job's phase from its tasks; True when it changed."""
    if job.phase in TERMINAL_JOB_PHASES:
        return False
    running = succeeded = finished = 0
    tasks = state.tasks
    for task_id in job.tasks:
        status = tasks[task_id].status
        if status == "Running":
            running += 1
        elif status == "Succeeded":
            succeeded += 1
            finished += 1
        elif status == "Failed":
            finished += 1
    phase = job.phase
    if job.tasks and finished == len(job.tasks):
        phase = "Completed" if succeeded >= job.min_available else "Failed"
    elif running and running + succeeded >= job.min_available:
        phase = "Running"
    elif phase == "Running":
        phase = "Inqueue"
    if phase == job.phase:
        return False
    job.phase = phase
    return True


# ---------------------------------------------------------------------------- sessions


def _session_part(state: ClusterState, seq: int, event: SessionPart) -> FoldOutcome:
    d = event.data
    if d.session_id in state.sessions:
        return _invalid("duplicate-session", f"part {d.index} of session {d.session_id} after its commit")
    parts = state.session_parts.get(d.session_id)
    if parts is not None and d.index in parts:
        return _invalid("duplicate-part", f"part {d.index} of session {d.session_id} arrived twice")
    # json_form, not model_dump (the same values, without pydantic's dispatch per model).
    # A decision's may be its model's own __dict__: the buffer only reads it.
    items = [json_form(decision) for decision in d.decisions]
    items.extend({"kind": PENDING_ITEM, **json_form(p)} for p in d.pending)
    state.session_parts.setdefault(d.session_id, {})[d.index] = items
    return FoldOutcome(touched=(_META,))


def _session_committed(state: ClusterState, seq: int, event: SessionCommitted) -> FoldOutcome:
    # The fields from __dict__, read once: a pydantic attribute read goes through the
    # model's __getattr__ hook (callgrind: ~360 instructions, as much as __dict__ itself).
    d = event.data.__dict__
    session_id, part_count = d["session_id"], d["parts"]
    if session_id in state.sessions:
        return _invalid("duplicate-session", f"session {session_id} was already committed")
    decisions: list[Decision] = list(d["decisions"])
    pending: list[PendingJob] = []
    touched: list[tuple[str, str]] = [("session", session_id), _META]
    if part_count:
        parts = state.session_parts.get(session_id, {})
        missing = [i for i in range(part_count) if i not in parts]
        if missing:
            return _invalid(
                "session-incomplete", f"session {session_id} announces {part_count} parts, missing {missing}"
            )
        _unbuffer(parts, part_count, decisions, pending)
        del state.session_parts[session_id]
    pending.extend(d["pending"])

    accepted: list[tuple[int, Decision]] = []
    voided: list[VoidedDecision] = []
    leader_epoch = d["leader_epoch"]
    if leader_epoch < state.leader_epoch:
        voided = [_voided(i, decision.__dict__, "stale-epoch") for i, decision in enumerate(decisions)]
    else:
        state.leader_epoch = leader_epoch
        for index, decision in enumerate(decisions):
            # A pydantic model keeps its fields in __dict__: reading them there is
            # cheaper than attribute reads (measured; several per decision).  Not
            # vars(): where pydantic is not installed (mypyc's build, setup.py) a
            # model's type is unknown and mypy takes vars() for a class's mappingproxy.
            fields = decision.__dict__
            reason = _decide(state, fields, touched)
            if reason is None:
                accepted.append((index, decision))
            else:
                voided.append(_voided(index, fields, reason))

    state.sessions[session_id] = SessionRecord(
        session_id=session_id,
        seq=seq,
        leader_epoch=leader_epoch,
        input_seq=d["input_seq"],
        config_version=d["config_version"],
        now=d["now"],
        accepted=len(accepted),
        voided=tuple(voided),
        pending=tuple(pending),
        pending_digest=d["pending_digest"],
        input_digest=d["input_digest"],
        logic_flags=tuple(d["logic_flags"]),
    )
    if len(state.sessions) > MAX_SESSIONS:
        del state.sessions[next(iter(state.sessions))]
    return FoldOutcome(touched=tuple(touched), decisions=tuple(accepted))


def _unbuffer(
    parts: dict[int, list[dict[str, Any]]], count: int, decisions: list[Decision], pending: list[PendingJob]
) -> None:
    """Append the buffered parts' decisions and pending jobs, in part order."""
    for index in range(count):
        for doc in parts[index]:
            if doc["kind"] == PENDING_ITEM:
                pending.append(_PENDING_VALIDATOR({k: v for k, v in doc.items() if k != "kind"}))
            else:
                decisions.append(_DECISION_VALIDATORS[doc["kind"]](doc))


def _voided(index: int, fields: dict[str, Any], reason: str) -> VoidedDecision:
    """The record of a refused decision (``fields``: the decision's, see ``_session_committed``)."""
    # Positional: a keyword call builds a dict first.  An enqueue names no task nor node.
    return VoidedDecision(
        index, fields["kind"], fields["job"], fields.get("task"), fields.get("node"), reason
    )


def _decide(  # noqa: PLR0911 - one return per void reason
    state: ClusterState, fields: dict[str, Any], touched: list[tuple[str, str]]
) -> str | None:
    """Apply one decision (its fields) if it still holds; else the void reason (state untouched)."""
    job = state.jobs.get(fields["job"])
    if job is None:
        return "job-missing"
    phase = job.phase
    if phase in TERMINAL_JOB_PHASES:
        return "job-cancelled" if phase == "Cancelled" else "job-finished"
    kind = fields["kind"]
    if kind == "bind":  # most decisions: test it first
        task = state.tasks.get(fields["task"])
        if task is None or task.job != job.id:
            return "task-missing"
        return _bind(state, task, fields["node"], touched)
    if kind == "enqueue":
        if phase != "Pending":
            return "job-not-pending"
        job.phase = "Inqueue"
        touched.append(("job", job.id))
        return None
    if kind == "pipeline":
        return None
    # evict
    task = state.tasks.get(fields["task"])
    if task is None or task.job != job.id:
        return "task-missing"
    if task.status not in ("Bound", "Running"):
        return "task-not-running"
    if task.node != fields["node"]:
        return "task-not-on-node"
    task.status = "Releasing"
    touched.append(("task", task.id))
    return None


def _bind(state: ClusterState, task: TaskState, node_name: str, touched: list[tuple[str, str]]) -> str | None:
    if task.status != "Pending":
        return "task-not-pending"
    node = state.nodes.get(node_name)
    if node is None:
        return "node-missing"
    if not _fits(node, task.resources):
        return "insufficient-resources"
    place(node, task)
    task.status = "Bound"
    task.node = node_name
    touched.append(("task", task.id))
    return None


def _fits(node: NodeState, resources: dict[str, int]) -> bool:
    allocatable = node.allocatable
    used = node.used
    if used.get(PODS, 0) >= allocatable.get(PODS, 0):  # room for one more pod
        return False
    for name, amount in resources.items():
        if amount and used.get(name, 0) + amount > allocatable.get(name, 0):
            return False
    return True


_HANDLERS: Final[dict[str, Any]] = {
    "tephra.queue.upserted.v1": _queue_upserted,
    "tephra.queue.deleted.v1": _queue_deleted,
    "tephra.priorityclass.upserted.v1": _priority_class_upserted,
    "tephra.scheduler.configured.v1": _scheduler_configured,
    "tephra.job.submitted.v1": _job_submitted,
    "tephra.job.cancelled.v1": _job_cancelled,
    "tephra.job.rejected.v1": _job_rejected,
    "tephra.node.reported.v1": _node_reported,
    "tephra.node.removed.v1": _node_removed,
    "tephra.task.started.v1": _task_started,
    "tephra.task.finished.v1": _task_finished,
    "tephra.session.committed.v1": _session_committed,
    "tephra.session.part.v1": _session_part,
}
