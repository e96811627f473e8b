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
* every ``thaw_every`` batches, and when a run ends, :meth:`BatchHeap.thaw`:
  ``gc.unfreeze()`` and a full collection, so the cyclic garbage frozen
  since (made during a paused batch, or frozen objects that became cyclic
  garbage later) is freed.  Acyclic objects are freed by reference counting
  as usual, frozen or not.

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
    def __init__(self, *, enabled: bool = True, thaw_every: int = 50) -> None:
        if thaw_every <= 0:
            raise ValueError(f"thaw_every must be positive, got {thaw_every}")
        self.enabled = enabled
        self.thaw_every = thaw_every
        self._batches = 0
        #: Seconds spent in the last :meth:`thaw`.
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
            gc.freeze()
            if was_enabled:
                gc.enable()
        self._batches += 1
        if self._batches % self.thaw_every == 0:
            self.thaw()

    def thaw(self) -> None:
        """Unfreeze everything and collect it all (every ``thaw_every`` batches, and when a run ends)."""
        if not self.enabled:
            return
        began = time.perf_counter()
        gc.unfreeze()
        gc.collect()
        self.last_thaw_seconds = time.perf_counter() - began
