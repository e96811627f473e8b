"""A verifier of Tephra archives written from docs/archive-format.md alone.

The standard library, plus the ``cryptography`` package for the Ed25519
signatures of checkpoints only, and no import of Tephra: it is the auditor's
view of the format.  A row is a mapping with the ``event_log`` columns (as in
the golden archives: ``time`` and ``recorded_at`` as text or as an aware
datetime, ``data`` as text, hashes as bytes or lowercase hex; a row without
``chain_format`` is of format 1).  A checkpoint is a record's parsed JSON object.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

__all__ = [
    "ZERO_HASH",
    "ChainError",
    "CheckpointProblem",
    "canonical_bytes",
    "canonical_text",
    "hashed_bytes",
    "time_text",
    "trusted_checkpoints",
    "verify",
    "verify_against_checkpoints",
]

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


def hashed_bytes(row: Mapping[str, Any]) -> bytes:
    """ "The row's hashed bytes": format 2's object of every column, format 1's canonical bytes alone."""
    chain_format = row.get("chain_format", 1)
    if chain_format == 1:
        return canonical_bytes(row)
    if chain_format != 2:
        raise ValueError(f"chain format {chain_format!r} is not 1 or 2")
    whole: dict[str, Any] = {
        "event": json.loads(canonical_bytes(row)),
        "format": 2,
        "job": row["job"],
        "kafka_offset": row["kafka_offset"],
        "partition": row["partition"],
        "recorded_at": _time(row["recorded_at"]),
        "seq": row["seq"],
        "signature": row.get("signature"),
        "topic": row["topic"],
        "traceparent": row["traceparent"],
    }
    return canonical_text(whole).encode("utf-8")


def _bytes(value: bytes | str) -> bytes:
    return bytes.fromhex(value) if isinstance(value, str) else bytes(value)


def verify(rows: Iterable[Mapping[str, Any]]) -> bytes:
    """Check "the chain" over ``rows`` (seq order, from seq 1); return the last hash.

    Raises:
        ChainError: at the first row that does not verify.
    """
    return _walk(rows, {})


def _walk(rows: Iterable[Mapping[str, Any]], heads: dict[int, bytes]) -> bytes:
    """:func:`verify`, keeping each row's hash in ``heads`` by seq."""
    expected_seq = 1
    previous = ZERO_HASH
    newest_format = 1
    for row in rows:
        seq = row["seq"]
        if seq != expected_seq:
            raise ChainError(expected_seq, f"row missing (the next row is seq {seq})")
        chain_format = row.get("chain_format", 1)
        if chain_format not in (1, 2):
            raise ChainError(seq, f"chain format {chain_format!r} is not 1 or 2")
        if chain_format < newest_format:
            raise ChainError(seq, "format 1 after format 2")
        newest_format = chain_format
        prev_hash, stored = _bytes(row["prev_hash"]), _bytes(row["hash"])
        if prev_hash != previous:
            raise ChainError(seq, "prev_hash is not the previous row's hash")
        try:
            hashed = hashed_bytes(row)
        except ValueError as exc:
            raise ChainError(seq, str(exc)) from None
        if hashlib.sha256(prev_hash + hashed).digest() != stored:
            raise ChainError(seq, "hash does not match the row's content")
        heads[seq] = stored
        previous = stored
        expected_seq += 1
    return previous


# ---------------------------------------------------------------------------- checkpoints


class CheckpointProblem(ValueError):
    """What comparing an archive with its checkpoints found: truncation, rehash, a bad record."""

    def __init__(self, kind: str, seq: int, detail: str) -> None:
        self.kind = kind
        self.seq = seq
        super().__init__(f"{kind} at seq {seq}: {detail}")


def _unbase64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _signed(record: Mapping[str, Any], public_key: str) -> bool:
    """Whether the record's signature is the key's over "the signed bytes"."""
    unsigned = {key: value for key, value in record.items() if key != "signature"}
    try:
        key = Ed25519PublicKey.from_public_bytes(_unbase64(public_key))
        key.verify(_unbase64(record["signature"]), canonical_text(unsigned).encode("utf-8"))
    except (InvalidSignature, ValueError, binascii.Error, KeyError, TypeError):
        return False
    return True


def trusted_checkpoints(
    records: Iterable[Mapping[str, Any]], public_key: str, cluster: str
) -> tuple[dict[int, bytes], list[CheckpointProblem]]:
    """Step 1 of "Verifying an archive against checkpoints": seq -> signed head, and the records refused."""
    heads: dict[int, bytes] = {}
    refused: list[CheckpointProblem] = []
    for record in records:
        if record.get("type") != "tephra.checkpoint.v1" or record.get("cluster") != cluster:
            continue
        seq = record.get("seq")
        if not isinstance(seq, int):
            continue
        if record.get("public_key") != public_key or not _signed(record, public_key):
            refused.append(CheckpointProblem("unsigned", seq, "not signed by the trusted key"))
            continue
        head = bytes.fromhex(record["head"])
        if heads.get(seq, head) != head:
            refused.append(CheckpointProblem("forked", seq, "two signed heads for one seq"))
            continue
        heads[seq] = head
    return heads, refused


def verify_against_checkpoints(
    rows: Iterable[Mapping[str, Any]], records: Iterable[Mapping[str, Any]], public_key: str, cluster: str
) -> list[CheckpointProblem]:
    """Steps 1-3: the problems found (empty: the archive verifies against its checkpoints).

    Raises:
        ChainError: the chain itself does not verify (step 2).
    """
    signed, problems = trusted_checkpoints(records, public_key, cluster)
    archived: dict[int, bytes] = {}
    _walk(rows, archived)
    last = max(archived, default=0)
    for seq, head in sorted(signed.items()):
        if seq > last:
            problems.append(CheckpointProblem("truncated", seq, f"the archive ends at seq {last}"))
        elif archived[seq] != head:
            problems.append(CheckpointProblem("rehashed", seq, "the row's hash is not the signed head"))
    return problems
