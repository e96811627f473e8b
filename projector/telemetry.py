"""The projector's Prometheus metrics and its archive spans.

Metrics are module-level ``prometheus_client`` objects in the process's
default registry (served by ``api.telemetry.MetricsServer``).  An archive span
is made for every archived event that arrived with a ``traceparent``: a
child of the producer's span (``tephra submit``'s, a foreign producer's, the
scheduler's session, the simulated cluster's bind), from the start of its
batch to the end of its commit, so a job's trace shows when it became part
of the record.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from typing import Final

from aiokafka import AIOKafkaConsumer
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from prometheus_client import Counter, Gauge, Histogram

from projector.plan import BatchPlan

__all__ = ["observe_batch", "observe_lag", "set_connected", "tracing_enabled"]

EVENTS_ARCHIVED: Final = Counter("tephra_events_archived", "Events appended to event_log")
EVENTS_REJECTED: Final = Counter(
    "tephra_events_rejected",
    "Records rejected (rejected_events and the dead-letter topic), by code",
    ["code"],
)
EVENTS_DUPLICATE: Final = Counter(
    "tephra_events_duplicate", "Records skipped because their event id is archived already"
)
PROJECTOR_SEQ: Final = Gauge("tephra_projector_seq", "The seq of the newest committed event (event_log)")
PROJECTOR_LAG: Final = Gauge(
    "tephra_projector_lag_records", "Records the projector is behind the broker, over all its partitions"
)
PARTITION_LAG: Final = Gauge(
    "tephra_projector_partition_lag_records",
    "Records behind the broker's high watermark, per partition",
    ["topic", "partition"],
)
PROJECTOR_CONNECTED: Final = Gauge(
    "tephra_projector_connected", "1 while the projector holds its connections and the writer lock"
)
BATCH_SECONDS: Final = Histogram(
    "tephra_projector_batch_seconds",
    "From a batch gathered to its commit",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)

_PROPAGATOR: Final = TraceContextTextMapPropagator()
_TRACER = trace.get_tracer("tephra.projector")
# Positions in an archive row (projector.writer._EVENT_LOG_COLUMNS).
_SEQ, _ID, _TYPE, _TOPIC, _PARTITION, _OFFSET, _JOB, _TRACEPARENT = 0, 1, 2, 8, 9, 10, 13, 14


def tracing_enabled() -> bool:
    """Whether this process installed a tracer provider (``api.telemetry``): without one, spans are
    no-ops, and the work of building them (parsing contexts, reading them from the archive) is skipped."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def set_connected(connected: bool) -> None:
    PROJECTOR_CONNECTED.set(1 if connected else 0)
    if not connected:
        PARTITION_LAG.clear()  # the next run reports its own partitions


def observe_lag(consumer: AIOKafkaConsumer, positions: Mapping[tuple[str, int], int]) -> None:
    """Records behind the high watermarks the last fetches reported, per partition and in all."""
    total = 0
    for tp in consumer.assignment():
        highwater = consumer.highwater(tp)
        if highwater is None:
            continue
        behind = max(0, highwater - positions.get((tp.topic, tp.partition), 0))
        PARTITION_LAG.labels(tp.topic, str(tp.partition)).set(behind)
        total += behind
    PROJECTOR_LAG.set(total)


def observe_batch(plan: BatchPlan, seconds: float, rejection_codes: Collection[str]) -> None:
    """A committed batch: counters, seq, latency, and an archive span per traced event."""
    EVENTS_ARCHIVED.inc(plan.archived)
    EVENTS_DUPLICATE.inc(plan.duplicates)
    for code in rejection_codes:
        EVENTS_REJECTED.labels(code).inc()
    PROJECTOR_SEQ.set(plan.last_seq)
    BATCH_SECONDS.observe(seconds)
    if not tracing_enabled():
        return
    end = time.time_ns()
    start = end - int(seconds * 1e9)
    for row in plan.archive_rows:
        traceparent = row[_TRACEPARENT]
        if traceparent is None:
            continue
        parent = _PROPAGATOR.extract({"traceparent": traceparent})
        attributes = {
            "tephra.seq": row[_SEQ],
            "tephra.event.id": row[_ID],
            "tephra.event.type": row[_TYPE],
            "messaging.destination.name": row[_TOPIC],
            "messaging.destination.partition.id": str(row[_PARTITION]),
            "messaging.kafka.offset": row[_OFFSET],
        }
        if row[_JOB] is not None:
            attributes["tephra.job"] = row[_JOB]
        span = _TRACER.start_span(
            f"tephra.archive {row[_TYPE]}",
            context=parent,
            kind=trace.SpanKind.CONSUMER,
            start_time=start,
            attributes=attributes,
        )
        span.end(end_time=end)
