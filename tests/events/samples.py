"""One realistic instance of every event type, for tests and benchmarks.

Other test packages reuse these (``from tests.events.samples import
sample_events``), so every builder returns a fresh, fully valid event with
stable ids and timestamps: the same call always builds an equal event.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from events.models import (
    ActionConfiguration,
    BindDecision,
    EnqueueDecision,
    Event,
    EvictDecision,
    HyperNodeDeleted,
    HyperNodeDeletedData,
    HyperNodeExactMember,
    HyperNodeLabelMember,
    HyperNodeRegexMember,
    HyperNodeUpserted,
    HyperNodeUpsertedData,
    JobCancelled,
    JobCancelledData,
    JobRejected,
    JobRejectedData,
    JobSubmitted,
    JobSubmittedData,
    LabelSelector,
    LeaderElected,
    LeaderElectedData,
    NodeRemoved,
    NodeRemovedData,
    NodeReported,
    NodeReportedData,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PendingJob,
    PendingReason,
    PipelineDecision,
    PluginSpec,
    PriorityClassUpserted,
    PriorityClassUpsertedData,
    QueueDeleted,
    QueueDeletedData,
    QueueUpserted,
    QueueUpsertedData,
    SchedulerConfigSpec,
    SchedulerConfigured,
    SchedulerConfiguredData,
    SessionCommitted,
    SessionCommittedData,
    SessionPart,
    SessionPartData,
    Taint,
    TaskFinished,
    TaskFinishedData,
    TasksAdded,
    TasksAddedData,
    TaskSpec,
    TaskStarted,
    TaskStartedData,
    TierSpec,
    Toleration,
)
from events.signing import SigningKey, sign_event

__all__ = [
    "CLUSTER",
    "T0",
    "job_cancelled",
    "job_rejected",
    "job_submitted",
    "leader_elected",
    "node_removed",
    "node_reported",
    "priority_class_upserted",
    "queue_deleted",
    "queue_upserted",
    "sample_events",
    "scheduler_configured",
    "session_committed",
    "session_part",
    "task_finished",
    "task_started",
]

CLUSTER = "gpu-east-1"
T0 = datetime(2026, 3, 14, 9, 26, 53, 589000, tzinfo=UTC)
_JOB = "research/llm-pretrain-7b"


def _at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def queue_upserted(name: str = "research") -> QueueUpserted:
    return QueueUpserted(
        id=f"evt-queue-{name}",
        source="tephra://api",
        time=_at(0),
        cluster=CLUSTER,
        subject=f"queue/{name}",
        data=QueueUpsertedData(
            name=name,
            weight=4,
            capability={"cpu": "512", "memory": "4Ti", "nvidia.com/gpu": 80},
            deserved={"cpu": "256", "memory": "2Ti", "nvidia.com/gpu": 40},
            guarantee={"nvidia.com/gpu": 8},
            reclaimable=True,
            priority=10,
            parent="root",
        ),
    )


def queue_deleted(name: str = "scratch") -> QueueDeleted:
    return QueueDeleted(
        id=f"evt-queue-deleted-{name}",
        source="tephra://api",
        time=_at(1),
        cluster=CLUSTER,
        subject=f"queue/{name}",
        data=QueueDeletedData(name=name),
    )


def priority_class_upserted(name: str = "high", value: int = 1000) -> PriorityClassUpserted:
    return PriorityClassUpserted(
        id=f"evt-priorityclass-{name}",
        source="tephra://api",
        time=_at(2),
        cluster=CLUSTER,
        data=PriorityClassUpsertedData(name=name, value=value, preemption_policy="PreemptLowerPriority"),
    )


def scheduler_configured() -> SchedulerConfigured:
    return SchedulerConfigured(
        id="evt-config-3",
        source="tephra://api",
        time=_at(3),
        cluster=CLUSTER,
        data=SchedulerConfiguredData(
            config=SchedulerConfigSpec(
                actions=["enqueue", "allocate", "preempt", "backfill"],
                tiers=[
                    TierSpec(
                        plugins=[
                            PluginSpec(name="priority"),
                            PluginSpec(name="gang", flags={"enablePreemptable": False}),
                        ]
                    ),
                    TierSpec(
                        plugins=[
                            PluginSpec(name="drf"),
                            PluginSpec(name="predicates"),
                            PluginSpec(name="proportion"),
                            PluginSpec(name="binpack", arguments={"binpack.weight": 10, "binpack.cpu": 1}),
                        ]
                    ),
                ],
                configurations=[ActionConfiguration(name="enqueue", arguments={"overcommit-factor": 1.2})],
            )
        ),
    )


def job_submitted(name: str = "llm-pretrain-7b", *, event_id: str | None = None) -> JobSubmitted:
    return JobSubmitted(
        id=event_id or f"evt-job-{name}",
        source="tephra://sdk/training-platform",
        time=_at(10),
        cluster=CLUSTER,
        subject=f"job/research/{name}",
        data=JobSubmittedData(
            namespace="research",
            name=name,
            queue="research",
            priority_class="high",
            min_available=5,
            min_resources={"cpu": "33", "memory": "260Gi", "nvidia.com/gpu": 32},
            tasks=[
                TaskSpec(
                    name="master",
                    replicas=1,
                    resources={"cpu": "1", "memory": "4Gi"},
                    preemptable=False,
                ),
                TaskSpec(
                    name="worker",
                    replicas=4,
                    min_available=4,
                    resources={"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": 8},
                    node_selector={"gpu-type": "a100"},
                    tolerations=[Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")],
                    required_node_affinity=[
                        NodeSelectorTerm(
                            match_expressions=[
                                NodeSelectorRequirement(
                                    key="zone", operator="In", values=["us-east-1a", "us-east-1b"]
                                )
                            ]
                        )
                    ],
                ),
            ],
            labels={"team": "nlp"},
            annotations={"tephra.io/runtime-seconds": "3600"},
        ),
    )


def tasks_added() -> TasksAdded:
    return TasksAdded(
        id="evt-tasks-added-1",
        source="tephra://kube/bridge",
        time=_at(15),
        cluster=CLUSTER,
        subject=f"job/{_JOB}",
        data=TasksAddedData(
            job_id=_JOB,
            tasks=[TaskSpec(name="evaluator", replicas=1, min_available=0, resources={"cpu": "2"})],
        ),
    )


def job_cancelled() -> JobCancelled:
    return JobCancelled(
        id="evt-job-cancelled-1",
        source="tephra://cli",
        time=_at(20),
        cluster=CLUSTER,
        subject=f"job/{_JOB}",
        data=JobCancelledData(job_id=_JOB, reason="superseded by a newer checkpoint"),
    )


def job_rejected() -> JobRejected:
    return JobRejected(
        id="evt-job-rejected-1",
        source="tephra://admission",
        time=_at(11),
        cluster=CLUSTER,
        subject="job/research/too-big",
        data=JobRejectedData(
            job_id="research/too-big", code="unknown-queue", reason="queue 'nope' does not exist"
        ),
    )


def node_reported(name: str = "gpu-node-01", *, event_id: str | None = None) -> NodeReported:
    return NodeReported(
        id=event_id or f"evt-node-{name}",
        source="tephra://kube-bridge",
        time=_at(5),
        cluster=CLUSTER,
        subject=f"node/{name}",
        data=NodeReportedData(
            name=name,
            allocatable={"cpu": "95500m", "memory": "1056Gi", "nvidia.com/gpu": 8, "pods": 110},
            labels={"gpu-type": "a100", "zone": "us-east-1a", "kubernetes.io/hostname": name},
            taints=[Taint(key="nvidia.com/gpu", value="present", effect="NoSchedule")],
        ),
    )


def node_removed(name: str = "gpu-node-02") -> NodeRemoved:
    return NodeRemoved(
        id=f"evt-node-removed-{name}",
        source="tephra://kube-bridge",
        time=_at(30),
        cluster=CLUSTER,
        subject=f"node/{name}",
        data=NodeRemovedData(name=name),
    )


def hypernode_upserted(name: str = "leaf-a") -> HyperNodeUpserted:
    return HyperNodeUpserted(
        id=f"evt-hypernode-{name}",
        source="tephra://kube-bridge",
        time=_at(6),
        cluster=CLUSTER,
        subject=f"hypernode/{name}",
        data=HyperNodeUpsertedData(
            name=name,
            tier=1,
            tier_name="leaf",
            members=[
                HyperNodeExactMember(type="Node", exact_match="gpu-node-01"),
                HyperNodeRegexMember(type="Node", regex_match="^gpu-node-0[2-4]$"),
                HyperNodeLabelMember(type="Node", label_match=LabelSelector(match_labels={"zone": "a"})),
            ],
        ),
    )


def hypernode_deleted(name: str = "leaf-a") -> HyperNodeDeleted:
    return HyperNodeDeleted(
        id=f"evt-hypernode-deleted-{name}",
        source="tephra://kube-bridge",
        time=_at(31),
        cluster=CLUSTER,
        subject=f"hypernode/{name}",
        data=HyperNodeDeletedData(name=name),
    )


def task_started(index: int = 0, *, event_id: str | None = None) -> TaskStarted:
    return TaskStarted(
        id=event_id or f"evt-task-started-{index}",
        source="tephra://kube-bridge",
        time=_at(40),
        cluster=CLUSTER,
        subject=f"task/{_JOB}-worker-{index}",
        data=TaskStartedData(job_id=_JOB, task_id=f"{_JOB}-worker-{index}", node="gpu-node-01"),
    )


def task_finished(index: int = 0) -> TaskFinished:
    return TaskFinished(
        id=f"evt-task-finished-{index}",
        source="tephra://kube-bridge",
        time=_at(3640),
        cluster=CLUSTER,
        subject=f"task/{_JOB}-worker-{index}",
        data=TaskFinishedData(
            job_id=_JOB,
            task_id=f"{_JOB}-worker-{index}",
            node="gpu-node-01",
            outcome="failed",
            exit_code=137,
            reason="OOMKilled",
        ),
    )


def session_committed() -> SessionCommitted:
    return SessionCommitted(
        id="evt-session-42",
        source="tephra://scheduler",
        time=_at(35),
        cluster=CLUSTER,
        subject="session/42",
        data=SessionCommittedData(
            session_id="42",
            leader_epoch=3,
            input_seq=1207,
            config_version=3,
            now=_at(35),
            input_digest="sha256:" + "ab" * 32,
            logic_flags=["gang-min-available-per-task"],
            decisions=[
                EnqueueDecision(job=_JOB),
                BindDecision(task=f"{_JOB}-worker-0", job=_JOB, node="gpu-node-01"),
                PipelineDecision(task=f"{_JOB}-worker-1", job=_JOB, node="gpu-node-03"),
                EvictDecision(
                    task="batch/etl-nightly-worker-2",
                    job="batch/etl-nightly",
                    node="gpu-node-03",
                    action="preempt",
                    preemptor_job=_JOB,
                    preemptor_task=f"{_JOB}-worker-1",
                    rule="priority",
                ),
            ],
            pending=[
                PendingJob(
                    job="research/sweep-17",
                    reasons=[
                        PendingReason(
                            code="gang-unschedulable", message="gang 2/4 tasks placeable, minAvailable 4"
                        )
                    ],
                )
            ],
            pending_digest="sha256:" + "cd" * 32,
        ),
    )


def session_part() -> SessionPart:
    return SessionPart(
        id="evt-session-43-part-0",
        source="tephra://scheduler",
        time=_at(36),
        cluster=CLUSTER,
        subject="session/43",
        data=SessionPartData(
            session_id="43",
            index=0,
            decisions=[BindDecision(task=f"{_JOB}-worker-2", job=_JOB, node="gpu-node-04")],
        ),
    )


#: The sample scheduler's key: fixed, so the sample's signature is too (Ed25519 is deterministic).
SCHEDULER_KEY = SigningKey(Ed25519PrivateKey.from_private_bytes(bytes(range(32))))


def leader_elected() -> Event:
    event = LeaderElected(
        id="evt-leader-7",
        source="tephra://scheduler",
        time=_at(37),
        cluster=CLUSTER,
        data=LeaderElectedData(epoch=7, public_key=SCHEDULER_KEY.public_key, holder="sched-0:4242"),
    )
    return sign_event(event, SCHEDULER_KEY, "scheduler")


def sample_events() -> list[Event]:
    """One event of every type in the catalogue, in catalogue order."""
    return [
        queue_upserted(),
        queue_deleted(),
        priority_class_upserted(),
        scheduler_configured(),
        job_submitted(),
        job_cancelled(),
        job_rejected(),
        node_reported(),
        node_removed(),
        task_started(),
        task_finished(),
        session_committed(),
        session_part(),
        leader_elected(),
        hypernode_upserted(),
        hypernode_deleted(),
        tasks_added(),
    ]
