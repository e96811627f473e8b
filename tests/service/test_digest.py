"""The service's fast input digest is byte for byte the core's ``snapshot_digest``."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from scheduler.core.snapshot import (
    ClusterSnapshot,
    HyperNode,
    HyperNodeMember,
    Job,
    LabelSelector,
    NetworkTopology,
    Node,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodAffinityTerm,
    PodGroupPhase,
    PriorityClass,
    Queue,
    Taint,
    Task,
    TaskStatus,
    Toleration,
    TopologySpreadConstraint,
    snapshot_digest,
)
from scheduler.service import digest
from scheduler.service.digest import input_digest

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SELECTOR = LabelSelector(
    match_labels=(("app", "train"),),
    match_expressions=(NodeSelectorRequirement(key="tier", operator="NotIn", values=("batch",)),),
)


def _rich() -> ClusterSnapshot:
    affinity = (
        NodeSelectorTerm(
            match_expressions=(
                NodeSelectorRequirement(key="gpu", operator="In", values=("a100", "h100")),
                NodeSelectorRequirement(key="zone", operator="Exists"),
            )
        ),
    )
    tasks = tuple(
        Task(
            namespace="ml",
            name=f"train-worker-{i}",
            resources={"cpu": 4000, "nvidia.com/gpu": 8, "memory": 2**34},
            status=status,
            node=None if status is TaskStatus.PENDING else "g2",
            role="worker",
            priority=None if i % 2 else 1000,
            preemptable=bool(i % 2),
            node_selector={"pool": "gpu"},
            tolerations=(Toleration(key="gpu", operator="Exists", effect="NoSchedule"), Toleration()),
            required_affinity=affinity,
            preemption_policy="Never" if i == 1 else None,
            priority_class="high" if i == 0 else None,
            created=T0 if i else None,
            # The pod-level fields, left out while empty: on one task of three.
            labels={"app": "train", "volcano.sh/task-spec": "worker"} if i == 0 else {},
            pod_affinity=(PodAffinityTerm("zone", SELECTOR, ("ml", "data")),) if i == 0 else (),
            pod_anti_affinity=(PodAffinityTerm("kubernetes.io/hostname"),) if i == 0 else (),
            topology_spread=(TopologySpreadConstraint(1, "zone", "ScheduleAnyway", SELECTOR, None),)
            if i == 0
            else (),
            scheduling_gates=("quota",) if i == 0 else (),
        )
        for i, status in enumerate((TaskStatus.PENDING, TaskStatus.RUNNING, TaskStatus.RELEASING))
    )
    return ClusterSnapshot(
        nodes=(
            Node(
                name="g2",
                allocatable={"cpu": 64000, "pods": 110, "nvidia.com/gpu": 8},
                labels={"gpu": "h100"},
            ),
            Node(
                name="g1",
                allocatable={"cpu": 1},
                taints=(Taint(key="gpu", effect="NoSchedule"),),
                unschedulable=True,
            ),
        ),
        queues=(
            Queue(name="research", weight=3, capability={"nvidia.com/gpu": 80}, parent="root", created=T0),
            Queue(name="default", reclaimable=False, state="Closed"),
        ),
        priority_classes=(
            PriorityClass(name="low", value=1),
            PriorityClass(name="high", value=1000, global_default=True),
        ),
        jobs=(
            Job(
                namespace="ml",
                name="train",
                queue="research",
                min_member=2,
                min_task_member={"worker": 2},
                min_resources={"cpu": 8000},
                priority_class="high",
                phase=PodGroupPhase.RUNNING,
                tasks=tasks,
                created=T0,
                annotations={"tephra.dev/sim-runtime": "30s"},
            ),
            Job(namespace="a", name="z", queue="default"),
        ),
    )


def test_equal_with_hypernodes_and_network_topology() -> None:
    rich = _rich()
    members = (
        HyperNodeMember("Node", exact="g1"),
        HyperNodeMember("Node", regex="^g"),
        HyperNodeMember("Node", labels=SELECTOR),
    )
    hypernodes = (
        HyperNode("s1", 1, members, "leaf"),
        HyperNode("s0", 1, (HyperNodeMember("Node", exact="g2"),)),
        HyperNode(
            "spine", 2, (HyperNodeMember("HyperNode", exact="s0"), HyperNodeMember("HyperNode", exact="s1"))
        ),
    )
    train = dataclasses.replace(rich.jobs[0], network_topology=NetworkTopology("soft", None, "leaf"))
    snapshot = dataclasses.replace(rich, hypernodes=hypernodes, jobs=(train, rich.jobs[1]))
    assert input_digest(snapshot) == snapshot_digest(snapshot)
    assert input_digest(snapshot) != input_digest(rich)


def test_the_specialised_encoders_describe_the_current_snapshot_types() -> None:
    assert digest.SPECIALISED  # else the service silently runs at the core's speed


def test_equal_to_the_core_digest_on_every_field_kind() -> None:
    snapshot = _rich()
    assert input_digest(snapshot) == snapshot_digest(snapshot)
    assert input_digest(ClusterSnapshot()) == snapshot_digest(ClusterSnapshot())


def test_equal_on_snapshots_built_from_folded_states() -> None:
    from scheduler.snapshot_builder import build_snapshot
    from tests.service.helpers import job, node, queue
    from tests.service.test_snapshot_builder import _fold  # the builder tests' states

    state = _fold([queue(), node("n1"), node("n2", ready=False), job("x", replicas=3), job("y", replicas=1)])
    snapshot = build_snapshot(state)
    assert input_digest(snapshot) == snapshot_digest(snapshot)
