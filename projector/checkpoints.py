"""Publishing signed checkpoints of the archive's chain (``events.checkpoints``).

Every ``every_events`` archived events, or ``every_seconds`` after the last
checkpoint when the archive has grown since, the projector signs (seq, chain
head, time) with its key and publishes the record to the checkpoint topic,
then keeps a copy in the ``checkpoints`` table.  Only committed batches are
checkpointed: the service asks after a commit has returned (or while idle,
with every commit landed), with the writer's committed seq and head, so a
checkpoint never names a seq a rollback could take back.  A redone batch
archives the same seqs again only if they never committed, which then no
checkpoint named.

The topic is the copy that counts: the database cannot rewrite what the
broker (and any auditor reading it) holds.  The table serves operators and
tells a restarted projector where the last checkpoint stands.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

import asyncpg
from aiokafka import AIOKafkaProducer

from events.checkpoints import Checkpoint, sign_checkpoint
from events.signing import SigningKey

__all__ = ["CheckpointPublisher"]

log = logging.getLogger(__name__)

_INSERT = (
    "INSERT INTO checkpoints (seq, cluster, head, time, public_key, signature, record)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (seq) DO NOTHING"
)


class CheckpointPublisher:
    """Decides when a checkpoint is due, signs it, publishes it, and records it."""

    def __init__(
        self,
        key: SigningKey,
        *,
        cluster: str,
        topic: str,
        every_events: int,
        every_seconds: float,
        last_seq: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if every_events <= 0 or not every_seconds > 0:
            raise ValueError(f"checkpoint spacing must be positive: {every_events} events, {every_seconds} s")
        self.key = key
        self.cluster = cluster
        self.topic = topic
        self.every_events = every_events
        self.every_seconds = every_seconds
        #: The seq of the newest checkpoint published (0: none yet).
        self.last_seq = last_seq
        self.published = 0
        self._clock = clock
        self._last_at = clock()

    @classmethod
    async def load(
        cls,
        conn: asyncpg.Connection,
        key: SigningKey,
        *,
        cluster: str,
        topic: str,
        every_events: int,
        every_seconds: float,
    ) -> CheckpointPublisher:
        """A publisher that goes on from the newest checkpoint the table holds."""
        last = await conn.fetchval("SELECT coalesce(max(seq), 0) FROM checkpoints")
        return cls(
            key,
            cluster=cluster,
            topic=topic,
            every_events=every_events,
            every_seconds=every_seconds,
            last_seq=int(last),
        )

    def due(self, committed_seq: int) -> bool:
        """Whether a checkpoint of ``committed_seq`` is due (the archive grew since the last one)."""
        if committed_seq <= self.last_seq:
            return False
        if committed_seq - self.last_seq >= self.every_events:
            return True
        return self._clock() - self._last_at >= self.every_seconds

    async def publish(
        self, conn: asyncpg.Connection, producer: AIOKafkaProducer, seq: int, head: bytes
    ) -> Checkpoint:
        """Sign and publish the checkpoint of the committed ``seq`` and its chain ``head``; keep a copy.

        The record is acknowledged by the broker (``acks=all``) before the copy is
        written: a checkpoint in the table is one an auditor can read.
        """
        checkpoint = sign_checkpoint(self.key, cluster=self.cluster, seq=seq, head=head, at=datetime.now(UTC))
        record = checkpoint.record()
        await (await producer.send(self.topic, value=record, key=self.cluster.encode()))
        await conn.execute(
            _INSERT,
            seq,
            self.cluster,
            head,
            datetime.fromisoformat(checkpoint.time),
            checkpoint.public_key,
            checkpoint.signature,
            record.decode(),
        )
        self.last_seq = seq
        self.published += 1
        self._last_at = self._clock()
        log.debug("checkpoint published: seq %d, head %s", seq, head.hex())
        return checkpoint
