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
