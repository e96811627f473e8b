"""The heap guard: the long-lived heap is frozen during a session, the session's cycles are freed after it."""

from __future__ import annotations

import gc
import weakref

import pytest

from scheduler.service.heap import HeapGuard
from tests.cycles import Node, cycle


def test_the_session_runs_with_the_heap_frozen_and_its_cycles_are_freed_after_it() -> None:
    guard = HeapGuard(full_every=1_000)
    try:
        long_lived = Node()
        guard.before_session()
        assert gc.get_freeze_count() > 0
        assert gc.is_tracked(long_lived)
        made = cycle()  # made during the session, unreachable at its end
        session_garbage = weakref.ref(made)
        del made
        guard.after_session()
        assert session_garbage() is None
        assert guard.last_collect_seconds >= 0
    finally:
        guard.thaw()
    assert gc.get_freeze_count() == 0


def test_a_frozen_object_that_became_cyclic_garbage_is_freed_by_the_periodic_full_pass() -> None:
    guard = HeapGuard(full_every=2)
    try:
        made = cycle()
        guard.before_session()
        frozen_then_dropped = weakref.ref(made)
        del made  # cyclic garbage now, but frozen
        guard.after_session()  # session 1: collects only what is not frozen
        assert frozen_then_dropped() is not None
        guard.before_session()
        guard.after_session()  # session 2: the full pass
        assert frozen_then_dropped() is None
    finally:
        guard.thaw()


def test_disabled_it_leaves_the_collector_alone() -> None:
    guard = HeapGuard(enabled=False)
    guard.before_session()
    assert gc.get_freeze_count() == 0
    guard.after_session()
    guard.thaw()
    assert gc.get_freeze_count() == 0


def test_the_collector_is_paused_while_the_core_runs_and_back_on_however_it_ends() -> None:
    guard = HeapGuard()
    assert gc.isenabled()
    with guard.paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), guard.paused():
        raise RuntimeError("the core failed")
    assert gc.isenabled()


def test_a_disabled_guard_or_a_collector_already_off_is_left_as_it_was() -> None:
    with HeapGuard(enabled=False).paused():
        assert gc.isenabled()
    gc.disable()
    try:
        with HeapGuard().paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
