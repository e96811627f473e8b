"""encode / decode / canonical_json: round trips, the wire form and every documented error."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.models import EVENT_TYPES, Event, JobSubmitted, NodeReported
from events.serde import DecodeErrorCode, EventDecodeError, _decode_carefully, canonical_json, decode, encode
from events.upcast import DEFAULT_UPCASTERS
from tests.events.samples import job_submitted, node_reported, sample_events

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sample_events()


def _ids(event: Event) -> str:
    return event.type


def _wire(event: Event) -> dict[str, Any]:
    """The event's JSON object, for tests that break it on purpose."""
    obj: dict[str, Any] = json.loads(encode(event))
    return obj


def _raw(obj: object) -> bytes:
    return json.dumps(obj).encode()


def _decode_error(raw: bytes) -> EventDecodeError:
    with pytest.raises(EventDecodeError) as caught:
        decode(raw)
    return caught.value


# --------------------------------------------------------------------------- round trips


def test_samples_cover_the_catalogue() -> None:
    assert [event.type for event in SAMPLES] == list(EVENT_TYPES)


@pytest.mark.parametrize("event", SAMPLES, ids=_ids)
def test_decode_inverts_encode(event: Event) -> None:
    decoded = decode(encode(event))

    assert decoded == event
    assert type(decoded) is type(event)


@pytest.mark.parametrize("event", SAMPLES, ids=_ids)
def test_encode_is_compact_structured_cloudevent(event: Event) -> None:
    raw = encode(event)
    obj = json.loads(raw)

    assert raw == json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    assert obj["specversion"] == "1.0"
    assert obj["datacontenttype"] == "application/json"
    assert obj["type"] == event.type
    assert obj["cluster"] == event.cluster
    required = {"specversion", "id", "source", "type", "time", "datacontenttype", "cluster", "data"}
    optional = {name for name in ("subject", "principal", "signature") if getattr(event, name) is not None}
    assert set(obj) == required | optional


def test_an_absent_subject_is_left_out_not_null() -> None:
    event = job_submitted().model_copy(update={"subject": None})

    assert b'"subject"' not in encode(event)
    assert b'"subject"' not in canonical_json(event)
    assert decode(encode(event)) == event
    assert decode(encode(event)).subject is None


def test_encode_writes_utf8_not_escapes() -> None:
    event = node_reported()
    event = event.model_copy(
        update={"data": event.data.model_copy(update={"labels": {"site": "Zürich 東京"}})}
    )

    raw = encode(event)

    assert "Zürich 東京".encode() in raw
    assert decode(raw) == event


def test_resources_travel_as_canonical_quantity_strings() -> None:
    obj = _wire(job_submitted())

    assert obj["data"]["tasks"][1]["resources"] == {
        "cpu": "8",
        "memory": "68719476736",
        "nvidia.com/gpu": "8",
    }
    assert obj["data"]["min_resources"]["memory"] == str(260 * 2**30)


def test_decode_accepts_kubernetes_quantities_from_producers() -> None:
    obj = _wire(node_reported())
    obj["data"]["allocatable"] = {"cpu": "95.5", "memory": "1056Gi", "nvidia.com/gpu": 8, "pods": "110"}

    assert decode(_raw(obj)) == node_reported()


@pytest.mark.parametrize("event", SAMPLES, ids=_ids)
def test_canonical_json_is_sorted_compact_wire_form(event: Event) -> None:
    canonical = canonical_json(event)
    obj = json.loads(canonical)

    assert canonical == json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    # The signature signs the canonical bytes: it is never one of them.
    assert obj == {k: v for k, v in json.loads(encode(event)).items() if k != "signature"}
    assert decode(canonical) == event.model_copy(update={"signature": None})
    assert canonical_json(decode(encode(event))) == canonical


def test_canonical_json_ignores_construction_order() -> None:
    event = node_reported()
    labels = event.data.labels
    reordered = event.model_copy(
        update={"data": event.data.model_copy(update={"labels": dict(reversed(list(labels.items())))})}
    )

    assert list(reordered.data.labels) != list(labels)
    assert canonical_json(reordered) == canonical_json(event)


_DIGEST_SCRIPT = """
import hashlib
from events.serde import canonical_json
from tests.events.samples import sample_events
for event in sample_events():
    print(hashlib.sha256(canonical_json(event)).hexdigest())
"""


@pytest.mark.parametrize("seed", ["0", "4242"])
def test_canonical_json_is_identical_across_processes(seed: str) -> None:
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(  # noqa: S603 - our own interpreter running a fixed script
        [sys.executable, "-c", _DIGEST_SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )

    here = [hashlib.sha256(canonical_json(event)).hexdigest() for event in SAMPLES]
    assert result.stdout.split() == here


# --------------------------------------------------------------------------- malformed input


def _with(obj: dict[str, Any], path: str, value: object) -> dict[str, Any]:
    """Set a dotted path (``data.tasks.0.replicas``) inside a JSON object."""
    *parents, last = path.split(".")
    node: Any = obj
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return obj


def _without(obj: dict[str, Any], key: str) -> dict[str, Any]:
    del obj[key]
    return obj


def _nan_in_arguments(number: bytes) -> bytes:
    config = next(e for e in SAMPLES if e.type == "tephra.scheduler.configured.v1")
    raw = encode(config)
    assert b'"arguments":{}' in raw
    return raw.replace(b'"arguments":{}', b'"arguments":{"factor":' + number + b"}", 1)


def _job() -> dict[str, Any]:
    return _wire(job_submitted())


MALFORMED = [
    pytest.param(b"\xff\xfe{}", "invalid-utf8", None, id="invalid-utf8"),
    pytest.param(b'{"type": "tephra.job.submitted.v1"', "not-json", None, id="truncated-json"),
    pytest.param(b"", "not-json", None, id="empty"),
    pytest.param(b'{"type": "tephra.job.submitted.v1", "data": NaN}', "not-json", None, id="nan-is-not-json"),
    pytest.param(b'"\\ud800"', "not-json", None, id="lone-surrogate"),
    # Free-form plugin arguments take any JSON value: the one-pass parser alone would accept these.
    pytest.param(_nan_in_arguments(b"NaN"), "not-json", None, id="nan-in-arguments"),
    pytest.param(_nan_in_arguments(b"-Infinity"), "not-json", None, id="infinity-in-arguments"),
    pytest.param(b"[]", "not-an-object", None, id="json-array"),
    pytest.param(b'"tephra.job.submitted.v1"', "not-an-object", None, id="json-string"),
    pytest.param(_raw(_without(_job(), "type")), "missing-type", None, id="missing-type"),
    pytest.param(_raw(_with(_job(), "type", None)), "missing-type", None, id="null-type"),
    pytest.param(_raw(_with(_job(), "type", 7)), "invalid-field", "type", id="type-not-a-string"),
    pytest.param(
        _raw(_with(_job(), "type", "tephra.job.exploded.v1")), "unknown-type", None, id="unknown-type"
    ),
    pytest.param(_raw(_with(_job(), "type", "job.submitted")), "unknown-type", None, id="unversioned-type"),
    pytest.param(
        _raw(_with(_job(), "type", "tephra.job.submitted.v2")),
        "unsupported-version",
        None,
        id="newer-version",
    ),
    pytest.param(
        _raw(_with(_job(), "type", "tephra.job.submitted.v0")), "unsupported-version", None, id="no-upcaster"
    ),
    pytest.param(
        _raw(_with(_job(), "partitionkey", "k")), "invalid-field", "partitionkey", id="extra-envelope"
    ),
    pytest.param(
        _raw(_with(_job(), "data.tasks.0.gpus", 8)), "invalid-field", "data.tasks.0.gpus", id="extra-data"
    ),
    pytest.param(
        _raw(_with(_job(), "data.tasks.0.replicas", "four")),
        "invalid-field",
        "data.tasks.0.replicas",
        id="wrong-type",
    ),
    pytest.param(_raw(_with(_job(), "data.tasks", {})), "invalid-field", "data.tasks", id="object-for-list"),
    pytest.param(
        _raw(_with(_job(), "data.tasks.1.resources.cpu", "abc")),
        "invalid-field",
        "data.tasks.1.resources.cpu",
        id="bad-quantity",
    ),
    pytest.param(
        _raw(_with(_job(), "data.tasks.1.resources.memory", "-1Gi")),
        "invalid-field",
        "data.tasks.1.resources.memory",
        id="negative-quantity",
    ),
    pytest.param(_raw(_without(_wire(job_submitted()), "id")), "invalid-field", "id", id="missing-id"),
    pytest.param(
        _raw(_with(_job(), "time", "2026-03-14T09:27:03")), "invalid-field", "time", id="naive-time"
    ),
    pytest.param(_raw(_with(_job(), "specversion", "0.3")), "invalid-field", "specversion", id="specversion"),
    pytest.param(_raw(_with(_job(), "data", None)), "invalid-field", "data", id="null-data"),
]


@pytest.mark.parametrize(("raw", "code", "field"), MALFORMED)
def test_malformed_input_gets_its_documented_code(raw: bytes, code: str, field: str | None) -> None:
    error = _decode_error(raw)

    assert (error.code, error.field) == (code, field)
    assert str(error).startswith("invalid event: ")
    assert error.detail in str(error)


def test_every_documented_code_is_exercised() -> None:
    assert {case.values[1] for case in MALFORMED} == set(get_args(DecodeErrorCode))


def test_bad_quantity_message_names_field_resource_and_value() -> None:
    error = _decode_error(_raw(_with(_job(), "data.tasks.0.resources.cpu", "abc")))

    assert str(error) == (
        "invalid event: field data.tasks.0.resources.cpu: invalid quantity for 'cpu': 'abc' "
        "(expected a number with an optional suffix such as m, k, Mi, Gi)"
    )


def test_wrong_type_message_says_why_and_shows_the_value() -> None:
    error = _decode_error(_raw(_with(_job(), "data.tasks.0.replicas", "four")))

    assert str(error) == (
        "invalid event: field data.tasks.0.replicas: input should be a valid integer, "
        "unable to parse string as an integer (got 'four')"
    )


def test_extra_field_message() -> None:
    error = _decode_error(_raw(_with(_job(), "data.tasks.0.gpus", 8)))

    assert str(error) == "invalid event: field data.tasks.0.gpus: extra inputs are not permitted"


def test_scheduling_gates_round_trip_and_each_gate_is_named_once() -> None:
    gated = decode(_raw(_with(_job(), "data.tasks.0.scheduling_gates", ["example.com/quota", "b"])))
    assert isinstance(gated, JobSubmitted)
    assert gated.data.tasks[0].scheduling_gates == ["example.com/quota", "b"]
    assert decode(encode(gated)) == gated

    error = _decode_error(_raw(_with(_job(), "data.tasks.0.scheduling_gates", ["a", "a"])))
    assert (error.code, error.field) == ("invalid-field", "data.tasks.0.scheduling_gates")
    assert "each gate once" in error.detail


def test_several_problems_report_the_first_and_count_the_rest() -> None:
    obj = _with(_with(_job(), "data.tasks.0.replicas", "four"), "data.tasks.1.gpus", 1)

    error = _decode_error(_raw(obj))

    assert error.field == "data.tasks.0.replicas"
    assert error.detail.endswith("(and 1 more error)")


def test_unknown_and_unsupported_types_are_named() -> None:
    unknown = _decode_error(_raw(_with(_job(), "type", "tephra.job.exploded.v1")))
    newer = _decode_error(_raw(_with(_job(), "type", "tephra.job.submitted.v2")))

    assert "'tephra.job.exploded.v1'" in str(unknown)
    assert str(newer) == (
        "invalid event: 'tephra.job.submitted.v2' is newer than this reader (newest known: v1)"
    )


def test_error_carries_type_and_id_once_known() -> None:
    error = _decode_error(_raw(_with(_job(), "data.queue", 3)))

    assert (error.event_type, error.event_id) == ("tephra.job.submitted.v1", "evt-job-llm-pretrain-7b")
    assert (_decode_error(b"[]").event_type, _decode_error(b"[]").event_id) == (None, None)


def test_decode_error_is_a_non_retriable_value_error_that_pickles() -> None:
    error = _decode_error(_raw(_with(_job(), "data.tasks.0.resources.cpu", "abc")))

    assert isinstance(error, ValueError)
    assert error.retriable is False
    copy = pickle.loads(pickle.dumps(error))  # noqa: S301 - our own bytes
    assert (copy.code, copy.field, copy.detail, str(copy)) == (
        error.code,
        error.field,
        error.detail,
        str(error),
    )


@pytest.mark.parametrize("model", [JobSubmitted, NodeReported])
def test_decoded_events_are_frozen(model: type[JobSubmitted | NodeReported]) -> None:
    event = next(e for e in SAMPLES if isinstance(e, model))
    decoded = decode(encode(event))

    with pytest.raises(ValueError, match="frozen"):
        decoded.cluster = "elsewhere"  # type: ignore[misc]


# --------------------------------------------------------------------------- the one-pass path

_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


def _paths(node: object, prefix: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out += _paths(value, (*prefix, index))
    return out


def _outcome(decoder: Callable[[bytes], Event], raw: bytes) -> tuple[str, object]:
    try:
        event = decoder(raw)
    except EventDecodeError as exc:
        return "error", (exc.code, exc.field, exc.detail)
    return "event", (event, canonical_json(event))


@settings(max_examples=400)
@given(sample=st.sampled_from(SAMPLES), pick=st.integers(0, 10_000), value=_JSON_VALUES, drop=st.booleans())
def test_the_one_pass_decoder_agrees_with_the_careful_one(
    sample: Event, pick: int, value: object, drop: bool
) -> None:
    # Any value at any place (or the place removed): same event, or the same error.
    obj = _wire(sample)
    paths = _paths(obj)[1:]
    *parents, last = paths[pick % len(paths)]
    node: Any = obj
    for part in parents:
        node = node[part]
    if drop and isinstance(node, dict):
        del node[last]
    else:
        node[last] = value
    raw = json.dumps(obj, ensure_ascii=False).encode("utf-8", "surrogatepass")

    assert _outcome(decode, raw) == _outcome(lambda r: _decode_carefully(r, DEFAULT_UPCASTERS), raw)
