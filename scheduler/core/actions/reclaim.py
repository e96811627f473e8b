"""reclaim: take resources back from other queues (Volcano ``actions/reclaim``).

Preemptors are starving, valid, non-Pending jobs.  Queues are picked in queue
order, round-robin, one job per pick; an overused queue is skipped.  For each
pending task of the job (task order) while it is starving: skip tasks with
preemptionPolicy Never and tasks the queue may not reclaim for
(PreemptiveFn); then visit the nodes that pass the preempt predicates in name
order (Volcano: predicate output order, not stable).  On a node the
reclaimees are Running, preemptable tasks of *other* queues that are
reclaimable; the Reclaimable tiers pick victims, which are evicted in victim
order while the request exceeds the freed FutureIdle; when it fits the task
is pipelined there.  The job's statement is committed if the job is
pipelined afterwards, else discarded.
"""

from __future__ import annotations

from scheduler.core.actions.common import QueueRotation, job_heaps
from scheduler.core.actions.victims import preempt_candidate_rows
from scheduler.core.config import ActionName
from scheduler.core.framework import Session
from scheduler.core.reasons import Reason
from scheduler.core.snapshot import PodGroupPhase, TaskStatus
from scheduler.core.state import JobState, TaskState
from scheduler.core.statement import Statement
from scheduler.core.trace import StatementClosed, TaskPlaced

__all__ = ["ReclaimAction"]


def _reclaim_task(ssn: Session, stmt: Statement, task: TaskState) -> bool:
    nodes = ssn.nodes
    job = task.job
    examined = 0
    for row in preempt_candidate_rows(ssn, task):
        reclaimees = [
            t
            for t in sorted(nodes.tasks[row].values(), key=lambda t: t.uid)
            if t.status is TaskStatus.RUNNING
            and t.preemptable
            and t.job.queue != job.queue
            and ssn.queues[t.job.queue].reclaimable
        ]
        if not reclaimees:
            continue
        examined += 1
        verdict = ssn.reclaimable(task, reclaimees)
        if not verdict.victims:
            continue
        available = nodes.future_idle(row).copy()
        freeable = available.copy()
        for victim in verdict.victims:
            freeable += victim.vec
        if not bool((freeable >= task.vec).all()):
            continue
        node_stmt = Statement(ssn)
        for victim in ssn.victim_order(verdict.victims, task):
            if bool((available >= task.vec).all()):
                break
            node_stmt.evict(victim, action="reclaim", preemptor=task, rule=verdict.rule)
            available += victim.vec
        if bool((available >= task.vec).all()):
            node_stmt.pipeline(task, row)
            stmt.merge(node_stmt)
            ssn.step(TaskPlaced("reclaim", job.uid, task.uid, nodes.names[row], True))
            return True
        node_stmt.discard()
    ssn.explain(
        job.uid,
        Reason(
            "no-reclaim-victims",
            f"reclaim found no node for task {task.uid}: {examined} node(s) with reclaimable tasks of "
            "other queues examined, none could free enough resources",
            {"task": task.uid, "examined": examined},
        ),
        keep_first=True,
    )
    return False


class ReclaimAction:
    name = ActionName.RECLAIM

    def execute(self, ssn: Session) -> None:
        starving: list[JobState] = []
        for job in ssn.jobs.values():
            if job.phase is PodGroupPhase.PENDING or ssn.job_valid(job) is not None:
                continue
            if ssn.job_starving(job):
                starving.append(job)
        heaps = job_heaps(ssn, starving)
        rotation = QueueRotation(ssn, [ssn.queues[name] for name in sorted(heaps)])
        while rotation:
            queue = rotation.best()
            heap = heaps[queue.name]
            if ssn.overused(queue) or not heap:
                rotation.drop(queue)
                continue
            job = heap.pop()
            stmt = Statement(ssn)
            assigned = False
            tasks = sorted((t for t in job.tasks if t.placeable), key=ssn.task_key)
            while ssn.job_starving(job) and tasks:
                task = tasks.pop(0)
                if task.preemption_policy == "Never":
                    ssn.explain(
                        job.uid,
                        Reason(
                            "no-reclaim-victims",
                            f"task {task.uid} has preemptionPolicy Never",
                            {"task": task.uid},
                        ),
                        keep_first=True,
                    )
                    continue
                if not ssn.preemptive(queue, task):
                    ssn.explain(
                        job.uid,
                        Reason(
                            "no-reclaim-victims",
                            f"queue {queue.name} may not reclaim for task {task.uid}: it would exceed "
                            "its capability or deserved share",
                            {"task": task.uid, "queue": queue.name},
                        ),
                        keep_first=True,
                    )
                    continue
                if _reclaim_task(ssn, stmt, task):
                    assigned = True
            if ssn.job_pipelined(job):
                ssn.step(StatementClosed(self.name, job.uid, "committed", len(stmt)))
                stmt.commit()
                # Only a committed visit comes back; a discarded one would retry forever.
                if assigned:
                    heap.push(job)
            else:
                ssn.step(StatementClosed(self.name, job.uid, "discarded", len(stmt)))
                stmt.discard()
