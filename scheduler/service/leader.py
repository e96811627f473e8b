"""One active scheduler per cluster: a PostgreSQL advisory lock plus a leader epoch.

The lock is session-level, on a connection used for nothing else: when the
leader dies (even by SIGKILL) its connection closes and PostgreSQL frees the
lock, so a standby polling :func:`campaign` takes over within a poll interval.

Each acquisition appends a row to ``scheduler_leaders`` with the next epoch,
one above both the last recorded epoch and the epoch the projection holds.
The new leader then says so in the log (:func:`announce_leadership`): a
LeaderElected with its epoch and public key, signed by that key, which the
projector accepts only from a keyring producer permitted
``tephra.leader.elected.v1`` under that very key.  From the moment the fold
applies it, sessions count only with that epoch and that key's signature
(projector.fold): a leader that lost its lock but still publishes (a
"zombie"), or anyone who can reach the broker, is refused (``not-leader``,
``bad-signature``).  The term schedules only once its LeaderElected is
applied (:func:`await_leadership`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Final

import asyncpg
from aiokafka import AIOKafkaProducer

from events.models import LeaderElected, LeaderElectedData, QueueUpserted
from events.serde import encode
from events.signing import EventSigner
from events.topics import Topics, kafka_key, topic_for
from projector.connections import DatabaseAccess, connect
from projector.keyring import add_producer
from projector.migrate import require_schema
from projector.trust import KeyringEntry
from scheduler.service.errors import LeadershipLost
from scheduler.service.session_events import SCHEDULER_SOURCE

__all__ = [
    "LEADER_TYPES",
    "Leadership",
    "announce_leadership",
    "await_leadership",
    "campaign",
    "leader_elected_event",
    "take_office",
]

log = logging.getLogger("tephra.scheduler")

#: What a scheduler's keyring record must permit: its LeaderElected, and Volcano's default queue
#: (scheduler.service.default_queue).
LEADER_TYPES: Final = frozenset(
    {LeaderElected.model_fields["type"].default, QueueUpserted.model_fields["type"].default}
)
_LOCK_SQL: Final = "SELECT pg_try_advisory_lock(hashtextextended('tephra-scheduler:' || $1, 0))"


@dataclass(slots=True)
class Leadership:
    """The lock connection of the current leader and its epoch."""

    cluster: str
    epoch: int
    holder: str
    conn: asyncpg.Connection

    async def watch(self, interval: float = 1.0, answer_within: float = 2.0) -> None:
        """Return never; raise :class:`LeadershipLost` once the lock connection stops answering."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.conn.fetchval("SELECT 1", timeout=answer_within)
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                raise LeadershipLost(self.cluster, self.epoch, f"lock connection failed: {exc!r}") from exc

    async def release(self) -> None:
        """Close the lock connection (the lock goes with it)."""
        if not self.conn.is_closed():
            try:
                await self.conn.close(timeout=2)
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
                self.conn.terminate()


async def campaign(database: DatabaseAccess, cluster: str, holder: str, *, poll: float = 0.5) -> Leadership:
    """Wait until this process holds the cluster's lock; record and return the new epoch.

    Raises :class:`~projector.errors.SchemaOutdatedError` when the schema is older than this
    scheduler needs: it does not migrate it (``tephra migrate`` does).
    """
    announced = False
    while True:
        conn = await connect(database)
        try:
            await require_schema(conn)
            while not await conn.fetchval(_LOCK_SQL, cluster):
                if not announced:
                    log.info("scheduler %s: another scheduler leads cluster %s; standing by", holder, cluster)
                    announced = True
                await asyncio.sleep(poll)
            epoch = await _next_epoch(conn, cluster, holder)
        except BaseException:
            conn.terminate()
            raise
        log.info("scheduler %s leads cluster %s with epoch %d", holder, cluster, epoch)
        return Leadership(cluster=cluster, epoch=epoch, holder=holder, conn=conn)


# The namespace of LeaderElected ids (a fixed, arbitrary UUID owned by this module).
_LEADER_NAMESPACE: Final = uuid.UUID("c4a1e7d2-9b3f-4e58-a6d0-71f2b8c95e34")


def leader_elected_event(leadership: Leadership, signer: EventSigner, now: datetime) -> LeaderElected:
    """The term's LeaderElected, signed: its id is fixed per (cluster, epoch), so a retry is a no-op."""
    event = LeaderElected(
        id=str(uuid.uuid5(_LEADER_NAMESPACE, f"{leadership.cluster}|{leadership.epoch}")),
        source=SCHEDULER_SOURCE,
        time=now,
        subject=f"leader/{leadership.epoch}",
        cluster=leadership.cluster,
        data=LeaderElectedData(
            epoch=leadership.epoch, public_key=signer.key.public_key, holder=leadership.holder
        ),
    )
    return signer.sign(event)


async def announce_leadership(producer: AIOKafkaProducer, topics: Topics, event: LeaderElected) -> None:
    """Publish the term's LeaderElected (``acks=all``, as sessions)."""
    await producer.send_and_wait(topic_for(event, topics), encode(event), key=kafka_key(event))


async def await_leadership(
    conn: asyncpg.Connection,
    event: LeaderElected,
    *,
    resend: Callable[[], Awaitable[None]] | None = None,
    report_after: float = 10.0,
    poll: float = 0.05,
) -> None:
    """Return once the projection holds ``event``'s leadership; raise :class:`LeadershipLost` when it
    holds a newer one.  Past ``report_after`` seconds, says why not (the projector's rejection of
    the event, if any: typically a key missing from the keyring), sends the event again with
    ``resend`` (a rejected record is not archived: once an operator has enrolled the key, the
    same event is taken; its id is fixed, so a copy of one already archived is a duplicate),
    and keeps waiting."""
    epoch, key = event.data.epoch, event.data.public_key
    loop = asyncio.get_running_loop()
    report_at = loop.time() + report_after
    while True:
        row = await conn.fetchrow("SELECT leader_epoch, leader_key FROM projection_meta")
        if row is not None:
            if row["leader_epoch"] == epoch and row["leader_key"] == key:
                return
            if row["leader_epoch"] > epoch:
                raise LeadershipLost(event.cluster, epoch, f"the log names epoch {row['leader_epoch']}")
        if loop.time() >= report_at:
            report_at = loop.time() + report_after
            why = await _why_not_applied(conn, event.id)
            log.error(
                "the LeaderElected of epoch %d is not in the log (%s); no session runs until it is."
                " The scheduler's key must be in the keyring: `tephra producer add %s --public-key %s"
                " --may tephra.leader.elected.v1 --may tephra.queue.upserted.v1`",
                epoch,
                why,
                (event.principal or "scheduler").partition(":")[0],
                key,
            )
            if resend is not None:
                await resend()
        await asyncio.sleep(poll)


async def take_office(
    leadership: Leadership,
    producer: AIOKafkaProducer,
    conn: asyncpg.Connection,
    *,
    topics: Topics,
    signer: EventSigner,
    now: datetime,
    enrol: bool = False,
) -> LeaderElected:
    """Say in the log that this term leads (LeaderElected) and wait until the projection holds it.

    ``enrol``: first put the signer's key in the keyring (a key made for this process: tests and
    library use; a deployment's operator adds the scheduler's key with ``tephra producer add``).
    """
    if enrol:
        entry = KeyringEntry(name=signer.principal, public_key=signer.key.public_key, may=LEADER_TYPES)
        await add_producer(conn, entry)
    event = leader_elected_event(leadership, signer, now)
    announce = functools.partial(announce_leadership, producer, topics, event)
    await announce()
    await await_leadership(conn, event, resend=announce)
    log.info(
        "the log names %s leader of %s with epoch %d", leadership.holder, leadership.cluster, leadership.epoch
    )
    return event


async def _why_not_applied(conn: asyncpg.Connection, event_id: str) -> str:
    try:
        rejected = await conn.fetchrow(
            "SELECT error, detail FROM rejected_events WHERE event_id = $1 ORDER BY id DESC LIMIT 1", event_id
        )
    except asyncpg.InsufficientPrivilegeError:
        return "the projector has not applied it; this role cannot read rejected_events to say why"
    if rejected is None:
        return "the projector has not applied it yet"
    return f"the projector rejected it: {rejected['error']}: {rejected['detail']}"


async def _next_epoch(conn: asyncpg.Connection, cluster: str, holder: str) -> int:
    async with conn.transaction():
        recorded = await conn.fetchval(
            "SELECT coalesce(max(epoch), 0) FROM scheduler_leaders WHERE cluster = $1", cluster
        )
        applied = 0
        if await conn.fetchval("SELECT to_regclass('projection_meta') IS NOT NULL"):
            # The log's leadership (LeaderElected) or, in archives older than it, the highest
            # session epoch: a forged session cannot raise it (projector.fold).
            applied = await conn.fetchval("SELECT leader_epoch FROM projection_meta")
        epoch = int(max(recorded, applied)) + 1
        await conn.execute(
            "INSERT INTO scheduler_leaders (cluster, epoch, holder) VALUES ($1, $2, $3)",
            cluster,
            epoch,
            holder,
        )
    return epoch
