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
* once the process's peak RSS has grown by ``thaw_growth`` (5 %) since the
  last full pass, :meth:`HeapGuard.thaw` — ``gc.unfreeze()`` and a full
  collection, so frozen objects that became cyclic garbage since are freed
  (reference counting frees the acyclic ones as usual, frozen or not).  A
  full pass walks the whole heap (0.54 s for the 760k objects of 20k pending
  jobs, ``bench/live_path.py``; ~1 s per 2M objects), so it runs when memory
  says it is needed, not on a schedule (every 100 sessions, it added a full
  pass to one session in a hundred, the p99, to free a handful of objects: a
  session makes next to no frozen cyclic garbage, 10 objects in 12 sessions
  at 20k pending jobs).  Cyclic garbage that does pile
  up raises the RSS, which brings the pass on, so the RSS stays within
  ``thaw_growth`` of where the last pass left it.  A heap that grows for good
  (a growing backlog) is walked at each 5 % of growth: a bounded cost per
  surviving object;
* when the loop ends, :meth:`HeapGuard.unfreeze` — only ``gc.unfreeze()``:
  the collector frees the rest when it next runs, and a stopping service
  does not spend seconds on a full collection of a big heap.

Freezing is process-wide: in a process that runs other services too
(``tephra up``) their objects are frozen alongside ours, which only spares
the collector work; :meth:`thaw` undoes it.
"""

from __future__ import annotations

import gc
import resource
import time
from collections.abc import Callable

__all__ = ["HeapGuard", "peak_rss"]


def peak_rss() -> int:
    """The process's peak resident set size so far (its unit, KiB or bytes, depends on the
    platform: only ratios of it are used)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


class HeapGuard:
    def __init__(
        self, *, enabled: bool = True, thaw_growth: float = 0.05, rss: Callable[[], int] = peak_rss
    ) -> None:
        if thaw_growth < 0:
            raise ValueError(f"thaw_growth must not be negative, got {thaw_growth}")
        self.enabled = enabled
        self.thaw_growth = thaw_growth
        self._rss = rss
        #: The peak RSS at which the next full pass is due.
        self._thaw_at = self._next_thaw()
        #: Full passes so far.
        self.thaws = 0
        #: Seconds spent in the last :meth:`after_session` (a full one included).
        self.last_collect_seconds = 0.0
        #: Whether :meth:`before_session` turned the collector off (it was on).
        self._resume = False

    def _next_thaw(self) -> int:
        return int(self._rss() * (1 + self.thaw_growth))

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
        if self._rss() >= self._thaw_at:
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
        """Unfreeze everything and collect it all (the full pass)."""
        if self.enabled:
            gc.unfreeze()
            gc.collect()
            self.thaws += 1
            self._thaw_at = self._next_thaw()
