"""Reading the three topics in step by event time while the projector drains a backlog.

A fetch brings about as many bytes of every partition, and the topics' events
differ in size, so a backlog drained unpaced reads one topic hours of event
time ahead of another: the state then holds the jobs whose observations and
decisions are still unread, and observations read after their job retired
expire (``observation-expired``) though in step they would have applied.

Before each batch the runner asks :class:`ReadPacer` which partitions to
read.  A partition is *behind* when the broker holds records past its
position (``highwater``); the pace is the earliest clock of the roles whose
topics have a partition behind (the fold's ``role_clocks``, the newest event
time folded per topic role); a partition behind whose role is more than
``max_skew`` past that is paused (aiokafka fetches nothing for it and
``getmany`` returns none of its records; what it had fetched is fetched again
once resumed), and resumed once the pace comes within ``max_skew``.  The role
that sets the pace is never paused, and a partition at its end holds nothing
back.  The fold does not depend on it: this only chooses the reading order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from aiokafka import AIOKafkaConsumer, TopicPartition

__all__ = ["ReadPacer", "ahead"]


def ahead(behind: Mapping[TopicPartition, datetime], max_skew: timedelta) -> set[TopicPartition]:
    """The partitions of ``behind`` (each with its role's clock) more than ``max_skew`` past the earliest."""
    if not behind:
        return set()
    pace = min(behind.values())
    return {tp for tp, clock in behind.items() if clock - pace > max_skew}


class ReadPacer:
    """Pauses the partitions read too far ahead and resumes them (see the module's docstring)."""

    def __init__(self, roles: Mapping[str, int], max_skew: timedelta) -> None:
        #: Topic -> its index in the fold's ``role_clocks``.
        self._roles = dict(roles)
        self._max_skew = max_skew
        #: Partitions paused since start-up (a partition resumed and paused again counts twice).
        self.pauses = 0

    def pace(
        self,
        consumer: AIOKafkaConsumer,
        positions: Mapping[tuple[str, int], int],
        role_clocks: Sequence[datetime],
    ) -> None:
        """Pause the partitions behind whose role is too far ahead; resume the others."""
        behind: dict[TopicPartition, datetime] = {}
        for tp in consumer.assignment():
            role = self._roles.get(tp.topic)
            highwater = consumer.highwater(tp)
            if role is None or highwater is None or highwater <= positions.get((tp.topic, tp.partition), 0):
                continue
            behind[tp] = role_clocks[role]
        pause = ahead(behind, self._max_skew)
        # The consumer's own record (a new assignment forgets what was paused).
        paused = consumer.paused()
        if resume := paused - pause:
            consumer.resume(*resume)
        if more := pause - paused:
            consumer.pause(*more)
            self.pauses += len(more)
