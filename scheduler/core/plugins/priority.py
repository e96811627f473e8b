"""priority: PriorityClass ordering and priority-based preemption."""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.core.framework import Session
from scheduler.core.plugins.base import PluginBase
from scheduler.core.state import TaskState

__all__ = ["PriorityPlugin"]


class PriorityPlugin(PluginBase):
    name = "priority"

    def on_session_open(self, ssn: Session) -> None:
        self.register(ssn, "task_order", lambda task: -task.priority)
        self.register(ssn, "job_order", lambda job: -job.priority)
        self.register(ssn, "preemptable", _lower_priority)
        self.register(ssn, "job_starving", lambda job: job.ready_num + job.waiting_num < len(job.tasks))


def _lower_priority(preemptor: TaskState, candidates: Sequence[TaskState]) -> list[TaskState]:
    """Other jobs of strictly lower job priority, or lower-priority tasks of the same job."""
    job = preemptor.job
    return [
        t
        for t in candidates
        if (t.job is not job and t.job.priority < job.priority)
        or (t.job is job and t.priority < preemptor.priority)
    ]
