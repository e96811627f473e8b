"""allocate: place pending tasks, one statement per job visit (Volcano ``actions/allocate``).

1. Build: every valid, non-Pending job (Pending jobs are promoted to Inqueue
   when ``enqueue`` is not configured) with pending non-BestEffort tasks goes
   into its queue's job heap; its tasks are sorted by task order once.
2. Loop: pick the best queue (re-ordered on every pick, shares change);
   an overused queue is dropped for the rest of the action; pop its best job
   and visit it with a fresh statement:
   * a task its queue cannot take (Allocatable false) is skipped;
   * a task of a role that already failed this visit is skipped;
   * a task that fits no node records its fit errors, then the visit goes on
     only while ``NeedContinueAllocating`` says the gang can still be met;
   * a placed task goes on Idle (Allocate) or else on FutureIdle (Pipeline);
     after each placement a ready job ends its visit (one more task per
     visit for elastic jobs).
   A job with a network topology (when a plugin gives hyperNode gradients) is visited by
   ``hypernode_allocate.visit_in_hypernodes`` instead: dry runs inside each hyperNode.
3. After the visit: ready → commit, and re-queue the job if tasks remain;
   else pipelined → leave the placements in the session uncommitted;
   else discard (reverse order).

A refusal streak (not in Volcano, which visits every job; the result is the same): a full
queue refuses its waiting jobs one after another, and nothing moves between two such visits.
When a visit placed nothing because the queue refused every task it tried, the next job of
the same queue with the same figures (its remaining tasks all Pending with the same
requests, the same gang counters, per role too, no network topology) gets that
visit's outcome without running it: the same trace steps under its own ids, the same
reasons (immutable, shared), its cursor at its end.  Only where every plugin that decides
such a visit answers from exactly those figures: allocatable from the queue and the request
(proportion, capacity), job_ready and job_pipelined from the gang counters (gang); any
other plugin at those points (sla votes on a job's waiting time) turns the streak off.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import numpy.typing as npt

from scheduler.core.actions.common import JobHeap, QueueRotation
from scheduler.core.actions.hypernode_allocate import visit_in_hypernodes
from scheduler.core.config import ActionName, PluginName
from scheduler.core.framework import Session, SortKey
from scheduler.core.hypernodes import CLUSTER_TOP
from scheduler.core.placement import PlacementIndex
from scheduler.core.reasons import Reason
from scheduler.core.snapshot import PodGroupPhase, TaskStatus
from scheduler.core.state import JobState, QueueState, TaskState
from scheduler.core.statement import Statement
from scheduler.core.trace import GangNotReady, JobSkipped, StatementClosed, TaskPlaced, TaskUnplaced

__all__ = ["AllocateAction", "gang_reason", "need_continue_allocating"]

IntArray = npt.NDArray[np.int64]

#: The plugins whose answers a refusal streak knows (module docstring): at allocatable, from
#: the queue and the task's request; at job_ready and job_pipelined, from the gang counters.
_QUEUE_LEVEL_ALLOCATABLE: frozenset[str] = frozenset({PluginName.PROPORTION, PluginName.CAPACITY})
_COUNTER_LEVEL_GANG: frozenset[str] = frozenset({PluginName.GANG})
#: Set False to visit every job (tests compare both).
SHARE_REFUSALS = True


class _Refusal:
    """A visit that placed nothing because the queue refused every task it tried: what the
    next job with the same figures is given (see the module docstring)."""

    __slots__ = (
        "explained",
        "min_member",
        "min_task_member",
        "pending_best_effort",
        "queue",
        "ready",
        "requests",
        "role_counts",
        "role_pending_best_effort",
        "tasks",
        "waiting",
    )

    def __init__(
        self,
        queue: QueueState,
        job: JobState,
        remaining: list[TaskState],
        explained: tuple[Reason, ...],
    ) -> None:
        self.queue = queue
        #: the request items of the tasks it tried, in order (shared: compared by identity).
        self.requests = [t.req_items for t in remaining]
        self.ready = job.ready_num
        self.waiting = job.waiting_num
        self.pending_best_effort = job.pending_best_effort
        self.tasks = len(job.tasks)
        self.min_member = job.min_member
        # What the per-role checks read (copies: they are compared with other jobs').
        self.min_task_member = dict(job.min_task_member)
        self.role_counts = {role: list(counts) for role, counts in job.role_counts.items()}
        self.role_pending_best_effort = dict(job.role_pending_best_effort)
        #: the job's reasons after the visit, which had none before, in order.
        self.explained = explained

    def fits(
        self, ssn: Session, queue: QueueState, job: JobState, tasks: list[TaskState], start: int
    ) -> bool:
        """Whether ``job``'s visit, from ``tasks[start]`` on, would go exactly as the refused one did."""
        requests = self.requests
        count = len(requests)
        if (
            queue is not self.queue
            or len(tasks) - start != count
            or job.ready_num != self.ready
            or job.waiting_num != self.waiting
            or job.pending_best_effort != self.pending_best_effort
            or len(job.tasks) != self.tasks
            or job.min_member != self.min_member
            or job.uid in ssn.topologies
            or job.min_task_member != self.min_task_member
            or job.role_counts != self.role_counts
            or job.role_pending_best_effort != self.role_pending_best_effort
        ):
            return False
        # Indexed, not zip(): a compiled zip call costs as much as the rest of this check.
        pending = TaskStatus.PENDING
        for offset in range(count):
            task = tasks[start + offset]
            if task.status is not pending or task.req_items is not requests[offset]:
                return False
        return True


def need_continue_allocating(job: JobState, failed_roles: set[str]) -> bool:
    """Whether a predicate failure still leaves the gang reachable (Volcano's rule)."""
    if job.min_member == len(job.tasks):
        return False
    total_min = job.task_min_total
    if job.min_member < total_min:
        pending_left = sum(1 for t in job.tasks if t.placeable and t.role not in failed_roles)
        return job.ready_num + pending_left >= job.min_member
    for role in sorted(failed_roles):
        need = job.min_task_member.get(role, 0)
        if need <= 0:
            continue
        have = job.role_count(
            role,
            (
                TaskStatus.BOUND,
                TaskStatus.BINDING,
                TaskStatus.RUNNING,
                TaskStatus.ALLOCATED,
                TaskStatus.SUCCEEDED,
            ),
        )
        have += job.role_pending_best_effort.get(role, 0)
        if have < need:
            return False
    return True


def gang_reason(job: JobState, shared: dict[tuple[object, ...], Reason] | None = None) -> Reason:
    """``gang-not-ready``; with ``shared`` (the session's), one Reason per distinct figures:
    every job of a refused backlog has the same (a Reason is immutable)."""
    placeable = job.ready_num + job.waiting_num + job.pending_best_effort
    key = ("gang-not-ready", placeable, len(job.tasks), job.min_member)
    reason = shared.get(key) if shared is not None else None
    if reason is None:
        reason = Reason(
            "gang-not-ready",
            f"{placeable}/{len(job.tasks)} tasks in gang placeable, minAvailable {job.min_member}",
            {"placeable": placeable, "tasks": len(job.tasks), "minAvailable": job.min_member},
        )
        if shared is not None:
            shared[key] = reason
    return reason


class AllocateAction:
    name = ActionName.ALLOCATE

    def execute(self, ssn: Session) -> None:
        index = ssn.placement
        heaps, worksheets = self._queued(ssn)
        rotation = QueueRotation(ssn, [ssn.queues[name] for name in sorted(heaps)], cache_keys=True)
        # The queue of the last visit when that visit moved nothing: no key changed, so it is
        # still the best (a full queue's waiting jobs are visited one after another).
        unmoved: QueueState | None = None
        streak = SHARE_REFUSALS and _streak_known(ssn)
        # The last visit's refusal, while nothing moved since.
        refused: _Refusal | None = None
        while rotation:
            queue = rotation.best() if unmoved is None else unmoved
            if unmoved is None:
                refused = None
            unmoved = None
            heap = heaps[queue.name]
            if _done_with(ssn, queue, heap):
                rotation.drop(queue)
                continue
            job = heap.pop()
            tasks, cursor = worksheets[job.uid]
            if refused is not None and refused.fits(ssn, queue, job, tasks, cursor[0]):
                self._refuse_again(ssn, job, tasks, cursor, refused)
                unmoved = queue
                continue
            # What a refusal streak needs to know of this visit.
            before = len(ssn.trace) if streak and job.uid not in ssn.reasons else -1
            first = cursor[0]
            stmt = Statement(ssn)
            ready = self._visit_job(ssn, index, job, tasks=tasks, cursor=cursor, stmt=stmt)
            # A visit that placed nothing (its queue refused the job) changed no allocation.
            moved = len(stmt) > 0
            if ready:
                placed = len(stmt)
                stmt.commit()
                ssn.step(StatementClosed(self.name, job.uid, "committed", placed))
                if cursor[0] < len(tasks):
                    heap.push(job)
            elif ssn.job_pipelined(job):
                ssn.step(StatementClosed(self.name, job.uid, "pipelined", len(stmt)))
            else:
                ssn.explain(job.uid, gang_reason(job, ssn.shared_reasons))
                ssn.step(
                    GangNotReady(
                        job.uid,
                        job.ready_num + job.waiting_num + job.pending_best_effort,
                        len(job.tasks),
                        job.min_member,
                    )
                )
                ssn.step(StatementClosed(self.name, job.uid, "discarded", len(stmt)))
                stmt.discard()
                if before >= 0 and not moved:
                    refused = _refusal(ssn, queue, job, tasks[first:], before) or refused
            if moved:  # the visit moved only this queue's allocation
                rotation.refresh(queue)
            else:
                unmoved = queue

    def _refuse_again(
        self, ssn: Session, job: JobState, tasks: list[TaskState], cursor: list[int], refused: _Refusal
    ) -> None:
        """The refused visit's outcome for ``job``, which :meth:`_Refusal.fits`: its steps under
        ``job``'s ids, its reasons, the cursor past every task."""
        uid = job.uid
        ssn.refusals_given_again += 1
        for position in range(cursor[0], len(tasks)):
            ssn.step(TaskUnplaced(self.name, uid, tasks[position].uid, "queue-not-allocatable", ""))
        cursor[0] = len(tasks)
        # Every reason of the visit was recorded latest-wins: setting each, in order, is what
        # recording them again would leave, whatever the job held before.
        for reason in refused.explained:
            ssn.explain(uid, reason)
        ssn.step(
            GangNotReady(
                uid,
                refused.ready + refused.waiting + refused.pending_best_effort,
                refused.tasks,
                refused.min_member,
            )
        )
        ssn.step(StatementClosed(self.name, uid, "discarded", 0))

    def _queued(
        self, ssn: Session
    ) -> tuple[dict[str, JobHeap], dict[str, tuple[list[TaskState], list[int]]]]:
        """Step 1: each queue's heap of the jobs to visit, and each job's sorted tasks with a cursor."""
        enqueue_configured = ActionName.ENQUEUE in ssn.config.actions
        waiting: dict[str, list[tuple[SortKey, JobState]]] = {}
        worksheets: dict[str, tuple[list[TaskState], list[int]]] = {}
        for job in ssn.jobs.values():
            if job.phase is PodGroupPhase.PENDING:
                if enqueue_configured:
                    continue
                ssn.set_phase(job, PodGroupPhase.INQUEUE)
            invalid = ssn.job_valid(job)
            if invalid is not None:
                ssn.explain(job.uid, invalid)
                ssn.step(JobSkipped(self.name, job.uid, invalid.code, invalid.message))
                continue
            tasks = [t for t in job.tasks if t.placeable and not t.best_effort]
            if not tasks:
                continue
            if len(tasks) > 1:  # a sort calls its key even for one item
                tasks.sort(key=ssn.task_key)
            worksheets[job.uid] = (tasks, [0])
            # Keyed here, while the job is in the cache, not by job_heaps in a second pass.
            keyed = waiting.get(job.queue)
            if keyed is None:  # not setdefault: it would build an empty list for every job
                keyed = waiting[job.queue] = []
            keyed.append((ssn.job_key(job), job))
        return {name: JobHeap(ssn, keyed) for name, keyed in waiting.items()}, worksheets

    def _visit_job(
        self,
        ssn: Session,
        index: PlacementIndex,
        job: JobState,
        *,
        tasks: list[TaskState],
        cursor: list[int],
        stmt: Statement,
    ) -> bool:
        """One visit: confined to hyperNodes when the job has a network topology and a plugin
        gives hyperNode gradients, else over every node."""
        gradients = None
        if job.uid in ssn.topologies and ssn.highest_tier(job) is not None:
            gradients = ssn.hypernode_gradients(job)
        if gradients is None:
            return self._visit(ssn, index, job, tasks=tasks, cursor=cursor, stmt=stmt)

        def confined(local: list[int], trial: Statement, allowed: IntArray, hypernode: str) -> bool:
            return self._visit(
                ssn, index, job, tasks=tasks, cursor=local, stmt=trial, allowed=allowed, hypernode=hypernode
            )

        return visit_in_hypernodes(ssn, job, gradients, cursor=cursor, stmt=stmt, visit=confined)

    def _visit(
        self,
        ssn: Session,
        index: PlacementIndex,
        job: JobState,
        *,
        tasks: list[TaskState],
        cursor: list[int],
        stmt: Statement,
        allowed: IntArray | None = None,
        hypernode: str | None = None,
    ) -> bool:
        """Place the job's next tasks (on the ``allowed`` rows only, the nodes of ``hypernode``,
        when given); returns whether the job is ready afterwards."""
        queue = ssn.queue_of(job)
        failed_roles: set[str] = set()
        # Inside a hyperNode: the hyperNode the job's placed tasks span, kept up to date as
        # this visit places more, for the topology node order (Volcano's JobAllocatedHyperNode).
        spanned = ssn.allocated_hypernodes.get(job.uid) if allowed is not None else None
        # JobReady after the latest placement (placements are the only change a visit makes).
        ready: bool | None = None
        while cursor[0] < len(tasks):
            task = tasks[cursor[0]]
            cursor[0] += 1
            if task.status is not TaskStatus.PENDING:
                continue
            if not ssn.allocatable(queue, task):
                ssn.step(TaskUnplaced(self.name, job.uid, task.uid, "queue-not-allocatable", ""))
                continue
            if task.role and task.role in failed_roles:
                message = f"Task {task.uid} with role spec {task.role} has already predicated failed, skip"
                ssn.step(TaskUnplaced(self.name, job.uid, task.uid, "predicate-failed", message))
                continue
            if allowed is None:
                row, on_idle = index.choose_gradient(task)
            else:
                row, on_idle = index.choose_gradient_within(
                    task, allowed, partial(ssn.topology_node_scores, job, spanned)
                )
            if row < 0:
                reason = _fit_reason(index, task, allowed, hypernode)
                ssn.explain(job.uid, reason, keep_first=True)
                ssn.step(TaskUnplaced(self.name, job.uid, task.uid, reason.code, reason.message))
                failed_roles.add(task.role)
                if not need_continue_allocating(job, failed_roles):
                    break
                continue
            nodes = ssn.nodes
            # Gradient 1 is exactly "fits Idle" (the index was refreshed by choose).
            if on_idle:
                stmt.allocate(task, row)
                pipelined = False
            else:
                stmt.pipeline(task, row)
                pipelined = True
            ssn.step(TaskPlaced(self.name, job.uid, task.uid, nodes.names[row], pipelined))
            if allowed is not None:
                spanned = _spanned_after(ssn, spanned, row)
            ready = ssn.job_ready(job)
            if ready:
                break
        return ssn.job_ready(job) if ready is None else ready


def _done_with(ssn: Session, queue: QueueState, heap: JobHeap) -> bool:
    """Whether the action is done with ``queue``: overused (its waiting jobs told why) or
    without waiting jobs."""
    if ssn.overused(queue):
        for job in heap.jobs():
            ssn.explain(job.uid, _overused_reason(ssn, queue.name))
        return True
    return not heap


def _streak_known(ssn: Session) -> bool:
    """Whether every plugin that decides a visit placing nothing answers from the figures a
    refusal streak compares (module docstring)."""
    allocatable, ready, pipelined = ssn.visit_plugins()
    return (
        allocatable <= _QUEUE_LEVEL_ALLOCATABLE
        and ready <= _COUNTER_LEVEL_GANG
        and pipelined <= _COUNTER_LEVEL_GANG
    )


def _refusal(
    ssn: Session, queue: QueueState, job: JobState, remaining: list[TaskState], before: int
) -> _Refusal | None:
    """The visit just discarded as a refusal to give again, or None when it was not one: a job
    without reasons before, every task it tried Pending and refused by its queue (the steps
    since ``before``: one TaskUnplaced ``queue-not-allocatable`` per task, then the gang's
    two), no network topology."""
    if job.uid in ssn.topologies or not remaining:
        return None
    steps = ssn.trace[before:]
    if len(steps) != len(remaining) + 2:
        return None
    for task, step in zip(remaining, steps, strict=False):
        if (
            task.status is not TaskStatus.PENDING
            or not isinstance(step, TaskUnplaced)
            or step.code != "queue-not-allocatable"
            or step.task != task.uid
        ):
            return None
    bucket = ssn.reasons.get(job.uid)
    return _Refusal(queue, job, remaining, tuple(bucket.values()) if bucket else ())


def _fit_reason(
    index: PlacementIndex, task: TaskState, allowed: IntArray | None, hypernode: str | None
) -> Reason:
    """Why ``task`` fits no node (of ``allowed``, the nodes of ``hypernode``, when given)."""
    if allowed is None:
        return index.fit_errors(task).reason()
    reason = index.fit_errors_within(task, allowed).reason()
    if hypernode is None or hypernode == CLUSTER_TOP:
        return reason
    # Volcano's FitErrors text inside a hyperNode.
    detail = {**reason.detail, "hypernode": hypernode}
    return Reason(reason.code, f"In hyperNode {hypernode}: {reason.message}", detail)


def _spanned_after(ssn: Session, spanned: str | None, row: int) -> str | None:
    """The hyperNode a job spans once a task is on ``row`` (Volcano ``getNewAllocatedHyperNode``)."""
    lowest = ssn.hypernodes.lowest[row]
    if lowest is None:
        return spanned
    return lowest if spanned is None else ssn.hypernodes.lca(lowest, spanned)


def _overused_reason(ssn: Session, queue: str) -> Reason:
    return Reason(
        "queue-overused",
        f"queue {queue} is overused: its allocation has reached its deserved share in every resource",
        {"queue": queue},
    )
