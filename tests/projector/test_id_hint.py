"""Event ids read off a record's bytes before it decodes (projector.plan.id_hint), and session
markers (projector.plan.session_marker_hint, which only ends a batch's wait for more records).

The duplicate check asks about these hints first and about any event whose
decoded id differs afterwards, so a hint may be wrong or missing but must
never be taken for another record's id silently: the service test
``test_duplicates_are_recognised_whatever_their_encoding`` checks that side.
"""

from __future__ import annotations

import json

from events.models import SessionCommitted
from events.serde import canonical_json, decode, encode
from projector.plan import id_hint, session_marker_hint
from tests.projector.streams import event_stream


def test_the_hint_of_every_encoded_event_is_its_id() -> None:
    for event in event_stream(21, 2_000):
        assert id_hint(encode(event)) == event.id


def test_canonical_bytes_hint_their_id_too() -> None:
    # Sorted keys put data before the envelope's id; no model of the catalogue has an "id" field.
    for event in event_stream(22, 300):
        assert id_hint(canonical_json(event)) == event.id


def test_non_ascii_ids_are_hinted_and_escaped_ones_are_not() -> None:
    event = event_stream(23, 1)[0]
    plain = json.loads(encode(event))
    plain["id"] = "événement-1"
    raw = json.dumps(plain, ensure_ascii=False, separators=(",", ":")).encode()
    assert id_hint(raw) == decode(raw).id == "événement-1"
    escaped = json.dumps(plain, separators=(",", ":")).encode()  # \u00e9
    assert decode(escaped).id == "événement-1"
    assert id_hint(escaped) is None
    quoted = dict(plain, id='a"b')
    assert id_hint(json.dumps(quoted, separators=(",", ":")).encode()) is None


def test_a_hint_is_a_guess_and_may_be_missing_or_wrong() -> None:
    assert id_hint(None) is None
    assert id_hint(b"") is None
    assert id_hint(b'{"id": "spaced"}') is None  # not the compact form
    assert id_hint(b'{"id":"unterminated') is None
    assert id_hint(b'{"id":"\xff\xfe"}') is None  # not UTF-8
    # An "id" member nested before the envelope's: the hint is the nested one, and
    # the duplicate check asks again about the decoded id.
    assert id_hint(b'{"data":{"labels":{"id":"inner"}},"id":"outer"}') == "inner"


def test_session_markers_are_hinted_and_nothing_else_is() -> None:
    events = event_stream(24, 2_000)
    assert any(isinstance(event, SessionCommitted) for event in events)
    for event in events:
        assert session_marker_hint(encode(event)) == isinstance(event, SessionCommitted)
    assert not session_marker_hint(None)
