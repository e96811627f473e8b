"""The hyperNode tree of a session (Volcano ``api/hyper_node_info.go`` and the session's
cluster-top hyperNode), resolved from the snapshot's HyperNodes and nodes.

* A Node member selects nodes by exact name, by a regex searched in the node name (Go's
  ``MatchString``: unanchored), or by a label selector (an empty one selects nothing);
  names that are not nodes of the snapshot are left out.
* A HyperNode member names a child by exact name (Volcano ignores regex and label
  selectors there); the child's nodes belong to the parent too.
* Every hyperNode without a parent hangs under the virtual cluster-top hyperNode, whose
  tier is one above the highest real tier (at least 1) and which holds every node.

Inconsistent input is resolved deterministically and reported in :attr:`HyperNodeTree.problems`:
a member naming a hyperNode that does not exist is skipped; a hyperNode claimed by several
parents keeps the first parent in name order; a member that would close a cycle is skipped.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scheduler.core.plugins.pod_topology import selector_matches
from scheduler.core.snapshot import HyperNode, HyperNodeMember, Node

__all__ = ["CLUSTER_TOP", "HyperNodeInfo", "HyperNodeTree"]

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]

#: Volcano's name for the virtual root (``framework.ClusterTopHyperNode``).
CLUSTER_TOP = "<cluster-top-hypernode>"


@dataclass(frozen=True, slots=True)
class HyperNodeInfo:
    name: str
    tier: int
    parent: str | None
    #: child hyperNodes in name order.
    children: tuple[str, ...]
    #: node rows (the session's node table order) of every node under this hyperNode.
    rows: tuple[int, ...]
    #: the same rows as a mask over all node rows, and as an ascending index array.
    mask: BoolArray
    index: IntArray


class HyperNodeTree:
    """Parents, children, leaf nodes and tiers of the session's hyperNodes."""

    def __init__(self, hypernodes: Sequence[HyperNode], nodes: Sequence[Node]) -> None:
        """``nodes`` in the session's row order (sorted by name, as ``NodeTable`` keeps them)."""
        self.problems: list[str] = []
        specs = {h.name: h for h in sorted(hypernodes, key=lambda h: h.name)}
        names = tuple(n.name for n in nodes)
        parent: dict[str, str] = {}
        children: dict[str, list[str]] = {name: [] for name in specs}
        for name, spec in specs.items():
            for member in spec.members:
                if member.kind != "HyperNode" or not member.exact:
                    continue
                child = member.exact
                if child not in specs:
                    self.problems.append(f"hyperNode {name}: member hyperNode {child} does not exist")
                elif child in parent:
                    kept = parent[child]
                    self.problems.append(f"hyperNode {child} is a member of {kept} and {name}; kept {kept}")
                elif child == name or self._is_ancestor(child, name, parent):
                    self.problems.append(f"hyperNode {name}: member {child} would close a cycle; skipped")
                else:
                    parent[child] = name
                    children[name].append(child)
        rows_of: dict[str, set[int]] = {}
        for name in specs:
            self._collect(name, specs, children, (names, nodes), rows_of)
        self.infos: dict[str, HyperNodeInfo] = {}
        top_tier = max([1, *(h.tier + 1 for h in specs.values())])
        n = len(names)
        for name, spec in specs.items():
            rows = tuple(sorted(rows_of[name]))
            self.infos[name] = HyperNodeInfo(
                name, spec.tier, parent.get(name, CLUSTER_TOP), tuple(children[name]), rows, *_arrays(rows, n)
            )
        roots = tuple(name for name in specs if name not in parent)
        every = tuple(range(n))
        self.infos[CLUSTER_TOP] = HyperNodeInfo(CLUSTER_TOP, top_tier, None, roots, every, *_arrays(every, n))
        #: tierName -> tier (Volcano's HyperNodeTierNameMap; on a conflict the last name wins).
        self.tier_names: dict[str, int] = {}
        for spec in specs.values():
            if spec.tier_name:
                self.tier_names[spec.tier_name] = spec.tier
        self.real = bool(specs)
        #: the distinct tiers of real hyperNodes, ascending.
        self.tiers: tuple[int, ...] = tuple(sorted({h.tier for h in specs.values()}))
        #: per node row, the hyperNode of the lowest tier holding it (name order among equals),
        #: None when no real hyperNode does (Volcano ``FindHyperNodeForNode``).
        self.lowest: list[str | None] = _lowest(self.infos, n)

    @staticmethod
    def _is_ancestor(candidate: str, name: str, parent: Mapping[str, str]) -> bool:
        current: str | None = name
        while current is not None:
            if current == candidate:
                return True
            current = parent.get(current)
        return False

    def _collect(
        self,
        name: str,
        specs: Mapping[str, HyperNode],
        children: Mapping[str, list[str]],
        node_list: tuple[tuple[str, ...], Sequence[Node]],
        rows_of: dict[str, set[int]],
    ) -> set[int]:
        known = rows_of.get(name)
        if known is not None:
            return known
        rows: set[int] = set()
        for member in specs[name].members:
            if member.kind == "Node":
                rows |= _select(member, *node_list)
        for child in children[name]:
            rows |= self._collect(child, specs, children, node_list, rows_of)
        rows_of[name] = rows
        return rows

    @property
    def top(self) -> HyperNodeInfo:
        return self.infos[CLUSTER_TOP]

    def ancestors(self, name: str) -> list[str]:
        """``name`` and its ancestors, closest first, ending at the cluster top."""
        out = []
        current: str | None = name
        while current is not None:
            out.append(current)
            current = self.infos[current].parent
        return out

    def lca(self, left: str | None, right: str | None) -> str | None:
        """The lowest common ancestor (Volcano ``GetLCAHyperNode``); an empty side gives the other."""
        if left is None:
            return right
        if right is None:
            return left
        mine = set(self.ancestors(left))
        for ancestor in self.ancestors(right):
            if ancestor in mine:
                return ancestor
        return None

    def lowest_of_row(self, row: int) -> str | None:
        return self.lowest[row]


def _lowest(infos: Mapping[str, HyperNodeInfo], n: int) -> list[str | None]:
    lowest: list[str | None] = [None] * n
    for name in sorted((h for h in infos if h != CLUSTER_TOP), key=lambda h: (infos[h].tier, h)):
        for row in infos[name].rows:
            if lowest[row] is None:
                lowest[row] = name
    return lowest


def _arrays(rows: tuple[int, ...], n: int) -> tuple[BoolArray, IntArray]:
    mask = np.zeros(n, dtype=np.bool_)
    index = np.asarray(rows, dtype=np.int64)
    mask[index] = True
    return mask, index


def _select(member: HyperNodeMember, names: tuple[str, ...], nodes: Sequence[Node]) -> set[int]:
    """Rows of the nodes a Node member selects (the selectors it has are ORed)."""
    rows: set[int] = set()
    if member.exact:
        # names are sorted (the session's row order): one bisection, not a scan
        at = bisect_left(names, member.exact)
        if at < len(names) and names[at] == member.exact:
            rows.add(at)
    if member.regex:
        try:
            pattern = re.compile(member.regex)
        except re.error:
            return set()  # Volcano: a pattern that does not compile selects nothing
        rows |= {i for i, name in enumerate(names) if pattern.search(name)}
    selector = member.labels
    if selector is not None and (selector.match_labels or selector.match_expressions):
        rows |= {i for i, node in enumerate(nodes) if selector_matches(selector, node.labels)}
    return rows
