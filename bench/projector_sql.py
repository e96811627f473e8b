"""PostgreSQL's CPU per event for the projector's commits, by statement (no broker, no service).

    python bench/projector_sql.py [--events N] [--batch-size B] [--snapshot-every S] [--snapshot-scale K]
                                  [--keep]
    python bench/projector_sql.py --sessions S [--jobs N] [--nodes M]

Folds N events of the test stream (tests/projector/streams.py) batch by batch
and commits each batch with :meth:`BatchWriter.commit` into a fresh database
(``TEPHRA_BENCH_DATABASE_URL``, default the local server at
postgresql://postgres@127.0.0.1:5432/postgres).  Prints the backend's CPU
time per archived event for each statement kind, read from
``/proc/<backend pid>/schedstat`` (Linux, server on this machine): CPU time,
not wall time, so it holds up on a shared machine; still, alternate runs
when comparing.  ``--keep`` keeps the database and prints its DSN.
See docs/projector.md.

``--sessions S``: the scheduler's sessions over a backlog instead (the
projector's share of a live session's wait until applied, bench/backlog.py):
``--nodes`` nodes and ``--jobs`` pending jobs are archived first, then S
sessions are computed as bench/live_path.py computes them and each one's
events (with a submission and a cancellation between two sessions, as
``bench/backlog.py --cancel`` sends) are written as the projector writes a
batch.  Per session: this process's CPU to decode, fold and plan them, the
commit's wall time, its round trips and the backend's CPU, by statement.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg

from bench import live_path
from bench.backlog import _cancel
from bench.e2e import _cluster_events, _job
from events.models import DEFAULT_CLUSTER, Event
from events.serde import encode
from projector.heap import tune_gc
from projector.migrate import apply_migrations
from projector.projection_rows import StagedRows
from projector.state import ClusterState
from projector.writer import BatchWriter, InboundRecord, decode_batch
from scheduler.core.carried import CarriedJobs
from scheduler.service.session_events import PendingCache
from scheduler.service.snapshot_cache import SnapshotCache
from tests.projector.helpers import create_database, drop_database
from tests.projector.streams import CLUSTER, event_stream

T = TypeVar("T")
_PENDING = "tephra_stage_pending"
_ADMIN = os.environ.get("TEPHRA_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def _cpu_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat", encoding="ascii") as stat:
        return int(stat.read().split()[0])


def _label(sql: str) -> str:
    return " ".join(sql.split()[:4])[:60]


class _Timed(asyncpg.Connection):  # type: ignore[misc]
    """Charges the backend's CPU time of each statement to its first words, and counts the round trips."""

    costs: Counter[str] | None = None
    round_trips: Counter[str] | None = None
    pid = 0

    async def _timed(self, label: str, call: Any) -> Any:
        if self.costs is None:
            return await call
        before = _cpu_ns(self.pid)
        result = await call
        self.costs[label] += _cpu_ns(self.pid) - before
        if self.round_trips is not None:
            self.round_trips[label] += 1
        return result

    async def execute(self, query: str, *args: Any, **kwargs: Any) -> Any:
        return await self._timed(_label(query), super().execute(query, *args, **kwargs))

    async def fetchval(self, query: str, *args: Any, **kwargs: Any) -> Any:
        return await self._timed(_label(query), super().fetchval(query, *args, **kwargs))

    async def copy_records_to_table(self, table_name: str, **kwargs: Any) -> Any:
        return await self._timed(f"COPY {table_name}", super().copy_records_to_table(table_name, **kwargs))


async def main(events: int, batch_size: int, snapshot_every: int, snapshot_scale: float, keep: bool) -> None:
    raws = [encode(e) for e in event_stream(3, events)]
    dsn = await create_database(_ADMIN)
    conn = await asyncpg.connect(dsn, connection_class=_Timed)
    try:
        await apply_migrations(conn)
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        writer = await BatchWriter.load(
            conn,
            consumer="bench",
            cluster=CLUSTER,
            snapshot_every=snapshot_every,
            snapshot_scale=snapshot_scale,
        )
        conn.costs, conn.pid = Counter(), pid
        total = archived = 0
        prepare_cpu: list[tuple[float, bool]] = []
        for start in range(0, len(raws), batch_size):
            batch = raws[start : start + batch_size]
            began = time.process_time()
            plan = writer.prepare(
                decode_batch([InboundRecord("t", 0, start + i, v) for i, v in enumerate(batch)]), set()
            )
            prepare_cpu.append((time.process_time() - began, plan.snapshot is not None))
            before = _cpu_ns(pid)
            await writer.commit(conn, plan)
            total += _cpu_ns(pid) - before
            archived += plan.archived
        costs = conn.costs
        conn.costs = None
        per_event = total / 1e3 / archived
        snapshots = await conn.fetchval("SELECT count(*) FROM state_snapshots")
        print(
            f"{archived} events, backend CPU {per_event:.1f} us/event"
            f" ({snapshots} snapshots: every {snapshot_every}, scale {snapshot_scale})"
        )
        for label, ns in costs.most_common():
            print(f"{ns / 1e3 / archived:7.2f} us/event  {label}")
        # The snapshots' share: what the batches that built one took over the other batches' median.
        plain = statistics.median(cpu for cpu, snapshot in prepare_cpu if not snapshot)
        building = sum(cpu - plain for cpu, snapshot in prepare_cpu if snapshot) * 1e6 / archived
        prepared = sum(cpu for cpu, _ in prepare_cpu) * 1e6 / archived
        print(f"this process: decode + fold + plan {prepared:.1f} us/event, ~{building:.1f} of it snapshots")
    finally:
        await conn.close()
        if keep:
            print(dsn)
        else:
            await drop_database(_ADMIN, dsn)


def _staged(times: dict[str, float], name: str, work: Callable[..., T]) -> Callable[..., T]:
    """``work``, adding its CPU seconds to ``times[name]`` at every call."""

    def timed(*args: Any, **kwargs: Any) -> T:
        began = time.process_time()
        try:
            return work(*args, **kwargs)
        finally:
            times[name] = times.get(name, 0.0) + time.process_time() - began

    return timed


class _Sessions:
    """The scheduler's side of ``--sessions``: its sessions' events, computed on the writer's state."""

    def __init__(self) -> None:
        self.cache, self.texts, self.carried = SnapshotCache(), PendingCache(), CarriedJobs()
        self.offset = 0

    def records(self, events: Sequence[Event]) -> list[InboundRecord]:
        """The events as the Kafka records the projector reads (one partition, offsets in order)."""
        out = [InboundRecord("bench", 0, self.offset + i, encode(e)) for i, e in enumerate(events)]
        self.offset += len(out)
        return out

    def session(self, state: ClusterState, number: int) -> list[Event]:
        self.cache.invalidate()  # the projector's fold is what is measured, not the snapshot's
        events = live_path._compute(state, self.cache, self.texts, number, {}, carried=self.carried)
        live_path._HEAP.after_session()
        # bench/live_path.py names its own cluster; the writer archives the backlog's.
        return [e.model_copy(update={"cluster": DEFAULT_CLUSTER}) for e in events]


async def sessions(jobs: int, nodes: int, count: int, batch_size: int) -> None:
    """``--sessions``: the projector's work per scheduler session over a backlog (see the module)."""
    dsn = await create_database(_ADMIN)
    conn = await asyncpg.connect(dsn, connection_class=_Timed)
    try:
        await apply_migrations(conn)
        writer = await BatchWriter.load(conn, consumer="bench", cluster=DEFAULT_CLUSTER)
        scheduler = _Sessions()
        backlog: list[Event] = [*_cluster_events(nodes)]
        backlog += [_job(f"backlog-{i:07d}", 1, "8") for i in range(jobs)]
        for start in range(0, len(backlog), batch_size):
            await writer.write(conn, scheduler.records(backlog[start : start + batch_size]))
        print(f"{jobs:,} jobs on {nodes:,} nodes archived; per session (events, CPU s, commit):")
        conn.pid = await conn.fetchval("SELECT pg_backend_pid()")
        costs: Counter[str] = Counter()
        for number in range(count):
            if number:  # as bench/backlog.py --cancel: one job more, one backlog job cancelled
                await writer.write(
                    conn, scheduler.records([_job(f"steady-{number:07d}", 1, "8"), _cancel(jobs - number)])
                )
            events = scheduler.session(writer.state, number)
            records = scheduler.records(events)
            times: dict[str, float] = {}
            decoded = _staged(times, "decode", decode_batch)(records)
            writer._fold = _staged(times, "fold", writer._fold)  # type: ignore[method-assign]
            writer._finish = _staged(times, "plan", writer._finish)  # type: ignore[method-assign]
            plan = writer.prepare(decoded, set())
            del writer._fold, writer._finish
            conn.costs, conn.round_trips = Counter(), Counter()
            began, backend_ns = time.perf_counter(), _cpu_ns(conn.pid)
            await writer.commit(conn, plan)
            wall, backend = time.perf_counter() - began, (_cpu_ns(conn.pid) - backend_ns) / 1e9
            trips = sum(conn.round_trips.values())
            costs += conn.costs
            conn.costs = conn.round_trips = None
            cpu = ", ".join(f"{name} {seconds:.3f}" for name, seconds in times.items())
            size = sum(len(r.value or b"") for r in records) / 1024
            rewritten = sum(
                len(w.records) for w in plan.projection if isinstance(w, StagedRows) and w.stage == _PENDING
            )
            print(
                f"  session {number}: {len(records)} events ({size:.0f} KiB),"
                f" {rewritten} newest_pending rows written;"
                f" CPU {cpu};"
                f" commit {wall:.3f} s wall, {trips} round trips, backend {backend:.3f} s CPU"
            )
        print(f"backend CPU by statement over {count} sessions (ms per session):")
        for label, ns in costs.most_common(12):
            print(f"  {ns / 1e6 / count:8.2f}  {label}")
    finally:
        await conn.close()
        await drop_database(_ADMIN, dsn)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=60_000)
    parser.add_argument("--batch-size", type=int, default=5_000)
    parser.add_argument("--snapshot-every", type=int, default=50_000)
    parser.add_argument("--snapshot-scale", type=float, default=1.0, help="0: every --snapshot-every")
    parser.add_argument("--keep", action="store_true", help="keep the database and print its DSN")
    parser.add_argument("--sessions", type=int, default=0, help="scheduler sessions over a backlog instead")
    parser.add_argument("--jobs", type=int, default=20_000, help="--sessions: the backlog's jobs")
    parser.add_argument("--nodes", type=int, default=200, help="--sessions: the backlog's nodes")
    options = parser.parse_args()
    tune_gc()  # as every Tephra process does (projector.heap)
    if options.sessions:
        asyncio.run(sessions(options.jobs, options.nodes, options.sessions, options.batch_size))
        sys.exit()
    asyncio.run(
        main(options.events, options.batch_size, options.snapshot_every, options.snapshot_scale, options.keep)
    )
