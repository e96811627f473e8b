"""allocate's refusal streak (scheduler/core/actions/allocate.py) changes nothing a session produces.

Each case runs the same sequence of sessions with the streak and without it (every job visited,
as Volcano does) and requires equal results: decisions, pipelined tasks, phases, ranked reasons
with their details, the trace, the queues' shares and the priorities.  The cases count the
jobs given a refusal again too (``SessionResult.refusals_given_again``), so a case meant to
use the streak does; the count holds compiled, where the core's functions cannot be wrapped.
"""

from __future__ import annotations

import dataclasses
import json
import random
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from scheduler.core.actions import allocate
from scheduler.core.carried import CarriedJobs
from scheduler.core.config import DEFAULT_CONFIG, SchedulerConfig, parse_scheduler_config
from scheduler.core.session import advance, run_session
from scheduler.core.snapshot import ClusterSnapshot, Job, PodGroupPhase, Queue, Task, TaskStatus
from scheduler.scenario import load_scenario
from tests.conformance.test_scenarios import FILES
from tests.core.builders import GI, node, snapshot
from tests.core.session_digest import PREEMPTING, _first_snapshot, _jobs
from tests.core.test_carried_jobs import NOW, _keeping, _result


def _sessions(
    first: ClusterSnapshot, config: SchedulerConfig, count: int, between: dict[int, Any] | None
) -> tuple[list[dict[str, Any]], int]:
    """The sessions' results (as tests/core/test_carried_jobs.py compares them) and how many
    waiting jobs were given a refusal again."""
    out, given = [], 0
    current, carried = first, CarriedJobs()
    for index in range(count):
        if between and index in between:
            current = between[index](current)
        result = run_session(current, config, NOW + timedelta(seconds=index), carried=carried)
        out.append(_result(result))
        given += result.refusals_given_again
        current = _keeping(current, advance(current, result))
    return out, given


def _same_with_and_without(
    monkeypatch: pytest.MonkeyPatch,
    first: ClusterSnapshot,
    *,
    config: SchedulerConfig,
    count: int,
    between: dict[int, Any] | None = None,
) -> int:
    """Asserts equal sessions with the streak and without it; returns the jobs it gave a refusal."""
    shared, given = _sessions(first, config, count, between)
    monkeypatch.setattr(allocate, "SHARE_REFUSALS", False)
    every, none = _sessions(first, config, count, between)
    monkeypatch.setattr(allocate, "SHARE_REFUSALS", True)
    assert none == 0
    assert shared == every
    return given


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_every_conformance_scenario_is_the_same_with_the_streak(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = load_scenario(path)
    _same_with_and_without(
        monkeypatch, scenario.snapshot, config=scenario.config, count=max(scenario.sessions, 3)
    )


def test_a_full_queue_visits_one_job_of_each_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    # One node: two jobs run, the queue's deserved share is full, 200 identical jobs wait.
    jobs = [_job(f"j{i:03d}", cpu=4) for i in range(202)]
    first = snapshot([node("n1", cpu=8)], jobs, queues=[Queue("q", weight=1, deserved={"cpu": 8000})])
    given = _same_with_and_without(monkeypatch, first, config=DEFAULT_CONFIG, count=3)
    assert given >= 3 * 199  # a visit per session and shape, not per job


def test_figures_that_differ_end_the_streak(monkeypatch: pytest.MonkeyPatch) -> None:
    # A full queue's waiting jobs, mixed: other requests, gang sizes, minimums per role,
    # best-effort tasks; a closed queue, a queue held by its capability.
    rng = random.Random(3)
    jobs: list[Job] = [_job(f"run{i}", cpu=4) for i in range(4)]
    for i in range(300):
        replicas = rng.choice((1, 1, 2, 3))
        cpu = rng.choice((1, 2, 2, 4))
        queue = rng.choice(("q", "q", "q", "closed", "other"))
        tasks = [_task(f"w{i}", k, cpu=cpu if rng.random() < 0.9 else 0) for k in range(replicas)]
        jobs.append(
            Job(
                namespace="ns",
                name=f"w{i:03d}",
                queue=queue,
                min_member=rng.choice((1, replicas)),
                min_task_member={"w": rng.choice((0, 1, replicas))} if rng.random() < 0.5 else {},
                phase=PodGroupPhase.INQUEUE,
                tasks=tuple(tasks),
            )
        )
    queues = [
        Queue("q", weight=2, deserved={"cpu": 16000}),
        Queue("other", weight=1, capability={"cpu": 4000}),
        Queue("closed", weight=1, state="Closed"),
    ]
    first = snapshot([node(f"n{i}", cpu=8) for i in range(3)], jobs, queues=queues)
    for quota in ("proportion", "capacity"):
        config = parse_scheduler_config(json.loads(json.dumps(PREEMPTING).replace("QUOTA", quota)))
        assert _same_with_and_without(monkeypatch, first, config=config, count=3) > 0


def test_the_jobs_roles_decide_whether_it_is_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each job runs two tasks and waits for a third, which the full queue refuses: the same
    # gang counters.  The first lacks a running task of a role its gang needs (discarded);
    # the second has one of each (ready: committed with nothing placed); the third runs what
    # the first runs but needs other roles (ready).
    def gang(name: str, running: tuple[str, str], needs: dict[str, int]) -> Job:
        tasks = [
            Task("ns", f"{name}-{role}-{k}", {"cpu": 1000}, status=TaskStatus.RUNNING, node="n1", role=role)
            for k, role in enumerate(running)
        ]
        tasks.append(Task("ns", f"{name}-b-9", {"cpu": 1000}, role="b"))
        return Job(
            namespace="ns",
            name=name,
            queue="q",
            min_member=2,
            min_task_member=needs,
            phase=PodGroupPhase.RUNNING,
            tasks=tuple(tasks),
        )

    jobs = [
        gang("first", ("a", "a"), {"a": 1, "b": 1}),
        gang("second", ("a", "b"), {"a": 1, "b": 1}),
        gang("third", ("a", "a"), {"a": 2}),
    ]
    first = snapshot([node("n1", cpu=6)], jobs, queues=[Queue("q", weight=1)])
    # Neither is given the first's refusal: every job is visited.
    assert _same_with_and_without(monkeypatch, first, config=DEFAULT_CONFIG, count=2) == 0


def test_random_backlogs_are_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    first = _first_snapshot()
    for seed in range(6):
        more = _jobs(random.Random(seed), "backlog", 300, "low")
        backlog = dataclasses.replace(first, jobs=(*first.jobs, *more))
        urgent = _jobs(random.Random(seed + 100), "urgent", 40, "high")

        def add_urgent(current: ClusterSnapshot, urgent: list[Job] = urgent) -> ClusterSnapshot:
            return dataclasses.replace(current, jobs=(*current.jobs, *urgent))

        given = _same_with_and_without(
            monkeypatch, backlog, config=DEFAULT_CONFIG, count=4, between={2: add_urgent}
        )
        assert given > 0


def test_a_plugin_whose_answer_it_does_not_know_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    # sla votes at job_pipelined on a job's waiting time: every job is visited.
    config = parse_scheduler_config(
        {
            "actions": "enqueue, allocate",
            "tiers": [
                {"plugins": [{"name": "gang"}, {"name": "sla", "arguments": {"sla-waiting-time": "1h"}}]},
                {"plugins": [{"name": "proportion"}, {"name": "predicates"}]},
            ],
        }
    )
    jobs = [_job(f"j{i:03d}", cpu=4) for i in range(40)]
    first = snapshot([node("n1", cpu=8)], jobs, queues=[Queue("q", weight=1, deserved={"cpu": 8000})])
    assert _same_with_and_without(monkeypatch, first, config=config, count=2) == 0


def _task(job: str, index: int, cpu: int) -> Task:
    return Task("ns", f"{job}-w-{index}", {"cpu": cpu * 1000, "memory": GI} if cpu else {}, role="w")


def _job(name: str, cpu: int) -> Job:
    return Job(
        namespace="ns",
        name=name,
        queue="q",
        min_member=1,
        phase=PodGroupPhase.INQUEUE,
        tasks=(_task(name, 0, cpu),),
    )
