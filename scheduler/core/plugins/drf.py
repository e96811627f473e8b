"""drf: dominant resource fairness between jobs (flat mode).

share(job) = max over the cluster's dimensions (``pods`` included) of
allocated / total.  Lower share first; PreemptableFn takes victims whose job
would keep a share at least the preemptor's (within 1e-6).
``enableHierarchy`` (hierarchical DRF) is not implemented: a new configuration
that sets it is refused (scheduler.core.config; docs/scheduling.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scheduler.core.config import PluginName
from scheduler.core.framework import Session
from scheduler.core.plugins.base import PluginBase
from scheduler.core.state import JobState, TaskState

__all__ = ["DrfPlugin"]


def _share(allocated: Mapping[str, int], total: Mapping[str, int]) -> float:
    share = 0.0
    for name in sorted(total):
        capacity = total[name]
        if capacity > 0:
            share = max(share, allocated.get(name, 0) / capacity)
    return share


class DrfPlugin(PluginBase):
    name = PluginName.DRF

    def on_session_open(self, ssn: Session) -> None:
        self.total = dict(ssn.total)
        self._capacities = tuple((n, self.total[n]) for n in sorted(self.total) if self.total[n] > 0)
        #: job -> its dominant share; a job with nothing allocated (most of a backlog) is not
        #: listed: its share is 0.0 (read with ``.get(uid, 0.0)``).
        self.shares: dict[str, float] = {
            uid: _share(job.allocated, self.total) for uid, job in ssn.jobs.items() if job.allocated
        }
        ssn.add_job_order(self, self._job_key)
        ssn.add_preemptable(self, self._victims)
        ssn.on_allocate(self._refresh)
        ssn.on_deallocate(self._refresh)

    def _job_key(self, job: JobState) -> float:
        return self.shares.get(job.uid, 0.0)

    def _refresh(self, task: TaskState) -> None:
        # _share with the sorted, positive capacities computed once (same float operations).
        allocated = task.job.allocated
        share = 0.0
        for name, capacity in self._capacities:
            value = allocated.get(name, 0) / capacity
            if value > share:  # noqa: PLR1730 - max() without the builtin call: runs on every placement
                share = value
        self.shares[task.job.uid] = share

    def _victims(self, preemptor: TaskState, candidates: Sequence[TaskState]) -> list[TaskState]:
        mine = dict(preemptor.job.allocated)
        for name, amount in preemptor.request.items():
            mine[name] = mine.get(name, 0) + amount
        preemptor_share = _share(mine, self.total)
        remaining: dict[str, dict[str, int]] = {}
        victims = []
        for task in candidates:
            alloc = remaining.setdefault(task.job.uid, dict(task.job.allocated))
            for name, amount in task.request.items():
                alloc[name] = alloc.get(name, 0) - amount
            share = _share(alloc, self.total)
            if preemptor_share < share or abs(preemptor_share - share) <= 1e-6:
                victims.append(task)
        return victims
