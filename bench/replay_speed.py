"""Replay speed: fold rate over a 1,000,000-event archive, and ``replay explain`` in the last session.

    python bench/replay_speed.py [--events 1000000] [--database-url URL] [--reuse]

Builds the archive the way the live stack writes it (tests/golden/history.py:
the production fold, snapshot builder, session and publisher; a simulated
cluster starting and finishing tasks; every node re-reporting each cycle),
archives it in PostgreSQL through the projector's batch writer (which stores
a state snapshot every 10,000 events), then prints:

* the fold alone over the decoded events (``projector.fold.apply``, events/s);
* decode + fold from the canonical bytes (what replay does per row);
* read + decode + fold streamed from PostgreSQL (``replay verify``'s pass);
* ``replay explain`` of a gang pending in the last session: reconstruction
  from the nearest snapshot, with and without the counterfactual search.

Goals (issue 6): fold >= 200,000 events/s; explain <= 1 s with snapshots.
Without ``--database-url`` an embedded PostgreSQL is started in a temp dir.
``--reuse`` measures an archive this script already wrote to ``--database-url``
(no build, no fold passes, only state_at and explain): quick before/after
comparisons.

Each explain is run three times (the first pays for cold caches), printed as
wall time (this process's CPU time): on a shared machine the CPU time is the
steadier figure; the difference is PostgreSQL's work and waiting for a core.
Then it is split into its phases: the job's history query, rebuilding the
input (stored state + fold), the re-run, and the counterfactual search.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import asyncpg  # noqa: E402

from events.models import TaskStarted  # noqa: E402
from events.serde import decode  # noqa: E402
from projector.fold import apply  # noqa: E402
from projector.state import ClusterState  # noqa: E402
from replay import engine  # noqa: E402
from replay.queries import counterfactual_search, explain_job  # noqa: E402
from replay.reconstruct import capture  # noqa: E402
from replay.store import ArchiveReader, open_archive  # noqa: E402
from tests.golden.archive import load_rows, row_canonical  # noqa: E402
from tests.golden.history import LiveRun, gpu_node, job  # noqa: E402

NODES = 256
JOBS_PER_CYCLE = 6
GANG = 4
RUNTIME_CYCLES = 3
STUCK_JOB = "ml/stuck-giant"


def build(events: int) -> LiveRun:
    run = LiveRun()
    for q in ("research", "training", "inference", "batch"):
        run.queue(q)
    nodes = [gpu_node(f"gpu-{i:03d}", 8, labels={"gpu-type": "a100"}) for i in range(NODES)]
    for node in nodes:
        run.node(node)
    # A gang larger than the cluster: Pending in every session, the one explain is timed on.
    run.submit(job("stuck-giant", queue="research", replicas=NODES + 40, gpu=8, min_available=NODES + 40))
    due: collections.deque[tuple[int, str, str]] = collections.deque()
    cycle = 0
    serial = 0
    while len(run.rows) < events:
        cycle += 1
        for _ in range(JOBS_PER_CYCLE):
            serial += 1
            queue = ("training", "inference", "batch")[serial % 3]
            run.submit(job(f"j{serial:06d}", queue=queue, replicas=GANG, gpu=1, min_available=GANG))
        before = len(run.rows)
        run.cycle(seconds=0)
        for row in run.rows[before:]:
            if isinstance(row.event, TaskStarted):
                due.append((cycle + RUNTIME_CYCLES, row.event.data.task_id, row.event.data.job_id))
        while due and due[0][0] <= cycle:
            _, task_id, job_id = due.popleft()
            run.finish(task_id, job_id)
        # Observations dominate a real log: every kubelet re-reports its node, twice a cycle.
        for node in nodes + nodes:
            if len(run.rows) >= events:
                break
            run.node(node)
        run.tick(1)
    # The last event is a session, so the stuck job's last session is the newest one.
    run.schedule()
    return run


def rate(count: int, seconds: float) -> str:
    return f"{count / seconds:,.0f} events/s ({count:,} events in {seconds:.2f} s)"


async def measure(url: str, run: LiveRun) -> None:
    rows = [r.to_json() for r in run.rows]
    began = time.perf_counter()
    await load_rows(url, rows, snapshot_every=10_000)
    print(f"archived through the projector's writer: {rate(len(rows), time.perf_counter() - began)}")

    events = [r.event for r in run.rows]
    state = ClusterState()
    began = time.perf_counter()
    for seq, event in enumerate(events, 1):
        apply(state, seq, event)
    print(f"fold (decoded events):           {rate(len(events), time.perf_counter() - began)}")
    del state

    canonical = [row_canonical(r) for r in rows]
    state = ClusterState()
    began = time.perf_counter()
    for seq, raw in enumerate(canonical, 1):
        apply(state, seq, decode(raw))
    print(f"decode + fold (canonical bytes): {rate(len(canonical), time.perf_counter() - began)}")
    del state, canonical
    # Replay runs in a fresh process: keep the garbage collector from walking this script's
    # million-event history (held by the caller) during the timed reads below.
    gc.collect()
    gc.freeze()
    await measure_archive(url, run.sessions[-1])


async def _phases(reader: ArchiveReader, session_id: str) -> str:
    """explain's phases one by one, as explain_job runs them."""
    began = time.perf_counter()
    await reader.job_history(STUCK_JOB)
    history = time.perf_counter() - began
    marker = await reader.session(session_id)
    data = marker.event.data  # type: ignore[union-attr]
    began = time.perf_counter()
    session_input = capture(await reader.state_at(data.input_seq), data.input_seq)
    rebuild = time.perf_counter() - began
    began = time.perf_counter()
    result = engine.run(session_input.snapshot, session_input.config, data.now, data.logic_flags)
    rerun = time.perf_counter() - began
    began = time.perf_counter()
    found = counterfactual_search(session_input, data, STUCK_JOB, result)
    search = time.perf_counter() - began
    cf = found.counterfactual
    assert cf is not None
    return (
        f"history {history:.3f} s, input {rebuild:.3f} s, re-run {rerun:.3f} s,"
        f" blockers and counterfactual {search:.3f} s ({cf.sessions_run} re-runs)"
    )


async def measure_archive(url: str, last_session: str, *, fold_pass: bool = True) -> None:
    async with open_archive(url) as reader:
        if fold_pass:
            state = ClusterState()
            count = 0
            began = time.perf_counter()
            async for archived in reader.rows():
                apply(state, archived.seq, archived.event)
                count += 1
            print(f"read + decode + fold (Postgres): {rate(count, time.perf_counter() - began)}")
            del state

        conn = await asyncpg.connect(url)
        try:
            snapshots = await conn.fetchval("SELECT count(*) FROM state_snapshots")
        finally:
            await conn.close()
        last = await reader.last_seq()
        for attempt in ("cold", "warm"):
            began = time.perf_counter()
            await reader.state_at(last - 1)
            took = time.perf_counter() - began
            print(f"state_at(last) from the nearest of {snapshots} snapshots ({attempt}): {took:.3f} s")
        began = time.perf_counter()
        history = await reader.job_history(STUCK_JOB)
        print(f"job_history({STUCK_JOB}): {len(history)} events in {time.perf_counter() - began:.3f} s")
        for counterfactual in (False, True):
            took_all = []
            for _ in range(3):
                began, cpu = time.perf_counter(), time.process_time()
                explanation = await explain_job(reader, STUCK_JOB, counterfactual=counterfactual)
                took_all.append((time.perf_counter() - began, time.process_time() - cpu))
            assert explanation.session is not None
            assert explanation.session.session_id == last_session
            extra = ""
            if explanation.counterfactual is not None:
                cf = explanation.counterfactual
                extra = f"; {cf.sessions_run} re-runs -> " + (
                    "; ".join(c.summary for c in cf.changes) or cf.note
                )
            label = "with counterfactual" if counterfactual else "reasons only     "
            runs = " / ".join(f"{wall:.3f} ({cpu:.3f})" for wall, cpu in took_all)
            print(f"replay explain {STUCK_JOB} ({label}): {runs} s{extra}")
        print(f"  top reasons: {[r['code'] for r in explanation.reasons]}")
        print(f"  phases: {await _phases(reader, last_session)}")


async def _last_session(url: str) -> str:
    async with open_archive(url) as reader:
        (marker,) = (await reader.session_markers(await reader.last_seq()))[-1:]
        return marker.event.data.session_id  # type: ignore[union-attr,no-any-return]


async def main_async(args: argparse.Namespace) -> None:
    if args.reuse:
        if not args.database_url:
            raise SystemExit("--reuse needs --database-url")
        await measure_archive(args.database_url, await _last_session(args.database_url), fold_pass=False)
        return
    began = time.perf_counter()
    run = build(args.events)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"built {len(run.rows):,} events ({len(run.sessions):,} sessions) "
        f"in {time.perf_counter() - began:.1f} s,"
        f" peak RSS {peak:,.0f} MiB"
    )
    if args.database_url:
        await measure(args.database_url, run)
        return
    from api.embedded import EmbeddedPostgres

    base = Path(tempfile.mkdtemp(prefix="tephra-bench-replay-"))
    # When run as root, the server's unprivileged account must be able to enter the folder.
    base.chmod(0o711)  # noqa: ASYNC240  (start-up, before any concurrency)
    try:
        with EmbeddedPostgres(base / "data", durable=False) as server:
            admin = await asyncpg.connect(server.dsn)
            try:
                await admin.execute('CREATE DATABASE "bench_replay"')
            finally:
                await admin.close()
            await measure(server.dsn.rsplit("/", 1)[0] + "/bench_replay", run)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument(
        "--database-url", default=None, help="an empty database (default: embedded PostgreSQL)"
    )
    parser.add_argument(
        "--reuse", action="store_true", help="measure the archive already in --database-url (no build)"
    )
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
