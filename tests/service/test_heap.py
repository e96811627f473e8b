"""The heap guard: the long-lived heap is frozen during a session, the session's cycles are freed after it."""

from __future__ import annotations

import gc
import weakref

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


def test_the_collector_is_off_from_before_the_session_until_it_is_collected_after_it() -> None:
    guard = HeapGuard(full_every=1_000)
    try:
        assert gc.isenabled()
        guard.before_session()
        assert not gc.isenabled()
        guard.after_session()
        assert gc.isenabled()
        # A session abandoned before after_session (an overrun), then the next one: the
        # collector comes back on with resume, or with the next session's after_session.
        guard.before_session()
        guard.before_session()
        assert not gc.isenabled()
        guard.after_session()
        assert gc.isenabled()
        guard.before_session()
        guard.resume()
        assert gc.isenabled()
        guard.before_session()
        guard.unfreeze()  # the loop's end
        assert gc.isenabled()
    finally:
        gc.enable()
        guard.thaw()


def test_a_disabled_guard_or_a_collector_already_off_is_left_as_it_was() -> None:
    guard = HeapGuard(enabled=False)
    guard.before_session()
    assert gc.isenabled()
    guard.after_session()
    gc.disable()
    try:
        guard = HeapGuard(full_every=1_000)
        guard.before_session()
        guard.after_session()
        assert not gc.isenabled()
        guard.resume()
        assert not gc.isenabled()
    finally:
        gc.enable()
        guard.thaw()
