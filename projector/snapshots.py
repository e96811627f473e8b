"""Stored snapshots (``state_snapshots`` + ``state_snapshot_chunks``): written and read a chunk at a time.

A snapshot is a head row and its chunks (:func:`projector.state_json.state_to_stored`);
the writer copies the chunks in one ``COPY`` that the driver streams, and the
readers fetch them a page at a time, so a snapshot's whole text is never held
on either side.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

import asyncpg

from projector.state import ClusterState
from projector.state_json import StoredState, StoredStateReader

__all__ = ["read_snapshot", "write_snapshot"]

_CHUNK_COLUMNS: Final = ("seq", "idx", "section", "items")
#: Chunks fetched per round trip (~1 MiB of JSON text at 64 KiB a chunk).
_PAGE: Final = 16


async def write_snapshot(conn: asyncpg.Connection, seq: int, stored: StoredState) -> None:
    """Store ``stored`` as the snapshot at ``seq`` (kept as it is if one is stored there already)."""
    written = await conn.fetchval(
        "INSERT INTO state_snapshots (seq, state) VALUES ($1, $2::json)"
        " ON CONFLICT (seq) DO NOTHING RETURNING seq",
        seq,
        stored.head,
    )
    if written is not None and stored.chunks:
        await conn.copy_records_to_table(
            "state_snapshot_chunks", records=_chunk_rows(seq, stored), columns=_CHUNK_COLUMNS
        )


def _chunk_rows(seq: int, stored: StoredState) -> Iterator[tuple[int, int, str, str]]:
    for idx, (section, items) in enumerate(stored.chunks):
        yield seq, idx, section, items


async def read_snapshot(conn: asyncpg.Connection, seq: int) -> ClusterState | None:
    """The newest snapshot at or before ``seq``, if any."""
    head = await conn.fetchrow(
        "SELECT seq, state::text AS state FROM state_snapshots WHERE seq <= $1 ORDER BY seq DESC LIMIT 1", seq
    )
    if head is None:
        return None
    reader = StoredStateReader(head["state"])
    idx = 0
    while True:
        page = await conn.fetch(
            "SELECT section, items::text AS items FROM state_snapshot_chunks"
            " WHERE seq = $1 AND idx >= $2 ORDER BY idx LIMIT $3",
            head["seq"],
            idx,
            _PAGE,
        )
        for row in page:
            reader.add(row["section"], row["items"])
        if len(page) < _PAGE:
            return reader.state()
        idx += _PAGE
