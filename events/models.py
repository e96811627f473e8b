"""The v1 event catalogue: CloudEvents 1.0 envelopes with typed ``data``.

Every event is a frozen pydantic model whose attributes are the CloudEvents
attributes (``specversion, id, source, type, time, subject, datacontenttype,
data``) plus the extension attribute ``cluster``.  ``type`` is versioned
(``tephra.job.submitted.v1``) and is the discriminator of :data:`Event`.

Resources inside ``data`` are Kubernetes ``ResourceList`` mappings.  On input
they accept quantity strings or numbers (``{"cpu": "500m", "memory": "8Gi"}``);
in memory they are integers in Tephra's units (cpu millicores, everything
else whole base units, see :mod:`events.quantity`); on the wire they are
canonical quantity strings (``"500m"``, ``"8589934592"``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, Final, Literal, TypeAlias

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    SerializerFunctionWrapHandler,
    WithJsonSchema,
    field_validator,
    model_serializer,
    model_validator,
)

from events.pending_lists import changed_pending
from events.quantity import MAX_QUANTITY, format_resources, parse_resources

__all__ = [
    "DEFAULT_CLUSTER",
    "EARLIEST_TIME",
    "EVENT_TYPES",
    "INT32_MAX",
    "LATEST_TIME",
    "MAX_LEADER_EPOCH",
    "MAX_PENDING_SLICES",
    "MAX_PRINCIPAL",
    "MAX_SEQ",
    "MAX_SESSION_PARTS",
    "ActionConfiguration",
    "BindDecision",
    "Decision",
    "EnqueueDecision",
    "Event",
    "EventData",
    "EventTime",
    "EvictDecision",
    "HyperNodeDeleted",
    "HyperNodeDeletedData",
    "HyperNodeExactMember",
    "HyperNodeLabelMember",
    "HyperNodeMemberSpec",
    "HyperNodeRegexMember",
    "HyperNodeUpserted",
    "HyperNodeUpsertedData",
    "JobCancelled",
    "JobCancelledData",
    "JobRejected",
    "JobRejectedData",
    "JobSubmitted",
    "JobSubmittedData",
    "LeaderElected",
    "LeaderElectedData",
    "NetworkTopologySpec",
    "NodeRemoved",
    "NodeRemovedData",
    "NodeReported",
    "NodeReportedData",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "PendingJob",
    "PendingReason",
    "PipelineDecision",
    "PluginSpec",
    "PriorityClassUpserted",
    "PriorityClassUpsertedData",
    "QueueDeleted",
    "QueueDeletedData",
    "QueueUpserted",
    "QueueUpsertedData",
    "ResourceList",
    "SchedulerConfigSpec",
    "SchedulerConfigured",
    "SchedulerConfiguredData",
    "SessionCommitted",
    "SessionCommittedData",
    "SessionPart",
    "SessionPartData",
    "Taint",
    "TaskFinished",
    "TaskFinishedData",
    "TaskSpec",
    "TaskStarted",
    "TaskStartedData",
    "TasksAdded",
    "TasksAddedData",
    "TierSpec",
    "Toleration",
    "changed_pending",
]

DEFAULT_CLUSTER = "default"

_FROZEN = ConfigDict(frozen=True, extra="forbid")

# --------------------------------------------------------------------------- bounds
# Every number and time an event carries is bounded at the door, so that no value
# a producer sends can overflow the fold (datetime arithmetic), PostgreSQL's
# columns (integer, bigint), or the scheduler's int64 resource matrices
# (docs/archive-format.md, "Bounds").

#: Kubernetes' int32 fields (replicas, minAvailable, priorities, TTLs, exit codes).
INT32_MAX: Final = 2**31 - 1
#: Seqs (``input_seq``): PostgreSQL bigint.
MAX_SEQ: Final = 2**63 - 1
#: Leader epochs: exact in every JSON reader (2^53 - 1), far below bigint, so a
#: leader's next epoch (one higher) is always storable.
MAX_LEADER_EPOCH: Final = 2**53 - 1
#: A principal's text (``NAME`` or ``NAME:SUBJECT``, docs/producers.md "Signing").
MAX_PRINCIPAL: Final = 256
#: Parts of one split session (each up to the broker's message limit: 100k parts
#: are 100 GB of decisions at 1 MB each).
MAX_SESSION_PARTS: Final = 100_000
#: Slices a session's pending list may be cut into (``SessionCommittedData.pending_slices``).
MAX_PENDING_SLICES: Final = 4_096
#: Event times: 1970-01-01T00:00:00Z inclusive to 9900-01-01T00:00:00Z exclusive,
#: compared in UTC (the offset applied).  The upper end leaves room for a TTL
#: (at most INT32_MAX seconds, ~68 years) to be added before year 9999 ends.
EARLIEST_TIME: Final = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_TIME: Final = datetime(9900, 1, 1, tzinfo=UTC)

EventTime: TypeAlias = Annotated[
    AwareDatetime,
    Field(
        ge=EARLIEST_TIME,
        lt=LATEST_TIME,
        json_schema_extra={
            "formatMinimum": "1970-01-01T00:00:00Z",
            "formatExclusiveMaximum": "9900-01-01T00:00:00Z",
            "description": "RFC 3339 time with an offset; in UTC at or after 1970-01-01T00:00:00Z"
            " and before 9900-01-01T00:00:00Z",
        },
    ),
]


def _requires(tag: str) -> Callable[[dict[str, Any]], None]:
    """A schema hook: the published schema requires the ``tag`` member, as decoding does.

    The models default their tag (``type``, a decision's ``kind``) so that
    Python code need not repeat it; a producer's record must carry it, since
    it says which schema the record follows (decoding an event without
    ``type`` fails with ``missing-type``, a decision without ``kind`` too).
    """

    def hook(schema: dict[str, Any]) -> None:
        properties = schema.get("properties")
        if isinstance(properties, dict) and isinstance(properties.get(tag), dict):
            properties[tag].pop("default", None)
            schema["required"] = [*schema.get("required", []), tag]

    return hook


def _parse_resource_list(value: object) -> dict[str, int]:
    return parse_resources(value)


ResourceList: TypeAlias = Annotated[
    dict[str, int],
    BeforeValidator(_parse_resource_list),
    PlainSerializer(format_resources, return_type=dict[str, str]),
    WithJsonSchema(
        {
            "type": "object",
            "description": "Kubernetes ResourceList: resource name -> quantity (e.g. '500m', '8Gi', 8)",
            "additionalProperties": {"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 0}]},
            "$comment": f"every quantity, in Tephra's units (cpu millicores, other resources base units),"
            f" must be below {MAX_QUANTITY} (2^50)",
        }
    ),
]


class EventData(BaseModel):
    """Base of every ``data`` payload: frozen, unknown fields rejected."""

    model_config = _FROZEN


# --------------------------------------------------------------------------- queues, priorities, config


class QueueUpsertedData(EventData):
    """A Volcano Queue (``scheduling.volcano.sh/v1beta1``) created or replaced whole."""

    name: str = Field(min_length=1)
    weight: int = Field(default=1, ge=1, le=65535)
    capability: ResourceList = Field(default_factory=dict)
    deserved: ResourceList = Field(default_factory=dict)
    guarantee: ResourceList = Field(default_factory=dict)
    reclaimable: bool = True
    priority: int = Field(default=0, ge=0, le=INT32_MAX)
    state: Literal["Open", "Closed", "Closing"] = "Open"
    parent: str | None = None
    #: Create only: when a queue of this name exists the event changes nothing (Kubernetes'
    #: Create answering AlreadyExists).  The scheduler's ``default`` queue is created so.
    #: Added later: left out when false, so other upserts serialise as before it existed.
    if_absent: bool = Field(default=False, exclude_if=lambda v: not v)


class QueueDeletedData(EventData):
    name: str = Field(min_length=1)


class PriorityClassUpsertedData(EventData):
    name: str = Field(min_length=1)
    value: int = Field(ge=-INT32_MAX - 1, le=INT32_MAX)
    global_default: bool = False
    preemption_policy: Literal["PreemptLowerPriority", "Never"] = "PreemptLowerPriority"


class PluginSpec(EventData):
    """One plugin of a tier, normalised: flags are the ``enable*`` switches by name."""

    name: str = Field(min_length=1)
    flags: dict[str, bool] = Field(default_factory=dict)
    arguments: dict[str, Any] = Field(default_factory=dict)


class TierSpec(EventData):
    plugins: list[PluginSpec] = Field(default_factory=list)


class ActionConfiguration(EventData):
    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


class SchedulerConfigSpec(EventData):
    """The volcano-scheduler.conf shape (``actions``, ``tiers``, ``configurations``)."""

    actions: list[str] = Field(min_length=1)
    tiers: list[TierSpec] = Field(default_factory=list)
    configurations: list[ActionConfiguration] = Field(default_factory=list)


class SchedulerConfiguredData(EventData):
    config: SchedulerConfigSpec


# --------------------------------------------------------------------------- jobs


class Toleration(EventData):
    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None


class NodeSelectorRequirement(EventData):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str] = Field(default_factory=list)


class NodeSelectorTerm(EventData):
    """Terms are ORed; the requirements inside one term are ANDed (Kubernetes rule).

    ``match_fields`` select by node field, ``metadata.name`` only (as Kubernetes).  Added
    later: left out while empty, so a term without it serialises as before it existed.
    """

    match_expressions: list[NodeSelectorRequirement] = Field(default_factory=list)
    match_fields: list[NodeSelectorRequirement] = Field(default_factory=list, exclude_if=lambda v: not v)


class LabelSelectorRequirement(EventData):
    key: str = Field(min_length=1)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)


class LabelSelector(EventData):
    """Kubernetes' ``metav1.LabelSelector``: both parts ANDed; empty matches every pod."""

    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list)


class PodAffinityTerm(EventData):
    """A required pod (anti-)affinity term; ``namespaces`` empty means the pod's own, and
    ``label_selector`` None selects no pod (Kubernetes' nil selector)."""

    topology_key: str = Field(min_length=1)
    label_selector: LabelSelector | None = None
    namespaces: list[str] = Field(default_factory=list)


class TopologySpreadConstraint(EventData):
    max_skew: int = Field(ge=1, le=INT32_MAX)
    topology_key: str = Field(min_length=1)
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"]
    label_selector: LabelSelector | None = None
    min_domains: int | None = Field(default=None, ge=1, le=INT32_MAX)


class TaskSpec(EventData):
    """One task (role) of a job: ``replicas`` identical pods ``<job>-<task>-<index>``.

    ``labels``, ``pod_affinity``, ``pod_anti_affinity`` and ``topology_spread`` were added
    later: left out while empty, so a spec without them serialises as before they existed.
    So were ``pod_names``, ``role`` and ``inherits_job_priority_class``, which let a
    PodGroup's own pods be submitted as they are (a VolcanoJob's never need them), and
    ``scheduling_gates``.
    """

    name: str = Field(min_length=1)
    #: Bounded here by Kubernetes' int32; the projector bounds it tighter by its settings
    #: (``TEPHRA_MAX_REPLICAS_PER_TASK``, ``TEPHRA_MAX_TASKS_PER_JOB``).
    replicas: int = Field(ge=0, le=INT32_MAX)
    min_available: int | None = Field(default=None, ge=0, le=INT32_MAX)
    resources: ResourceList = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)
    required_node_affinity: list[NodeSelectorTerm] = Field(default_factory=list)
    preemptable: bool = True
    priority_class: str | None = None
    preemption_policy: Literal["PreemptLowerPriority", "Never"] | None = None
    labels: dict[str, str] = Field(default_factory=dict, exclude_if=lambda v: not v)
    pod_affinity: list[PodAffinityTerm] = Field(default_factory=list, exclude_if=lambda v: not v)
    pod_anti_affinity: list[PodAffinityTerm] = Field(default_factory=list, exclude_if=lambda v: not v)
    topology_spread: list[TopologySpreadConstraint] = Field(default_factory=list, exclude_if=lambda v: not v)
    #: The pods' names when they are not ``<job>-<task>-<index>`` (a PodGroup's pods, named by
    #: their author): one per replica, and the task ids are ``<namespace>/<pod name>``.
    pod_names: list[str] = Field(default_factory=list, exclude_if=lambda v: not v)
    #: The role the pods carry (``volcano.sh/task-spec``) when it is not the spec's name:
    #: ``""`` for a PodGroup's pod without one, as Volcano reads it.
    role: str | None = Field(default=None, exclude_if=lambda v: v is None)
    #: Whether pods without their own PriorityClass take the job's, as Volcano's job
    #: controller copies it onto a VolcanoJob's pods; a PodGroup's pods keep their own.
    inherits_job_priority_class: bool = Field(default=True, exclude_if=lambda v: v)
    #: The pods' ``schedulingGates`` names, in order: while any remains a pod is not placed
    #: (reason ``scheduling-gated``).  Added later, left out while empty.
    scheduling_gates: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list, exclude_if=lambda v: not v
    )

    @field_validator("scheduling_gates")
    @classmethod
    def _unique_gates(cls, value: list[str]) -> list[str]:
        # As Kubernetes' API validation: a gate is named once (removing it must lift it).
        if len(set(value)) != len(value):
            raise ValueError("scheduling_gates must name each gate once")
        return value


class NetworkTopologySpec(EventData):
    """A job's ``spec.networkTopology``: keep the gang inside one HyperNode of tier <=
    ``highest_tier_allowed`` (or the tier named ``highest_tier_name``); ``soft`` prefers it."""

    mode: Literal["hard", "soft"] = "hard"
    highest_tier_allowed: int | None = Field(default=None, ge=0, le=INT32_MAX)
    highest_tier_name: str = ""

    @model_validator(mode="after")
    def _one_tier(self) -> NetworkTopologySpec:
        if self.highest_tier_allowed is not None and self.highest_tier_name:
            raise ValueError("highest_tier_allowed and highest_tier_name cannot be set simultaneously")
        return self


class JobSubmittedData(EventData):
    """A VolcanoJob submitted: its tasks exist (Pending) from this event on."""

    namespace: str = Field(min_length=1)
    name: str = Field(min_length=1)
    queue: str = "default"
    priority_class: str | None = None
    min_available: int | None = Field(default=None, ge=0, le=INT32_MAX)
    min_resources: ResourceList | None = None
    tasks: list[TaskSpec] = Field(min_length=1)
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    #: A PodGroup's ``minTaskMember`` (role -> pods), as given; None: each task's
    #: ``min_available`` (else its replicas) by task name, as for a VolcanoJob.  Added later:
    #: left out when None, so a job without it serialises as before the field existed.
    min_task_member: dict[str, Annotated[int, Field(ge=0, le=INT32_MAX)]] | None = Field(
        default=None, exclude_if=lambda v: v is None
    )
    #: Seconds of event time a finished job stays in the live state (Volcano's
    #: ``spec.ttlSecondsAfterFinished``); None: the archive's default
    #: (``projector.fold.DEFAULT_TTL_SECONDS_AFTER_FINISHED``).  Added later: optional,
    #: and left out when None, so a job without its own TTL serialises exactly as before
    #: the field existed (one form, one hash in the archive).  A field-level rule, not a
    #: model serializer: the serialization schema stays typed (no free-form object).
    ttl_seconds_after_finished: int | None = Field(
        default=None, ge=0, le=INT32_MAX, exclude_if=lambda v: v is None
    )
    #: Added later, left out when None (as ``ttl_seconds_after_finished``).
    network_topology: NetworkTopologySpec | None = Field(default=None, exclude_if=lambda v: v is None)

    @property
    def job_id(self) -> str:
        return f"{self.namespace}/{self.name}"


class TasksAddedData(EventData):
    """Tasks joining a job already submitted, as pods that join a PodGroup after Volcano's
    scheduler has its job: each spec is a new role of the job (its name unused by the job),
    its tasks exist (Pending) from this event on.  The job's gang minimum stays as submitted."""

    job_id: str = Field(min_length=1)
    tasks: list[TaskSpec] = Field(min_length=1)


class JobCancelledData(EventData):
    job_id: str = Field(min_length=1)
    reason: str = ""


class JobRejectedData(EventData):
    """An admission verdict: the job will never be scheduled (reason with a stable code)."""

    job_id: str = Field(min_length=1)
    code: str = Field(min_length=1)
    reason: str = ""


# --------------------------------------------------------------------------- nodes and tasks


class Taint(EventData):
    key: str = Field(min_length=1)
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class NodeReportedData(EventData):
    """The full current view of one node (replaces the previous report)."""

    name: str = Field(min_length=1)
    allocatable: ResourceList = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    unschedulable: bool = False
    ready: bool = True


class NodeRemovedData(EventData):
    name: str = Field(min_length=1)


#: ``observed_seq`` of a task observation: the seq of the projected task row the executor
#: acted on (the binding, start or eviction it executes).  A job name is reused once its job
#: finished (projector.fold), and its incarnations share task ids: an observation whose
#: ``observed_seq`` is below the live incarnation's submission is about an earlier one, and
#: changes nothing.  Optional (None: judged against the live incarnation) and left out when
#: None, so an observation without it serialises exactly as before the field existed.
_OBSERVED_SEQ_DESCRIPTION: Final = "the seq of the projected task row the executor acted on"


class HyperNodeExactMember(EventData):
    """A HyperNode member named exactly: a node, or (``type: HyperNode``) a child hyperNode."""

    type: Literal["Node", "HyperNode"]
    exact_match: str = Field(min_length=1)


class HyperNodeRegexMember(EventData):
    """The nodes whose name the pattern matches (searched, not anchored: Go's MatchString)."""

    type: Literal["Node"]
    regex_match: str = Field(min_length=1)

    @field_validator("regex_match")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"regex_match does not compile: {exc}") from exc
        return value


class HyperNodeLabelMember(EventData):
    """The nodes whose labels the selector matches (an empty selector matches none)."""

    type: Literal["Node"]
    label_match: LabelSelector


#: One member of a HyperNode, with exactly one selector (Volcano's MemberSpec).
HyperNodeMemberSpec: TypeAlias = HyperNodeExactMember | HyperNodeRegexMember | HyperNodeLabelMember


class HyperNodeUpsertedData(EventData):
    """A ``topology.volcano.sh/v1alpha1`` HyperNode (a network domain) created or replaced whole."""

    name: str = Field(min_length=1)
    tier: int = Field(ge=0, le=INT32_MAX)
    tier_name: str = ""
    members: list[HyperNodeMemberSpec] = Field(min_length=1)


class HyperNodeDeletedData(EventData):
    name: str = Field(min_length=1)


class TaskStartedData(EventData):
    job_id: str = Field(min_length=1)
    task_id: str = Field(min_length=1)
    node: str = Field(min_length=1)
    observed_seq: int | None = Field(
        default=None, ge=1, le=MAX_SEQ, exclude_if=lambda v: v is None, description=_OBSERVED_SEQ_DESCRIPTION
    )


class TaskFinishedData(EventData):
    job_id: str = Field(min_length=1)
    task_id: str = Field(min_length=1)
    node: str | None = None
    outcome: Literal["succeeded", "failed", "evicted"]
    exit_code: int | None = Field(default=None, ge=-INT32_MAX - 1, le=INT32_MAX)
    reason: str = ""
    observed_seq: int | None = Field(
        default=None, ge=1, le=MAX_SEQ, exclude_if=lambda v: v is None, description=_OBSERVED_SEQ_DESCRIPTION
    )


# --------------------------------------------------------------------------- sessions


class _DecisionData(EventData):
    """Base of the decisions: the ``kind`` member says which one a decision is."""

    model_config = ConfigDict(frozen=True, extra="forbid", json_schema_extra=_requires("kind"))


class EnqueueDecision(_DecisionData):
    kind: Literal["enqueue"] = "enqueue"
    job: str


class BindDecision(_DecisionData):
    kind: Literal["bind"] = "bind"
    task: str
    job: str
    node: str


class PipelineDecision(_DecisionData):
    kind: Literal["pipeline"] = "pipeline"
    task: str
    job: str
    node: str


class EvictDecision(_DecisionData):
    kind: Literal["evict"] = "evict"
    task: str
    job: str
    node: str
    action: Literal["preempt", "reclaim"]
    preemptor_job: str
    preemptor_task: str
    rule: str = ""


Decision: TypeAlias = Annotated[
    EnqueueDecision | BindDecision | PipelineDecision | EvictDecision,
    Field(discriminator="kind"),
]


class PendingReason(EventData):
    code: str
    message: str


class PendingJob(EventData):
    job: str
    reasons: list[PendingReason] = Field(default_factory=list)


class SessionCommittedData(EventData):
    """One scheduling session, applied whole or not at all.

    When ``parts`` > 0 the decisions travel in that many :class:`SessionPart`
    events published before this marker, and ``decisions`` is empty.

    Pending reasons are whole or a change (added later): with ``pending_base``
    empty, ``pending`` (with the parts') is the session's whole pending list;
    otherwise it is the change from the list of session ``pending_base`` (the
    newest session the scheduler's input held): ``pending`` the jobs whose
    reasons are new or different, ``pending_cleared`` the jobs no longer
    pending.  ``pending_digest`` is always the whole list's.

    A change may also restate one slice of the list (added later): with
    ``pending_slices`` > 0, ``pending`` holds every pending job of slice
    ``pending_slice`` (a stable hash of the job id modulo ``pending_slices``,
    scheduler.service.session_events), changed or not.  A reader of one session
    walks back until it has met every slice of the same count (or a whole
    list), newest entry first, instead of back to a whole list.
    """

    session_id: str = Field(min_length=1)
    leader_epoch: int = Field(ge=0, le=MAX_LEADER_EPOCH)
    input_seq: int = Field(ge=0, le=MAX_SEQ)
    config_version: int = Field(ge=0, le=INT32_MAX)
    now: EventTime
    input_digest: str
    logic_flags: list[str] = Field(default_factory=list)
    decisions: list[Decision] = Field(default_factory=list)
    parts: int = Field(default=0, ge=0, le=MAX_SESSION_PARTS)
    pending: list[PendingJob] = Field(default_factory=list)
    pending_digest: str = ""
    pending_base: str = ""
    pending_cleared: list[str] = Field(default_factory=list)
    pending_slice: int = Field(default=0, ge=0, lt=MAX_PENDING_SLICES)
    pending_slices: int = Field(default=0, ge=0, le=MAX_PENDING_SLICES)

    @model_validator(mode="after")
    def _slice_within_count(self) -> SessionCommittedData:
        if self.pending_slices and (not self.pending_base or self.pending_slice >= self.pending_slices):
            raise ValueError(
                f"pending_slice {self.pending_slice} of {self.pending_slices} needs a pending_base"
                " and a slice below the count"
            )
        if not self.pending_slices and self.pending_slice:
            raise ValueError(f"pending_slice {self.pending_slice} without pending_slices")
        return self

    @model_serializer(mode="wrap")
    def _omit_whole_list_fields(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A session with its whole pending list serialises exactly as before the change fields
        # existed: one form (and one hash in the archive) for markers archived earlier and now;
        # a change without a restated slice as before the slice fields existed.
        data: dict[str, Any] = handler(self)
        if not self.pending_base:
            data.pop("pending_base", None)
        if not self.pending_cleared:
            data.pop("pending_cleared", None)
        if not self.pending_slices:
            data.pop("pending_slice", None)
            data.pop("pending_slices", None)
        return data


class SessionPartData(EventData):
    """A slice of a split session.  ``pending`` (optional, added later) carries pending reasons
    when even the commit marker alone would exceed the message limit; the session's pending list
    is the parts' ``pending`` in index order followed by the marker's."""

    session_id: str = Field(min_length=1)
    index: int = Field(ge=0, lt=MAX_SESSION_PARTS)
    decisions: list[Decision] = Field(default_factory=list)
    pending: list[PendingJob] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _omit_empty_pending(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A part without pending reasons serialises exactly as before the field existed, so parts
        # archived earlier and parts written now have one form (and one hash in the archive).
        data: dict[str, Any] = handler(self)
        if not self.pending:
            data.pop("pending", None)
        return data


class LeaderElectedData(EventData):
    """A scheduler took the cluster's leadership: from this event on, sessions count only with
    ``epoch`` and a signature by ``public_key`` (projector.fold, docs/producers.md)."""

    epoch: int = Field(ge=1, le=MAX_LEADER_EPOCH)
    #: The leader's Ed25519 public key: 32 raw bytes, URL-safe base64 without padding.
    public_key: str = Field(pattern=r"^[A-Za-z0-9_-]{43}$")
    #: Who holds the lock (host:pid or the configured holder name), for people reading the log.
    holder: str = Field(min_length=1, max_length=256)


# --------------------------------------------------------------------------- envelopes


class _Envelope(BaseModel):
    """CloudEvents 1.0 structured-mode attributes shared by every event."""

    model_config = ConfigDict(frozen=True, extra="forbid", json_schema_extra=_requires("type"))

    specversion: Literal["1.0"] = "1.0"
    id: str = Field(min_length=1)
    source: str = Field(min_length=1)
    time: EventTime
    subject: str | None = None
    datacontenttype: Literal["application/json"] = "application/json"
    cluster: str = Field(default=DEFAULT_CLUSTER, min_length=1)
    #: The CloudEvents distributed-tracing extension (structured mode): the producer's W3C trace
    #: context.  Delivery metadata, not part of what happened: the canonical bytes leave it out,
    #: and the archive keeps a valid one beside the event (``event_log.traceparent``).
    traceparent: str | None = Field(default=None, max_length=512)
    tracestate: str | None = Field(default=None, max_length=512)
    #: Who produced the event (extension attribute): a keyring name, or ``NAME:SUBJECT`` when
    #: NAME vouches for SUBJECT (the HTTP API for a token's subject).  Part of the canonical
    #: bytes, so the signature and the archive's hash cover it.
    principal: str | None = Field(default=None, min_length=1, max_length=MAX_PRINCIPAL)
    #: The principal's Ed25519 signature of the event's canonical bytes (which leave this
    #: attribute out): 64 bytes, URL-safe base64 without padding.  Kept beside the event
    #: (``event_log.signature``), like the trace context.
    signature: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]{86}$")


class QueueUpserted(_Envelope):
    type: Literal["tephra.queue.upserted.v1"] = "tephra.queue.upserted.v1"
    data: QueueUpsertedData


class QueueDeleted(_Envelope):
    type: Literal["tephra.queue.deleted.v1"] = "tephra.queue.deleted.v1"
    data: QueueDeletedData


class PriorityClassUpserted(_Envelope):
    type: Literal["tephra.priorityclass.upserted.v1"] = "tephra.priorityclass.upserted.v1"
    data: PriorityClassUpsertedData


class SchedulerConfigured(_Envelope):
    type: Literal["tephra.scheduler.configured.v1"] = "tephra.scheduler.configured.v1"
    data: SchedulerConfiguredData


class JobSubmitted(_Envelope):
    type: Literal["tephra.job.submitted.v1"] = "tephra.job.submitted.v1"
    data: JobSubmittedData


class TasksAdded(_Envelope):
    type: Literal["tephra.job.tasks-added.v1"] = "tephra.job.tasks-added.v1"
    data: TasksAddedData


class JobCancelled(_Envelope):
    type: Literal["tephra.job.cancelled.v1"] = "tephra.job.cancelled.v1"
    data: JobCancelledData


class JobRejected(_Envelope):
    type: Literal["tephra.job.rejected.v1"] = "tephra.job.rejected.v1"
    data: JobRejectedData


class NodeReported(_Envelope):
    type: Literal["tephra.node.reported.v1"] = "tephra.node.reported.v1"
    data: NodeReportedData


class NodeRemoved(_Envelope):
    type: Literal["tephra.node.removed.v1"] = "tephra.node.removed.v1"
    data: NodeRemovedData


class HyperNodeUpserted(_Envelope):
    type: Literal["tephra.hypernode.upserted.v1"] = "tephra.hypernode.upserted.v1"
    data: HyperNodeUpsertedData


class HyperNodeDeleted(_Envelope):
    type: Literal["tephra.hypernode.deleted.v1"] = "tephra.hypernode.deleted.v1"
    data: HyperNodeDeletedData


class TaskStarted(_Envelope):
    type: Literal["tephra.task.started.v1"] = "tephra.task.started.v1"
    data: TaskStartedData


class TaskFinished(_Envelope):
    type: Literal["tephra.task.finished.v1"] = "tephra.task.finished.v1"
    data: TaskFinishedData


class SessionCommitted(_Envelope):
    type: Literal["tephra.session.committed.v1"] = "tephra.session.committed.v1"
    data: SessionCommittedData


class SessionPart(_Envelope):
    type: Literal["tephra.session.part.v1"] = "tephra.session.part.v1"
    data: SessionPartData


class LeaderElected(_Envelope):
    type: Literal["tephra.leader.elected.v1"] = "tephra.leader.elected.v1"
    data: LeaderElectedData


_EVENT_CLASSES = (
    QueueUpserted,
    QueueDeleted,
    PriorityClassUpserted,
    SchedulerConfigured,
    JobSubmitted,
    JobCancelled,
    JobRejected,
    NodeReported,
    NodeRemoved,
    TaskStarted,
    TaskFinished,
    SessionCommitted,
    SessionPart,
    LeaderElected,
    HyperNodeUpserted,
    HyperNodeDeleted,
    TasksAdded,
)

Event: TypeAlias = Annotated[
    QueueUpserted
    | QueueDeleted
    | PriorityClassUpserted
    | SchedulerConfigured
    | JobSubmitted
    | JobCancelled
    | JobRejected
    | NodeReported
    | NodeRemoved
    | TaskStarted
    | TaskFinished
    | SessionCommitted
    | SessionPart
    | LeaderElected
    | HyperNodeUpserted
    | HyperNodeDeleted
    | TasksAdded,
    Field(discriminator="type"),
]

#: type string -> envelope class, in catalogue order.
EVENT_TYPES: dict[str, type[_Envelope]] = {cls.model_fields["type"].default: cls for cls in _EVENT_CLASSES}
