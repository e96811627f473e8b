"""The bridge's ServiceAccount and ClusterRole from ``deploy/kubernetes/`` on a dev cluster.

Tests run the bridge the way a deployment does: as the ServiceAccount ``tephra-bridge`` with
exactly the ClusterRole of ``deploy/kubernetes/rbac.yaml``, on an RBAC-enforcing apiserver.
:func:`bridge_kubeconfig` applies that file (and the namespace) with the admin's client, mints the
account's token and writes a kubeconfig using it.  The files are read from the source checkout
(``deploy/`` is not part of the installed package), which is where tests and benchmarks run.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml

from kube.dev.accounts import service_account_kubeconfig
from kube.dev.cluster import DevCluster
from kube.rest import JsonObject, KubeApiError, KubeClient, json_object, json_str, resource_path

__all__ = ["DEPLOY_DIR", "apply_objects", "bridge_kubeconfig", "load_manifests"]

DEPLOY_DIR = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
BRIDGE_NAMESPACE = "tephra-system"
BRIDGE_ACCOUNT = "tephra-bridge"

# kind -> (group/version, plural, namespaced): the kinds kube-dev applies.
_KINDS = {
    "Namespace": ("v1", "namespaces", False),
    "ServiceAccount": ("v1", "serviceaccounts", True),
    "ClusterRole": ("rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Deployment": ("apps/v1", "deployments", True),
}


def load_manifests(*names: str) -> list[JsonObject]:
    """The documents of ``deploy/kubernetes/<name>`` for each name, in order."""
    documents: list[JsonObject] = []
    for name in names:
        for document in yaml.safe_load_all((DEPLOY_DIR / name).read_text()):
            if not isinstance(document, dict):
                raise TypeError(f"deploy/kubernetes/{name}: a document is not a mapping")
            documents.append(document)
    return documents


def _paths(document: JsonObject) -> tuple[str, str]:
    """The collection to create ``document`` in and the object's own path."""
    kind = json_str(document, "kind") or ""
    if kind not in _KINDS:
        raise ValueError(f"kube.dev.deploy applies {', '.join(sorted(_KINDS))}, not {kind!r}")
    group_version, plural, namespaced = _KINDS[kind]
    namespace = json_str(document, "metadata", "namespace") if namespaced else None
    name = json_str(document, "metadata", "name")
    return (
        resource_path(group_version, plural, namespace=namespace),
        resource_path(group_version, plural, namespace=namespace, name=name),
    )


async def apply_objects(client: KubeClient, documents: Sequence[JsonObject]) -> None:
    """Create each object, or replace the one there (as ``kubectl apply`` ends up doing)."""
    for document in documents:
        collection, path = _paths(document)
        try:
            await client.create(collection, document)
        except KubeApiError as exc:
            if exc.status != 409:
                raise
            current = await client.get(path)
            version = json_str(current, "metadata", "resourceVersion")
            metadata: JsonObject = {**json_object(document, "metadata"), "resourceVersion": version}
            await client.request("PUT", path, body={**document, "metadata": metadata})


async def bridge_kubeconfig(client: KubeClient, cluster: DevCluster, path: Path) -> Path:
    """Apply namespace.yaml and rbac.yaml; a kubeconfig for ``tephra-system/tephra-bridge`` at ``path``."""
    await apply_objects(client, load_manifests("namespace.yaml", "rbac.yaml"))
    return await service_account_kubeconfig(client, cluster, BRIDGE_NAMESPACE, BRIDGE_ACCOUNT, path)
