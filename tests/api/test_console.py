"""The web console against the real broker and PostgreSQL: every page, login and logout, roles, CSRF."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
from markupsafe import escape

from api.demo_manifests import CLUSTER, URGENT, WORKLOADS
from api.endpoints import Endpoints
from api.http.console import CSRF_COOKIE, TOKEN_COOKIE
from api.http.settings import ApiSettings
from api.http.tokens import Role, create_token
from events.topics import Topics
from replay.render import detail_text
from tests.api.helpers import live_stack
from tests.api.test_http import YAML, served

PAGE = "text/html; charset=utf-8"


async def page(api: httpx.AsyncClient, path: str, status: int = 200, **params: str) -> str:
    """A console page's HTML, answered with ``status``."""
    response = await api.get(path, params=params)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PAGE
    assert "default-src 'self'" in response.headers["content-security-policy"]
    return response.text


async def submit(api: httpx.AsyncClient, text: str) -> int:
    """Manifests in through the API, until a session decided them; the seq to read at."""
    answer = await api.post("/v1/manifests?wait=decided", content=text, headers=YAML)
    assert answer.status_code == 202, answer.text
    seq = answer.json()["seq"]
    assert isinstance(seq, int)
    return seq


async def gang_reason(api: httpx.AsyncClient) -> str:
    """The pending gang's first reason in the newest session, as the API reads it."""
    jobs = (await api.get("/v1/jobs", params={"phase": "Pending", "reasons": True})).json()["items"]
    gang = next(j for j in jobs if j["id"] == "default/llm-pretrain")
    reason = gang["pendingReasons"][0]["message"]
    assert isinstance(reason, str)
    return reason


async def preempted(api: httpx.AsyncClient) -> None:
    """Wait until the archive holds urgent-train's preemption (bounded by the number of polls)."""
    for _ in range(300):
        rows = (await api.get("/v1/audit/preemptions")).json()["items"]
        if any(r["preemptor"]["job"] == "default/urgent-train" for r in rows):
            return
        await asyncio.sleep(0.1)
    raise AssertionError("urgent-train never preempted")


async def running(api: httpx.AsyncClient, job: str) -> None:
    """Wait until the simulated cluster ran ``job``'s tasks (bounded by the number of polls)."""
    for _ in range(600):
        if (await api.get(f"/v1/jobs/{job}")).json()["phase"] == "Running":
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{job} never ran")


async def test_console_pages_login_roles_csrf_and_the_audit_download(
    kafka_bootstrap: str, database_url: str, topics: Topics, tmp_path: Path
) -> None:
    endpoints = Endpoints(kafka_bootstrap, database_url, topics, "default")
    path = tmp_path / "tokens.json"
    async with live_stack(endpoints), served(endpoints, ApiSettings(api_tokens_file=path)) as api:
        # A running job and a pending gang (the demo's cluster and workloads), then a preemption.
        await submit(api, CLUSTER)
        await submit(api, WORKLOADS)
        await running(api, "default/demo-training")
        await submit(api, URGENT)
        await preempted(api)
        await check_open_pages(api)

        viewer, _ = create_token(path, subject="viewer-1", role=Role.VIEWER)
        auditor, _ = create_token(path, subject="auditor-1", role=Role.AUDITOR)
        await check_login_roles_and_csrf(api, viewer, auditor)


async def check_open_pages(api: httpx.AsyncClient) -> None:
    """No token configured: every page is open, and shows what the API answers."""
    queues = await page(api, "/")
    for q in (await api.get("/v1/queues")).json()["items"]:
        assert f'<a href="/jobs?queue={q["name"]}">{q["name"]}</a>' in queues
    assert "<td>3</td>" in queues  # queue training's weight
    assert "open console (no tokens configured)" in queues

    jobs = await page(api, "/jobs")
    assert '<a href="/jobs/default/demo-training">default/demo-training</a>' in jobs
    assert '<td class="phase">Running</td>' in jobs
    assert '<meta http-equiv="refresh" content="5">' in jobs
    pending = await page(api, "/jobs", phase="Pending", queue="training")
    assert "default/llm-pretrain" in pending
    assert "default/demo-training" not in pending
    # The newest session's reasons: the page is read between two reads of the API.
    before = await gang_reason(api)
    pending = await page(api, "/jobs", phase="Pending", queue="training")
    after = await gang_reason(api)
    assert escape(before) in pending or escape(after) in pending
    assert "no jobs" in await page(api, "/jobs", namespace="elsewhere")
    await page(api, "/jobs", 422, phase="Sleeping")

    # Hostile filter text comes back escaped: no markup, control characters shown as escapes.
    hostile = await page(api, "/jobs", namespace='<script>"\x1b[31m')
    assert 'value="&lt;script&gt;&#34;\\x1b[31m"' in hostile
    assert "<script>" not in hostile

    # The job page: the projection's tasks and replay explain's timeline, reasons and counterfactual.
    explained = (await api.get("/v1/jobs/default/llm-pretrain/explain")).json()
    job = await page(api, "/jobs/default/llm-pretrain", session=explained["session"]["id"])
    assert explained["reasons"]
    assert explained["counterfactual"]["found"]
    assert "<h3>Timeline</h3>" in job
    for entry in explained["timeline"]:
        assert escape(entry["text"]) in job
    for reason in explained["reasons"]:
        assert f"<strong>{escape(reason['code'])}</strong>: {escape(reason['message'])}" in job
        assert escape(detail_text(reason["detail"])) in job  # as replay explain prints it
    # A combined fix is one change.
    assert f"<li>{escape(explained['counterfactual']['summary'])}</li>" in job
    assert job.count("<td>Pending</td>") == 4  # the gang's tasks
    await page(api, "/jobs/default/nope", 404)

    nodes = await page(api, "/nodes")
    for n in (await api.get("/v1/nodes")).json()["items"]:
        assert f"<td>{n['name']}</td>" in nodes
    assert "nvidia.com/gpu 8" in nodes  # allocatable
    newest = (await api.get("/v1/sessions")).json()["items"][-1]
    sessions = await page(api, "/sessions")  # the newest 20: this one, or it and newer ones
    assert f"<td>{newest['id']}</td>" in sessions

    audit = await page(api, "/audit")
    assert '<a href="/jobs/default/urgent-train">default/urgent-train</a>' in audit
    assert '<a class="download" href="/audit.csv" download>' in audit
    download = await api.get("/audit.csv")
    assert download.status_code == 200
    api_csv = await api.get("/v1/audit/preemptions", headers={"accept": "text/csv"})
    assert download.text == api_csv.text
    assert download.text.count("default/urgent-train") >= 1


def _set_cookie(response: httpx.Response, name: str) -> str:
    """The Set-Cookie header of ``name`` (lower-cased), or ''."""
    found = [h for h in response.headers.get_list("set-cookie") if h.startswith(f"{name}=")]
    return found[0].lower() if found else ""


async def login(api: httpx.AsyncClient, token: str, *, https: bool = False) -> httpx.Response:
    await page(api, "/login")  # the form sets the CSRF cookie it repeats
    csrf = api.cookies[CSRF_COOKIE]
    headers = {"x-forwarded-proto": "https"} if https else {}
    return await api.post("/login", data={"csrf": csrf, "token": token}, headers=headers)


async def check_login_roles_and_csrf(api: httpx.AsyncClient, viewer: str, auditor: str) -> None:
    # Tokens exist: a page without a cookie is the login form.
    api.cookies.clear()
    assert (await api.get("/")).headers["location"] == "/login"
    assert (await api.get("/audit.csv")).headers["location"] == "/login"
    form = await api.get("/login")
    csrf = api.cookies[CSRF_COOKIE]
    assert f'<input type="hidden" name="csrf" value="{csrf}">' in form.text
    assert all(flag in _set_cookie(form, CSRF_COOKIE) for flag in ("httponly", "samesite=strict"))

    # CSRF: a post without the field, or with another value, is refused and logs nobody in.
    refused = await api.post("/login", data={"token": viewer})
    assert refused.status_code == 403
    assert "CSRF token does not match" in refused.text
    assert not _set_cookie(refused, TOKEN_COOKIE)
    other = await api.post("/login", data={"token": viewer, "csrf": "x" + csrf})
    assert other.status_code == 403
    wrong = await api.post("/login", data={"token": viewer[:-2] + "zz", "csrf": csrf})
    assert wrong.status_code == 401
    assert "that token is not valid" in wrong.text

    # A viewer logs in: the token in an HttpOnly, SameSite=Strict cookie (Secure over https).
    over_https = await login(api, viewer, https=True)
    assert over_https.status_code == 303
    cookie = _set_cookie(over_https, TOKEN_COOKIE)
    assert all(flag in cookie for flag in ("httponly", "samesite=strict", "secure", "path=/"))
    api.cookies.clear()
    logged_in = await login(api, viewer)
    assert logged_in.status_code == 303
    assert logged_in.headers["location"] == "/"
    cookie = _set_cookie(logged_in, TOKEN_COOKIE)
    assert "httponly" in cookie
    assert "samesite=strict" in cookie
    assert "secure" not in cookie  # plain http: a Secure cookie would never come back
    assert "viewer-1 (viewer)" in await page(api, "/")

    # What a viewer may not read, the console refuses as the API does.
    audit = await page(api, "/audit", 403)
    assert "viewer-1 (viewer: queues any; namespaces any) may not read the archive" in audit
    assert (await api.get("/audit.csv")).status_code == 403
    job = await page(api, "/jobs/default/llm-pretrain")
    assert "may not explain default/llm-pretrain" in job
    assert "<h3>Timeline</h3>" not in job

    # Logout takes the CSRF token too; then the pages ask for a login again.
    assert (await api.post("/logout", data={})).status_code == 403
    out = await api.post("/logout", data={"csrf": api.cookies[CSRF_COOKIE]})
    assert out.status_code == 303
    assert "max-age=0" in _set_cookie(out, TOKEN_COOKIE)
    assert (await api.get("/")).status_code == 303

    await check_auditor_download(api, auditor)


async def check_auditor_download(api: httpx.AsyncClient, auditor: str) -> None:
    """An auditor downloads the preemption audit as CSV: the API's rows."""
    assert (await login(api, auditor)).status_code == 303
    audit = await page(api, "/audit")
    assert "default/urgent-train" in audit
    download = await api.get("/audit.csv")
    assert download.status_code == 200
    assert download.headers["content-type"].startswith("text/csv")
    assert download.headers["content-disposition"] == 'attachment; filename="preemptions.csv"'
    by_bearer = await api.get(
        "/v1/audit/preemptions", headers={"accept": "text/csv", "authorization": f"Bearer {auditor}"}
    )
    assert download.text == by_bearer.text
    assert "victim_job" in download.text.splitlines()[0]
    assert "<h3>Timeline</h3>" in await page(api, "/jobs/default/llm-pretrain")
