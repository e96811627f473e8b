"""binpack: prefer fuller nodes (Volcano ``plugins/binpack``).

score = weight × 100 × Σ_r w_r·(request_r + used_r)/allocatable_r ÷ Σ_r w_r over the
resources the task requests that have a configured weight; a resource the node
lacks (allocatable 0) adds nothing but its weight still counts; if any
``request_r + used_r`` exceeds the node's allocatable the score is 0.
Arguments: ``binpack.weight`` (1), ``binpack.cpu`` (1), ``binpack.memory`` (1),
``binpack.resources: "a, b"`` with ``binpack.resources.<name>`` (1; negative → 1).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from scheduler.core.config import PluginName
from scheduler.core.framework import Session
from scheduler.core.plugins.base import PluginBase
from scheduler.core.state import TaskState

__all__ = ["BinpackPlugin"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def _non_negative(weight: int) -> int:
    return weight if weight >= 0 else 1


class BinpackPlugin(PluginBase):
    name = PluginName.BINPACK

    def on_session_open(self, ssn: Session) -> None:
        self.ssn = ssn
        self.weight = self.int_argument("binpack.weight", 1)
        # Volcano (binpack.go calculateWeight): a negative cpu, memory or resource weight becomes 1.
        weights = {
            "cpu": _non_negative(self.int_argument("binpack.cpu", 1)),
            "memory": _non_negative(self.int_argument("binpack.memory", 1)),
        }
        extra = str(self.argument("binpack.resources", "") or "")
        for name in (part.strip() for part in extra.split(",")):
            if name:
                weights[name] = _non_negative(self.int_argument(f"binpack.resources.{name}", 1))
        self.weights = np.zeros(len(ssn.dims.names), dtype=np.float64)
        for name, value in weights.items():
            if name in ssn.dims.index:
                self.weights[ssn.dims.index[name]] = max(value, 0)
        self.configured = np.zeros(len(ssn.dims.names), dtype=np.bool_)
        for name in weights:
            if name in ssn.dims.index:
                self.configured[ssn.dims.index[name]] = True
        self._shape_cols: dict[tuple[object, ...], tuple[IntArray, IntArray, FloatArray, float]] = {}
        self._shape_lists: dict[tuple[object, ...], tuple[list[tuple[int, int, float]], float]] = {}
        if self.weight != 0:
            ssn.add_node_order(self, self._score, row=self._score_row, shape_pure=True)

    def _columns(self, task: TaskState) -> tuple[IntArray, IntArray, FloatArray, float]:
        cached = self._shape_cols.get(task.shape)
        if cached is None:
            cols = np.flatnonzero((task.vec > 0) & self.configured)
            w = self.weights[cols]
            cached = (cols, task.vec[cols], w, float(w.sum()))
            self._shape_cols[task.shape] = cached
        return cached

    def _score_row(self, task: TaskState, row: int) -> float:
        """``_score`` for one row in plain Python floats, operation for operation."""
        cached = self._shape_lists.get(task.shape)
        if cached is None:
            cols, req, w, weight_sum = self._columns(task)
            cached = (list(zip(cols.tolist(), req.tolist(), w.tolist(), strict=True)), weight_sum)
            self._shape_lists[task.shape] = cached
        columns, weight_sum = cached
        if not columns:
            return 0.0
        nodes = self.ssn.nodes
        alloc_row = nodes.alloc_rows[row]
        idle = (nodes.row_cache.get(row) or nodes.row_state(row))[0]
        total = 0.0
        over = False
        for col, amount, weight in columns:
            capacity = alloc_row[col]
            after = capacity - idle[col] + amount
            if capacity > 0 and weight > 0:
                total += after * weight / max(capacity, 1)
                if after > capacity:
                    over = True
            else:
                total += 0.0
        score = total / (weight_sum if weight_sum > 0 else 1.0)
        return 0.0 if over else score * (100.0 * self.weight)

    def _score(self, task: TaskState, rows: IntArray) -> FloatArray:
        cols, req, w, weight_sum = self._columns(task)
        if len(cols) == 0:
            return np.zeros(len(rows), dtype=np.float64)
        nodes = self.ssn.nodes
        alloc = nodes.allocatable[rows][:, cols]
        final = alloc - nodes.idle[rows][:, cols] + req
        valid = (alloc > 0) & (w > 0)
        parts = np.where(valid, final * w / np.maximum(alloc, 1), 0.0)
        over = ((final > alloc) & valid).any(axis=1)
        score = parts.sum(axis=1) / (weight_sum if weight_sum > 0 else 1.0)
        result: FloatArray = np.where(over, 0.0, score * (100.0 * self.weight))
        return result
