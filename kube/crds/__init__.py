"""Volcano's CRDs as Tephra defines them (Job, Queue, PodGroup, HyperNode) and installing them.

The YAML files beside this module are structural ``apiextensions.k8s.io/v1`` CRDs written for
Tephra from Volcano's API semantics, so ``kubectl apply`` of a Volcano Job, Queue, PodGroup or
HyperNode works on a cluster without Volcano (or with one older than its HyperNodes).
:func:`install_crds` (``tephra kube-bridge --install-crds``) creates or updates them and waits
until the apiserver serves them.
"""

from __future__ import annotations

import asyncio
import functools
from importlib.resources import files

import yaml

from kube.rest import JsonObject, KubeApiError, KubeClient, json_list, json_str, resource_path

__all__ = ["CRD_FILES", "crd_documents", "install_crds"]

CRD_FILES = ("jobs.yaml", "queues.yaml", "podgroups.yaml", "hypernodes.yaml")
_CRDS = "apiextensions.k8s.io/v1"
# An apiserver establishes a CRD within a second; a minute means something is wrong.
ESTABLISH_SECONDS = 60


def crd_documents() -> list[JsonObject]:
    """The CRDs, parsed, in :data:`CRD_FILES` order."""
    documents: list[JsonObject] = []
    for name in CRD_FILES:
        document = yaml.safe_load(files(__package__).joinpath(name).read_text())
        if not isinstance(document, dict):
            raise TypeError(f"kube/crds/{name} is not one YAML mapping")
        documents.append(document)
    return documents


def _established(crd: JsonObject) -> bool:
    for condition in json_list(crd, "status", "conditions"):
        if isinstance(condition, dict) and condition.get("type") == "Established":
            return condition.get("status") == "True"
    return False


async def _apply(client: KubeClient, crd: JsonObject) -> str:
    name = json_str(crd, "metadata", "name") or ""
    try:
        await client.create(resource_path(_CRDS, "customresourcedefinitions"), crd)
    except KubeApiError as exc:
        if exc.status != 409:
            raise
        # Present (an earlier install, or Volcano's own): replace its spec with ours, at its version.
        current = await client.get(resource_path(_CRDS, "customresourcedefinitions", name=name))
        replacement = {
            **crd,
            "metadata": {"name": name, "resourceVersion": json_str(current, "metadata", "resourceVersion")},
        }
        await client.request(
            "PUT", resource_path(_CRDS, "customresourcedefinitions", name=name), body=replacement
        )
    return name


async def install_crds(client: KubeClient) -> list[str]:
    """Create or update the CRDs, then wait until each is Established; their names.

    Needs ``customresourcedefinitions`` create, get and update.  Raises :class:`TimeoutError`
    naming the CRDs not established after :data:`ESTABLISH_SECONDS`.
    """
    names = [await _apply(client, crd) for crd in crd_documents()]
    waiting = list(names)
    try:
        async with asyncio.timeout(ESTABLISH_SECONDS):
            while waiting:
                path = functools.partial(resource_path, _CRDS, "customresourcedefinitions")
                waiting = [name for name in waiting if not _established(await client.get(path(name=name)))]
                if waiting:
                    await asyncio.sleep(0.2)
    except TimeoutError:
        raise TimeoutError(
            f"CRDs not established after {ESTABLISH_SECONDS} s: {', '.join(waiting)}"
        ) from None
    return names
