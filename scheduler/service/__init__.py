"""The scheduler service: the imperative shell around the pure session (design §1).

:func:`run_scheduler` is the entry point.  It is imported lazily so that
importing :mod:`scheduler.snapshot_builder` (replay does) does not
pull in Kafka, PostgreSQL and OpenTelemetry clients.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["run_scheduler"]

if TYPE_CHECKING:
    from scheduler.service.main import run_scheduler


def __getattr__(name: str) -> Any:
    if name == "run_scheduler":
        from scheduler.service.main import run_scheduler  # noqa: PLC0415 - lazy on purpose (see above)

        return run_scheduler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
