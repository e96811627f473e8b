"""Hypothesis properties of a session over random clusters and jobs."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core.config import parse_scheduler_config
from scheduler.core.decisions import Bind, Evict
from scheduler.core.session import run_session
from scheduler.core.snapshot import (
    ClusterSnapshot,
    Job,
    Node,
    PodGroupPhase,
    PriorityClass,
    Queue,
    Task,
    TaskStatus,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)
GI = 2**30
CONFIG = parse_scheduler_config(
    {
        "actions": "enqueue, allocate, backfill, preempt, reclaim",
        "tiers": [
            {
                "plugins": [
                    {"name": "priority"},
                    {"name": "gang", "enablePreemptable": False},
                    {"name": "conformance"},
                ]
            },
            {
                "plugins": [
                    {"name": "overcommit"},
                    {"name": "drf", "enablePreemptable": False},
                    {"name": "predicates"},
                    {"name": "proportion"},
                    {"name": "nodeorder"},
                    {"name": "binpack"},
                ]
            },
        ],
    }
)
CLASSES = (PriorityClass("low", 10), PriorityClass("high", 1000))


@st.composite
def clusters(draw: st.DrawFn) -> ClusterSnapshot:
    nodes = [
        Node(
            f"n{i}",
            {
                "cpu": draw(st.integers(1, 8)) * 1000,
                "memory": 16 * GI,
                "pods": draw(st.integers(1, 6)),
                "nvidia.com/gpu": draw(st.integers(0, 4)),
            },
            {"zone": draw(st.sampled_from(["a", "b"]))},
        )
        for i in range(draw(st.integers(1, 5)))
    ]
    queues = [
        Queue(
            f"q{i}",
            weight=draw(st.integers(1, 4)),
            capability=draw(st.sampled_from([{}, {"cpu": 4000}, {"nvidia.com/gpu": 2}])),
            reclaimable=draw(st.booleans()),
        )
        for i in range(draw(st.integers(1, 3)))
    ]
    free = {n.name: dict(n.allocatable) for n in nodes}
    jobs = []
    for j in range(draw(st.integers(1, 6))):
        queue = draw(st.sampled_from(queues)).name
        cpu = draw(st.integers(0, 3)) * 1000
        gpu = draw(st.integers(0, 2))
        selector = draw(st.sampled_from([{}, {}, {"zone": "a"}]))
        tasks = []
        count = draw(st.integers(1, 4))
        for t in range(count):
            req = {"cpu": cpu, "memory": GI, "nvidia.com/gpu": gpu}
            status, on = TaskStatus.PENDING, None
            if draw(st.booleans()):
                for name in sorted(free):
                    room = free[name]
                    if all(room.get(k, 0) >= v for k, v in req.items()) and room["pods"] >= 1:
                        for k, v in req.items():
                            room[k] -= v
                        room["pods"] -= 1
                        status, on = TaskStatus.RUNNING, name
                        break
            tasks.append(
                Task(
                    "ns",
                    f"j{j}-w-{t}",
                    {k: v for k, v in req.items() if v},
                    status,
                    on,
                    priority=draw(st.sampled_from([None, 1, 100])),
                    preemptable=draw(st.booleans()),
                    node_selector=selector,
                )
            )
        running = sum(1 for t in tasks if t.status is TaskStatus.RUNNING)
        min_member = draw(st.integers(0, count))
        phase = (
            PodGroupPhase.RUNNING
            if running and running >= min_member
            else draw(st.sampled_from([PodGroupPhase.PENDING, PodGroupPhase.INQUEUE]))
        )
        jobs.append(
            Job(
                "ns",
                f"j{j}",
                queue,
                min_member=min_member,
                phase=phase,
                tasks=tuple(tasks),
                priority_class=draw(st.sampled_from([None, "low", "high"])),
            )
        )
    return ClusterSnapshot(tuple(nodes), tuple(queues), CLASSES, tuple(jobs))


def _priority(job: Job) -> int:
    return {"low": 10, "high": 1000}.get(job.priority_class or "", 0)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_session_invariants(snap: ClusterSnapshot) -> None:  # noqa: PLR0912 - one property per block
    result = run_session(snap, CONFIG, NOW)
    tasks = {t.uid: (j, t) for j in snap.jobs for t in j.tasks}
    binds = [d for d in result.decisions if isinstance(d, Bind)]
    evicts = [d for d in result.decisions if isinstance(d, Evict)]

    # 1. no node over-committed: running (evicted ones still occupy) + new bindings.
    for node in snap.nodes:
        used: dict[str, int] = {}
        on_node = [t for _, t in tasks.values() if t.node == node.name]
        on_node += [tasks[b.task][1] for b in binds if b.node == node.name]
        for t in on_node:
            for k, v in t.request.items():
                used[k] = used.get(k, 0) + v
        for k, v in used.items():
            assert v <= node.allocatable.get(k, 0), (node.name, k)

    # 2. gang bound all-or-nothing: a job that got bindings reaches minMember.
    for job in snap.jobs:
        got = sum(1 for b in binds if b.job == job.uid)
        running = sum(1 for t in job.tasks if t.status is TaskStatus.RUNNING)
        assert got == 0 or running + got >= job.min_member, job.uid

    # 3. allocate never takes a queue past its capability.
    for queue in snap.queues:
        for dim, cap in queue.capability.items():
            before = sum(
                t.request.get(dim, 0)
                for j, t in tasks.values()
                if j.queue == queue.name and t.status is TaskStatus.RUNNING
            )
            added = sum(
                tasks[b.task][1].request.get(dim, 0) for b in binds if tasks[b.task][0].queue == queue.name
            )
            if before <= cap:
                assert before + added <= cap, (queue.name, dim)

    # 4./5. preempt stays in the queue and only takes lower priority; reclaim crosses
    # queues and only takes from reclaimable ones.
    queues = {q.name: q for q in snap.queues}
    for e in evicts:
        victim_job, victim = tasks[e.task]
        pre_job, pre_task = tasks[e.preemptor_task]
        if e.action == "preempt":
            assert victim_job.queue == pre_job.queue
            if victim_job.uid == pre_job.uid:
                assert (victim.priority or 1) < (pre_task.priority or 1)
            else:
                assert _priority(victim_job) < _priority(pre_job)
        else:
            assert victim_job.queue != pre_job.queue
            assert queues[victim_job.queue].reclaimable
        assert victim.preemptable

    # 6. every pending job has at least one reason.
    for job, reasons in result.pending.items():
        assert reasons, job
    for job in snap.jobs:
        unplaced = [
            t for t in job.tasks if t.status is TaskStatus.PENDING and t.uid not in {b.task for b in binds}
        ]
        if unplaced:
            assert job.uid in result.pending, job.uid


@settings(max_examples=40, deadline=None)
@given(clusters())
def test_session_is_deterministic(snap: ClusterSnapshot) -> None:
    first, second = run_session(snap, CONFIG, NOW), run_session(snap, CONFIG, NOW)
    assert first.decisions == second.decisions
    assert first.pipelined == second.pipelined
    assert first.pending == second.pending
