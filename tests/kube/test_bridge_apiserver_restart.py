"""The kube-apiserver restarted in the middle of a stream of pods (etcd kept): the bridge's watches
resume (a relist after ``410 Gone`` or a broken connection), every pod is bound exactly once, and
nothing is lost or recorded twice.

The test has a cluster of its own (stopping the apiserver of the session's shared one would fail
whatever else runs on it), with the bridge in this process on the ServiceAccount of
``deploy/kubernetes/rbac.yaml``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Iterator

import aiohttp
import asyncpg
import pytest

from kube.dev.cluster import DevCluster
from kube.rest import JsonObject, KubeApiError, KubeClient, json_str, resource_path
from tests.kube import test_bridge
from tests.kube.conftest import kube_binaries
from tests.kube.test_bridge import Stack, eventually

pytestmark = pytest.mark.integration

# The bridge's stack, as tests/kube/test_bridge.py runs it, on this module's cluster.
endpoints, services_settings = test_bridge.endpoints, test_bridge.services_settings
services, cluster, stack = test_bridge.services, test_bridge.cluster, test_bridge.stack
bridge_signer = test_bridge.bridge_signer

PODS = 300


@pytest.fixture(scope="module")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    """A dev cluster of this module's own: its apiserver is stopped and started again."""
    with DevCluster(tmp_path_factory.mktemp("kube-restart"), binaries=kube_binaries()) as dev:
        yield dev


async def _create_through_outages(kube: KubeClient, path: str, body: JsonObject) -> None:
    """Create, trying again while the apiserver is away; a create that went through before the
    connection broke answers 409 the next time: done."""
    while True:
        try:
            await kube.create(path, body)
        except KubeApiError as exc:
            if exc.status == 409:
                return
            if exc.status < 500:
                raise
        except (aiohttp.ClientError, OSError, TimeoutError):
            pass
        else:
            return
        await asyncio.sleep(0.2)


async def _pods_when_up(stack: Stack) -> list[JsonObject]:
    with contextlib.suppress(KubeApiError, aiohttp.ClientError, OSError, TimeoutError):
        return await stack.pods()
    return []


def _bound(at_least: int) -> Callable[[object], bool]:
    def check(value: object) -> bool:
        pods = value if isinstance(value, list) else []
        return sum(bool(json_str(p, "spec", "nodeName")) for p in pods) >= at_least

    return check


def _running(count: int) -> Callable[[object], bool]:
    def check(value: object) -> bool:
        pods = value if isinstance(value, list) else []
        return len(pods) == count and all(json_str(p, "status", "phase") == "Running" for p in pods)

    return check


async def test_an_apiserver_restarted_mid_stream_loses_nothing_and_binds_each_pod_once(
    stack: Stack, kube_cluster: DevCluster
) -> None:
    pods_path = resource_path("v1", "pods", namespace=stack.namespace)
    slots = asyncio.Semaphore(16)

    async def create(i: int) -> None:
        body: JsonObject = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"p-{i:03d}", "namespace": stack.namespace},
            "spec": {"schedulerName": "tephra", "containers": [{"name": "main", "image": "demo/x"}]},
        }
        async with slots:
            await _create_through_outages(stack.kube, pods_path, body)

    creating = asyncio.gather(*(create(i) for i in range(PODS)))
    try:
        await eventually(lambda: _pods_when_up(stack), _bound(PODS // 4), within=180)
        await asyncio.to_thread(kube_cluster.stop_apiserver)  # etcd keeps everything
        await asyncio.sleep(3)  # the bridge, the kubelet and the creator all see it gone
        await asyncio.to_thread(kube_cluster.start_apiserver)  # same port, same credentials
        await creating
        # Bound, and Running: the sim kubelet came through the outage too.
        pods = await eventually(lambda: _pods_when_up(stack), _running(PODS), within=300)
    finally:
        creating.cancel()
        with contextlib.suppress(BaseException):
            await creating
    assert isinstance(pods, list)
    assert len(pods) == PODS
    nodes = {json_str(p, "metadata", "name"): json_str(p, "spec", "nodeName") for p in pods}

    conn = await asyncpg.connect(stack.database_url)
    try:
        # Every pod's TaskStarted reached the projection.
        await eventually(
            lambda: conn.fetchval("SELECT count(*) FROM tasks WHERE status = 'Running'"),
            lambda running: running == PODS,
        )
        bindings = await conn.fetch("SELECT task_id, node FROM bindings")
        rejected = await conn.fetch("SELECT error, detail FROM rejected_events")
        archived = await conn.fetch(
            "SELECT type, subject, data FROM event_log WHERE source = 'tephra://kube/bridge' ORDER BY seq"
        )
    finally:
        await conn.close()
    # Each pod: one accepted binding decision, and the pod on that node.
    decided: dict[str, list[str]] = {}
    for row in bindings:
        decided.setdefault(row["task_id"], []).append(row["node"])
    assert sorted(decided) == sorted(f"{stack.namespace}/{name}" for name in nodes)
    assert all(len(on) == 1 for on in decided.values())
    for name, node in nodes.items():
        assert decided[f"{stack.namespace}/{name}"] == [node]
    assert [(r["error"], r["detail"]) for r in rejected] == []
    # Nothing recorded twice: one submission per pod, and no object's state recorded again unchanged.
    submitted = [r["subject"] for r in archived if r["type"] == "tephra.job.submitted.v1"]
    assert sorted(submitted) == sorted(set(submitted))
    assert len(submitted) == PODS
    last: dict[tuple[str, str], object] = {}
    for row in archived:
        key = (row["type"], row["subject"] or "")
        data = json.loads(row["data"]) if isinstance(row["data"], str) else row["data"]
        assert last.get(key) != data, f"{key} archived twice with the same data"
        last[key] = data
