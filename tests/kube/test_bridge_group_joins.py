"""Pods that join a PodGroup after its job was submitted, on the real apiserver: each is added to
the job (TasksAdded) and bound, as Volcano's scheduler takes pods into a PodGroup's job."""

from __future__ import annotations

import asyncpg
import pytest

from kube.bridge.store import GROUP_ROLES_QUERY
from kube.rest import JsonObject, json_str, resource_path
from projector.state import TERMINAL_JOB_PHASES
from tests.kube import test_bridge
from tests.kube.test_bridge import Stack, eventually

pytestmark = pytest.mark.integration

# The bridge's stack, as tests/kube/test_bridge.py runs it.
endpoints, services_settings = test_bridge.endpoints, test_bridge.services_settings
services, cluster, stack = test_bridge.services, test_bridge.cluster, test_bridge.stack
bridge_signer = test_bridge.bridge_signer


async def _group(stack: Stack, name: str, min_member: int) -> None:
    body: JsonObject = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": stack.namespace},
        "spec": {"minMember": min_member},
    }
    await stack.kube.create(
        resource_path("scheduling.volcano.sh/v1beta1", "podgroups", namespace=stack.namespace), body
    )


async def _member(stack: Stack, group: str, name: str) -> None:
    body: JsonObject = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": stack.namespace,
            "annotations": {"scheduling.k8s.io/group-name": group},
        },
        "spec": {"schedulerName": "volcano", "containers": [{"name": "main", "image": "demo/x"}]},
    }
    await stack.kube.create(resource_path("v1", "pods", namespace=stack.namespace), body)


async def _running(stack: Stack, name: str) -> None:
    path = resource_path("v1", "pods", namespace=stack.namespace, name=name)
    await eventually(
        lambda: stack.kube.get(path),
        lambda p: isinstance(p, dict) and json_str(p, "status", "phase") == "Running",
    )


async def _tasks(stack: Stack, job_id: str) -> list[tuple[str, str]]:
    conn = await asyncpg.connect(stack.database_url)
    try:
        rows = await conn.fetch("SELECT id, status FROM tasks WHERE job_id = $1 ORDER BY id", job_id)
        added = await conn.fetchval(
            "SELECT count(*) FROM event_log WHERE job = $1 AND type = 'tephra.job.tasks-added.v1'", job_id
        )
        rejected = await conn.fetch("SELECT error, detail FROM rejected_events")
    finally:
        await conn.close()
    assert [(r["error"], r["detail"]) for r in rejected] == []
    return [(r["id"], r["status"]) for r in rows] + [("tasks-added events", str(added))]


async def test_a_third_pod_of_a_gang_of_two_joins_its_job_and_runs(stack: Stack) -> None:
    await _group(stack, "trio", 2)
    for name in ("a", "b"):
        await _member(stack, "trio", name)
    for name in ("a", "b"):
        await _running(stack, name)
    await _member(stack, "trio", "c")
    await _running(stack, "c")
    ns = stack.namespace
    expected = [
        (f"{ns}/a", "Running"),
        (f"{ns}/b", "Running"),
        (f"{ns}/c", "Running"),
        ("tasks-added events", "1"),
    ]
    await eventually(lambda: _tasks(stack, f"{ns}/trio"), lambda tasks: tasks == expected)
    # The job's row holds the added spec: a restarted bridge reads the group's roles from it.
    conn = await asyncpg.connect(stack.database_url)
    try:
        rows = await conn.fetch(GROUP_ROLES_QUERY, sorted(TERMINAL_JOB_PHASES))
        roles = {row["id"]: sorted(row["roles"]) for row in rows}
    finally:
        await conn.close()
    assert roles[f"{ns}/trio"] == ["a", "b", "c"]


async def test_pods_created_one_by_one_after_their_podgroup_each_run(stack: Stack) -> None:
    await _group(stack, "steady", 1)
    names = ["p1", "p2", "p3"]
    for name in names:
        await _member(stack, "steady", name)
        await _running(stack, name)
    ns = stack.namespace
    expected = [*((f"{ns}/{name}", "Running") for name in names), ("tasks-added events", "2")]
    # The pods run; the projection follows (the bridge's TaskStarted).
    await eventually(lambda: _tasks(stack, f"{ns}/steady"), lambda tasks: tasks == expected)
    verified = test_bridge._replay(stack, "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
