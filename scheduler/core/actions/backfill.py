"""backfill: place BestEffort tasks (no requests) (Volcano ``actions/backfill``).

Candidates are the Pending BestEffort tasks of non-Pending, valid jobs, in
queue → job → task order.  Nodes are filtered by the plugin predicates only
(no resource check; the ``pods`` count is a predicate) and the best score wins
(ties: first node by name).  The task is allocated directly in the session;
when its job is ready, all of the job's uncommitted allocations are bound.
"""

from __future__ import annotations

import numpy as np

from scheduler.core.config import ActionName
from scheduler.core.framework import Session
from scheduler.core.placement import FitErrors
from scheduler.core.snapshot import PodGroupPhase, TaskStatus
from scheduler.core.trace import TaskPlaced, TaskUnplaced

__all__ = ["BackfillAction"]


class BackfillAction:
    name = ActionName.BACKFILL

    def execute(self, ssn: Session) -> None:
        jobs = [
            j
            for j in ssn.jobs.values()
            # pending_best_effort counts the Pending BestEffort tasks: no walk for jobs with none.
            if j.phase is not PodGroupPhase.PENDING
            and j.pending_best_effort
            and any(t.best_effort and t.placeable for t in j.tasks)
        ]
        if not jobs:
            return
        jobs.sort(key=lambda j: (ssn.queue_key(ssn.queues[j.queue]), ssn.job_key(j)))
        rows = np.arange(len(ssn.nodes), dtype=np.int64)
        for job in jobs:
            if ssn.job_valid(job) is not None:
                continue
            tasks = sorted(
                (t for t in job.tasks if t.best_effort and t.placeable),
                key=ssn.task_key,
            )
            for task in tasks:
                reasons = ssn.node_predicate(task, rows)
                feasible = reasons == 0
                if not feasible.any():
                    histogram: dict[str, int] = {}
                    for rid, count in zip(*np.unique(reasons, return_counts=True), strict=True):
                        histogram[ssn.predicate_reasons[int(rid)].text] = int(count)
                    errors = FitErrors(task.uid, len(rows), tuple(sorted(histogram.items())), 0)
                    reason = errors.reason()
                    ssn.explain(job.uid, reason, keep_first=True)
                    ssn.step(TaskUnplaced(self.name, job.uid, task.uid, reason.code, reason.message))
                    continue
                scores = np.where(feasible, ssn.node_scores(task, rows), -np.inf)
                row = int(np.argmax(scores))
                ssn.place(task, row, TaskStatus.ALLOCATED)
                task.tentative = True
                ssn.step(TaskPlaced(self.name, job.uid, task.uid, ssn.nodes.names[row], False))
                if ssn.job_ready(job):
                    for other in job.tasks:
                        if other.status is TaskStatus.ALLOCATED and other.tentative:
                            ssn.bind(other)
