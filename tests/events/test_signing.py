"""events.signing: keys round-trip through files and text, and a signature binds key and bytes."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from events.signing import (
    SigningKey,
    SigningKeyError,
    load_or_create_signing_key,
    load_signing_key,
    parse_public_key,
    verify,
)


def test_signature_verifies_only_for_its_key_and_bytes() -> None:
    key, other = SigningKey.generate(), SigningKey.generate()
    signature = key.sign(b"session 7")
    assert verify(parse_public_key(key.public_key), b"session 7", signature)
    assert not verify(parse_public_key(key.public_key), b"session 8", signature)
    assert not verify(parse_public_key(other.public_key), b"session 7", signature)
    assert not verify(parse_public_key(key.public_key), b"session 7", "not base64!")
    assert not verify(parse_public_key(key.public_key), b"session 7", signature[:-4])


def test_key_file_is_created_private_and_loads_back(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "scheduler.pem"
    created = load_or_create_signing_key(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_signing_key(path).public_key == created.public_key
    assert load_signing_key(path).sign(b"x") == created.sign(b"x")  # Ed25519 is deterministic


def test_bad_keys_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(SigningKeyError, match="no key file"):
        load_signing_key(tmp_path / "missing.pem")
    (tmp_path / "junk.pem").write_text("hello")
    with pytest.raises(SigningKeyError, match="PKCS#8"):
        load_signing_key(tmp_path / "junk.pem")
    with pytest.raises(SigningKeyError, match="32"):
        parse_public_key("AAAA")
