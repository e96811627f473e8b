"""Volcano / Kubernetes manifests -> events: every kind, the vcjob defaults, and errors that point."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from api.manifests import InvalidManifests, Manifests, load_manifest_files, parse_manifests
from events.models import (
    JobSubmitted,
    NodeReported,
    PriorityClassUpserted,
    QueueUpserted,
    SchedulerConfigured,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SEED_01 = Path("/work/shared/conformance/SEED-01.yaml")


def parse(text: str, file: str = "jobs.yaml") -> Manifests:
    counter = itertools.count()
    return parse_manifests([(file, text)], cluster="c1", now=NOW, new_id=lambda: f"id-{next(counter)}")


def errors_of(text: str, file: str = "jobs.yaml") -> list[str]:
    with pytest.raises(InvalidManifests) as info:
        parse(text, file)
    return [str(e) for e in info.value.errors]


DEMO_TRAINING = """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: demo-training}
spec:
  minAvailable: 2
  schedulerName: volcano
  queue: default
  tasks:
    - replicas: 2
      name: worker
      template:
        spec:
          containers:
            - name: trainer
              image: demo/trainer:latest
              resources:
                limits: {nvidia.com/gpu: 1}
          restartPolicy: Never
"""


def test_the_seed_demo_training_job_becomes_one_job_submitted_with_requests_from_limits() -> None:
    parsed = parse(DEMO_TRAINING)
    [obj] = parsed.objects
    assert obj.ref == "job/default/demo-training"
    event = obj.event
    assert isinstance(event, JobSubmitted)
    assert (event.cluster, event.source, event.subject, event.time) == (
        "c1",
        "tephra://cli/submit",
        "job/default/demo-training",
        NOW,
    )
    data = event.data
    assert (data.namespace, data.name, data.queue, data.min_available) == (
        "default",
        "demo-training",
        "default",
        2,
    )
    [task] = data.tasks
    assert (task.name, task.replicas, task.min_available) == ("worker", 2, 2)
    assert task.resources == {"nvidia.com/gpu": 1}
    # minResources: both pods of the gang, each also counting one `pods`.
    assert data.min_resources == {"nvidia.com/gpu": 2, "pods": 2}
    assert parsed.warnings == ()


def test_scheduling_gates_travel_in_the_event_with_a_warning_that_nothing_removes_them() -> None:
    parsed = parse(DEMO_TRAINING.replace("restartPolicy: Never", "schedulingGates: [{name: b}, {name: a}]"))
    [obj] = parsed.objects
    assert isinstance(obj.event, JobSubmitted)
    [task] = obj.event.data.tasks
    assert task.scheduling_gates == ["b", "a"]
    assert task.model_dump(mode="json")["scheduling_gates"] == ["b", "a"]
    [warning] = parsed.warnings
    assert (warning.document, warning.field) == (1, "spec.tasks[0].template.spec.schedulingGates")
    assert "nothing in Tephra removes a gate" in warning.message
    assert "until it is cancelled" in warning.message
    # Without gates the field is left out: events written before it keep their bytes.
    [plain] = parse(DEMO_TRAINING).objects
    assert isinstance(plain.event, JobSubmitted)
    assert "scheduling_gates" not in plain.event.data.tasks[0].model_dump(mode="json")


def test_vcjob_defaults_queue_task_names_and_min_available() -> None:
    [obj] = parse(
        """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: j, namespace: team-a}
spec:
  tasks:
    - replicas: 3
      template: {spec: {containers: [{name: c, resources: {requests: {cpu: 500m, memory: 1Gi}}}]}}
    - replicas: 1
      minAvailable: 0
      template: {spec: {containers: [{name: c, resources: {requests: {cpu: "1"}}}]}}
"""
    ).objects
    assert isinstance(obj.event, JobSubmitted)
    data = obj.event.data
    assert data.queue == "default"
    assert [t.name for t in data.tasks] == ["default0", "default1"]
    assert [t.min_available for t in data.tasks] == [3, 0]
    assert data.min_available == 3
    assert data.min_resources == {"cpu": 1500, "memory": 3 * 2**30, "pods": 3}


def test_pod_request_sums_containers_and_takes_the_largest_init_container() -> None:
    [obj] = parse(
        """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: j}
spec:
  tasks:
    - replicas: 1
      template:
        spec:
          initContainers: [{name: i, resources: {requests: {cpu: "4", memory: 1Gi}}}]
          containers:
            - {name: a, resources: {requests: {cpu: "1", memory: 2Gi}}}
            - {name: b, resources: {requests: {cpu: "2"}, limits: {cpu: "3", nvidia.com/gpu: "2"}}}
"""
    ).objects
    assert isinstance(obj.event, JobSubmitted)
    assert obj.event.data.tasks[0].resources == {"cpu": 4000, "memory": 2 * 2**30, "nvidia.com/gpu": 2}


def test_overhead_is_added_and_the_jobs_preemptable_annotation_overrides_the_templates() -> None:
    [obj] = parse(
        """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: j, annotations: {volcano.sh/preemptable: "false"}}
spec:
  tasks:
    - replicas: 1
      template:
        metadata: {annotations: {volcano.sh/preemptable: "true"}}
        spec:
          overhead: {cpu: 250m}
          containers: [{name: a, resources: {requests: {cpu: "1"}}}]
"""
    ).objects
    assert isinstance(obj.event, JobSubmitted)
    [task] = obj.event.data.tasks
    assert task.resources == {"cpu": 1250}
    assert task.preemptable is False  # createJobPod copies the job's annotation over the template's


def test_match_fields_select_nodes_by_name() -> None:
    [obj] = parse(
        DEMO_TRAINING.replace(
            "restartPolicy: Never",
            "affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: "
            "{nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: NotIn, values: [n1]}]}]}}}",
        )
    ).objects
    assert isinstance(obj.event, JobSubmitted)
    [term] = obj.event.data.tasks[0].required_node_affinity
    assert [(r.key, r.operator, r.values) for r in term.match_fields] == [("metadata.name", "NotIn", ["n1"])]
    assert term.match_expressions == []


def test_placement_fields_priority_preemptable_and_annotations_are_carried() -> None:
    parsed = parse(
        """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: urgent
  labels: {volcano.sh/preemptable: "false"}
  annotations: {tephra.dev/sim-runtime: 30s}
spec:
  priorityClassName: high-priority
  tasks:
    - name: ps
      replicas: 1
      template:
        metadata: {annotations: {volcano.sh/preemptable: "true"}}
        spec:
          priorityClassName: low
          preemptionPolicy: Never
          nodeSelector: {gpu-type: a100}
          tolerations: [{key: gpu, operator: Exists, effect: NoSchedule, tolerationSeconds: 30}]
          affinity:
            nodeAffinity:
              requiredDuringSchedulingIgnoredDuringExecution:
                nodeSelectorTerms:
                  - matchExpressions: [{key: zone, operator: In, values: [a, b]}]
            podAffinity:
              requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: zone}]
          containers: [{name: c, resources: {requests: {cpu: "1"}}}]
    - name: worker
      replicas: 2
      template: {spec: {containers: [{name: c, resources: {requests: {cpu: "1"}}}]}}
"""
    )
    event = parsed.objects[0].event
    assert isinstance(event, JobSubmitted)
    ps, worker = event.data.tasks
    assert event.data.priority_class == "high-priority"
    assert event.data.annotations == {"tephra.dev/sim-runtime": "30s"}
    assert (ps.priority_class, ps.preemption_policy, ps.preemptable) == ("low", "Never", True)
    assert worker.preemptable is False  # inherited from the job's label
    assert ps.node_selector == {"gpu-type": "a100"}
    assert [(t.key, t.operator, t.effect) for t in ps.tolerations] == [("gpu", "Exists", "NoSchedule")]
    [term] = ps.required_node_affinity
    assert [(e.key, e.operator, e.values) for e in term.match_expressions] == [("zone", "In", ["a", "b"])]
    # The required pod affinity term is carried (a nil labelSelector: it selects no pod).
    [pod_term] = ps.pod_affinity
    assert (pod_term.topology_key, pod_term.label_selector, pod_term.namespaces) == ("zone", None, [])
    # The pods carry the labels Volcano's job controller sets.
    assert worker.labels["volcano.sh/task-spec"] == "worker"
    assert worker.labels["volcano.sh/preemptable"] == "false"
    assert not parsed.warnings


def test_min_resources_takes_higher_priority_tasks_first_when_min_available_is_below_the_tasks_sum() -> None:
    parsed = parse(
        """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: j}
spec:
  minAvailable: 2
  tasks:
    - name: cheap
      replicas: 2
      template: {spec: {containers: [{name: c, resources: {requests: {cpu: "1"}}}]}}
    - name: dear
      replicas: 1
      template: {spec: {priorityClassName: high, containers: [{name: c, resources: {requests: {cpu: "8"}}}]}}
"""
    )
    job = parsed.objects[1].event
    assert isinstance(job, JobSubmitted)
    assert job.data.min_resources == {"cpu": 9000, "pods": 2}  # dear (8) + one cheap (1)


def test_queue_priority_class_node_and_scheduler_configuration() -> None:
    parsed = parse(
        """
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: training}
spec: {weight: 3, capability: {nvidia.com/gpu: 80}, deserved: {nvidia.com/gpu: 40},
       guarantee: {resource: {cpu: "4"}}, reclaimable: false, priority: 2}
status: {state: Closed}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high-priority}
value: 1000
globalDefault: false
description: urgent training
---
apiVersion: v1
kind: Node
metadata: {name: gpu-1, labels: {gpu-type: a100}}
spec:
  unschedulable: true
  taints: [{key: gpu, value: "yes", effect: NoSchedule}]
status:
  allocatable: {cpu: "64", memory: 512Gi, nvidia.com/gpu: "8", pods: "110"}
  conditions: [{type: Ready, status: "False"}]
---
apiVersion: tephra.dev/v1alpha1
kind: SchedulerConfiguration
metadata: {name: with-preempt}
spec:
  actions: "enqueue, allocate, preempt, backfill"
  tiers:
    - plugins: [{name: priority}, {name: gang, enablePreemptable: false}]
    - plugins: [{name: predicates}, {name: proportion}]
"""
    )
    assert [o.ref for o in parsed.objects] == [
        "queue/training",
        "priorityclass/high-priority",
        "node/gpu-1",
        "schedulerconfiguration/with-preempt",
    ]
    queue, pc, node, config = (o.event for o in parsed.objects)
    assert isinstance(queue, QueueUpserted)
    assert queue.data.weight == 3
    assert queue.data.capability == {"nvidia.com/gpu": 80}
    assert queue.data.guarantee == {"cpu": 4000}
    assert (queue.data.reclaimable, queue.data.priority, queue.data.state) == (False, 2, "Closed")
    assert isinstance(pc, PriorityClassUpserted)
    assert pc.data.value == 1000
    assert isinstance(node, NodeReported)
    assert node.data.allocatable["nvidia.com/gpu"] == 8
    assert node.data.labels == {"gpu-type": "a100"}
    assert (node.data.unschedulable, node.data.ready) == (True, False)
    assert [(t.key, t.value, t.effect) for t in node.data.taints] == [("gpu", "yes", "NoSchedule")]
    assert isinstance(config, SchedulerConfigured)
    assert config.data.config.actions == ["enqueue", "allocate", "preempt", "backfill"]
    assert config.data.config.tiers[0].plugins[1].flags == {"enablePreemptable": False}


def test_queue_defaults() -> None:
    [obj] = parse("apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: q}\n").objects
    assert isinstance(obj.event, QueueUpserted)
    data = obj.event.data
    assert (data.weight, data.reclaimable, data.state, data.capability) == (1, True, "Open", {})


def test_scheduler_configuration_in_volcano_conf_shape_at_the_top_level() -> None:
    [obj] = parse(
        "apiVersion: tephra.dev/v1alpha1\nkind: SchedulerConfiguration\n"
        "actions: enqueue, allocate\ntiers: [{plugins: [{name: gang}]}]\n"
    ).objects
    assert obj.ref == "schedulerconfiguration/default"
    assert isinstance(obj.event, SchedulerConfigured)
    assert obj.event.data.config.actions == ["enqueue", "allocate"]


def test_json_files_hold_one_object_or_a_list() -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1"},
        "status": {"capacity": {"cpu": 2}},
    }
    queue = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "q"}}
    assert [o.ref for o in parse(json.dumps(node), "n.json").objects] == ["node/n1"]
    assert [o.ref for o in parse(json.dumps([node, queue]), "all.json").objects] == ["node/n1", "queue/q"]


def test_event_ids_are_unique_and_empty_documents_are_skipped() -> None:
    parsed = parse("---\n" + DEMO_TRAINING + "\n---\n---\napiVersion: v1\nkind: Node\nmetadata: {name: n1}\n")
    assert [(o.ref, o.document) for o in parsed.objects] == [("job/default/demo-training", 1), ("node/n1", 3)]
    assert len({o.event.id for o in parsed.objects}) == 2


def test_the_conformance_seed_documents_parse(tmp_path: Path) -> None:
    # The scenario header is not a submittable kind; everything after it is.
    body = SEED_01.read_text().split("\n---\n", 1)[1]
    path = tmp_path / "seed.yaml"
    path.write_text(body)
    parsed = load_manifest_files([path], now=NOW)
    assert [o.ref for o in parsed.objects] == [
        "node/gpu-node-1",
        "node/gpu-node-2",
        "queue/default",
        "job/default/demo-training",
    ]


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            DEMO_TRAINING.replace("replicas: 2", "replicas: two"),
            "jobs.yaml, document 1 (Job default/demo-training): spec.tasks[0].replicas: "
            "expected an integer, got 'two'",
        ),
        (
            DEMO_TRAINING.replace("nvidia.com/gpu: 1", "nvidia.com/gpu: lots"),
            "jobs.yaml, document 1 (Job default/demo-training): spec.tasks[0].template.spec.containers[0]"
            '.resources.limits["nvidia.com/gpu"]: expected a Kubernetes quantity',
        ),
        (
            DEMO_TRAINING.replace("minAvailable: 2", "minAvailable: 3"),
            "jobs.yaml, document 1 (Job default/demo-training): spec.minAvailable: "
            "expected at most the total replicas (2), got 3",
        ),
        (
            DEMO_TRAINING.replace("metadata: {name: demo-training}", "metadata: {name: Demo_Training}"),
            "jobs.yaml, document 1 (Job): metadata.name: expected a lowercase DNS name",
        ),
        (
            DEMO_TRAINING.replace(
                "metadata: {name: demo-training}",
                "metadata:\n  name: d\n  annotations:\n    tephra.dev/sim-runtime: soon",
            ),
            'jobs.yaml, document 1 (Job default/d): metadata.annotations["tephra.dev/sim-runtime"]: '
            "expected a duration such as '30s'",
        ),
        (
            "apiVersion: v1\nkind: Secret\nmetadata: {name: p}\n",
            "jobs.yaml, document 1 (Secret): kind: unsupported apiVersion/kind v1 Secret; expected one of:",
        ),
        ("kind: Node\n", "jobs.yaml, document 1 (Node): apiVersion: required field is missing"),
        ("- just\n- a list\n", "jobs.yaml, document 1: (document): expected a Kubernetes object"),
        (
            "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\n"
            "metadata: {name: q}\nspec: {weight: 0}\n",
            "jobs.yaml, document 1 (Queue q): spec.weight: expected an integer >= 1, got 0",
        ),
        (
            "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: p}\n",
            "jobs.yaml, document 1 (PriorityClass p): value: required field is missing",
        ),
        (
            "apiVersion: v1\nkind: Node\nmetadata: {name: n}\n"
            "spec: {taints: [{key: k, effect: Sometimes}]}\n",
            "jobs.yaml, document 1 (Node n): spec.taints[0].effect: Input should be",
        ),
        (
            "apiVersion: tephra.dev/v1alpha1\nkind: SchedulerConfiguration\n"
            "spec: {actions: 'enqueue, allocate',\n"
            "       tiers: [{plugins: [{name: gang, enableTeleport: true}]}]}\n",
            "jobs.yaml, document 1 (SchedulerConfiguration default): "
            "spec.tiers[0].plugins[0].enableTeleport: unknown plugin option",
        ),
        ("a: [unclosed\n", "jobs.yaml, document 1: (yaml): not valid YAML"),
        (
            DEMO_TRAINING.replace(
                "restartPolicy: Never",
                "affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: "
                "{nodeSelectorTerms: [{matchFields: [{key: metadata.labels, operator: In, values: [a]}]}]}}}",
            ),
            "jobs.yaml, document 1 (Job default/demo-training): "
            "spec.tasks[0].template.spec.affinity.nodeAffinity."
            "requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields[0].key: "
            "expected metadata.name",
        ),
        (
            DEMO_TRAINING.replace("nvidia.com/gpu: 1", "nvidia.com/gpu: 500m"),
            "jobs.yaml, document 1 (Job default/demo-training): spec.tasks[0].template.spec.containers[0]"
            '.resources.limits["nvidia.com/gpu"]: expected a whole number: an extended resource must be '
            "an integer, got '500m'",
        ),
        (
            # The same name check as the projector's for raw events (events.names: invalid-name).
            DEMO_TRAINING.replace("queue: default", "queue: My_Queue"),
            "jobs.yaml, document 1 (Job default/demo-training): (event data.queue): 'My_Queue' is not a"
            " DNS-1123 subdomain",
        ),
    ],
)
def test_each_error_names_file_document_and_field(text: str, expected: str) -> None:
    [message] = errors_of(text)
    assert message.startswith(expected), message


def test_errors_are_collected_over_every_file_and_document_and_nothing_is_returned() -> None:
    good = DEMO_TRAINING
    bad_queue = "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {}\n"
    with pytest.raises(InvalidManifests) as info:
        parse_manifests([("a.yaml", good + "---\n" + bad_queue), ("b.yaml", "a: [")], now=NOW)
    fields = sorted((e.file, e.document, e.field) for e in info.value.errors)
    assert fields == [("a.yaml", 2, "metadata.name"), ("b.yaml", 1, "(yaml)")]


def test_duplicate_objects_in_one_submission_are_an_error() -> None:
    messages = errors_of(DEMO_TRAINING + "\n---\n" + DEMO_TRAINING)
    assert messages == [
        "jobs.yaml, document 2 (Job default/demo-training): metadata.name: "
        "duplicate job/default/demo-training (first in jobs.yaml, document 1)"
    ]


def test_an_unreadable_file_is_reported(tmp_path: Path) -> None:
    with pytest.raises(InvalidManifests) as info:
        load_manifest_files([tmp_path / "missing.yaml"], now=NOW)
    [error] = info.value.errors
    assert error.file.endswith("missing.yaml")
    assert error.field == "(file)"
