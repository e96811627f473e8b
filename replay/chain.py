"""The event_log hash chain, checked on rows already loaded.

``hash = sha256(prev_hash || canonical bytes)`` (:mod:`events.canonical`,
``docs/archive-format.md``):
each row commits to its predecessor, so editing, deleting or reordering any
archived row breaks the link at that row.  The first broken link names it.
"""

from __future__ import annotations

from collections.abc import Iterable

from events.canonical import GENESIS_HASH, canonical_json, chain_hash
from replay.archive import ArchivedEvent
from replay.errors import ChainBroken

__all__ = ["GENESIS_HASH", "ChainChecker", "canonical_of", "check_chain"]


def canonical_of(row: ArchivedEvent) -> bytes:
    """The bytes the chain hashes for ``row``."""
    return row.canonical or canonical_json(row.event)


class ChainChecker:
    """Checks links one row at a time (for readers that stream the archive)."""

    def __init__(self, *, anchor: bytes | None = GENESIS_HASH) -> None:
        self._anchor = anchor
        self._expected_prev = anchor
        self._previous_seq: int | None = None
        self.checked = 0

    def feed(self, row: ArchivedEvent) -> None:
        """Check one row (the next in seq order).

        Raises:
            ChainBroken: the row's seq, ``prev_hash`` or ``hash`` is wrong.
        """
        if self._previous_seq is None and self._anchor == GENESIS_HASH and row.seq != 1:
            raise ChainBroken(1, f"rows before seq {row.seq} are missing")
        if self._previous_seq is not None and row.seq != self._previous_seq + 1:
            raise ChainBroken(self._previous_seq + 1, f"row missing (the next row is seq {row.seq})")
        if self._expected_prev is not None and row.prev_hash != self._expected_prev:
            raise ChainBroken(row.seq, "prev_hash is not the previous row's hash (row deleted or reordered)")
        if chain_hash(row.prev_hash, canonical_of(row)) != row.hash:
            raise ChainBroken(row.seq, "hash does not match the row's content (row edited)")
        self._expected_prev = row.hash
        self._previous_seq = row.seq
        self.checked += 1


def check_chain(rows: Iterable[ArchivedEvent], *, anchor: bytes | None = GENESIS_HASH) -> int:
    """Check every link of ``rows`` (seq order); return how many rows were checked.

    ``anchor`` is the hash of the row before the first one (the genesis hash
    when the rows start the log); None trusts the first row's ``prev_hash``,
    for a range that starts mid-log whose predecessor was not loaded.

    Raises:
        ChainBroken: at the first broken link.
    """
    checker = ChainChecker(anchor=anchor)
    for row in rows:
        checker.feed(row)
    return checker.checked
