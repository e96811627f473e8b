"""The pure fold, rule by rule (no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import count

import pytest

from events.models import (
    MAX_SEQ,
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
    PipelineDecision,
    SchedulerConfigSpec,
    SchedulerConfigured,
    SchedulerConfiguredData,
    SessionCommitted,
    SessionCommittedData,
    SessionPart,
    SessionPartData,
    TaskFinished,
    TaskFinishedData,
    TasksAdded,
    TasksAddedData,
    TaskSpec,
    TaskStarted,
    TaskStartedData,
)
from projector.fold import FoldOutcome, apply
from projector.state import ClusterState
from projector.state_json import state_from_jsonable, state_to_jsonable
from tests.events.samples import sample_events

_T0 = datetime(2026, 1, 1, tzinfo=UTC)
_ids = count(1)


def _env() -> dict[str, object]:
    n = next(_ids)
    return {"id": f"t-{n}", "source": "tests", "time": _T0 + timedelta(seconds=n)}


def node(name: str = "n1", cpu: int = 4000, pods: int = 10) -> NodeReported:
    return NodeReported(
        **_env(), data=NodeReportedData(name=name, allocatable={"cpu": f"{cpu}m", "pods": pods})
    )  # type: ignore[arg-type]


def job(
    name: str = "j", replicas: int = 2, cpu: int = 1000, min_available: int | None = None
) -> JobSubmitted:
    return JobSubmitted(
        **_env(),  # type: ignore[arg-type]
        data=JobSubmittedData(
            namespace="ns",
            name=name,
            min_available=min_available,
            tasks=[TaskSpec(name="w", replicas=replicas, resources={"cpu": f"{cpu}m"})],
        ),
    )


def session(*decisions: Decision, epoch: int = 1, sid: str | None = None, parts: int = 0) -> SessionCommitted:
    return SessionCommitted(
        **_env(),  # type: ignore[arg-type]
        data=SessionCommittedData(
            session_id=sid or f"s-{next(_ids)}",
            leader_epoch=epoch,
            input_seq=MAX_SEQ,  # after every job it names (the fold voids a decision about a later one)
            config_version=0,
            now=_T0,
            input_digest="d",
            decisions=list(decisions),
            parts=parts,
        ),
    )


def bind(task: str, node_name: str = "n1", job_id: str = "ns/j") -> BindDecision:
    return BindDecision(task=task, job=job_id, node=node_name)


def started(task: str, node_name: str = "n1", job_id: str = "ns/j") -> TaskStarted:
    return TaskStarted(**_env(), data=TaskStartedData(job_id=job_id, task_id=task, node=node_name))  # type: ignore[arg-type]


def finished(task: str, outcome: str, job_id: str = "ns/j") -> TaskFinished:
    return TaskFinished(**_env(), data=TaskFinishedData(job_id=job_id, task_id=task, outcome=outcome))  # type: ignore[arg-type]


def fold(state: ClusterState, *events: Event) -> list[FoldOutcome]:
    return [apply(state, state.seq + 1, e) for e in events]


def test_job_submitted_creates_pending_tasks_and_the_gang_minimum() -> None:
    state = ClusterState()
    fold(state, job(replicas=3))
    j = state.jobs["ns/j"]
    assert j.phase == "Pending"
    assert j.min_available == 3
    assert j.tasks == ["ns/j-w-0", "ns/j-w-1", "ns/j-w-2"]
    assert {t.status for t in state.tasks.values()} == {"Pending"}
    assert state.tasks["ns/j-w-1"].resources == {"cpu": 1000}  # no pods: the session adds it


def test_a_duplicate_job_is_invalid_and_changes_nothing() -> None:
    state = ClusterState()
    fold(state, job())
    before = state_from_jsonable(state_to_jsonable(state))
    [outcome] = fold(state, job())
    assert outcome.invalid == "duplicate-job"
    assert state == before
    assert state.seq == 1


def test_session_decisions_are_applied_in_order_and_voided_with_reasons() -> None:
    state = ClusterState()
    fold(state, node(cpu=1500, pods=10), job(replicas=2, cpu=1000))
    [outcome] = fold(
        state,
        session(
            EnqueueDecision(job="ns/j"),
            bind("ns/j-w-0"),
            bind("ns/j-w-1"),  # 1000 + 1000 > 1500
            bind("ns/j-w-0"),  # no longer pending
            bind("ns/j-w-1", node_name="gone"),
            PipelineDecision(task="ns/j-w-1", job="ns/j", node="n1"),
            EnqueueDecision(job="ns/missing"),
        ),
    )
    assert state.jobs["ns/j"].phase == "Inqueue"
    assert state.tasks["ns/j-w-0"].status == "Bound"
    assert state.tasks["ns/j-w-0"].node == "n1"
    record = next(iter(state.sessions.values()))
    assert record.accepted == 3
    assert [(v.index, v.reason) for v in record.voided] == [
        (2, "insufficient-resources"),
        (3, "task-not-pending"),
        (4, "node-missing"),
        (6, "job-missing"),
    ]
    assert [i for i, _ in outcome.decisions] == [0, 1, 5]
    assert state.nodes["n1"].used == {"cpu": 1000, "pods": 1}


def test_the_pods_limit_counts() -> None:
    state = ClusterState()
    fold(state, node(cpu=100_000, pods=1), job(replicas=2, cpu=10))
    fold(state, session(bind("ns/j-w-0"), bind("ns/j-w-1")))
    assert [v.reason for v in next(iter(state.sessions.values())).voided] == ["insufficient-resources"]


def test_a_stale_leader_epoch_voids_the_whole_session() -> None:
    state = ClusterState()
    fold(state, node(), job(), session(epoch=5))
    fold(state, session(bind("ns/j-w-0"), EnqueueDecision(job="ns/j"), epoch=4, sid="old"))
    record = state.sessions["old"]
    assert record.accepted == 0
    assert {v.reason for v in record.voided} == {"stale-epoch"}
    assert state.tasks["ns/j-w-0"].status == "Pending"
    assert state.leader_epoch == 5


def test_split_sessions_apply_only_on_their_marker() -> None:
    state = ClusterState()
    fold(state, node(), job())
    part = SessionPart(
        **_env(), data=SessionPartData(session_id="big", index=0, decisions=[bind("ns/j-w-0")])
    )  # type: ignore[arg-type]
    fold(state, part)
    assert state.tasks["ns/j-w-0"].status == "Pending"
    assert "big" in state.session_parts
    [incomplete] = fold(state, session(sid="big", parts=2))
    assert incomplete.invalid == "session-incomplete"
    part1 = SessionPart(
        **_env(), data=SessionPartData(session_id="big", index=1, decisions=[bind("ns/j-w-1")])
    )  # type: ignore[arg-type]
    fold(state, part1, session(sid="big", parts=2))
    assert state.sessions["big"].accepted == 2
    assert not state.session_parts


def test_task_lifecycle_drives_the_job_phase() -> None:
    state = ClusterState()
    fold(
        state,
        node(),
        job(replicas=2),
        session(EnqueueDecision(job="ns/j"), bind("ns/j-w-0"), bind("ns/j-w-1")),
    )
    fold(state, started("ns/j-w-0"))
    assert state.jobs["ns/j"].phase == "Inqueue"  # 1 of 2 running
    fold(state, started("ns/j-w-1"))
    assert state.jobs["ns/j"].phase == "Running"
    fold(state, finished("ns/j-w-0", "evicted"))
    assert state.tasks["ns/j-w-0"].status == "Pending"
    assert state.tasks["ns/j-w-0"].node is None
    assert state.jobs["ns/j"].phase == "Inqueue"  # below its minimum, keeps its admission
    fold(state, started("ns/j-w-0"), finished("ns/j-w-0", "succeeded"), finished("ns/j-w-1", "failed"))
    assert state.jobs["ns/j"].phase == "Failed"  # 1 success < min_available 2
    assert state.nodes["n1"].used == {}


def test_evictions_release_only_when_the_task_finishes() -> None:
    state = ClusterState()
    fold(state, node(), job(replicas=1), session(bind("ns/j-w-0")), started("ns/j-w-0"))
    evict = EvictDecision(
        task="ns/j-w-0", job="ns/j", node="n1", action="preempt", preemptor_job="x", preemptor_task="y"
    )
    fold(state, session(evict))
    assert state.tasks["ns/j-w-0"].status == "Releasing"
    assert state.nodes["n1"].used["pods"] == 1
    fold(state, finished("ns/j-w-0", "evicted"))
    assert state.tasks["ns/j-w-0"].status == "Pending"
    assert state.nodes["n1"].used == {}


def test_cancel_withdraws_pending_tasks_and_releases_running_ones() -> None:
    state = ClusterState()
    fold(state, node(), job(replicas=2), session(bind("ns/j-w-0")))
    fold(state, JobCancelled(**_env(), data=JobCancelledData(job_id="ns/j")))  # type: ignore[arg-type]
    assert state.jobs["ns/j"].phase == "Cancelled"
    assert list(state.tasks) == ["ns/j-w-0"]
    assert state.tasks["ns/j-w-0"].status == "Releasing"
    fold(state, session(bind("ns/j-w-1"), sid="late"))
    assert [v.reason for v in state.sessions["late"].voided] == ["job-cancelled"]
    fold(state, finished("ns/j-w-0", "evicted"))
    assert state.tasks == {}
    assert state.nodes["n1"].used == {}


def added(*roles: str, job_id: str = "ns/j", replicas: int = 1) -> TasksAdded:
    specs = [TaskSpec(name=r, replicas=replicas, min_available=0, resources={"cpu": "500m"}) for r in roles]
    return TasksAdded(**_env(), data=TasksAddedData(job_id=job_id, tasks=specs))  # type: ignore[arg-type]


def test_tasks_added_to_a_running_job_are_pending_tasks_of_it_and_the_gang_stays() -> None:
    state = ClusterState()
    fold(state, node(), job(replicas=2), session(bind("ns/j-w-0"), bind("ns/j-w-1")))
    fold(state, started("ns/j-w-0"), started("ns/j-w-1"))
    [outcome] = fold(state, added("late", replicas=2))
    assert outcome.applied
    j = state.jobs["ns/j"]
    assert (j.phase, j.min_available) == ("Running", 2)
    assert [s.name for s in j.task_specs] == ["w", "late"]
    assert j.tasks == ["ns/j-w-0", "ns/j-w-1", "ns/j-late-0", "ns/j-late-1"]
    assert state.tasks["ns/j-late-1"].status == "Pending"
    assert state.tasks["ns/j-late-1"].resources == {"cpu": 500}
    assert ("new_job", "ns/j") in outcome.touched
    assert ("task", "ns/j-late-0") in outcome.touched
    fold(state, session(bind("ns/j-late-0")), started("ns/j-late-0"))
    assert state.tasks["ns/j-late-0"].status == "Running"
    # The snapshot form keeps the added specs: a projector started again folds on from the same state.
    assert state_from_jsonable(state_to_jsonable(state)) == state


@pytest.mark.parametrize(
    ("event", "code"),
    [
        (added("w"), "duplicate-task"),
        (added("x", "x"), "duplicate-task"),
        (added("x", job_id="ns/none"), "job-missing"),
    ],
)
def test_tasks_added_that_contradict_the_job_are_invalid_and_change_nothing(
    event: TasksAdded, code: str
) -> None:
    state = ClusterState()
    fold(state, job(replicas=1))
    before = state_to_jsonable(state)
    [outcome] = fold(state, event)
    assert outcome.invalid == code
    assert state_to_jsonable(state) == before


def test_tasks_added_to_a_finished_job_are_invalid() -> None:
    state = ClusterState()
    fold(state, job(replicas=1), JobCancelled(**_env(), data=JobCancelledData(job_id="ns/j")))  # type: ignore[arg-type]
    [outcome] = fold(state, added("late"))
    assert outcome.invalid == "job-finished"


def test_node_removed_sends_its_tasks_back_to_pending() -> None:
    state = ClusterState()
    fold(state, node(), job(replicas=1), session(bind("ns/j-w-0")), started("ns/j-w-0"))
    fold(state, NodeRemoved(**_env(), data=NodeRemovedData(name="n1")))  # type: ignore[arg-type]
    assert "n1" not in state.nodes
    assert state.tasks["ns/j-w-0"].status == "Pending"
    assert state.tasks["ns/j-w-0"].node is None


def test_an_observation_that_overtakes_its_job_waits_for_it() -> None:
    state = ClusterState()
    fold(state, node())
    [early] = fold(state, started("ns/j-w-0"))
    assert early.applied
    assert "ns/j" in state.early_observations
    fold(state, job(replicas=1))
    assert state.tasks["ns/j-w-0"].status == "Running"
    assert not state.early_observations


def test_scheduler_config_versions_count_up() -> None:
    state = ClusterState()
    config = SchedulerConfigured(
        **_env(),
        data=SchedulerConfiguredData(config=SchedulerConfigSpec(actions=["allocate"])),  # type: ignore[arg-type]
    )
    fold(state, config)
    assert state.config_version == 1
    assert state.config == config.data.config


@pytest.mark.parametrize("event", sample_events(), ids=lambda e: e.type)
def test_every_event_type_has_a_handler_and_invalid_ones_change_nothing(event: Event) -> None:
    state = ClusterState()
    before = state_to_jsonable(state)
    outcome = apply(state, 1, event)
    if outcome.invalid is not None:
        assert state_to_jsonable(state) == before
    else:
        assert state.seq == 1
