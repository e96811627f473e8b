"""``replay explain`` of a stuck gang behind a large backlog: the search keeps to its time budget.

    python bench/explain_backlog.py [--jobs N] [--nodes M] [--budgets S,S,...] [--database-url URL]

Builds an archive the live stack's way (tests/golden/history.py): ``--nodes``
8-GPU nodes of 64 cpu, ``--jobs`` single-task jobs of 8 cpu (8 run per node,
the rest wait: the backlog), and a 16 x 8-GPU gang with minResources in a
queue capped at 64 GPUs, which overcommit refuses first and the queue's
capability would refuse too.  Two sessions run, each over the whole backlog.
Then it times ``replay explain`` of the gang (as ``explain_job`` runs it) with
each of ``--budgets`` (default: the default budget, 0 = no search, and 120 s),
and prints the wall time and this process's CPU time, the search's own time,
re-runs, whether the search was cut, the blockers found and the suggested
change.  Asserts nothing.

Goal (issue 29): the search ends within its budget (default 5 s) on a 20k+-job backlog.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import asyncpg  # noqa: E402

from bench.host import cpu_loop_seconds  # noqa: E402
from events.models import JobSubmittedData  # noqa: E402
from replay.probe import DEFAULT_BUDGET_SECONDS  # noqa: E402
from replay.queries import explain_job  # noqa: E402
from replay.store import open_archive  # noqa: E402
from tests.golden.archive import load_rows  # noqa: E402
from tests.golden.history import LiveRun, gpu_node, job  # noqa: E402

GANG = "ml/stuck-gang"


def build(jobs: int, nodes: int) -> LiveRun:
    run = LiveRun()
    run.queue("batch")
    run.queue("research", capability={"nvidia.com/gpu": 64})
    for i in range(nodes):
        run.node(gpu_node(f"gpu-{i:04d}", 8))
    for i in range(jobs):
        run.submit(job(f"b{i:06d}", queue="batch", cpu=8))
    doc = job("stuck-gang", queue="research", replicas=16, gpu=8, min_available=16).model_dump(mode="json")
    doc["min_resources"] = {"nvidia.com/gpu": 128, "cpu": 16, "memory": "64Gi"}
    run.submit(JobSubmittedData.model_validate(doc))
    run.cycle()
    run.schedule()
    return run


async def measure(url: str, budgets: list[float]) -> None:
    async with open_archive(url) as reader:
        for budget in budgets:
            began, cpu = time.perf_counter(), time.process_time()
            explanation = await explain_job(reader, GANG, budget=budget)
            wall, cpu = time.perf_counter() - began, time.process_time() - cpu
            cf = explanation.counterfactual
            assert cf is not None  # the gang is pending: the search ran (or was cut)
            print(
                f"explain {GANG} (budget {budget:g} s): {wall:.2f} s in all ({cpu:.2f} s CPU), "
                f"search {cf.seconds:.2f} s, {cf.sessions_run} re-runs, cut {cf.cut}, blockers "
                f"{[b.reason.code for b in explanation.blockers]}"
                f"{'' if explanation.blockers_complete else ' (cut)'}"
            )
            print(f"  -> {cf.summary or cf.note}")


async def main_async(args: argparse.Namespace) -> None:
    print(f"host: cpu loop {cpu_loop_seconds():.2f} s")
    began = time.perf_counter()
    run = build(args.jobs, args.nodes)
    print(
        f"built {len(run.rows):,} events, {args.jobs:,} jobs on {args.nodes} nodes "
        f"({len(run.sessions)} sessions) in {time.perf_counter() - began:.1f} s"
    )
    if args.database_url:
        await load_rows(args.database_url, [r.to_json() for r in run.rows])
        await measure(args.database_url, args.budgets)
        return
    from api.embedded import EmbeddedPostgres

    base = Path(tempfile.mkdtemp(prefix="tephra-bench-explain-"))
    base.chmod(0o711)  # noqa: ASYNC240  (start-up; the server's account must enter it when run as root)
    try:
        with EmbeddedPostgres(base / "data", durable=False) as server:
            admin = await asyncpg.connect(server.dsn)
            try:
                await admin.execute('CREATE DATABASE "bench_explain"')
            finally:
                await admin.close()
            url = server.dsn.rsplit("/", 1)[0] + "/bench_explain"
            await load_rows(url, [r.to_json() for r in run.rows])
            await measure(url, args.budgets)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=23_000)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument(
        "--budgets",
        type=lambda text: [float(b) for b in text.split(",")],
        default=[DEFAULT_BUDGET_SECONDS, 0.0, 120.0],
        help="explain's search budgets to time, comma-separated",
    )
    parser.add_argument("--database-url", default=None, help="an empty database (default: embedded)")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
