"""Reference figures for the machine a bench runs on.

The machine's speed moves between sessions (a shared 2-vCPU VM): the same
build has taken 45 and 92 µs of projector CPU per event.  Figures from
different sessions compare only next to these references, which exercise
the machine, not Tephra's code.
"""

from __future__ import annotations

import random
import time

__all__ = ["cpu_loop_seconds", "memory_walk_seconds"]


def cpu_loop_seconds() -> float:
    """CPU seconds for a fixed pure-Python integer loop (the core's speed)."""
    start = time.process_time()
    total = 0
    for i in range(10_000_000):
        total += i
    return time.process_time() - start


def memory_walk_seconds() -> float:
    """CPU seconds for 1M lookups of random keys in a dict of 1M task-like ids.

    Bound by cache misses (the table, its keys and values take ~150 MB), as
    the projector's fold is when it looks jobs, tasks and nodes up in a large
    state: the figure that moved most with the host's load (docs/projector.md).
    """
    rng = random.Random(7)
    keys = [f"ns{n % 7}/job-{n}-worker-{n % 5}" for n in range(1_000_000)]
    table = {key: [n] for n, key in enumerate(keys)}
    order = [keys[rng.randrange(len(keys))] for _ in range(1_000_000)]
    start = time.process_time()
    total = 0
    for key in order:
        total += table[key][0]
    return time.process_time() - start
