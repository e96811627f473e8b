"""Property-based round trips: any valid JobSubmitted / NodeReported survives the wire."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from events.models import (
    JobSubmitted,
    JobSubmittedData,
    NodeReported,
    NodeReportedData,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Taint,
    TaskSpec,
    Toleration,
)
from events.quantity import MAX_QUANTITY, format_resources
from events.serde import canonical_json, decode, encode

# No deadline: a loaded CI machine must not turn speed into a failure.
ROUND_TRIPS = settings(deadline=None, max_examples=150)

RESOURCE_NAMES = ["cpu", "memory", "pods", "ephemeral-storage", "nvidia.com/gpu", "example.com/fpga"]
EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute"]

dns_names = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,18}[a-z0-9])?", fullmatch=True)
# Any Unicode a JSON string can carry (lone surrogates cannot be UTF-8).
texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=16)
label_maps = st.dictionaries(texts, texts, max_size=4)
resource_units = st.dictionaries(
    st.sampled_from(RESOURCE_NAMES), st.integers(0, MAX_QUANTITY - 1), max_size=len(RESOURCE_NAMES)
)
times = st.datetimes(
    min_value=datetime(2000, 1, 1),  # noqa: DTZ001 - bounds; the timezone comes from `timezones`
    max_value=datetime(2100, 1, 1),  # noqa: DTZ001
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))]),
)
envelopes = st.fixed_dictionaries(
    {
        "id": texts.filter(bool),
        "source": texts.filter(bool),
        "time": times,
        "subject": st.none() | texts,
        "cluster": dns_names,
    }
)

tolerations = st.builds(
    Toleration,
    key=st.none() | texts,
    operator=st.sampled_from(["Exists", "Equal"]),
    value=st.none() | texts,
    effect=st.none() | st.sampled_from(EFFECTS),
)
terms = st.builds(
    NodeSelectorTerm,
    match_expressions=st.lists(
        st.builds(
            NodeSelectorRequirement,
            key=texts,
            operator=st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]),
            values=st.lists(texts, max_size=3),
        ),
        max_size=3,
    ),
)
tasks = st.builds(
    TaskSpec,
    name=dns_names,
    replicas=st.integers(0, 10_000),
    min_available=st.none() | st.integers(0, 10_000),
    resources=resource_units.map(format_resources),
    node_selector=label_maps,
    tolerations=st.lists(tolerations, max_size=3),
    required_node_affinity=st.lists(terms, max_size=2),
    preemptable=st.booleans(),
    priority_class=st.none() | dns_names,
    preemption_policy=st.none() | st.sampled_from(["PreemptLowerPriority", "Never"]),
)
jobs = st.builds(
    lambda envelope, data: JobSubmitted(**envelope, data=data),
    envelopes,
    st.builds(
        JobSubmittedData,
        namespace=dns_names,
        name=dns_names,
        queue=dns_names,
        priority_class=st.none() | dns_names,
        min_available=st.none() | st.integers(0, 10_000),
        min_resources=st.none() | resource_units.map(format_resources),
        tasks=st.lists(tasks, min_size=1, max_size=4),
        labels=label_maps,
        annotations=label_maps,
    ),
)
nodes = st.builds(
    lambda envelope, data: NodeReported(**envelope, data=data),
    envelopes,
    st.builds(
        NodeReportedData,
        name=dns_names,
        allocatable=resource_units.map(format_resources),
        labels=label_maps,
        taints=st.lists(
            st.builds(Taint, key=texts.filter(bool), value=texts, effect=st.sampled_from(EFFECTS))
        ),
        unschedulable=st.booleans(),
        ready=st.booleans(),
    ),
)


@ROUND_TRIPS
@given(jobs)
def test_job_submitted_round_trips(event: JobSubmitted) -> None:
    assert decode(encode(event)) == event
    assert decode(canonical_json(event)) == event
    assert canonical_json(decode(encode(event))) == canonical_json(event)


@ROUND_TRIPS
@given(nodes)
def test_node_reported_round_trips(event: NodeReported) -> None:
    assert decode(encode(event)) == event
    assert canonical_json(decode(encode(event))) == canonical_json(event)


@ROUND_TRIPS
@given(resource_units)
def test_resource_units_survive_the_wire(units: dict[str, int]) -> None:
    node = NodeReported(
        id="e",
        source="s",
        time=datetime(2026, 1, 1, tzinfo=UTC),
        data=NodeReportedData(name="n", allocatable=format_resources(units)),
    )

    assert node.data.allocatable == units
    assert decode(encode(node)) == node
