"""json_form gives what model_dump(mode="json") gives, for every model of the catalogue."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Annotated, Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    TypeAdapter,
    computed_field,
    field_serializer,
)
from pydantic_core import TzInfo

from events.jsonform import DECODED_UTC, LastForms, json_form, time_text
from events.models import Event, PendingJob, PendingReason, SessionPartData
from tests.events.samples import sample_events
from tests.events.test_properties import ROUND_TRIPS, jobs, nodes
from tests.projector.streams import event_stream


def _same(model: BaseModel) -> None:
    expected = model.model_dump(mode="json")
    found = json_form(model)
    assert found == expected
    # Equal text too: == would take True for 1.
    assert orjson.dumps(found, option=orjson.OPT_SORT_KEYS) == orjson.dumps(
        expected, option=orjson.OPT_SORT_KEYS
    )


@pytest.mark.parametrize("event", sample_events(), ids=lambda e: e.type)
def test_samples(event: Event) -> None:
    _same(event.data)


def test_a_stream() -> None:
    for event in event_stream(5, 3_000, invalid_rate=0.05):
        _same(event.data)


@ROUND_TRIPS
@given(jobs)
def test_jobs(event: Event) -> None:
    _same(event.data)


@ROUND_TRIPS
@given(nodes)
def test_nodes(event: Event) -> None:
    _same(event.data)


def test_a_wrap_serializer_still_edits_the_form() -> None:
    with_pending = SessionPartData(
        session_id="s",
        index=0,
        pending=[PendingJob(job="a/b", reasons=[PendingReason(code="c", message="m")])],
    )
    _same(with_pending)
    _same(SessionPartData(session_id="s", index=1))
    assert "pending" not in json_form(SessionPartData(session_id="s", index=1))


class _Serialized(BaseModel):
    model_config = ConfigDict(frozen=True)
    n: int

    @field_serializer("n")
    def _double(self, n: int) -> int:
        return 2 * n


class _Computed(BaseModel):
    n: int

    @computed_field  # type: ignore[prop-decorator]
    @property
    def twice(self) -> int:
        return 2 * self.n


class _Aliased(BaseModel):
    model_config = ConfigDict(serialize_by_alias=True)
    n: int = Field(serialization_alias="N")


class _Excluded(BaseModel):
    n: int
    secret: str = Field(default="x", exclude=True)


class _Mixed(BaseModel):
    when: datetime
    free: dict[str, Any]
    ratio: float
    nested: list[_Serialized]
    shouted: Annotated[str, PlainSerializer(str.upper)]
    maybe: Annotated[dict[str, int], PlainSerializer(sorted)] | None = None


@pytest.mark.parametrize(
    "model",
    [
        _Serialized(n=2),
        _Computed(n=2),
        _Aliased(n=2),
        _Excluded(n=2),
        _Mixed(
            when=datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
            free={"f": 1e-7, "d": datetime(2026, 1, 1, tzinfo=UTC), "b": b"x"},
            ratio=float("inf"),
            nested=[_Serialized(n=1)],
            shouted="a",
            maybe={"b": 1, "a": 2},
        ),
        _Mixed(when=datetime(2026, 1, 1, tzinfo=UTC), free={}, ratio=0.5, nested=[], shouted="b"),
    ],
    ids=lambda m: type(m).__name__,
)
def test_what_it_does_not_derive_pydantic_serialises(model: BaseModel) -> None:
    assert json_form(model) == model.model_dump(mode="json")


_AWARE: TypeAdapter[datetime] = TypeAdapter(AwareDatetime)


@given(
    st.datetimes(
        timezones=st.sampled_from(
            [UTC, DECODED_UTC, TzInfo(0), timezone(timedelta(0)), timezone(timedelta(hours=-3))]
        )
        | st.builds(TzInfo, st.integers(min_value=-86_399, max_value=86_399))
    )
)
def test_time_text_is_the_models_text_in_every_zone(value: datetime) -> None:
    # UTC times are written by time_text itself (fractions of 0 dropped, years under 1000
    # padded), the others by pydantic: both must be pydantic's text.
    assert time_text(value) == _AWARE.serializer.to_python(value, mode="json")


@given(st.datetimes(timezones=st.just(UTC)).map(lambda v: v.isoformat()))
def test_time_text_of_decoded_times(text: str) -> None:
    decoded = _AWARE.validate_python(text)
    assert decoded.tzinfo is DECODED_UTC  # the zone time_text writes itself
    assert time_text(decoded) == _AWARE.serializer.to_python(decoded, mode="json")


@pytest.mark.parametrize(
    "start",
    [datetime(2026, 2, 27, 23, 59, 59, 999_999, tzinfo=UTC), datetime(2028, 2, 28, 0, 0, 1, tzinfo=UTC)],
)
def test_time_text_across_midnights(start: datetime) -> None:
    # The date's text is remembered by day (jsonform._dates): each day must get its own.
    for step in range(0, 4 * 86_400_000_000, 3_600_000_001):  # a little over an hour apart
        value = start + timedelta(microseconds=step)
        for v in (value, _AWARE.validate_python(value.isoformat())):
            assert time_text(v) == _AWARE.serializer.to_python(v, mode="json")


def test_last_forms_renders_only_the_models_not_in_the_last_list() -> None:
    rendered: list[str] = []

    def render(entry: PendingJob) -> Any:
        rendered.append(entry.job)
        return json_form(entry)

    forms: LastForms[PendingJob, Any] = LastForms(render, lambda entry: entry.job)
    a, b = PendingJob(job="ns/a"), PendingJob(job="ns/b", reasons=[PendingReason(code="c", message="m")])
    assert forms.of([a, b]) == [a.model_dump(mode="json"), b.model_dump(mode="json")]
    # The same a, a new b with the same job (its reasons changed), a new c.
    b2, c = PendingJob(job="ns/b"), PendingJob(job="ns/c")
    assert forms.of([a, b2, c]) == [json_form(a), json_form(b2), json_form(c)]
    assert rendered == ["ns/a", "ns/b", "ns/b", "ns/c"]
