"""PostgreSQL's CPU per event for the projector's commits, by statement (no broker, no service).

    python bench/projector_sql.py [--events N] [--batch-size B] [--snapshot-every S] [--snapshot-scale K]
                                  [--keep]

Folds N events of the test stream (tests/projector/streams.py) batch by batch
and commits each batch with :meth:`BatchWriter.commit` into a fresh database
(``TEPHRA_BENCH_DATABASE_URL``, default the local server at
postgresql://postgres@127.0.0.1:5432/postgres).  Prints the backend's CPU
time per archived event for each statement kind, read from
``/proc/<backend pid>/schedstat`` (Linux, server on this machine): CPU time,
not wall time, so it holds up on a shared machine; still, alternate runs
when comparing.  ``--keep`` keeps the database and prints its DSN.
See docs/projector.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg

from events.serde import encode
from projector.heap import tune_gc
from projector.migrate import apply_migrations
from projector.writer import BatchWriter, InboundRecord, decode_batch
from tests.projector.helpers import create_database, drop_database
from tests.projector.streams import CLUSTER, event_stream

_ADMIN = os.environ.get("TEPHRA_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def _cpu_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat", encoding="ascii") as stat:
        return int(stat.read().split()[0])


def _label(sql: str) -> str:
    return " ".join(sql.split()[:4])[:60]


class _Timed(asyncpg.Connection):  # type: ignore[misc]
    """Charges the backend's CPU time of each statement to its first words."""

    costs: Counter[str] | None = None
    pid = 0

    async def _timed(self, label: str, call: Any) -> Any:
        if self.costs is None:
            return await call
        before = _cpu_ns(self.pid)
        result = await call
        self.costs[label] += _cpu_ns(self.pid) - before
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=60_000)
    parser.add_argument("--batch-size", type=int, default=5_000)
    parser.add_argument("--snapshot-every", type=int, default=50_000)
    parser.add_argument("--snapshot-scale", type=float, default=1.0, help="0: every --snapshot-every")
    parser.add_argument("--keep", action="store_true", help="keep the database and print its DSN")
    options = parser.parse_args()
    tune_gc()  # as every Tephra process does (projector.heap)
    asyncio.run(
        main(options.events, options.batch_size, options.snapshot_every, options.snapshot_scale, options.keep)
    )
