"""The reference verifier (written from docs/archive-format.md) agrees with the archive, byte for byte.

It verifies the golden archives as committed and archives the projector's
writer makes from generated events; the bytes it derives for each row are
the bytes :mod:`events.canonical` hashed, and an edit anywhere breaks it.
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
from events.models import ActionConfiguration, Event, SchedulerConfigured
from events.serde import decode, encode
from events.signing import EventSigner, SigningKey, parse_public_key, verify
from projector.state import ClusterState
from projector.writer import _EVENT_LOG_COLUMNS, BatchWriter, InboundRecord, decode_batch
from tests.archive_reference import reference_verifier as reference
from tests.events.samples import job_submitted, queue_upserted, scheduler_configured
from tests.events.test_properties import jobs, nodes
from tests.projector.streams import event_stream

_GOLDEN = sorted((Path(__file__).resolve().parents[1] / "golden").glob("*.jsonl"))
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


def test_the_verifier_needs_nothing_but_the_standard_library() -> None:
    tree = ast.parse(Path(reference.__file__).read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= {"__future__", "collections.abc", "datetime", "hashlib", "json", "typing"}


def test_the_time_text_of_the_document() -> None:
    assert reference.time_text(datetime(2026, 1, 5, 9, 0, tzinfo=UTC)) == "2026-01-05T09:00:00Z"
    fraction = datetime(2026, 1, 5, 9, 0, 0, 250, tzinfo=UTC)
    assert reference.time_text(fraction) == "2026-01-05T09:00:00.000250Z"
