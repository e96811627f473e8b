"""The bridge signs what it publishes: a projector refusing unsigned events takes the bridge's.

The projector and the scheduler run with a deployment's trust (unsigned intents and
observations refused); the bridge's key is enrolled as ``tephra producer add`` would, with
exactly :data:`kube.bridge.signing.BRIDGE_TYPES`.
"""

from __future__ import annotations

import asyncpg
import pytest

from api.endpoints import Endpoints
from api.settings import TephraSettings
from events.signing import EventSigner, SigningKey
from kube.bridge.door import BRIDGE_SOURCE
from kube.bridge.signing import BRIDGE_PRODUCER, BRIDGE_TYPES
from kube.rest import json_str
from projector.keyring import add_producer
from projector.trust import KeyringEntry
from tests.kube import test_bridge
from tests.kube.test_bridge import Stack, create_lone_pod, eventually

pytestmark = pytest.mark.integration

# The bridge's stack, as tests/kube/test_bridge.py runs it (with the services_settings below).
endpoints, services = test_bridge.endpoints, test_bridge.services
cluster, stack = test_bridge.cluster, test_bridge.stack


@pytest.fixture
def services_settings() -> TephraSettings:
    """A deployment's projector: unsigned intents and observations refused."""
    return TephraSettings(
        schedule_period=0.2, allow_unsigned_intents=False, allow_unsigned_observations=False
    )


@pytest.fixture
async def bridge_signer(endpoints: Endpoints) -> EventSigner:
    """A key of the bridge's own, in the keyring as an operator enrols it."""
    key = SigningKey.generate()
    conn = await asyncpg.connect(endpoints.database_url)
    try:
        await add_producer(conn, KeyringEntry(BRIDGE_PRODUCER, key.public_key, frozenset(BRIDGE_TYPES)))
    finally:
        await conn.close()
    return EventSigner(key, BRIDGE_PRODUCER).on_behalf_of("default")


async def test_a_projector_refusing_unsigned_events_takes_the_signed_bridges(stack: Stack) -> None:
    path = await create_lone_pod(stack, "signed")
    task_id = f"{stack.namespace}/signed"
    conn = await asyncpg.connect(stack.database_url)
    try:
        # Bound needs the NodeReported and the JobSubmitted; Running the TaskStarted observation.
        await eventually(
            lambda: conn.fetchval("SELECT status FROM tasks WHERE id = $1", task_id),
            lambda status: status == "Running",
        )
        principals = await conn.fetch(
            "SELECT DISTINCT type, principal FROM event_log WHERE source = $1 ORDER BY type", BRIDGE_SOURCE
        )
        rejected = await conn.fetch("SELECT error, detail FROM rejected_events")
    finally:
        await conn.close()
    pod = await stack.kube.get(path)
    assert json_str(pod, "spec", "nodeName") in stack.nodes
    assert [(r["error"], r["detail"]) for r in rejected] == []
    types = {row["type"] for row in principals}
    assert {"tephra.node.reported.v1", "tephra.job.submitted.v1", "tephra.task.started.v1"} <= types
    assert {row["principal"] for row in principals} == {"kube-bridge:default"}
