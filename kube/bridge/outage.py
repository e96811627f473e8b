"""An apiserver that does not answer: the bridge pauses its calls instead of spinning on them.

While the apiserver restarts (or the network is away) every binding fails at
once, is marked to look at again, and would be tried again at the next
reconcile, 20 times a second for every task, each failure logged.  Instead
the first failure opens an outage: calls pause for a back-off that grows
(0.2 s to 5 s) while they keep failing; one line says the outage began and
one that it ended.  The tasks stay due and are planned again once it answers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

__all__ = ["Outage"]

log = logging.getLogger(__name__)

_BACK_OFF: Final = (0.2, 0.5, 1.0, 2.0, 5.0)


class Outage:
    """Whether the apiserver was unreachable lately, and for how long calls pause."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._failures = 0
        self._since = 0.0
        self._until = 0.0

    def away(self) -> bool:
        """True while calls pause."""
        return self._clock() < self._until

    def failed(self, exc: BaseException) -> None:
        """A call could not reach the apiserver."""
        now = self._clock()
        if now < self._until:
            return  # a call that was under way when the outage began
        if self._failures == 0:
            self._since = now
            log.warning("kube bridge: the apiserver does not answer (%s); calls pause until it does", exc)
        self._until = now + _BACK_OFF[min(self._failures, len(_BACK_OFF) - 1)]
        self._failures += 1

    def answered(self) -> None:
        """A call reached the apiserver."""
        if self._failures:
            log.info("kube bridge: the apiserver answers again after %.1fs", self._clock() - self._since)
            self._failures = 0
            self._until = 0.0
