"""A Volcano Job (``batch.volcano.sh/v1alpha1 Job``) as every door reads it.

This plays the part of Volcano's admission webhook and job controller for what
scheduling needs (volcano semantics §8): the defaults (queue ``default``, task
names ``default<i>``, a task's ``minAvailable`` its replicas, the job's the sum
of its tasks'), each task's template read as the pod the controller makes of
it (the job's ``volcano.sh/preemptable`` annotation and label over the
template's, the controller's labels), and the PodGroup's ``minResources``
(:meth:`VolcanoJobManifest.min_resources`).  Pods are ``<job>-<task>-<index>``.
Problems raise :class:`scheduler.podspec.PodSpecError` with the path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final

from pydantic import BaseModel

from events.names import is_dns_label
from events.quantity import PODS
from scheduler.manifest.fields import (
    FROZEN,
    integer,
    mapping,
    name_of,
    optional_string,
    required,
    string_map,
    timestamp,
)
from scheduler.manifest.pods import PREEMPTABLE_KEY, PodManifest, read_pod
from scheduler.podspec import PodSpecError, ignored_job_fields, job_pod_labels

__all__ = ["VolcanoJobManifest", "VolcanoTaskManifest", "read_volcano_job"]

#: What a job's ``spec.schedulerName`` may say without a warning (Tephra schedules every job it is given).
_OUR_SCHEDULERS: Final = (None, "", "volcano")


class VolcanoTaskManifest(BaseModel):
    """One task of a Volcano Job: ``replicas`` pods made from ``pod`` (its template)."""

    model_config = FROZEN

    name: str
    replicas: int
    #: Pods of this task the gang needs (default: its replicas).
    min_available: int
    #: The template as the pod the job controller makes of it (named ``template``; each replica
    #: is ``<job>-<task>-<index>``), with the controller's labels and the job's preemptable.
    pod: PodManifest


class VolcanoJobManifest(BaseModel):
    model_config = FROZEN

    namespace: str
    name: str
    queue: str = "default"
    priority_class: str | None = None
    #: The gang minimum: the job's own, else the sum of its tasks' minimums.
    min_available: int
    tasks: tuple[VolcanoTaskManifest, ...]
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    ttl_seconds_after_finished: int | None = None
    created: datetime | None = None
    #: ``(path, why)`` of the fields accepted with no effect (each door warns).
    ignored: tuple[tuple[str, str], ...] = ()

    @property
    def uid(self) -> str:
        return f"{self.namespace}/{self.name}"

    def min_resources(self, priority_of: Callable[[str | None], int]) -> dict[str, int]:
        """The PodGroup's minResources, as Volcano's job controller derives it (semantics §8).

        Tasks are taken in descending value of their template's PriorityClass
        (``priority_of``; ties keep spec order), each pod counting its requests and one ``pods``:
        1. job minAvailable below the tasks' sum: the first ``minAvailable`` pods;
        2. otherwise each task's own minimum first, then extra replicas up to ``minAvailable``.
        """
        tasks = self.tasks
        ordered = sorted(range(len(tasks)), key=lambda i: (-priority_of(tasks[i].pod.spec.priority_class), i))
        counts = [0] * len(tasks)
        remaining = self.min_available
        if self.min_available < sum(t.min_available for t in tasks):
            for i in ordered:
                counts[i] = min(tasks[i].replicas, remaining)
                remaining -= counts[i]
        else:
            for i in ordered:
                counts[i] = min(tasks[i].min_available, remaining)
                remaining -= counts[i]
            for i in ordered:
                extra = min(tasks[i].replicas - counts[i], remaining)
                counts[i] += extra
                remaining -= extra
        total: dict[str, int] = {}
        for task, count in zip(tasks, counts, strict=True):
            usage = dict(task.pod.spec.requests)
            usage[PODS] = usage.get(PODS, 0) + 1  # quota-style usage: every pod counts one `pods`
            for name, amount in usage.items():
                total[name] = total.get(name, 0) + amount * count
        return dict(sorted((k, v) for k, v in total.items() if v))


def read_volcano_job(body: Mapping[str, Any]) -> VolcanoJobManifest:
    meta = mapping(body.get("metadata"), "metadata")
    name = name_of(meta, valid=is_dns_label)
    namespace = meta.get("namespace") or "default"
    if not isinstance(namespace, str) or not is_dns_label(namespace):
        raise PodSpecError("metadata.namespace", "expected a lowercase DNS label", namespace)
    labels = string_map(meta.get("labels"), "metadata.labels")
    annotations = string_map(meta.get("annotations"), "metadata.annotations")
    spec = mapping(required(body, "spec", ""), "spec")
    ignored = ignored_job_fields(spec, "spec")  # then schedulerName, then each template's fields
    scheduler_name = spec.get("schedulerName")
    if scheduler_name not in _OUR_SCHEDULERS:
        ignored.append(
            ("spec.schedulerName", f"{scheduler_name!r} ignored: Tephra schedules every job submitted to it")
        )
    queue = optional_string(spec.get("queue"), "spec.queue") or "default"

    raw_tasks = required(spec, "tasks", "spec")
    if not isinstance(raw_tasks, list) or not raw_tasks:
        raise PodSpecError("spec.tasks", "expected at least one task", raw_tasks)
    controller = _Controller(
        namespace=namespace, job=name, queue=queue, labels=labels, annotations=annotations
    )
    tasks: list[VolcanoTaskManifest] = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(raw_tasks):
        task = controller.task(mapping(raw, f"spec.tasks[{i}]"), i)
        if task.name in seen:
            raise PodSpecError(
                f"spec.tasks[{i}].name",
                f"duplicate task name (also spec.tasks[{seen[task.name]}])",
                task.name,
            )
        seen[task.name] = i
        ignored.extend(task.pod.spec.ignored)
        tasks.append(task)

    total_replicas = sum(t.replicas for t in tasks)
    min_available = sum(t.min_available for t in tasks)
    if spec.get("minAvailable") not in (None, 0):
        min_available = integer(spec["minAvailable"], "spec.minAvailable", 0)
    if total_replicas == 0:
        raise PodSpecError("spec.tasks", "expected at least one replica in total")
    if min_available > total_replicas:
        raise PodSpecError(
            "spec.minAvailable", f"expected at most the total replicas ({total_replicas})", min_available
        )
    ttl = spec.get("ttlSecondsAfterFinished")
    return VolcanoJobManifest(
        namespace=namespace,
        name=name,
        queue=queue,
        priority_class=optional_string(spec.get("priorityClassName"), "spec.priorityClassName"),
        min_available=min_available,
        tasks=tuple(tasks),
        labels=labels,
        annotations=annotations,
        ttl_seconds_after_finished=None if ttl is None else integer(ttl, "spec.ttlSecondsAfterFinished", 0),
        created=timestamp(meta.get("creationTimestamp"), "metadata.creationTimestamp"),
        ignored=tuple(ignored),
    )


class _Controller:
    """What Volcano's job controller puts on the pods of one job (createJobPod)."""

    def __init__(
        self,
        *,
        namespace: str,
        job: str,
        queue: str,
        labels: dict[str, str],
        annotations: dict[str, str],
    ) -> None:
        self.namespace, self.job, self.queue = namespace, job, queue
        self.labels, self.annotations = labels, annotations

    def task(self, task: Mapping[str, Any], index: int) -> VolcanoTaskManifest:
        path = f"spec.tasks[{index}]"
        name = task.get("name") or f"default{index}"
        if not isinstance(name, str) or not is_dns_label(name):
            raise PodSpecError(f"{path}.name", "expected a lowercase DNS label", name)
        replicas = integer(required(task, "replicas", path), f"{path}.replicas", 0)
        min_available = replicas
        if task.get("minAvailable") is not None:
            min_available = integer(task["minAvailable"], f"{path}.minAvailable", 0)
            if min_available > replicas:
                raise PodSpecError(
                    f"{path}.minAvailable", f"expected at most replicas ({replicas})", min_available
                )
        template = mapping(required(task, "template", path), f"{path}.template")
        tmeta = mapping(template.get("metadata"), f"{path}.template.metadata")
        tlabels = string_map(tmeta.get("labels"), f"{path}.template.metadata.labels")
        tannotations = string_map(tmeta.get("annotations"), f"{path}.template.metadata.annotations")
        # The job's preemptable annotation and label are copied over the template's.
        for job_values, values in ((self.annotations, tannotations), (self.labels, tlabels)):
            if PREEMPTABLE_KEY in job_values:
                values[PREEMPTABLE_KEY] = job_values[PREEMPTABLE_KEY]
        pod_labels = job_pod_labels(
            tlabels,
            job_labels=self.labels,
            job=self.job,
            namespace=self.namespace,
            queue=self.queue,
            task=name,
        )
        body = {
            "metadata": {
                "name": "template",
                "namespace": self.namespace,
                "labels": tlabels,
                "annotations": tannotations,
            },
            "spec": required(template, "spec", f"{path}.template"),
        }
        try:
            pod = read_pod(body)
        except PodSpecError as exc:
            raise PodSpecError(f"{path}.template.{exc.path}", exc.expected, exc.got) from None
        # The template's fields sit under the task: their paths say so.
        ignored = tuple((f"{path}.template.{where}", why) for where, why in pod.spec.ignored)
        spec = pod.spec.model_copy(update={"ignored": ignored})
        return VolcanoTaskManifest(
            name=name,
            replicas=replicas,
            min_available=min_available,
            pod=pod.model_copy(update={"labels": pod_labels, "role": name, "spec": spec}),
        )
