"""RFC 9457 problem details: every error the API answers, with a stable ``code``.

A route raises :class:`Problem` (or lets a library error through that a
handler here maps); the body is ``application/problem+json`` with ``type``
``urn:tephra:problem:<code>``, ``title``, ``status``, ``detail``,
``instance`` (the request path), ``code`` and, for a refused submission,
``errors`` (one per document problem, the texts ``tephra submit`` prints).
An unexpected failure is logged with its traceback and answered with the
code ``internal`` only: no stack trace leaves the server.
"""

from __future__ import annotations

import logging
from enum import StrEnum
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from pydantic.dataclasses import dataclass as pydantic_dataclass
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match

from api.manifests import ManifestError

__all__ = ["PROBLEM_JSON", "Code", "Problem", "ProblemBody", "install_problem_handlers"]

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"


class Code(StrEnum):
    """The stable codes; each has one HTTP status (:data:`STATUS`)."""

    BAD_REQUEST = "bad-request"
    INVALID_PARAMETER = "invalid-parameter"
    INVALID_CURSOR = "invalid-cursor"
    INVALID_MANIFESTS = "invalid-manifests"
    UNSUPPORTED_MEDIA_TYPE = "unsupported-media-type"
    NOT_ACCEPTABLE = "not-acceptable"
    BODY_TOO_LARGE = "body-too-large"
    UNAUTHENTICATED = "unauthenticated"
    FORBIDDEN = "forbidden"
    WRITES_NEED_LOOPBACK = "writes-need-loopback"
    NOT_FOUND = "not-found"
    DUPLICATE_JOB = "duplicate-job"
    METHOD_NOT_ALLOWED = "method-not-allowed"
    SEQ_NOT_ARCHIVED = "seq-not-archived"
    PROJECTION_BEHIND = "projection-behind"
    DATABASE_UNAVAILABLE = "database-unavailable"
    ARCHIVE_UNREADABLE = "archive-unreadable"
    REPLAY_DIVERGED = "replay-diverged"
    KAFKA_UNAVAILABLE = "kafka-unavailable"
    INTERNAL = "internal"


STATUS: dict[Code, tuple[int, str]] = {
    Code.BAD_REQUEST: (400, "Bad request"),
    Code.INVALID_PARAMETER: (422, "Invalid parameter"),
    Code.INVALID_CURSOR: (400, "Invalid cursor"),
    Code.INVALID_MANIFESTS: (422, "Invalid manifests: nothing was submitted"),
    Code.UNSUPPORTED_MEDIA_TYPE: (415, "Unsupported media type"),
    Code.NOT_ACCEPTABLE: (406, "Not acceptable"),
    Code.BODY_TOO_LARGE: (413, "Request body too large"),
    Code.UNAUTHENTICATED: (401, "A valid token is required"),
    Code.FORBIDDEN: (403, "Not allowed for this token"),
    Code.WRITES_NEED_LOOPBACK: (403, "Writes are refused from this address"),
    Code.NOT_FOUND: (404, "Not found"),
    Code.DUPLICATE_JOB: (409, "A job of that name has not finished: nothing was submitted"),
    Code.METHOD_NOT_ALLOWED: (405, "Method not allowed"),
    Code.SEQ_NOT_ARCHIVED: (409, "No event has the requested seq yet"),
    Code.PROJECTION_BEHIND: (503, "The projection has not reached the requested seq"),
    Code.DATABASE_UNAVAILABLE: (503, "The database is unavailable"),
    Code.ARCHIVE_UNREADABLE: (503, "The archive cannot be read"),
    Code.REPLAY_DIVERGED: (500, "Replay does not re-derive the archive"),
    Code.KAFKA_UNAVAILABLE: (503, "Kafka is unavailable"),
    Code.INTERNAL: (500, "Internal error"),
}


@pydantic_dataclass(frozen=True)
class ProblemError(ManifestError):
    """One problem in one submitted document, and the line ``tephra submit`` prints for it."""

    message: str = ""


class ProblemBody(BaseModel):
    """An RFC 9457 problem details object with Tephra's ``code`` (and ``errors`` for manifests)."""

    type: str = Field(description="urn:tephra:problem:<code>")
    title: str
    status: int
    detail: str
    instance: str
    code: Code
    errors: list[ProblemError] | None = None


class Problem(Exception):
    """Answer the request with a problem of ``code``; ``detail`` says what is wrong and how to fix it."""

    def __init__(
        self,
        code: Code,
        detail: str,
        *,
        errors: list[ProblemError] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.errors = errors
        self.headers = headers


def problem_response(
    request: Request,
    code: Code,
    detail: str,
    *,
    errors: list[ProblemError] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    status, title = STATUS[code]
    body = ProblemBody(
        type=f"urn:tephra:problem:{code.value}",
        title=title,
        status=status,
        detail=detail,
        instance=request.url.path,
        code=code,
        errors=errors,
    )
    return JSONResponse(
        body.model_dump(mode="json", exclude_none=True),
        status_code=status,
        media_type=PROBLEM_JSON,
        headers=headers,
    )


def _where(loc: tuple[int | str, ...]) -> str:
    """``("query", "limit")`` -> ``query parameter limit``."""
    if loc and loc[0] in ("query", "path", "header") and len(loc) > 1:
        return f"{loc[0]} parameter {'.'.join(str(part) for part in loc[1:])}"
    return ".".join(str(part) for part in loc) or "request"


async def _on_problem(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, Problem)  # noqa: S101  (registered for Problem only)
    return problem_response(request, exc.code, exc.detail, errors=exc.errors, headers=exc.headers)


async def _on_validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)  # noqa: S101  (registered for it only)
    problems = [f"{_where(tuple(e['loc']))}: {e['msg']}" for e in exc.errors()]
    return problem_response(request, Code.INVALID_PARAMETER, "; ".join(problems))


_HTTP_CODES = {404: Code.NOT_FOUND, 405: Code.METHOD_NOT_ALLOWED}


_METHODS = ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")


def _allowed(request: Request) -> str:
    """Every method some route serves at this path (Starlette's 405 names only the first route's:
    ``GET`` and ``DELETE`` of a job are two routes), asked of each route as the router asks."""
    allowed = []
    for method in _METHODS:
        scope = {**request.scope, "method": method}
        if any(isinstance(r, BaseRoute) and r.matches(scope)[0] is Match.FULL for r in request.app.routes):
            allowed.append(method)
    return ", ".join(allowed)


async def _on_http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)  # noqa: S101  (registered for it only)
    code = _HTTP_CODES.get(exc.status_code, Code.BAD_REQUEST)
    headers = dict(exc.headers or {})
    if code is Code.METHOD_NOT_ALLOWED:
        headers["Allow"] = _allowed(request)
        detail = f"{request.url.path} takes {headers['Allow']}, not {request.method}"
    elif code is Code.NOT_FOUND:
        detail = f"no route for {request.method} {request.url.path}"
    else:
        detail = str(exc.detail)
    return problem_response(request, code, detail, headers=headers)


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return problem_response(
        request, Code.INTERNAL, "the server failed to answer this request; its log has the details"
    )


def install_problem_handlers(app: FastAPI) -> None:
    app.add_exception_handler(Problem, _on_problem)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http)
    app.add_exception_handler(Exception, _on_unexpected)


def problem_responses(*codes: Code) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` entries of a route's problems (by status)."""
    return {
        STATUS[code][0]: {"model": ProblemBody, "content": {PROBLEM_JSON: {}}, "description": STATUS[code][1]}
        for code in codes
    }
