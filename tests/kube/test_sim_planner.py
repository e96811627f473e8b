"""The simulated cluster's pure planner: what is due when, and never twice."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from events.models import TaskFinished, TaskStarted
from kube.sim import SimPlanner, TaskView

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def planner() -> SimPlanner:
    return SimPlanner(bind_delay=0.5, evict_delay=1.0, cluster="c1")


def bound(task: str = "ns/j-w-0", decision: str = "s1") -> TaskView:
    return TaskView(task_id=task, job_id="ns/j", status="Bound", node="n1", decision=decision)


def test_a_binding_starts_after_the_bind_delay_and_only_once() -> None:
    sim = planner()
    assert sim.plan([bound()], at(0)) == ([], 0.5)
    events, wait = sim.plan([bound()], at(0.5))
    [event] = events
    assert isinstance(event, TaskStarted)
    assert (event.data.task_id, event.data.job_id, event.data.node, event.cluster) == (
        "ns/j-w-0",
        "ns/j",
        "n1",
        "c1",
    )
    assert wait is None
    sim.published(events)
    # The projection has not applied it yet: still Bound, but not planned again.
    assert sim.plan([bound()], at(5)) == ([], None)


def test_an_unconfirmed_event_is_planned_again_with_the_same_id() -> None:
    sim = planner()
    sim.plan([bound()], at(0))
    [first], _ = sim.plan([bound()], at(1))
    [again], _ = sim.plan([bound()], at(2))  # publish failed: not confirmed
    assert again.id == first.id


def test_event_ids_are_derived_from_task_state_and_decision() -> None:
    one, other = planner(), planner()
    one.plan([bound()], at(0))
    other.plan([bound()], at(10))
    [a], _ = one.plan([bound()], at(1))
    [b], _ = other.plan([bound()], at(11))
    assert a.id == b.id  # a restarted simulator re-publishes the same id: the event log drops it
    fresh = planner()
    fresh.plan([bound(decision="s2")], at(0))
    [c], _ = fresh.plan([bound(decision="s2")], at(1))
    assert c.id != a.id  # a new binding of the same task is a new start


def test_an_eviction_finishes_the_task_as_evicted_after_the_evict_delay() -> None:
    sim = planner()
    releasing = TaskView(task_id="ns/j-w-0", job_id="ns/j", status="Releasing", node="n1", decision="s3")
    assert sim.plan([releasing], at(0)) == ([], 1.0)
    [event], _ = sim.plan([releasing], at(1))
    assert isinstance(event, TaskFinished)
    assert (event.data.outcome, event.data.node) == ("evicted", "n1")


def test_a_running_task_with_a_runtime_succeeds_when_it_has_run_that_long() -> None:
    sim = planner()
    running = TaskView(
        task_id="ns/j-w-0", job_id="ns/j", status="Running", node="n1", decision="s1", runtime=30, since=at(0)
    )
    assert sim.plan([running], at(10)) == ([], 20.0)
    [event], _ = sim.plan([running], at(30))
    assert isinstance(event, TaskFinished)
    assert (event.data.outcome, event.data.exit_code) == ("succeeded", 0)


def test_tasks_without_runtime_or_in_other_states_are_left_alone() -> None:
    sim = planner()
    tasks = [
        TaskView(task_id="ns/a", job_id="ns/j", status="Running", node="n1", decision="s1"),
        TaskView(task_id="ns/b", job_id="ns/j", status="Pending", node=None, decision=""),
        TaskView(task_id="ns/c", job_id="ns/j", status="Succeeded", node="n1", decision="s1"),
    ]
    assert sim.plan(tasks, at(100)) == ([], None)


def test_the_earliest_due_time_is_reported_across_tasks() -> None:
    sim = planner()
    releasing = TaskView(task_id="ns/z", job_id="ns/j", status="Releasing", node="n1", decision="s3")
    assert sim.plan([releasing, bound()], at(0)) == ([], 0.5)
    events, wait = sim.plan([releasing, bound()], at(0.5))
    assert [type(e) for e in events] == [TaskStarted]
    assert wait == 0.5
