"""Volcano / Kubernetes manifests (YAML or JSON, multi-document) -> Tephra events.

The ``tephra submit`` door (also the HTTP API's and the kube bridge's): each
kind is read by the shared manifest model (:mod:`scheduler.manifest`, which
``tephra simulate`` reads it with too: the Volcano Job defaults, the derived
``minResources``, the pod spec) and turned here into its event:

==============================================  =======================
``batch.volcano.sh/v1alpha1 Job``               JobSubmitted
``scheduling.volcano.sh/v1beta1 PodGroup``      JobSubmitted, with the Pods that name it
``v1 Pod`` naming no PodGroup                   JobSubmitted (a one-pod gang)
``scheduling.volcano.sh/v1beta1 Queue``         QueueUpserted
``scheduling.k8s.io/v1 PriorityClass``          PriorityClassUpserted
``v1 Node``                                     NodeReported
``topology.volcano.sh/v1alpha1 HyperNode``      HyperNodeUpserted
``tephra.dev/v1alpha1 SchedulerConfiguration``  SchedulerConfigured
==============================================  =======================

What is particular to a submission stays here: the annotations' size limit and
the simulated runtime, the names the projector would refuse, refusing what
no later event could undo (a Pod's hand-set ``spec.priority``), and warning
that ``schedulingGates`` (kept and honoured) are removed by nothing in Tephra yet.

A VolcanoJob's ``spec.networkTopology`` and HyperNode documents are read by
:mod:`scheduler.topology_spec`, as ``tephra simulate`` reads them.

Parsing is all-or-nothing: every document of every file is checked, and any
problem raises :class:`InvalidManifests` listing each :class:`ManifestError`
(file, document number, field path, what was expected), so a caller never
produces part of a submission.  Fields Kubernetes has but Tephra cannot honour
(pod affinity, preferred node affinity ...) are ignored with a
:class:`ManifestWarning` rather than silently.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, Literal, NoReturn, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from events.models import (
    DEFAULT_CLUSTER,
    Event,
    HyperNodeExactMember,
    HyperNodeLabelMember,
    HyperNodeMemberSpec,
    HyperNodeRegexMember,
    HyperNodeUpserted,
    HyperNodeUpsertedData,
    JobSubmitted,
    JobSubmittedData,
    NetworkTopologySpec,
    NodeReported,
    NodeReportedData,
    PriorityClassUpserted,
    PriorityClassUpsertedData,
    QueueUpserted,
    QueueUpsertedData,
    SchedulerConfigured,
    SchedulerConfiguredData,
    TaskSpec,
)
from events.models import LabelSelector as LabelSelectorModel
from events.names import dns_label, invalid_name, is_dns_label, is_dns_subdomain
from events.quantity import format_resources
from kube.sim_runtime import SIM_RUNTIME_ANNOTATION, SimRuntimeError, parse_duration
from scheduler.core.config import ConfigError, config_warnings, parse_scheduler_config
from scheduler.core.snapshot import HyperNodeMember, LabelSelector
from scheduler.manifest.cluster import read_node, read_priority_class, read_queue
from scheduler.manifest.pods import (
    GROUP_ANNOTATION,
    PodGroupManifest,
    PodManifest,
    PodSpecManifest,
    group_of,
    lone_pod_group,
    read_pod,
    read_podgroup,
    selector_model,
)
from scheduler.manifest.vcjob import read_volcano_job
from scheduler.podspec import (
    MISSING,
    PodSpecError,
)
from scheduler.topology_spec import (
    HYPERNODE_API_VERSION,
    hypernode_from_manifest,
    network_topology_from_spec,
    network_topology_warnings,
)

__all__ = [
    "ANNOTATIONS_MAX_BYTES",
    "PREEMPTABLE_KEY",
    "InvalidManifests",
    "ManifestError",
    "ManifestObject",
    "ManifestWarning",
    "Manifests",
    "load_manifest_files",
    "parse_manifests",
    "parse_object",
]

PREEMPTABLE_KEY = "volcano.sh/preemptable"

_MISSING: Any = MISSING  # one sentinel with scheduler.podspec, so its errors pass through
# libyaml's safe loader where PyYAML was built with it: about 8x faster than the pure-Python one
# (bench/http_api.py's YAML submissions); the same documents, errors and marks.
_YAML_LOADER: type[yaml.SafeLoader] | type[yaml.CSafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_M = TypeVar("_M", bound=BaseModel)
_T = TypeVar("_T")
_I = TypeVar("_I")

#: Kubernetes' limit on an object's annotations, keys and values together (TotalAnnotationSizeLimitB).
ANNOTATIONS_MAX_BYTES = 256 * 1024


# --------------------------------------------------------------------------- results and errors


@dataclass(frozen=True)
class ManifestError:
    """One problem in one document; ``document`` counts from 1 within ``file``."""

    file: str
    document: int
    field: str
    expected: str
    kind: str | None = None
    name: str | None = None

    def __str__(self) -> str:
        what = ""
        if self.kind:
            what = f" ({self.kind}{' ' + self.name if self.name else ''})"
        return f"{self.file}, document {self.document}{what}: {self.field}: {self.expected}"


class InvalidManifests(ValueError):
    """Raised when any document is invalid; nothing of the submission may be produced."""

    def __init__(self, errors: Sequence[ManifestError]) -> None:
        self.errors = tuple(errors)
        super().__init__("\n".join(str(e) for e in self.errors))


@dataclass(frozen=True)
class ManifestWarning:
    file: str
    document: int
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}, document {self.document}: {self.field}: {self.message}"


@dataclass(frozen=True)
class ManifestObject:
    """One document turned into its event; ``ref`` is what ``tephra submit`` prints (``job/ns/name``)."""

    ref: str
    event: Event
    file: str
    document: int


@dataclass(frozen=True)
class Manifests:
    objects: tuple[ManifestObject, ...]
    warnings: tuple[ManifestWarning, ...] = ()

    @property
    def events(self) -> list[Event]:
        return [o.event for o in self.objects]


# --------------------------------------------------------------------------- field access with paths


class _DocumentInvalid(Exception):
    def __init__(self, error: ManifestError) -> None:
        self.error = error


@dataclass
class _Doc:
    """The document being converted: where errors and warnings point."""

    file: str
    index: int
    kind: str | None = None
    name: str | None = None
    warnings: list[ManifestWarning] = field(default_factory=list)

    def fail(self, path: str, expected: str, got: Any = _MISSING) -> NoReturn:
        if got is not _MISSING:
            expected = f"{expected}, got {got!r}"
        raise _DocumentInvalid(ManifestError(self.file, self.index, path, expected, self.kind, self.name))

    def warn(self, path: str, message: str) -> None:
        self.warnings.append(ManifestWarning(self.file, self.index, path, message))


def _at(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
        key_text = f'["{key}"]'
        return f"{path}{key_text}" if path else key_text
    return f"{path}.{key}" if path else key


def _mapping(doc: _Doc, value: Any, path: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        doc.fail(path, "expected a mapping", value)
    return value


def _required(doc: _Doc, obj: Mapping[str, Any], key: str, path: str) -> Any:
    value = obj.get(key)
    if value is None:
        doc.fail(_at(path, key), "required field is missing")
    return value


def _string(doc: _Doc, value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        doc.fail(path, "expected a non-empty string", value)
    return value


def _name(
    doc: _Doc, meta: Mapping[str, Any], path: str, valid: Callable[[str], bool] = is_dns_subdomain
) -> str:
    name = _string(doc, _required(doc, meta, "name", path), _at(path, "name"))
    if not valid(name):
        doc.fail(_at(path, "name"), "expected a lowercase DNS name (letters, digits, '-')", name)
    return name


# --------------------------------------------------------------------------- conversion context


@dataclass(frozen=True)
class _Envelope:
    cluster: str
    source: str
    now: datetime
    new_id: Callable[[], str]

    def fields(self, subject: str) -> dict[str, Any]:
        """Envelope attributes; ``subject`` is ``<kind>/<id>`` as across the catalogue (``job/ns/name``)."""
        return {
            "id": self.new_id(),
            "source": self.source,
            "time": self.now,
            "subject": subject,
            "cluster": self.cluster,
        }


# --------------------------------------------------------------------------- kinds


def _priority_class(doc: _Doc, obj: Mapping[str, Any], env: _Envelope) -> ManifestObject:
    pc = _shared(doc, read_priority_class, obj)
    data = PriorityClassUpsertedData(
        name=pc.name, value=pc.value, global_default=pc.global_default, preemption_policy=pc.preemption_policy
    )
    event = PriorityClassUpserted(data=data, **env.fields(f"priorityclass/{pc.name}"))
    return ManifestObject(f"priorityclass/{pc.name}", event, doc.file, doc.index)


def _queue(doc: _Doc, obj: Mapping[str, Any], env: _Envelope) -> ManifestObject:
    queue = _shared(doc, read_queue, obj)
    data = _event_data(
        doc,
        QueueUpsertedData,
        # resources as quantity strings: an integer given to the model is read as a quantity
        {
            "name": queue.name,
            "weight": queue.weight,
            "capability": format_resources(queue.capability),
            "deserved": format_resources(queue.deserved),
            "guarantee": format_resources(queue.guarantee),
            "reclaimable": queue.reclaimable,
            "priority": queue.priority,
            "parent": queue.parent,
            "state": queue.state,
        },
    )
    event = QueueUpserted(data=data, **env.fields(f"queue/{queue.name}"))
    return ManifestObject(f"queue/{queue.name}", event, doc.file, doc.index)


def _node(doc: _Doc, obj: Mapping[str, Any], env: _Envelope) -> ManifestObject:
    node = _shared(doc, read_node, obj)
    data = _event_data(
        doc,
        NodeReportedData,
        # resources as quantity strings: an integer given to the model is read as a quantity
        {
            "name": node.name,
            "allocatable": format_resources(node.allocatable),
            "labels": node.labels,
            "taints": list(node.taints),
            "unschedulable": node.unschedulable,
            "ready": node.ready,
        },
    )
    return ManifestObject(
        f"node/{node.name}", NodeReported(data=data, **env.fields(f"node/{node.name}")), doc.file, doc.index
    )


def _scheduler_configuration(doc: _Doc, obj: Mapping[str, Any], env: _Envelope) -> ManifestObject:
    meta = _mapping(doc, obj.get("metadata"), "metadata")
    name = _name(doc, meta, "metadata") if meta.get("name") is not None else "default"
    doc.name = name
    # The fields sit under spec (Kubernetes shape) or at the top level (volcano-scheduler.conf shape).
    if "spec" in obj:
        body, base = _mapping(doc, obj["spec"], "spec"), "spec"
        stray = sorted(k for k in ("actions", "tiers", "configurations", "metrics") if k in obj)
        if stray:
            doc.fail(stray[0], "give actions, tiers and configurations either under spec or at the top level")
    else:
        body, base = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}, ""
    try:
        spec = parse_scheduler_config(body).to_spec()
    except ConfigError as exc:
        doc.fail(f"{base}.{exc.where}" if base else exc.where, exc.why)
    for path, why in config_warnings(body):
        doc.warn(f"{base}.{path}" if base else path, why)
    event = SchedulerConfigured(
        data=SchedulerConfiguredData(config=spec), **env.fields(f"schedulerconfiguration/{name}")
    )
    return ManifestObject(f"schedulerconfiguration/{name}", event, doc.file, doc.index)


# --------------------------------------------------------------------------- VolcanoJob


def _checked_annotations(doc: _Doc, annotations: dict[str, str]) -> dict[str, str]:
    size = sum(len(key.encode()) + len(value.encode()) for key, value in annotations.items())
    if size > ANNOTATIONS_MAX_BYTES:
        doc.fail(
            "metadata.annotations",
            f"too large: {size} bytes of keys and values; Kubernetes accepts at most {ANNOTATIONS_MAX_BYTES}"
            " (256 KiB) in all",
        )
    if SIM_RUNTIME_ANNOTATION in annotations:
        try:
            parse_duration(annotations[SIM_RUNTIME_ANNOTATION])
        except SimRuntimeError as exc:
            doc.fail(_at("metadata.annotations", SIM_RUNTIME_ANNOTATION), str(exc))
    return annotations


def _volcano_job(
    doc: _Doc, obj: Mapping[str, Any], env: _Envelope, priority_values: Mapping[str, int]
) -> ManifestObject:
    uid = _uid_of(obj)
    if uid is not None and all(is_dns_label(part) for part in uid.split("/")):
        doc.name = uid  # for errors before the model has read it
    job = _shared(doc, read_volcano_job, obj)
    doc.name = job.uid
    for path, why in job.ignored:
        doc.warn(path, why)
    tasks = [
        _event_data(
            doc,
            TaskSpec,
            {
                **_pod_fields(doc, task.pod.spec, f"spec.tasks[{i}].template.spec"),
                "name": task.name,
                "replicas": task.replicas,
                "min_available": task.min_available,
                "preemptable": task.pod.preemptable,
                "labels": task.pod.labels,
            },
        )
        for i, task in enumerate(job.tasks)
    ]
    data = _event_data(
        doc,
        JobSubmittedData,
        # resources as quantity strings: an integer given to the model is read as a quantity
        {
            "namespace": job.namespace,
            "name": job.name,
            "queue": job.queue,
            "priority_class": job.priority_class,
            "min_available": job.min_available,
            "min_resources": format_resources(
                job.min_resources(lambda name: priority_values.get(name, 0) if name else 0)
            ),
            "tasks": tasks,
            "labels": job.labels,
            "annotations": _checked_annotations(doc, dict(job.annotations)),
            "ttl_seconds_after_finished": job.ttl_seconds_after_finished,
            "network_topology": _job_network_topology(doc, _mapping(doc, obj.get("spec"), "spec")),
        },
    )
    return ManifestObject(
        f"job/{job.uid}", JobSubmitted(data=data, **env.fields(f"job/{job.uid}")), doc.file, doc.index
    )


def _pod_fields(doc: _Doc, pod: PodSpecManifest, pod_path: str) -> dict[str, Any]:
    """The TaskSpec fields a pod spec gives (read by the shared model); gates are kept, with a warning."""
    if pod.scheduling_gates:
        # Honoured as Kubernetes does (and `tephra simulate`): a gated pod waits until a
        # controller removes its gates.  Nothing in Tephra removes one yet, so say so.
        doc.warn(
            f"{pod_path}.schedulingGates",
            "the pods are not placed while they have gates (reason scheduling-gated), and nothing "
            "in Tephra removes a gate yet: the job waits until it is cancelled",
        )
    return {
        # resources as quantity strings: an integer given to the model is read as a quantity
        "resources": format_resources(pod.requests),
        "node_selector": pod.node_selector,
        "tolerations": list(pod.tolerations),
        "required_node_affinity": list(pod.required_node_affinity),
        "priority_class": pod.priority_class,
        "preemption_policy": pod.preemption_policy,
        "pod_affinity": list(pod.pod_affinity),
        "pod_anti_affinity": list(pod.pod_anti_affinity),
        "topology_spread": list(pod.topology_spread),
        "scheduling_gates": list(pod.scheduling_gates),
    }


# --------------------------------------------------------------------------- PodGroup and Pod

#: A PodGroup (or a bare Pod's one-pod gang) and the documents of its pods.
_GroupMembers = list[tuple[_Doc, PodManifest]]


def _event_data(doc: _Doc, model: type[_M], data: Mapping[str, Any]) -> _M:
    """An event's data from what the model read; a bound only the event knows is an error here,
    named by the event field (as the projector would name it), not an exception."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        doc.fail(
            f"(event data.{where})" if where else "(event data)", first["msg"], first.get("input", _MISSING)
        )


def _shared(doc: _Doc, read: Callable[[_I], _T], value: _I) -> _T:
    """A kind read by the shared manifest model (:mod:`scheduler.manifest`), its problems at ``doc``."""
    try:
        return read(value)
    except PodSpecError as exc:
        doc.fail(exc.path, exc.expected, exc.got)


def _pod_group_job(
    doc: _Doc,
    group: PodGroupManifest,
    pods: _GroupMembers,
    env: _Envelope,
    priority_values: Mapping[str, int],
    *,
    network_topology: NetworkTopologySpec | None = None,
) -> ManifestObject:
    """A PodGroup and its pods as one job: each pod a task ``<namespace>/<pod name>`` of its own spec,
    with its role, and the group's minMember, minTaskMember, minResources and networkTopology as given."""
    for path, value in group.cluster_state():
        doc.warn(path, f"{value!r} ignored: it is cluster state, and a submitted job starts Pending")
    if not pods:
        doc.fail(
            "metadata.name",
            f"no Pod in this submission names PodGroup {group.uid} in {GROUP_ANNOTATION}; "
            "submit a PodGroup together with its pods",
        )
    tasks: list[TaskSpec] = []
    for pod_doc, pod in sorted(pods, key=lambda member: member[1].name):
        for path, value in pod.cluster_state():
            pod_doc.warn(path, f"{value!r} ignored: it is cluster state; the scheduler places the pod")
        for path, why in pod.spec.ignored:
            pod_doc.warn(path, why)
        fields = _pod_fields(pod_doc, pod.spec, "spec")
        if pod.priority is not None:
            pod_class = pod.spec.priority_class
            expected = priority_values.get(pod_class) if pod_class else None
            if expected != pod.priority:
                known = f" ({expected})" if expected is not None else ""
                pod_doc.fail(
                    "spec.priority",
                    f"expected no value, or the value of the pod's PriorityClass{known}: Kubernetes' "
                    "Priority admission sets it from spec.priorityClassName",
                    pod.priority,
                )
        tasks.append(
            _event_data(
                pod_doc,
                TaskSpec,
                {
                    **fields,
                    "name": dns_label(pod.name),
                    "replicas": 1,
                    "preemptable": pod.preemptable,
                    "labels": pod.labels,
                    "pod_names": [pod.name],
                    "role": pod.role,
                    # A PodGroup's pods keep their own class (none: the cluster's default).
                    "inherits_job_priority_class": False,
                },
            )
        )
    if group.min_member > len(tasks):
        doc.warn(
            "spec.minMember",
            f"{group.min_member} pods needed but {len(tasks)} given: the gang waits for pods "
            "that no submission adds later",
        )
    data = _event_data(
        doc,
        JobSubmittedData,
        {
            "namespace": group.namespace,
            # A job name is a DNS label; a PodGroup's or a Pod's may be a subdomain: as the task's.
            "name": dns_label(group.name),
            "queue": group.queue,
            "priority_class": group.priority_class,
            "min_available": group.min_member,
            "min_resources": None if group.min_resources is None else format_resources(group.min_resources),
            "tasks": tasks,
            "labels": group.labels,
            "annotations": _checked_annotations(doc, dict(group.annotations)),
            "min_task_member": group.min_task_member,
            "network_topology": network_topology,
        },
    )
    job_id = data.job_id
    return ManifestObject(
        f"job/{job_id}", JobSubmitted(data=data, **env.fields(f"job/{job_id}")), doc.file, doc.index
    )


def _uid_of(value: Mapping[str, Any]) -> str | None:
    """``<namespace>/<name>`` as the document gives it, when it gives a name."""
    meta = value.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        return None
    namespace = meta.get("namespace") or "default"
    return f"{namespace}/{meta['name']}" if isinstance(namespace, str) else None


@dataclass
class _PodDocuments:
    """The PodGroups and Pods of a submission, read before any becomes a job: a PodGroup's job
    needs every pod that names it, wherever in the submission it comes."""

    models: dict[int, PodGroupManifest | PodManifest] = field(default_factory=dict)
    members: dict[str, _GroupMembers] = field(default_factory=dict)
    #: Each PodGroup's ``spec`` as given: its ``networkTopology`` is read as a VolcanoJob's.
    group_specs: dict[int, Mapping[str, Any]] = field(default_factory=dict)

    @classmethod
    def read(
        cls, documents: Sequence[tuple[_Doc, str, dict[str, Any]]], errors: list[ManifestError]
    ) -> _PodDocuments:
        found = cls()
        groups: dict[str, PodGroupManifest] = {}
        refused: set[str | None] = set()  # PodGroups already reported: their pods say nothing more
        for position, (doc, kind, value) in enumerate(documents):
            if kind in _POD_KINDS:
                doc.name = _uid_of(value)  # for errors before the model has read it
            try:
                if kind == "podgroup":
                    group = _shared(doc, read_podgroup, value)
                    doc.name = group.uid
                    groups.setdefault(group.uid, group)  # a second one is a duplicate job
                    found.models[position] = group
                    found.group_specs[position] = _mapping(doc, value.get("spec"), "spec")
                elif kind == "pod":
                    pod = _shared(doc, read_pod, value)
                    doc.name = pod.uid
                    found.models[position] = pod
            except _DocumentInvalid as exc:
                errors.append(exc.error)
                if kind == "podgroup":
                    refused.add(doc.name)
        for position, model in found.models.items():
            if isinstance(model, PodManifest) and model.group is not None:
                doc = documents[position][0]
                if f"{model.namespace}/{model.group}" in refused:
                    continue
                try:
                    group = _shared(doc, partial(group_of, groups=groups), model)
                except _DocumentInvalid as exc:
                    errors.append(exc.error)
                    continue
                found.members.setdefault(group.uid, []).append((doc, model))
        return found

    def job(
        self, position: int, doc: _Doc, env: _Envelope, priority_values: Mapping[str, int]
    ) -> tuple[ManifestObject, list[_Doc]] | None:
        """The job document ``position`` stands for, with the documents it was read from;
        None for a PodGroup's pod (its group's job holds it) or a document already refused."""
        model = self.models.get(position)
        if model is None or (isinstance(model, PodManifest) and model.group is not None):
            return None
        topology = None
        if isinstance(model, PodManifest):
            group, pods = lone_pod_group(model), [(doc, model)]
        else:
            group, pods = model, self.members.get(model.uid, [])
            topology = _job_network_topology(doc, self.group_specs[position])
        obj = _pod_group_job(doc, group, pods, env, priority_values, network_topology=topology)
        return obj, [doc, *(pod_doc for pod_doc, _ in pods if pod_doc is not doc)]


# --------------------------------------------------------------------------- network topology


def _job_network_topology(doc: _Doc, spec: Mapping[str, Any]) -> NetworkTopologySpec | None:
    """A VolcanoJob's or PodGroup's ``spec.networkTopology``, read by :mod:`scheduler.topology_spec`."""
    value = spec.get("networkTopology")
    try:
        topology = network_topology_from_spec(value, "spec.networkTopology")
    except PodSpecError as exc:
        doc.fail(exc.path, exc.expected, exc.got)
    for path, why in network_topology_warnings(value, "spec.networkTopology"):
        doc.warn(path, why)
    if topology is None:
        return None
    return NetworkTopologySpec(
        mode="soft" if topology.mode == "soft" else "hard",
        highest_tier_allowed=topology.highest_tier_allowed,
        highest_tier_name=topology.highest_tier_name,
    )


def _hypernode(doc: _Doc, obj: Mapping[str, Any], env: _Envelope) -> ManifestObject:
    """A ``topology.volcano.sh/v1alpha1`` HyperNode -> HyperNodeUpserted."""
    try:
        hypernode = hypernode_from_manifest(obj)
    except PodSpecError as exc:
        doc.fail(exc.path, exc.expected, exc.got)
    doc.name = hypernode.name
    data = HyperNodeUpsertedData(
        name=hypernode.name,
        tier=hypernode.tier,
        tier_name=hypernode.tier_name,
        members=[_hypernode_member(m) for m in hypernode.members],
    )
    ref = f"hypernode/{hypernode.name}"
    return ManifestObject(ref, HyperNodeUpserted(data=data, **env.fields(ref)), doc.file, doc.index)


def _hypernode_member(member: HyperNodeMember) -> HyperNodeMemberSpec:
    if member.exact is not None:
        kind: Literal["Node", "HyperNode"] = "HyperNode" if member.kind == "HyperNode" else "Node"
        return HyperNodeExactMember(type=kind, exact_match=member.exact)
    if member.regex is not None:
        return HyperNodeRegexMember(type="Node", regex_match=member.regex)
    return HyperNodeLabelMember(type="Node", label_match=_model_selector(member.labels))


def _model_selector(selector: LabelSelector | None) -> LabelSelectorModel:
    return selector_model(selector) or LabelSelectorModel()


# --------------------------------------------------------------------------- documents


_KINDS: dict[tuple[str, str], str] = {
    ("batch.volcano.sh/v1alpha1", "Job"): "job",
    ("scheduling.volcano.sh/v1beta1", "Queue"): "queue",
    ("scheduling.k8s.io/v1", "PriorityClass"): "priorityclass",
    ("v1", "Node"): "node",
    (HYPERNODE_API_VERSION, "HyperNode"): "hypernode",
    ("tephra.dev/v1alpha1", "SchedulerConfiguration"): "schedulerconfiguration",
    ("scheduling.volcano.sh/v1beta1", "PodGroup"): "podgroup",
    ("v1", "Pod"): "pod",
}


def _documents(file: str, text: str) -> Iterator[tuple[int, Any]]:
    """(1-based document number, parsed document); empty YAML documents are skipped like kubectl does."""
    if file.endswith(".json"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            error = ManifestError(file, 1, "(json)", f"not valid JSON: {exc.msg} at line {exc.lineno}")
            raise _DocumentInvalid(error) from None
        items = value if isinstance(value, list) else [value]
        yield from enumerate(items, start=1)
        return
    index = 0
    try:
        for index, value in enumerate(yaml.load_all(text, Loader=_YAML_LOADER), start=1):
            if value is not None:
                yield index, value
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise _DocumentInvalid(
            ManifestError(file, index + 1, "(yaml)", f"not valid YAML: {problem}{where}")
        ) from None


def _kind_of(doc: _Doc, value: Any) -> str:
    if not isinstance(value, dict):
        doc.fail("(document)", "expected a Kubernetes object (a mapping with apiVersion and kind)", value)
    api_version, kind = value.get("apiVersion"), value.get("kind")
    doc.kind = kind if isinstance(kind, str) else None
    if not isinstance(api_version, str) or not api_version:
        doc.fail("apiVersion", "required field is missing")
    if not isinstance(kind, str) or not kind:
        doc.fail("kind", "required field is missing")
    known = _KINDS.get((api_version, kind))
    if known is None:
        supported = ", ".join(f"{a} {k}" for a, k in _KINDS)
        doc.fail("kind", f"unsupported apiVersion/kind {api_version} {kind}; expected one of: {supported}")
    return known


def _priority_values(documents: Sequence[tuple[_Doc, str, dict[str, Any]]]) -> dict[str, int]:
    """PriorityClass values order a job's tasks when deriving minResources, so they are read first."""
    values: dict[str, int] = {}
    for _doc, kind, value in documents:
        if (
            kind == "priorityclass"
            and isinstance(value.get("value"), int)
            and isinstance(value.get("metadata"), dict)
        ):
            values[str(value["metadata"].get("name"))] = value["value"]
    return values


def parse_manifests(
    sources: Sequence[tuple[str, str]],
    *,
    cluster: str = DEFAULT_CLUSTER,
    source: str = "tephra://cli/submit",
    now: datetime,
    new_id: Callable[[], str] = lambda: str(uuid.uuid4()),
) -> Manifests:
    """Turn ``(file name, text)`` pairs into events, in document order; raise :class:`InvalidManifests`."""
    env = _Envelope(cluster=cluster, source=source, now=now, new_id=new_id)
    errors: list[ManifestError] = []
    documents: list[tuple[_Doc, str, dict[str, Any]]] = []
    for file, text in sources:
        try:
            for index, value in _documents(file, text):
                doc = _Doc(file, index)
                try:
                    documents.append((doc, _kind_of(doc, value), value))
                except _DocumentInvalid as exc:
                    errors.append(exc.error)
        except _DocumentInvalid as exc:
            errors.append(exc.error)

    priority_values = _priority_values(documents)

    pods = _PodDocuments.read(documents, errors)
    objects: list[ManifestObject] = []
    warnings: list[ManifestWarning] = []
    defined: dict[str, ManifestObject] = {}
    for position, (doc, kind, value) in enumerate(documents):
        try:
            if kind in _POD_KINDS:
                job = pods.job(position, doc, env, priority_values)
                if job is None:
                    continue
                obj, read_from = job
                _check_names(doc, obj)
            else:
                obj, read_from = _convert(doc, kind, value, env, priority_values), [doc]
        except _DocumentInvalid as exc:
            errors.append(exc.error)
            continue
        if obj.ref in defined:
            first = defined[obj.ref]
            errors.append(
                ManifestError(
                    doc.file,
                    doc.index,
                    "metadata.name",
                    f"duplicate {obj.ref} (first in {first.file}, document {first.document})",
                    doc.kind,
                    doc.name,
                )
            )
            continue
        defined[obj.ref] = obj
        objects.append(obj)
        warnings.extend(w for read in read_from for w in read.warnings)
    if errors:
        raise InvalidManifests(errors)
    return Manifests(tuple(objects), tuple(warnings))


def parse_object(
    value: Mapping[str, Any],
    *,
    origin: str,
    cluster: str = DEFAULT_CLUSTER,
    source: str,
    now: datetime,
    event_id: str,
    priority_values: Mapping[str, int] | None = None,
    members: Sequence[Mapping[str, Any]] = (),
) -> tuple[ManifestObject, tuple[ManifestWarning, ...]]:
    """One object already decoded (read from a Kubernetes apiserver) -> its event, as a document is.

    ``origin`` stands for the file name in errors and warnings (``vcjob team-a/train``);
    ``priority_values`` are the PriorityClass values known to the caller (a job's tasks are
    ordered by them when deriving minResources).  A PodGroup comes with its ``members``, the
    Pods that name it (documents 2, 3 ... in errors), and is read as a submission of them
    all is.  Raises :class:`InvalidManifests`.
    """
    env = _Envelope(cluster=cluster, source=source, now=now, new_id=lambda: event_id)
    doc = _Doc(origin, 1)
    try:
        kind = _kind_of(doc, value)
        if kind == "podgroup" and members:
            obj, read_from = _pod_group_object(doc, value, members, env, priority_values or {})
        else:
            if members:
                doc.fail("kind", "only a PodGroup is read with member pods")
            obj, read_from = _convert(doc, kind, value, env, priority_values or {}), [doc]
    except _DocumentInvalid as exc:
        raise InvalidManifests([exc.error]) from None
    return obj, tuple(w for read in read_from for w in read.warnings)


def _pod_group_object(
    doc: _Doc,
    value: Mapping[str, Any],
    members: Sequence[Mapping[str, Any]],
    env: _Envelope,
    priority_values: Mapping[str, int],
) -> tuple[ManifestObject, list[_Doc]]:
    """A PodGroup and its member Pods as one job, read as ``tephra submit`` reads them together."""
    documents: list[tuple[_Doc, str, dict[str, Any]]] = [(doc, "podgroup", dict(value))]
    for index, member in enumerate(members, start=2):
        member_doc = _Doc(doc.file, index)
        documents.append((member_doc, _kind_of(member_doc, member), dict(member)))
    errors: list[ManifestError] = []
    pods = _PodDocuments.read(documents, errors)
    if errors:
        raise _DocumentInvalid(errors[0])
    for position, (member_doc, _kind, _value) in enumerate(documents[1:], start=1):
        model = pods.models.get(position)
        if not isinstance(model, PodManifest) or model.group is None:
            member_doc.fail(
                _at("metadata.annotations", GROUP_ANNOTATION), f"expected a Pod naming PodGroup {doc.name}"
            )
    found = pods.job(0, doc, env, priority_values)
    if found is None:  # not reached: document 0 is a PodGroup read without error
        doc.fail("kind", "expected a PodGroup")
    obj, read_from = found
    _check_names(doc, obj)
    return obj, read_from


def load_manifest_files(
    paths: Sequence[Path],
    *,
    cluster: str = DEFAULT_CLUSTER,
    source: str = "tephra://cli/submit",
    now: datetime,
    new_id: Callable[[], str] = lambda: str(uuid.uuid4()),
) -> Manifests:
    """Read and parse files (``-`` is not special); an unreadable file is a :class:`ManifestError` too."""
    sources: list[tuple[str, str]] = []
    errors: list[ManifestError] = []
    for path in paths:
        try:
            sources.append((str(path), path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as exc:
            errors.append(ManifestError(str(path), 0, "(file)", f"cannot read: {exc}"))
    if errors:
        raise InvalidManifests(errors)
    return parse_manifests(sources, cluster=cluster, source=source, now=now, new_id=new_id)


def _convert(
    doc: _Doc, kind: str, value: Mapping[str, Any], env: _Envelope, priority_values: Mapping[str, int]
) -> ManifestObject:
    if kind == "job":
        obj = _volcano_job(doc, value, env, priority_values)
    elif kind == "pod":
        doc.name = _uid_of(value)
        pod = _shared(doc, read_pod, value)
        doc.name = pod.uid
        if pod.group is not None:
            doc.fail(
                _at("metadata.annotations", GROUP_ANNOTATION), "a PodGroup's pod is read with its PodGroup"
            )
        obj = _pod_group_job(doc, lone_pod_group(pod), [(doc, pod)], env, priority_values)
    elif kind == "podgroup":
        doc.fail("kind", "a PodGroup is read together with its pods (submit them in one go)")
    else:
        meta = value.get("metadata")
        if isinstance(meta, dict) and isinstance(meta.get("name"), str):
            doc.name = meta["name"]  # for errors before the model has read it
        obj = _CONVERTERS[kind](doc, value, env)
    _check_names(doc, obj)
    return obj


def _check_names(doc: _Doc, obj: ManifestObject) -> None:
    if (problem := invalid_name(obj.event)) is not None:
        # The projector would reject it (invalid-name): the same check as for raw events.
        where, _, why = problem.partition(": ")
        doc.fail(f"(event {where})", why)


_POD_KINDS = frozenset({"podgroup", "pod"})
_CONVERTERS: dict[str, Callable[[_Doc, Mapping[str, Any], _Envelope], ManifestObject]] = {
    "queue": _queue,
    "priorityclass": _priority_class,
    "node": _node,
    "hypernode": _hypernode,
    "schedulerconfiguration": _scheduler_configuration,
}
