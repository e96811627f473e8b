"""Rebuild the input of recorded sessions by folding archived events.

A session's input is the folded state at its ``input_seq``, turned into a
snapshot by the same builder the live scheduler uses, plus the scheduler
config in force at that seq.  :func:`session_inputs` makes one pass over the
events and captures every requested seq on the way, so verifying or auditing
a whole archive folds each event once.

The fold mutates one state in place (see :mod:`projector.state`); a captured
:class:`SessionInput` holds the immutable snapshot, never the state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from events.models import SchedulerConfigSpec
from projector.state import ClusterState
from replay import engine
from replay.archive import ArchivedEvent
from replay.errors import Divergence
from scheduler.core.config import SchedulerConfig
from scheduler.core.snapshot import ClusterSnapshot

__all__ = ["FoldRejected", "SessionInput", "capture", "session_inputs", "state_at"]


class FoldRejected(Divergence):
    """An archived event the fold now refuses: the archive was folded by another fold."""

    code = "REPLAY-FOLD-REJECTED"

    def __init__(self, seq: int, why: str) -> None:
        self.why = why
        super().__init__(f"the fold rejects archived event seq {seq}: {why}", seq=seq)


@dataclass(frozen=True, slots=True)
class SessionInput:
    """What a session saw: the snapshot and config at ``seq``."""

    seq: int
    snapshot: ClusterSnapshot
    config_spec: SchedulerConfigSpec | None
    config_version: int

    @property
    def config(self) -> SchedulerConfig:
        return engine.config_of(self.config_spec)

    @property
    def digest(self) -> str:
        return engine.input_digest(self.snapshot)


def capture(state: ClusterState, seq: int) -> SessionInput:
    """The session input the live scheduler would build from ``state`` at ``seq``."""
    return SessionInput(
        seq=seq,
        snapshot=engine.build_snapshot(state),
        config_spec=state.config,
        config_version=state.config_version,
    )


def _fold_one(state: ClusterState, archived: ArchivedEvent) -> None:
    why = engine.fold(state, archived.seq, archived.event)
    if why is not None:
        raise FoldRejected(archived.seq, why)


def state_at(events: Iterable[ArchivedEvent], seq: int, *, state: ClusterState | None = None) -> ClusterState:
    """Fold ``events`` (seq order, starting after ``state.seq``) up to and including ``seq``."""
    current = ClusterState() if state is None else state
    for archived in events:
        if archived.seq > seq:
            break
        _fold_one(current, archived)
    return current


def session_inputs(
    events: Iterable[ArchivedEvent],
    seqs: Iterable[int],
    *,
    state: ClusterState | None = None,
    on_event: Callable[[ArchivedEvent], None] | None = None,
) -> Iterator[SessionInput]:
    """The input at each of ``seqs``, in ascending seq order, from one pass over ``events``.

    ``state`` is where folding starts (a loaded snapshot; an empty state by
    default): ``events`` must be the ones after ``state.seq``.  A seq below
    ``state.seq`` cannot be rebuilt from this start and raises ValueError.
    ``on_event`` sees every event after it was folded (progress bars,
    collecting the sessions on the way).

    Raises:
        FoldRejected: an archived event the fold refuses.
    """
    current = ClusterState() if state is None else state
    wanted = sorted(set(seqs))
    if wanted and wanted[0] < current.seq:
        raise ValueError(f"cannot rebuild seq {wanted[0]} from a state at seq {current.seq}")
    position = 0
    for archived in events:
        # The state after every event up to seq S is the input at S, however
        # sparse the seqs are.
        while position < len(wanted) and wanted[position] < archived.seq:
            yield capture(current, wanted[position])
            position += 1
        _fold_one(current, archived)
        if on_event is not None:
            on_event(archived)
        if position == len(wanted) and on_event is None:
            return
    while position < len(wanted):
        yield capture(current, wanted[position])
        position += 1
