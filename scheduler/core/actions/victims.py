"""Shared helpers for preempt and reclaim: candidate nodes and fit checks."""

from __future__ import annotations

import numpy as np

from scheduler.core.framework import Session
from scheduler.core.state import QueueState, TaskState

__all__ = ["fits_after_evictions", "preempt_candidate_rows"]


def preempt_candidate_rows(ssn: Session, task: TaskState) -> list[int]:
    """Rows not excluded for ``task`` by an unresolvable predicate, in name order."""
    blocked = ssn.placement.unresolvable(task)
    return [int(r) for r in np.flatnonzero(~blocked)]


def fits_future(ssn: Session, task: TaskState, row: int) -> bool:
    return bool((ssn.nodes.future_idle(row) >= task.vec).all())


def fits_after_evictions(ssn: Session, queue: QueueState, task: TaskState, row: int) -> bool:
    """Preempt's stop test: queue allocatable, request <= FutureIdle, predicates pass."""
    if not fits_future(ssn, task, row):
        return False
    rows = np.array([row], dtype=np.int64)
    if int(ssn.node_predicate(task, rows)[0]) != 0:
        return False
    return ssn.allocatable(queue, task)
