"""Tokens and roles over HTTP: each role against each kind of route, own and other queue, and revocation."""

from __future__ import annotations

from pathlib import Path

import httpx
from typer.testing import CliRunner

from api.cli import app
from api.endpoints import Endpoints
from api.http.settings import ApiSettings
from api.http.tokens import Role, TokenStore, create_token, revoke_token
from events.topics import Topics
from tests.api.test_http import YAML, job_manifest, problem, served
from tests.service.helpers import running_projector

CLUSTER = """\
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: research}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: other}
"""


def job(name: str, namespace: str = "team-a", queue: str = "research") -> str:
    return job_manifest(name, namespace, queue)


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def test_tephra_token_creates_lists_and_revokes_hashed_tokens(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    runner = CliRunner()
    file = ["--api-tokens-file", str(path)]
    created = runner.invoke(
        app, ["token", "create", "--subject", "ci", "--role", "submitter", "--queue", "research", *file]
    )
    assert created.exit_code == 0, created.output
    token = created.stdout.strip()
    assert token.startswith("tph_")
    assert token.split("_", 2)[2] not in path.read_text()  # only the digest is stored
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    stored = TokenStore(path).verify(token)
    assert stored is not None
    assert (stored.subject, stored.role, stored.queues) == ("ci", Role.SUBMITTER, ("research",))
    assert TokenStore(path).verify(token[:-1] + ("A" if token[-1] != "A" else "B")) is None

    listed = runner.invoke(app, ["token", "list", *file])
    assert f"{stored.id} ci submitter queues=research namespaces=*" in listed.stdout
    revoked = runner.invoke(app, ["token", "revoke", stored.id, *file])
    assert revoked.exit_code == 0, revoked.output
    assert TokenStore(path).verify(token) is None

    bad = runner.invoke(app, ["token", "create", "--subject", "x", "--role", "root", *file])
    assert bad.exit_code == 2
    assert "expected one of viewer, submitter, auditor, admin" in bad.output
    scoped = runner.invoke(
        app, ["token", "create", "--subject", "x", "--role", "viewer", "--queue", "q", *file]
    )
    assert scoped.exit_code == 2
    assert "--queue and --namespace limit a submitter" in scoped.output


async def test_each_role_may_do_what_its_table_says_and_no_more(
    kafka_bootstrap: str, database_url: str, topics: Topics, tmp_path: Path
) -> None:
    endpoints = Endpoints(kafka_bootstrap, database_url, topics, "default")
    path = tmp_path / "tokens.json"
    settings = ApiSettings(api_tokens_file=path)
    tokens = {
        role: create_token(path, subject=f"{role}-1", role=role)[0]
        for role in (Role.ADMIN, Role.VIEWER, Role.AUDITOR)
    }
    submitter, _ = create_token(
        path, subject="team-a-ci", role=Role.SUBMITTER, queues=("research",), namespaces=("team-a",)
    )
    admin, viewer, auditor = (bearer(tokens[r]) for r in (Role.ADMIN, Role.VIEWER, Role.AUDITOR))
    mine = bearer(submitter)
    async with running_projector(kafka_bootstrap, database_url, topics), served(endpoints, settings) as api:
        # Nobody gets in without a valid token.
        missing = problem(await api.get("/v1/jobs"), 401, "unauthenticated")
        assert "Authorization: Bearer" in str(missing["detail"])
        problem(await api.get("/v1/queues", headers=bearer("tph_000000000000_nope")), 401, "unauthenticated")
        problem(
            await api.get("/v1/queues", headers={"authorization": tokens[Role.ADMIN]}), 401, "unauthenticated"
        )

        # The cluster's objects take an admin.
        async def post(text: str, who: dict[str, str]) -> httpx.Response:
            return await api.post("/v1/manifests?wait=archived", content=text, headers={**YAML, **who})

        for who in (viewer, auditor, mine):
            problem(await post(CLUSTER, who), 403, "forbidden")
        assert (await post(CLUSTER + "---\n" + job("by-admin", "team-b", "other"), admin)).status_code == 202

        # A submitter: its own queue and namespace only, all or nothing.
        assert (await post(job("own"), mine)).status_code == 202
        other_queue = problem(await post(job("elsewhere", queue="other"), mine), 403, "forbidden")
        assert "team-a-ci (submitter: queues research; namespaces team-a)" in str(other_queue["detail"])
        problem(await post(job("ns", namespace="team-b"), mine), 403, "forbidden")
        problem(await post(job("mixed") + "---\n" + job("mixed-2", queue="other"), mine), 403, "forbidden")
        for who in (viewer, auditor):
            problem(await post(job("nope"), who), 403, "forbidden")

        # Every role reads the projection; the refused submissions left nothing.
        for who in (admin, viewer, auditor, mine):
            jobs = (await api.get("/v1/jobs", headers=who)).json()["items"]
            assert [j["id"] for j in jobs] == ["team-a/own", "team-b/by-admin"]
            assert (await api.get("/v1/queues", headers=who)).status_code == 200

        # The archive: auditors and admins; a submitter explains its own jobs only.
        for who in (admin, auditor):
            assert (await api.get("/v1/audit/preemptions", headers=who)).status_code == 200
            assert (await api.get("/v1/jobs/team-b/by-admin/explain", headers=who)).status_code == 200
        for who in (viewer, mine):
            problem(await api.get("/v1/audit/preemptions", headers=who), 403, "forbidden")
            problem(await api.post("/v1/verify", headers=who), 403, "forbidden")
            problem(await api.get("/v1/sessions/any", headers=who), 403, "forbidden")
        assert (await api.get("/v1/jobs/team-a/own/explain", headers=mine)).status_code == 200
        problem(await api.get("/v1/jobs/team-b/by-admin/explain", headers=mine), 403, "forbidden")
        problem(await api.get("/v1/jobs/team-a/own/explain", headers=viewer), 403, "forbidden")

        # Cancelling: a submitter its own jobs, an admin any.
        problem(await api.delete("/v1/jobs/team-b/by-admin", headers=mine), 403, "forbidden")
        problem(await api.delete("/v1/jobs/team-a/own", headers=viewer), 403, "forbidden")
        assert (await api.delete("/v1/jobs/team-a/own", headers=mine)).status_code == 202
        assert (await api.delete("/v1/jobs/team-b/by-admin", headers=admin)).status_code == 202

        # Revoked: refused from the next request on, without a restart.
        stored = next(t for t in TokenStore(path).all() if t.subject == "team-a-ci")
        revoke_token(path, stored.id)
        problem(await api.get("/v1/jobs", headers=mine), 401, "unauthenticated")
