"""Sessions that carry pending reasons, whole or as a change, for the tests of the newest list."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

from events.models import MAX_SEQ, PendingJob, PendingReason, SessionCommitted, SessionCommittedData
from tests.projector.streams import CLUSTER

__all__ = ["T0", "pending_entry", "session_committed"]

T0: Final = datetime(2026, 1, 1, tzinfo=UTC)


def pending_entry(job: str, nodes: int = 3) -> PendingJob:
    message = f"0/{nodes} nodes are unavailable: {nodes} Insufficient cpu."
    return PendingJob(job=job, reasons=[PendingReason(code="insufficient-resources", message=message)])


def session_committed(
    sid: str, pending: list[PendingJob], *, base: str = "", cleared: tuple[str, ...] = (), epoch: int = 1
) -> SessionCommitted:
    """Session ``sid`` of leader epoch ``epoch``: ``pending`` whole, or its change from ``base``'s list."""
    return SessionCommitted(
        id=f"{sid}/commit",
        source="tests",
        time=T0,
        cluster=CLUSTER,
        data=SessionCommittedData(
            session_id=sid,
            leader_epoch=epoch,
            input_seq=MAX_SEQ,  # after every job it names (the fold voids a decision about a later one)
            config_version=0,
            now=T0,
            input_digest="d",
            pending=pending,
            pending_base=base,
            pending_cleared=list(cleared),
        ),
    )
