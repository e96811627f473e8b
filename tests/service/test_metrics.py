"""The scheduler's labelled gauges: each replacement leaves exactly the values it was given; the
per-job ones from the session's trace."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from scheduler.core.trace import ActionRan, GangNotReady
from scheduler.service.metrics import UNSCHEDULE_JOBS, UNSCHEDULE_TASKS, _observe_trace, _Series
from scheduler.service.trace_summary import summarize_trace


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


def test_the_unschedulable_tasks_of_each_job_come_from_its_last_gang_step_never_below_zero() -> None:
    trace = (
        ActionRan("allocate"),
        GangNotReady("ns/b", 0, 2, 2),
        GangNotReady("ns/c", 1, 3, 3),
        GangNotReady("ns/c", 2, 3, 3),
        GangNotReady("ns/d", 5, 3, 3),
    )
    try:
        _observe_trace(summarize_trace(trace))
        (tasks,) = UNSCHEDULE_TASKS.collect()
        assert {s.labels["job_id"]: s.value for s in tasks.samples} == {"ns/b": 2, "ns/c": 1, "ns/d": 0}
        (jobs,) = UNSCHEDULE_JOBS.collect()
        assert [s.value for s in jobs.samples] == [3]
    finally:
        _observe_trace(summarize_trace(()))  # the process-wide series as they were: none
    (tasks,) = UNSCHEDULE_TASKS.collect()
    assert tasks.samples == []
