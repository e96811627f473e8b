"""A fake kubelet for clusters without real nodes (what KWOK does): ``tephra kube-sim-kubelet``.

It owns the Nodes labelled :data:`SIM_NODE_LABEL` (creating the ones it is given) and plays
their kubelet and node-lifecycle controller:

* keeps each Node Ready (status condition, heartbeats) and removes the
  ``node.kubernetes.io/not-ready`` taint the apiserver puts on every new Node;
* marks each pod bound to one of its nodes Running (the pod's status subresource), and
  Succeeded once the pod's ``tephra.dev/sim-runtime`` annotation (``30s``, ``1m``) has
  elapsed since it started; a pod without it runs until it is deleted;
* finishes a deleted pod at once (delete with grace period 0), as a kubelet does once its
  containers have stopped.

Every write is idempotent, so a restart or a relist repeats nothing harmful.  An apiserver
that goes away (a restart, an outage) stops nothing: each watch lists again once it answers,
and what failed meanwhile is done then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp

from kube.rest import JsonObject, KubeApiError, KubeClient, json_list, json_str, resource_path
from kube.sim_runtime import SIM_RUNTIME_ANNOTATION, SimRuntimeError, parse_duration

__all__ = [
    "SIM_NODE_LABEL",
    "NodeShape",
    "SimKubelet",
    "create_sim_node",
    "parse_node_shape",
    "remove_not_ready_taints",
    "sim_kubelet_command",
]

log = logging.getLogger(__name__)

SIM_NODE_LABEL = "tephra.dev/sim-kubelet"
NOT_READY_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})
DEFAULT_RESOURCES: Mapping[str, str] = {"cpu": "8", "memory": "32Gi", "pods": "110"}
KUBELET_VERSION = "v1.20.2-tephra-sim"
#: What an apiserver away (restarting, unreachable) raises: the watch lists again after a pause.
_UNREACHABLE = (aiohttp.ClientError, OSError, TimeoutError)
_RELIST_AFTER = 1.0


@dataclass(frozen=True)
class NodeShape:
    """A Node to create: its name, allocatable resources and extra labels."""

    name: str
    resources: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_RESOURCES))
    labels: Mapping[str, str] = field(default_factory=dict)


def parse_node_shape(text: str) -> NodeShape:
    """``NAME`` or ``NAME:RESOURCE=QUANTITY,...`` (e.g. ``gpu-1:cpu=64,memory=512Gi,nvidia.com/gpu=8``).

    Resources not given keep the defaults (8 cpu, 32Gi memory, 110 pods).
    """
    name, _, spec = text.partition(":")
    resources = dict(DEFAULT_RESOURCES)
    for part in filter(None, spec.split(",")):
        resource, equals, quantity = part.partition("=")
        if not equals or not resource or not quantity:
            raise ValueError(f"node {text!r}: expected RESOURCE=QUANTITY after the colon, got {part!r}")
        resources[resource.strip()] = quantity.strip()
    if not name:
        raise ValueError(f"node {text!r}: expected NAME or NAME:RESOURCE=QUANTITY,...")
    return NodeShape(name, resources)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ready_condition(now: str) -> JsonObject:
    return {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "tephra sim-kubelet is posting ready status",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


def _pod_key(pod: JsonObject) -> str:
    return f"{json_str(pod, 'metadata', 'namespace')}/{json_str(pod, 'metadata', 'name')}"


def _pod_path(pod: JsonObject, subresource: str | None = None) -> str:
    return resource_path(
        "v1",
        "pods",
        namespace=json_str(pod, "metadata", "namespace") or "default",
        name=json_str(pod, "metadata", "name") or "",
        subresource=subresource,
    )


def _containers(pod: JsonObject) -> list[JsonObject]:
    return [c for c in json_list(pod, "spec", "containers") if isinstance(c, dict)]


async def create_sim_node(client: KubeClient, shape: NodeShape) -> JsonObject:
    """Create a Ready Node of ``shape`` labelled for the sim kubelet, or label the one there; the Node."""
    now = _now()
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": shape.name,
            "labels": {"kubernetes.io/hostname": shape.name, **shape.labels, SIM_NODE_LABEL: "true"},
        },
        "status": {
            "capacity": dict(shape.resources),
            "allocatable": dict(shape.resources),
            "conditions": [_ready_condition(now)],
            "nodeInfo": {
                "kubeletVersion": KUBELET_VERSION,
                "architecture": "amd64",
                "operatingSystem": "linux",
            },
        },
    }
    try:
        return await client.create(resource_path("v1", "nodes"), node)
    except KubeApiError as exc:
        if exc.status != 409:
            raise
        # Present already: adopt it (label), keep its shape.
        return await client.merge_patch(
            resource_path("v1", "nodes", name=shape.name),
            {"metadata": {"labels": {SIM_NODE_LABEL: "true"}}},
        )


async def remove_not_ready_taints(client: KubeClient, node: JsonObject) -> None:
    """Remove the taints a node-lifecycle controller would lift from a Ready node, if it has any.

    The patch carries the node's resourceVersion, so a concurrent change of its taints wins
    (:class:`KubeApiError` 409) rather than being overwritten.
    """
    taints = [t for t in json_list(node, "spec", "taints") if isinstance(t, dict)]
    kept = [t for t in taints if t.get("key") not in NOT_READY_TAINTS]
    if len(kept) == len(taints):
        return
    patch: JsonObject = {
        "metadata": {"resourceVersion": json_str(node, "metadata", "resourceVersion")},
        "spec": {"taints": list(kept) if kept else None},
    }
    await client.merge_patch(resource_path("v1", "nodes", name=json_str(node, "metadata", "name")), patch)


class SimKubelet:
    """Runs the nodes given plus every Node labelled :data:`SIM_NODE_LABEL`; :meth:`run` until cancelled."""

    def __init__(
        self, client: KubeClient, nodes: Sequence[NodeShape] = (), *, heartbeat: float = 30.0
    ) -> None:
        self._client = client
        self._shapes = tuple(nodes)
        self._heartbeat = heartbeat
        self._nodes: set[str] = set()
        self._bound: dict[str, JsonObject] = {}  # pods bound to a node, ours or not yet known
        self._started: set[str] = set()  # pods this process marked Running (their events may lag)
        self._finishing: dict[str, asyncio.Task[None]] = {}
        self.synced = asyncio.Event()  # set once nodes and pods have been listed

    @property
    def nodes(self) -> frozenset[str]:
        """The nodes it runs now."""
        return frozenset(self._nodes)

    async def run(self) -> None:
        for shape in self._shapes:
            await create_sim_node(self._client, shape)
        nodes_synced, pods_synced = asyncio.Event(), asyncio.Event()

        async def synced() -> None:
            await nodes_synced.wait()
            await pods_synced.wait()
            self.synced.set()

        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._keep_watching("Node", lambda: self._watch_nodes(nodes_synced)))
                group.create_task(self._keep_watching("Pod", lambda: self._watch_pods(pods_synced)))
                group.create_task(self._heartbeats())
                group.create_task(synced())
        finally:
            for task in self._finishing.values():
                task.cancel()

    async def _keep_watching(self, kind: str, watch: Callable[[], Awaitable[None]]) -> None:
        """``watch`` (a list + watch), listed again whenever the apiserver is away or failing."""
        while True:
            try:
                await watch()
            except KubeApiError as exc:
                if exc.status < 500 and exc.status != 429:
                    raise
                log.warning("%s watch: %s; listing again in %.0fs", kind, exc, _RELIST_AFTER)
            except _UNREACHABLE as exc:
                log.warning("%s watch: %s; listing again in %.0fs", kind, exc, _RELIST_AFTER)
            await asyncio.sleep(_RELIST_AFTER)

    # ------------------------------------------------------------------ nodes

    async def _watch_nodes(self, synced: asyncio.Event) -> None:
        events = self._client.list_and_watch(resource_path("v1", "nodes"), {"labelSelector": SIM_NODE_LABEL})
        async for event in events:
            if event.type == "SYNCED":
                synced.set()
                continue
            name = json_str(event.object, "metadata", "name") or ""
            if event.type == "DELETED":
                self._nodes.discard(name)
                continue
            if name not in self._nodes:
                self._nodes.add(name)
                for pod in [p for p in self._bound.values() if json_str(p, "spec", "nodeName") == name]:
                    await self._reconcile_pod(pod)
            await self._keep_ready(event.object)

    async def _keep_ready(self, node: JsonObject) -> None:
        name = json_str(node, "metadata", "name") or ""
        with contextlib.suppress(KubeApiError):  # changed meanwhile (409): the next event retries
            await remove_not_ready_taints(self._client, node)
        ready = [
            c
            for c in json_list(node, "status", "conditions")
            if isinstance(c, dict) and c.get("type") == "Ready"
        ]
        if not ready or ready[0].get("status") != "True":
            await self._post_ready(name)

    async def _post_ready(self, name: str) -> None:
        with contextlib.suppress(KubeApiError):  # deleted meanwhile
            await self._client.merge_patch(
                resource_path("v1", "nodes", name=name, subresource="status"),
                {"status": {"conditions": [_ready_condition(_now())]}},
            )

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self._heartbeat)
            for name in sorted(self._nodes):
                try:
                    await self._post_ready(name)
                except _UNREACHABLE as exc:  # the next beat tries again
                    log.debug("node %s heartbeat: %s", name, exc)

    # ------------------------------------------------------------------ pods

    async def _watch_pods(self, synced: asyncio.Event) -> None:
        # Bound pods only: what a kubelet sees (it watches spec.nodeName=<its node>).
        events = self._client.list_and_watch(
            resource_path("v1", "pods"), {"fieldSelector": "spec.nodeName!="}
        )
        async for event in events:
            if event.type == "SYNCED":
                synced.set()
                continue
            key = _pod_key(event.object)
            if event.type == "DELETED":
                self._bound.pop(key, None)
                self._started.discard(key)
                self._stop_finishing(key)
                continue
            self._bound[key] = event.object
            await self._reconcile_pod(event.object)

    async def _reconcile_pod(self, pod: JsonObject) -> None:
        if json_str(pod, "spec", "nodeName") not in self._nodes:
            return
        key = _pod_key(pod)
        phase = json_str(pod, "status", "phase") or "Pending"
        try:
            if json_str(pod, "metadata", "deletionTimestamp") is not None:
                self._stop_finishing(key)
                uid = json_str(pod, "metadata", "uid")
                await self._client.delete(
                    _pod_path(pod), {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
                )
            elif phase == "Pending" and key not in self._started:
                await self._client.merge_patch(_pod_path(pod, "status"), self._running_status(pod))
                self._started.add(key)
            elif phase == "Running" and key not in self._finishing:
                self._schedule_finish(pod)
        except KubeApiError as exc:
            if exc.status not in (404, 409):  # gone, or changed meanwhile: the next event says what is
                raise

    def _running_status(self, pod: JsonObject) -> JsonObject:
        now = _now()
        return {
            "status": {
                "phase": "Running",
                "startTime": now,
                "hostIP": "127.0.0.1",
                "conditions": [
                    {"type": kind, "status": "True", "lastTransitionTime": now}
                    for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
                ],
                "containerStatuses": [
                    {
                        "name": json_str(container, "name"),
                        "image": json_str(container, "image") or "",
                        "imageID": "",
                        "ready": True,
                        "started": True,
                        "restartCount": 0,
                        "state": {"running": {"startedAt": now}},
                    }
                    for container in _containers(pod)
                ],
            }
        }

    def _schedule_finish(self, pod: JsonObject) -> None:
        raw = json_str(pod, "metadata", "annotations", SIM_RUNTIME_ANNOTATION)
        if raw is None:
            return  # runs until deleted
        key = _pod_key(pod)
        try:
            runtime = parse_duration(raw)
        except SimRuntimeError as exc:
            log.warning("pod %s: annotation %s: %s; it runs until deleted", key, SIM_RUNTIME_ANNOTATION, exc)
            return
        started = json_str(pod, "status", "startTime")
        start = datetime.fromisoformat(started) if started else datetime.now(UTC)
        delay = (start + timedelta(seconds=runtime) - datetime.now(UTC)).total_seconds()
        self._finishing[key] = asyncio.create_task(self._finish(pod, max(delay, 0.0)), name=f"finish {key}")

    async def _finish(self, pod: JsonObject, delay: float) -> None:
        await asyncio.sleep(delay)
        now = _now()
        started = json_str(pod, "status", "startTime") or now
        status: JsonObject = {
            "status": {
                "phase": "Succeeded",
                "conditions": [
                    {"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": now},
                    {
                        "type": "ContainersReady",
                        "status": "False",
                        "reason": "PodCompleted",
                        "lastTransitionTime": now,
                    },
                ],
                "containerStatuses": [
                    {
                        "name": json_str(container, "name"),
                        "image": json_str(container, "image") or "",
                        "imageID": "",
                        "ready": False,
                        "started": False,
                        "restartCount": 0,
                        "state": {
                            "terminated": {
                                "exitCode": 0,
                                "reason": "Completed",
                                "startedAt": started,
                                "finishedAt": now,
                            }
                        },
                    }
                    for container in _containers(pod)
                ],
            }
        }
        try:
            await self._client.merge_patch(_pod_path(pod, "status"), status)
        except KubeApiError as exc:  # logged, not raised: nobody awaits this task
            if exc.status != 404:
                log.warning("pod %s: could not mark it Succeeded: %s", _pod_key(pod), exc)
        except _UNREACHABLE as exc:  # the pod's watch lists it again, Running: finished then
            log.warning("pod %s: could not mark it Succeeded: %s", _pod_key(pod), exc)
        self._finishing.pop(_pod_key(pod), None)

    def _stop_finishing(self, key: str) -> None:
        task = self._finishing.pop(key, None)
        if task is not None:
            task.cancel()


async def _serve(kubeconfig: Path | None, nodes: Sequence[NodeShape], heartbeat: float) -> None:
    async with await KubeClient.connect(kubeconfig) as client:
        kubelet = SimKubelet(client, nodes, heartbeat=heartbeat)
        running = asyncio.create_task(kubelet.run())
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, running.cancel)
        await kubelet.synced.wait()
        print(f"tephra: sim-kubelet running {len(kubelet.nodes)} node(s)", file=sys.stderr, flush=True)
        with contextlib.suppress(asyncio.CancelledError):
            await running


def sim_kubelet_command(kubeconfig: Path | None, nodes: Sequence[str], heartbeat: float) -> int:
    """``tephra kube-sim-kubelet``: run until SIGTERM or Ctrl-C; the exit status."""
    try:
        shapes = [parse_node_shape(text) for text in nodes]
    except ValueError as exc:
        print(f"error: --node: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_serve(kubeconfig, shapes, heartbeat))
    except KubeApiError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
