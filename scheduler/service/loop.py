"""The session loop of one leadership term (Volcano's ``runOnce``, event-sourced).

Each iteration:

1. read the projection's seq; skip the session when nothing changed since
   our last one (see :meth:`SessionLoop._unchanged`);
2. read the whole projected state at seq S (one REPEATABLE READ transaction);
3. in the worker thread, under the budget: build the snapshot, take the
   config in force at S, run the pure session, turn the result into events
   (an overrun is abandoned and reported; nothing of it is published);
4. publish exactly one SessionCommitted (or parts + marker), inside the
   session span whose context travels in the headers; then, while the
   projector applies it, what only observes the session (its trace
   summarised once for the action spans and the metrics, the links to the
   submissions) and the collection of its garbage
   (:mod:`scheduler.service.heap`: the long-lived state is frozen before each
   session, so the collector never walks it on the critical path);
5. read-your-writes: wait until the projection has applied that session
   before anything else; past ``apply_timeout`` scheduling stops, loudly,
   until it has;
6. if events other than our own were archived while the session ran (a
   submission that just missed it), run the next session at once: they are
   already projected.  Otherwise wait for the projection to move (the
   projector NOTIFYs after every batch) or for the schedule period,
   whichever comes first: the period is the longest interval between
   sessions, never a delay imposed on new input.

Skipping is exact: a session is a pure function of (snapshot, config, now).
When the projection's seq is still the seq at which our last session was
applied, every event archived after that session's input seq is the
session's own, and the session changed nothing (no accepted binding,
eviction or enqueue), the snapshot is the one that session saw.  A session
that did change the state runs once more on its own effects.  Only ``now`` differs,
so configs with a clock-dependent plugin (``sla``) never skip.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

import asyncpg
from opentelemetry import propagate
from opentelemetry.trace import Status, StatusCode, Tracer

from events.models import (
    BindDecision,
    Decision,
    PendingJob,
    PipelineDecision,
    SessionCommitted,
    SessionPart,
)
from events.signing import EventSigner
from projector.state import ClusterState
from scheduler.core.carried import CarriedJobs
from scheduler.core.config import SchedulerConfig
from scheduler.core.session import run_session
from scheduler.core.snapshot import Job
from scheduler.core.trace import TraceStep
from scheduler.service.errors import ProjectionStalled, SessionOverrun
from scheduler.service.heap import HeapGuard
from scheduler.service.leader import Leadership
from scheduler.service.metrics import SessionObservation, observe_session
from scheduler.service.projection import AppliedSession, ProjectionReader
from scheduler.service.publisher import SessionPublisher
from scheduler.service.records import SessionTiming, record_session
from scheduler.service.runner import SessionRunner
from scheduler.service.session_events import (
    PENDING_SLICES,
    PendingCache,
    SessionHeader,
    session_events,
    session_id_for,
)
from scheduler.service.settings import SchedulerSettings
from scheduler.service.telemetry import (
    SchedulerMetrics,
    SubmissionTraces,
    emit_action_spans,
    jobs_decided,
    set_session_attributes,
)
from scheduler.service.topology_check import unenforced_topologies
from scheduler.service.trace_summary import summarize_trace
from scheduler.snapshot_builder import config_in_force

__all__ = ["TIME_DEPENDENT_PLUGINS", "SessionLoop"]

log = logging.getLogger("tephra.scheduler")

#: Plugins whose verdicts depend on ``now``: with one enabled, an unchanged state is no reason to skip.
TIME_DEPENDENT_PLUGINS: Final = frozenset({"sla"})


@dataclass(frozen=True, slots=True)
class _Computed:
    events: list[SessionPart | SessionCommitted]
    decisions: tuple[Decision, ...]
    pending_jobs: int
    pending_digest: str
    input_digest: str
    config_version: int
    time_dependent: bool
    trace: tuple[TraceStep, ...]
    seconds: float
    pending: tuple[PendingJob, ...]
    #: (action, start, end) of each action run, ns since the epoch.
    actions: tuple[tuple[str, int, int], ...]


@dataclass(frozen=True, slots=True)
class _Last:
    applied_seq: int
    changed_state: bool
    time_dependent: bool
    #: Events not our own archived between the session's input and its commit: input it has not seen.
    missed: int


class SessionLoop:
    def __init__(
        self,
        *,
        leadership: Leadership,
        reader: ProjectionReader,
        records: asyncpg.Connection,
        publisher: SessionPublisher,
        runner: SessionRunner,
        signer: EventSigner,
        traces: SubmissionTraces,
        tracer: Tracer,
        metrics: SchedulerMetrics,
        settings: SchedulerSettings,
        cluster: str,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        logic_flags: frozenset[str] = frozenset(),
    ) -> None:
        self.leadership = leadership
        self.reader = reader
        self.records = records
        self.publisher = publisher
        self.runner = runner
        #: Signs every session event as the leader (projector.fold accepts no other).
        self.signer = signer
        self.traces = traces
        self.tracer = tracer
        self.metrics = metrics
        self.settings = settings
        self.cluster = cluster
        self.clock = clock
        #: Logic flags this process enables (recorded in every session, see scheduler.core).
        self.logic_flags = logic_flags
        self._counter = 0
        self._last: _Last | None = None
        self.heap = HeapGuard(enabled=settings.scheduler_freeze_heap)
        self._pending = PendingCache()
        # Waiting jobs' working states, kept from session to session (scheduler/core/carried.py).
        self._carried_jobs = CarriedJobs()
        # (config version, job count) last logged by _warn_unenforced_topologies.
        self._topology_warned: tuple[int, int] | None = None

    async def run(self) -> None:
        """Schedule until cancelled (the term ends) or a non-retriable error."""
        try:
            await self._run()
        finally:
            # Not a full collection on the way out (seconds on a big heap, and SIGTERM must stop the
            # service within 2 s): unfrozen, the collector frees the rest when it next runs.
            self.heap.unfreeze()

    async def _run(self) -> None:
        period = self.settings.schedule_period
        while True:
            seq = await self.reader.seq()
            if self._unchanged(seq):
                self.metrics.skip()
            else:
                try:
                    seq = await self.run_once()
                except SessionOverrun as exc:
                    self.heap.resume()  # the abandoned session never reaches after_session
                    self.metrics.overrun()
                    log.error("%s", exc)  # noqa: TRY400 - an expected, reported condition, not a crash
                    await asyncio.sleep(period)
                    continue
                if self._last is not None and self._last.missed:
                    continue  # already projected input that the session did not see: no reason to wait
            await self.reader.wait_for_change(seq, within=period)

    def _unchanged(self, seq: int) -> bool:
        last = self._last
        return (
            last is not None
            and last.applied_seq == seq
            and not last.changed_state
            and not last.time_dependent
        )

    async def run_once(self) -> int:
        """One session: read, compute, publish, wait until applied; returns the seq it was applied at."""
        epoch = self.leadership.epoch
        session_id = session_id_for(self.cluster, epoch, self._counter)
        # A term's first session publishes its whole pending list; each later one restates a slice.
        restate = self._counter % PENDING_SLICES if self._counter else None
        self._counter += 1
        began = time.perf_counter()
        state = await self.reader.state()
        read_seconds = time.perf_counter() - began
        now = self.clock()
        log.debug("session %s began at seq %d (state read in %.3f s)", session_id, state.seq, read_seconds)
        with self.tracer.start_as_current_span(
            "tephra.session",
            attributes={
                "tephra.session.id": session_id,
                "tephra.cluster": self.cluster,
                "tephra.leader_epoch": epoch,
                "tephra.session.input_seq": state.seq,
            },
        ) as span:
            try:
                computed = await self.runner.run(
                    session_id, lambda: self._compute(state, session_id, now, restate=restate)
                )
            except SessionOverrun as exc:
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, "session overran its budget"))
                raise
            placed = list(dict.fromkeys(d.job for d in computed.decisions if isinstance(d, BindDecision)))
            set_session_attributes(
                span,
                decisions=len(computed.decisions),
                parts=len(computed.events) - 1,
                pending_jobs=computed.pending_jobs,
                jobs_placed=len(placed),
                config_version=computed.config_version,
                input_digest=computed.input_digest,
            )
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            published = time.perf_counter()
            await self.publisher.publish(computed.events, carrier)
            publish_seconds = time.perf_counter() - published
            waited = time.perf_counter()
            # What only observes the session runs while the projector applies it (elsewhere).
            trace = summarize_trace(computed.trace)
            emit_action_spans(self.tracer, trace.actions, [(a, b) for _, a, b in computed.actions])
            if span.is_recording():
                for link in await self.traces.links_for(self.records, jobs_decided(computed.decisions)):
                    span.add_link(link.context, link.attributes)

        # Free what the session left, also while the projector applies it.
        self.heap.after_session()
        applied = await self._wait_applied(session_id)
        apply_seconds = time.perf_counter() - waited
        pipelines = sum(1 for d in computed.decisions if isinstance(d, PipelineDecision))
        others = await self.reader.others_between(state.seq, applied.seq, [e.id for e in computed.events])
        self._last = _Last(
            applied_seq=applied.seq,
            # Pipelines are recorded, not applied: they do not change what the next session sees.
            changed_state=others > 0 or applied.accepted > pipelines,
            time_dependent=computed.time_dependent,
            missed=others,
        )
        timing = SessionTiming(
            session_id=session_id,
            cluster=self.cluster,
            leader_epoch=epoch,
            input_seq=state.seq,
            applied_seq=applied.seq,
            decisions=len(computed.decisions),
            accepted=applied.accepted,
            pending_jobs=computed.pending_jobs,
            pending_digest=computed.pending_digest,
            read_seconds=read_seconds,
            compute_seconds=computed.seconds,
            publish_seconds=publish_seconds,
            apply_seconds=apply_seconds,
            collect_seconds=self.heap.last_collect_seconds,
        )
        await record_session(self.records, timing)
        self.metrics.session(len(computed.decisions), timing.total_seconds)
        observe_session(
            SessionObservation(
                state=state,
                now=now,
                decisions=computed.decisions,
                trace=trace,
                pending=computed.pending,
                seconds=timing.total_seconds,
                actions=computed.actions,
            )
        )
        log.info(
            "session %s (epoch %d) at seq %d: %d decisions, %d accepted, %d pending, %.3f s",
            session_id,
            epoch,
            state.seq,
            len(computed.decisions),
            applied.accepted,
            computed.pending_jobs,
            timing.total_seconds,
        )
        if log.isEnabledFor(logging.DEBUG):  # Volcano's -v=4: every decision, every pending job's reason
            for decision in computed.decisions:
                log.debug("session %s: %s", session_id, decision.model_dump_json())
            for job in computed.pending:
                reason = job.reasons[0] if job.reasons else None
                log.debug(
                    "session %s: %s pending: %s",
                    session_id,
                    job.job,
                    "no reason" if reason is None else f"[{reason.code}] {reason.message}",
                )
        return applied.seq

    def _warn_unenforced_topologies(
        self, jobs: Iterable[Job], config: SchedulerConfig, config_version: int
    ) -> None:
        """Logs, once per configuration and number of such jobs, the jobs whose networkTopology
        the configuration does not enforce (no network-topology-aware plugin)."""
        unenforced = unenforced_topologies(jobs, config)
        if not unenforced or self._topology_warned == (config_version, len(unenforced)):
            return
        self._topology_warned = (config_version, len(unenforced))
        log.warning(
            "%d job(s) ask for a networkTopology, but the scheduler configuration (version %d) does not "
            "enable the network-topology-aware plugin: they are placed without it, as Volcano does "
            "(e.g. %s); add the plugin to a tier of the SchedulerConfiguration to enforce it",
            len(unenforced),
            config_version,
            ", ".join(unenforced[:3]),
        )

    def _compute(
        self, state: ClusterState, session_id: str, now: datetime, *, restate: int | None
    ) -> _Computed:
        """Runs in the worker thread: everything CPU-bound, nothing that touches the loop.

        ``restate``: the slice of the pending list the change from the newest session's restates;
        None: publish the whole list (see :mod:`scheduler.service.session_events`)."""
        began = time.perf_counter()
        snapshot, digest = self.reader.snapshots.build(state)
        # The state and the snapshot cache are long-lived; the session's objects are not (the
        # collector is off until the session is published: scheduler.service.heap).
        self.heap.before_session()
        config, config_version = config_in_force(state)
        self._warn_unenforced_topologies(snapshot.jobs, config, config_version)
        actions: list[tuple[str, int, int]] = []

        def timed(action: str) -> Callable[[], None]:
            start = time.time_ns()
            return lambda: actions.append((action, start, time.time_ns()))

        result = run_session(
            snapshot,
            config,
            now,
            logic_flags=self.logic_flags,
            observe_action=timed,
            carried=self._carried_jobs,
        )
        decisions = tuple(result.events())
        pending = self._pending.session(
            state,
            result.pending,
            session_id=session_id,
            restate=restate,
            max_cleared_bytes=self.settings.scheduler_max_message_bytes // 2,
        )
        change = pending.change
        header = SessionHeader(
            session_id=session_id,
            cluster=self.cluster,
            leader_epoch=self.leadership.epoch,
            input_seq=state.seq,
            config_version=config_version,
            now=now,
            input_digest=digest,
            logic_flags=tuple(sorted(self.logic_flags)),
            pending=change.pending,
            pending_digest=pending.digest,
            pending_base=change.base,
            pending_cleared=change.cleared,
            pending_slice=change.slice,
            pending_slices=change.slices,
        )
        events = [
            self.signer.sign(event)
            for event in session_events(
                header, decisions, time=now, max_message_bytes=self.settings.scheduler_max_message_bytes
            )
        ]
        return _Computed(
            events=events,
            decisions=decisions,
            pending_jobs=len(pending.whole),
            pending_digest=pending.digest,
            input_digest=digest,
            config_version=config_version,
            time_dependent=not TIME_DEPENDENT_PLUGINS.isdisjoint(config.plugin_names()),
            trace=result.trace,
            seconds=time.perf_counter() - began,
            pending=pending.whole,
            actions=tuple(actions),
        )

    async def _wait_applied(self, session_id: str) -> AppliedSession:
        """Read-your-writes; past the timeout, report the stall and keep waiting (never schedule stale)."""
        timeout = self.settings.scheduler_apply_timeout
        applied = await self.reader.wait_for_session(session_id, timeout)
        if applied is not None:
            return applied
        stalled = ProjectionStalled(session_id, timeout)
        self.metrics.stall()
        log.error("%s", stalled)
        waited = timeout
        while applied is None:
            applied = await self.reader.wait_for_session(session_id, timeout)
            waited += timeout
            if applied is None:
                log.error("%s", ProjectionStalled(session_id, waited))
        log.warning("the projection applied session %s after %.0f s; scheduling resumes", session_id, waited)
        return applied
