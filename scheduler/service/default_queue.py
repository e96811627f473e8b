"""Volcano's ``default`` queue, created when the scheduler starts, as Volcano's scheduler does.

Volcano's scheduler creates the queue ``default`` (weight 1, reclaimable, Open)
when it starts (``pkg/scheduler/cache/cache.go`` ``newSchedulerCache``),
leaving one that already exists alone; a job that names no queue goes there.
Tephra does the same at the start of every leadership term: when the
projected state has no queue ``default``, it publishes a QueueUpserted for it.

It is an event, not a default of the fold or of the snapshot builder, so the
archive says when the queue appeared and replay of archives recorded before
it existed re-derives exactly what happened then.  The event id is fixed per
cluster: should two terms both publish it, the archive keeps the first.  It is
create-only (``if_absent``): a ``default`` queue someone submitted that the
projection had not folded yet when the term started is kept, as Volcano's
Create answers AlreadyExists.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Final

from aiokafka import AIOKafkaProducer

from events.models import QueueUpserted, QueueUpsertedData
from events.serde import encode
from events.signing import EventSigner
from events.topics import Topics, kafka_key, topic_for
from projector.state import ClusterState
from scheduler.service.session_events import SCHEDULER_SOURCE

__all__ = ["DEFAULT_QUEUE", "default_queue_event", "ensure_default_queue"]

DEFAULT_QUEUE: Final = "default"
_NAMESPACE: Final = uuid.UUID("5f0b8a63-2d4e-4c1a-9b7e-3e8d1f6a2c47")


def default_queue_event(cluster: str, now: datetime) -> QueueUpserted:
    """The QueueUpserted that creates ``default`` (weight 1, reclaimable, Open)."""
    return QueueUpserted(
        id=str(uuid.uuid5(_NAMESPACE, f"{cluster}|queue/{DEFAULT_QUEUE}")),
        source=SCHEDULER_SOURCE,
        time=now,
        subject=f"queue/{DEFAULT_QUEUE}",
        cluster=cluster,
        # Create-only: a `default` queue submitted before this event is folded is kept.
        data=QueueUpsertedData(name=DEFAULT_QUEUE, weight=1, reclaimable=True, state="Open", if_absent=True),
    )


async def ensure_default_queue(  # noqa: PLR0917 - the term's pieces, as main holds them
    state: ClusterState,
    producer: AIOKafkaProducer,
    topics: Topics,
    cluster: str,
    now: datetime,
    signer: EventSigner,
) -> bool:
    """Publish the ``default`` queue, signed, unless ``state`` has it; whether it published."""
    if DEFAULT_QUEUE in state.queues:
        return False
    event = signer.sign(default_queue_event(cluster, now))
    await producer.send_and_wait(topic_for(event, topics), encode(event), key=kafka_key(event))
    return True
