"""PodGroups and their Pods, and bare Pods, as every door reads them.

A PodGroup (``scheduling.volcano.sh/v1beta1``) is a job; the Pods that name it
in their ``scheduling.k8s.io/group-name`` annotation are its tasks, each
``<namespace>/<pod name>``.  A Pod naming no group is a one-pod gang of its
own (job ``<namespace>/<pod name>``, ``minMember`` 1, its queue from the
``scheduling.volcano.sh/queue-name`` annotation), as the kube bridge reads it.

What a document says about the cluster rather than the request — a
PodGroup's ``status.phase``, a Pod's ``spec.nodeName``, ``status.phase`` and
``metadata.deletionTimestamp`` — is kept apart (:meth:`PodGroupManifest.cluster_state`,
:meth:`PodManifest.cluster_state`): the simulator starts from it, ``tephra
submit`` warns that it submits the request only.

The pod's spec (a Pod's, or a VolcanoJob task's template) is read once into
:class:`PodSpecManifest`, in the events' own sub-models, with
:mod:`scheduler.podspec`.  Problems raise :class:`scheduler.podspec.PodSpecError`
with the field path; each door turns it into its own error type.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final, Literal

from pydantic import BaseModel

from events.models import (
    LabelSelector as LabelSelectorModel,
)
from events.models import (
    LabelSelectorRequirement,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Toleration,
)
from events.models import (
    PodAffinityTerm as PodAffinityTermModel,
)
from events.models import (
    TopologySpreadConstraint as TopologySpreadModel,
)
from scheduler.core.snapshot import LabelSelector, PodAffinityTerm, PodGroupPhase, TopologySpreadConstraint
from scheduler.manifest.fields import (
    FROZEN,
    PREEMPTION_POLICIES,
    PreemptionPolicy,
    at,
    event_model,
    integer,
    mapping,
    name_of,
    namespace_of,
    one_of,
    optional_string,
    required,
    resources,
    sequence,
    string_map,
    timestamp,
)
from scheduler.podspec import (
    PodSpecError,
    ignored_pod_fields,
    match_fields,
    pod_constraints,
    pod_requests,
    scheduling_gates,
)

__all__ = [
    "GROUP_ANNOTATION",
    "PREEMPTABLE_KEY",
    "QUEUE_ANNOTATION",
    "ROLE_KEY",
    "PodGroupManifest",
    "PodManifest",
    "PodSpecManifest",
    "group_of",
    "lone_pod_group",
    "read_pod",
    "read_pod_spec",
    "read_podgroup",
    "selector_model",
]

#: The PodGroup a pod belongs to (Kubernetes' scheduler-plugins and Volcano both use it).
GROUP_ANNOTATION: Final = "scheduling.k8s.io/group-name"
#: The queue of a pod without a PodGroup (Volcano's annotation).
QUEUE_ANNOTATION: Final = "scheduling.volcano.sh/queue-name"
#: A pod's role in its job (``minTaskMember`` counts pods by it).
ROLE_KEY: Final = "volcano.sh/task-spec"
PREEMPTABLE_KEY: Final = "volcano.sh/preemptable"

# Go's strconv.ParseBool, which Volcano reads the preemptable annotation and label with.
_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})
PodPhase = Literal["Pending", "Running", "Succeeded", "Failed"]
_GROUP_PHASES: Final[dict[str, PodGroupPhase]] = {phase.value: phase for phase in PodGroupPhase}
_POD_PHASES: Final[dict[str, PodPhase]] = {
    "Pending": "Pending",
    "Running": "Running",
    "Succeeded": "Succeeded",
    "Failed": "Failed",
}


# --------------------------------------------------------------------------- the pod spec


class PodSpecManifest(BaseModel):
    """The scheduling part of a pod spec (a Pod's, or a VolcanoJob task's template), in the
    events' own sub-models, which the simulator converts as the live snapshot does."""

    model_config = FROZEN

    #: The effective request per resource (:func:`scheduler.podspec.pod_requests`), no ``pods``.
    requests: dict[str, int] = {}
    node_selector: dict[str, str] = {}
    tolerations: tuple[Toleration, ...] = ()
    required_node_affinity: tuple[NodeSelectorTerm, ...] = ()
    priority_class: str | None = None
    preemption_policy: PreemptionPolicy | None = None
    pod_affinity: tuple[PodAffinityTermModel, ...] = ()
    pod_anti_affinity: tuple[PodAffinityTermModel, ...] = ()
    topology_spread: tuple[TopologySpreadModel, ...] = ()
    #: Honoured by the simulator (a gated pod is not placed); refused by ``tephra submit``.
    scheduling_gates: tuple[str, ...] = ()
    #: ``(path, why)`` of the scheduling fields accepted with no effect (each door warns).
    ignored: tuple[tuple[str, str], ...] = ()


def read_pod_spec(spec: Mapping[str, Any], path: str) -> PodSpecManifest:
    containers = required(spec, "containers", path)
    if not isinstance(containers, list) or not containers:
        raise PodSpecError(f"{path}.containers", "expected at least one container", containers)
    requests = pod_requests(spec, path)
    raw_policy = spec.get("preemptionPolicy")
    policy = None
    if raw_policy is not None:
        where = f"{path}.preemptionPolicy"
        policy = one_of(PREEMPTION_POLICIES, raw_policy, where, "expected PreemptLowerPriority or Never")
    constraints = pod_constraints(spec, path)
    return PodSpecManifest(
        requests=requests,
        node_selector=string_map(spec.get("nodeSelector"), f"{path}.nodeSelector"),
        tolerations=_tolerations(spec.get("tolerations"), f"{path}.tolerations"),
        required_node_affinity=_required_node_affinity(spec.get("affinity"), f"{path}.affinity"),
        priority_class=optional_string(spec.get("priorityClassName"), f"{path}.priorityClassName"),
        preemption_policy=policy,
        pod_affinity=tuple(_affinity_term_model(term) for term in constraints.affinity),
        pod_anti_affinity=tuple(_affinity_term_model(term) for term in constraints.anti_affinity),
        topology_spread=tuple(_spread_model(c) for c in constraints.topology_spread),
        scheduling_gates=scheduling_gates(spec, path),
        ignored=tuple(ignored_pod_fields(spec, path)),
    )


def _tolerations(value: Any, path: str) -> tuple[Toleration, ...]:
    out = []
    for i, raw in enumerate(sequence(value, path)):
        item = dict(mapping(raw, f"{path}[{i}]"))
        # Only NoExecute eviction uses tolerationSeconds; placement ignores it.
        item.pop("tolerationSeconds", None)
        out.append(event_model(Toleration, item, f"{path}[{i}]"))
    return tuple(out)


def _required_node_affinity(value: Any, path: str) -> tuple[NodeSelectorTerm, ...]:
    affinity = mapping(value, path)
    node_affinity = mapping(affinity.get("nodeAffinity"), f"{path}.nodeAffinity")
    req_path = f"{path}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    required_terms = mapping(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"), req_path)
    terms = []
    for t, raw in enumerate(
        sequence(required_terms.get("nodeSelectorTerms"), f"{req_path}.nodeSelectorTerms")
    ):
        term_path = f"{req_path}.nodeSelectorTerms[{t}]"
        term = mapping(raw, term_path)
        fields = [
            NodeSelectorRequirement.model_validate({"key": key, "operator": op, "values": list(values)})
            for key, op, values in match_fields(term, term_path)
        ]
        expressions = [
            event_model(
                NodeSelectorRequirement,
                mapping(e, f"{term_path}.matchExpressions[{i}]"),
                f"{term_path}.matchExpressions[{i}]",
            )
            for i, e in enumerate(sequence(term.get("matchExpressions"), f"{term_path}.matchExpressions"))
        ]
        terms.append(NodeSelectorTerm(match_expressions=expressions, match_fields=fields))
    return tuple(terms)


def selector_model(selector: LabelSelector | None) -> LabelSelectorModel | None:
    if selector is None:
        return None
    return LabelSelectorModel(
        match_labels=dict(selector.match_labels),
        match_expressions=[
            LabelSelectorRequirement.model_validate(
                {"key": r.key, "operator": r.operator, "values": list(r.values)}
            )
            for r in selector.match_expressions
        ],
    )


def _affinity_term_model(term: PodAffinityTerm) -> PodAffinityTermModel:
    """A required pod (anti-)affinity term as read by :mod:`scheduler.podspec`, in the event's form."""
    return PodAffinityTermModel(
        topology_key=term.topology_key,
        label_selector=selector_model(term.selector),
        namespaces=list(term.namespaces),
    )


def _spread_model(constraint: TopologySpreadConstraint) -> TopologySpreadModel:
    """A topology spread constraint as read by :mod:`scheduler.podspec`, in the event's form."""
    return TopologySpreadModel.model_validate(
        {
            "max_skew": constraint.max_skew,
            "topology_key": constraint.topology_key,
            "when_unsatisfiable": constraint.when_unsatisfiable,
            "label_selector": selector_model(constraint.selector),
            "min_domains": constraint.min_domains,
        }
    )


class PodGroupManifest(BaseModel):
    """A ``scheduling.volcano.sh/v1beta1`` PodGroup: one job, its tasks the pods that name it."""

    model_config = FROZEN

    namespace: str
    name: str
    queue: str = "default"
    min_member: int = 1
    #: Pods needed per role (``volcano.sh/task-spec``; ``""`` for pods without one), as given.
    min_task_member: dict[str, int] = {}
    min_resources: dict[str, int] | None = None
    priority_class: str | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    created: datetime | None = None
    #: ``status.phase``: cluster state (the simulator starts from it; a submission is Pending).
    phase: PodGroupPhase = PodGroupPhase.PENDING

    @property
    def uid(self) -> str:
        return f"{self.namespace}/{self.name}"

    def cluster_state(self) -> list[tuple[str, str]]:
        """``(path, value)`` of what the document says about the cluster rather than the request."""
        return [] if self.phase is PodGroupPhase.PENDING else [("status.phase", self.phase.value)]


def read_podgroup(body: Mapping[str, Any]) -> PodGroupManifest:
    meta = mapping(body.get("metadata"), "metadata")
    spec = mapping(body.get("spec"), "spec")
    status = mapping(body.get("status"), "status")
    pg_phase = one_of(
        _GROUP_PHASES,
        status.get("phase") or "Pending",
        "status.phase",
        "expected Pending, Inqueue, Running, Unknown or Completed",
    )
    min_task_member = {}
    for role, count in mapping(spec.get("minTaskMember"), "spec.minTaskMember").items():
        min_task_member[str(role)] = integer(count, at("spec.minTaskMember", str(role)), 0)
    min_resources = spec.get("minResources")
    return PodGroupManifest(
        namespace=namespace_of(meta),
        name=name_of(meta, valid=None),
        queue=optional_string(spec.get("queue"), "spec.queue") or "default",
        min_member=integer(spec.get("minMember"), "spec.minMember", 1),
        min_task_member=dict(sorted(min_task_member.items())),
        min_resources=None if min_resources is None else resources(min_resources, "spec.minResources"),
        priority_class=optional_string(spec.get("priorityClassName"), "spec.priorityClassName"),
        labels=string_map(meta.get("labels"), "metadata.labels"),
        annotations=string_map(meta.get("annotations"), "metadata.annotations"),
        created=timestamp(meta.get("creationTimestamp"), "metadata.creationTimestamp"),
        phase=pg_phase,
    )


class PodManifest(BaseModel):
    """A ``v1`` Pod: a task of the PodGroup it names, or a one-pod gang of its own."""

    model_config = FROZEN

    namespace: str
    name: str
    #: The PodGroup it belongs to (``scheduling.k8s.io/group-name``); None: a gang of its own.
    group: str | None = None
    #: ``scheduling.volcano.sh/queue-name``: the queue of a pod without a PodGroup.
    queue: str | None = None
    #: ``volcano.sh/task-spec`` (annotation, else label); ``""`` when it has none.
    role: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    #: ``volcano.sh/preemptable`` (annotation, else label), as Volcano reads it; default true.
    preemptable: bool = True
    #: ``spec.priority``: set by Kubernetes' Priority admission from the class, never by hand.
    priority: int | None = None
    created: datetime | None = None
    spec: PodSpecManifest
    # Cluster state (see cluster_state).
    node_name: str | None = None
    phase: PodPhase = "Pending"
    deleting: bool = False

    @property
    def uid(self) -> str:
        return f"{self.namespace}/{self.name}"

    def cluster_state(self) -> list[tuple[str, str]]:
        """``(path, value)`` of what the document says about the cluster rather than the request."""
        found: list[tuple[str, str]] = []
        if self.node_name is not None:
            found.append(("spec.nodeName", self.node_name))
        if self.phase != "Pending":
            found.append(("status.phase", self.phase))
        if self.deleting:
            found.append(("metadata.deletionTimestamp", "set"))
        return found


def _preemptable(annotations: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """Volcano reads the annotation first, then the label; absent means preemptable."""
    for where, values in (("metadata.annotations", annotations), ("metadata.labels", labels)):
        raw = values.get(PREEMPTABLE_KEY)
        if raw is None:
            continue
        if raw.strip() in _TRUE:
            return True
        if raw.strip() in _FALSE:
            return False
        raise PodSpecError(at(where, PREEMPTABLE_KEY), 'expected "true" or "false"', raw)
    return True


def read_pod(body: Mapping[str, Any]) -> PodManifest:
    meta = mapping(body.get("metadata"), "metadata")
    spec = mapping(body.get("spec"), "spec")
    status = mapping(body.get("status"), "status")
    labels = string_map(meta.get("labels"), "metadata.labels")
    annotations = string_map(meta.get("annotations"), "metadata.annotations")
    phase = one_of(
        _POD_PHASES,
        status.get("phase") or "Pending",
        "status.phase",
        "expected Pending, Running, Succeeded or Failed",
    )
    node = optional_string(spec.get("nodeName"), "spec.nodeName")
    if phase == "Running" and node is None:
        raise PodSpecError("spec.nodeName", "a Running pod must name its node")
    priority = spec.get("priority")
    if priority is not None:
        priority = integer(priority, "spec.priority", 0, minimum=None)
    return PodManifest(
        namespace=namespace_of(meta),
        name=name_of(meta, valid=None),
        group=annotations.get(GROUP_ANNOTATION) or None,
        queue=annotations.get(QUEUE_ANNOTATION) or None,
        role=annotations.get(ROLE_KEY, labels.get(ROLE_KEY, "")),
        labels=labels,
        annotations=annotations,
        preemptable=_preemptable(annotations, labels),
        priority=priority,
        created=timestamp(meta.get("creationTimestamp"), "metadata.creationTimestamp"),
        spec=read_pod_spec(spec, "spec"),
        node_name=node,
        phase=phase,
        deleting=bool(meta.get("deletionTimestamp")),
    )


def group_of(pod: PodManifest, groups: Mapping[str, PodGroupManifest]) -> PodGroupManifest:
    """The PodGroup ``pod`` names, or for a pod naming none its one-pod gang."""
    if pod.group is None:
        return lone_pod_group(pod)
    uid = f"{pod.namespace}/{pod.group}"
    group = groups.get(uid)
    if group is None:
        raise PodSpecError(
            at("metadata.annotations", GROUP_ANNOTATION), f"no PodGroup {uid} given", pod.group
        )
    return group


def lone_pod_group(pod: PodManifest) -> PodGroupManifest:
    """A pod without a PodGroup as the job of its own that holds it (``minMember`` 1)."""
    return PodGroupManifest(
        namespace=pod.namespace,
        name=pod.name,
        queue=pod.queue or "default",
        min_member=1,
        priority_class=pod.spec.priority_class,
        created=pod.created,
        phase=PodGroupPhase.RUNNING if pod.phase == "Running" else PodGroupPhase.PENDING,
    )
