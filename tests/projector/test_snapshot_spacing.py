"""Snapshots fall on multiples of ``snapshot_every``, spaced further apart as the state grows.

At a fixed interval a snapshot's cost grows with the state; with the newest
snapshot at least ``snapshot_scale`` events per job, task and node behind,
its cost per event stays put (projector.plan.snapshot_due).
"""

from __future__ import annotations

from itertools import pairwise

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from api.cli import app
from events.canonical import GENESIS_HASH
from projector.plan import BatchPlan, snapshot_due
from projector.settings import ProjectorSettings
from projector.state import ClusterState
from projector.writer import BatchWriter, decode_batch
from tests.projector.helpers import records
from tests.projector.streams import CLUSTER, event_stream


def _folded(count: int) -> ClusterState:
    writer = BatchWriter(ClusterState(), GENESIS_HASH, consumer="c", cluster=CLUSTER)
    writer.prepare(decode_batch(records(event_stream(3, count))), set())
    return writer.state


def _objects(state: ClusterState) -> int:
    return len(state.jobs) + len(state.tasks) + len(state.nodes)


def _due(state: ClusterState, base: int, last: int, *, every: int, scale: float, previous: int) -> bool:
    plan = BatchPlan(base_seq=base, last_seq=last)
    return snapshot_due(state, plan, snapshot_every=every, snapshot_scale=scale, last_snapshot_seq=previous)


def test_only_a_batch_that_crosses_a_multiple_of_snapshot_every_takes_one() -> None:
    empty = ClusterState()
    assert _due(empty, 90, 110, every=100, scale=1.0, previous=0)
    assert _due(empty, 99, 100, every=100, scale=1.0, previous=0)
    assert not _due(empty, 100, 199, every=100, scale=1.0, previous=100)
    assert not _due(empty, 101, 150, every=100, scale=0.0, previous=0)


def test_a_large_state_waits_until_the_last_snapshot_is_far_enough_behind() -> None:
    state = _folded(3_000)
    objects = _objects(state)
    assert objects > 1_000
    # Crossing 3,000: due only when the last snapshot is `objects` events or more behind.
    assert not _due(state, 2_990, 3_010, every=100, scale=1.0, previous=3_010 - objects + 1)
    assert _due(state, 2_990, 3_010, every=100, scale=1.0, previous=3_010 - objects)
    assert _due(state, 2_990, 3_010, every=100, scale=0.5, previous=3_010 - objects // 2 - 1)
    # Scale 0: every multiple, however large the state.
    assert _due(state, 2_990, 3_010, every=100, scale=0.0, previous=3_000)


def _snapshot_seqs(scale: float, *, every: int, batch: int) -> list[int]:
    spacing = {"snapshot_every": every, "snapshot_scale": scale}
    writer = BatchWriter(ClusterState(), GENESIS_HASH, consumer="c", cluster=CLUSTER, **spacing)
    stream = records(event_stream(3, 6_000))
    seqs = []
    for start in range(0, len(stream), batch):
        plan = writer.prepare(decode_batch(stream[start : start + batch]), set())
        if plan.snapshot is not None:
            seqs.append(plan.last_seq)
            assert writer.last_snapshot_seq == plan.last_seq
    return seqs


def test_the_writer_spaces_snapshots_out_as_the_state_grows() -> None:
    plain = _snapshot_seqs(0.0, every=100, batch=100)
    scaled = _snapshot_seqs(1.0, every=100, batch=100)
    # Without the scale: one per batch that archived something (each crosses a multiple of 100).
    assert len(plain) >= 55
    # With it, fewer, on the same grid, further apart as the state grows.
    assert 3 <= len(scaled) < len(plain) // 3
    assert set(scaled) <= set(plain)
    gaps = [b - a for a, b in pairwise(scaled)]
    assert gaps == sorted(gaps)
    assert gaps[-1] >= 5 * gaps[0]


@pytest.mark.parametrize("scale", [-0.5, float("nan")])
def test_the_writer_refuses_a_negative_scale(scale: float) -> None:
    with pytest.raises(ValueError, match="snapshot_scale must be zero or more"):
        BatchWriter(ClusterState(), GENESIS_HASH, consumer="c", cluster=CLUSTER, snapshot_scale=scale)


@pytest.mark.parametrize(("every", "scale"), [(0, 1.0), (10, -1.0), (10, float("nan"))])
def test_the_service_refuses_bad_spacing_before_it_connects(every: int, scale: float) -> None:
    with pytest.raises(ValidationError, match="snapshot_"):
        ProjectorSettings(snapshot_every=every, snapshot_scale=scale)


@pytest.mark.parametrize("flag", [["--snapshot-every", "0"], ["--snapshot-scale", "-0.5"]])
def test_the_command_line_says_what_is_wrong(flag: list[str]) -> None:
    endpoints = ["--kafka-bootstrap", "localhost:9092", "--database-url", "postgresql://x"]
    result = CliRunner().invoke(app, ["projector", *endpoints, *flag])
    assert result.exit_code == 2
    assert f"{flag[0]}: Input should be greater than" in result.output
