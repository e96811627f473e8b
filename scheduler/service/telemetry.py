"""The scheduler's OpenTelemetry: session spans from the core's trace, links to submissions, metrics.

The core returns a structured trace and reads no clock (design §2), so the
shell builds the spans: one ``tephra.session`` span per session and one
child ``tephra.action <name>`` span per action, with what the action did as
attributes.  The core does not time its actions, so the action spans are
markers at the end of the computation, in action order, not durations.

The session span links to the submission span of every job it placed.  The
projection does not keep trace context, so :class:`SubmissionTraces` reads it
from the headers of the JobSubmitted records on the intents topic (the
submitter's ``traceparent``), keyed by job id.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from aiokafka import AIOKafkaConsumer, TopicPartition
from opentelemetry import metrics, propagate, trace
from opentelemetry.trace import Link, Span, SpanContext, Tracer

from events.models import JobSubmitted
from events.serde import EventDecodeError, decode
from events.tracing import carrier_from_headers
from projector.topic_watch import TopicWatch
from scheduler.core.trace import (
    ActionRan,
    EnqueueVerdict,
    JobSkipped,
    StatementClosed,
    TaskPlaced,
    TaskUnplaced,
    TraceStep,
    VictimEvicted,
)

__all__ = ["SchedulerMetrics", "SubmissionTraces", "emit_action_spans"]

log = logging.getLogger("tephra.scheduler")

_STEP_ATTRIBUTES: Final = {
    EnqueueVerdict: "tephra.enqueue_verdicts",
    JobSkipped: "tephra.jobs_skipped",
    TaskPlaced: "tephra.tasks_placed",
    TaskUnplaced: "tephra.tasks_unplaced",
    StatementClosed: "tephra.statements",
    VictimEvicted: "tephra.victims",
}


def emit_action_spans(tracer: Tracer, steps: Sequence[TraceStep], at_ns: int) -> int:
    """One child span (of the current span) per action in ``steps``; returns how many."""
    actions: list[tuple[str, Counter[str]]] = []
    for step in steps:
        if isinstance(step, ActionRan):
            actions.append((step.action, Counter()))
        elif actions:
            name = _STEP_ATTRIBUTES.get(type(step))
            if name is not None:
                actions[-1][1][name] += 1
    for index, (action, counts) in enumerate(actions):
        span = tracer.start_span(
            f"tephra.action {action}",
            start_time=at_ns,
            attributes={"tephra.action": action, "tephra.action.index": index, **counts},
        )
        span.end(end_time=at_ns)
    return len(actions)


class SubmissionTraces:
    """job id -> the span context of its JobSubmitted, learnt from the intents topic's headers.

    Bounded: a context is forgotten once a session placed its job, and the
    oldest are dropped beyond ``capacity``.
    """

    def __init__(self, capacity: int = 100_000) -> None:
        self.capacity = capacity
        self._contexts: OrderedDict[str, SpanContext] = OrderedDict()

    def remember(self, job_id: str, context: SpanContext) -> None:
        self._contexts[job_id] = context
        self._contexts.move_to_end(job_id)
        while len(self._contexts) > self.capacity:
            self._contexts.popitem(last=False)

    def links_for(self, job_ids: Iterable[str]) -> list[Link]:
        """Links to the submissions of ``job_ids`` (those known), forgetting them."""
        links = []
        for job_id in job_ids:
            context = self._contexts.pop(job_id, None)
            if context is not None:
                links.append(Link(context, {"tephra.job": job_id}))
        return links

    def observe(self, value: bytes | None, headers: Sequence[tuple[str, bytes]] | None) -> None:
        """Learn from one intents record (anything without trace context or not a JobSubmitted is ignored)."""
        carrier = carrier_from_headers(headers)
        if "traceparent" not in carrier or value is None or b"tephra.job.submitted" not in value:
            return
        try:
            event = decode(value)
        except EventDecodeError:
            return  # the projector dead-letters it; nothing to link
        if not isinstance(event, JobSubmitted):
            return
        context = trace.get_current_span(propagate.extract(carrier)).get_span_context()
        if context.is_valid:
            self.remember(event.data.job_id, context)

    async def follow(self, bootstrap: str, topic: str, *, refresh: float = 5.0) -> None:
        """Read ``topic`` from the beginning, forever (no consumer group, no commits).

        The topic may not exist yet, or gain partitions: every ``refresh``
        seconds the partitions are looked up again and new ones read from
        their beginning (:class:`~projector.topic_watch.TopicWatch`).
        """
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
        watch = TopicWatch(bootstrap, [topic], who="the scheduler's submission trace follower", every=refresh)
        #: partition -> the next offset to read (None: from its beginning).
        positions: dict[TopicPartition, int | None] = {}
        await consumer.start()
        try:
            consumer.assign([])  # never assigned, getmany would wait for an assignment past its timeout
            async with watch:
                while True:
                    if new := await watch.new_partitions(positions):
                        positions.update(dict.fromkeys(new))
                        await _assign(consumer, positions)
                    batches = await consumer.getmany(timeout_ms=500, max_records=5_000)
                    for tp, records in batches.items():
                        for record in records:
                            self.observe(record.value, record.headers)
                        if records:
                            positions[tp] = records[-1].offset + 1
                    await asyncio.sleep(0)
        finally:
            await consumer.stop()


async def _assign(consumer: AIOKafkaConsumer, positions: Mapping[TopicPartition, int | None]) -> None:
    """Assign ``positions``' partitions, each at its position (assigning anew resets them all)."""
    consumer.assign(list(positions))
    for tp, offset in positions.items():
        if offset is None:
            await consumer.seek_to_beginning(tp)
        else:
            consumer.seek(tp, offset)


class SchedulerMetrics:
    """Counters and histograms (no-ops unless a meter provider is installed), plus plain totals."""

    def __init__(self) -> None:
        meter = metrics.get_meter("tephra.scheduler")
        self._sessions = meter.create_counter("tephra.scheduler.sessions", description="sessions published")
        self._skipped = meter.create_counter(
            "tephra.scheduler.sessions.skipped", description="nothing changed"
        )
        self._overruns = meter.create_counter(
            "tephra.scheduler.sessions.overrun", description="sessions abandoned past the budget"
        )
        self._stalls = meter.create_counter(
            "tephra.scheduler.stalls", description="the projection did not apply our session in time"
        )
        self._decisions = meter.create_counter(
            "tephra.scheduler.decisions", description="decisions published"
        )
        self._duration = meter.create_histogram(
            "tephra.scheduler.session.duration", unit="s", description="snapshot to applied"
        )
        self.sessions = self.skipped = self.overruns = self.stalls = self.decisions = 0

    def session(self, decisions: int, seconds: float) -> None:
        self.sessions += 1
        self.decisions += decisions
        self._sessions.add(1)
        self._decisions.add(decisions)
        self._duration.record(seconds)

    def skip(self) -> None:
        self.skipped += 1
        self._skipped.add(1)

    def overrun(self) -> None:
        self.overruns += 1
        self._overruns.add(1)

    def stall(self) -> None:
        self.stalls += 1
        self._stalls.add(1)


def set_session_attributes(span: Span, **attributes: str | int | float) -> None:
    span.set_attributes({f"tephra.session.{k}": v for k, v in attributes.items()})
