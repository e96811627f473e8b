"""The bounds every event keeps (docs/projector.md, "Bounds"): the edge passes, one past it is refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from events.models import INT32_MAX, MAX_LEADER_EPOCH, MAX_SEQ
from events.serde import EventDecodeError, decode, encode
from tests.events.hostile import set_member
from tests.events.samples import sample_events

_SAMPLES = {event.type: event for event in sample_events()}


def _document(event_type: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(encode(_SAMPLES[event_type]))
    return document


JOB = "tephra.job.submitted.v1"
NODE = "tephra.node.reported.v1"
SESSION = "tephra.session.committed.v1"
FINISHED = "tephra.task.finished.v1"

# (type, field path, the last value accepted, the first refused)
EDGES = [
    (JOB, "time", "1970-01-01T00:00:00Z", "1969-12-31T23:59:59.999999Z"),
    (JOB, "time", "1970-01-01T14:00:00+14:00", "0001-01-01T00:00:00+14:00"),
    (JOB, "time", "9899-12-31T23:59:59.999999Z", "9900-01-01T00:00:00Z"),
    (JOB, "time", "9899-12-31T09:59:59-14:00", "9999-12-31T23:59:59-14:00"),
    (SESSION, "data.now", "9899-12-31T23:59:59Z", "9900-01-01T00:00:00Z"),
    (SESSION, "data.leader_epoch", MAX_LEADER_EPOCH, MAX_LEADER_EPOCH + 1),
    (SESSION, "data.leader_epoch", MAX_LEADER_EPOCH, 2**63 - 1),
    (SESSION, "data.leader_epoch", MAX_LEADER_EPOCH, 2**63),
    (SESSION, "data.input_seq", MAX_SEQ, MAX_SEQ + 1),
    (SESSION, "data.config_version", INT32_MAX, INT32_MAX + 1),
    (SESSION, "data.parts", 100_000, 100_001),
    (NODE, "data.allocatable.cpu", "1125899906842623m", "1125899906842624m"),
    (NODE, "data.allocatable.cpu", "1T", "100E"),
    (NODE, "data.allocatable.memory", "1023Ti", "1Pi"),
    (JOB, "data.tasks.0.resources.memory", "1e15", "1e30"),
    (JOB, "data.tasks.0.replicas", INT32_MAX, INT32_MAX + 1),
    (JOB, "data.ttl_seconds_after_finished", INT32_MAX, 2**40),
    (FINISHED, "data.exit_code", -(2**31), -(2**31) - 1),
]


@pytest.mark.parametrize(("event_type", "path", "accepted", "refused"), EDGES)
def test_the_edge_passes_and_one_past_it_is_refused_naming_the_field(
    event_type: str, path: str, accepted: object, refused: object
) -> None:
    document = _document(event_type)
    set_member(path, accepted)(document)
    decode(json.dumps(document).encode())

    set_member(path, refused)(document)
    with pytest.raises(EventDecodeError) as caught:
        decode(json.dumps(document).encode())
    assert caught.value.code == "invalid-field"
    assert caught.value.field is not None
    assert caught.value.field.startswith(path.rsplit(".", 1)[0] if "resources" in path else path)
