"""The batch heap: no collection during a batch, its survivors frozen, cyclic garbage freed by the thaws
(at idle moments, or in a batch once the heap has grown too far without one)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from events.canonical import GENESIS_HASH
from projector.heap import BatchHeap
from projector.plan import BatchPlan, decode_batch, finish_plan, fold_records
from projector.state import ClusterState
from tests.cycles import Node, cycle
from tests.projector.helpers import records
from tests.projector.streams import CLUSTER, event_stream


@pytest.fixture(autouse=True)
def _restore_the_collector() -> Iterator[None]:
    yield
    gc.unfreeze()
    gc.enable()


def test_a_batch_runs_with_the_collector_paused_and_what_survives_it_is_frozen() -> None:
    heap = BatchHeap(thaw_floor=10**12)
    frozen_before = gc.get_freeze_count()
    with heap.batch():
        assert not gc.isenabled()
        survivor = Node()
    assert gc.isenabled()
    assert gc.get_freeze_count() > frozen_before
    assert gc.is_tracked(survivor)


def _baseline(heap: BatchHeap) -> None:
    """The first batch over a floor of 0 thaws (a baseline); the thresholds follow from its heap."""
    with heap.batch():
        pass
    assert heap.thaws == heap.busy_thaws == 1


def _cyclic_garbage_of_a_batch(heap: BatchHeap) -> weakref.ref[Node]:
    """A reference to a cycle made and dropped in a batch, while the collector is paused."""
    with heap.batch():
        made = cycle()
        garbage = weakref.ref(made)
        del made
    return garbage


def test_cyclic_garbage_of_a_batch_is_freed_at_the_first_idle_moment_once_the_frozen_heap_has_grown() -> None:
    heap = BatchHeap(thaw_growth=1.0, busy_thaw_growth=1_000.0, thaw_floor=0)
    _baseline(heap)
    garbage = _cyclic_garbage_of_a_batch(heap)
    gc.collect()
    assert garbage() is not None  # frozen: no collection sees it
    assert not heap.idle()  # the heap has not grown: nothing is due
    assert garbage() is not None
    with heap.batch():
        grown = [[] for _ in range(gc.get_freeze_count() + 1)]  # the state doubles
    assert heap.thaws == 1  # due, but a batch does not thaw before the busy growth
    assert garbage() is not None
    assert heap.idle()
    assert heap.thaws == 2
    assert heap.busy_thaws == 1
    assert garbage() is None
    assert heap.last_thaw_seconds > 0
    assert not heap.idle()  # the thaw set a new baseline
    del grown


def test_a_batch_thaws_once_the_heap_has_grown_by_the_busy_growth_without_an_idle_moment() -> None:
    heap = BatchHeap(thaw_growth=1.0, busy_thaw_growth=3.0, thaw_floor=0)
    _baseline(heap)
    garbage = _cyclic_garbage_of_a_batch(heap)
    with heap.batch():
        grown = [[] for _ in range(gc.get_freeze_count() + 1)]  # x2: due at idle, not forced
    assert heap.busy_thaws == 1
    with heap.batch():
        more = [[] for _ in range(2 * gc.get_freeze_count() + 1)]  # x6 in all: past x4
    assert heap.busy_thaws == 2
    assert heap.thaws == 2
    assert garbage() is None
    del grown, more


def test_a_heap_that_does_not_grow_is_not_walked_again() -> None:
    heap = BatchHeap(thaw_growth=1.0, thaw_floor=0)
    for _ in range(20):
        with heap.batch():
            _ = [Node() for _ in range(1_000)]  # a batch's short-lived objects
        assert not heap.idle()
    assert heap.thaws == 1


def test_survivors_freed_after_their_batch_do_not_bring_on_a_thaw() -> None:
    heap = BatchHeap(thaw_growth=1.0, busy_thaw_growth=1.0, thaw_floor=0)
    _baseline(heap)
    for _ in range(20):
        with heap.batch():
            plan = [Node() for _ in range(gc.get_freeze_count() // 4 + 1)]
        del plan  # committed and freed between batches: the frozen heap is back to its size
        assert not heap.idle()
    assert heap.thaws == 1


def test_a_frozen_object_that_becomes_cyclic_garbage_later_is_freed_by_the_thaw() -> None:
    heap = BatchHeap(thaw_floor=10**12)
    with heap.batch():
        kept = cycle()  # part of the state, say
    garbage = weakref.ref(kept)
    del kept
    gc.collect()
    assert garbage() is not None
    heap.thaw()  # as at the end of a run
    assert garbage() is None
    assert gc.get_freeze_count() == 0


def test_a_failing_batch_restores_the_collector() -> None:
    heap = BatchHeap()
    with pytest.raises(RuntimeError), heap.batch():
        raise RuntimeError("fold failed")
    assert gc.isenabled()


def test_a_collector_someone_else_disabled_stays_disabled() -> None:
    heap = BatchHeap()
    gc.disable()
    with heap.batch():
        pass
    assert not gc.isenabled()


def test_disabled_it_leaves_the_collector_alone() -> None:
    heap = BatchHeap(enabled=False, thaw_floor=0)
    frozen_before = gc.get_freeze_count()
    with heap.batch():
        assert gc.isenabled()
    assert not heap.idle()
    heap.thaw()
    assert gc.get_freeze_count() == frozen_before
    assert gc.isenabled()


def test_thaw_growth_must_be_positive() -> None:
    with pytest.raises(ValueError, match="thaw_growth"):
        BatchHeap(thaw_growth=0)


def test_a_batch_thaws_no_sooner_than_an_idle_moment_would() -> None:
    with pytest.raises(ValueError, match="busy_thaw_growth"):
        BatchHeap(thaw_growth=3.0, busy_thaw_growth=2.0)


def test_the_fold_makes_no_cyclic_garbage() -> None:
    """What the thaws' timing rests on: folding events leaves nothing for the cyclic collector.

    A first stream builds what is built once (each model's JSON form, on first use);
    folding a second stream with the collector paused must then leave no cycle behind.
    """

    def fold(seed: int, count: int) -> None:
        state, plan = ClusterState(), BatchPlan(base_seq=0, last_seq=0, last_hash=GENESIS_HASH)
        encoded = records(event_stream(seed, count))
        for start in range(0, len(encoded), 32):
            fold_records(state, plan, decode_batch(encoded[start : start + 32]), set(), cluster=CLUSTER)
        finish_plan(state, plan, snapshot_every=count // 2, snapshot_scale=0.0, last_snapshot_seq=0)
        assert plan.archived > count // 2
        assert plan.snapshot is not None

    fold(1, 3_000)
    gc.collect()
    gc.disable()
    fold(2, 3_000)
    assert gc.collect() == 0
