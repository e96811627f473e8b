"""preempt: evict lower-priority tasks of the same queue (Volcano ``actions/preempt``).

Preemptors are the starving, valid, non-Pending jobs without a network topology (Volcano
skips those: "jobs containing networkTopology do not support preemption").  Per queue (queue
order):

A. between jobs: jobs in job order, one statement each; while the job is
   starving, its pending tasks (task order) try to preempt Bound/Running,
   preemptable tasks of *other* jobs in the *same* queue; commit when the job
   is pipelined afterwards, else discard;
B. within a job: for each job that was starving when the action started, each
   pending task tries to preempt tasks of its own job; commit, stop at the
   first task that cannot be placed.

For one task: candidate nodes are all nodes without an unresolvable predicate
failure, visited by descending node score (ties: name order).  On a node the
victims are what the Preemptable tiers allow; if FutureIdle + victims cannot
hold the request the node is skipped; otherwise victims are evicted in victim
order *until* the queue is allocatable, the request fits FutureIdle and the
predicates pass (checked before each eviction, so nothing is evicted when it
already fits); then the task is pipelined there.  A node where that never
happens has its evictions discarded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from scheduler.core.actions.common import job_heaps
from scheduler.core.actions.victims import fits_after_evictions, preempt_candidate_rows
from scheduler.core.config import ActionName
from scheduler.core.framework import Session
from scheduler.core.reasons import Reason
from scheduler.core.snapshot import PodGroupPhase, TaskStatus
from scheduler.core.state import JobState, TaskState
from scheduler.core.statement import Statement
from scheduler.core.trace import StatementClosed, TaskPlaced

__all__ = ["PreemptAction", "preempt_task"]

_PREEMPTABLE_STATUSES: Final = (TaskStatus.BOUND, TaskStatus.RUNNING)


def _pending_tasks(ssn: Session, job: JobState) -> list[TaskState]:
    return sorted((t for t in job.tasks if t.placeable), key=ssn.task_key)


def preempt_task(
    ssn: Session,
    stmt: Statement,
    task: TaskState,
    allowed: Callable[[TaskState], bool],
) -> bool:
    """Try to pipeline ``task`` by evicting tasks that ``allowed`` admits."""
    job = task.job
    if task.preemption_policy == "Never":
        ssn.explain(
            job.uid,
            Reason(
                "no-preemption-victims", f"task {task.uid} has preemptionPolicy Never", {"task": task.uid}
            ),
            keep_first=True,
        )
        return False
    queue = ssn.queue_of(job)
    rows = preempt_candidate_rows(ssn, task)
    if rows:
        scores = ssn.placement.scores(task)
        rows.sort(key=lambda r: (-float(scores[r]), r))
    nodes = ssn.nodes
    examined = 0
    for row in rows:
        examined += 1
        candidates = [
            t
            for t in sorted(nodes.tasks[row].values(), key=lambda t: t.uid)
            if t.status in _PREEMPTABLE_STATUSES
            and t.preemptable
            and not (task.best_effort and not t.best_effort)
            and allowed(t)
        ]
        verdict = ssn.preemptable(task, candidates)
        freeable = nodes.future_idle(row).copy()
        for victim in verdict.victims:
            freeable += victim.vec
        if not bool((freeable >= task.vec).all()):
            continue
        node_stmt = Statement(ssn)
        for victim in ssn.victim_order(verdict.victims, task):
            if fits_after_evictions(ssn, queue, task, row):
                break
            node_stmt.evict(victim, action="preempt", preemptor=task, rule=verdict.rule)
        if fits_after_evictions(ssn, queue, task, row):
            node_stmt.pipeline(task, row)
            stmt.merge(node_stmt)
            ssn.step(TaskPlaced("preempt", job.uid, task.uid, nodes.names[row], True))
            return True
        node_stmt.discard()
    ssn.explain(
        job.uid,
        Reason(
            "no-preemption-victims",
            f"preemption found no node for task {task.uid}: {examined} candidate node(s) examined, "
            "none could free enough resources from lower-priority tasks of its queue",
            {"task": task.uid, "examined": examined},
        ),
        keep_first=True,
    )
    return False


def _other_job_same_queue(job: JobState) -> Callable[[TaskState], bool]:
    return lambda t: t.job.queue == job.queue and t.job is not job


def _same_job(job: JobState) -> Callable[[TaskState], bool]:
    return lambda t: t.job is job


class PreemptAction:
    name = ActionName.PREEMPT

    def execute(self, ssn: Session) -> None:  # noqa: PLR0912 - phases A and B as in Volcano
        starving: dict[str, list[JobState]] = {}
        for job in ssn.jobs.values():
            if job.phase is PodGroupPhase.PENDING or ssn.job_valid(job) is not None:
                continue
            if not ssn.job_starving(job) or job.uid in ssn.topologies:
                continue
            starving.setdefault(job.queue, []).append(job)
        heaps = job_heaps(ssn, [job for jobs in starving.values() for job in jobs])
        # Queues are visited once each, in the queue order at the start of the action.
        order = sorted((ssn.queues[name] for name in heaps), key=ssn.queue_key)
        for queue in order:
            heap = heaps[queue.name]
            while heap:
                job = heap.pop()
                stmt = Statement(ssn)
                assigned = False
                tasks = _pending_tasks(ssn, job)
                while ssn.job_starving(job) and tasks:
                    task = tasks.pop(0)
                    if preempt_task(ssn, stmt, task, _other_job_same_queue(job)):
                        assigned = True
                if ssn.job_pipelined(job):
                    ssn.step(StatementClosed(self.name, job.uid, "committed", len(stmt)))
                    stmt.commit()
                    if assigned:
                        heap.push(job)
                else:
                    ssn.step(StatementClosed(self.name, job.uid, "discarded", len(stmt)))
                    stmt.discard()
            for job in starving[queue.name]:
                for task in _pending_tasks(ssn, job):
                    stmt = Statement(ssn)
                    placed = preempt_task(ssn, stmt, task, _same_job(job))
                    stmt.commit()
                    if not placed:
                        break
