"""A :class:`~projector.state.ClusterState` as JSON values, and back.

A snapshot is stored in pieces (:func:`state_to_stored`): a head document
(``state_snapshots.state``: the clocks, config, queues, priority classes) and
the items of the sections that grow with the state (nodes, jobs, tasks,
sessions, buffers) in chunks of about 64 KiB of JSON text
(``state_snapshot_chunks``), so that neither writing nor reading one ever holds
its whole text or its whole JSON value.  :func:`state_to_jsonable` is the same
form as one dict, for comparisons.  The projection tables hold the per-entity documents
(``queues.doc``, ``nodes.doc``, ``jobs.spec``, ``sessions.doc``) and the
buffered entries (``early_observations.events``, ``session_parts.items``).  Every
reader rebuilds a state through :func:`projector.state.assemble`, which
derives what is not stored (task specs from the job, node usage from the
tasks).  Times are written as ``datetime.isoformat()`` text; event models as
their ``model_dump(mode="json")`` values.

The head's ``format`` is 4 (1 had no clock nor retention fields, 2 no role
clocks nor buffer times, 3 was one document); a reader refuses any other.
The ``retiring`` heap is not stored: :func:`assemble` derives it from the
jobs' ``finished_at`` and ``ttl_seconds``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import orjson

from events.jsonform import DECODED_UTC, LastForms, json_form, time_text
from events.models import (
    BindDecision,
    Decision,
    EnqueueDecision,
    EvictDecision,
    HyperNodeUpsertedData,
    NetworkTopologySpec,
    PendingJob,
    PipelineDecision,
    SchedulerConfigSpec,
    SessionPartData,
    Taint,
    TaskFinished,
    TaskSpec,
    TaskStarted,
)
from projector.state import (
    BufferedSession,
    ClusterState,
    EarlyObservation,
    EarlyObservations,
    JobPhase,
    JobState,
    NodeState,
    PriorityClassState,
    QueueState,
    QueueStatus,
    SessionRecord,
    TaskRow,
    TaskStatus,
    VoidedDecision,
    assemble,
)

__all__ = [
    "CHUNK_BYTES",
    "FORMAT_VERSION",
    "PENDING_ITEM",
    "SECTIONS",
    "StoredState",
    "StoredStateReader",
    "document_json",
    "hypernode_from_json",
    "hypernode_to_json",
    "isoformat",
    "job_from_json",
    "job_to_json",
    "node_from_json",
    "node_to_json",
    "observations_from_json",
    "observations_to_json",
    "part_from_json",
    "part_to_json",
    "priority_class_from_json",
    "priority_class_to_json",
    "queue_from_json",
    "queue_to_json",
    "session_from_json",
    "session_to_json",
    "state_from_jsonable",
    "state_from_stored",
    "state_to_jsonable",
    "state_to_stored",
    "task_status",
]

FORMAT_VERSION: Final = 4
#: The ``kind`` of a pending job buffered with a part's decisions (not a decision kind;
#: parts archived before SessionPart had ``pending`` have none).
PENDING_ITEM: Final = "pending"
_DECISIONS: Final[dict[str, type[Decision]]] = {
    "enqueue": EnqueueDecision,
    "bind": BindDecision,
    "pipeline": PipelineDecision,
    "evict": EvictDecision,
}
_TASK_STATUSES: Final = {status.value: status for status in TaskStatus}
_TASK_STARTED: Final = TaskStarted.model_fields["type"].default
_json_dumps: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
# Bound once: compiled code looks a module's attribute up by name at every use.
_orjson_dumps: Final = orjson.dumps


def task_status(text: str) -> TaskStatus:
    """The status a row or snapshot names (a dict read: ``TaskStatus(text)`` is a Python call)."""
    return _TASK_STATUSES[text]


# ---------------------------------------------------------------------------- the whole state

#: The sections of a state that grow with it, in the order they are written:
#: each is a list of items, stored in chunks (:class:`StoredState`).
SECTIONS: Final = ("nodes", "jobs", "tasks", "sessions", "session_parts", "early_observations")
#: A chunk's JSON text closes once it reaches this many bytes: a snapshot is
#: encoded, written and read a chunk at a time, so neither its text nor its
#: items' JSON values ever exist whole (a 10k-job state: ~50 chunks).
CHUNK_BYTES: Final = 64 * 1024


@dataclass(frozen=True)
class StoredState:
    """A state as snapshots store it: ``head`` (``state_snapshots.state``) and
    ``chunks`` (``state_snapshot_chunks``: (section, JSON array of items), in order)."""

    head: str
    chunks: list[tuple[str, str]]


def _head(state: ClusterState) -> dict[str, Any]:
    """Everything of a state but its :data:`SECTIONS` (the small, fixed-size part)."""
    head: dict[str, Any] = {
        "format": FORMAT_VERSION,
        "seq": state.seq,
        "queues": [queue_to_json(q) for q in state.queues.values()],
        "priority_classes": [priority_class_to_json(p) for p in state.priority_classes.values()],
        "config": None if state.config is None else state.config.model_dump(mode="json"),
        "config_version": state.config_version,
        "leader_epoch": state.leader_epoch,
        "leader_key": state.leader_key,
        "clock": isoformat(state.clock),
        "role_clocks": [isoformat(t) for t in state.role_clocks],
    }
    if state.hypernodes:  # left out while empty: such a state stores what it stored before them
        head["hypernodes"] = [hypernode_to_json(h) for h in state.hypernodes.values()]
    return head


def _section_items(state: ClusterState, section: str) -> Iterator[Any]:
    """The JSON values of one section's items, one at a time."""
    if section == "nodes":
        return (node_to_json(n) for n in state.nodes.values())
    if section == "jobs":
        return (job_to_json(j) for j in state.jobs.values())
    if section == "tasks":
        # Tasks as rows: everything else about a task comes from its job's spec.
        return ([t.id, t.job, t.role, t.index, t.status, t.node] for t in state.tasks.values())
    if section == "sessions":
        return (session_to_json(s) for s in state.sessions.values())
    if section == "session_parts":
        return (
            [sid, isoformat(buffered.since), [[i, part_to_json(p)] for i, p in buffered.parts.items()]]
            for sid, buffered in state.session_parts.items()
        )
    return (
        [job, isoformat(entry.since), observations_to_json(entry.events)]
        for job, entry in state.early_observations.items()
    )


def state_to_jsonable(state: ClusterState) -> dict[str, Any]:
    """The stored form as one JSON-able dict (head and sections inline; for comparisons and
    tests: snapshots are written with :func:`state_to_stored`); :func:`state_from_jsonable` inverts it."""
    doc = _head(state)
    for section in SECTIONS:
        doc[section] = list(_section_items(state, section))
    return doc


def state_to_stored(state: ClusterState) -> StoredState:
    """The snapshot of ``state``: each item encoded alone, items joined into chunks of about
    :data:`CHUNK_BYTES`; :func:`state_from_stored` inverts it."""
    chunks: list[tuple[str, str]] = []
    for section in SECTIONS:
        pieces: list[bytes] = []
        size = 0
        for item in _section_items(state, section):
            piece = _item_json(item)
            pieces.append(piece)
            size += len(piece) + 1
            if size >= CHUNK_BYTES:
                chunks.append((section, _chunk_text(pieces)))
                pieces = []
                size = 0
        if pieces:
            chunks.append((section, _chunk_text(pieces)))
    return StoredState(document_json(_head(state)), chunks)


def _item_json(item: Any) -> bytes:
    try:
        return _orjson_dumps(item)
    except orjson.JSONEncodeError:
        return _json_dumps(item).encode()  # beyond orjson (an integer over 64 bits in plugin arguments)


def document_json(value: Any) -> str:
    """Compact JSON text of a projection document or snapshot (not hashed: any valid JSON will do)."""
    return _item_json(value).decode()


def _chunk_text(pieces: list[bytes]) -> str:
    return (b"[" + b",".join(pieces) + b"]").decode()


def state_from_jsonable(doc: dict[str, Any]) -> ClusterState:
    """The state of :func:`state_to_jsonable`'s document."""
    return state_from_stored(doc, ((section, doc[section]) for section in SECTIONS))


def state_from_stored(
    head: str | bytes | dict[str, Any], chunks: Iterable[tuple[str, str | bytes | list[Any]]]
) -> ClusterState:
    """A state from a snapshot's head and its chunks in order (JSON text, or already parsed)."""
    reader = StoredStateReader(head)
    for section, chunk in chunks:
        reader.add(section, chunk)
    return reader.state()


class StoredStateReader:
    """Reads a snapshot a chunk at a time (:func:`state_to_stored`'s form).

    Each chunk's JSON values are turned into the state's objects and dropped
    before the next chunk is given, so reading never holds more JSON than one
    chunk's; the caller may fetch the chunks as it goes.
    """

    def __init__(self, head: str | bytes | dict[str, Any]) -> None:
        doc = head if isinstance(head, dict) else _loads(head)
        if doc.get("format") != FORMAT_VERSION:
            raise ValueError(f"cannot read cluster state format {doc.get('format')!r}")
        self._head = doc
        self._specs: dict[bytes, TaskSpec] = {}  # jobs often share task specs: validate each once
        self._nodes: list[NodeState] = []
        self._jobs: list[JobState] = []
        self._task_rows: list[TaskRow] = []
        self._sessions: list[SessionRecord] = []
        self._parts: dict[str, BufferedSession] = {}
        self._early: dict[str, EarlyObservations] = {}

    def add(self, section: str, chunk: str | bytes | list[Any]) -> None:
        """The next chunk (a JSON array of ``section``'s items, or the parsed list)."""
        items: list[Any] = chunk if isinstance(chunk, list) else _loads(chunk)
        if section == "nodes":
            self._nodes.extend(node_from_json(n) for n in items)
        elif section == "jobs":
            specs = self._specs
            self._jobs.extend(job_from_json(j, specs) for j in items)
        elif section == "tasks":
            self._task_rows.extend((r[0], r[1], r[2], r[3], task_status(r[4]), r[5]) for r in items)
        elif section == "sessions":
            self._sessions.extend(session_from_json(s) for s in items)
        elif section == "session_parts":
            for sid, since, indexed in items:
                self._parts[sid] = BufferedSession(
                    since=_parse_time(since),
                    parts={index: part_from_json(sid, index, docs) for index, docs in indexed},
                )
        elif section == "early_observations":
            for job, since, docs in items:
                self._early[job] = EarlyObservations(
                    since=_parse_time(since), events=observations_from_json(docs)
                )
        else:
            raise ValueError(f"cannot read cluster state section {section!r}")

    def state(self) -> ClusterState:
        """The state of the head and every chunk given."""
        doc = self._head
        config = doc["config"]
        return assemble(
            seq=doc["seq"],
            queues=[queue_from_json(q) for q in doc["queues"]],
            priority_classes=[priority_class_from_json(p) for p in doc["priority_classes"]],
            config=None if config is None else SchedulerConfigSpec.model_validate(config),
            config_version=doc["config_version"],
            leader_epoch=doc["leader_epoch"],
            leader_key=doc["leader_key"],
            hypernodes=[hypernode_from_json(h) for h in doc.get("hypernodes", [])],
            nodes=self._nodes,
            jobs=self._jobs,
            task_rows=self._task_rows,
            sessions=self._sessions,
            session_parts=self._parts,
            early_observations=self._early,
            clock=_parse_time(doc["clock"]),
            role_clocks=[_parse_time(t) for t in doc["role_clocks"]],
        )


def _loads(text: str | bytes) -> Any:
    """orjson parses several times faster than the json module; a document it refuses (an
    integer beyond 64 bits, which the json fallback may write) is read with the json module."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


# ---------------------------------------------------------------------------- per entity


def isoformat(value: datetime) -> str:
    """``value.isoformat()``, the same text, for less on a UTC time.

    ``isoformat`` formats with ``PyUnicode_FromFormat`` and asks the tzinfo for
    its offset (callgrind: ~9k instructions), and a snapshot writes every job's
    time.  For a UTC time it is the event models' text (``...Z``) with ``+00:00``
    for its ``Z``: the two agree on everything else (tests/projector/test_state_json.py).
    """
    zone = value.tzinfo
    if zone is DECODED_UTC or zone is UTC:
        return time_text(value)[:-1] + "+00:00"
    return value.isoformat()


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text)


def queue_to_json(q: QueueState) -> dict[str, Any]:
    return {
        "name": q.name,
        "weight": q.weight,
        "capability": q.capability,
        "deserved": q.deserved,
        "guarantee": q.guarantee,
        "reclaimable": q.reclaimable,
        "priority": q.priority,
        "state": q.state,
        "parent": q.parent,
        "created": isoformat(q.created),
    }


def queue_from_json(d: dict[str, Any]) -> QueueState:
    return QueueState(
        name=d["name"],
        weight=d["weight"],
        capability=d["capability"],
        deserved=d["deserved"],
        guarantee=d["guarantee"],
        reclaimable=d["reclaimable"],
        priority=d["priority"],
        state=QueueStatus(d["state"]),
        parent=d["parent"],
        created=_parse_time(d["created"]),
    )


def priority_class_to_json(p: PriorityClassState) -> dict[str, Any]:
    return {
        "name": p.name,
        "value": p.value,
        "global_default": p.global_default,
        "preemption_policy": p.preemption_policy,
    }


def priority_class_from_json(d: dict[str, Any]) -> PriorityClassState:
    return PriorityClassState(
        name=d["name"],
        value=d["value"],
        global_default=d["global_default"],
        preemption_policy=d["preemption_policy"],
    )


def node_to_json(n: NodeState) -> dict[str, Any]:
    return {
        "name": n.name,
        "allocatable": n.allocatable,
        "labels": n.labels,
        "taints": [json_form(t) for t in n.taints],
        "unschedulable": n.unschedulable,
        "ready": n.ready,
        "created": isoformat(n.created),
    }


def node_from_json(d: dict[str, Any]) -> NodeState:
    return NodeState(
        name=d["name"],
        allocatable=d["allocatable"],
        labels=d["labels"],
        taints=tuple(Taint.model_validate(t) for t in d["taints"]),
        unschedulable=d["unschedulable"],
        ready=d["ready"],
        created=_parse_time(d["created"]),
    )


def hypernode_to_json(h: HyperNodeUpsertedData) -> dict[str, Any]:
    return h.model_dump(mode="json")


def hypernode_from_json(d: dict[str, Any]) -> HyperNodeUpsertedData:
    return HyperNodeUpsertedData.model_validate(d)


def job_to_json(j: JobState) -> dict[str, Any]:
    form = {
        "id": j.id,
        "namespace": j.namespace,
        "name": j.name,
        "queue": j.queue,
        "priority_class": j.priority_class,
        "min_available": j.min_available,
        "min_resources": j.min_resources,
        "phase": j.phase,
        "phase_reason": j.phase_reason,
        "created": isoformat(j.created),
        "annotations": j.annotations,
        "labels": j.labels,
        "task_specs": [json_form(s) for s in j.task_specs],
        "ttl_seconds": j.ttl_seconds,
        "finished_at": None if j.finished_at is None else isoformat(j.finished_at),
        "submitted_seq": j.submitted_seq,
        # Left out when None, so a job without one is stored as before the field existed.
        **({"network_topology": j.network_topology.model_dump(mode="json")} if j.network_topology else {}),
    }
    if j.min_task_member is not None:  # added later: absent keeps older jobs' form and bytes
        form["min_task_member"] = j.min_task_member
    return form


def job_from_json(d: dict[str, Any], specs: dict[bytes, TaskSpec] | None = None) -> JobState:
    """A job from its JSON form; ``specs`` caches validated task specs by their text
    (TaskSpec is frozen, so jobs with equal specs can share one)."""
    return JobState(
        id=d["id"],
        namespace=d["namespace"],
        name=d["name"],
        queue=d["queue"],
        priority_class=d["priority_class"],
        min_available=d["min_available"],
        min_resources=d["min_resources"],
        phase=JobPhase(d["phase"]),
        phase_reason=d["phase_reason"],
        created=_parse_time(d["created"]),
        annotations=d["annotations"],
        labels=d["labels"],
        task_specs=tuple(_task_spec(s, specs) for s in d["task_specs"]),
        tasks=[],
        ttl_seconds=d["ttl_seconds"],
        finished_at=None if (finished := d["finished_at"]) is None else _parse_time(finished),
        # Absent from documents written before incarnations existed.
        submitted_seq=d.get("submitted_seq", 0),
        network_topology=None if (nt := d.get("network_topology")) is None else _topology(nt),
        min_task_member=d.get("min_task_member"),
    )


def _topology(doc: dict[str, Any]) -> NetworkTopologySpec:
    return NetworkTopologySpec.model_validate(doc)


def _task_spec(doc: dict[str, Any], specs: dict[bytes, TaskSpec] | None) -> TaskSpec:
    if specs is None:
        return TaskSpec.model_validate(doc)
    key = orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
    spec = specs.get(key)
    if spec is None:
        spec = specs[key] = TaskSpec.model_validate(doc)
    return spec


def session_to_json(s: SessionRecord) -> dict[str, Any]:
    return {
        "session_id": s.session_id,
        "seq": s.seq,
        "leader_epoch": s.leader_epoch,
        "input_seq": s.input_seq,
        "config_version": s.config_version,
        "now": isoformat(s.now),
        "accepted": s.accepted,
        "voided": [
            {
                "index": v.index,
                "kind": v.kind,
                "job": v.job,
                "task": v.task,
                "node": v.node,
                "reason": v.reason,
            }
            for v in s.voided
        ],
        "pending": None if s.pending is None else _PENDING_FORMS.of(s.pending),
        "pending_digest": s.pending_digest,
        "input_digest": s.input_digest,
        "logic_flags": list(s.logic_flags),
    }


#: The newest session's pending list is written with every stored state (its session row leaves it to
#: newest_pending, projector.newest_pending); a backlog keeps most entries (the same objects, see
#: projector.fold) from one snapshot to the next, so only the new ones are converted (92k: 0.56 s).
_PENDING_FORMS: Final[LastForms[PendingJob, Any]] = LastForms(json_form, lambda entry: entry.job)


def session_from_json(d: dict[str, Any]) -> SessionRecord:
    return SessionRecord(
        session_id=d["session_id"],
        seq=d["seq"],
        leader_epoch=d["leader_epoch"],
        input_seq=d["input_seq"],
        config_version=d["config_version"],
        now=_parse_time(d["now"]),
        accepted=d["accepted"],
        voided=tuple(
            VoidedDecision(
                index=v["index"],
                kind=v["kind"],
                job=v["job"],
                task=v["task"],
                node=v["node"],
                reason=v["reason"],
            )
            for v in d["voided"]
        ),
        pending=None if d["pending"] is None else tuple(PendingJob.model_validate(p) for p in d["pending"]),
        pending_digest=d["pending_digest"],
        input_digest=d["input_digest"],
        logic_flags=tuple(d["logic_flags"]),
    )


# ---------------------------------------------------------------------------- buffers


def part_to_json(part: SessionPartData) -> list[dict[str, Any]]:
    """A buffered part: its decisions, then its pending jobs tagged ``"kind": "pending"``
    (:data:`PENDING_ITEM`)."""
    return [
        *(json_form(d) for d in part.decisions),
        *({"kind": PENDING_ITEM, **json_form(p)} for p in part.pending),
    ]


def part_from_json(session_id: str, index: int, items: list[dict[str, Any]]) -> SessionPartData:
    decisions: list[Decision] = []
    pending: list[PendingJob] = []
    for item in items:
        kind = item["kind"]
        if kind == PENDING_ITEM:
            pending.append(PendingJob.model_validate({k: v for k, v in item.items() if k != "kind"}))
        else:
            decisions.append(_DECISIONS[kind].model_validate(item))
    return SessionPartData(session_id=session_id, index=index, decisions=decisions, pending=pending)


def observations_to_json(events: list[EarlyObservation]) -> list[dict[str, Any]]:
    """Buffered observations as event documents (``model_dump(mode="json")``)."""
    return [event.model_dump(mode="json") for event in events]


def observations_from_json(docs: list[dict[str, Any]]) -> list[EarlyObservation]:
    return [_observation(doc) for doc in docs]


def _observation(doc: dict[str, Any]) -> EarlyObservation:
    if doc["type"] == _TASK_STARTED:
        return TaskStarted.model_validate(doc)
    return TaskFinished.model_validate(doc)
