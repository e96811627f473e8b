"""A session's trace, summarised once for the metrics and the spans that read it.

The trace holds a few steps per job the session considered: ~280,000 at 100k
pending jobs.  The metrics (:mod:`scheduler.service.metrics`) and the action
spans (:mod:`scheduler.service.telemetry`) each walked it step by step in
Python, ~0.3 s of the scheduler's CPU per session at that size, on the event
loop.  Their questions are about kinds of steps (how many of each per action,
which gangs were not ready, which statements evicted), so the summary sorts the
steps by type with C-level passes (``map(type, ...)``, ``list.index``,
``Counter``, ``compress``) and keeps only the steps those readers look at one
by one: the gangs not ready (one per pending job, for a per-job gauge) and,
when a task was evicted, the evictions and statements.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress, pairwise, repeat
from typing import Final, TypeVar, cast

from scheduler.core.trace import ActionRan, GangNotReady, StatementClosed, TraceStep, VictimEvicted

__all__ = ["ActionSteps", "TraceSummary", "summarize_trace"]

_EVICTION_STEPS: Final[frozenset[type]] = frozenset({VictimEvicted, StatementClosed})
_action_of: Final = operator.attrgetter("action")

Step = TypeVar("Step", bound=TraceStep)


@dataclass(frozen=True, slots=True)
class ActionSteps:
    """One action run: its name and how many steps of each type it wrote, in order of first
    appearance (the steps between its ActionRan and the next one)."""

    action: str
    counts: Counter[type]


@dataclass(frozen=True, slots=True)
class TraceSummary:
    #: Each action run, in order.
    actions: tuple[ActionSteps, ...]
    #: VictimEvicted steps in the whole trace.
    victims: int
    #: StatementClosed steps whose action is ``preempt``.
    preempt_statements: int
    #: VictimEvicted and StatementClosed steps in trace order; empty when no task was evicted
    #: (then no statement evicted any).
    evictions: tuple[VictimEvicted | StatementClosed, ...]
    #: The GangNotReady steps, in order.
    gangs_not_ready: list[GangNotReady]


def summarize_trace(trace: Sequence[TraceStep]) -> TraceSummary:
    kinds = list(map(type, trace))
    starts = _positions(kinds, ActionRan)
    actions = tuple(
        ActionSteps(_action_of(trace[start]), Counter(kinds[start + 1 : end]))
        for start, end in pairwise([*starts, len(kinds)])
    )
    statements = _of_kind(trace, kinds, StatementClosed)
    victims = kinds.count(VictimEvicted)
    evictions: tuple[VictimEvicted | StatementClosed, ...] = ()
    if victims:
        evictions = cast(
            "tuple[VictimEvicted | StatementClosed, ...]",
            tuple(compress(trace, map(_EVICTION_STEPS.__contains__, kinds))),
        )
    return TraceSummary(
        actions=actions,
        victims=victims,
        preempt_statements=list(map(_action_of, statements)).count("preempt"),
        evictions=evictions,
        gangs_not_ready=_of_kind(trace, kinds, GangNotReady),
    )


def _of_kind(trace: Sequence[TraceStep], kinds: list[type], kind: type[Step]) -> list[Step]:
    """The steps of type ``kind``, in order (``kinds``: the type of each step)."""
    return cast("list[Step]", list(compress(trace, map(operator.is_, kinds, repeat(kind)))))


def _positions(kinds: list[type], kind: type) -> list[int]:
    """The indices of ``kind`` in ``kinds``, found by ``list.index`` (a C loop)."""
    found: list[int] = []
    try:
        while True:
            found.append(kinds.index(kind, found[-1] + 1 if found else 0))
    except ValueError:
        return found
