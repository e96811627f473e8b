"""The HTTP API under load: ``POST /v1/manifests`` jobs/s, ``GET /v1/jobs`` first page at 50k jobs.

(Named http_api, not api: a bench script may not shadow the ``api`` package.)

Runs the deployed runners in their own processes, as compose.yaml starts
them: ``tephra projector``, ``tephra scheduler`` and ``tephra api``, on the
embedded broker and PostgreSQL; this process is only the HTTP client.  It
prints figures and asserts nothing.

* **submit**: a queue and ``--nodes`` nodes, then ``--jobs`` single-task jobs
  POSTed in requests of ``--batch`` jobs each, ``--clients`` requests at a
  time, as YAML (the first half) and as JSON (the second half).  jobs/s is
  accepted jobs (validated, produced, acknowledged by the broker) over the
  wall time of the POSTs; then the time until the projection holds them all.
  The scheduler runs all along (its sessions see the growing backlog).
* **read**: with every job projected, ``--reads`` sequential
  ``GET /v1/jobs`` first pages (100 jobs each; also one filtered by queue and
  phase, and one deep page by cursor): p50 / p99 / max in ms; first while
  the scheduler runs its sessions over the backlog, then with it stopped.

Run ``python bench/http_api.py`` (about 2-4 minutes), or e.g.
``python bench/http_api.py --jobs 5000 --reads 200`` for a quick look.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's packages, whatever is installed

import asyncpg
import httpx

from api.embedded import create_topics
from bench.e2e import (
    _database,
    _endpoints,
    _leader_at,
    _percentile,
    _process,
    _projector,
    _scheduler,
    servers,
)
from bench.host import cpu_loop_seconds, memory_walk_seconds
from events.topics import Topics

QUEUE = "bench"


def _job_yaml(i: int) -> str:
    return (
        "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\n"
        f"metadata: {{name: job-{i:06d}, namespace: bench}}\n"
        f"spec:\n  queue: {QUEUE}\n  tasks:\n  - name: worker\n    replicas: 1\n    template:\n"
        "      spec:\n        containers:\n"
        '        - {name: main, image: busybox, resources: {requests: {cpu: "1", memory: 1Gi}}}\n'
    )


def _job_json(i: int) -> dict[str, object]:
    container = {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": f"job-{i:06d}", "namespace": "bench"},
        "spec": {
            "queue": QUEUE,
            "tasks": [{"name": "worker", "replicas": 1, "template": {"spec": {"containers": [container]}}}],
        },
    }


def _cluster_yaml(nodes: int) -> str:
    docs = [
        "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\n"
        f"metadata: {{name: {QUEUE}}}\nspec: {{weight: 1}}\n"
    ]
    docs += [
        f"apiVersion: v1\nkind: Node\nmetadata: {{name: node-{n:04d}}}\n"
        'status:\n  allocatable: {cpu: "64", memory: 512Gi, pods: "110"}\n'
        for n in range(nodes)
    ]
    return "---\n".join(docs)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ms(values: Sequence[float]) -> str:
    return (
        f"p50 {1000 * statistics.median(values):.1f} ms, p99 {1000 * _percentile(values, 0.99):.1f} ms,"
        f" max {1000 * max(values):.1f} ms"
    )


async def _submit(api: httpx.AsyncClient, opts: argparse.Namespace) -> None:
    batches = [range(start, min(start + opts.batch, opts.jobs)) for start in range(0, opts.jobs, opts.batch)]
    half = len(batches) // 2
    bodies: list[tuple[str, str]] = [
        ("application/yaml", "---\n".join(_job_yaml(i) for i in batch)) for batch in batches[:half]
    ] + [("application/json", json.dumps([_job_json(i) for i in batch])) for batch in batches[half:]]
    took: dict[str, list[float]] = {"application/yaml": [], "application/json": []}
    queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)

    async def client() -> None:
        while not queue.empty():
            media, text = queue.get_nowait()
            began = time.perf_counter()
            response = await api.post("/v1/manifests", content=text, headers={"content-type": media})
            if response.status_code != 202:
                raise RuntimeError(f"POST /v1/manifests: {response.status_code} {response.text[:500]}")
            took[media].append(time.perf_counter() - began)

    began = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(opts.clients)))
    wall = time.perf_counter() - began
    print(
        f"submit: {opts.jobs} jobs in {len(bodies)} requests of {opts.batch}, {opts.clients} at a time:"
        f" {opts.jobs / wall:.0f} jobs/s accepted ({wall:.1f} s)"
    )
    for media, times in took.items():
        if times:
            print(
                f"  {media}: {opts.batch / statistics.mean(times):.0f} jobs/s per client;"
                f" request {_ms(times)}"
            )


async def _reads(api: httpx.AsyncClient, opts: argparse.Namespace) -> None:
    cases: dict[str, dict[str, str | int]] = {
        "first page": {},
        "first page, queue and phase filter": {"queue": QUEUE, "phase": "Pending"},
    }
    deep = (await api.get("/v1/jobs", params={"limit": opts.jobs // 2})).json()  # capped at the page limit
    cases["a later page (cursor)"] = {"cursor": deep["nextCursor"]}
    for label, params in cases.items():
        times = []
        for _ in range(opts.reads):
            began = time.perf_counter()
            response = await api.get("/v1/jobs", params=params)
            times.append(time.perf_counter() - began)
            if response.status_code != 200 or len(response.json()["items"]) != 100:
                raise RuntimeError(f"GET /v1/jobs {params}: {response.status_code} {response.text[:300]}")
        print(f"  GET /v1/jobs {label} (100 jobs): {_ms(times)} over {opts.reads} requests")


async def _filtered_plan(dsn: str) -> None:
    """The jobs per phase, and how PostgreSQL reads the filtered page (which index, how many rows)."""
    conn = await asyncpg.connect(dsn)
    try:
        phases = await conn.fetch("SELECT phase, count(*) AS n FROM jobs GROUP BY phase ORDER BY phase")
        print("  jobs per phase: " + ", ".join(f"{r['phase']} {r['n']}" for r in phases))
        plan = await conn.fetch(
            "EXPLAIN (ANALYZE, COSTS OFF)"
            " SELECT id FROM jobs WHERE queue = $1 AND phase = $2 ORDER BY id LIMIT 101",
            QUEUE,
            "Pending",
        )
        print("  the filtered page's plan: " + " | ".join(r[0].strip() for r in plan[:3]))
    finally:
        await conn.close()


async def main(opts: argparse.Namespace) -> None:
    print(f"host reference: integer loop {cpu_loop_seconds():.2f} s, dict walk {memory_walk_seconds():.2f} s")
    with servers(opts.logs) as (postgres, broker, logs):
        topics = Topics(prefix="bench-api")
        await create_topics(broker.bootstrap, topics.all(), partitions=1)
        port = _free_port()
        settings = {**_endpoints(broker.bootstrap, postgres.dsn, topics)}
        async with _database(postgres.dsn) as dsn, contextlib.AsyncExitStack() as stack:
            settings["TEPHRA_DATABASE_URL"] = dsn
            api_env = {
                **settings,
                "TEPHRA_API_ADDR": f"127.0.0.1:{port}",
                "TEPHRA_API_BODY_LIMIT": str(2**26),
            }
            await stack.enter_async_context(_projector(broker.bootstrap, dsn, topics, logs / "projector.log"))
            scheduler = contextlib.AsyncExitStack()
            sched = await scheduler.enter_async_context(
                _scheduler(broker.bootstrap, dsn, topics, opts.period, logs / "scheduler.log")
            )
            stack.push_async_exit(scheduler)
            api_process = await stack.enter_async_context(_process("api", api_env, logs / "api.log"))
            await _leader_at(sched)
            assert api_process.stdout is not None
            line = (await asyncio.wait_for(api_process.stdout.readline(), timeout=60)).decode()
            url = line.removeprefix("tephra: API at ").strip()
            api = await stack.enter_async_context(httpx.AsyncClient(base_url=url, timeout=300))
            cluster = await api.post(
                "/v1/manifests?wait=archived",
                content=_cluster_yaml(opts.nodes),
                headers={"content-type": "application/yaml"},
            )
            if cluster.status_code != 202:
                raise RuntimeError(f"the cluster: {cluster.status_code} {cluster.text[:500]}")
            began = time.perf_counter()
            await _submit(api, opts)
            conn = await asyncpg.connect(dsn)
            try:
                while await conn.fetchval("SELECT count(*) FROM jobs") < opts.jobs:  # noqa: ASYNC110
                    await asyncio.sleep(0.2)
            finally:
                await conn.close()
            print(f"  all {opts.jobs} jobs projected {time.perf_counter() - began:.1f} s after the first")
            print("reads while the scheduler runs sessions over the backlog:")
            await _reads(api, opts)
            await scheduler.aclose()
            print("reads with the scheduler stopped (the projector idle):")
            await _reads(api, opts)
            await _filtered_plan(dsn)


def _options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=500, help="jobs per POST")
    parser.add_argument("--clients", type=int, default=2, help="POSTs in flight at a time")
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--reads", type=int, default=500, help="GETs per case")
    parser.add_argument("--period", type=float, default=1.0, help="TEPHRA_SCHEDULE_PERIOD of the scheduler")
    parser.add_argument("--logs", default="", help="keep the services' logs in this directory")
    return parser.parse_args()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(_options()))
