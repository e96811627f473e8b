"""The dev Kubernetes cluster for the kube tests: etcd + kube-apiserver v1.20.2, started once.

``kube_cluster`` (session) is a :class:`kube.dev.cluster.DevCluster` with RBAC on;
``kube`` (per test) an admin :class:`kube.rest.KubeClient` to it; ``kube_name`` a name no
other test uses (Nodes and Queues are cluster-scoped: tests share one apiserver);
``volcano_crds`` installs Tephra's Volcano CRDs (idempotent) and gives ``kube``;
``kube_namespace`` a fresh namespace (its objects are the test's to delete: no namespace
controller runs to empty a deleted one).

The binaries come from ``python -m kube.dev.binaries`` (``.ci/run`` runs it).  Without them a
local run skips these tests and says how to build them; under CI it fails instead.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator, Iterator

import pytest

from kube.crds import install_crds
from kube.dev.accounts import ensure_namespace
from kube.dev.binaries import BinaryMissingError, DevBinaries, find_binaries
from kube.dev.cluster import DevCluster
from kube.rest import KubeClient, json_list, json_str, resource_path


def kube_binaries() -> DevBinaries:
    """The apiserver binaries; missing, a local run skips (saying how to build them) and CI fails."""
    try:
        return find_binaries()
    except BinaryMissingError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the kube tests: {exc}")
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    with DevCluster(tmp_path_factory.mktemp("kube"), binaries=kube_binaries()) as cluster:
        yield cluster


@pytest.fixture
async def kube(kube_cluster: DevCluster) -> AsyncIterator[KubeClient]:
    async with await KubeClient.connect(kube_cluster.kubeconfig) as client:
        yield client


@pytest.fixture
def kube_name(kube_cluster: DevCluster) -> Iterator[str]:
    """A DNS-1123 name unique to this test (Nodes, Namespaces and Queues are shared by all tests).

    The Nodes named after it (``<name>`` or ``<name>-...``) are deleted afterwards, so no later
    test (a bridge's, say) finds them in the cluster.
    """
    name = f"t-{secrets.token_hex(4)}"
    yield name
    asyncio.run(_delete_nodes(kube_cluster, name))


async def _delete_nodes(cluster: DevCluster, prefix: str) -> None:
    async with await KubeClient.connect(cluster.kubeconfig) as client:
        for node in json_list(await client.get(resource_path("v1", "nodes")), "items"):
            name = json_str(node, "metadata", "name") if isinstance(node, dict) else None
            if name is not None and (name == prefix or name.startswith(f"{prefix}-")):
                await client.delete(resource_path("v1", "nodes", name=name))


@pytest.fixture
async def volcano_crds(kube: KubeClient) -> KubeClient:
    await install_crds(kube)
    return kube


@pytest.fixture
async def kube_namespace(kube: KubeClient, kube_name: str) -> str:
    await ensure_namespace(kube, kube_name)
    return kube_name
