"""A big backlog under steady submissions: session time, memory and archive bytes per session.

    python bench/backlog.py [--jobs N] [--nodes M] [--rate R] [--seconds S] [--period P]

Runs the deployed runners in their own processes (``tephra projector``,
``tephra scheduler``, started as bench/e2e.py starts them) on the embedded
broker and PostgreSQL.  ``--nodes`` nodes (64 cpu, 110 pods each) and
``--jobs`` single-task jobs of 8 cpu are projected first, so 8 jobs run on
each node and the rest wait; then the scheduler starts, and ``--rate`` more
jobs per second are submitted for ``--seconds``: every session sees new
input, so none is skipped, and each one considers the whole backlog.  With
``--cancel`` each submission comes with the cancellation of a pending backlog
job (the newest first), so the backlog keeps its size and the services' RSS
should stay flat; without it the backlog (and the state) grows by the rate.

It prints, asserting nothing:

* the live sessions' time (snapshot read, compute: snapshot, core and
  reasons, publish, and the wait until the projector folded it), p50 / p99 /
  max over the steady phase, and each phase's p50 / p90 / max;
* the RSS of the scheduler and the projector over time (``/proc/<pid>``), and
  its growth from the end of the first minute of the steady phase to the end;
* the CPU seconds each service used per live session (``/proc/<pid>/stat``):
  steadier than the wall clock on a shared machine;
* the bytes archived per session (``event_log.data`` of its SessionCommitted
  and SessionParts): p50 / p99 / max over all sessions and over those after
  the term's first (which carries the whole pending list), and of its
  ``sessions`` row.

Goal (issue 22): 100k pending jobs on 1,000 nodes, 1 s period: p99 <= 2 s,
RSS flat within 10 %, bytes per session bounded.  For a quick look:
``python bench/backlog.py --jobs 5000 --nodes 100 --seconds 60``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import secrets
import statistics
import sys
import time
from pathlib import Path
from typing import Final

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's packages, whatever is installed

import asyncpg
from aiokafka import AIOKafkaProducer

from api.embedded import create_topics
from bench.e2e import (
    _cluster_events,
    _database,
    _envelope,
    _job,
    _leader_at,
    _percentile,
    _phase_figures,
    _produce,
    _projector,
    _scheduler,
    _wait_count,
    servers,
)
from bench.host import cpu_loop_seconds, memory_walk_seconds
from bench.projector_throughput import _child_cpu, memory_mb
from events.models import Event, JobCancelled, JobCancelledData
from events.topics import Topics

#: Each job asks for 8 of a node's 64 cpu: 8 run per node, the rest of the backlog waits.
_JOB_CPU: Final = "8"
_RUNNING_PER_NODE: Final = 8
#: RSS growth is measured from this far into the steady phase (past the first sessions' ramp),
#: or from a quarter of a shorter one.
_WARM: Final = 60.0

_SESSION_TYPES: Final = ("tephra.session.committed.v1", "tephra.session.part.v1")
_BYTES_PER_SESSION: Final = """
SELECT coalesce(data ->> 'session_id', '') AS session_id, count(*) AS events,
       sum(octet_length(data::text)) AS bytes, min(seq) AS first_seq
  FROM event_log WHERE type = ANY($1::text[]) GROUP BY 1 ORDER BY first_seq
"""


async def _submit_backlog(producer: AIOKafkaProducer, topics: Topics, jobs: int) -> None:
    chunk = 10_000
    for start in range(0, jobs, chunk):
        batch = [_job(f"backlog-{i:07d}", 1, _JOB_CPU) for i in range(start, min(jobs, start + chunk))]
        await _produce(producer, topics, batch)


async def _steady(
    producer: AIOKafkaProducer, topics: Topics, opts: argparse.Namespace, pids: dict[str, int]
) -> list[tuple[float, dict[str, float]]]:
    """Submit ``--rate`` jobs/s for ``--seconds``; every ``--sample`` seconds, each service's RSS."""
    began = time.monotonic()
    samples: list[tuple[float, dict[str, float]]] = []
    submitted = 0
    next_sample = 0.0
    while (elapsed := time.monotonic() - began) < opts.seconds:
        due = int(elapsed * opts.rate) + 1
        if due > submitted:
            events: list[Event] = [_job(f"steady-{i:07d}", 1, _JOB_CPU) for i in range(submitted, due)]
            if opts.cancel:
                events.extend(_cancel(opts.jobs - 1 - i) for i in range(submitted, min(due, opts.jobs)))
            await _produce(producer, topics, events)
            submitted = due
        if elapsed >= next_sample:
            samples.append((elapsed, {name: memory_mb(pid) for name, pid in pids.items()}))
            next_sample += opts.sample
        await asyncio.sleep(max(0.0, (submitted / opts.rate) - (time.monotonic() - began)))
    samples.append((time.monotonic() - began, {name: memory_mb(pid) for name, pid in pids.items()}))
    return samples


def _cancel(index: int) -> JobCancelled:
    """The cancellation of backlog job ``index`` (the newest first: they are the ones still pending)."""
    name = f"backlog-{index:07d}"
    return JobCancelled(
        data=JobCancelledData(job_id=f"bench/{name}", reason="bench: the backlog keeps its size"),
        **_envelope(f"job/bench/{name}"),
    )


async def _session_times(conn: asyncpg.Connection, after_session: str | None) -> list[float]:
    rows = await conn.fetch(
        "SELECT read_seconds + compute_seconds + publish_seconds + apply_seconds AS total"
        " FROM scheduler_session_timings WHERE recorded_at > coalesce("
        " (SELECT recorded_at FROM scheduler_session_timings WHERE session_id = $1), '-infinity')"
        " ORDER BY recorded_at",
        after_session,
    )
    return [float(r["total"]) for r in rows]


async def _archive_figures(conn: asyncpg.Connection) -> str:
    rows = await conn.fetch(_BYTES_PER_SESSION, list(_SESSION_TYPES))
    if not rows:
        return "no sessions archived"
    sizes = [int(r["bytes"]) for r in rows]
    events = [int(r["events"]) for r in rows]
    row_sizes = [int(r[0]) for r in await conn.fetch("SELECT octet_length(doc::text) FROM sessions")]
    mib = 1024 * 1024
    # The term's first session carries the whole pending list; every later one a change and a slice.
    later = sizes[1:] or sizes
    return (
        f"archived per session (SessionCommitted + parts, {len(sizes)} sessions):"
        f" p50 {_percentile(sizes, 0.5) / mib:.3f} MiB, p99 {_percentile(sizes, 0.99) / mib:.3f} MiB,"
        f" max {max(sizes) / mib:.3f} MiB, total {sum(sizes) / mib:.1f} MiB;"
        f" events per session max {max(events)}\n"
        f"  after the term's first session ({sizes[0] / mib:.3f} MiB, the whole list):"
        f" p50 {_percentile(later, 0.5) / mib:.3f} MiB, p99 {_percentile(later, 0.99) / mib:.3f} MiB,"
        f" max {max(later) / mib:.3f} MiB\n"
        f"  sessions rows (the projection's doc): p50 {_percentile(row_sizes, 0.5) / mib:.3f} MiB,"
        f" max {max(row_sizes) / mib:.3f} MiB"
    )


def _print_memory(samples: list[tuple[float, dict[str, float]]], seconds: float) -> None:
    names = sorted(samples[0][1])
    print("  RSS MiB over the steady phase: t(s) " + " ".join(f"{n:>10}" for n in names))
    for at, rss in samples:
        print(f"    {at:8.0f} " + " ".join(f"{rss[n]:10.0f}" for n in names))
    warm = next(((at, rss) for at, rss in samples if at >= min(_WARM, seconds / 4)), samples[0])
    end = samples[-1][1]
    growth = ", ".join(f"{n} {100 * (end[n] - warm[1][n]) / warm[1][n]:+.1f} %" for n in names)
    print(f"  RSS growth from t={warm[0]:.0f} s to the end: {growth} (goal: within 10 %)")


async def backlog(bootstrap: str, admin_dsn: str, logs: Path, opts: argparse.Namespace) -> None:
    topics = Topics(prefix=f"bench-{secrets.token_hex(4)}")
    await create_topics(bootstrap, topics.all(), partitions=1)
    async with (
        _database(admin_dsn) as dsn,
        _projector(bootstrap, dsn, topics, logs / "backlog-projector.log") as projector,
    ):
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, acks="all", linger_ms=5, max_request_size=16 * 1024 * 1024
        )
        await producer.start()
        conn = await asyncpg.connect(dsn)
        try:
            began = time.perf_counter()
            await _produce(producer, topics, _cluster_events(opts.nodes))
            await _submit_backlog(producer, topics, opts.jobs)
            projected = await _wait_count(conn, "SELECT count(*) FROM jobs", opts.jobs, 1800)
            if projected < opts.jobs:
                raise RuntimeError(f"only {projected}/{opts.jobs} jobs were projected")
            took = time.perf_counter() - began
            print(f"backlog: {opts.jobs:,} jobs on {opts.nodes:,} nodes projected in {took:.0f} s")
            async with _scheduler(
                bootstrap, dsn, topics, opts.period, logs / "backlog-scheduler.log"
            ) as sched:
                led = await _leader_at(sched)
                # The first sessions bind what fits; the steady phase starts once they are applied.
                running = min(opts.jobs, opts.nodes * _RUNNING_PER_NODE)
                await _wait_count(conn, "SELECT count(*) FROM bindings", running, 1800)
                ramp = await conn.fetchval(
                    "SELECT session_id FROM scheduler_session_timings ORDER BY recorded_at DESC LIMIT 1"
                )
                since = time.time() - led
                print(f"  {running:,} jobs bound {since:.0f} s after leadership; steady phase begins")
                pids = {"scheduler": sched.pid, "projector": projector.pid}
                cpu_before = {name: _child_cpu(pid) for name, pid in pids.items()}
                samples = await _steady(producer, topics, opts, pids)
                cpu = {name: _child_cpu(pid) - cpu_before[name] for name, pid in pids.items()}
                times = await _session_times(conn, ramp)
                phases = await _phase_figures(conn)
                archive = await _archive_figures(conn)
        finally:
            await conn.close()
            await producer.stop()
    pending = opts.jobs - running
    kept = " (as many cancelled: the backlog keeps its size)" if opts.cancel else ""
    print(f"steady phase: {opts.rate:g} jobs/s for {opts.seconds:g} s over {pending:,}+ pending jobs{kept}")
    if times:
        print(
            f"  live sessions: {len(times)}; seconds p50 {statistics.median(times):.3f},"
            f" p99 {_percentile(times, 0.99):.3f}, max {max(times):.3f} (goal: p99 <= 2 s)"
        )
        per_session = ", ".join(f"{name} {used / len(times):.2f} s" for name, used in sorted(cpu.items()))
        print(f"  CPU per live session: {per_session}")
    else:
        print("  no session recorded in the steady phase")
    print(f"  per session p50/p90/max ms (all sessions): {phases}")
    _print_memory(samples, opts.seconds)
    print(f"  {archive}")


async def main(opts: argparse.Namespace) -> None:
    print(
        f"host reference: integer loop {cpu_loop_seconds():.2f} s, dict walk {memory_walk_seconds():.2f} s"
        " (bench/host.py; not measured)"
    )
    with servers(opts.logs) as (postgres, broker, logs):
        await backlog(broker.bootstrap, postgres.dsn, logs, opts)


def _options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--jobs", type=int, default=100_000, help="jobs submitted before the scheduler starts"
    )
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--rate", type=float, default=2.0, help="submissions per second in the steady phase")
    parser.add_argument("--seconds", type=float, default=600.0, help="how long the steady phase lasts")
    parser.add_argument("--period", type=float, default=1.0, help="TEPHRA_SCHEDULE_PERIOD of the scheduler")
    parser.add_argument("--sample", type=float, default=30.0, help="seconds between two RSS samples")
    parser.add_argument(
        "--cancel",
        action="store_true",
        help="cancel one pending backlog job per submission: the backlog keeps its size, so RSS growth"
        " is not the state's",
    )
    parser.add_argument("--logs", default="", help="keep the services' logs in this directory")
    return parser.parse_args()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(_options()))
