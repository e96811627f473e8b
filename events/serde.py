"""Events on the wire: CloudEvents 1.0 structured-mode JSON.

* :func:`encode` — an event as compact UTF-8 JSON (the Kafka message value).
* :func:`decode` — bytes back to a typed :data:`~events.models.Event`, upcasting
  old versions; anything else raises :class:`EventDecodeError`.
* :func:`canonical_json` — the deterministic bytes the event log hashes
  (:mod:`events.canonical`, re-exported here).

Decoding first tries the one-pass path: bytes straight into the current
version's model (the ``type`` discriminator picks it).  Anything that path
refuses — an old version, malformed input — and NaN or Infinity, which it
would let through, goes the careful way: parse the JSON once, dispatch on
``type`` to that type's own model (upcasting old versions) and validate the
parsed object, which also finds the error code.  The error codes are stable;
consumers branch on ``code``, never on the message.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Final, Literal, TypeAlias, Union, cast

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails, from_json

from events.canonical import canonical_json
from events.models import EVENT_TYPES, Event
from events.quantity import QuantityError
from events.upcast import DEFAULT_UPCASTERS, UpcasterRegistry, UpcastError, split_type

__all__ = [
    "DecodeErrorCode",
    "EventDecodeError",
    "canonical_json",
    "decode",
    "encode",
]

DecodeErrorCode: TypeAlias = Literal[
    "invalid-utf8",  # the bytes are not UTF-8
    "not-json",  # not one JSON document (NaN / Infinity are not JSON either)
    "not-an-object",  # JSON, but not an object (an array, a string, ...)
    "missing-type",  # no "type" attribute, or it is null
    "unknown-type",  # a type this catalogue has never had
    "unsupported-version",  # a known type at a version we cannot read
    "invalid-field",  # a known type whose attributes or data do not validate
]


def _newest_versions() -> dict[str, int]:
    """Base type -> the newest version the catalogue knows."""
    newest: dict[str, int] = {}
    for event_type in EVENT_TYPES:
        split = split_type(event_type)
        if split is None:
            raise RuntimeError(f"catalogue type {event_type!r} is not versioned")
        base, version = split
        newest[base] = max(version, newest.get(base, version))
    return newest


_LATEST: Final[dict[str, int]] = _newest_versions()
# type string -> model for the newest version of each type: the only ones
# decoded directly; anything older is upcast first.
_MODELS: Final[dict[str, type[BaseModel]]] = {
    event_type: model
    for event_type, model in EVENT_TYPES.items()
    if (split := split_type(event_type)) is not None and _LATEST[split[0]] == split[1]
}

# The newest version of every type in one discriminated union: bytes -> model
# in one pass (about a quarter faster than parse, dispatch, validate).  The JSON
# parser caches only object keys: by default it also caches string values, and
# an event's values are mostly unique (ids, names, times), so the cache cost more
# than it saved (decoding took 9.5-9.9 us an event with it, 7.3-8.0 without).
_CURRENT: Final[TypeAdapter[Event]] = TypeAdapter(
    Annotated[Union[tuple(_MODELS.values())], Field(discriminator="type")],  # type: ignore[arg-type]  # noqa: UP007
    config=ConfigDict(cache_strings="keys"),
)

# The core validator's method itself: TypeAdapter.validate_json only forwards its
# defaults to it, and that Python call was 4% of a decode.
_validate_current: Final = _CURRENT.validator.validate_json

_MAX_REPR = 80
_NO_SUBJECT: Final = {"subject", "traceparent", "tracestate", "principal", "signature"}
_NO_TRACE: Final = {"traceparent", "tracestate", "principal", "signature"}
_OPTIONAL: Final = ("subject", "traceparent", "tracestate", "principal", "signature")


class EventDecodeError(ValueError):
    """Bytes that are not a valid Tephra event.

    Attributes:
        code: one of :data:`DecodeErrorCode`, stable across releases.
        field: dotted path of the offending attribute (``data.tasks.0.resources.cpu``),
            or None when the problem is not one field.
        detail: what is wrong, without the field path.
        event_type: the ``type`` attribute when one could be read, else None.
        event_id: the ``id`` attribute when one could be read, else None.

    Decode errors are never retriable: the same bytes fail the same way, so
    a consumer parks the message (dead-letter topic) and moves on.
    """

    retriable: ClassVar[bool] = False

    def __init__(
        self,
        code: DecodeErrorCode,
        detail: str,
        *,
        field: str | None = None,
        event_type: str | None = None,
        event_id: str | None = None,
    ) -> None:
        self.code: DecodeErrorCode = code
        self.detail = detail
        self.field = field
        self.event_type = event_type
        self.event_id = event_id
        where = f"field {field}: " if field is not None else ""
        super().__init__(f"invalid event: {where}{detail}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_error, (self.code, self.detail, self.field, self.event_type, self.event_id))


def _rebuild_error(
    code: DecodeErrorCode, detail: str, field: str | None, event_type: str | None, event_id: str | None
) -> EventDecodeError:
    return EventDecodeError(code, detail, field=field, event_type=event_type, event_id=event_id)


def encode(event: Event) -> bytes:
    """The event as compact CloudEvents structured JSON, UTF-8.

    An absent optional attribute (``subject``) is left out rather than
    written as null, as the CloudEvents JSON format treats the two alike.
    """
    return event.model_dump_json(exclude=_absent_attributes(event)).encode()


def _absent_attributes(event: Event) -> set[str] | None:
    if event.traceparent is None and event.tracestate is None and event.principal is None:
        return _NO_SUBJECT if event.subject is None else _NO_TRACE
    absent = {name for name in _OPTIONAL if getattr(event, name) is None}
    return absent or None


def decode(raw: bytes, *, upcasters: UpcasterRegistry = DEFAULT_UPCASTERS) -> Event:
    """Parse and validate one event, upcasting an old version to the current one.

    Raises:
        EventDecodeError: with the ``code`` saying what is wrong.
    """
    # The one-pass parser would accept NaN and Infinity; the careful path refuses them.
    # Finding one byte is a memchr, cheap; the token is searched for only when its
    # capital is there (``in`` and the 3- and 8-byte searches were 7% of a decode).
    if (raw.find(b"N") < 0 or raw.find(b"NaN") < 0) and (raw.find(b"I") < 0 or raw.find(b"Infinity") < 0):
        try:
            event: Event = _validate_current(raw)  # an annotation, not cast(): no call per event
        except ValidationError:
            pass  # old version or not valid: the careful path upcasts or names the error
        else:
            return event
    return _decode_carefully(raw, upcasters)


def _decode_carefully(raw: bytes, upcasters: UpcasterRegistry) -> Event:
    """Parse, dispatch on ``type``, upcast, validate: the path that names every error."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EventDecodeError("invalid-utf8", f"not UTF-8: {exc.reason} at byte {exc.start}") from None
    try:
        payload = from_json(text, allow_inf_nan=False)
    except ValueError as exc:
        raise EventDecodeError("not-json", f"not JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise EventDecodeError("not-an-object", f"expected a JSON object, got a JSON {_json_kind(payload)}")

    event_type = payload.get("type")
    raw_id = payload.get("id")
    event_id = raw_id if isinstance(raw_id, str) else None
    if event_type is None:
        raise EventDecodeError("missing-type", "the 'type' attribute is missing", event_id=event_id)
    if not isinstance(event_type, str):
        raise EventDecodeError(
            "invalid-field",
            f"expected a string, got {_short_repr(event_type)}",
            field="type",
            event_id=event_id,
        )

    model = _MODELS.get(event_type)
    if model is None:
        payload, model = _upcast(payload, event_type, event_id, upcasters)
    try:
        return cast("Event", model.model_validate(payload))
    except ValidationError as exc:
        raise _invalid_field(exc, event_type, event_id) from None


def _upcast(
    payload: dict[str, Any], event_type: str, event_id: str | None, upcasters: UpcasterRegistry
) -> tuple[dict[str, Any], type[BaseModel]]:
    """Bring an event of a type not decoded directly to the catalogue's newest version."""
    split = split_type(event_type)
    if split is None:
        raise EventDecodeError(
            "unknown-type",
            f"unknown event type {event_type!r}: not of the form <name>.v<N>",
            event_type=event_type,
            event_id=event_id,
        )
    latest = _LATEST.get(split[0])
    if latest is None:
        raise EventDecodeError(
            "unknown-type", f"unknown event type {event_type!r}", event_type=event_type, event_id=event_id
        )
    base, version = split
    if version > latest:
        raise EventDecodeError(
            "unsupported-version",
            f"{event_type!r} is newer than this reader (newest known: v{latest})",
            event_type=event_type,
            event_id=event_id,
        )
    try:
        upgraded = upcasters.upcast(payload, base=base, from_version=version, to_version=latest)
    except UpcastError as exc:
        code: DecodeErrorCode = "unsupported-version" if exc.missing_step else "invalid-field"
        raise EventDecodeError(code, str(exc), event_type=event_type, event_id=event_id) from None
    return upgraded, _MODELS[upgraded["type"]]


def _invalid_field(exc: ValidationError, event_type: str, event_id: str | None) -> EventDecodeError:
    errors = exc.errors(include_url=False)
    field, detail = _describe(errors[0])
    if len(errors) > 1:
        more = len(errors) - 1
        detail += f" (and {more} more error{'s' if more > 1 else ''})"
    return EventDecodeError("invalid-field", detail, field=field, event_type=event_type, event_id=event_id)


def _describe(error: ErrorDetails) -> tuple[str | None, str]:
    """The dotted field path and a lowercase reason for one pydantic error."""
    path = [str(part) for part in error["loc"]]
    cause = error.get("ctx", {}).get("error")
    if isinstance(cause, QuantityError):
        # The ResourceList validator sees the whole mapping; point at the entry.
        if isinstance(error["input"], dict) and cause.resource in error["input"]:
            path.append(cause.resource)
        reason = str(cause)
    elif isinstance(cause, ValueError):
        reason = str(cause)
    else:
        reason = error["msg"][:1].lower() + error["msg"][1:]
        value = error["input"]
        scalar = value is None or isinstance(value, str | int | float)
        if scalar and error["type"] not in {"missing", "extra_forbidden"}:
            reason += f" (got {_short_repr(value)})"
    return (".".join(path) or None), reason


def _json_kind(value: object) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return "number"


def _short_repr(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_REPR else text[: _MAX_REPR - 3] + "..."
