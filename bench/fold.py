"""Fold throughput over a steady state: decode and the pure fold (default 1,000,000 events).

    python bench/fold.py [--events N] [--warmup W] [--live-jobs J] [--step-ms MS] [--seed S] [--profile]

The stream (tests/projector/streams.py) is generated in chunks as the fold
goes, so memory holds the states, not the stream.  By default it is steady:
at most ``--live-jobs`` unfinished jobs (10,000), ``--step-ms`` of event time
between events (100 ms), so finished jobs retire after the default TTL of an
hour, 36,000 events later (projector.fold, retention).  ``--live-jobs 0
--step-ms 1`` gives the unbounded stream of earlier versions.

The first ``--warmup`` events (200,000) are folded untimed: the steady
stream reaches its cap of live jobs after ~90k events and its first
retirements ~36k events after its first jobs finish, so the timed events
all fold into a state of steady size.  Prints the state's sizes after the
warm-up and at the end (load-independent), the fold rate (wall and CPU
time) over the first 100k timed events, the last 100k and all of them,
peak RSS after the first 100k timed events and at the end (the generator's
shadow state is as large as the folded one), and the decode rate over the
first chunk.  ``--profile`` prints the fold's top functions over the first
100k timed events.
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

from events.models import Event
from events.serde import decode, encode
from projector.fold import apply
from projector.heap import tune_gc
from projector.state import ClusterState
from tests.projector.streams import StreamBuilder

_WINDOW = 100_000
_CHUNK = 10_000


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def fold(state: ClusterState, events: list[Event]) -> int:
    """Fold ``events`` into ``state``; how many it refused."""
    refused = 0
    for event in events:
        if apply(state, state.seq + 1, event).invalid is not None:
            refused += 1
    return refused


def sizes(state: ClusterState) -> str:
    live = sum(1 for j in state.jobs.values() if j.finished_at is None)
    return (
        f"{len(state.jobs):,} jobs ({live:,} unfinished, {len(state.retiring):,} awaiting"
        f" retirement), {len(state.tasks):,} tasks, {len(state.nodes)} nodes, {len(state.sessions)} sessions,"
        f" {len(state.session_parts)} buffered session parts,"
        f" {len(state.early_observations)} early-observation jobs; clock {state.clock.isoformat()}"
    )


def main() -> None:  # noqa: PLR0915 - one report
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000, help="events timed, after the warm-up")
    parser.add_argument("--warmup", type=int, default=200_000, help="events folded first, untimed")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--live-jobs", type=int, default=10_000, help="cap of unfinished jobs (0: none)")
    parser.add_argument("--step-ms", type=int, default=100, help="event time between two events")
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--default-gc", action="store_true", help="keep CPython's GC thresholds (compare)")
    args = parser.parse_args()
    if args.warmup % _CHUNK:
        parser.error(f"--warmup must be a multiple of {_CHUNK:,}")

    if not args.default_gc:
        tune_gc()
    print(f"gc thresholds {gc.get_threshold()}")
    builder = StreamBuilder(
        args.seed, live_jobs=args.live_jobs or None, step_ms=args.step_ms, nodes=args.nodes
    )
    state = ClusterState()
    mix: Counter[str] = Counter()
    # (events, wall s, cpu s) per chunk
    timings: list[tuple[int, float, float]] = []
    generated_s = 0.0
    invalid = 0
    rss_at_window = 0.0
    decode_line = ""
    profiler = cProfile.Profile() if args.profile else None
    began = time.perf_counter()
    stream = builder.chunks(args.warmup + args.events, _CHUNK)
    for _ in range(args.warmup // _CHUNK):
        invalid += fold(state, next(stream))
    if args.warmup:
        print(f"after a warm-up of {args.warmup:,} events: {sizes(state)}")
    while True:
        started = time.perf_counter()
        chunk = next(stream, None)
        generated_s += time.perf_counter() - started
        if chunk is None:
            break
        mix.update(e.type.split(".")[1] + "." + e.type.split(".")[2] for e in chunk)
        if not decode_line:
            raws = [encode(e) for e in chunk]
            started = time.perf_counter()
            for raw in raws:
                decode(raw)
            decode_line = (
                f"decode:  {len(raws) / (time.perf_counter() - started):>10,.0f} events/s (first chunk)"
            )
        if profiler is not None and sum(n for n, _, _ in timings) < _WINDOW:
            profiler.enable()
        wall, cpu = time.perf_counter(), time.process_time()
        invalid += fold(state, chunk)
        timings.append((len(chunk), time.perf_counter() - wall, time.process_time() - cpu))
        if profiler is not None:
            profiler.disable()
        if not rss_at_window and sum(n for n, _, _ in timings) >= _WINDOW:
            rss_at_window = peak_mib()
    total = sum(n for n, _, _ in timings)
    print(
        f"{total:,} events ({invalid} invalid), generated in {generated_s:.0f} s (not measured),"
        f" run {time.perf_counter() - began:.0f} s"
    )
    print("mix: " + ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in mix.most_common()))

    def rate(part: list[tuple[int, float, float]]) -> str:
        n = sum(c for c, _, _ in part)
        wall = sum(w for _, w, _ in part)
        cpu = sum(c for _, _, c in part)
        return f"{n / wall:>10,.0f} events/s wall, {1e6 * cpu / n:6.1f} us CPU/event over {n:,}"

    window = _WINDOW // _CHUNK
    print(f"fold, first 100k: {rate(timings[:window])}")
    print(f"fold, last 100k:  {rate(timings[-window:])}")
    print(f"fold, whole run:  {rate(timings)}")
    print(decode_line)
    print(
        f"peak RSS: {rss_at_window:,.0f} MiB after 100k timed events, {peak_mib():,.0f} MiB at the end"
        " (the folded state and the generator's shadow of it)"
    )
    print(f"final state: {sizes(state)}")
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
