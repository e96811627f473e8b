"""A state's JSON form (projector.state_json): the text it writes, and the state it reads back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st
from pydantic_core import TzInfo

from events.serde import decode, encode
from projector.fold import apply
from projector.projection_rows import document_json
from projector.state import ClusterState
from projector.state_json import isoformat, state_from_jsonable, state_from_text, state_to_jsonable
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
    restored = state_from_text(document_json(document))
    assert restored == state
    assert state_from_jsonable(document) == state
    # A read-back state lists its tasks in creation order: its document is then stable.
    again = state_to_jsonable(restored)
    assert state_to_jsonable(state_from_jsonable(again)) == again
