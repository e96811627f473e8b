"""Hypothesis strategies for hostile records, built from the committed JSON Schemas.

:func:`hostile_records` draws Kafka record values of every event type: a
document walked from the type's schema (``events/schemas/``), whose leaves
lean to extreme values — times at and past the bounds with every offset,
quantities around 2^50 and 2^63 and in every spelling, integers at the int32,
2^53 and int64 edges, Unicode (NUL, control characters, astral planes, long
strings), deep nesting where a schema allows any JSON — and then, now and
then, broken: a required member dropped, a member of the wrong type, a huge
member (over a megabyte, over a btree index row), bytes that are not UTF-8
or not JSON.  Most records
are still valid, so the fold sees hostile values it must take, not only ones
the door refuses.

Every record gets a unique ``id`` (the ``serial`` drawn by the caller), so
each one is archived or rejected, never skipped as a duplicate.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Final

from hypothesis import strategies as st

from events.models import EVENT_TYPES
from events.schemas import PACKAGED_SCHEMAS

__all__ = ["EXTREME_INTEGERS", "Records", "hostile_records", "set_member"]

Schema = dict[str, Any]

EXTREME_INTEGERS: Final = (
    0, 1, -1, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**50 - 1, 2**50, 2**53 - 1, 2**53,
    2**62, 2**63 - 1, 2**63, -(2**63), 2**64, 10**30, 2_000_000,
)  # fmt: skip
_OFFSETS: Final = st.sampled_from(
    [timedelta(0), timedelta(hours=14), timedelta(hours=-14), timedelta(minutes=-1)]
)
_TIME_TEXTS: Final = st.sampled_from(
    [
        "0001-01-01T00:00:00+14:00",
        "9999-12-31T23:59:59-14:00",
        "9999-12-31T23:59:59.999999Z",
        "1970-01-01T00:00:00Z",
        "1969-12-31T23:59:59Z",
        "9899-12-31T23:59:59Z",
        "9900-01-01T00:00:00Z",
        "2026-02-30T00:00:00Z",
        "2026-01-01T00:00:00",  # no offset
        "not a time",
        "",
    ]
)
_QUANTITIES: Final = st.sampled_from(
    [
        "100E", "1e30", "1Pi", "1023Ti", "1E", "1125899906842623", "1125899906842624", "1125899906842m",
        "9223372036854775807", "9223372036854775808", "-1", "0", "0.000000001", "1n", "1e-30", "1.5", "NaN",
        "", " ", "1Gi", "8", "500m", "9" * 5000,
    ]
)  # fmt: skip
_TEXT: Final = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        ["", "\x00", "a\x00b", "\u202e", "\x1b[31m", "\n", "\ud7ff", "\U0001f600", "%s%n", "'; --"]
    ),
    st.builds(lambda c, n: c * n, st.sampled_from(["x", "\u00e9", "\U0001f600"]), st.integers(3_000, 20_000)),
)


_RECENT: Final = st.datetimes(
    min_value=datetime(2025, 1, 1),  # noqa: DTZ001 - bounds; the zone comes next
    max_value=datetime(2027, 1, 1),  # noqa: DTZ001
    timezones=st.just(UTC),
).map(lambda d: d.isoformat())
_NAMES: Final = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,6}[a-z0-9])?", fullmatch=True)
_BENIGN_RESOURCES: Final = st.dictionaries(
    st.sampled_from(["cpu", "memory", "pods", "nvidia.com/gpu"]),
    st.sampled_from(["1", "500m", "1Gi", "8", 4]),
    max_size=3,
)
_BENIGN_JSON: Final = st.one_of(st.integers(0, 10), _NAMES, st.booleans())


def _time() -> st.SearchStrategy[str]:
    instants = st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31))  # noqa: DTZ001
    aware = st.builds(lambda d, o: d.replace(tzinfo=timezone(o)).isoformat(), instants, _OFFSETS)
    return st.one_of(_RECENT, aware, _TIME_TEXTS)


def _integer(schema: Schema) -> st.SearchStrategy[object]:
    low, high = schema.get("minimum"), schema.get("maximum")
    inside = st.integers(
        min_value=low if low is not None else -(2**63), max_value=high if high is not None else 2**63
    )
    edges = [value for value in (low, high) if value is not None]
    edges += [value + 1 for value in edges] + [value - 1 for value in edges]
    return st.one_of(inside, st.sampled_from([*EXTREME_INTEGERS, *edges]), st.just("1"), st.just(1.5))


def _any_json(depth: int) -> st.SearchStrategy[object]:
    """Any JSON value, up to ``depth`` levels (deep nesting included)."""
    leaves = st.one_of(
        st.none(), st.booleans(), st.sampled_from(EXTREME_INTEGERS), _TEXT, st.floats(allow_nan=False)
    )
    nested = st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
        max_leaves=8,
    )
    deep = st.integers(50, depth).map(lambda n: json.loads("[" * n + "1" + "]" * n))
    return st.one_of(nested, deep)


def _resources() -> st.SearchStrategy[object]:
    names = st.sampled_from(["cpu", "memory", "pods", "nvidia.com/gpu", "Not A Name", ""])
    values = st.one_of(_QUANTITIES, st.sampled_from(EXTREME_INTEGERS))
    return st.dictionaries(names, values, max_size=4)


def _from_schema(schema: Schema, defs: Schema, hostile: bool, depth: int = 0) -> st.SearchStrategy[object]:
    if "$ref" in schema:
        return _from_schema(defs[schema["$ref"].rsplit("/", 1)[-1]], defs, hostile, depth)
    branches = schema.get("anyOf") or schema.get("oneOf")
    if branches:
        return st.one_of([_from_schema(branch, defs, hostile, depth) for branch in branches])
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    return _typed(schema, defs, hostile, depth)


def _typed(schema: Schema, defs: Schema, hostile: bool, depth: int) -> st.SearchStrategy[object]:
    kind = schema.get("type")
    if kind == "object":
        if "properties" in schema:
            return _object(schema, defs, hostile, depth)
        if "Kubernetes ResourceList" in schema.get("description", ""):
            return _resources() if hostile else _BENIGN_RESOURCES
        extra = schema.get("additionalProperties", True)
        if extra is True:
            values = _any_json(200) if hostile else _BENIGN_JSON
        else:
            values = _from_schema(extra, defs, hostile, depth + 1)
        return st.dictionaries(_TEXT if hostile else _NAMES, values, max_size=3)
    if kind == "array":
        items = _from_schema(schema.get("items", {}), defs, hostile, depth + 1)
        return st.lists(items, max_size=3 if depth < 3 else 1)
    if not hostile:
        return _benign(schema)
    leaves: dict[str, st.SearchStrategy[object]] = {
        "string": _time() if schema.get("format") == "date-time" else _TEXT,
        "integer": _integer(schema),
        "boolean": st.booleans(),
        "null": st.none(),
    }
    return leaves.get(str(kind), _any_json(200))


def _benign(schema: Schema) -> st.SearchStrategy[object]:
    """A plausible leaf: what a well-behaved producer sends."""
    kind = schema.get("type")
    if kind == "string":
        return _RECENT if schema.get("format") == "date-time" else _NAMES
    if kind == "integer":
        low = schema.get("minimum", 0)
        return st.integers(low, max(low, min(schema.get("maximum", 100), 100)))
    if kind == "boolean":
        return st.booleans()
    return st.none()


def _object(schema: Schema, defs: Schema, hostile: bool, depth: int) -> st.SearchStrategy[object]:
    properties: Schema = schema["properties"]
    required = set(schema.get("required", ()))
    members = {name: _from_schema(sub, defs, hostile, depth + 1) for name, sub in properties.items()}
    return st.fixed_dictionaries(
        {name: member for name, member in members.items() if name in required},
        optional={name: member for name, member in members.items() if name not in required},
    )


def _schema_documents() -> dict[str, st.SearchStrategy[object]]:
    """Event type -> its documents: half plausible throughout, half with extreme leaves."""
    strategies: dict[str, st.SearchStrategy[object]] = {}
    for event_type in EVENT_TYPES:
        schema = json.loads((PACKAGED_SCHEMAS / f"{event_type}.json").read_text())
        defs = schema.get("$defs", {})
        strategies[event_type] = _from_schema(schema, defs, False) | _from_schema(schema, defs, True)
    return strategies


_DOCUMENTS: Final = _schema_documents()
_ID_TAILS: Final = st.sampled_from(["", "\u00e9", "\U0001f600", "x" * 100])


@st.composite
def _record(draw: st.DrawFn, serial: int, cluster: str) -> tuple[str | None, bytes]:
    """(the event type the record claims, its bytes)."""
    event_type = draw(st.sampled_from(sorted(_DOCUMENTS)))
    document: Any = draw(_DOCUMENTS[event_type])
    document["id"] = f"fuzz-{serial}-{draw(_ID_TAILS)}"
    document["cluster"] = cluster
    document["type"] = event_type
    breakage = draw(
        st.sampled_from(["none"] * 6 + ["drop", "retype", "huge", "long-id", "not-utf8", "not-json"])
    )
    if breakage == "drop":
        document.pop(draw(st.sampled_from(sorted(k for k in document if k not in {"id", "cluster"}))), None)
    elif breakage == "retype":
        document[draw(st.sampled_from(["time", "data", "source", "specversion"]))] = draw(
            st.sampled_from([None, 1, [], {}, "x"])
        )
    elif breakage == "huge":
        # Incompressible: over a btree index row even compressed (the subject is indexed).
        size = draw(st.sampled_from([550_000, 1_100_000]))
        document["subject"] = random.Random(draw(st.integers(0, 2**32))).randbytes(size).hex()
    elif breakage == "long-id":
        document["id"] += random.Random(draw(st.integers(0, 2**32))).randbytes(3_000).hex()
    raw = json.dumps(document, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")
    if breakage == "not-utf8":
        raw = raw[:-1] + b"\xff}"
    elif breakage == "not-json":
        raw = raw[: len(raw) // 2]
    return (event_type, raw)


class Records(list[tuple[str | None, bytes]]):
    """(claimed type, bytes) pairs, shown short: a failing example may hold megabytes."""

    def __repr__(self) -> str:
        shown = [f"{event_type}:{len(raw)}B:{raw[:60]!r}" for event_type, raw in self]
        return f"Records({shown})"


def hostile_records(cluster: str, count: int) -> st.SearchStrategy[Records]:
    """``count`` hostile records of ``cluster``, each with a unique id."""
    return st.tuples(*(_record(serial, cluster) for serial in range(count))).map(Records)


def set_member(path: str, value: object) -> Callable[[dict[str, Any]], None]:
    """An edit of a JSON document: the member at dotted ``path`` (indices as numbers) set to ``value``."""

    def edit(document: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = document
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        target[last] = value

    return edit
