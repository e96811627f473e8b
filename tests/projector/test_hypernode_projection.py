"""HyperNodes and a job's network topology through the projector: the fold, the hypernodes
table, snapshots and the archive's fold agree, and the scheduler's snapshot carries both."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import count

import asyncpg
import pytest

from events.models import (
    Event,
    HyperNodeDeleted,
    HyperNodeDeletedData,
    HyperNodeExactMember,
    HyperNodeLabelMember,
    HyperNodeRegexMember,
    HyperNodeUpserted,
    HyperNodeUpsertedData,
    JobSubmitted,
    JobSubmittedData,
    LabelSelector,
    NetworkTopologySpec,
    NodeReported,
    NodeReportedData,
    TaskSpec,
)
from projector.fold import apply
from projector.reconstruct import load_projection, state_at
from projector.state import ClusterState
from projector.state_json import state_from_jsonable, state_to_jsonable
from projector.writer import BatchWriter
from scheduler.core.snapshot import HyperNode, HyperNodeMember, NetworkTopology
from scheduler.core.snapshot import LabelSelector as CoreSelector
from scheduler.snapshot_builder import build_snapshot
from tests.projector.helpers import create_database, drop_database, records, reset_schema
from tests.projector.streams import CLUSTER

T0 = datetime(2026, 1, 1, tzinfo=UTC)
RACK_R1 = (("rack", "r1"),)


@pytest.fixture(scope="module")
def scratch_dsn(postgres_admin_dsn: str) -> Iterator[str]:
    dsn = asyncio.run(create_database(postgres_admin_dsn))
    yield dsn
    asyncio.run(drop_database(postgres_admin_dsn, dsn))


def _events() -> list[Event]:
    ids = count(1)

    def envelope() -> dict[str, object]:
        n = next(ids)
        return {
            "id": f"hn-{n}",
            "source": "tephra://tests",
            "time": T0 + timedelta(seconds=n),
            "cluster": CLUSTER,
        }

    nodes = [
        NodeReported(
            **envelope(), data=NodeReportedData(name=name, allocatable={"cpu": 8}, labels={"rack": rack})
        )  # type: ignore[arg-type]
        for name, rack in (("a1", "r1"), ("a2", "r1"), ("b1", "r2"))
    ]
    leaf = HyperNodeUpsertedData(
        name="leaf-a",
        tier=1,
        tier_name="leaf",
        members=[
            HyperNodeExactMember(type="Node", exact_match="a1"),
            HyperNodeLabelMember(type="Node", label_match=LabelSelector(match_labels={"rack": "r1"})),
        ],
    )
    job = JobSubmittedData(
        namespace="ml",
        name="train",
        tasks=[TaskSpec(name="worker", replicas=2, resources={"cpu": 4})],
        network_topology=NetworkTopologySpec(mode="hard", highest_tier_allowed=1),
    )
    return [
        *nodes,
        HyperNodeUpserted(**envelope(), data=leaf),  # type: ignore[arg-type]
        HyperNodeUpserted(  # type: ignore[arg-type]
            **envelope(),
            data=HyperNodeUpsertedData(
                name="leaf-b", tier=1, members=[HyperNodeRegexMember(type="Node", regex_match="^b")]
            ),
        ),
        HyperNodeUpserted(  # type: ignore[arg-type]
            **envelope(),
            data=HyperNodeUpsertedData(
                name="spine",
                tier=2,
                members=[HyperNodeExactMember(type="HyperNode", exact_match=n) for n in ("leaf-a", "leaf-b")],
            ),
        ),
        JobSubmitted(**envelope(), data=job),  # type: ignore[arg-type]
        HyperNodeDeleted(**envelope(), data=HyperNodeDeletedData(name="leaf-b")),  # type: ignore[arg-type]
        HyperNodeDeleted(**envelope(), data=HyperNodeDeletedData(name="leaf-b")),  # type: ignore[arg-type]
    ]


def test_the_fold_keeps_hypernodes_and_refuses_deleting_an_unknown_one() -> None:
    state = ClusterState()
    outcomes = [apply(state, seq, event) for seq, event in enumerate(_events(), start=1)]
    assert [o.invalid for o in outcomes][-2:] == [None, "hypernode-missing"]
    assert sorted(state.hypernodes) == ["leaf-a", "spine"]
    snapshot = build_snapshot(state)
    assert snapshot.hypernodes == (
        HyperNode(
            "leaf-a",
            1,
            (
                HyperNodeMember("Node", exact="a1"),
                HyperNodeMember("Node", labels=CoreSelector((("rack", "r1"),))),
            ),
            "leaf",
        ),
        HyperNode("spine", 2, tuple(HyperNodeMember("HyperNode", exact=n) for n in ("leaf-a", "leaf-b"))),
    )
    (job,) = snapshot.jobs
    assert job.network_topology == NetworkTopology("hard", 1, "")


@pytest.mark.integration
def test_the_projection_and_the_archive_agree(scratch_dsn: str) -> None:
    async def run() -> None:
        conn = await asyncpg.connect(scratch_dsn)
        try:
            await reset_schema(conn)
            writer = await BatchWriter.load(
                conn, consumer="c", cluster=CLUSTER, snapshot_every=3, snapshot_scale=0
            )
            batch = records(_events())
            for lo, hi in ((0, 5), (5, len(batch))):
                await writer.write(conn, batch[lo:hi])
                projected = await load_projection(conn)
                assert projected == writer.state
                assert state_from_jsonable(state_to_jsonable(projected)) == projected
                assert await state_at(conn, projected.seq) == projected
            assert sorted(projected.hypernodes) == ["leaf-a", "spine"]
            assert projected.jobs["ml/train"].network_topology == NetworkTopologySpec(highest_tier_allowed=1)
        finally:
            await conn.close()

    asyncio.run(run())
