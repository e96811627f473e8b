"""Errors of the scheduler service.

::

    SchedulerServiceError
    ├── SessionOverrun        a session ran past its budget; its result is discarded
    ├── ProjectionStalled     the projection did not apply our own session in time
    ├── SessionTooLarge       a session cannot be published within the broker's message limit
    └── LeadershipLost        the advisory-lock connection died; this process is no longer leader

``retriable`` says whether carrying on (after the condition clears) is safe:
every one of them is, except a session too large to publish at all.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "LeadershipLost",
    "ProjectionStalled",
    "SchedulerServiceError",
    "SessionOverrun",
    "SessionTooLarge",
]


class SchedulerServiceError(Exception):
    retriable: ClassVar[bool] = True


class SessionOverrun(SchedulerServiceError):
    def __init__(self, session_id: str, budget: float) -> None:
        self.session_id = session_id
        self.budget = budget
        super().__init__(
            f"[SCHED-OVERRUN] session {session_id} ran longer than its {budget:g} s budget; "
            "its result is discarded and nothing was published"
        )


class ProjectionStalled(SchedulerServiceError):
    def __init__(self, session_id: str, waited: float) -> None:
        self.session_id = session_id
        self.waited = waited
        super().__init__(
            f"[SCHED-STALLED] the projection has not applied session {session_id} after {waited:g} s; "
            "scheduling is stopped until it does (is the projector running?)"
        )


class SessionTooLarge(SchedulerServiceError):
    retriable: ClassVar[bool] = False

    def __init__(self, session_id: str, what: str, size: int, limit: int) -> None:
        self.session_id = session_id
        self.size = size
        self.limit = limit
        super().__init__(
            f"[SCHED-TOO-LARGE] cannot publish session {session_id}: {what} is {size} bytes, "
            f"over the {limit}-byte message limit"
        )


class LeadershipLost(SchedulerServiceError):
    def __init__(self, cluster: str, epoch: int, why: str) -> None:
        self.cluster = cluster
        self.epoch = epoch
        super().__init__(
            f"[SCHED-LEADER-LOST] lost the leadership of cluster {cluster} (epoch {epoch}): {why}"
        )
