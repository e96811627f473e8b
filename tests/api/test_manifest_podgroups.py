"""``tephra submit`` reads PodGroups with their Pods, and bare Pods, as the shared model says."""

from __future__ import annotations

import functools
import itertools
from datetime import UTC, datetime

import pytest
import yaml

from api.manifests import InvalidManifests, Manifests, parse_manifests, parse_object
from events.models import JobSubmitted
from events.names import dns_label
from projector.fold import apply
from projector.state import ClusterState
from projector.state_json import job_from_json, job_to_json
from scheduler.snapshot_builder import build_snapshot

NOW = datetime(2026, 1, 1, tzinfo=UTC)

GROUP = """
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata: {name: train, namespace: ml}
spec: {queue: research, minMember: 2, minTaskMember: {ps: 1, "": 1}, priorityClassName: high,
       minResources: {cpu: "3"}}
status: {phase: Inqueue}
---
apiVersion: v1
kind: Pod
metadata:
  name: worker-b
  namespace: ml
  annotations: {scheduling.k8s.io/group-name: train}
spec:
  nodeName: n1
  containers: [{name: c, resources: {requests: {cpu: "1"}}}]
status: {phase: Running}
---
apiVersion: v1
kind: Pod
metadata:
  name: ps-a
  namespace: ml
  annotations: {scheduling.k8s.io/group-name: train}
  labels: {volcano.sh/task-spec: ps, volcano.sh/preemptable: "false"}
spec:
  priorityClassName: low
  containers: [{name: c, resources: {limits: {nvidia.com/gpu: 1}, requests: {cpu: "2"}}}]
"""

LONE = """
apiVersion: v1
kind: Pod
metadata:
  name: solo
  namespace: ml
  annotations: {scheduling.volcano.sh/queue-name: research}
spec:
  containers: [{name: c, resources: {requests: {cpu: "500m"}}}]
"""


def parse(text: str) -> Manifests:
    counter = itertools.count()
    return parse_manifests([("pods.yaml", text)], now=NOW, new_id=lambda: f"id-{next(counter)}")


def errors_of(text: str) -> list[str]:
    with pytest.raises(InvalidManifests) as info:
        parse(text)
    return [str(e) for e in info.value.errors]


def test_a_podgroup_and_its_pods_become_one_job_with_the_pods_names_and_roles() -> None:
    parsed = parse(GROUP)
    [obj] = parsed.objects
    assert obj.ref == "job/ml/train"
    assert (obj.file, obj.document) == ("pods.yaml", 1)
    assert isinstance(obj.event, JobSubmitted)
    data = obj.event.data
    assert (data.queue, data.priority_class, data.min_available) == ("research", "high", 2)
    assert data.min_task_member == {"": 1, "ps": 1}
    assert data.min_resources == {"cpu": 3000}
    # In name order, one spec per pod: its own name, its role, its own class only.
    assert [(t.pod_names, t.role, t.priority_class) for t in data.tasks] == [
        (["ps-a"], "ps", "low"),
        (["worker-b"], "", None),
    ]
    assert [t.preemptable for t in data.tasks] == [False, True]
    assert data.tasks[0].resources == {"cpu": 2000, "nvidia.com/gpu": 1}
    assert all(not t.inherits_job_priority_class for t in data.tasks)


def test_the_fold_and_the_snapshot_keep_what_the_podgroup_said() -> None:
    state = ClusterState()
    [event] = parse(GROUP).events
    assert apply(state, 1, event).invalid is None
    [job] = build_snapshot(state).jobs
    assert [(t.uid, t.role, t.priority_class) for t in job.tasks] == [
        ("ml/ps-a", "ps", "low"),
        ("ml/worker-b", "", None),
    ]
    assert job.min_task_member == {"": 1, "ps": 1}
    # The projection's JSON form keeps it too (a restarted projector reads it back).
    assert job_from_json(job_to_json(state.jobs["ml/train"])).min_task_member == {"": 1, "ps": 1}


def test_a_job_without_min_task_member_keeps_its_json_form() -> None:
    state = ClusterState()
    apply(state, 1, parse(LONE).events[0])
    form = job_to_json(state.jobs["ml/solo"])
    assert form["min_task_member"] == {}
    vcjob = ClusterState()
    vcjob_text = (
        "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: j}\n"
        "spec: {tasks: [{replicas: 1, template: {spec: {containers: [{name: c}]}}}]}\n"
    )
    apply(vcjob, 1, parse(vcjob_text).events[0])
    assert "min_task_member" not in job_to_json(vcjob.jobs["default/j"])


def test_cluster_state_in_the_documents_is_warned_about_by_path() -> None:
    warned = [(w.document, w.field) for w in parse(GROUP).warnings]
    assert warned == [(1, "status.phase"), (2, "spec.nodeName"), (2, "status.phase")]


def test_gated_pods_are_kept_gated_through_the_fold_and_the_snapshot_with_a_warning_each() -> None:
    gated = "containers:", "schedulingGates: [{name: example.com/quota}]\n  containers:"
    # The running pod made pending: a gated pod cannot have been placed.
    group = GROUP.replace("  nodeName: n1\n", "").replace("status: {phase: Running}\n", "")
    text = group.replace(*gated) + "---\n" + LONE.replace(*gated)
    parsed = parse(text)
    gate_warnings = [(w.document, w.field) for w in parsed.warnings if "gate" in w.message]
    assert gate_warnings == [
        (2, "spec.schedulingGates"),
        (3, "spec.schedulingGates"),
        (4, "spec.schedulingGates"),
    ]
    state = ClusterState()
    for seq, event in enumerate(parsed.events, start=1):
        assert apply(state, seq, event).invalid is None
    gates = {t.uid: t.scheduling_gates for j in build_snapshot(state).jobs for t in j.tasks}
    assert gates == {
        "ml/ps-a": ("example.com/quota",),
        "ml/worker-b": ("example.com/quota",),
        "ml/solo": ("example.com/quota",),
    }
    # A restarted projector reads the specs back from their JSON form with the gates.
    for job_id in ("ml/train", "ml/solo"):
        job = job_from_json(job_to_json(state.jobs[job_id]))
        assert [s.scheduling_gates for s in job.task_specs] == [["example.com/quota"]] * len(job.task_specs)


def test_a_bare_pod_is_a_one_pod_gang_in_its_annotated_queue() -> None:
    [obj] = parse(LONE).objects
    assert obj.ref == "job/ml/solo"
    assert isinstance(obj.event, JobSubmitted)
    data = obj.event.data
    assert (data.queue, data.min_available, data.min_task_member) == ("research", 1, {})
    assert [t.pod_names for t in data.tasks] == [["solo"]]


def test_parse_object_reads_a_bare_pod_and_refuses_a_podgroup_alone() -> None:
    obj, _ = parse_object(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [{"name": "c"}]},
        },
        origin="pod ns/p",
        source="tephra://test",
        now=NOW,
        event_id="e1",
    )
    assert obj.ref == "job/ns/p"
    with pytest.raises(InvalidManifests, match="read together with its pods"):
        parse_object(
            {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": "g"}},
            origin="podgroup g",
            source="tephra://test",
            now=NOW,
            event_id="e2",
        )


def test_parse_object_reads_a_podgroup_with_its_members_as_a_submission_of_them() -> None:
    group, *members = yaml.safe_load_all(GROUP)
    read = functools.partial(
        parse_object, group, origin="podgroup ml/train", source="t", now=NOW, event_id="e"
    )
    obj, warnings = read(members=members)
    [submitted] = parse(GROUP).objects
    assert obj.event.data == submitted.event.data
    warned = [(w.document, w.field) for w in warnings]
    assert warned == [(1, "status.phase"), (2, "spec.nodeName"), (2, "status.phase")]
    stray = {**members[0], "metadata": {"name": "x", "namespace": "ml"}}
    with pytest.raises(InvalidManifests, match=r"document 3 .*expected a Pod naming PodGroup ml/train"):
        read(members=[members[0], stray])


def test_a_pod_name_that_is_no_dns_label_names_its_job_as_its_task_is_named() -> None:
    [obj] = parse(LONE.replace("name: solo", "name: solo.v2")).objects
    assert isinstance(obj.event, JobSubmitted)
    data = obj.event.data
    assert data.name == data.tasks[0].name == dns_label("solo.v2")
    assert data.tasks[0].pod_names == ["solo.v2"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            LONE.replace("scheduling.volcano.sh/queue-name: research", "scheduling.k8s.io/group-name: gone"),
            'pods.yaml, document 1 (Pod ml/solo): metadata.annotations["scheduling.k8s.io/group-name"]: '
            "no PodGroup ml/gone given, got 'gone'",
        ),
        (
            GROUP.split("---", maxsplit=1)[0],
            "pods.yaml, document 1 (PodGroup ml/train): metadata.name: no Pod in this submission names "
            "PodGroup ml/train",
        ),
        (
            LONE.replace("containers:", "priority: 7\n  containers:"),
            "pods.yaml, document 1 (Pod ml/solo): spec.priority: expected no value, or the value of the "
            "pod's PriorityClass",
        ),
        (
            LONE.replace("metadata:\n", "metadata:\n  labels: {volcano.sh/preemptable: maybe}\n"),
            'pods.yaml, document 1 (Pod ml/solo): metadata.labels["volcano.sh/preemptable"]: '
            'expected "true" or "false", got \'maybe\'',
        ),
        (
            GROUP.replace("minMember: 2", "minMember: two"),
            "pods.yaml, document 1 (PodGroup ml/train): spec.minMember: expected an integer, got 'two'",
        ),
        (
            LONE.replace('cpu: "500m"', "cpu: lots"),
            "pods.yaml, document 1 (Pod ml/solo): spec.containers[0].resources.requests.cpu: "
            "expected a Kubernetes quantity",
        ),
        (
            # A value of the wrong shape where a word is expected is an error, not an exception.
            LONE + "status: {phase: [Running]}\n",
            "pods.yaml, document 1 (Pod ml/solo): status.phase: expected Pending, Running, Succeeded or "
            "Failed",
        ),
        (
            GROUP.replace("minMember: 2", "minMember: 1099511627776"),
            "pods.yaml, document 1 (PodGroup ml/train): spec.minMember: expected a 32-bit integer",
        ),
        (
            LONE + "---\n" + LONE,
            "pods.yaml, document 2 (Pod ml/solo): metadata.name: duplicate job/ml/solo",
        ),
    ],
)
def test_errors_name_the_document_and_field(text: str, expected: str) -> None:
    [message] = errors_of(text)
    assert message.startswith(expected), message


def test_a_pod_whose_priority_is_its_class_value_is_accepted() -> None:
    text = (
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: low}\nvalue: 7\n---\n"
        + LONE.replace("containers:", "priorityClassName: low\n  priority: 7\n  containers:")
    )
    [_, job] = parse(text).objects
    assert isinstance(job.event, JobSubmitted)
    assert job.event.data.tasks[0].priority_class == "low"


def test_the_fold_refuses_pod_names_that_do_not_match_the_replicas() -> None:
    [event] = parse(LONE).events
    assert isinstance(event, JobSubmitted)
    spec = event.data.tasks[0].model_copy(update={"replicas": 2})
    bad = event.model_copy(update={"data": event.data.model_copy(update={"tasks": [spec]})})
    outcome = apply(ClusterState(), 1, bad)
    assert outcome.invalid == "pod-names-mismatch"
