"""The HTTP API against the real broker and PostgreSQL: reads, writes, read-your-writes, problems."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.demo_manifests import CLUSTER, URGENT, WORKLOADS
from api.endpoints import Endpoints
from api.http.app import create_app
from api.http.context import open_context
from api.http.openapi import openapi_text
from api.http.server import bind, serve_api
from api.http.settings import ApiSettings
from events.signing import EventSigner
from events.topics import Topics
from tests.api.helpers import live_stack
from tests.service.helpers import running_projector, stopped

ROOT = Path(__file__).resolve().parents[2]
YAML = {"content-type": "application/yaml"}
PROBLEM = "application/problem+json"
_JOB = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  queue: {queue}
  tasks:
    - name: worker
      replicas: 1
      template:
        spec:
          containers:
            - {{name: main, image: busybox, resources: {{requests: {{cpu: "1"}}}}}}
"""


def job_manifest(name: str, namespace: str = "default", queue: str = "research") -> str:
    """A one-task VolcanoJob."""
    return _JOB.format(name=name, namespace=namespace, queue=queue)


JOB = job_manifest("lonely")


def test_docs_openapi_is_the_document_the_api_serves() -> None:
    written = (ROOT / "docs" / "openapi.json").read_text(encoding="utf-8")
    stale = "docs/openapi.json is stale: python -m api.http.openapi > docs/openapi.json"
    assert written == openapi_text(), stale
    assert json.loads(written)["openapi"].startswith("3.1")


@asynccontextmanager
async def served(
    endpoints: Endpoints, settings: ApiSettings, signer: EventSigner | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """The API as ``tephra api`` serves it (uvicorn, a free loopback port), and a client of it."""
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    sock = bind(settings.model_copy(update={"api_addr": "127.0.0.1:0"}))
    server = asyncio.create_task(
        serve_api(settings, endpoints, sock=sock, on_ready=ready.set_result, signer=signer)
    )
    try:
        await asyncio.wait({server, ready}, return_when=asyncio.FIRST_COMPLETED)
        if server.done():
            server.result()
        async with httpx.AsyncClient(base_url=ready.result(), timeout=120) as client:
            yield client
    finally:
        server.cancel()
        await stopped(server)


def problem(response: httpx.Response, status: int, code: str) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body = response.json()
    assert (body["status"], body["code"], body["type"]) == (status, code, f"urn:tephra:problem:{code}")
    assert "Traceback" not in response.text
    return body


async def test_submit_read_explain_audit_and_cancel_over_http(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    endpoints = Endpoints(kafka_bootstrap, database_url, topics, "default")
    async with live_stack(endpoints), served(endpoints, ApiSettings()) as api:
        cluster = await api.post("/v1/manifests?wait=archived", content=CLUSTER, headers=YAML)
        assert cluster.status_code == 202, cluster.text
        body = cluster.json()
        assert body["waited"]
        assert body["seq"] == max(o["seq"] for o in body["objects"])
        assert {o["ref"] for o in body["objects"]} >= {"queue/default", "queue/training", "node/gpu-1"}

        workloads = await api.post("/v1/manifests?wait=decided", content=WORKLOADS, headers=YAML)
        assert workloads.status_code == 202, workloads.text
        decided = {o["ref"]: o for o in workloads.json()["objects"]}
        assert decided["job/default/llm-pretrain"]["session"]
        assert decided["job/default/llm-pretrain"]["phase"] == "Pending"
        await check_reads(api, workloads.json()["seq"])
        await check_audit_and_cancel(api)


async def check_reads(api: httpx.AsyncClient, seq: int) -> None:
    """The demo's cluster and workloads, submitted up to ``seq``, through every read route."""
    # Read-your-writes: at min_seq the projection holds every job of the submission.
    jobs = (await api.get("/v1/jobs", params={"min_seq": seq})).json()
    assert jobs["seq"] >= seq
    assert jobs["nextCursor"] is None
    ids = [j["id"] for j in jobs["items"]]
    assert ids == ["default/batch-inference", "default/demo-training", "default/llm-pretrain"]

    # Cursor pagination walks the same jobs, one per page.
    walked, cursor = [], None
    while True:
        params = {"limit": 1} | ({"cursor": cursor} if cursor else {})
        page = (await api.get("/v1/jobs", params=params)).json()
        walked += [j["id"] for j in page["items"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert walked == ids
    training = (await api.get("/v1/jobs", params={"queue": "training"})).json()["items"]
    assert [j["id"] for j in training] == ["default/batch-inference", "default/llm-pretrain"]
    namespaced = (await api.get("/v1/jobs", params={"namespace": "elsewhere"})).json()["items"]
    assert namespaced == []
    pending = (await api.get("/v1/jobs", params={"phase": "Pending", "reasons": True})).json()["items"]
    assert "default/llm-pretrain" in [j["id"] for j in pending]
    assert pending[-1]["pendingReasons"][0]["code"]

    job = (await api.get("/v1/jobs/default/llm-pretrain")).json()
    assert job["minAvailable"] == 4
    assert len(job["taskList"]) == 4
    assert {t["status"] for t in job["taskList"]} == {"Pending"}

    queues = {q["name"]: q for q in (await api.get("/v1/queues")).json()["items"]}
    assert set(queues) == {"default", "training"}
    nodes = (await api.get("/v1/nodes")).json()["items"]
    assert [n["name"] for n in nodes] == ["gpu-1", "gpu-2", "gpu-3"]
    sessions = (await api.get("/v1/sessions", params={"limit": 5})).json()["items"]
    assert 1 <= len(sessions) <= 5
    session = (await api.get(f"/v1/sessions/{sessions[-1]['id']}")).json()
    assert session["session"] == sessions[-1]["id"]
    assert session["verified"]

    explained = (await api.get("/v1/jobs/default/llm-pretrain/explain")).json()
    assert explained["job"] == "default/llm-pretrain"
    assert explained["reasons"]
    assert explained["counterfactual"] is not None


async def check_audit_and_cancel(api: httpx.AsyncClient) -> None:
    # A preemption (the demo's third stage), then the audit in JSON and in CSV.
    urgent = await api.post("/v1/manifests?wait=decided", content=URGENT, headers=YAML)
    assert urgent.status_code == 202, urgent.text
    # "decided" is the first session that saw the job; the preemption for it may come a session
    # later (the job is admitted first), so the audit is read until it names one (bounded).
    rows: list[dict[str, Any]] = []
    for _ in range(300):
        audit = await api.get("/v1/audit/preemptions", params={"min_seq": urgent.json()["seq"]})
        rows = audit.json()["items"]
        if rows:
            break
        await asyncio.sleep(0.1)
    assert rows, "no preemption for the urgent job within 30 s"
    assert rows[0]["preemptor"]["job"] == "default/urgent-train"
    as_csv = await api.get("/v1/audit/preemptions", headers={"accept": "text/csv"})
    assert as_csv.headers["content-type"].startswith("text/csv")
    table = list(csv.DictReader(io.StringIO(as_csv.text)))
    assert [r["victim_job"] for r in table] == [r["victim"]["job"] for r in rows]
    png = await api.get("/v1/audit/preemptions", headers={"accept": "image/png"})
    problem(png, 406, "not-acceptable")

    # replay verify in the background: the chain and every session re-derived.
    started = await api.post("/v1/verify")
    assert started.status_code == 202, started.text
    assert started.json()["state"] == "running"
    verified = started.json()
    for _ in range(600):
        verified = (await api.get("/v1/verify")).json()
        if verified["state"] != "running":
            break
        await asyncio.sleep(0.1)
    assert verified["state"] == "done", verified
    assert verified["result"]["ok"]
    assert verified["result"]["sessions"] >= 1

    cancelled = await api.delete("/v1/jobs/default/llm-pretrain", params={"wait": "archived"})
    assert cancelled.status_code == 202, cancelled.text
    (obj,) = cancelled.json()["objects"]
    assert obj["eventType"] == "tephra.job.cancelled.v1"
    assert obj["seq"] is not None
    after = (await api.get("/v1/jobs/default/llm-pretrain", params={"min_seq": obj["seq"]})).json()
    assert after["phase"] == "Cancelled"

    # What the projector refuses comes back with its code: a second cancellation.
    again = await api.delete("/v1/jobs/default/llm-pretrain", params={"wait": "archived"})
    assert again.json()["objects"][0]["rejected"]["error"] == "job-finished"
    await check_name_reuse(api, after["uid"])


async def check_name_reuse(api: httpx.AsyncClient, cancelled_uid: int) -> None:
    """The demo's workloads, llm-pretrain cancelled (``cancelled_uid``), the others unfinished."""
    # A second submission of jobs that have not finished is refused whole before anything is
    # produced (409), each named with its phase and the way out, as Kubernetes' AlreadyExists.
    twice = await api.post("/v1/manifests?wait=archived", content=WORKLOADS, headers=YAML)
    body = problem(twice, 409, "duplicate-job")
    errors: list[dict[str, Any]] = body["errors"]  # type: ignore[assignment]
    assert [(e["kind"], e["name"], e["field"]) for e in errors] == [
        ("Job", "demo-training", "metadata.name"),
        ("Job", "batch-inference", "metadata.name"),
    ]
    assert errors[0]["message"].startswith("request.yaml, document 1 (Job demo-training): metadata.name: job")
    assert "cancel it with DELETE /v1/jobs/default/demo-training" in body["detail"]  # type: ignore[operator]
    assert str(body["detail"]).endswith("; nothing was submitted")
    # The cancelled one (its tasks were all Pending: it has finished) takes its name again, as a
    # new incarnation.
    (llm,) = [doc for doc in WORKLOADS.split("---\n") if "name: llm-pretrain" in doc]
    alone = await api.post("/v1/manifests?wait=archived", content=llm, headers=YAML)
    assert alone.status_code == 202, alone.text
    assert alone.json()["objects"][0]["rejected"] is None
    reused = (await api.get("/v1/jobs/default/llm-pretrain", params={"min_seq": alone.json()["seq"]})).json()
    assert (reused["phase"], reused["uid"]) == ("Pending", alone.json()["seq"])
    assert [(i["id"], i["phase"]) for i in reused["earlierIncarnations"]] == [
        (f"default/llm-pretrain#{cancelled_uid}", "Cancelled")
    ]
    page = await api.get("/jobs/default/llm-pretrain")
    assert page.status_code == 200, page.text
    assert "Earlier incarnations" in page.text


async def test_refusals_are_problem_details_and_submit_nothing(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    endpoints = Endpoints(kafka_bootstrap, database_url, topics, "default")
    settings = ApiSettings(api_body_limit=64 * 1024, api_wait_limit=0.5)
    async with running_projector(kafka_bootstrap, database_url, topics), served(endpoints, settings) as api:
        bad_yaml = await api.post("/v1/manifests", content="kind: [unclosed", headers=YAML)
        body = problem(bad_yaml, 422, "invalid-manifests")
        (error,) = body["errors"]  # type: ignore[misc]
        assert error["message"].startswith("request.yaml, document 1: (yaml): not valid YAML")

        unknown_queue = problem(
            await api.post("/v1/manifests", content=JOB, headers=YAML), 422, "invalid-manifests"
        )
        (error,) = unknown_queue["errors"]  # type: ignore[misc]
        assert (error["field"], error["name"]) == ("spec.queue", "lonely")
        assert "queue 'research' does not exist" in error["message"]

        # All or nothing: the queues and a valid job with one invalid job produce nothing.
        job = JOB.replace("research", "default")
        mixed = CLUSTER + "---\n" + job + "---\n" + job.replace("lonely", "Bad_Name")
        problem(await api.post("/v1/manifests", content=mixed, headers=YAML), 422, "invalid-manifests")
        assert (await api.get("/v1/queues")).json()["items"] == []

        as_json = json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {}})
        invalid = problem(
            await api.post("/v1/manifests", content=as_json, headers={"content-type": "application/json"}),
            422,
            "invalid-manifests",
        )
        assert invalid["errors"][0]["file"] == "request.json"  # type: ignore[index]

        too_large = await api.post("/v1/manifests", content=" " * (64 * 1024 + 1), headers=YAML)
        problem(too_large, 413, "body-too-large")

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(65):
                yield b" " * 1024

        problem(await api.post("/v1/manifests", content=chunks(), headers=YAML), 413, "body-too-large")
        problem(await api.post("/v1/manifests", content="x", headers={"content-type": "text/plain"}), 415,
                "unsupported-media-type")  # fmt: skip
        problem(await api.post("/v1/manifests", content="", headers=YAML), 422, "invalid-manifests")

        missing = problem(await api.get("/v1/jobs/default/nope"), 404, "not-found")
        assert missing["instance"] == "/v1/jobs/default/nope"
        problem(await api.delete("/v1/jobs/default/nope"), 404, "not-found")
        problem(await api.get("/v1/jobs/default/nope/explain"), 404, "not-found")
        problem(await api.get("/v1/sessions/nope"), 404, "not-found")
        problem(await api.get("/v1/verify"), 404, "not-found")  # none has run
        problem(await api.get("/v1/nowhere"), 404, "not-found")
        problem(await api.get("/v1/jobs", params={"limit": 0}), 422, "invalid-parameter")
        problem(await api.get("/v1/jobs", params={"phase": "Sleeping"}), 422, "invalid-parameter")
        problem(await api.get("/v1/jobs", params={"cursor": "%%%"}), 400, "invalid-cursor")
        # PostgreSQL's text holds no NUL: a parameter with one is the caller's problem, not a 500.
        problem(await api.get("/v1/jobs", params={"namespace": "a\x00"}), 422, "invalid-parameter")
        problem(await api.get("/v1/jobs/a%00/x/explain"), 422, "invalid-parameter")
        await check_seq_times_and_methods(api)

        # With no tokens configured, a client that is not on loopback may read but not write.
        async with open_context(settings, endpoints) as ctx:
            remote = httpx.ASGITransport(app=create_app(settings, ctx), client=("192.0.2.7", 40000))
            async with httpx.AsyncClient(transport=remote, base_url="http://api") as outsider:
                assert (await outsider.get("/v1/queues")).status_code == 200
                refused = problem(
                    await outsider.post("/v1/manifests", content=CLUSTER, headers=YAML),
                    403,
                    "writes-need-loopback",
                )
                assert "192.0.2.7" in str(refused["detail"])
                problem(await outsider.delete("/v1/jobs/default/x"), 403, "writes-need-loopback")


async def check_seq_times_and_methods(api: httpx.AsyncClient) -> None:
    # A seq no write answered (past the archive's end): refused at once, not waited for.
    ahead = problem(await api.get("/v1/jobs", params={"min_seq": 10**9}), 409, "seq-not-archived")
    assert "no event has seq 1000000000 yet (the archive ends at seq" in str(ahead["detail"])
    problem(await api.get("/v1/audit/preemptions", params={"min_seq": 10**9}), 409, "seq-not-archived")
    problem(await api.get("/v1/audit/preemptions", params={"since": "1700000000"}), 422, "invalid-parameter")
    # Every method a path serves, in a 405's Allow (a job's GET and DELETE are two routes).
    put = await api.put("/v1/jobs/default/nope")
    problem(put, 405, "method-not-allowed")
    assert put.headers["allow"] == "DELETE, GET"


async def test_tephra_api_serves_until_sigterm(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TEPHRA_")},
        "TEPHRA_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "TEPHRA_DATABASE_URL": database_url,
        "TEPHRA_TOPICS_PREFIX": topics.prefix,
        "TEPHRA_API_ADDR": "127.0.0.1:0",
        "PYTHONPATH": str(ROOT),
    }
    async with running_projector(kafka_bootstrap, database_url, topics):  # the schema, migrated
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "api.cli",
            "api",
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            assert process.stdout is not None
            line = (await asyncio.wait_for(process.stdout.readline(), timeout=60)).decode()
            assert line.startswith("tephra: API at http://127.0.0.1:"), line
            async with httpx.AsyncClient(base_url=line.split(" at ")[1].strip()) as api:
                assert (await api.get("/v1/queues")).json() == {"items": [], "seq": 0}
        finally:
            process.send_signal(signal.SIGTERM)
            _, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
        assert process.returncode == 0, stderr.decode()
        assert b"no API tokens are configured" in stderr


def test_an_address_in_use_is_named_with_the_setting_to_change() -> None:
    taken = bind(ApiSettings(api_addr="127.0.0.1:0"))
    try:
        port = taken.getsockname()[1]
        with pytest.raises(
            OSError, match=rf"cannot listen on TEPHRA_API_ADDR=127.0.0.1:{port}: .*--api-addr"
        ):
            bind(ApiSettings(api_addr=f"127.0.0.1:{port}"))
    finally:
        taken.close()
