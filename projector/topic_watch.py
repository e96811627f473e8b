"""Which partitions of a consumer's topics the broker has now, so that those appearing later are found.

The projector assigns partitions itself (no consumer group: it keeps its
offsets in PostgreSQL), so nothing in the Kafka client tells it about a topic
created after it started, or partitions added to one.  It asks a
:class:`TopicWatch` every ``every`` seconds and assigns what it found.

Why not a pattern subscription: without a group, aiokafka re-assigns every
partition of the pattern when the metadata changes and resets their
positions by its offset-reset policy, losing the positions kept in
PostgreSQL.  The watch lists the topics first and describes only those that
exist: a metadata request naming a missing topic makes some brokers (Tansu,
Kafka with ``auto.create.topics.enable``) create it with their own partition
count.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Sequence
from types import TracebackType
from typing import Self

from aiokafka import TopicPartition

from projector.connections import KafkaAccess, new_admin, start_client

__all__ = ["TopicWatch"]

log = logging.getLogger(__name__)


class TopicWatch:
    """The partitions of ``topics`` as the broker lists them; logs one line while some topics are missing."""

    def __init__(self, kafka: KafkaAccess, topics: Sequence[str], *, who: str, every: float) -> None:
        self.topics = tuple(topics)
        self.who = who
        self.every = every
        self._kafka = kafka
        self._admin = new_admin(kafka)
        self._next_look = 0.0
        self._missing: tuple[str, ...] = ()

    async def __aenter__(self) -> Self:
        await start_client(self._admin, self._kafka)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._admin.close()

    async def partitions(self) -> list[TopicPartition]:
        """Every partition of the watched topics that exists now (sorted)."""
        self._next_look = time.monotonic() + self.every
        listed = set(await self._admin.list_topics())
        present = [topic for topic in self.topics if topic in listed]
        missing = tuple(topic for topic in self.topics if topic not in listed)
        if missing != self._missing:
            if missing:
                log.warning(
                    "%s waits for the topics %s: they do not exist yet (create them, or set"
                    " TEPHRA_CREATE_TOPICS=true); it reads them once they appear",
                    self.who,
                    ", ".join(missing),
                )
            else:
                log.info("%s found its topics %s", self.who, ", ".join(self.topics))
            self._missing = missing
        if not present:
            return []
        described = await self._admin.describe_topics(present)
        return sorted(
            TopicPartition(entry["topic"], part["partition"])
            for entry in described
            if entry["error_code"] == 0
            for part in entry["partitions"]
        )

    async def new_partitions(self, assigned: Collection[TopicPartition]) -> list[TopicPartition]:
        """The partitions not in ``assigned`` when a look is due (``every`` s after the last), else []."""
        if time.monotonic() < self._next_look:
            return []
        return [tp for tp in await self.partitions() if tp not in assigned]
