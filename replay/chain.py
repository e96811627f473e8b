"""The event_log hash chain, checked link by link, and against signed checkpoints.

A row's hash covers its predecessor's hash and, by its chain format, the
event's canonical bytes (format 1) or every column of the row (format 2):
``docs/archive-format.md``, :mod:`projector.archive`.  Each row commits to
its predecessor, so editing, deleting or reordering any archived row breaks
the link at that row; the first broken link names it.  What re-hashing the
rest of the chain after an edit, or deleting the newest rows, would hide is
caught by comparing the chain with signed checkpoints
(:class:`CheckpointAnchor`) kept where the database cannot rewrite them.

The checks work on :class:`ChainLink`\\ s — a row's seq, stored hashes,
format and the hash its columns make — so a row that does not decode as an
event still gets its verdict.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from events.canonical import GENESIS_HASH, canonical_json, chain_hash
from events.checkpoints import Checkpoint
from projector.archive import row_digest
from replay.archive import ArchivedEvent
from replay.errors import ArchiveTruncated, ChainBroken, CheckpointMismatch, CheckpointUnsigned, Divergence

__all__ = [
    "GENESIS_HASH",
    "ChainChecker",
    "ChainLink",
    "CheckpointAnchor",
    "canonical_of",
    "check_chain",
    "link_of",
]


@dataclass(frozen=True, slots=True)
class ChainLink:
    """One row as the chain sees it: its stored hashes and the hash its columns make."""

    seq: int
    prev_hash: bytes
    hash: bytes
    #: The hash the row's columns make over its stored ``prev_hash`` (by its format).
    computed: bytes
    chain_format: int
    #: Why the row's event does not decode (None: it does, or was not tried).
    undecodable: str | None = None


def canonical_of(row: ArchivedEvent) -> bytes:
    """The event's canonical bytes of ``row``."""
    return row.canonical or canonical_json(row.event)


def link_of(row: ArchivedEvent) -> ChainLink:
    """The link of an archived event held in memory (its ``chain_format`` set)."""
    canonical = canonical_of(row)
    if row.chain_format == 2:
        computed = row_digest(row.prev_hash, canonical, row.members)
    elif row.chain_format == 1:
        computed = chain_hash(row.prev_hash, canonical)
    else:
        raise ValueError(f"seq {row.seq}: no chain format (check a stored archive with ArchiveReader.links)")
    return ChainLink(row.seq, row.prev_hash, row.hash, computed, row.chain_format)


class ChainChecker:
    """Checks links one row at a time (for readers that stream the archive)."""

    def __init__(self, *, anchor: bytes | None = GENESIS_HASH) -> None:
        self._anchor = anchor
        self._expected_prev = anchor
        self._previous_seq: int | None = None
        self._newest_format = 0
        self.checked = 0
        #: The formats seen, and the first seq of format 2 (None: none yet).
        self.formats: set[int] = set()
        self.format_2_from: int | None = None

    def feed(self, link: ChainLink) -> None:
        """Check one row (the next in seq order).

        Raises:
            ChainBroken: the row's seq, ``prev_hash``, ``hash`` or format is wrong.
        """
        if self._previous_seq is None and self._anchor == GENESIS_HASH and link.seq != 1:
            raise ChainBroken(1, f"rows before seq {link.seq} are missing")
        if self._previous_seq is not None and link.seq != self._previous_seq + 1:
            raise ChainBroken(self._previous_seq + 1, f"row missing (the next row is seq {link.seq})")
        if link.chain_format not in (1, 2):
            raise ChainBroken(link.seq, f"chain format {link.chain_format} is not 1 or 2")
        if link.chain_format < self._newest_format:
            why = "chain format 1 after format 2 (format 1 is only for rows archived before the switch)"
            raise ChainBroken(link.seq, why)
        if self._expected_prev is not None and link.prev_hash != self._expected_prev:
            raise ChainBroken(link.seq, "prev_hash is not the previous row's hash (row deleted or reordered)")
        if link.computed != link.hash:
            raise ChainBroken(link.seq, "hash does not match the row's content (row edited)")
        if link.chain_format == 2 and self.format_2_from is None:
            self.format_2_from = link.seq
        self._newest_format = link.chain_format
        self.formats.add(link.chain_format)
        self._expected_prev = link.hash
        self._previous_seq = link.seq
        self.checked += 1

    @property
    def last_seq(self) -> int | None:
        return self._previous_seq

    def verdict(self, first: int, broken: ChainBroken | None) -> str:
        """One line saying what the chain check found."""
        if broken is not None:
            return f"BROKEN at seq {broken.seq}: {broken.why}"
        if not self.checked:
            return "no rows to check"
        last = self._previous_seq
        if self.format_2_from is None:
            formats = "chain format 1"
        elif self.format_2_from == first:
            formats = "chain format 2"
        else:
            formats = f"chain format 1, then 2 from seq {self.format_2_from}"
        return f"OK: seqs {first}-{last} link ({self.checked} rows, {formats})"


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
        checker.feed(link_of(row))
    return checker.checked


@dataclass(slots=True)
class CheckpointAnchor:
    """The archive against signed checkpoints: the head at each one's seq, and the archive's end.

    Only checkpoints signed by ``public_key`` (and of the cluster, when given)
    count; the others are reported (:class:`~replay.errors.CheckpointUnsigned`)
    and ignored.  Feed every link of the range checked (:meth:`see`), then
    :meth:`finish` with the archive's last seq.
    """

    checkpoints: Sequence[Checkpoint]
    public_key: str
    cluster: str | None = None
    #: What the comparison found, and how many checkpoints matched the chain.
    problems: list[Divergence] = field(init=False, default_factory=list)
    matched: int = field(init=False, default=0)
    _heads: dict[int, bytes] = field(init=False, default_factory=dict)
    _newest: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        for checkpoint in sorted(self.checkpoints, key=lambda c: c.seq):
            if self.cluster is not None and checkpoint.cluster != self.cluster:
                continue  # another deployment's checkpoint on a shared topic or file
            if checkpoint.public_key != self.public_key:
                why = f"is signed by the key {checkpoint.public_key}, not the projector's {self.public_key}"
                self.problems.append(CheckpointUnsigned(checkpoint.seq, why))
            elif not checkpoint.signed_by(self.public_key):
                self.problems.append(CheckpointUnsigned(checkpoint.seq, "has no valid signature"))
            elif self._heads.get(checkpoint.seq, checkpoint.head) != checkpoint.head:
                why = "is signed twice with different heads (the projector's chain forked)"
                self.problems.append(CheckpointUnsigned(checkpoint.seq, why))
            else:
                self._heads[checkpoint.seq] = checkpoint.head
                self._newest = max(self._newest, checkpoint.seq)

    @property
    def newest(self) -> int:
        """The seq of the newest trusted checkpoint (0: none)."""
        return self._newest

    def see(self, link: ChainLink) -> None:
        """Compare the row's stored hash with a checkpoint of its seq, if there is one."""
        signed = self._heads.get(link.seq)
        if signed is None:
            return
        if signed != link.hash:
            self.problems.append(CheckpointMismatch(link.seq, signed, link.hash))
        else:
            self.matched += 1

    def finish(self, last_seq: int) -> None:
        """The archive ends at ``last_seq``: is a checkpoint beyond it?"""
        if self._newest > last_seq:
            self.problems.append(ArchiveTruncated(last_seq, self._newest))

    def verdict(self) -> str:
        """One line saying what the comparison found."""
        if not self._heads:
            return "no trusted checkpoint to compare with"
        if self.problems:
            return f"FAILED: {len(self.problems)} problem(s); {self.matched} checkpoint(s) matched"
        return (
            f"OK: {self.matched} signed checkpoint(s) match the chain, the newest at seq {self._newest}"
            f" (head {self._heads[self._newest].hex()[:16]})"
        )
