"""The simulated cluster: fake kubelets for the embedded stack, the demo and the tests (like KWOK).

It executes only what the projection accepted.  Rather than tailing the
decision log, it reads the projected task table, level-triggered the way a
kubelet reconciles: a task the fold marked ``Bound`` is started, a task it
marked ``Releasing`` (an accepted eviction) is stopped, and a ``Running`` task
of a job with a ``tephra.dev/sim-runtime`` annotation finishes once that
runtime has elapsed.  A voided decision never reaches the task table, so it is
never executed.

Restarts do not execute anything twice: every event's id is derived from the
task and the decision that put it in its state (``uuid5``), and the
projector's ``event_log`` ignores an id it already holds.  The delays restart
from when the simulator first sees a task; runtimes count from the task's
start as projected, when the projection records it.

:class:`SimPlanner` is the pure part (what is due at ``now``);
:func:`run_sim_cluster` is the loop that reads the projection and produces.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from events.models import (
    DEFAULT_CLUSTER,
    Event,
    TaskFinished,
    TaskFinishedData,
    TaskStarted,
    TaskStartedData,
)

__all__ = [
    "SIM_SOURCE",
    "SimPlanner",
    "TaskView",
    "run_sim_cluster",
]

log = logging.getLogger(__name__)

SIM_SOURCE = "tephra://kube/sim"
# Fixed namespace for the ids of simulated observations (any constant UUID works; this one is ours).
_ID_NAMESPACE = uuid.UUID("6f0d3c1e-5b7a-4e59-9a3c-7d2f1e0b9c41")

BOUND = "Bound"
RUNNING = "Running"
RELEASING = "Releasing"


@dataclass(frozen=True, slots=True)
class TaskView:
    """What the simulator needs to know about one projected task.

    ``decision`` identifies the decision that put the task in ``status`` (the
    binding for Bound and Running, the eviction for Releasing); it keys the
    event ids, so a new binding of the same task is a new start.
    """

    task_id: str
    job_id: str
    status: str
    node: str | None
    decision: str
    runtime: float | None = None
    since: datetime | None = None
    #: The task row's seq, sent as the observation's ``observed_seq``: the fold ignores an
    #: observation about an earlier incarnation of a reused job name (projector.fold).
    seq: int | None = None


@dataclass(frozen=True, slots=True)
class _Key:
    task_id: str
    status: str
    decision: str


class SimPlanner:
    """Decides which observations are due; remembers what it has emitted until the projection moves on."""

    def __init__(
        self,
        *,
        bind_delay: float,
        evict_delay: float,
        cluster: str = DEFAULT_CLUSTER,
        source: str = SIM_SOURCE,
    ) -> None:
        self.bind_delay = timedelta(seconds=bind_delay)
        self.evict_delay = timedelta(seconds=evict_delay)
        self.cluster = cluster
        self.source = source
        self._first_seen: dict[_Key, datetime] = {}
        self._emitted: set[_Key] = set()
        self._keys: dict[str, _Key] = {}  # event id -> key, for events planned but not yet confirmed

    def plan(self, tasks: Sequence[TaskView], now: datetime) -> tuple[list[Event], float | None]:
        """Events due at ``now`` (in task order) and the seconds until the next one falls due (None: none).

        An event is planned again on the next call until :meth:`published` confirms it.
        """
        due: list[Event] = []
        next_due: datetime | None = None
        live: set[_Key] = set()
        for task in sorted(tasks, key=lambda t: t.task_id):
            key = _Key(task.task_id, task.status, task.decision)
            at = self._due_at(task, key, now)
            if at is None:
                continue
            live.add(key)
            if key in self._emitted:
                continue
            if at <= now:
                event = self._event(task, now)
                self._keys[event.id] = key
                due.append(event)
            elif next_due is None or at < next_due:
                next_due = at
        # Forget tasks the projection has moved past (started, finished, rebound).
        self._first_seen = {k: v for k, v in self._first_seen.items() if k in live}
        self._emitted &= live
        self._keys = {i: k for i, k in self._keys.items() if k in live}
        wait = None if next_due is None else max(0.0, (next_due - now).total_seconds())
        return due, wait

    def published(self, events: Sequence[Event]) -> None:
        """The broker has these events: do not plan them again while their task stays in that state."""
        for event in events:
            key = self._keys.pop(event.id, None)
            if key is not None:
                self._emitted.add(key)

    def _due_at(self, task: TaskView, key: _Key, now: datetime) -> datetime | None:
        if task.status == BOUND:
            if not task.node:
                return None  # the fold always places a Bound task; never start one nowhere
            return self._first_seen.setdefault(key, now) + self.bind_delay
        if task.status == RELEASING:
            return self._first_seen.setdefault(key, now) + self.evict_delay
        if task.status == RUNNING and task.runtime is not None:
            started = task.since or self._first_seen.setdefault(key, now)
            return started + timedelta(seconds=task.runtime)
        return None

    def _event(self, task: TaskView, now: datetime) -> Event:
        event_id = str(
            uuid.uuid5(_ID_NAMESPACE, f"{self.cluster}|{task.task_id}|{task.status}|{task.decision}")
        )
        node = task.node or None
        if task.status == BOUND:
            # _due_at never schedules a Bound task without a node.
            started = TaskStartedData(
                job_id=task.job_id, task_id=task.task_id, node=node or "", observed_seq=task.seq
            )
            return TaskStarted(
                id=event_id,
                source=self.source,
                time=now,
                subject=f"task/{task.task_id}",
                cluster=self.cluster,
                data=started,
            )
        if task.status == RELEASING:
            data = TaskFinishedData(
                job_id=task.job_id,
                task_id=task.task_id,
                node=node,
                outcome="evicted",
                reason="pod deleted: an accepted eviction or the job's cancellation",
                observed_seq=task.seq,
            )
        else:
            data = TaskFinishedData(
                job_id=task.job_id,
                task_id=task.task_id,
                node=node,
                outcome="succeeded",
                exit_code=0,
                reason=f"simulated runtime {task.runtime:g}s elapsed",
                observed_seq=task.seq,
            )
        return TaskFinished(
            id=event_id,
            source=self.source,
            time=now,
            subject=f"task/{task.task_id}",
            cluster=self.cluster,
            data=data,
        )


async def run_sim_cluster(
    *,
    read_tasks: Callable[[], Awaitable[Sequence[TaskView]]],
    publish: Callable[[Sequence[Event]], Awaitable[None]],
    planner: SimPlanner,
    poll_interval: float,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> None:
    """Reconcile forever: read the projected tasks, publish what is due, sleep until the next due time.

    ``poll_interval`` bounds how late a new binding is noticed; the loop also
    wakes exactly when a delay or runtime falls due.
    """
    while True:
        tasks = await read_tasks()
        events, wait = planner.plan(tasks, clock())
        if events:
            await publish(events)
            planner.published(events)
            log.info("sim cluster published %d observation(s)", len(events))
        await asyncio.sleep(poll_interval if wait is None else min(poll_interval, wait))
