"""Helpers shared by actions: job heaps and queue selection."""

from __future__ import annotations

import heapq
from typing import Any

from scheduler.core.framework import Session
from scheduler.core.state import JobState, QueueState

__all__ = ["JobHeap", "QueueRotation"]


class JobHeap:
    """Jobs of one queue in job order.

    The key is taken when a job is pushed: within an action only the popped
    job's state changes, so keys of jobs waiting in the heap stay current.
    """

    def __init__(self, ssn: Session) -> None:
        self.ssn = ssn
        self._heap: list[tuple[tuple[Any, ...], JobState]] = []

    def push(self, job: JobState) -> None:
        heapq.heappush(self._heap, (self.ssn.job_key(job), job))

    def pop(self) -> JobState:
        return heapq.heappop(self._heap)[1]

    def __len__(self) -> int:
        return len(self._heap)

    def jobs(self) -> list[JobState]:
        return [job for _, job in sorted(self._heap, key=lambda item: item[0])]


class QueueRotation:
    """Queues re-ordered on every pick (shares change between visits)."""

    def __init__(self, ssn: Session, queues: list[QueueState]) -> None:
        self.ssn = ssn
        self.active = list(queues)

    def __bool__(self) -> bool:
        return bool(self.active)

    def best(self) -> QueueState:
        return min(self.active, key=self.ssn.queue_key)

    def drop(self, queue: QueueState) -> None:
        self.active.remove(queue)
