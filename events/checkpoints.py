"""Signed checkpoints of the archive's hash chain: the record, its signed bytes, its checks.

A checkpoint says "after ``seq`` events, the chain head of cluster ``cluster``
was ``head``", at ``time``, signed by the projector's Ed25519 key — the
archive's counterpart of Certificate Transparency's signed tree heads.  The
projector publishes them to the ``<prefix>.checkpoints`` topic, which the
database cannot rewrite; ``replay verify --checkpoints`` compares the archive
with them.  ``docs/archive-format.md`` ("Checkpoints") specifies the record
and the signed bytes for auditors; this module is their one implementation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from events.jsonform import time_text
from events.signing import SigningKey, SigningKeyError, parse_public_key, verify

__all__ = ["CHECKPOINT_TYPE", "Checkpoint", "CheckpointError", "parse_checkpoint", "sign_checkpoint"]

#: The record's ``type`` member (a new layout would be a new type).
CHECKPOINT_TYPE: Final = "tephra.checkpoint.v1"
_HEX_HASH_LENGTH: Final = 64
_dumps: Final = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
).encode


class CheckpointError(ValueError):
    """A checkpoint record that is not one (the message says what is wrong)."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One signed checkpoint (a record of the checkpoint topic, or a line of a kept file)."""

    cluster: str
    seq: int
    head: bytes
    #: The time text (``docs/archive-format.md``), UTC.
    time: str
    #: The signer's public key and the signature, in events.signing's text form.
    public_key: str
    signature: str

    def unsigned(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "head": self.head.hex(),
            "public_key": self.public_key,
            "seq": self.seq,
            "time": self.time,
            "type": CHECKPOINT_TYPE,
        }

    def signed_bytes(self) -> bytes:
        """What the signature covers: the canonical JSON text of the record without ``signature``."""
        return _dumps(self.unsigned()).encode()

    def record(self) -> bytes:
        """The record as published: the canonical JSON text of every member, UTF-8."""
        return _dumps({**self.unsigned(), "signature": self.signature}).encode()

    def signed_by(self, public_key: str) -> bool:
        """Whether the record names ``public_key`` and carries its valid signature of :meth:`signed_bytes`."""
        if self.public_key != public_key:
            return False
        try:
            key = parse_public_key(public_key)
        except SigningKeyError:
            return False
        return verify(key, self.signed_bytes(), self.signature)


def sign_checkpoint(key: SigningKey, *, cluster: str, seq: int, head: bytes, at: datetime) -> Checkpoint:
    """A checkpoint of ``head`` at ``seq``, signed with ``key`` (``at``: an aware time, written in UTC)."""
    unsigned = Checkpoint(cluster, seq, head, time_text(at.astimezone(UTC)), key.public_key, "")
    return Checkpoint(cluster, seq, head, unsigned.time, key.public_key, key.sign(unsigned.signed_bytes()))


def parse_checkpoint(text: str | bytes) -> Checkpoint:
    """A checkpoint from its record (any JSON spelling of the members; the signature is not checked).

    Raises:
        CheckpointError: not JSON, or a member missing or of the wrong kind.
    """
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise CheckpointError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise CheckpointError("not a JSON object")
    if value.get("type") != CHECKPOINT_TYPE:
        raise CheckpointError(f"type is {value.get('type')!r}, not {CHECKPOINT_TYPE!r}")
    texts = {name: value.get(name) for name in ("cluster", "head", "public_key", "signature", "time")}
    if wrong := sorted(name for name, member in texts.items() if not isinstance(member, str)):
        raise CheckpointError(f"missing or not a string: {', '.join(wrong)}")
    seq = value.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        raise CheckpointError(f"seq is {seq!r}, not a positive integer")
    head = str(texts["head"])
    if len(head) != _HEX_HASH_LENGTH or head != head.lower():
        raise CheckpointError(f"head {head!r} is not 64 lowercase hexadecimal digits")
    try:
        head_bytes = bytes.fromhex(head)
    except ValueError:
        raise CheckpointError(f"head {head!r} is not 64 lowercase hexadecimal digits") from None
    return Checkpoint(
        str(texts["cluster"]),
        seq,
        head_bytes,
        str(texts["time"]),
        str(texts["public_key"]),
        str(texts["signature"]),
    )
