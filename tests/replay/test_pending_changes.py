"""Replay reads pending reasons recorded as changes exactly as the whole lists they stand for.

The same scenario is recorded twice, as the live scheduler records it (each session
carries the change from the newest session's list) and with every list whole: the
sessions, ``replay explain``, ``replay show`` and ``replay verify`` must not tell them apart.
"""

from __future__ import annotations

import pytest

from events.models import SessionCommitted, SessionPart
from replay.archive import ArchivedEvent, recorded_sessions
from replay.explain import timeline
from replay.queries import explain_job, show_session, verify_archive
from replay.store import open_archive
from scheduler.service.session_events import PENDING_SLICES
from tests.golden.archive import load_rows
from tests.golden.history import LiveRun, gpu_node, job

pytestmark = pytest.mark.integration


def _backlog(*, pending_changes: bool, max_message_bytes: int, slices: int = PENDING_SLICES) -> LiveRun:
    """Jobs wait behind a busy node session after session; one more joins them; the busy job
    finishes and the first of them takes its place (it leaves the list); a new node changes
    every reason (the whole list travels again).  ``slices`` 0: changes restate no slice, as
    archives written before slices existed hold them."""
    run = LiveRun(pending_changes=pending_changes, max_message_bytes=max_message_bytes, pending_slices=slices)
    run.queue("research")
    run.node(gpu_node("n1", 8))
    run.submit(job("busy", queue="research", replicas=1, gpu=8))
    run.cycle()
    run.submit_all(job(f"wait-{i}", queue="research", replicas=1, gpu=8) for i in range(6))
    run.cycle()
    run.cycle()
    run.submit(job("late", queue="research", replicas=1, gpu=4))
    run.cycle()
    run.finish(next(iter(run.state.jobs["ml/busy"].tasks)), "ml/busy")
    run.cycle()
    run.cycle()
    run.node(gpu_node("n2", 8))
    run.cycle()
    return run


def _markers(run: LiveRun) -> list[SessionCommitted]:
    return [r.event for r in run.rows if isinstance(r.event, SessionCommitted)]


def _entries_carried(run: LiveRun) -> int:
    """Pending entries in the markers and the parts (with a small message limit they travel in parts)."""
    return sum(
        len(r.event.data.pending) for r in run.rows if isinstance(r.event, (SessionCommitted, SessionPart))
    )


@pytest.mark.parametrize("max_message_bytes", [1_000_000, 2_000])
def test_changes_assemble_to_the_whole_lists(max_message_bytes: int) -> None:
    changes = _backlog(pending_changes=True, max_message_bytes=max_message_bytes)
    whole = _backlog(pending_changes=False, max_message_bytes=max_message_bytes)
    assert changes.sessions == whole.sessions
    # What was recorded: changes from the second session on, some of them naming cleared jobs.
    recorded = [m.data for m in _markers(changes)]
    bases = [d.pending_base for d in recorded]
    # Whole at first (nothing pending before) and after the new node (every reason changed).
    assert bases == ["", "", *(d.session_id for d in recorded[1:5]), ""]
    assert [d.pending_cleared for d in recorded][4] == ["ml/wait-0"]
    assert _entries_carried(changes) < _entries_carried(whole)

    read = list(recorded_sessions([ArchivedEvent(r.seq, r.event) for r in changes.rows]))
    expected = list(recorded_sessions([ArchivedEvent(r.seq, r.event) for r in whole.rows]))
    assert [s.data.pending for s in read] == [s.data.pending for s in expected]
    assert [s.data.pending_digest for s in read] == [s.data.pending_digest for s in expected]
    # The fold keeps the newest session's list only, the same either way.
    lists = [(s.session_id, s.pending) for s in changes.state.sessions.values()]
    assert lists == [(s.session_id, s.pending) for s in whole.state.sessions.values()]
    assert [s.pending is None for s in changes.state.sessions.values()][-2:] == [True, False]


@pytest.mark.parametrize("slices", [0, PENDING_SLICES])
@pytest.mark.parametrize("target", ["ml/wait-0", "ml/wait-5", "ml/late"])
async def test_explain_show_and_verify_read_changes_exactly(
    database_url: str, target: str, slices: int
) -> None:
    changes = _backlog(pending_changes=True, max_message_bytes=1_000_000, slices=slices)
    whole = _backlog(pending_changes=False, max_message_bytes=1_000_000)
    await load_rows(database_url, [r.to_json() for r in changes.rows])
    async with open_archive(database_url) as reader:
        explanation = await explain_job(reader, target, counterfactual=False)
        # A session in the middle: its list is rebuilt from the sessions before it in the archive.
        shown = await show_session(reader, changes.sessions[3])
        report = await verify_archive(reader, strict_reasons=True)

    archived = [ArchivedEvent(r.seq, r.event) for r in whole.rows]
    expected = [
        (e.kind, e.text, e.session_id, e.last_session_id, e.count) for e in timeline(target, archived)
    ]
    got = [(e.kind, e.text, e.session_id, e.last_session_id, e.count) for e in explanation.timeline]
    assert got == expected
    assert explanation.reasons_rederived
    last = next(
        s for s in reversed(list(recorded_sessions(archived))) if any(p.job == target for p in s.data.pending)
    )
    if explanation.session is not None and explanation.session.session_id == last.session_id:
        assert list(explanation.recorded_reasons) == next(
            p.reasons for p in last.data.pending if p.job == target
        )

    middle = next(s for s in recorded_sessions(archived) if s.session_id == changes.sessions[3])
    assert shown.check.session.data.pending == middle.data.pending
    assert shown.check.verified
    assert shown.check.reasons is None
    assert report.ok, [str(d) for d in report.divergences]
    assert report.sessions == len(changes.sessions)
