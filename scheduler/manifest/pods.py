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

The pod's spec (requests, tolerations, affinity ...) is read by each door with
:mod:`scheduler.podspec`, as for a VolcanoJob's task template.  Problems raise
:class:`scheduler.podspec.PodSpecError` with the field path; each door turns it
into its own error type.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict

from events.quantity import QuantityError, parse_quantity
from scheduler.core.snapshot import PodGroupPhase
from scheduler.podspec import PodSpecError

__all__ = [
    "GROUP_ANNOTATION",
    "PREEMPTABLE_KEY",
    "QUEUE_ANNOTATION",
    "ROLE_KEY",
    "PodGroupManifest",
    "PodManifest",
    "group_of",
    "lone_pod_group",
    "read_pod",
    "read_podgroup",
]

#: The PodGroup a pod belongs to (Kubernetes' scheduler-plugins and Volcano both use it).
GROUP_ANNOTATION: Final = "scheduling.k8s.io/group-name"
#: The queue of a pod without a PodGroup (Volcano's annotation).
QUEUE_ANNOTATION: Final = "scheduling.volcano.sh/queue-name"
#: A pod's role in its job (``minTaskMember`` counts pods by it).
ROLE_KEY: Final = "volcano.sh/task-spec"
PREEMPTABLE_KEY: Final = "volcano.sh/preemptable"

_FROZEN: Final = ConfigDict(frozen=True, extra="forbid")
# Go's strconv.ParseBool, which Volcano reads the preemptable annotation and label with.
_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})
PodPhase = Literal["Pending", "Running", "Succeeded", "Failed"]
_POD_PHASES: Final[dict[object, PodPhase]] = {
    "Pending": "Pending",
    "Running": "Running",
    "Succeeded": "Succeeded",
    "Failed": "Failed",
}


def _at(path: str, key: str) -> str:
    return f'{path}["{key}"]' if "/" in key or "." in key else f"{path}.{key}"


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PodSpecError(path, "expected a mapping", value)
    return value


def _name(meta: Mapping[str, Any]) -> str:
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise PodSpecError("metadata.name", "expected a non-empty string", name)
    return name


def _namespace(meta: Mapping[str, Any]) -> str:
    namespace = meta.get("namespace") or "default"
    if not isinstance(namespace, str):
        raise PodSpecError("metadata.namespace", "expected a string", namespace)
    return namespace


def _string_map(value: Any, path: str) -> dict[str, str]:
    """Labels and annotations: string values only (quote ``"true"`` and numbers in YAML)."""
    out: dict[str, str] = {}
    for key, item in _mapping(value, path).items():
        if not isinstance(key, str) or not key:
            raise PodSpecError(path, "expected string keys", key)
        if not isinstance(item, str):
            raise PodSpecError(_at(path, key), "expected a string (quote it in YAML)", item)
        out[key] = item
    return dict(sorted(out.items()))


def _optional_string(value: Any, path: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise PodSpecError(path, "expected a string", value)
    return value


def _integer(value: Any, path: str, default: int, minimum: int = 0) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise PodSpecError(path, "expected an integer", value)
    if value < minimum:
        raise PodSpecError(path, f"expected an integer >= {minimum}", value)
    return value


def _timestamp(value: Any, path: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        parsed = value
    else:
        try:
            parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            raise PodSpecError(path, "expected an RFC 3339 timestamp", value) from None
    if parsed.tzinfo is None:
        raise PodSpecError(path, "expected a timestamp with a time zone (e.g. ...Z)", value)
    return parsed


def _resources(value: Any, path: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, quantity in _mapping(value, path).items():
        if not isinstance(name, str):
            raise PodSpecError(path, "expected resource names as strings", name)
        try:
            out[name] = parse_quantity(name, quantity)
        except QuantityError as exc:
            raise PodSpecError(
                _at(path, name),
                f"expected a Kubernetes quantity such as '500m', '2' or '8Gi' ({exc.why})",
                quantity,
            ) from None
    return dict(sorted(out.items()))


class PodGroupManifest(BaseModel):
    """A ``scheduling.volcano.sh/v1beta1`` PodGroup: one job, its tasks the pods that name it."""

    model_config = _FROZEN

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
    meta = _mapping(body.get("metadata"), "metadata")
    spec = _mapping(body.get("spec"), "spec")
    status = _mapping(body.get("status"), "status")
    phase = status.get("phase") or "Pending"
    try:
        pg_phase = PodGroupPhase(phase)
    except ValueError:
        raise PodSpecError(
            "status.phase", "expected Pending, Inqueue, Running, Unknown or Completed", phase
        ) from None
    min_task_member = {}
    for role, count in _mapping(spec.get("minTaskMember"), "spec.minTaskMember").items():
        min_task_member[str(role)] = _integer(count, _at("spec.minTaskMember", str(role)), 0)
    min_resources = spec.get("minResources")
    return PodGroupManifest(
        namespace=_namespace(meta),
        name=_name(meta),
        queue=_optional_string(spec.get("queue"), "spec.queue") or "default",
        min_member=_integer(spec.get("minMember"), "spec.minMember", 1),
        min_task_member=dict(sorted(min_task_member.items())),
        min_resources=None if min_resources is None else _resources(min_resources, "spec.minResources"),
        priority_class=_optional_string(spec.get("priorityClassName"), "spec.priorityClassName"),
        labels=_string_map(meta.get("labels"), "metadata.labels"),
        annotations=_string_map(meta.get("annotations"), "metadata.annotations"),
        created=_timestamp(meta.get("creationTimestamp"), "metadata.creationTimestamp"),
        phase=pg_phase,
    )


class PodManifest(BaseModel):
    """A ``v1`` Pod: a task of the PodGroup it names, or a one-pod gang of its own."""

    model_config = _FROZEN

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
    priority_class: str | None = None
    #: ``spec.priority``: set by Kubernetes' Priority admission from the class, never by hand.
    priority: int | None = None
    created: datetime | None = None
    #: The pod spec (requests, tolerations, affinity ...), read by each door with scheduler.podspec.
    spec: dict[str, Any] = {}
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
        raise PodSpecError(_at(where, PREEMPTABLE_KEY), 'expected "true" or "false"', raw)
    return True


def read_pod(body: Mapping[str, Any]) -> PodManifest:
    meta = _mapping(body.get("metadata"), "metadata")
    spec = _mapping(body.get("spec"), "spec")
    status = _mapping(body.get("status"), "status")
    labels = _string_map(meta.get("labels"), "metadata.labels")
    annotations = _string_map(meta.get("annotations"), "metadata.annotations")
    phase = _POD_PHASES.get(status.get("phase") or "Pending")
    if phase is None:
        raise PodSpecError("status.phase", "expected Pending, Running, Succeeded or Failed", status["phase"])
    node = _optional_string(spec.get("nodeName"), "spec.nodeName")
    if phase == "Running" and node is None:
        raise PodSpecError("spec.nodeName", "a Running pod must name its node")
    priority = spec.get("priority")
    if priority is not None:
        priority = _integer(priority, "spec.priority", 0, minimum=-(2**31))
    return PodManifest(
        namespace=_namespace(meta),
        name=_name(meta),
        group=annotations.get(GROUP_ANNOTATION) or None,
        queue=annotations.get(QUEUE_ANNOTATION) or None,
        role=annotations.get(ROLE_KEY, labels.get(ROLE_KEY, "")),
        labels=labels,
        annotations=annotations,
        preemptable=_preemptable(annotations, labels),
        priority_class=_optional_string(spec.get("priorityClassName"), "spec.priorityClassName"),
        priority=priority,
        created=_timestamp(meta.get("creationTimestamp"), "metadata.creationTimestamp"),
        spec=dict(spec),
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
            _at("metadata.annotations", GROUP_ANNOTATION), f"no PodGroup {uid} given", pod.group
        )
    return group


def lone_pod_group(pod: PodManifest) -> PodGroupManifest:
    """A pod without a PodGroup as the job of its own that holds it (``minMember`` 1)."""
    return PodGroupManifest(
        namespace=pod.namespace,
        name=pod.name,
        queue=pod.queue or "default",
        min_member=1,
        priority_class=pod.priority_class,
        created=pod.created,
        phase=PodGroupPhase.RUNNING if pod.phase == "Running" else PodGroupPhase.PENDING,
    )
