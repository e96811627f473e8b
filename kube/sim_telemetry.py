"""The simulated cluster's spans and metrics.

Each observation it publishes is produced inside a span: ``tephra.sim bind``
(TaskStarted), ``tephra.sim evict`` (TaskFinished, evicted) or ``tephra.sim
finish`` (TaskFinished at the end of the simulated runtime).  The span is a
child of the span that made the decision it executes, found by the seq the
projected task carries (``tasks.seq``) in ``event_log.traceparent``: the
scheduler's session for a binding or an eviction, the binding's span (via its
TaskStarted) for a finish.  It links to the job's submission, and its context
travels in the record's headers, so the projector's archive span of the
observation is its child: the job's path ends at TaskStarted in the same trace
as the session that placed it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import asyncpg
from opentelemetry import propagate, trace
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from prometheus_client import Counter, Gauge

from events.models import Event, TaskFinished, TaskStarted
from events.tracing import headers_from_carrier
from kube.sim import TaskView
from projector.archive import JOB_SUBMITTED
from projector.telemetry import tracing_enabled

__all__ = ["Headers", "SimTelemetry", "set_connected"]

Headers = list[tuple[str, bytes]]

EXECUTED: Final = Counter(
    "tephra_sim_executed", "Observations the simulated cluster published, by kind", ["kind"]
)
SIM_CONNECTED: Final = Gauge(
    "tephra_sim_connected", "1 while the simulated cluster holds its database pool and producer"
)
_PROPAGATOR: Final = TraceContextTextMapPropagator()
_TRACER = trace.get_tracer("tephra.sim")
# The traceparents of the decisions (by seq) and of the jobs' newest submissions.
_CONTEXTS: Final = """
SELECT seq::text AS key, traceparent FROM event_log
 WHERE seq = ANY($1::bigint[]) AND traceparent IS NOT NULL
UNION ALL
(SELECT DISTINCT ON (job) 'job:' || job, traceparent FROM event_log
  WHERE type = $2 AND job = ANY($3::text[]) AND traceparent IS NOT NULL
  ORDER BY job, seq DESC)
"""


def set_connected(connected: bool) -> None:
    SIM_CONNECTED.set(1 if connected else 0)


def _kind(event: Event) -> str:
    if isinstance(event, TaskStarted):
        return "bind"
    if isinstance(event, TaskFinished) and event.data.outcome == "evicted":
        return "evict"
    return "finish"


class SimTelemetry:
    """Remembers which decision each task's state came from, and traces what is published."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self._decisions: dict[str, str] = {}  # task id -> the seq of the decision its state came from

    def wrap_read(
        self, read: Callable[[], Awaitable[Sequence[TaskView]]]
    ) -> Callable[[], Awaitable[Sequence[TaskView]]]:
        async def read_and_remember() -> Sequence[TaskView]:
            views = await read()
            self._decisions = {view.task_id: view.decision for view in views}
            return views

        return read_and_remember

    def wrap_publish(
        self, send: Callable[[Sequence[Event], Sequence[Headers]], Awaitable[None]]
    ) -> Callable[[Sequence[Event]], Awaitable[None]]:
        async def publish(events: Sequence[Event]) -> None:
            await self._publish(send, events)
            for event in events:
                EXECUTED.labels(_kind(event)).inc()

        return publish

    async def _publish(
        self, send: Callable[[Sequence[Event], Sequence[Headers]], Awaitable[None]], events: Sequence[Event]
    ) -> None:
        if not tracing_enabled():
            await send(events, [[] for _ in events])  # not tracing: no span, no query
            return
        contexts = await self._contexts(events)
        spans = []
        headers: list[Headers] = []
        for event in events:
            if not isinstance(event, TaskStarted | TaskFinished):
                headers.append([])  # the simulator publishes only these
                continue
            data = event.data
            decision = contexts.get(self._decisions.get(data.task_id, ""))
            submission = contexts.get(f"job:{data.job_id}")
            links = []
            if submission is not None:
                linked = trace.get_current_span(_PROPAGATOR.extract({"traceparent": submission}))
                links.append(Link(linked.get_span_context(), {"tephra.job": data.job_id}))
            span = _TRACER.start_span(
                f"tephra.sim {_kind(event)}",
                context=None if decision is None else _PROPAGATOR.extract({"traceparent": decision}),
                kind=SpanKind.PRODUCER,
                links=links,
                attributes={
                    "tephra.job": data.job_id,
                    "tephra.task": data.task_id,
                    "tephra.node": data.node or "",
                    "tephra.event.id": event.id,
                    "tephra.event.type": event.type,
                },
            )
            carrier: dict[str, str] = {}
            propagate.inject(carrier, context=trace.set_span_in_context(span))
            spans.append(span)
            headers.append(headers_from_carrier(carrier))
        try:
            await send(events, headers)
        finally:
            for span in spans:
                span.end()

    async def _contexts(self, events: Sequence[Event]) -> dict[str, str]:
        seqs, jobs = set(), set()
        for event in events:
            if isinstance(event, TaskStarted | TaskFinished):
                decision = self._decisions.get(event.data.task_id)
                if decision is not None and decision.isdigit():
                    seqs.add(int(decision))
                jobs.add(event.data.job_id)
        rows = await self.pool.fetch(_CONTEXTS, sorted(seqs), JOB_SUBMITTED, sorted(jobs))
        return {row["key"]: row["traceparent"] for row in rows}
