"""The session runner: one worker thread, a budget, and no pile-up of abandoned sessions."""

from __future__ import annotations

import threading

import pytest

from scheduler.service.errors import SessionOverrun
from scheduler.service.runner import SessionRunner


async def test_an_overrun_is_reported_and_the_next_session_waits_for_the_abandoned_thread() -> None:
    runner = SessionRunner(budget=0.05)
    release = threading.Event()
    finished: list[str] = []

    def stuck() -> str:
        release.wait(10)
        finished.append("stuck")
        return "discarded"

    try:
        with pytest.raises(
            SessionOverrun, match=r"\[SCHED-OVERRUN\] session s1 ran longer than its 0.05 s budget"
        ):
            await runner.run("s1", stuck)
        release.set()
        # The next session starts only once the abandoned one has left the thread.
        assert await runner.run("s2", lambda: list(finished)) == ["stuck"]
    finally:
        release.set()
        runner.close()


async def test_a_session_within_budget_returns_its_result() -> None:
    runner = SessionRunner(budget=5)
    try:
        assert await runner.run("s1", lambda: 42) == 42
    finally:
        runner.close()
