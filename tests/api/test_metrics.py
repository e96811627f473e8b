"""The metrics every service exports, the Grafana dashboard's queries, stale series and health."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Gauge

import kube.sim_telemetry
import projector.telemetry
from api.telemetry import (
    MetricsServer,
    TracingError,
    configure_tracing,
    readiness_problems,
    tracing_requested,
)
from projector.state import ClusterState, NodeState, QueueState, QueueStatus
from scheduler.service import metrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docs" / "grafana" / "tephra.json"
# Identifiers of a PromQL expression that name Tephra's or Volcano's metrics.
_METRIC = re.compile(r"\b((?:volcano|tephra)_[a-zA-Z0-9_]+)\b")
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def exported_names() -> set[str]:
    """Every sample name the services' metrics produce (a labelled metric has no sample until used)."""
    # The services' metric modules, loaded (as the process that serves them has).
    assert kube.sim_telemetry.EXECUTED is not None
    assert projector.telemetry.EVENTS_ARCHIVED is not None
    names = set()
    for family in REGISTRY.collect():
        names.update(family.name + suffix for suffix in _SUFFIXES.get(family.type, ()))
    return names


def test_every_dashboard_query_names_an_exported_metric() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exported = exported_names()
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert len(queries) >= 20
    named = {name for query in queries for name in _METRIC.findall(query)}
    assert named - exported == set()
    # The seeds' views are there.
    for metric in (
        "tephra_job_wait_seconds_bucket",
        "tephra_gpu_allocated",
        "tephra_queue_overuse_ratio",
        "volcano_e2e_scheduling_latency_milliseconds_bucket",
        "volcano_eviction_transactions_total",
    ):
        assert metric in named


def test_volcano_metrics_keep_volcanos_names_types_and_buckets() -> None:
    families = {family.name: family for family in REGISTRY.collect()}
    e2e = families["volcano_e2e_scheduling_latency_milliseconds"]
    assert e2e.type == "histogram"
    metrics.E2E_LATENCY.observe(1)
    buckets = [
        s.labels["le"]
        for s in metrics.E2E_LATENCY.collect()[0].samples
        if s.name.endswith("_bucket") and s.labels["le"] != "+Inf"
    ]
    assert [float(b) for b in buckets] == [5.0 * 2**i for i in range(15)]  # ExponentialBuckets(5, 2, 15)
    assert families["volcano_total_preemption_attempts"].type == "counter"
    assert families["volcano_eviction_transactions"].type == "counter"
    for gauge in ("volcano_queue_share", "volcano_queue_weight", "volcano_queue_overused"):
        assert families[gauge].type == "gauge"


def _queue(name: str, weight: int) -> QueueState:
    return QueueState(
        name=name,
        weight=weight,
        capability={},
        deserved={"nvidia.com/gpu": 4},
        guarantee={},
        reclaimable=True,
        priority=0,
        state=QueueStatus.OPEN,
        parent=None,
        created=datetime(2026, 1, 1, tzinfo=UTC),
    )


def _node(name: str) -> NodeState:
    return NodeState(
        name=name,
        allocatable={"nvidia.com/gpu": 8},
        labels={},
        taints=(),
        unschedulable=False,
        ready=True,
        created=datetime(2026, 1, 1, tzinfo=UTC),
    )


def test_the_series_of_a_queue_or_node_that_went_away_are_removed() -> None:
    state = ClusterState()
    state.queues.update({"stays": _queue("stays", 2), "goes": _queue("goes", 3)})
    state.nodes.update({"n1": _node("n1"), "n2": _node("n2")})
    metrics._observe_state(state)
    assert REGISTRY.get_sample_value("volcano_queue_weight", {"queue_name": "goes"}) == 3
    assert REGISTRY.get_sample_value("tephra_gpu_allocatable", {"node": "n2"}) == 8

    del state.queues["goes"]
    del state.nodes["n2"]
    metrics._observe_state(state)
    assert REGISTRY.get_sample_value("volcano_queue_weight", {"queue_name": "goes"}) is None
    assert REGISTRY.get_sample_value("volcano_queue_weight", {"queue_name": "stays"}) == 2
    assert REGISTRY.get_sample_value("tephra_gpu_allocatable", {"node": "n2"}) is None
    assert REGISTRY.get_sample_value("tephra_gpu_allocatable", {"node": "n1"}) == 8


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - our own local server
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.parametrize("lag", [0, 5_000])
def test_health_and_readiness_say_what_is_not_ready(lag: int) -> None:
    registry = CollectorRegistry()
    Gauge("tephra_projector_connected", "", registry=registry).set(1)
    Gauge("tephra_projector_lag_records", "", registry=registry).set(lag)
    Gauge("tephra_scheduler_failing", "", registry=registry).set(0)
    Gauge("tephra_sim_connected", "", registry=registry).set(0)
    services = ("projector", "scheduler")
    server = MetricsServer(
        "127.0.0.1:0", lambda: readiness_problems(registry, services, max_lag=1_000), registry
    ).start()
    try:
        url = f"http://{server.address}"
        assert _get(f"{url}/healthz") == (200, "ok\n")
        status, body = _get(f"{url}/readyz")
        if lag:
            assert (status, body) == (503, "projector: 5000 records behind the broker (ready within 1000)\n")
        else:
            assert (status, body) == (200, "ready\n")
        status, body = _get(f"{url}/metrics")
        assert status == 200
        assert f"tephra_projector_lag_records {float(lag)}" in body
        assert _get(f"{url}/nothing")[0] == 404
    finally:
        server.stop()
    # The simulated cluster is not connected: a process running it is not ready.
    assert readiness_problems(registry, ("sim-cluster",), 1_000) == [
        "sim-cluster: not connected to the broker and the database"
    ]


@pytest.mark.parametrize("protocol", ["http/json", "grpc"])
def test_an_otlp_protocol_this_process_cannot_speak_is_a_clear_error(
    protocol: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    assert tracing_requested()
    with pytest.raises(TracingError, match="OTEL_EXPORTER_OTLP_PROTOCOL") as raised:
        configure_tracing("tephra-test")
    assert "http/protobuf" in str(raised.value)  # what to use instead


def test_without_an_endpoint_the_services_install_no_tracer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert not tracing_requested()
    assert configure_tracing("tephra-test") is None
