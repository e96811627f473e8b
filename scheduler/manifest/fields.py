"""Reading one field of a Kubernetes object, with the path of what was wrong.

Every reader raises :class:`scheduler.podspec.PodSpecError` (path, what was
expected, what was given), which each door turns into its own error type.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from events.names import is_dns_subdomain
from events.quantity import QuantityError, parse_quantity
from scheduler.podspec import MISSING, PodSpecError

__all__ = [
    "FROZEN",
    "PREEMPTION_POLICIES",
    "PreemptionPolicy",
    "at",
    "boolean",
    "event_model",
    "integer",
    "mapping",
    "name_of",
    "namespace_of",
    "one_of",
    "optional_string",
    "required",
    "resources",
    "sequence",
    "string",
    "string_map",
    "timestamp",
]

#: The manifest models are values: frozen, and built only by their readers.
FROZEN: Final = ConfigDict(frozen=True, extra="forbid")

PreemptionPolicy = Literal["PreemptLowerPriority", "Never"]
#: A pod's or PriorityClass's ``preemptionPolicy``, by what a manifest may say.
PREEMPTION_POLICIES: Final[dict[str, PreemptionPolicy]] = {
    "PreemptLowerPriority": "PreemptLowerPriority",
    "Never": "Never",
}
_M = TypeVar("_M", bound=BaseModel)
_V = TypeVar("_V")
INT32_MAX: Final = 2**31 - 1
INT32_MIN: Final = -(2**31)
_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def at(path: str, key: str | int) -> str:
    """``path`` extended by a key: ``a.b``, ``a[0]``, or ``a["nvidia.com/gpu"]``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _IDENTIFIER.fullmatch(key) is None:
        return f'{path}["{key}"]' if path else f'["{key}"]'
    return f"{path}.{key}" if path else key


def mapping(value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PodSpecError(path, "expected a mapping", value)
    return value


def sequence(value: Any, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise PodSpecError(path, "expected a list", value)
    return value


def required(obj: Mapping[str, Any], key: str, path: str) -> Any:
    value = obj.get(key)
    if value is None:
        raise PodSpecError(at(path, key), "required field is missing")
    return value


def string(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise PodSpecError(path, "expected a non-empty string", value)
    return value


def optional_string(value: Any, path: str) -> str | None:
    if value is None or value == "":
        return None
    return string(value, path)


def integer(value: Any, path: str, default: int, minimum: int | None = 0) -> int:
    """An integer as Kubernetes' int32 fields hold it (counts, weights, priorities)."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise PodSpecError(path, "expected an integer", value)
    if minimum is not None and value < minimum:
        raise PodSpecError(path, f"expected an integer >= {minimum}", value)
    if not INT32_MIN <= value <= INT32_MAX:
        raise PodSpecError(path, f"expected a 32-bit integer (at most {INT32_MAX})", value)
    return value


def one_of(table: Mapping[str, _V], value: Any, path: str, expected: str) -> _V:
    """``table[value]``; anything else (another string, a number, a list) is refused with ``expected``."""
    if isinstance(value, str) and value in table:
        return table[value]
    raise PodSpecError(path, expected, value)


def boolean(value: Any, path: str, default: bool) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise PodSpecError(path, "expected true or false", value)
    return value


def string_map(value: Any, path: str) -> dict[str, str]:
    """Labels, annotations, node selectors: string values only (quote ``"true"`` and numbers in YAML)."""
    out: dict[str, str] = {}
    for key, item in mapping(value, path).items():
        if not isinstance(key, str) or not key:
            raise PodSpecError(path, "expected string keys", key)
        if not isinstance(item, str):
            raise PodSpecError(at(path, key), "expected a string (quote it in YAML)", item)
        out[key] = item
    return dict(sorted(out.items()))


def resources(value: Any, path: str) -> dict[str, int]:
    """A ResourceList in Tephra's integer units (millicores, bytes, counts), names sorted."""
    out: dict[str, int] = {}
    for name, quantity in mapping(value, path).items():
        if not isinstance(name, str):
            raise PodSpecError(path, "expected resource names as strings", name)
        try:
            out[name] = parse_quantity(name, quantity)
        except QuantityError as exc:
            raise PodSpecError(
                at(path, name),
                f"expected a Kubernetes quantity such as '500m', '2' or '8Gi' ({exc.why})",
                quantity,
            ) from None
    return dict(sorted(out.items()))


def timestamp(value: Any, path: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        parsed = value
    else:
        try:
            parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            raise PodSpecError(path, "expected an RFC 3339 timestamp", value) from None
    if parsed.tzinfo is None:
        raise PodSpecError(path, "expected a timestamp with a time zone (e.g. ...Z)", value)
    return parsed


def name_of(meta: Mapping[str, Any], valid: Callable[[str], bool] | None = is_dns_subdomain) -> str:
    """``metadata.name``, a lowercase DNS name unless ``valid`` is None (the event's own check
    names the rule for a job's names)."""
    name = string(required(meta, "name", "metadata"), "metadata.name")
    if valid is not None and not valid(name):
        raise PodSpecError("metadata.name", "expected a lowercase DNS name (letters, digits, '-')", name)
    return name


def namespace_of(meta: Mapping[str, Any]) -> str:
    namespace = meta.get("namespace") or "default"
    if not isinstance(namespace, str):
        raise PodSpecError("metadata.namespace", "expected a string", namespace)
    return namespace


def event_model(model: type[_M], data: Mapping[str, Any], path: str) -> _M:
    """A small event sub-model (a taint, a toleration), pydantic's error placed at the manifest path."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = path
        for part in first["loc"]:
            where = at(where, part if isinstance(part, int) else _camel(str(part)))
        raise PodSpecError(where, first["msg"], first.get("input", MISSING)) from None


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(p.title() for p in rest)
