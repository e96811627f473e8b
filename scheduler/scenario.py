"""Load K8s-shaped scenario files into (meta, ClusterSnapshot, SchedulerConfig).

A scenario is a multi-document YAML file whose first document is
``kind: Scenario`` (``spec.sessions``, ``spec.config``, ``spec.expect``) and
whose other documents are Node, Queue, PriorityClass, PodGroup, Pod and
``batch.volcano.sh/v1alpha1`` Job and ``topology.volcano.sh/v1alpha1`` HyperNode
objects (see the conformance README; HyperNodes and ``spec.networkTopology`` are read
by :mod:`scheduler.topology_spec`).  Each
kind is read by the shared manifest model (:mod:`scheduler.manifest`, as
``tephra submit`` reads it) and turned here into the snapshot: a VolcanoJob
into its derived PodGroup and pods ``<job>-<task>-<index>`` (semantics.md §8),
a PodGroup into a job holding the Pods that name it, a Pod naming none into a
one-pod gang; cluster state (a PodGroup's phase, a Pod's node and phase) is
where the simulation starts.  Volcano's
``default`` queue (weight 1, Open) exists unless the file declares its own, as
Volcano's scheduler creates it when it starts.

Every problem raises :class:`ScenarioError` naming the file, the document
index, the field and what was expected.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import yaml

from events.names import dns_label
from scheduler.core.config import ConfigError, SchedulerConfig, config_warnings, parse_scheduler_config
from scheduler.core.snapshot import (
    ClusterSnapshot,
    HyperNode,
    Job,
    NetworkTopology,
    Node,
    PodGroupPhase,
    PriorityClass,
    Queue,
    Taint,
    Task,
    TaskStatus,
)
from scheduler.manifest.cluster import read_node, read_priority_class, read_queue
from scheduler.manifest.fields import timestamp
from scheduler.manifest.pods import (
    PodGroupManifest,
    PodManifest,
    group_of,
    read_pod,
    read_podgroup,
)
from scheduler.manifest.vcjob import read_volcano_job
from scheduler.podspec import (
    MISSING,
    PodSpecError,
)
from scheduler.snapshot_builder import (
    NOT_READY_TAINT,
    affinity_term_of,
    node_term_of,
    spread_of,
    toleration_of,
)
from scheduler.topology_spec import (
    HYPERNODE_API_VERSION,
    hypernode_from_manifest,
    network_topology_from_spec,
    network_topology_warnings,
)

__all__ = ["Scenario", "ScenarioError", "load_scenario"]

_T = TypeVar("_T")
_I = TypeVar("_I")

DEFAULT_QUEUE = "default"


class ScenarioError(ValueError):
    def __init__(self, file: str, document: int | None, where: str, why: str) -> None:
        self.file = file
        self.document = document
        self.where = where
        self.why = why
        doc = f" document {document}" if document is not None else ""
        super().__init__(f"{file}:{doc} {where}: {why}")


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str
    sessions: int
    snapshot: ClusterSnapshot
    config: SchedulerConfig
    expect: Mapping[str, Any] = field(default_factory=dict)
    now: datetime | None = None
    #: Fields accepted with no effect, as ``"<file>: document <n>: <path>: <why>"``.
    warnings: tuple[str, ...] = ()


class _Doc:
    """One YAML document with error helpers that know where they are."""

    def __init__(self, file: str, index: int, body: Mapping[str, Any]) -> None:
        self.file, self.index, self.body = file, index, body

    def fail(self, where: str, why: str) -> ScenarioError:
        return ScenarioError(self.file, self.index, where, why)

    def mapping(self, value: Any, where: str) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.fail(where, f"expected a mapping, got {type(value).__name__}")
        return value

    def string(self, value: Any, where: str, *, required: bool = True) -> str:
        if value is None and not required:
            return ""
        if not isinstance(value, str) or (required and not value):
            raise self.fail(where, "expected a non-empty string")
        return value

    def integer(self, value: Any, where: str, default: int) -> int:
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(where, f"expected an integer, got {value!r}")
        return value


def _node(doc: _Doc) -> Node:
    node = _read(doc, read_node, doc.body)
    taints = tuple(Taint(t.key, t.value, t.effect) for t in node.taints)
    if not node.ready and NOT_READY_TAINT not in taints:  # as the live snapshot reads it
        taints = (*taints, NOT_READY_TAINT)
    return Node(
        name=node.name,
        allocatable=node.allocatable,
        labels=node.labels,
        taints=taints,
        unschedulable=node.unschedulable,
    )


def _queue(doc: _Doc) -> Queue:
    queue = _read(doc, read_queue, doc.body)
    return Queue(
        name=queue.name,
        weight=queue.weight,
        capability=queue.capability,
        deserved=queue.deserved,
        guarantee=queue.guarantee,
        reclaimable=queue.reclaimable,
        priority=queue.priority,
        state=queue.state,
        parent=queue.parent,
        created=queue.created,
    )


def _priority_class(doc: _Doc) -> PriorityClass:
    pc = _read(doc, read_priority_class, doc.body)
    return PriorityClass(
        name=pc.name,
        value=pc.value,
        global_default=pc.global_default,
        preemption_policy=pc.preemption_policy,
    )


def _pod_task(
    pod: PodManifest,
    *,
    classes: Mapping[str, PriorityClass],
    role: str | None = None,
    labels: Mapping[str, str] | None = None,
    job_priority_class: str | None = None,
) -> Task:
    """One task from a pod read by the shared model (:mod:`scheduler.manifest.pods`), its spec
    converted as the live snapshot converts a submitted one (:mod:`scheduler.snapshot_builder`)."""
    spec = pod.spec
    if pod.phase == "Pending":
        task_status = TaskStatus.BOUND if pod.node_name else TaskStatus.PENDING
    elif pod.phase == "Running":
        task_status = TaskStatus.RUNNING
    else:
        task_status = TaskStatus(pod.phase)
    if pod.deleting and task_status in (TaskStatus.RUNNING, TaskStatus.BOUND):
        task_status = TaskStatus.RELEASING
    pc_name = spec.priority_class or job_priority_class  # the job's when the template names none
    # Kubernetes' Priority admission: the named class, else the cluster's global default.
    pc = classes.get(pc_name) if pc_name else _global_default(classes)
    priority = pod.priority
    if priority is None and pc is not None:
        priority = pc.value  # the API server resolves it from the PriorityClass
    # The class's policy reaches the pod (Priority admission); its default PreemptLowerPriority is
    # left None, as scheduler.snapshot_builder leaves it: the same to the session.
    policy = spec.preemption_policy or (
        "Never" if pc is not None and pc.preemption_policy == "Never" else None
    )
    return Task(
        namespace=pod.namespace,
        name=pod.name,
        resources=spec.requests,
        status=task_status,
        node=pod.node_name,
        role=role if role is not None else pod.role,
        priority=priority,
        preemptable=pod.preemptable,
        node_selector=spec.node_selector,
        tolerations=tuple(toleration_of(t) for t in spec.tolerations),
        required_affinity=tuple(node_term_of(t) for t in spec.required_node_affinity),
        preemption_policy=policy,
        priority_class=pc_name,
        created=pod.created,
        scheduling_gates=spec.scheduling_gates,
        labels=dict(sorted((pod.labels if labels is None else labels).items())),
        pod_affinity=tuple(affinity_term_of(t) for t in spec.pod_affinity),
        pod_anti_affinity=tuple(affinity_term_of(t) for t in spec.pod_anti_affinity),
        topology_spread=tuple(spread_of(c) for c in spec.topology_spread),
    )


def _read(doc: _Doc, read: Callable[[_I], _T], body: _I, prefix: str = "") -> _T:
    """A kind read by the shared manifest model, its problems as this door's errors."""
    try:
        return read(body)
    except PodSpecError as exc:
        got = "" if exc.got is MISSING else f", got {exc.got!r}"
        raise doc.fail(f"{prefix}{exc.path}", f"{exc.expected}{got}") from exc


def _global_default(classes: Mapping[str, PriorityClass]) -> PriorityClass | None:
    # Kubernetes allows one; should several exist, the first by name (as scheduler.snapshot_builder).
    defaults = sorted((pc for pc in classes.values() if pc.global_default), key=lambda pc: pc.name)
    return defaults[0] if defaults else None


def _group_job(
    group: PodGroupManifest, tasks: tuple[Task, ...] = (), network_topology: NetworkTopology | None = None
) -> Job:
    return Job(
        namespace=group.namespace,
        # A PodGroup's or Pod's name may be a subdomain, a job's is a label: as tephra submit names it.
        name=dns_label(group.name),
        queue=group.queue,
        min_member=group.min_member,
        min_task_member=dict(group.min_task_member),
        min_resources=group.min_resources,
        priority_class=group.priority_class,
        phase=group.phase,
        tasks=tasks,
        created=group.created,
        annotations=dict(group.annotations),
        network_topology=network_topology,
    )


def _vcjob(doc: _Doc, classes: Mapping[str, PriorityClass]) -> Job:
    """A VolcanoJob read by the shared model: its derived PodGroup and every replica's pod."""
    job = _read(doc, read_volcano_job, doc.body)

    def priority_of(name: str | None) -> int:
        return classes[name].value if name is not None and name in classes else 0

    tasks = [
        _pod_task(
            task.pod.model_copy(update={"name": f"{job.name}-{task.name}-{index}"}),
            classes=classes,
            role=task.name,
            job_priority_class=job.priority_class,
        )
        for task in job.tasks
        for index in range(task.replicas)
    ]
    return Job(
        namespace=job.namespace,
        name=job.name,
        queue=job.queue,
        min_member=job.min_available,
        min_task_member={task.name: task.min_available for task in job.tasks},
        min_resources=job.min_resources(priority_of),
        priority_class=job.priority_class,
        phase=PodGroupPhase.PENDING,
        tasks=tuple(tasks),
        created=job.created,
        annotations=dict(job.annotations),
        network_topology=_network_topology(doc),
    )


def _network_topology(doc: _Doc) -> NetworkTopology | None:
    """A Job's or PodGroup's ``spec.networkTopology`` (:mod:`scheduler.topology_spec`)."""
    spec = doc.mapping(doc.body.get("spec"), "spec")
    return _read(
        doc,
        lambda value: network_topology_from_spec(value, "spec.networkTopology"),
        spec.get("networkTopology"),
    )


def _hypernode(doc: _Doc) -> HyperNode:
    return _read(doc, hypernode_from_manifest, doc.body)


_KINDS = {
    ("v1", "Node"),
    ("scheduling.volcano.sh/v1beta1", "Queue"),
    ("scheduling.k8s.io/v1", "PriorityClass"),
    ("scheduling.volcano.sh/v1beta1", "PodGroup"),
    ("v1", "Pod"),
    ("batch.volcano.sh/v1alpha1", "Job"),
    (HYPERNODE_API_VERSION, "HyperNode"),
}


def _read_documents(file: str) -> tuple[_Doc, list[tuple[str, _Doc]]]:
    """The Scenario document and the Kubernetes objects after it, kinds checked."""
    try:
        text = Path(file).read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(file, None, "file", f"cannot read: {exc.strerror}") from exc
    try:
        raw_docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise ScenarioError(file, None, "yaml", f"not valid YAML: {exc}") from exc
    docs = [(i, d) for i, d in enumerate(raw_docs) if d is not None]
    if not docs:
        raise ScenarioError(file, None, "file", "empty; expected a Scenario document first")
    first_index, first = docs[0]
    if not isinstance(first, Mapping) or first.get("kind") != "Scenario":
        raise ScenarioError(file, first_index, "kind", "the first document must be kind: Scenario")
    objects = []
    for index, body in docs[1:]:
        if not isinstance(body, Mapping):
            raise ScenarioError(file, index, "document", "expected a Kubernetes object (a mapping)")
        doc = _Doc(file, index, body)
        kind = (str(body.get("apiVersion")), str(body.get("kind")))
        if kind not in _KINDS:
            valid = ", ".join(f"{a} {k}" for a, k in sorted(_KINDS))
            raise doc.fail(
                "apiVersion/kind", f"unsupported object {kind[0]} {kind[1]}; expected one of: {valid}"
            )
        objects.append((kind[1], doc))
    return _Doc(file, first_index, first), objects


def _check_unique(objects: list[tuple[str, _Doc]]) -> None:
    seen: dict[tuple[str, str], int] = {}
    for kind, doc in objects:
        if kind == "PriorityClass":
            continue
        m = doc.mapping(doc.body.get("metadata"), "metadata")
        key = ("PodGroup" if kind == "Job" else kind, f"{m.get('namespace', '')}/{m.get('name')}")
        if key in seen:
            raise doc.fail("metadata.name", f"duplicate {kind} {key[1]} (first in document {seen[key]})")
        seen[key] = doc.index


def _attach_pod(
    doc: _Doc,
    jobs: dict[str, tuple[Job, list[Task]]],
    groups: Mapping[str, PodGroupManifest],
    classes: Mapping[str, PriorityClass],
    node_names: set[str],
) -> None:
    pod = _read(doc, read_pod, doc.body)
    group = _read(doc, partial(group_of, groups=groups), pod)
    task = _pod_task(pod, classes=classes)
    if task.node is not None and task.node not in node_names:
        raise doc.fail("spec.nodeName", f"no Node {task.node} in this file")
    if group.uid not in jobs:  # a pod without a PodGroup: its one-pod gang
        jobs[group.uid] = (_group_job(group), [])
    jobs[group.uid][1].append(task)


def _snapshot(objects: list[tuple[str, _Doc]]) -> ClusterSnapshot:
    _check_unique(objects)
    by_kind: dict[str, list[_Doc]] = {}
    for kind, doc in objects:
        by_kind.setdefault(kind, []).append(doc)
    classes = {pc.name: pc for pc in map(_priority_class, by_kind.get("PriorityClass", []))}
    nodes = [_node(doc) for doc in by_kind.get("Node", [])]
    queues = [_queue(doc) for doc in by_kind.get("Queue", [])]
    if all(q.name != DEFAULT_QUEUE for q in queues):
        # Volcano's scheduler creates `default` when it starts (scheduler.service.default_queue).
        queues.append(Queue(name=DEFAULT_QUEUE))
    jobs: dict[str, tuple[Job, list[Task]]] = {}
    groups: dict[str, PodGroupManifest] = {}
    for doc in by_kind.get("PodGroup", []):
        group = _read(doc, read_podgroup, doc.body)
        groups[group.uid] = group
        jobs[group.uid] = (_group_job(group, network_topology=_network_topology(doc)), [])
    for doc in by_kind.get("Job", []):
        vcjob = _vcjob(doc, classes)
        jobs[vcjob.uid] = (vcjob, list(vcjob.tasks))
    node_names = {n.name for n in nodes}
    for doc in by_kind.get("Pod", []):
        _attach_pod(doc, jobs, groups, classes, node_names)
    hypernodes = [_hypernode(doc) for doc in by_kind.get("HyperNode", [])]
    return ClusterSnapshot(
        hypernodes=tuple(sorted(hypernodes, key=lambda h: h.name)),
        nodes=tuple(sorted(nodes, key=lambda n: n.name)),
        queues=tuple(sorted(queues, key=lambda q: q.name)),
        priority_classes=tuple(sorted(classes.values(), key=lambda p: p.name)),
        jobs=tuple(
            Job(**{**_fields(job), "tasks": tuple(sorted(tasks, key=lambda t: t.name))})
            for _, (job, tasks) in sorted(jobs.items())
        ),
    )


def load_scenario(path: Path | str) -> Scenario:
    """Parse one scenario file; every problem is a :class:`ScenarioError`."""
    head, objects = _read_documents(str(path))
    head_meta = head.mapping(head.body.get("metadata"), "metadata")
    spec = head.mapping(head.body.get("spec"), "spec")
    sessions = head.integer(spec.get("sessions"), "spec.sessions", 1)
    if sessions < 1:
        raise head.fail("spec.sessions", "expected a positive integer")
    try:
        config = parse_scheduler_config(head.mapping(spec.get("config"), "spec.config"))
    except ConfigError as exc:
        raise head.fail(f"spec.config.{exc.where}", exc.why) from exc
    return Scenario(
        name=str(head_meta.get("name") or Path(path).stem),
        description=str(head_meta.get("description") or ""),
        sessions=sessions,
        snapshot=_snapshot(objects),
        config=config,
        expect=head.mapping(spec.get("expect"), "spec.expect"),
        now=_read(head, partial(timestamp, path="spec.now"), spec.get("now")),
        warnings=_warnings(head, spec, objects),
    )


def _warnings(head: _Doc, spec: Mapping[str, Any], objects: list[tuple[str, _Doc]]) -> tuple[str, ...]:
    """What ``tephra submit`` warns about in the same documents (fields with no effect)."""
    found = [
        (head, f"spec.config.{path}", why)
        for path, why in config_warnings(head.mapping(spec.get("config"), "spec.config"))
    ]
    for kind, doc in objects:
        body_spec = doc.mapping(doc.body.get("spec"), "spec")
        if kind in ("Job", "PodGroup"):
            topology = network_topology_warnings(body_spec.get("networkTopology"), "spec.networkTopology")
            found.extend((doc, p, why) for p, why in topology)
        if kind == "Job":
            found.extend((doc, path, why) for path, why in _read(doc, read_volcano_job, doc.body).ignored)
        elif kind == "Pod":
            found.extend((doc, path, why) for path, why in _read(doc, read_pod, doc.body).spec.ignored)
    return tuple(f"{doc.file}: document {doc.index}: {path}: {why}" for doc, path, why in found)


def _fields(job: Job) -> dict[str, Any]:
    return {name: getattr(job, name) for name in job.__dataclass_fields__}
