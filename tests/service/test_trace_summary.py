"""The trace summary: what the metrics and the action spans read of a session's trace."""

from __future__ import annotations

from collections import Counter

from scheduler.core.trace import (
    ActionRan,
    EnqueueVerdict,
    GangNotReady,
    JobSkipped,
    StatementClosed,
    TaskPlaced,
    TaskUnplaced,
    TraceStep,
    VictimEvicted,
)
from scheduler.service.trace_summary import summarize_trace


def _victim(job: str, preemptor: str) -> VictimEvicted:
    return VictimEvicted("preempt", f"{job}/t0", job, "n1", f"{preemptor}/t0", preemptor, "priority")


TRACE: tuple[TraceStep, ...] = (
    GangNotReady("ns/early", 0, 1, 1),  # before any action: no span counts it, the metrics do
    ActionRan("enqueue"),
    EnqueueVerdict("ns/a", True),
    EnqueueVerdict("ns/b", False, "proportion", "over capability"),
    ActionRan("allocate"),
    TaskUnplaced("allocate", "ns/b", "ns/b/t0", "insufficient", "no node fits"),
    TaskPlaced("allocate", "ns/a", "ns/a/t0", "n1", False),
    StatementClosed("allocate", "ns/a", "committed", 1),
    TaskPlaced("allocate", "ns/c", "ns/c/t0", "n1", False),
    StatementClosed("allocate", "ns/c", "discarded", 1),
    GangNotReady("ns/b", 0, 2, 2),
    GangNotReady("ns/c", 1, 3, 3),
    ActionRan("preempt"),
    _victim("ns/low", "ns/high"),
    _victim("ns/low2", "ns/high"),
    StatementClosed("preempt", "ns/high", "committed", 3),
    StatementClosed("preempt", "ns/other", "discarded", 0),
    JobSkipped("preempt", "ns/x", "gang", "not ready"),
    GangNotReady("ns/c", 2, 3, 3),
    ActionRan("backfill"),
)


def test_each_action_counts_its_steps_by_type_in_order_of_first_appearance() -> None:
    summary = summarize_trace(TRACE)
    assert [a.action for a in summary.actions] == ["enqueue", "allocate", "preempt", "backfill"]
    enqueue, allocate, preempt, backfill = (a.counts for a in summary.actions)
    assert enqueue == Counter({EnqueueVerdict: 2})
    assert list(allocate.items()) == [
        (TaskUnplaced, 1),
        (TaskPlaced, 2),
        (StatementClosed, 2),
        (GangNotReady, 2),
    ]
    assert list(preempt.items()) == [
        (VictimEvicted, 2),
        (StatementClosed, 2),
        (JobSkipped, 1),
        (GangNotReady, 1),
    ]
    assert backfill == Counter()


def test_what_the_metrics_read() -> None:
    summary = summarize_trace(TRACE)
    assert summary.victims == 2
    assert summary.preempt_statements == 2
    assert summary.evictions == tuple(s for s in TRACE if isinstance(s, VictimEvicted | StatementClosed))
    assert summary.gangs_not_ready == [s for s in TRACE if isinstance(s, GangNotReady)]


def test_without_victims_no_statement_is_kept_for_the_evictions() -> None:
    summary = summarize_trace(TRACE[:12])
    assert summary.victims == 0
    assert summary.evictions == ()
    assert summary.preempt_statements == 0
    assert summarize_trace(()).actions == ()
