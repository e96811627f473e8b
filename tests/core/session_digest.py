"""Print one SHA-256 over everything a few large sessions produce.

    python -m tests.core.session_digest

Decisions, pipelined tasks, phases, ranked reasons and the full trace of:
a bench-shaped cluster with the default configuration; the next session
after it (advance) with high-priority jobs added and preempt and reclaim
configured; and the same with capacity instead of proportion.  Run in the
compiled and the interpreted form of the core (installed, and a copy of the sources),
the outputs must be equal (tests/core/test_compiled_core.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from datetime import UTC, datetime

from scheduler.core.config import DEFAULT_CONFIG, parse_scheduler_config
from scheduler.core.session import SessionResult, advance, run_session
from scheduler.core.snapshot import ClusterSnapshot, Job, Node, PodGroupPhase, PriorityClass, Queue, Task

GI = 2**30
NOW = datetime(2026, 1, 1, tzinfo=UTC)
SHAPES = (
    {"cpu": 4000, "memory": 16 * GI, "nvidia.com/gpu": 1},
    {"cpu": 8000, "memory": 32 * GI, "nvidia.com/gpu": 2},
    {"cpu": 2000, "memory": 8 * GI},
    {"cpu": 16000, "memory": 64 * GI, "nvidia.com/gpu": 4},
)
PREEMPTING = {
    "actions": "enqueue, allocate, preempt, reclaim, backfill",
    "tiers": [
        {"plugins": [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}]},
        {
            "plugins": [
                {"name": "overcommit"},
                {"name": "drf"},
                {"name": "predicates"},
                {"name": "QUOTA"},
                {"name": "nodeorder"},
                {"name": "binpack"},
            ]
        },
    ],
}


def _jobs(rng: random.Random, prefix: str, count: int, priority_class: str | None) -> list[Job]:
    jobs = []
    for i in range(count):
        size = rng.choice((1, 2, 4, 8))
        shape = rng.choice(SHAPES)
        name = f"{prefix}-{i:04d}"
        jobs.append(
            Job(
                namespace="digest",
                name=name,
                queue=f"q{i % 3}",
                min_member=size if rng.random() < 0.5 else 1,
                phase=PodGroupPhase.INQUEUE,
                priority_class=priority_class,
                tasks=tuple(
                    Task("digest", f"{name}-w-{k}", shape, priority_class=priority_class) for k in range(size)
                ),
            )
        )
    return jobs


def _first_snapshot() -> ClusterSnapshot:
    rng = random.Random(11)
    nodes = tuple(
        Node(f"node-{i:04d}", {"cpu": 64000, "memory": 512 * GI, "nvidia.com/gpu": 8, "pods": 110})
        for i in range(120)
    )
    queues = (Queue("q0", weight=1), Queue("q1", weight=2), Queue("q2", weight=3, reclaimable=True))
    classes = (PriorityClass("low", 10), PriorityClass("high", 1000))
    return ClusterSnapshot(
        nodes=nodes, queues=queues, priority_classes=classes, jobs=tuple(_jobs(rng, "job", 400, "low"))
    )


def _fingerprint(result: SessionResult) -> dict[str, object]:
    return {
        "events": [event.model_dump(mode="json") for event in result.events()],
        "phases": result.phases,
        "pending": {job: [dataclasses.asdict(r) for r in reasons] for job, reasons in result.pending.items()},
        "trace": result.trace_json(),
    }


def digest() -> str:
    first = _first_snapshot()
    out = [_fingerprint(result := run_session(first, DEFAULT_CONFIG, NOW))]
    second = advance(first, result)
    urgent = _jobs(random.Random(12), "urgent", 60, "high")
    second = dataclasses.replace(second, jobs=(*second.jobs, *urgent))
    for quota in ("proportion", "capacity"):
        config = parse_scheduler_config(json.loads(json.dumps(PREEMPTING).replace("QUOTA", quota)))
        out.append(_fingerprint(run_session(second, config, NOW)))
    text = json.dumps(out, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


if __name__ == "__main__":
    print(digest())
