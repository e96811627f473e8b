"""A Volcano Queue's status written back by the bridge, on the real apiserver: ``kubectl get queue``
shows its state, its jobs by phase and what its tasks hold; a Closing queue with nothing left
becomes Closed.  The bridge runs with the ServiceAccount of ``deploy/kubernetes/rbac.yaml``."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest
import yaml

from kube.rest import JsonObject, json_object, resource_path
from tests.kube import test_bridge
from tests.kube.test_bridge import Stack, _vcjob, eventually

# The bridge's stack, as tests/kube/test_bridge.py runs it.
endpoints, services_settings = test_bridge.endpoints, test_bridge.services_settings
services, cluster, stack = test_bridge.services, test_bridge.cluster, test_bridge.stack
bridge_signer = test_bridge.bridge_signer

pytestmark = pytest.mark.integration


def _queue(name: str) -> str:
    return f"""\
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata:
  name: {name}
spec:
  weight: 1
"""


async def test_a_queue_shows_its_state_its_jobs_and_what_they_hold(stack: Stack, tmp_path: Path) -> None:
    queue = f"{stack.namespace}-research"
    manifest = tmp_path / "objects.yaml"
    # Two GPU nodes of one GPU each: "fits" runs on both, "waits" waits.
    objects = (_queue(queue), _vcjob("fits", 2, queue=queue), _vcjob("waits", 1, queue=queue))
    manifest.write_text("---\n".join(objects))
    stack.kubectl("apply", "-f", str(manifest))
    path = resource_path("scheduling.volcano.sh/v1beta1", "queues", name=queue)

    def told(value: object) -> bool:
        status = json_object(value, "status") if isinstance(value, dict) else {}
        return status.get("running") == 1 and json_object(status, "allocated").get("pods") == "2"

    try:
        await eventually(lambda: stack.kube.get(path), told)
        shown = yaml.safe_load(stack.kubectl("get", "queue", queue, "-o", "yaml"))
        status = shown["status"]
        assert status["state"] == "Open"
        assert (status["running"], status["pending"] + status["inqueue"], status["completed"]) == (1, 1, 0)
        assert status["allocated"] == {"nvidia.com/gpu": "2", "pods": "2"}
        header, row = (line.split() for line in stack.kubectl("get", "queue", queue).splitlines())
        assert dict(zip(header, row, strict=True)) | {"AGE": ""} == {
            "NAME": queue,
            "WEIGHT": "1",
            "STATE": "Open",
            "PENDING": str(status["pending"]),
            "RUNNING": "1",
            "AGE": "",
        }
    finally:
        stack.kubectl("delete", "-f", str(manifest), "--wait=false")


async def test_a_closing_queue_without_unfinished_jobs_is_closed(stack: Stack, tmp_path: Path) -> None:
    queue = f"{stack.namespace}-retiring"
    manifest = tmp_path / "queue.yaml"
    manifest.write_text(_queue(queue))
    stack.kubectl("apply", "-f", str(manifest))
    path = resource_path("scheduling.volcano.sh/v1beta1", "queues", name=queue)
    try:
        await eventually(
            lambda: stack.kube.get(path),
            lambda q: isinstance(q, dict) and "state" in json_object(q, "status"),
        )
        # An operator closes it as Volcano's `vcctl queue operate -a close` would: status.state.
        closing: JsonObject = {"status": {"state": "Closing"}}
        await stack.kube.merge_patch(f"{path}/status", closing)
        closed = await eventually(
            lambda: stack.kube.get(path),
            lambda q: isinstance(q, dict) and json_object(q, "status").get("state") == "Closed",
        )
        assert isinstance(closed, dict)
        conn = await asyncpg.connect(stack.database_url)
        try:
            # The bridge reads its own write back: the projection holds the queue Closed.
            await eventually(
                lambda: conn.fetchval("SELECT doc ->> 'state' FROM queues WHERE name = $1", queue),
                lambda state: state == "Closed",
            )
        finally:
            await conn.close()
    finally:
        stack.kubectl("delete", "-f", str(manifest), "--wait=false")
