"""Replay's errors: one tree, stable codes, attributes over strings.

::

    ReplayError                      root; ``code`` is stable, messages are not
    ├── ArchiveError                 the archive cannot be read or is incomplete
    │   ├── ArchiveUnavailable       [REPLAY-NO-ARCHIVE] no database URL, stack.json or server
    │   └── PartsMissing             [REPLAY-PARTS-MISSING] a split session lacks parts
    ├── NotFound                     the thing asked about is not in the archive
    │   ├── UnknownJob               [REPLAY-UNKNOWN-JOB]
    │   └── UnknownSession           [REPLAY-UNKNOWN-SESSION]
    └── Divergence                   the archive does not re-derive; ``seq`` says where
        ├── ChainBroken              [REPLAY-CHAIN-BROKEN] a row was edited, deleted or reordered
        ├── InputDiverged            [REPLAY-INPUT-DIVERGED] the fold rebuilt another input
        ├── ConfigDiverged           [REPLAY-CONFIG-DIVERGED] the config in force is not the recorded one
        ├── UnknownLogicFlag         [REPLAY-UNKNOWN-FLAG] recorded by a core newer than this one
        ├── DecisionsDiverged        [REPLAY-DIVERGED] the re-run decided differently
        └── ReasonsDiverged          [REPLAY-REASONS-DIVERGED] same decisions, other pending reasons

A :class:`Divergence` of the input kind points at the projector (fold or
snapshot building changed); :class:`DecisionsDiverged` points at the session
engine (a logic change that was not gated behind a logic flag).  Like
Temporal's ``[TMPRL1100]``, the code leads the message so it can be searched.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import ClassVar

__all__ = [
    "ArchiveError",
    "ArchiveTruncated",
    "ArchiveUnavailable",
    "ChainBroken",
    "CheckpointMismatch",
    "CheckpointUnsigned",
    "CheckpointsUnavailable",
    "ConfigDiverged",
    "DecisionsDiverged",
    "Divergence",
    "InputDiverged",
    "NotFound",
    "PartsMissing",
    "PendingBaseMissing",
    "ReasonsDiverged",
    "ReplayError",
    "RowUndecodable",
    "UndecodableRow",
    "UnknownJob",
    "UnknownLogicFlag",
    "UnknownSession",
]


class ReplayError(Exception):
    """Root of replay's errors; ``str()`` is ``[CODE] message``."""

    code: ClassVar[str] = "REPLAY-ERROR"

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(f"[{self.code}] {message}")


class ArchiveError(ReplayError):
    code = "REPLAY-ARCHIVE"


class UndecodableRow(ArchiveError):
    """An archived row whose columns do not decode as an event."""

    def __init__(self, seq: int, why: str) -> None:
        self.seq = seq
        self.why = why
        super().__init__(f"event_log seq {seq} does not decode: {why}")


class CheckpointsUnavailable(ArchiveError):
    """The checkpoints to verify against cannot be read (file, topic) or are not checkpoint records."""


class ArchiveUnavailable(ArchiveError):
    code = "REPLAY-NO-ARCHIVE"


class PartsMissing(ArchiveError):
    code = "REPLAY-PARTS-MISSING"

    def __init__(self, session_id: str, seq: int, expected: int, found: tuple[int, ...]) -> None:
        self.session_id = session_id
        self.seq = seq
        self.expected = expected
        self.found = found
        super().__init__(
            f"cannot assemble session {session_id} (seq {seq}): {expected} parts expected, "
            f"found indexes {list(found)}"
        )


class PendingBaseMissing(ArchiveError):
    code = "REPLAY-PENDING-BASE-MISSING"

    def __init__(self, session_id: str, seq: int, base: str) -> None:
        self.session_id = session_id
        self.seq = seq
        self.base = base
        super().__init__(
            f"cannot read the pending reasons of session {session_id} (seq {seq}): they are the change"
            f" from session {base}, which is not in the archive before it"
        )


class NotFound(ReplayError):
    code = "REPLAY-NOT-FOUND"


class UnknownJob(NotFound):
    code = "REPLAY-UNKNOWN-JOB"

    def __init__(self, job: str, detail: str = "") -> None:
        self.job = job
        suffix = f" {detail}" if detail else ""
        super().__init__(f"job {job!r} is not in the archive{suffix}")


def resolve_job_name(name: str, candidates: list[str], known: Sequence[str] = ()) -> str:
    """A bare ``name`` as the one job so named in ``candidates`` (ids), else an :class:`UnknownJob` hint.

    ``known``: other job ids, to suggest the closest when no job has that name.
    """
    if len(candidates) == 1:
        return candidates[0]
    if candidates:
        raise UnknownJob(
            name, f"as a bare name: it names {len(candidates)} jobs, give one: {', '.join(candidates)}"
        )
    names = {job.rpartition("/")[2]: job for job in sorted(known, reverse=True)}
    close = [names[n] for n in difflib.get_close_matches(name, sorted(names), n=3, cutoff=0.6)]
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    raise UnknownJob(name, f"(no job of that name in any namespace; a job id is <namespace>/<name>{hint})")


class UnknownSession(NotFound):
    code = "REPLAY-UNKNOWN-SESSION"

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id!r} is not in the archive")


class Divergence(ReplayError):
    """The archive does not re-derive.  ``seq`` is the event_log row at fault."""

    code = "REPLAY-DIVERGENCE"

    def __init__(self, message: str, *, seq: int, session_id: str | None = None) -> None:
        self.seq = seq
        self.session_id = session_id
        super().__init__(message)


class ChainBroken(Divergence):
    code = "REPLAY-CHAIN-BROKEN"

    def __init__(self, seq: int, why: str) -> None:
        self.why = why
        super().__init__(f"hash chain broken at seq {seq}: {why}", seq=seq)


class ArchiveTruncated(Divergence):
    """The archive ends before a signed checkpoint's seq: its newest rows were deleted."""

    code = "REPLAY-TRUNCATED"

    def __init__(self, last_seq: int, checkpoint_seq: int) -> None:
        self.checkpoint_seq = checkpoint_seq
        super().__init__(
            f"the archive ends at seq {last_seq}, but a signed checkpoint says it reached seq"
            f" {checkpoint_seq}: rows {last_seq + 1}-{checkpoint_seq} were deleted",
            seq=last_seq + 1,
        )


class CheckpointMismatch(Divergence):
    """The chain head at a checkpoint's seq is not the signed one: rows rewritten and re-hashed."""

    code = "REPLAY-CHECKPOINT-MISMATCH"

    def __init__(self, seq: int, signed: bytes, archived: bytes) -> None:
        super().__init__(
            f"at seq {seq} the archive's chain head is {archived.hex()}, the signed checkpoint says"
            f" {signed.hex()}: rows up to seq {seq} were rewritten and the chain recomputed",
            seq=seq,
        )


class CheckpointUnsigned(Divergence):
    """A checkpoint whose signature is not the trusted key's: it proves nothing (forged or corrupt)."""

    code = "REPLAY-CHECKPOINT-UNSIGNED"

    def __init__(self, seq: int, why: str) -> None:
        super().__init__(f"the checkpoint of seq {seq} {why}; it is not used", seq=seq)


class RowUndecodable(Divergence):
    """An archived row whose columns do not decode as an event: its sessions cannot be re-derived."""

    code = "REPLAY-UNDECODABLE"

    def __init__(self, seq: int, why: str) -> None:
        super().__init__(
            f"event_log seq {seq} does not decode: {why} (if its type is newer than this replay,"
            " upgrade replay; else the row was edited)",
            seq=seq,
        )


class InputDiverged(Divergence):
    """The reconstructed input's digest differs: a projection/fold divergence, not a logic change."""

    code = "REPLAY-INPUT-DIVERGED"

    def __init__(self, session_id: str, seq: int, input_seq: int, expected: str, actual: str) -> None:
        self.input_seq = input_seq
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"session {session_id} (seq {seq}): input rebuilt at seq {input_seq} has digest "
            f"{actual[:16]}, recorded {expected[:16]}: the fold or the snapshot builder changed",
            seq=seq,
            session_id=session_id,
        )


class ConfigDiverged(Divergence):
    code = "REPLAY-CONFIG-DIVERGED"

    def __init__(self, session_id: str, seq: int, expected: int, actual: int | None) -> None:
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"session {session_id} (seq {seq}): recorded config version {expected}, "
            f"the archive has version {actual} in force at its input seq",
            seq=seq,
            session_id=session_id,
        )


class UnknownLogicFlag(Divergence):
    code = "REPLAY-UNKNOWN-FLAG"

    def __init__(self, session_id: str, seq: int, flags: tuple[str, ...]) -> None:
        self.flags = flags
        super().__init__(
            f"session {session_id} (seq {seq}) was recorded with logic flags {list(flags)} "
            "that this scheduler core does not know; replay it with the core that wrote it",
            seq=seq,
            session_id=session_id,
        )


class DecisionsDiverged(Divergence):
    """The first position where the re-run's decisions differ from the recorded ones.

    ``kind`` is ``order`` (a different kind of decision at this position),
    ``identity`` (same kind, other task/node/job/rule), ``missing`` (recorded
    here, the re-run stopped earlier) or ``extra`` (the re-run decided more).
    """

    code = "REPLAY-DIVERGED"

    def __init__(
        self,
        session_id: str,
        seq: int,
        *,
        position: int,
        kind: str,
        expected: str | None,
        actual: str | None,
    ) -> None:
        self.position = position
        self.kind = kind
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"session {session_id} (seq {seq}) decision {position} ({kind}): "
            f"expected {expected or 'nothing'}, got {actual or 'nothing'}",
            seq=seq,
            session_id=session_id,
        )


class ReasonsDiverged(Divergence):
    """The decisions re-derive but a job's recorded pending reasons do not (codes or messages)."""

    code = "REPLAY-REASONS-DIVERGED"

    def __init__(self, session_id: str, seq: int, *, job: str, expected: str, actual: str) -> None:
        self.job = job
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"session {session_id} (seq {seq}) pending reasons of {job}: expected {expected}, got {actual}",
            seq=seq,
            session_id=session_id,
        )
