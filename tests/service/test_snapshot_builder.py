"""ClusterState -> ClusterSnapshot: the mapping Volcano's cache would see, built by the one fold."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from events.models import (
    MAX_SEQ,
    BindDecision,
    EnqueueDecision,
    Event,
    JobCancelled,
    JobCancelledData,
    PriorityClassUpserted,
    PriorityClassUpsertedData,
    SessionCommitted,
    SessionCommittedData,
    TaskSpec,
    TaskStarted,
    TaskStartedData,
)
from events.quantity import MAX_QUANTITY
from projector.fold import apply
from projector.state import ClusterState
from scheduler.core.config import DEFAULT_CONFIG
from scheduler.core.session import run_session
from scheduler.core.snapshot import PodGroupPhase, TaskStatus, snapshot_digest
from scheduler.snapshot_builder import NOT_READY_TAINT, build_snapshot, config_in_force
from tests.service.helpers import job, node, queue

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _fold(events: list[Event]) -> ClusterState:
    state = ClusterState()
    for seq, event in enumerate(events, start=1):
        outcome = apply(state, seq, event)
        assert outcome.applied, outcome
    return state


def _envelope(subject: str) -> dict[str, object]:
    return {"id": str(uuid.uuid4()), "source": "tests://builder", "time": T0, "subject": subject}


def _session(epoch: int, decisions: list[object]) -> SessionCommitted:
    return SessionCommitted(
        data=SessionCommittedData(
            session_id=str(uuid.uuid4()),
            leader_epoch=epoch,
            input_seq=MAX_SEQ,  # after every job it names (the fold voids a decision about a later one)
            config_version=0,
            now=T0,
            input_digest="x",
            decisions=decisions,  # type: ignore[arg-type]
        ),
        **_envelope("session"),
    )


def _priority_class(name: str, value: int, *, default: bool = False) -> PriorityClassUpserted:
    return PriorityClassUpserted(
        data=PriorityClassUpsertedData(name=name, value=value, global_default=default), **_envelope(name)
    )


def test_statuses_phases_gang_minimums_and_priorities_map_as_volcano_sees_them() -> None:
    gang = job("gang", replicas=3, priority_class="high")
    gang = gang.model_copy(
        update={
            "data": gang.data.model_copy(
                update={
                    "tasks": [
                        TaskSpec(name="ps", replicas=1, resources={"cpu": "1"}),
                        TaskSpec(name="worker", replicas=2, min_available=1, resources={"cpu": "2"}),
                    ]
                }
            )
        }
    )
    state = _fold(
        [
            queue(),
            _priority_class("high", 1000),
            _priority_class("normal", 10, default=True),
            node("n1"),
            node("n2", ready=False),
            gang,
            job("plain", replicas=1),
            _session(
                1,
                [EnqueueDecision(job="ns/gang"), BindDecision(task="ns/gang-ps-0", job="ns/gang", node="n1")],
            ),
            TaskStarted(
                data=TaskStartedData(job_id="ns/gang", task_id="ns/gang-ps-0", node="n1"), **_envelope("t")
            ),
        ]
    )
    snapshot = build_snapshot(state)

    jobs = {j.uid: j for j in snapshot.jobs}
    g = jobs["ns/gang"]
    assert g.phase is PodGroupPhase.INQUEUE
    assert g.min_member == 2  # the job's minimum: 1 ps + 1 worker
    assert dict(g.min_task_member) == {"ps": 1, "worker": 1}
    tasks = {t.uid: t for t in g.tasks}
    assert tasks["ns/gang-ps-0"].status is TaskStatus.RUNNING
    assert tasks["ns/gang-ps-0"].node == "n1"
    assert tasks["ns/gang-worker-1"].status is TaskStatus.PENDING
    assert tasks["ns/gang-worker-1"].role == "worker"
    assert dict(tasks["ns/gang-worker-1"].resources) == {"cpu": 2000}
    # Pod priority: the named class, else the global default (what Kubernetes' admission resolves).
    assert {t.priority for t in g.tasks} == {1000}
    assert [t.priority for t in jobs["ns/plain"].tasks] == [10]
    assert jobs["ns/plain"].phase is PodGroupPhase.PENDING
    # A NotReady node stays (its tasks still count) but carries the not-ready taint.
    nodes = {n.name: n for n in snapshot.nodes}
    assert NOT_READY_TAINT in nodes["n2"].taints
    assert NOT_READY_TAINT not in nodes["n1"].taints


def test_finished_jobs_appear_only_while_tasks_still_hold_a_node() -> None:
    events: list[Event] = [
        queue(),
        node("n1"),
        job("done", replicas=2),
        job("gone", replicas=1),
        _session(
            1,
            [EnqueueDecision(job="ns/done"), BindDecision(task="ns/done-worker-0", job="ns/done", node="n1")],
        ),
        JobCancelled(data=JobCancelledData(job_id="ns/done"), **_envelope("c1")),
        JobCancelled(data=JobCancelledData(job_id="ns/gone"), **_envelope("c2")),
    ]
    snapshot = build_snapshot(_fold(events))
    (done,) = snapshot.jobs
    assert done.uid == "ns/done"
    assert done.phase is PodGroupPhase.COMPLETED
    assert [(t.uid, t.status) for t in done.tasks] == [("ns/done-worker-0", TaskStatus.RELEASING)]


def test_the_snapshot_and_its_digest_do_not_depend_on_event_order_of_independent_entities() -> None:
    a = [queue(), node("n1"), node("n2"), job("x", replicas=2)]
    b = [a[0], a[2], a[1], a[3]]
    first, second = build_snapshot(_fold(a)), build_snapshot(_fold(b))
    assert snapshot_digest(first) == snapshot_digest(second)
    assert snapshot_digest(first) != snapshot_digest(build_snapshot(_fold([*a, node("n3")])))


def test_the_config_in_force_is_volcanos_default_until_one_is_configured() -> None:
    config, version = config_in_force(ClusterState())
    assert config is DEFAULT_CONFIG
    assert version == 0


def test_quantities_past_the_bound_from_an_older_archive_saturate_and_the_session_runs() -> None:
    # The door refuses quantities of 2^50 and more (events.quantity); an archive written
    # before that bound may hold them, and the session's int64 matrices overflowed at every start.
    state = _fold([queue(), node("n1"), node("n2"), job("big", replicas=2)])
    state.nodes["n1"].allocatable = {"cpu": 100 * 10**18 * 1000, "memory": 2**63, "pods": 110}
    for task_id in state.jobs["ns/big"].tasks:
        state.tasks[task_id].resources = {"cpu": 10**30, "memory": 2**70}

    snapshot = build_snapshot(state)
    result = run_session(snapshot, DEFAULT_CONFIG, T0)

    (n1,) = [n for n in snapshot.nodes if n.name == "n1"]
    assert n1.allocatable == {"cpu": MAX_QUANTITY - 1, "memory": MAX_QUANTITY - 1, "pods": 110}
    tasks = [t for j in snapshot.jobs for t in j.tasks]
    assert {t.resources["cpu"] for t in tasks} == {MAX_QUANTITY - 1}
    # The session ran, and placed nothing of that size on the 8-cpu node.
    assert all(getattr(decision, "node", None) != "n2" for decision in result.decisions)
