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

__all__ = [
    "FoldRejected",
    "Reconstruction",
    "SessionInput",
    "capture",
    "fold_archived",
    "session_inputs",
    "state_at",
]


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


def fold_archived(state: ClusterState, archived: ArchivedEvent) -> None:
    """Fold one archived event into ``state`` (in place).

    Raises:
        FoldRejected: the fold refuses the event.
    """
    why = engine.fold(state, archived.seq, archived.event)
    if why is not None:
        raise FoldRejected(archived.seq, why)


def state_at(events: Iterable[ArchivedEvent], seq: int, *, state: ClusterState | None = None) -> ClusterState:
    """Fold ``events`` (seq order, starting after ``state.seq``) up to and including ``seq``."""
    current = ClusterState() if state is None else state
    for archived in events:
        if archived.seq > seq:
            break
        fold_archived(current, archived)
    return current


class Reconstruction:
    """Incremental :func:`session_inputs`: feed archived events one by one (sync or async readers).

    ``feed`` folds one event and returns the inputs it completed (every
    requested seq below the event's seq); ``finish`` returns the rest once
    the events run out.  ``state`` is the live folded state (mutated in place).
    """

    def __init__(self, seqs: Iterable[int], *, state: ClusterState | None = None) -> None:
        self.state = ClusterState() if state is None else state
        self._wanted = sorted(set(seqs))
        self._position = 0
        if self._wanted and self._wanted[0] < self.state.seq:
            raise ValueError(f"cannot rebuild seq {self._wanted[0]} from a state at seq {self.state.seq}")

    @property
    def done(self) -> bool:
        """Every requested input was captured."""
        return self._position == len(self._wanted)

    def _capture_below(self, seq: int | None) -> list[SessionInput]:
        captured = []
        while self._position < len(self._wanted) and (seq is None or self._wanted[self._position] < seq):
            captured.append(capture(self.state, self._wanted[self._position]))
            self._position += 1
        return captured

    def feed(self, archived: ArchivedEvent) -> list[SessionInput]:
        # The state after every event up to seq S is the input at S, however sparse the seqs are.
        captured = self._capture_below(archived.seq)
        fold_archived(self.state, archived)
        return captured

    def finish(self) -> list[SessionInput]:
        return self._capture_below(None)


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
    ``on_event`` sees every event after it was folded (progress bars); without
    it, folding stops as soon as the last requested input is captured.

    Raises:
        FoldRejected: an archived event the fold refuses.
    """
    rebuild = Reconstruction(seqs, state=state)
    for archived in events:
        yield from rebuild.feed(archived)
        if on_event is not None:
            on_event(archived)
        elif rebuild.done:
            return
    yield from rebuild.finish()
