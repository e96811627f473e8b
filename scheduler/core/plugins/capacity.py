"""capacity: explicit deserved / capability / guarantee per queue (flat mode).

Registers QueueOrder (priority desc, lower share, queues with a deserved
first), Allocatable and JobEnqueueable against the real capability,
Preemptive (may this queue reclaim: within capability and at or under
deserved in some requested dimension) and Reclaimable (victims from queues
above their deserved, never below guarantee).  No OverusedFn, as in Volcano.
Hierarchical mode (``enableHierarchy``) is not implemented: a new configuration
that sets it is refused (scheduler.core.config; docs/scheduling.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from scheduler.core.config import PluginName
from scheduler.core.framework import PERMIT, REJECT, Session
from scheduler.core.plugins.proportion import quota_reason
from scheduler.core.plugins.queue_accounting import (
    QueueAttr,
    QuotaPlugin,
    add_into,
    build_attrs,
    dominant_share,
    enqueue_shortfall,
    on_task_change,
    real_capability,
    refuse_task,
    requested_dims,
    total_guarantee,
)
from scheduler.core.reasons import Reason
from scheduler.core.state import JobState, QueueState, TaskState

__all__ = ["CapacityPlugin"]


def _share(attr: QueueAttr) -> float:
    if not attr.queue.deserved:
        return 1.0  # Volcano: a queue without deserved is "best effort"
    return dominant_share(attr)


class CapacityPlugin(QuotaPlugin):
    name = PluginName.CAPACITY

    def on_session_open(self, ssn: Session) -> None:
        self.ssn = ssn
        self.attrs = build_attrs(ssn)
        guarantee = total_guarantee(ssn.queues.values())
        for attr in self.attrs.values():
            attr.real_capability = real_capability(attr.queue, ssn.total, guarantee)
            deserved: dict[str, Fraction] = {}
            for name in sorted(attr.queue.deserved):
                value = Fraction(attr.queue.deserved[name])
                if name in attr.real_capability:
                    value = min(value, attr.real_capability[name])
                deserved[name] = max(value, Fraction(attr.queue.guarantee.get(name, 0)))
            for name in sorted(attr.queue.guarantee):
                deserved.setdefault(name, Fraction(attr.queue.guarantee[name]))
            attr.deserved = deserved
            attr.deserved_float = tuple((d, float(v)) for d, v in sorted(deserved.items()) if v > 0)
            attr.share = _share(attr)
        ssn.set_deserved({name: attr.deserved for name, attr in self.attrs.items()})
        ssn.add_queue_order(self, self._queue_key)
        ssn.add_allocatable(self, self._allocatable)
        ssn.add_preemptive(self, self._preemptive)
        ssn.add_reclaimable(self, self._reclaimable)
        ssn.add_job_enqueueable(self, self._enqueueable)
        ssn.add_job_enqueued(self, self._enqueued)
        self.register_allocation_handlers(ssn)

    def _changed(self, task: TaskState, sign: int) -> None:
        attr = on_task_change(self.attrs, task, sign)
        if attr is not None:
            attr.share = _share(attr)

    def _queue_key(self, queue: QueueState) -> tuple[int, float, int]:
        attr = self.attrs.get(queue.name)
        share = attr.share if attr else 1.0
        return (-queue.priority, share, 0 if queue.deserved else 1)

    def _closed(self, queue: QueueState, job: JobState, verb: str) -> None:
        self.ssn.explain(
            job.uid,
            Reason(
                "queue-closed",
                f"queue {queue.name} is {queue.state}; only Open queues {verb}",
                {"queue": queue.name, "state": queue.state, "plugin": self.name},
            ),
        )

    def _allocatable(self, queue: QueueState, task: TaskState) -> bool:
        attr = self.attrs.get(queue.name)
        if attr is None:
            return True
        if not queue.is_open:
            self._closed(queue, task.job, "allocate")
            return False
        for d in requested_dims(task.request):
            used = attr.allocated.get(d, 0)
            limit = attr.real_capability.get(d)
            if limit is not None and used + task.request[d] > limit:
                refuse_task(
                    self.ssn, self.name, queue, task, dim=d, used=used, limit=limit, kind="capability"
                )
                return False
        return True

    def _preemptive(self, queue: QueueState, task: TaskState) -> bool:
        attr = self.attrs.get(queue.name)
        if attr is None or not queue.is_open:
            return False
        dims = requested_dims(task.request)
        future = {d: attr.allocated.get(d, 0) + task.request[d] for d in dims}
        for d in dims:
            limit = attr.real_capability.get(d)
            if limit is not None and future[d] > limit:
                return False
        return any(
            future[d] <= attr.deserved.get(d, Fraction(0))
            for d in dims
            if future[d] > 0 or attr.deserved.get(d, 0) > 0
        )

    def _reclaimable(self, reclaimer: TaskState, candidates: Sequence[TaskState]) -> list[TaskState]:
        wanted = set(requested_dims(reclaimer.request))
        allocations: dict[str, dict[str, int]] = {}
        victims = []
        for task in candidates:
            attr = self.attrs.get(task.job.queue)
            if attr is None:
                continue
            dims = requested_dims(task.request)
            if not wanted.intersection(dims):
                continue  # freeing it would not help the reclaimer
            allocated = allocations.setdefault(task.job.queue, dict(attr.allocated))
            if any(
                allocated.get(d, 0) - task.request.get(d, 0) < g
                for d, g in sorted(attr.queue.guarantee.items())
            ):
                continue  # would take the queue below its guarantee
            defined = [d for d in dims if attr.deserved.get(d, 0) > 0]
            if not defined or any(allocated.get(d, 0) > attr.deserved[d] for d in defined):
                add_into(allocated, task.request, -1)
                victims.append(task)
        return victims

    def _enqueueable(self, job: JobState) -> int:
        queue = self.ssn.queues[job.queue]
        if not queue.is_open:
            self._closed(queue, job, "admit jobs")
            return REJECT
        attr = self.attrs.get(job.queue)
        if job.min_resources is None or attr is None:
            return PERMIT
        short = enqueue_shortfall(attr, job.min_resources)
        if not short:
            return PERMIT
        self.ssn.explain(job.uid, quota_reason(self.name, queue.name, short, "capability"))
        return REJECT

    def _enqueued(self, job: JobState) -> None:
        attr = self.attrs.get(job.queue)
        if attr is not None and job.min_resources is not None:
            add_into(attr.inqueue, job.min_resources)
