"""The scheduler's Prometheus metrics: Volcano's names, types, labels and buckets where Volcano has
the metric (``pkg/scheduler/metrics``), ``tephra_*`` for the rest.

Everything is observed by the service after a session, from what the pure
session returned (decisions, trace — :mod:`scheduler.service.trace_summary` —, pending
reasons) and the state it read:
``scheduler.core`` knows nothing of metrics.  Per-queue, per-node and per-job
series are set from the session's input state each time (throttled to one
refresh per ``refresh_every`` seconds) and the series of queues, nodes and jobs
that are gone are removed.

The per-queue accounting is the projection's, as ``tephra get queues`` shows it:
``allocated`` is what the tasks occupying nodes request, ``deserved`` and
``capacity`` are the queue's ``deserved`` and ``capability``; ``share`` is the
largest ``allocated / deserved`` over the resources the queue deserves some of,
and a queue is ``overused`` when it holds more than it deserves of one of them.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from prometheus_client import Counter, Gauge, Histogram

from events.models import BindDecision, Decision, EvictDecision, PendingJob
from events.quantity import CPU, MEMORY
from projector.state import OCCUPYING, ClusterState
from scheduler.core.trace import VictimEvicted
from scheduler.service.trace_summary import TraceSummary

__all__ = [
    "GPU",
    "SessionObservation",
    "keep_state_gauges",
    "observe_leadership",
    "observe_session",
    "observe_skip",
]

GPU: Final = "nvidia.com/gpu"


def _exponential(start: float, factor: float, count: int) -> tuple[float, ...]:
    """Prometheus's ExponentialBuckets, as Volcano declares them."""
    return tuple(start * factor**i for i in range(count))


# ---------------------------------------------------------------- Volcano's names
E2E_LATENCY: Final = Histogram(
    "volcano_e2e_scheduling_latency_milliseconds",
    "E2e scheduling latency in milliseconds (scheduling algorithm + binding)",
    buckets=_exponential(5, 2, 15),
)
ACTION_LATENCY: Final = Histogram(
    "volcano_action_scheduling_latency_milliseconds",
    "Action scheduling latency in milliseconds",
    ["action"],
    buckets=_exponential(5, 2, 15),
)
JOB_LATENCY: Final = Histogram(
    "volcano_e2e_job_scheduling_latency_milliseconds",
    "E2e job scheduling latency in milliseconds",
    buckets=_exponential(32, 2, 10),
)
PREEMPTION_VICTIMS: Final = Gauge("volcano_pod_preemption_victims", "Number of selected preemption victims")
PREEMPTION_ATTEMPTS: Final = Counter(
    "volcano_total_preemption_attempts", "Total preemption attempts in the cluster till now"
)
EVICTION_TRANSACTIONS: Final = Counter(
    "volcano_eviction_transactions",
    "Committed statements that evicted at least one task, by action",
    ["action"],
)
UNSCHEDULE_TASKS: Final = Gauge(
    "volcano_unschedule_task_count", "Number of tasks could not be scheduled", ["job_id"]
)
UNSCHEDULE_JOBS: Final = Gauge("volcano_unschedule_job_count", "Number of jobs could not be scheduled")
_QUEUE_RESOURCE_GAUGES: Final = {
    kind: (
        Gauge(
            f"volcano_queue_{kind}_milli_cpu",
            f"{kind.capitalize()} CPU of the queue, millicores",
            ["queue_name"],
        ),
        Gauge(
            f"volcano_queue_{kind}_memory_bytes", f"{kind.capitalize()} memory of the queue", ["queue_name"]
        ),
        Gauge(
            f"volcano_queue_{kind}_scalar_resources",
            f"{kind.capitalize()} scalar resources of the queue",
            ["queue_name", "resource"],
        ),
    )
    for kind in ("allocated", "deserved", "capacity")
}
QUEUE_SHARE: Final = Gauge(
    "volcano_queue_share", "Share of the queue: allocated over deserved", ["queue_name"]
)
QUEUE_WEIGHT: Final = Gauge("volcano_queue_weight", "Weight of the queue", ["queue_name"])
QUEUE_OVERUSED: Final = Gauge(
    "volcano_queue_overused", "1 if the queue holds more than it deserves", ["queue_name"]
)

# ---------------------------------------------------------------- Tephra's own
JOB_WAIT: Final = Histogram(
    "tephra_job_wait_seconds",
    "From a job's creation to the session that first placed it, by queue",
    ["queue"],
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 12 * 3600, 86400),
)
GPU_ALLOCATED: Final = Gauge(
    "tephra_gpu_allocated", "GPUs requested by tasks occupying nodes, by queue and node", ["queue", "node"]
)
GPU_ALLOCATABLE: Final = Gauge("tephra_gpu_allocatable", "GPUs a node offers", ["node"])
QUEUE_OVERUSE: Final = Gauge(
    "tephra_queue_overuse_ratio", "Allocated over deserved of the queue's most overused resource", ["queue"]
)
BINDINGS: Final = Counter("tephra_bindings", "Bindings the scheduler decided")
EVICTIONS: Final = Counter("tephra_evictions", "Evictions the scheduler decided, by action", ["action"])
SESSIONS: Final = Counter("tephra_sessions", "Sessions published and applied")
SESSIONS_SKIPPED: Final = Counter("tephra_sessions_skipped", "Sessions skipped: nothing changed")
SESSIONS_OVER_BUDGET: Final = Counter(
    "tephra_sessions_over_budget", "Sessions abandoned past the budget (nothing of them published)"
)
SESSIONS_STALLED: Final = Counter(
    "tephra_sessions_stalled", "Sessions the projection did not apply within the apply timeout"
)
PENDING_JOBS: Final = Gauge("tephra_pending_jobs", "Pending jobs by the code of their first reason", ["code"])
LEADER_EPOCH: Final = Gauge(
    "tephra_leader_epoch", "The leader epoch of this scheduler's current term (0: none)"
)
LEADING: Final = Gauge("tephra_scheduler_leading", "1 while this scheduler leads its cluster")
FAILING: Final = Gauge(
    "tephra_scheduler_failing",
    "1 while this scheduler can neither lead nor stand by (database or broker down)",
)


@dataclass(frozen=True, slots=True)
class SessionObservation:
    """What one applied session tells the metrics; built by the session loop."""

    state: ClusterState
    now: datetime
    decisions: Sequence[Decision]
    trace: TraceSummary
    pending: Sequence[PendingJob]
    seconds: float
    #: (action, start, end) of each action run, ns since the epoch.
    actions: Sequence[tuple[str, int, int]]


class _Series:
    """The label sets a labelled metric was last given, with their values, so a replacement sets only
    the series whose value changed and removes the ones that went away.

    A backlog's per-job series (``unschedule_task_count``: 92,000 jobs) keep their values session
    after session; setting each one anew cost ~0.2 s of the scheduler's CPU per session.
    """

    def __init__(self) -> None:
        self._last: dict[int, Mapping[tuple[str, ...], float]] = {}

    def replace(self, metric: Gauge, values: Mapping[tuple[str, ...], float]) -> None:
        """Give ``metric`` exactly ``values`` (label values -> value); the caller leaves them as they are."""
        last = self._last.get(id(metric), {})
        # A lookup per series, not a set of the (labels, value) pairs: no pair to build and hash.
        for labels, value in values.items():
            if last.get(labels) != value:
                metric.labels(*labels).set(value)
        for gone in last.keys() - values.keys():
            metric.remove(*gone)
        self._last[id(metric)] = values


_SERIES: Final = _Series()
_last_refresh = 0.0
#: The input state of the newest session, when the throttle kept it from the gauges.
_unrefreshed: ClusterState | None = None
#: Whether the per-queue, per-node gauges are kept (a walk over every task): only when a process
#: serves its metrics (``api.telemetry.observability``), not in benches and tests that do not.
_state_gauges = False


def keep_state_gauges(enabled: bool) -> None:
    global _state_gauges  # noqa: PLW0603 - the process's metrics are process-wide
    _state_gauges = enabled


def observe_leadership(epoch: int | None, *, failing: bool | None = None) -> None:
    """A term began (``epoch``) or ended (None); ``failing``: standing for leadership or the term
    failed (True), or succeeded (False); None leaves it as it was."""
    LEADER_EPOCH.set(epoch or 0)
    LEADING.set(0 if epoch is None else 1)
    if failing is not None:
        FAILING.set(1 if failing else 0)


def observe_skip() -> None:
    """A session was skipped: nothing changed since the newest one, whose state the gauges now show."""
    SESSIONS_SKIPPED.inc()
    _refresh(None)


def _refresh(state: ClusterState | None, refresh_every: float = 1.0) -> None:
    """The state gauges from ``state`` (None: from the newest state not shown yet), at most once per
    ``refresh_every`` seconds: the walk over every task runs on the event loop."""
    global _last_refresh, _unrefreshed  # noqa: PLW0603 - one process-wide throttle, as the metrics are
    if not _state_gauges:
        return
    if state is not None:
        _unrefreshed = state
    if _unrefreshed is None or time.monotonic() - _last_refresh < refresh_every:
        return
    _last_refresh = time.monotonic()
    _observe_state(_unrefreshed)
    _unrefreshed = None


def observe_session(observation: SessionObservation) -> None:
    o = observation
    SESSIONS.inc()
    E2E_LATENCY.observe(o.seconds * 1000)
    for action, start, end in o.actions:
        ACTION_LATENCY.labels(action).observe((end - start) / 1e9 * 1000)
    _observe_decisions(o.state, o.now, o.decisions)
    _observe_trace(o.trace)
    codes = collections.Counter(job.reasons[0].code if job.reasons else "unknown" for job in o.pending)
    _SERIES.replace(PENDING_JOBS, {(code,): jobs for code, jobs in codes.items()})
    _refresh(o.state)


def _observe_decisions(state: ClusterState, now: datetime, decisions: Iterable[Decision]) -> None:
    first_placed: set[str] = set()
    for decision in decisions:
        if isinstance(decision, BindDecision):
            BINDINGS.inc()
            first_placed.add(decision.job)
        elif isinstance(decision, EvictDecision):
            EVICTIONS.labels(decision.action).inc()
    for job_id in sorted(first_placed):
        job = state.jobs.get(job_id)
        if job is None or any(state.tasks[t].status in OCCUPYING for t in job.tasks if t in state.tasks):
            continue  # placed before: only a job's first placement is its wait
        waited = max(0.0, (now - job.created).total_seconds())
        JOB_WAIT.labels(job.queue).observe(waited)
        JOB_LATENCY.observe(waited * 1000)


def _observe_trace(trace: TraceSummary) -> None:
    if trace.preempt_statements:
        PREEMPTION_ATTEMPTS.inc(trace.preempt_statements)
    evicting: dict[tuple[str, str], int] = {}
    for step in trace.evictions:
        if isinstance(step, VictimEvicted):
            evicting[(step.action, step.preemptor_job)] = (
                evicting.get((step.action, step.preemptor_job), 0) + 1
            )
        elif step.outcome == "committed" and evicting.pop((step.action, step.job), 0):
            EVICTION_TRANSACTIONS.labels(step.action).inc()
    PREEMPTION_VICTIMS.set(trace.victims)
    # The tasks each job lacks to be ready (its last GangNotReady counts).
    unready: dict[tuple[str, ...], float] = {
        (g.job,): short if (short := g.min_available - g.placeable) > 0 else 0 for g in trace.gangs_not_ready
    }
    _SERIES.replace(UNSCHEDULE_TASKS, unready)
    UNSCHEDULE_JOBS.set(len(unready))


def _observe_state(state: ClusterState) -> None:
    allocated: dict[str, dict[str, int]] = {name: {} for name in state.queues}
    gpus: dict[tuple[str, ...], float] = {}
    for task in state.tasks.values():
        if task.status not in OCCUPYING or task.node is None:  # as `tephra get queues` counts
            continue
        job = state.jobs.get(task.job)
        if job is None:
            continue
        bucket = allocated.setdefault(job.queue, {})
        for name, amount in task.resources.items():
            bucket[name] = bucket.get(name, 0) + amount
        if task.resources.get(GPU):
            key = (job.queue, task.node)
            gpus[key] = gpus.get(key, 0) + task.resources[GPU]
    _SERIES.replace(GPU_ALLOCATED, gpus)
    _SERIES.replace(
        GPU_ALLOCATABLE, {(node.name,): node.allocatable.get(GPU, 0) for node in state.nodes.values()}
    )
    per_kind: dict[str, dict[str, dict[str, int]]] = {
        "allocated": {q: allocated.get(q, {}) for q in state.queues},
        "deserved": {q: queue.deserved for q, queue in state.queues.items()},
        "capacity": {q: queue.capability for q, queue in state.queues.items()},
    }
    for kind, per_queue in per_kind.items():
        cpu, memory, scalar = _QUEUE_RESOURCE_GAUGES[kind]
        _SERIES.replace(cpu, {q: r.get(CPU, 0) for q, r in _keyed(per_queue).items()})
        _SERIES.replace(memory, {q: r.get(MEMORY, 0) for q, r in _keyed(per_queue).items()})
        _SERIES.replace(
            scalar,
            {
                (q, name): amount
                for q, r in per_queue.items()
                for name, amount in r.items()
                if name not in (CPU, MEMORY, "pods")
            },
        )
    shares: dict[tuple[str, ...], float] = {}
    for name, queue in state.queues.items():
        used = allocated.get(name, {})
        ratios = [used.get(r, 0) / amount for r, amount in queue.deserved.items() if amount > 0]
        shares[(name,)] = max(ratios, default=0.0)
    _SERIES.replace(QUEUE_SHARE, shares)
    _SERIES.replace(QUEUE_OVERUSE, shares)
    _SERIES.replace(QUEUE_OVERUSED, {q: 1.0 if share > 1 else 0.0 for q, share in shares.items()})
    _SERIES.replace(QUEUE_WEIGHT, {(q,): queue.weight for q, queue in state.queues.items()})


def _keyed(per_queue: Mapping[str, Mapping[str, int]]) -> dict[tuple[str, ...], Mapping[str, int]]:
    return {(q,): r for q, r in per_queue.items()}
