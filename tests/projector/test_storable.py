"""Events PostgreSQL cannot store (U+0000 in a string) are refused, not fatal (projector.storable)."""

from __future__ import annotations

import json

import asyncpg
import pytest

from events.serde import encode
from projector.migrate import apply_migrations
from projector.reconstruct import verify_chain
from projector.storable import nul_path
from projector.writer import BatchWriter, InboundRecord, Rejection, decode_batch
from tests.projector.helpers import records
from tests.projector.streams import CLUSTER, event_stream


def _with_nul(raw: bytes, field: str) -> bytes:
    obj = json.loads(raw)
    if field == "id":
        obj["id"] += "\x00"
    else:
        obj["data"][field] += "\x00"
    return json.dumps(obj).encode()


def test_nul_path_names_the_first_string_holding_nul() -> None:
    assert nul_path(b'{"a": "x", "b": {"c": ["ok", "n\\u0000"]}}') == "b.c.1"
    assert nul_path(b'{"k\\u0000": 1}') == "k\\u0000"  # the path itself holds no NUL
    assert nul_path(b'{"a": "plain"}') is None
    # Six characters \u0000 after an escaped backslash: no NUL in the string.
    assert nul_path(b'{"a": "w\\\\u0000"}') is None


def test_decode_batch_refuses_an_event_with_nul_and_names_no_unstorable_id() -> None:
    events = event_stream(1, 3)
    raw = encode(events[0])
    decoded = decode_batch(
        [InboundRecord("t", 0, 0, _with_nul(raw, "id")), InboundRecord("t", 0, 1, encode(events[1]))]
    )
    refused = decoded[0][1]
    assert isinstance(refused, Rejection)
    assert refused.error == "unstorable-text"
    assert refused.detail.startswith("field id: contains U+0000")
    assert refused.event_id is None
    assert refused.event_type == events[0].type
    assert decoded[1][1] == events[1]


@pytest.mark.integration
async def test_a_batch_with_nul_events_commits_the_rest(database_url: str) -> None:
    events = event_stream(4, 200)
    batch = records(events)
    node = max(i for i, e in enumerate(events) if e.type == "tephra.node.reported.v1")
    batch[node] = batch[node]._replace(value=_with_nul(encode(events[node]), "name"))
    batch[50] = batch[50]._replace(value=_with_nul(encode(events[50]), "id"))
    conn = await asyncpg.connect(database_url)
    try:
        await apply_migrations(conn)
        writer = await BatchWriter.load(conn, consumer="c", cluster=CLUSTER)
        plan = await writer.write(conn, batch)
        rejected = await conn.fetch("SELECT kafka_offset, error, event_id FROM rejected_events")
        unstorable = {r["kafka_offset"]: r["event_id"] for r in rejected if r["error"] == "unstorable-text"}
        assert unstorable == {node: events[node].id, 50: None}
        assert await conn.fetchval("SELECT count(*) FROM event_log") == plan.archived
        assert plan.archived + len(rejected) == len(batch)
        assert (await verify_chain(conn)).ok
        assert await conn.fetchval("SELECT next_offset FROM consumer_offsets") == len(batch)
    finally:
        await conn.close()
