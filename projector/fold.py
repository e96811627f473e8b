"""THE fold: ``apply(state, seq, event)`` — pure, deterministic, one handler per event type.

The projector, the scheduler's snapshot and replay all fold with this
function, so they cannot disagree about what the log means.  No I/O, no
clock, no randomness: the result depends only on the state and the event.
:func:`apply` matches the event's class and calls that type's handler, which
takes the event as its own model type; ``assert_never`` makes an event type
without a handler a mypy error.

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
  Its archive seq is the job's identity, ``submitted_seq`` (Kubernetes' uid).
* TasksAdded gives an unfinished job more task specs (roles it does not have)
  and their Pending tasks, as Volcano's scheduler takes pods that join a
  PodGroup after its job exists; the phase and the gang minimum stay.
* SessionCommitted: ``enqueue`` Pending -> Inqueue; ``bind`` Pending task ->
  Bound on a node with enough free allocatable (Bound, Running and Releasing
  tasks occupy, each plus one ``pods``); ``evict`` Bound/Running -> Releasing
  (still occupying until its TaskFinished); ``pipeline`` is recorded only.
  Leadership is in the log: a LeaderElected (epoch above every epoch seen,
  signed by the key it names) makes its epoch and key the current leadership,
  and from then on a SessionCommitted counts only with that epoch
  (``not-leader``) and that key's signature of its canonical bytes, a
  SessionPart only with that signature (``bad-signature``): invalid, never
  archived, so a forged or replayed session changes nothing, not even the
  epoch.  (Archives written before leadership events existed have none: their
  sessions fold as they did, a leader epoch below the highest seen voiding the
  whole session, ``stale-epoch``; the projector's door refuses a session while
  the log names no leader, projector.trust.)
* TaskStarted -> Running; the job is Running once running + succeeded tasks
  reach its gang minimum.  Observations come on another topic than jobs, so
  one can overtake the JobSubmitted it names: it is archived, held in
  ``early_observations`` and applied right after that job is created (or
  expires, see below).  An
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

Retention (Volcano's ``ttlSecondsAfterFinished``), in event time:

* The state keeps a clock, the latest envelope ``time`` folded so far; it
  never goes back, whatever the producers' clocks do.  It keeps the same per
  topic *role* (``role_clocks``: intents, observations, decisions, by event
  type as :func:`events.topics.topic_for` routes them, :data:`EVENT_ROLES`).
* Retention runs on the *watermark*: the earliest of the three role clocks,
  but never more than :data:`MAX_ROLE_LAG` (1 h) behind the clock.  The
  projector drains three topics, at different rates when it has a backlog;
  a topic read ahead moves the clock, not the watermark, so nothing retires
  while a topic behind may still name it.  A role that has sent nothing yet
  counts as the start of time (a drain reads one topic before the others).
  The lag bound keeps a role that is silent, absent, or read far behind from
  holding retention back (and the state growing) for good; what such a role
  then says about a retired job is what it says about an unknown one (an
  observation is buffered and expires, a decision is voided
  ``job-missing``).  The rule reads only the archived events, so replay
  derives the same watermark.
* A job is *finished* once its phase is terminal and every task it still has
  is Succeeded or Failed (a cancelled job's Releasing tasks must end first).
  It records ``finished_at`` = the time of the event that finished it (not the
  clock, which a topic read ahead inflates: its deadline is the same however
  the topics were read).
* Before each event's handler, the role clock, the clock and the watermark
  take the event's time and every finished job whose ``finished_at`` + TTL is
  at or before the watermark leaves the state with its tasks, in (deadline,
  job id) order.  The TTL is the job's ``ttl_seconds_after_finished``, else
  :data:`DEFAULT_TTL_SECONDS_AFTER_FINISHED` (3600 s), part of the archive's
  contract: replay retires exactly the same jobs.  An invalid event undoes
  both (it is not archived, so replay never sees it).
* A name may be reused once its job has finished (Kubernetes: delete, then
  create again, with a new uid): a JobSubmitted for a job that is finished
  starts a new incarnation, while one that has not finished (a cancelled job
  whose Releasing tasks hold their nodes included) is ``duplicate-job``.  The
  finished incarnation moves aside under ``<id>#<submitted_seq>`` without its
  tasks (the new one's tasks take their ids) and retires at its own deadline.
  A decision of a session whose ``input_seq`` is below the job's
  ``submitted_seq`` was computed before this incarnation existed: voided
  ``stale-incarnation``, so a late session never binds or evicts a task of
  the new one.  Observations name the task id, which incarnations share; one
  that carries ``observed_seq`` (the seq of the task row its executor acted
  on) below the live incarnation's ``submitted_seq`` is about an earlier
  incarnation: moot, archived with no effect.  One without it is judged
  against the live incarnation (the earlier one's tasks had all finished).
* A retired job is unknown from then on: its id may be submitted again, a
  cancel of it is ``job-missing``, a decision naming it is voided
  ``job-missing``, and an observation naming it is buffered like one of a job
  not yet submitted.  The archive keeps all its events (``replay explain``
  reads them there).

The buffers are bounded in event time too.  An entry of ``early_observations``
(by job id) or ``session_parts`` (by session id) records ``since``, its first
event's time, and *expires* once the topic its resolution would come on is
past ``since`` by :data:`BUFFER_WINDOW_SECONDS` (3600 s): for observations the
intents topic (their JobSubmitted; or the clock minus :data:`MAX_INTENTS_SILENCE`,
7 days, so a silent intents topic does not hold them for good), for session parts the
decisions topic (their SessionCommitted follows them there, in order; a
decisions topic that lags must not expire its own parts).  After an applied
event's handler, the due entries are dropped, observations first, each buffer
in (since, key) order, and reported in ``FoldOutcome.expired`` with a code
from :data:`EXPIRY_REASONS` (their events stay archived and never apply; the
projector records them in ``expired_buffers``).  The window is a constant,
not a setting, because it is part of the archive's contract like the default
TTL: a projector and a replay configured differently would derive different
states from one archive.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, TypeAlias, assert_never

from events.models import (
    BindDecision,
    Decision,
    EnqueueDecision,
    Event,
    EvictDecision,
    HyperNodeDeleted,
    HyperNodeUpserted,
    JobCancelled,
    JobRejected,
    JobSubmitted,
    LeaderElected,
    NodeRemoved,
    NodeReported,
    PendingJob,
    PipelineDecision,
    PriorityClassUpserted,
    QueueDeleted,
    QueueUpserted,
    SchedulerConfigured,
    SessionCommitted,
    SessionCommittedData,
    SessionPart,
    TaskFinished,
    TasksAdded,
    TaskSpec,
    TaskStarted,
    changed_pending,
)
from events.signing import event_signed_by, public_key_of
from projector.state import (
    CLOCK_START,
    DECISIONS,
    FINISHED,
    INTENTS,
    MAX_ROLE_LAG,
    MAX_SESSIONS,
    OBSERVATIONS,
    OCCUPYING,
    PODS,
    TERMINAL_JOB_PHASES,
    BufferedSession,
    ClusterState,
    EarlyObservation,
    EarlyObservations,
    JobPhase,
    JobState,
    NodeState,
    PriorityClassState,
    QueueState,
    QueueStatus,
    SessionRecord,
    TaskState,
    TaskStatus,
    VoidedDecision,
    new_tasks,
    place,
    reduce_through_init,
    superseded_id_of,
    task_id_of,
    unplace,
    watermark_of,
    without_pending,
)

__all__ = [
    "BUFFER_WINDOW",
    "BUFFER_WINDOW_SECONDS",
    "DECISION_VOID_REASONS",
    "DEFAULT_TTL_SECONDS_AFTER_FINISHED",
    "EVENT_ROLES",
    "EXPIRY_REASONS",
    "INVALID_EVENT_REASONS",
    "MAX_INTENTS_SILENCE",
    "MAX_ROLE_LAG",
    "Expired",
    "FoldOutcome",
    "Touched",
    "apply",
]

#: What an applied event changed, for the projection writer: (kind, key) with
#: kind in queue, priority_class, node, hypernode, new_job (created, or tasks added: its row
#: is written whole), job (phase changed),
#: task, session, early (a job's buffered observations), parts (a session's
#: buffered parts), meta (config, leader epoch).
Touched: TypeAlias = tuple[tuple[str, str], ...]

INVALID_EVENT_REASONS: Final = (
    "duplicate-job",  # JobSubmitted for a job id whose job has not finished
    "duplicate-task",  # JobSubmitted whose task ids collide (with each other or existing tasks)
    "pod-names-mismatch",  # JobSubmitted naming a task's pods, but not one name per replica
    "job-missing",  # the event names a job that does not exist
    "job-finished",  # JobCancelled for a job already Completed, Failed or Cancelled
    "job-not-pending",  # JobRejected for a job already admitted
    "task-missing",  # TaskStarted/TaskFinished naming a live job's task that does not exist
    "task-job-mismatch",  # the task does not belong to the named job
    "task-finished",  # TaskStarted or TaskFinished for a task that already finished
    "node-missing",  # NodeRemoved / TaskStarted naming an unknown node
    "queue-missing",  # QueueDeleted for an unknown queue
    "hypernode-missing",  # HyperNodeDeleted for an unknown hyperNode
    "duplicate-session",  # a second SessionCommitted with the same session id
    "duplicate-part",  # a SessionPart index seen before for that session
    "session-incomplete",  # the marker announces parts that never arrived
    "not-leader",  # a session with another epoch than the current leadership's (LeaderElected)
    "bad-signature",  # a session, part or LeaderElected not signed by the leadership's key
    "stale-leader",  # a LeaderElected whose epoch is not above every epoch seen
)

DECISION_VOID_REASONS: Final = (
    "stale-epoch",  # the whole session: a newer leader has already committed
    "job-missing",
    "stale-incarnation",  # the session's input predates the job's submission (its name was reused)
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

#: How long a finished job stays in the state, in seconds of event time, when its
#: JobSubmitted names no ``ttl_seconds_after_finished``.  Part of the archive's
#: contract: changing it changes what replay derives from existing archives.
DEFAULT_TTL_SECONDS_AFTER_FINISHED: Final = 3600

#: How long an entry of the buffers (observations of a job not in the state, parts of a
#: session not committed) waits, in seconds of event time (see the module docstring), before
#: it expires.  Part of the archive's contract, like the default TTL: replay expires the same.
BUFFER_WINDOW_SECONDS: Final = 3600
BUFFER_WINDOW: Final = timedelta(seconds=BUFFER_WINDOW_SECONDS)

EXPIRY_REASONS: Final = (
    "observation-expired",  # observations of a job that was not submitted within the window
    "session-part-expired",  # parts of a session whose SessionCommitted did not arrive within it
)

#: How long observations of an unknown job wait for a silent intents topic (see
#: :func:`_early_deadline`): far longer than :data:`MAX_ROLE_LAG`, since an observation that
#: expires before its job arrives is lost to the job (a 1M-event backlog was drained with the
#: intents topic 27 h of event time behind the observations).  Part of the archive's contract.
MAX_INTENTS_SILENCE: Final = timedelta(days=7)

#: The topic role of each event type (projector.state.ROLES order), as events.topics.topic_for
#: routes it (tests/projector/test_watermark.py holds them together).
EVENT_ROLES: Final[dict[type[Event], int]] = {
    QueueUpserted: INTENTS,
    QueueDeleted: INTENTS,
    PriorityClassUpserted: INTENTS,
    SchedulerConfigured: INTENTS,
    JobSubmitted: INTENTS,
    TasksAdded: INTENTS,
    JobCancelled: INTENTS,
    JobRejected: INTENTS,
    NodeReported: OBSERVATIONS,
    NodeRemoved: OBSERVATIONS,
    HyperNodeUpserted: OBSERVATIONS,
    HyperNodeDeleted: OBSERVATIONS,
    TaskStarted: OBSERVATIONS,
    TaskFinished: OBSERVATIONS,
    SessionCommitted: DECISIONS,
    SessionPart: DECISIONS,
    LeaderElected: DECISIONS,
}

_META: Final = ("meta", "")
# The members the fold reads, bound once: on Python 3.11 reading a member off its enum
# class goes through EnumType.__getattr__ (a Python hook, ~200 ns a read), and the fold
# reads them per task of a job at every observation (_refresh_phase).
_JOB_CANCELLED: Final = JobPhase.CANCELLED
_JOB_COMPLETED: Final = JobPhase.COMPLETED
_JOB_FAILED: Final = JobPhase.FAILED
_JOB_INQUEUE: Final = JobPhase.INQUEUE
_JOB_PENDING: Final = JobPhase.PENDING
_JOB_RUNNING: Final = JobPhase.RUNNING
_TASK_BOUND: Final = TaskStatus.BOUND
_TASK_FAILED: Final = TaskStatus.FAILED
_TASK_PENDING: Final = TaskStatus.PENDING
_TASK_RELEASING: Final = TaskStatus.RELEASING
_TASK_RUNNING: Final = TaskStatus.RUNNING
_TASK_SUCCEEDED: Final = TaskStatus.SUCCEEDED


@dataclass(frozen=True, slots=True)
class Expired:
    """A buffered entry that expired (see the module docstring): archived events that will
    never apply.

    ``code`` is from :data:`EXPIRY_REASONS`; ``key`` the job id or session id;
    ``event_ids`` the expired observations' ids (empty for session parts).
    """

    code: str
    key: str
    since: datetime
    event_ids: tuple[str, ...]
    detail: str

    @property
    def touched(self) -> tuple[str, str]:
        """The buffer's touched key (the writer deletes its rows)."""
        return ("early" if self.code == "observation-expired" else "parts", self.key)


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
    session, in order (for the bindings and evictions tables).  ``expired``
    are the buffered entries the event's time expired (for ``expired_buffers``).
    """

    invalid: str | None = None
    detail: str = ""
    touched: Touched = ()
    decisions: tuple[tuple[int, Decision], ...] = ()
    expired: tuple[Expired, ...] = ()

    def __init__(
        self,
        invalid: str | None = None,
        detail: str = "",
        touched: Touched = (),
        decisions: tuple[tuple[int, Decision], ...] = (),
        expired: tuple[Expired, ...] = (),
    ) -> None:
        self.invalid = invalid
        self.detail = detail
        self.touched = touched
        self.decisions = decisions
        self.expired = expired

    def __reduce__(self) -> tuple[type[Any], tuple[Any, ...]]:
        return reduce_through_init(self)

    @property
    def applied(self) -> bool:
        return self.invalid is None


def _invalid(reason: str, detail: str) -> FoldOutcome:
    return FoldOutcome(invalid=reason, detail=detail)


def apply(state: ClusterState, seq: int, event: Event) -> FoldOutcome:
    """Fold ``event``, the archive's event number ``seq``, into ``state`` (in place).

    The clocks move to the event's time and the jobs due by the watermark retire
    before its handler runs, so the handler sees the state as of the event's time;
    the buffered entries due expire after it (see the module docstring).
    """
    clock, watermark = state.clock, state.watermark
    role_clocks = state.role_clocks
    role = EVENT_ROLES[type(event)]
    role_clock = role_clocks[role]
    time = event.time
    if time > role_clock:
        role_clocks[role] = time
        if time > clock:
            state.clock = time
        state.watermark = watermark_of(role_clocks, state.clock)
    heap = state.retiring
    retired = _retire(state) if heap and heap[0][0] <= state.watermark else None
    outcome = _dispatch(state, seq, event)
    if outcome.invalid is None:
        state.seq = seq
        early, parts = state.early_expiring, state.parts_expiring
        expired = (
            _expire(state)
            if (early and early[0][0] <= _early_deadline(state))
            or (parts and parts[0][0] <= _before(role_clocks[DECISIONS], BUFFER_WINDOW))
            else None
        )
        if retired is not None or expired:
            touched = [] if retired is None else [key for job, _ in retired for key in _removed_keys(job)]
            touched.extend(outcome.touched)
            expiries: tuple[Expired, ...] = ()
            if expired:
                touched.extend(expiry.touched for expiry in expired)
                expiries = tuple(expired)
            outcome = FoldOutcome(touched=tuple(touched), decisions=outcome.decisions, expired=expiries)
    else:
        # Not archived: replay never sees it, so neither its time nor what it retired.
        state.clock, state.watermark = clock, watermark
        role_clocks[role] = role_clock
        if retired is not None:
            _reinstate(state, retired)
    return outcome


# ---------------------------------------------------------------------------- retention

#: Retired jobs with their tasks (kept until the event that retired them is judged valid).
_Retired: TypeAlias = list[tuple[JobState, list[TaskState]]]


def _finish_if_done(state: ClusterState, job: JobState, time: datetime) -> bool:
    """Record that ``job`` finished at ``time``, the time of the event that finished it, if it
    just did (see the module docstring); True when so."""
    if job.finished_at is not None or job.phase not in TERMINAL_JOB_PHASES:
        return False
    tasks = state.tasks
    for task_id in job.tasks:
        if tasks[task_id].status not in FINISHED:
            return False
    job.finished_at = time
    heapq.heappush(state.retiring, (_deadline(job, time), job.id))
    return True


def _retire(state: ClusterState) -> _Retired:
    """Remove the finished jobs due by the watermark, with their tasks, in (deadline, id) order."""
    heap, clock = state.retiring, state.watermark
    jobs, tasks = state.jobs, state.tasks
    retired: _Retired = []
    while heap and heap[0][0] <= clock:
        deadline, job_id = heapq.heappop(heap)
        job = jobs.get(job_id)
        if job is None or job.finished_at is None or _deadline(job, job.finished_at) != deadline:
            continue  # the id names a newer incarnation now (the entry moved with the old one)
        del jobs[job_id]
        # Finished tasks occupy no node: nothing else refers to them.
        retired.append((job, [tasks.pop(task_id) for task_id in job.tasks]))
    return retired


def _reinstate(state: ClusterState, retired: _Retired) -> None:
    """Undo :func:`_retire` (for an invalid event)."""
    for job, tasks in retired:
        state.jobs[job.id] = job
        for task in tasks:
            state.tasks[task.id] = task
        finished_at = job.finished_at
        if finished_at is not None:  # always: only finished jobs retire
            heapq.heappush(state.retiring, (_deadline(job, finished_at), job.id))


def _deadline(job: JobState, finished_at: datetime) -> datetime:
    """When ``job``, finished at ``finished_at``, leaves the state."""
    return finished_at + timedelta(seconds=job.ttl_seconds)


def _removed_keys(job: JobState) -> list[tuple[str, str]]:
    """The touched keys of a retired job's rows (gone from the state: the writer deletes them)."""
    return [("job", job.id), *(("task", task_id) for task_id in job.tasks)]


def _early_deadline(state: ClusterState) -> datetime:
    """Observations buffered at or before this expire: the intents topic (where the job they
    wait for would come) is past them by the window, or the clock by the window and
    :data:`MAX_INTENTS_SILENCE`."""
    intents, floor = state.role_clocks[INTENTS], _before(state.clock, MAX_INTENTS_SILENCE)
    return _before(intents if intents > floor else floor, BUFFER_WINDOW)


def _before(time: datetime, span: timedelta) -> datetime:
    """``time - span``, or the start of time when that is before it (no OverflowError near
    year 1: a role that has sent nothing is at CLOCK_START, and a producer may send year 1)."""
    return time - span if time - CLOCK_START > span else CLOCK_START


def _expire(state: ClusterState) -> list[Expired]:
    """Drop the buffered entries due (see the module docstring), observations first, each
    buffer in (since, key) order."""
    expired: list[Expired] = []
    heap, deadline = state.early_expiring, _early_deadline(state)
    while heap and heap[0][0] <= deadline:
        since, key = heapq.heappop(heap)
        entry = state.early_observations.get(key)
        if entry is None or entry.since != since:
            continue  # applied (its job came), or buffered again since
        del state.early_observations[key]
        ids = tuple(event.id for event in entry.events)
        detail = (
            f"{len(ids)} observation(s) of job {key} since {since.isoformat()}: no such job"
            f" (never submitted, or retired before them) within {BUFFER_WINDOW_SECONDS} s of event"
            " time; archived, never applied"
        )
        expired.append(Expired("observation-expired", key, since, ids, detail))
    heap, deadline = state.parts_expiring, _before(state.role_clocks[DECISIONS], BUFFER_WINDOW)
    while heap and heap[0][0] <= deadline:
        since, key = heapq.heappop(heap)
        buffered = state.session_parts.get(key)
        if buffered is None or buffered.since != since:
            continue  # committed, or buffered again since
        del state.session_parts[key]
        detail = (
            f"part(s) {sorted(buffered.parts)} of session {key} since {since.isoformat()}: its"
            f" SessionCommitted did not come within {BUFFER_WINDOW_SECONDS} s of event time;"
            " archived, never applied"
        )
        expired.append(Expired("session-part-expired", key, since, (), detail))
    return expired


def _dispatch(state: ClusterState, seq: int, event: Event) -> FoldOutcome:  # noqa: PLR0911, PLR0912 - one case per type
    """The handler of ``event``'s type (the most frequent types first)."""
    match event:
        case SessionCommitted():
            return _session_committed(state, seq, event)
        case TaskStarted():
            return _task_started(state, event)
        case TaskFinished():
            return _task_finished(state, event)
        case JobSubmitted():
            return _job_submitted(state, seq, event)
        case SessionPart():
            return _session_part(state, event)
        case NodeReported():
            return _node_reported(state, event)
        case JobCancelled():
            return _job_cancelled(state, event)
        case TasksAdded():
            return _tasks_added(state, event)
        case JobRejected():
            return _job_rejected(state, event)
        case NodeRemoved():
            return _node_removed(state, event)
        case QueueUpserted():
            return _queue_upserted(state, event)
        case QueueDeleted():
            return _queue_deleted(state, event)
        case PriorityClassUpserted():
            return _priority_class_upserted(state, event)
        case SchedulerConfigured():
            return _scheduler_configured(state, event)
        case LeaderElected():
            return _leader_elected(state, event)
        case HyperNodeUpserted():
            state.hypernodes[event.data.name] = event.data
            return FoldOutcome(touched=(("hypernode", event.data.name),))
        case HyperNodeDeleted():
            return _hypernode_deleted(state, event)
        case _:
            assert_never(event)


# ---------------------------------------------------------------------------- queues, classes, config


def _queue_upserted(state: ClusterState, event: QueueUpserted) -> FoldOutcome:
    d = event.data
    previous = state.queues.get(d.name)
    if previous is not None and d.if_absent:
        return FoldOutcome()  # a create-only upsert of an existing queue: archived, no change
    state.queues[d.name] = QueueState(
        name=d.name,
        weight=d.weight,
        capability=d.capability,
        deserved=d.deserved,
        guarantee=d.guarantee,
        reclaimable=d.reclaimable,
        priority=d.priority,
        state=QueueStatus(d.state),
        parent=d.parent,
        created=event.time if previous is None else previous.created,
    )
    return FoldOutcome(touched=(("queue", d.name),))


def _queue_deleted(state: ClusterState, event: QueueDeleted) -> FoldOutcome:
    name = event.data.name
    if name not in state.queues:
        return _invalid("queue-missing", f"cannot delete queue {name!r}: it does not exist")
    del state.queues[name]
    return FoldOutcome(touched=(("queue", name),))


def _hypernode_deleted(state: ClusterState, event: HyperNodeDeleted) -> FoldOutcome:
    name = event.data.name
    if name not in state.hypernodes:
        return _invalid("hypernode-missing", f"cannot delete hyperNode {name!r}: it does not exist")
    del state.hypernodes[name]
    return FoldOutcome(touched=(("hypernode", name),))


def _priority_class_upserted(state: ClusterState, event: PriorityClassUpserted) -> FoldOutcome:
    d = event.data
    state.priority_classes[d.name] = PriorityClassState(
        name=d.name, value=d.value, global_default=d.global_default, preemption_policy=d.preemption_policy
    )
    return FoldOutcome(touched=(("priority_class", d.name),))


def _scheduler_configured(state: ClusterState, event: SchedulerConfigured) -> FoldOutcome:
    state.config = event.data.config
    state.config_version += 1
    return FoldOutcome(touched=(_META,))


# ---------------------------------------------------------------------------- jobs


def _job_submitted(state: ClusterState, seq: int, event: JobSubmitted) -> FoldOutcome:
    d = event.data
    namespace, name, specs = d.namespace, d.name, d.tasks
    job_id = f"{namespace}/{name}"
    earlier = state.jobs.get(job_id)
    if earlier is not None and earlier.finished_at is None:
        # Kubernetes' AlreadyExists: the name is taken until its job has finished (a
        # cancelled job's Releasing tasks included: they still hold their nodes and ids).
        return _invalid("duplicate-job", f"job {job_id} was already submitted and has not finished")
    misnamed = _misnamed(job_id, specs)
    if misnamed is not None:
        return misnamed
    pods = _pod_ids(namespace, name, specs)
    ids = [task_id for spec_pods in pods for _, task_id in spec_pods]
    if len(set(ids)) != len(ids):
        return _invalid("duplicate-task", f"job {job_id} names the same task twice")
    tasks = state.tasks
    # The earlier incarnation's tasks give their ids up to this one.
    clash = next((tid for tid in ids if tid in tasks and tasks[tid].job != job_id), None)
    if clash is not None:
        return _invalid("duplicate-task", f"job {job_id} would create task {clash}, which exists")

    touched: list[tuple[str, str]] = []
    if earlier is not None:
        _supersede(state, earlier, touched)
    min_available = d.min_available
    if min_available is None:
        min_available = sum(s.replicas if s.min_available is None else s.min_available for s in specs)
    job = JobState(
        id=job_id,
        namespace=namespace,
        name=name,
        queue=d.queue,
        priority_class=d.priority_class,
        min_available=min_available,
        min_resources=d.min_resources,
        phase=_JOB_PENDING,
        created=event.time,
        annotations=d.annotations,
        labels=d.labels,
        task_specs=tuple(specs),
        min_task_member=None if d.min_task_member is None else dict(d.min_task_member),
        tasks=ids,
        ttl_seconds=DEFAULT_TTL_SECONDS_AFTER_FINISHED
        if d.ttl_seconds_after_finished is None
        else d.ttl_seconds_after_finished,
        submitted_seq=seq,
        network_topology=d.network_topology,
    )
    state.jobs[job_id] = job
    touched.append(("new_job", job_id))
    for spec, spec_pods in zip(specs, pods, strict=True):
        for task in new_tasks(job, spec, spec_pods):
            tasks[task.id] = task
            touched.append(("task", task.id))
    _replay_early(state, job_id, touched)
    return FoldOutcome(touched=tuple(touched))


def _supersede(state: ClusterState, earlier: JobState, touched: list[tuple[str, str]]) -> None:
    """Move the finished incarnation of a reused name aside (see the module docstring): it
    stays under its superseded id until its own retention deadline, without its tasks."""
    tasks = state.tasks
    for task_id in earlier.tasks:
        del tasks[task_id]  # finished: it occupies no node
        touched.append(("task", task_id))
    del state.jobs[earlier.id]
    # ("job", id): the scheduler's snapshot cache drops what it held for the id (the finished
    # incarnation, left out of sessions) and builds the new one.
    touched.append(("job", earlier.id))
    earlier.id = superseded_id_of(earlier.id, earlier.submitted_seq)
    earlier.tasks = []
    state.jobs[earlier.id] = earlier
    finished_at = earlier.finished_at
    if finished_at is not None:  # always: only a finished job is superseded
        heapq.heappush(state.retiring, (_deadline(earlier, finished_at), earlier.id))
    touched.append(("new_job", earlier.id))


def _misnamed(job_id: str, specs: list[TaskSpec]) -> FoldOutcome | None:
    """``pod-names-mismatch`` when a spec names its pods but not one name per replica."""
    misnamed = next((s for s in specs if s.pod_names and len(s.pod_names) != s.replicas), None)
    if misnamed is None:
        return None
    return _invalid(
        "pod-names-mismatch",
        f"job {job_id} task {misnamed.name} names {len(misnamed.pod_names)} pods for "
        f"{misnamed.replicas} replicas",
    )


def _pod_ids(namespace: str, name: str, specs: list[TaskSpec]) -> list[list[tuple[int, str]]]:
    """(index, task id) of every pod, per spec: the pod's own name when the spec lists them."""
    return [
        [
            (
                index,
                f"{namespace}/{spec.pod_names[index]}"
                if spec.pod_names
                else task_id_of(namespace, name, spec.name, index),
            )
            for index in range(spec.replicas)
        ]
        for spec in specs
    ]


def _tasks_added(state: ClusterState, event: TasksAdded) -> FoldOutcome:
    d = event.data
    job = state.jobs.get(d.job_id)
    if job is None:
        return _invalid("job-missing", f"cannot add tasks to job {d.job_id}: it does not exist")
    if job.phase in TERMINAL_JOB_PHASES:
        return _invalid("job-finished", f"cannot add tasks to job {job.id}: it is already {job.phase}")
    roles = [spec.name for spec in d.tasks]
    taken = {spec.name for spec in job.task_specs}
    if len(set(roles)) != len(roles) or taken.intersection(roles):
        return _invalid("duplicate-task", f"job {job.id} has a task named as one of {roles} already")
    misnamed = _misnamed(job.id, d.tasks)
    if misnamed is not None:
        return misnamed
    pods = _pod_ids(job.namespace, job.name, d.tasks)
    ids = [task_id for spec_pods in pods for _, task_id in spec_pods]
    clash = next((tid for tid in ids if tid in state.tasks), None)
    if clash is not None or len(set(ids)) != len(ids):
        return _invalid("duplicate-task", f"job {job.id} would get task {clash or ids}, which exists")
    job.task_specs = (*job.task_specs, *d.tasks)
    job.tasks.extend(ids)
    # new_job: the writer writes the job's row whole, its spec with the new tasks.
    touched: list[tuple[str, str]] = [("new_job", job.id), ("job", job.id)]
    tasks = state.tasks
    for spec, spec_pods in zip(d.tasks, pods, strict=True):
        for task in new_tasks(job, spec, spec_pods):
            tasks[task.id] = task
            touched.append(("task", task.id))
    return FoldOutcome(touched=tuple(touched))


def _job_cancelled(state: ClusterState, event: JobCancelled) -> FoldOutcome:
    job = state.jobs.get(event.data.job_id)
    if job is None:
        return _invalid("job-missing", f"cannot cancel job {event.data.job_id}: it does not exist")
    if job.phase in TERMINAL_JOB_PHASES:
        return _invalid("job-finished", f"cannot cancel job {job.id}: it is already {job.phase}")
    job.phase = _JOB_CANCELLED
    job.phase_reason = event.data.reason
    withdrawn = _withdraw(state, job)
    _finish_if_done(state, job, event.time)
    return FoldOutcome(touched=(("job", job.id), *withdrawn))


def _job_rejected(state: ClusterState, event: JobRejected) -> FoldOutcome:
    job = state.jobs.get(event.data.job_id)
    if job is None:
        return _invalid("job-missing", f"cannot reject job {event.data.job_id}: it does not exist")
    if job.phase is not _JOB_PENDING:
        return _invalid("job-not-pending", f"cannot reject job {job.id}: it is already {job.phase}")
    job.phase = _JOB_FAILED
    reason = event.data.reason
    job.phase_reason = f"{event.data.code}: {reason}" if reason else event.data.code
    withdrawn = _withdraw(state, job)
    _finish_if_done(state, job, event.time)
    return FoldOutcome(touched=(("job", job.id), *withdrawn))


def _withdraw(state: ClusterState, job: JobState) -> list[tuple[str, str]]:
    """A job that will not run any more: drop its Pending tasks, release the rest."""
    touched: list[tuple[str, str]] = []
    kept: list[str] = []
    for task_id in job.tasks:
        task = state.tasks[task_id]
        if task.status is _TASK_PENDING:
            del state.tasks[task_id]
            touched.append(("task", task_id))
            continue
        if task.status is _TASK_BOUND or task.status is _TASK_RUNNING:
            task.status = _TASK_RELEASING
            touched.append(("task", task_id))
        kept.append(task_id)
    job.tasks = kept
    return touched


# ---------------------------------------------------------------------------- nodes


def _node_reported(state: ClusterState, event: NodeReported) -> FoldOutcome:
    d = event.data
    name = d.name
    previous = state.nodes.get(name)
    state.nodes[name] = NodeState(
        name=name,
        allocatable=d.allocatable,
        labels=d.labels,
        taints=tuple(d.taints),
        unschedulable=d.unschedulable,
        ready=d.ready,
        created=event.time if previous is None else previous.created,
        used={} if previous is None else previous.used,
        tasks=set() if previous is None else previous.tasks,
    )
    return FoldOutcome(touched=(("node", name),))


def _node_removed(state: ClusterState, event: NodeRemoved) -> FoldOutcome:
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
        job = state.jobs[job_id]
        # Both: a cancelled job whose last Releasing task died with the node finishes.
        if _refresh_phase(state, job) | _finish_if_done(state, job, event.time):
            touched.append(("job", job_id))
    return FoldOutcome(touched=tuple(touched))


# ---------------------------------------------------------------------------- tasks


def _task_of(
    state: ClusterState, job_id: str, task_id: str, observed_seq: int | None
) -> TaskState | FoldOutcome | None:
    """The task an observation names; None when it is an observation to buffer or ignore, a
    FoldOutcome when it is refused or moot."""
    if _of_earlier_incarnation(state, job_id, observed_seq):
        return FoldOutcome()
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


def _early_or_ignored(state: ClusterState, event: EarlyObservation) -> FoldOutcome:
    """An observation that overtook its job (another topic) waits for it; one of a withdrawn task is moot."""
    job_id = event.data.job_id
    if job_id in state.jobs:
        return FoldOutcome()
    entry = state.early_observations.get(job_id)
    if entry is None:
        state.early_observations[job_id] = EarlyObservations(since=event.time, events=[event])
        heapq.heappush(state.early_expiring, (event.time, job_id))
    else:
        entry.events.append(event)
    return FoldOutcome(touched=(("early", job_id),))


def _of_earlier_incarnation(state: ClusterState, job_id: str, observed_seq: int | None) -> bool:
    """Whether an observation acted on a task row older than the live incarnation of its job
    (see the module docstring): it is about an earlier incarnation, moot."""
    if observed_seq is None:
        return False
    job = state.jobs.get(job_id)
    return job is not None and observed_seq < job.submitted_seq


def _task_started(state: ClusterState, event: TaskStarted) -> FoldOutcome:
    d = event.data
    task = _task_of(state, d.job_id, d.task_id, d.observed_seq)
    if task is None:
        return _early_or_ignored(state, event)
    if isinstance(task, FoldOutcome):
        return task
    if task.status in FINISHED:
        return _invalid("task-finished", f"task {task.id} started after it finished ({task.status})")
    node_name = d.node
    node = state.nodes.get(node_name)
    if node is None:
        return _invalid("node-missing", f"task {task.id} started on unknown node {node_name!r}")
    # The observation is the truth: the pod runs where the cluster says.
    if task.node != node_name:
        if task.status in OCCUPYING and task.node is not None:
            unplace(state.nodes[task.node], task)
        place(node, task)
        task.node = node_name
    if task.status is not _TASK_RELEASING:
        task.status = _TASK_RUNNING
    job = state.jobs[task.job]
    if _refresh_phase(state, job):
        return FoldOutcome(touched=(("task", task.id), ("job", job.id)))
    return FoldOutcome(touched=(("task", task.id),))


def _task_finished(state: ClusterState, event: TaskFinished) -> FoldOutcome:
    d = event.data
    task = _task_of(state, d.job_id, d.task_id, d.observed_seq)
    if task is None:
        return _early_or_ignored(state, event)
    if isinstance(task, FoldOutcome):
        return task
    if task.status in FINISHED:
        return _invalid("task-finished", f"task {task.id} finished twice (it is {task.status})")
    job = state.jobs[task.job]
    touched: list[tuple[str, str]] = [("task", task.id)]
    occupying = task.status in OCCUPYING
    outcome = d.outcome
    if outcome == "evicted":
        if not occupying:
            # It overtook the binding it ends: the task is Pending already.
            return FoldOutcome()
        _reset_or_drop(state, task)
    else:
        # A Pending task that finished overtook its binding: the cluster's word wins.
        if occupying and task.node is not None:
            unplace(state.nodes[task.node], task)
        task.status = _TASK_SUCCEEDED if outcome == "succeeded" else _TASK_FAILED
    changed = _refresh_phase(state, job)
    if job.phase in TERMINAL_JOB_PHASES and _finish_if_done(state, job, event.time):
        changed = True
    if changed:
        touched.append(("job", job.id))
    return FoldOutcome(touched=tuple(touched))


def _replay_early(state: ClusterState, job_id: str, touched: list[tuple[str, str]]) -> None:
    """Apply the observations that waited for ``job_id``, in arrival order.

    Each is judged now, as if it had arrived right after the job; one that
    no longer fits (it names a task the job does not have) has no effect —
    it is archived already, as the event that was buffered.
    """
    early = state.early_observations.pop(job_id, None)
    if early is None:
        return
    touched.append(("early", job_id))
    for event in early.events:
        if isinstance(event, TaskStarted):
            touched.extend(_task_started(state, event).touched)
        else:
            touched.extend(_task_finished(state, event).touched)


def _reset_or_drop(state: ClusterState, task: TaskState) -> None:
    """A pod that is gone from its node: recreated Pending, unless its job is over."""
    if task.node is not None:
        unplace(state.nodes[task.node], task)
    job = state.jobs[task.job]
    if job.phase in TERMINAL_JOB_PHASES:
        del state.tasks[task.id]
        job.tasks.remove(task.id)
        return
    task.status = _TASK_PENDING
    task.node = None


def _refresh_phase(state: ClusterState, job: JobState) -> bool:
    """Derive a live job's phase from its tasks; True when it changed."""
    if job.phase in TERMINAL_JOB_PHASES:
        return False
    running = succeeded = finished = 0
    tasks = state.tasks
    for task_id in job.tasks:
        status = tasks[task_id].status
        if status is _TASK_RUNNING:
            running += 1
        elif status is _TASK_SUCCEEDED:
            succeeded += 1
            finished += 1
        elif status is _TASK_FAILED:
            finished += 1
    phase = job.phase
    if job.tasks and finished == len(job.tasks):
        phase = _JOB_COMPLETED if succeeded >= job.min_available else _JOB_FAILED
    elif running and running + succeeded >= job.min_available:
        phase = _JOB_RUNNING
    elif phase is _JOB_RUNNING:
        phase = _JOB_INQUEUE
    if phase is job.phase:
        return False
    job.phase = phase
    return True


# ---------------------------------------------------------------------------- sessions


def _leader_elected(state: ClusterState, event: LeaderElected) -> FoldOutcome:
    d = event.data
    if d.epoch <= state.leader_epoch:
        return _invalid(
            "stale-leader", f"leader epoch {d.epoch} is not above the current epoch {state.leader_epoch}"
        )
    if not event_signed_by(event, public_key_of(d.public_key)):
        return _invalid("bad-signature", f"the LeaderElected of epoch {d.epoch} is not signed by its key")
    state.leader_epoch = d.epoch
    state.leader_key = d.public_key
    return FoldOutcome(touched=(_META,))


def _not_from_leader(
    state: ClusterState, event: SessionCommitted | SessionPart, epoch: int | None
) -> FoldOutcome | None:
    """Why a session event does not come from the current leadership (None: it does, or the log
    names none yet: see the module docstring)."""
    key = state.leader_key
    if not key:
        return None
    if epoch is not None and epoch != state.leader_epoch:
        return _invalid(
            "not-leader",
            f"the session names leader epoch {epoch}; the current leadership's is {state.leader_epoch}",
        )
    if not event_signed_by(event, public_key_of(key)):
        return _invalid(
            "bad-signature",
            f"{event.type} {event.id} is not signed by the leader of epoch {state.leader_epoch}",
        )
    return None


def _session_part(state: ClusterState, event: SessionPart) -> FoldOutcome:
    d, time = event.data, event.time
    if d.session_id in state.sessions:
        return _invalid("duplicate-session", f"part {d.index} of session {d.session_id} after its commit")
    if (foreign := _not_from_leader(state, event, None)) is not None:
        return foreign
    buffered = state.session_parts.get(d.session_id)
    if buffered is None:
        buffered = state.session_parts[d.session_id] = BufferedSession(since=time, parts={})
        heapq.heappush(state.parts_expiring, (time, d.session_id))
    elif d.index in buffered.parts:
        return _invalid("duplicate-part", f"part {d.index} of session {d.session_id} arrived twice")
    # Buffered as it is: the data is frozen.
    buffered.parts[d.index] = d
    return FoldOutcome(touched=(("parts", d.session_id),))


def _session_committed(state: ClusterState, seq: int, event: SessionCommitted) -> FoldOutcome:
    d = event.data
    session_id, part_count = d.session_id, d.parts
    if session_id in state.sessions:
        return _invalid("duplicate-session", f"session {session_id} was already committed")
    if (foreign := _not_from_leader(state, event, d.leader_epoch)) is not None:
        return foreign
    # A split session's marker carries no decisions; its pending jobs follow the parts'.
    decisions: list[Decision] = list(d.decisions)
    pending: list[PendingJob] = []
    touched: list[tuple[str, str]] = [("session", session_id), _META]
    if part_count:
        buffered = state.session_parts.get(session_id)
        parts = {} if buffered is None else buffered.parts
        missing = [i for i in range(part_count) if i not in parts]
        if missing:
            return _invalid(
                "session-incomplete", f"session {session_id} announces {part_count} parts, missing {missing}"
            )
        for index in range(part_count):
            decisions.extend(parts[index].decisions)
            pending.extend(parts[index].pending)
        del state.session_parts[session_id]
        touched.append(("parts", session_id))
    pending.extend(d.pending)
    newest = next(reversed(state.sessions.values()), None)
    whole = _whole_pending(newest, d, pending)
    if newest is not None and newest.pending is not None:
        # Only the newest session keeps its whole list: the previous one's row drops it too.
        state.sessions[newest.session_id] = without_pending(newest)
        touched.append(("session", newest.session_id))

    accepted: list[tuple[int, Decision]] = []
    voided: list[VoidedDecision] = []
    leader_epoch = d.leader_epoch
    if leader_epoch < state.leader_epoch:
        voided = [_voided(i, decision, "stale-epoch") for i, decision in enumerate(decisions)]
    else:
        state.leader_epoch = leader_epoch
        input_seq = d.input_seq
        for index, decision in enumerate(decisions):
            reason = _decide(state, decision, input_seq, touched)
            if reason is None:
                accepted.append((index, decision))
            else:
                voided.append(_voided(index, decision, reason))

    state.sessions[session_id] = SessionRecord(
        session_id=session_id,
        seq=seq,
        leader_epoch=leader_epoch,
        input_seq=d.input_seq,
        config_version=d.config_version,
        now=d.now,
        accepted=len(accepted),
        voided=tuple(voided),
        pending=whole,
        pending_digest=d.pending_digest,
        input_digest=d.input_digest,
        logic_flags=tuple(d.logic_flags),
    )
    if len(state.sessions) > MAX_SESSIONS:
        del state.sessions[next(iter(state.sessions))]
    return FoldOutcome(touched=tuple(touched), decisions=tuple(accepted))


def _whole_pending(
    newest: SessionRecord | None, d: SessionCommittedData, carried: list[PendingJob]
) -> tuple[PendingJob, ...] | None:
    """The session's whole pending list (in job order), from the parts' and the marker's entries.

    A change is read against the newest session's list, the only one the state
    keeps; None when it names another base (a session of another leader came
    between): the archive keeps the change, and the next whole list restores it.
    """
    if not d.pending_base:
        return tuple(carried)
    if newest is None or newest.session_id != d.pending_base or newest.pending is None:
        return None
    return changed_pending(newest.pending, carried, d.pending_cleared)


def _voided(index: int, decision: Decision, reason: str) -> VoidedDecision:
    """The record of a refused decision."""
    if isinstance(decision, EnqueueDecision):  # names no task nor node
        return VoidedDecision(
            index=index, kind=decision.kind, job=decision.job, task=None, node=None, reason=reason
        )
    return VoidedDecision(
        index=index,
        kind=decision.kind,
        job=decision.job,
        task=decision.task,
        node=decision.node,
        reason=reason,
    )


def _decide(  # noqa: PLR0911 - one return per void reason, in rule order
    state: ClusterState, decision: Decision, input_seq: int, touched: list[tuple[str, str]]
) -> str | None:
    """Apply one decision if it still holds; else the void reason (state untouched)."""
    job = state.jobs.get(decision.job)
    if job is None:
        return "job-missing"
    if job.submitted_seq > input_seq:
        # The session's snapshot predates this incarnation: it decided about an earlier one.
        return "stale-incarnation"
    phase = job.phase
    if phase in TERMINAL_JOB_PHASES:
        return "job-cancelled" if phase is _JOB_CANCELLED else "job-finished"
    match decision:
        case BindDecision():  # most decisions: tested first
            return _bind(state, job, decision, touched)
        case EnqueueDecision():
            return _enqueue(job, touched)
        case PipelineDecision():
            return None  # recorded only
        case EvictDecision():
            return _evict(state, job, decision, touched)
        case _:
            assert_never(decision)


def _enqueue(job: JobState, touched: list[tuple[str, str]]) -> str | None:
    if job.phase is not _JOB_PENDING:
        return "job-not-pending"
    job.phase = _JOB_INQUEUE
    touched.append(("job", job.id))
    return None


def _bind(
    state: ClusterState, job: JobState, decision: BindDecision, touched: list[tuple[str, str]]
) -> str | None:
    task = state.tasks.get(decision.task)
    if task is None or task.job != job.id:
        return "task-missing"
    if task.status is not _TASK_PENDING:
        return "task-not-pending"
    node_name = decision.node
    node = state.nodes.get(node_name)
    if node is None:
        return "node-missing"
    if not _fits(node, task.resources):
        return "insufficient-resources"
    place(node, task)
    task.status = _TASK_BOUND
    task.node = node_name
    touched.append(("task", task.id))
    return None


def _evict(
    state: ClusterState, job: JobState, decision: EvictDecision, touched: list[tuple[str, str]]
) -> str | None:
    task = state.tasks.get(decision.task)
    if task is None or task.job != job.id:
        return "task-missing"
    if task.status is not _TASK_BOUND and task.status is not _TASK_RUNNING:
        return "task-not-running"
    if task.node != decision.node:
        return "task-not-on-node"
    task.status = _TASK_RELEASING
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
