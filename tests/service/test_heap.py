"""The heap guard: the long-lived heap is frozen during a session, the session's cycles are freed after it."""

from __future__ import annotations

import gc
import weakref

from scheduler.service.heap import HeapGuard
from tests.cycles import Node, cycle


def test_the_session_runs_with_the_heap_frozen_and_its_cycles_are_freed_after_it() -> None:
    guard = HeapGuard(rss=lambda: 1_000)
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


def test_a_frozen_object_that_became_cyclic_garbage_is_freed_by_the_full_pass_once_the_rss_grew() -> None:
    rss = [1_000]
    guard = HeapGuard(thaw_growth=0.05, rss=lambda: rss[0])
    try:
        made = cycle()
        guard.before_session()
        frozen_then_dropped = weakref.ref(made)
        del made  # cyclic garbage now, but frozen
        rss[0] = 1_049
        guard.after_session()  # grown by less than 5 %: collects only what is not frozen
        assert frozen_then_dropped() is not None
        assert guard.thaws == 0
        guard.before_session()
        rss[0] = 1_050
        guard.after_session()  # by 5 %: the full pass
        assert frozen_then_dropped() is None
        assert guard.thaws == 1
        guard.before_session()
        rss[0] = 1_100
        guard.after_session()  # the next one is due 5 % above where this one left the RSS
        assert guard.thaws == 1
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
    guard = HeapGuard(rss=lambda: 1_000)
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
        guard = HeapGuard(rss=lambda: 1_000)
        guard.before_session()
        guard.after_session()
        assert not gc.isenabled()
        guard.resume()
        assert not gc.isenabled()
    finally:
        gc.enable()
        guard.thaw()
