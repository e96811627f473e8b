"""The pure layer on histories in memory: verify's codes, positions and logic flags."""

from __future__ import annotations

import gc

import pytest

from replay.archive import ArchivedEvent, describe_decision
from replay.errors import UnknownLogicFlag
from replay.store import paused_gc
from replay.verify import verify_events
from tests.golden.history import LiveRun
from tests.golden.scenarios import DIVERGED_AT, divergent, gpu_cluster, split_sessions


def _rows(run: LiveRun) -> list[ArchivedEvent]:
    return [ArchivedEvent(r.seq, r.event, r.prev_hash, r.hash, r.canonical, 2, r.members) for r in run.rows]


def test_good_histories_re_derive() -> None:
    for build in (gpu_cluster, split_sessions):
        run = LiveRun()
        build(run)
        report = verify_events(_rows(run))
        assert report.ok, [str(d) for d in report.divergences]
        assert report.sessions == len(run.sessions)


def test_split_sessions_really_are_split() -> None:
    run = LiveRun()
    split_sessions(run)
    assert any(r.event.type == "tephra.session.part.v1" for r in run.rows)


def test_divergence_names_session_position_expected_and_actual() -> None:
    run = LiveRun()
    divergent(run)
    (first,) = verify_events(_rows(run)).divergences
    session_id = run.sessions[DIVERGED_AT[0]]
    honest = run.results[session_id].events()
    position = next(i for i, d in enumerate(honest) if d.kind == "bind")
    assert first.code == "REPLAY-DIVERGED"
    assert first.session_id == session_id
    assert first.position == position  # type: ignore[attr-defined]
    assert first.kind == "identity"  # type: ignore[attr-defined]
    assert first.actual == describe_decision(honest[position])  # type: ignore[attr-defined]
    assert first.expected != first.actual  # type: ignore[attr-defined]


def test_keep_going_still_reports_the_first_divergence_first() -> None:
    run = LiveRun()
    divergent(run)
    report = verify_events(_rows(run), keep_going=True)
    assert report.sessions == len(run.sessions)
    assert report.divergences[0].session_id == run.sessions[DIVERGED_AT[0]]


def test_a_logic_flag_this_core_does_not_know_is_its_own_code() -> None:
    run = LiveRun(logic_flags=("from-the-future",))
    gpu_cluster(run)
    report = verify_events(_rows(run))
    (first,) = report.divergences
    assert isinstance(first, UnknownLogicFlag)
    assert first.flags == ("from-the-future",)
    assert str(first).startswith("[REPLAY-UNKNOWN-FLAG] ")


def test_an_edited_event_breaks_the_chain_before_any_session_is_run() -> None:
    run = LiveRun()
    gpu_cluster(run)
    rows = _rows(run)
    victim = rows[9]
    edited = victim.event.model_copy(update={"source": "tephra://somebody-else"})
    rows[9] = ArchivedEvent(victim.seq, edited, victim.prev_hash, victim.hash, b"", 2, victim.members)
    report = verify_events(rows)
    assert [(d.code, d.seq) for d in report.divergences] == [("REPLAY-CHAIN-BROKEN", victim.seq)]
    assert report.sessions == 0


def test_paused_gc_restores_the_collector_as_it_found_it() -> None:
    seen: list[bool] = []

    def failing_decode() -> None:
        with paused_gc():
            seen.append(gc.isenabled())
            raise RuntimeError("the decode failed")

    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        failing_decode()
    assert seen == [False]
    assert gc.isenabled()
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()  # a caller that turned it off keeps it off
    finally:
        gc.enable()
