"""The batch heap: no collection during a batch, its survivors frozen, cyclic garbage freed by the thaws."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from projector.heap import BatchHeap
from tests.cycles import Node, cycle


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


def test_cyclic_garbage_of_a_batch_is_freed_once_the_frozen_heap_has_grown() -> None:
    heap = BatchHeap(thaw_growth=1.0, thaw_floor=0)
    with heap.batch():
        pass  # over the floor: the first thaw sets the baseline
    assert heap.thaws == 1
    with heap.batch():
        made = cycle()
        garbage = weakref.ref(made)
        del made  # cyclic garbage, made while the collector is paused
    gc.collect()
    assert garbage() is not None  # frozen: no collection sees it
    assert heap.thaws == 1
    with heap.batch():
        grown = [[] for _ in range(gc.get_freeze_count() + 1)]  # the state doubles
    assert heap.thaws == 2
    assert garbage() is None
    assert heap.last_thaw_seconds > 0
    del grown


def test_a_heap_that_does_not_grow_is_not_walked_again() -> None:
    heap = BatchHeap(thaw_growth=1.0, thaw_floor=0)
    for _ in range(20):
        with heap.batch():
            _ = [Node() for _ in range(1_000)]  # a batch's short-lived objects
    assert heap.thaws == 1


def test_survivors_freed_after_their_batch_do_not_bring_on_a_thaw() -> None:
    heap = BatchHeap(thaw_growth=1.0, thaw_floor=0)
    with heap.batch():
        pass  # over the floor: the first thaw sets the baseline
    assert heap.thaws == 1
    for _ in range(20):
        with heap.batch():
            plan = [Node() for _ in range(gc.get_freeze_count() // 4 + 1)]
        del plan  # committed and freed between batches: the frozen heap is back to its size
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
    heap.thaw()
    assert gc.get_freeze_count() == frozen_before
    assert gc.isenabled()


def test_thaw_growth_must_be_positive() -> None:
    with pytest.raises(ValueError, match="thaw_growth"):
        BatchHeap(thaw_growth=0)
