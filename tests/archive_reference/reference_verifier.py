"""A verifier of Tephra archives written from docs/archive-format.md alone.

Standard library only, and no import of Tephra: it is the auditor's view of
the format.  A row is a mapping with the ``event_log`` columns (as in the
golden archives: ``time`` as text or as an aware datetime, ``data`` as text,
hashes as bytes or lowercase hex).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

__all__ = ["ZERO_HASH", "ChainError", "canonical_bytes", "canonical_text", "time_text", "verify"]

ZERO_HASH = bytes(32)


class ChainError(ValueError):
    """The first row of an archive that does not verify."""

    def __init__(self, seq: int, problem: str) -> None:
        self.seq = seq
        self.problem = problem
        super().__init__(f"seq {seq}: {problem}")


def canonical_text(value: Any) -> str:
    """ "Canonical JSON text of a value": sorted members, no whitespace, characters as they are."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def time_text(value: datetime) -> str:
    """ "Time text": the instant in UTC, YYYY-MM-DDTHH:MM:SS, .ffffff unless 0 microseconds, Z."""
    utc = value.astimezone(UTC)
    text = f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}"
    if utc.microsecond:
        text += f".{utc.microsecond:06d}"
    return text + "Z"


def _time(value: str | datetime) -> str:
    if isinstance(value, datetime):
        return time_text(value)
    # The text must itself be the time text of the instant it names.
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if time_text(parsed) != value:
        raise ValueError(f"time {value!r} is not in the canonical form")
    return value


def canonical_bytes(row: Mapping[str, Any]) -> bytes:
    """ "The canonical bytes" of a row: the canonical text of its event's JSON value, in UTF-8."""
    data_text = row["data"]
    data = json.loads(data_text)
    if canonical_text(data) != data_text:
        raise ValueError("the data column is not canonical JSON text")
    event: dict[str, Any] = {
        "cluster": row["cluster"],
        "data": data,
        "datacontenttype": "application/json",
        "id": row["event_id"],
        "source": row["source"],
        "specversion": "1.0",
        "time": _time(row["time"]),
        "type": row["type"],
    }
    if row["subject"] is not None:
        event["subject"] = row["subject"]
    # Archives from before signing have no principal column (the golden files): no member.
    if row.get("principal") is not None:
        event["principal"] = row["principal"]
    return canonical_text(event).encode("utf-8")


def _bytes(value: bytes | str) -> bytes:
    return bytes.fromhex(value) if isinstance(value, str) else bytes(value)


def verify(rows: Iterable[Mapping[str, Any]]) -> bytes:
    """Check "the chain" over ``rows`` (seq order, from seq 1); return the last hash.

    Raises:
        ChainError: at the first row that does not verify.
    """
    expected_seq = 1
    previous = ZERO_HASH
    for row in rows:
        seq = row["seq"]
        if seq != expected_seq:
            raise ChainError(expected_seq, f"row missing (the next row is seq {seq})")
        prev_hash, stored = _bytes(row["prev_hash"]), _bytes(row["hash"])
        if prev_hash != previous:
            raise ChainError(seq, "prev_hash is not the previous row's hash")
        try:
            canonical = canonical_bytes(row)
        except ValueError as exc:
            raise ChainError(seq, str(exc)) from None
        if hashlib.sha256(prev_hash + canonical).digest() != stored:
            raise ChainError(seq, "hash does not match the row's content")
        previous = stored
        expected_seq += 1
    return previous
