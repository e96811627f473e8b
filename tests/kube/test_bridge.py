"""The bridge on the real apiserver: objects in, bindings out, with projector, scheduler and sim kubelet.

The bridge runs with the ServiceAccount token of ``deploy/kubernetes/rbac.yaml`` on the
RBAC-enforcing apiserver, so a verb it uses and the ClusterRole lacks fails here.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest

from api.embedded import create_topics
from api.endpoints import Endpoints
from api.kube_bridge import object_parser
from api.settings import TephraSettings
from api.stack import run_services
from events.topics import Topics
from kube.bridge.service import Bridge, run_bridge
from kube.bridge.settings import KubeBridgeSettings
from kube.dev.cluster import DevCluster
from kube.dev.deploy import bridge_kubeconfig
from kube.rest import JsonObject, KubeClient, json_list, json_object, json_str, resource_path
from kube.sim_kubelet import SimKubelet, parse_node_shape
from projector.migrate import apply_migrations
from tests.service.helpers import stopped

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parent / "data"
KUBECTL = shutil.which("kubectl") or "kubectl"


async def eventually(
    read: Callable[[], Awaitable[object]], check: Callable[[object], bool], within: float = 60
) -> object:
    async with asyncio.timeout(within):
        while True:
            value = await read()
            if check(value):
                return value
            await asyncio.sleep(0.1)


@dataclass
class Stack:
    kube: KubeClient
    namespace: str
    nodes: list[str]
    database_url: str
    kubeconfig: Path
    bridge: list[Bridge]

    def podgroup(self, name: str) -> str:
        return resource_path(
            "scheduling.volcano.sh/v1beta1", "podgroups", namespace=self.namespace, name=name
        )

    async def pods(self) -> list[JsonObject]:
        reply = await self.kube.get(resource_path("v1", "pods", namespace=self.namespace))
        return [p for p in json_list(reply, "items") if isinstance(p, dict)]

    def kubectl(self, *args: str) -> str:
        done = subprocess.run(  # noqa: S603 - kubectl from PATH, fixed arguments
            [KUBECTL, "--kubeconfig", str(self.kubeconfig), "-n", self.namespace, *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout


async def _clear_nodes(kube: KubeClient) -> None:
    """Nodes are cluster-wide: another test's would take our pods (tests run one at a time)."""
    for node in json_list(await kube.get(resource_path("v1", "nodes")), "items"):
        if isinstance(node, dict):
            with contextlib.suppress(Exception):
                await kube.delete(resource_path("v1", "nodes", name=json_str(node, "metadata", "name")))


@pytest.fixture
async def endpoints(kafka_bootstrap: str, database_url: str, kube_name: str) -> Endpoints:
    """Topics of this test's own, a migrated database."""
    topics = Topics(f"kb-{kube_name}")
    await create_topics(kafka_bootstrap, topics.all(), partitions=1)
    conn = await asyncpg.connect(database_url)
    try:
        await apply_migrations(conn)
    finally:
        await conn.close()
    return Endpoints(kafka_bootstrap, database_url, topics, "default")


@pytest.fixture
async def stack(
    kube_cluster: DevCluster,
    volcano_crds: KubeClient,
    kube_namespace: str,
    endpoints: Endpoints,
    tmp_path: Path,
) -> AsyncIterator[Stack]:
    """Two 1-GPU nodes (sim kubelet), projector and scheduler, and the bridge in this process."""
    kube = volcano_crds
    await _clear_nodes(kube)
    nodes = [f"{kube_namespace}-gpu-{i}" for i in range(2)]
    kubelet = SimKubelet(kube, [parse_node_shape(f"{n}:nvidia.com/gpu=1") for n in nodes], heartbeat=1)
    kubelet_task = asyncio.create_task(kubelet.run())
    kafka_bootstrap, database_url, topics = (
        endpoints.kafka_bootstrap,
        endpoints.database_url,
        endpoints.topics,
    )
    settings = TephraSettings(schedule_period=0.2)
    services = asyncio.create_task(run_services(settings, endpoints, ("projector", "scheduler")))
    kubeconfig = await bridge_kubeconfig(kube, kube_cluster, tmp_path / "bridge.kubeconfig")
    bridges: list[Bridge] = []
    bridge_task = asyncio.create_task(
        run_bridge(
            KubeBridgeSettings(kubeconfig=kubeconfig),
            object_parser("default"),
            kafka_bootstrap=kafka_bootstrap,
            database_url=database_url,
            topics=topics,
            cluster="default",
            on_ready=bridges.append,
        )
    )
    try:
        yield Stack(kube, kube_namespace, nodes, database_url, kube_cluster.kubeconfig, bridges)
    finally:
        for task in (bridge_task, services, kubelet_task):
            task.cancel()
            await stopped(task)
        await _clear_nodes(kube)


def _phase(pod: JsonObject) -> str | None:
    return json_str(pod, "status", "phase")


async def test_the_seed_articles_vcjob_runs_one_worker_on_each_gpu_node(stack: Stack) -> None:
    stack.kubectl("apply", "-f", str(DATA / "seed-vcjob.yaml"))

    def running(value: object) -> bool:
        pods = value if isinstance(value, list) else []
        return len(pods) == 2 and all(_phase(p) == "Running" for p in pods)

    pods = await eventually(stack.pods, running)
    assert isinstance(pods, list)
    assert sorted(json_str(p, "metadata", "name") or "" for p in pods) == [
        "demo-training-worker-0",
        "demo-training-worker-1",
    ]
    assert sorted(json_str(p, "spec", "nodeName") or "" for p in pods) == stack.nodes
    podgroup = await stack.kube.get(
        resource_path(
            "scheduling.volcano.sh/v1beta1", "podgroups", namespace=stack.namespace, name="demo-training"
        )
    )
    assert json_object(podgroup, "spec")["minMember"] == 2
    conn = await asyncpg.connect(stack.database_url)
    try:
        statuses = await eventually(
            lambda: conn.fetch(
                "SELECT status FROM tasks WHERE job_id = $1", f"{stack.namespace}/demo-training"
            ),
            lambda rows: isinstance(rows, list) and [r["status"] for r in rows] == ["Running", "Running"],
        )
        assert statuses
    finally:
        await conn.close()


async def test_a_lone_pod_of_ours_is_bound_and_runs(stack: Stack) -> None:
    body: JsonObject = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "lonely", "namespace": stack.namespace},
        "spec": {
            "schedulerName": "tephra",
            "containers": [
                {"name": "main", "image": "demo/x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
        },
    }
    await stack.kube.create(resource_path("v1", "pods", namespace=stack.namespace), body)
    path = resource_path("v1", "pods", namespace=stack.namespace, name="lonely")
    pod = await eventually(
        lambda: stack.kube.get(path), lambda p: isinstance(p, dict) and _phase(p) == "Running"
    )
    assert isinstance(pod, dict)
    assert json_str(pod, "spec", "nodeName") in stack.nodes
    events = await stack.kube.get(resource_path("v1", "events", namespace=stack.namespace))
    reasons = [json_str(e, "reason") for e in json_list(events, "items") if isinstance(e, dict)]
    assert "Scheduled" in reasons
