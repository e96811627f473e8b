"""A live run without servers: the event stream the embedded stack would archive.

:class:`LiveRun` plays the three writers of the event log in one process,
each through the production code it would run:

* producers (``tephra submit``, node reports) — events appended as given;
* the scheduler — the projector's fold for the state, the service's snapshot
  builder and the core's ``run_session``, the service's ``session_events`` for
  the SessionCommitted (split into parts when it is large);
* the simulated cluster — TaskStarted for every *accepted* binding and
  TaskFinished(evicted) for every accepted eviction of the last session.

Everything is deterministic: times advance by fixed steps from a fixed
start, event ids count up, session ids are the service's uuid5 ids.  So the
golden archives made from it (``make_golden.py``) are byte-identical on every
run, and a test can build a fresh history the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from events.canonical import GENESIS_HASH, canonical_form, format_time
from events.models import (
    Decision,
    Event,
    JobSubmitted,
    JobSubmittedData,
    NodeRemoved,
    NodeRemovedData,
    NodeReported,
    NodeReportedData,
    PriorityClassUpserted,
    PriorityClassUpsertedData,
    QueueUpserted,
    QueueUpsertedData,
    SchedulerConfigSpec,
    SchedulerConfigured,
    SchedulerConfiguredData,
    SessionCommitted,
    SessionPart,
    TaskFinished,
    TaskFinishedData,
    TaskSpec,
    TaskStarted,
    TaskStartedData,
)
from projector.archive import JOB_EVENT_TYPES, job_of_event, row_digest, row_members
from projector.fold import apply
from projector.state import ClusterState
from scheduler.core.config import DEFAULT_CONFIG
from scheduler.core.session import SessionResult, run_session
from scheduler.core.snapshot import snapshot_digest
from scheduler.service.session_events import (
    PENDING_SLICES,
    PendingCache,
    SessionHeader,
    session_events,
    session_id_for,
)
from scheduler.snapshot_builder import build_snapshot, config_in_force

__all__ = ["RECORDED_AT", "START", "TOPIC", "ArchivedRow", "LiveRun", "gpu_node", "job"]

START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
CLUSTER = "default"
#: Where every golden row says it came from: one partition of one topic, offset seq - 1.
TOPIC = "golden"
#: When every golden row says it was archived (``event_log.recorded_at``, hashed in chain format 2).
RECORDED_AT = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)
_LARGE_MESSAGE = 1_000_000


@dataclass(frozen=True, slots=True)
class ArchivedRow:
    """An event as the projector archives it: its seq and place in the chain."""

    seq: int
    event: Event
    data: str
    prev_hash: bytes
    hash: bytes
    #: The event's canonical bytes, and the row's other hashed columns (chain format 2).
    canonical: bytes = b""
    members: bytes = b""

    @property
    def job(self) -> str | None:
        return job_of_event(self.event) if self.event.type in JOB_EVENT_TYPES else None

    def to_json(self) -> dict[str, Any]:
        e = self.event
        return {
            "seq": self.seq,
            "event_id": e.id,
            "type": e.type,
            "cluster": e.cluster,
            "subject": e.subject,
            "source": e.source,
            "time": format_time(e.time),
            "data": self.data,
            "topic": TOPIC,
            "partition": 0,
            "kafka_offset": self.seq - 1,
            "recorded_at": format_time(RECORDED_AT),
            "job": self.job,
            "traceparent": None,
            "chain_format": 2,
            "prev_hash": self.prev_hash.hex(),
            "hash": self.hash.hex(),
        }


def gpu_node(
    name: str, gpu: int = 8, *, cpu: int = 64, mem_gi: int = 512, labels: dict[str, str] | None = None
) -> NodeReportedData:
    # Quantities as Kubernetes writes them: an integer cpu is cores, memory with a suffix.
    allocatable: dict[str, int | str] = {"cpu": cpu, "memory": f"{mem_gi}Gi", "pods": 110}
    if gpu:
        allocatable["nvidia.com/gpu"] = gpu
    return NodeReportedData.model_validate({"name": name, "allocatable": allocatable, "labels": labels or {}})


def job(
    name: str,
    *,
    queue: str,
    replicas: int = 1,
    gpu: int = 0,
    cpu: int = 1,
    namespace: str = "ml",
    min_available: int | None = None,
    priority_class: str | None = None,
    selector: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> JobSubmittedData:
    resources: dict[str, int | str] = {"cpu": cpu, "memory": "4Gi"}
    if gpu:
        resources["nvidia.com/gpu"] = gpu
    task = TaskSpec.model_validate(
        {"name": "worker", "replicas": replicas, "resources": resources, "node_selector": selector or {}}
    )
    return JobSubmittedData(
        namespace=namespace,
        name=name,
        queue=queue,
        priority_class=priority_class,
        min_available=min_available,
        tasks=[task],
        annotations=annotations or {},
    )


@dataclass
class LiveRun:
    """Appends events the way the live stack would, folding each one (see the module docstring)."""

    cluster: str = CLUSTER
    epoch: int = 1
    step: timedelta = timedelta(seconds=1)
    max_message_bytes: int = _LARGE_MESSAGE
    logic_flags: tuple[str, ...] = ()
    #: Publish pending reasons as the change from the newest session's list, as the live
    #: scheduler does (the golden archives keep the whole lists they were recorded with).
    pending_changes: bool = False
    #: With ``pending_changes``: each change restates one slice of this many, as the live scheduler
    #: does (0: the change alone, as archives recorded before slices hold).
    pending_slices: int = PENDING_SLICES
    #: Rewrites a session's decisions before it is published: how the divergent
    #: golden log records a session that a different core would have decided.
    tamper: Callable[[int, list[Decision]], list[Decision]] | None = None
    state: ClusterState = field(default_factory=ClusterState)
    rows: list[ArchivedRow] = field(default_factory=list)
    results: dict[str, SessionResult] = field(default_factory=dict)
    sessions: list[str] = field(default_factory=list)
    _now: datetime = START
    _ids: int = 0
    #: The scheduler's memory of its last pending list, as the live loop keeps it.
    _pending: PendingCache = field(default_factory=PendingCache)

    # ------------------------------------------------------------------ producers

    @property
    def now(self) -> datetime:
        return self._now

    def tick(self, seconds: float = 1.0) -> None:
        self._now += timedelta(seconds=seconds)

    def _envelope(self, subject: str, source: str) -> dict[str, Any]:
        self._ids += 1
        return {
            "id": f"golden-{self._ids:06d}",
            "source": source,
            "time": self._now,
            "subject": subject,
            "cluster": self.cluster,
        }

    def append(self, event: Event) -> ArchivedRow:
        """Archive one event: fold it (it must apply) and chain it."""
        form = canonical_form(event)
        archived, data, canonical = form.event, form.data, form.bytes
        seq = len(self.rows) + 1
        outcome = apply(self.state, seq, archived)
        if not outcome.applied:
            raise ValueError(
                f"event {archived.id} ({archived.type}) does not fold: {outcome.invalid} {outcome.detail}"
            )
        prev = self.rows[-1].hash if self.rows else GENESIS_HASH
        job = job_of_event(archived) if archived.type in JOB_EVENT_TYPES else None
        members = row_members(
            seq=seq, topic=TOPIC, partition=0, kafka_offset=seq - 1, recorded_at=format_time(RECORDED_AT),
            job=job, traceparent=None, signature=None,
        )  # fmt: skip
        digest = row_digest(prev, canonical, members)
        row = ArchivedRow(seq, archived, data, prev, digest, canonical=canonical, members=members)
        self.rows.append(row)
        return row

    def queue(self, name: str, **spec: Any) -> None:
        self.append(
            QueueUpserted(
                data=QueueUpsertedData(name=name, **spec), **self._envelope(name, "tephra://submit")
            )
        )

    def priority_class(self, name: str, value: int) -> None:
        data = PriorityClassUpsertedData(name=name, value=value)
        self.append(PriorityClassUpserted(data=data, **self._envelope(name, "tephra://submit")))

    def configure(self, spec: SchedulerConfigSpec) -> None:
        data = SchedulerConfiguredData(config=spec)
        self.append(SchedulerConfigured(data=data, **self._envelope("scheduler", "tephra://submit")))

    def configure_actions(self, actions: Sequence[str]) -> None:
        """Volcano's default tiers with another action list (e.g. with preempt and reclaim)."""
        self.configure(DEFAULT_CONFIG.to_spec().model_copy(update={"actions": list(actions)}))

    def node(self, data: NodeReportedData) -> None:
        self.append(NodeReported(data=data, **self._envelope(data.name, "tephra://sim-cluster")))

    def remove_node(self, name: str) -> None:
        self.append(
            NodeRemoved(data=NodeRemovedData(name=name), **self._envelope(name, "tephra://sim-cluster"))
        )

    def submit(self, data: JobSubmittedData) -> None:
        self.append(JobSubmitted(data=data, **self._envelope(data.job_id, "tephra://submit")))

    def submit_all(self, jobs: Iterable[JobSubmittedData]) -> None:
        for data in jobs:
            self.submit(data)

    # ------------------------------------------------------------------ the scheduler

    def schedule(self, *, meanwhile: Callable[[], None] | None = None) -> str:
        """One session on the state as archived so far; returns its id.

        ``meanwhile`` appends events after the session read its input and
        before it is published (a node removed while the scheduler was
        deciding): the fold then voids the decisions they contradict.
        """
        snapshot = build_snapshot(self.state)
        config, version = config_in_force(self.state)
        result = run_session(snapshot, config, self._now, logic_flags=frozenset(self.logic_flags))
        decisions: list[Decision] = list(result.events())
        if self.tamper is not None:
            decisions = self.tamper(len(self.sessions), decisions)
        session_id = session_id_for(self.cluster, self.epoch, len(self.sessions))
        pending = self._pending.session(
            self.state,
            result.pending,
            session_id=session_id,
            restate=self._restate(),
            max_cleared_bytes=self.max_message_bytes // 2,
            slices=self.pending_slices,
        )
        change = pending.change
        input_seq = self.state.seq
        if meanwhile is not None:
            meanwhile()
        header = SessionHeader(
            session_id=session_id,
            cluster=self.cluster,
            leader_epoch=self.epoch,
            input_seq=input_seq,
            config_version=version,
            now=self._now,
            input_digest=snapshot_digest(snapshot),
            logic_flags=self.logic_flags,
            pending=change.pending,
            pending_digest=pending.digest,
            pending_base=change.base,
            pending_cleared=change.cleared,
            pending_slice=change.slice,
            pending_slices=change.slices,
        )
        for event in session_events(
            header, decisions, time=self._now, max_message_bytes=self.max_message_bytes
        ):
            self.append(event)
        self.sessions.append(session_id)
        self.results[session_id] = result
        return session_id

    def _restate(self) -> int | None:
        """The slice the next session's change restates; None: it publishes its whole list."""
        if not self.pending_changes:
            return None
        return len(self.sessions) % self.pending_slices if self.pending_slices else 0

    # ------------------------------------------------------------------ the simulated cluster

    def execute(self, session_id: str | None = None) -> None:
        """Report the accepted bindings as started and the accepted evictions as finished."""
        sid = session_id or self.sessions[-1]
        record = self.state.sessions[sid]
        marker = next(
            r.event
            for r in reversed(self.rows)
            if isinstance(r.event, SessionCommitted) and r.event.data.session_id == sid
        )
        decisions = self._decisions_of(marker)
        voided = {v.index for v in record.voided}
        for index, decision in enumerate(decisions):
            if index in voided:
                continue
            if decision.kind == "bind":
                data = TaskStartedData(job_id=decision.job, task_id=decision.task, node=decision.node)
                self.append(TaskStarted(data=data, **self._envelope(decision.task, "tephra://sim-cluster")))
            elif decision.kind == "evict":
                finished = TaskFinishedData(
                    job_id=decision.job,
                    task_id=decision.task,
                    node=decision.node,
                    outcome="evicted",
                    reason=decision.action,
                )
                self.append(
                    TaskFinished(data=finished, **self._envelope(decision.task, "tephra://sim-cluster"))
                )

    def finish(self, task_id: str, job_id: str, outcome: str = "succeeded") -> None:
        data = TaskFinishedData(job_id=job_id, task_id=task_id, outcome=outcome, exit_code=0)  # type: ignore[arg-type]
        self.append(TaskFinished(data=data, **self._envelope(task_id, "tephra://sim-cluster")))

    def _decisions_of(self, marker: SessionCommitted) -> list[Decision]:
        if marker.data.parts == 0:
            return list(marker.data.decisions)
        parts = {
            r.event.data.index: list(r.event.data.decisions)
            for r in self.rows
            if isinstance(r.event, SessionPart) and r.event.data.session_id == marker.data.session_id
        }
        return [d for i in range(marker.data.parts) for d in parts[i]]

    def cycle(self, *, seconds: float = 1.0) -> str:
        """Schedule, let the cluster carry the session out, then let time pass."""
        session_id = self.schedule()
        self.tick(0.5)
        self.execute(session_id)
        self.tick(seconds)
        return session_id
