"""The session's mutable working copy of the snapshot.

A session never mutates the :class:`~scheduler.core.snapshot.ClusterSnapshot`;
it builds these working objects once and every action and the
:class:`~scheduler.core.statement.Statement` operate on them.

* :class:`TaskState` / :class:`JobState` keep Volcano's gang counters
  incrementally (per status and per role), so ``JobReady`` and friends are
  O(roles), not O(tasks).
* :class:`NodeTable` holds node resources as ``int64`` numpy matrices
  (node × resource dimension) so node fit can be evaluated for all nodes at
  once; every change appends the node's row index to ``changes``, which the
  placement index uses to refresh only the rows that moved.

Resource dimensions are ordered ``cpu``, ``memory``, then the other names
sorted (Volcano checks cpu and memory first and scalars in map order; sorted
is our deterministic stand-in).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

import numpy as np
import numpy.typing as npt

from scheduler.core.snapshot import (
    PODS,
    Node,
    NodeSelectorTerm,
    PodGroupPhase,
    Queue,
    Task,
    TaskStatus,
    Toleration,
)

__all__ = [
    "ALLOCATED_STATUSES",
    "JobState",
    "NodeTable",
    "QueueState",
    "ResourceDims",
    "TaskState",
    "name_index",
    "status_codes",
    "sub_positive",
]

IntArray = npt.NDArray[np.int64]

#: Volcano's AllocatedStatus: counted in job and queue ``allocated``.
ALLOCATED_STATUSES: Final = frozenset(
    {TaskStatus.BOUND, TaskStatus.BINDING, TaskStatus.RUNNING, TaskStatus.ALLOCATED}
)
#: ReadyTaskNum = allocated statuses + Succeeded.
READY_STATUSES: Final = ALLOCATED_STATUSES | {TaskStatus.SUCCEEDED}
_VALID_STATUSES: Final = READY_STATUSES | {TaskStatus.PIPELINED, TaskStatus.PENDING}
#: Statuses that occupy node resources (Used / Pipelined / Releasing).
ON_NODE_STATUSES: Final = ALLOCATED_STATUSES | {TaskStatus.PIPELINED, TaskStatus.RELEASING}
#: A small int per status: the gang counters are lists indexed by it (a list index
#: costs less than an enum-keyed dict lookup on every placement).
_STATUS_CODE: Final[dict[TaskStatus, int]] = {status: code for code, status in enumerate(TaskStatus)}
_N_STATUSES: Final = len(_STATUS_CODE)
_PIPELINED_CODE: Final = _STATUS_CODE[TaskStatus.PIPELINED]


def status_codes(statuses: Iterable[TaskStatus]) -> tuple[int, ...]:
    """The codes of ``statuses``, for :meth:`JobState.count_codes` (precomputed by callers)."""
    return tuple(sorted({_STATUS_CODE[s] for s in statuses}))


# The status sets of the gang checks, as codes (they run for every job at every visit).
_VALID_CODES: Final = status_codes(_VALID_STATUSES)
_READY_CODES: Final = status_codes(READY_STATUSES)
_PIPELINED_CODES: Final = status_codes((*READY_STATUSES, TaskStatus.PIPELINED))
#: per status code: (counted in ReadyTaskNum, in ValidTaskNum, in allocated).
_STATUS_FLAGS: Final[tuple[tuple[bool, bool, bool], ...]] = tuple(
    (status in READY_STATUSES, status in _VALID_STATUSES, status in ALLOCATED_STATUSES)
    for status in TaskStatus
)
#: ScheduledStatus, used for the PodGroup phase.
SCHEDULED_STATUSES: Final = frozenset(
    {TaskStatus.RUNNING, TaskStatus.BOUND, TaskStatus.FAILED, TaskStatus.SUCCEEDED}
)


def name_index(name: str) -> int | None:
    """Volcano's pod-name index: the last '-' part when the name has >= 3 parts."""
    parts = name.split("-")
    if len(parts) >= 3 and parts[-1].isdigit():
        return int(parts[-1])
    return None


def timestamp(value: datetime | None) -> float:
    """A sort key for creation times; a missing time sorts as the oldest (Go's zero time)."""
    return value.timestamp() if value is not None else 0.0


def sub_positive(left: Mapping[str, int], right: Mapping[str, int]) -> dict[str, int]:
    """Per-dimension ``max(0, left - right)`` (Volcano's ExceededPart)."""
    out = {}
    for name in sorted(left):
        diff = left[name] - right.get(name, 0)
        if diff > 0:
            out[name] = diff
    return out


class ResourceDims:
    """The session's resource dimension order and vector conversion, and its
    interning of request vectors and task shapes."""

    def __init__(self, names: Iterable[str]) -> None:
        rest = sorted(set(names) - {"cpu", "memory"})
        self.names: tuple[str, ...] = ("cpu", "memory", *rest)
        self.index: dict[str, int] = {n: i for i, n in enumerate(self.names)}
        self.pods = self.index[PODS] if PODS in self.index else -1
        self._vectors: dict[tuple[tuple[str, int], ...], tuple[IntArray, tuple[int, ...], bool]] = {}
        #: task shape -> its id (``TaskState.shape_id``), in order of first appearance.
        self.shape_ids: dict[tuple[object, ...], int] = {}

    def vector(self, values: Mapping[str, int]) -> IntArray:
        vec = np.zeros(len(self.names), dtype=np.int64)
        for name, amount in values.items():
            vec[self.index[name]] = amount
        return vec

    def shared_vector(self, items: tuple[tuple[str, int], ...]) -> tuple[IntArray, tuple[int, ...], bool]:
        """``vector`` of a sorted request (shared by equal requests: never mutate it), as
        Python ints, and whether the request is BestEffort (nothing but ``pods``)."""
        cached = self._vectors.get(items)
        if cached is None:
            vec = self.vector(dict(items))
            vec.setflags(write=False)
            cached = (vec, tuple(vec.tolist()), all(k == PODS for k, _ in items))
            self._vectors[items] = cached
        return cached


@dataclass(eq=False, slots=True)
class QueueState:
    name: str
    weight: int
    capability: dict[str, int]
    deserved: dict[str, int]
    guarantee: dict[str, int]
    reclaimable: bool
    priority: int
    state: str
    created: float
    #: ``spec.parent``; None (or ``root``) is the root (capacity's ``enableHierarchy`` reads it).
    parent: str | None = None

    @classmethod
    def from_snapshot(cls, queue: Queue) -> QueueState:
        return cls(
            name=queue.name,
            weight=max(1, queue.weight),
            capability=dict(queue.capability),
            deserved=dict(queue.deserved),
            guarantee=dict(queue.guarantee),
            reclaimable=queue.reclaimable,
            priority=queue.priority,
            state=queue.state,
            created=timestamp(queue.created),
            parent=queue.parent or None,
        )

    @property
    def is_open(self) -> bool:
        return self.state == "Open"


@dataclass(eq=False, slots=True)
class TaskState:
    uid: str
    name: str
    namespace: str
    job: JobState
    role: str
    request: dict[str, int]
    vec: IntArray
    #: ``vec`` as Python ints (the scalar re-score path).
    req: tuple[int, ...]
    #: ``request`` as sorted (name, amount) pairs.
    req_items: tuple[tuple[str, int], ...]
    status: TaskStatus
    node: int  # row in the NodeTable, -1 when not on a node
    priority: int
    preemptable: bool
    best_effort: bool
    preemption_policy: str | None
    priority_class: str | None
    node_selector: tuple[tuple[str, str], ...]
    tolerations: tuple[Toleration, ...]
    affinity: tuple[NodeSelectorTerm, ...]
    created: float
    index: int | None
    #: identical shape => identical node fit and score (request + predicates inputs).
    shape: tuple[object, ...]
    #: ``shape`` interned to a small int for the session (cheap cache key).
    shape_id: int
    #: the node of the last discarded tentative placement (Volcano's LastTransaction).
    schedulable_on: str | None = None
    #: order in which the task was placed in this session (for the pipelined list).
    placed_seq: int = -1
    #: True while the task sits in an uncommitted statement placement.
    tentative: bool = False
    #: the pod's ``schedulingGates``: while any remains it stays Pending, no action places it.
    gates: tuple[str, ...] = ()

    # Spelled out: one TaskState per task of the snapshot (see scheduler/core/trace.py).
    def __init__(  # noqa: PLR0917 - the dataclass fields, in order
        self,
        uid: str,
        name: str,
        namespace: str,
        job: JobState,
        role: str,
        request: dict[str, int],
        vec: IntArray,
        req: tuple[int, ...],
        req_items: tuple[tuple[str, int], ...],
        status: TaskStatus,
        node: int,
        priority: int,
        preemptable: bool,
        best_effort: bool,
        preemption_policy: str | None,
        priority_class: str | None,
        node_selector: tuple[tuple[str, str], ...],
        tolerations: tuple[Toleration, ...],
        affinity: tuple[NodeSelectorTerm, ...],
        created: float,
        index: int | None,
        shape: tuple[object, ...],
        shape_id: int,
        schedulable_on: str | None = None,
        placed_seq: int = -1,
        tentative: bool = False,
        gates: tuple[str, ...] = (),
    ) -> None:
        self.uid = uid
        self.name = name
        self.namespace = namespace
        self.job = job
        self.role = role
        self.request = request
        self.vec = vec
        self.req = req
        self.req_items = req_items
        self.status = status
        self.node = node
        self.priority = priority
        self.preemptable = preemptable
        self.best_effort = best_effort
        self.preemption_policy = preemption_policy
        self.priority_class = priority_class
        self.node_selector = node_selector
        self.tolerations = tolerations
        self.affinity = affinity
        self.created = created
        self.index = index
        self.shape = shape
        self.shape_id = shape_id
        self.schedulable_on = schedulable_on
        self.placed_seq = placed_seq
        self.tentative = tentative
        self.gates = gates

    @property
    def pending(self) -> bool:
        return self.status is TaskStatus.PENDING

    @property
    def placeable(self) -> bool:
        """Pending and not held by a scheduling gate: what the actions may place."""
        return self.status is TaskStatus.PENDING and not self.gates


@dataclass(eq=False, slots=True)
class JobState:
    uid: str
    namespace: str
    name: str
    queue: str
    min_member: int
    min_task_member: dict[str, int]
    min_resources: dict[str, int] | None
    priority: int
    phase: PodGroupPhase
    created: float
    priority_class: str | None
    tasks: list[TaskState] = field(default_factory=list)
    #: tasks per status code (``_STATUS_CODE``), in all and per role.
    counts: list[int] = field(default_factory=list)
    role_counts: dict[str, list[int]] = field(default_factory=dict)
    pending_best_effort: int = 0
    role_pending_best_effort: dict[str, int] = field(default_factory=dict)
    allocated: dict[str, int] = field(default_factory=dict)
    # Gang counters kept incrementally: they are read after every placement.
    _ready: int = 0
    _valid: int = 0
    #: position in (created, uid) order among the session's jobs (Session._build).
    rank: int = 0
    #: ``min_task_member`` as sorted pairs, their total, and whether the per-role minimums
    #: apply: fixed for the session (the map is never changed), read at every job visit.
    _roles: tuple[tuple[str, int], ...] = ()
    _task_min_total: int = 0
    _roles_check: bool = False

    # Spelled out: one JobState per job of the snapshot (see scheduler/core/trace.py).
    def __init__(
        self,
        *,
        uid: str,
        namespace: str,
        name: str,
        queue: str,
        min_member: int,
        min_task_member: dict[str, int],
        min_resources: dict[str, int] | None,
        priority: int,
        phase: PodGroupPhase,
        created: float,
        priority_class: str | None,
    ) -> None:
        self.uid = uid
        self.namespace = namespace
        self.name = name
        self.queue = queue
        self.min_member = min_member
        self.min_task_member = min_task_member
        self.min_resources = min_resources
        self.priority = priority
        self.phase = phase
        self.created = created
        self.priority_class = priority_class
        self.tasks = []
        self.counts = [0] * _N_STATUSES
        self.role_counts = {}
        self.pending_best_effort = 0
        self.role_pending_best_effort = {}
        self.allocated = {}
        self._ready = 0
        self._valid = 0
        self.rank = 0
        self._roles = tuple(sorted(min_task_member.items()))
        self._task_min_total = sum(min_task_member.values())
        self._roles_check = bool(min_task_member) and min_member >= self._task_min_total

    # ---------------------------------------------------------------- bookkeeping

    def add_task(self, task: TaskState) -> None:
        self.tasks.append(task)
        self._count(task, task.status, +1)

    def set_status(self, task: TaskState, status: TaskStatus) -> None:
        """``_count(old, -1)`` then ``_count(new, +1)``, fused (this runs on every placement)."""
        old = task.status
        if old is status:
            return
        code0 = _STATUS_CODE[old]
        code1 = _STATUS_CODE[status]
        counts = self.counts
        counts[code0] -= 1
        counts[code1] += 1
        role = task.role
        per_role = self.role_counts[role]  # add_task created it
        per_role[code0] -= 1
        per_role[code1] += 1
        ready0, valid0, allocated0 = _STATUS_FLAGS[code0]
        ready1, valid1, allocated1 = _STATUS_FLAGS[code1]
        self._ready += ready1 - ready0
        self._valid += valid1 - valid0
        if task.best_effort and (old is TaskStatus.PENDING or status is TaskStatus.PENDING):
            sign = 1 if status is TaskStatus.PENDING else -1
            self.pending_best_effort += sign
            self.role_pending_best_effort[role] = self.role_pending_best_effort.get(role, 0) + sign
        if allocated0 != allocated1:
            sign = 1 if allocated1 else -1
            totals = self.allocated
            for name, amount in task.request.items():
                totals[name] = totals.get(name, 0) + sign * amount
        task.status = status

    def _count(self, task: TaskState, status: TaskStatus, sign: int) -> None:
        code = _STATUS_CODE[status]
        self.counts[code] += sign
        ready, valid, allocated = _STATUS_FLAGS[code]
        if ready:
            self._ready += sign
        if valid:
            self._valid += sign
        per_role = self.role_counts.get(task.role)
        if per_role is None:
            per_role = self.role_counts[task.role] = [0] * _N_STATUSES
        per_role[code] += sign
        if status is TaskStatus.PENDING and task.best_effort:
            self.pending_best_effort += sign
            self.role_pending_best_effort[task.role] = self.role_pending_best_effort.get(task.role, 0) + sign
        if allocated:
            totals = self.allocated
            for name, amount in task.request.items():
                totals[name] = totals.get(name, 0) + sign * amount

    def count(self, *statuses: TaskStatus) -> int:
        counts = self.counts
        total = 0
        for status in statuses:  # a plain loop: this runs for every job at session close
            total += counts[_STATUS_CODE[status]]
        return total

    def count_codes(self, codes: tuple[int, ...]) -> int:
        """:meth:`count` of the statuses with these codes (:func:`status_codes`)."""
        counts = self.counts
        total = 0
        for code in codes:
            total += counts[code]
        return total

    def role_count(self, role: str, statuses: Iterable[TaskStatus]) -> int:
        per_role = self.role_counts.get(role)
        return sum(per_role[_STATUS_CODE[s]] for s in statuses) if per_role is not None else 0

    # ---------------------------------------------------------------- gang counters

    @property
    def ready_num(self) -> int:
        return self._ready

    @property
    def waiting_num(self) -> int:
        return self.counts[_PIPELINED_CODE]

    @property
    def valid_num(self) -> int:
        return self._valid

    def is_ready(self) -> bool:
        return self.ready_num + self.pending_best_effort >= self.min_member

    def is_pipelined(self) -> bool:
        return self.waiting_num + self.ready_num + self.pending_best_effort >= self.min_member

    def is_starving(self) -> bool:
        return self.waiting_num + self.ready_num < self.min_member

    @property
    def task_min_total(self) -> int:
        return self._task_min_total

    def _roles_apply(self) -> bool:
        # Volcano checks per-role minimums only when minMember covers them all.
        return self._roles_check

    def check_task_valid(self) -> bool:
        if not self._roles_check:
            return True
        for role, need in self._roles:
            if need > 0 and self._role_total(role, _VALID_CODES) < need:
                return False
        return True

    def _role_total(self, role: str, codes: tuple[int, ...]) -> int:
        """:meth:`role_count` of the statuses with these codes."""
        per_role = self.role_counts.get(role)
        if per_role is None:
            return 0
        total = 0
        for code in codes:
            total += per_role[code]
        return total

    def _check_roles(self, codes: tuple[int, ...]) -> bool:
        if not self._roles_check:
            return True
        best_effort = self.role_pending_best_effort
        for role, need in self._roles:
            have = self._role_total(role, codes) + best_effort.get(role, 0)
            if have < need:
                return False
        return True

    def check_task_ready(self) -> bool:
        if not self.min_task_member:
            return True
        return self._check_roles(_READY_CODES)

    def check_task_pipelined(self) -> bool:
        return self._check_roles(_PIPELINED_CODES)


#: (idle, releasing, pipelined, pod count, future idle, state key id) of one node row.
RowState = tuple[list[int], list[int], list[int], int, list[int], int]


class NodeTable:
    """Node resources per row; rows follow the node names in sorted order.

    The per-placement path reads and writes one row at a time, so the rows are
    kept as Python int lists (each update installs a new list: a row state handed
    out earlier never changes under its reader).  The numpy matrices that the
    vectorised node functions read are brought up to date lazily, on access, for
    the rows that changed since.
    """

    def __init__(self, nodes: Iterable[Node], dims: ResourceDims) -> None:
        ordered = sorted(nodes, key=lambda n: n.name)
        self.dims = dims
        self.nodes: tuple[Node, ...] = tuple(ordered)
        self.names: tuple[str, ...] = tuple(n.name for n in ordered)
        self.index: dict[str, int] = {n: i for i, n in enumerate(self.names)}
        shape = (len(ordered), len(dims.names))
        self.allocatable: IntArray = np.zeros(shape, dtype=np.int64)
        for row, node in enumerate(ordered):
            for name, amount in node.allocatable.items():
                self.allocatable[row, dims.index[name]] = amount
        self._idle: IntArray = self.allocatable.copy()
        self._releasing: IntArray = np.zeros(shape, dtype=np.int64)
        self._pipelined: IntArray = np.zeros(shape, dtype=np.int64)
        #: tasks counted by the pod-number predicate (everything on the node but Releasing).
        self._pod_count: IntArray = np.zeros(len(ordered), dtype=np.int64)
        self.max_pods: IntArray = (
            self.allocatable[:, dims.pods].copy()
            if dims.pods >= 0
            else np.zeros(len(ordered), dtype=np.int64)
        )
        self.tasks: list[dict[str, TaskState]] = [{} for _ in ordered]
        #: row indices in change order; consumers remember how far they have read.
        self.changes: list[int] = []
        #: allocatable / max pods per row as Python ints (static).
        self.alloc_rows: list[list[int]] = self.allocatable.tolist()
        self.max_pods_list: list[int] = self.max_pods.tolist()
        # The rows as Python ints: the truth the matrices are synced from.
        zero = [0] * len(dims.names)
        self._zero = zero
        self.idle_rows: list[list[int]] = [list(row) for row in self.alloc_rows]
        self.releasing_rows: list[list[int]] = [zero] * len(ordered)
        self.pipelined_rows: list[list[int]] = [zero] * len(ordered)
        self.pods_rows: list[int] = [0] * len(ordered)
        #: how much of ``changes`` the matrices reflect.
        self._synced = 0
        #: row -> ``row_state``; an entry is dropped whenever the row changes.
        self.row_cache: dict[int, RowState] = {}
        #: state key (spec class, pod count, resource rows) -> a small int naming it.
        #: Row results are memoised per shape under this id: an int key hashes and
        #: compares at once, where the tuple cost a hash and an element-wise compare
        #: per shape and row change (8% of a session's instructions).
        self._key_ids: dict[tuple[int, ...], int] = {}
        #: per row, the id of its node's spec (allocatable, labels, taints, unschedulable):
        #: rows with one id differ only by name and resource state.
        classes: dict[tuple[object, ...], int] = {}
        self.row_class: list[int] = [
            classes.setdefault(
                (tuple(alloc), tuple(sorted(node.labels.items())), node.taints, node.unschedulable),
                len(classes),
            )
            for alloc, node in zip(self.alloc_rows, ordered, strict=True)
        ]

    # ------------------------------------------------------------------ matrices

    def _sync(self) -> None:
        if self._synced < len(self.changes):
            rows = sorted(set(self.changes[self._synced :]))
            self._synced = len(self.changes)
            self._idle[rows] = [self.idle_rows[r] for r in rows]
            self._releasing[rows] = [self.releasing_rows[r] for r in rows]
            self._pipelined[rows] = [self.pipelined_rows[r] for r in rows]
            self._pod_count[rows] = [self.pods_rows[r] for r in rows]

    @property
    def idle(self) -> IntArray:
        self._sync()
        return self._idle

    @property
    def releasing(self) -> IntArray:
        self._sync()
        return self._releasing

    @property
    def pipelined(self) -> IntArray:
        self._sync()
        return self._pipelined

    @property
    def pod_count(self) -> IntArray:
        self._sync()
        return self._pod_count

    def row_state(self, row: int) -> RowState:
        """(idle, releasing, pipelined, pod count, future idle, key id) of ``row`` as Python
        ints, cached until the row changes; the key id (of the spec class and resource
        state) is equal for rows that every row function must treat alike."""
        cached = self.row_cache.get(row)
        if cached is None:
            idle = self.idle_rows[row]
            releasing = self.releasing_rows[row]
            pipelined = self.pipelined_rows[row]
            zero = self._zero
            if releasing is zero and pipelined is zero:
                future = idle
            else:
                future = _future(idle, releasing, pipelined)
            pods = self.pods_rows[row]
            key = (self.row_class[row], pods, *idle, *releasing, *pipelined)
            key_ids = self._key_ids
            key_id = key_ids.get(key)
            if key_id is None:
                key_id = key_ids[key] = len(key_ids)
            cached = (idle, releasing, pipelined, pods, future, key_id)
            self.row_cache[row] = cached
        return cached

    def __len__(self) -> int:
        return len(self.names)

    def future_idle(self, row: int) -> IntArray:
        result: IntArray = self.idle[row] + self.releasing[row] - self.pipelined[row]
        return result

    def used(self, row: int) -> IntArray:
        result: IntArray = self.allocatable[row] - self.idle[row]
        return result

    def _changed(self, row: int) -> None:
        self.changes.append(row)
        self.row_cache.pop(row, None)

    def add(self, task: TaskState, row: int, status: TaskStatus) -> None:
        """Account ``task`` on ``row`` in ``status`` (which occupies the node)."""
        req = task.req
        if status is TaskStatus.PIPELINED:
            self.pipelined_rows[row] = _plus(self.pipelined_rows[row], req)
        else:
            self.idle_rows[row] = _plus(self.idle_rows[row], req, -1)
            if status is TaskStatus.RELEASING:
                self.releasing_rows[row] = _plus(self.releasing_rows[row], req)
        if status is not TaskStatus.RELEASING:
            self.pods_rows[row] += 1
        self.tasks[row][task.uid] = task
        self.changes.append(row)  # _changed(row), inlined: this runs on every placement
        self.row_cache.pop(row, None)

    def remove(self, task: TaskState, row: int, status: TaskStatus) -> None:
        req = task.req
        if status is TaskStatus.PIPELINED:
            self.pipelined_rows[row] = _plus(self.pipelined_rows[row], req, -1)
        else:
            self.idle_rows[row] = _plus(self.idle_rows[row], req)
            if status is TaskStatus.RELEASING:
                self.releasing_rows[row] = _plus(self.releasing_rows[row], req, -1)
        if status is not TaskStatus.RELEASING:
            self.pods_rows[row] -= 1
        del self.tasks[row][task.uid]
        self._changed(row)

    def start_releasing(self, task: TaskState, row: int) -> None:
        self.releasing_rows[row] = _plus(self.releasing_rows[row], task.req)
        self.pods_rows[row] -= 1
        self._changed(row)

    def stop_releasing(self, task: TaskState, row: int) -> None:
        self.releasing_rows[row] = _plus(self.releasing_rows[row], task.req, -1)
        self.pods_rows[row] += 1
        self._changed(row)


# Row arithmetic as index loops: compiled (mypyc), they are C int operations, where
# map(operator.add, ...) calls a Python function per element.
def _plus(row: list[int], req: tuple[int, ...], sign: int = 1) -> list[int]:
    """A new row: ``row + sign * req``."""
    out = row.copy()
    for i in range(len(out)):
        out[i] += sign * req[i]
    return out


def _future(idle: list[int], releasing: list[int], pipelined: list[int]) -> list[int]:
    out = idle.copy()
    for i in range(len(out)):
        out[i] += releasing[i] - pipelined[i]
    return out


#: What tasks with one resources map, node selector, tolerations and required
#: affinity share: request, its sorted items, vector, vector as ints, BestEffort,
#: sorted selector, shape, shape id.  Shared between tasks, never mutated.
Template = tuple[
    dict[str, int],
    tuple[tuple[str, int], ...],
    IntArray,
    tuple[int, ...],
    bool,
    tuple[tuple[str, str], ...],
    tuple[object, ...],
    int,
]


def task_template(task: Task, dims: ResourceDims) -> Template:
    """The shared part of a task's working state (see :data:`Template`)."""
    request = task.request
    req_items = tuple(sorted(request.items()))
    vec, req, best_effort = dims.shared_vector(req_items)
    selector = tuple(sorted(task.node_selector.items())) if task.node_selector else ()
    shape = (req_items, selector, task.tolerations, task.required_affinity)
    shape_id = dims.shape_ids.setdefault(shape, len(dims.shape_ids))
    return request, req_items, vec, req, best_effort, selector, shape, shape_id


def build_task(
    task: Task,
    job: JobState,
    dims: ResourceDims,
    priority: int,
    *,
    template: Template | None = None,
    uid: str | None = None,
) -> TaskState:
    """The working state of ``task``; ``template`` (shared, never mutated) may come from a cache."""
    request, req_items, vec, req, best_effort, selector, shape, shape_id = template or task_template(
        task, dims
    )
    created = task.created
    # Positional: this runs once per task of the snapshot (field order of TaskState).
    return TaskState(
        uid or task.uid,
        task.name,
        task.namespace,
        job,
        task.role,
        request,
        vec,
        req,
        req_items,
        task.status,
        -1,
        priority,
        task.preemptable,
        best_effort,
        task.preemption_policy,
        task.priority_class,
        selector,
        task.tolerations,
        task.required_affinity,
        created.timestamp() if created is not None else 0.0,
        name_index(task.name),
        shape,
        shape_id,
        gates=task.scheduling_gates,
    )
