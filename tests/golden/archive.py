"""Golden archives on disk, and loading one into a fresh database the way the projector would.

A golden archive is ``<name>.jsonl``: one ``event_log`` row per line (every
column replay reads, hashes in hex), plus ``<name>.expect.json`` saying what
``replay verify`` must conclude.  Both are written by ``make_golden.py``.

:func:`load_golden` does not insert the rows verbatim: it feeds the events
through the projector's :class:`~projector.writer.BatchWriter` (COPY into
``event_log``, the fold, the projection, ``state_snapshots``), then checks the
hashes the writer computed equal the committed ones.  So a golden archive is
exactly what the live projector archives, and it goes stale loudly if the
archive format changes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg

from events.serde import decode, encode
from projector.archive import columns_canonical
from projector.migrate import apply_migrations
from projector.writer import BatchWriter, InboundRecord

__all__ = [
    "GOLDEN_DIR",
    "GoldenArchive",
    "load_golden",
    "load_rows",
    "read_golden",
    "row_canonical",
    "write_golden",
]

GOLDEN_DIR = Path(__file__).resolve().parent
_BATCH = 500


@dataclass(frozen=True, slots=True)
class GoldenArchive:
    name: str
    rows: tuple[dict[str, Any], ...]
    expect: dict[str, Any]


def row_canonical(row: dict[str, Any]) -> bytes:
    """The canonical bytes of a golden row (what its hash covers; its ``time`` is the canonical text)."""
    return columns_canonical(row, row["time"])


def write_golden(
    directory: Path, name: str, rows: Iterable[dict[str, Any]], expect: dict[str, Any]
) -> list[Path]:
    jsonl = directory / f"{name}.jsonl"
    lines = [json.dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=False) for row in rows]
    jsonl.write_text("\n".join(lines) + "\n", encoding="utf-8")
    expect_path = directory / f"{name}.expect.json"
    expect_path.write_text(json.dumps(expect, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return [jsonl, expect_path]


def read_golden(name: str, directory: Path = GOLDEN_DIR) -> GoldenArchive:
    lines = (directory / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    rows = tuple(json.loads(line) for line in lines if line)
    expect = json.loads((directory / f"{name}.expect.json").read_text(encoding="utf-8"))
    return GoldenArchive(name, rows, expect)


async def load_rows(
    database_url: str,
    rows: Sequence[dict[str, Any]],
    *,
    snapshot_every: int = 10_000,
    batch: int = _BATCH,
) -> None:
    """Archive ``rows`` into an empty database through the projector's writer; check the hashes.

    The writer stores a state at the end of a batch that crosses a multiple of
    ``snapshot_every``: small batches put stored states between the rows.
    Whatever the state's size (``snapshot_scale=0``): the replay tests place
    stored states by ``snapshot_every`` alone.
    """
    conn = await asyncpg.connect(database_url)
    try:
        await apply_migrations(conn)
        writer = await BatchWriter.load(
            conn,
            consumer="golden",
            cluster=rows[0]["cluster"],
            snapshot_every=snapshot_every,
            snapshot_scale=0.0,
        )
        for start in range(0, len(rows), batch):
            chunk = rows[start : start + batch]
            # Archived when, and from where, the golden rows say (both are hashed).
            recorded_at = datetime.fromisoformat(chunk[0]["recorded_at"])
            writer.clock = lambda at=recorded_at: at
            records = [
                InboundRecord(
                    row["topic"], row["partition"], row["kafka_offset"], encode(decode(row_canonical(row)))
                )
                for row in chunk
            ]
            plan = await writer.write(conn, records)
            if plan.rejections:
                first = plan.rejections[0]
                raise AssertionError(
                    f"the projector rejected golden row {start + first.offset}: {first.error} {first.detail}"
                )
        stored = await conn.fetch("SELECT seq, prev_hash, hash FROM event_log ORDER BY seq")
    finally:
        await conn.close()
    if len(stored) != len(rows):
        raise AssertionError(f"{len(rows)} golden rows, {len(stored)} archived")
    for row, got in zip(rows, stored, strict=True):
        if got["seq"] != row["seq"] or bytes(got["hash"]).hex() != row["hash"]:
            raise AssertionError(
                f"golden row seq {row['seq']} archives with another hash: the archive format changed; "
                "regenerate with `python -m tests.golden.make_golden`"
            )


async def load_golden(database_url: str, name: str, *, snapshot_every: int = 10_000) -> GoldenArchive:
    golden = read_golden(name)
    await load_rows(database_url, golden.rows, snapshot_every=snapshot_every)
    return golden
