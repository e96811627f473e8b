"""priority: PriorityClass ordering and priority-based preemption."""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.core.config import PluginName
from scheduler.core.framework import Session
from scheduler.core.plugins.base import PluginBase
from scheduler.core.state import TaskState

__all__ = ["PriorityPlugin"]


class PriorityPlugin(PluginBase):
    name = PluginName.PRIORITY

    def on_session_open(self, ssn: Session) -> None:
        ssn.add_task_order(self, lambda task: -task.priority)
        ssn.add_job_order(self, lambda job: -job.priority)
        ssn.add_preemptable(self, _lower_priority)
        ssn.add_job_starving(self, lambda job: job.ready_num + job.waiting_num < len(job.tasks))


def _lower_priority(preemptor: TaskState, candidates: Sequence[TaskState]) -> list[TaskState]:
    """Other jobs of strictly lower job priority, or lower-priority tasks of the same job."""
    job = preemptor.job
    return [
        t
        for t in candidates
        if (t.job is not job and t.job.priority < job.priority)
        or (t.job is job and t.priority < preemptor.priority)
    ]
