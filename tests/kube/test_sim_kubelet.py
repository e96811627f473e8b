"""The sim kubelet on the real apiserver: Ready nodes without the not-ready taint, pods run, finish, go."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from kube.dev.cluster import DevCluster
from kube.rest import JsonObject, KubeApiError, KubeClient, json_list, json_object, json_str, resource_path
from kube.sim_kubelet import SIM_NODE_LABEL, NodeShape, SimKubelet, parse_node_shape
from kube.sim_runtime import SIM_RUNTIME_ANNOTATION

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


async def eventually(
    read: Callable[[], Awaitable[JsonObject | None]], check: Callable[[JsonObject | None], bool]
) -> JsonObject | None:
    """Read until ``check`` holds (the sim kubelet works asynchronously); fail after 30 s."""
    async with asyncio.timeout(30):
        while True:
            value = await read()
            if check(value):
                return value
            await asyncio.sleep(0.05)


def taint_keys(node: JsonObject | None) -> list[str]:
    return [str(t.get("key")) for t in json_list(node or {}, "spec", "taints") if isinstance(t, dict)]


def ready(node: JsonObject | None) -> bool:
    conditions = [c for c in json_list(node or {}, "status", "conditions") if isinstance(c, dict)]
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


@pytest.fixture
async def sim_kubelet(kube: KubeClient, kube_name: str) -> AsyncIterator[SimKubelet]:
    kubelet = SimKubelet(
        kube,
        [parse_node_shape(f"{kube_name}-gpu:nvidia.com/gpu=1"), NodeShape(f"{kube_name}-cpu")],
        heartbeat=1,
    )
    running = asyncio.create_task(kubelet.run())
    await asyncio.wait(
        {running, asyncio.create_task(kubelet.synced.wait())}, return_when=asyncio.FIRST_COMPLETED
    )
    if running.done():
        running.result()  # it failed starting: say why
    yield kubelet
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running


def pod(name: str, node: str, annotations: dict[str, str] | None = None) -> JsonObject:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "demo/trainer:latest"}]},
    }


def test_a_node_shape_is_a_name_and_resources() -> None:
    shape = parse_node_shape("gpu-1:cpu=64,memory=512Gi,nvidia.com/gpu=8")
    assert (shape.name, dict(shape.resources)) == (
        "gpu-1",
        {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"},
    )
    assert parse_node_shape("n").resources["cpu"] == "8"
    with pytest.raises(ValueError, match="RESOURCE=QUANTITY"):
        parse_node_shape("n:cpu")


async def test_its_nodes_are_ready_without_the_not_ready_taint(
    kube: KubeClient, kube_name: str, sim_kubelet: SimKubelet
) -> None:
    for name in (f"{kube_name}-gpu", f"{kube_name}-cpu"):
        node = await eventually(
            lambda name=name: kube.get(resource_path("v1", "nodes", name=name)),
            lambda n: ready(n) and "node.kubernetes.io/not-ready" not in taint_keys(n),
        )
        assert json_str(node or {}, "metadata", "labels", SIM_NODE_LABEL) == "true"
    gpu = await kube.get(resource_path("v1", "nodes", name=f"{kube_name}-gpu"))
    assert json_object(gpu, "status", "allocatable")["nvidia.com/gpu"] == "1"


async def test_it_adopts_a_node_labelled_for_it_and_leaves_other_taints(
    kube: KubeClient, kube_name: str, sim_kubelet: SimKubelet
) -> None:
    name = f"{kube_name}-adopted"
    await kube.create(
        resource_path("v1", "nodes"),
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {SIM_NODE_LABEL: "true"}},
            "spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]},
        },
    )
    node = await eventually(
        lambda: kube.get(resource_path("v1", "nodes", name=name)),
        lambda n: ready(n) and taint_keys(n) == ["dedicated"],
    )
    assert node is not None


async def test_a_bound_pod_runs_then_succeeds_after_its_sim_runtime(
    kube: KubeClient, kube_name: str, kube_namespace: str, sim_kubelet: SimKubelet
) -> None:
    pods = resource_path("v1", "pods", namespace=kube_namespace)
    await kube.create(pods, pod("short", f"{kube_name}-gpu", {SIM_RUNTIME_ANNOTATION: "1s"}))
    await kube.create(pods, pod("forever", f"{kube_name}-gpu"))
    path = resource_path("v1", "pods", namespace=kube_namespace, name="short")
    running = await eventually(
        lambda: kube.get(path), lambda p: json_str(p or {}, "status", "phase") != "Pending"
    )
    assert json_str(running or {}, "status", "phase") in ("Running", "Succeeded")
    done = await eventually(
        lambda: kube.get(path), lambda p: json_str(p or {}, "status", "phase") == "Succeeded"
    )
    (status,) = json_list(done or {}, "status", "containerStatuses")
    assert isinstance(status, dict)
    assert json_object(status, "state", "terminated")["exitCode"] == 0

    forever = resource_path("v1", "pods", namespace=kube_namespace, name="forever")
    await eventually(lambda: kube.get(forever), lambda p: json_str(p or {}, "status", "phase") == "Running")


async def test_a_deleted_pod_is_removed_with_grace_zero(
    kube: KubeClient, kube_name: str, kube_namespace: str, sim_kubelet: SimKubelet
) -> None:
    path = resource_path("v1", "pods", namespace=kube_namespace, name="victim")
    await kube.create(
        resource_path("v1", "pods", namespace=kube_namespace), pod("victim", f"{kube_name}-cpu")
    )
    await eventually(lambda: kube.get(path), lambda p: json_str(p or {}, "status", "phase") == "Running")
    await kube.delete(path)  # graceful (30 s): only a kubelet's grace-0 delete removes a bound pod

    async def current() -> JsonObject | None:
        try:
            return await kube.get(path)
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise

    assert await eventually(current, lambda p: p is None) is None


async def test_a_pod_on_a_node_it_does_not_own_stays_pending(
    kube: KubeClient, kube_name: str, kube_namespace: str, sim_kubelet: SimKubelet
) -> None:
    await kube.create(
        resource_path("v1", "pods", namespace=kube_namespace), pod("elsewhere", f"{kube_name}-nobody")
    )
    await kube.create(
        resource_path("v1", "pods", namespace=kube_namespace), pod("marker", f"{kube_name}-cpu")
    )
    marker = resource_path("v1", "pods", namespace=kube_namespace, name="marker")
    # The marker, created after, is Running: the kubelet has seen both pods.
    await eventually(lambda: kube.get(marker), lambda p: json_str(p or {}, "status", "phase") == "Running")
    elsewhere = await kube.get(resource_path("v1", "pods", namespace=kube_namespace, name="elsewhere"))
    assert json_str(elsewhere, "status", "phase") == "Pending"


def test_the_command_runs_its_nodes_until_sigterm(kube_cluster: DevCluster, kube_name: str) -> None:
    name = f"{kube_name}-cli"
    command = subprocess.Popen(  # noqa: S603 - our own CLI, fixed arguments
        [sys.executable, "-m", "api.cli", "kube-sim-kubelet", "--node", f"{name}:nvidia.com/gpu=2"],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "KUBECONFIG": str(kube_cluster.kubeconfig), "PYTHONPATH": str(ROOT)},
    )
    try:
        assert command.stderr is not None
        assert command.stderr.readline().startswith("tephra: sim-kubelet running")

        async def ready_node() -> JsonObject | None:
            async with await KubeClient.connect(kube_cluster.kubeconfig) as kube:
                return await eventually(
                    lambda: kube.get(resource_path("v1", "nodes", name=name)),
                    lambda n: ready(n) and not taint_keys(n),
                )

        node = asyncio.run(ready_node())
        assert json_object(node or {}, "status", "allocatable")["nvidia.com/gpu"] == "2"
    finally:
        command.send_signal(signal.SIGTERM)
        _, errors = command.communicate(timeout=30)
    assert command.returncode == 0, errors
