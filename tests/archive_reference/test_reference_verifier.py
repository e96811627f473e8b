"""The reference verifier (written from docs/archive-format.md) agrees with the archive, byte for byte.

It verifies the golden archives as committed (chain format 2), an archive of
chain format 1 and one that switches from 1 to 2, and archives the
projector's writer makes from generated events; the bytes it derives for each
row are the bytes :mod:`events.canonical` and :mod:`projector.archive`
hashed, and an edit anywhere breaks it.  Against checkpoints signed by
:mod:`events.checkpoints`, it finds truncation and rewrite-then-rehash.
"""

from __future__ import annotations

import ast
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.canonical import GENESIS_HASH, canonical_json
from events.checkpoints import sign_checkpoint
from events.models import ActionConfiguration, Event, SchedulerConfigured
from events.serde import decode, encode
from events.signing import EventSigner, SigningKey, parse_public_key, verify
from projector.archive import columns_canonical, row_digest, row_members
from projector.state import ClusterState
from projector.writer import _EVENT_LOG_COLUMNS, BatchWriter, InboundRecord, decode_batch
from tests.archive_reference import reference_verifier as reference
from tests.events.samples import job_submitted, queue_upserted, scheduler_configured
from tests.events.test_properties import jobs, nodes
from tests.projector.streams import event_stream

_GOLDEN = sorted((Path(__file__).resolve().parents[1] / "golden").glob("*.jsonl"))
_FORMAT_1 = Path(__file__).resolve().parent / "format1_gpu_cluster.jsonl"
_CLUSTER = "reference"


def _golden_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


@pytest.mark.parametrize("path", _GOLDEN, ids=lambda p: p.stem)
def test_the_golden_archives_verify(path: Path) -> None:
    rows = _golden_rows(path)
    assert reference.verify(rows) == bytes.fromhex(rows[-1]["hash"])
    for row in rows:
        # The bytes it derives are what the project hashes for the same event.
        assert reference.canonical_bytes(row) == canonical_json(decode(reference.canonical_bytes(row)))


@pytest.mark.parametrize("path", _GOLDEN[:1], ids=lambda p: p.stem)
def test_an_edit_a_deletion_or_a_swap_breaks_the_golden_chain(path: Path) -> None:
    rows = _golden_rows(path)[:40]
    edited = [dict(r) for r in rows]
    edited[10]["source"] += "x"
    with pytest.raises(reference.ChainError, match="hash does not match") as caught:
        reference.verify(edited)
    assert caught.value.seq == 11
    with pytest.raises(reference.ChainError, match="row missing"):
        reference.verify(rows[:5] + rows[6:])
    swapped = [*rows[:5], rows[6], rows[5], *rows[7:]]
    with pytest.raises(reference.ChainError):
        reference.verify(swapped)
    spaced = [dict(r) for r in rows]
    spaced[3]["data"] = spaced[3]["data"].replace(",", ", ", 1)  # the same value, not canonical text
    with pytest.raises(reference.ChainError, match="not canonical"):
        reference.verify(spaced)


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("topic", "elsewhere"),
        ("partition", 7),
        ("kafka_offset", 10_000),
        ("recorded_at", "2030-01-01T00:00:00Z"),
        ("job", "ns/other"),
        ("traceparent", "00-" + "1" * 32 + "-" + "2" * 16 + "-01"),
        ("chain_format", 1),
    ],
)
def test_every_column_of_a_format_2_row_is_hashed(column: str, value: Any) -> None:
    rows = [dict(r) for r in _golden_rows(_GOLDEN[0])[:20]]
    rows[12][column] = value
    with pytest.raises(reference.ChainError) as caught:
        reference.verify(rows)
    assert caught.value.seq == 13


def _rechained(rows: list[dict[str, Any]], previous: bytes) -> list[dict[str, Any]]:
    """``rows`` (format 2) chained anew after ``previous``, hashed by the project's own code."""
    out = []
    for row in rows:
        members = row_members(
            seq=row["seq"], topic=row["topic"], partition=row["partition"], kafka_offset=row["kafka_offset"],
            recorded_at=row["recorded_at"], job=row["job"], traceparent=row["traceparent"],
            signature=row.get("signature"),
        )  # fmt: skip
        digest = row_digest(previous, columns_canonical(row, row["time"]), members)
        out.append({**row, "prev_hash": previous.hex(), "hash": digest.hex()})
        previous = digest
    return out


def test_format_1_verifies_before_format_2_and_never_after() -> None:
    old = _golden_rows(_FORMAT_1)
    assert "chain_format" not in old[0]  # written before format 2 existed
    assert reference.verify(old) == bytes.fromhex(old[-1]["hash"])
    # An upgraded archive: the old rows keep format 1 and their hashes, new rows chain on in format 2.
    switched = old[:20] + _rechained(_golden_rows(_GOLDEN[0])[20:], bytes.fromhex(old[19]["hash"]))
    assert reference.verify(switched) == bytes.fromhex(switched[-1]["hash"])
    # A format-1 row after format 2 (hashes recomputed to match) is refused.
    downgraded = [dict(r) for r in switched]
    downgraded[25] = {**old[25], "prev_hash": downgraded[24]["hash"]}
    with pytest.raises(reference.ChainError, match="format 1 after format 2") as caught:
        reference.verify(downgraded)
    assert caught.value.seq == 26


def _hash(row: dict[str, Any]) -> bytes:
    return bytes.fromhex(row["hash"])


def _checkpoints(rows: list[dict[str, Any]], key: SigningKey, every: int) -> list[dict[str, Any]]:
    """Checkpoints of ``rows`` signed by the project's code, as an auditor parses the records."""
    cluster = rows[0]["cluster"]
    at = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)
    return [
        json.loads(
            sign_checkpoint(key, cluster=cluster, seq=r["seq"], head=bytes.fromhex(r["hash"]), at=at).record()
        )
        for r in rows
        if r["seq"] % every == 0 or r is rows[-1]
    ]


def test_checkpoints_find_truncation_and_rehash() -> None:
    rows = _golden_rows(_GOLDEN[0])
    key = SigningKey.generate()
    records = _checkpoints(rows, key, every=10)
    cluster = rows[0]["cluster"]
    assert reference.verify_against_checkpoints(rows, records, key.public_key, cluster) == []
    # The newest rows deleted: the chain still links, the newest checkpoint is beyond it.
    (truncated,) = reference.verify_against_checkpoints(rows[:-1], records, key.public_key, cluster)
    assert (truncated.kind, truncated.seq) == ("truncated", rows[-1]["seq"])
    # A row edited and every hash after it recomputed: the chain links, the heads differ.
    edited = [dict(r) for r in rows]
    edited[14]["source"] = "tephra://forged"
    rehashed = edited[:14] + _rechained(edited[14:], bytes.fromhex(edited[13]["hash"]))
    assert reference.verify(rehashed) == bytes.fromhex(rehashed[-1]["hash"])
    problems = reference.verify_against_checkpoints(rehashed, records, key.public_key, cluster)
    assert (problems[0].kind, problems[0].seq) == ("rehashed", 20)
    # A record signed by another key, or altered after signing, is refused, not trusted.
    stranger = _checkpoints(rows, SigningKey.generate(), every=10)
    altered = [{**records[0], "head": rows[0]["hash"]}]
    found = reference.verify_against_checkpoints(rows, stranger + altered, key.public_key, cluster)
    assert {p.kind for p in found} == {"unsigned"}
    assert len(found) == len(stranger) + 1


def _archive(events: list[Event]) -> tuple[list[dict[str, Any]], bytes]:
    """The rows the projector's writer archives for ``events`` (offline), as the verifier reads them."""
    writer = BatchWriter(ClusterState(), GENESIS_HASH, consumer="reference", cluster=_CLUSTER)
    records = [InboundRecord("t", 0, i, encode(e)) for i, e in enumerate(events)]
    plan = writer.prepare(decode_batch(records), set())
    rows = [dict(zip(_EVENT_LOG_COLUMNS, row, strict=True)) for row in plan.archive_rows]
    return rows, plan.last_hash


def _with_arguments(arguments: dict[str, Any]) -> SchedulerConfigured:
    event = scheduler_configured()
    config = event.data.config.model_copy(
        update={"configurations": [ActionConfiguration(name="enqueue", arguments=arguments)]}
    )
    return event.model_copy(update={"data": event.data.model_copy(update={"config": config})})


_floats = st.floats(allow_nan=False, allow_infinity=False)
_arguments = st.dictionaries(
    st.text(max_size=6), _floats | st.integers(-(2**70), 2**70) | st.text(max_size=6), max_size=4
)
_configs = _arguments.map(_with_arguments)


@settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(jobs, nodes, _configs), min_size=1, max_size=12))
def test_a_generated_archive_verifies_byte_for_byte(generated: list[Event]) -> None:
    # One cluster and unique ids, so the writer archives every event the fold accepts;
    # times in any zone, any Unicode, floats and integers beyond 64 bits included.
    events: list[Event] = [
        e.model_copy(update={"id": f"{i}:{e.id}", "cluster": _CLUSTER}) for i, e in enumerate(generated)
    ]
    rows, head = _archive(events)
    assert reference.verify(rows) == head
    by_id = {e.id: e for e in events}
    for row in rows:
        assert reference.canonical_bytes(row) == canonical_json(by_id[row["event_id"]])


def test_a_signed_event_verifies_and_its_principal_is_in_the_hashed_bytes() -> None:
    signer = EventSigner(SigningKey.generate(), "team-a:alice")
    events = [
        signer.sign(e.model_copy(update={"cluster": _CLUSTER})) for e in (queue_upserted(), job_submitted())
    ]
    rows, head = _archive(events)
    assert reference.verify(rows) == head
    assert [row["principal"] for row in rows] == ["team-a:alice", "team-a:alice"]
    for row, event in zip(rows, events, strict=True):
        canonical = reference.canonical_bytes(row)
        assert b'"principal":"team-a:alice"' in canonical
        assert row["signature"] == event.signature
        assert verify(parse_public_key(signer.key.public_key), canonical, row["signature"])
    # Another principal in a row breaks the chain: the hash covers it.
    forged = [dict(r) for r in rows]
    forged[0]["principal"] = "team-b"
    with pytest.raises(reference.ChainError):
        reference.verify(forged)


def test_a_long_stream_verifies() -> None:
    events = [e.model_copy(update={"cluster": _CLUSTER}) for e in event_stream(21, 3_000)]
    rows, head = _archive(events)
    assert len(rows) > 2_500
    assert reference.verify(rows) == head


def test_the_verifier_needs_the_standard_library_and_ed25519_only() -> None:
    tree = ast.parse(Path(reference.__file__).read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    # Ed25519 (checkpoint signatures) is the one thing it takes from outside the standard library.
    standard = {
        "__future__",
        "base64",
        "binascii",
        "collections.abc",
        "datetime",
        "hashlib",
        "json",
        "typing",
    }
    ed25519 = {"cryptography.exceptions", "cryptography.hazmat.primitives.asymmetric.ed25519"}
    assert imported <= standard | ed25519


def test_the_time_text_of_the_document() -> None:
    assert reference.time_text(datetime(2026, 1, 5, 9, 0, tzinfo=UTC)) == "2026-01-05T09:00:00Z"
    fraction = datetime(2026, 1, 5, 9, 0, 0, 250, tzinfo=UTC)
    assert reference.time_text(fraction) == "2026-01-05T09:00:00.000250Z"
