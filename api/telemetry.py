"""OpenTelemetry for the ``tephra`` processes, configured by the standard ``OTEL_*`` variables.

A real SDK tracer provider is installed even without an exporter, so span
contexts are valid and propagate in Kafka headers (the scheduler links its
sessions to the submission spans).  Spans are exported over OTLP/HTTP only
when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``
is set; ``OTEL_SDK_DISABLED=true`` turns tracing off.
"""

from __future__ import annotations

import os

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

__all__ = ["configure_tracing"]


def configure_tracing(service_name: str) -> TracerProvider | None:
    """Install a tracer provider for this process; return it so the caller can shut it down (flush)."""
    if os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return None
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return None  # someone (a test, an embedding app) already configured one
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", service_name)})
    provider = TracerProvider(resource=resource)
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415 - only when exporting
            OTLPSpanExporter,
        )

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return provider
