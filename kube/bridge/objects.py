"""What the bridge reads in Kubernetes objects: pure functions of their JSON, no I/O.

Identity.  A pod of ours is the task ``ns/<pod name>`` whatever made it: a
Volcano Job ``ns/name`` is the Tephra job ``ns/name`` and its pods are
``<job>-<task>-<index>`` as Volcano's job controller names them; the pods
naming a PodGroup (``scheduling.k8s.io/group-name``) are the tasks of its job
``ns/<group>``, and a pod in no group is the job ``ns/<pod>`` of its own, as
``tephra submit`` reads the same objects (:mod:`scheduler.manifest.pods`).  A
job name that is no DNS label (longer than 63, or with dots) is shortened
with a digest, so the mapping is a function of the names alone: a restarted
bridge finds the same task for the same pod without storing anything.

Event ids are ``uuid5`` of the cluster and what the event records (an
object's uid and resourceVersion, a task and the seq of the state it leaves),
so a relist after ``410 Gone`` or a restart produces the same ids and the
archive keeps one of each.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Final

from events.names import dns_label
from kube.rest import JsonObject, JsonValue, json_int, json_list, json_object, json_str

__all__ = [
    "GROUP_ANNOTATION",
    "JOB_ANNOTATION",
    "KUBE_SOURCE_ANNOTATION",
    "TASK_ANNOTATION",
    "PodKind",
    "PodRef",
    "as_authored",
    "bridge_event_id",
    "creation_time",
    "gated",
    "legacy_pod_task",
    "pod_ref",
    "volcano_job_pods",
]

#: The PodGroup a pod belongs to (Kubernetes' scheduler-plugins and Volcano both use it).
GROUP_ANNOTATION: Final = "scheduling.k8s.io/group-name"
#: Set by Volcano's job controller (and the bridge playing it) on a Volcano Job's pods.
JOB_ANNOTATION: Final = "volcano.sh/job-name"
TASK_ANNOTATION: Final = "volcano.sh/task-spec"
#: On every job the bridge submits: what it was made from (``vcjob``, ``podgroup``, ``pod``), so a
#: restarted bridge knows its jobs in the projection and what to do when their pods are gone.
KUBE_SOURCE_ANNOTATION: Final = "tephra.dev/kube-source"
VOLCANO_JOB_API: Final = "batch.volcano.sh/v1alpha1"

# Fixed namespace of the bridge's event ids (any constant UUID works; this one is ours).
_ID_NAMESPACE: Final = uuid.UUID("0b6d0f7e-2c59-4e0e-8f3a-5b1c9e7d4a26")


def bridge_event_id(cluster: str, *parts: str) -> str:
    """The id of the event recording ``parts`` (kind, uid, resourceVersion ...) in ``cluster``."""
    return str(uuid.uuid5(_ID_NAMESPACE, "|".join((cluster, *parts))))


def creation_time(obj: JsonObject) -> datetime | None:
    """``metadata.creationTimestamp`` as an aware datetime (None when absent or malformed)."""
    text = json_str(obj, "metadata", "creationTimestamp")
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


class PodKind(StrEnum):
    VOLCANO_JOB = "vcjob"  # created by the bridge for a Volcano Job
    GROUP = "podgroup"  # a PodGroup's member
    LONE = "pod"  # a one-pod gang


@dataclass(frozen=True, slots=True)
class PodRef:
    """Where a pod of ours sits in Tephra: its task, its job, and what made it."""

    namespace: str
    name: str
    uid: str
    kind: PodKind
    group: str  # the Volcano Job, the PodGroup, or the pod's own name
    task_id: str
    job_id: str


def pod_ref(pod: JsonObject, *, job_controller: bool) -> PodRef | None:
    """The pod's place, or None for a pod without a name or namespace."""
    meta = json_object(pod, "metadata")
    namespace, name = json_str(meta, "namespace"), json_str(meta, "name")
    if not namespace or not name:
        return None
    uid = json_str(meta, "uid") or ""
    task = f"{namespace}/{name}"
    annotations = json_object(meta, "annotations")
    vcjob = annotations.get(JOB_ANNOTATION)
    if job_controller and isinstance(vcjob, str) and vcjob:
        return PodRef(namespace, name, uid, PodKind.VOLCANO_JOB, vcjob, task, f"{namespace}/{vcjob}")
    group = annotations.get(GROUP_ANNOTATION)
    if isinstance(group, str) and group:
        return PodRef(namespace, name, uid, PodKind.GROUP, group, task, f"{namespace}/{dns_label(group)}")
    return PodRef(namespace, name, uid, PodKind.LONE, name, task, f"{namespace}/{dns_label(name)}")


def legacy_pod_task(task_id: str, job_id: str, kind: str) -> str | None:
    """The pod's task id (``ns/<pod>``) for a task id a bridge gave before tasks were named
    after their pods: ``ns/<group>-<pod>-0`` (a PodGroup's pod), ``ns/<pod>-pod-0`` (a lone
    pod); None for an id of another form.  The jobs it submitted keep those ids until they end."""
    if not task_id.endswith("-0") or not task_id.startswith(f"{job_id}-"):
        return None
    if kind == PodKind.LONE:
        return job_id if task_id == f"{job_id}-pod-0" else None
    if kind == PodKind.GROUP:
        return f"{job_id.partition('/')[0]}/{task_id[len(job_id) + 1 : -2]}"
    return None


#: The tolerations Kubernetes' DefaultTolerationSeconds admission gives every pod without its own.
_ADMISSION_TOLERATIONS: Final[tuple[JsonObject, ...]] = tuple(
    {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
)


def as_authored(pod: JsonObject) -> JsonObject:
    """A pod as its author gave it, as far as scheduling reads it, so the bridge reads what
    ``tephra submit`` of the same manifest reads: without what admission computed.

    * ``spec.priority`` and ``spec.preemptionPolicy``: Priority admission sets both from the
      pod's PriorityClass (and refuses a pod giving other values); Tephra reads the class.
    * The ``not-ready`` and ``unreachable`` NoExecute tolerations (300 s) DefaultTolerationSeconds
      adds: they delay the eviction of a running pod; placement never depends on them, as a
      node tainted NoExecute for either condition carries its NoSchedule taint too.
    """
    spec = dict(json_object(pod, "spec"))
    spec.pop("priority", None)
    spec.pop("preemptionPolicy", None)
    tolerations = json_list(spec, "tolerations")
    if tolerations:
        kept = [t for t in tolerations if t not in _ADMISSION_TOLERATIONS]
        if kept:
            spec["tolerations"] = kept
        else:
            spec.pop("tolerations")
    return {**pod, "spec": spec}


def gated(pod: JsonObject) -> bool:
    """Whether the pod has ``spec.schedulingGates`` left (Kubernetes >= 1.26; v1.20 drops the field)."""
    return bool(json_list(pod, "spec", "schedulingGates"))


@dataclass(frozen=True, slots=True)
class PodPlan:
    """One pod the bridge creates for a Volcano Job."""

    name: str
    task: str
    body: JsonObject


def volcano_job_pods(
    job: JsonObject, *, default_scheduler: str = "tephra"
) -> tuple[JsonObject, list[PodPlan]]:
    """The PodGroup and the pods Volcano's job controller would create for ``job``.

    The PodGroup is named as the job (``minMember`` the job's ``minAvailable``,
    its queue and priority class); each task's ``replicas`` pods are
    ``<job>-<task>-<index>`` from the task's template, with the job's
    ``schedulerName`` (``default_scheduler`` when it gives none), the group and
    job annotations, and the job as their controller (owner reference).
    """
    meta = json_object(job, "metadata")
    name = json_str(meta, "name") or ""
    namespace = json_str(meta, "namespace") or "default"
    spec = json_object(job, "spec")
    scheduler = json_str(spec, "schedulerName") or default_scheduler
    owner: JsonObject = {
        "apiVersion": VOLCANO_JOB_API,
        "kind": "Job",
        "name": name,
        "uid": json_str(meta, "uid") or "",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    plans: list[PodPlan] = []
    total = 0
    for index, raw in enumerate(json_list(spec, "tasks")):
        task = raw if isinstance(raw, dict) else {}
        task_name = json_str(task, "name") or f"default{index}"
        replicas = json_int(task, "replicas") or 0
        total += replicas
        template = json_object(task, "template")
        tmeta = json_object(template, "metadata")
        for replica in range(replicas):
            pod_name = f"{name}-{task_name}-{replica}"
            annotations: JsonObject = {
                **json_object(tmeta, "annotations"),
                GROUP_ANNOTATION: name,
                JOB_ANNOTATION: name,
                TASK_ANNOTATION: task_name,
            }
            labels: JsonObject = {
                **json_object(tmeta, "labels"),
                JOB_ANNOTATION: name,
                TASK_ANNOTATION: task_name,
            }
            pod_spec: JsonObject = {**json_object(template, "spec"), "schedulerName": scheduler}
            pod_spec.pop("nodeName", None)
            if "priorityClassName" not in pod_spec and json_str(spec, "priorityClassName"):
                pod_spec["priorityClassName"] = json_str(spec, "priorityClassName")
            body: JsonObject = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod_name,
                    "namespace": namespace,
                    "labels": labels,
                    "annotations": annotations,
                    "ownerReferences": [owner],
                },
                "spec": pod_spec,
            }
            plans.append(PodPlan(pod_name, task_name, body))
    min_member = json_int(spec, "minAvailable") or total
    group_spec: JsonObject = {"minMember": min_member, "queue": json_str(spec, "queue") or "default"}
    if json_str(spec, "priorityClassName"):
        group_spec["priorityClassName"] = json_str(spec, "priorityClassName")
    podgroup: JsonObject = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace, "ownerReferences": [owner]},
        "spec": group_spec,
    }
    return podgroup, plans


def with_kind(obj: JsonObject, api_version: str, kind: str) -> JsonObject:
    """A list item with its ``apiVersion`` and ``kind`` (a list reply gives them once, not per item)."""
    return {**obj, "apiVersion": api_version, "kind": kind}


def string_map(value: Mapping[str, JsonValue]) -> dict[str, str]:
    return {k: v for k, v in value.items() if isinstance(v, str)}
