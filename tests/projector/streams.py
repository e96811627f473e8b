"""Random but plausible event streams for the projector's tests and benchmarks.

:class:`StreamBuilder` plays a small cluster forward from a seed: queues,
priority classes, a scheduler config, nodes, jobs being submitted, sessions
enqueueing, binding (some beyond a node's free resources), evicting and
pipelining, tasks starting and finishing, cancellations, node churn, stale
leader epochs and split sessions.  It folds every event into a shadow state
with the real fold to choose plausible next events, so the same seed always
gives the same stream.  ``invalid_rate`` mixes in events the fold must refuse,
``reuse_rate`` submissions that reuse a finished job's name.

For a steady state (retention, bench/fold.py): ``live_jobs`` caps the jobs
not yet finished (a submission beyond it cancels a live job instead) and the
cluster to twice its initial nodes; ``step_ms`` is the event time between two
events (1 ms by default: a million events span 17 minutes, less than the
default retention, so nothing retires) and ``ttl_seconds`` the jobs'
``ttl_seconds_after_finished`` (None: the archive's default).  The defaults
give the stream other tests rely on.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import islice

from events.models import (
    BindDecision,
    Decision,
    EnqueueDecision,
    Event,
    EvictDecision,
    JobCancelled,
    JobCancelledData,
    JobSubmitted,
    JobSubmittedData,
    NodeRemoved,
    NodeRemovedData,
    NodeReported,
    NodeReportedData,
    PendingJob,
    PendingReason,
    PipelineDecision,
    PriorityClassUpserted,
    PriorityClassUpsertedData,
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
    TaskSpec,
    TaskStarted,
    TaskStartedData,
    Toleration,
)
from projector.fold import apply
from projector.state import ClusterState

__all__ = ["CLUSTER", "StreamBuilder", "event_stream"]

CLUSTER = "test-cluster"
_T0 = datetime(2026, 1, 1, tzinfo=UTC)


class _Pool:
    """A set with O(1) add, remove and uniform random choice, in a seed-stable order."""

    def __init__(self) -> None:
        self._items: list[str] = []
        self._where: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._items)

    def add(self, item: str) -> None:
        if item not in self._where:
            self._where[item] = len(self._items)
            self._items.append(item)

    def discard(self, item: str) -> None:
        index = self._where.pop(item, None)
        if index is None:
            return
        last = self._items.pop()
        if index < len(self._items):
            self._items[index] = last
            self._where[last] = index

    def choice(self, rng: random.Random) -> str:
        return self._items[rng.randrange(len(self._items))]

    def sample(self, rng: random.Random, k: int) -> list[str]:
        return rng.sample(self._items, min(k, len(self._items)))


class StreamBuilder:
    def __init__(
        self,
        seed: int,
        *,
        invalid_rate: float = 0.0,
        id_prefix: str = "e",
        nodes: int = 8,
        live_jobs: int | None = None,
        step_ms: int = 1,
        ttl_seconds: int | None = None,
        reuse_rate: float = 0.0,
    ) -> None:
        self.rng = random.Random(seed)
        self.reuse_rate = reuse_rate
        self.live_jobs = live_jobs
        self.step = timedelta(milliseconds=step_ms)
        self.ttl_seconds = ttl_seconds
        self.invalid_rate = invalid_rate
        self.prefix = id_prefix
        self.shadow = ClusterState()
        self.count = 0
        self.jobs_made = 0
        self.sessions_made = 0
        self.nodes_made = 0
        self.epoch = 1
        self.initial_nodes = nodes
        #: task status -> task ids; job phase -> job ids (kept from the fold's touched keys).
        self.by_status: dict[str, _Pool] = {}
        self.by_phase: dict[str, _Pool] = {}
        self._status_of: dict[str, str] = {}
        self._phase_of: dict[str, str] = {}
        self.node_pool = _Pool()
        #: The parts of a split session, folded before its marker and yielded just before it.
        self._queued: list[Event] = []

    # ------------------------------------------------------------------ helpers

    def _envelope(self) -> dict[str, object]:
        self.count += 1
        return {
            "id": f"{self.prefix}-{self.count}",
            "source": "tephra://tests",
            "time": _T0 + self.step * self.count,
            "cluster": CLUSTER,
        }

    def _emit(self, event: Event) -> Event:
        outcome = apply(self.shadow, self.shadow.seq + 1, event)
        for kind, key in outcome.touched:
            if kind == "task":
                task = self.shadow.tasks.get(key)
                self._move(self.by_status, self._status_of, key, None if task is None else task.status)
            elif kind == "node":
                if key in self.shadow.nodes:
                    self.node_pool.add(key)
                else:
                    self.node_pool.discard(key)
            elif kind in ("job", "new_job"):
                job = self.shadow.jobs.get(key)
                self._move(self.by_phase, self._phase_of, key, None if job is None else job.phase)
        return event

    @staticmethod
    def _move(pools: dict[str, _Pool], where: dict[str, str], key: str, new: str | None) -> None:
        old = where.pop(key, None)
        if old is not None:
            pools[old].discard(key)
        if new is not None:
            where[key] = new
            pools.setdefault(new, _Pool()).add(key)

    def _pick(self, *statuses: str) -> str | None:
        sizes = [(len(self.by_status.get(s, ())), s) for s in statuses]
        total = sum(n for n, _ in sizes)
        if not total:
            return None
        roll = self.rng.randrange(total)
        for n, status in sizes:
            if roll < n:
                return self.by_status[status].choice(self.rng)
            roll -= n
        return None  # pragma: no cover

    def _node(self) -> NodeReported:
        self.nodes_made += 1
        name = f"node-{self.nodes_made}"
        gpu = self.rng.random() < 0.5
        allocatable = {"cpu": 16_000, "memory": 64 * 2**30, "pods": self.rng.choice([4, 8, 110])}
        if gpu:
            allocatable["nvidia.com/gpu"] = 8
        return NodeReported(
            **self._envelope(),  # type: ignore[arg-type]
            subject=f"node/{name}",
            data=NodeReportedData(
                name=name,
                allocatable=allocatable,
                labels={"zone": self.rng.choice(["a", "b"]), "gpu": str(gpu).lower()},
                taints=[Taint(key="gpu", effect="NoSchedule")] if gpu and self.rng.random() < 0.3 else [],
            ),
        )

    # ------------------------------------------------------------------ stream

    def __iter__(self) -> Iterator[Event]:
        """The endless stream, in the order the shadow folded it (iterate a builder once)."""
        yield from self._setup()
        queued = self._queued
        while True:
            event = self._emit(self._next())
            if queued:
                yield from queued
                queued.clear()
            yield event

    def chunks(self, count: int, size: int) -> Iterator[list[Event]]:
        """The stream's first ``count`` events, ``size`` at a time (the last chunk may be shorter),
        generated as they are asked for: memory holds one chunk, not the stream.  Once per
        builder, like iterating it."""
        if size <= 0:
            raise ValueError(f"size must be positive, got {size}")
        stream = iter(self)
        made = 0
        while made < count:
            chunk = list(islice(stream, min(size, count - made)))
            made += len(chunk)
            yield chunk

    def _setup(self) -> Iterator[Event]:
        for name, weight in (("default", 1), ("research", 3), ("batch", 2)):
            yield self._emit(
                QueueUpserted(
                    **self._envelope(),  # type: ignore[arg-type]
                    data=QueueUpsertedData(name=name, weight=weight, capability={"cpu": 512_000}),
                )
            )
        for name, value in (("high", 1000), ("low", 10)):
            yield self._emit(
                PriorityClassUpserted(
                    **self._envelope(),  # type: ignore[arg-type]
                    data=PriorityClassUpsertedData(name=name, value=value),
                )
            )
        yield self._emit(self._config())
        for _ in range(self.initial_nodes):
            yield self._emit(self._node())

    def _config(self) -> SchedulerConfigured:
        return SchedulerConfigured(
            **self._envelope(),  # type: ignore[arg-type]
            data=SchedulerConfiguredData(
                config=SchedulerConfigSpec(actions=self.rng.choice([["enqueue", "allocate"], ["allocate"]]))
            ),
        )

    def _next(self) -> Event:  # noqa: PLR0911, PLR0912 - one branch per kind of event
        rng = self.rng
        state = self.shadow
        if self.invalid_rate and rng.random() < self.invalid_rate:
            return self._invalid()
        roll = rng.random()
        if roll < 0.14 or not state.jobs:
            return self._submit_or_cancel()
        if roll < 0.36:
            return self._session()
        if roll < 0.62:
            picked = self._pick("Bound")
            if picked is not None:
                task = state.tasks[picked]
                return TaskStarted(
                    **self._envelope(),  # type: ignore[arg-type]
                    data=TaskStartedData(job_id=task.job, task_id=task.id, node=task.node or ""),
                )
        if roll < 0.86:
            picked = self._pick("Running", "Releasing")
            if picked is not None:
                task = state.tasks[picked]
                outcome = (
                    "evicted" if task.status == "Releasing" else rng.choice(["succeeded"] * 6 + ["failed"])
                )
                return TaskFinished(
                    **self._envelope(),  # type: ignore[arg-type]
                    data=TaskFinishedData(job_id=task.job, task_id=task.id, node=task.node, outcome=outcome),
                )
        if roll < 0.90:
            live = [p for p in ("Pending", "Inqueue", "Running") if len(self.by_phase.get(p, ()))]
            if live:
                job = state.jobs[self.by_phase[rng.choice(live)].choice(rng)]
                return JobCancelled(
                    **self._envelope(),  # type: ignore[arg-type]
                    data=JobCancelledData(job_id=job.id, reason="test"),
                )
        if roll < 0.93 and len(state.nodes) > 2:
            name = self.node_pool.choice(rng)
            return NodeRemoved(**self._envelope(), data=NodeRemovedData(name=name))  # type: ignore[arg-type]
        if roll < 0.97:
            if self.live_jobs is not None and len(state.nodes) >= 2 * self.initial_nodes:
                # Steady: the cluster stops growing too.
                name = self.node_pool.choice(rng)
                return NodeRemoved(**self._envelope(), data=NodeRemovedData(name=name))  # type: ignore[arg-type]
            return self._node()
        if roll < 0.98:
            return self._config()
        return self._submit_or_cancel()

    def _submit_or_cancel(self) -> Event:
        """A submission, or at the ``live_jobs`` cap the cancellation of a live job."""
        if self.live_jobs is not None:
            live = [p for p in ("Pending", "Inqueue", "Running") if len(self.by_phase.get(p, ()))]
            if live and sum(len(self.by_phase[p]) for p in live) >= self.live_jobs:
                job = self.by_phase[self.rng.choice(live)].choice(self.rng)
                return JobCancelled(
                    **self._envelope(),  # type: ignore[arg-type]
                    data=JobCancelledData(job_id=job, reason="cap"),
                )
        return self._submit()

    def _submit(self) -> JobSubmitted:
        rng = self.rng
        self.jobs_made += 1
        namespace, name = rng.choice(["ns1", "ns2"]), f"job-{self.jobs_made}"
        if self.reuse_rate and rng.random() < self.reuse_rate:
            # A finished job's name again: a new incarnation (projector.fold).
            done = sorted(
                j for j, job in self.shadow.jobs.items() if job.finished_at is not None and "#" not in j
            )
            if done:
                namespace, name = rng.choice(done).split("/")
        roles = ["worker"] if rng.random() < 0.6 else ["master", "worker"]
        tasks = []
        for role in roles:
            replicas = 1 if role == "master" else rng.randint(1, 4)
            resources = {"cpu": rng.choice([500, 1000, 4000]), "memory": rng.choice([2**30, 8 * 2**30])}
            if rng.random() < 0.3:
                resources["nvidia.com/gpu"] = rng.choice([1, 2, 8])
            tasks.append(
                TaskSpec(
                    name=role,
                    replicas=replicas,
                    min_available=None if rng.random() < 0.7 else rng.randint(0, replicas),
                    resources=resources,
                    node_selector={"zone": "a"} if rng.random() < 0.1 else {},
                    tolerations=[Toleration(key="gpu", operator="Exists")]
                    if "nvidia.com/gpu" in resources
                    else [],
                    preemptable=rng.random() < 0.8,
                    priority_class=rng.choice([None, None, "high"]),
                )
            )
        return JobSubmitted(
            **self._envelope(),  # type: ignore[arg-type]
            data=JobSubmittedData(
                namespace=namespace,
                name=name,
                queue=rng.choice(["default", "research", "batch"]),
                priority_class=rng.choice([None, "high", "low"]),
                tasks=tasks,
                labels={"n": str(self.jobs_made)},
                annotations={"tephra.io/runtime-seconds": "60"} if rng.random() < 0.5 else {},
                ttl_seconds_after_finished=self.ttl_seconds,
            ),
        )

    def _session(self) -> Event:
        rng = self.rng
        state = self.shadow
        self.sessions_made += 1
        decisions: list[Decision] = []
        waiting = self.by_phase.get("Pending")
        for job_id in [] if waiting is None else waiting.sample(rng, rng.randint(0, 6)):
            decisions.append(EnqueueDecision(job=job_id))
        nodes = self.node_pool
        pool = self.by_status.get("Pending")
        pending = [] if pool is None else [state.tasks[t] for t in pool.sample(rng, rng.randint(0, 12))]
        for task in pending:
            if nodes:
                decisions.append(
                    BindDecision(task=task.id, job=task.job, node=self._node_for(task.resources))
                )
        if pending and nodes and rng.random() < 0.2:
            task = pending[0]
            decisions.append(PipelineDecision(task=task.id, job=task.job, node=nodes.choice(rng)))
        victim_id = self._pick("Bound", "Running") if pending and rng.random() < 0.15 else None
        if victim_id is not None:
            victim = state.tasks[victim_id]
            decisions.append(
                EvictDecision(
                    task=victim.id,
                    job=victim.job,
                    node=victim.node or "",
                    action=rng.choice(["preempt", "reclaim"]),
                    preemptor_job=pending[0].job,
                    preemptor_task=pending[0].id,
                    rule="priority",
                )
            )
        if rng.random() < 0.05:
            decisions.append(BindDecision(task="ns1/ghost-w-0", job="ns1/ghost", node="node-1"))
        if rng.random() < 0.02:
            self.epoch += 1
        epoch = self.epoch - 1 if rng.random() < 0.03 and self.epoch > 1 else self.epoch
        session_id = f"{self.prefix}-s{self.sessions_made}"
        parts = 0
        if len(decisions) > 4 and rng.random() < 0.2:
            # Split: the parts go out first (yielded through the pending queue).
            parts = 2
            half = len(decisions) // 2
            for index, chunk in enumerate((decisions[:half], decisions[half:])):
                self._emit(
                    part := SessionPart(
                        **self._envelope(),  # type: ignore[arg-type]
                        data=SessionPartData(session_id=session_id, index=index, decisions=chunk),
                    )
                )
                self._queued.append(part)
            decisions = []
        return SessionCommitted(
            **self._envelope(),  # type: ignore[arg-type]
            data=SessionCommittedData(
                session_id=session_id,
                leader_epoch=epoch,
                input_seq=state.seq,
                config_version=state.config_version,
                now=_T0 + self.step * self.count,
                input_digest="sha256:" + "0" * 64,
                decisions=decisions,
                parts=parts,
                pending=[
                    PendingJob(job=t.job, reasons=[PendingReason(code="x", message="y")]) for t in pending[:2]
                ],
            ),
        )

    def _node_for(self, resources: dict[str, int]) -> str:
        """A node the task fits on, as a scheduler would pick; sometimes one it does not."""
        for _ in range(4):
            name = self.node_pool.choice(self.rng)
            node = self.shadow.nodes[name]
            if node.free("pods") >= 1 and all(node.free(r) >= n for r, n in resources.items()):
                return name
        return name

    def _invalid(self) -> Event:
        rng = self.rng
        # A job that has not finished: a finished one's name may be reused.
        unfinished = sorted(j for j, job in self.shadow.jobs.items() if job.finished_at is None)
        if rng.random() < 0.5 and unfinished:
            job = self.shadow.jobs[rng.choice(unfinished)]
            return JobSubmitted(
                **self._envelope(),  # type: ignore[arg-type]
                data=JobSubmittedData(
                    namespace=job.namespace, name=job.name, tasks=[TaskSpec(name="x", replicas=1)]
                ),
            )
        return TaskStarted(
            **self._envelope(),  # type: ignore[arg-type]
            data=TaskStartedData(job_id="ns1/nope", task_id="ns1/nope-w-0", node="node-1"),
        )


def event_stream(seed: int, count: int, **kwargs: object) -> list[Event]:
    """The first ``count`` events of the stream of ``seed`` (see :class:`StreamBuilder` for ``kwargs``)."""
    builder = StreamBuilder(seed, **kwargs)  # type: ignore[arg-type]
    return next(builder.chunks(count, max(count, 1)), [])
