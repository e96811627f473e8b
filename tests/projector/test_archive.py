"""The canonical bytes (events.canonical) are the plain definition's, whichever fast path makes them.

The definition (docs/archive-format.md): the event in UTC, dumped as JSON values
(``model_dump(mode="json")``, an absent subject left out) by the json module with
sorted keys, no whitespace and non-ASCII as it is.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic_core import TzInfo

from events.canonical import (
    _ORJSON_EXACT,
    GENESIS_HASH,
    _data_text,
    _holds_float,
    canonical_bytes,
    canonical_form,
    canonical_json,
    format_time,
)
from events.models import (
    EARLIEST_TIME,
    LATEST_TIME,
    ActionConfiguration,
    Event,
    QueueDeleted,
    QueueDeletedData,
    SchedulerConfigured,
)
from events.serde import decode, encode
from projector.archive import columns_canonical, stdlib_utc
from projector.state import ClusterState
from projector.writer import _EVENT_LOG_COLUMNS, BatchWriter, InboundRecord, decode_batch
from tests.events.samples import sample_events, scheduler_configured
from tests.projector.helpers import records
from tests.projector.streams import CLUSTER, event_stream


def _with_arguments(arguments: dict[str, Any]) -> SchedulerConfigured:
    event = scheduler_configured()
    config = event.data.config.model_copy(
        update={"configurations": [ActionConfiguration(name="enqueue", arguments=arguments)]}
    )
    return event.model_copy(update={"data": event.data.model_copy(update={"config": config})})


def _definition(event: Event) -> bytes:
    """The canonical bytes as the format defines them, by the json module alone."""
    utc = event.model_copy(update={"time": event.time.astimezone(UTC)})
    # The tracing extension's attributes are delivery metadata, outside the canonical bytes; the
    # signature is of the canonical bytes; an absent subject or principal is left out.
    absent = {"traceparent", "tracestate", "signature"} | {
        name for name in ("subject", "principal") if getattr(utc, name) is None
    }
    doc = utc.model_dump(mode="json", exclude=absent)
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.encode()


def _archived_canonical(event: Event) -> bytes:
    """The bytes as the archive's readers splice them from the row's columns."""
    form = canonical_form(event)
    archived, data, time, encoded = form.event, form.data, form.time, form.bytes
    assert time == format_time(archived.time)
    spliced = canonical_bytes(
        cluster=archived.cluster,
        data=data,
        event_id=archived.id,
        source=archived.source,
        subject=archived.subject,
        time=time,
        event_type=archived.type,
        principal=archived.principal,
    )
    assert spliced == encoded
    return encoded


_AWKWARD = [
    # Floats whose text differs between orjson and json; integers beyond 64 bits; escapes.
    _with_arguments({"tiny": 1e-7, "huge": 1e16, "neg": -2.5e-5, "x": 0.1}),
    _with_arguments({"big": 2**70, "small": -(2**64), "text": 'é\u2028\x00"\\\n\x7f🎉'}),
]


@pytest.mark.parametrize("event", [*sample_events(), *_AWKWARD], ids=lambda e: e.type)
def test_the_canonical_bytes_are_the_definitions(event: Event) -> None:
    assert _archived_canonical(event) == canonical_json(event) == _definition(event)
    assert _archived_canonical(decode(encode(event))) == _definition(event)
    assert decode(canonical_json(event)) == event.model_copy(update={"signature": None})


def test_a_stream_archives_the_definitions_bytes() -> None:
    for event in event_stream(11, 2_000):
        assert _archived_canonical(event) == _definition(event)


_NAMES = st.text(min_size=1) | st.sampled_from(['a"b', "a\\b", "é\u2028🎉", "\x00\x1f"])


@given(cluster=_NAMES, source=_NAMES, event_id=_NAMES, subject=st.none() | _NAMES)
def test_envelope_strings_are_escaped_whether_quoted_before_or_not(
    cluster: str, source: str, event_id: str, subject: str | None
) -> None:
    # cluster, source and type are quoted once and kept (canonical._repeated): the second
    # event with the same values takes them from there.
    for n in range(2):
        event = QueueDeleted(
            id=f"{event_id}{n}",
            source=source,
            cluster=cluster,
            subject=subject,
            time=datetime(2026, 1, 1, tzinfo=UTC),
            data=QueueDeletedData(name="q"),
        )
        assert _archived_canonical(event) == _definition(event)


def test_types_that_may_carry_floats_keep_the_json_module() -> None:
    # Free-form plugin arguments may hold floats; every other type is integers and strings.
    assert "tephra.scheduler.configured.v1" not in _ORJSON_EXACT
    assert "tephra.job.submitted.v1" in _ORJSON_EXACT


@pytest.mark.parametrize(
    "value",
    [
        {"a": [1, {"b": 1e-7}]},  # orjson writes 1e-7, the json module 1e-07
        [{"c": "x"}, [[-2.5e-5]]],
        {"d": 1e16, "e": True},
        {"f": -0.0},
    ],
)
def test_a_float_anywhere_takes_the_json_module(value: object) -> None:
    expected = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert _data_text("tephra.scheduler.configured.v1", value) == expected
    assert _holds_float(value)


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
    assert _data_text("tephra.job.submitted.v1", value) == expected


@given(_NO_FLOATS)
def test_without_floats_a_type_that_may_carry_them_writes_the_same_text(value: object) -> None:
    expected = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert not _holds_float(value)
    assert _data_text("tephra.scheduler.configured.v1", value) == expected


def _format_time_before(value: datetime) -> str:
    """format_time as it was when the archive's first rows were hashed (isoformat)."""
    offset = value.utcoffset()
    if offset is None or offset:
        raise ValueError(value)
    return value.isoformat()[:-6] + "Z"


_UTC_ZONES = st.sampled_from([UTC, timezone(timedelta(0)), TzInfo(0)])


@given(st.datetimes(timezones=_UTC_ZONES))
def test_format_time_writes_the_text_it_always_wrote_and_the_models_write(value: datetime) -> None:
    # Rows archived earlier are verified with today's format_time: the text must not move.
    assert format_time(value) == _format_time_before(value)
    if EARLIEST_TIME <= value < LATEST_TIME:  # the times an event may carry (older rows may hold any)
        event = QueueDeleted(id="e", source="s", time=value, data=QueueDeletedData(name="q"))
        assert format_time(value) == event.model_dump(mode="json")["time"]


@given(
    st.datetimes(),
    st.timedeltas(min_value=timedelta(hours=-23), max_value=timedelta(hours=23)).filter(bool),
)
def test_format_time_refuses_what_is_not_utc(value: datetime, offset: timedelta) -> None:
    # Offsets under a second too, which pydantic's own text would write as "Z".
    with pytest.raises(ValueError, match="UTC"):
        format_time(value.replace(tzinfo=timezone(offset)))
    with pytest.raises(ValueError, match="UTC"):
        format_time(value)  # naive


def test_format_time_of_decoded_events() -> None:
    for event in event_stream(5, 2_000):
        decoded = decode(encode(event))
        assert format_time(decoded.time) == _format_time_before(decoded.time)


@pytest.mark.parametrize("offset", [timedelta(hours=5, minutes=30), timedelta(microseconds=-1), timedelta(0)])
def test_the_archived_form_is_in_utc(offset: timedelta) -> None:
    event = queue_deleted_at(datetime(2026, 3, 1, 12, 0, 0, 250, tzinfo=timezone(offset)))
    form = canonical_form(event)
    archived, time = form.event, form.time
    assert archived.time == event.time
    assert archived.time.utcoffset() == timedelta(0)
    assert time == format_time(archived.time) == format_time(event.time.astimezone(UTC))
    assert _archived_canonical(event) == canonical_json(archived) == _definition(event)


@given(st.datetimes(timezones=st.sampled_from([UTC, TzInfo(0)])))
def test_stdlib_utc_keeps_the_instant_and_gives_the_standard_utc(value: datetime) -> None:
    converted = stdlib_utc(value)
    assert converted == value
    assert converted.tzinfo is UTC
    assert (converted.year, converted.microsecond) == (value.year, value.microsecond)


@pytest.mark.parametrize(
    "text", ["2026-03-01T12:00:00.000250+05:30", "2026-03-01T12:00:00-00:01", "2026-03-01T12:00:00Z"]
)
def test_a_decoded_time_is_archived_in_utc(text: str) -> None:
    # Decoded UTC times skip the offset check (their tzinfo is one shared object); others do not.
    event = decode(encode(queue_deleted_at(datetime.fromisoformat(text))))
    form = canonical_form(event)
    archived, time = form.event, form.time
    assert archived.time == event.time
    assert archived.time.utcoffset() == timedelta(0)
    assert time == format_time(event.time.astimezone(UTC))
    assert _archived_canonical(event) == canonical_json(archived) == _definition(event)


def test_archive_rows_carry_times_in_the_standard_utc() -> None:
    # What COPY encodes (asyncpg converts each aware datetime with astimezone first).
    events = event_stream(6, 300)
    writer = BatchWriter(ClusterState(), GENESIS_HASH, consumer="c", cluster=CLUSTER)
    plan = writer.prepare(decode_batch(records(events)), set())
    times = [row[_EVENT_LOG_COLUMNS.index("time")] for row in plan.archive_rows]
    assert times == [e.time for e in events]
    assert {type(t.tzinfo) for t in times} == {type(UTC)}


def queue_deleted_at(time: datetime) -> QueueDeleted:
    return QueueDeleted(id="q", source="s", time=time, cluster="c", data=QueueDeletedData(name="q"))


HEADER_TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
ENVELOPE_TRACE = "00-11111111111111111111111111111111-2222222222222222-01"


def test_the_archive_keeps_the_header_traceparent_else_the_envelopes_outside_the_event_bytes() -> None:
    plain = event_stream(6, 3)
    traced = [e.model_copy(update={"traceparent": ENVELOPE_TRACE}) for e in plain]
    inbound = records(traced)
    inbound[0] = inbound[0]._replace(traceparent=HEADER_TRACE)  # the record header wins
    inbound[2] = InboundRecord(*records([plain[2]], start=2)[0][:4], traceparent=None)  # neither
    at = datetime(2026, 1, 5, tzinfo=UTC)
    writer = BatchWriter(ClusterState(), GENESIS_HASH, consumer="c", cluster=CLUSTER, clock=lambda: at)
    plan = writer.prepare(decode_batch(inbound), set())
    column = _EVENT_LOG_COLUMNS.index("traceparent")
    assert [row[column] for row in plan.archive_rows] == [HEADER_TRACE, ENVELOPE_TRACE, None]
    untraced = BatchWriter(ClusterState(), GENESIS_HASH, consumer="c", cluster=CLUSTER, clock=lambda: at)
    bare = untraced.prepare(decode_batch(records(plain)), set())
    # The event's canonical bytes leave trace context out; the row's hash (chain format 2)
    # covers the traceparent column, as every column.
    time = _EVENT_LOG_COLUMNS.index("time")

    def event_bytes(row: tuple[Any, ...]) -> bytes:
        return columns_canonical(dict(zip(_EVENT_LOG_COLUMNS, row, strict=True)), format_time(row[time]))

    assert [event_bytes(r) for r in bare.archive_rows] == [event_bytes(r) for r in plan.archive_rows]
    hash_column = _EVENT_LOG_COLUMNS.index("hash")
    assert bare.archive_rows[0][hash_column] != plan.archive_rows[0][hash_column]  # alike but for it
