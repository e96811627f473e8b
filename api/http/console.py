"""The web console at ``/``: server-rendered pages over the API's own reads, tokens and roles.

Every page calls the read functions of :mod:`api.http.reads` (the same
queries, the same replay engines) and authenticates with
:func:`api.http.auth.authenticate` (the same tokens); what a role may not
read it is refused here as in the API, as a page saying why.

The token is kept in a cookie (``HttpOnly``, ``SameSite=Strict``, ``Secure``
when served over https) set by the login form.  Form posts (login, logout)
carry a double-submit CSRF token: a random value in a cookie of its own, which
the form repeats in a hidden field; a post whose field does not match its
cookie is refused.  Templates are Jinja2 with autoescape, and every value is
shown through :func:`events.display.printable` (control characters escaped).
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import parse_qs

import jinja2
from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from api.http import reads
from api.http.auth import Principal, auditor, authenticate, identify
from api.http.context import ApiContext, context
from api.http.problems import STATUS, Code, Problem
from events.display import printable
from events.quantity import parse_quantity
from projector.state import JobPhase
from replay.audit import QueueShare, rows_to_csv
from replay.render import detail_text

__all__ = ["CSRF_COOKIE", "TOKEN_COOKIE", "router"]

TOKEN_COOKIE = "tephra_token"  # noqa: S105  (a cookie's name, not a secret)
CSRF_COOKIE = "tephra_csrf"
CSRF_FIELD = "csrf"

router = APIRouter(include_in_schema=False)
Ctx = Annotated[ApiContext, Depends(context)]

# No script, no inline style, no framing; nothing cached (pages carry a user's view).
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def _shown(value: object) -> object:
    """Every ``{{ value }}``: None as nothing, the rest with control characters escaped; markup a
    macro made (``__html__``) as it is (its own values went through here already)."""
    if value is None:
        return ""
    return value if hasattr(value, "__html__") else printable(value)


_templates = jinja2.Environment(
    loader=jinja2.PackageLoader("api.http", "templates"),
    autoescape=True,
    finalize=_shown,
    undefined=jinja2.StrictUndefined,
)
_BINARY = (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def _readable(value: str, resource: str) -> str:
    """A byte count (memory, storage) in the largest binary unit that holds it whole, as manifests
    write it (``206158430208`` -> ``192Gi``); any other quantity as it is."""
    if not value.isdigit() or not (resource == "memory" or resource.endswith("storage")):
        return value
    amount = int(value)
    unit = next(((suffix, size) for suffix, size in _BINARY if amount and amount % size == 0), None)
    return value if unit is None else f"{amount // unit[1]}{unit[0]}"


_templates.filters["detail"] = detail_text  # a reason's detail as replay explain prints it
_templates.filters["readable"] = _readable


@dataclass(frozen=True)
class Page:
    """A template to render and its values."""

    template: str
    values: dict[str, Any]


def _https(request: Request) -> bool:
    return request.url.scheme == "https"


def _set_cookie(request: Request, response: Response, name: str, value: str) -> None:
    response.set_cookie(name, value, httponly=True, samesite="strict", secure=_https(request), path="/")


def _render(request: Request, page: Page, who: Principal | None, status: int = 200) -> HTMLResponse:
    """The page as HTML, with the CSRF cookie its forms repeat (set when the browser has none)."""
    csrf = request.cookies.get(CSRF_COOKIE) or secrets.token_urlsafe(32)
    html = _templates.get_template(page.template).render(
        csrf=csrf, csrf_field=CSRF_FIELD, who=who, path=request.url.path, **page.values
    )
    response = HTMLResponse(html, status_code=status, headers=_HEADERS)
    if request.cookies.get(CSRF_COOKIE) != csrf:
        _set_cookie(request, response, CSRF_COOKIE, csrf)
    return response


def _problem_page(request: Request, problem: Problem, who: Principal | None) -> HTMLResponse:
    status, title = STATUS[problem.code]
    page = Page("error.html", {"title": title, "code": problem.code.value, "detail": problem.detail})
    return _render(request, page, who, status)


async def _answer(
    request: Request, ctx: ApiContext, build: Callable[[Principal], Awaitable[Response]]
) -> Response:
    """The answer for the cookie's caller: the login form without a valid token, a problem as a page."""
    who = authenticate(ctx, request, request.cookies.get(TOKEN_COOKIE))
    if who is None:
        return RedirectResponse("/login", status_code=303, headers=_HEADERS)
    try:
        return await build(who)
    except Problem as problem:
        return _problem_page(request, problem, who)


async def _page(request: Request, ctx: ApiContext, build: Callable[[Principal], Awaitable[Page]]) -> Response:
    """A page for the cookie's caller (:func:`_answer`)."""

    async def rendered(who: Principal) -> Response:
        return _render(request, await build(who), who)

    return await _answer(request, ctx, rendered)


def _share(queue: dict[str, Any]) -> float | None:
    """Allocated over deserved, the largest over resources (Volcano's proportion share); None
    when the queue declares no deserved resources."""
    deserved = {r: float(parse_quantity(r, v)) for r, v in queue["deserved"].items()}
    if not deserved:
        return None
    allocated = {r: parse_quantity(r, v) for r, v in queue["allocated"].items()}
    return QueueShare(allocated, deserved).share


# --------------------------------------------------------------------------- pages


@router.get("/", response_class=HTMLResponse)
async def queues_page(request: Request, ctx: Ctx) -> Response:
    async def build(who: Principal) -> Page:
        found = await reads.get_queues(ctx)
        rows = [{**q, "share": _share(q)} for q in found["items"]]
        return Page("queues.html", {"title": "Queues", "queues": rows, "seq": found["seq"]})

    return await _page(request, ctx, build)


def _blank(value: str | None) -> str | None:
    """A filter left empty in the form is no filter."""
    return value or None


@router.get("/jobs", response_class=HTMLResponse)
async def jobs_page(
    *,
    request: Request,
    ctx: Ctx,
    namespace: str | None = None,
    queue: str | None = None,
    phase: str | None = None,
    cursor: str | None = None,
) -> Response:
    async def build(who: Principal) -> Page:
        try:
            wanted = None if not phase else reads.PhaseFilter(phase)
        except ValueError:
            phases = ", ".join(p.value for p in JobPhase)
            raise Problem(Code.INVALID_PARAMETER, f"phase {phase!r} is none of {phases}") from None
        found = await reads.list_jobs(
            ctx,
            None,
            namespace=_blank(namespace),
            queue=_blank(queue),
            phase=wanted,
            cursor=_blank(cursor),
            reasons=True,
        )
        filters = {"namespace": namespace or "", "queue": queue or "", "phase": phase or ""}
        values = {
            "title": "Jobs",
            "jobs": found["items"],
            "next": found["nextCursor"],
            "seq": found["seq"],
            "filters": filters,
            "phases": [p.value for p in JobPhase],
        }
        return Page("jobs.html", values)

    return await _page(request, ctx, build)


@router.get("/jobs/{namespace}/{name}", response_class=HTMLResponse)
async def job_page(
    request: Request, ctx: Ctx, namespace: str, name: str, session: str | None = None
) -> Response:
    """The job, and ``replay explain`` of its latest session (or of ``?session=``)."""

    async def build(who: Principal) -> Page:
        try:
            job: dict[str, Any] | None = await reads.get_job(ctx, namespace, name)
        except Problem as problem:
            if problem.code is not Code.NOT_FOUND:
                raise
            job = None  # retired from the projection: the archive still explains it
        explanation, refused = None, None
        try:
            explanation = await reads.get_explanation(
                ctx=ctx, namespace=namespace, name=name, session=_blank(session), who=who
            )
        except Problem as problem:
            if problem.code is Code.FORBIDDEN:
                refused = problem.detail
            elif problem.code is not Code.NOT_FOUND or job is None:
                raise
        values = {"title": f"Job {namespace}/{name}", "job": job, "explain": explanation, "refused": refused}
        return Page("job.html", values)

    return await _page(request, ctx, build)


@router.get("/nodes", response_class=HTMLResponse)
async def nodes_page(request: Request, ctx: Ctx) -> Response:
    async def build(who: Principal) -> Page:
        found = await reads.get_nodes(ctx)
        return Page("nodes.html", {"title": "Nodes", "nodes": found["items"], "seq": found["seq"]})

    return await _page(request, ctx, build)


@router.get("/sessions", response_class=HTMLResponse)
async def sessions_page(request: Request, ctx: Ctx) -> Response:
    async def build(who: Principal) -> Page:
        found = await reads.get_sessions(ctx)
        sessions = list(reversed(found["items"]))  # newest first
        return Page("sessions.html", {"title": "Sessions", "sessions": sessions, "seq": found["seq"]})

    return await _page(request, ctx, build)


@router.get("/audit", response_class=HTMLResponse)
async def audit_page(
    request: Request, ctx: Ctx, queue: str | None = None, job: str | None = None
) -> Response:
    async def build(who: Principal) -> Page:
        await auditor(who)
        rows = await reads.preemption_rows(ctx, None, queue=_blank(queue), job=_blank(job))
        query = {k: v for k, v in (("queue", queue), ("job", job)) if v}
        values = {
            "title": "Preemption audit",
            "rows": [r.to_json() for r in rows],
            "filters": {"queue": queue or "", "job": job or ""},
            "query": query,
        }
        return Page("audit.html", values)

    return await _page(request, ctx, build)


@router.get("/audit.csv")
async def audit_csv(request: Request, ctx: Ctx, queue: str | None = None, job: str | None = None) -> Response:
    """The audit's rows as ``replay audit preemptions --format csv`` writes them, as a download."""

    async def build(who: Principal) -> Response:
        await auditor(who)
        rows = await reads.preemption_rows(ctx, None, queue=_blank(queue), job=_blank(job))
        disposition = {"Content-Disposition": 'attachment; filename="preemptions.csv"'}
        return Response(rows_to_csv(rows), media_type="text/csv", headers=_HEADERS | disposition)

    return await _answer(request, ctx, build)


@router.get("/console.css")
async def stylesheet() -> Response:
    css = _templates.get_template("console.css").render()
    return Response(css, media_type="text/css", headers={"Cache-Control": "max-age=3600"})


# --------------------------------------------------------------------------- login, logout


async def _form(request: Request) -> dict[str, str]:
    """A url-encoded form's fields (the console's forms have no files)."""
    try:
        text = (await request.body()).decode()
    except UnicodeDecodeError:
        raise Problem(Code.BAD_REQUEST, "the form is not UTF-8") from None
    return {k: v[-1] for k, v in parse_qs(text, keep_blank_values=True).items()}


def _csrf_checked(request: Request, form: dict[str, str]) -> None:
    """The double-submit check: the form repeats the CSRF cookie (which another site cannot read)."""
    cookie = request.cookies.get(CSRF_COOKIE, "")
    field = form.get(CSRF_FIELD, "")
    if not cookie or not hmac.compare_digest(cookie.encode(), field.encode()):
        raise Problem(
            Code.FORBIDDEN,
            "the form's CSRF token does not match this browser's: reload the page and send the form again",
        )


@router.get("/login", response_class=HTMLResponse)
async def login_form(request: Request, ctx: Ctx) -> Response:
    page = Page("login.html", {"title": "Log in", "open": not ctx.authenticating(), "error": None})
    return _render(request, page, authenticate(ctx, request, request.cookies.get(TOKEN_COOKIE)))


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request, ctx: Ctx) -> Response:
    try:
        form = await _form(request)
        _csrf_checked(request, form)
    except Problem as problem:
        return _problem_page(request, problem, None)
    token = form.get("token", "").strip()
    if not ctx.authenticating():
        error, status = "no tokens are configured: the console is open without one", 400
    else:
        try:
            identify(ctx, request, token)
            error, status = None, 200
        except Problem as problem:
            error, status = problem.detail, 401
    if error is not None:
        page = Page("login.html", {"title": "Log in", "open": not ctx.authenticating(), "error": error})
        return _render(request, page, None, status)
    response = RedirectResponse("/", status_code=303, headers=_HEADERS)
    _set_cookie(request, response, TOKEN_COOKIE, token)
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    try:
        _csrf_checked(request, await _form(request))
    except Problem as problem:
        return _problem_page(request, problem, None)
    response = RedirectResponse("/login", status_code=303, headers=_HEADERS)
    response.delete_cookie(TOKEN_COOKIE, httponly=True, samesite="strict", secure=_https(request), path="/")
    return response
