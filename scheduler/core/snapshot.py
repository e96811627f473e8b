"""The immutable input of a session: a snapshot of the cluster.

Everything here is a plain frozen dataclass holding tuples and (treated as
immutable) dicts, so the live scheduler can build a snapshot from the
projector's state and the scenario loader can build one from YAML, without
either depending on the other.

Identities (the same as Volcano's): a node and a queue are their names, a job
is ``<namespace>/<podgroup name>``, a task is ``<namespace>/<pod name>``.

Resources are integer dicts in Tephra's units (:mod:`events.quantity`): cpu in
millicores, everything else in whole units (bytes, counts).  A node's
``allocatable`` includes ``pods``; a task's ``resources`` are its container
requests *without* the implicit ``pods: 1`` that every task consumes (the
session adds it, see :attr:`Task.request`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum, StrEnum
from typing import Any, Final

__all__ = [
    "ClusterSnapshot",
    "HyperNode",
    "HyperNodeMember",
    "Job",
    "NetworkTopology",
    "Node",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "PodGroupPhase",
    "PriorityClass",
    "Queue",
    "Taint",
    "Task",
    "TaskStatus",
    "Toleration",
    "snapshot_digest",
]

PODS: Final = "pods"


class TaskStatus(StrEnum):
    """Volcano's task statuses (``pkg/scheduler/api/types.go``)."""

    PENDING = "Pending"
    PIPELINED = "Pipelined"
    ALLOCATED = "Allocated"
    BINDING = "Binding"
    BOUND = "Bound"
    RUNNING = "Running"
    RELEASING = "Releasing"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class PodGroupPhase(StrEnum):
    PENDING = "Pending"
    INQUEUE = "Inqueue"
    RUNNING = "Running"
    UNKNOWN = "Unknown"
    COMPLETED = "Completed"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str | None = None
    operator: str = "Equal"
    value: str | None = None
    effect: str | None = None


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """Terms are ORed; the requirements inside one term are ANDed.

    ``match_fields`` select by node field; Kubernetes supports only ``metadata.name``.
    """

    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """Kubernetes' ``metav1.LabelSelector``: ``match_labels`` and ``match_expressions`` ANDed;
    an empty selector matches every pod.  Expression operators: In, NotIn, Exists, DoesNotExist."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[NodeSelectorRequirement, ...] = ()


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """A required pod (anti-)affinity term: pods matching ``selector`` in ``namespaces`` (empty:
    the namespace of the pod that declares the term) within one ``topology_key`` domain.
    ``selector`` None matches no pod (Kubernetes' nil selector)."""

    topology_key: str
    selector: LabelSelector | None = None
    namespaces: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TopologySpreadConstraint:
    """A ``topologySpreadConstraints`` entry; the pods counted are those of the pod's own
    namespace matching ``selector`` (None: no pod)."""

    max_skew: int
    topology_key: str
    when_unsatisfiable: str = "DoNotSchedule"
    selector: LabelSelector | None = None
    min_domains: int | None = None


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    allocatable: Mapping[str, int]
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False


@dataclass(frozen=True, slots=True)
class Queue:
    name: str
    weight: int = 1
    capability: Mapping[str, int] = field(default_factory=dict)
    deserved: Mapping[str, int] = field(default_factory=dict)
    guarantee: Mapping[str, int] = field(default_factory=dict)
    reclaimable: bool = True
    priority: int = 0
    state: str = "Open"
    parent: str | None = None
    created: datetime | None = None


@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    value: int
    global_default: bool = False
    preemption_policy: str = "PreemptLowerPriority"


@dataclass(frozen=True, slots=True)
class Task:
    """One pod.  ``node`` is set for every status that occupies a node."""

    namespace: str
    name: str
    resources: Mapping[str, int]
    status: TaskStatus = TaskStatus.PENDING
    node: str | None = None
    role: str = ""
    #: pod ``.spec.priority``; ``None`` means Volcano's default task priority 1.
    priority: int | None = None
    preemptable: bool = True
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    required_affinity: tuple[NodeSelectorTerm, ...] = ()
    preemption_policy: str | None = None
    priority_class: str | None = None
    created: datetime | None = None
    #: the pod's ``schedulingGates`` names: while any remains, the pod is not placed.
    scheduling_gates: tuple[str, ...] = ()
    #: the pod's labels (what other pods' affinity terms and spread constraints select).
    labels: Mapping[str, str] = field(default_factory=dict)
    pod_affinity: tuple[PodAffinityTerm, ...] = ()
    pod_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    topology_spread: tuple[TopologySpreadConstraint, ...] = ()

    @property
    def uid(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def request(self) -> dict[str, int]:
        """The container requests plus the one ``pods`` unit every task consumes."""
        out = {k: v for k, v in self.resources.items() if v > 0 and k != PODS}
        out[PODS] = 1
        return out


@dataclass(frozen=True, slots=True)
class NetworkTopology:
    """A PodGroup's ``spec.networkTopology``: keep the gang inside one hyperNode up to a tier.

    ``mode`` is ``hard`` (a constraint) or ``soft`` (a preference: Volcano turns it into hard
    with the virtual cluster-top hyperNode's tier, so the tightest hyperNode that fits wins).
    ``highest_tier_name`` names a tier by a hyperNode's ``tierName`` (used when
    ``highest_tier_allowed`` is not given)."""

    mode: str = "hard"
    highest_tier_allowed: int | None = None
    highest_tier_name: str = ""


@dataclass(frozen=True, slots=True)
class HyperNodeMember:
    """One ``spec.members[]`` entry of a HyperNode: ``kind`` ``Node`` or ``HyperNode`` and one
    selector (Volcano ORs the ones given): an exact name, a regex over node names (Node members
    only), or a label selector over node labels (Node members only)."""

    kind: str
    exact: str | None = None
    regex: str | None = None
    labels: LabelSelector | None = None


@dataclass(frozen=True, slots=True)
class HyperNode:
    """A ``topology.volcano.sh/v1alpha1`` HyperNode: a network domain of nodes or hyperNodes.
    A lower ``tier`` is a closer (faster) domain."""

    name: str
    tier: int
    members: tuple[HyperNodeMember, ...] = ()
    tier_name: str = ""


@dataclass(frozen=True, slots=True)
class Job:
    """A PodGroup and its tasks."""

    namespace: str
    name: str
    queue: str
    min_member: int = 1
    min_task_member: Mapping[str, int] = field(default_factory=dict)
    min_resources: Mapping[str, int] | None = None
    priority_class: str | None = None
    phase: PodGroupPhase = PodGroupPhase.PENDING
    tasks: tuple[Task, ...] = ()
    created: datetime | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)
    network_topology: NetworkTopology | None = None

    @property
    def uid(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    nodes: tuple[Node, ...] = ()
    queues: tuple[Queue, ...] = ()
    priority_classes: tuple[PriorityClass, ...] = ()
    jobs: tuple[Job, ...] = ()
    hypernodes: tuple[HyperNode, ...] = ()


#: Fields added after archives were recorded: left out of the canonical form while empty, so a
#: snapshot without them keeps the digest it had before they existed.
OMITTED_WHEN_EMPTY: Final[Mapping[type, frozenset[str]]] = {
    Task: frozenset({"scheduling_gates", "labels", "pod_affinity", "pod_anti_affinity", "topology_spread"}),
    NodeSelectorTerm: frozenset({"match_fields"}),
    Job: frozenset({"network_topology"}),
}


def _canonical(value: Any) -> Any:
    """A JSON-able form with every mapping's keys sorted and enums as values."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): _canonical(value[k]) for k in sorted(value)}
    if isinstance(value, (tuple, list)):
        return [_canonical(v) for v in value]
    if hasattr(value, "__dataclass_fields__"):
        omitted = OMITTED_WHEN_EMPTY.get(type(value), frozenset())
        return {
            name: _canonical(getattr(value, name))
            for name in sorted(value.__dataclass_fields__)
            if not (name in omitted and not getattr(value, name))
        }
    return value


def snapshot_digest(snapshot: ClusterSnapshot) -> str:
    """sha256 hex of the canonical JSON of ``snapshot``.

    Collections are sorted by identity first, so two snapshots with the same
    content in a different order have the same digest; the result does not
    depend on ``PYTHONHASHSEED`` or the process.
    """
    body = {
        "nodes": sorted((_canonical(n) for n in snapshot.nodes), key=lambda n: n["name"]),
        "queues": sorted((_canonical(q) for q in snapshot.queues), key=lambda q: q["name"]),
        "priority_classes": sorted(
            (_canonical(p) for p in snapshot.priority_classes), key=lambda p: p["name"]
        ),
        "jobs": sorted(
            (
                {**_canonical(j), "tasks": sorted(_canonical(j.tasks), key=lambda t: t["name"])}
                for j in snapshot.jobs
            ),
            key=lambda j: (j["namespace"], j["name"]),
        ),
    }
    if snapshot.hypernodes:
        # Only when present: a snapshot without hyperNodes keeps the digest it had before them.
        body["hypernodes"] = sorted((_canonical(h) for h in snapshot.hypernodes), key=lambda h: h["name"])
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()
