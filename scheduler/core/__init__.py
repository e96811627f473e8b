"""The pure, deterministic scheduling core (Volcano's session semantics).

Entry point: :func:`run_session` ``(snapshot, config, now) -> SessionResult``;
:func:`advance` applies a result to its snapshot the way scenarios define it.
No I/O, no clock, no ambient randomness (design §2); see docs/scheduling.md for
where Tephra deliberately differs from Volcano.
"""

from scheduler.core.config import DEFAULT_CONFIG, ConfigError, SchedulerConfig, parse_scheduler_config
from scheduler.core.reasons import Reason
from scheduler.core.session import SessionResult, advance, run_session
from scheduler.core.snapshot import ClusterSnapshot, snapshot_digest

__all__ = [
    "DEFAULT_CONFIG",
    "ClusterSnapshot",
    "ConfigError",
    "Reason",
    "SchedulerConfig",
    "SessionResult",
    "advance",
    "parse_scheduler_config",
    "run_session",
    "snapshot_digest",
]
