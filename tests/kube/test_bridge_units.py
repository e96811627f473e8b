"""The bridge's pure parts: where a pod sits in Tephra, what objects submit, what tasks call for."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from api.kube_bridge import bridge_signer, object_parser
from api.manifests import parse_manifests
from api.settings import KubeBridgeCommandSettings
from events.models import (
    Event,
    HyperNodeDeleted,
    HyperNodeUpserted,
    JobCancelled,
    JobSubmitted,
    NodeRemoved,
    NodeReported,
    TaskFinished,
    TaskStarted,
)
from events.signing import EventSigner, SigningKey, SigningKeyError, event_signed_by, parse_public_key
from kube.bridge.door import Door, ProjectedState
from kube.bridge.objects import (
    GROUP_ANNOTATION,
    JOB_ANNOTATION,
    KUBE_SOURCE_ANNOTATION,
    PodKind,
    PodRef,
    bridge_event_id,
    dns_label,
    legacy_pod_task,
    pod_ref,
    volcano_job_pods,
)
from kube.bridge.outage import Outage
from kube.bridge.plan import Plan, ProjectedTask, plan_tasks
from kube.bridge.queue_status import queue_status, status_patch
from kube.bridge.service import _Pods, _schedulable
from kube.bridge.settings import KubeBridgeSettings
from kube.bridge.signing import BRIDGE_PRODUCER, BRIDGE_TYPES, signing
from kube.bridge.status import failed_scheduling_message, volcano_job_status
from kube.rest import JsonObject
from tests.kube.test_bridge import PODGROUP_AND_PODS

NOW = datetime(2026, 12, 5, 1, 0, tzinfo=UTC)


def pod(
    name: str, *, annotations: dict[str, str] | None = None, node: str = "", phase: str = "Pending"
) -> JsonObject:
    spec: JsonObject = {
        "schedulerName": "tephra",
        "containers": [{"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
    }
    if node:
        spec["nodeName"] = node
    notes: JsonObject = {}
    notes.update(annotations or {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "team",
            "uid": f"uid-{name}",
            "creationTimestamp": "2026-12-05T00:59:00Z",
            "annotations": notes,
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def node(name: str, version: str = "1", gpus: str = "1") -> JsonObject:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": version, "labels": {"zone": "a"}},
        "spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]},
        "status": {
            "allocatable": {"cpu": "8", "nvidia.com/gpu": gpus, "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


VCJOB: JsonObject = {
    "apiVersion": "batch.volcano.sh/v1alpha1",
    "kind": "Job",
    "metadata": {
        "name": "train",
        "namespace": "team",
        "uid": "uid-train",
        "creationTimestamp": "2026-12-05T00:58:00Z",
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}"},
    },
    "spec": {
        "minAvailable": 2,
        "schedulerName": "volcano",
        "queue": "research",
        "tasks": [
            {
                "replicas": 2,
                "name": "worker",
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "t", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}
                        ]
                    }
                },
            }
        ],
    },
}


GANG: JsonObject = {
    "apiVersion": "scheduling.volcano.sh/v1beta1",
    "kind": "PodGroup",
    "metadata": {"name": "gang", "namespace": "team", "uid": "uid-gang"},
    "spec": {"minMember": 2, "queue": "research"},
}


def door() -> Door:
    return Door(object_parser("default"), cluster="default")


# --------------------------------------------------------------------------- identity


def test_a_pod_maps_to_one_task_by_its_names_alone() -> None:
    # Every pod is the task of its own name, as tephra submit reads the same pods.
    lone = pod_ref(pod("web"), job_controller=True)
    assert lone == PodRef("team", "web", "uid-web", PodKind.LONE, "web", "team/web", "team/web")
    grouped = pod_ref(pod("a.b", annotations={GROUP_ANNOTATION: "gang"}), job_controller=True)
    assert grouped is not None
    assert (grouped.kind, grouped.job_id, grouped.task_id) == (PodKind.GROUP, "team/gang", "team/a.b")
    dotted = pod_ref(pod("x", annotations={GROUP_ANNOTATION: "g.v2"}), job_controller=True)
    assert dotted is not None
    assert (dotted.group, dotted.job_id) == ("g.v2", f"team/{dns_label('g.v2')}")
    volcano = {GROUP_ANNOTATION: "train", JOB_ANNOTATION: "train"}
    owned = pod_ref(pod("train-worker-1", annotations=volcano), job_controller=True)
    assert owned is not None
    assert (owned.kind, owned.task_id, owned.job_id) == (
        PodKind.VOLCANO_JOB,
        "team/train-worker-1",
        "team/train",
    )
    # Without the bridge as job controller, Volcano's own pods are a PodGroup's.
    theirs = pod_ref(pod("train-worker-1", annotations=volcano), job_controller=False)
    assert theirs is not None
    assert theirs.kind is PodKind.GROUP


def test_an_earlier_bridges_task_ids_lead_to_their_pods() -> None:
    assert legacy_pod_task("team/gang-m0-0", "team/gang", PodKind.GROUP) == "team/m0"
    assert legacy_pod_task("team/web-pod-0", "team/web", PodKind.LONE) == "team/web"
    assert legacy_pod_task("team/web", "team/web", PodKind.LONE) is None  # today's name
    assert legacy_pod_task("team/m0", "team/gang", PodKind.GROUP) is None
    assert legacy_pod_task("team/train-worker-0", "team/train", PodKind.VOLCANO_JOB) is None


def test_a_name_that_is_no_dns_label_is_shortened_with_a_digest() -> None:
    assert dns_label("web-1") == "web-1"
    long = "x" * 70
    assert dns_label(long) != dns_label(long + "y")
    assert len(dns_label(long)) <= 63
    assert dns_label("a.b.c").startswith("a-b-c-")


def test_event_ids_are_a_function_of_what_they_record() -> None:
    assert bridge_event_id("default", "node/a", "u", "7") == bridge_event_id("default", "node/a", "u", "7")
    assert bridge_event_id("default", "node/a", "u", "7") != bridge_event_id("default", "node/a", "u", "8")
    assert bridge_event_id("default", "x") != bridge_event_id("other", "x")


def test_the_job_controller_makes_a_podgroup_and_named_pods() -> None:
    podgroup, plans = volcano_job_pods(VCJOB)
    assert podgroup["spec"] == {"minMember": 2, "queue": "research"}
    assert [p.name for p in plans] == ["train-worker-0", "train-worker-1"]
    body = plans[0].body
    assert body["spec"]["schedulerName"] == "volcano"  # type: ignore[index,call-overload]
    annotations = body["metadata"]["annotations"]  # type: ignore[index,call-overload]
    assert annotations[GROUP_ANNOTATION] == "train"  # type: ignore[index,call-overload]
    assert body["metadata"]["ownerReferences"][0]["uid"] == "uid-train"  # type: ignore[index,call-overload]
    no_scheduler = {**VCJOB, "spec": {**VCJOB["spec"], "schedulerName": None}}  # type: ignore[dict-item]
    assert volcano_job_pods(no_scheduler)[1][0].body["spec"]["schedulerName"] == "tephra"  # type: ignore[index,call-overload]


# --------------------------------------------------------------------------- in


def test_a_node_is_reported_once_per_change_and_removed() -> None:
    d = door()
    first = d.node("n1", node("n1"), NOW)
    assert isinstance(first, NodeReported)
    assert first.data.allocatable == {"cpu": 8000, "nvidia.com/gpu": 1, "pods": 110}
    assert [t.key for t in first.data.taints] == ["dedicated"]
    assert first.id == bridge_event_id("default", "node/n1", "uid-n1", "1")
    # A relist (the same object again, or a heartbeat that changes nothing Tephra reads): nothing.
    assert d.node("n1", node("n1"), NOW) is None
    assert d.node("n1", node("n1", version="2"), NOW) is None
    assert isinstance(d.node("n1", node("n1", version="3", gpus="2"), NOW), NodeReported)
    assert isinstance(d.node("n1", None, NOW), NodeRemoved)
    assert d.node("n1", None, NOW) is None


def test_after_a_restart_what_the_projection_holds_is_not_reported_again() -> None:
    first = door().node("n1", node("n1"), NOW)
    assert isinstance(first, NodeReported)
    d = door()
    projected: JsonObject = {
        "name": "n1",
        "allocatable": {"cpu": 8000, "nvidia.com/gpu": 1, "pods": 110},
        "labels": {"zone": "a"},
        "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}],
        "unschedulable": False,
        "ready": True,
        "created": "2026-12-05T00:00:00Z",
    }
    d.seed(ProjectedState(nodes={"n1": projected}, jobs={"team/done"}))
    assert d.node("n1", node("n1"), NOW) is None
    assert "team/done" in d.submitted


HYPERNODE: JsonObject = {
    "apiVersion": "topology.volcano.sh/v1alpha1",
    "kind": "HyperNode",
    "metadata": {"name": "s0", "uid": "uid-s0", "resourceVersion": "1"},
    "spec": {
        "tier": 1,
        "members": [
            {"type": "Node", "selector": {"exactMatch": {"name": "n1"}}},
            {"type": "Node", "selector": {"regexMatch": {"pattern": "^gpu-"}}},
        ],
    },
}


def test_a_hypernode_is_reported_once_per_change_read_as_tephra_submit_reads_it() -> None:
    d = door()
    event = d.hypernode("s0", HYPERNODE, NOW)
    assert isinstance(event, HyperNodeUpserted)
    [submitted] = parse_manifests([("hn.yaml", yaml.safe_dump(HYPERNODE))], now=NOW).events
    assert event.data == submitted.data
    assert d.hypernode("s0", {**HYPERNODE, "metadata": {"name": "s0", "resourceVersion": "2"}}, NOW) is None
    bad = {
        **HYPERNODE,
        "spec": {"tier": 1, "members": [{"type": "HyperNode", "selector": {"regexMatch": {}}}]},
    }
    assert d.hypernode("s0", bad, NOW) is None  # refused: kept with its reason, nothing produced
    assert "spec.members[0].selector" in d.refused["hypernode/s0"]
    assert isinstance(d.hypernode("s0", None, NOW), HyperNodeDeleted)
    assert d.hypernode("s0", None, NOW) is None
    # After a restart, what the projection holds (the event's data) is not produced again.
    again = door()
    again.seed(ProjectedState(hypernodes={"s0": event.data.model_dump(mode="json")}))
    assert again.hypernode("s0", HYPERNODE, NOW) is None


def test_a_volcano_job_is_submitted_once_through_the_manifest_model() -> None:
    d = door()
    event = d.volcano_job(VCJOB, NOW)
    assert isinstance(event, JobSubmitted)
    assert event.id == bridge_event_id("default", "job", "uid-train")
    assert event.time == datetime(2026, 12, 5, 0, 58, tzinfo=UTC)  # its creation: the same event each time
    assert event.data.job_id == "team/train"
    assert event.data.queue == "research"
    assert event.data.min_available == 2
    assert event.data.tasks[0].resources == {"nvidia.com/gpu": 1}
    assert event.data.annotations == {KUBE_SOURCE_ANNOTATION: "vcjob"}
    assert d.volcano_job(VCJOB, NOW) is None


def test_a_volcano_job_the_model_refuses_is_kept_with_its_reason() -> None:
    d = door()
    bad = {**VCJOB, "spec": {**VCJOB["spec"], "minAvailable": 5}}  # type: ignore[dict-item]
    assert d.volcano_job(bad, NOW) is None
    assert "spec.minAvailable" in d.refused["vcjob/team/train"]


def test_a_podgroup_waits_for_min_member_pods_then_submits_one_task_each() -> None:
    d = door()
    group = GANG
    members = [pod(f"m{i}", annotations={GROUP_ANNOTATION: "gang"}) for i in range(2)]
    assert d.group_job(group, members[:1], NOW) is None
    event = d.group_job(group, members, NOW)
    assert isinstance(event, JobSubmitted)
    assert event.data.job_id == "team/gang"
    assert event.data.min_available == 2
    assert [(t.name, t.replicas) for t in event.data.tasks] == [("m0", 1), ("m1", 1)]
    assert d.group_job(group, members, NOW) is None


def test_pods_that_join_a_submitted_podgroup_are_added_to_its_job_once_each() -> None:
    d = door()
    group = GANG
    members = [pod(f"m{i}", annotations={GROUP_ANNOTATION: "gang"}) for i in range(4)]
    assert d.group_tasks(group, members[:2], NOW) is None  # not submitted yet
    assert d.group_job(group, members[:2], NOW) is not None
    assert d.group_tasks(group, members[:2], NOW) == []
    added = d.group_tasks(group, members, NOW)
    assert added is not None
    tasks = [(e.data.job_id, [(t.name, t.replicas, t.min_available) for t in e.data.tasks]) for e in added]
    assert tasks == [("team/gang", [("m2", 1, None)]), ("team/gang", [("m3", 1, None)])]
    assert added[0].data.tasks[0].resources == {"nvidia.com/gpu": 1}
    assert added[0].time == datetime(2026, 12, 5, 0, 59, tzinfo=UTC)  # the pod's creation
    assert d.group_tasks(group, members, NOW) == []
    # A restarted bridge seeded from the projection, which holds m0..m2, adds m3 alone, as the same event.
    again = door()
    again.seed(ProjectedState(jobs={"team/gang"}, group_roles={"team/gang": {"m0", "m1", "m2"}}))
    assert again.group_tasks(group, members, NOW) == added[1:]


def test_a_lone_pod_is_a_one_pod_gang_in_its_annotated_queue() -> None:
    d = door()
    lone = pod("solo", annotations={"scheduling.volcano.sh/queue-name": "research"})
    ref = pod_ref(lone, job_controller=True)
    assert ref is not None
    event = d.lone_job(lone, ref, NOW)
    assert isinstance(event, JobSubmitted)
    assert (event.data.job_id, event.data.queue, event.data.min_available) == ("team/solo", "research", 1)
    assert [(t.name, t.pod_names) for t in event.data.tasks] == [("solo", ["solo"])]
    assert event.data.annotations == {KUBE_SOURCE_ANNOTATION: "pod"}


def _admitted(pod: JsonObject) -> JsonObject:
    """``pod`` as a v1.20 apiserver stores it: Priority and DefaultTolerationSeconds admission."""
    spec = dict(pod["spec"])  # type: ignore[call-overload]
    spec["priority"] = 0
    spec["preemptionPolicy"] = "PreemptLowerPriority"
    default = {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
    spec["tolerations"] = [
        *spec.get("tolerations", []),
        *({"key": f"node.kubernetes.io/{k}", **default} for k in ("not-ready", "unreachable")),
    ]
    meta = {**pod["metadata"], "uid": f"uid-{pod['metadata']['name']}"}  # type: ignore[call-overload,index]
    return {**pod, "metadata": meta, "spec": spec, "status": {"phase": "Pending"}}


def test_a_podgroup_through_the_bridge_is_the_job_tephra_submit_makes_of_it() -> None:
    text = PODGROUP_AND_PODS.replace("NS", "team")  # as on the real apiserver in test_bridge
    submitted = parse_manifests([("pg.yaml", text)], now=NOW).events
    assert len(submitted) == 1
    expected = submitted[0]
    assert isinstance(expected, JobSubmitted)
    group, *members = yaml.safe_load_all(text)
    event = door().group_job(group, [_admitted(m) for m in members], NOW)
    assert isinstance(event, JobSubmitted)
    # The same job, tasks (the pods' own names, roles) and minTaskMember; only the provenance differs.
    assert event.data.annotations == {KUBE_SOURCE_ANNOTATION: "podgroup"}
    assert event.data.model_copy(update={"annotations": {}}) == expected.data
    assert [(t.pod_names, t.role) for t in event.data.tasks] == [(["ps-0"], "ps"), (["worker.0"], "worker")]
    assert event.data.min_task_member == {"ps": 1, "worker": 1}
    # Each pod is the task of its own name, which the bridge binds.
    refs = [pod_ref(_admitted(m), job_controller=True) for m in members]
    assert [(r.task_id, r.job_id) for r in refs if r is not None] == [
        ("team/ps-0", "team/mixed"),
        ("team/worker.0", "team/mixed"),
    ]


def test_a_gated_lone_pod_is_taken_once_its_last_gate_is_gone() -> None:
    pods = _Pods()
    gated_pod = pod("solo")
    gated_pod["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]  # type: ignore[index]
    pods.change("team/solo", None, gated_pod, job_controller=True)
    assert not _schedulable(gated_pod)
    pods.new_lone.clear()  # looked at while gated: not submitted
    lifted = pod("solo")
    pods.change("team/solo", gated_pod, lifted, job_controller=True)
    assert pods.new_lone == {"team/solo"}
    assert _schedulable(lifted)
    event = door().lone_job(lifted, pods.by_key["team/solo"], NOW)
    assert isinstance(event, JobSubmitted)
    assert event.data.tasks[0].scheduling_gates == []


# --------------------------------------------------------------------------- out


def task(
    task_id: str, status: str, node_name: str | None = "n1", kind: str = "pod", seq: int = 9
) -> ProjectedTask:
    return ProjectedTask(task_id, task_id, status, node_name, seq, kind)  # a lone pod's task and job


def pods_of(*items: JsonObject) -> dict[str, tuple[PodRef, JsonObject]]:
    out = {}
    for item in items:
        ref = pod_ref(item, job_controller=True)
        assert ref is not None
        out[ref.task_id] = (ref, item)
    return out


def plan(
    tasks: list[ProjectedTask],
    pods: dict[str, tuple[PodRef, JsonObject]],
    *,
    nodes: frozenset[str] = frozenset({"n1"}),
    vcjobs: frozenset[str] = frozenset(),
) -> Plan:
    return plan_tasks(
        tasks, pods, nodes=nodes, volcano_jobs=vcjobs, cluster="default", source="test", now=NOW
    )


def test_only_bound_tasks_are_bound_and_never_to_a_node_that_left() -> None:
    pods = pods_of(pod("a"), pod("b"), pod("c"))
    result = plan(
        [
            task("team/a", "Bound"),
            task("team/b", "Pending", None),
            task("team/c", "Bound", "gone"),
        ],
        pods,
    )
    assert [(b.pod.name, b.node) for b in result.binds] == [("a", "n1")]
    assert [t.task_id for t in result.gone_nodes] == ["team/c"]
    assert result.events == []


def test_a_bound_pod_running_is_started_and_a_finished_one_finished() -> None:
    pods = pods_of(pod("a", node="n1", phase="Running"), pod("b", node="n1", phase="Succeeded"))
    result = plan([task("team/a", "Bound"), task("team/b", "Running")], pods)
    started, finished = result.events
    assert isinstance(started, TaskStarted)
    assert started.data.node == "n1"
    # The task row's seq: the fold ignores an observation of an earlier incarnation of the name.
    assert (started.data.observed_seq, finished.data.observed_seq) == (9, 9)  # type: ignore[union-attr]
    assert isinstance(finished, TaskFinished)
    assert (finished.data.outcome, finished.data.exit_code) == ("succeeded", 0)
    again = plan([task("team/a", "Bound")], pods)
    assert again.events[0].id == started.id  # a restarted bridge produces the same event


def test_a_releasing_task_is_evicted_and_finished_once_its_pod_is_gone() -> None:
    pods = pods_of(pod("a", node="n1", phase="Running"))
    result = plan([task("team/a", "Releasing")], pods)
    assert [e.pod.name for e in result.evictions] == ["a"]
    gone = plan([task("team/a", "Releasing")], {})
    finished, cancelled = gone.events
    assert isinstance(finished, TaskFinished)
    assert finished.data.outcome == "evicted"
    assert isinstance(cancelled, JobCancelled)  # a plain pod is not made again: its job ends


def test_a_volcano_jobs_pod_gone_is_made_again_not_cancelled() -> None:
    t = task("team/train-worker-0", "Running", kind="vcjob")
    t = ProjectedTask(t.task_id, "team/train", t.status, t.node, t.seq, t.kind)
    result = plan([t], {}, vcjobs=frozenset({"team/train"}))
    assert [type(e) for e in result.events] == [TaskFinished]
    assert [c.task.task_id for c in result.creations] == ["team/train-worker-0"]
    deleted = plan([t], {})
    assert deleted.creations == []
    assert [type(e) for e in deleted.events] == [TaskFinished]
    # Bound before its pod shows: the pod is made (and bound then), the task keeps its node.
    bound = ProjectedTask(t.task_id, t.job_id, "Bound", "n1", t.seq, t.kind)
    early = plan([bound], {}, vcjobs=frozenset({"team/train"}))
    assert (early.events, [c.task.task_id for c in early.creations]) == ([], ["team/train-worker-0"])


# --------------------------------------------------------------------------- status and settings


def test_the_failed_scheduling_text_carries_the_reasons_and_the_replay_command() -> None:
    text = failed_scheduling_message(
        "team/big", [{"code": "gang-unready", "message": "3 of 3 pods do not fit"}]
    )
    assert (
        text
        == "gang-unready: 3 of 3 pods do not fit (run `replay explain team/big` for the session's reasoning)"
    )


def test_a_volcano_jobs_phase_follows_its_pods() -> None:
    counts = {"pending": 1, "running": 1, "succeeded": 0, "failed": 0}
    assert volcano_job_status(counts, 2)["state"] == {"phase": "Pending"}
    assert volcano_job_status(counts, 1)["state"] == {"phase": "Running"}
    done = {"pending": 0, "running": 0, "succeeded": 2, "failed": 0}
    assert volcano_job_status(done, 2)["state"] == {"phase": "Completed"}


def test_scheduler_names_are_a_comma_separated_list() -> None:
    assert KubeBridgeSettings().scheduler_names == frozenset({"tephra", "volcano"})
    assert KubeBridgeSettings(kube_scheduler_names=" tephra ").scheduler_names == frozenset({"tephra"})
    with pytest.raises(ValueError, match="scheduler names"):
        KubeBridgeSettings(kube_scheduler_names="Bad Name")


# ---------------------------------------------------------------------- signing


def _may_in_docs() -> list[str]:
    """The ``--may`` types of the enrolment command in docs/kubernetes.md, "Signing"."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "kubernetes.md").read_text()
    section = text.split("### Signing", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    return re.findall(r"--may (\S+)", section)


def test_the_documented_enrolment_permits_exactly_the_types_the_bridge_produces() -> None:
    assert sorted(_may_in_docs()) == list(BRIDGE_TYPES)


async def test_the_bridge_publishes_each_event_signed_as_its_principal() -> None:
    key = SigningKey.generate()
    published: list[Event] = []

    async def publish(events: Sequence[Event]) -> None:
        published.extend(events)

    event = Door(object_parser("default"), cluster="default").node("gpu-1", node("gpu-1"), NOW)
    assert event is not None
    await signing(publish, EventSigner(key, BRIDGE_PRODUCER).on_behalf_of("default"))([event])
    (signed,) = published
    assert signed.principal == "kube-bridge:default"
    assert event_signed_by(signed, parse_public_key(key.public_key))
    assert signed.model_copy(update={"principal": None, "signature": None}) == event
    assert signing(publish, None) is publish  # no key: as given


def test_the_bridges_signer_is_its_key_file_as_kube_bridge_of_its_cluster(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    key_file = tmp_path / "bridge.pem"
    key = SigningKey.generate()
    key_file.write_bytes(key.pem())
    deployed = {
        "kafka_bootstrap": "kafka:9092",
        "database_url": "postgresql://pg/tephra",
        "data_dir": tmp_path,
    }
    signer = bridge_signer(KubeBridgeCommandSettings(producer_key_file=key_file, **deployed), "east")
    assert signer is not None
    assert (signer.principal, signer.key.public_key) == ("kube-bridge:east", key.public_key)
    with caplog.at_level(logging.WARNING):
        assert bridge_signer(KubeBridgeCommandSettings(**deployed), "east") is None
    assert "no producer key" in caplog.text
    with pytest.raises(SigningKeyError):
        bridge_signer(
            KubeBridgeCommandSettings(producer_key_file=tmp_path / "missing.pem", **deployed), "east"
        )


# ---------------------------------------------------------------------- queue status


def test_a_queue_status_counts_its_jobs_and_closes_a_closing_queue_once_nothing_is_unfinished() -> None:
    phases = {"Pending": 2, "Inqueue": 1, "Running": 3, "Completed": 4, "Failed": 1, "Cancelled": 7}
    held = {"nvidia.com/gpu": 2, "cpu": 1500, "pods": 3}
    assert queue_status(None, phases, held) == {
        "state": "Open",
        "pending": 2,
        "inqueue": 1,
        "running": 3,
        "completed": 5,
        "allocated": {"cpu": "1500m", "nvidia.com/gpu": "2", "pods": "3"},
    }
    assert queue_status("Closing", phases, held)["state"] == "Closing"
    assert queue_status("Closing", {"Completed": 1}, {})["state"] == "Closed"
    assert queue_status("Closed", {"Running": 1}, {})["state"] == "Closed"  # the operator's word


def test_a_queue_status_patch_removes_resources_no_longer_held_and_is_none_when_shown() -> None:
    wanted = queue_status("Open", {"Running": 1}, {"pods": 1})
    assert status_patch({**wanted, "reservation": {}}, wanted) is None
    shown = {**wanted, "allocated": {"nvidia.com/gpu": "1", "pods": "2"}}
    assert status_patch(shown, wanted) == {**wanted, "allocated": {"nvidia.com/gpu": None, "pods": "1"}}


# ---------------------------------------------------------------------- outage


def test_calls_pause_while_the_apiserver_is_away_longer_each_failure_until_it_answers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    outage = Outage(clock=lambda: now[0])
    assert not outage.away()
    with caplog.at_level(logging.INFO):
        outage.failed(ConnectionRefusedError("refused"))
        outage.failed(ConnectionRefusedError("refused"))  # under way when it began: no longer pause
        assert outage.away()
        now[0] += 0.2
        assert not outage.away()
        outage.failed(ConnectionRefusedError("refused"))
        now[0] += 0.2
        assert outage.away()  # the second pause is longer
        now[0] += 0.3
        assert not outage.away()
        outage.answered()
        outage.failed(ConnectionRefusedError("refused"))
        now[0] += 0.2
        assert not outage.away()  # a new outage starts short again
    said = [r.getMessage() for r in caplog.records]
    assert sum("does not answer" in line for line in said) == 2
    assert sum("answers again" in line for line in said) == 1
