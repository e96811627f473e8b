"""The archive's canonical form is byte for byte events.serde.canonical_json, whichever encoder builds it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from events.models import ActionConfiguration, Event, SchedulerConfigured
from events.serde import canonical_json, decode, encode
from projector.archive import _ORJSON_EXACT, archived_form, canonical_data, canonical_envelope, format_time
from tests.events.samples import sample_events, scheduler_configured
from tests.projector.streams import event_stream


def _with_arguments(arguments: dict[str, Any]) -> SchedulerConfigured:
    event = scheduler_configured()
    config = event.data.config.model_copy(
        update={"configurations": [ActionConfiguration(name="enqueue", arguments=arguments)]}
    )
    return event.model_copy(update={"data": event.data.model_copy(update={"config": config})})


def _archived_canonical(event: Event) -> bytes:
    archived, data = archived_form(event)
    return canonical_envelope(
        cluster=archived.cluster,
        data=data,
        event_id=archived.id,
        source=archived.source,
        subject=archived.subject,
        time=format_time(archived.time),
        event_type=archived.type,
    )


_AWKWARD = [
    # Floats whose text differs between orjson and json; integers beyond 64 bits; escapes.
    _with_arguments({"tiny": 1e-7, "huge": 1e16, "neg": -2.5e-5, "x": 0.1}),
    _with_arguments({"big": 2**70, "small": -(2**64), "text": 'é\u2028\x00"\\\n\x7f🎉'}),
]


@pytest.mark.parametrize("event", [*sample_events(), *_AWKWARD], ids=lambda e: e.type)
def test_the_archived_form_hashes_the_canonical_json(event: Event) -> None:
    assert _archived_canonical(event) == canonical_json(event)
    assert _archived_canonical(decode(encode(event))) == canonical_json(event)


def test_a_stream_archives_canonical_json() -> None:
    for event in event_stream(11, 2_000):
        assert _archived_canonical(event) == canonical_json(event)


def test_types_that_may_carry_floats_keep_the_json_module() -> None:
    # Free-form plugin arguments may hold floats; every other type is integers and strings.
    assert "tephra.scheduler.configured.v1" not in _ORJSON_EXACT
    assert "tephra.job.submitted.v1" in _ORJSON_EXACT


_NO_FLOATS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(st.characters(exclude_categories=())),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(st.characters(exclude_categories=()), max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(_NO_FLOATS)
def test_orjson_and_json_agree_on_everything_but_floats(value: object) -> None:
    # Lone surrogates and integers beyond 64 bits included: orjson refuses those and json decides.
    expected = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert canonical_data("tephra.job.submitted.v1", value) == expected
