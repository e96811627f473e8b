"""proportion: weight-based fair share between queues (Volcano ``plugins/proportion``).

Deserved is water-filled over the queues that have jobs in the session:
each round gives every unsatisfied queue ``remaining × weight / Σweight``,
capped by its real capability and by its own request, floored by its
guarantee; a queue is satisfied when its request fits or its deserved stops
changing.  Arithmetic is exact (``Fraction``).

Registers QueueOrder (queue priority desc, then lower share), Overused,
Allocatable, Preemptive, Reclaimable, JobEnqueueable / JobEnqueued, and
allocate / deallocate handlers that keep ``allocated`` and the share live.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Final

from scheduler.core.config import PluginName
from scheduler.core.framework import PERMIT, REJECT, Session
from scheduler.core.plugins.queue_accounting import (
    QueueAttr,
    QuotaPlugin,
    add_into,
    build_attrs,
    describe,
    dominant_share,
    enqueue_shortfall,
    on_task_change,
    real_capability,
    refuse_task,
    requested_dims,
    total_guarantee,
)
from scheduler.core.reasons import Reason
from scheduler.core.snapshot import PODS
from scheduler.core.state import JobState, QueueState, TaskState

__all__ = ["ProportionPlugin", "water_fill"]

_MAX_ROUNDS: Final = 1_000


def water_fill(total: dict[str, int], attrs: dict[str, QueueAttr]) -> None:  # noqa: PLR0912 - one water-filling round, as in Volcano
    """Set ``deserved`` of every attr (semantics.md §5.2)."""
    dims = sorted(total)
    remaining = {d: Fraction(total[d]) for d in dims}
    for attr in attrs.values():
        attr.deserved = {d: Fraction(0) for d in dims}
    meet: set[str] = set()
    for _ in range(_MAX_ROUNDS):
        weight = sum(a.queue.weight for n, a in attrs.items() if n not in meet)
        if weight == 0:
            break
        before = dict(remaining)
        increased = {d: Fraction(0) for d in dims}
        decreased = {d: Fraction(0) for d in dims}
        for name, attr in attrs.items():
            if name in meet:
                continue
            old = dict(attr.deserved)
            new: dict[str, Fraction] = {}
            for d in dims:
                value = old[d] + remaining[d] * attr.queue.weight / weight
                if d in attr.real_capability:
                    value = min(value, attr.real_capability[d])
                value = min(value, Fraction(attr.request.get(d, 0)))
                value = max(value, Fraction(attr.queue.guarantee.get(d, 0)))
                new[d] = value
            attr.deserved = new
            if all(attr.request.get(d, 0) <= new.get(d, 0) for d in attr.request) or new == old:
                meet.add(name)
            for d in dims:
                diff = new[d] - old[d]
                if diff > 0:
                    increased[d] += diff
                else:
                    decreased[d] -= diff
        for d in dims:
            remaining[d] = max(Fraction(0), remaining[d] + decreased[d] - increased[d])
        # Volcano's IsEmpty: every dimension below its epsilon (0.1 of its unit); ours is
        # one unit, so a geometric tail of ever smaller shares ends instead of running on.
        if all(v < 1 for d, v in remaining.items() if d != PODS) or remaining == before:
            break


_share = dominant_share
_ZERO: Final = Fraction(0)


class ProportionPlugin(QuotaPlugin):
    name = PluginName.PROPORTION

    def on_session_open(self, ssn: Session) -> None:
        self.ssn = ssn
        self.attrs = build_attrs(ssn)
        guarantee = total_guarantee(ssn.queues.values())
        for attr in self.attrs.values():
            attr.real_capability = real_capability(attr.queue, ssn.total, guarantee)
        water_fill(dict(ssn.total), self.attrs)
        for attr in self.attrs.values():
            attr.deserved_float = tuple((d, float(v)) for d, v in sorted(attr.deserved.items()) if v > 0)
            attr.deserved_floor = {d: math.floor(v) for d, v in attr.deserved.items()}
            attr.deserved_ceil = tuple((d, math.ceil(v)) for d, v in attr.deserved.items())
            attr.share = _share(attr)
        #: request items -> the requested dimensions with their amounts.
        self._dims: dict[int, tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]]] = {}
        #: queues known not to be overused at their current allocation (membership only).
        self._not_overused: set[str] = set()
        ssn.set_deserved({name: attr.deserved for name, attr in self.attrs.items()})
        ssn.add_queue_order(self, self._queue_key)
        ssn.add_overused(self, self._overused)
        ssn.add_allocatable(self, self._allocatable)
        ssn.add_preemptive(self, self._allocatable)
        ssn.add_reclaimable(self, self._reclaimable)
        ssn.add_job_enqueueable(self, self._enqueueable)
        ssn.add_job_enqueued(self, self._enqueued)
        self.register_allocation_handlers(ssn)

    def _changed(self, task: TaskState, sign: int) -> None:
        attr = on_task_change(self.attrs, task, sign)
        if attr is not None:
            attr.share = _share(attr)
            self._not_overused.discard(attr.queue.name)

    def _queue_key(self, queue: QueueState) -> tuple[int, float]:
        attr = self.attrs.get(queue.name)
        return (-queue.priority, attr.share if attr else 0.0)

    def _overused(self, queue: QueueState) -> bool:
        if queue.name in self._not_overused:
            return False  # no allocation of the queue changed since it was last not overused
        attr = self.attrs.get(queue.name)
        if attr is None:
            return False
        allocated = attr.allocated
        # Integer allocations: deserved <= n exactly when ceil(deserved) <= n.
        over = True
        for d, v in attr.deserved_ceil:  # a plain loop: this runs before every job visit
            if v > allocated.get(d, 0):
                over = False
                break
        if not over:
            self._not_overused.add(queue.name)
        else:
            self.overused_detail = {
                d: {"allocated": attr.allocated.get(d, 0), "deserved": float(v)}
                for d, v in attr.deserved.items()
                if d != PODS
            }
        return over

    def _allocatable(self, queue: QueueState, task: TaskState) -> bool:
        attr = self.attrs.get(queue.name)
        if attr is None:
            return True
        if not queue.is_open:
            self.ssn.explain(
                task.job.uid,
                Reason(
                    "queue-closed",
                    f"queue {queue.name} is {queue.state}; only Open queues allocate",
                    {"queue": queue.name, "state": queue.state},
                ),
            )
            return False
        # Keyed by the identity of the (shared) request items; the entry keeps them alive.
        cached = self._dims.get(id(task.req_items))
        if cached is None or cached[0] is not task.req_items:
            cached = (task.req_items, tuple((d, task.request[d]) for d in requested_dims(task.request)))
            self._dims[id(task.req_items)] = cached
        wanted = cached[1]
        allocated = attr.allocated
        floor = attr.deserved_floor
        for d, amount in wanted:
            used = allocated.get(d, 0)
            # Integers: used + amount > deserved exactly when it exceeds floor(deserved).
            if used + amount > floor.get(d, 0):
                refuse_task(
                    self.ssn,
                    self.name,
                    queue,
                    task,
                    dim=d,
                    used=used,
                    limit=attr.deserved.get(d, _ZERO),
                    kind="deserved",
                )
                return False
        return True

    def _reclaimable(self, reclaimer: TaskState, candidates: Sequence[TaskState]) -> list[TaskState]:
        del reclaimer
        allocations: dict[str, dict[str, int]] = {}
        victims = []
        for task in candidates:
            attr = self.attrs.get(task.job.queue)
            if attr is None:
                continue
            allocated = allocations.setdefault(task.job.queue, dict(attr.allocated))
            within = all(v <= attr.deserved.get(d, Fraction(0)) for d, v in allocated.items())
            if not within:
                add_into(allocated, task.request, -1)
                victims.append(task)
        return victims

    def _enqueueable(self, job: JobState) -> int:
        queue = self.ssn.queues[job.queue]
        attr = self.attrs.get(job.queue)
        if not queue.is_open:
            self.ssn.explain(
                job.uid,
                Reason(
                    "queue-closed",
                    f"queue {queue.name} is {queue.state}; only Open queues admit jobs",
                    {"queue": queue.name, "state": queue.state, "plugin": self.name},
                ),
            )
            return REJECT
        if job.min_resources is None or attr is None:
            return PERMIT
        short = enqueue_shortfall(attr, job.min_resources)
        if not short:
            return PERMIT
        self.ssn.explain(job.uid, quota_reason(self.name, queue.name, short, "realCapability"))
        return REJECT

    def _enqueued(self, job: JobState) -> None:
        attr = self.attrs.get(job.queue)
        if attr is not None and job.min_resources is not None:
            add_into(attr.inqueue, job.min_resources)


def quota_reason(plugin: str, queue: str, short: dict[str, dict[str, float | int]], kind: str) -> Reason:
    """Volcano's 'queue resource quota insufficient: insufficient X' with the numbers."""
    names = ", ".join(f"insufficient {d}" for d in short)
    numbers = "; ".join(
        f"{d}: request {describe(int(v['request']), d)} + allocated {describe(int(v['allocated']), d)}"
        f" + inqueue {describe(int(v['inqueue']), d)} - elastic {describe(int(v['elastic']), d)}"
        f" > {kind} {describe(Fraction(v['limit']).limit_denominator(1000), d)}"
        for d, v in short.items()
    )
    return Reason(
        "enqueue-rejected",
        f"queue resource quota insufficient: {names} (queue {queue}: {numbers})",
        {"plugin": plugin, "queue": queue, "limitKind": kind, "resources": short},
    )
