"""The scheduler's own record of each session: what the event does not carry (durations, counts).

The SessionCommitted event and the projector's ``sessions`` table hold the
session's id, input seq, decisions and pending-reasons digest; the wall-clock
durations are facts about this process, not about the cluster, so they stay
out of the event (and out of replay's comparisons) and go here: the table
``scheduler_session_timings`` (migration 0012; the scheduler's role may insert into it).
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

__all__ = ["SessionTiming", "record_session"]


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
