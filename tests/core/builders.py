"""Fluent-ish builders for snapshots in core tests."""

from __future__ import annotations

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

GI = 2**30


def node(name: str, cpu: int = 8, mem_gi: int = 32, gpu: int = 0, pods: int = 110, **labels: str) -> Node:
    alloc = {"cpu": cpu * 1000, "memory": mem_gi * GI, "pods": pods}
    if gpu:
        alloc["nvidia.com/gpu"] = gpu
    return Node(name=name, allocatable=alloc, labels=labels)


def task(
    job: str,
    index: int,
    cpu: int = 1,
    gpu: int = 0,
    *,
    ns: str = "ns",
    status: TaskStatus = TaskStatus.PENDING,
    on: str | None = None,
    priority: int | None = None,
    preemptable: bool = True,
    selector: dict[str, str] | None = None,
) -> Task:
    res = {"cpu": cpu * 1000, "memory": GI}
    if gpu:
        res["nvidia.com/gpu"] = gpu
    return Task(
        namespace=ns,
        name=f"{job}-w-{index}",
        resources=res,
        status=status,
        node=on,
        priority=priority,
        preemptable=preemptable,
        node_selector=selector or {},
    )


def job(
    name: str,
    tasks: list[Task],
    *,
    queue: str = "q",
    min_member: int | None = None,
    phase: PodGroupPhase = PodGroupPhase.INQUEUE,
    priority_class: str | None = None,
    ns: str = "ns",
    min_resources: dict[str, int] | None = None,
) -> Job:
    return Job(
        namespace=ns,
        name=name,
        queue=queue,
        min_member=len(tasks) if min_member is None else min_member,
        phase=phase,
        tasks=tuple(tasks),
        priority_class=priority_class,
        min_resources=min_resources,
    )


def snapshot(
    nodes: list[Node],
    jobs: list[Job],
    queues: list[Queue] | None = None,
    classes: list[PriorityClass] | None = None,
) -> ClusterSnapshot:
    return ClusterSnapshot(
        nodes=tuple(nodes),
        queues=tuple(queues if queues is not None else [Queue("q")]),
        priority_classes=tuple(classes or ()),
        jobs=tuple(jobs),
    )
