"""Helpers shared by actions: job heaps and queue selection."""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from scheduler.core.framework import Session, SortKey
from scheduler.core.state import JobState, QueueState

__all__ = ["JobHeap", "QueueRotation", "job_heaps"]


class JobHeap:
    """Jobs of one queue in job order.

    The key is taken when a job is pushed: within an action only the popped
    job's state changes, so keys of jobs waiting in the heap stay current.
    Keys end in the job's unique rank (a total order), so any priority queue
    pops the same sequence: the first jobs are sorted once and read from the
    front (nearly sorted already, the sort is about one comparison a job, where
    a heap pop costs ~2 log n), and jobs pushed later wait in a small heap.
    """

    def __init__(self, ssn: Session, keyed: list[tuple[SortKey, JobState]] | None = None) -> None:
        """``keyed``: the first jobs with their keys."""
        self.ssn = ssn
        self._sorted: list[tuple[SortKey, JobState]] = keyed if keyed is not None else []
        self._sorted.sort(key=_key)
        self._next = 0  # the front of ``_sorted``
        self._heap: list[tuple[SortKey, JobState]] = []

    def push(self, job: JobState) -> None:
        heapq.heappush(self._heap, (self.ssn.job_key(job), job))

    def pop(self) -> JobState:
        heap = self._heap
        at = self._next
        if at < len(self._sorted) and (not heap or self._sorted[at][0] < heap[0][0]):
            self._next = at + 1
            return self._sorted[at][1]
        return heapq.heappop(heap)[1]

    def __len__(self) -> int:
        return len(self._sorted) - self._next + len(self._heap)

    def jobs(self) -> list[JobState]:
        return [job for _, job in sorted([*self._sorted[self._next :], *self._heap], key=_key)]


def _key(item: tuple[SortKey, JobState]) -> SortKey:
    return item[0]


def job_heaps(ssn: Session, jobs: Iterable[JobState]) -> dict[str, JobHeap]:
    """A heap per queue of ``jobs``: each job keyed once, the keys sorted once (a heap
    per queue built as the jobs come would be pushed to job by job)."""
    keyed: dict[str, list[tuple[SortKey, JobState]]] = {}
    for job in jobs:
        keyed.setdefault(job.queue, []).append((ssn.job_key(job), job))
    return {name: JobHeap(ssn, items) for name, items in keyed.items()}


class QueueRotation:
    """Queues re-ordered on every pick (shares change between visits).

    With ``cache_keys`` the queue keys are kept between picks and the caller
    calls :meth:`refresh` for every queue whose allocation it changed.  That is
    exact when, as in allocate, a visit only places tasks of the visited queue:
    a queue-order key depends only on its own queue's state (the contract of
    ``queue_order`` functions).
    """

    def __init__(self, ssn: Session, queues: list[QueueState], *, cache_keys: bool = False) -> None:
        self.ssn = ssn
        self.active = list(queues)
        self._keys: dict[str, SortKey] | None = (
            {q.name: ssn.queue_key(q) for q in queues} if cache_keys else None
        )

    def __bool__(self) -> bool:
        return bool(self.active)

    def best(self) -> QueueState:
        keys = self._keys
        if keys is None:
            return min(self.active, key=self.ssn.queue_key)
        return min(self.active, key=lambda q: keys[q.name])

    def refresh(self, queue: QueueState) -> None:
        if self._keys is not None:
            self._keys[queue.name] = self.ssn.queue_key(queue)

    def drop(self, queue: QueueState) -> None:
        self.active.remove(queue)
