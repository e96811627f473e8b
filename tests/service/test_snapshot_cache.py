"""The snapshot cache rebuilds only what the fold touched, and its result is the full rebuild's, always."""

from __future__ import annotations

import pytest

from projector.fold import apply
from projector.state import ClusterState
from scheduler.core.snapshot import snapshot_digest
from scheduler.service.snapshot_cache import SnapshotCache
from scheduler.snapshot_builder import build_snapshot
from tests.projector.streams import event_stream


@pytest.mark.parametrize("seed", range(6))
def test_the_cached_snapshot_and_digest_equal_a_full_rebuild_after_every_event(seed: int) -> None:
    state = ClusterState()
    cache = SnapshotCache()
    for seq, event in enumerate(event_stream(seed, 400), start=1):
        outcome = apply(state, seq, event)
        if not outcome.applied:
            continue  # the stream holds invalid events on purpose; they change nothing
        cache.touched(state, outcome.touched)
        if seq % 7 == 0 or seq > 380:
            snapshot, digest = cache.build(state)
            expected = build_snapshot(state)
            assert snapshot == expected, f"seq {seq}: {event.type}"
            assert digest == snapshot_digest(expected)


@pytest.mark.parametrize("seed", range(3))
def test_retired_jobs_leave_no_trace_in_the_cache(seed: int) -> None:
    """Jobs finish and retire all along (TTL 30 s, 2 s an event): after every build the cache
    holds nothing about a job or task the state does not, and its result is the full rebuild's."""
    state = ClusterState()
    cache = SnapshotCache()
    submitted: set[str] = set()
    for seq, event in enumerate(
        event_stream(seed, 3_000, live_jobs=20, step_ms=2_000, ttl_seconds=30), start=1
    ):
        outcome = apply(state, seq, event)
        assert outcome.applied
        cache.touched(state, outcome.touched)
        submitted.update(key for kind, key in outcome.touched if kind == "new_job")
        if seq % 5 == 0:
            snapshot, digest = cache.build(state)
            jobs, tasks = cache.held()
            assert jobs <= state.jobs.keys(), f"seq {seq}: {sorted(jobs - state.jobs.keys())[:3]}"
            assert tasks <= state.tasks.keys(), f"seq {seq}: {sorted(tasks - state.tasks.keys())[:3]}"
            if seq % 100 == 0:
                expected = build_snapshot(state)
                assert snapshot == expected, f"seq {seq}: {event.type}"
                assert digest == snapshot_digest(expected)
    assert len(submitted) > 3 * len(state.jobs)  # most jobs have retired
    cache.build(state)
    assert cache.held()[0] == state.jobs.keys()


@pytest.mark.parametrize("seed", range(3))
def test_a_reused_name_is_built_afresh_not_served_from_its_finished_incarnation(seed: int) -> None:
    """Finished jobs' names are submitted again all along: the cache held the finished
    incarnation under the same id (left out of the snapshot), the new one must be in it."""
    state = ClusterState()
    cache = SnapshotCache()
    reused = 0
    for seq, event in enumerate(
        event_stream(seed, 2_000, live_jobs=20, step_ms=2_000, ttl_seconds=600, reuse_rate=0.5), start=1
    ):
        before = set(state.jobs)
        outcome = apply(state, seq, event)
        assert outcome.applied
        reused += any(kind == "new_job" and key in before for kind, key in outcome.touched)
        cache.touched(state, outcome.touched)
        if seq % 3 == 0:
            snapshot, digest = cache.build(state)
            expected = build_snapshot(state)
            assert snapshot == expected, f"seq {seq}: {event.type}"
            assert digest == snapshot_digest(expected)
    assert reused > 20
