"""The smallest change that would have let a pending job fit, found by re-running the session.

Nothing here guesses.  Each *lever* is a family of concrete changes with one
integer knob (how many nodes to add, how much capability to grant, which
weight to give); :func:`find_counterfactual` re-runs the recorded session on
the snapshot modified by the lever at a knob value, and searches the
smallest value for which the job gets at least ``minAvailable`` tasks placed.
The search probes exponentially, then bisects, assuming that more of a
resource never hurts the job (re-checked: the reported value did fit).

Levers are tried in the order the job's top reason points at (queue levers
first for quota reasons, nodes first for node-fit reasons); the first that
works is the answer.  If no single lever works, nodes and the queue's
capability are raised together.

A :class:`Change` can be turned into the events that would make it real
(:meth:`Change.to_events`: NodeReported / QueueUpserted), so a test can fold
them and see the job bind in the next session.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from events.models import (
    Event,
    NodeReported,
    NodeReportedData,
    QueueUpserted,
    QueueUpsertedData,
    Taint,
)
from events.quantity import format_resources
from replay import engine
from replay.blockers import Blocker, limits_capability, overcommitted, reason_key
from replay.probe import PLACED, Outcome, OutOfBudget, Probe, placed_tasks
from replay.quantities import resource_quantities
from scheduler.core.config import SchedulerConfig
from scheduler.core.reasons import Reason, format_amount
from scheduler.core.session import SessionResult
from scheduler.core.snapshot import (
    PODS,
    ClusterSnapshot,
    Job,
    Node,
    NodeSelectorRequirement,
    Queue,
    Task,
    TaskStatus,
)

__all__ = ["Attempt", "Change", "Counterfactual", "find_counterfactual", "placed_tasks"]

ChangeKind = Literal[
    "add-nodes", "queue-capability", "queue-deserved", "queue-weight", "open-queue", "create-queue"
]

_DEFAULT_PODS = 110
_MAX_WEIGHT = 65535
#: A node-fit reason: only room on nodes (or evictions) moves it.
_FIT_CODES = frozenset({"insufficient-resources", "predicate-failed"})
_QUEUE_CODES = (
    "queue-missing",
    "queue-closed",
    "enqueue-rejected",
    "queue-overused",
    "queue-not-allocatable",
)


@dataclass(frozen=True, slots=True)
class Change:
    """One concrete change to the cluster, with a sentence that says it."""

    kind: ChangeKind
    summary: str
    nodes: tuple[Node, ...] = ()
    queue: Queue | None = None

    def apply(self, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        if self.kind == "add-nodes":
            return dataclasses.replace(snapshot, nodes=snapshot.nodes + self.nodes)
        assert self.queue is not None  # noqa: S101  (every queue kind carries its queue)
        others = tuple(q for q in snapshot.queues if q.name != self.queue.name)
        return dataclasses.replace(snapshot, queues=(*others, self.queue))

    def to_events(self, *, cluster: str, time: datetime, source: str, id_prefix: str) -> list[Event]:
        """The events that make this change real, with deterministic ids ``<id_prefix>-<n>``."""
        events: list[Event] = []
        for i, node in enumerate(self.nodes):
            # Snapshot amounts are in Tephra units; events take Kubernetes quantities.
            data = NodeReportedData.model_validate(
                {
                    "name": node.name,
                    "allocatable": format_resources(dict(node.allocatable)),
                    "labels": dict(node.labels),
                    "taints": [Taint(key=t.key, value=t.value, effect=t.effect) for t in node.taints],  # type: ignore[arg-type]
                    "unschedulable": node.unschedulable,
                }
            )
            events.append(
                NodeReported(
                    id=f"{id_prefix}-{i}",
                    source=source,
                    time=time,
                    cluster=cluster,
                    subject=node.name,
                    data=data,
                )
            )
        if self.queue is not None:
            q = self.queue
            data_q = QueueUpsertedData.model_validate(
                {
                    "name": q.name,
                    "weight": q.weight,
                    "capability": format_resources(dict(q.capability)),
                    "deserved": format_resources(dict(q.deserved)),
                    "guarantee": format_resources(dict(q.guarantee)),
                    "reclaimable": q.reclaimable,
                    "priority": q.priority,
                    "state": q.state,
                    "parent": q.parent,
                }
            )
            events.append(
                QueueUpserted(
                    id=f"{id_prefix}-q",
                    source=source,
                    time=time,
                    cluster=cluster,
                    subject=q.name,
                    data=data_q,
                )
            )
        return events

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "summary": self.summary}
        if self.nodes:
            out["nodes"] = [
                {
                    "name": n.name,
                    "allocatable": resource_quantities(n.allocatable),
                    "labels": dict(sorted(n.labels.items())),
                }
                for n in self.nodes
            ]
        if self.queue is not None:
            q = self.queue
            out["queue"] = {
                "name": q.name,
                "weight": q.weight,
                "capability": resource_quantities(q.capability),
                "deserved": resource_quantities(q.deserved),
                "state": q.state,
            }
        return out


@dataclass(frozen=True, slots=True)
class Attempt:
    """A change the search tried that did not let the job fit, and why (the first reason left)."""

    change: str
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"change": self.change, "why": self.why}


@dataclass(frozen=True, slots=True)
class Counterfactual:
    """The outcome of the search: the changes that together let the job fit, or none."""

    job: str
    changes: tuple[Change, ...]
    sessions_run: int
    note: str = ""
    #: What was tried and did not fit, smallest first per lever (why the answer is not smaller).
    tried: tuple[Attempt, ...] = field(default_factory=tuple)
    #: The search stopped at its time budget (``budget`` seconds) before it ran to its end.
    cut: bool = False
    budget: float | None = None
    #: How long the search took (text only: the JSON stays the same from run to run, unless cut).
    seconds: float = 0.0
    #: Blockers the search's re-runs met that the explanation did not list yet, with the change
    #: that revealed each (a queue's capability behind a node shortage, seen once nodes are added).
    revealed: tuple[Blocker, ...] = ()

    @property
    def found(self) -> bool:
        return bool(self.changes)

    @property
    def summary(self) -> str:
        """The changes as one change: a combined fix is one fix."""
        return " and ".join(c.summary for c in self.changes)

    def apply(self, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        for change in self.changes:
            snapshot = change.apply(snapshot)
        return snapshot

    def to_json(self) -> dict[str, Any]:
        return {
            "found": self.found,
            "summary": self.summary,
            "changes": [c.to_json() for c in self.changes],
            "sessionsRun": self.sessions_run,
            "budgetSeconds": self.budget,
            "cut": self.cut,
            "tried": [a.to_json() for a in self.tried],
            "note": self.note,
        }


# ---------------------------------------------------------------------------- fitting


def _job(snapshot: ClusterSnapshot, job_id: str) -> Job | None:
    return next((j for j in snapshot.jobs if j.uid == job_id), None)


def _first_blocker(outcome: Outcome, job_id: str, added: Sequence[Node] = ()) -> str:
    """Why a tried change did not fit: its first reason past gang-not-ready, and who took new nodes."""
    reasons = [r for r in outcome.reasons if r.code != "gang-not-ready"] or list(outcome.reasons)
    text = f"{reasons[0].code}: {reasons[0].message}" if reasons else "the job is still not placed"
    names = {n.name for n in added}
    takers = sorted(
        {d.job for d in engine.decisions_of(outcome.result) if d.kind == "bind" and d.node in names}
        - {job_id}
    )
    if takers:
        shown = ", ".join(takers[:3]) + (f" and {len(takers) - 3} more" if len(takers) > 3 else "")
        text += f" (other jobs took the new nodes: {shown})"
    return text


def _smallest(lo: int, hi: int, fits: Callable[[int], bool], guess: int | None = None) -> int | None:
    """The smallest knob in [lo, hi] that fits.

    Probes exponentially upwards from ``guess`` (default ``lo``), then bisects
    between the last failure and the first success; a good guess (from the
    reasons' numbers) makes that two or three re-runs.
    """
    if lo > hi:
        return None
    start = lo if guess is None else min(max(guess, lo), hi)
    if fits(start):
        if start == lo or not fits(start - 1):
            return start
        failing, working = lo - 1, start - 1
    else:
        failing, probe, step = start, start, 1
        while True:
            if probe >= hi:
                return None
            probe = min(hi, probe + step)
            step *= 2
            if fits(probe):
                working = probe
                break
            failing = probe
    while working - failing > 1:
        middle = (working + failing) // 2
        if fits(middle):
            working = middle
        else:
            failing = middle
    return working


# ---------------------------------------------------------------------------- levers


@dataclass(frozen=True, slots=True)
class _Lever:
    name: str
    lo: int
    hi: int
    make: Callable[[int], Change]
    #: Where the search starts, estimated from the reasons' numbers.
    guess: int | None = None


def _pending_tasks(job: Job) -> list[Task]:
    return sorted((t for t in job.tasks if t.status == TaskStatus.PENDING), key=lambda t: t.uid)


def _tolerates(task: Task, taint: Any) -> bool:
    if taint.effect == "PreferNoSchedule":
        return True
    for tol in task.tolerations:
        if tol.effect is not None and tol.effect != taint.effect:
            continue
        if tol.key is None and tol.operator == "Exists":
            return True
        if tol.key == taint.key and (tol.operator == "Exists" or (tol.value or "") == taint.value):
            return True
    return False


def _compare(value: str | None, values: tuple[str, ...], greater: bool) -> bool:
    if value is None or not values:
        return False
    try:
        number, bound = int(value), int(values[0])
    except ValueError:
        return False
    return number > bound if greater else number < bound


_OPERATORS: dict[str, Callable[[str | None, tuple[str, ...]], bool]] = {
    "In": lambda v, vs: v is not None and v in vs,
    "NotIn": lambda v, vs: v is None or v not in vs,
    "Exists": lambda v, vs: v is not None,
    "DoesNotExist": lambda v, vs: v is None,
    "Gt": lambda v, vs: _compare(v, vs, greater=True),
    "Lt": lambda v, vs: _compare(v, vs, greater=False),
}


def _requirement_holds(req: NodeSelectorRequirement, labels: Mapping[str, str]) -> bool:
    """Kubernetes' node selector requirement semantics."""
    holds = _OPERATORS.get(req.operator)
    return holds is not None and holds(labels.get(req.key), req.values)


def _labels_fit(task: Task, labels: Mapping[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in task.node_selector.items()):
        return False
    if task.required_affinity and not any(
        all(_requirement_holds(r, labels) for r in term.match_expressions) for term in task.required_affinity
    ):
        return False
    return True


def _compatible(node: Node, task: Task) -> bool:
    """Static fit (labels, affinity, taints, cordon): could the task ever run on an empty node like this?"""
    return (
        not node.unschedulable
        and _labels_fit(task, node.labels)
        and all(_tolerates(task, t) for t in node.taints)
    )


def _capacity(allocatable: Mapping[str, int], task: Task) -> int:
    """How many copies of ``task`` an empty node with ``allocatable`` holds."""
    return min(allocatable.get(r, 0) // amount for r, amount in task.request.items())


def _synthesized_labels(task: Task) -> dict[str, str]:
    labels = dict(task.node_selector)
    for term in task.required_affinity[:1]:
        for req in term.match_expressions:
            if req.operator == "In" and req.values:
                labels.setdefault(req.key, req.values[0])
            elif req.operator == "Exists":
                labels.setdefault(req.key, "true")
            elif req.operator == "Gt" and req.values:
                labels.setdefault(req.key, str(int(req.values[0]) + 1))
            elif req.operator == "Lt" and req.values:
                labels.setdefault(req.key, str(int(req.values[0]) - 1))
    return labels


def _node_shape(snapshot: ClusterSnapshot, task: Task) -> tuple[Node, str]:
    """The best-fitting node shape for ``task``: an existing compatible node holding most copies.

    Ties go to the smaller node (less waste), then the name.  When no
    existing node could ever hold the task, a node with exactly the task's
    request (and the labels its selectors ask for) is synthesised.
    """
    candidates = [n for n in snapshot.nodes if _compatible(n, task) and _capacity(n.allocatable, task) > 0]
    if candidates:
        best = min(
            candidates,
            key=lambda n: (-_capacity(n.allocatable, task), sum(n.allocatable.values()), n.name),
        )
        return Node(
            name=best.name, allocatable=dict(best.allocatable), labels=dict(best.labels), taints=best.taints
        ), best.name
    allocatable = {**{r: a for r, a in task.request.items() if r != PODS}, PODS: _DEFAULT_PODS}
    return Node(name="extra", allocatable=allocatable, labels=_synthesized_labels(task)), ""


def _amounts(values: Mapping[str, int], only: Iterable[str]) -> str:
    return ", ".join(f"{format_amount(r, values[r])} {r}" for r in only if r in values)


def _node_lever(snapshot: ClusterSnapshot, job: Job, reasons: Sequence[Any]) -> _Lever | None:
    pending = _pending_tasks(job)
    if not pending:
        return None
    # The largest pending task decides the shape: a node that holds it holds the smaller ones.
    unit = max(pending, key=lambda t: (sorted(t.request.items(), key=lambda kv: -kv[1]), t.uid))
    shape, like = _node_shape(snapshot, unit)
    taken = {n.name for n in snapshot.nodes}
    stem = f"{like or 'extra'}-extra"
    names: list[str] = []
    index = 0
    while len(names) < len(pending):
        index += 1
        if f"{stem}-{index}" not in taken:
            names.append(f"{stem}-{index}")
    requested = sorted(r for t in pending for r in t.request if r != PODS)
    selector = ", ".join(f"{k}={v}" for k, v in sorted(shape.labels.items()) if k in _selector_keys(pending))

    def make(k: int) -> Change:
        nodes = tuple(dataclasses.replace(shape, name=names[i]) for i in range(k))
        what = _amounts(shape.allocatable, dict.fromkeys(requested))
        basis = f"like {like}" if like else "new shape"
        match = f" matching {selector}" if selector else ""
        return Change(
            "add-nodes",
            f"{k} more node{'s' if k > 1 else ''} with {what} free{match} ({basis})",
            nodes=nodes,
        )

    # Tasks the gang still lacks after what the session could place, over what one node holds.
    gang = next((dict(r.detail) for r in reasons if r.code == "gang-not-ready" and r.detail), {})
    placed = sum(1 for t in job.tasks if t.status in PLACED)
    missing = max(1, job.min_member - placed - int(gang.get("placeable", 0)))
    per_node = max(1, _capacity(shape.allocatable, unit))
    # Other jobs' pending tasks may take some of the new nodes first (they can
    # be ordered ahead of this job), so the bound leaves room for them too.
    competing = sum(
        1
        for other in snapshot.jobs
        if other.uid != job.uid
        for t in other.tasks
        if t.status is TaskStatus.PENDING
    )
    hi = len(pending) + competing
    while len(names) < hi:
        index += 1
        if f"{stem}-{index}" not in taken:
            names.append(f"{stem}-{index}")
    return _Lever("add-nodes", 1, hi, make, guess=-(-missing // per_node))


def _selector_keys(tasks: Sequence[Task]) -> set[str]:
    keys: set[str] = set()
    for t in tasks:
        keys.update(t.node_selector)
        for term in t.required_affinity:
            keys.update(r.key for r in term.match_expressions)
    return keys


def _shortfall(reasons: Sequence[Any], queue: str) -> dict[str, int]:
    """Per resource, how much the quota reasons of ``queue`` say is missing (at least 1)."""
    short: dict[str, int] = {}
    for reason in reasons:
        detail = dict(getattr(reason, "detail", {}) or {})
        if detail.get("queue") != queue:
            continue
        if "resource" in detail and "limit" in detail:
            need = detail.get("allocated", 0) + detail.get("request", 0) - detail["limit"]
            if need > 0:
                short[detail["resource"]] = max(short.get(detail["resource"], 0), _ceil(need))
        for resource, parts in sorted((detail.get("resources") or {}).items()):
            need = (
                parts["request"]
                + parts["allocated"]
                + parts.get("inqueue", 0)
                - parts.get("elastic", 0)
                - parts["limit"]
            )
            if need > 0:
                short[resource] = max(short.get(resource, 0), _ceil(need))
    return short


def _ceil(value: float) -> int:
    whole = int(value)
    return max(1, whole + (1 if value > whole else 0))


def _limit_shortfall(snapshot: ClusterSnapshot, job: Job, limits: Mapping[str, int]) -> dict[str, int]:
    """Per limited resource: the queue's allocation plus the job's gang need, minus the limit."""
    allocated: dict[str, int] = {}
    for other in snapshot.jobs:
        if other.queue != job.queue:
            continue
        for task in other.tasks:
            if task.status in PLACED:
                for r, a in task.request.items():
                    allocated[r] = allocated.get(r, 0) + a
    need = _job_request(job)
    short = {r: allocated.get(r, 0) + need[r] - limits[r] for r in sorted(need) if r in limits}
    # Only what is short: a resource within its limit is no part of the change.
    return {r: amount for r, amount in short.items() if amount > 0}


def _job_request(job: Job) -> dict[str, int]:
    """What the job still needs to reach its gang minimum (minResources when it has them)."""
    if job.min_resources:
        return {r: a for r, a in job.min_resources.items() if a > 0 and r != PODS}
    missing = max(job.min_member - sum(1 for t in job.tasks if t.status in PLACED), 1)
    total: dict[str, int] = {}
    for task in _pending_tasks(job)[:missing]:
        for r, a in task.request.items():
            if r != PODS:
                total[r] = total.get(r, 0) + a
    return total


def _queue_levers(snapshot: ClusterSnapshot, job: Job, reasons: Sequence[Any]) -> list[_Lever]:
    queue = next((q for q in snapshot.queues if q.name == job.queue), None)
    if queue is None:
        created = Queue(name=job.queue)
        return [
            _Lever(
                "create-queue",
                1,
                1,
                lambda _k: Change("create-queue", f"create queue {job.queue}", queue=created),
            )
        ]
    levers: list[_Lever] = []
    if queue.state != "Open":
        opened = dataclasses.replace(queue, state="Open")
        levers.append(
            _Lever(
                "open-queue",
                1,
                1,
                lambda _k: Change(
                    "open-queue", f"open queue {queue.name} (it is {queue.state})", queue=opened
                ),
            )
        )
    reported = _shortfall(reasons, queue.name)
    # The knob multiplies the shortfall (reported by the reasons, else computed
    # from the queue's usage); 64x is far past any real need.
    quota_levers: tuple[tuple[ChangeKind, str], ...] = (
        ("queue-capability", "capability"),
        ("queue-deserved", "deserved"),
    )
    for kind, field_name in quota_levers:
        limits: Mapping[str, int] = getattr(queue, field_name)
        short = reported or _limit_shortfall(snapshot, job, limits)
        dims = sorted(r for r in short if r in limits)
        if not dims:
            continue

        def make(
            m: int,
            dims: list[str] = dims,
            kind: ChangeKind = kind,
            field_name: str = field_name,
            short: dict[str, int] = short,
        ) -> Change:
            delta = {r: short[r] * m for r in dims}
            updated = {
                **getattr(queue, field_name),
                **{r: getattr(queue, field_name)[r] + delta[r] for r in dims},
            }
            changes: dict[str, Any] = {field_name: updated}
            if field_name == "deserved":  # capability must stay >= deserved
                cap = dict(queue.capability)
                for r in dims:
                    if r in cap and cap[r] < updated[r]:
                        cap[r] = updated[r]
                changes["capability"] = cap
            text = ", ".join(f"+{format_amount(r, delta[r])} {r}" for r in dims)
            summary = f"queue {queue.name} {field_name} {text}"
            return Change(kind, summary, queue=dataclasses.replace(queue, **changes))

        levers.append(_Lever(kind, 1, 64, make))
    if queue.weight < _MAX_WEIGHT:

        def make_weight(w: int) -> Change:
            return Change(
                "queue-weight",
                f"queue {queue.name} weight {queue.weight} -> {w}",
                queue=dataclasses.replace(queue, weight=w),
            )

        levers.append(_Lever("queue-weight", queue.weight + 1, _MAX_WEIGHT, make_weight))
    return levers


def find_counterfactual(
    snapshot: ClusterSnapshot,
    config: SchedulerConfig,
    now: datetime,
    logic_flags: Iterable[str],
    *,
    job_id: str,
    reasons: Sequence[Reason],
    baseline: SessionResult | None = None,
    probe: Probe | None = None,
    blockers: Sequence[Blocker] = (),
) -> Counterfactual:
    """The smallest change (by the levers above) that lets ``job_id`` place minAvailable tasks.

    ``reasons`` are the job's ranked reasons from the re-run (with ``code``
    and ``detail``); they choose and parametrise the levers.  ``baseline`` is
    that re-run's result, when the caller has it.  ``probe``: the re-runner
    (with the time budget and progress) shared with the blocker search, whose
    ``blockers`` rule out levers that cannot work.
    """
    job = _job(snapshot, job_id)
    if job is None:
        return Counterfactual(job_id, (), 0, note="the job is not in this session's input")
    probe = probe or Probe(snapshot, config, now, logic_flags, job)
    search = _Search(probe, job, blockers)
    try:
        return search.run(reasons, baseline, blockers)
    except OutOfBudget:
        best = search.best
        note = (
            f"the search was cut at its time budget ({probe.budget:g} s, {probe.runs} re-runs); "
            + ("a smaller change may exist" if best else "no change found so far")
            + " (raise it with --budget or TEPHRA_EXPLAIN_BUDGET)"
        )
        return search.answer(best, note=note)


class _Hopeless(Exception):
    """More of this lever cannot help: a re-run showed a blocker that it does not move."""


class _Search:
    """One counterfactual search: the levers tried in order, what each attempt left blocking."""

    def __init__(self, probe: Probe, job: Job, blockers: Sequence[Blocker] = ()) -> None:
        self.probe = probe
        self.job = job
        self.queue = next((q for q in probe.snapshot.queues if q.name == job.queue), None)
        self.known = {reason_key(b.reason) for b in blockers}
        self.revealed: list[Blocker] = []
        self.tried: list[Attempt] = []
        #: Levers not tried alone, and why: said when the answer is not one lever alone.
        self.skipped: list[Attempt] = []
        #: The best answer so far (kept when the budget cuts the search).
        self.best: tuple[Change, ...] = ()

    def answer(self, changes: tuple[Change, ...], note: str = "") -> Counterfactual:
        p = self.probe
        return Counterfactual(
            self.job.uid,
            changes,
            p.runs,
            note=note,
            tried=tuple(self.tried if len(changes) == 1 else (*self.skipped, *self.tried)),
            cut=p.cut,
            budget=p.budget,
            seconds=p.elapsed,
            revealed=tuple(self.revealed),
        )

    def _fits(self, changes: Sequence[Change], failures: dict[int, Outcome], knob: int) -> bool:
        modified = self.probe.snapshot
        for change in changes:
            modified = change.apply(modified)
        outcome = self.probe.run(modified)
        if outcome.fits:
            self.best = tuple(changes)  # each fit the search finds is smaller than the one before
            return True
        failures[knob] = outcome
        summary = " and ".join(c.summary for c in changes)
        for reason in outcome.reasons:
            if reason_key(reason) not in self.known:
                self.known.add(reason_key(reason))
                self.revealed.append(Blocker(reason, f"seen with {summary}"))
        if len(changes) == 1 and self._beyond(changes[0], outcome):
            raise _Hopeless
        return False

    def _beyond(self, change: Change, outcome: Outcome) -> bool:
        """Whether ``outcome`` shows a blocker that more of ``change``'s kind cannot move: the
        queue's own capability for nodes or for its weight; for any queue change, overcommit (the
        cluster's size), or a full cluster when no action evicts to make room."""
        met = [Blocker(r) for r in outcome.reasons]
        capped = self.queue is not None and limits_capability(met, self.queue)
        if change.kind == "add-nodes":
            return capped
        if change.kind == "queue-weight" and capped:
            return True
        return overcommitted(met) is not None or self._full(outcome.reasons)

    def _full(self, reasons: Sequence[Reason]) -> bool:
        """The job's first reason is the nodes' fit, and no action of the session evicts to make room:
        then no queue setting places it."""
        first = next((r for r in reasons if r.code != "gang-not-ready"), None)
        evicts = {"preempt", "reclaim"} & set(self.probe.config.actions)
        return first is not None and first.code in _FIT_CODES and not evicts

    def _lever(self, lever: _Lever, fixed: Sequence[Change] = ()) -> int | None:
        """The smallest knob of ``lever`` (with ``fixed``) that fits; records why the one below failed."""
        failures: dict[int, Outcome] = {}

        def fits(k: int) -> bool:
            return self._fits((*fixed, lever.make(k)), failures, k)

        knob: int | None = None
        try:
            knob = _smallest(lever.lo, lever.hi, fits, lever.guess)
        except _Hopeless:
            knob = None
        finally:
            self._record(lever, fixed, failures, found=knob is not None)
        return knob

    def _record(
        self, lever: _Lever, fixed: Sequence[Change], failures: dict[int, Outcome], *, found: bool
    ) -> None:
        """The largest knob that did not fit (just below the answer, or the most tried), and why."""
        if not failures:
            return
        k = max(failures)
        change = lever.make(k)
        what = ("" if found else "even ") + " and ".join(c.summary for c in (*fixed, change))
        self.tried.append(Attempt(what, _first_blocker(failures[k], self.job.uid, change.nodes)))

    def run(
        self, reasons: Sequence[Reason], baseline: SessionResult | None, blockers: Sequence[Blocker]
    ) -> Counterfactual:
        probe, job = self.probe, self.job
        unchanged = (
            probe.outcome(probe.snapshot, baseline) if baseline is not None else probe.run(probe.snapshot)
        )
        if unchanged.fits:
            return self.answer((), note="the job already fits in this session")
        if any(r.code == "scheduling-gated" for r in reasons):
            # No node or quota change places a gated pod: the gates must go first.
            return self.answer((), note="pods are held by scheduling gates; remove the gates first")
        snapshot = probe.snapshot
        node_lever = _node_lever(snapshot, job, reasons)
        queue_levers = _queue_levers(snapshot, job, reasons)
        queue = next((q for q in snapshot.queues if q.name == job.queue), None)
        capped = queue is not None and limits_capability(blockers, queue)
        if node_lever is not None and capped:
            assert queue is not None  # noqa: S101  (capped implies the queue exists)
            self.skipped.append(
                Attempt(
                    "more nodes alone",
                    f"not tried: queue {queue.name}'s capability "
                    f"({_amounts(queue.capability, sorted(queue.capability))}) blocks the job "
                    "whatever the cluster's size",
                )
            )
        # gang-not-ready is a consequence; the first reason after it says where the blocker is.
        # Overcommit's enqueue rejection is about the cluster's size, not the queue's quota.
        top_reason = next((r for r in reasons if r.code != "gang-not-ready"), None)
        top = "" if top_reason is None else top_reason.code
        if top_reason is not None and dict(top_reason.detail).get("plugin") == "overcommit":
            top = "cluster-overused"
        nodes_alone = [node_lever] if node_lever is not None and not capped else []
        cluster = overcommitted(blockers)
        queue_levers_alone = queue_levers
        if cluster is not None and queue_levers:
            self.skipped.append(
                Attempt(
                    "queue changes alone",
                    "not tried: overcommit refuses the job until the cluster is larger "
                    f"({cluster.reason.message})",
                )
            )
            queue_levers_alone = []
        elif queue_levers and self._full([b.reason for b in blockers if b.reason.code != "enqueue-rejected"]):
            self.skipped.append(
                Attempt(
                    "queue changes alone",
                    "not tried: the nodes have no room for it and no action of the session "
                    f"(actions: {', '.join(probe.config.actions)}) evicts to make room",
                )
            )
            queue_levers_alone = []
        ordered = (
            [*queue_levers_alone, *nodes_alone]
            if top in _QUEUE_CODES
            else [*nodes_alone, *queue_levers_alone]
        )
        for lever in ordered:
            knob = self._lever(lever)
            if knob is not None:
                return self.answer((lever.make(knob),))
        # No single lever is enough: the queue as far as it goes, the fewest nodes, then the queue back.
        if node_lever is not None:
            for queue_lever in queue_levers:
                found = self._combined(node_lever, queue_lever)
                if found is not None:
                    return self.answer(found)
        return self.answer(
            (), note="no change of nodes or queue quota within the search bounds lets the job fit"
        )

    def _combined(self, node_lever: _Lever, queue_lever: _Lever) -> tuple[Change, ...] | None:
        """The fewest nodes with the queue raised by what its reasons say is short (else as far as
        it goes, then brought back down): a couple of re-runs when the reasons' numbers are right."""
        for m in dict.fromkeys((queue_lever.lo, queue_lever.hi)):
            k = self._lever(node_lever, (queue_lever.make(m),))
            if k is not None:
                break
        else:
            return None
        nodes = node_lever.make(k)
        if m == queue_lever.lo:
            return (nodes, queue_lever.make(m))
        least = self._lever(queue_lever, (nodes,))
        return None if least is None else (nodes, queue_lever.make(least))
