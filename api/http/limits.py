"""The request-body size limit, for every route: a body larger than the limit is answered 413.

A declared ``Content-Length`` over the limit is refused before anything is
read; a body without one (chunked) is counted as it arrives and refused once
it passes the limit, so no request holds more than the limit in memory.
(Not FastAPI's ``max_body_size``: for a declared oversize body it replaces
the app's answer with a plain-text 413.)
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.http.problems import Code, Problem

__all__ = ["BodyLimit", "body_too_large"]


def body_too_large(limit: int) -> Problem:
    return Problem(
        Code.BODY_TOO_LARGE,
        f"the request body is larger than {limit} bytes (TEPHRA_API_BODY_LIMIT); split the submission",
    )


class BodyLimit:
    """ASGI middleware: ``receive`` raises the 413 problem once more than ``limit`` bytes came in."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        too_large = declared is not None and declared.isdigit() and int(declared) > self.limit
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            if too_large:
                raise body_too_large(self.limit)
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise body_too_large(self.limit)
            return message

        await self.app(scope, counted, send)
