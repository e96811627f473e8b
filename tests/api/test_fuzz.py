"""Schema-driven fuzzing (schemathesis) of a running ``tephra api`` over a real projection.

Every operation of the served OpenAPI document gets generated requests, valid
and invalid, in a fixed number per operation, generated deterministically (so a CI
run is the same run each time); tests/api/schemathesis.toml says what the
document cannot; every answer must be no server error, match its
documented status, content type and schema, and invalid input must be refused.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from api.demo_manifests import CLUSTER, URGENT, WORKLOADS
from api.endpoints import Endpoints
from api.http.tokens import Role, create_token
from events.topics import Topics
from tests.api.helpers import live_stack

ROOT = Path(__file__).resolve().parents[2]
#: Requests per operation (deterministic generation: the same requests every run), bounded for CI.
EXAMPLES = 50
#: Not checked: use_after_free and ensure_resource_availability expect a DELETE to remove what a
#: GET then reads (a cancelled job stays, Cancelled). The rest, every one.
EXCLUDED = "use_after_free,ensure_resource_availability"
#: Without tokens nothing authenticates, by design: the document's bearer scheme is not required
#: then, so the checks that a request without it is refused are left to the run with tokens.
OPEN = ["--exclude-checks=" + EXCLUDED + ",ignored_auth,missing_required_header",
        "--generation-with-security-parameters=false"]  # fmt: skip


@asynccontextmanager
async def tephra_api(endpoints: Endpoints, tokens: Path) -> AsyncIterator[str]:
    """``tephra api`` in its own process on a free loopback port; its URL. Stopped by SIGTERM."""
    env = {
        "TEPHRA_API_TOKENS_FILE": str(tokens),
        **{k: v for k, v in os.environ.items() if not k.startswith("TEPHRA_")},
        "TEPHRA_KAFKA_BOOTSTRAP": endpoints.kafka_bootstrap,
        "TEPHRA_DATABASE_URL": endpoints.database_url,
        "TEPHRA_TOPICS_PREFIX": endpoints.topics.prefix,
        "TEPHRA_API_ADDR": "127.0.0.1:0",
        "TEPHRA_API_WAIT_LIMIT": "2",
        "PYTHONPATH": str(ROOT),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "api.cli", "api", env=env, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), timeout=120)).decode()
        assert line.startswith("tephra: API at "), line
        yield line.split(" at ")[1].strip()
    finally:
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), timeout=60)
    assert process.returncode == 0


@pytest.mark.timeout(600)  # about 700 requests, some of them replays of the archive, on a shared host
@pytest.mark.parametrize("auth", ["open", "tokens"])
async def test_schemathesis_finds_no_server_error_and_no_answer_off_its_schema(
    kafka_bootstrap: str, database_url: str, topics: Topics, tmp_path: Path, auth: str
) -> None:
    """``open``: no token exists (loopback writes); ``tokens``: an admin's bearer token on every
    request, and ignored_auth checks that each operation refuses requests without a valid one."""
    endpoints = Endpoints(kafka_bootstrap, database_url, topics, "default")
    tokens = tmp_path / "tokens.json"
    headers: dict[str, str] = {}
    options = [f"--exclude-checks={EXCLUDED}"]
    if auth == "tokens":
        headers["Authorization"] = f"Bearer {create_token(tokens, subject='fuzz', role=Role.ADMIN)[0]}"
    else:
        options = OPEN
    async with live_stack(endpoints), tephra_api(endpoints, tokens) as url:
        async with httpx.AsyncClient(base_url=url, timeout=120, headers=headers) as api:
            # A projection and an archive with something in them: queues, nodes, running, pending
            # and preempted jobs, sessions.
            for text in (CLUSTER, WORKLOADS, URGENT):
                posted = await api.post(
                    "/v1/manifests?wait=decided", content=text, headers={"content-type": "application/yaml"}
                )
                assert posted.status_code == 202, posted.text
        report = tmp_path / "schemathesis"
        fuzz = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "schemathesis.cli",
            f"--config-file={Path(__file__).with_name('schemathesis.toml')}",
            "run",
            f"{url}/openapi.json",
            "--checks=all",
            *options,
            *[f"--header={name}: {value}" for name, value in headers.items()],
            f"--max-examples={EXAMPLES}",
            "--generation-deterministic",
            "--phases=examples,coverage,fuzzing",
            "--workers=1",
            "--request-timeout=60",
            "--suppress-health-check=too_slow",
            "--no-color",
            "--report=junit",
            f"--report-dir={report}",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=tmp_path,
        )
        output, _ = await fuzz.communicate()
    text = output.decode()
    print(text)
    print(f"schemathesis report: {report}")
    assert fuzz.returncode == 0, text[-20000:]
    assert "No issues found" in text or " passed" in text, text[-5000:]
