"""The bridge's writes to the apiserver: bindings, evictions, the job controller's creations.

Each is idempotent, so a retry or a restarted bridge does no harm:

* a binding names the pod's uid (a pod recreated under the same name is not
  bound by an older decision); a ``409`` whose pod is on the wanted node
  already counts as done, any other 409 is a conflict reported, never retried;
* an eviction goes through the Eviction API (``policy/v1`` where served,
  else ``policy/v1beta1`` as on 1.20), with the pod's uid as precondition;
  a pod already gone is done; a ``429`` (a PodDisruptionBudget) is retried
  by the next reconcile; any other refusal falls back to deleting the pod;
* creations answered ``409 AlreadyExists`` are done.
"""

from __future__ import annotations

import logging
from enum import StrEnum

from kube.bridge.objects import PodRef
from kube.rest import JsonObject, KubeApiError, KubeClient, json_list, json_object, json_str, resource_path

__all__ = ["BindOutcome", "EvictOutcome", "bind_pod", "create_if_absent", "evict_pod", "eviction_version"]

log = logging.getLogger(__name__)


class BindOutcome(StrEnum):
    BOUND = "bound"
    ALREADY = "already"  # 409, and the pod is on that node: an earlier call of ours
    CONFLICT = "conflict"  # 409 for another node, or another pod under the name
    GONE = "gone"


class EvictOutcome(StrEnum):
    EVICTED = "evicted"
    DELETED = "deleted"  # the Eviction API refused; the pod was deleted instead
    GONE = "gone"
    BLOCKED = "blocked"  # 429: a disruption budget; tried again later


async def bind_pod(client: KubeClient, pod: PodRef, node: str) -> BindOutcome:
    body: JsonObject = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    path = resource_path("v1", "pods", namespace=pod.namespace, name=pod.name, subresource="binding")
    try:
        await client.create(path, body)
    except KubeApiError as exc:
        if exc.status == 404:
            return BindOutcome.GONE
        if exc.status != 409:
            raise
        try:
            current = await client.get(resource_path("v1", "pods", namespace=pod.namespace, name=pod.name))
        except KubeApiError as again:
            if again.status == 404:
                return BindOutcome.GONE
            raise
        same_pod = json_str(current, "metadata", "uid") == pod.uid
        if same_pod and json_str(current, "spec", "nodeName") == node:
            return BindOutcome.ALREADY
        log.warning("binding %s/%s to %s refused: %s", pod.namespace, pod.name, node, exc.message)
        return BindOutcome.CONFLICT
    return BindOutcome.BOUND


async def eviction_version(client: KubeClient) -> str:
    """``policy/v1`` when the apiserver serves it (1.22+), else ``policy/v1beta1``."""
    try:
        group = await client.get("/apis/policy")
    except KubeApiError:
        return "policy/v1beta1"
    served = {json_str(v, "groupVersion") for v in json_list(group, "versions") if isinstance(v, dict)}
    return "policy/v1" if "policy/v1" in served else "policy/v1beta1"


async def evict_pod(client: KubeClient, pod: PodRef, version: str) -> EvictOutcome:
    body: JsonObject = {
        "apiVersion": version,
        "kind": "Eviction",
        "metadata": {"name": pod.name, "namespace": pod.namespace},
        "deleteOptions": {"preconditions": {"uid": pod.uid}},
    }
    path = resource_path("v1", "pods", namespace=pod.namespace, name=pod.name, subresource="eviction")
    try:
        await client.create(path, body)
    except KubeApiError as exc:
        if exc.status == 404:
            return EvictOutcome.GONE
        if exc.status == 429:
            return EvictOutcome.BLOCKED
        if exc.status == 409:  # the uid precondition: another pod under the name now
            return EvictOutcome.GONE
        log.warning("evicting %s/%s refused (%s); deleting it", pod.namespace, pod.name, exc.message)
        try:
            await client.delete(
                resource_path("v1", "pods", namespace=pod.namespace, name=pod.name),
                {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": pod.uid}},
            )
        except KubeApiError as again:
            if again.status in (404, 409):
                return EvictOutcome.GONE
            raise
        return EvictOutcome.DELETED
    return EvictOutcome.EVICTED


async def create_if_absent(client: KubeClient, path: str, body: JsonObject) -> bool:
    """Create; False when it existed already."""
    try:
        await client.create(path, body)
    except KubeApiError as exc:
        if exc.status == 409:
            return False
        raise
    return True


def namespace_of(obj: JsonObject) -> str:
    return json_str(json_object(obj, "metadata"), "namespace") or "default"
