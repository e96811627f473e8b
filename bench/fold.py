"""Fold throughput: decode and the pure fold over an in-memory stream (default 1,000,000 events).

    python bench/fold.py [--events N] [--seed S] [--profile]

Prints the stream generation time (not part of the figures), the fold rate
over already-decoded events, the decode rate over encoded bytes, decode+fold
together, and peak memory.  ``--profile`` prints the fold's top functions.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import resource
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from events.serde import decode, encode
from projector.fold import apply
from projector.heap import tune_gc
from projector.state import ClusterState
from tests.projector.streams import event_stream


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--default-gc", action="store_true", help="keep CPython's GC thresholds (compare)")
    args = parser.parse_args()

    began = time.perf_counter()
    events = event_stream(args.seed, args.events)
    print(f"generated {len(events):,} events in {time.perf_counter() - began:.1f} s (not measured)")
    mix = Counter(e.type.split(".")[1] + "." + e.type.split(".")[2] for e in events)
    print("mix: " + ", ".join(f"{k} {100 * v / len(events):.1f}%" for k, v in mix.most_common()))

    if not args.default_gc:
        tune_gc()  # as every Tephra process does (projector.heap)
        gc.collect()
        gc.freeze()  # the stream itself is long-lived input, not garbage
    print(f"gc thresholds {gc.get_threshold()}")
    gc.collect()
    state = ClusterState()
    began = time.perf_counter()
    invalid = 0
    for seq, event in enumerate(events, 1):
        if apply(state, seq, event).invalid is not None:
            invalid += 1
    fold_s = time.perf_counter() - began
    print(
        f"fold:          {len(events) / fold_s:>10,.0f} events/s  ({fold_s:.2f} s; {invalid} invalid;"
        f" final state {len(state.jobs):,} jobs, {len(state.tasks):,} tasks, {len(state.nodes)} nodes)"
    )

    raws = [encode(e) for e in events]
    began = time.perf_counter()
    decoded = [decode(raw) for raw in raws]
    decode_s = time.perf_counter() - began
    print(f"decode:        {len(events) / decode_s:>10,.0f} events/s  ({decode_s:.2f} s)")
    print(f"decode + fold: {len(events) / (decode_s + fold_s):>10,.0f} events/s")
    del decoded
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {peak_mb:,.0f} MiB (stream, its bytes and the state)")

    if args.profile:
        state = ClusterState()
        profiler = cProfile.Profile()
        profiler.enable()
        for seq, event in enumerate(events, 1):
            apply(state, seq, event)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
