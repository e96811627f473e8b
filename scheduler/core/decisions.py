"""The decisions a session emits, in order.

Small frozen dataclasses inside the core; :func:`to_event` converts each one
into the matching ``events.models`` decision model for ``SessionCommitted``.
:class:`Bind` (one per placement) spells out ``__init__``; see scheduler/core/trace.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

from events.models import BindDecision, EnqueueDecision, EvictDecision, PipelineDecision

__all__ = ["Bind", "Decision", "Enqueue", "Evict", "Pipeline", "to_event"]


@dataclass(frozen=True, slots=True)
class Enqueue:
    job: str

    def to_event(self) -> EnqueueDecision:
        return EnqueueDecision(job=self.job)


@dataclass(frozen=True, slots=True)
class Bind:
    task: str
    job: str
    node: str

    def __init__(self, task: str, job: str, node: str) -> None:
        object.__setattr__(self, "task", task)
        object.__setattr__(self, "job", job)
        object.__setattr__(self, "node", node)

    def to_event(self) -> BindDecision:
        return BindDecision(task=self.task, job=self.job, node=self.node)


@dataclass(frozen=True, slots=True)
class Pipeline:
    task: str
    job: str
    node: str

    def to_event(self) -> PipelineDecision:
        return PipelineDecision(task=self.task, job=self.job, node=self.node)


@dataclass(frozen=True, slots=True)
class Evict:
    task: str
    job: str
    node: str
    action: Literal["preempt", "reclaim"]
    preemptor_job: str
    preemptor_task: str
    rule: str

    def to_event(self) -> EvictDecision:
        return EvictDecision(
            task=self.task,
            job=self.job,
            node=self.node,
            action=self.action,
            preemptor_job=self.preemptor_job,
            preemptor_task=self.preemptor_task,
            rule=self.rule,
        )


Decision: TypeAlias = Enqueue | Bind | Pipeline | Evict


def to_event(decision: Decision) -> EnqueueDecision | BindDecision | PipelineDecision | EvictDecision:
    return decision.to_event()
