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
  the collector does not walk; and the collector off until the session is
  published: the session builds ~6 objects per pending job (its working
  state, reasons, trace) and the young generations' collections walked them
  again and again for nothing (measured at 100k pending jobs: 0.6 s of a 5 s
  core).  Nearly all of it is acyclic; what is cyclic :meth:`after_session`
  frees.  The collector stays off past the core: turned back on there, the
  allocations the pause had counted set off at once a young collection of
  everything the session still held (0.17-0.23 s at 100k pending jobs,
  bench/live_path.py), which :meth:`after_session` walks again anyway;
* :meth:`HeapGuard.after_session` — ``gc.collect()`` once the session is
  published, while the projector applies it, then the collector back on (the
  collection left nothing counted to set it off): it walks only what was
  allocated since the freeze and frees the session's reference cycles, so
  nothing cyclic of it is frozen by the next session; a session that ends
  otherwise (overrun, error) turns the collector back on with
  :meth:`HeapGuard.resume`;
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

__all__ = ["HeapGuard"]


class HeapGuard:
    def __init__(self, *, enabled: bool = True, full_every: int = 100) -> None:
        self.enabled = enabled
        self.full_every = full_every
        self._sessions = 0
        #: Seconds spent in the last :meth:`after_session` (a full one included).
        self.last_collect_seconds = 0.0
        #: Whether :meth:`before_session` turned the collector off (it was on).
        self._resume = False

    def before_session(self) -> None:
        if self.enabled:
            gc.freeze()
            # Still True when an earlier session was abandoned before it could resume the collector.
            self._resume = self._resume or gc.isenabled()
            gc.disable()

    def resume(self) -> None:
        """The collector back on if :meth:`before_session` turned it off (a session that ended
        without :meth:`after_session`)."""
        if self._resume:
            self._resume = False
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
        self.resume()
        self.last_collect_seconds = time.perf_counter() - began

    def unfreeze(self) -> None:
        """Hand everything frozen back to the collector, without collecting now (the loop's end)."""
        if self.enabled:
            gc.unfreeze()
            self.resume()

    def thaw(self) -> None:
        """Unfreeze everything and collect it all (the periodic full pass)."""
        if self.enabled:
            gc.unfreeze()
            gc.collect()
