"""Tephra's Volcano CRDs on the real apiserver: installed idempotently, the article's YAML applies."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kube.crds import crd_documents, install_crds
from kube.dev.cluster import DevCluster
from kube.rest import KubeApiError, KubeClient, json_int, json_list, json_object, json_str, resource_path

# The seed article's minimal Volcano Job (000_371f252b04cb6f3c.txt §3.3), as printed there.
from tests.api.test_manifests import DEMO_TRAINING as SEED_VCJOB

pytestmark = pytest.mark.integration

# The article's Queue (§4.2), under a name of the test's.
SEED_QUEUE = """\
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata:
  name: {name}
spec:
  weight: 3
  capability:
    nvidia.com/gpu: 80
  deserved:
    nvidia.com/gpu: 40
"""


def kubectl(cluster: DevCluster, *args: str, stdin: str | None = None) -> str:
    binary = shutil.which("kubectl")
    assert binary is not None, "kubectl is not on PATH (it is in the machine's base image)"
    done = subprocess.run(  # noqa: S603 - kubectl, arguments of the test's
        [binary, "--kubeconfig", str(cluster.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_crds_are_structural_v1_with_a_status_subresource() -> None:
    documents = crd_documents()
    assert [json_str(d, "metadata", "name") for d in documents] == [
        "jobs.batch.volcano.sh",
        "queues.scheduling.volcano.sh",
        "podgroups.scheduling.volcano.sh",
        "hypernodes.topology.volcano.sh",
    ]
    for document in documents:
        assert document["apiVersion"] == "apiextensions.k8s.io/v1"
        (version,) = json_list(document, "spec", "versions")
        assert isinstance(version, dict)
        assert json_object(version, "subresources") == {"status": {}}
    scopes = [json_str(d, "spec", "scope") for d in documents]
    assert scopes == ["Namespaced", "Cluster", "Namespaced", "Cluster"]
    assert json_list(documents[0], "spec", "names", "shortNames")[0] == "vcjob"


async def test_installing_twice_leaves_them_established(kube: KubeClient) -> None:
    assert await install_crds(kube) == await install_crds(kube)
    for name in (
        "jobs.batch.volcano.sh",
        "queues.scheduling.volcano.sh",
        "podgroups.scheduling.volcano.sh",
        "hypernodes.topology.volcano.sh",
    ):
        crd = await kube.get(resource_path("apiextensions.k8s.io/v1", "customresourcedefinitions", name=name))
        conditions = {
            c["type"]: c["status"] for c in json_list(crd, "status", "conditions") if isinstance(c, dict)
        }
        assert conditions["Established"] == "True"
        assert "NonStructuralSchema" not in conditions


async def test_the_articles_vcjob_and_queue_apply_with_kubectl_and_read_back(
    volcano_crds: KubeClient, kube_cluster: DevCluster, kube_namespace: str, kube_name: str, tmp_path: Path
) -> None:
    kube = volcano_crds
    job_file = tmp_path / "vcjob.yaml"
    job_file.write_text(SEED_VCJOB)
    assert "job.batch.volcano.sh/demo-training created" in kubectl(
        kube_cluster, "apply", "-n", kube_namespace, "-f", str(job_file)
    )
    kubectl(kube_cluster, "apply", "-f", "-", stdin=SEED_QUEUE.format(name=kube_name))

    job_path = resource_path(
        "batch.volcano.sh/v1alpha1", "jobs", namespace=kube_namespace, name="demo-training"
    )
    job = await kube.get(job_path)
    assert json_int(job, "spec", "minAvailable") == 2
    assert json_str(job, "spec", "queue") == "default"
    (task,) = json_list(job, "spec", "tasks")
    assert isinstance(task, dict)
    (container,) = json_list(json_object(task, "template", "spec"), "containers")
    assert isinstance(container, dict)
    assert json_object(container, "resources", "limits") == {"nvidia.com/gpu": 1}
    assert "demo-training" in kubectl(kube_cluster, "get", "vcjob", "-n", kube_namespace, "-o", "name")

    queue = await kube.get(resource_path("scheduling.volcano.sh/v1beta1", "queues", name=kube_name))
    assert json_int(queue, "spec", "weight") == 3
    assert json_object(queue, "spec", "capability") == {"nvidia.com/gpu": 80}

    # Status is a subresource: written through /status, ignored in the main resource.
    status = {"status": {"state": {"phase": "Pending"}, "pending": 2}}
    await kube.merge_patch(job_path + "/status", status)
    await kube.merge_patch(job_path, {"status": {"state": {"phase": "Running"}}, "spec": {"maxRetry": 5}})
    job = await kube.get(job_path)
    assert (json_str(job, "status", "state", "phase"), json_int(job, "status", "pending")) == ("Pending", 2)
    assert json_int(job, "spec", "maxRetry") == 5
    await kube.delete(job_path)


async def test_the_schemas_reject_what_volcano_rejects(volcano_crds: KubeClient, kube_namespace: str) -> None:
    with pytest.raises(KubeApiError) as weight:
        await volcano_crds.create(
            resource_path("scheduling.volcano.sh/v1beta1", "queues"),
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "Queue",
                "metadata": {"name": "zero"},
                "spec": {"weight": 0},
            },
        )
    assert weight.value.status == 422
    assert "spec.weight" in weight.value.message
    group = await volcano_crds.create(
        resource_path("scheduling.volcano.sh/v1beta1", "podgroups", namespace=kube_namespace),
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "g"},
            "spec": {"minMember": 2},
        },
    )
    assert json_str(group, "spec", "queue") == "default"  # defaulted, as Volcano's CRD does
