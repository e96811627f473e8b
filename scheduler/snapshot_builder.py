"""The session input: a frozen :class:`ClusterSnapshot` built from the folded :class:`ClusterState`.

Pure and deterministic (no I/O, no clock): the live scheduler and replay must
derive the same snapshot, and so the same ``input_digest``, from the same
state.  The mapping follows what Volcano's scheduler cache sees on a real
cluster:

* task statuses map one to one (the fold's Pending/Bound/Running/Releasing/
  Succeeded/Failed are Volcano's);
* a job's phase is its PodGroup phase; Completed, Failed and Cancelled jobs
  are all "Completed" to the session, and they appear only while some of
  their tasks still hold a node (Releasing), so node usage stays right;
* ``min_task_member`` is what Volcano's job controller writes on the
  PodGroup: each task's ``minAvailable``, else its replicas;
* a pod's ``priority`` is what Kubernetes' Priority admission resolves: its
  PriorityClass value, else the global default class; ``None`` (Volcano's
  default task priority) when neither exists; its ``preemptionPolicy`` is its
  own, else ``Never`` when that class says so;
* a NotReady node carries the ``node.kubernetes.io/not-ready:NoSchedule``
  taint, as the node lifecycle controller sets it, so nothing new lands on it
  while its tasks still count;
* tasks have no creation time of their own: they were created with their job.
"""

from __future__ import annotations

from typing import Final, TypeAlias

from events.models import (
    HyperNodeExactMember,
    HyperNodeMemberSpec,
    HyperNodeRegexMember,
    HyperNodeUpsertedData,
    NetworkTopologySpec,
    TaskSpec,
)
from events.models import LabelSelector as LabelSelectorModel
from events.models import NodeSelectorTerm as NodeSelectorTermModel
from events.models import PodAffinityTerm as PodAffinityTermModel
from events.models import Taint as TaintModel
from events.models import Toleration as TolerationModel
from events.models import TopologySpreadConstraint as TopologySpreadModel
from events.quantity import MAX_QUANTITY
from projector.state import (
    OCCUPYING,
    TERMINAL_JOB_PHASES,
    ClusterState,
    JobState,
    NodeState,
    PriorityClassState,
    TaskState,
)
from scheduler.core.config import DEFAULT_CONFIG, SchedulerConfig
from scheduler.core.snapshot import (
    ClusterSnapshot,
    HyperNode,
    HyperNodeMember,
    Job,
    LabelSelector,
    NetworkTopology,
    Node,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodAffinityTerm,
    PodGroupPhase,
    PriorityClass,
    Queue,
    Taint,
    Task,
    TaskStatus,
    Toleration,
    TopologySpreadConstraint,
)

__all__ = [
    "NOT_READY_TAINT",
    "affinity_term_of",
    "build_snapshot",
    "config_in_force",
    "global_default",
    "job_snapshot",
    "node_term_of",
    "snapshot_of",
    "spread_of",
    "toleration_of",
]

#: The preemption policy that stops a pod from preempting (or reclaiming) anything.
NEVER: Final = "Never"

#: The taint Kubernetes puts on a node whose kubelet is not Ready.
NOT_READY_TAINT: Final = Taint(key="node.kubernetes.io/not-ready", value="", effect="NoSchedule")

_TASK_STATUS: Final[dict[str, TaskStatus]] = {
    "Pending": TaskStatus.PENDING,
    "Bound": TaskStatus.BOUND,
    "Running": TaskStatus.RUNNING,
    "Releasing": TaskStatus.RELEASING,
    "Succeeded": TaskStatus.SUCCEEDED,
    "Failed": TaskStatus.FAILED,
}
_JOB_PHASE: Final[dict[str, PodGroupPhase]] = {
    "Pending": PodGroupPhase.PENDING,
    "Inqueue": PodGroupPhase.INQUEUE,
    "Running": PodGroupPhase.RUNNING,
    "Completed": PodGroupPhase.COMPLETED,
    "Failed": PodGroupPhase.COMPLETED,
    "Cancelled": PodGroupPhase.COMPLETED,
}


def config_in_force(state: ClusterState) -> tuple[SchedulerConfig, int]:
    """The config of the last SchedulerConfigured (Volcano's default before any) and its version."""
    if state.config is None:
        return DEFAULT_CONFIG, state.config_version
    return SchedulerConfig.from_spec(state.config), state.config_version


def build_snapshot(state: ClusterState) -> ClusterSnapshot:
    """The snapshot a session at ``state.seq`` schedules on."""
    default_class = global_default(state.priority_classes)
    jobs = (job_snapshot(state, job, default_class) for job in state.jobs.values())
    return snapshot_of(state, tuple(j for j in jobs if j is not None))


def snapshot_of(state: ClusterState, jobs: tuple[Job, ...]) -> ClusterSnapshot:
    """The snapshot of ``state`` with ``jobs`` already built (by :func:`job_snapshot`)."""
    return ClusterSnapshot(
        nodes=tuple(_node(node) for node in state.nodes.values()),
        queues=tuple(
            Queue(
                name=q.name,
                weight=q.weight,
                capability=_bounded(q.capability),
                deserved=_bounded(q.deserved),
                guarantee=_bounded(q.guarantee),
                reclaimable=q.reclaimable,
                priority=q.priority,
                state=q.state,
                parent=q.parent,
                created=q.created,
            )
            for q in state.queues.values()
        ),
        priority_classes=tuple(
            PriorityClass(
                name=p.name,
                value=p.value,
                global_default=p.global_default,
                preemption_policy=p.preemption_policy,
            )
            for p in state.priority_classes.values()
        ),
        jobs=jobs,
        hypernodes=tuple(_hypernode(state.hypernodes[name]) for name in sorted(state.hypernodes)),
    )


def _hypernode(h: HyperNodeUpsertedData) -> HyperNode:
    return HyperNode(
        name=h.name,
        tier=h.tier,
        tier_name=h.tier_name,
        members=tuple(_member(m) for m in h.members),
    )


def _member(member: HyperNodeMemberSpec) -> HyperNodeMember:
    if isinstance(member, HyperNodeExactMember):
        return HyperNodeMember(member.type, exact=member.exact_match)
    if isinstance(member, HyperNodeRegexMember):
        return HyperNodeMember(member.type, regex=member.regex_match)
    return HyperNodeMember(member.type, labels=_selector(member.label_match))


def job_snapshot(state: ClusterState, job: JobState, default_class: PriorityClassState | None) -> Job | None:
    """One job as the session sees it; None when it is over and holds no node any more.

    Depends only on the job, its tasks and the priority classes (``default_class``
    is :func:`global_default` of them), so a caller may reuse it while none of those changed.
    """
    terminal = job.phase in TERMINAL_JOB_PHASES
    classes = state.priority_classes
    # Only specs with pod-level fields (labels, pod affinity, spread, gates): most jobs have none.
    specs = {s.name: s for s in job.task_specs if _has_pod_terms(s)}
    # A PodGroup's pods may carry a role other than their spec's name (most jobs: none do).
    roles = {s.name: s.role for s in job.task_specs if s.role is not None}
    tasks = tuple(
        _task(task, job, classes, default_class, specs=specs, roles=roles)
        for task in (state.tasks[task_id] for task_id in job.tasks)
        if not terminal or task.status in OCCUPYING
    )
    if terminal and not tasks:
        return None
    return _job(job, tasks)


def global_default(classes: dict[str, PriorityClassState]) -> PriorityClassState | None:
    # Kubernetes allows one global default; should several exist, pick by name, deterministically.
    defaults = sorted((p for p in classes.values() if p.global_default), key=lambda p: p.name)
    return defaults[0] if defaults else None


def _node(node: NodeState) -> Node:
    taints = tuple(_taint(t) for t in node.taints)
    if not node.ready and NOT_READY_TAINT not in taints:
        taints = (*taints, NOT_READY_TAINT)
    return Node(
        name=node.name,
        allocatable=_bounded(node.allocatable),
        labels=node.labels,
        taints=taints,
        unschedulable=node.unschedulable,
    )


def _bounded(resources: dict[str, int]) -> dict[str, int]:
    """``resources`` with every quantity below ``MAX_QUANTITY``, saturated if need be.

    The projector's door refuses larger quantities (events.quantity), so this only
    matters for an archive written before that bound: its values would overflow the
    session's int64 matrices at every start.  Saturating is deterministic, so replay
    (which builds its snapshots here too) stays exact.
    """
    if all(amount < MAX_QUANTITY for amount in resources.values()):
        return resources
    return {name: min(amount, MAX_QUANTITY - 1) for name, amount in resources.items()}


def _job(job: JobState, tasks: tuple[Task, ...]) -> Job:
    return Job(
        namespace=job.namespace,
        name=job.name,
        queue=job.queue,
        min_member=job.min_available,
        min_task_member=dict(job.min_task_member)
        if job.min_task_member is not None
        else {
            spec.name: spec.replicas if spec.min_available is None else spec.min_available
            for spec in job.task_specs
        },
        min_resources=None if job.min_resources is None else _bounded(job.min_resources),
        priority_class=job.priority_class,
        phase=_JOB_PHASE[job.phase],
        tasks=tasks,
        created=job.created,
        annotations=job.annotations,
        network_topology=None if (nt := job.network_topology) is None else _topology(nt),
    )


def _topology(spec: NetworkTopologySpec) -> NetworkTopology:
    return NetworkTopology(spec.mode, spec.highest_tier_allowed, spec.highest_tier_name)


def _task(
    task: TaskState,
    job: JobState,
    classes: dict[str, PriorityClassState],
    default_class: PriorityClassState | None,
    *,
    specs: dict[str, TaskSpec],
    roles: dict[str, str],
) -> Task:
    labels, affinity, anti_affinity, spread = _pod_terms(specs.get(task.role))
    return Task(
        namespace=job.namespace,
        # A task id is "<namespace>/<pod name>"; the snapshot keeps the parts apart.
        name=task.id[len(job.namespace) + 1 :],
        resources=_bounded(task.resources),
        status=_TASK_STATUS[task.status],
        node=task.node,
        role=roles.get(task.role, task.role),
        priority=_priority(task.priority_class, classes, default_class),
        preemptable=task.preemptable,
        node_selector=task.node_selector,
        tolerations=tuple(toleration_of(t) for t in task.tolerations),
        required_affinity=tuple(node_term_of(t) for t in task.required_node_affinity),
        preemption_policy=_preemption_policy(task, classes, default_class),
        priority_class=task.priority_class,
        created=job.created,
        labels=labels,
        pod_affinity=affinity,
        pod_anti_affinity=anti_affinity,
        topology_spread=spread,
        scheduling_gates=_gates(specs.get(task.role)),
    )


def _has_pod_terms(spec: TaskSpec) -> bool:
    terms = spec.labels or spec.pod_affinity or spec.pod_anti_affinity or spec.topology_spread
    return bool(terms or spec.scheduling_gates)


def _gates(spec: TaskSpec | None) -> tuple[str, ...]:
    """The pod's ``schedulingGates``, as ``tephra simulate`` gives them: not placed while any remain."""
    return () if spec is None else tuple(spec.scheduling_gates)


#: A task's labels, required pod affinity and anti-affinity terms, and spread constraints.
PodTerms: TypeAlias = tuple[
    dict[str, str],
    tuple[PodAffinityTerm, ...],
    tuple[PodAffinityTerm, ...],
    tuple[TopologySpreadConstraint, ...],
]
_NO_POD_TERMS: Final[PodTerms] = ({}, (), (), ())


def _pod_terms(spec: TaskSpec | None) -> PodTerms:
    """The pod-level fields of a task's spec: labels, pod affinity, anti-affinity, spread."""
    if spec is None:
        return _NO_POD_TERMS
    return (
        dict(sorted(spec.labels.items())),
        tuple(affinity_term_of(t) for t in spec.pod_affinity),
        tuple(affinity_term_of(t) for t in spec.pod_anti_affinity),
        tuple(spread_of(c) for c in spec.topology_spread),
    )


def _selector(selector: LabelSelectorModel | None) -> LabelSelector | None:
    if selector is None:
        return None
    return LabelSelector(
        match_labels=tuple(sorted(selector.match_labels.items())),
        match_expressions=tuple(
            NodeSelectorRequirement(key=r.key, operator=r.operator, values=tuple(r.values))
            for r in selector.match_expressions
        ),
    )


def affinity_term_of(term: PodAffinityTermModel) -> PodAffinityTerm:
    return PodAffinityTerm(
        topology_key=term.topology_key,
        selector=_selector(term.label_selector),
        namespaces=tuple(sorted(set(term.namespaces))),
    )


def spread_of(constraint: TopologySpreadModel) -> TopologySpreadConstraint:
    return TopologySpreadConstraint(
        max_skew=constraint.max_skew,
        topology_key=constraint.topology_key,
        when_unsatisfiable=constraint.when_unsatisfiable,
        selector=_selector(constraint.label_selector),
        min_domains=constraint.min_domains,
    )


def _priority(
    name: str | None, classes: dict[str, PriorityClassState], default_class: PriorityClassState | None
) -> int | None:
    if name is not None:
        named = classes.get(name)
        if named is not None:
            return named.value
    return None if default_class is None else default_class.value


def _preemption_policy(
    task: TaskState, classes: dict[str, PriorityClassState], default_class: PriorityClassState | None
) -> str | None:
    """The pod's own policy, else ``Never`` when its PriorityClass says so (Kubernetes' Priority
    admission copies the class's policy onto the pod).

    A class's default ``PreemptLowerPriority`` stays ``None``, which means the same to the
    session: snapshots of archives recorded before this rule keep their digests.
    """
    if task.preemption_policy is not None:
        return task.preemption_policy
    named = classes.get(task.priority_class) if task.priority_class is not None else default_class
    return NEVER if named is not None and named.preemption_policy == NEVER else None


def _taint(taint: TaintModel) -> Taint:
    return Taint(key=taint.key, value=taint.value, effect=taint.effect)


def toleration_of(toleration: TolerationModel) -> Toleration:
    return Toleration(
        key=toleration.key, operator=toleration.operator, value=toleration.value, effect=toleration.effect
    )


def node_term_of(term: NodeSelectorTermModel) -> NodeSelectorTerm:
    return NodeSelectorTerm(
        match_expressions=tuple(
            NodeSelectorRequirement(key=r.key, operator=r.operator, values=tuple(r.values))
            for r in term.match_expressions
        ),
        match_fields=tuple(
            NodeSelectorRequirement(key=r.key, operator=r.operator, values=tuple(r.values))
            for r in term.match_fields
        ),
    )
