"""Projector throughput of the deployed runner: ``tephra projector`` in its own process, broker -> PostgreSQL.

    python bench/projector_throughput.py [--events N] [--rounds R] [--seed S] [--live-jobs J] [--step-ms MS]

Starts an embedded Tansu broker (or uses ``TEPHRA_BENCH_KAFKA``), uses
``TEPHRA_BENCH_DATABASE_URL`` (default: a fresh database on the local
server at postgresql://postgres@127.0.0.1:5432/postgres), produces N mixed
events to the three topics first (the steady stream of bench/fold.py by
default: at most ``--live-jobs`` unfinished jobs, 10,000, and ``--step-ms``
of event time between events, 100 ms, so finished jobs retire after the
default TTL of an hour; ``--live-jobs 0 --step-ms 1`` gives the unbounded
stream, whose state grows with every job), then starts ``tephra projector`` as a child
process, exactly as compose.yaml runs it: its endpoints in ``TEPHRA_*``
variables, every other setting at its default unless this bench's own
environment sets it (e.g. ``TEPHRA_PROJECTOR_FREEZE=false`` to compare; see
docs/configuration.md).  Everything is measured from outside the child:

* progress: the offsets the projector committed (``consumer_offsets``), polled;
* throughput from the child's start, and sustained from its first commit,
  and over the first and the last 100k events of a longer run;
* the child's CPU time per event and its peak RSS (``/proc/<pid>``), and the
  CPU the PostgreSQL server (and the embedded broker) used meanwhile;
* the batch latencies and the batch loop's stages from the projector's own
  metrics line, which it logs when it stops.

``--rounds R`` runs the projector R times over the same topics (a fresh
database each time) and prints the median.  It prints the host's reference
figures first (bench/host.py): the same build's figures move by up to 2x
with the machine's state.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import secrets
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's packages, whatever is installed

import asyncpg

from api.embedded import EmbeddedBroker, create_topics
from bench.host import cpu_loop_seconds, memory_walk_seconds
from events.topics import Topics
from projector import compiled as projector_compiled
from projector.migrate import apply_migrations
from tests.projector.helpers import create_database, drop_database, produce
from tests.projector.streams import CLUSTER, StreamBuilder

ROOT = Path(__file__).resolve().parents[1]
#: The deployed runner: the ``tephra`` console script's own entry point.
RUNNER: Final = (sys.executable, "-m", "api.cli", "projector")
_ENDPOINTS: Final = (
    "TEPHRA_KAFKA_BOOTSTRAP",
    "TEPHRA_DATABASE_URL",
    "TEPHRA_TOPICS_PREFIX",
    "TEPHRA_CLUSTER",
)
_POLL: Final = 0.1
#: The windows compared in a long run: events 100k-200k (past the ramp to the steady state), the last 100k.
_WINDOW: Final = 100_000
_FINAL_METRICS: Final = "projector stopped; metrics "
_TICKS: Final = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(stat: str) -> tuple[float, float]:
    """(own, children's) CPU seconds from a /proc/<pid>/stat line."""
    fields = stat[stat.rindex(")") + 2 :].split()
    own = (int(fields[11]) + int(fields[12])) / _TICKS  # utime stime
    return own, (int(fields[13]) + int(fields[14])) / _TICKS  # cutime cstime


def _child_cpu(pid: int) -> float:
    return _cpu_seconds(Path(f"/proc/{pid}/stat").read_text())[0]


def _child_peak_rss_mb(pid: int) -> float:
    return memory_mb(pid, "VmHWM")


def memory_mb(pid: int, field: str = "VmRSS") -> float:
    """A memory figure of a live process from /proc/<pid>/status (VmRSS: now, VmHWM: its peak), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of a server so far: its own, its exited children's (PostgreSQL's ended backends)
    and its live children's."""
    total = sum(_cpu_seconds(Path(f"/proc/{pid}/stat").read_text()))
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # exited meanwhile
        if int(text[text.rindex(")") + 2 :].split()[1]) == pid:  # its parent
            total += _cpu_seconds(text)[0]
    return total


def _parent(pid: int) -> int:
    text = Path(f"/proc/{pid}/stat").read_text()
    return int(text[text.rindex(")") + 2 :].split()[1])


def _servers(pids: dict[str, int]) -> dict[str, float]:
    return {name: _tree_cpu_seconds(pid) for name, pid in pids.items()}


def _interpreter() -> str:
    """The CPython that runs the projector: its build moves the figures (a build without PGO
    and LTO, on a shared libpython, ran 10 % more instructions)."""
    try:
        shared: bool | None = "libpython" in Path("/proc/self/maps").read_text()
    except OSError:
        shared = None  # not Linux
    linkage = {True: "shared libpython", False: "static", None: "linkage unknown"}[shared]
    return f"{platform.python_implementation()} {platform.python_version()}, {sys.executable} ({linkage})"


def _settings_given() -> dict[str, str]:
    """The TEPHRA_* settings this bench's environment passes on (the rest are the defaults)."""
    return {
        name: value
        for name, value in sorted(os.environ.items())
        if name.startswith("TEPHRA_") and not name.startswith("TEPHRA_BENCH_") and name not in _ENDPOINTS
    }


async def _produce_stream(bootstrap: str, topics: Topics, args: argparse.Namespace) -> int:
    began = time.perf_counter()
    steady = {"live_jobs": args.live_jobs, "step_ms": args.step_ms} if args.live_jobs else {}
    builder = StreamBuilder(args.seed, **steady)  # type: ignore[arg-type]
    produced = 0
    # In chunks: the broker holds the stream, this process one chunk of it.
    for chunk in builder.chunks(args.events, 50_000):
        await produce(bootstrap, topics, chunk)
        produced += len(chunk)
    shape = f"steady, <= {args.live_jobs:,} live jobs, {args.step_ms} ms apart" if steady else "unbounded"
    print(f"generated and produced {produced:,} events ({shape}) in {time.perf_counter() - began:.1f} s")
    gc.collect()
    return produced


async def _consumed(conn: asyncpg.Connection) -> int:
    """Records the projector has committed, rejected ones included (0 before its migrations ran)."""
    try:
        return int(await conn.fetchval("SELECT coalesce(sum(next_offset), 0) FROM consumer_offsets"))
    except asyncpg.UndefinedTableError:
        return 0


async def _read_skew(conn: asyncpg.Connection) -> float:
    """Seconds of event time between the topic roles read furthest ahead and furthest behind
    (projection_meta's role clocks; 0 until each role has been read)."""
    try:
        skew = await conn.fetchval(
            "SELECT extract(epoch FROM greatest(intents_clock, observations_clock, decisions_clock)"
            " - least(intents_clock, observations_clock, decisions_clock)) FROM projection_meta"
        )
    except (asyncpg.UndefinedTableError, asyncpg.UndefinedColumnError):
        return 0.0
    return 0.0 if skew is None else float(skew)


@dataclass(frozen=True)
class _Mark:
    """One observation of the child: when, how far it had got, its CPU seconds, the read skew."""

    at: float
    consumed: int
    cpu: float
    skew: float


async def _bench(bootstrap: str, admin_dsn: str, broker_pid: int | None, args: argparse.Namespace) -> None:
    topics = Topics(prefix=f"bench-{secrets.token_hex(4)}")
    await create_topics(bootstrap, topics.all(), partitions=1)
    produced = await _produce_stream(bootstrap, topics, args)
    print(f"projector: {'compiled (mypyc)' if projector_compiled() else 'interpreted'}")
    print(f"python: {_interpreter()}")
    given = _settings_given()
    print(f"runner: tephra projector; settings: {given or 'all defaults (docs/configuration.md)'}")
    rounds: list[tuple[float | None, float]] = []
    for number in range(1, args.rounds + 1):
        if args.rounds > 1:
            print(f"-- round {number} of {args.rounds}")
        rounds.append(await _round(bootstrap, admin_dsn, broker_pid, topics, produced))
    if args.rounds > 1:
        # One figure from several: the machine moves between runs a minute apart.
        sustained = sorted(r[0] for r in rounds if r[0] is not None)
        per_event = sorted(r[1] for r in rounds)
        print(
            f"rounds: sustained events/s {', '.join(f'{v:,.0f}' for v in sustained)}"
            f" (median {statistics.median(sustained):,.0f});"
            f" projector us/event median {statistics.median(per_event):.0f}"
        )


async def _migrated_database(admin_dsn: str) -> str:
    """A fresh database, migrated as `tephra migrate` does before a deployment's runner starts."""
    dsn = await create_database(admin_dsn)
    conn = await asyncpg.connect(dsn)
    try:
        await apply_migrations(conn)
    finally:
        await conn.close()
    return dsn


async def _round(
    bootstrap: str, admin_dsn: str, broker_pid: int | None, topics: Topics, produced: int
) -> tuple[float | None, float]:
    """One run of the runner over the topics into a fresh database: (sustained events/s, CPU us/event)."""
    dsn = await _migrated_database(admin_dsn)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OTEL_SDK_DISABLED": "true",
        "TEPHRA_KAFKA_BOOTSTRAP": bootstrap,
        "TEPHRA_DATABASE_URL": dsn,
        "TEPHRA_TOPICS_PREFIX": topics.prefix,
        "TEPHRA_CLUSTER": CLUSTER,
        # The test stream is unsigned and older than leadership events (tests/projector/streams.py).
        "TEPHRA_ALLOW_UNSIGNED_INTENTS": "true",
        "TEPHRA_ALLOW_UNSIGNED_OBSERVATIONS": "true",
        "TEPHRA_ALLOW_LEADERLESS_SESSIONS": "true",
    }
    conn = await asyncpg.connect(dsn)
    # The PostgreSQL server that holds the database: the parent of our backend (on this machine).
    postmaster = _parent(int(await conn.fetchval("SELECT pg_backend_pid()")))
    pids = {"postgres": postmaster} | ({"tansu": broker_pid} if broker_pid is not None else {})
    try:
        with tempfile.NamedTemporaryFile(prefix="projector-", suffix=".log") as log:
            servers_began = _servers(pids)
            began = time.perf_counter()
            child = await asyncio.create_subprocess_exec(*RUNNER, env=env, cwd=ROOT, stdout=log, stderr=log)
            try:
                marks = await _follow(child, conn, produced, began)
                peak_rss = _child_peak_rss_mb(child.pid)
            finally:
                if child.returncode is None:
                    child.send_signal(signal.SIGTERM)
                    await child.wait()
            servers = _servers(pids)
            log.seek(0)
            output = log.read().decode(errors="replace")
        if child.returncode != 0:
            raise RuntimeError(f"tephra projector exited with {child.returncode}:\n{output[-3000:]}")
        archived = int(await conn.fetchval("SELECT count(*) FROM event_log"))
        rejected = int(await conn.fetchval("SELECT count(*) FROM rejected_events"))
        size = await conn.fetchval("SELECT pg_size_pretty(pg_database_size(current_database()))")
        state_lines = await _state_lines(conn, marks)
    finally:
        await conn.close()
        await drop_database(admin_dsn, dsn)
    first, last = _first_commit(marks), marks[-1]
    elapsed = last.at - began
    per_event = 1e6 / max(last.consumed, 1)
    print(f"archived {archived:,} events (rejected {rejected}) in {elapsed:.2f} s")
    print(f"throughput: {last.consumed / elapsed:,.0f} events/s (process start and migrations included)")
    sustained = cpu_us = None
    if first is not None and last.consumed > first.consumed:
        sustained = (last.consumed - first.consumed) / (last.at - first.at)
        cpu_us = 1e6 * (last.cpu - first.cpu) / (last.consumed - first.consumed)
        print(f"sustained: {sustained:,.0f} events/s (after the first commit)")
    _print_windows(marks)
    # CPU time holds up better than the wall clock on a shared machine.
    cpu_after = f", {cpu_us:.0f} us per event after the first commit" if cpu_us is not None else ""
    print(
        f"projector CPU (its process): {last.cpu:.2f} s, {last.cpu * per_event:.0f} us per event{cpu_after}"
    )
    for name, total in servers.items():
        used = total - servers_began[name]
        print(f"{name} CPU (its server, all its clients): {used:.2f} s, {used * per_event:.0f} us per event")
    print(f"projector peak RSS: {peak_rss:,.0f} MiB; database {size}")
    print(state_lines)
    _print_own_metrics(output)
    return sustained, cpu_us if cpu_us is not None else last.cpu * per_event


async def _state_lines(conn: asyncpg.Connection, marks: list[_Mark]) -> str:
    """The snapshots taken, how far apart in event time the runner read the three topics, and
    the state at the end."""
    snapshots = [r["seq"] for r in await conn.fetch("SELECT seq FROM state_snapshots ORDER BY seq")]
    jobs = int(await conn.fetchval("SELECT count(*) FROM jobs"))
    expired = await conn.fetch("SELECT code, count(*) FROM expired_buffers GROUP BY code ORDER BY code")
    most = max(marks, key=lambda m: m.skew)
    return (
        f"state snapshots: {len(snapshots)}, at seq {', '.join(f'{seq:,}' for seq in snapshots) or 'none'}\n"
        f"read skew between the topics: at most {most.skew / 3600:.1f} h of event time"
        f" (at {most.consumed:,} records); jobs in the state at the end: {jobs:,};"
        f" expired buffers: {', '.join(f'{r[0]} {r[1]:,}' for r in expired) or 'none'}"
    )


def _print_own_metrics(log: str) -> None:
    """Batch latencies and the batch loop's stages: in-process figures the projector logs as it stops."""
    final = [line for line in log.splitlines() if _FINAL_METRICS in line]
    if not final:
        print("the projector logged no final metrics (TEPHRA_LOG_LEVEL above INFO?)")
        return
    metrics = json.loads(final[-1].split(_FINAL_METRICS, 1)[1])
    latency = metrics.get("batch_seconds_p50_p99_max")
    if latency:
        p50, p99, worst = (1000 * v for v in latency)
        print(
            f"batches: {metrics['batches']}; latency p50 {p50:.0f} ms, p99 {p99:.0f} ms, max {worst:.0f} ms"
        )
    # Where the batch loop's wall time went; commit_wait is the loop idle, waiting for PostgreSQL.
    stages = ", ".join(f"{name} {seconds:.2f}" for name, seconds in metrics["stage_seconds"].items())
    print(f"batch loop seconds: {stages}; heap thaws {metrics['heap_thaws']}")


def _first_commit(marks: list[_Mark]) -> _Mark | None:
    """The first observation after a commit, unless that commit was the whole stream."""
    first = next((m for m in marks if m.consumed), None)
    return first if first is not None and first.consumed < marks[-1].consumed else None


def _print_windows(marks: list[_Mark]) -> None:
    """Does the rate hold as history grows?  (With the default stream the state is steady.)"""
    end = marks[-1].consumed
    if end < 3 * _WINDOW:
        return
    early, late = _window(marks, _WINDOW, 2 * _WINDOW), _window(marks, end - _WINDOW, end)
    print(
        f"events {_WINDOW:,}-{2 * _WINDOW:,}: {early:,.0f} events/s;"
        f" the last {_WINDOW:,}: {late:,.0f} events/s"
    )


def _window(marks: list[_Mark], start: int, end: int) -> float:
    """Events/s between the first observations at or past ``start`` and ``end`` consumed records."""
    a = next(m for m in marks if m.consumed >= start)
    b = next(m for m in marks if m.consumed >= end)
    return (b.consumed - a.consumed) / (b.at - a.at) if b.at > a.at else float("nan")


async def _follow(
    child: asyncio.subprocess.Process, conn: asyncpg.Connection, produced: int, began: float
) -> list[_Mark]:
    """Poll the committed offsets until every produced record is consumed: every observation."""
    marks: list[_Mark] = []
    while True:
        if child.returncode is not None:
            raise RuntimeError(f"tephra projector exited early with {child.returncode}")
        consumed = await _consumed(conn)
        marks.append(_Mark(time.perf_counter(), consumed, _child_cpu(child.pid), await _read_skew(conn)))
        if consumed >= produced:
            return marks
        if marks[-1].at - began > 3600:
            raise RuntimeError(f"only {consumed}/{produced} records consumed after an hour")
        await asyncio.sleep(_POLL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument(
        "--live-jobs",
        type=int,
        default=10_000,
        help="the stream's cap of unfinished jobs (0: no cap, no retiring)",
    )
    parser.add_argument(
        "--step-ms", type=int, default=100, help="event time between two events of the stream"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="projector runs over the same produced topics, each into a fresh database; prints the median",
    )
    args = parser.parse_args()
    # The machine's speed moves between sessions: figures compare only next to these.
    print(
        f"host reference: integer loop {cpu_loop_seconds():.2f} s, dict walk {memory_walk_seconds():.2f} s"
        " (bench/host.py; not measured)"
    )
    admin_dsn = os.environ.get("TEPHRA_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    external = os.environ.get("TEPHRA_BENCH_KAFKA")
    if external:
        asyncio.run(_bench(external, admin_dsn, None, args))
        return
    with EmbeddedBroker() as broker:
        asyncio.run(_bench(broker.bootstrap, admin_dsn, broker.pid, args))


if __name__ == "__main__":
    main()
