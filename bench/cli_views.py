"""``tephra get jobs`` and ``tephra describe job`` over a large projection: wall seconds per run.

Starts an embedded PostgreSQL, applies the projection's migrations and writes
``--jobs`` pending 4-task gangs (each with a pending reason in the newest
session, as a backlog the scheduler cannot place has), then runs the console
script as a user does, in its own process: ``get jobs`` as a table, ``-o wide``,
``-o json`` and ``-o name``, and ``describe job``.  It prints figures and
asserts nothing.

Run ``python bench/cli_views.py`` (about a minute), or ``--jobs 5000``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's packages, whatever is installed

import asyncpg

from api.embedded import EmbeddedPostgres
from bench.host import cpu_loop_seconds
from projector.migrate import apply_migrations

REASON = {
    "code": "enqueue-rejected",
    "message": "resource in cluster is overused: overused nvidia.com/gpu"
    " (nvidia.com/gpu: inqueue 8 + request 32 > total 24 x 1.2 - used 20)",
}


async def _fill(dsn: str, jobs: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await apply_migrations(conn)
        task = {"name": "worker", "resources": {"cpu": 4000}}
        spec = json.dumps({"min_available": 4, "task_specs": [task]})
        job_ids = [f"hotfix-team/hotfix-llama-finetune-{i:05d}" for i in range(jobs)]
        await conn.copy_records_to_table(
            "jobs",
            records=[
                (j, "hotfix-team", j.split("/")[1], "training", "Pending", "", datetime.now(UTC), 1, spec)
                for j in job_ids
            ],
            columns=["id", "namespace", "name", "queue", "phase", "phase_reason", "created", "seq", "spec"],
        )
        await conn.copy_records_to_table(
            "tasks",
            records=[
                (f"{j}-worker-{k}", j, "worker", k, "Pending", None, 1) for j in job_ids for k in range(4)
            ],
            columns=["id", "job_id", "role", "idx", "status", "node", "seq"],
        )
        doc = json.dumps({"pending": [{"job": j, "reasons": [REASON]} for j in job_ids]})
        await conn.execute(
            "INSERT INTO sessions (session_id, seq, leader_epoch, input_seq, config_version, now, accepted,"
            " voided, doc) VALUES ('s-1', 2, 1, 1, 1, now(), 0, 0, $1::jsonb)",
            doc,
        )
    finally:
        await conn.close()


def _seconds(dsn: str, args: list[str], runs: int) -> float:
    env = {**os.environ, "TEPHRA_DATABASE_URL": dsn, "TEPHRA_KAFKA_BOOTSTRAP": "127.0.0.1:9", "COLUMNS": "80"}
    took = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run(  # noqa: S603 - our own console script
            [sys.executable, "-m", "api.cli", *args], env=env, check=True, stdout=subprocess.DEVNULL
        )
        took.append(time.perf_counter() - began)
    return statistics.median(took)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=25_000)
    parser.add_argument("--runs", type=int, default=3)
    opts = parser.parse_args()
    print(f"host: cpu loop {cpu_loop_seconds():.2f} s")
    with tempfile.TemporaryDirectory(prefix="tephra-bench-") as folder, EmbeddedPostgres(folder) as postgres:
        asyncio.run(_fill(postgres.dsn, opts.jobs))
        print(f"{opts.jobs} pending jobs (4 tasks each), median of {opts.runs} runs, process start included:")
        one = "hotfix-team/hotfix-llama-finetune-00042"
        for label, args in (
            ("tephra get jobs -A", ["get", "jobs", "-A"]),
            ("tephra get jobs -A -o wide", ["get", "jobs", "-A", "-o", "wide"]),
            ("tephra get jobs -A -o json", ["get", "jobs", "-A", "-o", "json"]),
            ("tephra get jobs -A -o name", ["get", "jobs", "-A", "-o", "name"]),
            ("tephra describe job", ["describe", "job", one]),
            ("tephra --version (start-up only)", ["--version"]),
        ):
            print(f"  {label}: {_seconds(postgres.dsn, args, opts.runs):.2f} s")


if __name__ == "__main__":
    main()
