"""Projector throughput: real broker -> PostgreSQL (decode, COPY, fold, hash, projection, offsets).

    python bench/projector.py [--events N] [--batch-size B] [--snapshot-every S] [--snapshot-scale K]
                              [--rounds R] [--profile]

Starts an embedded Tansu broker (or uses ``TEPHRA_BENCH_KAFKA``), uses
``TEPHRA_BENCH_DATABASE_URL`` (default: a fresh database on the local
server at postgresql://postgres@127.0.0.1:5432/postgres), produces N mixed
events to the three topics first, then runs the projector service in this
process and times it from start to the last committed offset.  Prints
events/s, the process's CPU time per event (steadier than wall time on a
shared machine), p50/p99/max batch latency, peak RSS during the run, and
with ``--profile`` the service's top functions.  ``--rounds R`` runs the
projector R times over the same topics (a fresh database each time) and
prints the median.  It prints the host's
reference figures first (bench/host.py): the same build's figures move by
up to 2x with the machine's state.  See docs/projector.md.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import os
import platform
import pstats
import resource
import secrets
import statistics
import sys
import time
from dataclasses import fields
from pathlib import Path
from typing import Final

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg

from api.embedded import EmbeddedBroker, create_topics
from bench.host import cpu_loop_seconds, memory_walk_seconds
from events.topics import Topics
from projector import compiled as projector_compiled
from projector.service import ProjectorConfig, ProjectorMetrics, run_projector, tune_gc
from tests.projector.helpers import create_database, drop_database, produce
from tests.projector.streams import CLUSTER, event_stream


def _reset_peak_rss() -> None:
    """Forget the generator's peak (Linux: VmHWM restarts from the current RSS)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass  # elsewhere the peak includes the stream generation


def _peak_rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _server_cpu_seconds(names: tuple[str, ...]) -> dict[str, float]:
    """CPU seconds used so far by the processes with these command names (Linux /proc).

    A server's exited children (PostgreSQL backends) are in their parent's
    cutime/cstime, so both are summed.
    """
    ticks = os.sysconf("SC_CLK_TCK")
    totals = dict.fromkeys(names, 0.0)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # exited meanwhile
        comm = text[text.index("(") + 1 : text.rindex(")")]
        if comm in totals:
            fields = text[text.rindex(")") + 2 :].split()
            totals[comm] += sum(int(v) for v in fields[11:15]) / ticks  # utime stime cutime cstime
    return totals


_SERVERS: Final = ("postgres", "tansu")


def _interpreter() -> str:
    """The CPython that runs the bench: its build moves the figures (docs/projector.md, twelfth
    session: a build without PGO and LTO, on a shared libpython, ran 10 % more instructions)."""
    try:
        shared: bool | None = "libpython" in Path("/proc/self/maps").read_text()
    except OSError:
        shared = None  # not Linux
    linkage = {True: "shared libpython", False: "static", None: "linkage unknown"}[shared]
    return f"{platform.python_implementation()} {platform.python_version()}, {sys.executable} ({linkage})"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _produce_stream(bootstrap: str, topics: Topics, args: argparse.Namespace) -> int:
    began = time.perf_counter()
    events = event_stream(args.seed, args.events)
    print(f"generated {len(events):,} events in {time.perf_counter() - began:.1f} s (not measured)")
    began = time.perf_counter()
    await produce(bootstrap, topics, events)
    print(f"produced in {time.perf_counter() - began:.1f} s (not measured)")
    # Measure the projector, not the generator: drop the stream (hundreds of MB
    # of models the projector's start-up gc.collect() would otherwise walk).
    produced = len(events)
    del events
    gc.collect()
    _reset_peak_rss()
    return produced


def _report(
    args: argparse.Namespace,
    metrics: ProjectorMetrics,
    *,
    elapsed: float,
    cpu: float,
    servers: dict[str, float],
    size: str,
    snapshots: list[int],
    sustained: float | None,
) -> None:
    """Print the figures (``sustained``: events/s from the first commit to the end)."""
    batches = list(metrics.batch_seconds)
    archived, rejected = metrics.events_archived, metrics.events_rejected
    per_event = 1e6 / max(archived, 1)
    p50, p99 = 1000 * _percentile(batches, 0.5), 1000 * _percentile(batches, 0.99)
    # Compiled by pip install (setup.py) or the sources (TEPHRA_COMPILE=0, or no C compiler).
    print(f"projector: {'compiled (mypyc)' if projector_compiled() else 'interpreted'}")
    print(f"python: {_interpreter()}")
    print(f"archived {archived:,} events (rejected {rejected}) in {elapsed:.2f} s")
    print(f"throughput: {archived / elapsed:,.0f} events/s (start-up and migrations included)")
    if sustained is not None:
        print(f"sustained: {sustained:,.0f} events/s (after the first commit)")
    # Less sensitive to other load on the machine than the wall clock.
    print(f"projector CPU (this process): {cpu:.2f} s, {cpu * per_event:.0f} us per event")
    for name, used in servers.items():
        print(f"{name} CPU (same machine): {used:.2f} s, {used * per_event:.0f} us per event")
    print(f"batches: {len(batches)} of <= {args.batch_size}; latency p50 {p50:.0f} ms, p99 {p99:.0f} ms,"
          f" max {1000 * max(batches):.0f} ms")  # fmt: skip
    print(f"peak RSS during the run: {_peak_rss_mb():,.0f} MiB (the bench process); database {size}")
    where = ", ".join(f"{seq:,}" for seq in snapshots) or "none"
    print(
        f"state snapshots: {len(snapshots)}, at seq {where} (every {args.snapshot_every:,} events,"
        f" scale {args.snapshot_scale})"
    )
    # Where the batch loop's wall time went; commit_wait is the loop idle, waiting for PostgreSQL.
    stages = ", ".join(f"{name} {seconds:.2f}" for name, seconds in metrics.stage_seconds.items())
    print(f"batch loop seconds: {stages}")


async def _bench(bootstrap: str, admin_dsn: str, args: argparse.Namespace) -> None:
    topics = Topics(prefix=f"bench-{secrets.token_hex(4)}")
    await create_topics(bootstrap, topics.all(), partitions=1)
    produced = await _produce_stream(bootstrap, topics, args)
    rounds: list[tuple[float | None, float]] = []
    for number in range(1, args.rounds + 1):
        if args.rounds > 1:
            print(f"-- round {number} of {args.rounds}")
            _reset_peak_rss()
        rounds.append(await _round(bootstrap, admin_dsn, topics, produced, args))
    if args.rounds > 1:
        # One figure from several: the machine moves between runs a minute apart (docs/projector.md).
        sustained = sorted(r[0] for r in rounds if r[0] is not None)
        per_event = sorted(r[1] for r in rounds)
        print(
            f"rounds: sustained events/s {', '.join(f'{v:,.0f}' for v in sustained)}"
            f" (median {statistics.median(sustained):,.0f});"
            f" projector us/event median {statistics.median(per_event):.0f}"
        )


async def _round(
    bootstrap: str, admin_dsn: str, topics: Topics, produced: int, args: argparse.Namespace
) -> tuple[float | None, float]:
    """One projector run over the topics into a fresh database: (sustained events/s, CPU us/event)."""
    dsn = await create_database(admin_dsn)
    try:
        metrics = ProjectorMetrics()
        stop = asyncio.Event()
        config = ProjectorConfig(
            bootstrap=bootstrap, dsn=dsn, topics=topics, cluster=CLUSTER,
            batch_size=args.batch_size, snapshot_every=args.snapshot_every,
            snapshot_scale=args.snapshot_scale,
            freeze_state=not args.default_gc,
            freeze_batches=not (args.default_gc or args.no_freeze_batches),
            thaw_growth=args.thaw_growth,
        )  # fmt: skip
        if not args.default_gc:
            tune_gc()
        profiler = cProfile.Profile() if args.profile else None
        began = time.perf_counter()
        cpu_began = time.process_time()
        servers_began = _server_cpu_seconds(_SERVERS)
        if profiler:
            profiler.enable()
        task = asyncio.create_task(run_projector(config, stop=stop, metrics=metrics))
        first_batch: tuple[float, int] | None = None  # (when, events) once the first batch landed
        while metrics.events_archived + metrics.events_rejected < produced:
            if task.done():
                task.result()
            if first_batch is None and metrics.batches:
                first_batch = (time.perf_counter(), metrics.events_archived)
            await asyncio.sleep(0.02)
        finished = time.perf_counter()
        elapsed = finished - began
        cpu = time.process_time() - cpu_began
        servers = _server_cpu_seconds(_SERVERS)
        if profiler:
            profiler.disable()
        stop.set()
        await task
        conn = await asyncpg.connect(dsn)
        try:
            size = await conn.fetchval("SELECT pg_size_pretty(pg_database_size(current_database()))")
            stored = await conn.fetch("SELECT seq FROM state_snapshots ORDER BY seq")
        finally:
            await conn.close()
        sustained = None
        if first_batch is not None and metrics.events_archived > first_batch[1]:
            # The sustained rate: without start-up, migrations and filling the pipeline.
            sustained = (metrics.events_archived - first_batch[1]) / (finished - first_batch[0])
        _report(
            args, metrics, elapsed=elapsed, cpu=cpu, size=size, snapshots=[r["seq"] for r in stored],
            servers={name: servers[name] - servers_began[name] for name in _SERVERS},
            sustained=sustained,
        )  # fmt: skip
        if profiler:
            pstats.Stats(profiler).sort_stats(args.sort).print_stats(25)
    finally:
        await drop_database(admin_dsn, dsn)
    return sustained, cpu * 1e6 / max(metrics.events_archived, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--batch-size", type=int, default=5_000)
    parser.add_argument("--snapshot-every", type=int, default=50_000)
    parser.add_argument(
        "--snapshot-scale",
        type=float,
        default=next(f.default for f in fields(ProjectorConfig) if f.name == "snapshot_scale"),
        help="the service's default; 0 for a snapshot at every multiple of --snapshot-every (compare)",
    )
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="projector runs over the same produced topics, each into a fresh database; prints the median",
    )
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--default-gc", action="store_true", help="keep CPython's GC thresholds (compare)")
    parser.add_argument(
        "--no-freeze-batches", action="store_true", help="leave the collector on during batches (compare)"
    )
    parser.add_argument(
        "--thaw-growth",
        type=float,
        default=next(f.default for f in fields(ProjectorConfig) if f.name == "thaw_growth"),
        help="see projector.heap (compare)",
    )
    parser.add_argument("--sort", default="tottime", help="profile order: tottime or cumulative")
    args = parser.parse_args()
    # The machine's speed moves between sessions: figures compare only next to these.
    print(
        f"host reference: integer loop {cpu_loop_seconds():.2f} s, dict walk {memory_walk_seconds():.2f} s"
        " (bench/host.py; not measured)"
    )
    admin_dsn = os.environ.get("TEPHRA_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    external = os.environ.get("TEPHRA_BENCH_KAFKA")
    if external:
        asyncio.run(_bench(external, admin_dsn, args))
        return
    with EmbeddedBroker() as broker:
        asyncio.run(_bench(broker.bootstrap, admin_dsn, args))


if __name__ == "__main__":
    main()
