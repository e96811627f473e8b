"""The scheduler's labelled gauges: each replacement leaves exactly the values it was given."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from scheduler.service.metrics import _Series


def _samples(registry: CollectorRegistry) -> dict[str, float]:
    return {
        sample.labels["job"]: sample.value
        for metric in registry.collect()
        for sample in metric.samples
        if sample.name == "unready_tasks"
    }


def test_a_replacement_sets_what_changed_keeps_what_did_not_and_removes_what_went_away() -> None:
    registry = CollectorRegistry()
    gauge = Gauge("unready_tasks", "tasks a job lacks", ["job"], registry=registry)
    series = _Series()
    series.replace(gauge, {("ns/a",): 1, ("ns/b",): 2, ("ns/c",): 3})
    assert _samples(registry) == {"ns/a": 1, "ns/b": 2, "ns/c": 3}
    # b keeps its value, c changes, a goes away, d comes.
    series.replace(gauge, {("ns/b",): 2, ("ns/c",): 5, ("ns/d",): 1})
    assert _samples(registry) == {"ns/b": 2, "ns/c": 5, "ns/d": 1}
    series.replace(gauge, {("ns/b",): 2, ("ns/c",): 5, ("ns/d",): 1})
    assert _samples(registry) == {"ns/b": 2, "ns/c": 5, "ns/d": 1}
    # Another gauge's series are its own.
    other = Gauge("other_tasks", "another", ["job"], registry=registry)
    series.replace(other, {("ns/b",): 7})
    series.replace(gauge, {})
    assert _samples(registry) == {}
    assert [s.value for m in registry.collect() for s in m.samples if s.name == "other_tasks"] == [7]
