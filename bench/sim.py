"""The simulated cluster's cost: planning per poll, and binding -> Running throughput end to end.

* **plan**: :meth:`kube.sim.SimPlanner.plan` over N projected tasks (pure, in memory): building
  the due events, and a poll once they are published.
* **query**: one :func:`kube.sim_service.read_sim_tasks` over a projection with N Bound tasks.
* **poll**: one :func:`kube.sim_service.read_sim_tasks` over a large projection where almost
  every task is Running without a simulated runtime (nothing to do) and a few are Bound: what a
  poll (every 0.1 s) costs once the cluster is busy.  The rows are written straight into the
  projection tables (a query cost, not a fold), and the plan is printed.
* **start**: N tasks bound by one session; the time from the projector applying it to all N
  Running (simulator reads, produces TaskStarted, projector applies them), with a zero bind delay.

Real embedded broker and PostgreSQL; prints figures, asserts nothing.
Run from the project root: ``python -m bench.sim [--tasks 5000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import secrets
import shutil
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg

from api.embedded import EmbeddedBroker, EmbeddedPostgres, create_topics
from api.endpoints import Endpoints
from api.settings import TephraSettings
from api.stack import run_services
from events.models import (
    MAX_SEQ,
    BindDecision,
    JobSubmitted,
    JobSubmittedData,
    NodeReported,
    NodeReportedData,
    QueueUpserted,
    QueueUpsertedData,
    SessionCommitted,
    SessionCommittedData,
    TaskSpec,
)
from events.topics import Topics
from kube.sim import SimPlanner, TaskView
from kube.sim_service import SIM_WORK_QUERY, read_sim_tasks
from projector.migrate import apply_migrations
from tests.service.helpers import produce


def _envelope(subject: str) -> dict[str, Any]:
    return {"id": str(uuid.uuid4()), "source": "bench://sim", "time": datetime.now(UTC), "subject": subject}


def bench_plan(n: int) -> tuple[float, float]:
    """(seconds to plan and build N due events, seconds for a poll once they are published)."""
    planner = SimPlanner(bind_delay=0.5, evict_delay=0.5)
    views = [TaskView(f"ns/j-w-{i}", "ns/j", "Bound", f"n{i % 100}", str(i)) for i in range(n)]
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    planner.plan(views, t0)  # first sight
    began = time.perf_counter()
    events, _ = planner.plan(views, t0 + timedelta(seconds=1))
    elapsed = time.perf_counter() - began
    assert len(events) == n  # a broken bench must not print figures
    planner.published(events)
    began = time.perf_counter()
    planner.plan(views, t0 + timedelta(seconds=2))
    return elapsed, time.perf_counter() - began


async def _wait(conn: asyncpg.Connection, query: str, expected: int, within: float = 300) -> None:
    deadline = time.monotonic() + within
    while await conn.fetchval(query) != expected:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{query} did not reach {expected}")
        await asyncio.sleep(0.01)


async def bench_end_to_end(bootstrap: str, dsn: str, n: int) -> tuple[float, float]:
    topics = Topics(f"bench-{secrets.token_hex(4)}")
    await create_topics(bootstrap, topics.all())
    conn = await asyncpg.connect(dsn)
    await apply_migrations(conn)
    endpoints = Endpoints(bootstrap, dsn, topics, "default")
    settings = TephraSettings(sim_bind_delay=0.0, sim_evict_delay=0.0)
    services = asyncio.create_task(run_services(settings, endpoints, ("projector", "sim-cluster")))
    try:
        await produce(bootstrap, topics, [
            QueueUpserted(data=QueueUpsertedData(name="default"), **_envelope("default")),
            NodeReported(data=NodeReportedData(name="big", allocatable={"cpu": str(n), "pods": n}),
                         **_envelope("big")),
            JobSubmitted(data=JobSubmittedData(namespace="ns", name="j", tasks=[
                TaskSpec(name="w", replicas=n, resources={"cpu": "500m"})]), **_envelope("ns/j")),
        ])  # fmt: skip
        await _wait(conn, "SELECT count(*) FROM tasks", n)
        await _wait(conn, "SELECT count(*) FROM nodes", 1)
        decisions = [BindDecision(task=f"ns/j-w-{i}", job="ns/j", node="big") for i in range(n)]
        session_id = str(uuid.uuid4())
        session = SessionCommitted(
            data=SessionCommittedData(session_id=session_id, leader_epoch=1, input_seq=MAX_SEQ,
                                      config_version=0, now=datetime.now(UTC), input_digest="0" * 64,
                                      decisions=decisions),
            **_envelope(session_id),
        )  # fmt: skip
        await produce(bootstrap, topics, [session])
        await _wait(conn, "SELECT count(*) FROM tasks WHERE status = 'Bound' OR status = 'Running'", n)
        bound_at = time.perf_counter()
        began = time.perf_counter()
        pool = await asyncpg.create_pool(dsn, min_size=1, max_size=1)
        try:
            views = await read_sim_tasks(pool)
        finally:
            await pool.close()
        query = time.perf_counter() - began
        del views
        await _wait(conn, "SELECT count(*) FROM tasks WHERE status = 'Running'", n)
        return query, time.perf_counter() - bound_at
    finally:
        services.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await services
        await conn.close()


async def bench_poll(dsn: str, tasks: int, bound: int, annotated_jobs: int) -> tuple[float, int, str]:
    """(median seconds of a poll, rows it returned, the plan's scans) on a fresh database."""
    admin = await asyncpg.connect(dsn)
    name = f"poll_{secrets.token_hex(4)}"
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    poll_dsn = dsn.rsplit("/", 1)[0] + f"/{name}"
    conn = await asyncpg.connect(poll_dsn)
    try:
        await apply_migrations(conn)
        per_job = 10
        jobs = tasks // per_job
        spec = '{"annotations": {}}'
        timed = '{"annotations": {"tephra.dev/sim-runtime": "1h"}}'
        await conn.copy_records_to_table(
            "jobs",
            records=[
                (f"ns/j{j}", "ns", f"j{j}", "default", "Running", "", datetime.now(UTC), j + 1,
                 timed if j < annotated_jobs else spec)
                for j in range(jobs)
            ],
            columns=["id", "namespace", "name", "queue", "phase", "phase_reason", "created", "seq", "spec"],
        )  # fmt: skip
        await conn.copy_records_to_table(
            "tasks",
            records=[
                (f"ns/j{i // per_job}-w-{i % per_job}", f"ns/j{i // per_job}", "w", i % per_job,
                 "Bound" if i >= tasks - bound else "Running", f"n{i % 500}", jobs + i + 1)
                for i in range(tasks)
            ],
            columns=["id", "job_id", "role", "idx", "status", "node", "seq"],
        )  # fmt: skip
        await conn.execute("ANALYZE")
        pool = await asyncpg.create_pool(poll_dsn, min_size=1, max_size=1)
        try:
            times = []
            rows = 0
            for _ in range(20):
                began = time.perf_counter()
                rows = len(await read_sim_tasks(pool))
                times.append(time.perf_counter() - began)
        finally:
            await pool.close()
        plan = await conn.fetch(f"EXPLAIN {SIM_WORK_QUERY}")
        scans = [r[0].strip().removeprefix("->  ") for r in plan if "Scan" in r[0]]
        return sorted(times)[len(times) // 2], rows, "; ".join(scans)
    finally:
        await conn.close()
        admin = await asyncpg.connect(dsn)
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        await admin.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=5000)
    args = parser.parse_args()
    for n in (1_000, 10_000, 50_000):
        emit, steady = bench_plan(n)
        print(
            f"plan: {n:>6} bound tasks: {emit * 1000:7.1f} ms to build their TaskStarted "
            f"({n / emit:,.0f}/s), {steady * 1000:6.1f} ms per poll while they await projection"
        )
    base = Path(tempfile.mkdtemp(prefix="tephra-bench-sim-"))
    base.chmod(0o711)
    try:
        with EmbeddedBroker() as broker, EmbeddedPostgres(base / "pg", durable=False) as postgres:
            for total in (10_000, 100_000):
                poll, rows, plan = asyncio.run(bench_poll(postgres.dsn, total, bound=100, annotated_jobs=10))
                print(f"poll: {total:>6} tasks ({rows} with work: 100 Bound, 100 Running with a runtime):"
                      f" {poll * 1000:6.1f} ms per poll\n      scans: {plan}")  # fmt: skip
            query, start = asyncio.run(bench_end_to_end(broker.bootstrap, postgres.dsn, args.tasks))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"query: one reconcile read of {args.tasks} Bound tasks in {query * 1000:.1f} ms")
    print(f"start: {args.tasks} bindings -> Running in {start:.2f} s ({args.tasks / start:,.0f} tasks/s, "
          "simulator + projector, bind delay 0)")  # fmt: skip


if __name__ == "__main__":
    main()
