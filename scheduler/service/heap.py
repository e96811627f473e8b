"""Keep the cyclic garbage collector off the session's critical path.

The scheduler holds a large, long-lived heap (the folded state and the
snapshot cache: hundreds of thousands of objects at ten thousand jobs) and
each session allocates a large, short-lived one.  Left alone, CPython's
collector runs generation-2 collections *during* the session, and each one
walks the whole long-lived heap: measured at 12,000 running jobs, 0.3-0.6 s
of a 0.8-1.2 s session was collection (``bench/e2e.py`` saw the tail of the
submission -> binding latency follow it).

So, per session:

* :meth:`HeapGuard.before_session` — ``gc.freeze()``: everything alive now
  (the state just read, the caches) moves to the permanent generation, which
  the collector does not walk; collections during the session see only the
  session's own objects;
* :meth:`HeapGuard.paused` — the collector is off while the core runs: the
  session builds ~6 objects per pending job (its working state, reasons,
  trace) and the young generations' collections walked them again and again
  for nothing (measured at 100k pending jobs: 0.6 s of a 5 s core); nearly
  all of it is acyclic, and what is cyclic :meth:`after_session` frees;
* :meth:`HeapGuard.after_session` — ``gc.collect()`` once the session is
  published, while the projector applies it: it walks only what was
  allocated since the freeze and frees the session's reference cycles, so
  nothing cyclic of it is frozen by the next session;
* every ``full_every`` sessions, :meth:`HeapGuard.thaw` — ``gc.unfreeze()``
  and a full collection, so frozen objects that became cyclic garbage since
  are freed (reference counting frees the acyclic ones as usual, frozen or
  not);
* when the loop ends, :meth:`HeapGuard.unfreeze` — only ``gc.unfreeze()``:
  the collector frees the rest when it next runs, and a stopping service
  does not spend seconds on a full collection of a big heap.

Freezing is process-wide: in a process that runs other services too
(``tephra up``) their objects are frozen alongside ours, which only spares
the collector work; :meth:`thaw` undoes it.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["HeapGuard"]


class HeapGuard:
    def __init__(self, *, enabled: bool = True, full_every: int = 100) -> None:
        self.enabled = enabled
        self.full_every = full_every
        self._sessions = 0
        #: Seconds spent in the last :meth:`after_session` (a full one included).
        self.last_collect_seconds = 0.0

    def before_session(self) -> None:
        if self.enabled:
            gc.freeze()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """The collector off for the block (when it was on), back on however the block ends."""
        if not self.enabled or not gc.isenabled():
            yield
            return
        gc.disable()
        try:
            yield
        finally:
            gc.enable()

    def after_session(self) -> None:
        if not self.enabled:
            return
        began = time.perf_counter()
        self._sessions += 1
        if self._sessions % self.full_every == 0:
            self.thaw()
        else:
            gc.collect()
        self.last_collect_seconds = time.perf_counter() - began

    def unfreeze(self) -> None:
        """Hand everything frozen back to the collector, without collecting now (the loop's end)."""
        if self.enabled:
            gc.unfreeze()

    def thaw(self) -> None:
        """Unfreeze everything and collect it all (the periodic full pass)."""
        if self.enabled:
            gc.unfreeze()
            gc.collect()
