"""The projector's writer over the steady stream, in this process: memory per 100k events, snapshots included.

    python bench/snapshot_memory.py [--events N] [--live-jobs J] [--step-ms MS] [--seed S]

Folds the steady stream of bench/fold.py (tests/projector/streams.py: at most
``--live-jobs`` unfinished jobs, ``--step-ms`` of event time apart), batch by
batch of 5,000, and commits each batch with :meth:`BatchWriter.write` into a
fresh database (``TEPHRA_BENCH_DATABASE_URL``, default the local server at
postgresql://postgres@127.0.0.1:5432/postgres), with the default snapshot
spacing.  Every 100k events it prints the process's RSS and peak RSS
(``/proc/self/status``), the writer's CPU per event, the jobs in the state
and the snapshots taken.  No broker: the figure is the writer's own memory
(plus the stream generator's shadow state, as large as the folded one), so
runs of two builds on the same stream compare what their batches and
snapshots hold, whatever the host's load.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's packages, whatever is installed

import asyncpg

from events.serde import encode
from projector.heap import tune_gc
from projector.migrate import apply_migrations
from projector.writer import BatchWriter, InboundRecord
from tests.projector.helpers import create_database, drop_database
from tests.projector.streams import CLUSTER, StreamBuilder

_ADMIN = os.environ.get("TEPHRA_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def _memory() -> tuple[int, int]:
    """(RSS, peak RSS) of this process, in MiB."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(fields["VmRSS"].split()[0]) // 1024, int(fields["VmHWM"].split()[0]) // 1024


async def _run(args: argparse.Namespace) -> None:
    tune_gc()  # as every Tephra process does
    dsn = await create_database(_ADMIN)
    conn = await asyncpg.connect(dsn)
    try:
        await apply_migrations(conn)
        writer = await BatchWriter.load(conn, consumer="bench", cluster=CLUSTER)
        builder = StreamBuilder(args.seed, live_jobs=args.live_jobs, step_ms=args.step_ms)
        offset = 0
        cpu = 0.0
        for chunk in builder.chunks(args.events, 5_000):
            records = [InboundRecord("t", 0, offset + i, encode(e)) for i, e in enumerate(chunk)]
            offset += len(chunk)
            began = time.process_time()
            await writer.write(conn, records)
            cpu += time.process_time() - began
            if offset % 100_000 == 0 or offset == args.events:
                rss, peak = _memory()
                snapshots = await conn.fetchval("SELECT count(*) FROM state_snapshots")
                print(
                    f"{offset:>9,} events: RSS {rss} MiB, peak {peak} MiB;"
                    f" writer CPU {cpu / offset * 1e6:.0f} us/event;"
                    f" jobs {len(writer.state.jobs):,}; snapshots {snapshots}",
                    flush=True,
                )
    finally:
        await conn.close()
        await drop_database(_ADMIN, dsn)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--live-jobs", type=int, default=10_000)
    parser.add_argument("--step-ms", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    asyncio.run(_run(parser.parse_args()))


if __name__ == "__main__":
    main()
