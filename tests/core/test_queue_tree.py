"""capacity's hierarchical mode: the queue tree's limits, its refusals and ancestorReclaimLevel.

The scenarios FID-08..10 pin the whole-session behaviour; these pin the arithmetic of
``checkHierarchicalQueue`` and the reclaim rules one at a time.
"""

from __future__ import annotations

from datetime import UTC, datetime
from fractions import Fraction

from scheduler.core.config import SchedulerConfig, parse_scheduler_config
from scheduler.core.framework import Session
from scheduler.core.plugins.capacity import CapacityPlugin
from scheduler.core.plugins.queue_tree import ROOT, UNLIMITED, build_queue_tree
from scheduler.core.snapshot import Job, PodGroupPhase, Queue, TaskStatus
from tests.core.builders import job, node, snapshot, task

NOW = datetime(2026, 1, 1, tzinfo=UTC)
CPU = 1000


def _config(level: int) -> SchedulerConfig:
    capacity: dict[str, object] = {"name": "capacity", "enableHierarchy": True}
    if level:
        capacity["arguments"] = {"ancestorReclaimLevel": level}
    return parse_scheduler_config(
        {"actions": "enqueue, allocate, reclaim", "tiers": [{"plugins": [capacity]}]}
    )


def _session(queues: list[Queue], jobs: list[Job], level: int = 0) -> tuple[Session, CapacityPlugin]:
    config = _config(level)
    ssn = Session(snapshot([node("n1", cpu=16, gpu=8)], jobs, queues), config, NOW)
    plugin = CapacityPlugin(config.tiers[0].plugins[0], 0)
    plugin.on_session_open(ssn)
    return ssn, plugin


def test_children_inherit_capability_and_split_the_parent_after_guarantees() -> None:
    queues = [
        Queue("eng", capability={"cpu": 10 * CPU, "nvidia.com/gpu": 4}, deserved={"cpu": 5 * CPU}),
        Queue("eng-a", parent="eng", guarantee={"cpu": 3 * CPU}, deserved={"cpu": 2 * CPU}),
        Queue("eng-b", parent="eng", capability={"cpu": 9 * CPU}, guarantee={"cpu": 1 * CPU}),
    ]
    ssn, _ = _session(queues, [])
    tree = build_queue_tree(ssn)
    assert tree.problem is None
    assert tree.ancestors["eng-a"] == (ROOT, "eng")
    assert tree.attrs[ROOT].real_capability["cpu"] == UNLIMITED  # root is unlimited, not the cluster's 16
    assert tree.attrs["eng"].real_capability["cpu"] == 10 * CPU
    # (10 - (3 + 1)) + own guarantee; eng-a inherits the gpu cap, eng-b keeps its own cpu cap
    assert tree.attrs["eng-a"].real_capability == {
        "cpu": Fraction(9 * CPU),
        "memory": UNLIMITED,
        "nvidia.com/gpu": 4,
    }
    assert tree.attrs["eng-b"].real_capability["cpu"] == 7 * CPU
    assert tree.attrs["eng-a"].deserved == {"cpu": Fraction(3 * CPU)}  # floored at the guarantee
    assert tree.attrs[ROOT].deserved == {"cpu": Fraction(5 * CPU)}  # the sum of its children's


def test_a_leafs_usage_counts_at_every_ancestor() -> None:
    running = [task("a", i, cpu=2, status=TaskStatus.RUNNING, on="n1") for i in range(2)]
    jobs = [job("a", running, queue="eng-a", phase=PodGroupPhase.RUNNING)]
    _ssn, plugin = _session([Queue("eng"), Queue("eng-a", parent="eng")], jobs)
    for name in ("eng-a", "eng", ROOT):
        assert plugin.attrs[name].allocated["cpu"] == 4 * CPU


def test_unknown_parents_and_cycles_make_the_tree_unusable() -> None:
    ssn, _ = _session([Queue("a", parent="nowhere")], [])
    assert build_queue_tree(ssn).problem == "queue a has parent nowhere, which does not exist"
    ssn, _ = _session([Queue("a", parent="b"), Queue("b", parent="a")], [])
    assert build_queue_tree(ssn).problem == "queues a -> b -> a form a cycle through spec.parent"


def test_an_explicit_root_capability_binds_the_whole_tree() -> None:
    _ssn, plugin = _session([Queue(ROOT, capability={"cpu": 2 * CPU}), Queue("a")], [])
    assert plugin.attrs["a"].real_capability["cpu"] == 2 * CPU


def _reclaim_setup(level: int) -> tuple[Session, CapacityPlugin]:
    """eng (deserved 8) holds eng-a (deserved 0) and eng-b; eng-b runs 4 cpu over nothing."""
    queues = [
        Queue("eng", deserved={"cpu": 8 * CPU}),
        Queue("eng-a", parent="eng"),
        Queue("eng-b", parent="eng", deserved={"cpu": 2 * CPU}),
        Queue("ops", deserved={"cpu": 1 * CPU}),
    ]
    jobs = [
        job(
            "b",
            [task("b", i, status=TaskStatus.RUNNING, on="n1") for i in range(4)],
            queue="eng-b",
            min_member=1,
            phase=PodGroupPhase.RUNNING,
        ),
        job("a", [task("a", 0)], queue="eng-a", min_member=1),
    ]
    return _session(queues, jobs, level)


def test_ancestor_reclaim_level_lets_a_queue_under_its_parents_deserved_reclaim() -> None:
    ssn, plugin = _reclaim_setup(level=0)
    reclaimer = ssn.jobs["ns/a"].tasks[0]
    eng_a = ssn.queues["eng-a"]
    assert not plugin._preemptive(eng_a, reclaimer)  # eng-a has no deserved of its own
    ssn, plugin = _reclaim_setup(level=1)
    assert plugin._preemptive(ssn.queues["eng-a"], ssn.jobs["ns/a"].tasks[0])  # eng: 0 + 1 <= 8


def test_victim_queues_sharing_deeper_ancestors_go_first() -> None:
    _ssn, plugin = _reclaim_setup(level=0)
    tree = plugin.tree
    assert tree is not None
    assert tree.common_depth("eng-a", "eng-b") == 1
    assert tree.common_depth("eng-a", "ops") == 0
