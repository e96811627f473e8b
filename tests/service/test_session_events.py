"""A session as events: one SessionCommitted, or parts + marker within the message limit, applied whole."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from events.models import (
    MAX_SESSION_PARTS,
    BindDecision,
    EnqueueDecision,
    PendingJob,
    PendingReason,
    SessionCommitted,
    SessionCommittedData,
    SessionPart,
)
from events.serde import decode, encode
from projector.fold import apply
from projector.state import ClusterState
from projector.state_json import state_from_jsonable, state_to_jsonable
from scheduler.service.errors import SessionTooLarge
from scheduler.service.session_events import (
    PendingCache,
    SessionHeader,
    SessionPending,
    digest_pending,
    pending_change,
    pending_slice_of,
    session_events,
    session_id_for,
)
from tests.service.helpers import job, node, queue

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _header(pending: tuple[PendingJob, ...] = ()) -> SessionHeader:
    return SessionHeader(
        session_id=session_id_for("default", 3, 7),
        cluster="default",
        leader_epoch=3,
        input_seq=12,
        config_version=0,
        now=NOW,
        input_digest="ab" * 32,
        logic_flags=(),
        pending=pending,
        pending_digest=digest_pending(pending),
    )


def _decisions(n: int) -> list[EnqueueDecision | BindDecision]:
    return [EnqueueDecision(job="ns/big")] + [
        BindDecision(task=f"ns/big-worker-{i}", job="ns/big", node=f"n{i % 3}") for i in range(n)
    ]


def test_a_small_session_is_exactly_one_commit() -> None:
    (event,) = session_events(_header(), _decisions(3), time=NOW, max_message_bytes=1_000_000)
    assert isinstance(event, SessionCommitted)
    assert event.data.parts == 0
    assert [d.kind for d in event.data.decisions] == ["enqueue", "bind", "bind", "bind"]
    assert event.data.leader_epoch == 3
    assert event.data.input_seq == 12


def test_a_large_session_splits_into_parts_within_the_limit_and_the_fold_applies_it_whole_in_order() -> None:
    limit = 2_000
    decisions = _decisions(60)
    events = session_events(_header(), decisions, time=NOW, max_message_bytes=limit)
    *parts, marker = events
    assert len(parts) > 2
    assert all(isinstance(p, SessionPart) for p in parts)
    assert all(len(encode(e)) <= limit for e in events)
    assert isinstance(marker, SessionCommitted)
    assert marker.data.parts == len(parts)
    assert marker.data.decisions == []
    assert [d for p in parts for d in p.data.decisions] == decisions  # type: ignore[union-attr]

    state = ClusterState()
    setup = [
        queue(),
        node("n0", cpu="64", pods=200),
        node("n1", cpu="64", pods=200),
        node("n2", cpu="64", pods=200),
        job("big", replicas=60),
    ]
    for seq, event in enumerate([*setup, *(decode(encode(e)) for e in events)], start=1):
        assert apply(state, seq, event).applied
        if isinstance(event, SessionPart):
            assert state.tasks["ns/big-worker-0"].status == "Pending"  # nothing applies before the marker
    record = state.sessions[marker.data.session_id]
    assert record.accepted == 61
    assert record.voided == ()
    assert {t.status for t in state.tasks.values()} == {"Bound"}


def _pending(n: int) -> tuple[PendingJob, ...]:
    return tuple(
        PendingJob(
            job=f"ns/j{i:03d}",
            reasons=[PendingReason(code="gang-not-ready", message=f"gang {i}/{n} " + "x" * 100)],
        )
        for i in range(n)
    )


def test_pending_reasons_too_large_for_the_marker_travel_in_parts_and_the_fold_reassembles_them() -> None:
    limit = 2_000
    pending = _pending(50)  # about 7 kB of reasons: more than three messages' worth
    decisions = _decisions(60)
    events = session_events(_header(pending), decisions, time=NOW, max_message_bytes=limit)
    *parts, marker = events
    assert all(len(encode(e)) <= limit for e in events)
    assert isinstance(marker, SessionCommitted)
    assert marker.data.parts == len(parts)
    assert marker.data.pending == []
    assert marker.data.pending_digest == digest_pending(pending)
    assert all(isinstance(p, SessionPart) for p in parts)
    # Decisions first, then pending jobs, each in order and never mixed in one part.
    carried = [(bool(p.data.decisions), bool(p.data.pending)) for p in parts]  # type: ignore[union-attr]
    assert carried == sorted(carried, reverse=True)
    assert (True, True) not in carried
    assert sum(1 for _, has_pending in carried if has_pending) > 2
    assert [d for p in parts for d in p.data.decisions] == decisions  # type: ignore[union-attr]
    assert tuple(j for p in parts for j in p.data.pending) == pending  # type: ignore[union-attr]

    state = ClusterState()
    setup = [queue(), *(node(f"n{i}", cpu="64", pods=200) for i in range(3)), job("big", replicas=60)]
    for seq, event in enumerate([*setup, *(decode(encode(e)) for e in events)], start=1):
        assert apply(state, seq, event).applied
    record = state.sessions[marker.data.session_id]
    assert record.accepted == 61
    assert record.pending == pending
    assert digest_pending(record.pending) == record.pending_digest
    # The buffered parts survive the state's JSON round trip (snapshots) mid-session.
    half = ClusterState()
    for seq, event in enumerate([*setup, *(decode(encode(e)) for e in parts)], start=1):
        assert apply(half, seq, event).applied
    restored = state_from_jsonable(state_to_jsonable(half))
    assert apply(restored, len(setup) + len(parts) + 1, decode(encode(marker))).applied
    assert restored.sessions[marker.data.session_id].pending == pending


def test_pending_reasons_that_fit_stay_in_the_marker_of_a_split_session() -> None:
    pending = _pending(3)
    *parts, marker = session_events(_header(pending), _decisions(60), time=NOW, max_message_bytes=2_000)
    assert isinstance(marker, SessionCommitted)
    assert tuple(marker.data.pending) == pending
    assert all(not p.data.pending for p in parts)  # type: ignore[union-attr]


def test_a_single_pending_job_larger_than_a_message_is_refused_before_anything_is_published() -> None:
    huge = (PendingJob(job="ns/huge", reasons=[PendingReason(code="gang-not-ready", message="x" * 5_000)]),)
    with pytest.raises(SessionTooLarge, match=r"\[SCHED-TOO-LARGE\].*ns/huge"):
        session_events(_header(huge), _decisions(60), time=NOW, max_message_bytes=2_000)


def test_a_pending_list_longer_than_the_part_limit_splits_into_parts() -> None:
    # More pending jobs than a part index may count (MAX_SESSION_PARTS): their overhead is still
    # bounded by the widest index a part can have, and the list travels in a few parts.
    pending = tuple(
        PendingJob(job=f"ns/j{i:06d}", reasons=[PendingReason(code="gang-not-ready", message="0/1")])
        for i in range(MAX_SESSION_PARTS + 8_000)
    )
    *parts, marker = session_events(_header(pending), [], time=NOW, max_message_bytes=1_048_576)
    assert isinstance(marker, SessionCommitted)
    assert 1 < marker.data.parts == len(parts) < 20
    assert tuple(j for p in parts for j in p.data.pending) == pending  # type: ignore[union-attr]


def test_session_ids_are_unique_per_epoch_and_counter_and_stable() -> None:
    assert session_id_for("default", 1, 0) == session_id_for("default", 1, 0)
    ids = {session_id_for(c, e, n) for c in ("a", "b") for e in (1, 2) for n in range(10)}
    assert len(ids) == 40


def test_the_fold_voids_a_session_of_an_older_epoch_once_a_newer_leader_committed() -> None:
    """The fencing the leader election relies on: a zombie leader's late session changes nothing."""

    def session(epoch: int, counter: int, task: str) -> SessionCommitted:
        header = dataclasses.replace(
            _header(), session_id=session_id_for("default", epoch, counter), leader_epoch=epoch
        )
        (event,) = session_events(
            header, [BindDecision(task=task, job="ns/big", node="n0")], time=NOW, max_message_bytes=1_000_000
        )
        assert isinstance(event, SessionCommitted)
        return event

    state = ClusterState()
    setup = [queue(), node("n0", cpu="64", pods=200), job("big", replicas=2)]
    late = session(1, 5, "ns/big-worker-1")
    for seq, event in enumerate([*setup, session(2, 0, "ns/big-worker-0"), late], start=1):
        assert apply(state, seq, event).applied
    record = state.sessions[late.data.session_id]
    assert record.accepted == 0
    assert [v.reason for v in record.voided] == ["stale-epoch"]
    assert state.tasks["ns/big-worker-1"].status == "Pending"


# ---------------------------------------------------------------------------- pending reasons as a change


def _entries(**reasons: str) -> tuple[PendingJob, ...]:
    return tuple(
        PendingJob(job=f"ns/{name}", reasons=[PendingReason(code="insufficient-resources", message=message)])
        for name, message in sorted(reasons.items())
    )


def test_a_change_names_the_entries_that_changed_and_the_jobs_that_left() -> None:
    base = _entries(a="0/3 nodes", b="0/3 nodes", c="0/3 nodes", d="0/3 nodes")
    now = _entries(a="0/3 nodes", b="0/4 nodes", d="0/3 nodes", e="0/3 nodes")
    change = pending_change(now, "s1", base, restate=0, slices=0, max_cleared_bytes=1_000)
    assert change.base == "s1"
    assert [p.job for p in change.pending] == ["ns/b", "ns/e"]
    assert change.cleared == ("ns/c",)


def test_the_whole_list_travels_without_a_base_when_no_smaller_or_when_the_cleared_ids_are_too_many() -> None:
    base = _entries(a="x", b="x", c="x")
    assert pending_change(base, "", None, restate=0, slices=0, max_cleared_bytes=1_000).base == ""
    # Every entry changed: the change is no smaller than the list.
    assert (
        pending_change(
            _entries(a="y", b="y", c="y"), "s1", base, restate=0, slices=0, max_cleared_bytes=1_000
        ).base
        == ""
    )
    # Two of three left the list: their ids would take more than the marker may give them.
    many = _entries(a="x", b="x", c="x", d="x", e="x")
    change = pending_change(
        _entries(a="x", b="x", c="x"), "s1", many, restate=0, slices=0, max_cleared_bytes=8
    )
    assert change.base == ""
    assert len(change.pending) == 3


def test_a_change_restates_every_entry_of_its_slice_changed_or_not() -> None:
    base = _entries(**dict.fromkeys("abcdefgh", "0/3 nodes"))
    now = _entries(**dict.fromkeys("acdfghz", "0/3 nodes"), b="0/4 nodes")
    # The slices are CRC-32 of the id modulo the count: the same in every process (not hash()).
    assert [pending_slice_of(f"ns/{n}", 4) for n in "abcdefghz"] == [2, 0, 2, 1, 3, 1, 3, 2, 2]
    change = pending_change(now, "s1", base, restate=2, slices=4, max_cleared_bytes=1_000)
    assert (change.base, change.slice, change.slices) == ("s1", 2, 4)
    # b changed, z is new (and slice 2's), e left; a, c and h are slice 2's, restated unchanged.
    assert [p.job for p in change.pending] == ["ns/a", "ns/b", "ns/c", "ns/h", "ns/z"]
    assert change.cleared == ("ns/e",)
    assert pending_change(now, "s1", base, restate=3, slices=4, max_cleared_bytes=1_000).pending == (
        now[1],
        now[5],
        now[7],
    )
    with pytest.raises(ValueError, match="slice 4 is not one of 4"):
        pending_change(now, "s1", base, restate=4, slices=4, max_cleared_bytes=1_000)


def test_a_restated_slice_needs_a_base_and_a_slice_below_the_count() -> None:
    fields = {"session_id": "s2", "leader_epoch": 1, "input_seq": 3, "config_version": 0, "now": NOW}
    fields |= {"input_digest": "sha256:0"}
    data = SessionCommittedData(**fields, pending_base="s1", pending_slice=3, pending_slices=4)
    assert '"pending_slice":3,"pending_slices":4' in data.model_dump_json()
    # No slice restated: the members are left out, as before they existed.
    assert "pending_slice" not in SessionCommittedData(**fields, pending_base="s1").model_dump_json()
    for bad in (
        {"pending_slice": 1, "pending_slices": 4},
        {"pending_base": "s1", "pending_slice": 4, "pending_slices": 4},
        {"pending_base": "s1", "pending_slice": 1},
    ):
        with pytest.raises(ValueError, match="pending_slice"):
            SessionCommittedData(**fields, **bad)


def _reasons(**messages: str) -> dict[str, list[PendingReason]]:
    """The core's pending reasons (job -> ranked reasons); a message with "|" ranks two reasons."""
    return {
        f"ns/{name}": [
            PendingReason(code=f"code-{i}", message=part) for i, part in enumerate(text.split("|"))
        ]
        for name, text in messages.items()
    }


def _publish(state: ClusterState, session: int, pending: SessionPending) -> None:
    """Fold the session's events as the scheduler's reader does: decoded from their JSON."""
    header = dataclasses.replace(
        _header(),
        session_id=session_id_for("default", 3, session),
        input_seq=state.seq,
        pending=pending.change.pending,
        pending_digest=pending.digest,
        pending_base=pending.change.base,
        pending_cleared=pending.change.cleared,
        pending_slice=pending.change.slice,
        pending_slices=pending.change.slices,
    )
    for event in session_events(header, [], time=NOW, max_message_bytes=1_000_000):
        assert apply(state, state.seq + 1, decode(encode(event))).applied


def test_the_pending_cache_gives_the_whole_list_its_digest_and_the_change_from_the_newest_list() -> None:
    state = ClusterState()
    assert apply(state, 1, queue()).applied
    cache = PendingCache()
    sessions = [
        _reasons(a="0/3 nodes", b="0/3 nodes", c="1/2|0/3 nodes", d="0/3 nodes"),
        _reasons(a="0/3 nodes", b="0/4 nodes", c="1/2|0/3 nodes", d="0/3 nodes", e="0/3 nodes"),
        _reasons(a="0/3 nodes", b="0/4 nodes", c="0/3 nodes|1/2", e="0/3 nodes", f="0/3 nodes"),
        _reasons(a="0/3 nodes", b="0/4 nodes", c="0/3 nodes|1/2", e="0/3 nodes", f="0/3 nodes"),
        _reasons(a="0/3 nodes", c="0/3 nodes|1/2", e="0/5 nodes", f="0/3 nodes", g="0/3 nodes"),
        _reasons(a="0/3 nodes", c="0/3 nodes|1/2", e="0/5 nodes", f="0/3 nodes", g="0/3 nodes"),
    ]
    changes = []
    for number, reasons in enumerate(sessions):
        session_id = session_id_for("default", 3, number)
        restate = number % 4 if number else None
        newest = next(reversed(state.sessions.values()), None)
        pending = cache.session(
            state, reasons, session_id=session_id, restate=restate, max_cleared_bytes=1_000, slices=4
        )
        whole = tuple(PendingJob(job=job, reasons=reasons[job]) for job in sorted(reasons))
        assert pending.whole == whole
        assert pending.digest == digest_pending(whole)
        assert pending.change == pending_change(
            whole,
            "" if newest is None or restate is None else newest.session_id,
            None if newest is None or restate is None else newest.pending,
            restate=restate or 0,
            slices=4,
            max_cleared_bytes=1_000,
        )
        changes.append(pending.change)
        # The entries that did not change are the state's own (read back from the archive), not copies.
        held = {p.job: p for p in (newest.pending or ())} if newest is not None else {}
        assert all(p is held[p.job] for p in pending.whole if held.get(p.job) == p)
        _publish(state, number, pending)
        assert state.sessions[session_id].pending == whole
    # The first session travels whole; the others as changes (b's, c's rank, e's, d leaving).
    assert [c.base != "" for c in changes] == [False, True, True, True, True, True]
    assert changes[2].cleared == ("ns/d",)
    assert "ns/c" in [p.job for p in changes[2].pending]


def test_the_pending_cache_starts_again_from_the_newest_list_when_its_last_session_was_not_applied() -> None:
    state = ClusterState()
    assert apply(state, 1, queue()).applied
    cache = PendingCache()
    first = _reasons(a="0/3 nodes", b="0/3 nodes", c="0/3 nodes")
    _publish(state, 0, cache.session(state, first, session_id="s0", restate=None, max_cleared_bytes=1_000))
    newest = next(reversed(state.sessions.values()))
    # A session computed and abandoned (never published): its list is not the newest.
    cache.session(
        state, _reasons(a="0/9 nodes", b="0/3 nodes"), session_id="lost", restate=1, max_cleared_bytes=1_000
    )
    reasons = _reasons(a="0/3 nodes", b="0/4 nodes", c="0/3 nodes")
    for fresh in (cache, PendingCache()):  # the same cache, and a restarted scheduler's
        pending = fresh.session(state, reasons, session_id="s1", restate=1, max_cleared_bytes=1_000, slices=0)
        assert pending.change.base == newest.session_id
        assert [p.job for p in pending.change.pending] == ["ns/b"]
        assert pending.change.cleared == ()
    with pytest.raises(ValueError, match="slice 4 is not one of 4"):
        cache.session(state, reasons, session_id="s2", restate=4, max_cleared_bytes=1_000, slices=4)


def test_jobs_holding_one_tuple_of_reasons_get_each_its_own_entry() -> None:
    """The core hands every job of a refused backlog the same reasons (one shared tuple): the cache
    makes their key once, and a job in between with other reasons still gets its own."""
    state = ClusterState()
    assert apply(state, 1, queue()).applied
    shared = (PendingReason(code="gang-not-ready", message="0/1"), PendingReason(code="q", message="full"))
    other = (PendingReason(code="q", message="full"),)
    sessions: list[dict[str, tuple[PendingReason, ...]]] = [
        {"ns/a": shared, "ns/b": shared, "ns/c": other, "ns/d": shared},
        {"ns/a": shared, "ns/b": other, "ns/c": shared, "ns/d": shared, "ns/e": shared},
    ]
    cache = PendingCache()
    for number, reasons in enumerate(sessions):
        pending = cache.session(
            state,
            reasons,
            session_id=session_id_for("default", 3, number),
            restate=None if number == 0 else 0,
            max_cleared_bytes=1_000,
            slices=0,
        )
        whole = tuple(PendingJob(job=job, reasons=list(reasons[job])) for job in sorted(reasons))
        assert pending.whole == whole
        assert pending.digest == digest_pending(whole)
        _publish(state, number, pending)
    # b and c swapped their reasons, e is new: the change names exactly them.
    assert [p.job for p in pending.change.pending] == ["ns/b", "ns/c", "ns/e"]
