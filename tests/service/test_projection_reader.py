"""The scheduler's projection reader: one consistent read, then the archive folded on top of it."""

from __future__ import annotations

import asyncpg
import pytest

from events.topics import Topics
from projector.projection import load_projection
from scheduler.service.projection import ProjectionReader
from tests.service.helpers import job, node, produce, queue, running_projector, wait_for

pytestmark = pytest.mark.integration


async def test_the_incrementally_folded_state_equals_the_projection(
    kafka_bootstrap: str, database_url: str, topics: Topics
) -> None:
    async with running_projector(kafka_bootstrap, database_url, topics):
        conn = await asyncpg.connect(database_url)
        reader = await ProjectionReader.connect(database_url)
        try:
            await produce(kafka_bootstrap, topics, [queue(), node("n1"), job("a", replicas=3)])
            await wait_for(conn, "SELECT count(*) FROM tasks", 3)
            first_seq = (await reader.state()).seq
            assert first_seq == await reader.seq()

            await produce(kafka_bootstrap, topics, [node("n2"), job("b", replicas=2), node("n1", cpu="4")])
            await wait_for(conn, "SELECT count(*) FROM tasks", 5)
            await wait_for(conn, "SELECT seq FROM projection_meta", first_seq + 3)
            folded = await reader.state()
            assert folded.seq == first_seq + 3
            assert folded == await load_projection(conn)
        finally:
            await reader.close()
            await conn.close()
