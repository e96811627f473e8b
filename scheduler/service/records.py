"""The scheduler's own record of each session: what the event does not carry (durations, counts).

The SessionCommitted event and the projector's ``sessions`` table hold the
session's id, input seq, decisions and pending-reasons digest; the wall-clock
durations are facts about this process, not about the cluster, so they stay
out of the event (and out of replay's comparisons) and go here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import asyncpg

__all__ = ["SESSION_TIMINGS_DDL", "SessionTiming", "record_session"]

SESSION_TIMINGS_DDL: Final = (
    "CREATE TABLE IF NOT EXISTS scheduler_session_timings ("
    " session_id text PRIMARY KEY,"
    " cluster text NOT NULL,"
    " leader_epoch bigint NOT NULL,"
    " input_seq bigint NOT NULL,"
    " applied_seq bigint NOT NULL,"
    " decisions integer NOT NULL,"
    " accepted integer NOT NULL,"
    " pending_jobs integer NOT NULL,"
    " pending_digest text NOT NULL,"
    " read_seconds double precision NOT NULL,"
    " compute_seconds double precision NOT NULL,"
    " publish_seconds double precision NOT NULL,"
    " apply_seconds double precision NOT NULL,"
    " recorded_at timestamptz NOT NULL DEFAULT now());"
    # Added later: a table made before gets the column when the DDL next runs (each new term).
    " ALTER TABLE scheduler_session_timings"
    " ADD COLUMN IF NOT EXISTS collect_seconds double precision NOT NULL DEFAULT 0"
)


@dataclass(frozen=True, slots=True)
class SessionTiming:
    session_id: str
    cluster: str
    leader_epoch: int
    input_seq: int
    applied_seq: int
    decisions: int
    accepted: int
    pending_jobs: int
    pending_digest: str
    #: snapshot read, session computation, publish (broker ack), wait until applied.
    read_seconds: float
    compute_seconds: float
    publish_seconds: float
    apply_seconds: float
    #: Of ``apply_seconds``: collecting the session's garbage while the projector applied it.
    collect_seconds: float = 0.0

    @property
    def total_seconds(self) -> float:
        return self.read_seconds + self.compute_seconds + self.publish_seconds + self.apply_seconds


async def record_session(conn: asyncpg.Connection, t: SessionTiming) -> None:
    await conn.execute(
        "INSERT INTO scheduler_session_timings (session_id, cluster, leader_epoch, input_seq, applied_seq,"
        " decisions, accepted, pending_jobs, pending_digest, read_seconds, compute_seconds,"
        " publish_seconds, apply_seconds, collect_seconds)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
        " ON CONFLICT (session_id) DO NOTHING",
        t.session_id,
        t.cluster,
        t.leader_epoch,
        t.input_seq,
        t.applied_seq,
        t.decisions,
        t.accepted,
        t.pending_jobs,
        t.pending_digest,
        t.read_seconds,
        t.compute_seconds,
        t.publish_seconds,
        t.apply_seconds,
        t.collect_seconds,
    )
