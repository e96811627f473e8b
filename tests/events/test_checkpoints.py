"""Checkpoint records: signed bytes, the published record, parsing, and what a signature proves."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from events.checkpoints import CheckpointError, parse_checkpoint, sign_checkpoint
from events.signing import SigningKey

_AT = datetime(2026, 1, 5, 10, 0, 0, 250, tzinfo=UTC)


def test_a_record_reads_back_and_its_signature_holds() -> None:
    key = SigningKey.generate()
    checkpoint = sign_checkpoint(key, cluster="c", seq=42, head=bytes(range(32)), at=_AT)
    record = checkpoint.record()
    assert parse_checkpoint(record) == checkpoint
    assert checkpoint.signed_by(key.public_key)
    # The signed bytes are the record's canonical text without its signature.
    value = json.loads(record)
    del value["signature"]
    assert checkpoint.signed_bytes() == json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    assert value == {
        "cluster": "c",
        "head": bytes(range(32)).hex(),
        "public_key": key.public_key,
        "seq": 42,
        "time": "2026-01-05T10:00:00.000250Z",
        "type": "tephra.checkpoint.v1",
    }
    # Any JSON spelling of the same members is the same checkpoint.
    assert parse_checkpoint(json.dumps(json.loads(record), indent=2)) == checkpoint


def test_the_time_is_written_in_utc() -> None:
    key = SigningKey.generate()
    elsewhere = _AT.astimezone(timezone(timedelta(hours=2)))
    assert (
        sign_checkpoint(key, cluster="c", seq=1, head=bytes(32), at=elsewhere).time
        == "2026-01-05T10:00:00.000250Z"
    )


def test_another_key_or_an_altered_member_is_not_signed() -> None:
    key, stranger = SigningKey.generate(), SigningKey.generate()
    checkpoint = sign_checkpoint(key, cluster="c", seq=7, head=bytes(32), at=_AT)
    assert not checkpoint.signed_by(stranger.public_key)
    altered = json.loads(checkpoint.record())
    altered["seq"] = 8
    assert not parse_checkpoint(json.dumps(altered)).signed_by(key.public_key)
    claimed = json.loads(sign_checkpoint(stranger, cluster="c", seq=7, head=bytes(32), at=_AT).record())
    claimed["public_key"] = key.public_key  # naming the trusted key does not make the signature its
    assert not parse_checkpoint(json.dumps(claimed)).signed_by(key.public_key)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"type": "tephra.other.v1"}, "type"),
        ({"seq": 0}, "seq"),
        ({"seq": True}, "seq"),
        ({"head": "AB" * 32}, "lowercase hexadecimal"),
        ({"head": "ab"}, "lowercase hexadecimal"),
        ({"signature": None}, "signature"),
    ],
)
def test_a_record_that_is_not_a_checkpoint_says_why(change: dict[str, object], message: str) -> None:
    record = json.loads(
        sign_checkpoint(SigningKey.generate(), cluster="c", seq=3, head=bytes(32), at=_AT).record()
    )
    with pytest.raises(CheckpointError, match=message):
        parse_checkpoint(json.dumps({**record, **change}))
    with pytest.raises(CheckpointError, match="not JSON"):
        parse_checkpoint(b"{")
