"""The retention clock is a watermark over the topic roles, and the buffers expire (projector.fold).

Pure fold tests: the projector reads three topics that a backlog drains at
different rates, and the fold must derive the same state from the archive's
order whatever that order was.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from itertools import islice

import asyncpg
import pytest

from events.models import (
    EVENT_TYPES,
    Event,
    SessionPart,
    SessionPartData,
    TaskFinished,
    TaskFinishedData,
)
from events.topics import Topics, topic_for
from projector.fold import (
    BUFFER_WINDOW,
    BUFFER_WINDOW_SECONDS,
    EVENT_ROLES,
    EXPIRY_REASONS,
    MAX_ROLE_LAG,
    Expired,
    apply,
)
from projector.migrate import apply_migrations
from projector.reconstruct import load_projection, state_at
from projector.state import CLOCK_START, ROLES, ClusterState
from projector.state_json import state_from_jsonable, state_to_jsonable
from projector.writer import BatchWriter
from tests.projector.helpers import records
from tests.projector.streams import CLUSTER, event_stream
from tests.projector.test_retention import (
    _T0,
    at,
    bind_all,
    cancel,
    completed_job,
    empty_session,
    fold,
    node,
    started,
    submit,
    tick,
)

_TOPICS = Topics()


def test_every_event_type_has_the_role_of_the_topic_it_is_produced_to() -> None:
    for cls in EVENT_TYPES.values():
        topic = topic_for(cls.model_construct(), _TOPICS)  # type: ignore[arg-type]
        assert ROLES[EVENT_ROLES[cls]] == topic.rsplit(".", 1)[1], cls  # type: ignore[index]


def test_a_topic_read_ahead_does_not_retire_a_job_a_lagging_topic_still_names() -> None:
    """The drained backlog's case: intents far ahead; the job must wait for the others."""
    state = ClusterState()
    fold(state, node(0), submit(1, ttl=60), cancel(2))  # cancelled while Pending: finished at 2
    assert state.jobs["ns/j"].finished_at == _T0 + timedelta(seconds=2)
    for t in range(100, 3_500, 100):  # intents read most of the maximum lag ahead
        fold(state, tick(t)[0])
    assert "ns/j" in state.jobs  # observations (at 0) and decisions (none yet... then 1.5) lag
    [bind] = fold(state, bind_all(1.5))  # the lagging decision: voided, the job is cancelled
    assert bind.applied
    [late] = fold(state, started(1.6))  # the lagging observation: moot, not buffered
    assert late.applied
    assert not state.early_observations
    fold(state, tick(61)[1], empty_session(61))
    assert "ns/j" in state.jobs  # the watermark is at 61, the deadline 62
    fold(state, tick(62)[1], empty_session(62))
    assert "ns/j" not in state.jobs
    assert not state.early_observations


def test_a_role_that_has_sent_nothing_holds_retention_like_a_silent_one() -> None:
    """A runner draining a backlog reads one topic before the others: until a role has sent
    anything, nothing it may still name retires (bounded by the maximum lag)."""
    state = ClusterState()  # no decisions yet
    fold(state, node(0), submit(1, ttl=60), cancel(2))
    lag = MAX_ROLE_LAG.total_seconds()
    fold(state, *tick(1_000)[:2])
    assert state.watermark == _T0 + timedelta(seconds=1_000) - MAX_ROLE_LAG
    fold(state, *tick(61 + lag)[:2])
    assert "ns/j" in state.jobs
    fold(state, *tick(62 + lag)[:2])
    assert "ns/j" not in state.jobs


def test_a_silent_role_holds_retention_back_at_most_the_maximum_lag() -> None:
    state = completed_job(ttl=60)  # finished at 10; decisions last at 2
    lag = MAX_ROLE_LAG.total_seconds()
    fold(state, *tick(2 + lag - 1)[:2])
    assert state.watermark == _T0 + timedelta(seconds=2)
    assert "ns/j" in state.jobs
    fold(state, *tick(70 + lag)[:2])  # the watermark is the clock minus the lag: 70
    assert state.watermark == _T0 + timedelta(seconds=70)
    assert "ns/j" not in state.jobs


def unknown(t: float, job: str = "ns/ghost") -> TaskFinished:
    data = TaskFinishedData(job_id=job, task_id=f"{job}-w-0", outcome="succeeded")
    return TaskFinished(**at(t), data=data)  # type: ignore[arg-type]


def test_observations_of_a_job_never_submitted_expire_after_the_window_with_a_code() -> None:
    state = ClusterState()
    fold(state, *tick(0))
    ghost = unknown(10)
    [buffered] = fold(state, ghost, unknown(20))[:1]
    assert buffered.touched == (("early", "ns/ghost"),)
    entry = state.early_observations["ns/ghost"]
    assert entry.since == _T0 + timedelta(seconds=10)  # the first one's time
    assert len(entry.events) == 2
    outcomes = fold(state, *tick(10 + BUFFER_WINDOW_SECONDS - 1))
    assert not any(o.expired for o in outcomes)
    outcomes = fold(state, *tick(10 + BUFFER_WINDOW_SECONDS))
    [expired] = [e for o in outcomes for e in o.expired]
    assert expired.code == "observation-expired" == EXPIRY_REASONS[0]
    assert expired.key == "ns/ghost"
    assert expired.event_ids[0] == ghost.id
    assert len(expired.event_ids) == 2
    assert "never submitted" in expired.detail
    assert not state.early_observations
    assert any(("early", "ns/ghost") in o.touched for o in outcomes)  # the writer deletes its rows


def test_an_observation_waiting_for_its_job_still_applies_within_the_window() -> None:
    state = ClusterState()
    fold(state, node(0), bind_all(0, job="ns/other"), started(5))  # ns/j-w-0 started before its job
    assert "ns/j" in state.early_observations
    fold(state, *tick(BUFFER_WINDOW_SECONDS))  # due: the observation came at 5
    assert "ns/j" in state.early_observations
    fold(state, submit(BUFFER_WINDOW_SECONDS), bind_all(BUFFER_WINDOW_SECONDS))
    assert not state.early_observations
    assert state.tasks["ns/j-w-0"].status == "Running"


def part(t: float, session_id: str, index: int) -> SessionPart:
    return SessionPart(**at(t), data=SessionPartData(session_id=session_id, index=index))  # type: ignore[arg-type]


def test_parts_of_a_session_never_committed_expire_with_a_code() -> None:
    state = ClusterState()
    fold(state, *tick(0), part(1, "lost", 0), part(2, "lost", 1))
    assert state.session_parts["lost"].since == _T0 + timedelta(seconds=1)
    outcomes = fold(state, *tick(1 + BUFFER_WINDOW_SECONDS))
    [expired] = [e for o in outcomes for e in o.expired]
    assert expired == Expired(
        code="session-part-expired",
        key="lost",
        since=_T0 + timedelta(seconds=1),
        event_ids=(),
        detail=expired.detail,
    )
    assert expired.touched == ("parts", "lost")
    assert "[0, 1]" in expired.detail
    assert not state.session_parts


def test_parts_of_a_session_read_far_behind_the_other_topics_wait_for_their_marker() -> None:
    """The decisions topic read more than the maximum lag behind the others: the parts
    expire by the decisions topic's own clock, so its marker, right behind them, finds them."""
    state = ClusterState()
    lag = MAX_ROLE_LAG.total_seconds()
    fold(state, *tick(0), *tick(2 * lag)[:2])  # intents and observations two days ahead
    fold(state, part(5, "late", 0))
    marker = empty_session(6)
    marker = marker.model_copy(
        update={"data": marker.data.model_copy(update={"session_id": "late", "parts": 1})}
    )
    [outcome] = fold(state, marker)
    assert outcome.applied
    assert not outcome.expired
    assert "late" in state.sessions


def test_times_near_year_one_expire_nothing_and_raise_nothing() -> None:
    """A role that has sent nothing is at the start of time, and a producer may send year 1:
    the deadlines stop at the start of time instead of overflowing."""
    state = ClusterState()
    early = unknown(0).model_copy(update={"time": datetime(1, 1, 1, 12, tzinfo=UTC)})
    [outcome] = fold(state, early)  # no intents nor decisions yet; the clock is 12:00 of year 1
    assert outcome.applied
    [outcome] = fold(state, part(0, "s", 0).model_copy(update={"time": datetime(1, 1, 1, 13, tzinfo=UTC)}))
    assert outcome.applied
    assert "ns/ghost" in state.early_observations
    assert "s" in state.session_parts


def test_an_invalid_event_moves_no_role_clock() -> None:
    state = completed_job(ttl=60)
    before = (state.clock, state.watermark, list(state.role_clocks))
    [outcome] = fold(state, cancel(10_000, job="ns/nope"))
    assert outcome.invalid == "job-missing"
    assert (state.clock, state.watermark, state.role_clocks) == before


# ---------------------------------------------------------------------------- skewed delivery


def skewed(events: Iterable[Event], per_topic: int) -> Iterator[Event]:
    """``events`` as a runner draining three topics reads them: ``per_topic`` of each topic in turn."""
    queues: dict[str, deque[Event]] = {role: deque() for role in ROLES}
    for event in events:
        queues[ROLES[EVENT_ROLES[type(event)]]].append(event)
    while any(queues.values()):
        for queue in queues.values():
            for _ in range(min(per_topic, len(queue))):
                yield queue.popleft()


def with_ghosts(events: list[Event], every: int) -> list[Event]:
    """``events`` with an observation of a job never submitted after every ``every``-th one."""
    out: list[Event] = []
    for i, event in enumerate(events):
        out.append(event)
        if i % every == every - 1:
            out.append(unknown(0, job=f"ns/ghost-{i}").model_copy(update={"time": event.time}))
    return out


def buffered_since(state: ClusterState) -> list[datetime]:
    return [e.since for e in state.early_observations.values()] + [
        p.since for p in state.session_parts.values()
    ]


@pytest.mark.parametrize("seed", [1, 2])
def test_buffers_stay_bounded_under_skewed_delivery_and_replay_agrees(seed: int) -> None:
    """A steady stream (1 s of event time an event, TTL 60 s, an observation of a job never
    submitted every 50 events) read 300 events per topic at a time: the topics drift more
    than the window apart.  No buffered entry outlives the window (by the watermark), what
    expires is recorded with its code, and the archive's order folds to the same state and
    the same expiries, from the start or from a snapshot."""
    stream = with_ghosts(event_stream(seed, 12_000, live_jobs=30, step_ms=1_000, ttl_seconds=60), 50)
    state = ClusterState()
    archive: list[Event] = []
    expired: list[Expired] = []
    most_skew = timedelta(0)
    snapshot: tuple[int, dict[str, object]] | None = None
    for event in skewed(stream, 300):
        outcome = apply(state, state.seq + 1, event)
        if not outcome.applied:
            continue
        archive.append(event)
        expired.extend(outcome.expired)
        seen = [t for t in state.role_clocks if t > _T0]
        most_skew = max(most_skew, max(seen) - min(seen))
        assert all(since > state.watermark - BUFFER_WINDOW for since in buffered_since(state))
        if len(archive) == 6_000:
            snapshot = (len(archive), state_to_jsonable(state))
    assert most_skew > BUFFER_WINDOW  # the topics did drift apart
    ghosts = {e.data.job_id for e in archive if isinstance(e, TaskFinished) and "ghost" in e.data.job_id}
    assert ghosts <= {e.key for e in expired} | set(state.early_observations)
    assert {e.code for e in expired} == {"observation-expired"}
    end = max(state.role_clocks)
    # Every role past the last event by the window: nothing is left buffered.
    fold(state, *tick((end - _T0 + BUFFER_WINDOW).total_seconds()))
    assert not buffered_since(state)

    replayed = ClusterState()
    replay_expired: list[Expired] = []
    for seq, event in enumerate(archive, start=1):
        outcome = apply(replayed, seq, event)
        assert outcome.applied
        replay_expired.extend(outcome.expired)
    assert replay_expired == expired
    assert snapshot is not None
    cut, doc = snapshot
    resumed = state_from_jsonable(doc)
    for seq, event in enumerate(islice(archive, cut, None), start=cut + 1):
        assert apply(resumed, seq, event).applied
    assert resumed == replayed
    assert resumed.watermark == replayed.watermark
    assert sorted(resumed.retiring) == sorted(replayed.retiring)


def test_in_order_the_watermark_trails_the_clock_by_the_slowest_role_s_gap() -> None:
    """In order (every topic current, once each has sent), the watermark trails the clock by
    the gap since the slowest role's last event, and a steady stream retires all along."""
    state = ClusterState()
    retired = 0
    for event in event_stream(3, 6_000, live_jobs=30, step_ms=1_000, ttl_seconds=60):
        jobs = set(state.jobs)
        if apply(state, state.seq + 1, event).applied:
            retired += len(jobs - set(state.jobs))
        if min(state.role_clocks) > CLOCK_START:
            assert state.watermark == min(state.role_clocks)
            assert state.clock - state.watermark < timedelta(minutes=5)
    assert retired > 100
    assert not state.early_observations


# ---------------------------------------------------------------------------- the projection


@pytest.mark.integration
async def test_the_buffers_rows_follow_the_state_and_expiries_are_recorded(database_url: str) -> None:
    """The skewed stream with ghosts through the writer, 700 records a batch: after every
    batch the projection (buffers row by row) loads as the writer's state and as the fold
    of the archive, and every expiry is in expired_buffers."""
    stream = with_ghosts(event_stream(4, 6_000, live_jobs=30, step_ms=1_000, ttl_seconds=60), 50)
    events = list(skewed(stream, 300))
    conn = await asyncpg.connect(database_url)
    try:
        await apply_migrations(conn)
        writer = await BatchWriter.load(conn, consumer="c", cluster=CLUSTER, snapshot_every=1_000)
        expired = 0
        most_early = 0
        for start in range(0, len(events), 700):
            plan = await writer.write(conn, records(events[start : start + 700], start=start))
            expired += len(plan.expired)
            most_early = max(most_early, len(writer.state.early_observations))
            assert await load_projection(conn) == writer.state
        assert most_early > 0
        assert expired > 0
        rows = await conn.fetch("SELECT seq, code, key, event_ids FROM expired_buffers ORDER BY id")
        assert len(rows) == expired
        assert {r["code"] for r in rows} <= set(EXPIRY_REASONS)
        assert await conn.fetchval("SELECT count(*) FROM early_observations") == len(
            writer.state.early_observations
        )
        assert await state_at(conn, writer.state.seq) == writer.state
    finally:
        await conn.close()
