"""gang: all-or-nothing placement (Volcano ``plugins/gang``).

JobValid (enough valid tasks, per-role minimums), victims that never break a
gang (only the surplus above minAvailable of each victim job), not-ready jobs
first, JobReady / JobPipelined / JobStarving from the gang counters.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.core.config import PluginName
from scheduler.core.framework import PERMIT, REJECT, Session
from scheduler.core.plugins.base import PluginBase
from scheduler.core.reasons import Reason
from scheduler.core.state import JobState, TaskState

__all__ = ["GangPlugin"]


class GangPlugin(PluginBase):
    name = PluginName.GANG

    def on_session_open(self, ssn: Session) -> None:
        ssn.add_job_valid(self, _valid)
        ssn.add_preemptable(self, _surplus_victims)
        ssn.add_reclaimable(self, _surplus_victims)
        # Not-ready jobs sort before ready ones.
        ssn.add_job_order(self, lambda job: 1 if job.is_ready() else 0)
        # The counters first: both checks are pure, and a waiting job fails the cheap one.
        ssn.add_job_ready(self, lambda job: job.is_ready() and job.check_task_ready())
        ssn.add_job_pipelined(
            self, lambda job: PERMIT if job.is_pipelined() and job.check_task_pipelined() else REJECT
        )
        ssn.add_job_starving(self, lambda job: job.is_starving())


def _valid(job: JobState) -> Reason | None:
    if not job.check_task_valid():
        return Reason(
            "job-invalid",
            "Not enough valid pods of each task for gang-scheduling",
            {"minTaskMember": dict(sorted(job.min_task_member.items()))},
        )
    valid = job.valid_num
    if valid < job.min_member:
        return Reason(
            "job-invalid",
            f"Not enough valid tasks for gang-scheduling, valid: {valid}, min: {job.min_member}",
            {"valid": valid, "minAvailable": job.min_member},
        )
    return None


def _surplus_victims(preemptor: TaskState, candidates: Sequence[TaskState]) -> list[TaskState]:
    del preemptor
    occupied: dict[str, int] = {}
    victims = []
    for task in candidates:
        job = task.job
        left = occupied.get(job.uid, job.ready_num)
        if left > job.min_member:
            occupied[job.uid] = left - 1
            victims.append(task)
        else:
            occupied[job.uid] = left
    return victims
