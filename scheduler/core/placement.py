"""Vectorised node fit and scoring, cached per task shape.

Tasks with the same *shape* (request, node selector, tolerations, required
affinity) get the same predicate results and scores on a node in a given
state, so the index keeps, per shape, boolean "fits Idle" / "fits FutureIdle"
vectors, the predicate reason per node and the summed node-order score.
Whenever a node's resources change its row is appended to
``NodeTable.changes``; a shape's cache re-evaluates only the rows changed
since it was last read (all rows when many changed).  Choosing a node for a
task is then one masked ``argmax`` over the node vector.

Node choice (Volcano ``prioritizeNodes``): gradient 1 = nodes where the
request fits Idle, gradient 2 = nodes where it fits only FutureIdle; the first
non-empty gradient is scored and the highest score wins.  Volcano breaks
score ties uniformly at random; we take the first node in name order
(``argmax`` returns the lowest index and rows are sorted by node name).
Volcano also stops scanning after ``numNodesToFind`` feasible nodes when the
cluster has more than 100 nodes; we always consider every node.

The cache is only valid for node functions that are *shape-pure* (a function
of the task's shape and the node's spec and resource state, declared at
registration: ``Session.add_predicate``).  A plugin whose answer depends on
where other tasks are (pod anti-affinity, topology spread) or on the task's
job declares otherwise, and then every query evaluates every node afresh: no
per-shape cache, no row memo.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from operator import ge
from typing import Any, Final, cast

import numpy as np
import numpy.typing as npt

from scheduler.core.framework import RowPredicateFn, RowScoreFn, Session
from scheduler.core.reasons import Reason, fit_error_message
from scheduler.core.state import RowState, TaskState

__all__ = ["FitErrors", "PlacementIndex"]

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

# Above this fraction of changed rows a full (numpy) re-evaluation is cheaper.  Below
# it the changed rows go through the plugins' scalar (one row, plain Python numbers)
# forms: with the memo below a row costs about 2 us, while numpy on a subset of rows
# pays ~100 us of call overhead and ~3 us a row for its gathers (measured at 5k nodes:
# the scalar path for every partial refresh made the session ~12% faster than a
# 64-row cap).
_FULL_REFRESH_FRACTION: Final = 0.25
# Shape-pure row functions are functions of the node's spec and resource state (their
# contract, Session.add_predicate), so a shape's row result is memoised by the row's state key; the
# memo is cleared when it reaches this size.
_MEMO_LIMIT: Final = 65_536


@dataclass(frozen=True, slots=True)
class FitErrors:
    """The per-node failure histogram of one task (Volcano's FitErrors)."""

    task: str
    examined: int
    histogram: tuple[tuple[str, int], ...]
    resource_failures: int

    def __init__(
        self, task: str, examined: int, histogram: tuple[tuple[str, int], ...], resource_failures: int
    ) -> None:  # spelled out for the compiled form (see Reason)
        object.__setattr__(self, "task", task)
        object.__setattr__(self, "examined", examined)
        object.__setattr__(self, "histogram", histogram)
        object.__setattr__(self, "resource_failures", resource_failures)

    @property
    def message(self) -> str:
        return fit_error_message(self.examined, dict(self.histogram))

    def reason(self) -> Reason:
        code = "insufficient-resources" if self.resource_failures else "predicate-failed"
        return Reason(
            code,
            self.message,
            {"task": self.task, "nodes": self.examined, "histogram": dict(self.histogram)},
        )


_NAN: Final = float("nan")
_NEG_INF: Final = float("-inf")
#: predicate reason (int), score, failure label (int), best_idle, best_future (floats).
#: Typed Any so that compiled code hands the memoised Python objects straight to the
#: memoryview writes instead of unboxing and re-boxing five numbers per row.
_RowResult = tuple[Any, Any, Any, Any, Any]


@dataclass(slots=True)
class _ShapeFit:
    vec: IntArray
    reason: IntArray
    score: FloatArray
    #: score where the task fits Idle (gradient 1) / FutureIdle (gradient 2) and passes, else -inf.
    best_idle: FloatArray
    best_future: FloatArray
    #: Writable views of reason / score / best_idle / best_future: setting one item
    #: through a memoryview costs a fraction of numpy's scalar ``__setitem__``.
    items: tuple[memoryview[int], memoryview[float], memoryview[float], memoryview[float]]
    synced: int = 0
    errors: FitErrors | None = None
    errors_synced: int = -1
    #: row state key id -> the row functions' result (``PlacementIndex._row_result``).
    memo: dict[int, _RowResult] = field(default_factory=dict)
    #: Per row, why the shape fails there (the fit-error histogram's bucket): -1 none,
    #: d < dims the first short resource, dims + r predicate reason r.  Kept up to date
    #: with the rows once ``fit_errors`` has been asked for this shape (None before).
    labels: IntArray | None = None
    label_counts: dict[int, int] = field(default_factory=dict)
    #: A writable view of ``labels`` (see ``items``).
    label_items: memoryview[int] | None = None


class PlacementIndex:
    def __init__(self, ssn: Session) -> None:
        self.ssn = ssn
        self._shapes: dict[int, _ShapeFit] = {}
        self._all_rows: IntArray = np.arange(len(ssn.nodes), dtype=np.int64)
        #: plugins with a node function that is not shape-pure: while there is one, the
        #: index caches nothing (each query evaluates every node).
        self.uncached_for: tuple[str, ...] = tuple(ssn.placement_dependent())
        predicates = ssn.row_predicates()
        scores = ssn.row_scores()
        self._scalar = predicates is not None and scores is not None
        self._row_predicates: list[RowPredicateFn] = predicates or []
        self._row_scores: list[RowScoreFn] = scores or []

    def _evaluate_rows(self, task: TaskState, fit: _ShapeFit, rows: list[int]) -> None:
        """``_evaluate`` for a few rows with the plugins' scalar forms (identical results)."""
        nodes = self.ssn.nodes
        cache = nodes.row_cache
        fit_reason, fit_score, best_idle, best_future = fit.items
        memo = fit.memo
        labels = fit.label_items
        label_counts = fit.label_counts
        for row in rows:
            state = cache.get(row) or nodes.row_state(row)
            known = memo.get(state[5])
            if known is None:
                if len(memo) >= _MEMO_LIMIT:
                    memo.clear()
                known = memo[state[5]] = self._row_result(task, row, state)
            reason, score, label, row_best_idle, row_best_future = known
            if labels is not None:
                _relabel(labels, label_counts, row, label)
            fit_reason[row] = reason
            fit_score[row] = score
            best_idle[row] = row_best_idle
            best_future[row] = row_best_future

    def _row_result(self, task: TaskState, row: int, state: RowState) -> _RowResult:
        """One row through the row functions: predicate reason, score, failure label,
        and the row's entries of ``best_idle`` / ``best_future``."""
        req = task.req
        fits_idle = all(map(ge, state[0], req))
        fits_future = all(map(ge, state[4], req))
        reason = 0
        for fn in self._row_predicates:
            reason = fn(task, row)
            if reason:
                break
        if not fits_future:
            future = state[4]
            label = next(i for i in range(len(req)) if future[i] < req[i])
        else:
            label = len(req) + reason if reason else -1
        if reason or not (fits_idle or fits_future):
            # Not a candidate: its score is only needed by ``scores`` (NaN = not computed).
            return reason, _NAN, label, _NEG_INF, _NEG_INF
        score = 0.0
        for score_fn in self._row_scores:
            score = score + score_fn(task, row)
        return (
            reason,
            score,
            label,
            score if fits_idle else _NEG_INF,
            score if fits_future else _NEG_INF,
        )

    def _evaluate(self, task: TaskState, fit: _ShapeFit, rows: IntArray) -> None:
        nodes = self.ssn.nodes
        vec = fit.vec
        idle = nodes.idle[rows]
        future = idle + nodes.releasing[rows] - nodes.pipelined[rows]
        fits_idle = (idle >= vec).all(axis=1)
        fits_future = (future >= vec).all(axis=1)
        reason = self.ssn.node_predicate(task, rows)
        score = self.ssn.node_scores(task, rows)
        fit.reason[rows] = reason
        fit.score[rows] = score
        passed = reason == 0
        fit.best_idle[rows] = np.where(passed & fits_idle, score, -np.inf)
        fit.best_future[rows] = np.where(passed & fits_future, score, -np.inf)
        if fit.labels is not None:
            _relabel_rows(fit.labels, fit.label_counts, rows, _labels(future, vec, reason))

    def _fresh(self, task: TaskState) -> _ShapeFit:
        """A fit of ``task`` on every node, evaluated now."""
        n = len(self._all_rows)
        reason = np.zeros(n, dtype=np.int64)
        score = np.zeros(n, dtype=np.float64)
        best_idle = np.full(n, -np.inf)
        best_future = np.full(n, -np.inf)
        fit = _ShapeFit(
            vec=task.vec,
            reason=reason,
            score=score,
            best_idle=best_idle,
            best_future=best_future,
            items=(
                reason.data,
                cast("memoryview[float]", score.data),
                cast("memoryview[float]", best_idle.data),
                cast("memoryview[float]", best_future.data),
            ),
        )
        if n:
            self._evaluate(task, fit, self._all_rows)
        fit.synced = len(self.ssn.nodes.changes)
        return fit

    def view(self, task: TaskState) -> _ShapeFit:
        """The shape's cache, refreshed for every node changed since the last read
        (a fresh evaluation, not kept, while a node function is not shape-pure)."""
        if self.uncached_for:
            return self._fresh(task)
        changes = self.ssn.nodes.changes
        fit = self._shapes.get(task.shape_id)
        n = len(self._all_rows)
        if fit is None:
            fit = self._shapes[task.shape_id] = self._fresh(task)
            return fit
        if fit.synced < len(changes):
            pending = changes[fit.synced :]
            if self._scalar and len(pending) <= _FULL_REFRESH_FRACTION * n:
                self._evaluate_rows(task, fit, pending if len(pending) == 1 else sorted(set(pending)))
            else:
                if len(pending) > _FULL_REFRESH_FRACTION * n:
                    rows = self._all_rows
                else:
                    rows = np.unique(np.asarray(pending, dtype=np.int64))
                self._evaluate(task, fit, rows)
            fit.synced = len(changes)
        return fit

    def choose_gradient(self, task: TaskState) -> tuple[int, bool]:
        """``choose`` and whether the row is from gradient 1 (the task fits its Idle)."""
        fit = self.view(task)
        if not len(fit.score):
            return -1, False
        best_idle = fit.best_idle
        row = int(best_idle.argmax())
        if best_idle[row] > -np.inf:
            return row, True
        best_future = fit.best_future
        row = int(best_future.argmax())
        return (row, False) if best_future[row] > -np.inf else (-1, False)

    def choose_gradient_within(
        self, task: TaskState, rows: IntArray, extra: Callable[[IntArray], FloatArray | None] | None = None
    ) -> tuple[int, bool]:
        """``choose_gradient`` among ``rows`` only (a hyperNode's nodes, ascending): the
        first of equal best scores is still the lowest-named node.  ``extra`` scores the
        candidate rows of the gradient further (added; None adds nothing), as a batch node
        order scores only the gradient's nodes, and only when there are several."""
        fit = self.view(task)
        if not len(rows):
            return -1, False
        for best, on_idle in ((fit.best_idle, True), (fit.best_future, False)):
            scores = best[rows]
            feasible = np.flatnonzero(scores > -np.inf)
            if not len(feasible):
                continue
            if len(feasible) > 1 and extra is not None:
                candidates = rows[feasible]
                more = extra(candidates)
                if more is not None:
                    return int(candidates[int((scores[feasible] + more).argmax())]), on_idle
            return int(rows[feasible[int(scores[feasible].argmax())]]), on_idle
        return -1, False

    def fit_errors_within(self, task: TaskState, rows: IntArray) -> FitErrors:
        """``fit_errors`` over ``rows`` only."""
        fit = self.view(task)
        nodes = self.ssn.nodes
        future = (nodes.idle + nodes.releasing - nodes.pipelined)[rows]
        labels = _labels(future, fit.vec, fit.reason[rows])
        dims = self.ssn.dims.names
        histogram: dict[str, int] = {}
        resource_failures = 0
        values, counts = np.unique(labels, return_counts=True)
        for label, count in zip(values.tolist(), counts.tolist(), strict=True):
            if label < 0:
                continue
            if label < len(dims):
                text = f"Insufficient {dims[label]}"
                resource_failures += count
            else:
                text = self.ssn.predicate_reasons[label - len(dims)].text
            histogram[text] = histogram.get(text, 0) + count
        return FitErrors(task.uid, len(rows), tuple(sorted(histogram.items())), resource_failures)

    def choose(self, task: TaskState) -> int:
        """The best node row for ``task`` (allocate's node choice), or -1."""
        fit = self.view(task)
        if not len(fit.score):
            return -1
        # argmax returns the first (lowest-named) node among equal best scores.
        row = int(np.argmax(fit.best_idle))
        if fit.best_idle[row] > -np.inf:
            return row
        row = int(np.argmax(fit.best_future))
        return row if fit.best_future[row] > -np.inf else -1

    def fit_errors(self, task: TaskState) -> FitErrors:
        """Why ``task`` fits no node: first short resource, else the predicate reason."""
        fit = self.view(task)
        if fit.errors is not None and fit.errors_synced == fit.synced:
            return FitErrors(task.uid, *_fields(fit.errors))
        nodes = self.ssn.nodes
        dims = self.ssn.dims.names
        if fit.labels is None:
            # From now on the shape's rows keep their failure label up to date, so
            # the histogram is read from the counts instead of re-derived per call.
            future = nodes.idle + nodes.releasing - nodes.pipelined
            fit.labels = _labels(future, fit.vec, fit.reason)
            fit.label_items = fit.labels.data
            values, counts = np.unique(fit.labels, return_counts=True)
            fit.label_counts = dict(zip(values.tolist(), counts.tolist(), strict=True))
        histogram: dict[str, int] = {}
        resource_failures = 0
        n_dims = len(dims)
        for label in sorted(fit.label_counts):
            count = fit.label_counts[label]
            if label < 0 or count == 0:
                continue
            if label < n_dims:
                text = f"Insufficient {dims[label]}"
                resource_failures += count
            else:
                text = self.ssn.predicate_reasons[label - n_dims].text
            histogram[text] = histogram.get(text, 0) + count
        errors = FitErrors(
            task.uid,
            len(nodes),
            tuple(sorted(histogram.items())),
            resource_failures,
        )
        fit.errors = errors
        fit.errors_synced = fit.synced
        return errors

    def unresolvable(self, task: TaskState) -> BoolArray:
        """Rows whose predicate failure cannot be cured by evicting tasks."""
        fit = self.view(task)
        table = np.array([r.unresolvable for r in self.ssn.predicate_reasons], dtype=np.bool_)
        result: BoolArray = table[fit.reason]
        return result

    def scores(self, task: TaskState) -> FloatArray:
        fit = self.view(task)
        stale = np.flatnonzero(np.isnan(fit.score))
        if len(stale):
            fit.score[stale] = self.ssn.node_scores(task, stale)
        return fit.score


def _labels(future: IntArray, vec: IntArray, reason: IntArray) -> IntArray:
    """Failure labels (see ``_ShapeFit.labels``) of rows with these future-idle vectors."""
    short = future < vec
    first_short = np.argmax(short, axis=1)
    labels: IntArray = np.where(
        short.any(axis=1), first_short, np.where(reason != 0, len(vec) + reason, -1)
    ).astype(np.int64)
    return labels


def _relabel(labels: memoryview, counts: dict[int, int], row: int, label: int) -> None:
    old: int = labels[row]
    if old != label:
        counts[old] -= 1
        counts[label] = counts.get(label, 0) + 1
        labels[row] = label


def _relabel_rows(labels: IntArray, counts: dict[int, int], rows: IntArray, new: IntArray) -> None:
    for value, count in zip(*np.unique(labels[rows], return_counts=True), strict=True):
        counts[int(value)] -= int(count)
    for value, count in zip(*np.unique(new, return_counts=True), strict=True):
        counts[int(value)] = counts.get(int(value), 0) + int(count)
    labels[rows] = new


def _fields(errors: FitErrors) -> tuple[int, tuple[tuple[str, int], ...], int]:
    return errors.examined, errors.histogram, errors.resource_failures
