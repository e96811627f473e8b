"""What PostgreSQL cannot store: U+0000 in text.

An event is valid JSON and a valid model with a NUL character in a string,
but no PostgreSQL ``text`` or ``json`` value can hold one (``json`` accepts
the escape, and fails as soon as it is read as text).  Archived, such an
event would fail its batch's COPY -- and, first, the duplicate check's query
-- on every retry: the projector would stop for good on one record.  So the
writer refuses it with a reason, like any other record it cannot archive.
"""

from __future__ import annotations

from typing import Final

import orjson

__all__ = ["nul_path"]

# JSON spells U+0000 only as this escape (a raw NUL byte is not JSON).
_NUL_ESCAPE: Final = b"\\u0000"


def nul_path(raw: bytes) -> str | None:
    """The dotted path of the first string in the JSON ``raw`` holding U+0000, or None.

    Member names count.  A NUL in a name is written ``\\u0000`` in the path,
    which goes into the rejection's text.
    """
    # No backslash (one memchr, nearly every record) or no such escape: no NUL.
    if raw.find(b"\\") < 0 or raw.find(_NUL_ESCAPE) < 0:
        return None
    return _nul_at(orjson.loads(raw), "")  # an escaped backslash before "u0000" looks alike


def _nul_at(value: object, path: str) -> str | None:
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            name = key.replace("\x00", "\\u0000")
            inner = f"{path}.{name}" if path else name
            if "\x00" in key:
                return inner
            if (found := _nul_at(item, inner)) is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            if (found := _nul_at(item, f"{path}.{index}" if path else str(index))) is not None:
                return found
    return None
