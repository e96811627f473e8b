"""The placement index's incremental caches equal a from-scratch evaluation.

The index keeps, per task shape, fit / score vectors and the fit-error
histogram up to date with only the node rows that changed (scalar path for a
few rows, numpy for many).  After random placements, pipelines, evictions and
discards, every cached answer must equal what a brand-new index computes from
the same node state.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core.config import DEFAULT_CONFIG
from scheduler.core.framework import Session
from scheduler.core.placement import PlacementIndex
from scheduler.core.registry import build_registry
from scheduler.core.snapshot import ClusterSnapshot, Job, Node, PodGroupPhase, Queue, Task
from scheduler.core.state import TaskState
from scheduler.core.statement import Statement

NOW = datetime(2026, 1, 1, tzinfo=UTC)
GI = 2**30
SHAPES = (
    {"cpu": 1000, "memory": GI},
    {"cpu": 2000, "memory": 2 * GI, "nvidia.com/gpu": 1},
    {"cpu": 4000, "memory": 8 * GI, "nvidia.com/gpu": 2},
)


def _session(nodes: int, tasks: int, selector_every: int) -> Session:
    node_list = tuple(
        Node(
            f"n{i:03d}",
            {"cpu": 8000, "memory": 16 * GI, "nvidia.com/gpu": 4 * (i % 2), "pods": 6},
            {"zone": "a" if i % 3 else "b"},
        )
        for i in range(nodes)
    )
    job_tasks = tuple(
        Task(
            "ns",
            f"j-w-{i}",
            SHAPES[i % len(SHAPES)],
            node_selector={"zone": "b"} if selector_every and i % selector_every == 0 else {},
        )
        for i in range(tasks)
    )
    snapshot = ClusterSnapshot(
        nodes=node_list,
        queues=(Queue("q"),),
        jobs=(Job("ns", "j", "q", min_member=1, phase=PodGroupPhase.INQUEUE, tasks=job_tasks),),
    )
    ssn = Session(snapshot, DEFAULT_CONFIG, NOW)
    registry = build_registry()
    for tier_index, tier in enumerate(DEFAULT_CONFIG.tiers):
        for option in tier.plugins:
            registry.plugin(option, tier_index).on_session_open(ssn)
    return ssn


def _answers(index: PlacementIndex, task: TaskState) -> tuple[object, ...]:
    fit = index.view(task)
    errors = index.fit_errors(task)
    return (
        index.choose_gradient(task),
        fit.best_idle.tolist(),
        fit.best_future.tolist(),
        fit.reason.tolist(),
        np.nan_to_num(index.scores(task), nan=-1.0).tolist(),
        errors.histogram,
        errors.resource_failures,
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.integers(1, 90),
    selector_every=st.sampled_from([0, 2, 5]),
    seed=st.integers(0, 2**32),
    length=st.integers(0, 300),
    # Probing rarely lets many rows change between two reads of a shape (numpy path).
    probe_every=st.sampled_from([1, 7, 1000]),
)
def test_incremental_caches_equal_a_fresh_index(
    nodes: int, selector_every: int, seed: int, length: int, probe_every: int
) -> None:
    rng = random.Random(seed)
    ops = ("allocate", "allocate", "allocate", "pipeline", "discard")
    steps = [(rng.choice(ops), rng.randrange(10**6)) for _ in range(length)]
    ssn = _session(nodes, 200, selector_every)
    index = ssn.placement
    tasks = sorted(ssn.tasks.values(), key=lambda t: t.uid)
    stmt = Statement(ssn)
    for step, (op, pick) in enumerate(steps, 1):
        pending = [t for t in tasks if t.pending]
        if op == "discard" or not pending:
            stmt.discard()
            stmt = Statement(ssn)
        else:
            task = pending[pick % len(pending)]
            # Ask for the histogram first so the shape tracks failure labels from now on.
            index.fit_errors(task)
            row, on_idle = index.choose_gradient(task)
            if row < 0:
                continue
            if op == "allocate" and on_idle:
                stmt.allocate(task, row)
            else:
                stmt.pipeline(task, row)
        if step % probe_every == 0 or step == len(steps):
            for probe in tasks[: len(SHAPES) * 2]:
                assert _answers(index, probe) == _answers(PlacementIndex(ssn), probe)
