"""The published JSON Schemas and decoding agree on which members a record must have, and on its shape.

Both directions, with a JSON Schema validator reading the committed files:
every record the runtime decodes is schema-valid, and the records it refuses
for their shape (a required member missing, ``type`` included; an unknown
member; another type's constant) are schema-invalid.  A member is required by
the schema exactly when decoding fails without it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from events.models import EVENT_TYPES, Event
from events.schemas import PACKAGED_SCHEMAS
from events.serde import EventDecodeError, decode, encode
from tests.events.samples import sample_events
from tests.projector.streams import event_stream


def _validator(event_type: str) -> Draft202012Validator:
    """A validator of the committed schema (formats not asserted: the runtime parses them)."""
    schema = json.loads((PACKAGED_SCHEMAS / f"{event_type}.json").read_text(encoding="utf-8"))
    return Draft202012Validator(schema)


def _accepted(raw: dict[str, Any]) -> bool:
    try:
        decode(json.dumps(raw).encode())
    except EventDecodeError:
        return False
    return True


def _events() -> list[Event]:
    """Every sample, and a stream with every type the streams produce."""
    return [*sample_events(), *event_stream(5, 400)]


def test_every_event_the_runtime_encodes_is_valid_against_its_schema() -> None:
    seen = set()
    for event in _events():
        record = json.loads(encode(event))
        errors = [e.message for e in _validator(event.type).iter_errors(record)]
        assert errors == [], (event.type, errors)
        seen.add(event.type)
    assert seen == set(EVENT_TYPES)


Path = tuple[str | int, ...]


def _objects(value: Any, path: Path = ()) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every JSON object inside ``value`` with its path (the record itself first)."""
    if isinstance(value, dict):
        yield path, value
        for key, inner in value.items():
            yield from _objects(inner, (*path, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _objects(inner, (*path, index))


def _at(record: dict[str, Any], path: Path) -> Any:
    for step in path:
        record = record[step]  # type: ignore[index]
    return record


@pytest.mark.parametrize("event", sample_events(), ids=lambda e: e.type)
def test_a_member_is_required_by_the_schema_exactly_when_decoding_needs_it(event: Event) -> None:
    record = json.loads(encode(event))
    validator = _validator(event.type)
    for path, obj in list(_objects(record)):
        for key in list(obj):
            without = copy.deepcopy(record)
            del _at(without, path)[key]
            runtime = _accepted(without)
            schema = validator.is_valid(without)
            # (Maps such as labels and resources have no required keys in either.)
            assert runtime == schema, (path, key, runtime, schema)


@pytest.mark.parametrize("event", sample_events(), ids=lambda e: e.type)
def test_records_refused_for_their_shape_are_schema_invalid(event: Event) -> None:
    record = json.loads(encode(event))
    validator = _validator(event.type)

    untyped = {k: v for k, v in record.items() if k != "type"}
    with pytest.raises(EventDecodeError) as refused:
        decode(json.dumps(untyped).encode())
    assert refused.value.code == "missing-type"
    assert not validator.is_valid(untyped)

    extra = {**record, "unexpected": 1}
    assert not _accepted(extra)
    assert not validator.is_valid(extra)

    # Under another type's name: decoded as that type exactly when that type's schema allows it
    # (a QueueDeleted's body is a valid QueueUpserted, whose other members have defaults).
    for other in EVENT_TYPES:
        if other != event.type:
            retyped = {**record, "type": other}
            assert not validator.is_valid(retyped)
            assert _accepted(retyped) == _validator(other).is_valid(retyped), other
