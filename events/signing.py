"""Ed25519 keys and signatures: the one place Tephra signs and checks bytes.

Who signs what (scheduler sessions, leadership changes, producers' events,
the projector's checkpoints) is decided by the callers; this module knows
keys and bytes, and how an event is signed: :func:`sign_event` sets its
``principal`` and signs its canonical bytes (:mod:`events.canonical`, which
include the principal and leave the signature out), :func:`event_signed_by`
checks one.  Signatures travel as unpadded URL-safe base64 text and
public keys as the 32 raw bytes in the same text form, so a producer in
another language needs nothing but an Ed25519 library and a base64 encoder.
Private keys are stored as PKCS#8 PEM files, readable by the owner only.
"""

from __future__ import annotations

import base64
import binascii
import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from events.canonical import canonical_json
from events.models import Event

#: Any one event type (signing keeps the type).
E = TypeVar("E", bound=Event)


class SigningKeyError(ValueError):
    """A key file or key text that cannot be used; the message says why and what to do."""


def b64encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def b64decode(text: str) -> bytes:
    """Unpadded or padded URL-safe base64; raises ``ValueError`` on anything else."""
    padded = text + "=" * (-len(text) % 4)
    try:
        return base64.urlsafe_b64decode(padded.encode("ascii"))
    except (binascii.Error, UnicodeEncodeError) as err:
        raise ValueError(f"not URL-safe base64: {err}") from err


@dataclass(frozen=True, slots=True)
class SigningKey:
    """A private key and the text form of its public half."""

    private: Ed25519PrivateKey

    @property
    def public_key(self) -> str:
        raw = self.private.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        return b64encode(raw)

    def sign(self, data: bytes) -> str:
        return b64encode(self.private.sign(data))

    @classmethod
    def generate(cls) -> SigningKey:
        return cls(Ed25519PrivateKey.generate())

    def pem(self) -> bytes:
        return self.private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )


def load_signing_key(path: Path) -> SigningKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except FileNotFoundError as err:
        raise SigningKeyError(f"no key file at {path}: create one with `tephra key create {path}`") from err
    except ValueError as err:
        raise SigningKeyError(f"{path} is not an unencrypted PKCS#8 PEM private key: {err}") from err
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningKeyError(f"{path} holds a {type(key).__name__}, not an Ed25519 private key")
    return SigningKey(key)


def load_or_create_signing_key(path: Path) -> SigningKey:
    """The key at ``path``, created (mode 0600) when the file does not exist: the embedded stack's way."""
    if path.exists():
        return load_signing_key(path)
    key = SigningKey.generate()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(key.pem())
    return key


def sign_event(event: E, key: SigningKey, principal: str) -> E:
    """``event`` as ``principal`` produces it: the attribute set, its canonical bytes signed."""
    # model_copy keeps the class; mypy sees the catalogue's union (the TypeVar's bound).
    claimed = cast("E", event.model_copy(update={"principal": principal, "signature": None}))
    return cast("E", claimed.model_copy(update={"signature": key.sign(canonical_json(claimed))}))


@dataclass(frozen=True, slots=True)
class EventSigner:
    """A producer's identity: its key and the principal it signs as."""

    key: SigningKey
    principal: str

    def sign(self, event: E) -> E:
        """:func:`sign_event` as this producer (as ``principal:subject`` with ``on_behalf_of``)."""
        return sign_event(event, self.key, self.principal)

    def on_behalf_of(self, subject: str) -> EventSigner:
        """This producer vouching for ``subject`` (principal ``NAME:SUBJECT``: docs/producers.md)."""
        return EventSigner(self.key, f"{self.principal}:{subject}")


def event_signed_by(event: Event, public_key: Ed25519PublicKey, canonical: bytes | None = None) -> bool:
    """True when ``event`` carries ``public_key``'s signature of its canonical bytes
    (``canonical``, when the caller has them already)."""
    signature = event.signature
    if signature is None:
        return False
    return verify(public_key, canonical_json(event) if canonical is None else canonical, signature)


@functools.lru_cache(maxsize=1_024)
def public_key_of(text: str) -> Ed25519PublicKey:
    """:func:`parse_public_key`, remembered: the fold and the projector check the same few keys."""
    return parse_public_key(text)


def parse_public_key(text: str) -> Ed25519PublicKey:
    """A public key in its text form (32 raw bytes, URL-safe base64)."""
    try:
        raw = b64decode(text.strip())
    except ValueError as err:
        raise SigningKeyError(f"public key {text!r}: {err}") from err
    if len(raw) != 32:
        raise SigningKeyError(f"public key {text!r}: {len(raw)} bytes, an Ed25519 public key has 32")
    return Ed25519PublicKey.from_public_bytes(raw)


def verify(public_key: Ed25519PublicKey, data: bytes, signature: str) -> bool:
    """True when ``signature`` (text form) is ``public_key``'s signature of ``data``."""
    try:
        raw = b64decode(signature)
    except ValueError:
        return False
    if len(raw) != 64:
        return False
    try:
        public_key.verify(raw, data)
    except InvalidSignature:
        return False
    return True
