"""The entry point: ``run_session(snapshot, config, now) -> SessionResult``.

Opening: build the working state, instantiate every configured plugin (tier
by tier, in order) and let it register its callbacks.  Then the configured
actions run in order.  Closing computes, for every job, the PodGroup phase
(semantics.md §3.3), the tasks left pipelined, and the ranked reasons of every
job that did not fully move; the result also carries each queue's allocation
at opening and deserved amounts, and each job's priority (what an audit of
the session's evictions reads).

:func:`advance` applies a session's outcome to its input snapshot the way the
conformance scenarios define it between sessions: bindings complete (Running),
evictions complete (the task is Pending again, off its node), pipelined
placements are forgotten, PodGroup phases are taken from the result.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from typing import Any, Final

from scheduler.core.carried import CarriedJobs
from scheduler.core.config import ActionName, PluginName, SchedulerConfig
from scheduler.core.decisions import Bind, Decision, Evict, Pipeline
from scheduler.core.framework import Session
from scheduler.core.reasons import Reason, rank
from scheduler.core.registry import build_registry
from scheduler.core.snapshot import ClusterSnapshot, Job, PodGroupPhase, Task, TaskStatus
from scheduler.core.state import SCHEDULED_STATUSES, JobState, TaskState, status_codes
from scheduler.core.trace import ActionRan, TraceStep, trace_to_json

__all__ = ["QueueShares", "SessionResult", "advance", "run_session", "trace_to_json"]


@dataclass(frozen=True, slots=True)
class QueueShares:
    """The inputs of the queues' shares in a session.

    ``allocated``: per queue with jobs, the requests of its allocated tasks when the
    session opened.  ``deserved``: per queue, the deserved amounts of the first quota
    plugin configured (proportion's water-filling or capacity's ``deserved``), else the
    queue's own ``deserved``.  A queue's share is its largest allocated / deserved ratio
    over the dimensions with a deserved amount.
    """

    allocated: dict[str, dict[str, int]]
    deserved: dict[str, dict[str, Fraction]]


@dataclass(frozen=True, slots=True)
class SessionResult:
    #: enqueue / bind / evict decisions in the order they were committed.
    decisions: tuple[Decision, ...]
    #: tasks left on resources that are still being released, in placement order.
    pipelined: tuple[Pipeline, ...]
    #: job -> PodGroup phase after the session (every job of the snapshot).
    phases: dict[str, str]
    #: job -> ranked reasons, for every job with tasks that did not move.
    pending: dict[str, tuple[Reason, ...]]
    trace: tuple[TraceStep, ...]
    shares: QueueShares
    #: job -> the priority the session gave it (PriorityClass value, else the default).
    priorities: dict[str, int]
    #: waiting jobs allocate did not visit: it gave them a refused visit's outcome (the same
    #: result as visiting them, actions/allocate.py); a measure of work saved, nothing decided.
    refusals_given_again: int = 0

    def events(self) -> list[Any]:
        """Decisions followed by pipelines, as ``events.models`` decision models."""
        return [d.to_event() for d in (*self.decisions, *self.pipelined)]

    def trace_json(self) -> list[dict[str, Any]]:
        return trace_to_json(self.trace)


def run_session(
    snapshot: ClusterSnapshot,
    config: SchedulerConfig,
    now: datetime,
    *,
    logic_flags: frozenset[str] = frozenset(),
    observe_action: Callable[[str], Callable[[], None]] | None = None,
    carried: CarriedJobs | None = None,
) -> SessionResult:
    """One session over ``snapshot``.  ``observe_action(name)``, when given, is called as each action
    starts and what it returns as the action ends (the service times actions with it; neither may
    touch the session, so the result is the same).  ``carried``: job states kept from the previous
    session, owned by the caller (scheduler/core/carried.py); the result is the same with or
    without."""
    ssn = Session(snapshot, config, now, logic_flags, carried)
    allocated = ssn.queue_allocation()
    registry = build_registry()
    plugins = []
    for tier_index, tier in enumerate(config.tiers):
        for option in tier.plugins:
            plugin = registry.plugin(option, tier_index)
            plugin.on_session_open(ssn)
            plugins.append(plugin)
    for name in config.actions:
        ssn.step(ActionRan(name))
        ended = None if observe_action is None else observe_action(name)
        registry.action(name).execute(ssn)
        if ended is not None:
            ended()
    for plugin in plugins:
        plugin.on_session_close(ssn)
    result = _close(ssn, allocated)
    ssn.release()
    return result


_PENDING: Final = str(PodGroupPhase.PENDING)


def _close(ssn: Session, allocated: dict[str, dict[str, int]]) -> SessionResult:
    gang = PluginName.GANG in ssn.config.plugin_names()
    phases: dict[str, str] = {}
    # str() of a StrEnum member is its value; ``.value`` is a Python-level property
    # (enum.property), a function call per job in compiled code.
    jobs = ssn.jobs
    for uid, job in ssn.snapshot_jobs:  # the snapshot's order, each uid formatted once
        state = jobs.get(uid)
        phases[uid] = str(job.phase) if state is None else str(_phase(state, gang))
    pipelined = sorted(
        (
            t
            for t in ssn.tasks.values()
            if t.status is TaskStatus.PIPELINED or (t.status is TaskStatus.ALLOCATED and t.tentative)
        ),
        key=lambda t: t.placed_seq,
    )
    pipelines = tuple(Pipeline(t.uid, t.job.uid, ssn.nodes.names[t.node]) for t in pipelined)
    pending: dict[str, tuple[Reason, ...]] = {}
    # Pipelined tasks per job, in placement order (one pass, not one scan per job).
    left_by_job: dict[str, list[TaskState]] = {}
    for t in pipelined:
        left_by_job.setdefault(t.job.uid, []).append(t)
    for uid, job_state in _in_uid_order(ssn, phases):
        if job_state is None:
            pending[uid] = rank(ssn.built_reasons(uid))
            continue
        waiting = job_state.counts[_PENDING_CODE]
        left = left_by_job.get(uid) if left_by_job else None
        if not waiting and not left and phases[uid] != _PENDING:
            continue
        if not job_state.tasks and phases[uid] != _PENDING:
            continue
        gated = _gated_tasks(job_state) if waiting else []
        if not gated and not left:
            # The backlog's case: only the reasons recorded during the session, no dict to merge into.
            built = ssn.built_reasons(uid)
            if built:
                pending[uid] = rank(built)
                continue
        reasons = ssn.job_reasons(uid)
        if gated:
            reasons["scheduling-gated"] = _gated_reason(job_state, gated)
        if left:
            nodes = sorted({ssn.nodes.names[t.node] for t in left})
            reasons["pipelined"] = Reason(
                "pipelined",
                f"{len(left)} task(s) placed on {', '.join(nodes)} waiting for resources to be released; "
                f"{job_state.ready_num + job_state.waiting_num}/{len(job_state.tasks)} tasks placeable, "
                f"minAvailable {job_state.min_member}",
                {"tasks": [t.uid for t in left], "nodes": nodes},
            )
        if not reasons:
            reasons["not-evaluated"] = _not_evaluated(ssn, job_state)
        ranked = rank(list(reasons.values()))
        if left:
            # Where the job ended up matters more than what failed earlier in the session.
            ranked = (reasons["pipelined"], *(r for r in ranked if r.code != "pipelined"))
        pending[uid] = ranked
    return SessionResult(
        decisions=tuple(ssn.decisions),
        pipelined=pipelines,
        phases=phases,
        pending=pending,
        trace=tuple(ssn.trace),
        shares=QueueShares(allocated, _deserved(ssn)),
        priorities={uid: job.priority for uid, job in ssn.jobs.items()},
        refusals_given_again=ssn.refusals_given_again,
    )


def _deserved(ssn: Session) -> dict[str, dict[str, Fraction]]:
    if ssn.deserved is not None:
        return ssn.deserved
    return {
        name: {d: Fraction(v) for d, v in sorted(queue.deserved.items())}
        for name, queue in ssn.queues.items()
    }


def _in_uid_order(ssn: Session, phases: dict[str, str]) -> Iterable[tuple[str, JobState | None]]:
    """Every job of the snapshot (the keys of ``phases``) by uid, with its state (None for an
    orphan, whose queue does not exist).  The session keeps its jobs in uid order: without
    orphans there is nothing to sort."""
    if not ssn.orphans:
        return ssn.jobs.items()
    jobs = ssn.jobs
    return [(uid, jobs.get(uid)) for uid in sorted(phases)]


def _gated_tasks(job: JobState) -> list[TaskState]:
    if not any(t.gates for t in job.tasks):  # the common case: no list per waiting job
        return []
    return [t for t in job.tasks if t.status is TaskStatus.PENDING and t.gates]


def _gated_reason(job: JobState, gated: list[TaskState]) -> Reason:
    names = sorted({g for t in gated for g in t.gates})
    return Reason(
        "scheduling-gated",
        f"{len(gated)}/{len(job.tasks)} task(s) held by scheduling gates ({', '.join(names)}); "
        "they are not placed until the gates are removed",
        {"tasks": sorted(t.uid for t in gated), "gates": names},
    )


def _not_evaluated(ssn: Session, job: JobState) -> Reason:
    actions = ", ".join(ssn.config.actions)
    if job.phase is PodGroupPhase.PENDING:
        why = "the job is still Pending (not admitted by enqueue)"
    elif ActionName.ALLOCATE not in ssn.config.actions and ActionName.BACKFILL not in ssn.config.actions:
        why = "no placing action is configured"
    else:
        why = "no action reached the job's pending tasks this session"
    return Reason("not-evaluated", f"{why} (actions: {actions})", {"actions": list(ssn.config.actions)})


# The status sets _phase counts, as codes (it runs for every job).
_RUNNING: Final = status_codes((TaskStatus.RUNNING,))
_RELEASING: Final = status_codes((TaskStatus.RELEASING,))
_SCHEDULED: Final = status_codes(SCHEDULED_STATUSES)
_COMPLETED: Final = status_codes((TaskStatus.FAILED, TaskStatus.SUCCEEDED))
_WAITING: Final = status_codes((TaskStatus.PENDING, TaskStatus.PIPELINED))
_PENDING_CODE: Final = status_codes((TaskStatus.PENDING,))[0]


def _phase(job: JobState, gang: bool) -> PodGroupPhase:
    """Volcano's PodGroup phase at session close (semantics.md §3.3)."""
    if job.counts[_PENDING_CODE] == len(job.tasks):
        # Only Pending tasks (the waiting backlog): nothing running, scheduled or completed.
        running = scheduled = completed = 0
        unschedulable = False
    else:
        running = job.count_codes(_RUNNING)
        releasing_placed = (
            sum(1 for t in job.tasks if t.status is TaskStatus.RELEASING and t.node >= 0)
            if job.count_codes(_RELEASING)  # most jobs have none: no walk over their tasks
            else 0
        )
        scheduled = job.count_codes(_SCHEDULED) + releasing_placed
        completed = job.count_codes(_COMPLETED)
        unschedulable = False
        if gang and job.tasks and not job.is_ready():
            only_replacing = (
                job.count_codes(_WAITING) == 0 and job.ready_num + releasing_placed >= job.min_member
            )
            unschedulable = not only_replacing
    if running and unschedulable:
        return PodGroupPhase.UNKNOWN
    if scheduled >= job.min_member:
        # Tephra: a group with nothing scheduled is never "Completed".
        if scheduled and scheduled == completed:
            return PodGroupPhase.COMPLETED
        return PodGroupPhase.RUNNING
    if job.phase is not PodGroupPhase.INQUEUE:
        return PodGroupPhase.PENDING
    return PodGroupPhase.INQUEUE


def advance(snapshot: ClusterSnapshot, result: SessionResult) -> ClusterSnapshot:
    """The snapshot of the next session (conformance README, "Between sessions")."""
    bound = {d.task: d.node for d in result.decisions if isinstance(d, Bind)}
    evicted = {d.task for d in result.decisions if isinstance(d, Evict)}

    def next_task(task: Task) -> Task:
        uid = task.uid
        if uid in evicted or task.status is TaskStatus.RELEASING:
            return dataclasses.replace(task, status=TaskStatus.PENDING, node=None)
        if uid in bound:
            return dataclasses.replace(task, status=TaskStatus.RUNNING, node=bound[uid])
        if task.status in (TaskStatus.BINDING, TaskStatus.BOUND):
            return dataclasses.replace(task, status=TaskStatus.RUNNING)
        if task.status in (TaskStatus.PIPELINED, TaskStatus.ALLOCATED):
            return dataclasses.replace(task, status=TaskStatus.PENDING, node=None)
        return task

    def next_job(job: Job) -> Job:
        phase = result.phases.get(job.uid)
        return dataclasses.replace(
            job,
            tasks=tuple(next_task(t) for t in job.tasks),
            phase=PodGroupPhase(phase) if phase else job.phase,
        )

    return dataclasses.replace(snapshot, jobs=tuple(next_job(j) for j in snapshot.jobs))
