"""The read routes: the projection (the read models of ``tephra get``) and the archive (``replay``).

Every read accepts ``?min_seq=``: it first waits (at most
``TEPHRA_API_WAIT_LIMIT`` seconds) until the projection has passed that seq, so
a client that wrote and got a seq back reads its own write.  Projection reads
run in one repeatable-read, read-only transaction and report the seq they
reflect; archive reads run the replay engines (:mod:`replay.queries`) over one
read-only snapshot of the archive.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, TypeVar

import asyncpg
import orjson
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from pydantic import BeforeValidator

from api.http.auth import Principal, auditor, principal, viewer
from api.http.context import ApiContext, connection, context
from api.http.models import (
    AuditPage,
    Explanation,
    JobDetail,
    JobPage,
    NodeList,
    QueueList,
    SessionDetail,
    SessionList,
)
from api.http.problems import Code, Problem, problem_responses
from api.http.tokens import Role
from api.views import (
    JobQuery,
    earlier_incarnations,
    job_page,
    job_tasks,
    list_nodes,
    list_queues,
    list_sessions,
)
from projector.errors import WaitTimeoutError
from projector.progress import projected_seq, wait_for_seq
from projector.state import JobPhase
from replay.audit import EvictionRow, rows_to_csv
from replay.errors import ArchiveError, NotFound, ReplayError
from replay.queries import audit_preemptions, explain_job, show_session
from replay.store import ArchiveReader, open_archive

__all__ = ["list_jobs", "preemption_rows", "router"]

T = TypeVar("T")

router = APIRouter(prefix="/v1")
Viewer = [Depends(viewer)]
Auditor = [Depends(auditor)]

Ctx = Annotated[ApiContext, Depends(context)]
MinSeq = Annotated[
    int | None,
    Query(ge=0, description="wait (bounded) until the projection has passed this seq before reading"),
]
_READ_PROBLEMS = problem_responses(
    Code.UNAUTHENTICATED,
    Code.INVALID_PARAMETER,
    Code.SEQ_NOT_ARCHIVED,
    Code.PROJECTION_BEHIND,
    Code.DATABASE_UNAVAILABLE,
)
_ARCHIVE_PROBLEMS = problem_responses(
    Code.UNAUTHENTICATED,
    Code.FORBIDDEN,
    Code.NOT_FOUND,
    Code.INVALID_PARAMETER,
    Code.SEQ_NOT_ARCHIVED,
    Code.PROJECTION_BEHIND,
    Code.ARCHIVE_UNREADABLE,
    Code.REPLAY_DIVERGED,
)


async def wait_until(ctx: ApiContext, conn: asyncpg.Connection, seq: int | None) -> None:
    """Return once the projection reflects ``seq`` (None: at once); else the problem.

    A seq past the archive's end is one no write was answered (a write answers a
    seq once archived): 409 at once, not a wait that cannot end.
    """
    if seq is None or await projected_seq(conn) >= seq:
        return
    archived = await conn.fetchval("SELECT coalesce(max(seq), 0) FROM event_log")
    if seq > archived:
        raise Problem(
            Code.SEQ_NOT_ARCHIVED,
            f"no event has seq {seq} yet (the archive ends at seq {archived});"
            " pass the seq a write answered (POST /v1/manifests?wait=archived)",
        )
    try:
        await wait_for_seq(conn, seq, ctx.settings.api_wait_limit)
    except WaitTimeoutError:
        raise Problem(
            Code.PROJECTION_BEHIND,
            f"the projection did not reach seq {seq} within {ctx.settings.api_wait_limit:g} s"
            " (TEPHRA_API_WAIT_LIMIT); is the projector running? Try again later",
            headers={"Retry-After": "1"},
        ) from None


@contextlib.asynccontextmanager
async def projection(
    ctx: ApiContext, min_seq: int | None, *, snapshot: bool = True
) -> AsyncIterator[asyncpg.Connection]:
    """The projection once it passed ``min_seq``: in one repeatable-read, read-only transaction,
    unless the caller reads it in one statement (``snapshot=False``: two round trips fewer)."""
    async with connection(ctx) as conn:
        await wait_until(ctx, conn, min_seq)
        if not snapshot:
            yield conn
            return
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            yield conn


async def on_archive(
    ctx: ApiContext, min_seq: int | None, work: Callable[[ArchiveReader], Awaitable[T]]
) -> T:
    """Run a replay engine over one snapshot of the archive; its errors as problems.

    The engines fold the archive and re-run sessions, seconds of CPU on a
    large archive: they run in a worker thread, on a loop and a connection of
    their own (:func:`replay.store.open_archive`), so the API's loop keeps
    answering other requests meanwhile.
    """
    if min_seq is not None:
        async with connection(ctx) as conn:
            await wait_until(ctx, conn, min_seq)

    async def replay() -> T:
        async with open_archive(ctx.database) as reader:
            return await work(reader)

    try:
        # The coroutine is made in the worker: one never run would warn.
        return await asyncio.to_thread(lambda: asyncio.run(replay()))
    except asyncpg.DataError as exc:  # a value PostgreSQL's text cannot hold (a NUL character ...)
        raise Problem(
            Code.INVALID_PARAMETER, f"a parameter holds a value the archive cannot: {exc}"
        ) from None
    except NotFound as exc:
        raise Problem(Code.NOT_FOUND, str(exc)) from None
    except ArchiveError as exc:
        raise Problem(Code.ARCHIVE_UNREADABLE, str(exc)) from None
    except ReplayError as exc:
        raise Problem(Code.REPLAY_DIVERGED, str(exc)) from None


def _iso_time(value: object) -> object:
    """A time given as text must be ISO 8601: pydantic would also read a number as Unix seconds,
    which the schema (``format: date-time``) does not allow."""
    if isinstance(value, str) and not _ISO_DATE.match(value):
        raise ValueError("expected an ISO 8601 time, such as 2026-12-05T01:30:00Z")
    return value


_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}")
#: A time parameter: ISO 8601 only (no offset: UTC).
Time = Annotated[datetime | None, BeforeValidator(_iso_time)]


def _utc(when: datetime | None) -> datetime | None:
    """A time without an offset is read as UTC, the archive's clock (as ``replay`` does)."""
    return when if when is None or when.tzinfo is not None else when.replace(tzinfo=UTC)


def _cursor(last_id: str) -> str:
    return base64.urlsafe_b64encode(last_id.encode()).decode().rstrip("=")


def _after(cursor: str | None) -> str | None:
    if cursor is None:
        return None
    try:
        return base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise Problem(
            Code.INVALID_CURSOR, "the cursor is not one this API returned; start again without ?cursor="
        ) from None


# --------------------------------------------------------------------------- the projection


# The phase filter's schema is the API's own enum: pydantic describes an enum by its docstring, and
# projector.state's JobPhase is compiled in production, where mypyc replaces its docstring.
PhaseFilter = StrEnum("JobPhase", [(phase.name, phase.value) for phase in JobPhase])  # type: ignore[misc]
PhaseFilter.__doc__ = "A job's phase (Volcano's PodGroup phases, plus the terminal ones of a VolcanoJob)."


@router.get(
    "/jobs",
    dependencies=Viewer,
    response_model=JobPage,
    responses=_READ_PROBLEMS | problem_responses(Code.INVALID_CURSOR),
)
async def get_jobs(
    *,
    ctx: Ctx,
    min_seq: MinSeq = None,
    namespace: Annotated[str | None, Query(description="only jobs in this namespace")] = None,
    queue: Annotated[str | None, Query(description="only jobs in this queue")] = None,
    phase: Annotated[PhaseFilter | None, Query(description="only jobs in this phase")] = None,
    cursor: Annotated[str | None, Query(description="the nextCursor of the previous page")] = None,
    limit: Annotated[int, Query(ge=1, description="page size (at most TEPHRA_API_PAGE_LIMIT)")] = 100,
    reasons: Annotated[
        bool, Query(description="with each pending job's reasons from the newest session (slower)")
    ] = False,
) -> Response:
    """Jobs in id order, filtered, one page at a time."""
    found = await list_jobs(
        ctx,
        min_seq,
        namespace=namespace,
        queue=queue,
        phase=phase,
        cursor=cursor,
        limit=limit,
        reasons=reasons,
    )
    # The hottest route: its page (built by api.views, held to JobPage by tests/api/test_fuzz.py)
    # is written as it is, not validated against the model again: a third of its CPU (bench/http_api.py).
    return Response(orjson.dumps(found), media_type="application/json")


async def list_jobs(
    ctx: ApiContext,
    min_seq: int | None,
    *,
    namespace: str | None = None,
    queue: str | None = None,
    phase: StrEnum | None = None,
    cursor: str | None = None,
    limit: int = 100,
    reasons: bool = False,
) -> dict[str, Any]:
    """A page of jobs (the route's and the console's)."""
    size = min(limit, ctx.settings.api_page_limit)
    query = JobQuery(
        namespace=namespace,
        queue=queue,
        phase=None if phase is None else phase.value,
        after=_after(cursor),
        limit=size + 1,
        reasons=reasons,
    )
    async with projection(ctx, min_seq, snapshot=reasons) as conn:
        seq, items = await job_page(conn, query)
    more = len(items) > size
    items = items[:size]
    return {"items": items, "nextCursor": _cursor(items[-1]["id"]) if more else None, "seq": seq}


@router.get(
    "/jobs/{namespace}/{name}",
    response_model=JobDetail,
    dependencies=Viewer,
    responses=_READ_PROBLEMS | problem_responses(Code.NOT_FOUND),
)
async def get_job(ctx: Ctx, namespace: str, name: str, min_seq: MinSeq = None) -> dict[str, Any]:
    """One job with its tasks."""
    job_id = f"{namespace}/{name}"
    async with projection(ctx, min_seq) as conn:
        seq, found = await job_page(conn, JobQuery(job_id=job_id))
        if not found:
            raise Problem(
                Code.NOT_FOUND,
                f"no job {job_id} in the projection (never submitted, or retired after it finished;"
                f" the archive still has it: GET /v1/jobs/{job_id}/explain)",
            )
        tasks = await job_tasks(conn, job_id)
        earlier = await earlier_incarnations(conn, found[0])
    return {**found[0], "taskList": tasks, "earlierIncarnations": earlier, "seq": seq}


@router.get("/queues", dependencies=Viewer, response_model=QueueList, responses=_READ_PROBLEMS)
async def get_queues(ctx: Ctx, min_seq: MinSeq = None) -> dict[str, Any]:
    """Every queue: weight, capability, deserved, guarantee, allocated, jobs per phase."""
    async with projection(ctx, min_seq) as conn:
        return {"items": await list_queues(conn), "seq": await projected_seq(conn)}


@router.get("/nodes", dependencies=Viewer, response_model=NodeList, responses=_READ_PROBLEMS)
async def get_nodes(ctx: Ctx, min_seq: MinSeq = None) -> dict[str, Any]:
    """Every node: allocatable, used, tasks."""
    async with projection(ctx, min_seq) as conn:
        return {"items": await list_nodes(conn), "seq": await projected_seq(conn)}


@router.get("/sessions", dependencies=Viewer, response_model=SessionList, responses=_READ_PROBLEMS)
async def get_sessions(
    ctx: Ctx,
    min_seq: MinSeq = None,
    limit: Annotated[int, Query(ge=1, description="the newest this many (at most the page limit)")] = 20,
) -> dict[str, Any]:
    """The newest sessions, oldest first."""
    async with projection(ctx, min_seq) as conn:
        items = await list_sessions(conn, min(limit, ctx.settings.api_page_limit))
        return {"items": items, "seq": await projected_seq(conn)}


# --------------------------------------------------------------------------- the archive


@router.get(
    "/sessions/{session_id}", dependencies=Auditor, response_model=SessionDetail, responses=_ARCHIVE_PROBLEMS
)
async def get_session(ctx: Ctx, session_id: str, min_seq: MinSeq = None) -> dict[str, Any]:
    """``replay session``: the session rebuilt from the archive, re-run, with its trace."""

    async def work(reader: ArchiveReader) -> dict[str, Any]:
        return (await show_session(reader, session_id)).to_json()

    return await on_archive(ctx, min_seq, work)


@router.get("/jobs/{namespace}/{name}/explain", response_model=Explanation, responses=_ARCHIVE_PROBLEMS)
async def get_explanation(
    *,
    ctx: Ctx,
    namespace: str,
    name: str,
    min_seq: MinSeq = None,
    session: Annotated[str | None, Query(description="explain this session (default: the latest)")] = None,
    at: Annotated[Time, Query(description="explain the latest session at or before it")] = None,
    counterfactual: Annotated[bool, Query(description="search what would have let it fit")] = True,
    who: Annotated[Principal, Depends(principal)],
) -> dict[str, Any]:
    """``replay explain``: why the job stayed Pending, with numbers, and what would have let it fit."""
    if session is not None and at is not None:
        raise Problem(Code.INVALID_PARAMETER, "give ?session= or ?at=, not both")
    await _may_explain(ctx, who, namespace, name)

    async def work(reader: ArchiveReader) -> dict[str, Any]:
        job_id = f"{namespace}/{name}"
        found = await explain_job(
            reader, job_id, session_id=session, at=_utc(at), counterfactual=counterfactual
        )
        return found.to_json()

    return await on_archive(ctx, min_seq, work)


async def _may_explain(ctx: ApiContext, who: Principal, namespace: str, name: str) -> None:
    """Auditors and admins explain any job; a submitter the jobs in its scope."""
    if who.role in (None, Role.AUDITOR, Role.ADMIN):
        return
    async with connection(ctx) as conn:
        queue = await conn.fetchval("SELECT queue FROM jobs WHERE id = $1", f"{namespace}/{name}")
    if not who.may_touch_job(namespace, queue):
        raise Problem(
            Code.FORBIDDEN, f"{who.scope_text()} may not explain {namespace}/{name}: that takes an auditor"
        )


_CSV = "text/csv"


def _wants_csv(request: Request) -> bool:
    """CSV when the client accepts it before JSON; JSON for */* or no Accept; else 406."""
    accept = request.headers.get("accept", "*/*")
    kinds = [part.split(";")[0].strip().lower() for part in accept.split(",")]
    for kind in kinds:
        if kind == _CSV:
            return True
        if kind in ("application/json", "application/*", "*/*"):
            return False
    detail = f"the preemption audit is application/json or {_CSV}; got Accept: {accept}"
    raise Problem(Code.NOT_ACCEPTABLE, detail)


@router.get(
    "/audit/preemptions",
    dependencies=Auditor,
    response_model=AuditPage,
    responses=_ARCHIVE_PROBLEMS
    | problem_responses(Code.NOT_ACCEPTABLE)
    | {200: {"content": {_CSV: {"schema": {"type": "string"}}}, "description": "JSON, or CSV by Accept"}},
)
async def get_preemptions(
    *,
    request: Request,
    ctx: Ctx,
    min_seq: MinSeq = None,
    since: Annotated[Time, Query(description="only sessions at or after this time")] = None,
    until: Annotated[Time, Query(description="only sessions at or before this time")] = None,
    queue: Annotated[str | None, Query(description="only evictions with victim or preemptor here")] = None,
    job: Annotated[str | None, Query(description="only evictions with this victim or preemptor job")] = None,
) -> Response | dict[str, Any]:
    """``replay audit preemptions``: every eviction with victim, preemptor, rule, shares before and after."""
    csv = _wants_csv(request)
    rows = await preemption_rows(ctx, min_seq, since=since, until=until, queue=queue, job=job)
    if csv:
        return Response(rows_to_csv(rows), media_type=_CSV)
    return {"items": [row.to_json() for row in rows]}


async def preemption_rows(
    ctx: ApiContext,
    min_seq: int | None,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    queue: str | None = None,
    job: str | None = None,
) -> list[EvictionRow]:
    """The preemption audit's rows (the route's and the console's)."""

    async def work(reader: ArchiveReader) -> list[EvictionRow]:
        return await audit_preemptions(reader, since=_utc(since), until=_utc(until), queue=queue, job=job)

    return await on_archive(ctx, min_seq, work)
