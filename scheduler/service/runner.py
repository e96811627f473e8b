"""Runs the CPU-bound session off the event loop, under a time budget.

Each session runs in a thread of its own, a *daemon* thread: Python threads
cannot be killed, so a session that overruns its budget, or is still running
when the service is told to stop, is abandoned: its result is discarded, and
the process may exit without waiting for it (a pool's worker thread would be
joined at exit, and SIGTERM would wait out the rest of a long session).
Nothing of an abandoned session leaves the process: the session's events
are published by the loop only after :meth:`SessionRunner.run` returned them.
The next session waits for an abandoned thread to finish rather than piling
up a second CPU-bound thread beside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from scheduler.service.errors import SessionOverrun

__all__ = ["SessionRunner"]

log = logging.getLogger("tephra.scheduler")

T = TypeVar("T")


class SessionRunner:
    def __init__(self, budget: float) -> None:
        self.budget = budget
        self._abandoned: asyncio.Future[object] | None = None

    async def run(self, session_id: str, compute: Callable[[], T]) -> T:
        """``compute()`` in a daemon thread; raises :class:`SessionOverrun` past the budget.

        Cancelled, it returns at once and leaves the thread to finish (or to
        end with the process); its result is then dropped.
        """
        await self._drain_abandoned()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()

        def work() -> None:
            try:
                outcome: tuple[T | None, BaseException | None] = (compute(), None)
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task, which raises it
                outcome = (None, exc)
            # The loop may be closed by now (the service stopped): then nobody wants the outcome.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, future, *outcome)

        threading.Thread(target=work, name=f"tephra-session-{session_id[:8]}", daemon=True).start()
        try:
            async with asyncio.timeout(self.budget):
                return await asyncio.shield(future)
        except TimeoutError:
            self._abandoned = future  # type: ignore[assignment]
            raise SessionOverrun(session_id, self.budget) from None

    async def _drain_abandoned(self) -> None:
        abandoned, self._abandoned = self._abandoned, None
        if abandoned is None or abandoned.done():
            return
        log.warning("waiting for the abandoned session's thread to finish before the next session")
        # Its outcome was already reported as an overrun; nothing of it is used.
        with contextlib.suppress(Exception):
            await abandoned

    def close(self) -> None:
        """Forget an abandoned session: its thread ends on its own, or with the process."""
        self._abandoned = None


def _settle(future: asyncio.Future[T], result: T | None, error: BaseException | None) -> None:
    if future.done():  # nobody waits any more (cancelled)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)  # type: ignore[arg-type]
