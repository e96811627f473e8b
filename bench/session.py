"""Session throughput with the default (Helm) configuration.

Prints, for each (nodes, pending tasks) case: session seconds, placements
per second and peak resident memory (each case runs in its own process, so
``ru_maxrss`` is that case's peak; tracemalloc would slow the session ~3x).

Jobs have mixed gang sizes (1, 2, 4, 8, 16 tasks; minAvailable = all tasks
for half of them, 1 for the others) and five task shapes, spread over four
queues; nodes are 64 cpu / 512Gi / 8 GPU.  Run:  python bench/session.py [--quick] [--profile]
"""

from __future__ import annotations

import argparse
import random
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's packages, whatever is installed

from bench.host import cpu_loop_seconds
from projector.heap import tune_gc
from scheduler import core_compiled
from scheduler.core.config import DEFAULT_CONFIG
from scheduler.core.decisions import Bind
from scheduler.core.session import run_session
from scheduler.core.snapshot import ClusterSnapshot, Job, Node, PodGroupPhase, Queue, Task

GI = 2**30
PROFILE = str(Path(tempfile.gettempdir()) / "tephra-session.prof")
NOW = datetime(2026, 1, 1, tzinfo=UTC)
SHAPES = (
    {"cpu": 4000, "memory": 16 * GI, "nvidia.com/gpu": 1},
    {"cpu": 8000, "memory": 32 * GI, "nvidia.com/gpu": 2},
    {"cpu": 2000, "memory": 8 * GI},
    {"cpu": 16000, "memory": 64 * GI, "nvidia.com/gpu": 4},
    {"cpu": 1000, "memory": 4 * GI},
)
GANGS = (1, 2, 4, 8, 16)


def build(nodes: int, tasks: int, seed: int = 7) -> ClusterSnapshot:
    rng = random.Random(seed)
    node_list = tuple(
        Node(f"node-{i:05d}", {"cpu": 64000, "memory": 512 * GI, "nvidia.com/gpu": 8, "pods": 110})
        for i in range(nodes)
    )
    queues = tuple(Queue(f"q{i}", weight=i + 1) for i in range(4))
    jobs = []
    made = 0
    while made < tasks:
        size = min(rng.choice(GANGS), tasks - made)
        shape = rng.choice(SHAPES)
        name = f"job-{len(jobs):06d}"
        gang = rng.random() < 0.5
        jobs.append(
            Job(
                namespace="bench",
                name=name,
                queue=f"q{len(jobs) % 4}",
                min_member=size if gang else 1,
                phase=PodGroupPhase.INQUEUE,
                tasks=tuple(Task("bench", f"{name}-w-{i}", shape) for i in range(size)),
            )
        )
        made += size
    return ClusterSnapshot(nodes=node_list, queues=queues, jobs=tuple(jobs))


def run(nodes: int, tasks: int) -> None:
    tune_gc()  # as every Tephra process does (projector.heap)
    snapshot = build(nodes, tasks)
    start = time.perf_counter()
    result = run_session(snapshot, DEFAULT_CONFIG, NOW)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    placed = sum(1 for d in result.decisions if isinstance(d, Bind))
    print(
        f"{nodes:>6} nodes {tasks:>7} tasks: {seconds:7.2f} s  {placed:>7} placed  "
        f"{placed / seconds:>9,.0f} placements/s  peak RSS {peak / 2**20:7.1f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="only the 1k-node cases")
    parser.add_argument("--profile", action="store_true", help="cProfile the 5k x 50k case")
    parser.add_argument("--case", nargs=2, type=int, metavar=("NODES", "TASKS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        run(*args.case)
        return
    if args.profile:
        import cProfile
        import pstats

        print(f"core: {'compiled (mypyc)' if core_compiled() else 'interpreted'}")
        tune_gc()
        snapshot = build(5000, 50000)
        cProfile.runctx("run_session(snapshot, DEFAULT_CONFIG, NOW)", globals(), locals(), PROFILE)
        pstats.Stats(PROFILE).sort_stats("tottime").print_stats(20)
        return
    core = "compiled (mypyc)" if core_compiled() else "interpreted"
    print(f"core: {core}; machine reference loop: {cpu_loop_seconds():.2f} s")
    cases = [(1000, 10000), (1000, 50000)]
    if not args.quick:
        cases += [(5000, 10000), (5000, 50000), (10000, 10000), (10000, 50000), (10000, 100000)]
    for nodes, tasks in cases:
        # A fresh process per case: its peak RSS is that case's alone.
        subprocess.run([sys.executable, __file__, "--case", str(nodes), str(tasks)], check=True)  # noqa: S603


if __name__ == "__main__":
    main()
