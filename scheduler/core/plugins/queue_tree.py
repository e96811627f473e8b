"""The queue tree of capacity's hierarchical mode (``enableHierarchy: true``).

Volcano's ``capacity`` with ``enableHierarchy`` (``buildHierarchicalQueueAttrs``,
``checkHierarchicalQueue``): every queue is a node under ``root`` through
``spec.parent`` (unset means ``root``); only leaf queues hold jobs, and a leaf's
allocation, request, inqueue and elastic amounts count at every ancestor too.
Limits are set top down:

* ``root``: capability as written, or unlimited in every dimension when empty
  (the cluster's total does not bound the tree, as in Volcano); its deserved and
  guarantee are the sums of its children's.
* a child: deserved floored at its guarantee; capability dimensions it leaves
  unset (cpu / memory also when <= 0) are inherited from the parent; real
  capability = (parent's real capability − Σ the siblings' guarantees)⁺ + its own
  guarantee, capped by its capability.

A tree Volcano cannot use — an unknown parent, a cycle, a job in a queue with
children — makes Volcano refuse every allocation and admission of the session
(``readyToSchedule = false``); :attr:`QueueTree.problem` carries the reason.
Volcano creates ``root`` at install; when the snapshot has no queue named
``root`` the tree has an implicit one with no limits, which is what Volcano's
default ``root`` is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

from scheduler.core.framework import Session
from scheduler.core.plugins.queue_accounting import QueueAttr, add_into, build_attrs
from scheduler.core.snapshot import PODS
from scheduler.core.state import QueueState

__all__ = ["ROOT", "UNLIMITED", "QueueTree", "build_queue_tree"]

ROOT: Final = "root"
#: A limit no sum of admitted quantities reaches (each quantity is below 2^50 at the door).
UNLIMITED: Final = Fraction(2**96)


@dataclass(eq=False, slots=True)
class QueueTree:
    #: every queue of the session and ``root``, with hierarchical amounts and limits.
    attrs: dict[str, QueueAttr]
    #: root first, the parent last; empty for ``root``.
    ancestors: dict[str, tuple[str, ...]]
    children: dict[str, tuple[str, ...]]
    #: why the tree cannot be used (then nothing is admitted or allocated), else None.
    problem: str | None

    def is_leaf(self, name: str) -> bool:
        return not self.children.get(name)

    def chain(self, name: str) -> tuple[str, ...]:
        """``name`` and its ancestors, leaf first: the order Volcano checks limits in."""
        return (name, *reversed(self.ancestors.get(name, ())))

    def ancestor_at(self, name: str, depth: int) -> str | None:
        """The ancestor ``depth`` levels above ``name`` (1 = parent), None above ``root``."""
        ancestors = self.ancestors.get(name, ())
        return ancestors[-depth] if 0 < depth <= len(ancestors) else None

    def common_depth(self, left: str, right: str) -> int:
        """Index in the ancestor lists of the deepest ancestor both queues share (Volcano's
        ``getQueueLevel``: 0 when only ``root`` is shared)."""
        level = 0
        for i, (a, b) in enumerate(
            zip(self.ancestors.get(left, ()), self.ancestors.get(right, ()), strict=False)
        ):
            if a != b:
                break
            level = i
        return level


def _implicit_root() -> QueueState:
    return QueueState(
        name=ROOT,
        weight=1,
        capability={},
        deserved={},
        guarantee={},
        reclaimable=True,
        priority=0,
        state="Open",
        created=0.0,
    )


def _parent_of(queue: QueueState) -> str:
    return queue.parent or ROOT


def _link(queues: Mapping[str, QueueState]) -> tuple[dict[str, tuple[str, ...]], str | None]:
    """Each queue's ancestors (root first), or the first problem met, in name order."""
    ancestors: dict[str, tuple[str, ...]] = {ROOT: ()}
    for name in sorted(queues):
        path: list[str] = []
        current = name
        while current not in ancestors:
            if current in path:
                cycle = " -> ".join([*path[path.index(current) :], current])
                return ancestors, f"queues {cycle} form a cycle through spec.parent"
            path.append(current)
            parent = _parent_of(queues[current])
            if parent not in queues:
                return ancestors, f"queue {current} has parent {parent}, which does not exist"
            current = parent
        for queue_name in reversed(path):
            parent = _parent_of(queues[queue_name])
            ancestors[queue_name] = (*ancestors[parent], parent)
    return ancestors, None


def _capability(queue: QueueState) -> dict[str, Fraction]:
    """The capability as written; cpu / memory <= 0 count as unset (inherited)."""
    return {
        name: Fraction(value)
        for name, value in sorted(queue.capability.items())
        if not (name in ("cpu", "memory") and value <= 0)
    }


def _set_limits(tree: QueueTree, name: str, capability: dict[str, Fraction]) -> None:
    """Volcano's ``checkHierarchicalQueue`` from ``name`` down; ``capability`` is ``name``'s."""
    attr = tree.attrs[name]
    children = tree.children.get(name, ())
    total_guarantee: dict[str, int] = {}
    total_deserved: dict[str, Fraction] = {}
    for child in children:
        child_attr = tree.attrs[child]
        deserved = {d: Fraction(v) for d, v in sorted(child_attr.queue.deserved.items())}
        for d, g in sorted(child_attr.queue.guarantee.items()):
            deserved[d] = max(deserved.get(d, Fraction(0)), Fraction(g))
        child_attr.deserved = dict(sorted(deserved.items()))
        add_into(total_guarantee, child_attr.queue.guarantee)
        for d, v in child_attr.deserved.items():
            total_deserved[d] = total_deserved.get(d, Fraction(0)) + v
    if name == ROOT:
        attr.deserved = dict(sorted(total_deserved.items()))
    for child in children:
        child_attr = tree.attrs[child]
        child_capability = _capability(child_attr.queue)
        for d, v in capability.items():
            child_capability.setdefault(d, v)
        real: dict[str, Fraction] = {}
        guarantee = child_attr.queue.guarantee
        for d in sorted(set(attr.real_capability) | set(guarantee)):
            parent_limit = attr.real_capability.get(d, Fraction(0))
            real[d] = max(Fraction(0), parent_limit - total_guarantee.get(d, 0)) + guarantee.get(d, 0)
        for d, cap in child_capability.items():
            if d in real:
                real[d] = min(real[d], cap)
        child_attr.real_capability = real
        _set_limits(tree, child, dict(sorted(child_capability.items())))


def build_queue_tree(ssn: Session) -> QueueTree:
    queues = dict(ssn.queues)
    if ROOT not in queues:
        queues[ROOT] = _implicit_root()
    ancestors, problem = _link(queues)
    children: dict[str, list[str]] = {}
    for name in sorted(ancestors):
        if name != ROOT:
            children.setdefault(ancestors[name][-1], []).append(name)
    tree = QueueTree(
        attrs={name: QueueAttr(queues[name]) for name in sorted(queues)},
        ancestors=ancestors,
        children={name: tuple(kids) for name, kids in sorted(children.items())},
        problem=problem,
    )
    if problem is not None:
        return tree
    # Each leaf's amounts (Volcano's per-job deltas), added to every ancestor.
    for name, leaf in build_attrs(ssn).items():
        if not tree.is_leaf(name):
            holder = sorted(j.uid for j in ssn.jobs.values() if j.queue == name)[0]
            tree.problem = (
                f"queue {name} has child queues ({', '.join(tree.children[name])}) and holds job "
                f"{holder}; with hierarchy only leaf queues hold jobs"
            )
            return tree
        for queue_name in tree.chain(name):
            target = tree.attrs[queue_name]
            add_into(target.allocated, leaf.allocated)
            add_into(target.request, leaf.request)
            add_into(target.inqueue, leaf.inqueue)
            add_into(target.elastic, leaf.elastic)
    root = tree.attrs[ROOT]
    root_capability = _capability(root.queue)
    if not root_capability:
        root_capability = {d: UNLIMITED for d in sorted(ssn.total) if d != PODS}
    root.real_capability = dict(root_capability)
    _set_limits(tree, ROOT, root_capability)
    for attr in tree.attrs.values():
        attr.deserved_float = tuple((d, float(v)) for d, v in sorted(attr.deserved.items()) if v > 0)
    return tree
