"""``POST /v1/verify`` runs ``replay verify`` in the background; ``GET /v1/verify`` answers its last result.

One run at a time per API process: a POST while one runs answers the running
one.  The run is ``replay.queries.verify_archive`` on the replay engines'
worker (:func:`api.http.reads.on_archive`); it stops early when the API
stops (its progress callback raises), so a shutdown never waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field, JsonValue

from api.http.auth import auditor
from api.http.context import ApiContext, context
from api.http.problems import Code, Problem, problem_responses
from api.http.reads import on_archive
from replay.queries import verify_archive
from replay.store import ArchiveReader

__all__ = ["Verifier", "router"]

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1", dependencies=[Depends(auditor)])


class _Stopped(Exception):
    """The API is stopping: the run gives up at its next progress report."""


class VerifyRun(BaseModel):
    """One run of ``replay verify`` over the archive, as far as it got."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    state: str = Field(description="running, done or failed")
    started: str
    finished: str | None = None
    first: int = Field(description="the first seq checked")
    last: int | None = Field(description="the last seq checked (null: the archive's end when it started)")
    done: int = Field(default=0, description="events checked so far (a running run's progress)")
    result: dict[str, JsonValue] | None = Field(
        default=None, description="replay verify --format json: ok, events, sessions, divergences, warnings"
    )
    error: str | None = Field(default=None, description="why a failed run could not finish")


@dataclass
class Verifier:
    """The API's one verify run, and the last one's result."""

    run: VerifyRun | None = None
    task: asyncio.Task[None] | None = None
    stopping: bool = False
    _progress: list[int] = field(default_factory=lambda: [0])

    def status(self) -> VerifyRun | None:
        if self.run is not None and self.run.state == "running":
            return self.run.model_copy(update={"done": self._progress[0]})
        return self.run

    def start(self, ctx: ApiContext, first: int, last: int | None, strict_reasons: bool) -> VerifyRun:
        if self.task is not None and not self.task.done():
            status = self.status()
            assert status is not None  # noqa: S101  (a task runs only with its run)
            return status
        self.run = VerifyRun(state="running", started=_now(), first=first, last=last)
        self._progress = [0]
        progress = self._progress

        def report(done: int, total: int) -> None:
            del total
            if self.stopping:
                raise _Stopped
            progress[0] = done

        async def work(reader: ArchiveReader) -> dict[str, Any]:
            found = await verify_archive(
                reader,
                first=first,
                last=last,
                keep_going=True,
                strict_reasons=strict_reasons,
                progress=report,
            )
            return found.to_json()

        async def go() -> None:
            assert self.run is not None  # noqa: S101  (set above)
            try:
                result = await on_archive(ctx, None, work)
            except (Problem, _Stopped) as exc:
                error = exc.detail if isinstance(exc, Problem) else "the API stopped before the run finished"
                self.run = self.run.model_copy(update={"state": "failed", "finished": _now(), "error": error})
                return
            self.run = self.run.model_copy(
                update={"state": "done", "finished": _now(), "result": result, "done": result["events"]}
            )

        self.task = asyncio.create_task(go(), name="verify")
        return self.run

    async def close(self) -> None:
        """Stop a run (at its next progress report) and wait for it."""
        self.stopping = True
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self.task


def _now() -> str:
    return datetime.now(UTC).isoformat()


Ctx = Annotated[ApiContext, Depends(context)]
_PROBLEMS = problem_responses(Code.UNAUTHENTICATED, Code.FORBIDDEN, Code.NOT_FOUND, Code.INVALID_PARAMETER)


@router.post("/verify", status_code=202, response_model=VerifyRun, responses=_PROBLEMS)
async def post_verify(
    ctx: Ctx,
    first: Annotated[int, Query(alias="from", ge=1, le=2**63 - 1, description="the first seq to check")] = 1,
    last: Annotated[
        int | None, Query(alias="to", ge=1, le=2**63 - 1, description="the last seq (default: the end)")
    ] = None,
    strict_reasons: Annotated[
        bool, Query(description="pending reasons that differ are divergences too")
    ] = False,
) -> VerifyRun:
    """Start ``replay verify`` (the hash chain, then every recorded session re-derived) unless one runs."""
    return ctx.verifier.start(ctx, first, last, strict_reasons)


@router.get("/verify", response_model=VerifyRun, responses=_PROBLEMS)
async def get_verify(ctx: Ctx) -> VerifyRun:
    """The running verify's progress, or the last one's result."""
    status = ctx.verifier.status()
    if status is None:
        raise Problem(Code.NOT_FOUND, "no verify has run in this API process: POST /v1/verify starts one")
    return status
