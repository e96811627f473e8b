"""The simulated cluster's I/O: read projected tasks from PostgreSQL, produce observations to Kafka.

``tasks.seq`` (the seq of the last event that changed a task) identifies the
decision that put a Bound or Releasing task in its state, and the TaskStarted
of a Running one, so the planner's event ids stay the same across restarts.
A Running task's runtime counts from its TaskStarted event's time.

Broker and database outages are waited out (logged, retried with backoff);
the planner keeps its memory across retries, so nothing is published twice.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Sequence

import asyncpg
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from events.models import Event
from events.serde import encode
from events.topics import Topics, kafka_key, topic_for
from kube.settings import SimClusterSettings
from kube.sim import SimPlanner, TaskView, run_sim_cluster
from kube.sim_runtime import SIM_RUNTIME_ANNOTATION, SimRuntimeError, parse_duration
from kube.sim_telemetry import Headers, SimTelemetry, set_connected
from projector.connections import DatabaseAccess, KafkaAccess, create_pool, new_producer, start_client
from projector.migrate import require_schema

__all__ = ["SIM_WORK_QUERY", "read_sim_tasks", "run_sim_service"]

log = logging.getLogger(__name__)

# Tasks with something for the simulator to do: Bound (start it), Releasing
# (stop it), Running with a simulated runtime (finish it).  Each branch reads
# only its rows, so a poll costs what there is to do, not the size of the tasks
# table: the first through transitional_tasks, which the projector keeps in
# line with tasks (projector/migrations/0005: an index on status would make
# every task update rewrite every index of tasks), the second through a
# partial index (0002).  The first branch looks each task up by its key: the
# OFFSET 0 keeps the subquery apart, as otherwise, with thousands of tasks in
# transition, the planner preferred a hash join over a scan of all tasks (1M
# tasks, 5k Bound: 110 ms a poll instead of 25).  The annotation is a literal,
# not a parameter: a partial index matches only a predicate it can see
# (asyncpg's prepared statements would otherwise get a generic plan).
SIM_WORK_QUERY = """
SELECT t.id, t.job_id, t.status, t.node, t.seq, NULL AS runtime, NULL::timestamptz AS started
  FROM transitional_tasks w
 CROSS JOIN LATERAL (SELECT * FROM tasks
                      WHERE tasks.id = w.id AND tasks.status IN ('Bound', 'Releasing') OFFSET 0) AS t
UNION ALL
SELECT t.id, t.job_id, t.status, t.node, t.seq,
       j.spec -> 'annotations' ->> 'tephra.dev/sim-runtime' AS runtime,
       e.time AS started
  FROM jobs j
  JOIN tasks t ON t.job_id = j.id AND t.status = 'Running'
  LEFT JOIN event_log e ON e.seq = t.seq
 WHERE j.spec -> 'annotations' ? 'tephra.dev/sim-runtime'
 ORDER BY id
"""

_RETRY_AFTER = (0.2, 0.5, 1.0, 2.0, 5.0)


async def read_sim_tasks(pool: asyncpg.Pool) -> list[TaskView]:
    rows = await pool.fetch(SIM_WORK_QUERY)
    views = []
    for row in rows:
        runtime = None
        if row["runtime"] is not None:
            try:
                runtime = parse_duration(row["runtime"])
            except SimRuntimeError:
                # `tephra submit` rejects these; another producer may not have.
                log.warning(
                    "job %s: ignoring bad %s %r", row["job_id"], SIM_RUNTIME_ANNOTATION, row["runtime"]
                )
        views.append(
            TaskView(
                task_id=row["id"],
                job_id=row["job_id"],
                status=row["status"],
                node=row["node"],
                decision=str(row["seq"]),
                runtime=runtime,
                since=row["started"],
                seq=row["seq"],
            )
        )
    return views


async def _publish(
    producer: AIOKafkaProducer, topics: Topics, events: Sequence[Event], headers: Sequence[Headers]
) -> None:
    futures = [
        await producer.send(topic_for(e, topics), encode(e), key=kafka_key(e), headers=h)
        for e, h in zip(events, headers, strict=True)
    ]
    await asyncio.gather(*futures)


async def _require_schema(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        await require_schema(conn)


async def run_sim_service(
    settings: SimClusterSettings,
    *,
    kafka: KafkaAccess,
    database: DatabaseAccess,
    topics: Topics,
    cluster: str,
) -> None:
    """Run the simulated cluster until cancelled."""
    planner = SimPlanner(
        bind_delay=settings.sim_bind_delay, evict_delay=settings.sim_evict_delay, cluster=cluster
    )
    failures = 0
    while True:
        began = time.monotonic()
        try:
            async with create_pool(database, min_size=1, max_size=2) as pool:
                await _require_schema(pool)
                producer = new_producer(kafka, acks="all")
                telemetry = SimTelemetry(pool)
                try:
                    await start_client(producer, kafka)
                    set_connected(True)
                    log.info("simulated cluster %s: running", cluster)
                    await run_sim_cluster(
                        read_tasks=telemetry.wrap_read(functools.partial(read_sim_tasks, pool)),
                        publish=telemetry.wrap_publish(functools.partial(_publish, producer, topics)),
                        planner=planner,
                        poll_interval=settings.sim_poll_interval,
                    )
                finally:
                    set_connected(False)
                    await producer.stop()
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, KafkaError) as exc:
            if time.monotonic() - began > 30:
                failures = 0  # the last run was healthy: retry quickly
            delay = _RETRY_AFTER[min(failures, len(_RETRY_AFTER) - 1)]
            failures += 1
            log.warning("sim cluster: %s; retrying in %.1fs", exc, delay)
            await asyncio.sleep(delay)
