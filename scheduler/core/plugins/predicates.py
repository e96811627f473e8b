"""predicates: node filters (Volcano wraps kube-scheduler's filter plugins).

Implemented filters and their (kube-scheduler) failure texts:

* NodeUnschedulable (always on): ``node(s) were unschedulable``;
* NodeAffinity (``predicate.NodeAffinityEnable``): nodeSelector and required
  node affinity, ``node(s) didn't match Pod's node affinity/selector``;
* TaintToleration (``predicate.TaintTolerationEnable``): NoSchedule /
  NoExecute taints, ``node(s) had untolerated taint {key: value}``;
* pod count: ``node(s) pod number exceeded``;
* InterPodAffinity (``predicate.PodAffinityEnable``) and PodTopologySpread
  (``predicate.PodTopologySpreadEnable``), registered only when some task of the
  snapshot has required pod (anti-)affinity or spread constraints; they depend on
  where other pods are (:mod:`scheduler.core.plugins.pod_topology`).

The first three are *UnschedulableAndUnresolvable* (preemption skips such
nodes) and depend only on the task's shape and static node data, so their
verdicts are computed once per shape for all nodes.  The pod count depends on
the node's current tasks and is evaluated on every call.  Volcano runs the pod
count first; we run it last so that an unresolvable failure is never hidden
behind it (in allocate the resource check, which includes ``pods``, runs
before either, so the reported histogram is the same).  Resource fit is not a
predicate (it is the allocate action's own check, "Insufficient X").
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from scheduler.core.config import PluginName
from scheduler.core.framework import Session
from scheduler.core.plugins.base import PluginBase
from scheduler.core.plugins.pod_topology import PodTopology
from scheduler.core.snapshot import Node, NodeSelectorRequirement, NodeSelectorTerm, Taint, Toleration
from scheduler.core.state import TaskState

__all__ = ["PredicatesPlugin", "matches_affinity", "tolerates"]

IntArray = npt.NDArray[np.int64]

UNSCHEDULABLE_TAINT: Final = "node.kubernetes.io/unschedulable"


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """Kubernetes ``Toleration.ToleratesTaint``."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    if not toleration.key and toleration.operator != "Exists":
        return False
    return (toleration.value or "") == taint.value


def _requirement(req: NodeSelectorRequirement, labels: dict[str, str]) -> bool:  # noqa: PLR0911 - one return per operator
    value = labels.get(req.key)
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and req.values:
        try:
            have, want = int(value), int(req.values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def matches_affinity(
    selector: tuple[tuple[str, str], ...], terms: tuple[NodeSelectorTerm, ...], node: Node
) -> bool:
    labels = dict(node.labels)
    if any(labels.get(k) != v for k, v in selector):
        return False
    if not terms:
        return True
    return any(_term_matches(term, labels, node.name) for term in terms)


def _term_matches(term: NodeSelectorTerm, labels: dict[str, str], name: str) -> bool:
    """Kubernetes' ``NodeSelectorTerm`` match: every expression on the labels and every field on
    the node's fields (``metadata.name``, the only one it supports); an empty term matches nothing."""
    if not term.match_expressions and not term.match_fields:
        return False
    if not all(_requirement(r, labels) for r in term.match_expressions):
        return False
    fields = {"metadata.name": name}
    return all(_requirement(r, fields) for r in term.match_fields)


class PredicatesPlugin(PluginBase):
    name = PluginName.PREDICATES

    def on_session_open(self, ssn: Session) -> None:
        self.ssn = ssn
        self.affinity_on = self.bool_argument("predicate.NodeAffinityEnable", True)
        self.taints_on = self.bool_argument("predicate.TaintTolerationEnable", True)
        self.pods_exceeded = ssn.reason_id("node(s) pod number exceeded", unresolvable=False)
        self.unschedulable = ssn.reason_id("node(s) were unschedulable", unresolvable=True)
        self.affinity = ssn.reason_id("node(s) didn't match Pod's node affinity/selector", unresolvable=True)
        self._static: dict[tuple[object, ...], IntArray] = {}
        self._static_lists: dict[tuple[object, ...], list[int]] = {}
        ssn.add_predicate(self, self._predicate, row=self._predicate_row, shape_pure=True)
        pod_affinity_on = self.bool_argument("predicate.PodAffinityEnable", True)
        spread_on = self.bool_argument("predicate.PodTopologySpreadEnable", True)
        if ssn.pod_terms and (pod_affinity_on or spread_on):
            topology = PodTopology(ssn, matches_affinity, affinity_on=pod_affinity_on, spread_on=spread_on)
            ssn.add_predicate(self, topology.filter, shape_pure=False)

    def _static_reasons(self, task: TaskState) -> IntArray:
        key = (task.node_selector, task.tolerations, task.affinity)
        cached = self._static.get(key)
        if cached is not None:
            return cached
        reasons = np.zeros(len(self.ssn.nodes), dtype=np.int64)
        for row, node in enumerate(self.ssn.nodes.nodes):
            reasons[row] = self._node_reason(task, node)
        self._static[key] = reasons
        return reasons

    def _node_reason(self, task: TaskState, node: Node) -> int:
        if node.unschedulable and not any(
            tolerates(t, Taint(UNSCHEDULABLE_TAINT, "", "NoSchedule")) for t in task.tolerations
        ):
            return self.unschedulable
        if self.affinity_on and not matches_affinity(task.node_selector, task.affinity, node):
            return self.affinity
        if self.taints_on:
            for taint in node.taints:
                if taint.effect not in ("NoSchedule", "NoExecute"):
                    continue
                if not any(tolerates(t, taint) for t in task.tolerations):
                    text = f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"
                    return self.ssn.reason_id(text, unresolvable=True)
        return 0

    def _predicate_row(self, task: TaskState, row: int) -> int:
        """``_predicate`` for one row."""
        key = (task.node_selector, task.tolerations, task.affinity)
        static = self._static_lists.get(key)
        if static is None:
            static = self._static_reasons(task).tolist()
            self._static_lists[key] = static
        reason = static[row]
        nodes = self.ssn.nodes
        if reason == 0 and (nodes.row_cache.get(row) or nodes.row_state(row))[3] >= nodes.max_pods_list[row]:
            return self.pods_exceeded
        return reason

    def _predicate(self, task: TaskState, rows: IntArray) -> IntArray:
        reasons = self._static_reasons(task)[rows]
        nodes = self.ssn.nodes
        full = nodes.pod_count[rows] >= nodes.max_pods[rows]
        result: IntArray = np.where((reasons == 0) & full, self.pods_exceeded, reasons)
        return result
