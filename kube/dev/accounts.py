"""ServiceAccounts on the dev cluster: create one, mint its token (TokenRequest), write its kubeconfig.

No controller-manager runs there, so nothing makes a namespace's default ServiceAccount or a
token Secret: the namespace and the account are created here, and the token comes from the
TokenRequest API (``serviceaccounts/<name>/token``), signed by the apiserver's key.
"""

from __future__ import annotations

from pathlib import Path

from kube.dev.cluster import DevCluster, write_kubeconfig
from kube.rest import KubeApiError, KubeClient, json_str, resource_path

__all__ = ["ensure_namespace", "ensure_service_account", "service_account_kubeconfig"]

# A day: longer than any test or benchmark run.
TOKEN_SECONDS = 86_400


async def _create_if_absent(client: KubeClient, path: str, body: dict[str, object]) -> None:
    try:
        await client.create(path, body)
    except KubeApiError as exc:
        if exc.status != 409:  # AlreadyExists: what we wanted
            raise


async def ensure_namespace(client: KubeClient, name: str) -> None:
    body: dict[str, object] = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    await _create_if_absent(client, resource_path("v1", "namespaces"), body)


async def ensure_service_account(client: KubeClient, namespace: str, name: str) -> None:
    await ensure_namespace(client, namespace)
    body: dict[str, object] = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": namespace},
    }
    await _create_if_absent(client, resource_path("v1", "serviceaccounts", namespace=namespace), body)


async def service_account_kubeconfig(
    client: KubeClient, cluster: DevCluster, namespace: str, name: str, path: Path
) -> Path:
    """Create ``namespace/name`` if absent, mint a token for it, write a kubeconfig using it at ``path``.

    ``client`` must be allowed to create ServiceAccounts and their tokens (the admin's is).
    The account has no permissions beyond what RoleBindings grant it.
    """
    await ensure_service_account(client, namespace, name)
    request: dict[str, object] = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": TOKEN_SECONDS},
    }
    path_ = resource_path("v1", "serviceaccounts", namespace=namespace, name=name, subresource="token")
    reply = await client.create(path_, request)
    token = json_str(reply, "status", "token")
    if not token:
        raise RuntimeError(f"TokenRequest for {namespace}/{name} returned no token")
    return write_kubeconfig(
        path,
        server=cluster.server,
        ca_file=cluster.ca_file,
        user=f"system:serviceaccount:{namespace}:{name}",
        token=token,
    )
