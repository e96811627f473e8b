"""The collector policy of Tephra's processes, in one place.

Every ``tephra`` and ``replay`` process starts with :func:`tune_gc`: their
work folds or schedules large, long-lived object graphs, which CPython's
default thresholds re-scan over and over (measured: decoding 2.5x slower).

The projector, where it runs alone (``tephra projector``, the service
compose.yaml runs; ``ProjectorSettings.projector_freeze``), goes further and
keeps the collector off its state and its batches with a :class:`BatchHeap`.
The folded state grows with every batch, and decoding and folding a batch
allocates hundreds of thousands of objects, nearly all of them acyclic
(reference counting frees them).  Left alone, the collector runs a
generation-0 collection every ``tune_gc`` threshold of net allocations,
and the objects that survive it (the state's growth, the plan in flight)
pile up in generation 1, whose collections walk them all again.  Measured
at 100k events: ~1.1 s of generation-0 and ~0.3 s of generation-1
collection, about 15 % of the projector's CPU, for ~15 objects of cyclic
garbage found in the whole run.

So, once the state is loaded (:meth:`BatchHeap.loaded`), one collection and
``gc.freeze()``; then per batch (:meth:`BatchHeap.batch`):

* while the batch is decoded and folded, the collector is paused
  (``gc.disable()``, only when it was enabled; restored after);
* after it, ``gc.freeze()``: everything alive (the state's growth, the plan
  until its commit frees it) moves to the permanent generation, which no
  collection walks;
* once the frozen heap has grown by ``thaw_growth`` (to four times its size,
  by default) since the last thaw, and is at least ``thaw_floor`` objects, a
  thaw is due: ``gc.unfreeze()``, a full collection, and ``gc.freeze()``
  again, so the cyclic garbage frozen since (made during a paused batch, or
  frozen objects that became cyclic garbage later) is freed.  A due thaw
  waits for the service to be idle (:meth:`BatchHeap.idle`: a fetch came
  back empty); only if the heap grows by ``busy_thaw_growth`` (to sixteen
  times its size, by default) without an idle moment does a batch thaw.
  Its size is estimated from the collector's allocation count, which
  freezing resets, because counting the frozen heap walks it; the estimate
  runs high, so it is checked by counting before a thaw.

  Why wait.  A full collection visits every object, each visit a cache
  miss (measured: 0.43-0.63 s for a heap of 625k objects, the bench's after
  200k events), and finds next to nothing: the fold makes no cyclic garbage
  per event (116 objects in 200k events, all made once at start-up;
  ``tests/projector/test_heap.py`` keeps it so), the service a handful.  In
  a batch it stalls the pipeline for that long.  A projector that keeps up
  with its topics is idle most of the time, and one catching up after an
  outage is not, so the collection waits for the former.  Under load that
  never lets up, each surviving object is visited about (1 + b) / b times
  over its life for a busy growth b (1.07 at 15), no more than a thaw at
  every fourfold growth costs (1.33); the pauses are rarer and longer.  The
  cyclic garbage left waiting is what the process made since the last
  thaw: a few objects, not a fraction of the heap.
* when a run ends, :meth:`BatchHeap.thaw`: unfreeze and collect.

Acyclic objects are freed by reference counting as usual, frozen or not.

Freezing and pausing are process-wide: in a process that runs other
services too, their objects would be frozen alongside ours, and the
scheduler's own per-session freezing (``scheduler.service.heap``) would
thaw ours, so ``tephra up`` turns this off (``api.stack``).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

__all__ = ["BUSY_THAW_GROWTH", "THAW_GROWTH", "BatchHeap", "tune_gc"]

#: The defaults of ``ProjectorSettings.projector_thaw_growth`` and ``projector_busy_thaw_growth``.
THAW_GROWTH: Final = 3.0
BUSY_THAW_GROWTH: Final = 15.0


def tune_gc() -> None:
    """Collect garbage less often: once, at the start of every Tephra process."""
    gc.set_threshold(50_000, 20, 100)


class BatchHeap:
    def __init__(
        self,
        *,
        enabled: bool = True,
        thaw_growth: float = THAW_GROWTH,
        busy_thaw_growth: float = BUSY_THAW_GROWTH,
        thaw_floor: int = 1_000_000,
    ) -> None:
        if thaw_growth <= 0:
            raise ValueError(f"thaw_growth must be positive, got {thaw_growth}")
        if busy_thaw_growth < thaw_growth:
            raise ValueError(
                f"busy_thaw_growth ({busy_thaw_growth}) must be at least thaw_growth ({thaw_growth}):"
                " a batch thaws only past the point where an idle moment would have"
            )
        self.enabled = enabled
        self.thaw_growth = thaw_growth
        self.busy_thaw_growth = busy_thaw_growth
        self.thaw_floor = thaw_floor
        #: A thaw is due at the next idle moment once the frozen heap reaches this many
        #: objects, and a batch thaws at the other: set by _rebase after each thaw.
        self._due_at = 0
        self._forced_at = 0
        self._rebase(0)
        #: The frozen heap's size: exact after a thaw, estimated in between (see batch()).
        self._frozen = gc.get_freeze_count() if enabled else 0
        #: Thaws so far (at idle moments and in batches), and the seconds the last one took.
        self.thaws = 0
        self.busy_thaws = 0
        self.last_thaw_seconds = 0.0

    def _rebase(self, frozen: int) -> None:
        """The thresholds after a thaw that left ``frozen`` objects (0: none yet, the floor's)."""
        self._due_at = max(self.thaw_floor, int(frozen * (1 + self.thaw_growth)))
        self._forced_at = int(self._due_at * (1 + self.busy_thaw_growth) / (1 + self.thaw_growth))

    def loaded(self) -> None:
        """The state was just loaded: collect, and freeze everything alive (the state with it).

        As after a thaw, the next one is due once the frozen heap has grown by ``thaw_growth``.
        """
        if self.enabled:
            gc.collect()
            gc.freeze()
            self._rebase(self._counted())

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Decode and fold one batch inside this: no collection runs, and what survives it is frozen."""
        if not self.enabled:
            yield
            return
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            yield
        finally:
            # The youngest generation's count is the net number of tracked objects
            # allocated since the last freeze or collection: what this freeze adds.
            # (gc.get_freeze_count() would be exact, but it walks the whole frozen
            # heap: ~25 ms per 3M objects, every batch.)
            self._frozen += gc.get_count()[0]
            gc.freeze()
            if was_enabled:
                gc.enable()
        if self._frozen >= self._forced_at and self._counted() >= self._forced_at:
            self._thaw()
            self.busy_thaws += 1

    def idle(self) -> bool:
        """The service has nothing to do: thaw if one is due.  True when it thawed."""
        if not self.enabled or self._frozen < self._due_at or self._counted() < self._due_at:
            return False
        self._thaw()
        return True

    def _counted(self) -> int:
        """The frozen heap's exact size, which becomes the estimate.

        The estimate runs high: frozen objects freed while the count is zero (a
        plan freed by its commit between batches) are not subtracted.  In the
        service it reached 2.7x the heap and thawed 0.5 s too early per 100k
        events.  Counting walks the heap too, but at ~8 ns an object against
        ~1 us for a collection.
        """
        self._frozen = gc.get_freeze_count()
        return self._frozen

    def _thaw(self) -> None:
        began = time.perf_counter()
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self._rebase(self._counted())  # exact again (a walk, as the collection was)
        self.thaws += 1
        self.last_thaw_seconds = time.perf_counter() - began

    def thaw(self) -> None:
        """Unfreeze everything and collect it all (when a run ends)."""
        if self.enabled:
            gc.unfreeze()
            gc.collect()
            self._frozen = 0
