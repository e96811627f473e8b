"""``tephra get`` over a live projection: the documented JSON items, tables, YAML, and clear errors."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest
import yaml
from typer.testing import CliRunner

from api.cli import app
from api.demo_manifests import CLUSTER, WORKLOADS
from api.endpoints import Endpoints
from api.manifests import parse_manifests
from api.submit import produce_manifests
from events.topics import Topics
from tests.api.helpers import live_stack
from tests.service.helpers import wait_for

pytestmark = pytest.mark.integration


async def settled_demo_cluster(endpoints: Endpoints) -> None:
    """The demo's cluster and first workloads, waited on until demo-training and batch-inference run."""
    for name, text in (("cluster.yaml", CLUSTER), ("workloads.yaml", WORKLOADS)):
        manifests = parse_manifests([(name, text)], cluster=endpoints.cluster, now=datetime.now(UTC))
        await produce_manifests(manifests, endpoints)
    conn = await asyncpg.connect(endpoints.database_url)
    try:
        await wait_for(conn, "SELECT count(*) FROM jobs WHERE phase = 'Running'", 2)
        await wait_for(conn, "SELECT count(*) FROM tasks WHERE status = 'Running'", 5)
    finally:
        await conn.close()


def tephra(endpoints: Endpoints, *args: str, code: int = 0) -> str:
    """``tephra ...`` as a user runs it at 80 columns (in a worker thread: it runs its own event loop)."""
    env = {
        "TEPHRA_KAFKA_BOOTSTRAP": endpoints.kafka_bootstrap,
        "TEPHRA_DATABASE_URL": endpoints.database_url,
        "TEPHRA_TOPICS_PREFIX": endpoints.topics.prefix,
        "COLUMNS": "80",
    }
    result = CliRunner().invoke(app, list(args), env=env)
    assert result.exit_code == code, result.output
    return result.stdout if code == 0 else result.stderr


def cli(endpoints: Endpoints, *args: str) -> str:
    """``tephra get ...``."""
    return tephra(endpoints, "get", *args)


async def test_get_lists_jobs_queues_nodes_and_sessions(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    endpoints = Endpoints(kafka_bootstrap, database_url, topics, "default")
    async with live_stack(endpoints):
        await settled_demo_cluster(endpoints)
        jobs = json.loads(await asyncio.to_thread(cli, endpoints, "jobs", "-o", "json"))["items"]
        queues = yaml.safe_load(await asyncio.to_thread(cli, endpoints, "queues", "-o", "yaml"))["items"]
        nodes = json.loads(await asyncio.to_thread(cli, endpoints, "nodes", "-o", "json"))["items"]
        sessions = json.loads(await asyncio.to_thread(cli, endpoints, "sessions", "-o", "json"))["items"]
        jobs_table = await asyncio.to_thread(cli, endpoints, "jobs")
        nodes_table = await asyncio.to_thread(cli, endpoints, "nodes")
        sessions_table = await asyncio.to_thread(cli, endpoints, "sessions")

    by_id = {j["id"]: j for j in jobs}
    assert sorted(by_id) == ["default/batch-inference", "default/demo-training", "default/llm-pretrain"]
    training = by_id["default/demo-training"]
    assert (training["queue"], training["phase"], training["minAvailable"]) == ("default", "Running", 2)
    assert training["tasks"] == {
        "Pending": 0,
        "Bound": 0,
        "Running": 2,
        "Releasing": 0,
        "Succeeded": 0,
        "Failed": 0,
    }
    stuck = by_id["default/llm-pretrain"]
    assert stuck["phase"] == "Pending"
    assert stuck["tasks"]["Pending"] == 4
    assert stuck["pendingReasons"][0]["code"]

    assert [q["name"] for q in queues] == ["default", "training"]
    assert queues[0]["allocated"] == {"nvidia.com/gpu": "2", "pods": "2"}

    assert [n["name"] for n in nodes] == ["gpu-1", "gpu-2", "gpu-3"]
    assert sum(int(n["used"].get("nvidia.com/gpu", "0")) for n in nodes) == 2 + 18
    assert all(n["allocatable"]["nvidia.com/gpu"] == "8" for n in nodes)

    assert sessions
    assert all(s["id"] and s["seq"] > 0 for s in sessions)
    assert sum(s["accepted"] for s in sessions) >= 5  # 5 bindings (+ enqueues)
    # The scheduler records how long each of its sessions took; the view joins them in.  It
    # records a session once it has seen it applied, so the newest one may not have its
    # durations yet (a race this test lost in CI once the projector applied sessions sooner).
    *recorded, newest = sessions
    if newest["durations"] is not None:
        recorded.append(newest)
    assert recorded
    assert all(set(s["durations"]) == {"read", "compute", "publish", "apply"} for s in recorded)
    assert all(s["durations"]["compute"] > 0 for s in recorded)

    # kubectl's layout at 80 columns: whole names, the pending gang's reason code only.
    header, *lines = jobs_table.splitlines()
    assert header.split() == ["NAME", "QUEUE", "PHASE", "READY", "AGE", "REASON"]
    assert all(len(line) <= 80 for line in jobs_table.splitlines()), jobs_table
    rows = {line.split()[0]: line.split() for line in lines}
    assert sorted(rows) == ["batch-inference", "demo-training", "llm-pretrain"]
    assert rows["llm-pretrain"][1:4] == ["training", "Pending", "0/4"]
    codes = list(dict.fromkeys(r["code"] for r in stuck["pendingReasons"]))
    more = f" (+{len(codes) - 1})" if len(codes) > 1 else ""
    assert jobs_table.splitlines()[1 + sorted(rows).index("llm-pretrain")].endswith(codes[0] + more)
    assert rows["demo-training"][1:4] == ["default", "Running", "2/2"]
    assert "NAME" in nodes_table
    assert sessions_table.splitlines()[0].split()[-1] == "TOOK"
    assert "/8" in nodes_table


def test_get_refuses_unknown_kinds_and_formats_with_a_message(tmp_path: object) -> None:
    env = {"TEPHRA_KAFKA_BOOTSTRAP": "127.0.0.1:9", "TEPHRA_DATABASE_URL": "postgresql://x@127.0.0.1:9/x"}
    result = CliRunner().invoke(app, ["get", "pods"], env=env)
    assert result.exit_code == 2
    assert "unknown kind 'pods'; expected one of: jobs, queues, nodes, sessions" in result.stderr
    result = CliRunner().invoke(app, ["get", "jobs", "-o", "xml"], env=env)
    assert result.exit_code == 2
    assert "unknown output format 'xml'; expected one of: table, wide, json, yaml, name" in result.stderr
    result = CliRunner().invoke(app, ["describe", "job", "x", "-o", "xml"], env=env)
    assert result.exit_code == 2
    assert "unknown output format 'xml'" in result.stderr


def test_get_without_a_running_stack_says_how_to_start_one(tmp_path: object) -> None:
    result = CliRunner().invoke(app, ["get", "jobs"], env={"TEPHRA_DATA_DIR": str(tmp_path)})
    assert result.exit_code == 2
    assert "no Tephra stack is running" in result.stderr
    assert "tephra up" in result.stderr


async def test_get_by_name_namespaces_wide_name_describe_and_cancel(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    endpoints = Endpoints(kafka_bootstrap, database_url, topics, "default")

    def run(*args: str, code: int = 0) -> str:
        return tephra(endpoints, *args, code=code)

    async with live_stack(endpoints):
        await settled_demo_cluster(endpoints)
        one = await asyncio.to_thread(run, "get", "jobs", "llm-pretrain", "-o", "json")
        qualified = await asyncio.to_thread(run, "get", "job", "default/llm-pretrain", "-o", "name")
        missing = await asyncio.to_thread(run, "get", "jobs", "nope", code=1)
        elsewhere = await asyncio.to_thread(run, "get", "jobs", "-n", "research")
        every = await asyncio.to_thread(run, "get", "jobs", "-A")
        wide = await asyncio.to_thread(run, "get", "jobs", "-o", "wide")
        names = await asyncio.to_thread(run, "get", "nodes", "-o", "name")
        node = await asyncio.to_thread(run, "get", "nodes", "gpu-2", "-o", "json")
        described = await asyncio.to_thread(run, "describe", "job", "llm-pretrain")
        described_json = await asyncio.to_thread(
            run, "describe", "job", "default/demo-training", "-o", "json"
        )
        no_such = await asyncio.to_thread(run, "describe", "job", "nope", code=1)
        queue = await asyncio.to_thread(run, "describe", "queue", "training")
        described_node = await asyncio.to_thread(run, "describe", "node", "gpu-1", "-o", "json")
        no_node = await asyncio.to_thread(run, "describe", "node", "gpu-9", code=1)
        cancelled = await asyncio.to_thread(run, "cancel", "job", "llm-pretrain", "--reason", "not today")
        cannot = await asyncio.to_thread(run, "cancel", "job", "nope", code=1)
        conn = await asyncpg.connect(endpoints.database_url)
        try:
            await wait_for(
                conn, "SELECT count(*) FROM jobs WHERE id = 'default/llm-pretrain' AND phase = 'Cancelled'", 1
            )
            archived = await conn.fetchrow(
                "SELECT source, data ->> 'reason' AS reason FROM event_log"
                " WHERE job = 'default/llm-pretrain' AND type = 'tephra.job.cancelled.v1'"
            )
        finally:
            await conn.close()

    assert [j["id"] for j in json.loads(one)["items"]] == ["default/llm-pretrain"]
    assert qualified == "job/default/llm-pretrain\n"
    assert "job 'nope' not found in namespace default" in missing
    assert elsewhere == "No jobs found in namespace research (-A: every namespace).\n"
    assert every.split()[:2] == ["NAMESPACE", "NAME"]
    assert ["default", "llm-pretrain"] in [line.split()[:2] for line in every.splitlines()]
    # -o wide: every task count and each pending reason's whole text.
    assert "SUCCEEDED" in wide.splitlines()[0]
    stuck = json.loads(one)["items"][0]
    assert (
        f"{stuck['pendingReasons'][0]['code']}: resource in cluster is overused" in wide
    )  # the numbers vary
    assert names == "node/gpu-1\nnode/gpu-2\nnode/gpu-3\n"
    assert [n["name"] for n in json.loads(node)["items"]] == ["gpu-2"]

    assert_describes_the_pending_gang(described, stuck)
    training = json.loads(described_json)
    assert training["phase"] == "Running"
    assert [e["event"] for e in training["events"]].count("Bound") == 2
    assert [e["detail"][:7] for e in training["events"] if e["event"] == "Started"] == ["on gpu-"] * 2
    assert all(t["node"] for t in training["taskList"])
    assert "job 'default/nope' not found" in no_such
    assert_describes_a_queue_and_a_node(queue, described_node, no_node)

    # cancel: a JobCancelled through the producer path, archived with its reason.
    assert cancelled == "job/default/llm-pretrain cancelled\n"
    assert "no job default/nope in the projection" in cannot
    assert archived is not None
    assert (archived["source"], archived["reason"]) == ("tephra://cli/cancel", "not today")


def assert_describes_a_queue_and_a_node(queue: str, node: str, no_node: str) -> None:
    assert "Capability:" in queue
    assert "memory: 192Gi" in queue.split("Allocated:")[1].splitlines()[0]  # quantities as people write them
    assert ["Pending", "1"] in [line.split() for line in queue.split("Jobs:")[1].splitlines()]
    gpu_1 = json.loads(node)
    assert gpu_1["allocatable"]["nvidia.com/gpu"] == "8"
    assert gpu_1["taskList"]
    assert all(t["status"] in {"Bound", "Running"} for t in gpu_1["taskList"])
    assert "node 'gpu-9' not found" in no_node


def assert_describes_the_pending_gang(described: str, stuck: dict[str, Any]) -> None:
    """describe: facts, the tasks, the newest session's pending reasons, the events."""
    facts = dict(line.split(":", 1) for line in described.split("\n\n", maxsplit=1)[0].splitlines())
    assert {k: facts[k].strip() for k in ("Name", "Namespace", "Queue", "Phase", "Min Available")} == {
        "Name": "llm-pretrain",
        "Namespace": "default",
        "Queue": "training",
        "Phase": "Pending",
        "Min Available": "4",
    }
    assert "Task List:" in described
    assert described.count("Pending  -") == 4  # four tasks, none on a node
    assert "Pending Reasons (session " in described  # the newest session's, which a later one may replace
    assert f"  {stuck['pendingReasons'][0]['code']}: resource in cluster is overused" in described
    (submitted,) = [line for line in described.split("Events:")[1].splitlines() if "Submitted" in line]
    assert submitted.endswith("to queue training")


def test_tephra_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.startswith("tephra ")


async def test_delete_queue_refuses_a_queue_with_unfinished_jobs_and_deletes_an_idle_one_and_labels_select(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    endpoints = Endpoints(kafka_bootstrap, database_url, topics, "default")
    idle = (
        "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: idle}\nspec: {weight: 1}\n"
    )

    def run(*args: str, code: int = 0) -> str:
        return tephra(endpoints, *args, code=code)

    async with live_stack(endpoints):
        await settled_demo_cluster(endpoints)
        await produce_manifests(
            parse_manifests([("idle.yaml", idle)], cluster=endpoints.cluster, now=datetime.now(UTC)),
            endpoints,
        )
        conn = await asyncpg.connect(endpoints.database_url)
        try:
            await wait_for(conn, "SELECT count(*) FROM queues WHERE name = 'idle'", 1)
            busy = await asyncio.to_thread(run, "delete", "queue", "training", code=1)
            missing = await asyncio.to_thread(run, "delete", "queue", "nope", code=1)
            deleted = await asyncio.to_thread(run, "delete", "queue", "idle")
            a100 = await asyncio.to_thread(run, "get", "nodes", "-l", "gpu-type=a100", "-o", "name")
            h100 = await asyncio.to_thread(run, "get", "nodes", "-l", "gpu-type=h100")
            unlabelled = await asyncio.to_thread(run, "get", "jobs", "-l", "team=ml", code=2)
            await wait_for(conn, "SELECT count(*) FROM queues WHERE name = 'idle'", 0)
            source = await conn.fetchval(
                "SELECT source FROM event_log"
                " WHERE type = 'tephra.queue.deleted.v1' AND data ->> 'name' = 'idle'"
            )
        finally:
            await conn.close()
    assert "queue training still holds jobs (1 Pending, 1 Running); cancel them first" in busy
    assert "no queue nope in the projection" in missing
    assert deleted == "queue/idle deleted\n"
    assert source == "tephra://cli/delete"
    assert a100 == "node/gpu-1\nnode/gpu-2\nnode/gpu-3\n"
    assert h100 == "No nodes found.\n"
    assert "-l: jobs have no labels; only nodes do" in unlabelled


async def test_get_watch_prints_the_table_then_each_row_that_changes(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    endpoints = Endpoints(kafka_bootstrap, database_url, topics, "default")
    env = {
        **os.environ,
        "TEPHRA_KAFKA_BOOTSTRAP": endpoints.kafka_bootstrap,
        "TEPHRA_DATABASE_URL": endpoints.database_url,
        "TEPHRA_TOPICS_PREFIX": endpoints.topics.prefix,
    }
    async with live_stack(endpoints):
        await settled_demo_cluster(endpoints)
        watcher = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "api.cli", "get", "jobs", "-w", "--watch-interval", "0.2",
            env=env, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert watcher.stdout is not None
        try:

            async def line() -> list[str]:
                return (await asyncio.wait_for(watcher.stdout.readline(), 60)).decode().split()  # type: ignore[union-attr]

            first = [await line() for _ in range(4)]
            await asyncio.to_thread(tephra, endpoints, "cancel", "job", "llm-pretrain")
            change = await line()
            while change[0] != "llm-pretrain":  # a running job's row may change too (its tasks)
                change = await line()
        finally:
            watcher.terminate()
            await watcher.wait()
    assert first[0] == ["NAME", "QUEUE", "PHASE", "READY", "AGE", "REASON"]
    assert sorted(row[0] for row in first[1:]) == ["batch-inference", "demo-training", "llm-pretrain"]
    assert change[:3] == ["llm-pretrain", "training", "Cancelled"]
