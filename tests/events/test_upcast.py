"""Upcasting old payloads on read, with a hand-written v0 JobSubmitted."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from events.models import EVENT_TYPES, JobSubmitted, JobSubmittedData, TaskSpec
from events.serde import EventDecodeError, decode
from events.upcast import DEFAULT_UPCASTERS, UpcasterRegistry, UpcastError, split_type
from tests.events.samples import CLUSTER

# What a producer wrote before v1: the job id in one field, "requests" instead
# of "resources", and the gang minimum called "min_member" (as in Volcano's PodGroup).
V0_JOB_SUBMITTED: dict[str, Any] = {
    "specversion": "1.0",
    "id": "evt-old-1",
    "source": "tephra://sdk/legacy",
    "type": "tephra.job.submitted.v0",
    "time": "2026-01-05T08:00:00Z",
    "cluster": CLUSTER,
    "data": {
        "job": "research/old-sweep",
        "queue": "research",
        "min_member": 2,
        "tasks": [{"name": "worker", "replicas": 2, "requests": {"cpu": "500m", "memory": "1Gi"}}],
    },
}


def job_submitted_v0_to_v1(event: dict[str, Any]) -> dict[str, Any]:
    data = event["data"]
    namespace, name = data["job"].split("/", 1)
    tasks = [
        {key: value for key, value in task.items() if key != "requests"} | {"resources": task["requests"]}
        for task in data["tasks"]
    ]
    v1_data = {"namespace": namespace, "name": name, "queue": data["queue"], "tasks": tasks}
    if "min_member" in data:
        v1_data["min_available"] = data["min_member"]
    return {**event, "data": v1_data}


LEGACY = UpcasterRegistry({("tephra.job.submitted", 0): job_submitted_v0_to_v1})


def _raw(obj: object) -> bytes:
    return json.dumps(obj).encode()


def test_old_payload_decodes_to_the_current_model() -> None:
    event = decode(_raw(V0_JOB_SUBMITTED), upcasters=LEGACY)

    assert event == JobSubmitted(
        id="evt-old-1",
        source="tephra://sdk/legacy",
        time=datetime(2026, 1, 5, 8, 0, tzinfo=UTC),
        cluster=CLUSTER,
        data=JobSubmittedData(
            namespace="research",
            name="old-sweep",
            queue="research",
            min_available=2,
            tasks=[TaskSpec(name="worker", replicas=2, resources={"cpu": "500m", "memory": "1Gi"})],
        ),
    )
    assert event.type == "tephra.job.submitted.v1"


def test_the_same_bytes_without_the_step_are_unsupported() -> None:
    with pytest.raises(EventDecodeError) as caught:
        decode(_raw(V0_JOB_SUBMITTED))

    assert caught.value.code == "unsupported-version"
    assert caught.value.event_type == "tephra.job.submitted.v0"
    assert "no upcaster from tephra.job.submitted.v0 to v1" in str(caught.value)


def test_a_step_does_not_touch_its_input() -> None:
    before = copy.deepcopy(V0_JOB_SUBMITTED)

    decode(_raw(V0_JOB_SUBMITTED), upcasters=LEGACY)
    job_submitted_v0_to_v1(V0_JOB_SUBMITTED)

    assert before == V0_JOB_SUBMITTED


def test_an_old_payload_the_step_cannot_read_is_an_invalid_field() -> None:
    broken = {**V0_JOB_SUBMITTED, "data": {"queue": "research", "tasks": []}}

    with pytest.raises(EventDecodeError) as caught:
        decode(_raw(broken), upcasters=LEGACY)

    assert caught.value.code == "invalid-field"
    assert "cannot upcast tephra.job.submitted.v0 to v1: KeyError('job')" in str(caught.value)


def test_an_upcast_payload_is_validated_with_field_paths() -> None:
    bad_quantity = copy.deepcopy(V0_JOB_SUBMITTED)
    bad_quantity["data"]["tasks"][0]["requests"]["memory"] = "lots"

    with pytest.raises(EventDecodeError) as caught:
        decode(_raw(bad_quantity), upcasters=LEGACY)

    assert (caught.value.code, caught.value.field) == ("invalid-field", "data.tasks.0.resources.memory")


def test_steps_chain_in_version_order_and_the_registry_sets_each_type() -> None:
    seen: list[str] = []

    def step(name: str) -> Any:
        def upgrade(event: dict[str, Any]) -> dict[str, Any]:
            seen.append(f"{name}:{event['type']}")
            return {**event, "trail": [*event.get("trail", []), name]}

        return upgrade

    registry = UpcasterRegistry(
        {("tephra.widget.made", 2): step("2->3"), ("tephra.widget.made", 0): step("0->1")}
    ).with_step("tephra.widget.made", 1, step("1->2"))

    out = registry.upcast(
        {"type": "tephra.widget.made.v0"}, base="tephra.widget.made", from_version=0, to_version=3
    )

    assert out == {"type": "tephra.widget.made.v3", "trail": ["0->1", "1->2", "2->3"]}
    assert seen == ["0->1:tephra.widget.made.v0", "1->2:tephra.widget.made.v1", "2->3:tephra.widget.made.v2"]
    assert list(registry) == [("tephra.widget.made", 0), ("tephra.widget.made", 1), ("tephra.widget.made", 2)]


def test_a_gap_in_the_chain_is_a_missing_step() -> None:
    registry = UpcasterRegistry({("tephra.widget.made", 0): dict, ("tephra.widget.made", 2): dict})

    with pytest.raises(UpcastError, match=r"no upcaster from tephra\.widget\.made\.v1 to v2") as caught:
        registry.upcast({}, base="tephra.widget.made", from_version=0, to_version=3)

    assert caught.value.missing_step is True


def test_a_step_returning_a_non_dict_is_a_bug_not_a_decode_error() -> None:
    registry = UpcasterRegistry({("tephra.job.submitted", 0): lambda _event: None})  # type: ignore[arg-type,return-value]

    with pytest.raises(TypeError, match="returned NoneType, not dict"):
        decode(_raw(V0_JOB_SUBMITTED), upcasters=registry)


def test_with_step_leaves_the_original_registry_alone() -> None:
    extended = DEFAULT_UPCASTERS.with_step("tephra.job.submitted", 0, job_submitted_v0_to_v1)

    assert ("tephra.job.submitted", 0) in extended
    assert ("tephra.job.submitted", 0) not in DEFAULT_UPCASTERS


@pytest.mark.parametrize(
    ("base", "version"),
    [("tephra.job.submitted.v1", 0), ("", 0), (" tephra.job.submitted", 0), ("tephra.job.submitted", -1)],
)
def test_registry_rejects_malformed_keys(base: str, version: int) -> None:
    with pytest.raises(ValueError, match="upcaster"):
        UpcasterRegistry({(base, version): dict})


def test_default_steps_only_lead_to_catalogue_versions() -> None:
    newest: dict[str, int] = {}
    for event_type in EVENT_TYPES:
        split = split_type(event_type)
        assert split is not None, event_type
        newest[split[0]] = max(split[1], newest.get(split[0], 0))

    for base, from_version in DEFAULT_UPCASTERS:
        assert base in newest
        assert from_version < newest[base]


@pytest.mark.parametrize(
    ("event_type", "expected"),
    [
        ("tephra.job.submitted.v1", ("tephra.job.submitted", 1)),
        ("tephra.vm.made.v12", ("tephra.vm.made", 12)),
        ("tephra.job.submitted", None),
        ("tephra.job.submitted.v01", None),
        ("tephra.job.submitted.v", None),
        ("tephra.job.submitted.v١", None),  # a non-ASCII digit must not count as a version
    ],
)
def test_split_type(event_type: str, expected: tuple[str, int] | None) -> None:
    assert split_type(event_type) == expected
