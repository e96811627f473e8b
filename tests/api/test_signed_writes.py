"""The HTTP API and ``tephra submit`` sign what they produce: the archive names who asked.

A deployment that refuses unsigned events (the projector's production defaults) takes the
API's writes signed as ``api:<token subject>`` and ``tephra submit``'s as ``cli:<user>``, and
``replay audit actions`` reads them back.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import asyncpg
import pytest

from api.endpoints import Endpoints
from api.http.settings import ApiSettings
from api.http.tokens import Role, create_token
from api.identity import API_PRODUCER, CLI_PRODUCER, MANIFEST_TYPES, local_user
from events.signing import EventSigner, SigningKey
from events.topics import Topics
from projector.keyring import add_producer
from projector.migrate import apply_migrations
from projector.settings import ProjectorSettings
from projector.trust import KeyringEntry
from tests.api.test_http import YAML, job_manifest, served
from tests.api.test_http_auth import CLUSTER, bearer
from tests.replay.helpers import run_replay
from tests.service.helpers import running_projector, wait_for

pytestmark = pytest.mark.integration

_PRODUCTION = ProjectorSettings(
    projector_linger_ms=5,
    allow_unsigned_intents=False,
    allow_unsigned_observations=False,
    allow_leaderless_sessions=False,
)
_PRINCIPAL = "SELECT principal FROM event_log WHERE job = $1 AND type = $2"


async def test_the_api_and_tephra_submit_sign_as_who_asked(
    kafka_bootstrap: str, database_url: str, topics: Topics, tmp_path: Path
) -> None:
    endpoints = Endpoints(kafka_bootstrap, database_url, topics, "default")
    api_key, cli_key = SigningKey.generate(), SigningKey.generate()
    cli_key_file = tmp_path / "cli.pem"
    cli_key_file.write_bytes(cli_key.pem())
    path = tmp_path / "tokens.json"
    settings = ApiSettings(api_tokens_file=path)
    admin, _ = create_token(path, subject="ops-admin", role=Role.ADMIN)
    submitter, _ = create_token(path, subject="team-a-ci", role=Role.SUBMITTER, queues=("research",))
    conn = await asyncpg.connect(database_url)
    try:
        await apply_migrations(conn)
        await add_producer(conn, KeyringEntry(API_PRODUCER, api_key.public_key, MANIFEST_TYPES))
        await add_producer(conn, KeyringEntry(CLI_PRODUCER, cli_key.public_key, MANIFEST_TYPES))
        signer = EventSigner(api_key, API_PRODUCER)
        async with (
            running_projector(kafka_bootstrap, database_url, topics, _PRODUCTION),
            served(endpoints, settings, signer) as api,
        ):

            async def post(text: str, token: str) -> None:
                answer = await api.post(
                    "/v1/manifests?wait=archived", content=text, headers={**YAML, **bearer(token)}
                )
                assert answer.status_code == 202, answer.text

            await post(CLUSTER, admin)
            await post(job_manifest("by-api", "team-a"), submitter)
            cancelled = await api.delete("/v1/jobs/team-a/by-api?wait=archived", headers=bearer(submitter))
            assert cancelled.status_code == 202, cancelled.text
            manifest = tmp_path / "job.yaml"
            manifest.write_text(job_manifest("by-cli", "team-a"))
            env = {
                **os.environ,
                "TEPHRA_KAFKA_BOOTSTRAP": kafka_bootstrap,
                "TEPHRA_DATABASE_URL": database_url,
                "TEPHRA_TOPICS_PREFIX": topics.prefix,
                "TEPHRA_PRODUCER_KEY_FILE": str(cli_key_file),
            }
            submit = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "api.cli", "submit", str(manifest), env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            _, err = await submit.communicate()
            assert submit.returncode == 0, err.decode()
            await wait_for(
                conn, _PRINCIPAL, f"cli:{local_user()}", "team-a/by-cli", "tephra.job.submitted.v1"
            )
        assert await conn.fetchval(_PRINCIPAL, "team-a/by-api", "tephra.job.submitted.v1") == "api:team-a-ci"
        assert await conn.fetchval(_PRINCIPAL, "team-a/by-api", "tephra.job.cancelled.v1") == "api:team-a-ci"
        queues = await conn.fetch("SELECT principal FROM event_log WHERE type = 'tephra.queue.upserted.v1'")
        assert {r["principal"] for r in queues} == {"api:ops-admin"}
        assert await conn.fetchval("SELECT count(*) FROM rejected_events") == 0
        assert await conn.fetchval("SELECT count(*) FROM event_log WHERE signature IS NULL") == 0
    finally:
        await conn.close()
    audit = run_replay(database_url, "audit", "actions", "--job", "team-a/by-api", "-o", "csv")
    assert audit.returncode == 0, audit.stderr
    assert [line.split(",")[2:6] for line in audit.stdout.splitlines()[1:]] == [
        ["api:team-a-ci", "true", "submit", "job/team-a/by-api"],
        ["api:team-a-ci", "true", "cancel", "job/team-a/by-api"],
    ]
