"""Event data as JSON values: what ``model_dump(mode="json")`` gives, built for less.

The fast path of the canonical encoder (:mod:`events.canonical`), which
serialises every archived event's data, and of the projector's state
documents.  pydantic's serializer spends about 2.5k instructions on every
model it meets, mostly generic dispatch (a SessionCommitted of the bench
stream, six decisions and two pending jobs: 57k).  The catalogue's models are plain:
frozen, no aliases, no computed fields, and most fields hold JSON values
already (str, int, bool, None, lists and dicts of them), which ``mode="json"``
returns unchanged.  So each model class gets a converter, derived once from
its fields: copy the fields from ``__dict__``, convert only the fields that
need it (nested models, a ``PlainSerializer`` such as ``ResourceList``'s), and
leave anything else — a datetime, ``Any`` — to pydantic's serializer for that
field's type, as is a model this derivation does not cover.  A model whose
fields all hold their JSON form gives its ``__dict__`` itself.  The rule of
what a field's JSON is stays the models'; only the dispatch is precomputed.
(Measured on the bench stream: 15k instructions an event, model_dump 32k,
``__pydantic_serializer__.to_python`` 26k.)

The values returned may share lists and dicts with the model (as the model's
own fields do): read them, never mutate them.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Final, Generic, Literal, TypeVar, Union, get_args, get_origin

import annotated_types
from pydantic import AwareDatetime, BaseModel, BeforeValidator, PlainSerializer, TypeAdapter, WithJsonSchema
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

__all__ = ["DECODED_EPOCH", "DECODED_UTC", "EPOCH", "LastForms", "json_form", "time_text"]

#: A value's JSON form from the value; None where the value is its own JSON form.
_Convert = Callable[[Any], Any]
_M = TypeVar("_M", bound=BaseModel)
_T = TypeVar("_T")

# Types whose values model_dump(mode="json") returns as they are.
_AS_IS: Final = (str, int, bool, type(None))
# model_config keys that do not change what a model serialises to.
_NEUTRAL_CONFIG: Final = frozenset({"frozen", "extra", "title"})
# Annotated metadata that only validates or documents (constraints, validators, schema).
_NEUTRAL_METADATA: Final = (annotated_types.BaseMetadata, BeforeValidator, WithJsonSchema)

_converters: Final[dict[type[BaseModel], Callable[[BaseModel], Any]]] = {}

#: The tzinfo of every time pydantic decodes with a zero offset (one shared object).
DECODED_UTC: Final = TypeAdapter(AwareDatetime).validate_python("1970-01-01T00:00:00Z").tzinfo
_pydantic_time_text: Final = TypeAdapter(datetime).serializer.to_python
_TWO_DIGITS: Final = tuple(f"{n:02d}" for n in range(100))
EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
#: The epoch as pydantic decodes it (subtracting it from a decoded UTC time asks no offset).
DECODED_EPOCH: Final = datetime(1970, 1, 1, tzinfo=DECODED_UTC)
#: Days since the epoch -> the date's text with its "T" (time_text): events come
#: days at a time.  Bounded, as any memo the input fills.
_dates: Final[dict[int, str]] = {}
_DATES_MAX: Final = 4_096


def time_text(value: datetime) -> str:
    """pydantic's JSON text of a datetime: what the event models write for it.

    A UTC time (pydantic's decoded UTC or the standard library's) from the
    year 1000 on is written here: ``YYYY-MM-DDTHH:MM:SS``, then ``.ffffff``
    unless the microseconds are 0, then ``Z``.  pydantic's serializer took
    ~4.5k instructions a call (callgrind), and every archived event has a
    time.  The clock comes from one subtraction (a datetime's fields are
    attribute reads, ~190 instructions each), the date from :data:`_dates`.
    Any other time goes to pydantic, so its rules stay the one source
    (``tests/projector/test_jsonform.py`` compares the two).
    """
    zone = value.tzinfo
    if zone is DECODED_UTC:
        since = value - DECODED_EPOCH  # one zone: no offsets are asked for
    elif zone is UTC:
        since = value - EPOCH
    else:
        return _time_text_of_pydantic(value)
    two = _TWO_DIGITS
    days = since.days
    date = _dates.get(days)
    if date is None:
        year = value.year
        if year < 1000:
            return _time_text_of_pydantic(value)  # pydantic pads the year
        date = f"{year}-{two[value.month]}-{two[value.day]}T"
        if len(_dates) < _DATES_MAX:
            _dates[days] = date
    seconds = since.seconds
    micro = since.microseconds
    # One f-string each: every piece joined by one allocation (mypyc's CPyStr_Build).
    if micro:
        return (
            f"{date}{two[seconds // 3600]}:{two[seconds // 60 % 60]}:{two[seconds % 60]}"
            f".{str(1_000_000 + micro)[1:]}Z"
        )
    return f"{date}{two[seconds // 3600]}:{two[seconds // 60 % 60]}:{two[seconds % 60]}Z"


def _time_text_of_pydantic(value: datetime) -> str:
    text: str = _pydantic_time_text(value, mode="json")
    return text


def json_form(model: BaseModel) -> Any:
    """``model.model_dump(mode="json")`` (an equal value; see the module docstring)."""
    cls = type(model)
    convert = _converters.get(cls)
    if convert is None:
        convert = _model_converter(cls)
    return convert(model)


def _model_converter(cls: type[BaseModel]) -> Callable[[BaseModel], Any]:
    convert = _converters.get(cls)
    if convert is None:
        # pydantic's, while this class's own is derived (a model that contains itself).
        _converters[cls] = _pydantic_converter(cls)
        convert = _converters[cls] = _derive(cls)
    return convert


def _derive(cls: type[BaseModel]) -> Callable[[BaseModel], Any]:
    pydantic_form = _pydantic_converter(cls)
    decorators = cls.__pydantic_decorators__
    if (
        getattr(cls, "__pydantic_root_model__", False)
        or decorators.field_serializers
        or cls.__pydantic_computed_fields__
        or not _NEUTRAL_CONFIG.issuperset(cls.model_config)
        or len(decorators.model_serializers) > 1
    ):
        return pydantic_form
    converted: list[tuple[str, _Convert]] = []
    for name, info in cls.model_fields.items():
        if info.exclude or info.alias or info.serialization_alias or getattr(info, "exclude_if", None):
            return pydantic_form
        annotation = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
        convert = _converter(annotation)
        if convert is not None:
            converted.append((name, convert))
    fields = tuple(converted)

    def plain(model: BaseModel) -> dict[str, Any]:
        # __dict__ holds exactly the fields (extras and private attributes live elsewhere).
        # Read as an attribute, not with vars(): compiled, vars is looked up among the
        # builtins by name at every call (callgrind: ~270 instructions).
        out = model.__dict__.copy()
        for name, convert in fields:
            out[name] = convert(out[name])
        return out

    if decorators.model_serializers:
        (serializer,) = decorators.model_serializers.values()
        wrap: Callable[..., Any] = serializer.func
        returned: Any = serializer.info.return_type
        if (
            serializer.info.mode != "wrap"
            or returned is not PydanticUndefined
            or _positional(wrap) != 2  # (self, handler): no info argument
        ):
            return pydantic_form
        # A wrap serializer gets the plain form (a copy it may edit) from its handler
        # and returns its edit (dict[str, Any], serialised as it is: JSON values).
        return lambda model: wrap(model, lambda value, *_: plain(value))
    if not fields:
        # Every field holds its JSON form: the fields dict itself, shared (measured:
        # a session's decisions 21k instructions through plain(), 11k this way).
        return vars
    return plain


def _converter(tp: Any) -> _Convert | None:
    """How to get a value of type ``tp`` into its JSON form (None: it is already)."""
    origin = get_origin(tp)
    args = get_args(tp)
    convert: _Convert | None
    if origin is Annotated:
        convert = _annotated_converter(tp, args)
    elif tp in _AS_IS or (origin is Literal and all(type(a) in _AS_IS for a in args)):
        convert = None
    elif origin is list:
        convert = _list_converter(args[0])
    elif origin is dict and args[0] is str:
        item = _converter(args[1])
        convert = None if item is None else lambda value: {k: item(v) for k, v in value.items()}
    elif origin is Union or origin is types.UnionType:
        convert = _union_converter(tp, args)
    elif isinstance(tp, type) and issubclass(tp, BaseModel):
        convert = _model_converter(tp)
    elif tp is AwareDatetime or tp is datetime:
        convert = time_text
    else:
        convert = _pydantic_converter(tp)
    return convert


def _annotated_converter(tp: Any, args: tuple[Any, ...]) -> _Convert | None:
    inner, *metadata = args
    serializers = [m for m in metadata if isinstance(m, PlainSerializer)]
    if len(serializers) == 1 and _plain_function(serializers[0]):
        function: _Convert = serializers[0].func  # type: ignore[assignment]  # one argument: checked
        returned: Any = serializers[0].return_type
        then = None if returned is PydanticUndefined else _converter(returned)
        if then is None:
            return function
        return lambda value: then(function(value))
    if serializers or not all(_neutral(m) for m in metadata):
        return _pydantic_converter(tp)
    return _converter(inner)


def _list_converter(item_type: Any) -> _Convert | None:
    item = _converter(item_type)
    if item is None:
        return None
    # Without a Python frame per item where the items' converter is C (measured: a
    # session's decisions 21k -> 11k instructions); __dict__, not vars (see plain()).
    if item is vars:
        return lambda value: [v.__dict__ for v in value]
    flat = _flat_union(item_type)
    if flat is not None:
        classes, fallback = flat
        return lambda value: [v.__dict__ if type(v) in classes else fallback(v) for v in value]
    return lambda value: [item(v) for v in value]


def _union_converter(tp: Any, args: tuple[Any, ...]) -> _Convert | None:
    choices = [a for a in args if a is not type(None)]
    converters = [_converter(a) for a in choices]
    if all(c is None for c in converters):
        return None
    if len(choices) == 1:
        (convert,) = converters
        return lambda value: None if value is None else convert(value)  # type: ignore[misc]
    if not all(isinstance(c, type) and issubclass(c, BaseModel) for c in choices):
        return _pydantic_converter(tp)
    # Models (a tagged union such as Decision): by the value's class; another
    # class (a subclass) goes to pydantic, which decides how to read it.
    by_class = {c: _model_converter(c) for c in choices}
    fallback = _pydantic_converter(tp)
    return lambda value: None if value is None else by_class.get(type(value), fallback)(value)


def _flat_union(tp: Any) -> tuple[frozenset[type], _Convert] | None:
    """For a union of models whose fields all hold their JSON form (Decision): the
    classes, and pydantic's serializer for what is none of them."""
    inner = tp
    while get_origin(inner) is Annotated:
        inner, *metadata = get_args(inner)
        if not all(_neutral(m) for m in metadata):
            return None
    if get_origin(inner) is not Union and get_origin(inner) is not types.UnionType:
        return None
    choices = get_args(inner)
    if not all(isinstance(c, type) and issubclass(c, BaseModel) for c in choices):
        return None
    if not all(_model_converter(c) is vars for c in choices):
        return None
    return frozenset(choices), _pydantic_converter(tp)


def _pydantic_converter(tp: Any) -> _Convert:
    to_python = TypeAdapter(tp).serializer.to_python
    # A lambda, not partial(): partial merges its keywords per call (measured: a
    # datetime 6.3k instructions that way, 4.6k this way).
    return lambda value: to_python(value, mode="json")


def _plain_function(serializer: PlainSerializer) -> bool:
    return serializer.when_used == "always" and _positional(serializer.func) == 1


def _neutral(metadata: object) -> bool:
    """Annotated metadata known not to change a value's serialisation (anything else:
    pydantic serialises the value)."""
    if isinstance(metadata, FieldInfo):  # a discriminator, say
        return not (metadata.exclude or metadata.alias or metadata.serialization_alias)
    return isinstance(metadata, _NEUTRAL_METADATA)


def _positional(function: Callable[..., Any]) -> int:
    parameters = inspect.signature(function).parameters.values()
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters)


class LastForms(Generic[_M, _T]):
    """A rendering (a JSON form, a text) of each model of the last list rendered, kept while the
    next list holds the same model (the same object, by ``key``): a list that keeps most of its
    models from one rendering to the next, as a backlog's pending reasons do session after
    session, renders only the new ones.  Bounded by the last list."""

    def __init__(self, render: Callable[[_M], _T], key: Callable[[_M], str]) -> None:
        self._render = render
        self._key = key
        self._forms: dict[str, tuple[_M, _T]] = {}

    def of(self, models: Sequence[_M]) -> list[_T]:
        """Each model's rendering, in order (the same as ``render`` of each)."""
        forms: dict[str, tuple[_M, _T]] = {}
        out: list[_T] = []
        known = self._forms
        for model in models:
            key = self._key(model)
            hit = known.get(key)
            form = hit[1] if hit is not None and hit[0] is model else self._render(model)
            forms[key] = (model, form)
            out.append(form)
        self._forms = forms
        return out
