"""Out: what the projected tasks and the cluster's pods call for, decided without I/O.

Like ``kube/sim.py`` the bridge reconciles the projected task table rather than
tailing decisions, so it executes only what the fold accepted: a task the
fold marked ``Bound`` is bound to its node (the pods/binding subresource), a
task it marked ``Releasing`` (an accepted eviction, or a cancelled job's pod)
is evicted.  A voided decision never reaches the task table.

What the pods show comes back as observations: a bound pod Running is
``TaskStarted``, a pod Succeeded or Failed is ``TaskFinished``, a pod gone
while its task held a node is ``TaskFinished`` (evicted).  A plain pod (a
PodGroup's or a lone one) gone before it finished cancels its job: nothing
would ever recreate it.  A Volcano Job's pod gone is recreated, as Volcano's
job controller does.

Event ids are ``uuid5(task, kind, seq)`` where ``seq`` is the seq of the event
that put the task in its projected state, as the simulated cluster's, so a
restarted bridge produces the same ids.  That seq is also the observations'
``observed_seq``: a job's name is reused once it finished, and a pod's
observation planned from a row of the finished incarnation (published after
the new one was submitted, whose seq is higher) is moot in the fold rather
than taken for the new incarnation's task of the same id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal

from events.models import (
    Event,
    JobCancelled,
    JobCancelledData,
    TaskFinished,
    TaskFinishedData,
    TaskStarted,
    TaskStartedData,
)
from kube.bridge.objects import PodKind, PodRef, bridge_event_id
from kube.rest import JsonObject, json_int, json_list, json_object, json_str

__all__ = ["Bind", "CreatePod", "Evict", "Plan", "ProjectedTask", "plan_tasks"]

PENDING: Final = "Pending"
BOUND: Final = "Bound"
RUNNING: Final = "Running"
RELEASING: Final = "Releasing"
_OCCUPYING: Final = frozenset({BOUND, RUNNING, RELEASING})


@dataclass(frozen=True, slots=True)
class ProjectedTask:
    """One row of the projection's tasks table, with the preemptor of its newest eviction."""

    task_id: str
    job_id: str
    status: str
    node: str | None
    seq: int
    #: What the job was made from (:class:`~kube.bridge.objects.PodKind`'s values).
    kind: str
    preemptor: str | None = None


@dataclass(frozen=True, slots=True)
class Bind:
    task: ProjectedTask
    pod: PodRef
    node: str


@dataclass(frozen=True, slots=True)
class Evict:
    task: ProjectedTask
    pod: PodRef


@dataclass(frozen=True, slots=True)
class CreatePod:
    """A Volcano Job's pod to create (again): its task is not finished and it does not exist."""

    task: ProjectedTask


@dataclass
class Plan:
    binds: list[Bind] = field(default_factory=list)
    evictions: list[Evict] = field(default_factory=list)
    creations: list[CreatePod] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    #: Bound tasks whose node left the cluster: not bound (the scheduler will place them again).
    gone_nodes: list[ProjectedTask] = field(default_factory=list)


def _phase(pod: JsonObject) -> str:
    return json_str(pod, "status", "phase") or PENDING


def _exit_code(pod: JsonObject) -> int | None:
    for status in json_list(pod, "status", "containerStatuses"):
        if isinstance(status, dict):
            code = json_int(json_object(status, "state", "terminated"), "exitCode")
            if code:
                return code
    return None


@dataclass
class _Planner:
    pods: Mapping[str, tuple[PodRef, JsonObject]]
    nodes: frozenset[str]
    volcano_jobs: frozenset[str]
    cluster: str
    source: str
    now: datetime
    plan: Plan = field(default_factory=Plan)
    cancelled: set[str] = field(default_factory=set)

    def _envelope(self, subject: str, *id_parts: str) -> dict[str, Any]:
        """The envelope attributes of an event about ``subject``, its id from ``id_parts``."""
        return {
            "id": bridge_event_id(self.cluster, *id_parts),
            "source": self.source,
            "time": self.now,
            "subject": subject,
            "cluster": self.cluster,
        }

    def _about(self, task: ProjectedTask, what: str) -> dict[str, Any]:
        return self._envelope(f"task/{task.task_id}", "task", task.task_id, what, str(task.seq))

    def _finished(
        self, task: ProjectedTask, node: str | None, phase: str, reason: str, code: int | None
    ) -> None:
        outcome: Literal["succeeded", "failed", "evicted"] = (
            "succeeded" if phase == "Succeeded" else "failed" if phase == "Failed" else "evicted"
        )
        data = TaskFinishedData(
            job_id=task.job_id,
            task_id=task.task_id,
            node=node,
            outcome=outcome,
            exit_code=code,
            reason=reason,
            observed_seq=task.seq,
        )
        self.plan.events.append(TaskFinished(**self._about(task, "finished"), data=data))

    def pod_gone(self, task: ProjectedTask) -> None:
        if task.kind == PodKind.VOLCANO_JOB:
            # A Bound task's pod may not be made yet (or was deleted before its binding): make it,
            # and bind it then.  A pod that ran and is gone frees its node.
            if task.status in (RUNNING, RELEASING):
                self._finished(task, task.node, "Evicted", "pod deleted", None)
            if task.job_id in self.volcano_jobs:
                self.plan.creations.append(CreatePod(task))
            # else: the Volcano Job was deleted, and its deletion cancelled the job
            return
        if task.status in _OCCUPYING:
            self._finished(task, task.node, "Evicted", "pod deleted", None)
        if task.job_id in self.cancelled:
            return
        self.cancelled.add(task.job_id)
        envelope = self._envelope(f"job/{task.job_id}", "job", task.job_id, "cancelled", str(task.seq))
        data = JobCancelledData(job_id=task.job_id, reason=f"pod of task {task.task_id} deleted")
        self.plan.events.append(JobCancelled(**envelope, data=data))

    def task(self, task: ProjectedTask) -> None:
        found = self.pods.get(task.task_id)
        if found is None:
            self.pod_gone(task)
            return
        ref, pod = found
        phase = _phase(pod)
        pod_node = json_str(pod, "spec", "nodeName")
        if phase in ("Succeeded", "Failed"):
            if task.status != PENDING or pod_node:
                code = 0 if phase == "Succeeded" else _exit_code(pod)
                self._finished(task, pod_node or task.node, phase, f"pod {phase}", code)
        elif task.status == BOUND and task.node is not None:
            if not pod_node:
                if task.node in self.nodes:
                    self.plan.binds.append(Bind(task, ref, task.node))
                else:
                    self.plan.gone_nodes.append(task)
            elif phase == RUNNING:
                data = TaskStartedData(
                    job_id=task.job_id, task_id=task.task_id, node=pod_node, observed_seq=task.seq
                )
                self.plan.events.append(TaskStarted(**self._about(task, "started"), data=data))
        elif task.status == RELEASING and json_object(pod, "metadata").get("deletionTimestamp") is None:
            if pod_node:
                self.plan.evictions.append(Evict(task, ref))
            else:
                # Never bound: nothing runs, the node is free already.
                self._finished(task, task.node, "Evicted", "released before its pod was bound", None)


def plan_tasks(
    tasks: Sequence[ProjectedTask],
    pods: Mapping[str, tuple[PodRef, JsonObject]],
    *,
    nodes: frozenset[str],
    volcano_jobs: frozenset[str],
    cluster: str,
    source: str,
    now: datetime,
) -> Plan:
    """What to do for each task (in task order); ``pods`` by task id, ``volcano_jobs`` the job ids
    of the Volcano Jobs the bridge runs (their pods are recreated; a plain pod gone cancels its job)."""
    planner = _Planner(pods, nodes, volcano_jobs, cluster, source, now)
    for task in sorted(tasks, key=lambda t: t.task_id):
        planner.task(task)
    return planner.plan
