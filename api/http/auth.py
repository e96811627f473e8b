"""Who is asking, and what they may do: bearer tokens (:mod:`api.http.tokens`) and roles.

With no token configured (and no JWKS file), nobody authenticates: reads are
open and writes are taken from loopback clients only.  Once the tokens file
holds one, every ``/v1`` request presents ``Authorization: Bearer <token>``
(a token of the file, or a JWT signed by a key of ``TEPHRA_API_JWKS_FILE``:
:mod:`api.http.jwts`) (401
``unauthenticated`` otherwise) and its role decides (403 ``forbidden``):

=========  ============================================================
viewer     the projection: jobs, queues, nodes, sessions
submitter  the viewer's, plus jobs in and cancelled, and explain, within its
           queues and namespaces (none listed: any)
auditor    the viewer's, plus the archive: explain, sessions, the audit
admin      everything, and the cluster's objects (queues, nodes, priority
           classes, the scheduler configuration)
=========  ============================================================
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.http.context import ApiContext, context
from api.http.jwts import JwtRefused, looks_like_jwt
from api.http.problems import Code, Problem
from api.http.tokens import Role, StoredToken

__all__ = ["Principal", "auditor", "authenticate", "identify", "principal", "viewer"]


@dataclass(frozen=True)
class Principal:
    """The caller: a token's subject and role, or anonymous (no tokens configured)."""

    subject: str
    role: Role | None
    queues: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()
    loopback: bool = False

    @classmethod
    def of(cls, token: StoredToken) -> Principal:
        return cls(token.subject, token.role, token.queues, token.namespaces)

    def may_touch_job(self, namespace: str, queue: str | None) -> bool:
        """Whether this caller may submit, cancel or explain a job of ``namespace`` in ``queue``."""
        if self.role is None or self.role is Role.ADMIN:
            return True
        if self.role is not Role.SUBMITTER:
            return False
        in_queue = not self.queues or (queue is not None and queue in self.queues)
        return in_queue and (not self.namespaces or namespace in self.namespaces)

    def scope_text(self) -> str:
        queues = ", ".join(self.queues) or "any"
        namespaces = ", ".join(self.namespaces) or "any"
        return f"{self.subject} ({self.role}: queues {queues}; namespaces {namespaces})"


def _loopback(request: Request) -> bool:
    host = request.client.host if request.client is not None else ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def identify(ctx: ApiContext, request: Request, presented: str | None) -> Principal:
    """The caller presenting ``presented`` (a bearer token or JWT, or the console's cookie);
    anonymous while nothing authenticates; else the 401 problem saying what is wrong."""
    if not ctx.authenticating():
        return Principal("anonymous", None, loopback=_loopback(request))
    if not presented:
        raise _unauthenticated(
            "this API takes requests with a valid token only: send Authorization: Bearer <token>"
            " (tephra token create makes one)"
        )
    if ctx.jwt_keys is not None and looks_like_jwt(presented):
        try:
            claims = ctx.jwt_keys.verify(presented)
        except JwtRefused as exc:
            raise _unauthenticated(f"that JWT is refused: {exc}") from None
        return Principal(claims.subject, claims.role, claims.queues, claims.namespaces)
    token = ctx.tokens.verify(presented)
    if token is None:
        raise _unauthenticated(
            "that token is not valid (unknown, revoked or mistyped); tephra token create makes one"
        )
    return Principal.of(token)


def authenticate(ctx: ApiContext, request: Request, presented: str | None) -> Principal | None:
    """:func:`identify`, or None for a caller it refuses (the console sends those to its login form)."""
    try:
        return identify(ctx, request, presented)
    except Problem:
        return None


def _unauthenticated(detail: str) -> Problem:
    return Problem(Code.UNAUTHENTICATED, detail, headers={"WWW-Authenticate": 'Bearer realm="tephra"'})


#: The OpenAPI document's security scheme; None when no bearer credentials came (identify decides).
_bearer = HTTPBearer(
    auto_error=False,
    bearerFormat="tph_<id>_<secret> (tephra token create) or a JWT (TEPHRA_API_JWKS_FILE)",
    description="required once a token exists or a JWKS file is configured; until then, none",
)


async def principal(
    request: Request,
    ctx: Annotated[ApiContext, Depends(context)],
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The dependency: the caller, authenticated when tokens or JWTs are configured."""
    return identify(ctx, request, bearer.credentials.strip() if bearer is not None else None)


Caller = Annotated[Principal, Depends(principal)]


def _forbidden(who: Principal, what: str) -> Problem:
    return Problem(Code.FORBIDDEN, f"{who.scope_text()} may not {what}")


async def viewer(who: Caller) -> Principal:
    """Any authenticated caller (every role reads the projection)."""
    return who


async def auditor(who: Caller) -> Principal:
    """The archive's routes: auditors and admins (and anybody while no tokens exist)."""
    if who.role not in (None, Role.AUDITOR, Role.ADMIN):
        raise _forbidden(who, "read the archive (sessions, the preemption audit): that takes an auditor")
    return who


async def writer(request: Request, who: Caller) -> Principal:
    """A caller that may write at all: a submitter or admin; anonymous only from loopback."""
    if who.role is None and not who.loopback:
        host = request.client.host if request.client is not None else "this client"
        raise Problem(
            Code.WRITES_NEED_LOOPBACK,
            f"writes are taken from loopback clients only while no API tokens are configured;"
            f" {host} is not loopback: submit from the API's host, or create tokens (tephra token create)",
        )
    if who.role in (Role.VIEWER, Role.AUDITOR):
        raise _forbidden(who, "write: that takes a submitter or an admin")
    return who


def forbidden(who: Principal, what: str) -> Problem:
    return _forbidden(who, what)
