"""End to end: submission -> binding latency at a steady rate, and bindings/s at saturation.

Runs the deployed runners in their own processes (``tephra projector``,
``tephra scheduler``, as compose.yaml starts them: endpoints in ``TEPHRA_*``
variables, every other setting at its default unless this bench sets it:
the schedule period and a session budget that no backlog session overruns)
on the embedded broker and PostgreSQL, and prints figures; it asserts nothing.

* **latency**: ``--rate`` single-task jobs per second for ``--seconds``
  against ``--nodes`` nodes; latency is from just before the JobSubmitted is
  produced to the projector batch that applied the session binding it
  (``event_log.recorded_at``, when the projector began preparing that batch;
  the binding is visible to every reader once the batch commits).  Goal: p99 <= 2 x the schedule period.
* **saturation**: ``--backlog-jobs`` jobs of ``--tasks-per-job`` tasks are
  projected while no scheduler runs; then a scheduler starts, and bindings/s
  is the number of bindings over the time from its leadership to the last
  applied binding.  Goal: >= 5,000 bindings/s.

Run ``python bench/e2e.py`` (about 2-3 minutes), or e.g.
``python bench/e2e.py --seconds 10 --backlog-jobs 1000`` for a quick look.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's packages, whatever is installed

import asyncpg
from aiokafka import AIOKafkaProducer

from api.embedded import EmbeddedBroker, EmbeddedPostgres, create_topics
from events.models import (
    Event,
    JobSubmitted,
    JobSubmittedData,
    NodeReported,
    NodeReportedData,
    QueueUpserted,
    QueueUpsertedData,
    TaskSpec,
)
from events.serde import encode
from events.topics import Topics, kafka_key, topic_for
from projector.migrate import apply_migrations

ROOT = Path(__file__).resolve().parents[1]
#: The deployed runners: the ``tephra`` console script's own entry point.
TEPHRA = ("-m", "api.cli")


def _envelope(subject: str) -> dict[str, object]:
    return {"id": str(uuid.uuid4()), "source": "bench://e2e", "time": datetime.now(UTC), "subject": subject}


def _cluster_events(nodes: int) -> list[Event]:
    events: list[Event] = [
        QueueUpserted(data=QueueUpsertedData(name="default"), **_envelope("queue/default"))
    ]
    for i in range(nodes):
        name = f"node-{i:05d}"
        events.append(
            NodeReported(
                data=NodeReportedData(name=name, allocatable={"cpu": "64", "memory": "512Gi", "pods": 110}),
                **_envelope(f"node/{name}"),
            )
        )
    return events


def _job(name: str, tasks: int, cpu: str = "100m") -> JobSubmitted:
    return JobSubmitted(
        data=JobSubmittedData(
            namespace="bench",
            name=name,
            tasks=[TaskSpec(name="w", replicas=tasks, resources={"cpu": cpu, "memory": "128Mi"})],
        ),
        **_envelope(f"job/bench/{name}"),
    )


# --------------------------------------------------------------------------- the stack


@asynccontextmanager
async def _database(admin_dsn: str) -> AsyncIterator[str]:
    name = f"bench_{secrets.token_hex(6)}"
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    dsn = urlunsplit(urlsplit(admin_dsn)._replace(path=f"/{name}"))
    conn = await asyncpg.connect(dsn)
    try:
        await apply_migrations(conn)
    finally:
        await conn.close()
    yield dsn


@asynccontextmanager
async def _process(
    command: str, settings: dict[str, str], log: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``tephra <command>`` with these TEPHRA_* settings (the rest: this environment's, or the defaults)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OTEL_SDK_DISABLED": "true", **settings}
    with log.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable, *TEPHRA, command, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=stderr
        )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), timeout=20)
            except TimeoutError:
                process.kill()
                await process.wait()


def _endpoints(bootstrap: str, dsn: str, topics: Topics) -> dict[str, str]:
    return {
        "TEPHRA_KAFKA_BOOTSTRAP": bootstrap,
        "TEPHRA_DATABASE_URL": dsn,
        "TEPHRA_TOPICS_PREFIX": topics.prefix,
        # The bench's producers do not sign (as compose.yaml's); the scheduler enrols its own key.
        "TEPHRA_ALLOW_UNSIGNED_INTENTS": "true",
        "TEPHRA_ALLOW_UNSIGNED_OBSERVATIONS": "true",
        "TEPHRA_SCHEDULER_ENROL": "true",
    }


def _projector(
    bootstrap: str, dsn: str, topics: Topics, log: Path
) -> contextlib.AbstractAsyncContextManager[asyncio.subprocess.Process]:
    return _process("projector", _endpoints(bootstrap, dsn, topics), log)


def _scheduler(
    bootstrap: str, dsn: str, topics: Topics, period: float, log: Path
) -> contextlib.AbstractAsyncContextManager[asyncio.subprocess.Process]:
    settings = {"TEPHRA_SCHEDULE_PERIOD": str(period), "TEPHRA_SESSION_BUDGET": "300"}
    return _process("scheduler", {**_endpoints(bootstrap, dsn, topics), **settings}, log)


async def _leader_at(process: asyncio.subprocess.Process) -> float:
    """Wall-clock time at which the scheduler announced its leadership."""
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), timeout=60)
    if not line.startswith(b"leader epoch="):
        raise RuntimeError(f"scheduler did not become leader: {line!r}")
    return time.time()


async def _produce(producer: AIOKafkaProducer, topics: Topics, events: Sequence[Event]) -> None:
    sent = [await producer.send(topic_for(e, topics), encode(e), key=kafka_key(e)) for e in events]
    await asyncio.gather(*sent)


async def _wait_count(conn: asyncpg.Connection, query: str, expected: int, within: float) -> int:
    deadline = time.monotonic() + within
    while (got := int(await conn.fetchval(query))) < expected and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.2)
    return got


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _phase_figures(conn: asyncpg.Connection) -> str:
    """p50 / p90 / max of each recorded session phase, in ms."""
    row = await conn.fetchrow(_PHASE_QUANTILES)
    return "; ".join(
        f"{c} " + "/".join(f"{1000 * v:.0f}" for v in row[c]) for c in _PHASES if row[c] is not None
    )


#: ...and of the apply wait: published -> the projector's batch began, -> the scheduler saw it applied
#: (the session's record, written once it has, is the end).
_PHASES = ("read", "compute", "publish", "apply", "collect", "to_projector", "to_seen")
_PHASE_QUANTILES = """
SELECT percentile_cont(ARRAY[0.5, 0.9, 1.0]) WITHIN GROUP (ORDER BY read_seconds) AS read,
       percentile_cont(ARRAY[0.5, 0.9, 1.0]) WITHIN GROUP (ORDER BY compute_seconds) AS compute,
       percentile_cont(ARRAY[0.5, 0.9, 1.0]) WITHIN GROUP (ORDER BY publish_seconds) AS publish,
       percentile_cont(ARRAY[0.5, 0.9, 1.0]) WITHIN GROUP (ORDER BY apply_seconds) AS apply,
       percentile_cont(ARRAY[0.5, 0.9, 1.0]) WITHIN GROUP (ORDER BY collect_seconds) AS collect,
       percentile_cont(ARRAY[0.5, 0.9, 1.0]) WITHIN GROUP (ORDER BY e.batch_began - t.acked) AS to_projector,
       percentile_cont(ARRAY[0.5, 0.9, 1.0]) WITHIN GROUP (ORDER BY t.seen - e.batch_began) AS to_seen
  FROM (SELECT *, extract(epoch FROM recorded_at) - apply_seconds AS acked,
               extract(epoch FROM recorded_at) AS seen
          FROM scheduler_session_timings) t
  JOIN sessions s USING (session_id)
  JOIN (SELECT seq, extract(epoch FROM recorded_at) AS batch_began FROM event_log) e ON e.seq = s.seq
"""


async def _session_figures(conn: asyncpg.Connection) -> str:
    row = await conn.fetchrow(
        "SELECT count(*) AS n, avg(decisions) AS decisions, avg(read_seconds) AS r,"
        " avg(compute_seconds) AS c, avg(publish_seconds) AS p, avg(apply_seconds) AS a,"
        " max(compute_seconds) AS cmax"
        " FROM scheduler_session_timings"
    )
    if not row["n"]:
        return "no sessions recorded"
    return (
        f"{row['n']} sessions, {row['decisions']:.0f} decisions avg;"
        f" per session: read {1000 * row['r']:.0f} ms,"
        f" compute {1000 * row['c']:.0f} ms (max {1000 * row['cmax']:.0f}), publish {1000 * row['p']:.0f} ms,"
        f" wait-applied {1000 * row['a']:.0f} ms\n  per session p50/p90/max ms: {await _phase_figures(conn)}"
    )


# --------------------------------------------------------------------------- the phases


async def latency(bootstrap: str, admin_dsn: str, logs: Path, opts: argparse.Namespace) -> None:
    topics = Topics(prefix=f"bench-{secrets.token_hex(4)}")
    await create_topics(bootstrap, topics.all(), partitions=1)
    total = int(opts.rate * opts.seconds)
    async with (
        _database(admin_dsn) as dsn,
        _projector(bootstrap, dsn, topics, logs / "latency-projector.log"),
        _scheduler(bootstrap, dsn, topics, opts.period, logs / "latency-scheduler.log") as sched,
    ):
        await _leader_at(sched)
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=1)
        await producer.start()
        conn = await asyncpg.connect(dsn)
        try:
            await _produce(producer, topics, _cluster_events(opts.nodes))
            await _wait_count(conn, "SELECT count(*) FROM nodes", opts.nodes, 60)
            submitted: dict[str, float] = {}
            pending = []
            began = time.monotonic()
            for i in range(total):
                await asyncio.sleep(max(0.0, began + i / opts.rate - time.monotonic()))
                event = _job(f"steady-{i:06d}", 1)
                submitted[event.data.job_id] = time.time()
                pending.append(
                    await producer.send(topic_for(event, topics), encode(event), key=kafka_key(event))
                )
            await asyncio.gather(*pending)
            achieved = total / (time.monotonic() - began)
            bound = await _wait_count(conn, "SELECT count(*) FROM bindings", total, 120)
            rows = await conn.fetch(_BINDING_TIMELINE)
            sessions = await _session_figures(conn)
        finally:
            await conn.close()
            await producer.stop()
    rows = [r for r in rows if r["job_id"] in submitted]
    latencies = [float(r["at"]) - submitted[r["job_id"]] for r in rows]
    print(
        f"latency: {total} single-task jobs at {achieved:.0f}/s (target {opts.rate:g}/s)"
        f" for {opts.seconds:g} s, {opts.nodes} nodes, schedule period {opts.period:g} s"
    )
    print(f"  bound {bound}/{total}")
    if latencies:
        print(
            f"  submission -> binding: p50 {_percentile(latencies, 0.5):.3f} s,"
            f" p90 {_percentile(latencies, 0.9):.3f} s,"
            f" p99 {_percentile(latencies, 0.99):.3f} s, max {max(latencies):.3f} s,"
            f" mean {statistics.fmean(latencies):.3f} s (goal p99 <= {2 * opts.period:g} s)"
        )
    print(f"  {sessions}")
    if rows:
        print("  where the time goes (p50 / p90 / p99 / max, s):")
        archived = [float(r["submitted_at"]) for r in rows]
        opened = [float(r["opened"]) for r in rows]
        parts = {
            "submit -> submission archived": [
                a - submitted[r["job_id"]] for a, r in zip(archived, rows, strict=True)
            ],
            "archived -> binding session opened": [o - a for o, a in zip(opened, archived, strict=True)],
            "session opened -> binding archived": [
                float(r["at"]) - o for o, r in zip(opened, rows, strict=True)
            ],
        }
        for name, values in parts.items():
            print(f"    {name:<36} {_quantiles(values)}")
        missed = [int(r["missed"]) for r in rows]
        print(
            f"    jobs an earlier session saw but did not bind: {sum(1 for m in missed if m)}"
            f" (max {max(missed)} sessions)"
        )


#: Per binding: the job's submission archived, the binding session's `now` (when it opened), the binding
#: archived, and how many earlier sessions had the submission in their input.
_BINDING_TIMELINE = """
SELECT b.job_id,
       extract(epoch FROM e.recorded_at) AS at,
       extract(epoch FROM s.now) AS opened,
       extract(epoch FROM j.recorded_at) AS submitted_at,
       (SELECT count(*) FROM sessions o WHERE o.input_seq >= j.seq AND o.seq < b.seq) AS missed
  FROM bindings b
  JOIN event_log e ON e.seq = b.seq
  JOIN sessions s ON s.session_id = b.session_id
  JOIN event_log j ON j.job = b.job_id AND j.type = 'tephra.job.submitted.v1'
"""


def _quantiles(values: Sequence[float]) -> str:
    return " / ".join(f"{_percentile(values, q):6.3f}" for q in (0.5, 0.9, 0.99, 1.0))


async def saturation(bootstrap: str, admin_dsn: str, logs: Path, opts: argparse.Namespace) -> None:
    topics = Topics(prefix=f"bench-{secrets.token_hex(4)}")
    await create_topics(bootstrap, topics.all(), partitions=1)
    jobs = opts.backlog_jobs
    total = jobs * opts.tasks_per_job
    nodes = max(opts.nodes, -(-total // 100))  # room for every task (110 pods per node)
    async with (
        _database(admin_dsn) as dsn,
        _projector(bootstrap, dsn, topics, logs / "saturation-projector.log"),
    ):
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
        await producer.start()
        conn = await asyncpg.connect(dsn)
        try:
            await _produce(producer, topics, _cluster_events(nodes))
            await _produce(
                producer, topics, [_job(f"backlog-{i:06d}", opts.tasks_per_job) for i in range(jobs)]
            )
            projected = await _wait_count(conn, "SELECT count(*) FROM tasks", total, 300)
            if projected < total:
                raise RuntimeError(f"only {projected}/{total} tasks were projected")
            async with _scheduler(
                bootstrap, dsn, topics, opts.period, logs / "saturation-scheduler.log"
            ) as sched:
                led = await _leader_at(sched)
                bound = await _wait_count(conn, "SELECT count(*) FROM bindings", total, 600)
                last = await conn.fetchval(
                    "SELECT extract(epoch FROM max(e.recorded_at))"
                    " FROM bindings b JOIN event_log e ON e.seq = b.seq"
                )
                parts = await conn.fetchval(
                    "SELECT count(*) FROM event_log WHERE type = 'tephra.session.part.v1'"
                )
                sessions = await _session_figures(conn)
        finally:
            await conn.close()
            await producer.stop()
    elapsed = float(last) - led if last is not None else float("nan")
    print(f"saturation: backlog of {jobs} jobs x {opts.tasks_per_job} tasks = {total} tasks on {nodes} nodes")
    print(f"  bound {bound}/{total} in {elapsed:.2f} s from leadership: {bound / elapsed:,.0f} bindings/s"
          f" (goal >= 5,000); {parts} session parts")  # fmt: skip
    print(f"  {sessions}")


@contextlib.contextmanager
def servers(logs_option: str) -> Iterator[tuple[EmbeddedPostgres, EmbeddedBroker, Path]]:
    """The embedded PostgreSQL and broker under a temporary directory, and where the runners log."""
    with tempfile.TemporaryDirectory(prefix="tephra-bench-") as tmp:
        base = Path(tmp)
        base.chmod(0o711)
        logs = Path(logs_option) if logs_option else base / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with EmbeddedPostgres(base / "pg", durable=False) as postgres, EmbeddedBroker() as broker:
            yield postgres, broker, logs


async def main(opts: argparse.Namespace) -> None:
    with servers(opts.logs) as (postgres, broker, logs):
        if not opts.skip_latency:
            await latency(broker.bootstrap, postgres.dsn, logs, opts)
        if not opts.skip_saturation:
            await saturation(broker.bootstrap, postgres.dsn, logs, opts)


def _options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0, help="submissions per second")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to submit")
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--period", type=float, default=1.0, help="TEPHRA_SCHEDULE_PERIOD of the scheduler")
    parser.add_argument("--backlog-jobs", type=int, default=5_000)
    parser.add_argument("--tasks-per-job", type=int, default=4)
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-saturation", action="store_true")
    parser.add_argument("--logs", default="", help="keep the services' logs in this directory")
    return parser.parse_args()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(_options()))
