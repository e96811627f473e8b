"""Bearer JWTs verified against a JWKS file (``TEPHRA_API_JWKS_FILE``), beside the API's own tokens.

A JWT is accepted when it is signed by a key of the file (found by the
header's ``kid``, verified with that key's own algorithm: RS256, PS256,
ES256/384/512 or EdDSA; never ``none`` or a shared secret), carries
``TEPHRA_API_JWT_ISSUER`` as ``iss``, names ``TEPHRA_API_JWT_AUDIENCE`` in
``aud``, and has not expired (``exp``, required; ``nbf`` and ``iat`` when
present), within ``TEPHRA_API_JWT_LEEWAY`` seconds of skew.  Its claims map
onto a principal as a token's fields do:

=====================  ======================================================
``sub``                the subject (required): who the archive and logs name
``tephra_role``        ``viewer``, ``submitter``, ``auditor`` or ``admin`` (required)
``tephra_queues``      a submitter's queues (a list of strings; absent: any)
``tephra_namespaces``  a submitter's namespaces (a list of strings; absent: any)
=====================  ======================================================

The file is read again whenever it changed, so keys rotate without a
restart; a file that no longer parses keeps the keys read before (and says
so in the log).  A JWT cannot be revoked here: it lasts until its ``exp``, or
until its key leaves the file.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import jwt

from api.http.tokens import Role

__all__ = ["CLAIMS", "JwtClaims", "JwtKeys", "JwtRefused", "looks_like_jwt"]

log = logging.getLogger(__name__)

#: The claims read, by what they become.
CLAIMS = {
    "subject": "sub",
    "role": "tephra_role",
    "queues": "tephra_queues",
    "namespaces": "tephra_namespaces",
}

# Public-key algorithms only: a JWKS file's "oct" (shared secret) key would let anybody who can
# read the file mint tokens, and "none" signs nothing.
_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)


class JwtRefused(Exception):
    """A JWT that is not accepted; the message says why (expired, wrong issuer, unknown key ...)."""


def looks_like_jwt(presented: str) -> bool:
    """Three base64url parts separated by dots (a compact JWS); the API's own tokens have none."""
    return presented.count(".") == 2


@dataclass(frozen=True)
class JwtClaims:
    """What a verified JWT says about its bearer."""

    subject: str
    role: Role
    queues: tuple[str, ...]
    namespaces: tuple[str, ...]


def _keys(path: Path) -> dict[str, jwt.PyJWK]:
    """The file's usable keys by ``kid``; raises JwtRefused naming what is wrong with the file."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        found = jwt.PyJWKSet.from_dict(document).keys
    except (OSError, ValueError, jwt.PyJWKSetError, jwt.PyJWKError) as exc:
        raise JwtRefused(f"the JWKS file {path} cannot be used: {exc}") from None
    keys = {key.key_id: key for key in found if key.key_id and key.algorithm_name in _ALGORITHMS}
    if not keys:
        raise JwtRefused(
            f"the JWKS file {path} has no public key with a kid and one of {', '.join(sorted(_ALGORITHMS))}"
        )
    return keys


def _strings(claims: dict[str, object], name: str) -> tuple[str, ...]:
    value = claims.get(name, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise JwtRefused(f"its {name} claim is not a list of strings")
    return tuple(sorted(set(value)))


@dataclass
class JwtKeys:
    """The keys of one JWKS file, with the issuer and audience every JWT must carry."""

    path: Path
    issuer: str
    audience: str
    leeway: float = 30.0
    _stamp: tuple[int, int] | None = None
    _keys: dict[str, jwt.PyJWK] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._refresh(strict=True)

    def _refresh(self, *, strict: bool = False) -> None:
        try:
            info = self.path.stat()
            stamp = (info.st_mtime_ns, info.st_size)
            if stamp == self._stamp:
                return
            self._keys = _keys(self.path)
            self._stamp = stamp
        except (OSError, JwtRefused) as exc:
            if strict:
                raise JwtRefused(f"TEPHRA_API_JWKS_FILE: {exc}") from None
            log.error("keeping the JWT keys read before: %s", exc)  # noqa: TRY400  (the reason says it all)

    def verify(self, presented: str) -> JwtClaims:
        """The claims of a JWT signed by one of the keys, for this issuer and audience; else JwtRefused."""
        self._refresh()
        try:
            header = jwt.get_unverified_header(presented)
        except jwt.InvalidTokenError as exc:
            raise JwtRefused(f"it is not a JWT ({exc})") from None
        kid = header.get("kid")
        key = self._keys.get(kid) if isinstance(kid, str) else None
        if key is None:
            raise JwtRefused(f"its key id (kid) {kid!r} is not in the JWKS file")
        try:
            claims: dict[str, object] = jwt.decode(
                presented,
                key,
                algorithms=[key.algorithm_name],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.ExpiredSignatureError:
            raise JwtRefused("it has expired") from None
        except jwt.InvalidIssuerError:
            raise JwtRefused(f"its issuer (iss) is not {self.issuer}") from None
        except jwt.InvalidAudienceError:
            raise JwtRefused(f"its audience (aud) does not name {self.audience}") from None
        except jwt.InvalidSignatureError:
            raise JwtRefused("its signature does not verify with its key") from None
        except jwt.InvalidTokenError as exc:
            raise JwtRefused(str(exc)) from None
        return self._claims(claims)

    @staticmethod
    def _claims(claims: dict[str, object]) -> JwtClaims:
        subject, role = claims.get(CLAIMS["subject"]), claims.get(CLAIMS["role"])
        if not isinstance(subject, str) or not subject:
            raise JwtRefused("its sub claim is empty")
        roles = ", ".join(r.value for r in Role)
        if not isinstance(role, str) or role not in {r.value for r in Role}:
            raise JwtRefused(f"its {CLAIMS['role']} claim is {role!r}, none of {roles}")
        return JwtClaims(
            subject, Role(role), _strings(claims, CLAIMS["queues"]), _strings(claims, CLAIMS["namespaces"])
        )
