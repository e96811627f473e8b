"""The scenario loader: VolcanoJob expansion and error locations."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.core.snapshot import PodGroupPhase
from scheduler.scenario import ScenarioError, load_scenario

HEAD = """apiVersion: tephra.dev/v1alpha1
kind: Scenario
metadata: {name: t}
spec: {config: {actions: "enqueue, allocate", tiers: [{plugins: [{name: gang}]}]}}
"""

VCJOB = """---
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: train, namespace: ml}
spec:
  minAvailable: 3
  tasks:
    - name: ps
      replicas: 1
      template: {spec: {priorityClassName: high, containers: [{name: c, resources: {requests: {cpu: "2"}}}]}}
    - name: worker
      replicas: 4
      minAvailable: 2
      template: {spec: {containers: [{name: c, resources: {requests: {nvidia.com/gpu: "1"}}}]}}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 100
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


def test_volcano_job_derives_podgroup_and_pods(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, HEAD + VCJOB))
    (job,) = scenario.snapshot.jobs
    assert job.uid == "ml/train"
    assert job.queue == "default"
    assert job.phase is PodGroupPhase.PENDING
    assert job.min_member == 3
    assert dict(job.min_task_member) == {"ps": 1, "worker": 2}
    # minAvailable 3 == Σ task minAvailable: ps (priority 100) first, then 2 workers.
    assert job.min_resources == {"cpu": 2000, "nvidia.com/gpu": 2, "pods": 3}
    names = [t.name for t in job.tasks]
    assert names == ["train-ps-0", *(f"train-worker-{i}" for i in range(4))]
    assert {t.role for t in job.tasks} == {"ps", "worker"}
    assert job.tasks[0].priority == 100


@pytest.mark.parametrize(
    ("body", "document", "where"),
    [
        (
            "---\napiVersion: v1\nkind: Node\nmetadata: {name: n}\nstatus: {allocatable: {cpu: x}}\n",
            1,
            "status.allocatable.cpu",
        ),
        ("---\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\n", 1, "apiVersion/kind"),
        (
            "---\napiVersion: v1\nkind: Pod\n"
            "metadata: {name: p, annotations: {scheduling.k8s.io/group-name: g}}\n"
            "spec: {containers: [{name: c}]}\n",
            1,
            'metadata.annotations["scheduling.k8s.io/group-name"]',
        ),
    ],
)
def test_errors_name_file_document_and_field(tmp_path: Path, body: str, document: int, where: str) -> None:
    path = write(tmp_path, HEAD + body)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert info.value.file == str(path)
    assert info.value.document == document
    assert info.value.where == where


def test_unknown_plugin_in_config_is_reported_with_location(tmp_path: Path) -> None:
    text = HEAD.replace("name: gang", "name: gangs")
    with pytest.raises(
        ScenarioError, match=r"spec\.config\.tiers\[0\]\.plugins\[0\]\.name: unknown plugin 'gangs'"
    ):
        load_scenario(write(tmp_path, text))
