"""``input_digest`` on the hot path: the bytes of the core's ``snapshot_digest``, faster.

The core's digest canonicalises every dataclass generically (and each job's
tasks twice); on a cluster with ten thousand tasks that costs more than the
session itself.  This module builds the identical canonical document with one
function per snapshot type and hands it to the same ``json.dumps`` call, so the
digest is byte for byte the core's (replay recomputes it with the core's
function; ``tests/service/test_digest.py`` proves the two agree).

Should a snapshot type gain or lose a field, the specialised encoders would
no longer describe it: the field sets are checked at import and the core's
function is used instead, so a model change can cost speed, never correctness.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import operator
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final, TypeAlias

from scheduler.core.snapshot import (
    ClusterSnapshot,
    HyperNode,
    HyperNodeMember,
    Job,
    LabelSelector,
    NetworkTopology,
    Node,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodAffinityTerm,
    PriorityClass,
    Queue,
    Taint,
    Task,
    Toleration,
    TopologySpreadConstraint,
    snapshot_digest,
)

__all__ = ["SPECIALISED", "JobText", "digest_of_texts", "input_digest", "job_text"]

#: A job's sort key in the digest, ``(namespace, name)``, and its canonical JSON (ASCII bytes).
JobText: TypeAlias = tuple[tuple[str, str], bytes]
_sort_key: Final = operator.itemgetter(0)
_text: Final = operator.itemgetter(1)

_KNOWN_FIELDS: Final[dict[type[Any], set[str]]] = {
    Task: {
        "namespace", "name", "resources", "status", "node", "role", "priority", "preemptable",
        "node_selector", "tolerations", "required_affinity", "preemption_policy", "priority_class", "created",
        "scheduling_gates", "labels", "pod_affinity", "pod_anti_affinity", "topology_spread",
    },
    Job: {
        "namespace", "name", "queue", "min_member", "min_task_member", "min_resources", "priority_class",
        "phase", "tasks", "created", "annotations", "network_topology",
    },
    NetworkTopology: {"mode", "highest_tier_allowed", "highest_tier_name"},
    HyperNode: {"name", "tier", "members", "tier_name"},
    HyperNodeMember: {"kind", "exact", "regex", "labels"},
    Node: {"name", "allocatable", "labels", "taints", "unschedulable"},
    Queue: {
        "name", "weight", "capability", "deserved", "guarantee", "reclaimable", "priority", "state",
        "parent", "created",
    },
    PriorityClass: {"name", "value", "global_default", "preemption_policy"},
    Taint: {"key", "value", "effect"},
    Toleration: {"key", "operator", "value", "effect"},
    NodeSelectorTerm: {"match_expressions", "match_fields"},
    NodeSelectorRequirement: {"key", "operator", "values"},
    LabelSelector: {"match_labels", "match_expressions"},
    PodAffinityTerm: {"topology_key", "selector", "namespaces"},
    TopologySpreadConstraint: {"max_skew", "topology_key", "when_unsatisfiable", "selector", "min_domains"},
    ClusterSnapshot: {"nodes", "queues", "priority_classes", "jobs", "hypernodes"},
}  # fmt: skip
SPECIALISED: Final = all(
    {f.name for f in dataclasses.fields(cls)} == fields for cls, fields in _KNOWN_FIELDS.items()
)


def input_digest(snapshot: ClusterSnapshot) -> str:
    """sha256 hex of the snapshot's canonical JSON (equal to ``snapshot_digest(snapshot)``)."""
    if not SPECIALISED:
        return snapshot_digest(snapshot)
    return digest_of_texts(snapshot, [job_text(j) for j in snapshot.jobs])


def job_text(job: Job) -> JobText:
    """One job's canonical JSON (reusable while the job does not change); needs :data:`SPECIALISED`."""
    return (job.namespace, job.name), _dumps(_job(job)).encode()


def digest_of_texts(snapshot: ClusterSnapshot, job_texts: list[JobText]) -> str:
    """The digest of ``snapshot`` whose jobs' canonical JSON texts are ``job_texts`` (any order).

    The bytes hashed are those of ``json.dumps`` of the whole canonical
    document: its keys sorted (``jobs``, ``nodes``, ``priority_classes``,
    ``queues``) and each value encoded as ``json.dumps`` encodes it inside the
    document, so the jobs' texts, made (and encoded) once per job change, are
    joined rather than re-encoded every session, and hashed between the
    document's other parts without copying them into one text.
    """
    nodes = sorted((_node(n) for n in snapshot.nodes), key=lambda n: n["name"])
    queues = sorted((_queue(q) for q in snapshot.queues), key=lambda q: q["name"])
    priority_classes = [
        {
            "name": p.name,
            "value": p.value,
            "global_default": p.global_default,
            "preemption_policy": p.preemption_policy,
        }
        for p in sorted(snapshot.priority_classes, key=lambda p: p.name)
    ]
    jobs = b",".join(map(_text, sorted(job_texts, key=_sort_key)))
    # "hypernodes" sorts first; left out while empty (snapshot.snapshot_digest).
    hypernodes = ""
    if snapshot.hypernodes:
        docs = sorted((_hypernode(h) for h in snapshot.hypernodes), key=lambda h: h["name"])
        hypernodes = f'"hypernodes":{_dumps(docs)},'

    digest = hashlib.sha256(f'{{{hypernodes}"jobs":['.encode())
    digest.update(jobs)
    digest.update(
        f'],"nodes":{_dumps(nodes)},"priority_classes":{_dumps(priority_classes)},"queues":{_dumps(queues)}}}'.encode()
    )
    return digest.hexdigest()


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _map(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    # Keys are strings and values plain scalars in every snapshot mapping; json sorts the keys.
    return None if value is None else dict(value)


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _node(n: Node) -> dict[str, Any]:
    return {
        "name": n.name,
        "allocatable": dict(n.allocatable),
        "labels": dict(n.labels),
        "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in n.taints],
        "unschedulable": n.unschedulable,
    }


def _queue(q: Queue) -> dict[str, Any]:
    return {
        "name": q.name,
        "weight": q.weight,
        "capability": dict(q.capability),
        "deserved": dict(q.deserved),
        "guarantee": dict(q.guarantee),
        "reclaimable": q.reclaimable,
        "priority": q.priority,
        "state": q.state,
        "parent": q.parent,
        "created": _time(q.created),
    }


def _hypernode(h: HyperNode) -> dict[str, Any]:
    return {
        "name": h.name,
        "tier": h.tier,
        "tier_name": h.tier_name,
        "members": [
            {"kind": m.kind, "exact": m.exact, "regex": m.regex, "labels": _selector(m.labels)}
            for m in h.members
        ],
    }


def _job(j: Job) -> dict[str, Any]:
    out: dict[str, Any] = {
        "namespace": j.namespace,
        "name": j.name,
        "queue": j.queue,
        "min_member": j.min_member,
        "min_task_member": dict(j.min_task_member),
        "min_resources": _map(j.min_resources),
        "priority_class": j.priority_class,
        "phase": j.phase.value,
        "tasks": sorted((_task(t) for t in j.tasks), key=lambda t: t["name"]),
        "created": _time(j.created),
        "annotations": dict(j.annotations),
    }
    if j.network_topology is not None:  # left out while None (snapshot.OMITTED_WHEN_EMPTY)
        nt = j.network_topology
        out["network_topology"] = {
            "mode": nt.mode,
            "highest_tier_allowed": nt.highest_tier_allowed,
            "highest_tier_name": nt.highest_tier_name,
        }
    return out


def _task(t: Task) -> dict[str, Any]:
    out: dict[str, Any] = {
        "namespace": t.namespace,
        "name": t.name,
        "resources": dict(t.resources),
        "status": t.status.value,
        "node": t.node,
        "role": t.role,
        "priority": t.priority,
        "preemptable": t.preemptable,
        "node_selector": dict(t.node_selector),
        "tolerations": [
            {"key": x.key, "operator": x.operator, "value": x.value, "effect": x.effect}
            for x in t.tolerations
        ],
        "required_affinity": [_term(term) for term in t.required_affinity],
        "preemption_policy": t.preemption_policy,
        "priority_class": t.priority_class,
        "created": _time(t.created),
    }
    # Left out while empty (snapshot.OMITTED_WHEN_EMPTY).
    if t.scheduling_gates:
        out["scheduling_gates"] = list(t.scheduling_gates)
    if t.labels:
        out["labels"] = {k: t.labels[k] for k in sorted(t.labels)}
    if t.pod_affinity:
        out["pod_affinity"] = [_affinity_term(term) for term in t.pod_affinity]
    if t.pod_anti_affinity:
        out["pod_anti_affinity"] = [_affinity_term(term) for term in t.pod_anti_affinity]
    if t.topology_spread:
        out["topology_spread"] = [_spread(c) for c in t.topology_spread]
    return out


def _requirements(requirements: tuple[NodeSelectorRequirement, ...]) -> list[dict[str, Any]]:
    return [{"key": r.key, "operator": r.operator, "values": list(r.values)} for r in requirements]


def _selector(selector: LabelSelector | None) -> dict[str, Any] | None:
    if selector is None:
        return None
    return {
        "match_expressions": _requirements(selector.match_expressions),
        "match_labels": [list(pair) for pair in selector.match_labels],
    }


def _affinity_term(term: PodAffinityTerm) -> dict[str, Any]:
    return {
        "namespaces": list(term.namespaces),
        "selector": _selector(term.selector),
        "topology_key": term.topology_key,
    }


def _spread(c: TopologySpreadConstraint) -> dict[str, Any]:
    return {
        "max_skew": c.max_skew,
        "min_domains": c.min_domains,
        "selector": _selector(c.selector),
        "topology_key": c.topology_key,
        "when_unsatisfiable": c.when_unsatisfiable,
    }


def _term(term: NodeSelectorTerm) -> dict[str, Any]:
    out: dict[str, Any] = {
        "match_expressions": [
            {"key": r.key, "operator": r.operator, "values": list(r.values)} for r in term.match_expressions
        ]
    }
    if term.match_fields:  # left out while empty (snapshot.OMITTED_WHEN_EMPTY)
        out["match_fields"] = [
            {"key": r.key, "operator": r.operator, "values": list(r.values)} for r in term.match_fields
        ]
    return out
