"""In: cluster objects -> Tephra events, each produced once.

Nodes, PriorityClasses, Queues and HyperNodes are states: an object's event is produced
when what Tephra knows of it (the event's data) differs from what was
produced last, or, after a start, from what the projection holds, so a relist
or a restart produces nothing new.  Its id is ``uuid5(uid, resourceVersion)``.

Jobs are submitted once: a Volcano Job of ours, a PodGroup once it holds
``minMember`` pods of ours, a pod of ours in no group.  The JobSubmitted's id
comes from the object's uid and its time from the object's
``creationTimestamp``, so the same object always gives the same event.  The
objects go through the same manifest model as ``tephra submit``
(:class:`ObjectParser`, injected by ``api``, which owns that model; a PodGroup
with its pods, as a submission of them together), the pods as their author
gave them (:func:`~kube.bridge.objects.as_authored`), so a PodGroup's job,
its tasks' ids and its ``minTaskMember`` are the same whichever door it comes
through; only the provenance differs (the envelope, and the
``tephra.dev/kube-source`` annotation).  A job the model refuses is not
produced; its message is kept in :attr:`Door.refused` for the status written
back.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from events.jsonform import json_form
from events.models import (
    Event,
    HyperNodeDeleted,
    HyperNodeDeletedData,
    HyperNodeUpsertedData,
    JobSubmitted,
    NodeRemoved,
    NodeRemovedData,
    PriorityClassUpserted,
    QueueDeleted,
    QueueDeletedData,
    TasksAdded,
    TasksAddedData,
)
from events.names import dns_label
from events.quantity import format_resources
from kube.bridge.objects import (
    KUBE_SOURCE_ANNOTATION,
    PodKind,
    PodRef,
    as_authored,
    bridge_event_id,
    creation_time,
)
from kube.rest import JsonObject, JsonValue, json_int, json_object, json_str

__all__ = ["BRIDGE_SOURCE", "Door", "ObjectParser", "ParseError", "ProjectedState"]

log = logging.getLogger(__name__)

BRIDGE_SOURCE = "tephra://kube/bridge"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


class ParseError(ValueError):
    """An object the manifest model refuses; the message names the field and what was expected."""


class ObjectParser(Protocol):
    """One Kubernetes object -> its event, as ``tephra submit`` reads a document (a PodGroup
    with its ``members``, the pods naming it, as a submission of them together); raises ValueError."""

    def __call__(
        self,
        value: JsonObject,
        *,
        origin: str,
        event_id: str,
        now: datetime,
        priority_values: Mapping[str, int],
        members: Sequence[JsonObject] = (),
    ) -> Event: ...


@dataclass
class ProjectedState:
    """What the projection held at start: the bridge produces only what differs."""

    nodes: dict[str, JsonObject] = field(default_factory=dict)
    queues: dict[str, JsonObject] = field(default_factory=dict)
    priority_classes: dict[str, JsonObject] = field(default_factory=dict)
    hypernodes: dict[str, JsonObject] = field(default_factory=dict)
    jobs: set[str] = field(default_factory=set)
    #: The PodGroups' jobs the bridge submitted -> the names of their task specs (one per pod).
    group_roles: dict[str, set[str]] = field(default_factory=dict)


def _resources_doc(doc: JsonObject, *keys: str) -> dict[str, JsonValue]:
    """The projection's resource lists (integer units) in the events' JSON form (quantity strings)."""
    out: dict[str, JsonValue] = dict(doc)
    for key in keys:
        units = json_object(doc, key)
        out[key] = dict(format_resources({k: v for k, v in units.items() if isinstance(v, int)}))
    out.pop("created", None)
    return out


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


class Door:
    """Decides which events the cluster's objects call for; remembers what it produced."""

    def __init__(self, parse: ObjectParser, *, cluster: str, source: str = BRIDGE_SOURCE) -> None:
        self._parse = parse
        self.cluster = cluster
        self.source = source
        #: "node/<name>" ... -> the canonical JSON of the data last produced or projected.
        self._known: dict[str, str] = {}
        #: Job ids submitted (or found in the projection).
        self.submitted: set[str] = set()
        #: object key -> why the manifest model refused it.
        self.refused: dict[str, str] = {}
        #: A PodGroup's job -> its task specs' names (one per member pod): who joined later.
        self.group_roles: dict[str, set[str]] = {}
        self.priority_values: dict[str, int] = {}

    def seed(self, state: ProjectedState) -> None:
        for name, doc in state.nodes.items():
            self._known[f"node/{name}"] = _canonical(_resources_doc(doc, "allocatable"))
        for name, doc in state.queues.items():
            self._known[f"queue/{name}"] = _canonical(
                _resources_doc(doc, "capability", "deserved", "guarantee")
            )
        for name, doc in state.priority_classes.items():
            self._known[f"priorityclass/{name}"] = _canonical(_resources_doc(doc))
        for name, doc in state.hypernodes.items():
            # The projection keeps the event's data: in the events' JSON form, as compared.
            self._known[f"hypernode/{name}"] = _canonical(
                json_form(HyperNodeUpsertedData.model_validate(doc))
            )
        self.submitted |= state.jobs
        for job_id, roles in state.group_roles.items():
            self.group_roles.setdefault(job_id, set()).update(roles)

    def known_nodes(self) -> set[str]:
        return {key.removeprefix("node/") for key in self._known if key.startswith("node/")}

    def forget(self, events: Iterable[Event]) -> None:
        """Producing these failed: they are due again."""
        for event in events:
            if isinstance(event, JobSubmitted):
                self.submitted.discard(event.data.job_id)
            elif event.subject is not None:
                self._known.pop(event.subject, None)

    # ------------------------------------------------------------------ states

    def _state_event(self, ref: str, obj: JsonObject, now: datetime) -> Event | None:
        meta = json_object(obj, "metadata")
        event_id = bridge_event_id(
            self.cluster, ref, json_str(meta, "uid") or "", json_str(meta, "resourceVersion") or ""
        )
        try:
            event = self._parse(
                obj, origin=ref, event_id=event_id, now=now, priority_values=self.priority_values
            )
        except ValueError as exc:
            if self.refused.get(ref) != str(exc):
                log.warning("%s refused: %s", ref, exc)
            self.refused[ref] = str(exc)
            return None
        self.refused.pop(ref, None)
        form = _canonical(json_form(event.data))
        if self._known.get(ref) == form:
            return None
        self._known[ref] = form
        return event

    def _gone(self, ref: str, now: datetime) -> dict[str, Any]:
        """The envelope of the event saying ``ref`` was deleted (seen once: the object is gone)."""
        return {
            "id": bridge_event_id(self.cluster, ref, "deleted", now.isoformat()),
            "source": self.source,
            "time": now,
            "subject": ref,
            "cluster": self.cluster,
        }

    def _state(
        self, ref: str, obj: JsonObject | None, now: datetime, deleted: Callable[[dict[str, Any]], Event]
    ) -> Event | None:
        """``obj``'s event when what Tephra reads of it changed; once it is gone (None), the
        event ``deleted`` makes of the envelope, when it was produced or projected."""
        if obj is not None:
            return self._state_event(ref, obj, now)
        if self._known.pop(ref, None) is None:
            return None
        return deleted(self._gone(ref, now))

    def node(self, name: str, obj: JsonObject | None, now: datetime) -> Event | None:
        return self._state(
            f"node/{name}", obj, now, lambda env: NodeRemoved(**env, data=NodeRemovedData(name=name))
        )

    def queue(self, name: str, obj: JsonObject | None, now: datetime) -> Event | None:
        return self._state(
            f"queue/{name}", obj, now, lambda env: QueueDeleted(**env, data=QueueDeletedData(name=name))
        )

    def hypernode(self, name: str, obj: JsonObject | None, now: datetime) -> Event | None:
        """A HyperNode read by the manifest model (:mod:`scheduler.topology_spec`, as ``tephra
        submit`` reads one): HyperNodeUpserted when it changed, HyperNodeDeleted once gone."""
        return self._state(
            f"hypernode/{name}",
            obj,
            now,
            lambda env: HyperNodeDeleted(**env, data=HyperNodeDeletedData(name=name)),
        )

    def priority_class(self, name: str, obj: JsonObject | None, now: datetime) -> Event | None:
        if obj is None:
            self.priority_values.pop(name, None)
            return None  # Tephra has no PriorityClass deletion; its jobs keep the value they had
        value = json_int(obj, "value")
        if value is not None:
            self.priority_values[name] = value
        event = self._state_event(f"priorityclass/{name}", obj, now)
        return event if isinstance(event, PriorityClassUpserted) else None

    # ------------------------------------------------------------------ jobs

    def _job_event(
        self,
        key: str,
        doc: JsonObject,
        uid: str,
        created: datetime,
        *,
        kind: PodKind,
        members: Sequence[JsonObject] = (),
    ) -> JobSubmitted | None:
        try:
            event = self._parse(
                doc,
                origin=key,
                event_id=bridge_event_id(self.cluster, "job", uid),
                now=created,
                priority_values=self.priority_values,
                members=members,
            )
        except ValueError as exc:
            if self.refused.get(key) != str(exc):
                log.warning("%s refused: %s", key, exc)
            self.refused[key] = str(exc)
            return None
        self.refused.pop(key, None)
        if not isinstance(event, JobSubmitted):
            return None
        # Marked as the bridge's: a restarted bridge knows its jobs in the projection by it.
        annotations = {**event.data.annotations, KUBE_SOURCE_ANNOTATION: kind.value}
        event = event.model_copy(update={"data": event.data.model_copy(update={"annotations": annotations})})
        self.submitted.add(event.data.job_id)
        return event

    def volcano_job(self, job: JsonObject, now: datetime) -> JobSubmitted | None:
        """The JobSubmitted of a Volcano Job of ours not yet submitted (None: submitted or refused)."""
        meta = json_object(job, "metadata")
        key = f"vcjob/{json_str(meta, 'namespace') or 'default'}/{json_str(meta, 'name') or ''}"
        job_id = key.removeprefix("vcjob/")
        if job_id in self.submitted:
            return None
        spec = dict(json_object(job, "spec"))
        spec.pop("schedulerName", None)  # chosen by the bridge already: no warning about it
        doc: JsonObject = {**job, "metadata": _without_last_applied(meta), "spec": spec}
        uid = json_str(meta, "uid") or ""
        return self._job_event(key, doc, uid, creation_time(job) or now, kind=PodKind.VOLCANO_JOB)

    def group_job(self, podgroup: JsonObject, pods: list[JsonObject], now: datetime) -> JobSubmitted | None:
        """A PodGroup's job once it holds ``minMember`` pods of ours (None before, and once submitted):
        the PodGroup read with its pods by the manifest model, as ``tephra submit`` reads them."""
        meta = json_object(podgroup, "metadata")
        namespace, name = json_str(meta, "namespace") or "default", json_str(meta, "name") or ""
        job_id = f"{namespace}/{dns_label(name)}"
        if job_id in self.submitted:
            return None
        if len(pods) < (json_int(podgroup, "spec", "minMember") or 1):
            return None
        doc: JsonObject = {**podgroup, "metadata": _without_last_applied(meta)}
        event = self._job_event(
            f"podgroup/{namespace}/{name}",
            doc,
            json_str(meta, "uid") or "",
            creation_time(podgroup) or now,
            kind=PodKind.GROUP,
            members=[as_authored(pod) for pod in pods],
        )
        if event is not None:
            self.group_roles[job_id] = {task.name for task in event.data.tasks}
        return event

    def group_tasks(
        self, podgroup: JsonObject, pods: list[JsonObject], now: datetime
    ) -> list[TasksAdded] | None:
        """The pods of ours that joined a PodGroup after its job was submitted, one TasksAdded each
        (as Volcano's scheduler takes them into the job); None while the group's job is not submitted.

        Each pod is read with the manifest model as the job's first pods were (its task spec is
        the one the PodGroup read with that pod alone gives); the event's id comes from the group's
        and the pod's uids and its time is the pod's ``creationTimestamp``, so a restart produces
        the same event, which the archive keeps once.
        """
        meta = json_object(podgroup, "metadata")
        namespace = json_str(meta, "namespace") or ""
        job_id = f"{namespace}/{dns_label(json_str(meta, 'name') or '')}"
        roles = self.group_roles.get(job_id)
        if roles is None:
            return None
        # The job's gang minimum stays as submitted: the group read with one pod needs no more.
        alone: JsonObject = {
            **podgroup,
            "metadata": _without_last_applied(meta),
            "spec": {**json_object(podgroup, "spec"), "minMember": 1},
        }
        added: list[TasksAdded] = []
        for pod in sorted(pods, key=lambda p: json_str(p, "metadata", "name") or ""):
            pod_meta = json_object(pod, "metadata")
            name, uid = json_str(pod_meta, "name") or "", json_str(pod_meta, "uid") or ""
            if dns_label(name) in roles:
                continue
            time = creation_time(pod) or now
            event_id = bridge_event_id(self.cluster, "tasks", json_str(meta, "uid") or "", uid)
            key = f"pod/{namespace}/{name}"
            joined = self._job_event(key, alone, uid, time, kind=PodKind.GROUP, members=[as_authored(pod)])
            if joined is None:
                continue  # refused: kept in refused, logged
            roles.update(task.name for task in joined.data.tasks)
            added.append(
                TasksAdded(
                    id=event_id,
                    source=self.source,
                    time=time,
                    subject=f"job/{job_id}",
                    cluster=self.cluster,
                    data=TasksAddedData(job_id=job_id, tasks=joined.data.tasks),
                )
            )
        return added

    def lone_job(self, pod: JsonObject, ref: PodRef, now: datetime) -> JobSubmitted | None:
        """A pod of ours in no PodGroup: the one-pod gang ``tephra submit`` reads it as."""
        if ref.kind is not PodKind.LONE or ref.job_id in self.submitted:
            return None
        key = f"pod/{ref.namespace}/{ref.name}"
        return self._job_event(key, as_authored(pod), ref.uid, creation_time(pod) or now, kind=PodKind.LONE)


def _without_last_applied(meta: JsonObject) -> JsonObject:
    """``metadata`` without the whole manifest again, as ``kubectl apply`` keeps it in an annotation."""
    annotations = dict(json_object(meta, "annotations"))
    if annotations.pop(LAST_APPLIED, None) is None:
        return meta
    return {**meta, "annotations": annotations}


def utc_now() -> datetime:
    return datetime.now(UTC)
