"""A transaction over the session (Volcano's ``framework/statement.go``).

Operations take effect in the session immediately (later predicates see
them) and are recorded.  :meth:`Statement.commit` turns them into decisions —
allocations become bindings, evictions become evict decisions, pipelining
stays session-local — and :meth:`Statement.discard` undoes them in reverse
order.  :meth:`Statement.merge` folds a nested (per-node) statement into this
one, as preempt and reclaim do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from scheduler.core.decisions import Evict
from scheduler.core.framework import Session
from scheduler.core.snapshot import TaskStatus
from scheduler.core.state import TaskState
from scheduler.core.trace import VictimEvicted

__all__ = ["Operation", "Statement"]


@dataclass(slots=True)
class Operation:
    kind: Literal["allocate", "pipeline", "evict"]
    task: TaskState
    node: int
    # evict only
    previous: TaskStatus = TaskStatus.RUNNING
    action: Literal["preempt", "reclaim"] = "preempt"
    preemptor: TaskState | None = None
    rule: str = ""

    # Spelled out: one Operation per placement (see scheduler/core/trace.py).
    def __init__(  # noqa: PLR0917 - the dataclass fields, in order
        self,
        kind: Literal["allocate", "pipeline", "evict"],
        task: TaskState,
        node: int,
        previous: TaskStatus = TaskStatus.RUNNING,
        action: Literal["preempt", "reclaim"] = "preempt",
        preemptor: TaskState | None = None,
        rule: str = "",
    ) -> None:
        self.kind = kind
        self.task = task
        self.node = node
        self.previous = previous
        self.action = action
        self.preemptor = preemptor
        self.rule = rule


class Statement:
    def __init__(self, ssn: Session) -> None:
        self.ssn = ssn
        self.operations: list[Operation] = []

    def __len__(self) -> int:
        return len(self.operations)

    def allocate(self, task: TaskState, row: int) -> None:
        self.ssn.place(task, row, TaskStatus.ALLOCATED)
        task.tentative = True
        self.operations.append(Operation("allocate", task, row))

    def pipeline(self, task: TaskState, row: int) -> None:
        self.ssn.place(task, row, TaskStatus.PIPELINED)
        task.tentative = True
        self.operations.append(Operation("pipeline", task, row))

    def evict(
        self,
        task: TaskState,
        *,
        action: Literal["preempt", "reclaim"],
        preemptor: TaskState,
        rule: str,
    ) -> None:
        previous = self.ssn.start_evict(task)
        self.operations.append(Operation("evict", task, task.node, previous, action, preemptor, rule))

    def merge(self, other: Statement) -> None:
        self.operations.extend(other.operations)
        other.operations = []

    def discard(self) -> None:
        """Undo every operation, newest first."""
        ssn = self.ssn
        for op in reversed(self.operations):
            if op.kind == "evict":
                ssn.undo_evict(op.task, op.previous)
            else:
                if op.kind == "allocate":
                    op.task.schedulable_on = ssn.nodes.names[op.node]
                ssn.unplace(op.task)
        self.operations = []

    def commit(self) -> None:
        ssn = self.ssn
        for op in self.operations:
            if op.kind == "allocate":
                ssn.bind(op.task)
            elif op.kind == "pipeline":
                op.task.tentative = False
            elif op.preemptor is not None:
                node = ssn.nodes.names[op.node]
                ssn.decisions.append(
                    Evict(
                        task=op.task.uid,
                        job=op.task.job.uid,
                        node=node,
                        action=op.action,
                        preemptor_job=op.preemptor.job.uid,
                        preemptor_task=op.preemptor.uid,
                        rule=op.rule,
                    )
                )
                ssn.step(
                    VictimEvicted(
                        op.action,
                        op.task.uid,
                        op.task.job.uid,
                        node,
                        op.preemptor.uid,
                        op.preemptor.job.uid,
                        op.rule,
                    )
                )
        self.operations = []
