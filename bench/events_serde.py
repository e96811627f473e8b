"""Throughput of the event wire format: decode, encode and canonical_json.

Prints events per second for each sample type and for a mix shaped like a
busy cluster (by default per 6 events: 1 JobSubmitted, 1 NodeReported, 4
TaskStarted).  Run: ``python bench/events_serde.py [--seconds 2]``.
The projector's goal is >= 20,000 events/s end to end, so decode plus
canonical_json must leave most of a 50 us budget per event to Postgres.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project (run as a script)

from events.models import Event
from events.serde import canonical_json, decode, encode
from tests.events.samples import job_submitted, node_reported, task_started


def _rate(work: Callable[[], object], batch: int, seconds: float) -> float:
    """Events per second of ``work`` (which handles ``batch`` events), best of 3 runs."""
    best = 0.0
    for _ in range(3):
        done = 0
        start = time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds / 3:
            work()
            done += batch
        best = max(best, done / elapsed)
    return best


def _mix(jobs: int, nodes: int, tasks: int) -> list[Event]:
    events: list[Event] = []
    for i in range(jobs):
        events.append(job_submitted(f"job-{i}"))
    for i in range(nodes):
        events.append(node_reported(f"gpu-node-{i:03d}"))
    for i in range(tasks):
        events.append(task_started(i))
    return events


def _report(name: str, events: Sequence[Event], seconds: float) -> None:
    raws = [encode(event) for event in events]

    def decode_all() -> None:
        for raw in raws:
            decode(raw)

    def encode_all() -> None:
        for event in events:
            encode(event)

    def round_trip() -> None:
        for raw in raws:
            encode(decode(raw))

    def project() -> None:  # what the projector does per event before SQL
        for raw in raws:
            canonical_json(decode(raw))

    n = len(events)
    print(
        f"{name:<14} decode {_rate(decode_all, n, seconds):>9,.0f}/s  "
        f"encode {_rate(encode_all, n, seconds):>9,.0f}/s  "
        f"decode+encode {_rate(round_trip, n, seconds):>9,.0f}/s  "
        f"decode+canonical {_rate(project, n, seconds):>9,.0f}/s  "
        f"(mean {sum(map(len, raws)) / n:,.0f} B)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="measuring time per figure")
    parser.add_argument("--mix", type=int, nargs=3, default=(1, 1, 4), metavar=("JOBS", "NODES", "TASKS"))
    args = parser.parse_args()

    _report("JobSubmitted", [job_submitted()], args.seconds)
    _report("NodeReported", [node_reported()], args.seconds)
    _report("TaskStarted", [task_started()], args.seconds)
    jobs, nodes, tasks = args.mix
    _report(f"mix {jobs}:{nodes}:{tasks}", _mix(jobs, nodes, tasks), args.seconds)


if __name__ == "__main__":
    main()
