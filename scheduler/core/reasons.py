"""Why a job did not move: stable codes, messages with numbers, ranking.

Every reason has a stable ``code`` (what tools and tests match on), a
``message`` (Volcano's wording where Volcano has one, always with the numbers)
and a JSON-able ``detail`` with the same numbers as data.

Codes, in rank order (the first is the most fundamental blocker):

1. ``queue-missing`` – the job names a queue that does not exist;
2. ``queue-closed`` – the queue is not Open;
   ``queue-hierarchy-invalid`` – capacity's queue tree cannot be used (nothing is allocated);
   ``scheduling-gated`` – some of the job's pods have ``schedulingGates`` (not placed until removed);
3. ``job-invalid`` – fewer valid tasks than minAvailable (gang JobValid);
4. ``enqueue-rejected`` – an enqueue plugin refused admission (plugin, resource,
   used / limit / request);
5. ``queue-overused`` – the queue already uses its deserved share;
   ``network-topology-unsatisfied`` – a hard network topology job fits in no hyperNode of
   an allowed tier (the per-hyperNode fit errors, Volcano's "In hyperNode <name>: …");
6. ``gang-not-ready`` – fewer tasks placeable than minAvailable;
7. ``queue-not-allocatable`` – allocated + request exceeds deserved / capability;
8. ``insufficient-resources`` / ``predicate-failed`` – the per-node histogram;
9. ``pipelined`` – placed on resources that are still being released;
10. ``no-preemption-victims`` / ``no-reclaim-victims``;
11. ``not-evaluated`` – no action looked at the job this session.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from events.models import PendingReason

__all__ = [
    "CODES",
    "Reason",
    "fit_error_message",
    "format_amount",
    "format_resources",
    "rank",
]

CODES: tuple[str, ...] = (
    "queue-missing",
    "queue-closed",
    "queue-hierarchy-invalid",
    "scheduling-gated",
    "job-invalid",
    "enqueue-rejected",
    "queue-overused",
    "network-topology-unsatisfied",
    "gang-not-ready",
    "queue-not-allocatable",
    "insufficient-resources",
    "predicate-failed",
    "pipelined",
    "no-preemption-victims",
    "no-reclaim-victims",
    "not-evaluated",
)
_RANK: Final = {code: i for i, code in enumerate(CODES)}


@dataclass(frozen=True, slots=True)
class Reason:
    code: str
    message: str
    detail: Mapping[str, Any] = field(default_factory=dict)

    # Spelled out: compiled, it sets the slots directly; the generated __init__ of a
    # frozen dataclass stays Python and runs for every refused task.
    def __init__(self, code: str, message: str, detail: Mapping[str, Any] | None = None) -> None:
        object.__setattr__(self, "code", code)
        object.__setattr__(self, "message", message)
        object.__setattr__(self, "detail", {} if detail is None else detail)

    def to_event(self) -> PendingReason:
        return PendingReason(code=self.code, message=self.message)

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "detail": dict(self.detail)}


def rank(reasons: list[Reason]) -> tuple[Reason, ...]:
    """Order by code rank; stable for reasons of the same code."""
    if len(reasons) < 2:  # most pending jobs have one reason: nothing to order
        return tuple(reasons)
    if len(reasons) == 2:  # a refused backlog job has two: one comparison, no sort
        first, second = reasons
        unknown = len(_RANK)
        if _RANK.get(second.code, unknown) < _RANK.get(first.code, unknown):
            return (second, first)
        return (first, second)
    return tuple(sorted(reasons, key=_code_rank))


# A module function, not a lambda in rank: compiled, a lambda makes rank allocate a closure
# environment on every call, even for the one-reason jobs that return before sorting.
def _code_rank(reason: Reason) -> int:
    return _RANK.get(reason.code, len(_RANK))


_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def format_amount(resource: str, amount: int | float) -> str:
    """A readable quantity: cpu in cores, memory with a binary suffix when exact."""
    if resource == "cpu":
        if float(amount).is_integer() and int(amount) % 1000 == 0:
            return str(int(amount) // 1000)
        return f"{float(amount):g}m"
    if not float(amount).is_integer():
        return f"{float(amount):g}"
    value = int(amount)
    if resource in ("memory", "ephemeral-storage") and value:
        for suffix, unit in _BINARY:
            if value % unit == 0:
                return f"{value // unit}{suffix}"
    return str(value)


def format_resources(values: Mapping[str, int | float]) -> str:
    return ", ".join(f"{k} {format_amount(k, values[k])}" for k in values) or "nothing"


def fit_error_message(examined: int, histogram: Mapping[str, int]) -> str:
    """Volcano's FitErrors text: ``0/N nodes are unavailable: <sorted histogram>.``

    The entries ``"<count> <reason>"`` are sorted as strings, exactly like
    Volcano (so "10 X" sorts before "2 Y").
    """
    base = f"0/{examined} nodes are unavailable"
    if not histogram:
        return base
    entries = sorted(f"{count} {reason}" for reason, count in histogram.items())
    return f"{base}: {', '.join(entries)}."
