"""Where replay meets the code it replays: the fold, the snapshot builder, the session.

Replay must derive a session's input exactly as the live scheduler did and
re-run exactly the same pure session, so this module only *binds* to the
projector's fold and the scheduler core; it implements none of them.  It is
the one place to change when those entry points move.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from events.models import Decision, Event, SchedulerConfigSpec
from projector.fold import apply as fold_apply
from projector.state import ClusterState
from scheduler.core.config import DEFAULT_CONFIG, SchedulerConfig
from scheduler.core.session import SessionResult, run_session
from scheduler.core.snapshot import ClusterSnapshot, snapshot_digest

# The same pure ClusterState -> ClusterSnapshot mapping the live scheduler uses,
# so replay derives the same input digest.
from scheduler.snapshot_builder import build_snapshot as _live_build_snapshot

__all__ = [
    "KNOWN_LOGIC_FLAGS",
    "SessionResult",
    "build_snapshot",
    "config_of",
    "decisions_of",
    "fold",
    "input_digest",
    "run",
]

#: The logic flags this core understands; a session recorded with another one
#: was written by a newer core and cannot be replayed faithfully here.
KNOWN_LOGIC_FLAGS: frozenset[str] = frozenset()


def fold(state: ClusterState, seq: int, event: Event) -> str | None:
    """Apply one archived event in place; the rejection reason if the fold refused it."""
    outcome = fold_apply(state, seq, event)
    return None if outcome.applied else f"{outcome.invalid}: {outcome.detail}"


def build_snapshot(state: ClusterState) -> ClusterSnapshot:
    """The session input the live scheduler builds from ``state``."""
    return _live_build_snapshot(state)


def input_digest(snapshot: ClusterSnapshot) -> str:
    return snapshot_digest(snapshot)


def config_of(spec: SchedulerConfigSpec | None) -> SchedulerConfig:
    """The config in force: the last SchedulerConfigured, else Volcano's default."""
    return DEFAULT_CONFIG if spec is None else SchedulerConfig.from_spec(spec)


def run(
    snapshot: ClusterSnapshot, config: SchedulerConfig, now: datetime, logic_flags: Iterable[str]
) -> SessionResult:
    """Re-run one session: the same pure function the live scheduler calls."""
    return run_session(snapshot, config, now, logic_flags=frozenset(logic_flags))


def decisions_of(result: SessionResult) -> tuple[Decision, ...]:
    """A session result's decisions as SessionCommitted records them: committed ones, then pipelines."""
    return tuple(result.events())
