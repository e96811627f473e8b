"""The authorization matrix: each role × each route × a job in the token's own queue and in another.

Against the real stack (projector, scheduler, simulated cluster, ``tephra api``'s
server on the real broker and PostgreSQL): every cell is a real request, and
the test reports every cell that answered otherwise, not just the first.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from api.endpoints import Endpoints
from api.http.console import TOKEN_COOKIE
from api.http.settings import ApiSettings
from api.http.tokens import Role, create_token
from events.topics import Topics
from tests.api.helpers import live_stack
from tests.api.test_http import YAML, served
from tests.api.test_http_auth import CLUSTER, bearer, job

ARCHIVE = (Role.AUDITOR, Role.ADMIN)
ROLES = (Role.VIEWER, Role.SUBMITTER, *ARCHIVE)
#: The submitter's scope is queue research in namespace team-a: own is a job there, other is team-b's.
OWN, OTHER = ("team-a", "research"), ("team-b", "other")
QUEUE = """\
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {{name: {name}}}
"""


@dataclass(frozen=True)
class Cell:
    """One request, made as each role, with the status each role must get (own queue, other queue)."""

    route: str
    method: str
    path: str  # {ns}, {job}, {queue} filled from OWN or OTHER
    expect: dict[Role, tuple[int, int]]
    body: str | None = None
    params: dict[str, str] = field(default_factory=dict)
    console: bool = False


def everyone(status: int) -> dict[Role, tuple[int, int]]:
    return dict.fromkeys(ROLES, (status, status))


def only(status: int, *roles: Role, own_submitter: bool = False) -> dict[Role, tuple[int, int]]:
    """``status`` for ``roles``, 403 for the others; a submitter gets it for its own queue too."""
    expect = {role: (status, status) if role in roles else (403, 403) for role in ROLES}
    if own_submitter:
        expect[Role.SUBMITTER] = (status, 403)
    return expect


CELLS = [
    Cell("list jobs", "GET", "/v1/jobs", everyone(200), params={"queue": "{queue}"}),
    Cell("read a job", "GET", "/v1/jobs/{ns}/{job}", everyone(200)),
    Cell("queues", "GET", "/v1/queues", everyone(200)),
    Cell("nodes", "GET", "/v1/nodes", everyone(200)),
    Cell("sessions", "GET", "/v1/sessions", everyone(200)),
    Cell("explain", "GET", "/v1/jobs/{ns}/{job}/explain", only(200, *ARCHIVE, own_submitter=True)),
    Cell("a session", "GET", "/v1/sessions/{session}", only(200, *ARCHIVE)),
    Cell("audit (JSON)", "GET", "/v1/audit/preemptions", only(200, *ARCHIVE), params={"queue": "{queue}"}),
    Cell("start verify", "POST", "/v1/verify", only(202, *ARCHIVE)),
    Cell("verify result", "GET", "/v1/verify", only(200, *ARCHIVE)),
    Cell("submit a job", "POST", "/v1/manifests", only(202, Role.ADMIN, own_submitter=True), body="job"),
    Cell("submit a queue", "POST", "/v1/manifests", only(202, Role.ADMIN), body="queue"),
    Cell("cancel a job", "DELETE", "/v1/jobs/{ns}/{job}", only(202, Role.ADMIN, own_submitter=True)),
    Cell("console: queues", "GET", "/", everyone(200), console=True),
    Cell("console: a job", "GET", "/jobs/{ns}/{job}", everyone(200), console=True),
    Cell("console: audit", "GET", "/audit", only(200, *ARCHIVE), console=True),
    Cell("console: audit CSV", "GET", "/audit.csv", only(200, *ARCHIVE), console=True),
]  # fmt: skip

_names = itertools.count()


def _request(
    api: httpx.AsyncClient, cell: Cell, where: tuple[str, str], role: Role, values: dict[str, str]
) -> httpx.Request:
    """The cell's request for ``where`` (own or other), with a fresh name for anything it creates."""
    namespace, queue = where
    fill = {"ns": namespace, "queue": queue, "job": values[namespace], "session": values["session"]}
    content = None
    if cell.body == "job":
        content = job(f"{role.value}-{next(_names)}", namespace, queue)
    elif cell.body == "queue":
        content = QUEUE.format(name=f"q-{role.value}-{next(_names)}")
    params = {k: v.format(**fill) for k, v in cell.params.items()}
    headers = YAML if content is not None else {}
    url = cell.path.format(**fill)
    return api.build_request(cell.method, url, params=params, content=content, headers=headers)


async def test_each_role_on_each_route_in_its_own_queue_and_another(
    kafka_bootstrap: str, database_url: str, topics: Topics, tmp_path: Path
) -> None:
    endpoints = Endpoints(kafka_bootstrap, database_url, topics, "default")
    path = tmp_path / "tokens.json"
    tokens = {
        role: create_token(
            path,
            subject=f"{role.value}-1",
            role=role,
            queues=("research",) if role is Role.SUBMITTER else (),
            namespaces=("team-a",) if role is Role.SUBMITTER else (),
        )[0]
        for role in ROLES
    }
    async with live_stack(endpoints), served(endpoints, ApiSettings(api_tokens_file=path)) as api:
        admin = bearer(tokens[Role.ADMIN])
        setup = CLUSTER + "---\n" + job("own", *OWN) + "---\n" + job("theirs", *OTHER)
        posted = await api.post("/v1/manifests?wait=decided", content=setup, headers={**YAML, **admin})
        assert posted.status_code == 202, posted.text
        session = next(o["session"] for o in posted.json()["objects"] if o.get("session"))
        values = {"team-a": "own", "team-b": "theirs", "session": session}

        wrong: list[str] = []
        for cell, role in itertools.product(CELLS, ROLES):
            for where, status in zip((OWN, OTHER), cell.expect[role], strict=True):
                request = _request(api, cell, where, role, values)
                if cell.console:  # the login form's cookie
                    request.headers["cookie"] = f"{TOKEN_COOKIE}={tokens[role]}"
                else:
                    request.headers["authorization"] = f"Bearer {tokens[role]}"
                answer = await api.send(request)
                if answer.status_code != status:
                    which = "own" if where == OWN else "other"
                    wrong.append(
                        f"{cell.route} as {role.value} ({which} queue): {answer.status_code}, not {status}"
                    )
                elif status == 403 and not cell.console:
                    assert answer.json()["code"] == "forbidden", answer.text

                # Without a token: 401 on the API, the login form on the console.
                anonymous = await api.send(_request(api, cell, where, role, values))
                if anonymous.status_code != (303 if cell.console else 401):
                    wrong.append(f"{cell.route} without a token: {anonymous.status_code}")
        assert not wrong, "\n".join(wrong)

        # What the refused submissions and cancellations left: only the allowed ones' jobs exist.
        listed = (await api.get("/v1/jobs", params={"limit": 500}, headers=admin)).json()["items"]
        created = sorted(j["id"] for j in listed if j["id"] not in ("team-a/own", "team-b/theirs"))
        assert [i.split("/")[0] for i in created] == ["team-a", "team-a", "team-b"], created
        assert all(i.split("/")[1].startswith(("admin-", "submitter-")) for i in created), created
