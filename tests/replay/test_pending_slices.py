"""Changes that restate a slice of the pending list each: any session's list is rebuilt exactly.

The live scheduler publishes its whole pending list on a term's first session only; every later
session carries the change from its base plus one slice of the list (every pending job whose id
hashes to it), so any PENDING_SLICES consecutive sessions restate every job.  The same scenario
is recorded that way (4 slices, so the walks are short but real) and with every list whole: the
list of every session, rebuilt walking back from it alone, must be the whole run's, and so must
``replay session`` of each and ``replay verify``.
"""

from __future__ import annotations

import pytest

from events.models import PendingJob, SessionCommitted, SessionPart
from replay.archive import ArchivedEvent, ListFromNewest, recorded_sessions
from replay.queries import show_session, verify_archive
from replay.store import open_archive
from scheduler.service.session_events import pending_slice_of
from tests.golden.archive import load_rows
from tests.golden.history import LiveRun, gpu_node, job

_SLICES = 4


def _backlog(*, pending_changes: bool, max_message_bytes: int = 1_000_000) -> LiveRun:
    """Jobs wait behind two busy nodes; more join them, jobs of another size too; each busy job
    finishes in turn and a waiting one takes its node (it leaves the list)."""
    run = LiveRun(
        pending_changes=pending_changes, pending_slices=_SLICES, max_message_bytes=max_message_bytes
    )
    run.queue("research")
    run.node(gpu_node("n1", 8))
    run.node(gpu_node("n2", 8))
    run.submit_all(job(f"busy-{i}", queue="research", replicas=1, gpu=8) for i in range(2))
    run.cycle()
    run.submit_all(job(f"wait-{i:02d}", queue="research", replicas=1, gpu=8) for i in range(10))
    for _ in range(3):
        run.cycle()
    run.submit(job("late", queue="research", replicas=1, gpu=4))
    run.cycle()
    run.finish(next(iter(run.state.jobs["ml/busy-0"].tasks)), "ml/busy-0")
    for _ in range(3):
        run.cycle()
    run.submit_all(job(f"wait-{i:02d}", queue="research", replicas=1, gpu=8) for i in range(10, 14))
    for _ in range(3):
        run.cycle()
    run.finish(next(iter(run.state.jobs["ml/busy-1"].tasks)), "ml/busy-1")
    for _ in range(4):
        run.cycle()
    return run


def _carried(run: LiveRun) -> dict[str, tuple[SessionCommitted, list[PendingJob]]]:
    """Each session's marker and the pending entries it carries (the parts', then the marker's)."""
    parts: dict[str, list[PendingJob]] = {}
    out: dict[str, tuple[SessionCommitted, list[PendingJob]]] = {}
    for row in run.rows:
        if isinstance(row.event, SessionPart):
            parts.setdefault(row.event.data.session_id, []).extend(row.event.data.pending)
        elif isinstance(row.event, SessionCommitted):
            sid = row.event.data.session_id
            out[sid] = (row.event, [*parts.pop(sid, []), *row.event.data.pending])
    return out


@pytest.mark.parametrize("max_message_bytes", [1_000_000, 2_000])
def test_every_sessions_list_is_rebuilt_from_the_sessions_before_it(max_message_bytes: int) -> None:
    sliced = _backlog(pending_changes=True, max_message_bytes=max_message_bytes)
    whole = _backlog(pending_changes=False, max_message_bytes=max_message_bytes)
    assert sliced.sessions == whole.sessions
    expected = {
        s.session_id: s.data.pending
        for s in recorded_sessions([ArchivedEvent(r.seq, r.event) for r in whole.rows])
    }
    carried = _carried(sliced)
    markers = [carried[sid][0].data for sid in sliced.sessions]
    # Whole lists while there is no list before (nothing pending in the first session); then
    # every session records the change from the one before, restating the slices in turn.
    assert [d.pending_base for d in markers] == ["", "", *sliced.sessions[1:-1]]
    assert [(d.pending_slice, d.pending_slices) for d in markers[2:]] == [
        (n % _SLICES, _SLICES) for n in range(2, len(markers))
    ]
    for data in markers[2:]:
        entries = carried[data.session_id][1]
        listed = {p.job for p in expected[data.session_id]}
        restated = {p.job for p in entries if pending_slice_of(p.job, _SLICES) == data.pending_slice}
        assert restated == {j for j in listed if pending_slice_of(j, _SLICES) == data.pending_slice}

    # The fold reads the restated entries as any change: the same newest list as the whole run's.
    folded = [(s.session_id, s.pending) for s in sliced.state.sessions.values()]
    assert folded == [(s.session_id, s.pending) for s in whole.state.sessions.values()]

    walked: list[int] = []
    for index, sid in enumerate(sliced.sessions):
        rebuilt = ListFromNewest()
        steps = 0
        for older in reversed(sliced.sessions[: index + 1]):
            steps += 1
            marker, entries = carried[older]
            if rebuilt.add(marker.data, entries):
                break
        assert rebuilt.whole() == tuple(expected[sid]), sid
        walked.append(steps)
    # The walks end at the whole list of session 1 while it is near, then on the slices alone.
    assert walked == [1, 1, 2, 3, 4] + [_SLICES] * (len(walked) - 5)


def test_a_walk_needs_every_slice_or_a_whole_list() -> None:
    sliced = _backlog(pending_changes=True)
    carried = _carried(sliced)
    rebuilt = ListFromNewest()
    for sid in reversed(sliced.sessions[-(_SLICES - 1) :]):
        marker, entries = carried[sid]
        assert not rebuilt.add(marker.data, entries)
    with pytest.raises(ValueError, match="not reached"):
        rebuilt.whole()


@pytest.mark.integration
async def test_replay_reads_any_session_of_a_sliced_archive_exactly(database_url: str) -> None:
    sliced = _backlog(pending_changes=True)
    whole = _backlog(pending_changes=False)
    expected = {
        s.session_id: s.data.pending
        for s in recorded_sessions([ArchivedEvent(r.seq, r.event) for r in whole.rows])
    }
    await load_rows(database_url, [r.to_json() for r in sliced.rows])
    async with open_archive(database_url) as reader:
        for sid in sliced.sessions:
            shown = await show_session(reader, sid)
            assert shown.check.session.data.pending == expected[sid], sid
            assert shown.check.verified
            assert shown.check.reasons is None
        report = await verify_archive(reader, strict_reasons=True)
    assert report.ok, [str(d) for d in report.divergences]
    assert report.sessions == len(sliced.sessions)
