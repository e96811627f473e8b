"""Runs the CPU-bound session off the event loop, under a time budget.

One dedicated worker thread: a session that overruns its budget cannot be
killed (Python threads cannot be), so its result is discarded and the next
session waits for that thread to finish rather than piling up a second
CPU-bound thread beside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from scheduler.service.errors import SessionOverrun

__all__ = ["SessionRunner"]

log = logging.getLogger("tephra.scheduler")

T = TypeVar("T")


class SessionRunner:
    def __init__(self, budget: float) -> None:
        self.budget = budget
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tephra-session")
        self._abandoned: asyncio.Future[object] | None = None

    async def run(self, session_id: str, compute: Callable[[], T]) -> T:
        """``compute()`` in the worker thread; raises :class:`SessionOverrun` past the budget."""
        await self._drain_abandoned()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.run_in_executor(self._executor, compute)
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
        self._executor.shutdown(wait=False, cancel_futures=True)
