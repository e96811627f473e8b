"""API tokens: bearer secrets stored hashed, each with a subject, a role and its scope.

``tephra token create`` prints a token once: ``tph_<id>_<secret>``.  The
file (``TEPHRA_API_TOKENS_FILE``) keeps, per token, its id, subject, role,
queues, namespaces, creation time, whether it is revoked, and the SHA-256 of
the secret, never the secret.  (A random 256-bit secret needs no slow hash:
nobody can guess it from its digest.)  A presented token is looked up by id
and its digest compared in constant time (:func:`hmac.compare_digest`).

The API reads the file again whenever it changed, so a token created or
revoked takes effect at the next request, without a restart.  Writes are
atomic (a rename).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

__all__ = ["Role", "StoredToken", "TokenError", "TokenStore", "create_token", "revoke_token"]

PREFIX = "tph"


class Role(StrEnum):
    """What a token may do (docs/api.md has the table)."""

    VIEWER = "viewer"
    SUBMITTER = "submitter"
    AUDITOR = "auditor"
    ADMIN = "admin"


class TokenError(ValueError):
    """A token file or an argument that cannot be used; the message says which and why."""


@dataclass(frozen=True)
class StoredToken:
    id: str
    subject: str
    role: Role
    digest: str  # hex SHA-256 of the secret
    created: str
    queues: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()
    revoked: bool = False

    def to_json(self) -> dict[str, object]:
        scope = {"queues": list(self.queues), "namespaces": list(self.namespaces)}
        return {**asdict(self), "role": self.role.value, **scope}


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _load(path: Path) -> list[StoredToken]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise TokenError(f"{path} is unreadable ({exc}); restore it or delete it to start over") from None
    try:
        return [
            StoredToken(
                id=str(t["id"]),
                subject=str(t["subject"]),
                role=Role(t["role"]),
                digest=str(t["digest"]),
                created=str(t["created"]),
                queues=tuple(str(q) for q in t.get("queues", ())),
                namespaces=tuple(str(n) for n in t.get("namespaces", ())),
                revoked=bool(t.get("revoked", False)),
            )
            for t in raw["tokens"]
        ]
    except (KeyError, TypeError, ValueError) as exc:
        raise TokenError(f"{path} does not hold Tephra API tokens ({exc!r}); restore or delete it") from None


def _save(path: Path, tokens: list[StoredToken]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    text = json.dumps({"tokens": [t.to_json() for t in tokens]}, indent=2) + "\n"
    # Only the owner reads the digests (they are not secrets, but nobody else needs them).
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    tmp.replace(path)


def create_token(
    path: Path,
    *,
    subject: str,
    role: Role,
    queues: tuple[str, ...] = (),
    namespaces: tuple[str, ...] = (),
    now: datetime | None = None,
) -> tuple[str, StoredToken]:
    """Add a token to the file; returns the token (shown once) and what is stored of it."""
    if not subject:
        raise TokenError("--subject must name who the token is for")
    if (queues or namespaces) and role is not Role.SUBMITTER:
        raise TokenError("--queue and --namespace limit a submitter; other roles are not limited by them")
    tokens = _load(path)
    token_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    stored = StoredToken(
        id=token_id,
        subject=subject,
        role=role,
        digest=_digest(secret),
        created=(now or datetime.now(UTC)).isoformat(),
        queues=tuple(sorted(set(queues))),
        namespaces=tuple(sorted(set(namespaces))),
    )
    _save(path, [*tokens, stored])
    return f"{PREFIX}_{token_id}_{secret}", stored


def revoke_token(path: Path, token_id: str) -> StoredToken:
    tokens = _load(path)
    found = next((t for t in tokens if t.id == token_id), None)
    if found is None:
        raise TokenError(f"no token {token_id!r} in {path}; `tephra token list` shows them")
    revoked = replace(found, revoked=True)
    _save(path, [revoked if t.id == token_id else t for t in tokens])
    return revoked


@dataclass
class TokenStore:
    """The tokens of one file, read again whenever the file changed."""

    path: Path
    _stamp: tuple[int, int] | None = None
    _tokens: dict[str, StoredToken] = field(default_factory=dict)

    def _refresh(self) -> None:
        try:
            info = self.path.stat()
            stamp: tuple[int, int] | None = (info.st_mtime_ns, info.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp != self._stamp:
            self._tokens = {t.id: t for t in _load(self.path)} if stamp is not None else {}
            self._stamp = stamp

    def configured(self) -> bool:
        """Whether any token (revoked ones too) exists: then every request must present one."""
        self._refresh()
        return bool(self._tokens)

    def all(self) -> list[StoredToken]:
        self._refresh()
        return list(self._tokens.values())

    def verify(self, presented: str) -> StoredToken | None:
        """The live token ``presented`` is, or None (malformed, unknown, wrong secret, revoked)."""
        self._refresh()
        prefix, _, rest = presented.partition("_")
        token_id, _, secret = rest.partition("_")
        if prefix != PREFIX or not token_id or not secret:
            return None
        stored = self._tokens.get(token_id)
        if stored is None:
            # Compare anyway, so an unknown id takes as long as a wrong secret.
            hmac.compare_digest(_digest(secret), _digest(""))
            return None
        if not hmac.compare_digest(_digest(secret), stored.digest) or stored.revoked:
            return None
        return stored
