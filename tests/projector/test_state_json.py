"""A state's JSON form (projector.state_json): the text it writes, and the state it reads back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import orjson
from hypothesis import given
from hypothesis import strategies as st
from pydantic_core import TzInfo

from events.serde import decode, encode
from projector.fold import apply
from projector.state import ClusterState
from projector.state_json import (
    CHUNK_BYTES,
    SECTIONS,
    isoformat,
    state_from_jsonable,
    state_from_stored,
    state_to_jsonable,
    state_to_stored,
)
from tests.projector.streams import event_stream


@given(
    st.datetimes(
        timezones=st.sampled_from([UTC, TzInfo(0), timezone(timedelta(0)), timezone(timedelta(hours=-3))])
        | st.builds(TzInfo, st.integers(min_value=-86_399, max_value=86_399))
    )
)
def test_isoformat_writes_what_isoformat_writes(value: datetime) -> None:
    # State documents (session and job times) are written with it, in any zone.
    assert isoformat(value) == value.isoformat()


def test_a_folded_state_reads_back_equal_and_writes_the_same_document() -> None:
    state = ClusterState()
    for seq, event in enumerate(event_stream(9, 3_000), start=1):
        apply(state, seq, decode(encode(event)))
    assert state.session_parts or state.sessions
    document = state_to_jsonable(state)
    stored = state_to_stored(state)
    restored = state_from_stored(stored.head, stored.chunks)
    assert restored == state
    assert state_from_jsonable(document) == state
    # A read-back state lists its tasks in creation order: its document is then stable.
    again = state_to_jsonable(restored)
    assert state_to_jsonable(state_from_jsonable(again)) == again


def test_a_snapshot_is_written_in_chunks_of_bounded_size_in_section_order() -> None:
    # Streamed: no piece of the stored form holds the whole state (its text never exists whole).
    state = ClusterState()
    for seq, event in enumerate(event_stream(4, 6_000), start=1):
        apply(state, seq, decode(encode(event)))
    stored = state_to_stored(state)
    sections = [section for section, _ in stored.chunks]
    assert sections == sorted(sections, key=SECTIONS.index)
    assert sections.count("jobs") > 1
    assert sections.count("tasks") > 1
    document = state_to_jsonable(state)
    biggest_item = max(len(orjson.dumps(item)) for section in SECTIONS for item in document[section])
    assert all(len(text.encode()) < CHUNK_BYTES + biggest_item + 2 for _, text in stored.chunks)
    # The chunks are the document's sections, split.
    for section in SECTIONS:
        items = [item for name, text in stored.chunks if name == section for item in orjson.loads(text)]
        assert items == document[section], section
    assert "jobs" not in orjson.loads(stored.head)
    assert state_from_stored(stored.head, iter(stored.chunks)) == state
