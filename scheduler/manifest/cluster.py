"""Nodes, Queues and PriorityClasses as every door reads them.

``tephra submit`` turns each into its event (NodeReported, QueueUpserted,
PriorityClassUpserted); ``tephra simulate`` into the snapshot's Node, Queue
and PriorityClass.  The rules (what is required, defaults, bounds) live here
once.  Problems raise :class:`scheduler.podspec.PodSpecError` with the path.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final, Literal

from pydantic import BaseModel

from events.models import Taint
from scheduler.manifest.fields import (
    FROZEN,
    PREEMPTION_POLICIES,
    PreemptionPolicy,
    boolean,
    event_model,
    integer,
    mapping,
    name_of,
    one_of,
    required,
    resources,
    sequence,
    string,
    string_map,
    timestamp,
)
from scheduler.podspec import PodSpecError

__all__ = [
    "NodeManifest",
    "PriorityClassManifest",
    "QueueManifest",
    "read_node",
    "read_priority_class",
    "read_queue",
]

#: Volcano's bounds on a queue's weight (``spec.weight``, validated by its admission webhook).
QUEUE_WEIGHT_MAX: Final = 65535

QueueState = Literal["Open", "Closed", "Closing"]
_QUEUE_STATES: Final[dict[str, QueueState]] = {"Open": "Open", "Closed": "Closed", "Closing": "Closing"}


class NodeManifest(BaseModel):
    """A ``v1`` Node: what it can hold and which pods it takes."""

    model_config = FROZEN

    name: str
    allocatable: dict[str, int] = {}
    labels: dict[str, str] = {}
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    #: The ``Ready`` condition (absent: ready); a node not ready takes no new pods.
    ready: bool = True


def read_node(body: Mapping[str, Any]) -> NodeManifest:
    meta = mapping(body.get("metadata"), "metadata")
    spec = mapping(body.get("spec"), "spec")
    status = mapping(body.get("status"), "status")
    # A kubelet reports allocatable; hand-written nodes often give only capacity.
    if status.get("allocatable") is not None:
        allocatable = resources(status["allocatable"], "status.allocatable")
    else:
        allocatable = resources(status.get("capacity"), "status.capacity")
    taints = sequence(spec.get("taints"), "spec.taints")
    ready = True
    for i, raw in enumerate(sequence(status.get("conditions"), "status.conditions")):
        condition = mapping(raw, f"status.conditions[{i}]")
        if condition.get("type") == "Ready":
            ready = condition.get("status") == "True"
    return NodeManifest(
        name=name_of(meta),
        allocatable=allocatable,
        labels=string_map(meta.get("labels"), "metadata.labels"),
        taints=tuple(
            event_model(Taint, mapping(raw, f"spec.taints[{i}]"), f"spec.taints[{i}]")
            for i, raw in enumerate(taints)
        ),
        unschedulable=boolean(spec.get("unschedulable"), "spec.unschedulable", False),
        ready=ready,
    )


class QueueManifest(BaseModel):
    """A ``scheduling.volcano.sh/v1beta1`` Queue."""

    model_config = FROZEN

    name: str
    weight: int = 1
    capability: dict[str, int] = {}
    deserved: dict[str, int] = {}
    guarantee: dict[str, int] = {}
    reclaimable: bool = True
    priority: int = 0
    parent: str | None = None
    state: QueueState = "Open"
    created: datetime | None = None


def read_queue(body: Mapping[str, Any]) -> QueueManifest:
    meta = mapping(body.get("metadata"), "metadata")
    spec = mapping(body.get("spec"), "spec")
    status = mapping(body.get("status"), "status")
    weight = integer(spec.get("weight"), "spec.weight", 1, minimum=1)
    if weight > QUEUE_WEIGHT_MAX:
        raise PodSpecError("spec.weight", f"expected an integer <= {QUEUE_WEIGHT_MAX}", weight)
    state = one_of(
        _QUEUE_STATES, status.get("state") or "Open", "status.state", "expected Open, Closed or Closing"
    )
    guarantee = mapping(spec.get("guarantee"), "spec.guarantee")
    parent = spec.get("parent")
    return QueueManifest(
        name=name_of(meta),
        weight=weight,
        capability=resources(spec.get("capability"), "spec.capability"),
        deserved=resources(spec.get("deserved"), "spec.deserved"),
        guarantee=resources(guarantee.get("resource"), "spec.guarantee.resource"),
        reclaimable=boolean(spec.get("reclaimable"), "spec.reclaimable", True),
        priority=integer(spec.get("priority"), "spec.priority", 0),
        parent=None if parent is None else string(parent, "spec.parent"),
        state=state,
        created=timestamp(meta.get("creationTimestamp"), "metadata.creationTimestamp"),
    )


class PriorityClassManifest(BaseModel):
    """A ``scheduling.k8s.io/v1`` PriorityClass."""

    model_config = FROZEN

    name: str
    value: int
    global_default: bool = False
    preemption_policy: PreemptionPolicy = "PreemptLowerPriority"


def read_priority_class(body: Mapping[str, Any]) -> PriorityClassManifest:
    meta = mapping(body.get("metadata"), "metadata")
    name = name_of(meta)
    value = integer(required(body, "value", ""), "value", 0, minimum=None)
    policy = one_of(
        PREEMPTION_POLICIES,
        body.get("preemptionPolicy") or "PreemptLowerPriority",
        "preemptionPolicy",
        "expected PreemptLowerPriority or Never",
    )
    return PriorityClassManifest(
        name=name,
        value=value,
        global_default=boolean(body.get("globalDefault"), "globalDefault", False),
        preemption_policy=policy,
    )
