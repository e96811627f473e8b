"""The per-shape node cache never answers for a plugin that is not shape-pure.

The test plugin allows at most one task of a job per node: its answer depends
on where the job's other tasks are, not on the task's shape and the node's
resources.  Two jobs of the same shape are allocated one after the other on
identical nodes; a cached verdict computed for the first job (or for a node
in the same resource state) would send the second job's tasks elsewhere.
"""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt
import pytest

from scheduler.core.actions.allocate import AllocateAction
from scheduler.core.config import PluginOption, parse_scheduler_config
from scheduler.core.decisions import Bind
from scheduler.core.framework import Session
from scheduler.core.state import TaskState
from tests.core.builders import job, node, snapshot, task

IntArray = npt.NDArray[np.int64]
NOW = datetime(2026, 1, 1, tzinfo=UTC)
CONFIG = parse_scheduler_config({"actions": "allocate", "tiers": []})


class OnePerNode:
    """At most one task of a job per node (a stand-in for pod anti-affinity)."""

    def __init__(self, *, shape_pure: bool) -> None:
        self.shape_pure = shape_pure
        self.option = PluginOption("one-per-node")
        self.tier = 0

    def on_session_open(self, ssn: Session) -> None:
        self.ssn = ssn
        self.taken = ssn.reason_id("node(s) already run a task of this job", unresolvable=False)
        ssn.add_predicate(self, self._batch, row=self._row, shape_pure=self.shape_pure)

    def _row(self, task: TaskState, row: int) -> int:
        here = self.ssn.nodes.tasks[row].values()
        return self.taken if any(t.job is task.job for t in here) else 0

    def _batch(self, task: TaskState, rows: IntArray) -> IntArray:
        return np.array([self._row(task, row) for row in rows.tolist()], dtype=np.int64)


def _allocate(plugin: OnePerNode) -> tuple[Session, dict[str, str]]:
    # Eight nodes: a placement changes one row, few enough for the index's per-row
    # (memoised) refresh as well as its full one on the first read.
    nodes = [node(f"n{i}") for i in range(1, 9)]
    jobs = [job(name, [task(name, i) for i in range(2)], min_member=1) for name in ("a", "b")]
    ssn = Session(snapshot(nodes, jobs), CONFIG, NOW)
    plugin.on_session_open(ssn)
    AllocateAction().execute(ssn)
    return ssn, {d.task: d.node for d in ssn.decisions if isinstance(d, Bind)}


def test_a_placement_dependent_plugin_never_gets_a_cached_answer() -> None:
    ssn, placed = _allocate(OnePerNode(shape_pure=False))
    assert ssn.placement.uncached_for == ("one-per-node",)
    # Every node scores 0, so each task takes the first node its job is not on yet.
    assert placed == {"ns/a-w-0": "n1", "ns/a-w-1": "n2", "ns/b-w-0": "n1", "ns/b-w-1": "n2"}


def test_the_scenario_catches_a_cached_answer() -> None:
    """Declared shape-pure (wrongly), the plugin gets job a's verdicts for job b: the
    scenario above is one where a cached answer changes the placements."""
    ssn, placed = _allocate(OnePerNode(shape_pure=True))
    assert ssn.placement.uncached_for == ()
    assert placed["ns/b-w-0"] != "n1"


@pytest.mark.parametrize("shape_pure", [True, False])
def test_purity_is_declared_per_registration(shape_pure: bool) -> None:
    ssn = Session(snapshot([node("n1")], []), CONFIG, NOW)
    OnePerNode(shape_pure=shape_pure).on_session_open(ssn)
    assert ssn.placement_dependent() == ([] if shape_pure else ["one-per-node"])
