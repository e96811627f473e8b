"""A job name is reused once its job finished: each submission is an incarnation (projector.fold)."""

from __future__ import annotations

from datetime import timedelta

from events.models import (
    MAX_SEQ,
    BindDecision,
    Decision,
    EvictDecision,
    SessionCommitted,
    SessionCommittedData,
    TaskFinished,
    TaskStarted,
)
from projector.fold import apply
from projector.state import ClusterState, retirement_heap
from projector.state_json import state_from_jsonable, state_to_jsonable
from tests.projector.test_retention import (
    at,
    bind_all,
    cancel,
    completed_job,
    finished,
    fold,
    node,
    started,
    submit,
    tick,
)


def session(t: float, input_seq: int, *decisions: Decision) -> SessionCommitted:
    data = SessionCommittedData(
        session_id=f"s-{t}-{input_seq}",
        leader_epoch=1,
        input_seq=input_seq,
        config_version=0,
        now=at(t)["time"],  # type: ignore[arg-type]
        input_digest="d",
        decisions=list(decisions),
    )
    return SessionCommitted(**at(t), data=data)  # type: ignore[arg-type]


def voided(state: ClusterState) -> list[str]:
    return [v.reason for v in next(reversed(state.sessions.values())).voided]


def observed(event: TaskStarted | TaskFinished, seq: int) -> TaskStarted | TaskFinished:
    """The observation as an executor that says which task row it acted on sends it."""
    return event.model_copy(update={"data": event.data.model_copy(update={"observed_seq": seq})})


def resubmitted(ttl: int | None = None) -> ClusterState:
    """ns/j (one task, submitted at seq 2) succeeded, then submitted again with two tasks."""
    state = completed_job(ttl=ttl)
    [again] = fold(state, submit(20, replicas=2))
    assert again.applied
    return state


def test_a_finished_job_s_name_starts_a_new_incarnation_and_the_old_one_moves_aside() -> None:
    state = resubmitted()
    live, old = state.jobs["ns/j"], state.jobs["ns/j#2"]
    assert (live.phase, live.submitted_seq, live.finished_at) == ("Pending", state.seq, None)
    assert live.tasks == ["ns/j-w-0", "ns/j-w-1"]
    assert {t.status for t in state.tasks.values()} == {"Pending"}
    assert (old.phase, old.submitted_seq, old.name, old.tasks) == ("Completed", 2, "j", [])
    # Persisted and read back alike (snapshots, the projection's documents).
    assert state_from_jsonable(state_to_jsonable(state)) == state
    # The id's entry from before stays in the heap and is skipped when due.
    assert set(retirement_heap(state.jobs.values())) == set(state.retiring) - {
        (old.finished_at + timedelta(seconds=old.ttl_seconds), "ns/j")
    }


def test_the_name_stays_taken_until_the_job_has_finished() -> None:
    state = ClusterState()
    fold(state, node(0), submit(1), bind_all(2), started(3))
    [running] = fold(state, submit(4))
    assert running.invalid == "duplicate-job"
    fold(state, cancel(5))  # Cancelled, but its task still holds its node
    [releasing] = fold(state, submit(6))
    assert releasing.invalid == "duplicate-job"
    [gone, again] = fold(state, finished(7, "evicted"), submit(8))
    assert gone.applied
    assert again.applied
    assert state.jobs["ns/j"].phase == "Pending"
    assert state.jobs["ns/j#2"].phase == "Cancelled"


def test_a_session_older_than_the_incarnation_neither_binds_nor_evicts_its_tasks() -> None:
    state = resubmitted()
    submitted = state.jobs["ns/j"].submitted_seq
    bind = BindDecision(task="ns/j-w-0", job="ns/j", node="n1")
    fold(state, session(21, submitted - 1, bind))
    assert voided(state) == ["stale-incarnation"]
    assert state.tasks["ns/j-w-0"].status == "Pending"
    fold(state, session(22, submitted, bind))  # saw the new incarnation
    assert voided(state) == []
    assert state.tasks["ns/j-w-0"].status == "Bound"
    evict = EvictDecision(
        task="ns/j-w-0",
        job="ns/j",
        node="n1",
        action="preempt",
        preemptor_job="ns/p",
        preemptor_task="ns/p-w-0",
    )
    fold(state, session(23, submitted - 1, evict))
    assert voided(state) == ["stale-incarnation"]
    assert state.tasks["ns/j-w-0"].status == "Bound"


def test_each_incarnation_retires_at_its_own_deadline() -> None:
    state = resubmitted(ttl=100)  # the first finished at 10: due at 110
    fold(state, *tick(110))
    assert "ns/j#2" not in state.jobs
    assert state.jobs["ns/j"].phase == "Pending"  # the id's old heap entry left it alone
    assert len(state.tasks) == 2
    fold(state, session(120, MAX_SEQ, *bind_all(120, replicas=2).data.decisions))
    fold(
        state,
        *(e for i in range(2) for e in (started(121, f"ns/j-w-{i}"), finished(130, task=f"ns/j-w-{i}"))),
    )
    assert state.jobs["ns/j"].finished_at is not None  # its own TTL: the default, 3600 s
    fold(state, *tick(130 + 3599))
    assert "ns/j" in state.jobs
    fold(state, *tick(130 + 3600))
    assert "ns/j" not in state.jobs
    assert state.tasks == {}


def test_a_third_incarnation_keeps_both_earlier_ones_apart() -> None:
    state = resubmitted()
    fold(state, bind_all(21, replicas=2))
    fold(
        state, *(e for i in range(2) for e in (started(22, f"ns/j-w-{i}"), finished(23, task=f"ns/j-w-{i}")))
    )
    second = state.jobs["ns/j"].submitted_seq
    [third] = fold(state, submit(30))
    assert third.applied
    assert sorted(state.jobs) == ["ns/j", "ns/j#2", f"ns/j#{second}"]
    assert state.jobs[f"ns/j#{second}"].phase == "Completed"
    assert list(state.tasks) == ["ns/j-w-0"]
    assert ("task", "ns/j-w-1") in third.touched  # gone: the writer deletes its row


def test_an_invalid_event_after_a_reuse_changes_nothing() -> None:
    state = resubmitted()
    before = state_to_jsonable(state)
    [dup] = fold(state, submit(40))
    assert dup.invalid == "duplicate-job"
    assert state_to_jsonable(state) == before
    assert apply(state, state.seq + 1, cancel(41)).applied


def test_an_observation_about_an_earlier_incarnation_changes_nothing() -> None:
    state = resubmitted()
    fold(state, session(21, MAX_SEQ, BindDecision(task="ns/j-w-0", job="ns/j", node="n1")))
    bound = state.seq  # this incarnation's binding
    # The first incarnation's pod, reported again with what its executor acted on (seq 3, its binding).
    late = [observed(started(22), 3), observed(finished(23), 3)]
    outcomes = fold(state, *late)
    assert all(o.applied and o.touched == () for o in outcomes)  # archived, moot
    assert state.tasks["ns/j-w-0"].status == "Bound"
    # The same observation of this incarnation's binding applies.
    [start] = fold(state, observed(started(24), bound))
    assert ("task", "ns/j-w-0") in start.touched
    assert state.tasks["ns/j-w-0"].status == "Running"
    # Without observed_seq it is judged against the live incarnation, as before the field existed.
    [finish] = fold(state, finished(25))
    assert state.tasks["ns/j-w-0"].status == "Succeeded"
    assert finish.applied


def test_observed_seq_is_left_out_when_absent() -> None:
    plain = started(1)
    assert "observed_seq" not in plain.model_dump(mode="json")["data"]
    assert observed(plain, 7).model_dump(mode="json")["data"]["observed_seq"] == 7
