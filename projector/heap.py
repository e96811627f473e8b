"""Keep the cyclic garbage collector off the projector's batches.

The folded state grows with every batch, and decoding and folding a batch
allocates hundreds of thousands of objects, nearly all of them acyclic
(reference counting frees them).  Left alone, the collector runs a
generation-0 collection every ``tune_gc`` threshold of net allocations,
and the objects that survive it (the state's growth, the plan in flight)
pile up in generation 1, whose collections walk them all again.  Measured
at 100k events: ~1.1 s of generation-0 and ~0.3 s of generation-1
collection, about 15 % of the projector's CPU, for ~15 objects of cyclic
garbage found in the whole run.

So, per batch (:meth:`BatchHeap.batch`):

* while the batch is decoded and folded, the collector is paused
  (``gc.disable()``, only when it was enabled; restored after);
* after it, ``gc.freeze()``: everything alive (the state's growth, the plan
  until its commit frees it) moves to the permanent generation, which no
  collection walks;
* once the frozen heap has grown by ``thaw_growth`` (to four times its size,
  by default) since the last thaw, and is at least ``thaw_floor`` objects (its size is
  estimated from the collector's allocation count, which freezing resets,
  because counting the frozen heap walks it; the estimate runs high, so it
  is checked by counting before a thaw):
  ``gc.unfreeze()``, a full collection, and ``gc.freeze()`` again, so the
  cyclic garbage frozen since (made during a paused batch, or frozen objects
  that became cyclic garbage later) is freed.  A full collection walks the
  whole heap (~1 us per object), so tying it to the heap's growth keeps its
  amortised cost at about 1/g visits per surviving object for a growth
  factor g (here 4: a third, against a whole visit when doubling; measured
  4-6 us less projector CPU per event at 100k events), whatever the batch
  size (a count of batches would thaw every few seconds when batches are
  small).  The projector makes almost no cyclic garbage (~15 objects per
  100k events), and cyclic garbage is frozen heap too, so it cannot pile up
  without triggering a thaw;
* when a run ends, :meth:`BatchHeap.thaw`: unfreeze and collect.

Acyclic objects are freed by reference counting as usual, frozen or not.

Freezing and pausing are process-wide: in a process that runs other
services too, their objects are frozen alongside ours (and freed by the
next thaw), so the service enables this only where it runs alone
(``python -m projector``; see ``ProjectorConfig.freeze_batches``).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["BatchHeap"]


class BatchHeap:
    def __init__(
        self, *, enabled: bool = True, thaw_growth: float = 3.0, thaw_floor: int = 1_000_000
    ) -> None:
        if thaw_growth <= 0:
            raise ValueError(f"thaw_growth must be positive, got {thaw_growth}")
        self.enabled = enabled
        self.thaw_growth = thaw_growth
        self.thaw_floor = thaw_floor
        #: Thaw when the frozen heap reaches this many objects.
        self._thaw_at = thaw_floor
        #: The frozen heap's size: exact after a thaw, estimated in between (see batch()).
        self._frozen = gc.get_freeze_count() if enabled else 0
        #: Thaws during batches so far, and the seconds the last one took.
        self.thaws = 0
        self.last_thaw_seconds = 0.0

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
        if self._frozen >= self._thaw_at:
            # The estimate runs high: frozen objects freed while the count is zero
            # (a plan freed by its commit between batches) are not subtracted.  In
            # the service it reached 2.7x the heap and thawed 0.5 s too early per
            # 100k events.  Counting walks the heap too, but at ~8 ns an object
            # against ~1 us for a collection.
            self._frozen = gc.get_freeze_count()
        if self._frozen >= self._thaw_at:
            began = time.perf_counter()
            gc.unfreeze()
            gc.collect()
            gc.freeze()
            self._frozen = gc.get_freeze_count()  # exact again (a walk, as the collection was)
            self._thaw_at = max(self.thaw_floor, int(self._frozen * (1 + self.thaw_growth)))
            self.thaws += 1
            self.last_thaw_seconds = time.perf_counter() - began

    def thaw(self) -> None:
        """Unfreeze everything and collect it all (when a run ends)."""
        if self.enabled:
            gc.unfreeze()
            gc.collect()
            self._frozen = 0
