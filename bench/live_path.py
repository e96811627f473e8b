"""The scheduler's live path on a folded backlog, stage by stage, in CPU seconds (no servers).

    python bench/live_path.py [--jobs N] [--nodes M] [--sessions S] [--churn K]

Folds ``--nodes`` nodes and ``--jobs`` single-task jobs of 8 cpu (the
backlog of bench/backlog.py: 8 run per node, the rest wait) into a state,
then runs ``--sessions`` sessions as the scheduler's loop does, each on the
state the previous one left (one more job submitted in between; with
``--churn K``, K more submitted and K waiting backlog jobs cancelled, the
newest first, as ``bench/backlog.py --cancel`` does), and prints
each stage's CPU time: the snapshot (incremental), the core, the pending
reasons (as events, their digest, the change from the newest session's list),
the session's events (signed), what the loop does once it published them (the
trace summarised, the action spans, with OpenTelemetry's default tracer: a
no-op unless the process configured one), the collection of its garbage, the
metrics, and the fold of its events.  CPU time, not the wall clock: on a shared machine it moves less.
bench/backlog.py measures the same path with the deployed runners.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's packages, whatever is installed

from opentelemetry import trace

from bench.backlog import _cancel
from bench.e2e import _cluster_events, _job
from bench.host import cpu_loop_seconds, memory_walk_seconds
from events.models import Decision, PendingJob, SessionCommitted, SessionPart
from events.signing import EventSigner, SigningKey
from projector.fold import apply
from projector.heap import tune_gc
from projector.state import ClusterState
from scheduler.core.carried import CarriedJobs
from scheduler.core.session import run_session
from scheduler.core.trace import TraceStep
from scheduler.service.heap import HeapGuard
from scheduler.service.metrics import SessionObservation, observe_session
from scheduler.service.session_events import (
    PENDING_SLICES,
    PendingCache,
    SessionHeader,
    session_events,
    session_id_for,
)
from scheduler.service.snapshot_cache import SnapshotCache
from scheduler.service.telemetry import emit_action_spans
from scheduler.service.trace_summary import TraceSummary, summarize_trace
from scheduler.snapshot_builder import config_in_force

T = TypeVar("T")
_HEAP = HeapGuard()  # the loop's collector policy
Event = SessionPart | SessionCommitted
_MAX_MESSAGE_BYTES = 1_048_576
_SIGNER = EventSigner(SigningKey.generate(), "scheduler")
_TRACER = trace.get_tracer("bench.live_path")


def _stage(times: dict[str, float], name: str, work: Callable[[], T]) -> T:
    began = time.process_time()
    out = work()
    times[name] = time.process_time() - began
    return out


class _Computed(NamedTuple):
    events: list[Event]
    decisions: tuple[Decision, ...]
    trace: tuple[TraceStep, ...]
    pending: tuple[PendingJob, ...]
    #: (action, start, end) of each action run, ns since the epoch.
    actions: list[tuple[str, int, int]]


def _compute(
    state: ClusterState,
    cache: SnapshotCache,
    texts: PendingCache,
    number: int,
    times: dict[str, float],
    *,
    carried: CarriedJobs,
) -> _Computed:
    """Everything the scheduler's worker thread does for one session; its garbage is left behind."""
    now = datetime.now(UTC)
    session_id = session_id_for("bench", 1, number)
    snapshot, digest = _stage(times, "snapshot", lambda: cache.build(state))
    # As the scheduler's loop does (scheduler.service.heap): the collector is off until "collect".
    _HEAP.before_session()
    config, version = config_in_force(state)
    actions: list[tuple[str, int, int]] = []

    def timed(action: str) -> Callable[[], None]:
        start = time.time_ns()
        return lambda: actions.append((action, start, time.time_ns()))

    result = _stage(
        times, "core", lambda: run_session(snapshot, config, now, observe_action=timed, carried=carried)
    )
    pending = _stage(
        times,
        "pending",
        lambda: texts.session(
            state,
            result.pending,
            session_id=session_id,
            restate=number % PENDING_SLICES if number else None,
            max_cleared_bytes=_MAX_MESSAGE_BYTES // 2,
        ),
    )
    change = pending.change
    header = SessionHeader(
        session_id=session_id,
        cluster="bench",
        leader_epoch=1,
        input_seq=state.seq,
        config_version=version,
        now=now,
        input_digest=digest,
        logic_flags=(),
        pending=change.pending,
        pending_digest=pending.digest,
        pending_base=change.base,
        pending_cleared=change.cleared,
        pending_slice=change.slice,
        pending_slices=change.slices,
    )
    decisions = tuple(result.events())
    events = _stage(
        times,
        "events",
        lambda: [
            _SIGNER.sign(event)
            for event in session_events(header, decisions, time=now, max_message_bytes=_MAX_MESSAGE_BYTES)
        ],
    )
    return _Computed(events, decisions, result.trace, pending.whole, actions)


def _session(
    state: ClusterState, cache: SnapshotCache, texts: PendingCache, number: int, carried: CarriedJobs
) -> dict[str, float]:
    """One session as the scheduler's loop runs it (scheduler.service.loop), stage by stage."""
    times: dict[str, float] = {}
    now = datetime.now(UTC)
    computed = _compute(state, cache, texts, number, times, carried=carried)
    actions = computed.actions
    summary = _stage(
        times,
        "spans",
        lambda: _spans(summarize_trace(computed.trace), [(a, b) for _, a, b in actions]),
    )
    _stage(times, "collect", _HEAP.after_session)
    _stage(
        times,
        "metrics",
        # As the loop observes an applied session (its wall-clock seconds do not matter here).
        lambda: observe_session(
            SessionObservation(state, now, computed.decisions, summary, computed.pending, 0.0, actions)
        ),
    )
    gc.unfreeze()
    began = time.process_time()
    for event in computed.events:
        cache.touched(state, apply(state, state.seq + 1, event).touched)
    times["fold"] = time.process_time() - began
    return times


def _spans(summary: TraceSummary, timings: list[tuple[int, int]]) -> TraceSummary:
    emit_action_spans(_TRACER, summary.actions, timings)
    return summary


def _between(state: ClusterState, cache: SnapshotCache, number: int, jobs: int, churn: int) -> None:
    """What arrives between two sessions: one job, or ``churn`` jobs and as many cancellations
    of waiting backlog jobs (the newest first); the snapshot cache is told what each touched,
    as the scheduler's projection reader tells it."""
    if not churn:
        apply(state, state.seq + 1, _job(f"steady-{number:07d}", 1, "8"))
        return
    for index in range((number - 1) * churn, number * churn):
        cache.touched(state, apply(state, state.seq + 1, _job(f"steady-{index:07d}", 1, "8")).touched)
        if index < jobs:
            cache.touched(state, apply(state, state.seq + 1, _cancel(jobs - 1 - index)).touched)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument(
        "--churn", type=int, default=0, help="jobs submitted and backlog jobs cancelled between two sessions"
    )
    args = parser.parse_args()
    print(
        f"host reference: integer loop {cpu_loop_seconds():.2f} s, dict walk {memory_walk_seconds():.2f} s"
        " (bench/host.py; not measured)"
    )
    tune_gc()  # as every Tephra process does
    state = ClusterState()
    for event in _cluster_events(args.nodes):
        apply(state, state.seq + 1, event)
    for i in range(args.jobs):
        apply(state, state.seq + 1, _job(f"backlog-{i:07d}", 1, "8"))
    cache, texts, carried = SnapshotCache(), PendingCache(), CarriedJobs()
    print(f"{args.jobs:,} jobs on {args.nodes:,} nodes; CPU seconds per stage:")
    for number in range(args.sessions):
        if number:
            _between(state, cache, number, args.jobs, args.churn)
        times = _session(state, cache, texts, number, carried)
        stages = ", ".join(f"{name} {seconds:.3f}" for name, seconds in times.items())
        print(f"  session {number}: {stages}; total {sum(times.values()):.2f}")


if __name__ == "__main__":
    main()
