"""The application: routes, problem handlers and the body limit, over an open context."""

from __future__ import annotations

import logging

from fastapi import FastAPI

from api.http import console, reads, verify, writes
from api.http.context import ApiContext
from api.http.limits import BodyLimit
from api.http.problems import install_problem_handlers
from api.http.settings import ApiSettings

__all__ = ["TITLE", "VERSION", "create_app", "writes_refused_notice"]

log = logging.getLogger(__name__)

TITLE = "Tephra API"
VERSION = "1"


def writes_refused_notice() -> str:
    """What the API says at start while nothing authenticates (no token, no JWKS file)."""
    return (
        "no API tokens are configured: reads are open to every client, and writes (POST /v1/manifests,"
        " DELETE /v1/jobs/...) are refused from anything but loopback clients; tephra token create makes one"
    )


def create_app(settings: ApiSettings, ctx: ApiContext | None) -> FastAPI:
    """The API over an open context (:func:`api.http.context.open_context`).

    ``ctx`` None builds it only to describe itself (its OpenAPI document).
    """
    app = FastAPI(
        title=TITLE,
        version=VERSION,
        summary="Tephra's projection and archive over HTTP: jobs, queues, nodes, sessions, explain,"
        " the preemption audit; manifests in.",
        docs_url=None,
        redoc_url=None,
    )
    app.state.context = ctx
    install_problem_handlers(app)
    app.add_middleware(BodyLimit, limit=settings.api_body_limit)
    app.include_router(reads.router)
    app.include_router(writes.router)
    app.include_router(verify.router)
    app.include_router(console.router)
    return app
