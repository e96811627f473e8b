"""Pending reasons recorded as the change from the newest session's list: the fold reads them exactly,
and keeps one whole list (the newest session's) whatever the backlog and the session count."""

from __future__ import annotations

from events.models import SessionCommitted
from projector.fold import apply
from projector.projection_rows import session_statement
from projector.state import ClusterState, assemble
from projector.state_json import state_from_jsonable, state_to_jsonable
from tests.projector.pending_sessions import pending_entry as _entry
from tests.projector.pending_sessions import session_committed as _session


def _fold(state: ClusterState, *events: SessionCommitted) -> None:
    for event in events:
        outcome = apply(state, state.seq + 1, event)
        assert outcome.applied, outcome.detail


def test_a_change_is_read_against_the_newest_list_and_only_the_newest_keeps_one() -> None:
    state = ClusterState()
    whole = [_entry("ns/a"), _entry("ns/b"), _entry("ns/c")]
    _fold(state, _session("s1", whole))
    # b's reasons change, c leaves the list (bound), d joins it.
    changed = [_entry("ns/b", 4), _entry("ns/d")]
    _fold(state, _session("s2", changed, base="s1", cleared=("ns/c",)))

    expected = (_entry("ns/a"), changed[0], _entry("ns/d"))
    assert state.sessions["s2"].pending == expected
    assert state.sessions["s1"].pending is None
    # An unchanged backlog: an empty change, the same whole list.
    _fold(state, _session("s3", [], base="s2"))
    assert state.sessions["s3"].pending == expected
    assert [s.pending is None for s in state.sessions.values()] == [True, True, False]


def test_a_change_against_another_base_keeps_no_list_until_the_next_whole_one() -> None:
    state = ClusterState()
    _fold(state, _session("s1", [_entry("ns/a")]), _session("other", [_entry("ns/a")]))
    # s2 was computed on s1 while a session of another leader came between: not readable here.
    _fold(state, _session("s2", [_entry("ns/b")], base="s1"))
    assert state.sessions["s2"].pending is None
    # Nor is a change against s2; the next whole list is.
    _fold(state, _session("s3", [], base="s2"), _session("s4", [_entry("ns/b")]))
    assert state.sessions["s3"].pending is None
    assert state.sessions["s4"].pending == (_entry("ns/b"),)


def test_the_row_of_a_session_folded_and_superseded_in_one_batch_is_written_once_without_its_list() -> None:
    state = ClusterState()
    recorded = []
    for event in (_session("s1", [_entry("ns/a")]), _session("s2", [], base="s1")):
        outcome = apply(state, state.seq + 1, event)
        recorded += [state.sessions[key] for kind, key in outcome.touched if kind == "session"]
    staged = session_statement(recorded)
    assert staged is not None
    docs = {row[0]: row[-1] for row in staged.records}
    assert sorted(docs) == ["s1", "s2"]
    assert '"pending":null' in docs["s1"]
    # The newest list, in job order, is the rows of newest_pending (projector.newest_pending).
    assert '"pending":null' in docs["s2"]
    assert '"pending_rows":true' in docs["s2"]


def test_a_list_out_of_job_order_stays_in_its_row_as_the_load_reads_rows_back_in_job_order() -> None:
    state = ClusterState()
    _fold(state, _session("s1", [_entry("ns/b"), _entry("ns/a")]))
    staged = session_statement([state.sessions["s1"]])
    assert staged is not None
    doc = staged.records[0][-1]
    assert '"pending":[{"job":"ns/b"' in doc
    assert "pending_rows" not in doc


def test_lists_stored_on_older_sessions_are_dropped_on_load_as_the_fold_drops_them() -> None:
    folded = ClusterState()
    _fold(folded, _session("s1", [_entry("ns/a")]), _session("s2", [_entry("ns/b")]))
    # A snapshot or projection written before only the newest session kept its list.
    doc = state_to_jsonable(folded)
    doc["sessions"][0]["pending"] = [_entry("ns/a").model_dump(mode="json")]
    assert state_from_jsonable(doc) == folded
    sessions = list(state_from_jsonable(doc).sessions.values())
    rebuilt = assemble(
        seq=folded.seq,
        queues=[],
        priority_classes=[],
        config=None,
        config_version=0,
        leader_epoch=1,
        nodes=[],
        jobs=[],
        task_rows=[],
        sessions=sessions,
        session_parts={},
        early_observations={},
        clock=folded.clock,
        role_clocks=folded.role_clocks,
    )
    assert [s.pending for s in rebuilt.sessions.values()] == [None, (_entry("ns/b"),)]
