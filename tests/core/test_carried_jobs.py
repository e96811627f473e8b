"""Job states carried between sessions (scheduler/core/carried.py) change nothing a session produces.

Each case runs the same sequence of sessions twice, with and without a :class:`CarriedJobs`,
and requires equal results: decisions, pipelined tasks, phases, ranked reasons with their
details, the trace, the queues' shares and the priorities.  Between sessions the next snapshot
keeps every job that did not change as the same object (as the service's snapshot cache does),
so the carried states are actually taken.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from scheduler.core.carried import CarriedJobs
from scheduler.core.config import DEFAULT_CONFIG, SchedulerConfig, parse_scheduler_config
from scheduler.core.session import SessionResult, advance, run_session
from scheduler.core.snapshot import ClusterSnapshot, PriorityClass, Queue, Task
from scheduler.scenario import load_scenario
from tests.conformance.test_scenarios import FILES
from tests.core.builders import job, node, snapshot, task
from tests.core.session_digest import PREEMPTING, _first_snapshot, _jobs

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _result(result: SessionResult) -> dict[str, Any]:
    return {
        "decisions": result.decisions,
        "pipelined": result.pipelined,
        "phases": result.phases,
        "pending": {
            uid: [(r.code, r.message, json.dumps(r.detail, sort_keys=True, default=str)) for r in reasons]
            for uid, reasons in result.pending.items()
        },
        "trace": result.trace_json(),
        "shares": result.shares,
        "priorities": result.priorities,
    }


def _keeping(before: ClusterSnapshot, after: ClusterSnapshot) -> ClusterSnapshot:
    """``after`` with each job equal to its ``before`` form as that very object."""
    old = {j.uid: j for j in before.jobs}
    jobs = tuple(old[j.uid] if old.get(j.uid) == j else j for j in after.jobs)
    return dataclasses.replace(after, jobs=jobs)


def _sessions(
    first: ClusterSnapshot,
    config: SchedulerConfig,
    count: int,
    carried: CarriedJobs | None,
    between: dict[int, Any] | None = None,
) -> list[dict[str, Any]]:
    out = []
    current = first
    for index in range(count):
        if between and index in between:
            current = between[index](current)
        result = run_session(current, config, NOW + timedelta(seconds=index), carried=carried)
        out.append(_result(result))
        current = _keeping(current, advance(current, result))
    return out


def _same_with_and_without(
    first: ClusterSnapshot,
    config: SchedulerConfig,
    count: int,
    between: dict[int, Any] | None = None,
) -> CarriedJobs:
    carried = CarriedJobs()
    assert _sessions(first, config, count, carried, between) == _sessions(first, config, count, None, between)
    return carried


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_every_conformance_scenario_is_the_same_with_carried_states(path: Path) -> None:
    scenario = load_scenario(path)
    _same_with_and_without(scenario.snapshot, scenario.config, max(scenario.sessions, 3))


def test_a_waiting_backlog_is_carried_and_the_same() -> None:
    # Three queues over their share: most jobs wait session after session.
    first = _first_snapshot()
    backlog = _jobs_pending(first)
    carried = _same_with_and_without(backlog, DEFAULT_CONFIG, 4)
    assert len(carried) > 100  # the waiting jobs were carried, not rebuilt


def _jobs_pending(first: ClusterSnapshot) -> ClusterSnapshot:
    more = _jobs(random.Random(5), "backlog", 600, "low")
    return dataclasses.replace(first, jobs=(*first.jobs, *more))


def test_preempting_configurations_are_the_same_with_carried_states() -> None:
    first = _first_snapshot()
    urgent = _jobs(random.Random(12), "urgent", 60, "high")

    def add_urgent(current: ClusterSnapshot) -> ClusterSnapshot:
        return dataclasses.replace(current, jobs=(*current.jobs, *urgent))

    for quota in ("proportion", "capacity"):
        config = parse_scheduler_config(json.loads(json.dumps(PREEMPTING).replace("QUOTA", quota)))
        _same_with_and_without(first, config, 4, {2: add_urgent})


def test_changed_priority_classes_reach_carried_states() -> None:
    nodes = [node("n1", cpu=2)]
    jobs = [job(f"j{i}", [task(f"j{i}", 0, cpu=2)], priority_class="low") for i in range(4)]
    first = snapshot(nodes, jobs, classes=[PriorityClass("low", 10)])

    def reprioritise(current: ClusterSnapshot) -> ClusterSnapshot:
        return dataclasses.replace(
            current, priority_classes=(PriorityClass("low", 500, global_default=True),)
        )

    _same_with_and_without(first, DEFAULT_CONFIG, 4, {2: reprioritise})


def test_new_resource_dimensions_and_replaced_jobs_are_built_again() -> None:
    nodes = [node("n1", cpu=2), node("n2", cpu=2, gpu=1)]
    jobs = [job(f"j{i}", [task(f"j{i}", k, cpu=2) for k in range(2)]) for i in range(3)]
    first = snapshot(nodes, jobs, queues=[Queue("q", weight=1)])

    def gpu_job(current: ClusterSnapshot) -> ClusterSnapshot:
        extra = job("g", [task("g", 0, cpu=1, gpu=1)])
        return dataclasses.replace(current, jobs=(*current.jobs, extra))

    def replace_one(current: ClusterSnapshot) -> ClusterSnapshot:
        jobs = tuple(
            dataclasses.replace(j, tasks=(*j.tasks, Task("ns", "j0-w-9", {"cpu": 1000})))
            if j.name == "j0"
            else j
            for j in current.jobs
        )
        return dataclasses.replace(current, jobs=jobs)

    def drop_queue(current: ClusterSnapshot) -> ClusterSnapshot:
        return dataclasses.replace(current, queues=(Queue("other"),))

    _same_with_and_without(first, DEFAULT_CONFIG, 6, {1: gpu_job, 2: replace_one, 4: drop_queue})


def test_running_jobs_are_carried_across_changed_nodes() -> None:
    # One 2-cpu task fits a 3-cpu node: the nodes, not the queue's share, keep the other
    # tasks waiting, so a running task missing from a node's accounting would show.  A node
    # that sorts first then shifts every row, and one under running tasks goes away.
    nodes = [node("n2", cpu=3), node("n3", cpu=3)]
    jobs = [job(f"r{i}", [task(f"r{i}", k, cpu=2) for k in range(2)], min_member=1) for i in range(4)]
    first = snapshot(nodes, jobs)

    def add_first_node(current: ClusterSnapshot) -> ClusterSnapshot:
        return dataclasses.replace(current, nodes=(node("n1", cpu=3), *current.nodes))

    def drop_n3(current: ClusterSnapshot) -> ClusterSnapshot:
        return dataclasses.replace(current, nodes=tuple(n for n in current.nodes if n.name != "n3"))

    carried = _same_with_and_without(first, DEFAULT_CONFIG, 6, {2: add_first_node, 4: drop_n3})
    assert len(carried) == len(jobs)  # running jobs too, not only the waiting ones


def test_a_session_that_fails_leaves_nothing_carried() -> None:
    first = _jobs_pending(_first_snapshot())
    carried = CarriedJobs()
    run_session(first, DEFAULT_CONFIG, NOW, carried=carried)
    assert len(carried)

    def fail(action: str) -> Callable[[], None]:
        raise _Failure(action)

    with pytest.raises(_Failure):
        run_session(first, DEFAULT_CONFIG, NOW, carried=carried, observe_action=fail)
    assert not len(carried)
    assert _result(run_session(first, DEFAULT_CONFIG, NOW, carried=carried)) == _result(
        run_session(first, DEFAULT_CONFIG, NOW)
    )


class _Failure(Exception):
    pass
