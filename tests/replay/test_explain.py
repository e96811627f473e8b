"""``replay explain`` on an archive made the live stack's way: reasons, numbers, counterfactual."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta

import pytest

from events.models import SessionCommitted, SessionPart
from replay.archive import ArchivedEvent
from replay.errors import UnknownJob, resolve_job_name
from replay.explain import timeline
from replay.queries import explain_job
from replay.store import open_archive
from tests.golden.archive import load_rows
from tests.golden.history import LiveRun, gpu_node, job
from tests.golden.scenarios import gpu_cluster, split_sessions
from tests.replay.helpers import run_replay

pytestmark = pytest.mark.integration


def _stuck_gang() -> LiveRun:
    """Three a100 nodes, one mostly busy; a 3x4-GPU gang (Volcano's worked example) cannot fit."""
    run = LiveRun()
    run.queue("research")
    for i in range(1, 4):
        run.node(gpu_node(f"n{i}", 8, labels={"gpu-type": "a100"}))
    run.submit(job("busy", queue="research", replicas=2, gpu=6))
    run.cycle()
    run.submit(job("j", queue="research", replicas=3, gpu=4, min_available=3, selector={"gpu-type": "a100"}))
    run.cycle()
    run.cycle()
    return run


async def _load(database_url: str, run: LiveRun) -> None:
    await load_rows(database_url, [r.to_json() for r in run.rows])


async def test_pending_gang_gets_its_reasons_with_numbers(database_url: str) -> None:
    run = _stuck_gang()
    await _load(database_url, run)
    async with open_archive(database_url) as reader:
        explanation = await explain_job(reader, "ml/j")

    assert explanation.session is not None
    assert explanation.session.session_id == run.sessions[-1]
    codes = [r["code"] for r in explanation.reasons]
    assert codes[:2] == ["gang-not-ready", "insufficient-resources"]
    gang, fit = explanation.reasons[0], explanation.reasons[1]
    assert gang["detail"] == {"placeable": 2, "tasks": 3, "minAvailable": 3}
    assert gang["message"] == "2/3 tasks in gang placeable, minAvailable 3"
    assert fit["message"] == "0/3 nodes are unavailable: 3 Insufficient nvidia.com/gpu."
    assert fit["detail"]["histogram"] == {"Insufficient nvidia.com/gpu": 3}
    assert explanation.reasons_rederived
    assert explanation.facts["tasks"] == {"Pending": 3}

    kinds = [e.kind for e in explanation.timeline]
    assert kinds[0] == "submitted"
    sessions = [e for e in explanation.timeline if e.kind == "sessions"]
    # Two verdicts: admitted but stuck, then stuck; the second ends at the last session.
    assert [e.text for e in sessions] == [
        "enqueued; pending: gang-not-ready, insufficient-resources",
        "pending: gang-not-ready, insufficient-resources",
    ]
    assert [(e.session_id, e.count) for e in sessions] == [(run.sessions[1], 1), (run.sessions[2], 1)]


async def test_the_counterfactual_applied_as_events_lets_the_job_bind(database_url: str) -> None:
    run = _stuck_gang()
    await _load(database_url, run)
    async with open_archive(database_url) as reader:
        explanation = await explain_job(reader, "ml/j")
    cf = explanation.counterfactual
    assert cf is not None
    assert cf.found, cf.note
    (change,) = cf.changes
    assert change.kind == "add-nodes"
    assert len(change.nodes) == 1
    assert change.nodes[0].labels == {"gpu-type": "a100"}
    assert change.summary.startswith("1 more node with ")
    assert "8 nvidia.com/gpu free matching gpu-type=a100" in change.summary

    # Make it real: fold the change as the events it names, then run the next session.
    for event in change.to_events(cluster=run.cluster, time=run.now, source="tephra://test", id_prefix="cf"):
        run.append(event)
    session_id = run.schedule()
    bound = [
        d
        for d in run.results[session_id].decisions
        if getattr(d, "job", "") == "ml/j" and d.to_event().kind == "bind"
    ]
    assert len(bound) == 3
    assert "ml/j" not in run.results[session_id].pending


async def test_queue_counterfactual_names_the_capability_shortfall(database_url: str) -> None:
    run = LiveRun()
    run.queue("training", capability={"nvidia.com/gpu": 8})
    for i in range(1, 4):
        run.node(gpu_node(f"n{i}", 8))
    run.submit(job("small", queue="training", replicas=1, gpu=4))
    run.cycle()
    run.submit(job("wide", queue="training", replicas=2, gpu=4, min_available=2))
    run.cycle()
    await _load(database_url, run)
    async with open_archive(database_url) as reader:
        explanation = await explain_job(reader, "ml/wide")
    cf = explanation.counterfactual
    assert cf is not None
    assert cf.found, cf.note
    (change,) = cf.changes
    assert change.kind == "queue-capability"
    assert change.summary == "queue training capability +4 nvidia.com/gpu"
    for event in change.to_events(cluster=run.cluster, time=run.now, source="tephra://test", id_prefix="cf"):
        run.append(event)
    session_id = run.schedule()
    assert "ml/wide" not in run.results[session_id].pending


async def test_explain_at_a_time_and_for_a_session(database_url: str) -> None:
    run = _stuck_gang()
    await _load(database_url, run)
    first_marker = next(
        r
        for r in run.rows
        if isinstance(r.event, SessionCommitted) and r.event.data.session_id == run.sessions[1]
    )
    async with open_archive(database_url) as reader:
        by_session = await explain_job(reader, "ml/j", session_id=run.sessions[1], counterfactual=False)
        at = await explain_job(reader, "ml/j", at=first_marker.event.data.now, counterfactual=False)  # type: ignore[union-attr]
    assert by_session.session is not None
    assert by_session.session.session_id == run.sessions[1]
    assert at.session is not None
    assert at.session.session_id == run.sessions[1]


async def test_unknown_job_is_a_clear_error(database_url: str) -> None:
    await _load(database_url, _stuck_gang())
    async with open_archive(database_url) as reader:
        with pytest.raises(UnknownJob, match=r"\[REPLAY-UNKNOWN-JOB\] job 'ml/nope' is not in the archive"):
            await explain_job(reader, "ml/nope")


async def test_node_counterfactual_leaves_room_for_jobs_ordered_ahead(database_url: str) -> None:
    """An older pending job takes one of the new nodes first, so the gang needs one node more."""
    run = LiveRun()
    run.queue("research")
    for i in range(1, 3):
        run.node(gpu_node(f"n{i}", 8))
    run.submit(job("busy", queue="research", replicas=2, gpu=8))
    run.cycle()
    run.submit(job("filler", queue="research", replicas=1, gpu=6))
    run.submit(job("gang", queue="research", replicas=2, gpu=8, min_available=2))
    run.cycle()
    await _load(database_url, run)
    async with open_archive(database_url) as reader:
        explanation = await explain_job(reader, "ml/gang")
    cf = explanation.counterfactual
    assert cf is not None
    assert cf.found, cf.note
    (change,) = cf.changes
    assert change.kind == "add-nodes"
    assert len(change.nodes) == 3, change.summary
    for event in change.to_events(cluster=run.cluster, time=run.now, source="tephra://test", id_prefix="cf"):
        run.append(event)
    session_id = run.schedule()
    assert "ml/gang" not in run.results[session_id].pending


@pytest.mark.parametrize("snapshot_every", [10_000, 2])
async def test_the_timeline_shows_a_decision_the_fold_voided_with_its_reason(
    database_url: str, snapshot_every: int
) -> None:
    """The only a100 node is removed while the session that binds the job to it is being decided.

    With a stored state every 2 events, the voided list is read from the first
    stored state after the session and the input is rebuilt from a stored
    state; without, both come from folding from the empty state: the same answer.
    """
    run = LiveRun()
    run.queue("research")
    run.node(gpu_node("n1", 8, labels={"gpu-type": "a100"}))
    run.node(gpu_node("n2", 8))
    run.submit(job("j", queue="research", replicas=1, gpu=8, selector={"gpu-type": "a100"}))
    voided_in = run.schedule(meanwhile=lambda: run.remove_node("n1"))
    assert [v.reason for v in run.state.sessions[voided_in].voided] == ["node-missing"]
    run.execute(voided_in)
    run.tick()
    run.cycle()
    await load_rows(database_url, [r.to_json() for r in run.rows], snapshot_every=snapshot_every, batch=1)
    async with open_archive(database_url) as reader:
        explanation = await explain_job(reader, "ml/j", counterfactual=False)
        stored = [await reader.snapshot_seq_at_or_before(r.seq) for r in run.rows]
        marker_seq = next(e.seq for e in explanation.timeline if e.kind == "voided")
        record = await reader.stored_session(voided_in, marker_seq)
    assert stored[-1] == (None if snapshot_every > len(run.rows) else len(run.rows) // 2 * 2)
    # Stored states after the session hold the fold's record of it (read in the server); without
    # them the voided list comes from folding up to the marker.  Both give the timeline below.
    if snapshot_every == 2:
        assert record is not None
        assert record.voided == run.state.sessions[voided_in].voided
    else:
        assert record is None

    kinds = [e.kind for e in explanation.timeline]
    assert kinds == ["submitted", "sessions", "voided", "sessions"]
    decided, voided, after = explanation.timeline[1:]
    # The scheduler decided the binding; the fold refused it, and the timeline says so right after.
    assert decided.session_id == voided.session_id == voided_in
    assert decided.text == "enqueued; 1 task(s) bound"
    assert voided.seq == decided.seq
    assert voided.text == "bind of ml/j-worker-0 on n1 voided by the fold: node-missing"
    assert voided.to_json()["voided"] == {
        "position": 1,
        "decision": "bind",
        "job": "ml/j",
        "task": "ml/j-worker-0",
        "node": "n1",
        "reason": "node-missing",
    }
    # The task never started; the next session finds no a100 node for it.
    assert after.session_id == run.sessions[-1]
    assert after.text.startswith("pending: ")
    assert explanation.facts["tasks"] == {"Pending": 1}

    # The console script shows it too, in its timeline table.
    shown = run_replay(database_url, "explain", "ml/j", "--format", "text", "--no-counterfactual")
    assert shown.returncode == 0, shown.stderr
    assert "bind of ml/j-worker-0 on n1 voided by the fold: node-missing" in shown.stdout


@pytest.mark.parametrize(
    ("scenario", "target"), [(split_sessions, "ml/batch-07"), (gpu_cluster, "ml/llm-pretrain")]
)
async def test_job_history_trims_sessions_to_the_job_in_the_server(
    database_url: str, scenario: Callable[[LiveRun], None], target: str
) -> None:
    """Sessions (and parts) come back with only the job's pending entry and the decisions naming it."""
    run = LiveRun()
    scenario(run)
    await _load(database_url, run)
    async with open_archive(database_url) as reader:
        history = await reader.job_history(target)
        whole = [r async for r in reader.rows()]
    sessions = [h for h in history if isinstance(h.event, (SessionCommitted, SessionPart))]
    assert sessions
    # Every session that names the job is there: split ones through the parts that name it
    # (decisions or pending entries) and their marker, which makes them a session.
    naming = {
        r.seq: r.event.data.session_id
        for r in whole
        if isinstance(r.event, (SessionCommitted, SessionPart))
        and (
            any(target in (d.job, getattr(d, "preemptor_job", None)) for d in r.event.data.decisions)
            or any(p.job == target for p in r.event.data.pending)
        )
    }
    markers = {
        r.seq
        for r in whole
        if isinstance(r.event, SessionCommitted) and r.event.data.session_id in set(naming.values())
    }
    assert {h.seq for h in sessions} == set(naming) | markers
    for archived in sessions:
        data = archived.event.data
        original = next(r for r in whole if r.seq == archived.seq).event.data
        naming = [d for d in original.decisions if target in (d.job, getattr(d, "preemptor_job", None))]
        assert data.decisions == naming
        assert archived.canonical == b""
        assert [p.job for p in data.pending] == [p.job for p in original.pending if p.job == target]
    # Rows that are not sessions are the archived events themselves.
    assert all(h.canonical for h in history if h not in sessions)
    submitted = next(h for h in history if h.event.type == "tephra.job.submitted.v1")
    assert submitted.event == next(r for r in whole if r.seq == submitted.seq).event


def _queue_behind_busy_node(max_message_bytes: int) -> LiveRun:
    """One 8-GPU node held by a job; eight 8-GPU jobs wait behind it, session after session.

    With a 2,000-byte limit the marker cannot carry the eight pending entries, so they
    travel in the session's parts (after the part with the enqueue decisions).
    """
    run = LiveRun(max_message_bytes=max_message_bytes)
    run.queue("research")
    run.node(gpu_node("n1", 8))
    run.submit(job("busy", queue="research", replicas=1, gpu=8))
    run.cycle()
    run.submit_all(job(f"wait-{i}", queue="research", replicas=1, gpu=8) for i in range(8))
    for _ in range(3):
        run.cycle()
    return run


async def test_a_pending_entry_carried_in_a_part_puts_the_session_on_the_timeline(database_url: str) -> None:
    target = "ml/wait-7"
    run = _queue_behind_busy_node(2_000)
    markers = {r.event.data.session_id: r for r in run.rows if isinstance(r.event, SessionCommitted)}
    parts = [r for r in run.rows if isinstance(r.event, SessionPart)]
    # The job's pending entry is in a part in every session after the first, never in a marker.
    for sid in run.sessions[1:]:
        assert markers[sid].event.data.parts > 0  # type: ignore[union-attr]
        assert not markers[sid].event.data.pending  # type: ignore[union-attr]
        assert any(
            p.job == target
            for r in parts
            if r.event.data.session_id == sid  # type: ignore[union-attr]
            for p in r.event.data.pending  # type: ignore[union-attr]
        )
    await _load(database_url, run)
    async with open_archive(database_url) as reader:
        history = await reader.job_history(target)
        explanation = await explain_job(reader, target, counterfactual=False)

    # The parts come back trimmed to the job's own pending entry, with their markers.
    for archived in history:
        if isinstance(archived.event, (SessionCommitted, SessionPart)):
            assert {p.job for p in archived.event.data.pending} <= {target}
    assert {h.seq for h in history if isinstance(h.event, SessionCommitted)} == {
        markers[sid].seq for sid in run.sessions[1:]
    }

    # The same timeline as when every pending entry travels in the marker (an unsplit run of
    # the same scenario: same session ids, verdicts and runs; only the seqs differ).
    unsplit = _queue_behind_busy_node(1_000_000)
    assert all(not isinstance(r.event, SessionPart) for r in unsplit.rows)
    whole = [ArchivedEvent(r.seq, r.event) for r in unsplit.rows]
    expected = [(e.kind, e.text, e.session_id, e.last_session_id, e.count) for e in timeline(target, whole)]
    got = [(e.kind, e.text, e.session_id, e.last_session_id, e.count) for e in explanation.timeline]
    assert got == expected
    codes = ", ".join(r.code for r in run.results[run.sessions[-1]].pending[target])
    assert got == [
        ("submitted", "submitted to queue research: 1 task(s)", None, None, 1),
        ("sessions", f"enqueued; pending: {codes}", run.sessions[1], run.sessions[1], 1),
        ("sessions", f"pending: {codes}", run.sessions[2], run.sessions[3], 2),
    ]

    # The chosen session is the last one, with the reasons recorded in its part.
    assert explanation.session is not None
    assert explanation.session.session_id == run.sessions[-1]
    assert explanation.verdict == f"pending: {codes}"
    recorded = next(
        p.reasons
        for r in parts
        if r.event.data.session_id == run.sessions[-1]  # type: ignore[union-attr]
        for p in r.event.data.pending  # type: ignore[union-attr]
        if p.job == target
    )
    assert list(explanation.recorded_reasons) == recorded
    assert explanation.reasons_rederived

    # The console script's JSON says the same.
    shown = run_replay(database_url, "explain", target, "--format", "json", "--no-counterfactual")
    assert shown.returncode == 0, shown.stderr
    out = json.loads(shown.stdout)
    assert [(e["kind"], e.get("session"), e.get("count")) for e in out["timeline"]] == [
        ("submitted", None, None),
        ("sessions", run.sessions[1], 1),
        ("sessions", run.sessions[2], 2),
    ]
    assert [r["code"] for r in out["recordedReasons"]] == [r.code for r in recorded]
    assert out["reasonsRederived"] is True


@pytest.mark.parametrize("snapshot_every", [10_000, 2])
async def test_a_retired_job_is_still_explained_from_the_archive(
    database_url: str, snapshot_every: int
) -> None:
    """The job waits behind another, runs, finishes, and retires from the state after its
    TTL (event time); the archive still has its story, and sessions' inputs still hold it.

    With a stored state every 2 events, states stored after the retirement lack the job:
    explain reads the job's history and rebuilds the sessions' inputs all the same.
    """
    run = LiveRun()
    run.queue("research")
    run.node(gpu_node("n1", 8))
    run.submit(job("busy", queue="research", gpu=8))
    run.cycle()
    run.submit(job("j", queue="research", gpu=8).model_copy(update={"ttl_seconds_after_finished": 60}))
    waited = [run.cycle(), run.cycle()]
    run.finish("ml/busy-worker-0", "ml/busy")
    ran = run.cycle()
    run.finish("ml/j-worker-0", "ml/j")
    finished_at = run.state.jobs["ml/j"].finished_at
    assert finished_at is not None
    run.tick(60)
    # Retention runs on the watermark, the earliest of the topics' latest times: every
    # topic reaches the deadline, and its last event retires the job.
    run.queue("research")
    run.node(gpu_node("n1", 8))
    run.cycle()
    assert "ml/j" not in run.state.jobs
    assert not any(t.startswith("ml/j-") for t in run.state.tasks)
    await load_rows(database_url, [r.to_json() for r in run.rows], snapshot_every=snapshot_every, batch=1)

    async with open_archive(database_url) as reader:
        latest = await explain_job(reader, "ml/j")
        pending = await explain_job(reader, "ml/j", session_id=waited[-1])
    # The latest session that considered it is the one that bound it.
    assert latest.session is not None
    assert latest.session.session_id == ran
    # The header is the job as that session left it: its task bound, the job no longer Pending.
    assert latest.facts["tasks"] == {"Binding": 1}
    assert latest.facts["phaseAtStart"] == latest.facts["phase"] == "Inqueue"
    kinds = [e.kind for e in latest.timeline]
    assert kinds == ["submitted", "sessions", "sessions", "sessions", "task-started", "task-finished"]
    assert [e.session_id for e in latest.timeline if e.kind == "sessions"] == [*waited, ran]
    assert [e.text for e in latest.timeline if e.kind == "sessions"] == [
        "enqueued; pending: gang-not-ready, queue-not-allocatable",
        "pending: gang-not-ready, queue-not-allocatable",
        "1 task(s) bound",
    ]
    assert latest.timeline[-1].text == "ml/j-worker-0 succeeded"
    # At a session where it waited: its reasons, re-derived from the rebuilt input.
    assert pending.session is not None
    assert pending.session.session_id == waited[-1]
    assert [r["code"] for r in pending.reasons] == ["gang-not-ready", "queue-not-allocatable"]
    assert pending.reasons_rederived

    shown = run_replay(database_url, "explain", "ml/j", "--format", "json", "--no-counterfactual")
    assert shown.returncode == 0, shown.stderr
    answer = json.loads(shown.stdout)
    assert [e["kind"] for e in answer["timeline"]] == kinds


async def test_explain_before_the_first_session_says_submitted_and_not_yet_considered(
    database_url: str,
) -> None:
    run = LiveRun()
    run.queue("research")
    run.node(gpu_node("n1", 8))
    submitted = run.now
    run.submit(job("late", queue="research", replicas=1, gpu=4))
    run.tick(30)
    run.cycle()
    await _load(database_url, run)
    async with open_archive(database_url) as reader:
        early = await explain_job(
            reader, "ml/late", at=submitted + timedelta(seconds=10), counterfactual=False
        )
        with pytest.raises(UnknownJob, match="it was not yet submitted at"):
            await explain_job(reader, "ml/late", at=submitted - timedelta(seconds=10))
        later = await explain_job(reader, "late", counterfactual=False)  # a bare name, unique
    assert early.session is None
    assert early.verdict == f"submitted at {submitted.isoformat()}, not yet considered by a session"
    assert [e.kind for e in early.timeline] == ["submitted"]
    assert later.job == "ml/late"
    assert later.session is not None
    # The header's phase is the one this session left the job in, beside the one it started from.
    assert (later.facts["phaseAtStart"], later.facts["phase"]) == ("Pending", "Inqueue")


def test_a_bare_name_is_resolved_when_unique_else_the_candidates_are_named() -> None:
    assert resolve_job_name("j", ["ml/j"]) == "ml/j"
    with pytest.raises(UnknownJob, match=r"it names 2 jobs, give one: a/j, b/j"):
        resolve_job_name("j", ["a/j", "b/j"])
    with pytest.raises(UnknownJob, match=r"a job id is <namespace>/<name>"):
        resolve_job_name("j", [])
