"""Status written back, so ``kubectl`` tells the story Tephra's sessions recorded.

* Kubernetes Events on pods: ``Scheduled`` when the bridge binds one,
  ``Preempted`` on an evicted pod naming the job that preempted it, and
  ``FailedScheduling`` on the unbound pods of a job the newest session left
  pending, with the session's reasons and the ``replay explain`` command that
  re-derives them.  An Event's name is derived from the pod's uid and what it
  says, so a restarted bridge does not repeat it (the apiserver answers 409).
* A Volcano Job's ``status``: its pods counted by phase (pending, running,
  succeeded, failed) and ``state.phase`` (Pending, Running, Completed, Failed)
  from those counts and ``minAvailable``, as Volcano's job controller writes it.
* A Volcano Queue's ``status`` (:mod:`kube.bridge.queue_status`): its state,
  its jobs counted by phase, what its tasks hold.
* The PodGroup of a pending job: ``status.phase`` Pending with an
  ``Unschedulable`` condition carrying the same text, as Volcano writes it;
  ``Running`` once the job runs.

Failures here are logged and never stop the bridge: the status is a view.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import aiohttp
import asyncpg
import orjson

from kube.bridge.objects import PodKind, PodRef
from kube.bridge.queue_status import QueueStatusWriter
from kube.rest import JsonObject, KubeApiError, KubeClient, json_int, json_str, resource_path

if TYPE_CHECKING:
    from kube.bridge.service import Bridge

__all__ = ["StatusWriter", "failed_scheduling_message", "volcano_job_status"]

log = logging.getLogger(__name__)

COMPONENT: Final = "tephra"
#: Seconds between two countings of the Volcano Jobs' pods (each walks every pod of ours).
_COUNT_EVERY: Final = 1.0
_PENDING_QUERY: Final = """
SELECT s.seq, p.job, coalesce(p.entry -> 'reasons', '[]'::json) AS reasons
  FROM (SELECT seq FROM sessions ORDER BY seq DESC LIMIT 1) AS s
  LEFT JOIN newest_pending AS p ON true
"""


def failed_scheduling_message(job_id: str, reasons: list[Mapping[str, object]]) -> str:
    """``<code>: <message>; ...`` then where to read why: what the FailedScheduling Event says."""
    text = "; ".join(f"{r.get('code')}: {r.get('message')}" for r in reasons) or "not placed in this session"
    return f"{text} (run `replay explain {job_id}` for the session's reasoning)"


def volcano_job_status(counts: Mapping[str, int], min_available: int | None) -> JsonObject:
    """A Volcano Job's status from its pods' counts, as Volcano's job controller derives the phase."""
    total = sum(counts.values())
    needed = min_available or total
    if counts["failed"]:
        phase = "Failed"
    elif total and counts["succeeded"] == total:
        phase = "Completed"
    elif counts["running"] + counts["succeeded"] >= needed:
        phase = "Running"
    else:
        phase = "Pending"
    status: JsonObject = {"state": {"phase": phase}, "minAvailable": needed}
    status.update(counts)
    return status


def _now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class StatusWriter:
    def __init__(self, client: KubeClient, pool: asyncpg.Pool, *, enabled: bool) -> None:
        self.client = client
        self.pool = pool
        self.enabled = enabled
        self._session_seq = -1
        self._projection_seq = -1  # the projection's seq when the sessions were last looked at
        self._said: dict[str, str] = {}  # job id -> the FailedScheduling text last written
        self._job_status: dict[str, JsonObject] = {}  # Volcano Job -> the status last written
        self._counted = 0.0
        self._queues = QueueStatusWriter(client, pool)

    async def _event(self, pod: PodRef, reason: str, message: str, kind: str = "Normal") -> None:
        if not self.enabled:
            return
        digest = hashlib.sha256(f"{pod.uid}|{reason}|{message}".encode()).hexdigest()[:16]
        now = _now_text()
        body: JsonObject = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{pod.name}.{digest}", "namespace": pod.namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod.name,
                "namespace": pod.namespace,
                "uid": pod.uid,
            },
            "reason": reason,
            "message": message[:1024],
            "type": kind,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": COMPONENT,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await self.client.create(resource_path("v1", "events", namespace=pod.namespace), body)
        except KubeApiError as exc:
            if exc.status != 409:
                log.warning("event %s on %s/%s: %s", reason, pod.namespace, pod.name, exc)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("event %s on %s/%s: %s", reason, pod.namespace, pod.name, exc)

    async def scheduled(self, pod: PodRef, node: str) -> None:
        await self._event(pod, "Scheduled", f"Successfully assigned {pod.namespace}/{pod.name} to {node}")

    async def preempted(self, pod: PodRef, preemptor: str | None) -> None:
        by = f"job {preemptor}" if preemptor else "Tephra's scheduler (a reclaim or a cancelled job)"
        await self._event(pod, "Preempted", f"Preempted by {by}", "Warning")

    async def _volcano_jobs(self, bridge: Bridge) -> None:
        counts: dict[str, dict[str, int]] = {}
        for ref, pod in bridge.pods.by_task.values():
            if ref.kind is PodKind.VOLCANO_JOB:
                phase = json_str(pod, "status", "phase") or "Pending"
                key = phase.lower() if phase in ("Running", "Succeeded", "Failed") else "pending"
                job = counts.setdefault(ref.job_id, {"pending": 0, "running": 0, "succeeded": 0, "failed": 0})
                job[key] += 1
        for job_id in sorted(counts.keys() & bridge.volcano_job_ids()):
            vcjob = bridge.vcjobs.objects[job_id]
            status = volcano_job_status(counts[job_id], json_int(vcjob, "spec", "minAvailable"))
            if self._job_status.get(job_id) == status:
                continue
            namespace, _, name = job_id.partition("/")
            path = resource_path("batch.volcano.sh/v1alpha1", "jobs", namespace=namespace, name=name)
            try:
                await self.client.merge_patch(f"{path}/status", {"status": status})
            except (KubeApiError, aiohttp.ClientError, OSError, TimeoutError) as exc:
                log.warning("Volcano Job %s status: %s", job_id, exc)  # written at the next count
            else:
                self._job_status[job_id] = status

    async def _podgroup_status(self, namespace: str, name: str, status: JsonObject) -> None:
        path = resource_path("scheduling.volcano.sh/v1beta1", "podgroups", namespace=namespace, name=name)
        try:
            await self.client.merge_patch(f"{path}/status", {"status": status})
        except KubeApiError as exc:
            if exc.status != 404:
                log.warning("PodGroup %s/%s status: %s", namespace, name, exc)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("PodGroup %s/%s status: %s", namespace, name, exc)

    async def update(self, bridge: Bridge) -> None:
        """Volcano Jobs' counts when their pods moved; the Queues' status (:mod:`kube.bridge.queue_status`);
        after each new session, FailedScheduling and the PodGroup status of the bridge's pending jobs."""
        if not self.enabled or bridge.outage.away():  # the apiserver is away: written once it answers
            return
        if time.monotonic() - self._counted >= _COUNT_EVERY:
            self._counted = time.monotonic()
            await self._volcano_jobs(bridge)
        await self._queues.update(bridge.queues.objects)
        # A new session shows first as the projection's seq moving: the sessions are read only then.
        if bridge.seq != self._projection_seq:
            self._projection_seq = bridge.seq
            pending = await self._new_pending()
            # Nothing to say and nothing said before: every pod of ours need not be walked.
            if pending is not None and (pending or self._said):
                await self._pending(bridge, pending)

    async def _new_pending(self) -> dict[str, list[Mapping[str, object]]] | None:
        """The pending jobs of the newest session and why, read out of its document; None when
        there is no session or it is the one read last."""
        newest = await self.pool.fetchval("SELECT max(seq) FROM sessions")
        if newest is None or newest == self._session_seq:
            return None
        rows = await self.pool.fetch(_PENDING_QUERY)
        if not rows:
            return None
        self._session_seq = rows[0]["seq"]
        pending: dict[str, list[Mapping[str, object]]] = {}
        for row in rows:
            if row["job"] is not None:
                reasons = orjson.loads(row["reasons"]) if isinstance(row["reasons"], str) else row["reasons"]
                pending[row["job"]] = list(reasons or [])
        return pending

    async def _pending(self, bridge: Bridge, pending: Mapping[str, list[Mapping[str, object]]]) -> None:
        """FailedScheduling on the pods of the pending jobs, and their PodGroups' status; Running
        for those no longer pending."""
        by_job: dict[str, list[tuple[PodRef, JsonObject]]] = {}
        for ref, pod in bridge.pods.by_task.values():
            by_job.setdefault(ref.job_id, []).append((ref, pod))
        for job_id in sorted(by_job):
            members = by_job[job_id]
            group = next((ref for ref, _ in members if ref.kind is not PodKind.LONE), None)
            if job_id not in pending:
                if self._said.pop(job_id, None) is not None and group is not None:
                    await self._podgroup_status(
                        group.namespace, group.group, {"phase": "Running", "conditions": []}
                    )
                continue
            message = failed_scheduling_message(job_id, pending[job_id])
            if self._said.get(job_id) == message:
                continue
            self._said[job_id] = message
            for ref, pod in sorted(members, key=lambda m: m[0].name):
                if not json_str(pod, "spec", "nodeName"):
                    await self._event(ref, "FailedScheduling", message, "Warning")
            if group is not None:
                condition: JsonObject = {
                    "type": "Unschedulable",
                    "status": "True",
                    "reason": "NotEnoughResources",
                    "message": message[:1024],
                    "transitionID": str(self._session_seq),
                    "lastTransitionTime": _now_text(),
                }
                await self._podgroup_status(
                    group.namespace, group.group, {"phase": "Pending", "conditions": [condition]}
                )
