"""The session framework: plugin/action protocols, extension points, combination.

A :class:`Session` is opened over a snapshot; every configured plugin
registers callbacks for the extension points whose ``enable*`` flag is on
(Volcano's ``session_plugins.go``), and actions query the session, which
combines the callbacks exactly as Volcano does (semantics.md §2):

* orderings (job, queue, task): the first plugin that tells two items apart
  wins, across all tiers; fallback creation time, then identity.  Plugins
  register *sort keys* whose comparison equals Volcano's comparator, so a
  composite key (plugin keys in tier order, then the fallback) is exactly
  "first non-zero wins" and sorting costs one key per item;
* predicates: all must pass, the first failure is reported;
* node order: scores summed;
* preemptable / reclaimable: per tier, abstaining plugins skipped, the lists
  of voting plugins intersected; an empty list from a voter ends the tier
  without a decision and evaluation falls through to the next tier;
* overused: OR; allocatable, preemptive, job ready: AND;
* job pipelined / enqueueable: votes (any reject → false; a permit decides at
  the end of its tier; nobody → true);
* job starving: decided by the first tier that registered any function (AND
  inside that tier); nobody → false;
* job valid: the first failing result.

Each extension point has its own typed registration method (``add_job_order``,
``add_predicate``, ...), so ``mypy --strict`` checks a plugin's callbacks
against the point's signature.  Node functions (predicates, node order) also
declare whether they are *shape-pure*: a function of the task's shape and of
the node's spec and resource state only.  The placement index caches node
results per task shape only while every registered node function is
shape-pure (placement.py).

Divergences from Volcano are listed in docs/scheduling.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from typing import TYPE_CHECKING, Final, Generic, Protocol, TypeAlias, TypeVar

import numpy as np
import numpy.typing as npt

from scheduler.core.carried import CarriedJob, CarriedJobs, release
from scheduler.core.config import PluginOption, SchedulerConfig
from scheduler.core.decisions import Bind, Decision
from scheduler.core.reasons import Reason
from scheduler.core.snapshot import (
    ClusterSnapshot,
    HyperNode,
    Job,
    NetworkTopology,
    PodGroupPhase,
    Task,
    TaskStatus,
)
from scheduler.core.state import (
    JobState,
    NodeTable,
    QueueState,
    ResourceDims,
    TaskState,
    Template,
    build_task,
    task_template,
    timestamp,
)
from scheduler.core.trace import TraceStep

if TYPE_CHECKING:
    from scheduler.core.hypernodes import HyperNodeTree
    from scheduler.core.placement import PlacementIndex

__all__ = [
    "ABSTAIN",
    "PERMIT",
    "REJECT",
    "Action",
    "HyperNodeGradientFn",
    "HyperNodeOrderFn",
    "NodeOrderFn",
    "OrderKey",
    "Plugin",
    "PluginSlot",
    "PredicateFn",
    "RowPredicateFn",
    "RowScoreFn",
    "Session",
    "SortKey",
    "TopologyNodeOrderFn",
    "Verdict",
    "VictimsFn",
]

PERMIT: Final = 1
ABSTAIN: Final = 0
REJECT: Final = -1

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


#: What an ordering callback returns for one item; two items' keys from the same
#: plugin compare like Volcano's comparator (lower first, equal = undecided).
OrderKey: TypeAlias = int | float | tuple[int | float, ...]
#: A composite ordering key: the plugins' keys in tier order, then the fallback.
SortKey: TypeAlias = tuple[OrderKey | str, ...]
#: Per node row, the predicate reason id (0 = passes) / the score.
PredicateFn: TypeAlias = Callable[[TaskState, IntArray], IntArray]
NodeOrderFn: TypeAlias = Callable[[TaskState, IntArray], FloatArray]
#: The scalar (one row, plain Python numbers) forms of the two above.
RowPredicateFn: TypeAlias = Callable[[TaskState, int], int]
RowScoreFn: TypeAlias = Callable[[TaskState, int], float]
#: Victims a plugin accepts among the candidates; None abstains, [] vetoes.
VictimsFn: TypeAlias = Callable[[TaskState, Sequence[TaskState]], list[TaskState] | None]
#: The hyperNodes a job may be placed in, as gradients (tried in order; names in each).
HyperNodeGradientFn: TypeAlias = Callable[[JobState], list[list[str]]]
#: A score per candidate hyperNode for a job (summed over plugins; higher wins).
HyperNodeOrderFn: TypeAlias = Callable[[JobState, Sequence[str]], dict[str, float]]
#: A topology job's node scores per candidate row given the hyperNode its placed tasks span
#: (None: nothing placed yet), added to the node order inside a hyperNode.
TopologyNodeOrderFn: TypeAlias = Callable[[JobState, str | None, IntArray], FloatArray]

_F = TypeVar("_F")
_B = TypeVar("_B")
_R = TypeVar("_R")


class PluginSlot(Protocol):
    """Where a plugin sits in the configuration: its option (name, flags) and tier."""

    @property
    def option(self) -> PluginOption: ...

    @property
    def tier(self) -> int: ...


class Plugin(PluginSlot, Protocol):
    def on_session_open(self, ssn: Session) -> None: ...

    def on_session_close(self, ssn: Session) -> None: ...


class Action(Protocol):
    @property
    def name(self) -> str: ...

    def execute(self, ssn: Session) -> None: ...


@dataclass(frozen=True, slots=True)
class Verdict:
    """A victim list with the plugins of the tier that decided it."""

    victims: tuple[TaskState, ...]
    rule: str


class _Point(Generic[_F]):
    """The callbacks of one extension point, per tier, with the plugin that registered each."""

    # A plain class: mypyc cannot compile a generic dataclass with slots.
    def __init__(self, flag: str | None) -> None:
        #: the ``enable*`` switch that gates the point (None: never gated).
        self.flag = flag
        self.tiers: list[list[tuple[str, _F]]] = []
        #: every callback in tier order (flattened at registration: read on hot paths).
        self.calls: list[_F] = []

    def add(self, plugin: PluginSlot, fn: _F) -> bool:
        """Add ``fn`` for ``plugin`` if its flag is on; returns whether it was added."""
        option = plugin.option
        if self.flag is not None and not option.enabled(self.flag):
            return False
        while len(self.tiers) <= plugin.tier:
            self.tiers.append([])
        self.tiers[plugin.tier].append((option.name, fn))
        self.calls = [f for tier_fns in self.tiers for _, f in tier_fns]
        return True

    def plugins(self) -> frozenset[str]:
        """The plugins with a callback here."""
        return frozenset(name for tier_fns in self.tiers for name, _ in tier_fns)


class _NodePoint(Generic[_B, _R]):
    """A node function point: the batch forms, their scalar forms and shape purity."""

    def __init__(self, flag: str) -> None:
        self.batch: _Point[_B] = _Point(flag)
        #: the scalar forms in combination order (None where a plugin gave none).
        self.rows: list[list[_R | None]] = []
        #: plugins whose function here is not shape-pure.
        self.impure: list[str] = []

    def add(self, plugin: PluginSlot, fn: _B, row: _R | None, *, shape_pure: bool) -> None:
        if not self.batch.add(plugin, fn):
            return
        while len(self.rows) <= plugin.tier:
            self.rows.append([])
        self.rows[plugin.tier].append(row)
        if not shape_pure:
            self.impure.append(plugin.option.name)

    def row_functions(self) -> list[_R] | None:
        """The scalar forms in combination order, or None if one is missing."""
        fns: list[_R] = []
        for tier in self.rows:
            for fn in tier:
                if fn is None:
                    return None
                fns.append(fn)
        return fns


@dataclass(frozen=True, slots=True)
class PredicateReason:
    text: str
    #: UnschedulableAndUnresolvable: preemption cannot help on that node.
    unresolvable: bool


class LastRefusal:
    """A queue's last ``queue-not-allocatable`` refusal: its figures and the Reason made of them."""

    __slots__ = ("dim", "kind", "limit", "plugin", "reason", "request", "used")

    def __init__(  # noqa: PLR0917 - the reason's figures, in order
        self, plugin: str, dim: str, used: int, request: int, limit: Fraction | int, kind: str, reason: Reason
    ) -> None:
        self.plugin = plugin
        self.dim = dim
        self.used = used
        self.request = request
        self.limit = limit
        self.kind = kind
        self.reason = reason


class Session:
    """One scheduling cycle's working state, registries and decisions."""

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        config: SchedulerConfig,
        now: datetime,
        logic_flags: frozenset[str] = frozenset(),
        carried: CarriedJobs | None = None,
    ) -> None:
        """``carried``: job states kept from the previous session (see scheduler/core/carried.py);
        the session takes them now and gives back, at :meth:`release`, those it left as built."""
        self.config = config
        self.now = now
        self.logic_flags = logic_flags
        self.decisions: list[Decision] = []
        self.trace: list[TraceStep] = []
        #: job -> code -> reason.
        self.reasons: dict[str, dict[str, Reason]] = {}
        self._seq = 0
        self._job_order: _Point[Callable[[JobState], OrderKey]] = _Point("enableJobOrder")
        self._queue_order: _Point[Callable[[QueueState], OrderKey]] = _Point("enableQueueOrder")
        self._task_order: _Point[Callable[[TaskState], OrderKey]] = _Point("enableTaskOrder")
        self._predicate: _NodePoint[PredicateFn, RowPredicateFn] = _NodePoint("enablePredicate")
        self._node_order: _NodePoint[NodeOrderFn, RowScoreFn] = _NodePoint("enableNodeOrder")
        self._preemptable: _Point[VictimsFn] = _Point("enablePreemptable")
        self._reclaimable: _Point[VictimsFn] = _Point("enableReclaimable")
        self._overused: _Point[Callable[[QueueState], bool]] = _Point("enableOverused")
        self._allocatable: _Point[Callable[[QueueState, TaskState], bool]] = _Point("enableAllocatable")
        self._preemptive: _Point[Callable[[QueueState, TaskState], bool]] = _Point("enablePreemptive")
        self._job_ready: _Point[Callable[[JobState], bool]] = _Point("enableJobReady")
        self._job_pipelined: _Point[Callable[[JobState], int]] = _Point("enableJobPipelined")
        self._job_enqueueable: _Point[Callable[[JobState], int]] = _Point("enableJobEnqueued")
        self._job_enqueued: _Point[Callable[[JobState], None]] = _Point("enableJobEnqueued")
        self._job_starving: _Point[Callable[[JobState], bool]] = _Point("enableJobStarving")
        self._job_valid: _Point[Callable[[JobState], Reason | None]] = _Point(None)
        # Volcano's VictimQueueOrderFn ignores the enable flags, as JobValidFn does.
        self._victim_queue_order: _Point[Callable[[QueueState, QueueState], int]] = _Point(None)
        self._hypernode_gradient: _Point[HyperNodeGradientFn] = _Point("enableHyperNodeGradient")
        self._hypernode_order: _Point[HyperNodeOrderFn] = _Point("enableHyperNodeOrder")
        self._topology_node_order: _Point[TopologyNodeOrderFn] = _Point("enableNodeOrder")
        self._hypernode_tree: HyperNodeTree | None = None
        self._hypernode_specs: tuple[HyperNode, ...] = snapshot.hypernodes
        #: job -> its PodGroup's ``networkTopology`` (jobs that have one and a queue).
        self.topologies: dict[str, NetworkTopology] = {}
        #: job -> the hyperNode its placed tasks span (Volcano's ``AllocatedHyperNode``).
        self.allocated_hypernodes: dict[str, str] = {}
        self._allocate_handlers: list[Callable[[TaskState], None]] = []
        self._deallocate_handlers: list[Callable[[TaskState], None]] = []
        self.predicate_reasons: list[PredicateReason] = [PredicateReason("", False)]
        self._reason_ids: dict[str, int] = {}
        #: Reasons that many jobs share, by what they are made of (a memo: each function that
        #: fills it keys it on all its inputs; a Reason is immutable, so every job of a refused
        #: backlog holds the same one).
        self.shared_reasons: dict[tuple[object, ...], Reason] = {}
        #: queue -> its last ``queue-not-allocatable`` refusal (plugins.queue_accounting).
        self.last_refusals: dict[str, LastRefusal] = {}
        #: waiting jobs allocate gave a refused visit's outcome without visiting them (its streak).
        self.refusals_given_again = 0
        self.annotations: dict[str, Mapping[str, str]] = {}
        #: queue -> dimension -> deserved amount, as the first quota plugin computed it
        #: (:meth:`set_deserved`); None while no plugin has.
        self.deserved: dict[str, dict[str, Fraction]] | None = None
        self._carried = carried
        #: the states this session may give back (each checked at release).
        self._carry: dict[str, CarriedJob] = {}
        #: the job states built this session that are not offered to be carried.
        self._uncarried: list[JobState] = []
        self._build(snapshot, carried)
        self._placement: PlacementIndex | None = None

    def release(self) -> None:
        """Drop the session's state once its result is taken (the result holds none of it).

        Each job and its tasks refer to each other, and the plugins to the session: left
        alone, the whole session is cyclic garbage that the collector must walk object by
        object (seconds at 100,000 pending jobs).  With the cycles cut, reference counting
        frees it at once.
        """
        for state in self._uncarried:
            state.tasks.clear()
        self._uncarried = []
        carry, self._carry = self._carry, {}
        if self._carried is not None:
            changed = [uid for uid, entry in carry.items() if not entry.as_built()]
            for uid in changed:
                release(carry.pop(uid).state)
            self._carried.give_back(carry)
        self.jobs.clear()
        self.tasks.clear()
        self.snapshot_jobs.clear()
        self.reasons.clear()
        self.decisions.clear()
        self.trace.clear()
        self._placement = None

    # ------------------------------------------------------------------ building

    def _build(self, snapshot: ClusterSnapshot, carried: CarriedJobs | None) -> None:
        names = _dimension_names(snapshot)
        self.dims = carried.dims(names) if carried is not None else ResourceDims(names)
        kept = carried.take() if carried is not None else {}
        self.nodes = NodeTable(snapshot.nodes, self.dims)
        self.total: dict[str, int] = {}
        for node in self.nodes.nodes:
            for name, amount in sorted(node.allocatable.items()):
                self.total[name] = self.total.get(name, 0) + amount
        self.queues: dict[str, QueueState] = {
            q.name: QueueState.from_snapshot(q) for q in sorted(snapshot.queues, key=lambda q: q.name)
        }
        classes = {pc.name: pc for pc in snapshot.priority_classes}
        defaults = sorted(pc.name for pc in snapshot.priority_classes if pc.global_default)
        default_priority = classes[defaults[0]].value if defaults else 0
        self.priority_classes = classes
        self.jobs: dict[str, JobState] = {}
        self.tasks: dict[str, TaskState] = {}
        # Tasks often share equal resources and one selector, tolerations and affinity (alive
        # in the snapshot throughout): what follows from them is built once and shared.
        templates: dict[tuple[tuple[tuple[str, int], ...], int, int, int], Template] = {}
        #: jobs Volcano would silently ignore because their queue does not exist.
        self.orphans: list[str] = []
        #: task uid -> its labels, for the tasks that have any (pod affinity and spread select on them).
        self.pod_labels: dict[str, Mapping[str, str]] = {}
        #: task uid -> the snapshot's task, for tasks with pod (anti-)affinity or spread constraints.
        self.pod_terms: dict[str, Task] = {}
        # Job.uid is a property that formats a string: read once per job.
        by_uid = [(job.uid, job) for job in snapshot.jobs]
        #: (uid, job) in the snapshot's order (the session's close lists phases in it).
        self.snapshot_jobs: list[tuple[str, Job]] = list(by_uid)
        by_uid.sort(key=_first)
        for job_uid, job in by_uid:
            if job.queue not in self.queues:
                self.orphans.append(job_uid)
                self.explain(
                    job_uid,
                    Reason(
                        "queue-missing",
                        f"queue {job.queue} does not exist; Volcano ignores the job until it does",
                        {"queue": job.queue},
                    ),
                )
                continue
            if job.annotations:  # read with .get(uid, {}); most jobs have none
                self.annotations[job_uid] = job.annotations
            if job.network_topology is not None:  # in uid order, as every map here
                self.topologies[job_uid] = job.network_topology
            pc = classes.get(job.priority_class) if job.priority_class else None
            entry = kept.pop(job_uid, None) if kept else None
            if entry is not None:
                if entry.job is job:
                    self._take(entry, pc.value if pc else default_priority)
                    continue
                release(entry.state)
            self._build_job(
                job_uid, job, pc.value if pc else default_priority, templates, carry=carried is not None
            )
        for entry in kept.values():  # jobs gone or changed since
            release(entry.state)
        # The job order's fallback (creation time, then identity) as one int: heap and
        # sort comparisons then end on an int instead of a float and a string.
        for rank, job_state in enumerate(sorted(self.jobs.values(), key=_created_then_uid)):
            job_state.rank = rank

    def _build_job(
        self,
        job_uid: str,
        job: Job,
        priority: int,
        templates: dict[tuple[tuple[tuple[str, int], ...], int, int, int], Template],
        *,
        carry: bool,
    ) -> None:
        """Build ``job``'s working state and its tasks'; with ``carry``, offer it to be carried
        to the next session."""
        state = JobState(
            uid=job_uid,
            namespace=job.namespace,
            name=job.name,
            queue=job.queue,
            min_member=job.min_member,
            min_task_member=dict(job.min_task_member),
            min_resources=dict(job.min_resources) if job.min_resources is not None else None,
            priority=priority,
            phase=job.phase,
            created=timestamp(job.created),
            priority_class=job.priority_class,
        )
        nodes = self.nodes
        tasks = self.tasks
        pairs = [(task.uid, task) for task in job.tasks]
        pairs.sort(key=_first)
        on_node: list[tuple[TaskState, str]] = []
        for uid, task in pairs:
            task_priority = task.priority if task.priority is not None else 1
            selector = task.node_selector
            # Resources by value: each job of a backlog has its own (equal) map, and one
            # template per map would also defeat the caches keyed by its request items.
            key = (
                tuple(task.resources.items()),
                id(selector) if selector else 0,
                id(task.tolerations),
                id(task.required_affinity),
            )
            template = templates.get(key)
            if template is None:
                template = templates[key] = task_template(task, self.dims)
            ts = build_task(task, state, self.dims, task_priority, template=template, uid=uid)
            state.add_task(ts)
            tasks[uid] = ts
            if task.labels:
                self.pod_labels[uid] = task.labels
            if task.pod_affinity or task.pod_anti_affinity or task.topology_spread:
                self.pod_terms[uid] = task
            if task.node is not None and task.status in _ON_NODE:
                on_node.append((ts, task.node))
                row = nodes.index.get(task.node)
                if row is not None:
                    ts.node = row
                    nodes.add(ts, row, task.status)
        self.jobs[job_uid] = state
        if carry:
            self._carry[job_uid] = CarriedJob(
                job,
                state,
                tuple((uid, task.labels) for uid, task in pairs if task.labels),
                tuple((uid, task) for uid, task in pairs if uid in self.pod_terms),
                tuple(on_node),
            )
        else:
            self._uncarried.append(state)

    def _take(self, entry: CarriedJob, priority: int) -> None:
        """Use a carried job state: what _build does for a job, but for building it."""
        state = entry.state
        state.priority = priority  # the priority classes may have changed
        tasks = self.tasks
        for uid, task, _ in entry.tasks:
            tasks[uid] = task
        for uid, labels in entry.labels:
            self.pod_labels[uid] = labels
        for uid, snapshot_task in entry.terms:
            self.pod_terms[uid] = snapshot_task
        if entry.on_node:  # this session's rows (the nodes may have changed since)
            nodes = self.nodes
            for task, name in entry.on_node:
                row = nodes.index.get(name)
                if row is None:
                    task.node = -1
                else:
                    task.node = row
                    nodes.add(task, row, task.status)
        self.jobs[state.uid] = state
        self._carry[state.uid] = entry

    @property
    def placement(self) -> PlacementIndex:
        """The vectorised node-fit index, built on first use."""
        if self._placement is None:
            # placement.py imports this module, so it is imported when first needed.
            from scheduler.core.placement import PlacementIndex  # noqa: PLC0415

            self._placement = PlacementIndex(self)
        return self._placement

    @property
    def hypernodes(self) -> HyperNodeTree:
        """The hyperNode tree (with the virtual cluster top), resolved on first use."""
        if self._hypernode_tree is None:
            from scheduler.core.hypernodes import HyperNodeTree  # noqa: PLC0415 - imports plugins

            self._hypernode_tree = HyperNodeTree(self._hypernode_specs, self.nodes.nodes)
        return self._hypernode_tree

    def highest_tier(self, job: JobState) -> int | None:
        """The highest hyperNode tier ``job`` may span, None when it has no usable constraint.

        Volcano's session (``adjustNetworkTopologySpec``): ``highestTierName`` is translated
        through the hyperNodes' tier names (an unknown name leaves the job unconstrained), and
        soft mode becomes hard mode up to the cluster-top tier, so a soft job takes the
        tightest hyperNode that fits and, failing all, the whole cluster.
        """
        topology = self.topologies.get(job.uid)
        if topology is None:
            return None
        if topology.mode == "soft":
            return self.hypernodes.top.tier
        if topology.highest_tier_allowed is not None:
            return topology.highest_tier_allowed
        if topology.highest_tier_name:
            return self.hypernodes.tier_names.get(topology.highest_tier_name)
        return None

    # ------------------------------------------------------------------ registration

    # Each method adds ``fn`` for ``plugin`` (at its tier) if the point's flag is on.

    def add_job_order(self, plugin: PluginSlot, fn: Callable[[JobState], OrderKey]) -> None:
        self._job_order.add(plugin, fn)

    def add_queue_order(self, plugin: PluginSlot, fn: Callable[[QueueState], OrderKey]) -> None:
        self._queue_order.add(plugin, fn)

    def add_victim_queue_order(self, plugin: PluginSlot, fn: Callable[[QueueState, QueueState], int]) -> None:
        """``fn(victim_queue, preemptor_queue)``: lower loses its tasks first (victims of
        different queues; the queue order decides where every plugin ties)."""
        self._victim_queue_order.add(plugin, fn)

    def add_task_order(self, plugin: PluginSlot, fn: Callable[[TaskState], OrderKey]) -> None:
        self._task_order.add(plugin, fn)

    def add_predicate(
        self, plugin: PluginSlot, fn: PredicateFn, *, row: RowPredicateFn | None = None, shape_pure: bool
    ) -> None:
        """A node filter: per row, a reason id from :meth:`reason_id` or 0 (passes).

        ``row`` is the optional scalar form: it must return exactly what ``fn``
        returns for that row.  ``shape_pure``: the result depends only on the
        task's shape (request, selector, tolerations, affinity), the node's spec
        (allocatable, labels, taints, unschedulable) and its resource state (idle,
        releasing, pipelined, pod count), never on which tasks or jobs are where
        nor on the node's name or row; only then may the placement index reuse a
        result for another task of the same shape or a node in the same state.
        """
        self._predicate.add(plugin, fn, row, shape_pure=shape_pure)

    def add_node_order(
        self, plugin: PluginSlot, fn: NodeOrderFn, *, row: RowScoreFn | None = None, shape_pure: bool
    ) -> None:
        """A node score per row (summed over plugins); ``row`` and ``shape_pure`` as
        for :meth:`add_predicate`."""
        self._node_order.add(plugin, fn, row, shape_pure=shape_pure)

    def add_preemptable(self, plugin: PluginSlot, fn: VictimsFn) -> None:
        self._preemptable.add(plugin, fn)

    def add_reclaimable(self, plugin: PluginSlot, fn: VictimsFn) -> None:
        self._reclaimable.add(plugin, fn)

    def add_overused(self, plugin: PluginSlot, fn: Callable[[QueueState], bool]) -> None:
        self._overused.add(plugin, fn)

    def add_allocatable(self, plugin: PluginSlot, fn: Callable[[QueueState, TaskState], bool]) -> None:
        self._allocatable.add(plugin, fn)

    def add_preemptive(self, plugin: PluginSlot, fn: Callable[[QueueState, TaskState], bool]) -> None:
        self._preemptive.add(plugin, fn)

    def add_job_ready(self, plugin: PluginSlot, fn: Callable[[JobState], bool]) -> None:
        self._job_ready.add(plugin, fn)

    def add_job_pipelined(self, plugin: PluginSlot, fn: Callable[[JobState], int]) -> None:
        """A vote: PERMIT, ABSTAIN or REJECT."""
        self._job_pipelined.add(plugin, fn)

    def add_job_enqueueable(self, plugin: PluginSlot, fn: Callable[[JobState], int]) -> None:
        """A vote: PERMIT, ABSTAIN or REJECT."""
        self._job_enqueueable.add(plugin, fn)

    def add_job_enqueued(self, plugin: PluginSlot, fn: Callable[[JobState], None]) -> None:
        self._job_enqueued.add(plugin, fn)

    def add_job_starving(self, plugin: PluginSlot, fn: Callable[[JobState], bool]) -> None:
        self._job_starving.add(plugin, fn)

    def add_job_valid(self, plugin: PluginSlot, fn: Callable[[JobState], Reason | None]) -> None:
        self._job_valid.add(plugin, fn)

    def add_hypernode_gradient(self, plugin: PluginSlot, fn: HyperNodeGradientFn) -> None:
        """The hyperNode gradients of a job with a network topology (the first plugin decides)."""
        self._hypernode_gradient.add(plugin, fn)

    def add_hypernode_order(self, plugin: PluginSlot, fn: HyperNodeOrderFn) -> None:
        self._hypernode_order.add(plugin, fn)

    def add_topology_node_order(self, plugin: PluginSlot, fn: TopologyNodeOrderFn) -> None:
        """Node scores for a topology job's tasks inside a hyperNode (Volcano's network-aware
        BatchNodeOrderFn); gated by ``enableNodeOrder``."""
        self._topology_node_order.add(plugin, fn)

    def set_deserved(self, deserved: dict[str, dict[str, Fraction]]) -> None:
        """Publish each queue's deserved amounts (the result's ``QueueShares``); the
        first quota plugin to open wins, as the audit reads one plugin's figures."""
        if self.deserved is None:
            self.deserved = {queue: dict(amounts) for queue, amounts in deserved.items()}

    def queue_allocation(self) -> dict[str, dict[str, int]]:
        """Per queue with jobs, the requests of its tasks in allocated states now."""
        totals: dict[str, dict[str, int]] = {}
        for job in self.jobs.values():
            bucket = totals.setdefault(job.queue, {})
            for name, amount in job.allocated.items():
                bucket[name] = bucket.get(name, 0) + amount
        return totals

    def on_allocate(self, fn: Callable[[TaskState], None]) -> None:
        self._allocate_handlers.append(fn)

    def on_deallocate(self, fn: Callable[[TaskState], None]) -> None:
        self._deallocate_handlers.append(fn)

    # ------------------------------------------------------------------ explanations

    def explain(self, job: str, reason: Reason, *, keep_first: bool = False) -> None:
        """Record why ``job`` did not move; the latest reason of a code wins unless ``keep_first``."""
        bucket = self.reasons.get(job)
        if bucket is None:  # not setdefault: it would build an empty dict on every call
            bucket = self.reasons[job] = {}
        elif keep_first and reason.code in bucket:
            return
        bucket[reason.code] = reason

    def job_reasons(self, job: str) -> dict[str, Reason]:
        """The reasons recorded for ``job`` so far, by code (a copy)."""
        return dict(self.reasons.get(job, {}))

    def built_reasons(self, job: str) -> list[Reason]:
        """The reasons recorded for ``job``, in recording order."""
        bucket = self.reasons.get(job)
        return list(bucket.values()) if bucket else []

    def forget(self, job: str, *codes: str) -> None:
        bucket = self.reasons.get(job)
        if bucket:
            for code in codes:
                bucket.pop(code, None)

    def step(self, step: TraceStep) -> None:
        self.trace.append(step)

    def reason_id(self, text: str, *, unresolvable: bool) -> int:
        """Intern a predicate failure text; id 0 means "passed"."""
        rid = self._reason_ids.get(text)
        if rid is None:
            rid = len(self.predicate_reasons)
            self.predicate_reasons.append(PredicateReason(text, unresolvable))
            self._reason_ids[text] = rid
        return rid

    # ------------------------------------------------------------------ orderings

    def job_key(self, job: JobState) -> SortKey:
        # job.rank orders exactly as (job.created, job.uid) (set in _build).  One list made
        # into a tuple (a starred list would build the list, then a tuple of it and the rank).
        key: list[OrderKey] = [fn(job) for fn in self._job_order.calls]
        key.append(job.rank)
        return tuple(key)

    def queue_key(self, queue: QueueState) -> SortKey:
        return (*[fn(queue) for fn in self._queue_order.calls], queue.created, queue.name)

    def task_key(self, task: TaskState) -> SortKey:
        fns = self._task_order.calls
        # Volcano's CompareTask: the pod-name index when both names carry one,
        # else creation time then UID.  Indexed names sort first so the order
        # stays total when a job mixes both forms (Volcano leaves that to chance).
        if len(fns) == 1:  # the usual case (priority), without the intermediate list
            head = fns[0](task)
            if task.index is not None:
                return (head, 0, task.index, task.created, task.uid)
            return (head, 1, 0, task.created, task.uid)
        keys = [fn(task) for fn in fns]
        if task.index is not None:
            return (*keys, 0, task.index, task.created, task.uid)
        return (*keys, 1, 0, task.created, task.uid)

    def queue_before(self, left: QueueState, right: QueueState) -> bool:
        return self.queue_key(left) < self.queue_key(right)

    # ------------------------------------------------------------------ job-level votes

    def job_valid(self, job: JobState) -> Reason | None:
        for fn in self._job_valid.calls:
            result = fn(job)
            if result is not None:
                return result
        return None

    def job_ready(self, job: JobState) -> bool:
        for fn in self._job_ready.calls:
            if not fn(job):
                return False
        return True

    @staticmethod
    def _vote(point: _Point[Callable[[JobState], int]], job: JobState) -> bool:
        for tier in point.tiers:
            permitted = False
            for _, fn in tier:
                vote = fn(job)
                if vote < 0:
                    return False
                if vote > 0:
                    permitted = True
            if permitted:
                return True
        return True

    def job_pipelined(self, job: JobState) -> bool:
        return self._vote(self._job_pipelined, job)

    def hypernode_gradients(self, job: JobState) -> list[list[str]] | None:
        """The first registered plugin's gradients for ``job``; None when no plugin gives any
        (Volcano then searches the cluster top alone: the plain allocate path)."""
        calls = self._hypernode_gradient.calls
        return calls[0](job) if calls else None

    def topology_node_scores(self, job: JobState, allocated: str | None, rows: IntArray) -> FloatArray | None:
        """The summed topology node scores of ``rows`` (None when no plugin gives any)."""
        calls = self._topology_node_order.calls
        if not calls:
            return None
        total: FloatArray = np.zeros(len(rows), dtype=np.float64)
        for fn in calls:
            total = total + fn(job, allocated, rows)
        return total

    def hypernode_scores(self, job: JobState, names: Sequence[str]) -> dict[str, float]:
        """Each candidate's summed score (0 where no plugin scores it)."""
        scores = dict.fromkeys(names, 0.0)
        for fn in self._hypernode_order.calls:
            for name, score in sorted(fn(job, names).items()):
                if name in scores:
                    scores[name] += score
        return scores

    def job_enqueueable(self, job: JobState) -> bool:
        return self._vote(self._job_enqueueable, job)

    def job_enqueued(self, job: JobState) -> None:
        for fn in self._job_enqueued.calls:
            fn(job)

    def job_starving(self, job: JobState) -> bool:
        for tier in self._job_starving.tiers:
            if tier:
                return all(fn(job) for _, fn in tier)
        return False

    # ------------------------------------------------------------------ queue-level votes

    def overused(self, queue: QueueState) -> bool:
        for fn in self._overused.calls:
            if fn(queue):
                return True
        return False

    def visit_plugins(self) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
        """The plugins registered at allocatable, job_ready and job_pipelined: what decides a
        visit that places nothing (allocate's refusal streak holds only for plugins whose
        answers it knows)."""
        return self._allocatable.plugins(), self._job_ready.plugins(), self._job_pipelined.plugins()

    def allocatable(self, queue: QueueState, task: TaskState) -> bool:
        for fn in self._allocatable.calls:
            if not fn(queue, task):
                return False
        return True

    def preemptive(self, queue: QueueState, task: TaskState) -> bool:
        return all(fn(queue, task) for fn in self._preemptive.calls)

    # ------------------------------------------------------------------ victims

    @staticmethod
    def _victims(point: _Point[VictimsFn], preemptor: TaskState, candidates: Sequence[TaskState]) -> Verdict:
        for tier in point.tiers:
            chosen: list[TaskState] | None = None
            voters: list[str] = []
            for name, fn in tier:
                result = fn(preemptor, candidates)
                if result is None:
                    continue  # abstain
                if not result:
                    chosen = None
                    break
                voters.append(name)
                if chosen is None:
                    chosen = list(result)
                else:
                    keep = {t.uid for t in result}
                    chosen = [t for t in chosen if t.uid in keep]
            if chosen:
                return Verdict(tuple(chosen), "+".join(voters))
        return Verdict((), "")

    def preemptable(self, preemptor: TaskState, candidates: Sequence[TaskState]) -> Verdict:
        return self._victims(self._preemptable, preemptor, candidates)

    def reclaimable(self, reclaimer: TaskState, candidates: Sequence[TaskState]) -> Verdict:
        return self._victims(self._reclaimable, reclaimer, candidates)

    def victim_order(self, victims: Iterable[TaskState], preemptor: TaskState) -> list[TaskState]:
        """Volcano's BuildVictimsPriorityQueue order: first element is evicted first.

        1. same job: reverse task order;
        2. different queues: the victim queue order (capacity's hierarchy: queues sharing
           deeper ancestors with the preemptor's lose first), then the queue that would be
           scheduled later loses first;
        3. otherwise reverse job order, ties by reverse task order.
        """

        fns = self._victim_queue_order.calls
        preemptor_queue = self.queues[preemptor.job.queue]

        def sort_key(task: TaskState) -> tuple[tuple[int, ...], _Reverse, _Reverse, _Reverse]:
            queue = self.queues[task.job.queue]
            return (
                tuple(fn(queue, preemptor_queue) for fn in fns),
                _Reverse(self.queue_key(queue)),
                _Reverse(self.job_key(task.job)),
                _Reverse(self.task_key(task)),
            )

        return sorted(victims, key=sort_key)

    # ------------------------------------------------------------------ node functions

    def node_predicate(self, task: TaskState, rows: IntArray) -> IntArray:
        """Per-row predicate reason id (0 = pass); the first failing plugin wins."""
        result: IntArray = np.zeros(len(rows), dtype=np.int64)
        for fn in self._predicate.batch.calls:
            result = np.where(result == 0, fn(task, rows), result)
        return result

    def row_predicates(self) -> list[RowPredicateFn] | None:
        """The predicates' scalar forms in combination order, or None if one lacks it."""
        return self._predicate.row_functions()

    def row_scores(self) -> list[RowScoreFn] | None:
        """The node-order scalar forms in combination order, or None if one lacks it."""
        return self._node_order.row_functions()

    def placement_dependent(self) -> list[str]:
        """Plugins with a node function that is not shape-pure (see :meth:`add_predicate`)."""
        return [*self._predicate.impure, *self._node_order.impure]

    def node_scores(self, task: TaskState, rows: IntArray) -> FloatArray:
        total: FloatArray = np.zeros(len(rows), dtype=np.float64)
        for fn in self._node_order.batch.calls:
            total = total + fn(task, rows)
        return total

    # ------------------------------------------------------------------ state changes

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def place(self, task: TaskState, row: int, status: TaskStatus) -> None:
        """Put a Pending task on ``row`` as Allocated or Pipelined."""
        task.job.set_status(task, status)
        task.node = row
        self._seq += 1  # next_seq(), inlined: this runs on every placement
        task.placed_seq = self._seq
        self.nodes.add(task, row, status)
        for fn in self._allocate_handlers:
            fn(task)

    def unplace(self, task: TaskState) -> None:
        """Undo :meth:`place`: the task is Pending again."""
        row = task.node
        self.nodes.remove(task, row, task.status)
        task.job.set_status(task, TaskStatus.PENDING)
        task.node = -1
        task.tentative = False
        for fn in self._deallocate_handlers:
            fn(task)

    def start_evict(self, task: TaskState) -> TaskStatus:
        """Mark a placed task Releasing; returns its previous status."""
        previous = task.status
        self.nodes.start_releasing(task, task.node)
        for fn in self._deallocate_handlers:
            fn(task)
        task.job.set_status(task, TaskStatus.RELEASING)
        return previous

    def undo_evict(self, task: TaskState, previous: TaskStatus) -> None:
        self.nodes.stop_releasing(task, task.node)
        task.job.set_status(task, previous)
        for fn in self._allocate_handlers:
            fn(task)

    def bind(self, task: TaskState) -> None:
        task.job.set_status(task, TaskStatus.BINDING)
        task.tentative = False
        self.decisions.append(Bind(task.uid, task.job.uid, self.nodes.names[task.node]))

    def set_phase(self, job: JobState, phase: PodGroupPhase) -> None:
        job.phase = phase

    def queue_of(self, job: JobState) -> QueueState:
        return self.queues[job.queue]


def _dimension_names(snapshot: ClusterSnapshot) -> set[str]:
    names: set[str] = {"cpu", "memory", "pods"}
    for node in snapshot.nodes:
        names.update(node.allocatable)
    for job in snapshot.jobs:
        if job.min_resources:
            names.update(job.min_resources)
        for task in job.tasks:
            # A task's request names a subset of its resource names (and ``pods``, already
            # in): when all of those are known, building the request adds nothing.
            if not names.issuperset(task.resources):
                names.update(task.request)
    for queue in snapshot.queues:
        names.update(queue.capability, queue.deserved, queue.guarantee)
    return names


def _first(pair: tuple[str, object]) -> str:
    return pair[0]


def _created_then_uid(job: JobState) -> tuple[float, str]:
    return job.created, job.uid


_ON_NODE: Final = frozenset(
    {
        TaskStatus.ALLOCATED,
        TaskStatus.BINDING,
        TaskStatus.BOUND,
        TaskStatus.RUNNING,
        TaskStatus.RELEASING,
        TaskStatus.PIPELINED,
    }
)


class _Reverse:
    """Wraps a sort key so that sorting by it is descending."""

    __slots__ = ("key",)

    def __init__(self, key: SortKey) -> None:
        self.key = key

    def __lt__(self, other: _Reverse) -> bool:
        return other.key < self.key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Reverse) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)
