"""Publishes one session's events to the decisions topic, trace context in the headers.

Parts (if any) are all acknowledged before the commit marker is sent, so the
fold never sees a marker ahead of its parts.  ``acks="all"``: an acknowledged
session survives a broker failover.  Redelivery after a retry is harmless:
the event ids are fixed per session and the archive ignores a known id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from aiokafka import AIOKafkaProducer

from events.models import SessionCommitted, SessionPart
from events.serde import encode
from events.topics import Topics, kafka_key, topic_for
from events.tracing import headers_from_carrier

__all__ = ["SessionPublisher"]


class SessionPublisher:
    def __init__(self, producer: AIOKafkaProducer, topics: Topics) -> None:
        self._producer = producer
        self._topics = topics

    async def publish(
        self, events: Sequence[SessionPart | SessionCommitted], carrier: Mapping[str, str]
    ) -> None:
        headers = headers_from_carrier(carrier)
        *parts, marker = events
        if parts:
            sent = [
                await self._producer.send(
                    topic_for(part, self._topics), encode(part), key=kafka_key(part), headers=headers
                )
                for part in parts
            ]
            await asyncio.gather(*sent)
        await self._producer.send_and_wait(
            topic_for(marker, self._topics), encode(marker), key=kafka_key(marker), headers=headers
        )
