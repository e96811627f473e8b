"""Per-queue accounting shared by proportion and capacity.

For every queue that has at least one job in the session: ``allocated`` (Σ
request of allocated-status tasks), ``request`` (allocated + Pending),
``inqueue`` (minResources not yet allocated of Inqueue jobs and of Running
jobs that have at least minMember allocated tasks) and ``elastic``
(allocated beyond minResources; all of it when minResources is unset).

Limits may be infinite, so dimension maps here hold ``Fraction`` values and a
missing key in a *limit* map means "unlimited" where a function says so.
Comparisons are exact: Volcano's 0.1-unit epsilon never matters for integer
requests against integer or rational limits (docs/scheduling.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import Any

from scheduler.core.framework import LastRefusal, Session
from scheduler.core.plugins.base import PluginBase
from scheduler.core.reasons import Reason, format_amount
from scheduler.core.snapshot import PODS, PodGroupPhase, TaskStatus
from scheduler.core.state import ALLOCATED_STATUSES, JobState, QueueState, TaskState, sub_positive

__all__ = [
    "QueueAttr",
    "QuotaPlugin",
    "add_into",
    "build_attrs",
    "dominant_share",
    "enqueue_shortfall",
    "refuse_task",
    "requested_dims",
]


@dataclass(eq=False, slots=True)
class QueueAttr:
    queue: QueueState
    allocated: dict[str, int] = field(default_factory=dict)
    request: dict[str, int] = field(default_factory=dict)
    inqueue: dict[str, int] = field(default_factory=dict)
    elastic: dict[str, int] = field(default_factory=dict)
    deserved: dict[str, Fraction] = field(default_factory=dict)
    #: limit per dimension; a dimension absent from the map is unlimited.
    real_capability: dict[str, Fraction] = field(default_factory=dict)
    share: float = 0.0
    #: (dimension, deserved) for deserved > 0, as floats: the share is only an ordering key.
    deserved_float: tuple[tuple[str, float], ...] = ()
    #: floor(deserved) per dimension: ``n > deserved`` iff ``n > floor`` for an integer n.
    deserved_floor: dict[str, int] = field(default_factory=dict)
    #: (dimension, ceil(deserved)): ``deserved <= n`` iff ``ceil <= n`` for an integer n.
    deserved_ceil: tuple[tuple[str, int], ...] = ()


def add_into(target: dict[str, int], values: Mapping[str, int], sign: int = 1) -> None:
    for name in sorted(values):
        target[name] = target.get(name, 0) + sign * values[name]


def requested_dims(values: Mapping[str, int]) -> list[str]:
    """Dimensions a request really asks for (> 0), ``pods`` excluded (Volcano's dimension filter)."""
    return [k for k in sorted(values) if values[k] > 0 and k != PODS]


def dominant_share(attr: QueueAttr) -> float:
    """max over deserved's positive dimensions of allocated / deserved (an ordering key only)."""
    share = 0.0
    for name, deserved in attr.deserved_float:
        value = attr.allocated.get(name, 0) / deserved
        if value > share:  # noqa: PLR1730 - max() without the builtin call: runs on every placement
            share = value
    return share


def enqueue_shortfall(attr: QueueAttr, min_resources: Mapping[str, int]) -> dict[str, dict[str, float | int]]:
    """Dimensions where ``minReq + allocated + inqueue - elastic > realCapability``, with the numbers.

    Volcano's enqueue quota test of proportion and capacity (strict, only the
    dimensions the job's minResources asks for); a dimension the cluster does
    not have at all is a limit of zero.
    """
    short: dict[str, dict[str, float | int]] = {}
    for d in requested_dims(min_resources):
        limit = attr.real_capability.get(d, Fraction(0))
        parts: dict[str, float | int] = {
            "request": min_resources[d],
            "allocated": attr.allocated.get(d, 0),
            "inqueue": attr.inqueue.get(d, 0),
            "elastic": attr.elastic.get(d, 0),
        }
        if parts["request"] + parts["allocated"] + parts["inqueue"] - parts["elastic"] > limit:
            short[d] = {**parts, "limit": float(limit)}
    return short


def allocated_task_num(job: JobState) -> int:
    return job.count(*ALLOCATED_STATUSES)


def _count_items(groups: dict[int, list[Any]], items: tuple[tuple[str, int], ...]) -> None:
    group = groups.get(id(items))
    if group is None:
        groups[id(items)] = [items, 1]
    else:
        group[1] += 1


def _add_counted(target: dict[str, int], groups: dict[int, list[Any]]) -> None:
    for items, count in groups.values():
        for name, amount in items:
            target[name] = target.get(name, 0) + amount * count


def build_attrs(ssn: Session) -> dict[str, QueueAttr]:
    attrs: dict[str, QueueAttr] = {}
    # Tasks share their request items: per queue, each distinct request is counted over all
    # its tasks and summed once at the end, in first-appearance order (the maps' key order
    # stays as if added task by task).
    groups: dict[str, tuple[QueueAttr, dict[int, list[Any]], dict[int, list[Any]]]] = {}
    for job in ssn.jobs.values():
        queue_groups = groups.get(job.queue)
        if queue_groups is None:
            attr = attrs[job.queue] = QueueAttr(ssn.queues[job.queue])
            queue_groups = groups[job.queue] = (attr, {}, {})
        attr, allocated, requested = queue_groups
        for task in job.tasks:
            status = task.status
            if status in ALLOCATED_STATUSES:
                _count_items(allocated, task.req_items)
                _count_items(requested, task.req_items)
            elif status is TaskStatus.PENDING:
                _count_items(requested, task.req_items)
        if job.min_resources is not None:
            if job.phase is PodGroupPhase.INQUEUE or (
                job.phase is PodGroupPhase.RUNNING and allocated_task_num(job) >= job.min_member
            ):
                add_into(attr.inqueue, sub_positive(job.min_resources, job.allocated))
        if job.allocated:  # nothing allocated has no elastic part (a backlog's pending jobs)
            add_into(attr.elastic, sub_positive(job.allocated, job.min_resources or {}))
    for attr, allocated, requested in groups.values():
        _add_counted(attr.allocated, allocated)
        _add_counted(attr.request, requested)
    return dict(sorted(attrs.items()))


def capability_limits(queue: QueueState) -> dict[str, Fraction]:
    """The queue's capability; cpu / memory <= 0 and absent dimensions are unlimited."""
    limits: dict[str, Fraction] = {}
    for name in sorted(queue.capability):
        value = queue.capability[name]
        if name in ("cpu", "memory") and value <= 0:
            continue
        limits[name] = Fraction(value)
    return limits


def real_capability(
    queue: QueueState, total: Mapping[str, int], total_guarantee: Mapping[str, int]
) -> dict[str, Fraction]:
    """min(capability, (total − Σguarantee)⁺ + guarantee) per dimension."""
    result: dict[str, Fraction] = {}
    names = sorted(set(total) | set(queue.guarantee))
    for name in names:
        free = max(0, total.get(name, 0) - total_guarantee.get(name, 0))
        result[name] = Fraction(free + queue.guarantee.get(name, 0))
    for name, cap in capability_limits(queue).items():
        result[name] = min(result.get(name, cap), cap)
    return result


def total_guarantee(queues: Iterable[QueueState]) -> dict[str, int]:
    out: dict[str, int] = {}
    for queue in queues:
        add_into(out, queue.guarantee)
    return out


def describe(value: Fraction | int, name: str) -> str:
    if isinstance(value, Fraction) and value.denominator != 1:
        return _formatted(name, float(value))
    return _formatted(name, int(value))


# Memoised (a pure function of its arguments) on the plain number, which hashes at once where
# a Fraction does not: a full queue's refusals repeat the same few amounts in every pending
# job's reason, 100,000 texts at session close.
@lru_cache(maxsize=4096, typed=True)
def _formatted(name: str, amount: int | float) -> str:
    return format_amount(name, amount)


def on_task_change(attrs: Mapping[str, QueueAttr], task: TaskState, sign: int) -> QueueAttr | None:
    attr = attrs.get(task.job.queue)
    if attr is not None:
        allocated = attr.allocated
        for name, amount in task.req_items:  # sorted, as add_into
            allocated[name] = allocated.get(name, 0) + sign * amount
    return attr


def refuse_task(
    ssn: Session,
    plugin: str,
    queue: QueueState,
    task: TaskState,
    *,
    dim: str,
    used: int,
    limit: Fraction | int,
    kind: str,
) -> None:
    """Record ``queue-not-allocatable`` for ``task``'s job: the queue's ``used + request``
    exceeds ``limit`` (its ``kind``) in ``dim``.

    The reason names the queue's figures, not the task (the trace's TaskUnplaced step does):
    every waiting job of a full queue is refused with the same figures, and then holds the
    same Reason, built once per session.
    """
    request = task.request[dim]
    # The queue's last refusal, compared field by field (no key to build and hash: a full
    # queue refuses one job after another with the same figures); the limit by identity
    # (a Fraction compares in Python code; a queue's refusals share one limit object).
    last = ssn.last_refusals.get(queue.name)
    if (
        last is None
        or last.used != used
        or last.request != request
        or last.limit is not limit
        or last.dim != dim
        or last.kind != kind
        or last.plugin != plugin
    ):
        reason = _refusal(plugin, queue.name, dim, used, request, limit, kind)
        last = ssn.last_refusals[queue.name] = LastRefusal(plugin, dim, used, request, limit, kind, reason)
    ssn.explain(task.job.uid, last.reason)


def _refusal(  # noqa: PLR0917 - the reason's figures, in order
    plugin: str, queue: str, dim: str, used: int, request: int, limit: Fraction | int, kind: str
) -> Reason:
    return Reason(
        "queue-not-allocatable",
        f"queue {queue} cannot take the request: {dim} allocated {describe(used, dim)} + request "
        f"{describe(request, dim)} > {kind} {describe(limit, dim)}",
        {
            "plugin": plugin,
            "queue": queue,
            "resource": dim,
            "allocated": used,
            "request": request,
            "limit": float(limit),
            "limitKind": kind,
        },
    )


class QuotaPlugin(PluginBase):
    """Base of proportion and capacity: both keep each queue's allocation live."""

    def register_allocation_handlers(self, ssn: Session) -> None:
        # Bound methods, not partial(..., sign=): a keyword call costs more on every placement.
        ssn.on_allocate(self._allocated)
        ssn.on_deallocate(self._deallocated)

    def _allocated(self, task: TaskState) -> None:
        self._changed(task, +1)

    def _deallocated(self, task: TaskState) -> None:
        self._changed(task, -1)

    def _changed(self, task: TaskState, sign: int) -> None:
        raise NotImplementedError
