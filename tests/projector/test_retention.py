"""Retention: finished jobs leave the state after their TTL in event time (projector.fold)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import count

from events.canonical import canonical_form
from events.models import (
    MAX_SEQ,
    BindDecision,
    Event,
    JobCancelled,
    JobCancelledData,
    JobSubmitted,
    JobSubmittedData,
    NodeReported,
    NodeReportedData,
    QueueDeleted,
    QueueDeletedData,
    QueueUpserted,
    QueueUpsertedData,
    SessionCommitted,
    SessionCommittedData,
    TaskFinished,
    TaskFinishedData,
    TaskSpec,
    TaskStarted,
    TaskStartedData,
)
from events.serde import decode, encode
from projector.fold import DEFAULT_TTL_SECONDS_AFTER_FINISHED, FoldOutcome, apply
from projector.state import ClusterState, retirement_heap
from projector.state_json import state_from_jsonable, state_to_jsonable
from tests.projector.streams import event_stream

_T0 = datetime(2026, 1, 1, tzinfo=UTC)
_ids = count(1)


def at(seconds: float) -> dict[str, object]:
    return {"id": f"r-{next(_ids)}", "source": "tests", "time": _T0 + timedelta(seconds=seconds)}


def node(t: float) -> NodeReported:
    return NodeReported(**at(t), data=NodeReportedData(name="n1", allocatable={"cpu": 8000, "pods": 10}))  # type: ignore[arg-type]


def submit(t: float, name: str = "j", replicas: int = 1, ttl: int | None = None) -> JobSubmitted:
    return JobSubmitted(
        **at(t),  # type: ignore[arg-type]
        data=JobSubmittedData(
            namespace="ns",
            name=name,
            tasks=[TaskSpec(name="w", replicas=replicas, resources={"cpu": 1000})],
            ttl_seconds_after_finished=ttl,
        ),
    )


def bind_all(t: float, job: str = "ns/j", replicas: int = 1) -> SessionCommitted:
    name = job.split("/")[1]
    return SessionCommitted(
        **at(t),  # type: ignore[arg-type]
        data=SessionCommittedData(
            session_id=f"s-{next(_ids)}",
            leader_epoch=1,
            input_seq=MAX_SEQ,  # after every job it names (the fold voids a decision about a later one)
            config_version=0,
            now=_T0,
            input_digest="d",
            decisions=[BindDecision(task=f"ns/{name}-w-{i}", job=job, node="n1") for i in range(replicas)],
        ),
    )


def started(t: float, task: str = "ns/j-w-0", job: str = "ns/j") -> TaskStarted:
    return TaskStarted(**at(t), data=TaskStartedData(job_id=job, task_id=task, node="n1"))  # type: ignore[arg-type]


def finished(t: float, outcome: str = "succeeded", task: str = "ns/j-w-0", job: str = "ns/j") -> TaskFinished:
    return TaskFinished(**at(t), data=TaskFinishedData(job_id=job, task_id=task, outcome=outcome))  # type: ignore[arg-type]


def cancel(t: float, job: str = "ns/j") -> JobCancelled:
    return JobCancelled(**at(t), data=JobCancelledData(job_id=job))  # type: ignore[arg-type]


def tick(t: float) -> tuple[Event, Event, Event]:
    """Events that only move the clocks: one from each topic role (intents, observations,
    decisions), so the watermark moves to ``t`` (projector.fold)."""
    return (
        QueueUpserted(**at(t), data=QueueUpsertedData(name="q")),  # type: ignore[arg-type]
        NodeReported(**at(t), data=NodeReportedData(name="n0", allocatable={"cpu": 1000, "pods": 1})),  # type: ignore[arg-type]
        empty_session(t),
    )


def empty_session(t: float) -> SessionCommitted:
    data = SessionCommittedData(
        session_id=f"s-{next(_ids)}",
        leader_epoch=1,
        input_seq=MAX_SEQ,
        config_version=0,
        now=_T0,
        input_digest="d",
    )
    return SessionCommitted(**at(t), data=data)  # type: ignore[arg-type]


def fold(state: ClusterState, *events: Event) -> list[FoldOutcome]:
    return [apply(state, state.seq + 1, e) for e in events]


def completed_job(ttl: int | None = None) -> ClusterState:
    """A state where ns/j (one task) succeeded at t=10."""
    state = ClusterState()
    fold(state, node(0), submit(1, ttl=ttl), bind_all(2), started(3), finished(10))
    return state


def test_a_finished_job_stays_for_its_ttl_in_event_time_then_leaves_with_its_tasks() -> None:
    state = completed_job()
    job = state.jobs["ns/j"]
    assert job.phase == "Completed"
    assert job.finished_at == _T0 + timedelta(seconds=10)
    assert job.ttl_seconds == DEFAULT_TTL_SECONDS_AFTER_FINISHED == 3600
    fold(state, *tick(10 + 3599))
    assert "ns/j" in state.jobs
    *_, outcome = fold(state, *tick(10 + 3600))  # due at its deadline, once every role is there
    assert "ns/j" not in state.jobs
    assert state.tasks == {}
    assert state.retiring == []
    # The writer deletes the rows of touched keys that are gone from the state.
    assert {("job", "ns/j"), ("task", "ns/j-w-0")} <= set(outcome.touched)


def test_the_job_s_own_ttl_wins_and_zero_retires_once_every_role_reaches_its_finish() -> None:
    state = completed_job(ttl=0)
    assert "ns/j" in state.jobs  # retirement runs before a handler, not after
    fold(state, *tick(5))  # the clock does not go back; the watermark is at 5
    assert "ns/j" in state.jobs
    assert state.clock == _T0 + timedelta(seconds=10)
    assert state.watermark == _T0 + timedelta(seconds=5)
    fold(state, *tick(10))
    assert "ns/j" not in state.jobs


def retired_job() -> ClusterState:
    """A state where ns/j finished at t=10 with a TTL of 0 and has retired."""
    state = completed_job(ttl=0)
    fold(state, *tick(10))
    assert "ns/j" not in state.jobs
    return state


def test_the_clock_never_goes_back() -> None:
    state = ClusterState()
    fold(state, *tick(100), *tick(50))
    assert state.clock == _T0 + timedelta(seconds=100)


def test_a_cancelled_job_finishes_once_its_releasing_tasks_end() -> None:
    state = ClusterState()
    fold(state, node(0), submit(1, replicas=2, ttl=60), bind_all(2, replicas=1), started(3), cancel(4))
    job = state.jobs["ns/j"]
    assert job.phase == "Cancelled"
    assert job.finished_at is None  # ns/j-w-0 is Releasing: it still holds its node
    fold(state, *tick(1000))
    assert "ns/j" in state.jobs
    fold(state, finished(1001, "evicted"))
    assert job.finished_at == _T0 + timedelta(seconds=1001)
    fold(state, *tick(1061))
    assert "ns/j" not in state.jobs


def test_a_retired_job_is_unknown_its_id_may_be_submitted_again() -> None:
    state = retired_job()
    [cancelled] = fold(state, cancel(20))
    assert cancelled.invalid == "job-missing"
    state = retired_job()
    [late] = fold(state, finished(20))  # an observation of it waits like one of an unknown job
    assert late.applied
    assert "ns/j" in state.early_observations
    state = retired_job()
    [session] = fold(state, bind_all(20))
    assert session.applied
    assert [v.reason for v in next(reversed(state.sessions.values())).voided] == ["job-missing"]
    state = retired_job()
    [again] = fold(state, submit(20, replicas=2))
    assert again.applied
    assert state.jobs["ns/j"].phase == "Pending"
    assert state.jobs["ns/j"].finished_at is None
    assert sorted(state.tasks) == ["ns/j-w-0", "ns/j-w-1"]


def test_an_invalid_event_neither_moves_the_clock_nor_retires() -> None:
    state = completed_job(ttl=60)
    before = state_to_jsonable(state)
    [outcome] = fold(state, QueueDeleted(**at(5000), data=QueueDeletedData(name="nope")))  # type: ignore[arg-type]
    assert outcome.invalid == "queue-missing"
    assert state_to_jsonable(state) == before
    assert state.clock == _T0 + timedelta(seconds=10)
    assert state.retiring == retirement_heap(state.jobs.values())
    fold(state, *tick(71))
    assert "ns/j" not in state.jobs


def test_jobs_due_together_retire_in_deadline_then_id_order() -> None:
    state = ClusterState()
    fold(state, node(0))
    for name, ttl in (("b", 5), ("a", 5), ("c", 1)):
        fold(state, submit(1, name=name, ttl=ttl), bind_all(1, job=f"ns/{name}"))
        fold(state, started(1, task=f"ns/{name}-w-0", job=f"ns/{name}"))
        fold(state, finished(2, task=f"ns/{name}-w-0", job=f"ns/{name}"))
    outcomes = fold(state, *tick(100))
    touched = [key for outcome in outcomes for kind, key in outcome.touched if kind == "job"]
    assert touched == ["ns/c", "ns/a", "ns/b"]
    assert state.jobs == {}


def _check(state: ClusterState) -> None:
    """The retention invariants, and the snapshot round trip (which rebuilds the heap)."""
    assert sorted(state.retiring) == sorted(retirement_heap(state.jobs.values()))
    assert all(deadline > state.watermark for deadline, _ in state.retiring)
    copy = state_from_jsonable(state_to_jsonable(state))
    assert copy == state
    assert sorted(copy.retiring) == sorted(state.retiring)


def test_a_steady_stream_retires_jobs_and_its_state_round_trips() -> None:
    # 2 s of event time an event, a TTL of 60 s: jobs retire all along the stream.
    events = event_stream(5, 6000, live_jobs=40, step_ms=2000, ttl_seconds=60, invalid_rate=0.02)
    state = ClusterState()
    retired = 0
    for index, event in enumerate(events):
        jobs = set(state.jobs)
        outcome = apply(state, state.seq + 1, event)
        if outcome.applied:
            retired += len(jobs - set(state.jobs))
        if index % 500 == 0:
            _check(state)
    _check(state)
    assert retired > 100
    assert len(state.jobs) < 200


def test_the_default_stream_retires_nothing() -> None:
    # Other tests rely on the default stream's output: 1 ms an event is far below an hour.
    state = ClusterState()
    submitted = set()
    for event in event_stream(3, 3000):
        if apply(state, state.seq + 1, event).applied and isinstance(event, JobSubmitted):
            submitted.add(event.data.job_id)
    assert set(state.jobs) == submitted
    assert any(j.finished_at is not None for j in state.jobs.values())


def test_a_job_without_its_own_ttl_archives_as_before_the_field_existed() -> None:
    """None is left out of the data (the bytes and hash of jobs archived earlier stay);
    a TTL of its own, even 0, is written; both decode to what was submitted."""
    plain, own, zero = submit(1), submit(1, ttl=60), submit(1, ttl=0)
    assert "ttl_seconds_after_finished" not in canonical_form(plain).data
    assert '"ttl_seconds_after_finished":60' in canonical_form(own).data
    assert '"ttl_seconds_after_finished":0' in canonical_form(zero).data
    for event in (plain, own, zero):
        assert decode(encode(event)) == event
