"""The scheduler's OpenTelemetry: session spans from the core's trace, links to submissions, counts.

The core returns a structured trace and reads no clock (design §2), so the
shell builds the spans: one ``tephra.session`` span per session and one
child ``tephra.action <name>`` span per action, timed by the service around
each action's run (``run_session(observe_action=...)``), with what the action
did as attributes.

The session span links to the submission span of every job it decided on
(placed, evicted, preempted for, enqueued).  :class:`SubmissionTraces` reads
those contexts from ``event_log.traceparent``, where the projector archived
the ``traceparent`` each JobSubmitted arrived with.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Final

import asyncpg
from opentelemetry import trace
from opentelemetry.trace import Link, Span, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from events.models import BindDecision, Decision, EnqueueDecision, EvictDecision
from projector.archive import JOB_SUBMITTED
from scheduler.core.trace import (
    EnqueueVerdict,
    JobSkipped,
    StatementClosed,
    TaskPlaced,
    TaskUnplaced,
    VictimEvicted,
)
from scheduler.service import metrics as prom
from scheduler.service.trace_summary import ActionSteps

__all__ = ["SchedulerMetrics", "SubmissionTraces", "emit_action_spans", "jobs_decided"]

log = logging.getLogger("tephra.scheduler")

_STEP_ATTRIBUTES: Final[dict[type, str]] = {
    EnqueueVerdict: "tephra.enqueue_verdicts",
    JobSkipped: "tephra.jobs_skipped",
    TaskPlaced: "tephra.tasks_placed",
    TaskUnplaced: "tephra.tasks_unplaced",
    StatementClosed: "tephra.statements",
    VictimEvicted: "tephra.victims",
}


def emit_action_spans(
    tracer: Tracer, actions: Sequence[ActionSteps], timings: Sequence[tuple[int, int]]
) -> int:
    """One child span (of the current span) per action run, from ``timings`` (start and end, ns since
    the epoch, one per action in order); returns how many."""
    for index, (steps, (start, end)) in enumerate(zip(actions, timings, strict=True)):
        counts = {name: count for kind, count in steps.counts.items() if (name := _STEP_ATTRIBUTES.get(kind))}
        span = tracer.start_span(
            f"tephra.action {steps.action}",
            start_time=start,
            attributes={"tephra.action": steps.action, "tephra.action.index": index, **counts},
        )
        span.end(end_time=end)
    return len(actions)


def jobs_decided(decisions: Iterable[Decision]) -> list[str]:
    """The jobs a session decided on, in decision order, each once (preemptors with their victims)."""
    jobs: dict[str, None] = {}
    for decision in decisions:
        if isinstance(decision, EvictDecision):
            jobs[decision.job] = None
            jobs[decision.preemptor_job] = None
        elif isinstance(decision, BindDecision | EnqueueDecision):
            jobs[decision.job] = None
    return list(jobs)


_PROPAGATOR: Final = TraceContextTextMapPropagator()
# The newest submission of each job (a job id may be submitted again after it retired).
_SUBMISSION_CONTEXTS: Final = (
    "SELECT DISTINCT ON (job) job, traceparent FROM event_log"
    " WHERE type = $1 AND job = ANY($2::text[]) AND traceparent IS NOT NULL ORDER BY job, seq DESC"
)


class SubmissionTraces:
    """job id -> the span context of its JobSubmitted, from the archive (``event_log.traceparent``)."""

    async def links_for(self, conn: asyncpg.Connection, job_ids: Sequence[str]) -> list[Link]:
        """Links to the submissions of ``job_ids`` that arrived with trace context, in ``job_ids`` order."""
        if not job_ids:
            return []
        rows = await conn.fetch(_SUBMISSION_CONTEXTS, JOB_SUBMITTED, list(job_ids))
        found = {row["job"]: row["traceparent"] for row in rows}
        links = []
        for job_id in job_ids:
            if job_id in found:
                context = trace.get_current_span(_PROPAGATOR.extract({"traceparent": found[job_id]}))
                if context.get_span_context().is_valid:
                    links.append(Link(context.get_span_context(), {"tephra.job": job_id}))
        return links


class SchedulerMetrics:
    """Plain totals since start-up (tests and logs read them), mirrored in the Prometheus counters."""

    def __init__(self) -> None:
        self.sessions = self.skipped = self.overruns = self.stalls = self.decisions = 0

    def session(self, decisions: int, seconds: float) -> None:
        self.sessions += 1
        self.decisions += decisions

    def skip(self) -> None:
        self.skipped += 1
        prom.observe_skip()

    def overrun(self) -> None:
        self.overruns += 1
        prom.SESSIONS_OVER_BUDGET.inc()

    def stall(self) -> None:
        self.stalls += 1
        prom.SESSIONS_STALLED.inc()


def set_session_attributes(span: Span, **attributes: str | int | float) -> None:
    span.set_attributes({f"tephra.session.{k}": v for k, v in attributes.items()})
