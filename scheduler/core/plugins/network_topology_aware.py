"""network-topology-aware: which hyperNodes a job with a network topology may use, and which
is best (Volcano ``plugins/network-topology-aware``).

Gradients (``enableHyperNodeGradient``; ``hyperNodeGradientFn``): a breadth-first walk from
the search root keeps the hyperNodes of tier <= the job's highest allowed tier (soft mode:
the cluster-top tier, see ``Session.highest_tier``) and groups them by tier, lowest first;
allocate tries a gradient's hyperNodes and moves to the next tier only if none holds the gang.

* Search root: the cluster top; for a job that already has tasks placed, the highest
  ancestor (tier <= highest allowed) of its allocated hyperNode, the lowest common ancestor
  of the hyperNodes its placed tasks sit in.
* Pre-filter (jobs with nothing placed): the job's minResources must fit the hyperNode's
  summed Idle or FutureIdle as they were at session open (Volcano caches them then).

Order (``enableHyperNodeOrder``; ``HyperNodeOrderFn``): hyperNode binpacking: over the
weighted resources the job's tasks request, Σ w·(used + request)/allocatable ÷ Σ w, 0 if any
resource would exceed the hyperNode's allocatable; where several hyperNodes share the best
score each gets + (job tasks already on its nodes)/(job tasks); × 100 × ``weight``.

Node order for a topology job's tasks inside a hyperNode (``enableNodeOrder``; Volcano's
``batchNodeOrderFnForNetworkAwarePods``): nodes closer (by lowest common ancestor tier) to the
hyperNode the job's placed tasks span score higher, so a gang inside a wide hyperNode keeps
its tasks in the narrowest one that holds them.

Arguments: ``weight`` (1), ``hypernode.binpack.cpu`` (1), ``hypernode.binpack.memory`` (1),
``hypernode.binpack.resources: "a, b"`` with ``hypernode.binpack.resources.<name>`` (1; a
negative weight becomes 1).  The hyperNode binpacking node score of pods without a topology
(``hypernode.binpack.normal-pod.*``) is not implemented: ``config_warnings`` says so.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

from scheduler.core.config import PluginName
from scheduler.core.framework import Session
from scheduler.core.hypernodes import CLUSTER_TOP, HyperNodeTree
from scheduler.core.plugins.base import PluginBase
from scheduler.core.snapshot import PODS, TaskStatus
from scheduler.core.state import JobState

__all__ = ["NetworkTopologyAwarePlugin", "allocated_hypernode"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

_MAX_NODE_SCORE: Final = 100.0
_PLACED: Final = (TaskStatus.ALLOCATED, TaskStatus.BINDING, TaskStatus.BOUND, TaskStatus.RUNNING)


def _non_negative(weight: int) -> int:
    return weight if weight >= 0 else 1


def allocated_hypernode(ssn: Session, job: JobState) -> str | None:
    """The lowest common ancestor of the hyperNodes the job's placed tasks sit in (a node in
    no real hyperNode counts as the cluster top); None when nothing of the job is placed."""
    tree = ssn.hypernodes
    found: str | None = None
    for task in job.tasks:
        if task.status in _PLACED and task.node >= 0:
            found = tree.lca(found, tree.lowest_of_row(task.node) or CLUSTER_TOP)
    return found


class NetworkTopologyAwarePlugin(PluginBase):
    name = PluginName.NETWORK_TOPOLOGY_AWARE

    def on_session_open(self, ssn: Session) -> None:
        self.ssn = ssn
        self.weight = _non_negative(self.int_argument("weight", 1))
        weights = {
            "cpu": _non_negative(self.int_argument("hypernode.binpack.cpu", 1)),
            "memory": _non_negative(self.int_argument("hypernode.binpack.memory", 1)),
        }
        extra = str(self.argument("hypernode.binpack.resources", "") or "")
        for name in (part.strip() for part in extra.split(",")):
            if name:
                weights[name] = _non_negative(self.int_argument(f"hypernode.binpack.resources.{name}", 1))
        self.weights = weights
        if not ssn.topologies:
            return  # nothing asks for a hyperNode this session
        tree = ssn.hypernodes
        nodes = ssn.nodes
        idle = nodes.idle
        future = idle + nodes.releasing - nodes.pipelined
        self._idle: dict[str, IntArray] = {}
        self._future: dict[str, IntArray] = {}
        self._allocatable: dict[str, list[int]] = {}
        for name in sorted(tree.infos):
            rows = tree.infos[name].index
            self._idle[name] = idle[rows].sum(axis=0)
            self._future[name] = future[rows].sum(axis=0)
            self._allocatable[name] = nodes.allocatable[rows].sum(axis=0).tolist()
        for uid in sorted(ssn.topologies):
            job = ssn.jobs.get(uid)
            if job is not None:
                placed = allocated_hypernode(ssn, job)
                if placed is not None:
                    ssn.allocated_hypernodes[uid] = placed
        ssn.add_hypernode_gradient(self, self._gradients)
        ssn.add_hypernode_order(self, self._scores)
        ssn.add_topology_node_order(self, self._node_scores)
        # Volcano's tier range includes the cluster top (parseHyperNodesTiers runs after it is added).
        self._min_tier = min([*tree.tiers, tree.top.tier])
        self._max_tier = tree.top.tier

    # ------------------------------------------------------------------ gradients

    def _gradients(self, job: JobState) -> list[list[str]]:
        ssn = self.ssn
        tree = ssn.hypernodes
        highest = ssn.highest_tier(job)
        if highest is None:
            return [[CLUSTER_TOP]]
        allocated = ssn.allocated_hypernodes.get(job.uid)
        root = CLUSTER_TOP
        if allocated is not None:
            allowed = _highest_allowed(tree, allocated, highest)
            if allowed is None:
                return []  # already spans more than the job allows
            root = allowed
        by_tier: dict[int, list[str]] = {}
        queue = deque([root])
        while queue:
            name = queue.popleft()
            info = tree.infos[name]
            if info.tier <= highest and (allocated is not None or self._has_room(job, name)):
                by_tier.setdefault(info.tier, []).append(name)
            queue.extend(info.children)
        return [by_tier[tier] for tier in sorted(by_tier)]

    def _has_room(self, job: JobState, name: str) -> bool:
        """minResources within the hyperNode's Idle or FutureIdle (at session open)."""
        need = job.min_resources
        if not need:
            return True
        index = self.ssn.dims.index
        for have in (self._idle[name], self._future[name]):
            if all(
                amount <= (int(have[index[resource]]) if resource in index else 0)
                for resource, amount in sorted(need.items())
                if resource != PODS
            ):
                return True
        return False

    # ------------------------------------------------------------------ order

    def _scores(self, job: JobState, names: Sequence[str]) -> dict[str, float]:
        ssn = self.ssn
        tree = ssn.hypernodes
        nodes = ssn.nodes
        index = ssn.dims.index
        request: dict[str, int] = {}
        for task in job.tasks:
            for resource, amount in task.request.items():
                if resource in self.weights and amount > 0:
                    request[resource] = request.get(resource, 0) + amount
        scores: dict[str, float] = {}
        for name in names:
            rows = tree.infos[name].index
            allocatable = self._allocatable[name]
            used = (nodes.allocatable[rows] - nodes.idle[rows] + nodes.pipelined[rows]).sum(axis=0).tolist()
            total = 0.0
            weight_sum = 0
            overused = False
            for resource in sorted(request):
                column = index.get(resource)
                have = int(allocatable[column]) if column is not None else 0
                taken = int(used[column]) if column is not None else 0
                if taken + request[resource] > have:
                    overused = True
                    break
                weight = self.weights[resource]
                total += weight * (taken + request[resource]) / have
                weight_sum += weight
            scores[name] = 0.0 if overused or weight_sum <= 0 else total / weight_sum
        best = max(scores.values(), default=0.0)
        tied = [name for name in names if scores[name] == best]
        if len(tied) > 1 and job.tasks:
            for name in tied:
                mask = tree.infos[name].mask
                on = sum(1 for t in job.tasks if t.node >= 0 and mask[t.node])
                scores[name] += on / len(job.tasks)
        return {name: _MAX_NODE_SCORE * self.weight * score for name, score in scores.items()}

    # ------------------------------------------------------------------ node order

    def _node_scores(self, job: JobState, allocated: str | None, rows: IntArray) -> FloatArray:
        """Volcano's ``batchNodeOrderFnForNetworkAwarePods``: a node whose lowest hyperNode is
        the job's allocated one scores 1, else by the tier of their lowest common ancestor,
        (max tier - its tier) / (max tier - min tier); the nodes sharing the best score get
        + (job tasks in their lowest hyperNode) / (job tasks); x 100 x ``weight``.  Nothing
        placed yet (no allocated hyperNode): 0 everywhere."""
        scores = np.zeros(len(rows), dtype=np.float64)
        if allocated is None:
            return scores
        tree = self.ssn.hypernodes
        lowest = [tree.lowest[row] for row in rows.tolist()]
        for i, name in enumerate(lowest):
            scores[i] = self._lca_score(tree, name, allocated)
        tied = np.flatnonzero(scores == scores.max())
        if len(tied) > 1 and job.tasks:
            for i in tied.tolist():
                name = lowest[i]
                if name is not None:
                    mask = tree.infos[name].mask
                    scores[i] += sum(1 for t in job.tasks if t.node >= 0 and mask[t.node]) / len(job.tasks)
        scaled: FloatArray = scores * (_MAX_NODE_SCORE * self.weight)
        return scaled

    def _lca_score(self, tree: HyperNodeTree, name: str | None, allocated: str) -> float:
        if name is None:
            return 0.0
        if name == allocated:
            return 1.0
        common = tree.lca(name, allocated)
        if common is None:
            return 0.0
        tier = tree.infos[common].tier
        if self._min_tier == self._max_tier:
            return 1.0
        if self._min_tier <= tier <= self._max_tier:
            return (self._max_tier - tier) / (self._max_tier - self._min_tier)
        return 0.0


def _highest_allowed(tree: HyperNodeTree, allocated: str, highest: int) -> str | None:
    """The highest ancestor of ``allocated`` (itself included) of tier <= ``highest``."""
    found = None
    for ancestor in tree.ancestors(allocated):
        if tree.infos[ancestor].tier > highest:
            break
        found = ancestor
    return found
