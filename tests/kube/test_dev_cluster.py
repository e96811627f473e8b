"""The dev cluster is a real apiserver: RBAC enforced, TokenRequest working, the not-ready taint set."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

from kube.dev.accounts import service_account_kubeconfig
from kube.dev.cluster import DevCluster
from kube.rest import KubeApiError, KubeClient, json_list, json_str, resource_path

pytestmark = pytest.mark.integration


async def test_a_new_node_gets_the_not_ready_taint_and_is_listed(
    kube_cluster: DevCluster, kube_name: str
) -> None:
    configuration = k8s.Configuration()
    await k8s_config.load_kube_config(
        config_file=str(kube_cluster.kubeconfig), client_configuration=configuration, persist_config=False
    )
    async with k8s.ApiClient(configuration=configuration) as api_client:
        core = k8s.CoreV1Api(api_client)
        node = k8s.V1Node(
            metadata=k8s.V1ObjectMeta(name=kube_name, labels={"test": kube_name}),
            status=k8s.V1NodeStatus(allocatable={"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"}),
        )
        created = await core.create_node(node)
        assert [(t.key, t.effect) for t in created.spec.taints] == [
            ("node.kubernetes.io/not-ready", "NoSchedule")
        ]
        listed = await core.list_node(label_selector=f"test={kube_name}")
        assert [n.metadata.name for n in listed.items] == [kube_name]
        assert listed.items[0].status.allocatable["nvidia.com/gpu"] == "1"


async def test_a_service_account_kubeconfig_is_held_to_rbac(
    kube: KubeClient, kube_cluster: DevCluster, kube_name: str, tmp_path: Path
) -> None:
    path = await service_account_kubeconfig(
        kube, kube_cluster, kube_name, "reader", tmp_path / "sa.kubeconfig"
    )
    async with await KubeClient.connect(path) as account:
        with pytest.raises(KubeApiError) as denied:
            await account.get(resource_path("v1", "nodes"))
        assert denied.value.status == 403
        assert f"system:serviceaccount:{kube_name}:reader" in denied.value.message

        await kube.create(
            resource_path("rbac.authorization.k8s.io/v1", "clusterroles"),
            {
                "metadata": {"name": kube_name},
                "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}],
            },
        )
        await kube.create(
            resource_path("rbac.authorization.k8s.io/v1", "clusterrolebindings"),
            {
                "metadata": {"name": kube_name},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": kube_name,
                },
                "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": kube_name}],
            },
        )
        listed = await account.get(resource_path("v1", "nodes"))
        assert json_str(listed, "kind") == "NodeList"
        assert isinstance(json_list(listed, "items"), list)
        with pytest.raises(KubeApiError) as still_denied:
            await account.get(resource_path("v1", "pods"))
        assert still_denied.value.status == 403


async def test_an_api_error_carries_the_status_reason_and_message(kube: KubeClient, kube_name: str) -> None:
    with pytest.raises(KubeApiError) as missing:
        await kube.get(resource_path("v1", "nodes", name=kube_name))
    assert (missing.value.status, missing.value.reason) == (404, "NotFound")
    assert kube_name in missing.value.message


async def _namespace_phase(kubeconfig: Path, name: str) -> str | None:
    async with await KubeClient.connect(kubeconfig) as client:
        return json_str(await client.get(resource_path("v1", "namespaces", name=name)), "status", "phase")


def test_the_command_prints_a_working_kubeconfig_and_stops_on_sigterm(
    kube_cluster: DevCluster, tmp_path: Path
) -> None:
    # kube_cluster: the binaries are there (or the test was skipped with the reason).
    command = subprocess.Popen(  # noqa: S603 (our own CLI)
        [sys.executable, "-m", "api.cli", "kube-dev-cluster", "--dir", str(tmp_path / "data")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    try:
        assert command.stdout is not None
        kubeconfig = command.stdout.readline().strip()
        assert asyncio.run(_namespace_phase(Path(kubeconfig), "kube-system")) == "Active"
    finally:
        command.send_signal(signal.SIGTERM)
        _, errors = command.communicate(timeout=30)
    assert command.returncode == 0, errors
    assert "kube-apiserver v1.20.2 at https://127.0.0.1:" in errors
