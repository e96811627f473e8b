"""Print one SHA-256 over everything the projector prepares for a few streams.

    python -m tests.projector.prepare_digest

Decodes and prepares (``decode_batch`` + ``BatchWriter.prepare``, no
database) generated streams, some with invalid events and duplicates, and
hashes every plan: archive rows, rejections, bindings, evictions, offsets,
projection statements and staged rows, sessions, snapshots, the chain head,
and the final state's JSON.  Run in the compiled and the interpreted form of
the projector (installed, and a copy of the sources), the outputs must be equal
(tests/projector/test_compiled_projector.py).  The second line is the chain
head after the first stream, for the reader.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime

import projector
from events.canonical import GENESIS_HASH
from events.serde import encode
from projector.state import ClusterState
from projector.state_json import state_to_jsonable
from projector.writer import BatchWriter, InboundRecord, decode_batch
from tests.projector.streams import CLUSTER, event_stream

RECORDED_AT = datetime(2026, 1, 1, tzinfo=UTC)

# (seed, events, batch size, stream options)
STREAMS: tuple[tuple[int, int, int, dict[str, object]], ...] = (
    (3, 6000, 1000, {}),
    (11, 3000, 257, {"invalid_rate": 0.05}),
)


def digest_stream(seed: int, count: int, batch_size: int, options: dict[str, object]) -> tuple[str, str]:
    """(the SHA-256 of every plan of the stream, its chain head)."""
    raws = [encode(event) for event in event_stream(seed, count, **options)]
    # A few records twice, and an empty one: the duplicate and empty-record paths.
    raws[100:100] = raws[40:45]
    raws.insert(7, b"")
    # A fixed archiving time: recorded_at is hashed (chain format 2), and both forms must agree.
    writer = BatchWriter(
        ClusterState(),
        GENESIS_HASH,
        consumer="digest",
        cluster=CLUSTER,
        snapshot_every=999,
        clock=lambda: RECORDED_AT,
    )
    sha = hashlib.sha256()
    head = GENESIS_HASH
    for start in range(0, len(raws), batch_size):
        batch = raws[start : start + batch_size]
        records = [InboundRecord("t", 0, start + i, raw or None) for i, raw in enumerate(batch)]
        plan = writer.prepare(decode_batch(records), set())
        for part in (
            plan.base_seq,
            plan.last_seq,
            plan.archive_rows,
            plan.rejections,
            sorted(plan.touched.items()),
            plan.bindings,
            plan.evictions,
            sorted(plan.offsets.items()),
            plan.duplicates,
            sorted(plan.event_ids),
            plan.meta,
            plan.projection,
            plan.sessions,
            plan.snapshot,
            plan.last_hash,
        ):
            sha.update(repr(part).encode())
        head = plan.last_hash
    sha.update(json.dumps(state_to_jsonable(writer.state), sort_keys=True).encode())
    return sha.hexdigest(), head.hex()


def main() -> None:
    sha = hashlib.sha256()
    heads = []
    for seed, count, batch_size, options in STREAMS:
        digest, head = digest_stream(seed, count, batch_size, options)
        sha.update(digest.encode())
        heads.append(head[:16])
    print(sha.hexdigest())
    print(f"chain heads {' '.join(heads)}; projector {'compiled' if projector.compiled() else 'interpreted'}")


if __name__ == "__main__":
    main()
