"""capacity: explicit deserved / capability / guarantee per queue.

Registers QueueOrder (priority desc, lower share, queues with a deserved
first), Allocatable and JobEnqueueable against the real capability,
Preemptive (may this queue reclaim: within capability and at or under
deserved in some requested dimension) and Reclaimable (victims from queues
above their deserved, never below guarantee, walked in victim order).  No
OverusedFn, as in Volcano.

Hierarchical mode (``enableHierarchy: true``; the tree in
:mod:`scheduler.core.plugins.queue_tree`): only leaf queues admit and allocate,
and every limit is checked at the leaf and at each ancestor; leaves are ordered
by comparing their paths from ``root`` (leaves before parents); victims of
queues that share deeper ancestors with the preemptor's go first; the argument
``ancestorReclaimLevel`` lets a queue reclaim while an ancestor up to that many
levels above is under its deserved, and spares victims whose ancestor at such a
level is not above its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from functools import partial

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
from scheduler.core.plugins.queue_tree import ROOT, QueueTree, build_queue_tree
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
        self.tree: QueueTree | None = None
        self.ancestor_reclaim_level = max(0, self.int_argument("ancestorReclaimLevel", 0))
        if self.option.enabled("enableHierarchy"):
            self.tree = build_queue_tree(ssn)
            self.attrs = self.tree.attrs
            for attr in self.attrs.values():
                attr.share = _share(attr)
        else:
            self._open_flat(ssn)
        ssn.set_deserved({name: attr.deserved for name, attr in self.attrs.items()})
        if self.tree is None:
            ssn.add_queue_order(self, self._queue_key)
        else:
            ssn.add_queue_order(self, partial(_hierarchical_queue_key, self.tree))
            ssn.add_victim_queue_order(self, partial(_victim_queue_key, self.tree))
        ssn.add_allocatable(self, self._allocatable)
        ssn.add_preemptive(self, self._preemptive)
        ssn.add_reclaimable(self, self._reclaimable)
        ssn.add_job_enqueueable(self, self._enqueueable)
        ssn.add_job_enqueued(self, self._enqueued)
        self.register_allocation_handlers(ssn)

    def _open_flat(self, ssn: Session) -> None:
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

    def _chain(self, queue: str) -> tuple[str, ...]:
        """The queues whose limits bind ``queue``'s tasks: itself, then its ancestors."""
        return (queue,) if self.tree is None else self.tree.chain(queue)

    def _tree_refuses(self, job: JobState) -> bool:
        """Volcano refuses everything while the tree is unusable (a job in a queue with
        children makes it so: :func:`~scheduler.core.plugins.queue_tree.build_queue_tree`)."""
        tree = self.tree
        if tree is None or tree.problem is None:
            return False
        self.ssn.explain(
            job.uid,
            Reason(
                "queue-hierarchy-invalid",
                f"the queue hierarchy cannot be used: {tree.problem}; capacity (enableHierarchy) "
                "admits and allocates nothing until it is fixed",
                {"plugin": self.name, "problem": tree.problem},
            ),
        )
        return True

    def _changed(self, task: TaskState, sign: int) -> None:
        if self.tree is None:
            attr = on_task_change(self.attrs, task, sign)
            if attr is not None:
                attr.share = _share(attr)
            return
        for name in self.tree.chain(task.job.queue):
            attr = self.attrs[name]
            add_into(attr.allocated, dict(task.req_items), sign)
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
        if self._tree_refuses(task.job):
            return False
        dims = requested_dims(task.request)
        for name in self._chain(queue.name):
            limit_attr = self.attrs[name]
            for d in dims:
                used = limit_attr.allocated.get(d, 0)
                limit = limit_attr.real_capability.get(d)
                if limit is not None and used + task.request[d] > limit:
                    refuse_task(
                        self.ssn,
                        self.name,
                        limit_attr.queue,
                        task,
                        dim=d,
                        used=used,
                        limit=limit,
                        kind="capability",
                    )
                    return False
        return True

    def _preemptive(self, queue: QueueState, task: TaskState) -> bool:
        attr = self.attrs.get(queue.name)
        if attr is None or not queue.is_open:
            return False
        if self.tree is not None and self.tree.problem is not None:
            return False
        dims = requested_dims(task.request)
        future = {d: attr.allocated.get(d, 0) + task.request[d] for d in dims}
        for d in dims:
            limit = attr.real_capability.get(d)
            if limit is not None and future[d] > limit:
                return False
        return _under_deserved(attr, task) or self._ancestor_may_reclaim(queue, task)

    def _ancestor_may_reclaim(self, queue: QueueState, task: TaskState) -> bool:
        """ancestorReclaimLevel: an ancestor (never root) under its deserved may reclaim too."""
        tree = self.tree
        if tree is None:
            return False
        for level in range(1, self.ancestor_reclaim_level + 1):
            ancestor = tree.ancestor_at(queue.name, level)
            if ancestor is not None and ancestor != ROOT and _under_deserved(self.attrs[ancestor], task):
                return True
        return False

    def _reclaimable(self, reclaimer: TaskState, candidates: Sequence[TaskState]) -> list[TaskState]:
        tree = self.tree
        if tree is not None and tree.problem is not None:
            return []
        wanted = set(requested_dims(reclaimer.request))
        allocations: dict[str, dict[str, int]] = {}
        victims = []
        walk = self.ssn.victim_order(candidates, reclaimer)
        for task in walk:
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
            if defined and not any(allocated.get(d, 0) > attr.deserved[d] for d in defined):
                continue  # the queue is not above its deserved where the task would free
            if not defined and self._spared_as_kin(reclaimer, task):
                continue
            checked = self._ancestors_over_deserved(reclaimer, task, allocations)
            if checked is None:
                continue
            add_into(allocated, task.request, -1)
            for ancestor_allocated in checked:
                add_into(ancestor_allocated, task.request, -1)
            victims.append(task)
        return victims

    def _spared_as_kin(self, reclaimer: TaskState, victim: TaskState) -> bool:
        """ancestorReclaimLevel: a victim whose queue has no deserved for what it holds is
        spared when it shares a non-root ancestor (within the level) with the reclaimer's
        queue and the reclaimer's queue has no deserved for what it asks either."""
        tree = self.tree
        if tree is None or self.ancestor_reclaim_level <= 0:
            return False
        levels = range(1, self.ancestor_reclaim_level + 1)
        mine = {tree.ancestor_at(reclaimer.job.queue, level) for level in levels}
        theirs = {tree.ancestor_at(victim.job.queue, level) for level in levels}
        shared = sorted(a for a in mine & theirs if a is not None and a != ROOT)
        reclaimer_attr = self.attrs[reclaimer.job.queue]
        asks = [d for d in requested_dims(reclaimer.request) if reclaimer_attr.deserved.get(d, 0) > 0]
        return bool(shared) and not asks

    def _ancestors_over_deserved(
        self, reclaimer: TaskState, victim: TaskState, allocations: dict[str, dict[str, int]]
    ) -> list[dict[str, int]] | None:
        """ancestorReclaimLevel: the victim's ancestors (up to the level, not shared with
        the reclaimer, never root) must be above their deserved where the victim holds;
        their running allocations, or None when one is not."""
        tree = self.tree
        checked: list[dict[str, int]] = []
        if tree is None:
            return checked
        dims = requested_dims(victim.request)
        for level in range(1, self.ancestor_reclaim_level + 1):
            ancestor = tree.ancestor_at(victim.job.queue, level)
            if ancestor is None or ancestor == ROOT:
                continue
            if tree.ancestor_at(reclaimer.job.queue, level) == ancestor:
                continue
            attr = self.attrs[ancestor]
            allocated = allocations.setdefault(ancestor, dict(attr.allocated))
            checked.append(allocated)
            defined = [d for d in dims if attr.deserved.get(d, 0) > 0]
            if defined and not any(allocated.get(d, 0) > attr.deserved[d] for d in defined):
                return None
        return checked

    def _enqueueable(self, job: JobState) -> int:
        if self._tree_refuses(job):
            return REJECT
        queue = self.ssn.queues[job.queue]
        if not queue.is_open:
            self._closed(queue, job, "admit jobs")
            return REJECT
        attr = self.attrs.get(job.queue)
        if job.min_resources is None or attr is None:
            return PERMIT
        for name in self._chain(job.queue):
            short = enqueue_shortfall(self.attrs[name], job.min_resources)
            if short:
                self.ssn.explain(job.uid, quota_reason(self.name, name, short, "capability"))
                return REJECT
        return PERMIT

    def _enqueued(self, job: JobState) -> None:
        if job.min_resources is None or job.queue not in self.attrs:
            return
        for name in self._chain(job.queue):
            add_into(self.attrs[name].inqueue, job.min_resources)


def _under_deserved(attr: QueueAttr, task: TaskState) -> bool:
    """Volcano's ``LessEqualPartlyWithDimensionZeroFiltered``: after adding ``task``, some
    requested dimension (non-zero in the sum or in the deserved) is within the deserved."""
    dims = requested_dims(task.request)
    future = {d: attr.allocated.get(d, 0) + task.request[d] for d in dims}
    return any(
        future[d] <= attr.deserved.get(d, Fraction(0))
        for d in dims
        if future[d] > 0 or attr.deserved.get(d, 0) > 0
    )


def _hierarchical_queue_key(tree: QueueTree, queue: QueueState) -> tuple[int | float, ...]:
    """Volcano compares two leaves by the children of their deepest common ancestor
    (share, then deserved first); the path from root, flattened, orders the same.
    Leaves come before parents, which compare by their own share."""
    if tree.problem is not None:
        return (-queue.priority,)
    if not tree.is_leaf(queue.name):
        attr = tree.attrs[queue.name]
        return (-queue.priority, 1, attr.share, 0 if attr.deserved_float else 1)
    key: list[int | float] = [-queue.priority, 0]
    for name in (*tree.ancestors[queue.name][1:], queue.name):
        attr = tree.attrs[name]
        key += (attr.share, 0 if attr.deserved_float else 1)
    return tuple(key)


def _victim_queue_key(tree: QueueTree, victim: QueueState, preemptor: QueueState) -> int:
    """Victims of queues that share deeper ancestors with the preemptor's go first."""
    if tree.problem is not None:
        return 0
    return -tree.common_depth(victim.name, preemptor.name)
