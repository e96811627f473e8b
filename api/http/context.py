"""What the routes work with: one PostgreSQL pool and one Kafka producer per process.

Opened before the server starts (:func:`open_context`) and handed to routes
by the :func:`context` dependency.  A database or broker that does not answer is
a 503 problem, not a failed request.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import asyncpg
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from fastapi import Request

from api.access import ServiceAccess
from api.endpoints import Endpoints
from api.http.jwts import JwtKeys, JwtRefused
from api.http.problems import Code, Problem
from api.http.settings import ApiSettings
from api.http.tokens import TokenStore
from events.signing import EventSigner
from projector.connections import DatabaseAccess, create_pool, new_producer, start_client

if TYPE_CHECKING:
    from api.http.verify import Verifier

__all__ = ["ApiContext", "connection", "context", "open_context"]


class ApiConnection(asyncpg.Connection):  # type: ignore[misc]  # asyncpg has no type information
    """A pooled connection released without asyncpg's reset query (one round trip per request).

    The API leaves nothing behind on a connection: no session settings,
    advisory locks or cursors, and every listener removed (projector.progress);
    an open transaction is rolled back on release all the same.
    """

    def get_reset_query(self) -> str:
        return ""


@dataclass(frozen=True)
class ApiContext:
    settings: ApiSettings
    endpoints: Endpoints
    pool: asyncpg.Pool
    producer: AIOKafkaProducer
    tokens: TokenStore
    verifier: Verifier
    #: How the API reaches PostgreSQL (its own role and TLS): the archive reads connect with it too.
    database: DatabaseAccess
    jwt_keys: JwtKeys | None = None
    #: Signs what the API produces as ``api:<token subject>`` (api.identity); None: unsigned.
    signer: EventSigner | None = None

    def authenticating(self) -> bool:
        """Whether requests must authenticate: a token exists, or JWTs are accepted."""
        return self.jwt_keys is not None or self.tokens.configured()


def jwt_keys(settings: ApiSettings) -> JwtKeys | None:
    """The JWKS file's keys when one is configured; an unusable file stops the start, naming why."""
    if settings.api_jwks_file is None:
        return None
    issuer, audience = settings.api_jwt_issuer or "", settings.api_jwt_audience or ""  # both required
    try:
        return JwtKeys(settings.api_jwks_file, issuer, audience, settings.api_jwt_leeway)
    except JwtRefused as exc:
        raise ValueError(str(exc)) from None


@contextlib.asynccontextmanager
async def open_context(
    settings: ApiSettings,
    endpoints: Endpoints,
    access: ServiceAccess | None = None,
    signer: EventSigner | None = None,
) -> AsyncIterator[ApiContext]:
    """The API's pool and producer; ``access``: the API's own (default: the endpoints' common one)."""
    keys = jwt_keys(settings)
    kafka = access.kafka if access is not None else endpoints.kafka()
    database = access.database if access is not None else endpoints.database()
    pool = await create_pool(
        database, min_size=1, max_size=settings.api_pool_size, connection_class=ApiConnection
    )
    try:
        # acks=all: an acknowledged submission survives a broker failover (as tephra submit).
        producer = new_producer(kafka, acks="all")
        try:
            await start_client(producer, kafka)
            from api.http.verify import Verifier  # noqa: PLC0415 - it imports this module: on use, no cycle

            verifier = Verifier()
            try:
                yield ApiContext(
                    settings,
                    endpoints,
                    pool,
                    producer,
                    TokenStore(settings.api_tokens_file),
                    verifier,
                    database,
                    keys,
                    signer,
                )
            finally:
                await verifier.close()
        finally:
            await producer.stop()
    finally:
        await pool.close()


async def context(request: Request) -> ApiContext:
    """The dependency: the app's context (async: FastAPI runs a sync dependency in a thread)."""
    found = request.app.state.context
    assert isinstance(found, ApiContext)  # noqa: S101  (create_app's: the server has one)
    return found


@contextlib.asynccontextmanager
async def connection(ctx: ApiContext) -> AsyncIterator[asyncpg.Connection]:
    """A pooled connection; an unreachable database or a missing projection is a 503 problem."""
    try:
        async with ctx.pool.acquire() as conn:
            yield conn
    except asyncpg.UndefinedTableError as exc:
        detail = f"the database has no projection yet ({exc}); run `tephra migrate`, then the projector"
        raise Problem(Code.DATABASE_UNAVAILABLE, detail) from None
    except asyncpg.DataError as exc:  # a value PostgreSQL's text cannot hold (a NUL character ...)
        raise Problem(
            Code.INVALID_PARAMETER, f"a parameter holds a value the projection cannot: {exc}"
        ) from None
    except (OSError, asyncpg.CannotConnectNowError, asyncpg.InterfaceError) as exc:
        raise Problem(Code.DATABASE_UNAVAILABLE, f"cannot reach the projection database: {exc}") from None


def kafka_problem(exc: KafkaError) -> Problem:
    return Problem(Code.KAFKA_UNAVAILABLE, f"cannot produce to Kafka: {exc}; nothing was acknowledged")
