"""The write routes: manifests in (``tephra submit`` over HTTP) and cancellations.

A submission is checked whole by :func:`api.manifests.parse_manifests`, the
validator ``tephra submit`` uses (the same error texts), and by its queue
check (:func:`api.submit.check_queues`): every job's queue must exist in the
projection or in the submission.  Any
problem refuses all of it (422) and nothing is produced.  A job whose name an
unfinished job holds in the projection refuses it too (409 ``duplicate-job``,
:func:`api.submit.check_live_jobs`), as Kubernetes refuses a create.  Accepted objects
are produced in document order and answered 202 with their event ids;
``?wait=archived`` also waits (bounded) until the projector archived each
one (its seq, or the projector's rejection), ``?wait=decided`` until a
session has considered each job.  ``seq`` in the answer is what a later read
passes as ``?min_seq=`` to see the write.

Who may write what is :mod:`api.http.auth`'s: a submitter only jobs in its
queues and namespaces, an admin anything; while no tokens exist, loopback
clients only.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import asyncpg
from aiokafka.errors import KafkaError
from fastapi import APIRouter, Depends, Query, Request

from api.http.auth import Principal, forbidden, writer
from api.http.context import ApiContext, connection, context, kafka_problem
from api.http.models import Submission
from api.http.problems import Code, Problem, ProblemError, problem_responses
from api.http.tokens import Role
from api.manifests import InvalidManifests, ManifestError, Manifests, parse_manifests
from api.submit import (
    LiveJobsError,
    PartlyProducedError,
    check_live_jobs,
    check_queues,
    job_cancellation,
    produce_manifests,
    projection_live_jobs,
    projection_queues,
)
from events.models import JobSubmitted
from projector.errors import WaitTimeoutError
from projector.progress import wait_for_events, wait_for_session_after

__all__ = ["API_SOURCE", "MEDIA_TYPES", "router"]

API_SOURCE = "tephra://api"
#: Request media types -> the file name the validator reads the body as (its suffix picks the parser).
MEDIA_TYPES = {
    "application/json": "request.json",
    "application/yaml": "request.yaml",
    "application/x-yaml": "request.yaml",
    "text/yaml": "request.yaml",
    "text/x-yaml": "request.yaml",
}

router = APIRouter(prefix="/v1")

Ctx = Annotated[ApiContext, Depends(context)]
Wait = Literal["none", "archived", "decided"]


Author = Annotated[Principal, Depends(writer)]


def _authorize(who: Principal, manifests: Manifests) -> None:
    """A submitter submits jobs within its scope only; the cluster's objects take an admin."""
    if who.role in (None, Role.ADMIN):
        return
    refused = [
        o.ref
        for o in manifests.objects
        if not (
            isinstance(o.event, JobSubmitted)
            and who.may_touch_job(o.event.data.namespace, o.event.data.queue)
        )
    ]
    if refused:
        raise forbidden(who, f"submit {', '.join(refused)}; nothing was submitted")


def _errors(errors: Iterable[ManifestError]) -> list[ProblemError]:
    return [ProblemError(message=str(e), **asdict(e)) for e in errors]


async def _check_queues(ctx: ApiContext, manifests: Manifests) -> None:
    """Every job's queue is in the projection or in the submission; else the whole submission is refused."""

    async def known() -> set[str]:
        async with connection(ctx) as conn:
            return await projection_queues(conn)

    await check_queues(manifests, known)


async def _check_live_jobs(ctx: ApiContext, manifests: Manifests) -> None:
    """No job's name is held by an unfinished job in the projection; else 409, nothing produced."""

    async def live(job_ids: list[str]) -> dict[str, str]:
        async with connection(ctx) as conn:
            return await projection_live_jobs(conn, job_ids)

    try:
        await check_live_jobs(manifests, live, how_to_cancel=lambda job_id: f"DELETE /v1/jobs/{job_id}")
    except LiveJobsError as exc:
        # The detail says it all for one job (the usual case); errors place each in the body.
        detail = "; ".join(e.expected for e in exc.errors)
        raise Problem(
            Code.DUPLICATE_JOB, f"{detail}; nothing was submitted", errors=_errors(exc.errors)
        ) from None


async def _produce(ctx: ApiContext, manifests: Manifests, who: Principal) -> None:
    try:
        # Signed as api:<subject>: the archive and `replay audit` say who asked.
        signer = None if ctx.signer is None else ctx.signer.on_behalf_of(who.subject)
        await produce_manifests(manifests, ctx.endpoints, producer=ctx.producer, signer=signer)
    except PartlyProducedError as exc:
        produced = ", ".join(o.ref for o in exc.produced)
        raise Problem(
            Code.KAFKA_UNAVAILABLE,
            f"cannot produce {exc.failed.ref} to Kafka: {exc.cause}; produced before it: {produced};"
            " the others were not: submit those again",
        ) from None
    except KafkaError as exc:
        raise kafka_problem(exc) from None


async def _wait_for(
    conn: asyncpg.Connection, manifests: Manifests, objects: list[dict[str, Any]], wait: Wait, deadline: float
) -> None:
    """Fill ``objects`` in as the projection gets them: each one's seq (or rejection); with
    ``decided``, the first session whose input holds every archived job, and each job's phase after it."""
    fates = await wait_for_events(conn, [o.event.id for o in manifests.objects], deadline - time.monotonic())
    jobs: dict[str, dict[str, Any]] = {}
    for obj, out in zip(manifests.objects, objects, strict=True):
        fate = fates[obj.event.id]
        out["seq"] = fate.seq
        if fate.error is not None:
            out["rejected"] = {"error": fate.error, "detail": fate.detail}
        elif isinstance(obj.event, JobSubmitted):
            jobs[obj.event.data.job_id] = out
    if wait != "decided" or not jobs:
        return
    last = max(out["seq"] for out in jobs.values())
    session, _ = await wait_for_session_after(conn, last, deadline - time.monotonic())
    for row in await conn.fetch("SELECT id, phase FROM jobs WHERE id = ANY($1::text[])", list(jobs)):
        jobs[row["id"]].update(session=session, phase=row["phase"])


async def _answer(ctx: ApiContext, manifests: Manifests, wait: Wait) -> dict[str, Any]:
    """The 202 body: each object's event id and, as far as the wait got in time, its fate."""
    objects: list[dict[str, Any]] = [
        {"ref": o.ref, "eventId": o.event.id, "eventType": o.event.type} for o in manifests.objects
    ]
    waited = True
    if wait != "none":
        deadline = time.monotonic() + ctx.settings.api_wait_limit
        try:
            async with connection(ctx) as conn:
                await _wait_for(conn, manifests, objects, wait, deadline)
        except WaitTimeoutError:
            waited = False
    seqs = [o["seq"] for o in objects if o.get("seq") is not None]
    return {
        "objects": objects,
        "warnings": [str(w) for w in manifests.warnings],
        "wait": wait,
        "waited": waited,
        "seq": max(seqs) if waited and seqs else None,
    }


#: What any write may answer besides its own problems.
_WRITE_PROBLEMS = (
    Code.UNAUTHENTICATED,
    Code.FORBIDDEN,
    Code.WRITES_NEED_LOOPBACK,
    Code.INVALID_PARAMETER,
    Code.KAFKA_UNAVAILABLE,
)
_WAIT = Query(description="none; archived: until the projector archived each object; decided: until a session"
              " considered each job (bounded by TEPHRA_API_WAIT_LIMIT)")  # fmt: skip


@router.post(
    "/manifests",
    status_code=202,
    response_model=Submission,
    responses=problem_responses(
        *_WRITE_PROBLEMS,
        Code.INVALID_MANIFESTS,
        Code.DUPLICATE_JOB,
        Code.UNSUPPORTED_MEDIA_TYPE,
        Code.BODY_TOO_LARGE,
        Code.BAD_REQUEST,
    ),
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "VolcanoJob, PodGroup (with its Pods), Pod, Queue, PriorityClass, Node,"
            " SchedulerConfiguration manifests (multi-document YAML, or JSON: one object or a list)",
            "content": {kind: {"schema": {"type": "string"}} for kind in MEDIA_TYPES},
        }
    },
)
async def post_manifests(
    ctx: Ctx, who: Author, request: Request, wait: Annotated[Wait, _WAIT] = "none"
) -> dict[str, Any]:
    """Validate the whole submission, then produce its events (all or nothing)."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    file = MEDIA_TYPES.get(media)
    if file is None:
        raise Problem(
            Code.UNSUPPORTED_MEDIA_TYPE,
            f"send the manifests as one of {', '.join(MEDIA_TYPES)}; got Content-Type: {media or '(none)'}",
        )
    try:
        text = (await request.body()).decode("utf-8")
    except UnicodeDecodeError:
        raise Problem(Code.BAD_REQUEST, "the request body is not UTF-8 text") from None
    try:
        manifests = parse_manifests(
            [(file, text)], cluster=ctx.endpoints.cluster, source=API_SOURCE, now=datetime.now(UTC)
        )
        await _check_queues(ctx, manifests)
    except InvalidManifests as exc:
        detail = f"{len(exc.errors)} problem(s); nothing was submitted"
        raise Problem(Code.INVALID_MANIFESTS, detail, errors=_errors(exc.errors)) from None
    if not manifests.objects:
        raise Problem(Code.INVALID_MANIFESTS, "the request body holds no manifests; nothing was submitted")
    _authorize(who, manifests)
    await _check_live_jobs(ctx, manifests)
    await _produce(ctx, manifests, who)
    return await _answer(ctx, manifests, wait)


@router.delete(
    "/jobs/{namespace}/{name}",
    status_code=202,
    response_model=Submission,
    responses=problem_responses(*_WRITE_PROBLEMS, Code.NOT_FOUND),
)
async def delete_job(
    *,
    ctx: Ctx,
    who: Author,
    namespace: str,
    name: str,
    wait: Annotated[Wait, _WAIT] = "none",
    reason: Annotated[
        str, Query(max_length=1024, pattern=r"^[^\x00]*$", description="why, recorded in the event")
    ] = "",
) -> dict[str, Any]:
    """Cancel a job (JobCancelled): its tasks are released, it ends Cancelled."""
    job_id = f"{namespace}/{name}"
    async with connection(ctx) as conn:
        queue = await conn.fetchval("SELECT queue FROM jobs WHERE id = $1", job_id)
    if queue is None:
        raise Problem(Code.NOT_FOUND, f"no job {job_id} in the projection: nothing to cancel")
    if not who.may_touch_job(namespace, queue):
        raise forbidden(who, f"cancel {job_id} (queue {queue})")
    manifests = job_cancellation(job_id, cluster=ctx.endpoints.cluster, source=API_SOURCE, reason=reason)
    await _produce(ctx, manifests, who)
    return await _answer(ctx, manifests, wait)
