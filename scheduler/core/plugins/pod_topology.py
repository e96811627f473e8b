"""Constraints between pods: required inter-pod (anti-)affinity and topology spread.

kube-scheduler's InterPodAffinity and PodTopologySpread filters (which Volcano's
predicates plugin runs, switched by ``predicate.PodAffinityEnable`` and
``predicate.PodTopologySpreadEnable``) and PodTopologySpread's score (Volcano's
nodeorder ``podtopologyspread.weight``).  The pods counted are every task on a
node in the session — running, bound, and those placed earlier in this session
(allocated or pipelined), as Volcano's allocate events keep the predicates'
node view current; topology spread leaves Releasing tasks out (kube-scheduler
skips terminating pods there).

A domain is the value of the term's ``topologyKey`` label on a node.  The answers
depend on where other pods are, so the functions are registered as not
shape-pure: while one is registered, the placement caches are off for the
session (``docs/scheduling.md``).  They are registered only when some task of the
snapshot has such a term or constraint.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Final

import numpy as np
import numpy.typing as npt

from scheduler.core.framework import Session
from scheduler.core.snapshot import (
    LabelSelector,
    Node,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodAffinityTerm,
    Task,
    TaskStatus,
    TopologySpreadConstraint,
)
from scheduler.core.state import TaskState

__all__ = ["PodTopology", "selector_matches"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

#: kube-scheduler's texts (interpodaffinity and podtopologyspread plugins).
EXISTING_ANTI_AFFINITY: Final = "node(s) didn't satisfy existing pods anti-affinity rules"
AFFINITY: Final = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY: Final = "node(s) didn't match pod anti-affinity rules"
SPREAD: Final = "node(s) didn't match pod topology spread constraints"
SPREAD_LABEL: Final = "node(s) didn't match pod topology spread constraints (missing required label)"
_MAX_NODE_SCORE: Final = 100

Pair = tuple[str, str]


def _holds(req: NodeSelectorRequirement, labels: Mapping[str, str]) -> bool:
    value = labels.get(req.key)
    if req.operator == "In":
        return value is not None and value in req.values
    if req.operator == "NotIn":
        return value is None or value not in req.values
    if req.operator == "Exists":
        return value is not None
    return value is None  # DoesNotExist (the only other operator a label selector has)


def selector_matches(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """``metav1.LabelSelector`` semantics; a nil selector matches nothing."""
    if selector is None:
        return False
    if any(labels.get(key) != value for key, value in selector.match_labels):
        return False
    return all(_holds(req, labels) for req in selector.match_expressions)


def _term_selects(
    term: PodAffinityTerm, owner_namespace: str, namespace: str, labels: Mapping[str, str]
) -> bool:
    """Whether ``term`` (declared by a pod of ``owner_namespace``) selects a pod of ``namespace``."""
    namespaces = term.namespaces or (owner_namespace,)
    return namespace in namespaces and selector_matches(term.selector, labels)


class PodTopology:
    """The session's view of pods per domain, answering the filters and the spread score."""

    def __init__(
        self,
        ssn: Session,
        node_affinity: Callable[[tuple[tuple[str, str], ...], tuple[NodeSelectorTerm, ...], Node], bool],
        *,
        affinity_on: bool = True,
        spread_on: bool = True,
    ) -> None:
        self.ssn = ssn
        self.affinity_on = affinity_on
        self.spread_on = spread_on
        #: the predicates' node selector + required node affinity test (nodeAffinityPolicy Honor).
        self.node_affinity = node_affinity
        self.node_labels = [dict(node.labels) for node in ssn.nodes.nodes]
        self.existing_anti = ssn.reason_id(EXISTING_ANTI_AFFINITY, unresolvable=False)
        self.affinity = ssn.reason_id(AFFINITY, unresolvable=True)
        self.anti = ssn.reason_id(ANTI_AFFINITY, unresolvable=False)
        self.spread = ssn.reason_id(SPREAD, unresolvable=False)
        self.spread_label = ssn.reason_id(SPREAD_LABEL, unresolvable=True)

    # ------------------------------------------------------------------ the pods in place

    def _placed(self) -> Iterable[tuple[int, TaskState]]:
        for row, on_node in enumerate(self.ssn.nodes.tasks):
            for uid in sorted(on_node):
                yield row, on_node[uid]

    def _labels(self, task: TaskState) -> Mapping[str, str]:
        return self.ssn.pod_labels.get(task.uid, {})

    def _pair(self, row: int, key: str) -> Pair | None:
        value = self.node_labels[row].get(key)
        return None if value is None else (key, value)

    # ------------------------------------------------------------------ filters

    def filter(self, task: TaskState, rows: IntArray) -> IntArray:
        """Per row: 0, or the reason id of the first filter that fails (existing pods'
        anti-affinity, the task's affinity, its anti-affinity, its spread constraints)."""
        result: IntArray = np.zeros(len(rows), dtype=np.int64)
        spec = self.ssn.pod_terms.get(task.uid)
        if self.affinity_on:
            existing = self._existing_anti_pairs(task)
            for i, row in enumerate(rows.tolist()):
                if existing and any(pair in existing for pair in self.node_labels[row].items()):
                    result[i] = self.existing_anti
        if spec is None:
            return result
        if self.affinity_on and spec.pod_affinity:
            self._mark(result, rows, self._affinity_rows(task, spec), self.affinity)
        if self.affinity_on and spec.pod_anti_affinity:
            anti = self._anti_pairs(task, spec)
            self._mark(
                result,
                rows,
                {
                    row
                    for row in rows.tolist()
                    if any(self._pair(row, t.topology_key) in anti for t in spec.pod_anti_affinity)
                },
                self.anti,
                failing=True,
            )
        hard = tuple(c for c in spec.topology_spread if c.when_unsatisfiable == "DoNotSchedule")
        if self.spread_on and hard:
            limits = self._spread_limits(task, spec, hard)
            for i, row in enumerate(rows.tolist()):
                if result[i] == 0:
                    result[i] = self._spread_reason(limits, row)
        return result

    @staticmethod
    def _mark(
        result: IntArray, rows: IntArray, chosen: set[int], reason: int, *, failing: bool = False
    ) -> None:
        """Set ``reason`` where no earlier filter failed and the row is not in ``chosen`` (the
        rows that pass), or, with ``failing``, is in it."""
        for i, row in enumerate(rows.tolist()):
            if result[i] == 0 and ((row in chosen) == failing):
                result[i] = reason

    def _existing_anti_pairs(self, task: TaskState) -> set[Pair]:
        """Domains where a placed pod's required anti-affinity term selects ``task``."""
        pairs: set[Pair] = set()
        labels = self._labels(task)
        for uid, spec in sorted(self.ssn.pod_terms.items()):
            if not spec.pod_anti_affinity or uid == task.uid:
                continue
            other = self.ssn.tasks[uid]
            if other.node < 0:
                continue
            for term in spec.pod_anti_affinity:
                if _term_selects(term, spec.namespace, task.namespace, labels):
                    pair = self._pair(other.node, term.topology_key)
                    if pair is not None:
                        pairs.add(pair)
        return pairs

    def _affinity_rows(self, task: TaskState, spec: Task) -> set[int]:
        """Rows that satisfy every required affinity term (kube-scheduler's satisfyPodAffinity)."""
        terms = spec.pod_affinity
        counts: dict[Pair, int] = {}
        for row, other in self._placed():
            if other.uid == task.uid:
                continue
            labels = self._labels(other)
            if all(_term_selects(t, task.namespace, other.namespace, labels) for t in terms):
                for term in terms:
                    pair = self._pair(row, term.topology_key)
                    if pair is not None:
                        counts[pair] = counts.get(pair, 0) + 1
        # The first pod of a group that selects itself may go anywhere with the keys.
        self_selecting = not counts and all(
            _term_selects(t, task.namespace, task.namespace, self._labels(task)) for t in terms
        )
        passing: set[int] = set()
        for row in range(len(self.node_labels)):
            pairs = [self._pair(row, t.topology_key) for t in terms]
            if any(pair is None for pair in pairs):
                continue  # every topology key must exist on the node
            if self_selecting or all(counts.get(pair, 0) > 0 for pair in pairs if pair is not None):
                passing.add(row)
        return passing

    def _anti_pairs(self, task: TaskState, spec: Task) -> set[Pair]:
        """Domains holding a pod that one of the task's anti-affinity terms selects."""
        pairs: set[Pair] = set()
        for row, other in self._placed():
            if other.uid == task.uid:
                continue
            labels = self._labels(other)
            for term in spec.pod_anti_affinity:
                if _term_selects(term, task.namespace, other.namespace, labels):
                    pair = self._pair(row, term.topology_key)
                    if pair is not None:
                        pairs.add(pair)
        return pairs

    # ------------------------------------------------------------------ topology spread

    def _eligible(self, task: TaskState, constraints: tuple[TopologySpreadConstraint, ...]) -> list[int]:
        """Rows counted for spreading: matching the task's node selector and required node
        affinity (nodeAffinityPolicy Honor) and carrying every constraint's key."""
        keys = [c.topology_key for c in constraints]
        return [
            row
            for row, node in enumerate(self.ssn.nodes.nodes)
            if all(k in self.node_labels[row] for k in keys)
            and self.node_affinity(task.node_selector, task.affinity, node)
        ]

    def _spread_counts(
        self, task: TaskState, constraint: TopologySpreadConstraint, eligible: list[int]
    ) -> dict[str, int]:
        """Matching pods per domain value of ``constraint`` over the eligible rows (every
        eligible domain present, with 0 when empty)."""
        key = constraint.topology_key
        counts = {self.node_labels[row][key]: 0 for row in eligible}
        eligible_rows = set(eligible)
        for row, other in self._placed():
            if row not in eligible_rows or other.uid == task.uid or other.status is TaskStatus.RELEASING:
                continue
            if other.namespace == task.namespace and selector_matches(
                constraint.selector, self._labels(other)
            ):
                counts[self.node_labels[row][key]] += 1
        return counts

    def _spread_limits(
        self, task: TaskState, spec: Task, constraints: tuple[TopologySpreadConstraint, ...]
    ) -> list[tuple[TopologySpreadConstraint, dict[str, int], int]]:
        """Per constraint: matching pods per domain, and the most a domain may hold before the
        task (``max_skew + minimum - own``, own = 1 when the task matches its own selector)."""
        eligible = self._eligible(task, constraints)
        limits = []
        for constraint in constraints:
            counts = self._spread_counts(task, constraint, eligible)
            minimum = min(counts.values(), default=0)
            if constraint.min_domains is not None and len(counts) < constraint.min_domains:
                minimum = 0  # fewer domains than asked for: the global minimum is 0
            own = 1 if selector_matches(constraint.selector, spec.labels) else 0
            limits.append((constraint, counts, constraint.max_skew + minimum - own))
        return limits

    def _spread_reason(
        self, limits: list[tuple[TopologySpreadConstraint, dict[str, int], int]], row: int
    ) -> int:
        for constraint, counts, most in limits:
            value = self.node_labels[row].get(constraint.topology_key)
            if value is None:
                return self.spread_label
            if counts.get(value, 0) > most:  # skew = count + own - minimum > max_skew
                return self.spread
        return 0

    def spread_score(self, task: TaskState, rows: IntArray) -> FloatArray:
        """PodTopologySpread's score for the ScheduleAnyway constraints, 0..100 over ``rows``:
        fewer matching pods in the node's domains scores higher (kube-scheduler's formula,
        normalised over the rows given)."""
        scores: FloatArray = np.zeros(len(rows), dtype=np.float64)
        spec = self.ssn.pod_terms.get(task.uid)
        soft = (
            ()
            if spec is None
            else tuple(c for c in spec.topology_spread if c.when_unsatisfiable == "ScheduleAnyway")
        )
        if not soft:
            return scores
        eligible = self._eligible(task, soft)
        keys = [c.topology_key for c in soft]
        row_list = rows.tolist()
        scored = [row for row in row_list if all(k in self.node_labels[row] for k in keys)]
        if not scored:
            return scores
        raw: dict[int, int] = {}
        # Per constraint: its counts, and the weight of its topology's size among the scored rows.
        per_constraint = [
            (
                c,
                self._spread_counts(task, c, eligible),
                math.log(len({self.node_labels[r][c.topology_key] for r in scored}) + 2),
            )
            for c in soft
        ]
        for row in scored:
            total = 0.0
            for constraint, counts, weight in per_constraint:
                value = self.node_labels[row][constraint.topology_key]
                total += counts.get(value, 0) * weight + (constraint.max_skew - 1)
            raw[row] = round(total)
        high, low = max(raw.values()), min(raw.values())
        for i, row in enumerate(row_list):
            if row in raw:
                scores[i] = (
                    _MAX_NODE_SCORE if high == 0 else _MAX_NODE_SCORE * (high + low - raw[row]) // high
                )
        return scores
