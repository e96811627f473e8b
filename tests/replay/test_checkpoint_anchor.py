"""The comparison of a chain with signed checkpoints, on links in memory."""

from __future__ import annotations

from datetime import UTC, datetime

from events.checkpoints import Checkpoint, sign_checkpoint
from events.signing import SigningKey
from replay.chain import ChainLink, CheckpointAnchor

_AT = datetime(2026, 1, 5, tzinfo=UTC)


def _links(count: int) -> list[ChainLink]:
    heads = [bytes([seq]) * 32 for seq in range(count + 1)]
    return [ChainLink(seq, heads[seq - 1], heads[seq], heads[seq], 2) for seq in range(1, count + 1)]


def _signed(key: SigningKey, seq: int, head: bytes, cluster: str = "c") -> Checkpoint:
    return sign_checkpoint(key, cluster=cluster, seq=seq, head=head, at=_AT)


def _compare(anchor: CheckpointAnchor, links: list[ChainLink]) -> list[str]:
    for link in links:
        anchor.see(link)
    anchor.finish(links[-1].seq)
    return [problem.code for problem in anchor.problems]


def test_matching_checkpoints_verify_and_other_clusters_are_ignored() -> None:
    key, links = SigningKey.generate(), _links(10)
    checkpoints = [
        _signed(key, 5, links[4].hash),
        _signed(key, 10, links[9].hash),
        _signed(key, 12, bytes(32), "d"),
    ]
    anchor = CheckpointAnchor(checkpoints, key.public_key, "c")
    assert _compare(anchor, links) == []
    assert (anchor.matched, anchor.newest) == (2, 10)
    assert anchor.verdict().startswith("OK: 2 signed checkpoint(s) match the chain, the newest at seq 10")


def test_truncation_rehash_forgery_and_a_fork_each_have_a_code() -> None:
    key, links = SigningKey.generate(), _links(10)
    forged = _signed(SigningKey.generate(), 3, bytes(32))
    checkpoints = [
        _signed(key, 4, bytes(32)),  # another head than the chain's at seq 4: rewritten and rehashed
        _signed(key, 12, bytes(32)),  # beyond the archive's end: truncated
        forged,
        Checkpoint(forged.cluster, 3, forged.head, forged.time, key.public_key, forged.signature),
        _signed(key, 8, links[7].hash),
        _signed(key, 8, bytes(32)),  # a second head for seq 8
    ]
    anchor = CheckpointAnchor(checkpoints, key.public_key, "c")
    assert sorted(_compare(anchor, links)) == sorted(
        [
            "REPLAY-CHECKPOINT-MISMATCH",
            "REPLAY-TRUNCATED",
            "REPLAY-CHECKPOINT-UNSIGNED",
            "REPLAY-CHECKPOINT-UNSIGNED",
            "REPLAY-CHECKPOINT-UNSIGNED",
        ]
    )
    assert anchor.verdict().startswith("FAILED: 5 problem(s)")
