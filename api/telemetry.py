"""OpenTelemetry tracing and the metrics/health endpoint of the ``tephra`` processes.

Tracing is configured by the standard ``OTEL_*`` variables, read by the SDK
itself: ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) turns
export on, ``OTEL_EXPORTER_OTLP_PROTOCOL`` picks the transport (``http/protobuf``;
``grpc`` when its exporter package is installed), ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES`` name the process (the command's name is the default
service name), ``OTEL_TRACES_SAMPLER`` samples, ``OTEL_BSP_*`` batch.  Without
an endpoint the services trace nothing (no provider: spans are no-ops);
``OTEL_SDK_DISABLED=true`` turns tracing off everywhere.

:class:`MetricsServer` serves ``/metrics`` (Prometheus text of the process's
``prometheus_client`` registry), ``/healthz`` (the process answers) and
``/readyz`` (every service it runs is ready: :func:`readiness_problems`) on
``TEPHRA_METRICS_ADDR``, from a daemon thread, so a busy event loop still
answers scrapes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TextIO
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.types import StartResponse, WSGIEnvironment

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from prometheus_client import REGISTRY, CollectorRegistry, make_wsgi_app

from api.settings import ObservabilitySettings

__all__ = [
    "MetricsServer",
    "TracingError",
    "configure_tracing",
    "observability",
    "readiness_problems",
    "tracing_requested",
]

log = logging.getLogger(__name__)

_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_PROTOCOL_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")


class TracingError(ValueError):
    """An ``OTEL_*`` setting this process cannot honour; the message says which and what to do."""


def tracing_requested() -> bool:
    """Whether the environment asks for spans to be exported."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(os.environ.get(name) for name in _ENDPOINT_VARIABLES)


def _exporter() -> SpanExporter:
    protocol = next(
        (os.environ[name] for name in _PROTOCOL_VARIABLES if os.environ.get(name)), "http/protobuf"
    )
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415 - only when exporting
            OTLPSpanExporter,
        )

        return OTLPSpanExporter()  # reads the endpoint, headers, timeout and compression from OTEL_*
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # type: ignore[import-not-found]  # noqa: PLC0415
                OTLPSpanExporter as GrpcSpanExporter,
            )
        except ImportError:
            raise TracingError(
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs the package opentelemetry-exporter-otlp-proto-grpc;"
                " install it or use http/protobuf (OTLP/HTTP, port 4318)"
            ) from None
        exporter: SpanExporter = GrpcSpanExporter()
        return exporter
    raise TracingError(
        f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not supported here; use http/protobuf or grpc"
    )


def _resource(default_service: str) -> Resource:
    """The SDK's resource (``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_SERVICE_NAME``), named ``default_service``
    when neither names the service."""
    detected = Resource.create()
    name = detected.attributes.get(SERVICE_NAME)
    if isinstance(name, str) and not name.startswith("unknown_service"):
        return detected
    return detected.merge(Resource({SERVICE_NAME: default_service}))


def configure_tracing(service_name: str, *, without_exporter: bool = False) -> TracerProvider | None:
    """Install a tracer provider for this process when the environment asks for export; return it so the
    caller can shut it down (flush), or None when nothing was installed.

    ``without_exporter`` installs a provider even with no endpoint (``tephra submit``: its span
    contexts still travel in the record headers, for consumers that trace).
    """
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return None  # someone (a test, an embedding app) already configured one
    exporting = tracing_requested()
    if not exporting and not without_exporter:
        return None
    provider = TracerProvider(resource=_resource(service_name))  # the sampler: OTEL_TRACES_SAMPLER
    if exporting:
        provider.add_span_processor(BatchSpanProcessor(_exporter()))
    trace.set_tracer_provider(provider)
    return provider


# --------------------------------------------------------------------------- metrics and health


def readiness_problems(registry: CollectorRegistry, services: Iterable[str], max_lag: int) -> list[str]:
    """Why the named services of this process are not ready (empty: ready), from their exported gauges."""
    problems: list[str] = []

    def value(name: str) -> float | None:
        return registry.get_sample_value(name)

    for service in services:
        if service == "projector":
            if value("tephra_projector_connected") != 1:
                problems.append("projector: not connected to the broker and the database")
            lag = value("tephra_projector_lag_records")
            if lag is not None and lag > max_lag:
                problems.append(f"projector: {lag:.0f} records behind the broker (ready within {max_lag})")
        elif service == "scheduler":
            if value("tephra_scheduler_failing") != 0:
                problems.append("scheduler: neither leading nor standing by (the database is unreachable)")
        elif service == "sim-cluster" and value("tephra_sim_connected") != 1:
            problems.append("sim-cluster: not connected to the broker and the database")
    return problems


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """Scrapes every few seconds are not news."""


class MetricsServer:
    """``/metrics``, ``/healthz`` and ``/readyz`` on ``host:port``, served by a daemon thread."""

    def __init__(self, address: str, ready: Callable[[], list[str]], registry: CollectorRegistry = REGISTRY):
        host, _, port = address.rpartition(":")
        self._metrics = make_wsgi_app(registry)
        self._ready = ready
        self._server: WSGIServer = make_server(
            host or "0.0.0.0",  # noqa: S104 - ":port" means every interface, as Prometheus exporters do
            int(port),
            self._app,
            handler_class=_QuietHandler,
        )
        self._thread = threading.Thread(target=self._server.serve_forever, name="tephra-metrics", daemon=True)

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}"

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _app(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/healthz":
            return _text(start_response, "200 OK", "ok\n")
        if path == "/readyz":
            problems = self._ready()
            if problems:
                return _text(start_response, "503 Service Unavailable", "".join(f"{p}\n" for p in problems))
            return _text(start_response, "200 OK", "ready\n")
        if path in ("/metrics", "/"):
            body: Iterable[bytes] = self._metrics(environ, start_response)
            return body
        return _text(start_response, "404 Not Found", "try /metrics, /healthz or /readyz\n")


def _text(start_response: StartResponse, status: str, body: str) -> Iterator[bytes]:
    data = body.encode()
    start_response(
        status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(data)))]
    )
    yield data


@contextlib.contextmanager
def observability(
    settings: ObservabilitySettings, service_name: str, services: tuple[str, ...], out: TextIO
) -> Iterator[MetricsServer | None]:
    """Tracing (when the environment asks) and the metrics server (when ``TEPHRA_METRICS_ADDR`` is set)
    around a service process; prints where the metrics are.  Flushes the spans on the way out."""
    provider = configure_tracing(service_name)
    server = None
    if settings.metrics_addr:
        from scheduler.service.metrics import keep_state_gauges  # noqa: PLC0415 - only when serving

        keep_state_gauges(True)
        max_lag = settings.ready_max_lag
        server = MetricsServer(
            settings.metrics_addr, lambda: readiness_problems(REGISTRY, services, max_lag)
        ).start()
        print(
            f"tephra: metrics on http://{server.address}/metrics (and /healthz, /readyz)",
            file=out,
            flush=True,
        )
    try:
        yield server
    finally:
        if server is not None:
            server.stop()
        if provider is not None:
            provider.shutdown()
