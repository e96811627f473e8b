"""nodeorder: kube-scheduler style node scores, each 0..100 times a weight.

Arguments (Volcano's defaults): ``leastrequested.weight`` 1,
``mostrequested.weight`` 0, ``balancedresource.weight`` 1,
``tainttoleration.weight`` 3, ``nodeaffinity.weight`` 2,
``podaffinity.weight`` 2, ``podtopologyspread.weight`` 2,
``imagelocality.weight`` 1.

* LeastAllocated / MostAllocated over cpu and memory (weights 1:1), integer
  arithmetic as in kube-scheduler; "requested" is the node's tasks (including
  pipelined ones) plus the task, using the plain requests (kube-scheduler's
  non-zero defaults of 100m / 200Mi for request-less pods are not applied).
* BalancedAllocation over cpu, memory and nvidia.com/gpu when requested:
  ``int((1 − std(fractions)) × 100)``.
* TaintToleration: intolerable PreferNoSchedule taints, normalised against
  the maximum over *all* nodes (kube-scheduler normalises over the feasible
  nodes; per-node scores keep the placement index incremental).
* PodTopologySpread (``podtopologyspread.weight`` 2): the ScheduleAnyway spread
  constraints, kube-scheduler's formula normalised over the nodes scored
  (:mod:`scheduler.core.plugins.pod_topology`); registered only when some task
  has such a constraint.
* NodeAffinity (preferred terms), InterPodAffinity (preferred terms) and
  ImageLocality have no inputs in Tephra's model and score 0 everywhere.
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np
import numpy.typing as npt

from scheduler.core.config import PluginName
from scheduler.core.framework import Session
from scheduler.core.plugins.base import PluginBase
from scheduler.core.plugins.pod_topology import PodTopology
from scheduler.core.plugins.predicates import matches_affinity, tolerates
from scheduler.core.state import TaskState

__all__ = ["NodeOrderPlugin"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

_GPU: Final = "nvidia.com/gpu"


class NodeOrderPlugin(PluginBase):
    name = PluginName.NODEORDER

    def on_session_open(self, ssn: Session) -> None:
        self.ssn = ssn
        self.least = self.int_argument("leastrequested.weight", 1)
        self.most = self.int_argument("mostrequested.weight", 0)
        self.balanced = self.int_argument("balancedresource.weight", 1)
        self.taint = self.int_argument("tainttoleration.weight", 3)
        self._taint_cache: dict[tuple[object, ...], FloatArray] = {}
        self._taint_lists: dict[tuple[object, ...], list[float]] = {}
        dims = ssn.dims.index
        self.cpu, self.mem = dims["cpu"], dims["memory"]
        self.gpu = dims.get(_GPU, -1)
        ssn.add_node_order(self, self._score, row=self._score_row, shape_pure=True)
        self.spread = self.int_argument("podtopologyspread.weight", 2)
        if self.spread and any(
            c.when_unsatisfiable == "ScheduleAnyway"
            for task in ssn.pod_terms.values()
            for c in task.topology_spread
        ):
            self.topology = PodTopology(ssn, matches_affinity)
            ssn.add_node_order(self, self._spread_score, shape_pure=False)

    def _spread_score(self, task: TaskState, rows: IntArray) -> FloatArray:
        return self.spread * self.topology.spread_score(task, rows)

    def _requested(self, task: TaskState, rows: IntArray) -> tuple[IntArray, IntArray]:
        nodes = self.ssn.nodes
        alloc = nodes.allocatable[rows]
        requested = alloc - nodes.idle[rows] + nodes.pipelined[rows] + task.vec
        return alloc, requested

    def _score(self, task: TaskState, rows: IntArray) -> FloatArray:
        total: FloatArray = np.zeros(len(rows), dtype=np.float64)
        if not (self.least or self.most or self.balanced or self.taint):
            return total
        alloc, requested = self._requested(task, rows)
        cols = [self.cpu, self.mem]
        if self.least:
            total += self.least * _weighted(alloc[:, cols], requested[:, cols], least=True)
        if self.most:
            total += self.most * _weighted(alloc[:, cols], requested[:, cols], least=False)
        if self.balanced:
            bcols = list(cols)
            if self.gpu >= 0 and task.vec[self.gpu] > 0:
                bcols.append(self.gpu)
            total += self.balanced * _balanced(alloc[:, bcols], requested[:, bcols])
        if self.taint:
            total += self.taint * self._taint_scores(task)[rows]
        return total

    def _score_row(self, task: TaskState, row: int) -> float:
        """``_score`` for one row in plain Python numbers, operation for operation.

        Every float operation happens in the order numpy performs it on a row
        (sums left to right), so the result is bit-identical.
        """
        total = 0.0
        if not (self.least or self.most or self.balanced or self.taint):
            return total
        nodes = self.ssn.nodes
        alloc = nodes.alloc_rows[row]
        idle, _, pipelined, _, _, _ = nodes.row_cache.get(row) or nodes.row_state(row)
        req = task.req
        cpu, mem = self.cpu, self.mem
        a_cpu, a_mem = alloc[cpu], alloc[mem]
        r_cpu = a_cpu - idle[cpu] + pipelined[cpu] + req[cpu]
        r_mem = a_mem - idle[mem] + pipelined[mem] + req[mem]
        if self.least:
            per = 0
            weights = 0
            if a_cpu > 0:
                weights += 1
                per += 0 if r_cpu > a_cpu else (a_cpu - r_cpu) * 100 // a_cpu
            if a_mem > 0:
                weights += 1
                per += 0 if r_mem > a_mem else (a_mem - r_mem) * 100 // a_mem
            total += self.least * (float(per // weights) if weights > 0 else 0.0)
        if self.most:
            total += self.most * _weighted_row(a_cpu, r_cpu, a_mem, r_mem, least=False)
        if self.balanced:
            f_cpu = min(r_cpu / a_cpu, 1.0) if a_cpu > 0 else 0.0
            f_mem = min(r_mem / a_mem, 1.0) if a_mem > 0 else 0.0
            count = (a_cpu > 0) + (a_mem > 0)
            gpu = self.gpu
            if gpu >= 0 and req[gpu] > 0:
                a_gpu = alloc[gpu]
                f_gpu = (
                    min((a_gpu - idle[gpu] + pipelined[gpu] + req[gpu]) / a_gpu, 1.0) if a_gpu > 0 else 0.0
                )
                count += a_gpu > 0
                safe = max(count, 1)
                mean = (f_cpu + f_mem + f_gpu) / safe
                d_cpu, d_mem, d_gpu = f_cpu - mean, f_mem - mean, f_gpu - mean
                var = (
                    (d_cpu * d_cpu if a_cpu > 0 else 0.0)
                    + (d_mem * d_mem if a_mem > 0 else 0.0)
                    + (d_gpu * d_gpu if a_gpu > 0 else 0.0)
                ) / safe
            else:
                safe = max(count, 1)
                mean = (f_cpu + f_mem) / safe
                d_cpu, d_mem = f_cpu - mean, f_mem - mean
                var = ((d_cpu * d_cpu if a_cpu > 0 else 0.0) + (d_mem * d_mem if a_mem > 0 else 0.0)) / safe
            total += self.balanced * float(math.trunc((1.0 - math.sqrt(var)) * 100.0))
        if self.taint:
            scores = self._taint_lists.get(task.tolerations)
            if scores is None:
                scores = self._taint_scores(task).tolist()
                self._taint_lists[task.tolerations] = scores
            total += self.taint * scores[row]
        return total

    def _taint_scores(self, task: TaskState) -> FloatArray:
        key = task.tolerations
        cached = self._taint_cache.get(key)
        if cached is not None:
            return cached
        counts = np.array(
            [
                sum(
                    1
                    for taint in node.taints
                    if taint.effect == "PreferNoSchedule"
                    and not any(
                        tolerates(t, taint)
                        for t in task.tolerations
                        if t.effect in (None, "", "PreferNoSchedule")
                    )
                )
                for node in self.ssn.nodes.nodes
            ],
            dtype=np.float64,
        )
        top = counts.max() if len(counts) else 0.0
        scores: FloatArray = (
            np.full(len(counts), 100.0) if top == 0 else np.floor(100.0 * (1.0 - counts / top))
        )
        self._taint_cache[key] = scores
        return scores


def _weighted(alloc: IntArray, requested: IntArray, *, least: bool) -> FloatArray:
    """kube-scheduler Least/MostAllocated: per-resource integer scores, weight 1 each."""
    valid = alloc > 0
    safe = np.where(valid, alloc, 1)
    if least:
        per = np.where(requested > alloc, 0, (alloc - requested) * 100 // safe)
    else:
        per = np.minimum(requested, alloc) * 100 // safe
    per = np.where(valid, per, 0)
    weights = valid.sum(axis=1)
    score = np.where(weights > 0, per.sum(axis=1) // np.maximum(weights, 1), 0)
    result: FloatArray = score.astype(np.float64)
    return result


def _weighted_row(a_cpu: int, r_cpu: int, a_mem: int, r_mem: int, *, least: bool) -> float:
    """``_weighted`` for one row (integer arithmetic, same floor division)."""
    per = 0
    weights = 0
    for alloc, requested in ((a_cpu, r_cpu), (a_mem, r_mem)):
        if alloc <= 0:
            continue
        weights += 1
        if least:
            per += 0 if requested > alloc else (alloc - requested) * 100 // alloc
        else:
            per += min(requested, alloc) * 100 // alloc
    return float(per // weights) if weights > 0 else 0.0


def _balanced(alloc: IntArray, requested: IntArray) -> FloatArray:
    valid = alloc > 0
    frac = np.where(valid, np.minimum(requested / np.where(valid, alloc, 1), 1.0), 0.0)
    count = valid.sum(axis=1)
    safe = np.maximum(count, 1)
    mean = frac.sum(axis=1) / safe
    var = (np.where(valid, (frac - mean[:, None]) ** 2, 0.0)).sum(axis=1) / safe
    std = np.sqrt(var)
    result: FloatArray = np.trunc((1.0 - std) * 100.0)
    return result
