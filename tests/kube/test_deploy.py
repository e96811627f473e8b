"""deploy/kubernetes/: the manifests parse, fit together, and grant the bridge what they say on RBAC."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
import yaml

from api.cli import app
from kube.dev.cluster import DevCluster
from kube.dev.deploy import DEPLOY_DIR, bridge_kubeconfig, load_manifests
from kube.rest import JsonObject, KubeApiError, KubeClient, json_list, json_object, json_str, resource_path

SUBJECT = "system:serviceaccount:tephra-system:tephra-bridge"


def documents() -> dict[str, list[JsonObject]]:
    return {path.name: load_manifests(path.name) for path in sorted(DEPLOY_DIR.glob("*.yaml"))}


def deployments() -> dict[str, JsonObject]:
    return {
        json_str(d, "metadata", "name") or "": d
        for docs in documents().values()
        for d in docs
        if d.get("kind") == "Deployment"
    }


def test_kustomization_lists_every_manifest_but_the_secret_example() -> None:
    kustomization = yaml.safe_load((DEPLOY_DIR / "kustomization.yaml").read_text())
    manifests = set(documents()) - {"kustomization.yaml", "secret.example.yaml"}
    assert set(kustomization["resources"]) == manifests
    assert kustomization["resources"][:2] == ["namespace.yaml", "rbac.yaml"]  # before what uses them


def test_every_object_has_a_kind_a_name_and_lives_in_tephra_system() -> None:
    for name, docs in documents().items():
        for document in docs:
            if document.get("kind") in ("Kustomization", "Namespace", "ClusterRole", "ClusterRoleBinding"):
                continue
            assert json_str(document, "metadata", "namespace") == "tephra-system", name


def test_the_deployments_run_tephra_commands_and_only_the_bridge_holds_a_token() -> None:
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    commands = set(group.commands)
    found = deployments()
    assert set(found) == {"tephra-bridge", "tephra-projector", "tephra-scheduler"}
    for name, deployment in found.items():
        pod = json_object(deployment, "spec", "template", "spec")
        (container,) = json_list(pod, "containers")
        assert isinstance(container, dict)
        args = json_list(container, "args")
        if name == "tephra-bridge":
            assert args == ["kube-bridge", "--install-crds"]
            assert pod["serviceAccountName"] == "tephra-bridge"
        else:
            assert args[0] in commands
            assert pod["automountServiceAccountToken"] is False
        assert json_str(deployment, "spec", "strategy", "type") == "Recreate"  # one active at a time


# (group, resource, subresource, verb) the bridge is granted, exactly: each a call it makes.
GRANTED = [
    *[("", "nodes", "", verb) for verb in ("list", "watch")],
    *[("", "pods", "", verb) for verb in ("get", "list", "watch", "create", "delete")],
    ("", "pods", "binding", "create"),
    ("", "pods", "eviction", "create"),
    ("", "events", "", "create"),
    *[("scheduling.k8s.io", "priorityclasses", "", verb) for verb in ("list", "watch")],
    *[("batch.volcano.sh", "jobs", "", verb) for verb in ("list", "watch")],
    ("batch.volcano.sh", "jobs", "status", "patch"),
    *[("scheduling.volcano.sh", "queues", "", verb) for verb in ("list", "watch")],
    *[("scheduling.volcano.sh", "podgroups", "", verb) for verb in ("list", "watch", "create")],
    ("scheduling.volcano.sh", "podgroups", "status", "patch"),
    ("scheduling.volcano.sh", "queues", "status", "patch"),
    *[("topology.volcano.sh", "hypernodes", "", verb) for verb in ("list", "watch")],
    *[
        ("apiextensions.k8s.io", "customresourcedefinitions", "", verb)
        for verb in ("create", "get", "update")
    ],
]
DENIED = [
    ("", "secrets", "", "get"),
    ("", "nodes", "", "get"),
    ("", "nodes", "", "delete"),
    ("", "nodes", "", "patch"),
    ("", "pods", "", "update"),
    ("", "pods", "", "patch"),
    ("", "pods", "exec", "create"),
    ("", "events", "", "patch"),
    ("", "configmaps", "", "list"),
    ("batch.volcano.sh", "jobs", "", "delete"),
    ("batch.volcano.sh", "jobs", "status", "update"),
    ("scheduling.volcano.sh", "queues", "", "create"),
    ("scheduling.volcano.sh", "queues", "", "get"),
    ("scheduling.volcano.sh", "queues", "status", "update"),
    ("scheduling.volcano.sh", "podgroups", "status", "update"),
    ("topology.volcano.sh", "hypernodes", "", "get"),
    ("topology.volcano.sh", "hypernodes", "status", "patch"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "", "delete"),
    ("rbac.authorization.k8s.io", "clusterroles", "", "create"),
]


def test_the_cluster_role_lists_exactly_the_granted_verbs() -> None:
    (role,) = [d for d in load_manifests("rbac.yaml") if d.get("kind") == "ClusterRole"]
    expanded = []
    for rule in json_list(role, "rules"):
        assert isinstance(rule, dict)
        for group in json_list(rule, "apiGroups"):
            for name in json_list(rule, "resources"):
                resource, _, subresource = str(name).partition("/")
                expanded.extend((group, resource, subresource, verb) for verb in json_list(rule, "verbs"))
    assert sorted(expanded) == sorted(GRANTED)  # no verb twice, none the bridge does not use


async def allowed(kube: KubeClient, group: str, resource: str, subresource: str, verb: str) -> bool:
    review = await kube.create(
        resource_path("authorization.k8s.io/v1", "subjectaccessreviews"),
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": SUBJECT,
                "groups": [
                    "system:serviceaccounts",
                    "system:serviceaccounts:tephra-system",
                    "system:authenticated",
                ],
                "resourceAttributes": {
                    "group": group,
                    "resource": resource,
                    "subresource": subresource,
                    "verb": verb,
                    "namespace": "default",
                },
            },
        },
    )
    return json_object(review, "status").get("allowed") is True


@pytest.mark.integration
async def test_the_cluster_role_grants_the_bridge_exactly_its_verbs(
    kube: KubeClient, kube_cluster: DevCluster, tmp_path: Path
) -> None:
    path = await bridge_kubeconfig(kube, kube_cluster, tmp_path / "bridge.kubeconfig")
    assert await bridge_kubeconfig(kube, kube_cluster, tmp_path / "again.kubeconfig")  # idempotent
    assert [rule for rule in GRANTED if not await allowed(kube, *rule)] == []
    assert [rule for rule in DENIED if await allowed(kube, *rule)] == []

    async with await KubeClient.connect(path) as bridge:
        nodes = await bridge.get(resource_path("v1", "nodes"))
        assert json_str(nodes, "kind") == "NodeList"
        with pytest.raises(KubeApiError) as denied:
            await bridge.get(resource_path("v1", "secrets", namespace="tephra-system"))
        assert denied.value.status == 403


@pytest.mark.integration
async def test_the_deployments_pass_the_apiservers_validation(
    kube: KubeClient, kube_cluster: DevCluster, tmp_path: Path
) -> None:
    await bridge_kubeconfig(kube, kube_cluster, tmp_path / "bridge.kubeconfig")  # the namespace
    for deployment in deployments().values():
        created = await kube.request(
            "POST",
            resource_path("apps/v1", "deployments", namespace="tephra-system"),
            query={"dryRun": "All"},
            body=deployment,
        )
        assert json_str(created, "metadata", "namespace") == "tephra-system"
